"""Synthetic distillation batches: teacher logits over a small vocabulary and what the top-k cache would store
for them (the distill, fused-head and vocabulary tests share them)."""
from __future__ import annotations

import torch

N, V, D = 23, 50, 16


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def teacher_cache(t_logits, k):
    """What the top-k cache stores for full teacher logits."""
    logp = t_logits.log_softmax(-1)
    topk_logp, topk_ids = logp.topk(k, dim=-1)
    tail = torch.log1p(-topk_logp.exp().sum(-1).clamp(max=1.0)) if k < t_logits.shape[-1] else \
        torch.full(t_logits.shape[:-1], float("-inf"))
    return topk_ids, topk_logp, tail


def make_batch(k, seed=0, n=N):
    g = gen(seed)
    t_logits = 2 * torch.randn(n, V, generator=g)
    ids, logp, tail = teacher_cache(t_logits, k)
    mask = torch.rand(n, generator=g) > 0.3
    mask[0] = True
    return t_logits, {"targets": torch.randint(V, (n,), generator=g), "topk_ids": ids, "topk_logp": logp,
                      "tail_logp": tail, "mask": mask}
