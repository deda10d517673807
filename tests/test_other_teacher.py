"""The pipeline on a teacher of its own: not SmolLM2, not the bundled corpus.

A tiny random LlamaForCausalLM with a byte-level BPE tokenizer trained on the test corpus (pad id 0, BOS 1, EOS 2;
no <|endoftext|>), saved as a local folder; a corpus of short .txt documents; the tiny profile pointed at both
(teacher.dtype float32). The teacher cache is built, three runs train on it, the pre-norm grown student is exported
with ``python -m normgrow export`` and generates with transformers. Outputs go to a temp dir.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normgrow.data import teacher, teacher_cache
from normgrow.__main__ import main
from normgrow.config import load_profile
from normgrow.rundir import phase_checkpoints, run_path
from normgrow.train.spec import make_run_spec, run_disk_estimate
from normgrow.train.run import run_variant
from tiny_teachers import SPECIALS, corpus_texts, save_folder_teacher, write_corpus

pytestmark = pytest.mark.slow  # processes, subprocesses or model conversions: not in make test-fast

RUNS = (("pre", "grow"), ("post", "grow"), ("pre", "joint"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(profile overrides, profile, cache, {run name: summary}) with outputs in a temp dir."""
    root = tmp_path_factory.mktemp("other_teacher")
    texts = corpus_texts(n=60)
    folder = save_folder_teacher(root / "teacher", texts)
    corpus = write_corpus(root / "corpus", texts)
    overrides = {"teacher.source": str(folder), "teacher.dtype": "float32", "teacher.sanity": "warn", "teacher.device": "cpu",
                 "teacher.batch_size": 4, "data.source": {"files": [f"{corpus}/*.txt"]}, "data.seq_len": 32,
                 "data.train_tokens": 1024, "data.val_tokens": 256, "data.val_fraction": 0.2, "cache.k": 8,
                 "train.stage_tokens": [1024, 1024, 1024], "train.dtype": "float32", "train.device": "cpu"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMGROW_OUTPUTS", str(root / "outputs"))
        mp.setattr(teacher, "MODELS_DIR", None)
        profile = load_profile("tiny", overrides)
        cache = teacher_cache.ensure_cache(profile, progress=False)
        summaries = {}
        for norm, schedule in RUNS:
            spec = make_run_spec(profile="tiny", norm=norm, schedule=schedule, run_name=f"{norm}-{schedule}-s0",
                                 overrides=overrides)
            summaries[spec.run_name] = run_variant(spec, progress=False)
        yield root, profile, cache, summaries


@pytest.fixture
def outputs(world, monkeypatch):
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(world[0] / "outputs"))
    return world[0] / "outputs"


def test_cache_holds_the_teachers_own_ids_and_its_forward(world):
    root, profile, cache, _ = world
    tok = cache.tokenizer()
    assert tok.pad_token_id == 0 and tok.convert_ids_to_tokens([0, 1, 2]) == list(SPECIALS)
    assert cache.meta["bos_id"] == 1 and cache.meta["pad_id"] == 0 and cache.meta["vocab_size"] == len(tok)
    assert cache.meta["teacher_class"] == "LlamaForCausalLM" and cache.meta["dtype"] == "float32"
    model, _ = teacher.load_teacher(profile.teacher)
    for split in (cache.train, cache.val):
        assert (np.asarray(split.tokens)[np.asarray(split.doc_start)] == 1).all()
        rows = torch.from_numpy(np.asarray(split.tokens[:6], dtype=np.int64))
        with torch.no_grad():
            top = torch.log_softmax(model(input_ids=rows).logits.float(), -1).topk(profile.cache.k, -1)
        np.testing.assert_array_equal(split.topk_ids[:6], top.indices.numpy())
        np.testing.assert_allclose(split.topk_logp[:6], top.values.numpy(), atol=1e-4, rtol=0)


def test_every_cached_row_begins_with_the_document_start_token(world):
    cache = world[2]
    for split in (cache.train, cache.val):
        assert (np.asarray(split.tokens[:, 0]) == cache.meta["bos_id"]).all()
        assert np.asarray(split.doc_start[:, 0]).all()


def test_runs_train_and_checkpoints_match_the_disk_estimate(world, outputs):
    _, profile, cache, summaries = world
    assert sorted(summaries) == sorted(f"{n}-{s}-s0" for n, s in RUNS)
    for name, summary in summaries.items():
        # below the uniform level over the teacher's vocabulary: the students learnt from this teacher's targets
        assert math.isfinite(summary["val_ce"]) and summary["val_ce"] < math.log(cache.meta["vocab_size"]), name
    estimate = run_disk_estimate(profile, cache)
    assert estimate["vocab_size"] == cache.meta["vocab_size"]
    ckpts = phase_checkpoints(run_path("tiny", "pre-grow-s0"))
    assert [d for _, d, _ in ckpts] == list(profile.train.stages)
    for _, depth, path in ckpts:
        assert path.stat().st_size == pytest.approx(estimate["checkpoint_bytes"][str(depth)], rel=0.2), depth


def test_export_loads_and_generates_with_transformers(world, outputs, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    main(["export", str(run_path("tiny", "pre-grow-s0")), str(tmp_path / "hf")])
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.vocab_size == len(tok)
    assert (model.config.pad_token_id, model.config.bos_token_id, model.config.eos_token_id) == (0, 1, 2)
    ids = torch.tensor([[1] + tok("The king said", add_special_tokens=False)["input_ids"]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                         pad_token_id=tok.pad_token_id)
    assert out.shape == (1, ids.shape[1] + 6) or out[0, -1] == tok.eos_token_id
    assert isinstance(teacher.generate(model, tok, ["The king said"], max_new_tokens=4)[0], str)


def test_a_pass_in_row_pieces_records_its_throughput_and_matches_the_whole_batch_pass(world, tmp_path, monkeypatch,
                                                                                     capsys):
    """With room for one row's log-probabilities per forward the pass takes its batches a row at a time: the same
    top-k (float32 teacher), an estimate printed after the first batch, the matmul throughput in teacher.json."""
    _, profile, cache, _ = world
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    monkeypatch.setattr(teacher_cache, "LOGITS_BUDGET_BYTES", profile.data.seq_len * cache.meta["vocab_size"] * 4)
    assert teacher_cache.rows_per_forward(profile.teacher.batch_size, profile.data.seq_len,
                                          cache.meta["vocab_size"]) == 1
    pieces = teacher_cache.ensure_cache(profile, progress=True)
    said = capsys.readouterr().out  # the one-time build named before it starts (before: a silent wait, then the bar)
    assert said.index(f"teacher cache {pieces.key}: not on this machine, so it is built once") < said.index(
        "tokenize and pack the corpus (once)") < said.index("teacher pass: about")
    for a, b in ((pieces.train, cache.train), (pieces.val, cache.val)):
        np.testing.assert_array_equal(a.topk_ids, b.topk_ids)
        np.testing.assert_allclose(a.topk_logp, b.topk_logp, atol=1e-5, rtol=0)
    timings = pieces.report["timings"]
    assert timings["flops_per_token"] > 2 * sum(p.numel() for p in teacher.load_teacher(profile.teacher)[0]
                                                 .get_output_embeddings().parameters())
    assert 0 < timings["peak_fraction"] < 1 and timings["flop_s"] == pytest.approx(
        timings["tok_per_s"] * timings["flops_per_token"], rel=1e-3)


PEAK_SCRIPT = """
import resource, sys, numpy as np, torch
from transformers import LlamaConfig, LlamaForCausalLM
from normgrow.config import load_profile
from normgrow.data import teacher, teacher_cache
from normgrow.ranks import Ranks
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=262144, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1)).eval()
teacher.load_teacher = lambda params, progress=True, device=None: (model, None)
if sys.argv[2] == "whole":
    teacher_cache.LOGITS_BUDGET_BYTES = 1 << 40
tmp = __import__("pathlib").Path(sys.argv[1])
rng = np.random.default_rng(0)
teacher_cache._allocate_split(rng.integers(0, 262144, (8, 256)), np.zeros((8, 256), bool), tmp / "train", 32)
params = load_profile("tiny", {"teacher.batch_size": 8, "teacher.dtype": "float32"}).teacher
teacher_cache.teacher_pass(Ranks(), params, ["train"], tmp, 32, False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.mark.parametrize("mode, bound", [("pieces", lambda peak: peak < 3e9), ("whole", lambda peak: peak > 3e9)])
def test_the_pass_over_a_262144_id_vocabulary_stays_under_3_gb(tmp_path, mode, bound):
    """A batch of 8 x 256 positions over 262,144 ids: in row pieces (LOGITS_BUDGET_BYTES) the process peaks under
    3 GB; taken whole, as before the bound, it peaks above (two 2.1 GB float32 arrays)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(tmp_path), mode], capture_output=True, text=True,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}, check=True)
    peak = int(out.stdout.strip().splitlines()[-1])
    assert bound(peak), f"{mode}: peak {peak / 1e9:.2f} GB"
