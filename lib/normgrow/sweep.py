"""Peak learning-rate and warmup sweep per arm (placement x schedule):
``python -m normgrow.sweep --profile cpu [--schedules joint grow single] [--warmups 48 96 192] [--write]``
(make sweep).

One shared lr could hand one arm a handicap that the study would read as a placement or curriculum effect, so every
arm gets the (lr, warmup) with the lowest mean final validation CE over the sweep's seeds. Each candidate is an
ordinary run ``sweep-<norm>-<schedule>-lr<lr>-wu<warmup>-s<seed>``, resumed and read back like any other; ``--write``
stores the choice in params/tuned/<profile>.yaml. The choices (candidates, brackets, seeds, the record that keeps
every candidate) are DESIGN.md's "The lr and warmup sweep".
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("sweep")

import csv
import io
import math
import shlex
import sys
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import yaml
from tqdm.auto import tqdm

from .cli import parse
from .config import (PARAMS_DIR, TUNED, ParamError, load_profile, profile_file, profile_sections, read_yaml,
                     writable_outputs_dir)
from .paths import REPO_ROOT, is_profile_path, tuned_file
from .rundir import (NUMERICS_VERSION, SAME_TRAINING, SWEEP_RUN_PREFIX, RunDirError, machine_hours, read_finished, read_identity,
                     run_machine, run_path, runner_lock, sweep_dir)
from .runner import (ExecutorParams, Job, ensure_teacher_cache, executor_of, git_commit, parse_seeds, plan_jobs, run_jobs,
                     runner_exit)
from .schema import AT_LEAST_ZERO, Int, Str, section, validate
from .train.growth import SCHEDULES
from .student.model import NORMS
from .analysis.regime import run_verdict
from .train.run import run_variant
from .train.spec import RunSpec, for_arm, make_run_spec
from .analysis.variants import load_variants
from .utils import atomic_write_json, atomic_write_text, read_json

SWEEP_FILE = PARAMS_DIR / "sweep.yaml"
PROFILES_DIR = PARAMS_DIR / "profiles"
COLUMNS = ("norm", "schedule", "lr", "warmup_steps", "seed", "val_ce", "val_kd_ce", "steps", "tokens", "wall_s",
           "machine", "run_name")
SUMMARY_COLUMNS = ("seed", "val_ce", "val_kd_ce", "steps", "tokens", "wall_s", "run_name")  # read from summary.json
EDGE_ADVICE = {"lowest": "below", "highest": "above", "only": "on both sides of"}
ARM_KEYS = {"lr": "train.lr", "warmup_steps": "train.warmup_steps"}  # a choice's fields -> the profile keys written


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: one run spec per (schedule, norm, lr, warmup, seed), schedules outer, lrs ascending."""
    profile: str
    norms: tuple[str, ...]
    lrs: dict[str, tuple[float, ...]]  # per norm (shared by its schedules); per arm with lr_factors
    warmups: dict[str, tuple[int, ...]]  # per norm x schedule ("pre-joint")
    seeds: tuple[int, ...]
    schedules: tuple[str, ...]
    specs: tuple[RunSpec, ...]

    @property
    def out_dir(self) -> Path:
        """Where its record (sweep.csv, sweep.json) lives: rundir.sweep_dir of its placements (sweep_placements)."""
        return sweep_dir(self.profile, sweep_placements(self.norms))


# ------------------------------------------------------------------------------------------------ parameters

def lr_tag(lr: float) -> str:
    """Compact lr for run names: 3e-03, 1.5e-03 (6 significant digits, trailing zeros dropped)."""
    mantissa, exponent = f"{lr:.5e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"


def sweep_run_name(norm: str, schedule: str, lr: float, warmup: int, seed: int) -> str:
    return f"{SWEEP_RUN_PREFIX}{norm}-{schedule}-lr{lr_tag(lr)}-wu{warmup}-s{seed}"


@section
class SweepFile:
    """params/sweep.yaml: candidate lrs per profile (one list, or one per placement; check_lrs), the seeds every
    candidate runs, the schedules swept. The command line's choices override them (run_sweep)."""
    lrs: dict[str, Any] = field(default_factory=dict)
    seeds: list[Annotated[Int, AT_LEAST_ZERO]] = field(default_factory=lambda: [0])
    schedules: list[Str] = field(default_factory=lambda: ["joint"])


def load_sweep_config(path: Path = SWEEP_FILE) -> SweepFile:
    return validate(SweepFile, read_yaml(path) or {}, str(path))


def check_warmups(warmups, source: str) -> tuple[int, ...]:
    """A non-empty list of integers >= 0, returned sorted and deduplicated."""
    if not isinstance(warmups, (list, tuple)) or not warmups or any(
            not isinstance(w, int) or isinstance(w, bool) or w < 0 for w in warmups):
        raise ParamError(f"{source}={warmups!r} must be a non-empty list of warmup steps (integers >= 0), e.g. [48, 192]")
    return tuple(sorted(set(warmups)))


def check_factors(factors, source: str) -> tuple[float, ...]:
    """A non-empty list of finite numbers > 0 (multipliers of each arm's lr or warmup), sorted and deduplicated."""
    if not isinstance(factors, (list, tuple)) or not factors or any(
            isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and f > 0) for f in factors):
        raise ParamError(f"{source}={factors!r} must be a non-empty list of finite numbers > 0, e.g. [0.5, 2]")
    return tuple(sorted(set(float(f) for f in factors)))


def check_lrs(lrs, source: str) -> tuple[float, ...]:
    """A non-empty list of finite positive numbers, returned sorted and deduplicated. Strings are parsed because
    YAML reads 1e-3 (no dot) as one."""
    if not isinstance(lrs, (list, tuple)) or not lrs:
        raise ParamError(f"{source}={lrs!r} must be a non-empty list of learning rates, e.g. [1.0e-3, 3.0e-3]")
    values = set()
    for lr in lrs:
        try:
            value = float(lr)
        except (TypeError, ValueError):
            raise ParamError(f"{source}: {lr!r} is not a number") from None
        if isinstance(lr, bool) or not (math.isfinite(value) and value > 0):
            raise ParamError(f"{source}: lr={lr!r} must be a finite number > 0")
        values.add(value)
    return tuple(sorted(values))


def study_norms() -> tuple[str, ...]:
    """The placements the study compares (those of params/runs, in registry order): the sweep's default."""
    used = {v.norm for v in load_variants().values()}
    return tuple(n for n in NORMS if n in used)


def recorded_lrs(out_dir: Path) -> dict[str, set[float]]:
    """{"<norm>-<schedule>": the lrs out_dir's sweep.json records for that arm} ({} without a record)."""
    path = out_dir / "sweep.json"
    tried: dict[str, set[float]] = {}
    for row in read_json(path).get("rows", []) if path.is_file() else ():
        tried.setdefault(f"{row['norm']}-{row['schedule']}", set()).add(float(row["lr"]))
    return tried


def snap_lr(lr: float, tried) -> float:
    """lr (an arm's lr times a factor) as the arm's recorded lr within a relative 1e-3 of it, else lr to 6
    significant digits. Factors are rounded (0.7071 x 1.4142 = 0.99998), so a step down and a step up land next to
    a candidate already tried (5.99988e-3 beside 6e-3): without the snap that candidate ran again under a new name."""
    near = [t for t in tried if abs(t / lr - 1) < 1e-3]
    return min(near, key=lambda t: abs(t - lr)) if near else float(f"{lr:.6g}")


def make_plan(profile: str, norms: list[str] | None = None, lrs: list | None = None, seeds: list[int] | None = None,
              overrides: dict | None = None, config_path: Path = SWEEP_FILE,
              schedules: list[str] | None = None, warmups: list[int] | None = None,
              lr_factors: list | None = None, warmup_factors: list | None = None,
              arms: list[str] | None = None) -> SweepPlan:
    """Validate everything before any training: the profile, the grid, the norms, the seed (make_run_spec checks the
    last two with its usual messages). overrides: extra dotted profile keys for every candidate (tests shrink the
    tiny profile onto a synthetic cache with them). lr_factors (not with lrs): each arm's candidates are its profile
    lr times these (snap_lr: an lr the record holds for the arm where one is that close); warmups: every arm's
    candidate warmups, default each arm's profile warmup; warmup_factors (not with warmups): each arm's profile
    warmup times these, rounded to whole steps. arms ('<norm>-<schedule>', of norms x schedules): only those train
    candidates, in the record of all the norms (a staged search extends the arms still at an edge, not every arm of
    the record)."""
    prof = load_profile(profile, overrides)  # an unknown profile fails here, naming the available ones
    name = prof.name
    config = load_sweep_config(config_path)
    norms = tuple(dict.fromkeys(norms or study_norms()))
    if lrs is not None and lr_factors is not None:
        raise ParamError("--lrs and --lr-factors exclude each other (candidate lrs, or factors of each arm's lr)")
    if warmups is not None and warmup_factors is not None:
        raise ParamError("--warmups and --warmup-factors exclude each other (candidate warmups, or factors of each "
                         "arm's warmup)")
    if warmup_factors is not None:
        warmup_factors = check_factors(warmup_factors, "--warmup-factors")
    if lr_factors is not None:
        factors = check_factors(lr_factors, "--lr-factors")
        grid = None
    elif lrs is not None:
        grid = dict.fromkeys(norms, check_lrs(lrs, "--lrs"))
    else:
        grids = config.lrs  # by profile name (a path profile's: its file stem)
        if name not in grids:
            raise ParamError(f"{config_path}: no candidate learning rates for profile {name!r} (lrs lists: "
                             f"{', '.join(grids) or 'none'}); add lrs.{name} there or pass --lrs")
        entry = grids[name]  # one list for every placement, or one per placement (post-norm wants lower lrs)
        per_norm = entry if isinstance(entry, dict) else {norm: entry for norm in norms}
        source = f"{Path(config_path).name}: lrs.{name}"
        grid = {norm: check_lrs(per_norm.get(norm), f"{source}.{norm}" if isinstance(entry, dict) else source)
                for norm in norms}
    seeds = tuple(dict.fromkeys(config.seeds if seeds is None else seeds))
    if not seeds:
        raise ParamError("seeds must be a non-empty list of integers >= 0")
    schedules = tuple(dict.fromkeys(schedules or config.schedules))
    bad = [s for s in schedules if s not in SCHEDULES]
    if bad:
        raise ParamError(f"schedule={bad[0]!r} is not allowed; allowed values: {', '.join(SCHEDULES)}")
    unknown = [n for n in norms if n not in NORMS]  # before for_arm reads the profile's values for them
    if unknown:
        raise ParamError(f"norm={unknown[0]!r} is not allowed; allowed values: {', '.join(NORMS)}")
    every_arm = [(schedule, norm) for schedule in schedules for norm in norms]
    outside = [a for a in arms or () if a not in {f"{n}-{s}" for s, n in every_arm}]
    if outside:
        raise ParamError(f"arm={outside[0]!r} is not one of the placements x schedules swept; allowed values: "
                         f"{', '.join(f'{n}-{s}' for s, n in every_arm)}")
    arms = [(s, n) for s, n in every_arm if arms is None or f"{n}-{s}" in arms]
    tried = recorded_lrs(sweep_dir(profile, sweep_placements(norms))) if grid is None else {}
    lr_grid = {f"{n}-{s}": (tuple(sorted({snap_lr(for_arm("train.lr", prof.train.lr, n, s) * f, tried.get(f"{n}-{s}", ()))
                                          for f in factors})) if grid is None else grid[n]) for s, n in arms}
    arm_warmup = {f"{n}-{s}": for_arm("train.warmup_steps", prof.train.warmup_steps, n, s) for s, n in arms}
    warmup_grid = {arm: (check_warmups(warmups, "--warmups") if warmups is not None else
                         tuple(sorted({round(w * f) for f in warmup_factors})) if warmup_factors is not None else (w,))
                   for arm, w in arm_warmup.items()}
    specs = tuple(make_run_spec(profile=profile, norm=norm, schedule=schedule, seed=seed,
                                run_name=sweep_run_name(norm, schedule, lr, warmup, seed),
                                overrides={**(overrides or {}), "train.lr": lr, "train.warmup_steps": warmup})
                  for schedule, norm in arms for lr in lr_grid[f"{norm}-{schedule}"]
                  for warmup in warmup_grid[f"{norm}-{schedule}"] for seed in seeds)
    names = [s.run_name for s in specs]
    if len(set(names)) != len(names):
        raise ParamError(f"learning rates {lr_grid} must differ within 6 significant digits (run names {names})")
    return SweepPlan(profile, norms, grid if grid is not None else lr_grid, warmup_grid, seeds, schedules, specs)


# --------------------------------------------------------------------------------------------- runs, choice

def run_candidates(plan: SweepPlan, progress: bool = True, jobs: int = 1,
                   executor: ExecutorParams = ExecutorParams()) -> list[dict]:
    """Run (resume, or read back when finished) every candidate; one row per candidate. jobs > 1 or the slurm
    executor: the teacher cache is built once when a candidate is left to train (runner.ensure_teacher_cache; under
    slurm one job the candidates wait for), the unfinished candidates run through the runner (runner.run_jobs:
    run_variant.ipynb in worker processes, ``jobs`` at a time with cores / jobs threads each, or as SLURM jobs), then
    every row is read back; a candidate whose notebook failed is a RuntimeError naming it. jobs 1: in this process,
    the outer bar counting candidates and each run drawing its own step bar below it. Before anything trains, a
    candidate whose directory holds a run made with other settings (an earlier numerics version, another profile) or
    a damaged one is a RunDirError naming each (runner.plan_jobs): it is never counted, and finding it only when
    reading the rows back would come after the whole sweep had trained."""
    candidates = [Job(s.run_name, {"seed": s.seed, "run_name": s.run_name, "norm": s.norm, "schedule": s.schedule,
                                   "overrides": s.overrides}, s.identity()) for s in plan.specs]
    _, refused, pending = plan_jobs(plan.profile, candidates)
    if refused:
        raise RunDirError("sweep refused before training: " + "; ".join(refused.values()))
    if jobs > 1 or executor.executor == "slurm":
        key, cache_job = None, None
        if pending:  # the teacher cache first, once (as the study and the grid do), else each worker builds its own
            plan.out_dir.mkdir(parents=True, exist_ok=True)
            key, cache_job = ensure_teacher_cache(load_profile(plan.profile), plan.out_dir, executor=executor)
        names = [c.name for c in candidates]
        failed = run_jobs(plan.profile, candidates, dict.fromkeys(names, key) if key else None, jobs, None,
                          f"sweep {plan.profile}", executor, dict.fromkeys(names, cache_job) if cache_job else None)[1]
        if failed:
            raise RuntimeError("sweep candidates failed: " + "; ".join(f"{n}: {why}" for n, why in failed.items()))
    rows = []
    bar = tqdm(plan.specs, desc=f"sweep {plan.profile}", unit="run", disable=not progress)
    for spec in bar:
        bar.set_postfix_str(spec.run_name)
        summary = run_variant(spec, progress=progress)
        print(run_verdict(spec, summary), flush=True)
        rows.append(candidate_row(read_identity(run_path(plan.profile, spec.run_name)), summary))
    return rows


def candidate_row(identity: dict, summary: dict) -> dict:
    """One row of sweep.csv (COLUMNS) from a finished candidate's config.json (its arm, resolved lr and warmup, and
    the machine it trained on: rundir.run_machine) and summary (Summary.to_json: its numbers)."""
    train = identity["profile"]["train"]
    return ({"norm": identity["norm"], "schedule": identity["schedule"], "lr": train["lr"],
             "warmup_steps": train["warmup_steps"], "machine": run_machine(identity)}
            | {key: summary[key] for key in SUMMARY_COLUMNS})


def _edge(values: list, best) -> str | None:
    """Where best sits among the values tried: only (one value), lowest, highest, or None (bracketed)."""
    values = sorted(set(values))
    return ("only" if len(values) == 1 else "lowest" if best == values[0] else "highest" if best == values[-1]
            else None)


def choose_arms(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """Per norm and schedule: the (lr, warmup_steps) with the lowest mean val_ce over its seeds (a candidate with a
    non-finite seed is out), that mean, and its brackets: ``edge`` where the lr sits among the lrs tried at its
    warmup, ``warmup_edge`` where the warmup sits among the warmups tried at its lr (lowest / highest, only for one
    value, else None: bracketed). Edges count diverged runs: a best lr just below a diverged one is bracketed.
    Every candidate out: lr and warmup_steps None."""
    chosen: dict[str, dict[str, dict]] = {}
    for norm, schedule in dict.fromkeys((r["norm"], r["schedule"]) for r in rows):
        by_pair: dict[tuple, list[float]] = {}
        for r in rows:
            if (r["norm"], r["schedule"]) == (norm, schedule):
                by_pair.setdefault((r["lr"], r["warmup_steps"]), []).append(r["val_ce"])
        means = {pair: sum(v) / len(v) for pair, v in by_pair.items() if all(math.isfinite(x) for x in v)}
        if not means:
            chosen.setdefault(norm, {})[schedule] = {"lr": None, "warmup_steps": None, "val_ce": None, "edge": None,
                                                     "warmup_edge": None}
            continue
        lr, warmup = best = min(means, key=means.get)
        chosen.setdefault(norm, {})[schedule] = {
            "lr": lr, "warmup_steps": warmup, "val_ce": means[best],
            "edge": _edge([p[0] for p in by_pair if p[1] == warmup], lr),
            "warmup_edge": _edge([p[1] for p in by_pair if p[0] == lr], warmup)}
    return chosen


def grid_warnings(chosen: dict[str, dict[str, dict]]) -> list[str]:
    warnings = []
    for norm, by_schedule in chosen.items():
        for schedule, choice in by_schedule.items():
            if choice["lr"] is None:
                warnings.append(f"{norm}-{schedule}: every candidate diverged (non-finite val_ce); extend the grid to "
                                "lower learning rates")
                continue
            if choice["edge"]:
                warnings.append(f"{norm}-{schedule}: the best lr {lr_tag(choice['lr'])} is the {choice['edge']} "
                                f"point of the grid at warmup {choice['warmup_steps']}; extend the grid "
                                f"{EDGE_ADVICE[choice['edge']]} it")
            if choice["warmup_edge"]:
                warnings.append(f"{norm}-{schedule}: the best warmup {choice['warmup_steps']} is the "
                                f"{choice['warmup_edge']} warmup tried at lr {lr_tag(choice['lr'])}; try warmups "
                                f"{EDGE_ADVICE[choice['warmup_edge']]} it")
    return warnings


def earlier_rows(plan: SweepPlan, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(rows, dropped) of the candidates plan.out_dir's sweep.json recorded from earlier invocations that this one did
    not run, read back from their runs: a candidate counts while its run directory holds it finished under a
    numerics version that trains as this one (rundir.SAME_TRAINING). So a sweep that extends a grid (other lrs, another schedule) adds candidates to the record and
    the choice, and never drops the earlier ones. A candidate that no longer counts (its run gone, or recorded under
    a numerics version that trains otherwise: rundir.SAME_TRAINING) moves to dropped as {"why", "row"} with its recorded row, and stays there in every
    later record until a run of its name counts again: the record keeps what an lr choice was made from."""
    path = plan.out_dir / "sweep.json"
    if not path.is_file():
        return [], []
    record = read_json(path)
    ran = {r["run_name"] for r in rows}
    kept, dropped = [], []
    for row in record.get("rows", []):
        name = row.get("run_name")
        if name in ran:
            continue
        run_dir = run_path(plan.profile, name)
        try:
            summary, identity = read_finished(run_dir)
        except RunDirError as err:
            dropped.append({"why": str(err), "row": row})
            continue
        if identity.get("numerics") not in SAME_TRAINING:
            dropped.append({"why": f"recorded under numerics version {identity.get('numerics')}, which trains "
                                   f"otherwise than {NUMERICS_VERSION}", "row": row})
            continue
        kept.append(candidate_row(identity, summary.to_json()))
    counted = ran | {r["run_name"] for r in kept}
    return kept, dropped + [d for d in record.get("dropped", []) if d["row"].get("run_name") not in counted]


def summarize(plan: SweepPlan, rows: list[dict], command: str, earlier: list[dict] = (),
              dropped: list[dict] = ()) -> dict:
    """sweep.json's content: every candidate (this invocation's and the earlier ones still counting, earlier_rows),
    sorted by placement, schedule, lr and seed, the machines that trained them (rundir.machine_hours), the choice per
    arm over all of them, and the earlier candidates that no longer count (earlier_rows' dropped, never in the
    choice)."""
    every = sorted([*earlier, *rows], key=lambda r: (r["norm"], SCHEDULES.index(r["schedule"]), r["lr"],
                                                     r["warmup_steps"], r["seed"]))
    chosen = choose_arms(every)
    return {"profile": plan.profile, "date": date.today().isoformat(), "git_commit": git_commit(), "command": command,
            "schedules": list(plan.schedules), "seeds": list(plan.seeds), "norms": list(plan.norms),
            "lrs": {key: list(g) for key, g in plan.lrs.items()},
            "warmups": {arm: list(g) for arm, g in plan.warmups.items()},
            "earlier_runs": [r["run_name"] for r in earlier], "rows": every, "machines": machine_hours(every),
            "chosen": chosen, "warnings": grid_warnings(chosen), "dropped": list(dropped)}


def sweep_placements(norms: tuple[str, ...] | None) -> str | None:
    """The folder of a sweep under outputs/sweep/<profile>/ (rundir.sweep_dir): None for the study's placements
    (study_norms), else the placements joined by '-'."""
    return None if norms is None or tuple(norms) == study_norms() else "-".join(norms)


def write_results(result: dict, out_dir: Path) -> Path:
    """sweep.csv and sweep.json in out_dir; returns the json path."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(result["rows"])
    atomic_write_text(out_dir / "sweep.csv", buffer.getvalue())
    atomic_write_json(out_dir / "sweep.json", result)
    return out_dir / "sweep.json"


def format_table(result: dict) -> str:
    """One line per candidate (* marks the chosen lr and warmup of each arm), then the machines that trained them."""
    lines = [f"{'norm':<5} {'schedule':<8} {'lr':>9} {'warmup':>6} {'val_ce':>8} {'val_kd_ce':>9} {'steps':>6} "
             f"{'wall_s':>7}"]
    for r in result["rows"]:
        choice = result["chosen"][r["norm"]][r["schedule"]]
        mark = " *" if (choice["lr"], choice["warmup_steps"]) == (r["lr"], r["warmup_steps"]) else ""
        lines.append(f"{r['norm']:<5} {r['schedule']:<8} {lr_tag(r['lr']):>9} {r['warmup_steps']:>6} "
                     f"{r['val_ce']:>8.4f} "
                     f"{r['val_kd_ce']:>9.4f} {r['steps']:>6} {r['wall_s']:>7.1f}{mark}")
    lines += [f"trained on {machine}: {m['runs']} run{'' if m['runs'] == 1 else 's'}, {m['run_hours']:.2f} run-hours"
              for machine, m in result["machines"].items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- tuned file

def merge_arms(name: str, current, chosen: dict[str, dict]) -> dict[str, dict]:
    """One value of train.<name> (lr, warmup_steps) per schedule for every placement the profile's value names or
    the sweep chose: the chosen value where swept, else the profile's current one for that arm (spec.for_arm: a
    single or a per-placement value applies to every schedule). A single value names no placement and applies to
    all: every placement is written out, so the map's other placements keep theirs. A schedule neither swept nor in the profile for a
    placement of the study is an error; for another placement it is left out (a placement swept for joint and grow
    runs those; for_arm refuses its single run, naming the sweep)."""
    kind = float if name == "lr" else int
    norms = [n for n in NORMS if n in chosen or not isinstance(current, dict) or n in current]
    merged: dict[str, dict] = {}
    for norm in norms:
        for schedule in SCHEDULES:
            value = chosen.get(norm, {}).get(schedule)
            if value is None:
                try:
                    value = for_arm(f"train.{name}", current, norm, schedule)
                except (KeyError, ParamError):
                    if norm not in study_norms():
                        continue
                    raise ParamError(f"train.{name}={current!r} has no value for {norm}-{schedule}; sweep it too "
                                     f"(--norms {norm} --schedules {' '.join(SCHEDULES)})") from None
            merged.setdefault(norm, {})[schedule] = kind(value)
    return merged


def swept_warmups(rows: list[dict]) -> bool:
    """Whether some arm tried more than one warmup: only then does --write touch the warmup_steps line."""
    tried: dict[tuple, set] = {}
    for r in rows:
        tried.setdefault((r["norm"], r["schedule"]), set()).add(r["warmup_steps"])
    return any(len(w) > 1 for w in tried.values())


def display_path(path: Path) -> str:
    """Relative to the repository when inside it (what a profile comment should show), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


TUNED_HEADER = """\
# Written by `python -m normgrow.sweep --profile {name} --write`; a later --write rewrites it, so do not edit it by
# hand. The lr and warmup chosen for every arm, read by the profile where it says `tuned` (config.resolve_tuned);
# chosen_by names the sweep record, its date, seeds and mean final val_ce behind each arm the sweeps chose.
"""


def write_tuned(profile_path: Path, result: dict, json_path: Path) -> Path:
    """Store the chosen lr per arm, and the chosen warmup when some arm tried several (swept_warmups), in the profile's
    tuned file (paths.tuned_file): every arm the sweep did not choose keeps the value the profile trains at now
    (merge_arms), and chosen_by keeps its former entry. The hand-written profile is not touched."""
    missing = [f"{norm}-{schedule}" for norm, by_schedule in result["chosen"].items()
               for schedule, c in by_schedule.items() if c["lr"] is None]
    tuned_path = tuned_file(profile_path)
    if missing:
        raise ParamError(f"--write: no learning rate chosen for {', '.join(missing)} (every run diverged); "
                         f"{tuned_path} left unchanged")
    old = (read_yaml(tuned_path) or {}) if tuned_path.is_file() else {}
    current = profile_sections(profile_path)["train"]
    out = {k: v for k, v in old.items() if k != "chosen_by"}
    for name in ("lr", "warmup_steps") if swept_warmups(result["rows"]) else ("lr",):
        chosen = {norm: {schedule: c[name] for schedule, c in by_schedule.items()}
                  for norm, by_schedule in result["chosen"].items()}
        out[f"train.{name}"] = merge_arms(name, current.get(name), chosen)
    chosen_by = dict(old.get("chosen_by") or {})
    for norm, by_schedule in result["chosen"].items():
        for schedule, c in by_schedule.items():
            chosen_by[f"{norm}-{schedule}"] = {"record": display_path(json_path), "date": result["date"],
                                               "seeds": list(result["seeds"]), "val_ce": round(c["val_ce"], 4)}
    out["chosen_by"] = dict(sorted(chosen_by.items()))
    tuned_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(tuned_path, TUNED_HEADER.format(name=Path(profile_path).stem)
                      + yaml.safe_dump(out, sort_keys=False, default_flow_style=None, width=120))
    return tuned_path


# ------------------------------------------------------------------------------------------------------ entry

def sweep(plan: SweepPlan, write: bool = False, profiles_dir: Path = PROFILES_DIR, progress: bool = True,
          command: str = "", jobs: int = 1, executor: ExecutorParams = ExecutorParams()) -> dict:
    """Run the plan, write outputs/sweep/<profile>/sweep.{csv,json}, print the table and grid warnings; with write,
    store the choice in the tuned file (paths.tuned_file) of profiles_dir/<profile>.yaml (injectable so tests write
    beside a copy), or of a path profile. Returns sweep.json's dict."""
    profile_path = (profile_file(plan.profile) if is_profile_path(plan.profile) else
                    Path(profiles_dir) / f"{plan.profile}.yaml")
    if write:  # refuse before training, not after
        if not profile_path.is_file():
            raise ParamError(f"--write: no profile file {profile_path}")
    rows = run_candidates(plan, progress, jobs, executor)
    earlier, dropped = earlier_rows(plan, rows)
    for entry in dropped:
        print(f"an earlier candidate no longer counts, left out of the choice (kept in sweep.json's dropped): "
              f"{entry['row'].get('run_name')}: {entry['why']}")
    result = summarize(plan, rows, command, earlier, dropped)
    json_path = write_results(result, plan.out_dir)
    print(format_table(result))
    for warning in result["warnings"]:
        print(f"warning: {warning}")
    print(f"results: {json_path.parent / 'sweep.csv'}, {json_path}")
    if write:
        tuned_path = write_tuned(profile_path, result, json_path)
        names = [f"train.{n}" for n in (("lr", "warmup_steps") if swept_warmups(result["rows"]) else ("lr",))]
        print(f"wrote {' and '.join(names)} to {tuned_path}")
        raw = read_yaml(profile_path)
        own = ((raw.get("overrides") or {}) if "base" in raw
               else {f"train.{k}": v for k, v in (raw["train"] or {}).items()})
        by_hand = [d for d in names if d in own and own[d] != TUNED]
        if by_hand:
            print(f"{profile_path} sets {', '.join(by_hand)} itself: write `{by_hand[0].split('.')[1]}: {TUNED}` "
                  "there to train at the sweep's values (until then the profile is refused as ambiguous)")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse("sweep", argv)
    command = shlex.join(["python", "-m", "normgrow.sweep", *(sys.argv[1:] if argv is None else argv)])

    def work() -> None:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        plan = make_plan(args.profile, args.norms, args.lrs, seeds, schedules=args.schedules, warmups=args.warmups,
                         lr_factors=args.lr_factors, warmup_factors=args.warmup_factors, arms=args.arms)
        writable_outputs_dir()
        with runner_lock():
            sweep(plan, args.write, command=command, jobs=args.jobs, executor=executor_of(args))
    return runner_exit(work)


if __name__ == "__main__":
    sys.exit(main())
