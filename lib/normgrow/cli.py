"""The command line of every command: ``python -m normgrow`` (export, cache, run), ``normgrow.study``,
``normgrow.sweep``, ``normgrow.grid``, ``normgrow.bench`` and ``normgrow.results``, one parser each (PARSERS),
built from the standard library alone.

Choices:
  - The parsers live here, not in the command modules, because those import torch (through config and utils) at
    their top: a command module run as a script calls parse_early before its own imports, so ``--help`` and a usage
    error come back in well under a second, and main parses again with the same parser (no side effects: cheap).
  - Every command that reads a profile takes ``--profile`` with the default cpu, and every command takes
    ``--outputs``: the outputs root, exactly as setting NORMGROW_OUTPUTS (paths.outputs_dir's rule: a relative path
    is the repository's, whatever the working directory). Each command's epilog says what it writes where.
  - Allowed values that only a heavy module knows (the placements of student/placements.py, the bench's dtypes) are
    not parser choices: the command checks them with its run's parameters and names every allowed value then.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from .paths import profile_names
from .train.growth import SCHEDULES

DEFAULT_PROFILE = "cpu"
ROOT = "under the outputs root (--outputs, else NORMGROW_OUTPUTS, else outputs/ of the repository)"


def _parser(prog: str, description: str, writes: str, profile: bool = True, **kwargs) -> argparse.ArgumentParser:
    """A command's parser with the options every command shares: --outputs and (when it reads one) --profile."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=f"Writes, {ROOT}: {writes}.", **kwargs)
    add_shared(parser, profile)
    return parser


def add_shared(parser: argparse.ArgumentParser, profile: bool = True) -> None:
    if profile:
        parser.add_argument("--profile", default=DEFAULT_PROFILE, help="a profile: a name of params/profiles "
                            f"({', '.join(profile_names())}) or the path of a profile file, whose runs go under "
                            f"outputs/runs/<its file stem> (default: {DEFAULT_PROFILE})")
    parser.add_argument("--outputs", metavar="DIR", help="outputs root, the same as setting NORMGROW_OUTPUTS=DIR "
                        "(relative to the repository; default: NORMGROW_OUTPUTS, else outputs/ of the repository)")


def _seeds(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--seeds", nargs="+", help=f"{what}: seeds and inclusive ranges, e.g. 0 1 2, 0-5, or 0-2 7")


def _jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, help="runs executed at once, each in a worker process (default: "
                        "params/study.yaml jobs for the profile, else 1)")


def add_executor(parser: argparse.ArgumentParser) -> None:
    """The executor's flags (runner.load_executor: each over params/executors.yaml)."""
    parser.add_argument("--executor", choices=("local", "slurm"), help="local: worker processes on this machine; "
                        "slurm: every run one SLURM job, the teacher cache one job (default: params/executors.yaml)")
    parser.add_argument("--partition", help="slurm: the partition of the jobs (default: params/executors.yaml, else "
                        "the cluster's)")
    parser.add_argument("--time-limit", type=int, metavar="MIN", help="slurm: minutes per run job; a job that reaches "
                        "it is requeued and resumes (default: params/executors.yaml)")
    parser.add_argument("--cpus-per-run", type=int, help="slurm: CPUs of each run's job (default: "
                        "params/executors.yaml)")
    parser.add_argument("--gpus-per-run", type=int, help="slurm: GPUs of each run's job (default: "
                        "params/executors.yaml)")
    parser.add_argument("--in-flight", type=int, help="slurm: run jobs queued or running at once (default: "
                        "params/executors.yaml)")


def _processes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", type=int, help="processes (CPU ranks or GPUs) of each run (default: the "
                        "profile's train.processes)")


def normgrow_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m normgrow", description=(
        "export a student, build a teacher cache, train one run, or rebuild TensorBoard event files (the study, "
        "sweep, grid and bench have their own commands: python -m normgrow.study, .sweep, .grid, .bench)"))
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", description="Export a trained student: Qwen3ForCausalLM (pre-norm) or a "
                            "normgrow checkpoint (other placements).", epilog="Writes out_dir only.",
                            help="export a student: Qwen3ForCausalLM (pre) or normgrow checkpoint (others)")
    export.add_argument("src", help="a run dir (uses checkpoints/final.pt) or a checkpoint .pt file")
    export.add_argument("out_dir", help="output folder (created; never a run directory or inside outputs/runs)")
    export.add_argument("--force", action="store_true",
                        help="write into an existing non-empty folder (overwrites the exported files; deletes nothing)")
    add_shared(export, profile=False)
    cache = sub.add_parser("cache", description="Build (or check) a profile's teacher cache, on teacher.processes "
                           "ranks.", epilog=f"Writes, {ROOT}: teacher/<key>/ and data/<key>/.",
                           help="build (or check) a profile's teacher cache, on teacher.processes ranks")
    run = sub.add_parser("run", description="One run of the study, as notebooks/run_variant.ipynb does it, with a "
                         "progress bar; a finished run is returned without training, an interrupted one resumed.",
                         epilog=f"Writes, {ROOT}: runs/<profile>/<run>/ (config.json, metrics.jsonl, summary.json, "
                         "checkpoints/, run.ipynb: its executed notebook).",
                         help="one run of the study, as notebooks/run_variant.ipynb does it")
    events = sub.add_parser("events", description="TensorBoard event files for a profile's finished runs that have "
                            "none (the committed runs keep only metrics.jsonl), replayed from their metrics.jsonl; "
                            "with --serve, TensorBoard on those runs only.",
                            epilog=f"Writes, {ROOT}: runs/<profile>/<run>/tensorboard/ of those runs.",
                            help="TensorBoard event files rebuilt from the finished runs' metrics.jsonl")
    add_shared(events)
    events.add_argument("--runs", nargs="+", metavar="RUN", help="study: the study's runs (default); all: every "
                        "finished run of the profile (grids and sweeps too); else run names or globs, e.g. 'sweep-*'")
    events.add_argument("--serve", action="store_true", help="then start TensorBoard on the chosen runs only")
    events.add_argument("--serve-args", metavar="ARGS", help="TensorBoard's own flags with --serve, e.g. '--port 6007'")
    for p in (cache, run):
        add_shared(p)
        p.add_argument("--overrides", help="YAML mapping of dotted profile keys, e.g. '{train.processes: 2}'")
    run.add_argument("--norm", required=True, help="a norm placement, e.g. pre or post (student/placements.py has "
                     "them all; an unknown one is an error naming them)")
    run.add_argument("--schedule", required=True, choices=SCHEDULES, help=f"a schedule: {', '.join(SCHEDULES)}")
    run.add_argument("--freeze-prefix", action="store_true", help="grow control: only appended blocks train")
    run.add_argument("--match-active-layer-tokens", default=None, help="donor run name (schedule joint)")
    run.add_argument("--seed", type=int, default=0, help="the run's seed: initialisation and data order (default 0)")
    run.add_argument("--run-name", default="", help="the run directory's name (default: the variant and seed, e.g. "
                     "post-grow-s0; a run with overrides gets a hash of them)")
    run.add_argument("--force", action="store_true", help="discard the run directory and train again")
    return parser


def study_parser() -> argparse.ArgumentParser:
    parser = _parser("python -m normgrow.study", "The study: the teacher cache, every run file of params/study.yaml "
                     "x seeds (finished runs skipped, interrupted ones resumed), then the diagnostics and the report.",
                     "each run to runs/<profile>/<run>/ and the report, diagnostics and tables to "
                     "study/<profile>/ (report.html, diagnostics.html, gaps.csv, claims.csv ...)")
    _seeds(parser, "override the seeds of params/study.yaml")
    parser.add_argument("--runs", nargs="+", help="only these run files (donors of matched runs must be included)")
    _jobs(parser)
    parser.add_argument("--processes", type=int, help="processes (CPU ranks or GPUs) of each run and of the teacher "
                        "pass (default: the profile's train.processes and teacher.processes)")
    add_executor(parser)
    return parser


def sweep_parser() -> argparse.ArgumentParser:
    parser = _parser("python -m normgrow.sweep", "Peak learning-rate and warmup sweep per arm (placement x "
                     "schedule): every candidate is an ordinary run; an arm's choice is its best mean final val_ce.",
                     "each candidate to runs/<profile>/sweep-<norm>-<schedule>-lr<lr>-wu<warmup>-s<seed>/ and "
                     "sweep.csv, sweep.json to sweep/<profile>/ (other placements than the study's: "
                     "sweep/<profile>/<norms>/); with --write, the chosen lrs (and warmups) to params/tuned/<profile>.yaml")
    parser.add_argument("--norms", nargs="+", help="placements to sweep (default: those of params/runs)")
    parser.add_argument("--lrs", type=float, nargs="+", help="candidate peak lrs (default: params/sweep.yaml)")
    parser.add_argument("--lr-factors", type=float, nargs="+", help="candidates: each arm's profile lr times these "
                        "(instead of --lrs; --lr-factors 1: at each arm's lr)")
    parser.add_argument("--warmups", type=int, nargs="+", help="candidate warmup steps per phase, each run at every "
                        "candidate lr (default: each arm's profile warmup)")
    parser.add_argument("--warmup-factors", type=float, nargs="+", help="candidates: each arm's profile warmup times "
                        "these, rounded to steps (instead of --warmups; --warmup-factors 0.5 2: its neighbours)")
    parser.add_argument("--schedules", nargs="+", choices=SCHEDULES, help="schedules to sweep (default: "
                        "params/sweep.yaml)")
    parser.add_argument("--arms", nargs="+", metavar="NORM-SCHEDULE", help="only these arms of the placements x "
                        "schedules train candidates, e.g. deepnorm-joint peri-grow; the record and --write still "
                        "cover every arm (default: every arm)")
    _seeds(parser, "seeds of every candidate lr, the choice being the best mean (default: params/sweep.yaml)")
    parser.add_argument("--write", action="store_true", help="store the chosen lrs in params/tuned/<profile>.yaml, read where the profile says "
                        "`lr: tuned`")
    parser.add_argument("--jobs", type=int, default=1, help="candidates trained at once, each in its own worker "
                        "process (default 1: in this process)")
    add_executor(parser)
    return parser


def grid_parser() -> argparse.ArgumentParser:
    parser = _parser("python -m normgrow.grid", "A grid of settings (params/grids/<grid>.yaml): the robustness map, "
                     "each setting judged with the study's gates, or the regime ladder, each rung's depth gains; only "
                     "the runs a setting changes are trained, the others are the study's.",
                     "each run to runs/<profile>/grid-<setting>-.../ and grid.csv, runs.csv, grid.json, "
                     "report.html, depth.svg (settings at two computes or more) and (with grown runs) forest.svg, "
                     "curriculum.csv and curriculum.svg to grid/<profile>/<grid>/")
    parser.add_argument("--grid", default="robustness", help="a file in params/grids: robustness (the map), ladder "
                        "(where depth pays) or shapes (the curriculum's stages) (default: robustness)")
    parser.add_argument("--settings", nargs="+", help="train only these settings of the grid (the record, grid.csv "
                        "and the report, always covers every setting)")
    _seeds(parser, "override the grid's seeds")
    _jobs(parser)
    _processes(parser)
    parser.add_argument("--report-only", action="store_true", help="write the results of the finished runs; train "
                        "nothing")
    add_executor(parser)
    return parser


def bench_parser() -> argparse.ArgumentParser:
    parser = _parser("python -m normgrow.bench", "Training-throughput benchmark: one training step of the profile's "
                     "student against transformers baselines, in one process, and against earlier numerics versions' "
                     "recorded step times.",
                     "bench/<profile>.json (or --out)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1; a compiled step "
                        "compiles in its first call)")
    parser.add_argument("--candidates", nargs="+", help="the steps to time (default: all of them; the module's "
                        "docstring describes each, an unknown name is an error naming them)")
    parser.add_argument("--data", default="auto", choices=("auto", "cache", "synthetic"),
                        help="the batch: the teacher cache's, a synthetic one, or auto: the cache's when usable")
    parser.add_argument("--dtype", help="autocast dtype: auto, bfloat16 or float32 (default: the profile's "
                        "train.dtype; auto: bf16 where the CPU computes it natively, AMX / AVX512-BF16, else float32)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="the student's vocabulary of a synthetic batch (required under student.vocab: corpus "
                             "without a cache; default under full: the teacher's)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    parser.add_argument("--memory", default="subprocess", choices=("subprocess", "inprocess", "none"),
                        help="how each step's peak memory is measured: in a subprocess per step (default), in this "
                             "process, or not at all")
    parser.add_argument("--peak-size", type=int, default=2048, help="n of the n x n x n matmul-peak sample")
    parser.add_argument("--out", type=Path, default=None, help="the report's path (default: bench/<profile>.json "
                        "under the outputs root)")
    parser.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    return parser


def width_parser() -> argparse.ArgumentParser:
    parser = _parser("python -m normgrow.width", "The width grid (params/grids/width.yaml): each rung's lr bracket "
                     "(a sweep of its profile) and study, then the gaps against width.", "sweep/<profile>/ and "
                     "study/<rung>/ per rung, and width.csv, trend.csv, transfer.csv, width.svg, report.html to "
                     "grid/cpu/width/", profile=False)
    _jobs(parser)
    parser.add_argument("--report-only", action="store_true", help="write the record from the finished studies and "
                        "sweeps; train nothing")
    return parser


def intervention_parser() -> argparse.ArgumentParser:
    parser = _parser("python -m normgrow.intervention", "The boundary intervention (params/interventions.yaml): each "
                     "intervention's bracket (sweeps with --write) and study, the control's study, then the claims.",
                     "sweep/<profile>/, params/tuned/<profile>.yaml and study/<profile>/ per intervention, and "
                     "claims.csv, gaps.csv, report.html to grid/cpu/intervention/", profile=False)
    _jobs(parser)
    parser.add_argument("--report-only", action="store_true", help="write the record from the finished studies; "
                        "train nothing")
    return parser


def results_parser() -> argparse.ArgumentParser:
    parser = _parser("python -m normgrow.results", "One of docs/RESULTS.md's tables, as Markdown, from the committed "
                     "records of a profile: its study (outputs/study/<profile>/) or a grid of it.", "nothing (stdout)")
    parser.add_argument("table", help="the table: study (the study's variants, seeds, gaps, phase ends, depth gate "
                        "and claims) or a grid's (the module's docstring lists them; an unknown name is an error "
                        "naming them)")
    parser.add_argument("--grid", metavar="NAME", help="time-shares: a grid of params/grids/ (its record's finished "
                        "runs) instead of the study")
    parser.add_argument("--against", metavar="DIR", help="compare: another training's study folder (an "
                        "outputs/study/<profile> of another outputs root), set beside the profile's")
    return parser


PARSERS = {"normgrow": normgrow_parser, "study": study_parser, "sweep": sweep_parser, "grid": grid_parser,
           "bench": bench_parser, "results": results_parser, "width": width_parser,
           "intervention": intervention_parser}


def parse(command: str, argv: list[str] | None = None) -> argparse.Namespace:
    """command's arguments; --outputs exported as NORMGROW_OUTPUTS for this process and every one it starts."""
    args = PARSERS[command]().parse_args(argv)
    if args.outputs is not None:
        os.environ["NORMGROW_OUTPUTS"] = args.outputs
    return args


def parse_early(command: str) -> None:
    """Answer --help and usage errors of a command run as a script before its module imports torch (see the module
    docstring); the arguments are parsed again, with the same parser, by the command's main."""
    PARSERS[command]().parse_args()
