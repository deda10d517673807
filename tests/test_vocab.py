"""The corpus vocabulary (vocab.py), per-placement learning rates and hardware dtype resolution."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import fakes
from normgrow.config import DistillParams, ParamError, TeacherParams
from normgrow.train.distill import distill_loss, distill_loss_chunked
from normgrow.train.spec import make_run_spec
from normgrow.train.run import run_variant
from normgrow.data.vocab import VocabMap

from distill_batches import D, N, V, gen, make_batch

K = 8


def leaves(vocab: int):
    return (torch.randn(N, D, generator=gen(2), requires_grad=True),
            torch.randn(vocab, D, generator=gen(3), requires_grad=True))


def with_tokens(batch: dict) -> dict:
    return batch | {"tokens": batch["targets"].roll(1)}


def loss_and_grads(batch: dict, vocab: int, params: DistillParams):
    hidden, weight = leaves(vocab)
    loss, metrics = distill_loss_chunked(hidden, weight, batch, params, chunk_size=7)
    loss.backward()
    return loss, metrics, hidden.grad, weight.grad


@pytest.mark.parametrize("params", [DistillParams(), DistillParams(tail="renormalize", ce_weight=0.3),
                                    DistillParams(temperature=2.0, loss="kl")])
def test_keeping_every_id_reproduces_the_full_vocabulary_exactly(params):
    _, b = make_batch(K)
    b = with_tokens(b)
    identity = VocabMap(np.arange(V), V).restrict(b)
    assert VocabMap(None, V).restrict(b).keys() == b.keys()
    ref = loss_and_grads(b, V, params)
    got = loss_and_grads(identity, V, params)
    assert torch.equal(ref[0], got[0])
    assert all(torch.equal(ref[1][n], got[1][n]) for n in ref[1])
    assert torch.equal(ref[2], got[2]) and torch.equal(ref[3], got[3])


def restricted():
    """A batch over V teacher ids, restricted to the ids that are tokens or targets plus every third id."""
    _, b = make_batch(K)
    b = with_tokens(b)
    keep = np.union1d(np.union1d(b["targets"].numpy(), b["tokens"].numpy()), np.arange(0, V, 3))
    assert len(keep) < V
    vm = VocabMap(keep, V)
    return b, vm, vm.restrict(b)


def test_dropped_teacher_mass_joins_the_tail():
    b, vm, r = restricted()
    dropped = torch.from_numpy(~np.isin(b["topk_ids"].numpy(), vm.teacher_ids))
    assert dropped.any() and (~dropped).any()
    total_before = b["topk_logp"].double().exp().sum(-1) + b["tail_logp"].double().exp()
    total_after = r["topk_logp"].double().exp().sum(-1) + r["tail_logp"].double().exp()
    assert torch.allclose(total_before, total_after, atol=1e-6)
    moved = (b["topk_logp"].double().exp() * dropped).sum(-1)
    assert torch.allclose(r["tail_logp"].double().exp(), b["tail_logp"].double().exp() + moved, atol=1e-6)
    # kept entries keep their log-prob; a padding entry names an id that the row already has
    assert torch.equal(r["topk_logp"][~dropped], b["topk_logp"][~dropped])
    for row_ids, row_pad in zip(r["topk_ids"], dropped):
        if (~row_pad).any():
            assert set(row_ids[row_pad].tolist()) <= set(row_ids[~row_pad].tolist())
    assert torch.equal(torch.from_numpy(vm.teacher_ids)[r["targets"]], b["targets"])


@pytest.mark.parametrize("params", [DistillParams(), DistillParams(temperature=2.0, ce_weight=0.3),
                                    DistillParams(loss="kl")])
def test_restricted_loss_matches_dense_reference_and_explicit_formula(params):
    b, vm, r = restricted()
    hidden, weight = leaves(vm.size)
    ref, ref_metrics = distill_loss(hidden @ weight.T, r, params)
    ref_dh, ref_dw = torch.autograd.grad(ref, (hidden, weight))
    loss, metrics, dh, dw = loss_and_grads(r, vm.size, params)
    assert torch.allclose(loss, ref, atol=1e-5)
    assert all(torch.allclose(metrics[n], ref_metrics[n], atol=1e-5) for n in metrics)
    assert torch.allclose(dh, ref_dh, atol=1e-5) and torch.allclose(dw, ref_dw, atol=1e-5)
    # kd_ce at T=1 written out per row: kept teacher classes by their student ids, then one tail class
    logq = torch.log_softmax((hidden @ weight.T).detach().double(), -1)
    lut = {t: s for s, t in enumerate(vm.teacher_ids.tolist())}
    rows = []
    for i in range(N):
        kept = [(lut[int(t)], float(lp)) for t, lp in zip(b["topk_ids"][i], b["topk_logp"][i]) if int(t) in lut]
        p_tail = 1.0 - sum(np.exp(lp) for _, lp in kept)
        q_tail = 1.0 - sum(float(logq[i, s].exp()) for s, _ in kept)
        rows.append(-sum(np.exp(lp) * float(logq[i, s]) for s, lp in kept) - p_tail * np.log(q_tail))
    expected = np.array(rows)[b["mask"].numpy()].mean()
    got, _ = distill_loss(hidden @ weight.T, r, DistillParams())
    assert float(got.detach()) == pytest.approx(expected, abs=1e-4)


def test_corpus_vocabulary_run(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    cache = fakes.install(monkeypatch)
    overrides = fakes.TINY_OVERRIDES | {"student.vocab": "corpus"}
    summary = run_variant(make_run_spec(profile="tiny", norm="post", schedule="joint", overrides=overrides,
                                       run_name="post-joint-s0"),
                          progress=False)
    occurring = np.union1d(cache.train.tokens, cache.val.tokens)
    assert summary["vocab"]["mode"] == "corpus" and summary["vocab"]["size"] == len(occurring) < fakes.VOCAB
    assert 0.0 < summary["vocab"]["teacher_mass_outside"] < 1.0
    assert np.isfinite(summary["val_ce"])
    ckpt = torch.load(tmp_path / "runs/tiny/post-joint-s0/checkpoints/final.pt", weights_only=False)
    assert ckpt["vocab"] == {"teacher_vocab_size": fakes.VOCAB, "teacher_ids": occurring.tolist()}


def test_learning_rate_per_placement(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    lr = {"train.lr": {"pre": 2e-3, "post": 5e-4}}
    assert make_run_spec(profile="tiny", norm="pre", overrides=lr).profile.train.lr == 2e-3
    assert make_run_spec(profile="tiny", norm="post", overrides=lr).profile.train.lr == 5e-4
    with pytest.raises(ParamError, match=r"gives no learning rate for norm='post' \(keys given: pre\)"):
        make_run_spec(profile="tiny", norm="post", overrides={"train.lr": {"pre": 1e-3}})
    with pytest.raises(ParamError, match="must be > 0"):
        make_run_spec(profile="tiny", overrides={"train.lr": {"pre": 1e-3, "post": -1.0}})


@pytest.mark.parametrize("flags", [{"avx2", "fma"}, {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, set()])
def test_auto_dtype_is_float32_on_a_cpu_without_native_bf16(monkeypatch, flags):
    """AVX2 only, plain AVX512 (bf16 emulated, oneDNN would say yes) and unreadable flags all give float32."""
    from normgrow import utils
    from normgrow.data import teacher
    monkeypatch.setattr(utils.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(utils, "cpu_flags", lambda: frozenset(flags))
    assert not utils.bf16_supported(torch.device("cpu"))
    assert utils.resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert teacher.teacher_dtype(TeacherParams(dtype="auto", device="cpu")) == "float32"
    assert teacher.teacher_dtype(TeacherParams(dtype="bfloat16", device="cpu")) == "bfloat16"  # explicit wins


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_auto_dtype_is_bf16_on_a_cpu_with_native_bf16(monkeypatch, flag):
    from normgrow import utils
    from normgrow.data import teacher
    monkeypatch.setattr(utils.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(utils, "cpu_flags", lambda: frozenset({"avx2", "avx512f", flag}))
    assert utils.resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16
    assert teacher.teacher_dtype(TeacherParams(dtype="auto", device="cpu")) == "bfloat16"
    assert teacher.teacher_dtype(TeacherParams(dtype="float32", device="cpu")) == "float32"
