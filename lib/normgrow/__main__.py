"""Command line: python -m normgrow export | cache | run | events (the study, sweep, grid and bench have their own:
python -m normgrow.study, .sweep, .grid, .bench).

``cache`` and ``run`` are what a multi-process job launches (ranks.py), e.g. on 8 GPUs with train.processes: 8 and
teacher.processes: 8 in the profile::

    accelerate launch --num_processes 8 -m normgrow cache --profile paper
    accelerate launch --num_processes 8 -m normgrow run --profile paper --norm post --schedule grow
"""
from __future__ import annotations

import argparse
import os

import yaml

from .cli import parse


def _export(args: argparse.Namespace) -> None:
    from .export import export_student

    print(export_student(args.src, args.out_dir, force=args.force)["message"])


def _overrides(text: str | None) -> dict | None:
    """--overrides: a YAML/JSON mapping of dotted keys, as papermill's -y 'overrides: {...}' takes it."""
    from .config import ParamError
    try:
        value = yaml.safe_load(text) if text else None
    except yaml.YAMLError as err:
        raise ParamError(f"--overrides {text!r} is not YAML ({str(err).splitlines()[0]})") from None
    if value is not None and not isinstance(value, dict):
        raise ParamError(f"--overrides {text!r} must be a mapping, e.g. '{{train.processes: 2}}'")
    return value


def _main_process() -> bool:
    """Rank 0 of a launched job, or the only process: the one that reports."""
    return int(os.environ.get("RANK", "0")) == 0


def _cache(args: argparse.Namespace) -> None:
    from .config import load_profile, writable_outputs_dir
    from .data.teacher_cache import ensure_cache

    writable_outputs_dir()
    cache = ensure_cache(load_profile(args.profile, _overrides(args.overrides)))
    if _main_process():
        print(cache)


def _run(args: argparse.Namespace) -> None:
    from .config import writable_outputs_dir
    from .analysis.regime import run_verdict
    from .runner import record_notebook
    from .train.run import run_variant
    from .train.spec import make_run_spec

    writable_outputs_dir()
    spec = make_run_spec(profile=args.profile, norm=args.norm, schedule=args.schedule, freeze_prefix=args.freeze_prefix,
                         match_active_layer_tokens=args.match_active_layer_tokens, seed=args.seed,
                         run_name=args.run_name, force=args.force, overrides=_overrides(args.overrides))
    summary = run_variant(spec)
    verdict = run_verdict(spec, summary)  # on every process: under accelerate launch its cache opening is collective
    if _main_process():
        print(verdict)
        print(f"{summary['run_name']}: val_ce {summary['val_ce']:.4f} after {summary['tokens']:,} tokens")
        notebook = record_notebook(spec)
        if notebook is not None:
            print(f"executed notebook: {notebook}")


def _events(args: argparse.Namespace) -> None:
    """Event files for the chosen finished runs of a profile (--runs: the study's, by default), a bar over them; with
    --serve, TensorBoard on those runs only (one --logdir_spec entry each), so that its charts open on them."""
    import fnmatch
    import shlex
    import shutil
    import subprocess
    import sys

    from .config import ParamError, profile_name
    from .progress import progress_bar
    from .rundir import SUMMARY, runs_root
    from .study import load_study
    from .train.tracking import TENSORBOARD_DIR, replay_events
    root = runs_root(args.profile)
    finished = sorted(d.name for d in root.iterdir() if (d / SUMMARY).is_file()) if root.is_dir() else []
    patterns = args.runs or ["study"]
    study = {r.name for r in load_study(profile=profile_name(args.profile))} if "study" in patterns else set()
    chosen = [n for n in finished if n in study or "all" in patterns or any(fnmatch.fnmatch(n, p) for p in patterns)]
    if not chosen:
        raise ParamError(f"--runs {' '.join(patterns)}: no finished run of {root} matches (study: the study's runs; "
                         "all: every run; else run names or globs such as 'sweep-*')")
    bar = progress_bar(total=len(chosen), desc="event files", unit="run")
    written = 0
    for name in chosen:
        written += replay_events(root / name)
        bar.update(1)
    bar.close()
    print(f"{len(chosen)} finished runs of {root}: event files written for {written}, the others had theirs")
    if args.serve:
        spec = ",".join(f"{name}:{root / name / TENSORBOARD_DIR}" for name in chosen)
        command = [str(shutil.which("tensorboard", path=os.path.dirname(sys.executable)) or "tensorboard"),
                   "--logdir_spec", spec, *shlex.split(args.serve_args or "")]
        print(f"tensorboard on {len(chosen)} runs of {root}")
        subprocess.run(command, check=False)


COMMANDS = {"export": _export, "cache": _cache, "run": _run, "events": _events}
INPUT_ERRORS = {"export": (FileNotFoundError, FileExistsError), "cache": (), "run": (), "events": ()}
"""Errors of a command that are bad input besides ParamError (a missing source, a destination an export refuses):
one error line and exit 2, as runner.runner_exit answers a bad parameter."""


def main(argv: list[str] | None = None) -> int:
    """The exit code: 0, or 2 after one `error: ...` line for bad input (runner.runner_exit: a bad parameter names
    the key, no traceback)."""
    args = parse("normgrow", argv)
    from .runner import runner_exit
    code = runner_exit(lambda: COMMANDS[args.command](args), INPUT_ERRORS[args.command])
    from .ranks import end_launched_rank, launched_world
    if launched_world() > 1 and code == 0:  # a finished rank of `accelerate launch -m normgrow ...`; a refused
        end_launched_rank()  # one exits with its code, so that the launcher reports the job failed
    return code


if __name__ == "__main__":
    raise SystemExit(main())
