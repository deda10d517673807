"""A grid's file and plan (python -m normgrow.grid runs and judges them: grid.py).

A grid (params/grids/<name>.yaml) is a list of settings, each a name, a sentence, and what it changes against the
profile: dotted profile ``overrides`` (a growth operator, AdamW handling at growth, the lr schedule, the width), the
pair of ``placements`` it compares (a - b, default the grid's), ``tuning_of``, which trains a schedule at the lr and
warmup the profile gives another (``{grow: joint}``: the grown runs at the joint arm's tuning, the protocol a per-arm
sweep replaces; as a freeze control takes its grow arm's and a matched run its joint arm's, spec.for_arm), and
``lr_scale``, which multiplies every arm's lr (a width transfer: the lrs were swept at the profile's width; the
ladder's width-128 rungs halve them, as muP's Adam rule 1/width does for the hidden weights). A grid file's own
``overrides`` go under every setting's, and only there may train.lr be given: the regime ladder pins the lrs and
warmup it trained at, so that a later sweep's ``--write`` into the profile leaves its runs standing.

The plan: every cell (setting x placement x schedule x seed) and the run it reads. A run is one set of recorded
parameters (spec.RunSpec.identity without its name), trained once. A run keeps at their defaults the settings it
never reads (spec.unread_keys: a joint run does not read the growth operator), so runs that a setting does not
change are the same identity as the default's and are shared: with the study's own run (``pre-joint-s0``) when the
study has that variant, else between settings (the first setting in the file that needs it names it:
``grid-<setting>-<norm>-<schedule>-s<seed>``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from .analysis.variants import load_variants
from .config import PARAMS_DIR, ParamError, load_profile, read_yaml
from .paths import NAME
from .rundir import GRID_RUN_PREFIX, check_name, seeded_name
from .runner import Job
from .schema import Bool, Float, Str, in_range, section, validate
from .student.model import NORMS
from .train.growth import SCHEDULES
from .train.spec import for_arm, make_run_spec
from .utils import stable_hash

GRIDS_DIR = PARAMS_DIR / "grids"
CORE = ("joint", "grow", "single")  # the variants of every setting, per placement


@dataclass(frozen=True)
class Setting:
    name: str
    about: str
    placements: tuple[str, str]  # (a, b): gaps are a - b
    overrides: dict = field(default_factory=dict)
    tuning_of: dict = field(default_factory=dict)  # schedule -> the schedule whose lr and warmup it trains at
    lr_scale: float = 1.0  # every arm's lr times this (a width transfer: the lrs were swept at the profile's width)


@dataclass(frozen=True)
class Grid:
    name: str
    seeds: tuple[int, ...]
    settings: tuple[Setting, ...]
    schedules: tuple[str, ...] = CORE  # the schedules each setting trains per placement (joint and single always)
    share_study_runs: bool = True  # False: every run is the grid's own (grid-...), none the study's (load_grid)


PAIR = in_range(f"two different placements of {', '.join(NORMS)}, e.g. [pre, post]",
                lambda v: len(v) == 2 and all(x in NORMS for x in v) and v[0] != v[1])


@section
class SettingFile:
    """One entry of a grid file's settings (load_grid)."""
    name: Annotated[Str, in_range("1-40 letters, digits, '.', '_' or '-'",
                                  lambda v: bool(NAME.fullmatch(v)) and len(v) <= 40)]
    about: Str = ""
    overrides: Annotated[dict, in_range("a mapping of dotted profile keys other than train.lr (every arm trains at "
                                        "its swept lr; tuning_of chooses another arm's)",
                                        lambda v: "train.lr" not in v)] = field(default_factory=dict)
    placements: Annotated[list, PAIR] | None = None  # default: the grid's
    tuning_of: Annotated[dict, in_range(f"a mapping of schedules to schedules ({', '.join(SCHEDULES)})", lambda v: all(
        k in SCHEDULES and w in SCHEDULES for k, w in v.items()))] = field(default_factory=dict)
    lr_scale: Annotated[Float, in_range("a number in (0, 100]", lambda v: 0 < v <= 100)] = 1.0


@section
class GridFile:
    """params/grids/<name>.yaml (load_grid)."""
    placements: Annotated[list, PAIR]
    seeds: Annotated[list, in_range("a non-empty list of integers >= 0", lambda v: bool(v) and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in v))]
    settings: Annotated[list[SettingFile], in_range("a non-empty list of settings", bool)]
    schedules: Annotated[list, in_range(f"a list of {', '.join(CORE)} holding joint and single", lambda v: set(
        v) <= set(CORE) and {"joint", "single"} <= set(v))] = field(default_factory=lambda: list(CORE))
    overrides: dict = field(default_factory=dict)
    share_study_runs: Bool = True


def load_grid(name: str) -> Grid:
    """params/grids/<name>.yaml, validated (GridFile): placements, seeds and settings, and maybe (schedules: those of CORE each
    setting trains, joint and single among them, since the depth gate reads both; default all three; overrides:
    dotted profile keys under every setting's own, the only place train.lr may be given: a grid that pins the lrs
    and warmups it trained at keeps its runs when a sweep later writes others into the profile; share_study_runs,
    default true: false names every run the grid's own, so that a record made to choose the study's protocol
    still reads its runs after the study has moved to another and its run names hold other runs); every
    setting's keys of SettingFile, a unique name usable in run names, placements a pair of placements, tuning_of
    schedule -> schedule. Overrides are validated per run by make_run_spec (plan_grid), which names the key."""
    path = GRIDS_DIR / f"{check_name('grid', name)}.yaml"
    if not path.is_file():
        grids = sorted(p.stem for p in GRIDS_DIR.glob("*.yaml"))
        raise ParamError(f"grid={name!r} has no file {path}; allowed values: {', '.join(grids) or 'none'}")
    raw = read_yaml(path) or {}
    if isinstance(raw, dict) and "rungs" in raw:
        raise ParamError(f"{path} is a grid of studies (one profile a rung): python -m normgrow.width runs it")
    grid = validate(GridFile, raw, str(path))
    settings = tuple(Setting(s.name, s.about, tuple(s.placements or grid.placements), {**grid.overrides, **s.overrides},
                             dict(s.tuning_of), s.lr_scale) for s in grid.settings)
    names = [s.name for s in settings]
    if len(set(names)) != len(names):
        raise ParamError(f"{path}: setting names must be unique (got {', '.join(names)})")
    return Grid(name, tuple(dict.fromkeys(grid.seeds)), settings, tuple(s for s in CORE if s in grid.schedules),
                grid.share_study_runs)


# ------------------------------------------------------------------------------------------------------ the plan

@dataclass(frozen=True)
class Cell:
    setting: str
    norm: str
    schedule: str
    seed: int
    run_name: str
    lr: float
    warmup_steps: int


@dataclass(frozen=True)
class GridPlan:
    profile: str
    grid: Grid
    cells: tuple[Cell, ...]
    jobs: dict[str, Job]  # run name -> its job (each run once, whichever cells share it)
    not_run: dict[str, str]  # setting -> why it cannot run
    overrides: dict = field(default_factory=dict)  # dotted profile keys of every run (plan_grid's overrides)


def run_overrides(profile: str, setting: Setting, norm: str, schedule: str, base: dict | None = None) -> dict:
    """base (overrides of every run) and the setting's overrides for one arm, with ``train.lr`` and
    ``train.warmup_steps`` pinned where tuning_of sends the arm to another schedule's of the same placement, and
    ``train.lr`` where lr_scale multiplies it."""
    overrides = {**(base or {}), **setting.overrides}
    if schedule not in setting.tuning_of and setting.lr_scale == 1.0:
        return overrides
    train = load_profile(profile, overrides).train
    tuned_as = setting.tuning_of.get(schedule, schedule)
    pinned = {"train.lr": for_arm("train.lr", train.lr, norm, tuned_as) * setting.lr_scale}
    if schedule in setting.tuning_of:
        pinned["train.warmup_steps"] = for_arm("train.warmup_steps", train.warmup_steps, norm, tuned_as)
    return {**overrides, **pinned}


def check_settings(grid: Grid, only: list[str] | None) -> None:
    """A ParamError naming the first of ``only`` that is not a setting of the grid, with the allowed values."""
    unknown = sorted(set(only or ()) - {s.name for s in grid.settings})
    if unknown:
        raise ParamError(f"--settings {unknown[0]!r} is not a setting of grid {grid.name!r}; allowed values: "
                         f"{', '.join(s.name for s in grid.settings)}")


def plan_grid(profile: str, grid: Grid, seeds: list[int] | None = None, only: list[str] | None = None,
              processes: int | None = None, overrides: dict | None = None) -> GridPlan:
    """Every cell (setting x placement x core schedule x seed) and the run it reads, sharing runs by identity (module
    docstring). A setting of ``only`` that cannot run is a ParamError; without ``only`` it is listed in not_run.
    overrides: dotted profile keys of every run, the study's runs included (tests shrink the tiny profile onto a
    synthetic cache with them)."""
    check_settings(grid, only)
    variants = load_variants()
    study_variant = {(v.norm, v.schedule): v.name for v in variants.values()
                     if not v.freeze_prefix and v.match_active_layer_tokens is None}
    seeds = list(dict.fromkeys(seeds if seeds is not None else grid.seeds))
    cells, jobs, not_run, by_identity = [], {}, {}, {}
    for setting in grid.settings:
        if only and setting.name not in only:
            continue
        try:
            planned = []
            for norm in setting.placements:
                for schedule in grid.schedules:
                    arm = run_overrides(profile, setting, norm, schedule, overrides)
                    for seed in seeds:
                        spec = make_run_spec(profile=profile, norm=norm, schedule=schedule, seed=seed,
                                             run_name="x", overrides=arm, processes=processes)
                        planned.append((norm, schedule, seed, arm, spec))
        except ParamError as err:
            if only:
                raise ParamError(f"setting {setting.name!r}: {err}") from None
            not_run[setting.name] = str(err)
            continue
        for norm, schedule, seed, arm, spec in planned:
            identity = {k: v for k, v in spec.identity().items() if k != "run_name"}
            key = stable_hash(identity)
            if key not in by_identity:
                study = study_variant.get((norm, schedule)) if grid.share_study_runs else None
                default = (make_run_spec(profile=profile, norm=norm, schedule=schedule, seed=seed, run_name="x",
                                         overrides=overrides, processes=processes).identity() if study else None)
                shared = study is not None and {k: v for k, v in default.items() if k != "run_name"} == identity
                name = seeded_name(study, seed) if shared else f"{GRID_RUN_PREFIX}{setting.name}-{norm}-{schedule}-s{seed}"
                by_identity[key] = name
                params = {"seed": seed, "run_name": name, "norm": norm, "schedule": schedule}
                jobs[name] = Job(name, {**params, "overrides": overrides or {}} if shared else
                                 {**params, "overrides": arm}, {**identity, "run_name": name})
            cells.append(Cell(setting.name, norm, schedule, seed, by_identity[key], spec.profile.train.lr,
                          spec.profile.train.warmup_steps))
    return GridPlan(profile, grid, tuple(cells), jobs, not_run, dict(overrides or {}))
