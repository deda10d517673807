"""Evaluation of a student on the validation split: which steps evaluate and on which rows (evaluation_plan,
subset_rows), and the metrics (evaluate: next-token CE and the soft-target CE against the teacher).

The whole validation split where a claim, a gate or the summary reads the number (phase ends, the flatness gate's
point); a fixed evenly spaced subset of train.eval_tokens at the points only curves draw and at those read against
another point on the same rows (step 0, each grown model before its first update); each record says which
(full_split), and a whole-split record also carries the subset's values, from the same forward. docs/DESIGN.md,
"Evaluation", states the subset's standard error and what evaluations cost.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from . import distill
from ..data.batches import rows_to_batch
from ..data.vocab import VocabMap
from ..ranks import Ranks
from ..rundir import FLAT_TAIL, GROWTH_EVAL
from ..student.model import Student
from .growth import Phase


def autocast(device: torch.device, dtype: torch.dtype):
    """torch.autocast in dtype on the device (the forward of a step and of an evaluation); nothing in float32."""
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def eval_stance(device: torch.device):
    """Evaluations run eager on CPU, even where the blocks are compiled for training: compiling the no-grad graph
    costs more than a cpu run's few evaluations save (docs/LOG.md). Elsewhere (CUDA) through the compiled blocks."""
    return torch.compiler.set_stance("force_eager") if device.type == "cpu" else nullcontext()


EVAL_BATCH_TOKENS = 4096
"""Tokens per evaluation batch: larger than a training batch, which is faster (docs/LOG.md); the head still runs in
chunks of distill.DEFAULT_CHUNK rows, so memory grows only by the body's activations of one batch."""


def subset_rows(n_rows: int, eval_tokens: int, seq_len: int) -> np.ndarray:
    """The validation rows of a subset evaluation: train.eval_tokens // seq_len rows spaced evenly over the split (its
    first and last row included), so that every part of the corpus the split holds is in it; every row when
    eval_tokens is 0 or covers the split. Fixed for a profile: every subset point of every run reads the same rows."""
    n = n_rows if eval_tokens == 0 else max(1, min(n_rows, eval_tokens // seq_len))
    return np.unique(np.linspace(0, n_rows - 1, n).round().astype(np.int64))


@torch.no_grad()
def evaluate(model: Student, split, rows: np.ndarray, batch_size: int, device, dtype, vocab: VocabMap,
             ranks: Ranks = Ranks(), subset: np.ndarray | None = None) -> dict:
    """Student next-token CE and soft-target CE against the teacher (T=1, tail bucket) on the given validation rows
    (ascending), averaged over loss_mask positions (nats/token). Under data parallelism the ranks take the batches
    in turn and their sums are added. subset: rows of ``rows`` whose own means are returned too (val_ce_subset,
    val_kd_ce_subset) from the same forward: they go first, in batches of their own, so that those means equal an
    evaluation of the subset alone bit for bit and the whole split costs no second pass."""
    was_training = model.training
    model.eval()
    first = np.empty(0, np.int64) if subset is None else subset
    chunks = lambda part: [part[i:i + batch_size] for i in range(0, len(part), batch_size)]
    batches = [(True, c) for c in chunks(first)] + [(False, c) for c in chunks(np.setdiff1d(rows, first))]
    sums = {"val_ce": 0.0, "val_kd_ce": 0.0, "val_ce_subset": 0.0, "val_kd_ce_subset": 0.0}
    count = count_subset = 0
    for in_subset, chunk in batches[ranks.rank::ranks.world]:
        batch = rows_to_batch(split, chunk, device, vocab)
        rows_ = distill.flatten_batch(batch)
        with eval_stance(torch.device(device)), autocast(device, dtype):
            batch_sums, batch_count = distill.eval_sums(model.hidden(batch["tokens"]).flatten(0, 1),
                                                        model.head_weight, rows_)
        sums["val_ce"] += batch_sums["ce"]
        sums["val_kd_ce"] += batch_sums["kd_ce"]
        count += batch_count
        if in_subset:
            sums["val_ce_subset"] += batch_sums["ce"]
            sums["val_kd_ce_subset"] += batch_sums["kd_ce"]
            count_subset += batch_count
    model.train(was_training)
    *totals, count, count_subset = ranks.sum([*sums.values(), count, count_subset])
    means = {k: v / max(int(n), 1) for (k, v), n in zip(zip(sums, totals), (count, count, count_subset, count_subset))}
    return ({k: means[k] for k in ("val_ce", "val_kd_ce")} | {"eval_positions": int(count)}
            | ({k: means[k] for k in ("val_ce_subset", "val_kd_ce_subset")} if subset is not None else {}))


@dataclass(frozen=True)
class Evaluation:
    """An evaluation after a step: its metrics.jsonl kind, and whether it covers the whole validation split (full)
    or the fixed subset (subset_rows)."""
    kind: str
    full: bool


def evaluation_plan(phases: list[Phase], params) -> dict[int, Evaluation]:
    """The evaluations a run makes after its steps, by global step. Full split where a claim, a gate or the summary
    reads the number: each phase's last step (phase_end: the phase tables, the final val_ce) and the last eval_every
    point at or before 1 - FLAT_TAIL of the run's steps (the regime gate's flatness reads it beside the first and the
    final points). The fixed subset elsewhere: eval every eval_every steps and GROWTH_EVAL at eval_after_growth steps
    into a grown phase, points only curves draw (docs/DESIGN.md, "Evaluation", states the subset's standard error).
    Besides these a run evaluates its untrained model at step 0 and each grown model before its first update, both
    on the subset (start_run, train_phase): the gate's start and the growth jump, each against a point on the same
    rows."""
    total = sum(p.steps for p in phases)
    gate_step = int((1 - FLAT_TAIL) * total) // params.eval_every * params.eval_every
    plan, start = {}, 0
    for phase in phases:
        for step in range(start + 1, start + phase.steps + 1):
            if step == start + phase.steps:
                plan[step] = Evaluation("phase_end", True)
            elif step % params.eval_every == 0:
                plan[step] = Evaluation("eval", step == gate_step)
            elif phase.index and step - start in params.eval_after_growth:
                plan[step] = Evaluation(GROWTH_EVAL, False)
        start += phase.steps
    return plan
