"""Distillation losses on logits, against a sparse top-k teacher, and a memory-bounded head.

Rows: every function works on flattened positions, N = B * L (flatten_batch reshapes a [B, L, ...] batch).
A batch is a mapping of tensors
    targets   [N] long   next-token ids
    topk_ids  [N, k] long  the teacher's top-k token ids
    topk_logp [N, k]     the teacher's log-probabilities of those ids (temperature 1); -inf marks a padding entry
                         (an id outside a restricted student vocabulary, see vocab.py) that repeats a kept id
    tail_logp [N]        log of the teacher's remaining mass, log(1 - sum exp topk_logp) (-inf if none)
    mask      [N] bool   loss counted where True; False for padding and for positions whose next token is a
                         new document's BOS. Every mean is over mask positions only, and masked rows get zero
                         gradient (their inputs must still be finite numbers).

Teacher target (teacher_logp):
    bucket       k + 1 classes: the k cached tokens plus one "tail" class holding the remaining mass
                 (DistillKit's explicit tail); the student's tail class is the sum of its probabilities outside
                 the top-k ids. With k = V (empty tail) this is the dense soft-target CE.
    renormalize  the top-k log-probs renormalised to sum to one; the tail is dropped. The student side stays a
                 full-vocabulary distribution, so the loss also pushes mass off the non-top-k tokens.
Temperature T: student logits / T; the teacher's k(+1) class log-probs / T, renormalised. At T = 1 this is
exact; at T != 1 it tempers the *bucketed* teacher distribution (the tail is one class, not its tokens), which
differs from tempering the full teacher logits. The Hinton et al. T^2 factor, which keeps gradient magnitudes
comparable across temperatures, is applied only in the combined loss (distill_rows), never in topk_soft_ce.

Loss option "ce" reports the soft-target CE; "kl" reports forward KL(p || q) = CE - H(p). The gradient with
respect to the student is the same.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Annotated, Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from ..schema import POSITIVE, UNIT_INTERVAL, Float, Str, one_of, section

TAILS = ("bucket", "renormalize")
LOSSES = ("ce", "kl")


@section
class DistillParams:
    """A profile's distill section (config.Profile): the loss and its mix, each key with its schema (schema.py)."""
    # ce (soft-target cross-entropy) | kl (forward KL; same gradient, reported without H(p))
    loss: Annotated[Str, one_of(LOSSES)] = "ce"
    temperature: Annotated[Float, POSITIVE] = 1.0
    tail: Annotated[Str, one_of(TAILS)] = "bucket"  # bucket (tail mass is one extra class) | renormalize (top-k only)
    # weight of next-token CE in the mix; KD gets 1 - ce_weight
    ce_weight: Annotated[Float, UNIT_INTERVAL] = 0.0


def _check_tail(tail: str) -> None:
    if tail not in TAILS:
        raise ValueError(f"tail={tail!r}; allowed values: {', '.join(TAILS)}")


def teacher_logp(topk_logp: Tensor, tail_logp: Tensor, *, temperature: float = 1.0, tail: str = "bucket") -> Tensor:
    """Teacher target log-probs [N, k+1] (bucket: last column is the tail) or [N, k] (renormalize)."""
    _check_tail(tail)
    logp = topk_logp.float()
    if tail == "bucket":
        logp = torch.cat([logp, tail_logp.float()[:, None]], dim=-1)
    return torch.log_softmax(logp / temperature, dim=-1)


def student_logq(logits: Tensor, topk_ids: Tensor, *, temperature: float = 1.0, tail: str = "bucket") -> Tensor:
    """Student log-probs (float32) over the teacher's classes: [N, k+1] (bucket) or [N, k] (renormalize).

    log q_tail = logsumexp(logits with the top-k entries masked) - logsumexp(logits). Masking uses the most
    negative finite float rather than -inf, so an empty tail (k = V) gives a huge negative log q_tail with
    finite gradients instead of NaN.
    """
    _check_tail(tail)
    z = logits.float() / temperature
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    logq = z.gather(-1, topk_ids) - lse
    if tail == "renormalize":
        return logq
    outside = z.scatter(-1, topk_ids, torch.finfo(z.dtype).min)
    return torch.cat([logq, torch.logsumexp(outside, dim=-1, keepdim=True) - lse], dim=-1)


def topk_soft_ce(logits: Tensor, topk_ids: Tensor, topk_logp: Tensor, tail_logp: Tensor, *,
                 temperature: float = 1.0, tail: str = "bucket") -> Tensor:
    """Per-row soft-target cross-entropy -sum_c p_c log q_c over the teacher's classes: [N] (no T^2 factor)."""
    p = teacher_logp(topk_logp, tail_logp, temperature=temperature, tail=tail).exp()
    logq = student_logq(logits, topk_ids, temperature=temperature, tail=tail)
    return -(p * logq).sum(-1)


def teacher_entropy(topk_logp: Tensor, tail_logp: Tensor, *, temperature: float = 1.0,
                    tail: str = "bucket") -> Tensor:
    """Per-row entropy H(p) [N] of the teacher target; forward KL = topk_soft_ce - teacher_entropy."""
    p = teacher_logp(topk_logp, tail_logp, temperature=temperature, tail=tail).exp()
    return -torch.special.xlogy(p, p).sum(-1)


def next_token_ce(logits: Tensor, targets: Tensor) -> Tensor:
    """Per-row next-token cross-entropy [N] in float32."""
    return F.cross_entropy(logits.float(), targets, reduction="none")


def masked_mean(per_row: Tensor, mask: Tensor) -> Tensor:
    """Mean of per_row over mask positions (0 if none); masked rows contribute neither value nor gradient."""
    return torch.where(mask, per_row, 0.0).sum() / mask.sum().clamp(min=1)


def flatten_batch(batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """[B, L, ...] batch tensors -> [B * L, ...] rows (mask sets the leading shape)."""
    lead = batch["mask"].dim()
    return {name: t.flatten(0, lead - 1) for name, t in batch.items()}


def distill_rows(logits: Tensor, batch: Mapping[str, Tensor], params: DistillParams) -> tuple[Tensor, dict]:
    """Per-row training loss (1 - ce_weight) * T^2 * KD + ce_weight * CE, and per-row metrics.

    Metrics: kd_ce (soft-target CE at params.temperature), ce (next-token CE), and kd_kl (forward KL) when
    params.loss == "kl". The KD term of the loss is kd_ce or kd_kl per params.loss (same gradient).
    """
    T = params.temperature
    kd_ce = topk_soft_ce(logits, batch["topk_ids"], batch["topk_logp"], batch["tail_logp"],
                         temperature=T, tail=params.tail)
    ce = next_token_ce(logits, batch["targets"])
    metrics = {"kd_ce": kd_ce, "ce": ce}
    if params.loss == "kl":
        kd = metrics["kd_kl"] = kd_ce - teacher_entropy(batch["topk_logp"], batch["tail_logp"],
                                                        temperature=T, tail=params.tail)
    elif params.loss == "ce":
        kd = kd_ce
    else:
        raise ValueError(f"distill.loss={params.loss!r}; allowed values: {', '.join(LOSSES)}")
    w = params.ce_weight
    return (1.0 - w) * T * T * kd + w * ce, metrics


def distill_loss(logits: Tensor, batch: Mapping[str, Tensor], params: DistillParams) -> tuple[Tensor, dict]:
    """(masked-mean loss, {metric: masked-mean value (detached)}) from full logits [N, V]."""
    rows, metrics = distill_rows(logits, batch, params)
    mask = batch["mask"]
    return masked_mean(rows, mask), {k: masked_mean(v.detach(), mask) for k, v in metrics.items()}


RowLossFn = Callable[[Tensor, slice], "tuple[Tensor, dict[str, Tensor]]"]


def _masked_chunks(mask: Tensor, chunk_size: int):
    """(rows, mask[rows]) per chunk of rows; all-masked chunks are skipped (they add nothing to the loss, the
    metrics or the gradients)."""
    for start in range(0, mask.shape[0], chunk_size):
        rows = slice(start, start + chunk_size)
        if mask[rows].any():
            yield rows, mask[rows]


def _grad_buffers(hidden: Tensor, head_weight: Tensor, need_dh: bool, need_dw: bool):
    """Zeroed gradient accumulators: dh in hidden's dtype, dw in float32 (summed over chunks)."""
    return (torch.zeros_like(hidden) if need_dh else None,
            torch.zeros_like(head_weight, dtype=torch.float32) if need_dw else None)


def _head_chunks(hidden: Tensor, head_weight: Tensor, row_loss_fn: RowLossFn, mask: Tensor, chunk_size: int,
                 need_dh: bool, need_dw: bool):
    """Loss, metrics and (optionally) the gradients of the loss w.r.t. hidden and head_weight, chunk by chunk."""
    denom = mask.sum().clamp(min=1)
    loss = torch.zeros((), device=hidden.device)
    metrics: dict[str, Tensor] = {}
    dh, dw = _grad_buffers(hidden, head_weight, need_dh, need_dw)
    grad = need_dh or need_dw
    for rows, m in _masked_chunks(mask, chunk_size):
        with torch.enable_grad() if grad else nullcontext():
            h = hidden[rows].detach().requires_grad_(need_dh)
            w = head_weight.detach().requires_grad_(need_dw)
            row_loss, row_metrics = row_loss_fn(F.linear(h, w), rows)  # autocast dtype, if any
            chunk_loss = torch.where(m, row_loss.float(), 0.0).sum() / denom
        if grad:
            grads = iter(torch.autograd.grad(chunk_loss, [t for t in (h, w) if t.requires_grad]))
            if need_dh:
                dh[rows] = next(grads)
            if need_dw:
                dw += next(grads)
        loss = loss + chunk_loss.detach()
        for name, v in row_metrics.items():
            metrics[name] = metrics.get(name, 0.0) + torch.where(m, v.detach().float(), 0.0).sum() / denom
    return loss, metrics, dh, dw


class _HeadWithPrecomputedGrads(torch.autograd.Function):
    """Runs ``chunks(hidden, head_weight, need_dh, need_dw) -> (loss, metrics, dh, dw)`` in forward, which already
    computes the gradients chunk by chunk (so no [N, V] graph is kept); backward only scales them."""

    @staticmethod
    def forward(ctx, hidden, head_weight, chunks):
        loss, metrics, dh, dw = chunks(hidden, head_weight, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        ctx.save_for_backward(dh, dw)
        ctx.head_dtype = head_weight.dtype
        return loss, metrics

    @staticmethod
    def backward(ctx, grad_loss, _grad_metrics):
        dh, dw = ctx.saved_tensors
        return (None if dh is None else dh * grad_loss.to(dh.dtype),
                None if dw is None else (dw * grad_loss).to(ctx.head_dtype), None)


def _run_head(hidden: Tensor, head_weight: Tensor, chunks) -> tuple[Tensor, dict[str, Tensor]]:
    """(loss, metrics) of ``chunks(hidden, head_weight, need_dh, need_dw)``: through _HeadWithPrecomputedGrads when
    a gradient is needed, called directly (no gradients computed) otherwise."""
    if torch.is_grad_enabled() and (hidden.requires_grad or head_weight.requires_grad):
        return _HeadWithPrecomputedGrads.apply(hidden, head_weight, chunks)
    loss, metrics, _, _ = chunks(hidden, head_weight, False, False)
    return loss, metrics


def chunked_head_loss(hidden: Tensor, head_weight: Tensor, row_loss_fn: RowLossFn, mask: Tensor, *,
                      chunk_size: int = 1024) -> tuple[Tensor, dict[str, Tensor]]:
    """Masked mean of row_loss_fn over rows of hidden @ head_weight.T, never holding more than chunk_size x V logits.

    hidden [N, d]; head_weight [V, d]; mask [N] bool. row_loss_fn(logits [n, V], rows: slice) returns
    (per-row loss [n], {metric: per-row values [n]}); rows indexes the batch rows of the chunk. Returns
    (loss, {metric: masked mean (detached)}). With gradients enabled, the forward pass also computes the
    gradients of each chunk (torch.autograd.grad on detached leaves) and accumulates the head's gradient in
    float32; backward only scales them by the incoming gradient. Under no_grad it just evaluates chunk by
    chunk. Under autocast the logits are computed in the autocast dtype; row losses should do their math in
    float32 (all losses in this module do).
    """
    return _run_head(hidden, head_weight, lambda h, w, need_dh, need_dw: _head_chunks(h, w, row_loss_fn, mask,
                                                                                     chunk_size, need_dh, need_dw))


# ------------------------------------------------------------------------------------- fused distillation head
# distill_loss_chunked's gradient path. Each chunk computes its logits once and then, in float32, one logsumexp,
# one exp (in place), the k-column gathers/scatters and the closed-form gradient of distill_rows with respect to the
# logits (no autograd graph over the [n, V] chunk, no masked copy of the chunk for the tail). Same losses as
# distill_rows; the student's tail probability is the sum of its probabilities outside the top-k ids (equal to
# exp(logsumexp(masked logits) - logsumexp(logits)), clamped at the smallest normal float so an empty tail stays
# finite). Gradient, per row, with s = softmax(z), z = logits / T, p the teacher target, q the student's classes:
#   d kd_ce / d z = s - scatter(p_topk)                                   (renormalize)
#                 = s_out * (1 - p_tail / q_tail) + scatter(s_topk - p_topk)  (bucket; s_out = s off the top-k)
#   d loss / d logits = (1 - w) * T * d kd_ce / d z + w * (softmax(logits) - onehot(target))
def _fused_rows(x: Tensor, rows: Mapping[str, Tensor], params: DistillParams, row_weight: Tensor | None,
                x32_buf: Tensor | None = None):
    """(per-row loss, per-row metrics, d(sum row_weight * loss)/d x in x's dtype or None) for logits x [n, V].

    x is a scratch buffer: it is overwritten with the returned gradient. Everything is computed in float32 (in
    x32_buf, an [n, V] float32 buffer, when x is not float32); the gradient is rounded to x's dtype once."""
    _check_tail(params.tail)
    if params.loss not in LOSSES:
        raise ValueError(f"distill.loss={params.loss!r}; allowed values: {', '.join(LOSSES)}")
    T, w, bucket = float(params.temperature), float(params.ce_weight), params.tail == "bucket"
    ids, targets = rows["topk_ids"], rows["targets"]
    x32 = x if x.dtype == torch.float32 else (x.float() if x32_buf is None else x32_buf.copy_(x))
    x_t = x32.gather(-1, targets[:, None])[:, 0]
    z = x32 if T == 1.0 else x32 / T
    logq_k = z.gather(-1, ids)
    # logsumexp by hand: the exponentials are the softmax numerators the gradient needs, so the [n, V] chunk is
    # read once for the max, rewritten once in place (z - max, exp) and read once for the sum.
    zmax = z.amax(-1, keepdim=True)
    e = z.sub_(zmax).exp_()  # exp(z - max), in place: x is consumed (x32 survives when T != 1)
    sumexp = e.sum(-1)
    lse = zmax[:, 0] + sumexp.log()
    lse1 = lse if T == 1.0 else torch.logsumexp(x32, dim=-1)
    ce = lse1 - x_t
    logq_k = logq_k - lse[:, None]
    s_k = logq_k.exp()
    logp = teacher_logp(rows["topk_logp"], rows["tail_logp"], temperature=T, tail=params.tail)
    p = logp.exp()
    if bucket:
        e.scatter_(-1, ids, 0.0)  # the numerators off the top-k ids
        q_tail = (e.sum(-1) / sumexp).clamp_min(torch.finfo(torch.float32).tiny)
        logq = torch.cat([logq_k, q_tail.log()[:, None]], dim=-1)
    else:
        logq = logq_k
    kd_ce = -(p * logq).sum(-1)
    metrics = {"kd_ce": kd_ce, "ce": ce}
    if params.loss == "kl":
        kd = metrics["kd_kl"] = kd_ce + torch.special.xlogy(p, p).sum(-1)
    else:
        kd = kd_ce
    loss = (1.0 - w) * T * T * kd + w * ce
    if row_weight is None:
        return loss, metrics, None
    a = (1.0 - w) * T * row_weight  # scale of d kd_ce / d z in d loss / d logits
    fold_ce = w != 0.0 and T == 1.0  # softmax(logits) = s: fold the CE term into the same pass
    p_k = p[:, :-1] if bucket else p
    if bucket:
        row_scale = a * (1.0 - p[:, -1] / q_tail)
        topk_vals = a[:, None] * (s_k - p_k)
        if fold_ce:
            row_scale = row_scale + w * row_weight
            topk_vals = topk_vals + (w * row_weight)[:, None] * s_k
        g = e.mul_((row_scale / sumexp)[:, None])  # e / sumexp = softmax
        # g is zero on the top-k ids, so adding = setting. A padding entry (vocab.py: teacher probability 0, the id
        # of a kept entry) adds 0, so the kept entry's value stands whatever the order of the scatter.
        g.scatter_add_(-1, ids, topk_vals * (rows["topk_logp"] > float("-inf")))
    else:
        g = e.mul_((((a + w * row_weight) if fold_ce else a) / sumexp)[:, None])
        g.scatter_add_(-1, ids, -a[:, None] * p_k)
    if w != 0.0:
        if not fold_ce:
            g.add_(torch.exp(x32 - lse1[:, None]).mul_((w * row_weight)[:, None]))
        g.scatter_add_(-1, targets[:, None], -(w * row_weight)[:, None])
    return loss, metrics, (g if g is x else x.copy_(g))


# Chunk buffers reused across chunks and steps: a fresh [chunk, V] tensor per chunk costs its page faults (about
# as much as the arithmetic on it on CPU). One entry (the last shape used); release_workspace() frees it.
_WORKSPACE: dict = {}


def _workspace(rows: int, block: int, vocab: int, dtype: torch.dtype, device) -> tuple[Tensor, Tensor | None]:
    key = (rows, block, vocab, dtype, str(device))
    if _WORKSPACE.get("key") != key:
        _WORKSPACE.clear()
        _WORKSPACE.update(key=key, logits=torch.empty(rows, vocab, dtype=dtype, device=device),
                          x32=None if dtype == torch.float32 else torch.empty(block, vocab, device=device))
    return _WORKSPACE["logits"], _WORKSPACE["x32"]


ROW_BLOCK_BYTES = 1 << 20
"""Float32 bytes of logits per row block on CPU. A chunk's logits come from one matmul; _fused_rows then works
through them a block of rows at a time, so its ~6 passes over the float32 rows stay in the core's L2 cache (1-2 MB
on the CPUs measured) instead of streaming a [1024, V] chunk (53 MB at V = 12,981) through memory each time. Every
operation of _fused_rows is row-wise and the losses are reduced over the whole chunk as before, so the values are
bit for bit those of one block per chunk (tests/test_distill.py): not a numerics version; faster by about a
quarter on the cpu profile's head (docs/LOG.md). On CUDA a chunk is one block (small blocks would only add kernel
launches)."""


def _row_block(chunk_rows: int, vocab: int, device) -> int:
    """Rows per _fused_rows call: ROW_BLOCK_BYTES of float32 logits on CPU, the whole chunk elsewhere."""
    if torch.device(device).type != "cpu":
        return chunk_rows
    return max(1, min(chunk_rows, ROW_BLOCK_BYTES // (4 * vocab)))


def _fused_row_blocks(logits: Tensor, rows: Mapping[str, Tensor], params: DistillParams, row_weight: Tensor | None,
                      block: int, x32_buf: Tensor | None):
    """_fused_rows over logits [n, V] a block of rows at a time: (per-row loss [n], per-row metrics [n]); with
    row_weight, logits are overwritten with the gradient."""
    n = logits.shape[0]
    loss = logits.new_empty(n, dtype=torch.float32)
    metrics: dict[str, Tensor] = {}
    for start in range(0, n, block):
        r = slice(start, min(start + block, n))
        b_loss, b_metrics, _ = _fused_rows(logits[r], {k: v[r] for k, v in rows.items()}, params,
                                           None if row_weight is None else row_weight[r],
                                           None if x32_buf is None else x32_buf[:r.stop - r.start])
        loss[r] = b_loss
        for name, v in b_metrics.items():
            metrics.setdefault(name, logits.new_empty(n, dtype=torch.float32))[r] = v
    return loss, metrics


def release_workspace() -> None:
    """Free the fused head's reusable chunk buffers."""
    _WORKSPACE.clear()


def _fused_head_chunks(hidden: Tensor, head_weight: Tensor, batch: Mapping[str, Tensor], params: DistillParams,
                       chunk_size: int, need_dh: bool, need_dw: bool):
    """_head_chunks for the distillation loss with the closed-form logit gradient (see _fused_rows)."""
    mask = batch["mask"]
    denom = mask.sum().clamp(min=1)
    loss = torch.zeros((), device=hidden.device)
    metrics: dict[str, Tensor] = {}
    dh, dw = _grad_buffers(hidden, head_weight, need_dh, need_dw)
    grad = need_dh or need_dw
    dtype = torch.get_autocast_dtype(hidden.device.type) if torch.is_autocast_enabled(hidden.device.type) else None
    h_all = hidden.detach() if dtype is None else hidden.detach().to(dtype)
    w_c = head_weight.detach() if dtype is None else head_weight.detach().to(dtype)
    if dtype is None and h_all.dtype != w_c.dtype:
        raise TypeError(f"hidden ({h_all.dtype}) and head_weight ({w_c.dtype}) differ outside autocast")
    chunk_rows = min(chunk_size, hidden.shape[0])
    block = _row_block(chunk_rows, w_c.shape[0], hidden.device)
    lbuf, x32buf = _workspace(chunk_rows, block, w_c.shape[0], w_c.dtype, hidden.device)
    for rows, m in _masked_chunks(mask, chunk_size):
        h = h_all[rows]
        n = h.shape[0]
        with torch.autocast(hidden.device.type, enabled=False):
            logits = torch.mm(h, w_c.T, out=lbuf[:n])  # the autocast dtype, if any (as chunked_head_loss)
            row_weight = m.float() / denom if grad else None
            row_loss, row_metrics = _fused_row_blocks(logits, {k: v[rows] for k, v in batch.items()}, params,
                                                      row_weight, block, x32buf)
            g = logits  # with row_weight, _fused_rows has written the gradient over the logits
            loss = loss + torch.where(m, row_loss, 0.0).sum() / denom
            for name, v in row_metrics.items():
                metrics[name] = metrics.get(name, 0.0) + torch.where(m, v, 0.0).sum() / denom
            if grad:
                # the gradient matmuls run in the logits' dtype, as autograd would
                if need_dh:
                    dh[rows] = g @ w_c
                if need_dw:
                    dw += (h.T @ g).T  # h^T g reads g row-major (no transposed copy of the chunk)
    return loss.detach(), {k: v.detach() for k, v in metrics.items()}, dh, dw


DEFAULT_CHUNK = 1024


def distill_loss_chunked(hidden: Tensor, head_weight: Tensor, batch: Mapping[str, Tensor], params: DistillParams,
                         *, chunk_size: int = DEFAULT_CHUNK, fused: bool = True) -> tuple[Tensor, dict]:
    """distill_loss computed from the final hidden state [N, d] with a memory-bounded head.

    fused=True (default) runs _fused_rows: one logsumexp and one exp per chunk, in reused buffers, and with
    gradients the closed-form logit gradient (no autograd graph over the chunk). fused=False runs the generic
    chunked_head_loss with autograd per chunk (the reference implementation, same values and gradients up to
    float rounding).
    """
    if not fused:
        def row_loss_fn(logits: Tensor, rows: slice):
            return distill_rows(logits, {k: v[rows] for k, v in batch.items()}, params)

        return chunked_head_loss(hidden, head_weight, row_loss_fn, batch["mask"], chunk_size=chunk_size)
    return _run_head(hidden, head_weight, lambda h, w, need_dh, need_dw: _fused_head_chunks(h, w, batch, params,
                                                                                           chunk_size, need_dh, need_dw))


# The reported validation metrics: next-token CE ("ce") and soft-target CE against the teacher at T = 1 with the
# tail bucket ("kd_ce"), whatever loss a run trains with.
REPORTED = DistillParams()


@torch.no_grad()
def eval_sums(hidden: Tensor, head_weight: Tensor, batch: Mapping[str, Tensor]) -> tuple[dict[str, float], int]:
    """({"ce": sum, "kd_ce": sum} over mask positions, number of mask positions) of the REPORTED metrics, through
    the fused head, so that callers can average exactly over many batches."""
    _, means = distill_loss_chunked(hidden, head_weight, batch, REPORTED)
    count = int(batch["mask"].sum())
    return {k: means[k].item() * count for k in ("ce", "kd_ce")}, count
