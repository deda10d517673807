import pytest
import torch
import torch.nn.functional as F

from normgrow.config import DistillParams
from normgrow.train.distill import (chunked_head_loss, distill_loss, distill_loss_chunked, eval_sums, flatten_batch,
                              masked_mean, next_token_ce, teacher_entropy, topk_soft_ce)
from normgrow.student.model import Student, StudentConfig
from distill_batches import D, N, V, gen, make_batch

def student_logits(seed=1, n=N):
    return (2 * torch.randn(n, V, generator=gen(seed))).requires_grad_()


def dense_soft_ce(s, t, T=1.0):
    return -(F.softmax(t / T, -1) * F.log_softmax(s / T, -1)).sum(-1)


@pytest.mark.parametrize("T", [1.0, 2.0, 0.5])
def test_full_vocab_equals_dense(T):
    t, b = make_batch(k=V)
    s = student_logits()
    got = topk_soft_ce(s, b["topk_ids"], b["topk_logp"], b["tail_logp"], temperature=T)
    assert torch.allclose(got, dense_soft_ce(s, t, T), atol=1e-5)
    got.sum().backward()
    assert torch.isfinite(s.grad).all()
    kl = got - teacher_entropy(b["topk_logp"], b["tail_logp"], temperature=T)
    dense_kl = F.kl_div(F.log_softmax(s / T, -1), F.log_softmax(t / T, -1), log_target=True, reduction="none").sum(-1)
    assert torch.allclose(kl, dense_kl, atol=1e-5)


@pytest.mark.parametrize("T", [1.0, 2.0])
def test_bucket_equals_dense_bucketed_definition(T):
    k = 7
    t, b = make_batch(k)
    s = student_logits()
    inside = torch.zeros(N, V, dtype=torch.bool).scatter(-1, b["topk_ids"], True)
    p_top = F.softmax(t, -1).gather(-1, b["topk_ids"])
    p = F.softmax(torch.log(torch.cat([p_top, 1 - p_top.sum(-1, keepdim=True)], -1)) / T, -1)  # tempered buckets
    q = F.softmax(s / T, -1)
    q_classes = torch.cat([q.gather(-1, b["topk_ids"]), (q * ~inside).sum(-1, keepdim=True)], -1)
    ref = -(p * q_classes.log()).sum(-1)
    got = topk_soft_ce(s, b["topk_ids"], b["topk_logp"], b["tail_logp"], temperature=T, tail="bucket")
    assert torch.allclose(got, ref, atol=1e-5)
    g_got, = torch.autograd.grad(got.sum(), s)
    g_ref, = torch.autograd.grad(ref.sum(), s)
    assert torch.allclose(g_got, g_ref, atol=1e-5)


def test_renormalize():
    k = 7
    t, b = make_batch(k)
    s = student_logits()
    p = F.softmax(F.log_softmax(t, -1).gather(-1, b["topk_ids"]) / 2.0, -1)
    ref = -(p * F.log_softmax(s / 2.0, -1).gather(-1, b["topk_ids"])).sum(-1)
    got = topk_soft_ce(s, b["topk_ids"], b["topk_logp"], b["tail_logp"], temperature=2.0, tail="renormalize")
    assert torch.allclose(got, ref, atol=1e-5)
    kl = got - teacher_entropy(b["topk_logp"], b["tail_logp"], temperature=2.0, tail="renormalize")
    assert (kl > -1e-6).all()
    with pytest.raises(ValueError, match="bucket, renormalize"):
        topk_soft_ce(s, b["topk_ids"], b["topk_logp"], b["tail_logp"], tail="drop")


def test_next_token_ce_and_masked_mean():
    _, b = make_batch(5)
    s = student_logits()
    assert torch.allclose(next_token_ce(s, b["targets"]), F.cross_entropy(s, b["targets"], reduction="none"))
    rows = torch.arange(N, dtype=torch.float)
    assert torch.isclose(masked_mean(rows, b["mask"]), rows[b["mask"]].mean())
    assert masked_mean(rows, torch.zeros(N, dtype=torch.bool)) == 0


@pytest.mark.parametrize("params", [DistillParams(), DistillParams(loss="kl", temperature=2.0, ce_weight=0.3),
                                    DistillParams(tail="renormalize", ce_weight=1.0)])
def test_distill_loss_mix_and_masking(params):
    _, b = make_batch(5)
    s = student_logits()
    loss, metrics = distill_loss(s, b, params)
    m, T, w = b["mask"], params.temperature, params.ce_weight
    kd_ce = topk_soft_ce(s, b["topk_ids"], b["topk_logp"], b["tail_logp"], temperature=T, tail=params.tail)
    kd = kd_ce - teacher_entropy(b["topk_logp"], b["tail_logp"], temperature=T, tail=params.tail) \
        if params.loss == "kl" else kd_ce
    ce = F.cross_entropy(s, b["targets"], reduction="none")
    assert torch.isclose(loss, (1 - w) * T * T * kd[m].mean() + w * ce[m].mean(), atol=1e-6)
    assert torch.isclose(metrics["kd_ce"], kd_ce[m].mean()) and torch.isclose(metrics["ce"], ce[m].mean())
    assert ("kd_kl" in metrics) == (params.loss == "kl")
    loss.backward()
    assert torch.all(s.grad[~m] == 0)
    # masked rows do not change the loss, whatever their contents
    s2, b2 = s.detach().clone(), dict(b)
    s2[~m] = 100 * torch.randn(int((~m).sum()), V, generator=gen(9))
    b2["targets"] = torch.where(m, b["targets"], 0)
    b2["topk_logp"] = torch.where(m[:, None], b["topk_logp"], -3.0)
    assert torch.isclose(distill_loss(s2, b2, params)[0], loss, atol=1e-6)


def test_kl_has_same_gradient_as_ce():
    _, b = make_batch(5)
    grads = []
    for loss_name in ("ce", "kl"):
        s = student_logits()
        distill_loss(s, b, DistillParams(loss=loss_name, temperature=2.0))[0].backward()
        grads.append(s.grad)
    assert torch.allclose(*grads, atol=1e-6)


def test_flatten_batch():
    _, b = make_batch(5, n=24)
    nested = {k: v.view(4, 6, *v.shape[1:]) for k, v in b.items()}
    flat = flatten_batch(nested)
    assert all(torch.equal(flat[k], b[k]) for k in b)


@pytest.mark.parametrize("chunk_size", [5, 7, 100])
@pytest.mark.parametrize("params", [DistillParams(), DistillParams(loss="kl", temperature=2.0, ce_weight=0.3)])
def test_chunked_head_matches_unchunked(chunk_size, params):
    _, b = make_batch(6)
    b["mask"][5:10] = False  # an all-masked chunk for chunk_size=5
    hidden = torch.randn(N, D, generator=gen(2), requires_grad=True)
    weight = torch.randn(V, D, generator=gen(3), requires_grad=True)
    ref, ref_metrics = distill_loss(hidden @ weight.T, b, params)
    ref_dh, ref_dw = torch.autograd.grad(ref, (hidden, weight))
    loss, metrics = distill_loss_chunked(hidden, weight, b, params, chunk_size=chunk_size)
    (3.0 * loss).backward()  # backward scales the stored gradients by the incoming gradient
    assert torch.allclose(loss, ref, atol=1e-5)
    assert metrics.keys() == ref_metrics.keys()
    assert all(torch.allclose(metrics[k], ref_metrics[k], atol=1e-5) for k in metrics)
    assert torch.allclose(hidden.grad, 3 * ref_dh, atol=1e-5)
    assert torch.allclose(weight.grad, 3 * ref_dw, atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(distill_loss_chunked(hidden, weight, b, params, chunk_size=chunk_size)[0], ref, atol=1e-5)


def test_chunked_head_loss_frozen_head_and_bounded_logits():
    _, b = make_batch(6)
    hidden = torch.randn(N, D, generator=gen(2), requires_grad=True)
    weight = torch.randn(V, D, generator=gen(3))
    sizes = []

    def row_loss_fn(logits, rows):
        sizes.append(logits.shape[0])
        return next_token_ce(logits, b["targets"][rows]), {}

    loss, metrics = chunked_head_loss(hidden, weight, row_loss_fn, b["mask"], chunk_size=4)
    loss.backward()
    assert max(sizes) <= 4 and metrics == {}
    ref = masked_mean(next_token_ce(hidden @ weight.T, b["targets"]), b["mask"])
    assert torch.allclose(hidden.grad, torch.autograd.grad(ref, hidden)[0], atol=1e-5)


def test_chunked_head_bf16_autocast():
    _, b = make_batch(6)
    hidden = torch.randn(N, D, generator=gen(2), requires_grad=True)
    weight = torch.randn(V, D, generator=gen(3), requires_grad=True)
    seen = []

    def row_loss_fn(logits, rows):
        seen.append(logits.dtype)
        return next_token_ce(logits, b["targets"][rows]), {}

    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = chunked_head_loss(hidden, weight, row_loss_fn, b["mask"], chunk_size=8)
    loss.backward()
    assert set(seen) == {torch.bfloat16} and loss.dtype == torch.float32
    assert hidden.grad.dtype == torch.float32 and weight.grad.dtype == torch.float32
    ref = masked_mean(next_token_ce(hidden @ weight.T, b["targets"]), b["mask"])
    ref_dh, ref_dw = torch.autograd.grad(ref, (hidden, weight))
    assert torch.isclose(loss, ref, rtol=2e-2)
    assert (hidden.grad - ref_dh).abs().max() < 5e-2 * ref_dh.abs().max()
    assert (weight.grad - ref_dw).abs().max() < 5e-2 * ref_dw.abs().max()


def test_chunked_distill_through_tied_student():
    torch.manual_seed(0)
    cfg = StudentConfig(vocab_size=V, n_layers=2, d_model=D, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=24,
                        init_std=0.1)
    model = Student(cfg)
    idx = torch.randint(V, (2, 12), generator=gen(4))
    _, b = make_batch(6, n=24)
    params = DistillParams(ce_weight=0.5)
    ref, _ = distill_loss(model(idx).flatten(0, 1), b, params)
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    loss, _ = distill_loss_chunked(model.hidden(idx).flatten(0, 1), model.head_weight, b, params, chunk_size=5)
    loss.backward()
    assert torch.allclose(loss, ref, atol=1e-5)
    for p, g in zip(model.parameters(), ref_grads):
        assert torch.allclose(p.grad, g, atol=1e-5)


def test_eval_sums_match_dense_reference():
    """The reported metrics through the fused head equal next_token_ce / topk_soft_ce on dense logits, also on
    peaked rows whose student mass on the top-k ids is near 1 (a tiny tail probability)."""
    _, b = make_batch(6)
    hidden = torch.randn(N, D, generator=gen(2))
    weight = torch.randn(V, D, generator=gen(3))
    hidden[:4] *= 5  # student tail probabilities of 1e-7 and below
    b["topk_ids"][:4] = (hidden[:4] @ weight.T).topk(6).indices
    logits = hidden @ weight.T
    assert (logits[:4].softmax(-1).gather(-1, b["topk_ids"][:4]).sum(-1) > 0.9999).all()
    sums, count = eval_sums(hidden, weight, b)
    m = b["mask"]
    assert count == int(m.sum())
    ce = next_token_ce(logits, b["targets"])[m].sum().item()
    kd_ce = topk_soft_ce(logits, b["topk_ids"], b["topk_logp"], b["tail_logp"])[m].sum().item()
    assert sums["ce"] == pytest.approx(ce, rel=1e-5)
    assert sums["kd_ce"] == pytest.approx(kd_ce, rel=1e-5)


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("params", [DistillParams(), DistillParams(loss="kl", temperature=2.0, ce_weight=0.3),
                                    DistillParams(tail="renormalize", ce_weight=0.3)])
def test_row_blocks_are_bitwise_one_block(monkeypatch, autocast, params):
    """The fused head's L2-sized row blocks (ROW_BLOCK_BYTES) give the loss, metrics, gradients and eval sums of
    one block per chunk bit for bit: blocks of 1 and 3 rows (not dividing the chunk of 10) against a block of 64
    (the chunk), on 57 rows (a last chunk of 7, shorter than the block)."""
    from normgrow.train import distill

    _, b = make_batch(6, n=57)
    b["mask"][10:20] = False  # an all-masked chunk
    results = []
    for block_rows in (64, 3, 1):
        monkeypatch.setattr(distill, "ROW_BLOCK_BYTES", 4 * V * block_rows)
        distill.release_workspace()
        hidden = torch.randn(57, D, generator=gen(2), requires_grad=True)
        weight = torch.randn(V, D, generator=gen(3), requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, metrics = distill_loss_chunked(hidden, weight, b, params, chunk_size=10)
            sums = eval_sums(hidden.detach(), weight.detach(), b)
        loss.backward()
        results.append((loss, metrics, hidden.grad, weight.grad, sums))
    distill.release_workspace()
    ref = results[0]
    for loss, metrics, dh, dw, sums in results[1:]:
        assert torch.equal(loss, ref[0]) and all(torch.equal(metrics[k], ref[1][k]) for k in ref[1])
        assert torch.equal(dh, ref[2]) and torch.equal(dw, ref[3]) and sums == ref[4]
