"""A synthetic teacher cache for fast training tests: a fixed random bigram 'teacher' over a tiny vocabulary."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

VOCAB = 48
BOS = 1


@dataclass
class FakeSplit:
    tokens: np.ndarray
    doc_start: np.ndarray
    topk_ids: np.ndarray
    topk_logp: np.ndarray
    tail_logp: np.ndarray


def _split(rng: np.random.Generator, logits: torch.Tensor, n_rows: int, seq_len: int, k: int) -> FakeSplit:
    tokens = rng.integers(2, VOCAB, size=(n_rows, seq_len)).astype(np.int32)
    doc_start = rng.random((n_rows, seq_len)) < 0.05
    doc_start[:, 0] = True  # every row begins with the start token (data.pack_rows)
    tokens[doc_start] = BOS
    logp = torch.log_softmax(logits[torch.from_numpy(tokens).long()], dim=-1)
    top = logp.topk(k, dim=-1)
    rest = logp.scatter(-1, top.indices, float("-inf")).logsumexp(-1)
    return FakeSplit(tokens, doc_start, top.indices.int().numpy(), top.values.float().numpy(),
                     rest.clamp_min(-30.0).float().numpy())


def fake_cache(seq_len: int = 16, k: int = 4, n_train: int = 64, n_val: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    logits = torch.from_numpy(rng.normal(size=(VOCAB, VOCAB)).astype(np.float32) * 3)
    return SimpleNamespace(key=f"fake-{seq_len}-{k}", dir=None,
                           meta={"vocab_size": VOCAB, "k": k, "seq_len": seq_len, "bos_id": BOS},
                           train=_split(rng, logits, n_train, seq_len, k), val=_split(rng, logits, n_val, seq_len, k))


# Dotted overrides that make the tiny profile match fake_cache() and run in about a second.
TINY_OVERRIDES = {"data.seq_len": 16, "cache.k": 4, "train.stages": [1, 2, 3], "train.stage_tokens": [512, 512, 512],
                  "train.batch_size": 8, "train.eval_every": 2, "train.checkpoint_every": 3, "train.dtype": "float32",
                  "student.d_model": 16, "student.n_heads": 2, "student.n_kv_heads": 1, "student.head_dim": 8,
                  "student.d_ff": 32}


def install(monkeypatch_or_none=None):
    """Route normgrow.teacher.ensure_cache to the fake cache (for tests and for the kill/resume subprocess)."""
    import normgrow.teacher as teacher
    cache = fake_cache()
    if monkeypatch_or_none is None:
        teacher.ensure_cache = lambda profile, progress=True: cache
    else:
        monkeypatch_or_none.setattr(teacher, "ensure_cache", lambda profile, progress=True: cache)
    return cache


def sleeping_rank(ranks, started: str) -> None:
    """A rank that marks that it started (a file per rank in `started`), then waits two minutes, saying so each
    second: a job to interrupt."""
    Path(started, f"rank{ranks.rank}").touch()
    for second in range(120):
        print(f"rank {ranks.rank} waiting, {second} s", flush=True)
        time.sleep(1)
