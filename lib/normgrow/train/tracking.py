"""Experiment tracking: every record of a run's metrics.jsonl mirrored to the trackers of ``train.trackers``, through
accelerate's tracker API (accelerate.tracking), so a researcher can open the run beside other projects' runs.

Choices:
  - metrics.jsonl stays the record the study counts (rundir.read_metrics); a tracker is a view of the same records,
    written at the same moments (train.MetricsLog.write), never read back by the toolkit.
  - ``tensorboard`` by default: local and offline, event files in ``<run>/tensorboard/`` (ignored by git like the
    checkpoints); ``make tensorboard`` opens every run of outputs/runs/, after ``python -m normgrow events`` has
    replayed the metrics.jsonl of finished runs without event files (replay_events: the committed runs). ``wandb`` (offline unless WANDB_MODE says
    otherwise: no machine here reaches a server) and ``trackio`` when installed and chosen in the profile; a chosen
    tracker that is not installed is refused before any work (missing_trackers), naming the package to install.
  - Tags: ``train/<key>`` for every number of a train record (loss, lr, grad_norm, tok_s and the loss terms),
    ``val/ce`` and ``val/kd_ce`` for whole-split evaluations, ``val/ce_subset`` and ``val/kd_ce_subset`` for the
    subset's rows (the subset points, and the subset's values a whole-split evaluation records: one curve),
    ``run/depth`` and ``run/phase`` (the phase boundaries: depth steps up at each growth), ``growth/depth``,
    ``growth/val_ce_before`` and ``growth/val_ce_after`` at each growth's step (the growth record),
    ``boundary_rms/<token group>/h<i>`` at each evaluation (the residual stream's scale at every block boundary on the
    diagnostics' fixed batch: the boundary record), all against the
    optimizer step; the run's recorded parameters as hyperparameters, once, in the run's own event file (accelerate's
    store_init_configuration writes them as a run of their own beside it, which TensorBoard lists as another run).
  - Resume: metrics.jsonl is cut back to the checkpoint's last line; TensorBoard's ``purge_step`` drops the events
    after the resumed step in the same way, so each step appears once in both.
  - Not part of a run's identity (identity.NOT_COMPARED): where a run is mirrored does not change what it computes.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..rundir import BOUNDARY, GROWTH

TRACKERS = ("tensorboard", "wandb", "trackio")
"""Allowed values of train.trackers (checked by config._check_cross: a list of them)."""
TENSORBOARD_DIR = "tensorboard"  # <run>/tensorboard/
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}


def missing_trackers(names) -> str | None:
    """Why the chosen trackers cannot run here (one is not installed: the message names the package), or None;
    make_run_spec refuses the run with it before any work."""
    missing = [n for n in names if importlib.util.find_spec(_PACKAGES[n]) is None]
    if not missing:
        return None
    return (f"train.trackers chooses {', '.join(missing)}, not installed here: pip install "
            f"{' '.join(_PACKAGES[n] for n in missing)} (or set train.trackers: [] to log only metrics.jsonl)")


def _flat(config: dict, prefix: str = "") -> dict:
    """Dotted keys with str/int/float/bool values (what every tracker's hyperparameter store accepts)."""
    out = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= _flat(v, key + ".")
        else:
            out[key] = v if isinstance(v, (bool, int, float, str)) else str(v)
    return out


def _tensorboard_hparams(writer, values: dict) -> None:
    """The run's parameters as TensorBoard hyperparameters in the writer's own event file (torch's hparams summary
    written there, as SummaryWriter.add_hparams would write into a new subfolder)."""
    from torch.utils.tensorboard.summary import hparams
    for summary in hparams(values, {}):
        writer.file_writer.add_summary(summary)
    writer.flush()


class RunTrackers:
    """The trackers of one run (rank 0 only): ``log(record)`` for each metrics.jsonl record, ``finish()`` at the end."""

    def __init__(self, names, run_dir: Path, run_name: str, config: dict, resume_step: int):
        from accelerate import PartialState
        from accelerate.tracking import TensorBoardTracker, TrackioTracker, WandBTracker

        # accelerate's tracker logging needs its process state; a data-parallel rank has it, a single process gets it
        # for the run and gives it back at finish(): a process state left behind would be inherited by the ranks a
        # later data-parallel run forks, and each would read rank 0 of 1 from it
        self.owns_state = not PartialState._shared_state
        PartialState()
        self.trackers = []
        for name in names:
            if name == "tensorboard":
                # purge_step: events at or after it (written after the checkpoint resumed from) are dropped
                tracker = TensorBoardTracker(TENSORBOARD_DIR, run_dir,
                                             purge_step=resume_step + 1 if resume_step else None)
            elif name == "wandb":
                os.environ.setdefault("WANDB_MODE", "offline")
                tracker = WandBTracker(run_name, dir=str(run_dir))
            else:
                tracker = TrackioTracker(run_name)
            tracker.main_process_only = False  # only rank 0 builds trackers: no accelerate process state needed
            tracker.start()
            if not resume_step:
                if name == "tensorboard":
                    _tensorboard_hparams(tracker.writer, _flat(config))
                else:
                    tracker.store_init_configuration(_flat(config))
            self.trackers.append(tracker)

    def log(self, record: dict) -> None:
        kind, step = record["kind"], record["step"]
        if kind == "train":
            values = {f"train/{k}": v for k, v in record.items()
                      if k not in ("kind", "step", "phase", "depth") and isinstance(v, (int, float))}
            values |= {"run/depth": record["depth"], "run/phase": record["phase"]}
        elif kind == BOUNDARY:
            values = {f"boundary_rms/{group}/h{i}": v for group, per in record["rms"].items()
                      for i, v in enumerate(per) if v is not None}
        elif kind == GROWTH:
            values = {"growth/depth": record["depth"], "growth/val_ce_before": record["val_ce_before"],
                      "growth/val_ce_after": record["val_ce_after"]}
        elif record.get("full_split", True):  # eval, phase_end, growth_eval; with the subset's values where recorded
            values = {"val/ce": record["val_ce"], "val/kd_ce": record["val_kd_ce"]} | (
                {"val/ce_subset": record["val_ce_subset"], "val/kd_ce_subset": record["val_kd_ce_subset"]}
                if "val_ce_subset" in record else {})
        else:
            values = {"val/ce_subset": record["val_ce"], "val/kd_ce_subset": record["val_kd_ce"]}
        for tracker in self.trackers:
            tracker.log(values, step=step)

    def finish(self) -> None:
        """Close the trackers (again: nothing); called when the run finishes or stops (train.train_ranks)."""
        from accelerate import PartialState
        for tracker in self.trackers:
            tracker.finish()
        self.trackers = []
        if self.owns_state:
            PartialState._reset_state()
            self.owns_state = False


def replay_events(run_dir: Path) -> bool:
    """Event files for a finished run that has none (a clone's committed runs keep only config.json, metrics.jsonl
    and summary.json): its metrics.jsonl replayed through a tensorboard tracker, its recorded parameters as the
    hyperparameters, as the run would have written them. Whether it wrote them (False: a run with event files, or
    not finished)."""
    from ..rundir import CONFIG, SUMMARY, read_metrics
    from ..utils import read_json
    run_dir = Path(run_dir)
    if (run_dir / TENSORBOARD_DIR).is_dir() or not (run_dir / SUMMARY).is_file():
        return False
    trackers = RunTrackers(["tensorboard"], run_dir, run_dir.name, read_json(run_dir / CONFIG), 0)
    try:
        for record in read_metrics(run_dir):
            trackers.log(record)
    finally:
        trackers.finish()
    return True
