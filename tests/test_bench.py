"""The benchmark's code path on tiny shapes (no timing assertions): every candidate runs, the JSON has the fields, the
student is the profile's, earlier numerics versions come from the record, and the FLOP count matches torch's
counter."""
import json
from pathlib import Path
from dataclasses import replace

import fakes
import pytest
import torch

from normgrow import bench
from normgrow.train.step import step_flops
from normgrow.train import distill
from normgrow.student.model import StudentConfig
from normgrow.train.growth import Phase
from normgrow.train.spec import run_profile
from normgrow.data.vocab import corpus_ids

pytestmark = pytest.mark.slow  # processes, subprocesses or model conversions: not in make test-fast

# the tiny profile shrunk to fakes.fake_cache()'s shapes, with the corpus vocabulary (47 of its 48 ids occur)
CORPUS = fakes.TINY_OVERRIDES | {"student.vocab": "corpus"}


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
    for key in ("profile", "machine", "data", "vocabulary", "shapes", "candidates", "ratios", "flops", "matmul_peak",
                "memory_method", "timing_method", "study_teacher_cost", "head", "study_compute"):
        assert key in saved, key
    assert set(saved["candidates"]) == set(bench.CANDIDATES)
    for name, r in saved["candidates"].items():
        assert r["step_s"] > 0 and r["tok_s"] > 0 and 0 < r["mfu"] and r["flop_s"] > 0, name
        assert r["memory"]["peak_step_bytes"] >= 0
        assert torch.isfinite(torch.tensor(r["loss"]))
    assert set(saved["ratios"]) == {f"normgrow_vs_{n}" for n in bench.CANDIDATES if n != "normgrow"}
    head = saved["head"]
    assert head["tokens"] == 8 * 64 and head["row_block_bytes"] == distill.ROW_BLOCK_BYTES
    assert set(head["eval"]) == {"fused_s", "one_block_s", "reference_s", "one_block_vs_fused", "reference_vs_fused"}
    assert set(head["train"]) == {"fused_s", "one_block_s", "one_block_vs_fused"}
    for part in head["eval"], head["train"]:
        assert part["fused_s"] > 0 and part["one_block_vs_fused"] == part["one_block_s"] / part["fused_s"]
    assert head["eval"]["reference_vs_fused"] == head["eval"]["reference_s"] / head["eval"]["fused_s"]
    cost = saved["study_teacher_cost"]
    assert cost["online_teacher_tokens"] > cost["cached_teacher_tokens"] > 0 and cost["online_teacher_s"] > 0
    assert saved["shapes"]["tokens_per_step"] == 8 * 64 and saved["flops"]["step"] == 3 * saved["flops"]["forward"]


def test_bench_student_has_the_profiles_vocabulary(tmp_path):
    """With a cache, the student's vocabulary is VocabMap.for_cache's (corpus: the ids that occur); hf_online alone
    keeps the teacher's full vocabulary, and the table says which each candidate uses."""
    cache = fakes.fake_cache()
    occurring = len(corpus_ids(cache))
    assert occurring < fakes.VOCAB
    report = bench.run_bench("tiny", repeats=1, warmup=0, candidates=("normgrow", "hf_cached", "hf_online"),
                             cache=cache, teacher=tiny_teacher(fakes.VOCAB), overrides=CORPUS, memory="none",
                             out=tmp_path / "b.json", peak_size=64)
    c = report["candidates"]
    assert report["vocabulary"]["student_size"] == occurring and report["vocabulary"]["teacher_size"] == fakes.VOCAB
    assert c["normgrow"]["vocab_size"] == c["hf_cached"]["vocab_size"] == occurring
    assert c["hf_online"]["vocab_size"] == fakes.VOCAB and c["hf_online"]["vocabulary"] == "teacher"
    assert report["shapes"]["d_model"] == 16 and report["shapes"]["depth"] == 3  # student.d_model, train.stages[-1]
    assert report["dtype"] == "float32"  # the profile's train.dtype (TINY_OVERRIDES)
    table = bench.format_table(report)
    assert f"| normgrow | student {occurring:,} |" in table and f"| hf_online | teacher {fakes.VOCAB} |" in table


def test_corpus_vocabulary_without_a_cache_needs_a_stated_size():
    profile = run_profile("tiny", "pre", "joint", CORPUS)
    with pytest.raises(ValueError, match="--vocab-size"):
        bench.load_batch(profile, "synthetic", teacher_vocab_size=fakes.VOCAB)
    batch = bench.load_batch(profile, "synthetic", vocab_size=40, teacher_vocab_size=fakes.VOCAB)
    assert batch.vocab_size == 40 and "--vocab-size" in batch.vocabulary and int(batch.student["tokens"].max()) < 40
    with pytest.raises(ValueError, match="--vocab-size"):
        bench.load_batch(profile, "auto", cache=fakes.fake_cache(), vocab_size=40)


def _normgrow(dtype, overrides=CORPUS):
    profile = run_profile("tiny", "pre", "joint", overrides)
    batch = bench.load_batch(profile, "cache", cache=fakes.fake_cache())
    return bench.build_candidates(profile, batch, ("normgrow",), dtype)[0]["normgrow"]


def test_earlier_numerics_come_from_the_record_and_are_carried_on(tmp_path):
    """A record that timed an earlier numerics version (normgrow_v2, as the committed ones did) hands its step time
    to the bench that replaces it, which prints it over today's step; the next bench carries it again."""
    out = tmp_path / "b.json"
    args = ["--profile", "tiny", "--candidates", "normgrow", "--repeats", "1", "--data", "synthetic",
            "--vocab-size", "96", "--memory", "none", "--peak-size", "64", "--out", str(out)]
    bench.main(args)
    first = json.loads(out.read_text())
    assert first["earlier_numerics"] == {}
    first["candidates"]["normgrow_v2"] = first["candidates"]["normgrow"] | {"step_s": 0.25}
    first["command"] = "python -m normgrow.bench (an earlier version)"
    out.write_text(json.dumps(first))
    bench.main(args)
    bench.main(args)
    report = json.loads(out.read_text())
    assert set(report["candidates"]) == {"normgrow"}
    assert report["earlier_numerics"] == {"normgrow_v2": {"step_s": 0.25, "cpu": first["machine"]["cpu"],
                                                          "command": "python -m normgrow.bench (an earlier version)"}}
    base = report["candidates"]["normgrow"]["step_s"]
    assert "normgrow_v2 (recorded: python -m normgrow.bench (an earlier version)" in bench.format_table(report)
    assert f"{0.25 / base:.2f}x this step" in bench.format_table(report)


def test_the_committed_records_hold_the_earlier_versions():
    for kind in ("amx", "avx512bf16"):
        record = json.loads((Path(__file__).resolve().parents[1] / "outputs" / "bench" /
                             f"cpu-{kind}.json").read_text())
        held = set(record["candidates"]) | set(record.get("earlier_numerics", {}))
        assert {"normgrow_v1", "normgrow_v2"} <= held, kind


def test_mfu_label_follows_the_dtype():
    assert bench.mfu_label(torch.bfloat16) == "MFU (bf16 peak)"
    assert bench.mfu_label(torch.float32) == "MFU (float32 peak)"


def test_peak_is_sampled_in_every_round(tmp_path):
    report = bench.run_bench("tiny", repeats=3, warmup=1, candidates=("normgrow",), cache=fakes.fake_cache(),
                             overrides=CORPUS, memory="none", out=tmp_path / "b.json", peak_size=64)
    pk = report["matmul_peak"]
    assert len(pk["per_round"]) == 3 and len(pk["warmup_rounds"]) == 1 and pk["dtype"] == "float32"
    assert pk["flop_s"] == sorted(pk["per_round"])[1]  # the median of the timed rounds
    r = report["candidates"]["normgrow"]
    assert r["mfu"] == r["step_flops"] / r["step_s"] / pk["flop_s"]
    assert "MFU (float32 peak)" in bench.format_table(report) and "bf16" not in bench.format_table(report)


def test_step_flops_counts_every_matmul():
    cfg = StudentConfig(vocab_size=10, n_layers=1, d_model=4, n_heads=2, n_kv_heads=1, head_dim=2, d_ff=6)
    f = step_flops(cfg, batch=1, seq_len=3)
    linear = 4 * 4 + 2 * 4 * 2 + 4 * 4 + 3 * 4 * 6  # q, k+v, o, gate+up+down
    assert f["forward"] == 3 * (2 * linear + 2 * 2 * 3 * 2 * 2 + 2 * 4 * 10)


def test_step_flops_match_torchs_counter():
    """torch's FlopCounterMode over one whole normgrow step (forward, the fused head's hand-written gradients,
    backward, AdamW) agrees with the analytic count within 5%. Attention runs on SDPA's math backend here, whose
    matmuls the counter sees (it has no formula for the CPU flash kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode
    v2 = _normgrow(torch.float32)
    B, L = fakes.TINY_OVERRIDES["train.batch_size"], fakes.TINY_OVERRIDES["data.seq_len"]
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        v2.step()
    analytic = step_flops(v2.cfg, B, L)["step"]
    assert abs(counter.get_total_flops() / analytic - 1) < 0.05, (counter.get_flop_counts(), analytic)


def test_study_compute_counts_every_step_and_evaluation(monkeypatch):
    """Two seeds of one grown run on the tiny profile (8 steps of 8 x 64 tokens per phase, evaluations every 4 steps
    over its 64 x 64 validation tokens, a subset of 32 x 64): phase 0 at depth 1 trains everything (3 x forward) and
    is evaluated at steps 0 and 4 on the subset and 8 on the whole split; phase 1 at depth 2 with block 0 frozen
    (1 x forward for it) is evaluated before its first update on the subset and at steps 12 (the flatness gate's
    point) and 16 on the whole split."""
    phases = [Phase(0, depth=1, steps=8, first_trainable_block=0), Phase(1, depth=2, steps=8, first_trainable_block=1)]
    monkeypatch.setattr(bench, "study_phases", lambda profile: ({"run": phases}, 2))
    profile = run_profile("tiny", "pre", "grow", {"train.eval_tokens": 2048})
    cfg = StudentConfig.from_params(profile.student, vocab_size=48, n_layers=2, norm="pre", max_seq_len=64)
    one, two = (step_flops(replace(cfg, n_layers=n), 1, 64)["forward"] / 64 for n in (1, 2))
    block = two - one  # forward FLOPs per token of one block (the head's cancels)
    head = one - block
    train = 8 * 512 * 3 * (block + head) + 8 * 512 * (3 * (block + head) + block)
    evals = (2048 + 2048 + 4096) * (block + head) + (2048 + 4096 + 4096) * (2 * block + head)
    got = bench.study_compute(profile, cfg, peak_flop_s=1e9, cores=2)
    assert got["train_flops"] == pytest.approx(2 * train, rel=1e-12)
    assert got["eval_flops"] == pytest.approx(2 * evals, rel=1e-12)
    assert got["at_peak_s"] == pytest.approx(2 * (train + evals) / 2e9, rel=1e-12) and got["runs"] == 2


@pytest.mark.parametrize("flags, kind", [({"avx2", "amx_bf16", "avx512_bf16"}, "amx"),
                                         ({"avx2", "avx512f", "avx512_bf16"}, "avx512bf16"),
                                         ({"avx2", "fma"}, "nobf16")])
def test_cpu_kind_names_the_bf16_instructions(monkeypatch, flags, kind):
    from normgrow import utils
    monkeypatch.setattr(utils, "cpu_flags", lambda: frozenset(flags))
    assert utils.cpu_kind() == kind


def test_bench_keeps_one_file_per_cpu_kind(monkeypatch, tmp_path):
    """A bench on one CPU kind never overwrites another kind's: step times and the fastest dtype differ by kind
    (outputs/bench/cpu.json once held the AMX Xeon's figures, and a bench on an EPYC would have replaced them)."""
    from normgrow import utils
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "tiny-otherkind.json").write_text("{}")
    bench.run_bench("tiny", repeats=1, warmup=0, candidates=["normgrow"], data="synthetic", dtype="float32",
                    teacher=tiny_teacher(), memory="none", peak_size=64)
    assert sorted(p.name for p in (tmp_path / "bench").iterdir()) == sorted(["tiny-otherkind.json",
                                                                              f"tiny-{utils.cpu_kind()}.json"])
    assert (tmp_path / "bench" / "tiny-otherkind.json").read_text() == "{}"
