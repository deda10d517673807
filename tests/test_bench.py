"""The benchmark's code path on tiny shapes (no timing assertions): every candidate runs and the JSON has the fields."""
import json

import torch

from normgrow import bench


def tiny_teacher(vocab=96):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=8, tie_word_embeddings=True)
    return Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()


def test_bench_tiny_writes_every_field(tmp_path):
    out = tmp_path / "bench.json"
    report = bench.run_bench("tiny", repeats=1, warmup=0, data="synthetic", teacher=tiny_teacher(),
                             memory="inprocess", out=out, peak_size=256)
    saved = json.loads(out.read_text())
    assert saved.keys() == report.keys()
    for key in ("profile", "machine", "data", "shapes", "candidates", "ratios", "flops", "matmul_peak_flop_s",
                "memory_method", "timing_method", "study_teacher_cost", "eval_head"):
        assert key in saved, key
    assert set(saved["candidates"]) == set(bench.CANDIDATES)
    for name, r in saved["candidates"].items():
        assert r["step_s"] > 0 and r["tok_s"] > 0 and 0 < r["mfu"] and r["flop_s"] > 0, name
        assert r["memory"]["peak_step_bytes"] >= 0
        assert torch.isfinite(torch.tensor(r["loss"]))
    assert set(saved["ratios"]) == {f"normgrow_vs_{n}" for n in bench.CANDIDATES if n != "normgrow"}
    ev = saved["eval_head"]
    assert ev["tokens"] == 8 * 64 and ev["fused_s"] > 0 and ev["reference_s"] > 0
    assert ev["speedup"] == ev["reference_s"] / ev["fused_s"]
    cost = saved["study_teacher_cost"]
    assert cost["online_teacher_tokens"] > cost["cached_teacher_tokens"] > 0 and cost["online_teacher_s"] > 0
    assert saved["shapes"]["tokens_per_step"] == 8 * 64 and saved["flops"]["step"] == 3 * saved["flops"]["forward"]


def test_step_flops_counts_every_matmul():
    from normgrow.model import StudentConfig
    cfg = StudentConfig(vocab_size=10, n_layers=1, d_model=4, n_heads=2, n_kv_heads=1, head_dim=2, d_ff=6)
    f = bench.student_step_flops(cfg, batch=1, seq_len=3)
    linear = 4 * 4 + 2 * 4 * 2 + 4 * 4 + 3 * 4 * 6  # q, k+v, o, gate+up+down
    assert f["forward"] == 3 * (2 * linear + 2 * 2 * 3 * 2 * 2 + 2 * 4 * 10)
