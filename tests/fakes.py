"""Fakes for fast tests: a synthetic teacher cache (a fixed random bigram "teacher" over a tiny vocabulary) and a
run killed mid-phase in its own process (the resume tests)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
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
    target_logp: np.ndarray


def _split(rng: np.random.Generator, logits: torch.Tensor, n_rows: int, seq_len: int, k: int) -> FakeSplit:
    tokens = rng.integers(2, VOCAB, size=(n_rows, seq_len)).astype(np.int32)
    doc_start = rng.random((n_rows, seq_len)) < 0.05
    doc_start[:, 0] = True  # every row begins with the start token (data.pack_rows)
    tokens[doc_start] = BOS
    logp = torch.log_softmax(logits[torch.from_numpy(tokens).long()], dim=-1)
    top = logp.topk(k, dim=-1)
    rest = logp.scatter(-1, top.indices, float("-inf")).logsumexp(-1)
    target = logp[:, :-1].gather(-1, torch.from_numpy(tokens[:, 1:, None]).long())[..., 0]  # log p(next token)
    return FakeSplit(tokens, doc_start, top.indices.int().numpy(), top.values.float().numpy(),
                     rest.clamp_min(-30.0).float().numpy(), torch.nn.functional.pad(target, (0, 1)).numpy())


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
    """Route normgrow.data.teacher_cache.ensure_cache to the fake cache (for tests and for the kill/resume subprocess)."""
    import normgrow.data.teacher_cache as teacher_cache
    cache = fake_cache()
    if monkeypatch_or_none is None:
        teacher_cache.ensure_cache = lambda profile, progress=True: cache
    else:
        monkeypatch_or_none.setattr(teacher_cache, "ensure_cache", lambda profile, progress=True: cache)
    return cache


def sleeping_rank(ranks, started: str) -> None:
    """A rank that marks that it started (a file per rank in `started`), then waits two minutes, saying so each
    second: a job to interrupt."""
    Path(started, f"rank{ranks.rank}").touch()
    for second in range(120):
        print(f"rank {ranks.rank} waiting, {second} s", flush=True)
        time.sleep(1)


# ------------------------------------------------------------------------ a run killed mid-phase (resume tests)

KILL_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
import fakes
fakes.install()
import normgrow.train.run as train
from normgrow.train.spec import make_run_spec
slow = train.Batches.__call__
def slowed(self, step):
    time.sleep(0.15)
    return slow(self, step)
train.Batches.__call__ = slowed
train.run_variant(make_run_spec(profile="tiny", norm="pre", schedule="grow",
                                overrides=fakes.TINY_OVERRIDES | {extra!r}, run_name="pre-grow-s0"), progress=False)
"""


def kill_mid_phase(run_dir: Path, extra: dict) -> None:
    """Start pre-grow-s0 (slowed to 0.15 s a step) in its own process group with the overrides `extra`, and SIGKILL
    the whole group mid-phase 1: after a checkpoint exists, past the first phase end, before the run finishes."""
    script = KILL_SCRIPT.format(tests=str(Path(__file__).parent), extra=extra)
    proc = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy(), start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        metrics = run_dir / "metrics.jsonl"
        lines = metrics.read_text().count('"kind": "train"') if metrics.exists() else 0
        if lines >= 6 and (run_dir / "checkpoints" / "last.pt").exists():
            break
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the run's forked ranks too, if any
    proc.wait()
    assert not (run_dir / "summary.json").exists()
