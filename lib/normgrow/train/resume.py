"""A run's directory before and around its loop: prepare_run_dir creates the directory, or checks that the run it
holds is this one (identity.identity_conflict); load_resume_state reads what a restarted run continues from
(checkpoints/last.pt, else the latest readable phase checkpoint); MetricsLog keeps metrics.jsonl, cut back to the
checkpoint's line count on resume. The loop (run.py) writes the checkpoints and the summary."""
from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from ..config import ParamError
from ..identity import identity_conflict
from ..rundir import (CHECKPOINTS, CONFIG, LAST, LOCK, RunDirError, Summary, is_finished, phase_checkpoints,
                      read_identity, read_summary, set_aside_advice)
from ..utils import atomic_write_json, machine_description
from .spec import RunSpec
from .tracking import RunTrackers


class MetricsLog:
    """metrics.jsonl, append-only; truncated to a checkpoint's line count on resume, and refused (RunDirError) when it
    holds fewer lines than that count. Each record is mirrored to the run's trackers (tracking.py), which are cut
    back to the resumed step in the same way."""

    def __init__(self, path: Path, keep_lines: int, open_trackers: Callable[[], RunTrackers] | None = None):
        lines = path.read_text().splitlines(keepends=True) if path.exists() else []
        if len(lines) < keep_lines:  # resuming would finish the run with a hole in its curve
            raise RunDirError(f"{path} holds {len(lines)} records where the run's checkpoint counted {keep_lines}: "
                              "records were lost (the file removed or cut short). Restore the file to resume the "
                              f"run, or {set_aside_advice(path.parent)} to train it again")
        path.write_text("".join(lines[:keep_lines]))
        self.path, self.lines = path, keep_lines
        self.trackers = open_trackers() if open_trackers is not None else None  # after the check: they hold state

    def write(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, sort_keys=True, allow_nan=False) + "\n")
        self.lines += 1
        if self.trackers is not None:
            self.trackers.log(record)

    def close(self) -> None:
        if self.trackers is not None:
            self.trackers.finish()


def prepare_run_dir(spec: RunSpec, teacher_key: str) -> tuple[Path, Summary | None]:
    """Create or validate the run directory (the caller holds its lock). Returns (dir, summary if finished).

    A directory holding a run (finished or not) with another identity is never reused nor overwritten; force=True
    empties only a directory inside outputs/runs/<profile>/ (run_path checks), keeping its LOCK, and never through a
    symlink (the directory it points to may be another run's)."""
    run_dir = spec.dir
    if spec.force and run_dir.is_symlink():
        raise ParamError(f"{run_dir} is a link to {os.readlink(run_dir)}; force=True would empty the directory it "
                         f"points to. To train this run afresh, {set_aside_advice(run_dir)}")
    if spec.force:
        for child in run_dir.iterdir():
            if child.name != LOCK:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    identity = spec.identity() | {"teacher_key": teacher_key}
    existing = read_identity(run_dir)
    differing = identity_conflict(existing, identity, is_finished(run_dir)) if existing is not None else []
    if differing:
        state = "a finished" if is_finished(run_dir) else "an unfinished"
        discard = set_aside_advice(run_dir) if run_dir.is_symlink() else "pass force=True to discard it"
        raise ParamError(f"{run_dir} holds {state} run with different parameters ({', '.join(differing[:6])}); "
                         f"{discard}, or choose another run_name")
    if is_finished(run_dir):
        return run_dir, read_summary(run_dir)
    (run_dir / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    environment = {"torch": torch.__version__, "python": platform.python_version(), **machine_description()}
    atomic_write_json(run_dir / CONFIG, identity | {"environment": environment})
    return run_dir, None


def new_counters() -> dict:
    """A run's counters at step 0 (a checkpoint carries them; summary.json is made from them)."""
    return {"step": 0, "tokens": 0, "active_layer_tokens": 0, "trainable_layer_tokens": 0, "wall_s": 0.0,
            "eval_s": 0.0, "checkpoint_s": 0.0, "metrics_lines": 0, "phases": [], "val_ce_after_growth": None}


def load_resume_state(run_dir: Path, optimizer_on_grow: str) -> dict | None:
    """What a restarted run continues from: checkpoints/last.pt, or, when that file is damaged, the latest readable
    phase checkpoint (the damaged file is kept as last.pt.damaged and the fallback is printed). A phase checkpoint
    carries the run's counters but no optimiser state; the next phase builds a fresh optimiser anyway when
    train.optimizer_on_grow is reset, so the result is the same as from last.pt at that step. Under 'keep' it would
    not be, so that case stops with the way forward. None: start from scratch."""
    last = run_dir / CHECKPOINTS / LAST
    damaged = None
    if last.exists():
        try:
            return torch.load(last, map_location="cpu", weights_only=False)
        except Exception as err:  # torch raises RuntimeError / EOFError / pickle errors for a damaged zip
            damaged = last.with_name(LAST + ".damaged")
            os.replace(last, damaged)
            print(f"{last} is damaged ({type(err).__name__}: {str(err).splitlines()[0][:120]}); kept as {damaged}")
    checkpoints = phase_checkpoints(run_dir)
    for phase, depth, path in reversed(checkpoints):
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as err:
            print(f"{path} is damaged ({type(err).__name__}); trying an earlier phase checkpoint")
            continue
        if "counters" not in state or (optimizer_on_grow != "reset" and phase < checkpoints[-1][0]):
            break
        print(f"resuming {run_dir.name} from its phase checkpoint {path.name} (step {state['counters']['step']})")
        return state | {"optimizer": None}
    if damaged is None:
        return None  # killed before its first resume checkpoint: nothing to continue from
    raise RunDirError(f"{last} is damaged (kept as {damaged}) and no phase checkpoint of {run_dir} can replace it "
                      "(none readable with the run's counters, or train.optimizer_on_grow=keep needs the lost "
                      "optimiser state); rerun with force=True to train the run again from scratch")
