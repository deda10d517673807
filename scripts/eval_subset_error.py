"""The validation subset's error against the whole split (docs/DESIGN.md, "Evaluation"), on finished runs: each run's
final student evaluated row by row over the whole validation split; the whole split's CE, the subset's (the rows of
train.evaluate.subset_rows), their difference, and the standard error of the subset's mean predicted from the spread of
the rows' CEs (a sample of n of N rows without replacement: sd / sqrt(n) x sqrt(1 - n / N)); and, for the first two
runs, the paired per-row difference of their CEs: its spread and the standard error of the gap between the two runs
on N rows and on the first N/2 (what a validation split half as large would read), the part of a gap between two
students that depends on which rows the split holds.
Run: .venv/bin/python scripts/eval_subset_error.py PROFILE RUN [RUN ...] (runs of outputs/runs/PROFILE/, eager
blocks, one thread)."""
import json
import sys

import numpy as np
import torch

from normgrow.data.teacher_cache import open_cache
from normgrow.data.vocab import VocabMap
from normgrow.rundir import run_path
from normgrow.student.model import load_student
from normgrow.train.evaluate import evaluate, subset_rows
from normgrow.config import Profile, profile_from_dict
from normgrow.utils import resolve_dtype


def main(profile: str, runs: list[str]) -> None:
    torch.set_num_threads(1)
    per_run = []
    for name in runs:
        run_dir = run_path(profile, name)
        recorded = json.loads((run_dir / "config.json").read_text())["profile"]
        prof: Profile = profile_from_dict({k: v for k, v in recorded.items() if k != "name"}, profile)
        cache = open_cache(prof)
        model = load_student(run_dir / "checkpoints" / "final.pt")
        vocab = VocabMap.for_cache(cache, prof.student.vocab)
        dtype = resolve_dtype(prof.train.dtype, torch.device("cpu"))
        n_rows = cache.val.tokens.shape[0]
        sums, counts = np.zeros(n_rows), np.zeros(n_rows)
        for r in range(n_rows):
            m = evaluate(model, cache.val, np.array([r]), 1, torch.device("cpu"), dtype, vocab)
            sums[r], counts[r] = m["val_ce"] * m["eval_positions"], m["eval_positions"]
        rows = subset_rows(n_rows, prof.train.eval_tokens, prof.data.seq_len)
        full, sub = sums.sum() / counts.sum(), sums[rows].sum() / counts[rows].sum()
        per_row = sums / counts
        se = per_row.std(ddof=1) / np.sqrt(len(rows)) * np.sqrt(1 - len(rows) / n_rows)
        print(f"{name}: whole split {full:.4f}, subset of {len(rows)}/{n_rows} rows {sub:.4f}, difference "
              f"{sub - full:+.4f}; predicted standard error {se:.4f} (row CE sd {per_row.std(ddof=1):.3f})")
        per_run.append((sums, counts))
    if len(per_run) >= 2:
        (a, na), (b, nb) = per_run[:2]
        diff = a / na - b / nb
        half = len(diff) // 2
        gap = lambda n: a[:n].sum() / na[:n].sum() - b[:n].sum() / nb[:n].sum()
        print(f"{runs[0]} - {runs[1]}: {gap(len(diff)):+.4f} on {len(diff)} rows, {gap(half):+.4f} on the first "
              f"{half}; per-row difference sd {diff.std(ddof=1):.4f}, standard error of the gap "
              f"{diff.std(ddof=1) / np.sqrt(len(diff)):.4f} on {len(diff)} rows and "
              f"{diff[:half].std(ddof=1) / np.sqrt(half):.4f} on {half}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
