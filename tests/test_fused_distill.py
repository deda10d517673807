"""The fused distillation head (closed-form logit gradient) against the autograd reference, every loss option."""
import pytest
import torch

from normgrow.config import DistillParams
from normgrow.train.distill import distill_loss, distill_loss_chunked

from distill_batches import D, N, V, gen, make_batch

PARAMS = [DistillParams(), DistillParams(tail="renormalize"), DistillParams(temperature=2.0, ce_weight=0.3),
          DistillParams(tail="renormalize", temperature=0.5, ce_weight=0.4, loss="kl"),
          DistillParams(loss="kl", ce_weight=1.0), DistillParams(tail="renormalize", ce_weight=0.5)]


def leaves():
    return (torch.randn(N, D, generator=gen(2), requires_grad=True),
            torch.randn(V, D, generator=gen(3), requires_grad=True))


@pytest.mark.parametrize("k", [6, V])
@pytest.mark.parametrize("params", PARAMS)
def test_fused_matches_dense_reference(params, k):
    _, b = make_batch(k)
    hidden, weight = leaves()
    ref, ref_metrics = distill_loss(hidden @ weight.T, b, params)
    ref_dh, ref_dw = torch.autograd.grad(ref, (hidden, weight))
    loss, metrics = distill_loss_chunked(hidden, weight, b, params, chunk_size=7)
    (2.0 * loss).backward()
    assert torch.allclose(loss, ref, atol=1e-5)
    assert metrics.keys() == ref_metrics.keys()
    assert all(torch.allclose(metrics[n], ref_metrics[n], atol=1e-5) for n in metrics)
    assert torch.allclose(hidden.grad, 2 * ref_dh, atol=1e-5)
    assert torch.allclose(weight.grad, 2 * ref_dw, atol=1e-5)


@pytest.mark.parametrize("params", PARAMS[:3])
def test_fused_matches_autograd_chunks_under_bf16_autocast(params):
    _, b = make_batch(6)
    out = []
    for fused in (True, False):
        hidden, weight = leaves()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = distill_loss_chunked(hidden, weight, b, params, chunk_size=8, fused=fused)
        loss.backward()
        assert loss.dtype == hidden.grad.dtype == weight.grad.dtype == torch.float32
        out.append((loss, hidden.grad, weight.grad))
    (l1, dh1, dw1), (l2, dh2, dw2) = out
    assert torch.isclose(l1, l2, rtol=1e-4)
    assert (dh1 - dh2).abs().max() < 2e-2 * dh2.abs().max()
    assert (dw1 - dw2).abs().max() < 2e-2 * dw2.abs().max()
