"""Peak learning-rate sweep per arm (placement x schedule):
``python -m normgrow.sweep --profile cpu [--schedules joint grow single] [--write]`` (make sweep).

Why: pre- and post-norm may want different peak learning rates (post-norm classically a lower one), and a
placement's best lr differs between the joint and the grown schedule; one shared lr could hand one arm a handicap
that the study would then read as a placement or curriculum effect. The sweep measures, per (placement, schedule),
the lr with the lowest final validation CE, and ``--write`` stores it in the profile as
``train.lr: {pre: {joint: X, grow: Y, single: Z}, post: {...}}`` (spec.lr_for_run resolves it for each run; a
freeze control takes its placement's grow lr, a matched run its joint lr).

Choices:
  - Candidates per profile come from params/sweep.yaml (parameters are data); ``--lrs`` overrides. The grid is sorted
    and deduplicated, so its edges are its smallest and largest values.
  - Candidates run each schedule of ``--schedules`` (default: params/sweep.yaml's ``schedules``). Every arm the
    study compares gets its own optimum, so a gap between arms is not a gap in tuning; the grid per placement is
    shared by its schedules.
  - Each candidate is an ordinary run ``sweep-<norm>-<schedule>-lr<lr>-s<seed>`` in outputs/runs/<profile>/ with
    ``train.lr`` overridden (study run names never start with ``sweep-``). run_variant resumes an interrupted run and
    returns a finished one without training, so an interrupted sweep continues where it stopped; a finished run made
    with other profile parameters is refused by run_variant, never silently reused.
  - The chosen lr per arm is the argmin of final val_ce over finite values (a diverged run never wins). A minimum at
    an edge of the grid means the optimum may lie outside it: a warning says so and sweep.json records it.
  - ``--jobs N`` trains N candidates at once, each in a worker process, through the runner (runner.py, the study's
    and the grid's too); the rows and the choice do not depend on it (each candidate is the same run either way).
  - Seeds (``seeds`` in params/sweep.yaml, ``--seeds``): every lr of an arm runs every seed and the arm's choice is
    the lowest *mean* final val_ce over them; an lr with a non-finite seed never wins. One seed picks an lr but can
    pick one next to a cliff: on the cpu profile post-norm's one-seed optimum for its 3-block first stage (8.5e-3)
    trained seed 0 and left seeds 1 and 2 on or near the unigram plateau (docs/LOG.md), so arms near a divergence
    need the seeds the study will run.
  - ``--write`` edits only the ``lr:`` entry of the profile's train section (a line edit, not a YAML dump, so every
    other line and comment stays byte for byte), re-parses the result to check it, and writes atomically. A norm
    and schedule that were not swept keep their current value. A profile without an lr line is refused before any training.
  - The record keeps every candidate: the rows of an earlier invocation that this one did not run stay in sweep.csv
    and sweep.json, read back from their runs while those are finished under this numerics version
    (earlier_rows), and each arm's choice is over all of its candidates. So extending a grid (lower lrs, one more
    schedule) adds to the record and never overwrites it.
Outputs: outputs/sweep/<profile>/sweep.csv (one row per candidate) and sweep.json (the rows, the choice per arm,
the grid warnings, date, profile, git commit, this invocation's command line and the earlier runs it kept); a
sweep of placements other than the study's writes them to outputs/sweep/<profile>/<norms>/ (rundir.sweep_dir,
sweep_placements).
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("sweep")

import csv
import io
import math
import re
import shlex
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import yaml
from tqdm.auto import tqdm

from .cli import parse
from .config import (PARAMS_DIR, REPO_ROOT, ParamError, is_profile_path, load_profile, profile_file, read_yaml,
                     writable_outputs_dir)
from .rundir import NUMERICS_VERSION, SWEEP_RUN_PREFIX, RunDirError, read_finished, run_path, runner_lock, sweep_dir
from .runner import Job, execute_runs, git_commit, parse_seeds, plan_jobs, runner_exit
from .train.growth import SCHEDULES
from .student.model import NORMS
from .train.run import run_variant
from .train.spec import RunSpec, lr_for_run, make_run_spec
from .analysis.variants import load_variants
from .utils import atomic_write_json, atomic_write_text, read_json

SWEEP_FILE = PARAMS_DIR / "sweep.yaml"
PROFILES_DIR = PARAMS_DIR / "profiles"
SWEEP_KEYS = ("lrs", "seeds", "schedules")
COLUMNS = ("norm", "schedule", "lr", "seed", "val_ce", "val_kd_ce", "steps", "tokens", "wall_s", "run_name")
EDGE_ADVICE = {"lowest": "below", "highest": "above", "only": "on both sides of"}


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: one run spec per (schedule, norm, lr), schedules outer, lrs ascending."""
    profile: str
    norms: tuple[str, ...]
    lrs: dict[str, tuple[float, ...]]  # per norm (shared by its schedules)
    seeds: tuple[int, ...]
    schedules: tuple[str, ...]
    specs: tuple[RunSpec, ...]


# ------------------------------------------------------------------------------------------------ parameters

def lr_tag(lr: float) -> str:
    """Compact lr for run names: 3e-03, 1.5e-03 (6 significant digits, trailing zeros dropped)."""
    mantissa, exponent = f"{lr:.5e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"


def yaml_float(lr: float) -> str:
    """lr as a YAML float literal, 3.0e-3: PyYAML reads a float only with a dot and a signed exponent (3e-3 is a
    string to it)."""
    mantissa, exponent = f"{lr:.5e}".split("e")
    mantissa = mantissa.rstrip("0")
    return f"{mantissa}{'0' if mantissa.endswith('.') else ''}e{int(exponent):+d}"


def sweep_run_name(norm: str, schedule: str, lr: float, seed: int) -> str:
    return f"{SWEEP_RUN_PREFIX}{norm}-{schedule}-lr{lr_tag(lr)}-s{seed}"


def load_sweep_config(path: Path = SWEEP_FILE) -> dict:
    """params/sweep.yaml: ``lrs: {profile: [lr, ...] or {norm: [lr, ...]}}``, ``seeds``, ``schedules``."""
    raw = read_yaml(path) or {}
    unknown = sorted(set(raw) - set(SWEEP_KEYS))
    if unknown:
        raise ParamError(f"{path}: unknown key {unknown[0]!r}; allowed keys: {', '.join(SWEEP_KEYS)}")
    if not isinstance(raw.get("lrs", {}), dict):
        raise ParamError(f"{path}: lrs must map profile names to lists of learning rates, "
                         "e.g. {tiny: [1.0e-3, 3.0e-3]}")
    return raw


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


def make_plan(profile: str, norms: list[str] | None = None, lrs: list | None = None, seeds: list[int] | None = None,
              overrides: dict | None = None, config_path: Path = SWEEP_FILE,
              schedules: list[str] | None = None) -> SweepPlan:
    """Validate everything before any training: the profile, the grid, the norms, the seed (make_run_spec checks the
    last two with its usual messages). overrides: extra dotted profile keys for every candidate (tests shrink the
    tiny profile onto a synthetic cache with them)."""
    name = load_profile(profile).name  # an unknown profile fails here, naming the available ones
    config = load_sweep_config(config_path)
    norms = tuple(dict.fromkeys(norms or study_norms()))
    if lrs is None:
        grids = config.get("lrs") or {}  # by profile name (a path profile's: its file stem)
        if name not in grids:
            raise ParamError(f"{config_path}: no candidate learning rates for profile {name!r} (lrs lists: "
                             f"{', '.join(grids) or 'none'}); add lrs.{name} there or pass --lrs")
        entry = grids[name]  # one list for every placement, or one per placement (post-norm wants lower lrs)
        per_norm = entry if isinstance(entry, dict) else {norm: entry for norm in norms}
        source = f"{Path(config_path).name}: lrs.{name}"
        grid = {norm: check_lrs(per_norm.get(norm), f"{source}.{norm}" if isinstance(entry, dict) else source)
                for norm in norms}
    else:
        grid = dict.fromkeys(norms, check_lrs(lrs, "--lrs"))
    seeds = tuple(dict.fromkeys(config.get("seeds", [0]) if seeds is None else seeds))
    if not seeds:
        raise ParamError("seeds must be a non-empty list of integers >= 0")
    schedules = tuple(dict.fromkeys(schedules or config.get("schedules", ["joint"])))
    bad = [s for s in schedules if s not in SCHEDULES]
    if bad:
        raise ParamError(f"schedule={bad[0]!r} is not allowed; allowed values: {', '.join(SCHEDULES)}")
    specs = tuple(make_run_spec(profile=profile, norm=norm, schedule=schedule, seed=seed,
                                run_name=sweep_run_name(norm, schedule, lr, seed),
                                overrides={**(overrides or {}), "train.lr": lr})
                  for schedule in schedules for norm in norms for lr in grid[norm] for seed in seeds)
    names = [s.run_name for s in specs]
    if len(set(names)) != len(names):
        raise ParamError(f"learning rates {grid} must differ within 6 significant digits (run names {names})")
    return SweepPlan(profile, norms, grid, seeds, schedules, specs)


# --------------------------------------------------------------------------------------------- runs, choice

def run_candidates(plan: SweepPlan, progress: bool = True, jobs: int = 1) -> list[dict]:
    """Run (resume, or read back when finished) every candidate; one row per candidate. jobs > 1: the unfinished
    candidates first run ``jobs`` at a time through the runner (runner.execute_runs: run_variant.ipynb in worker
    processes, cores / jobs threads each), then every row is read back; a candidate whose notebook failed is a
    RuntimeError naming it. jobs 1: in this process, the outer bar counting candidates and each run drawing its own
    step bar below it. Before anything trains, a candidate whose directory holds a run made with other settings (an
    earlier numerics version, another profile) or a damaged one is a RunDirError naming each (runner.plan_jobs): it
    is never counted, and finding it only when reading the rows back would come after the whole sweep had trained."""
    candidates = [Job(s.run_name, {"seed": s.seed, "run_name": s.run_name, "norm": s.norm, "schedule": s.schedule,
                                   "overrides": s.overrides}, s.identity()) for s in plan.specs]
    done, failed, pending = plan_jobs(plan.profile, candidates)
    if failed:
        raise RunDirError("sweep refused before training: " + "; ".join(failed.values()))
    if jobs > 1:
        execute_runs(plan.profile, pending, jobs, None, f"sweep {plan.profile}", done, failed,
                     initial=len(done), total=len(plan.specs))
        if failed:
            raise RuntimeError("sweep candidates failed: " + "; ".join(f"{n}: {why}" for n, why in failed.items()))
    rows = []
    bar = tqdm(plan.specs, desc=f"sweep {plan.profile}", unit="run", disable=not progress)
    for spec in bar:
        bar.set_postfix_str(spec.run_name)
        summary = run_variant(spec, progress=progress)
        rows.append(candidate_row(spec.norm, spec.schedule, spec.profile.train.lr, summary))
    return rows


def candidate_row(norm: str, schedule: str, lr: float, summary: dict) -> dict:
    """One row of sweep.csv (COLUMNS): a candidate's arm and lr, and the numbers of its summary (Summary.to_json)."""
    return {"norm": norm, "schedule": schedule, "lr": lr} | {key: summary[key] for key in COLUMNS[3:]}


def choose_lrs(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """Per norm and schedule: the lr with the lowest mean val_ce over its seeds (an lr with a non-finite seed is out),
    that mean, and ``edge``: lowest / highest when it is the smallest / largest lr of that arm's grid (the optimum may
    lie outside), only for a one-point grid, else None. Edges count diverged runs: a best lr just below a diverged one
    is bracketed. Every lr out: lr None."""
    chosen: dict[str, dict[str, dict]] = {}
    for norm, schedule in dict.fromkeys((r["norm"], r["schedule"]) for r in rows):
        by_lr: dict[float, list[float]] = {}
        for r in rows:
            if (r["norm"], r["schedule"]) == (norm, schedule):
                by_lr.setdefault(r["lr"], []).append(r["val_ce"])
        grid = sorted(by_lr)
        means = {lr: sum(v) / len(v) for lr, v in by_lr.items() if all(math.isfinite(x) for x in v)}
        if not means:
            chosen.setdefault(norm, {})[schedule] = {"lr": None, "val_ce": None, "edge": None}
            continue
        best = min(means, key=means.get)
        edge = ("only" if len(grid) == 1 else "lowest" if best == grid[0] else "highest" if best == grid[-1]
                else None)
        chosen.setdefault(norm, {})[schedule] = {"lr": best, "val_ce": means[best], "edge": edge}
    return chosen


def grid_warnings(chosen: dict[str, dict[str, dict]]) -> list[str]:
    warnings = []
    for norm, by_schedule in chosen.items():
        for schedule, choice in by_schedule.items():
            if choice["lr"] is None:
                warnings.append(f"{norm}-{schedule}: every candidate diverged (non-finite val_ce); extend the grid to "
                                "lower learning rates")
            elif choice["edge"]:
                warnings.append(f"{norm}-{schedule}: the best lr {lr_tag(choice['lr'])} is the {choice['edge']} "
                                f"point of the grid; extend the grid {EDGE_ADVICE[choice['edge']]} it")
    return warnings


def earlier_rows(plan: SweepPlan, rows: list[dict], out_dir: Path) -> tuple[list[dict], list[dict]]:
    """(rows, dropped) of the candidates out_dir's sweep.json recorded from earlier invocations that this one did
    not run, read back from their runs: a candidate counts while its run directory holds it finished under this
    NUMERICS_VERSION. So a sweep that extends a grid (other lrs, another schedule) adds candidates to the record and
    the choice, and never drops the earlier ones. A candidate that no longer counts (its run gone, or recorded under
    another numerics version) moves to dropped as {"why", "row"} with its recorded row, and stays there in every
    later record until a run of its name counts again: the record keeps what an lr choice was made from."""
    path = out_dir / "sweep.json"
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
        if identity.get("numerics") != NUMERICS_VERSION:
            dropped.append({"why": f"recorded under numerics version {identity.get('numerics')}, not "
                                   f"{NUMERICS_VERSION}", "row": row})
            continue
        kept.append(candidate_row(identity["norm"], identity["schedule"], identity["profile"]["train"]["lr"],
                                  summary.to_json()))
    counted = ran | {r["run_name"] for r in kept}
    return kept, dropped + [d for d in record.get("dropped", []) if d["row"].get("run_name") not in counted]


def summarize(plan: SweepPlan, rows: list[dict], command: str, earlier: list[dict] = (),
              dropped: list[dict] = ()) -> dict:
    """sweep.json's content: every candidate (this invocation's and the earlier ones still counting, earlier_rows),
    sorted by placement, schedule, lr and seed, the choice per arm over all of them, and the earlier candidates
    that no longer count (earlier_rows' dropped, never in the choice)."""
    every = sorted([*earlier, *rows], key=lambda r: (r["norm"], SCHEDULES.index(r["schedule"]), r["lr"], r["seed"]))
    chosen = choose_lrs(every)
    return {"profile": plan.profile, "date": date.today().isoformat(), "git_commit": git_commit(), "command": command,
            "schedules": list(plan.schedules), "seeds": list(plan.seeds), "norms": list(plan.norms),
            "lrs": {norm: list(g) for norm, g in plan.lrs.items()},
            "earlier_runs": [r["run_name"] for r in earlier], "rows": every, "chosen": chosen,
            "warnings": grid_warnings(chosen), "dropped": list(dropped)}


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
    """One line per candidate; * marks the chosen lr of each arm."""
    lines = [f"{'norm':<5} {'schedule':<8} {'lr':>9} {'val_ce':>8} {'val_kd_ce':>9} {'steps':>6} {'wall_s':>7}"]
    for r in result["rows"]:
        mark = " *" if result["chosen"][r["norm"]][r["schedule"]]["lr"] == r["lr"] else ""
        lines.append(f"{r['norm']:<5} {r['schedule']:<8} {lr_tag(r['lr']):>9} {r['val_ce']:>8.4f} "
                     f"{r['val_kd_ce']:>9.4f} {r['steps']:>6} {r['wall_s']:>7.1f}{mark}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- profile edit

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def lr_line_span(lines: list[str], where: str) -> tuple[int, int]:
    """[start, end) of the lr entry of the top-level train section: the ``lr:`` line at the section's key
    indentation plus the more-indented lines right under it (a block-style mapping). ParamError when absent."""
    head = next((i for i, line in enumerate(lines) if re.match(r"train:\s*(#.*)?$", line)), None)
    if head is None:
        raise ParamError(f"{where}: no top-level train: section, so no train.lr line to replace")
    stop = next((i for i in range(head + 1, len(lines)) if re.match(r"[^\s#]", lines[i])), len(lines))
    keys = [i for i in range(head + 1, stop) if re.match(r" +[^\s#]", lines[i])]
    hits = [i for i in keys if _indent(lines[i]) == _indent(lines[keys[0]]) and re.match(r" +lr\s*:", lines[i])]
    if not hits:
        raise ParamError(f"{where}: the train section has no lr line to replace; add one (e.g. `  lr: 3.0e-3`) first")
    end = hits[0] + 1
    while end < stop and lines[end].strip() and _indent(lines[end]) > _indent(lines[hits[0]]):
        end += 1
    return hits[0], end


def merge_lrs(current, chosen: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """One lr per schedule for every placement the profile's train.lr names or the sweep chose: the chosen value where
    swept, else the profile's current one for that arm (spec.lr_for_run: a float or a per-placement value applies to
    every schedule). A float train.lr names no placement: the study's placements are written out. A schedule neither
    swept nor in the profile for a placement of the study is an error; for another placement it is left out (a
    placement swept for joint and grow runs those; lr_for_run refuses its single run, naming the sweep)."""
    norms = [n for n in NORMS if n in chosen or (n in current if isinstance(current, dict) else n in study_norms())]
    merged: dict[str, dict[str, float]] = {}
    for norm in norms:
        for schedule in SCHEDULES:
            value = chosen.get(norm, {}).get(schedule)
            if value is None:
                try:
                    value = lr_for_run(current, norm, schedule)
                except (KeyError, ParamError):
                    if norm not in study_norms():
                        continue
                    raise ParamError(f"train.lr={current!r} has no value for {norm}-{schedule}; sweep it too "
                                     f"(--norms {norm} --schedules {' '.join(SCHEDULES)})") from None
            merged.setdefault(norm, {})[schedule] = float(value)
    return merged


def rewrite_lr_line(text: str, chosen: dict[str, dict[str, float]], comment: str, where: str = "profile") -> str:
    """text with the train section's lr entry replaced by ``lr: {pre: {joint: X, ...}, post: {...}}  # comment``;
    every other line is kept byte for byte (line endings included). The result is re-parsed: its train.lr must read
    back as written."""
    lines = text.splitlines(keepends=True)
    start, end = lr_line_span(lines, where)
    lrs = merge_lrs((yaml.safe_load(text) or {})["train"]["lr"], chosen)
    ending = lines[end - 1][len(lines[end - 1].rstrip("\r\n")):] or "\n"
    mapping = ", ".join(f"{norm}: {{{', '.join(f'{s}: {yaml_float(lr)}' for s, lr in by_schedule.items())}}}"
                        for norm, by_schedule in lrs.items())
    new_line = f"{' ' * _indent(lines[start])}lr: {{{mapping}}}  # {comment}{ending}"
    new_text = "".join(lines[:start] + [new_line] + lines[end:])
    raw = yaml.safe_load(new_text)
    if raw["train"]["lr"] != lrs:
        raise RuntimeError(f"{where}: the rewritten lr line reads back as {raw['train']['lr']!r}, not {lrs!r}")
    return new_text


def display_path(path: Path) -> str:
    """Relative to the repository when inside it (what a profile comment should show), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def write_profile_lr(path: Path, result: dict, json_path: Path) -> None:
    """Store the chosen lr per arm in the profile's train.lr line, with the sweep's date, file and val_ce; a sweep of
    some arms keeps the line's former comment after "other arms:", since the arms it did not sweep come from there."""
    chosen = {norm: {schedule: c["lr"] for schedule, c in by_schedule.items()}
              for norm, by_schedule in result["chosen"].items()}
    missing = [f"{norm}-{schedule}" for norm, by_schedule in chosen.items() for schedule, lr in by_schedule.items()
               if lr is None]
    if missing:
        raise ParamError(f"--write: no learning rate chosen for {', '.join(missing)} (every run diverged); "
                         f"{path} left unchanged")
    scores = ", ".join(f"{norm}-{schedule} {c['val_ce']:.4f}" for norm, by_schedule in result["chosen"].items()
                       for schedule, c in by_schedule.items())
    seeds = result["seeds"]
    what = "val_ce" if len(seeds) == 1 else f"mean val_ce over seeds {' '.join(map(str, seeds))}"
    comment = f"sweep {result['date']}: {display_path(json_path)} ({what} {scores})"
    text = path.read_bytes().decode()
    line = text.splitlines()[lr_line_span(text.splitlines(keepends=True), str(path))[0]]
    merged = merge_lrs((yaml.safe_load(text) or {})["train"]["lr"], chosen)
    if "#" in line and any(s not in chosen.get(n, {}) for n, by in merged.items() for s in by):
        comment += "; other arms: " + line.split("#", 1)[1].strip()  # where the arms not swept here come from
    atomic_write_text(path, rewrite_lr_line(text, chosen, comment, str(path)))


# ------------------------------------------------------------------------------------------------------ entry

def sweep(plan: SweepPlan, write: bool = False, profiles_dir: Path = PROFILES_DIR, progress: bool = True,
          command: str = "", jobs: int = 1) -> dict:
    """Run the plan, write outputs/sweep/<profile>/sweep.{csv,json}, print the table and grid warnings; with write,
    store the choice in profiles_dir/<profile>.yaml (injectable so tests edit a copy), or in the file of a path
    profile. Returns sweep.json's dict."""
    profile_path = (profile_file(plan.profile) if is_profile_path(plan.profile) else
                    Path(profiles_dir) / f"{plan.profile}.yaml")
    if write:  # refuse before training, not after
        if not profile_path.is_file():
            raise ParamError(f"--write: no profile file {profile_path}")
        lr_line_span(profile_path.read_bytes().decode().splitlines(keepends=True), str(profile_path))
    rows = run_candidates(plan, progress, jobs)
    out_dir = sweep_dir(plan.profile, sweep_placements(plan.norms))
    earlier, dropped = earlier_rows(plan, rows, out_dir)
    for entry in dropped:
        print(f"an earlier candidate no longer counts, left out of the choice (kept in sweep.json's dropped): "
              f"{entry['row'].get('run_name')}: {entry['why']}")
    result = summarize(plan, rows, command, earlier, dropped)
    json_path = write_results(result, out_dir)
    print(format_table(result))
    for warning in result["warnings"]:
        print(f"warning: {warning}")
    print(f"results: {json_path.parent / 'sweep.csv'}, {json_path}")
    if write:
        write_profile_lr(profile_path, result, json_path)
        print(f"wrote train.lr to {profile_path}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse("sweep", argv)
    command = shlex.join(["python", "-m", "normgrow.sweep", *(sys.argv[1:] if argv is None else argv)])

    def work() -> None:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        plan = make_plan(args.profile, args.norms, args.lrs, seeds, schedules=args.schedules)
        writable_outputs_dir()
        with runner_lock():
            sweep(plan, args.write, command=command, jobs=args.jobs)
    return runner_exit(work)


if __name__ == "__main__":
    sys.exit(main())
