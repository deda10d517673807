"""docs/RESULTS.md's tables, as Markdown, from the committed records: ``python -m normgrow.results --profile cpu
study`` (outputs/study/<profile>/), ``ladder`` and ``ladder-runs`` (outputs/grid/<profile>/ladder/), ``shapes``
(outputs/grid/<profile>/shapes/), ``robustness`` (the map, outputs/grid/<profile>/robustness/), ``tuning`` (each
sweep record's optima and their neighbours), ``basin`` (the gaps with each arm off its optimum, from the sweep), ``crossover-curve`` (the
grown students' gap at every checkpoint with a simultaneous band), ``time-shares`` (where the study's runs spent their wall time; ``--grid
NAME``: a grid's runs). Prints to stdout; RESULTS.md holds each of TABLES as printed, and tests/test_results_doc.py
checks that it still does for every record committed outside the archive. ``compare --against DIR``: the profile's
study against another training of it (another CPU, numerics version or torch), for the log.
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load pandas (cli.py)
    from .cli import parse_early
    parse_early("results")

import json
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

from .analysis.formats import interval
from .rundir import Summary, grid_dir, read_finished, read_metrics, run_path, study_dir, sweep_dir


def _num(x, digits: int = 3) -> str:
    return "" if pd.isna(x) else f"{x:.{digits}f}"


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _gap(row: pd.Series, value: str, prefix: str | None = None) -> str:
    """A grid record's gap with its 95% interval, signed: row[value] and row[<prefix>_ci_low], row[<prefix>_ci_high]
    (prefix: value itself where the columns share its name, e.g. depth_gain_a)."""
    prefix = prefix or value
    return interval(row[value], row[f"{prefix}_ci_low"], row[f"{prefix}_ci_high"], sign=True)


def study_tables(profile: str) -> str:
    """The study's tables: each variant (mean and 95% interval of val_ce and val_kd_ce, the regime gate's numbers,
    tokens, wall time), each run's final val_ce by seed, the paired gaps with the reference's values, the phase-end
    gaps of the grown students, the depth gate, and each claim as claims.csv words it."""
    d = study_dir(profile)
    stats, runs = pd.read_csv(d / "variant_stats.csv"), pd.read_csv(d / "summary.csv")
    regime = pd.read_csv(d / "regime.csv").set_index("variant")
    variants = _table(
        ["variant", "seeds", "val_ce mean [95% CI]", "val_kd_ce mean [95% CI]", "below unigram (mean)",
         "flat ratio (max)", "trained", "tokens", "active-layer tokens", "wall s (mean)"],
        [[r["variant"], r["n_seeds"], interval(r["val_ce_mean"], r["val_ce_ci_low"], r["val_ce_ci_high"]),
          interval(r["val_kd_ce_mean"], r["val_kd_ce_ci_low"], r["val_kd_ce_ci_high"]),
          _num(regime.loc[r["variant"], "margin_below_unigram"]), _num(regime.loc[r["variant"], "max_flat_ratio"]),
          "yes" if regime.loc[r["variant"], "trained"] else "no", f"{r['tokens_mean']:,.0f}",
          f"{r['active_layer_tokens_mean']:,.0f}", f"{r['wall_s_mean']:.0f}"] for _, r in stats.iterrows()])
    seeds = sorted(runs["seed"].unique())
    by_seed = _table(["variant"] + [f"seed {s}" for s in seeds],
                     [[v] + [_num(dict(zip(g["seed"], g["val_ce"])).get(s), 4) for s in seeds]
                      for v, g in runs.groupby("variant")])
    gaps = pd.read_csv(d / "gaps.csv")
    gaps = _table(["paired gap (val_ce)", "n", "mean [95% CI]", "MDE", "reference"],
                  [[r["comparison"], r["n"], interval(r["mean"], r["ci_low"], r["ci_high"], 4, True), _num(r["mde"]),
                    "" if pd.isna(r["reference_text"]) else r["reference_text"]]
                   for _, r in gaps[gaps["metric"] == "val_ce"].iterrows()])
    crossover = _table(["stage end", "depth", "pre-grow", "post-grow", "pre - post [95% CI]", "leader"],
                       [[r["stage"], r["depth"], _num(r["pre-grow_mean"]), _num(r["post-grow_mean"]),
                         interval(r["gap_mean"], r["gap_ci_low"], r["gap_ci_high"], 4, True), r["leader"]]
                        for _, r in pd.read_csv(d / "crossover.csv").iterrows()])
    depth = _table(["placement", "single - joint (nats)", "needs >=", "depth pays"],
                   [[r["norm"], _num(r["depth_gain"], 4), _num(r["margin"], 4), "yes" if r["pays"] else "no"]
                    for _, r in pd.read_csv(d / "depth.csv").iterrows()])
    claims = _table(["claim", "status", "reading"],
                    [[r["claim"], r["status"], r["sentence"].replace("|", "/")]
                     for _, r in pd.read_csv(d / "claims.csv").iterrows()])
    return "\n\n".join([variants, by_seed, gaps, crossover, depth, claims])


def ladder_table(profile: str) -> str:
    """A row per rung of the regime ladder (grid.csv): its regime and each placement's depth gain (single - joint,
    paired by seed, 95% interval), the runs finished of those planned, and whether depth pays."""
    frame = pd.read_csv(grid_dir(profile, "ladder") / "grid.csv")
    rows = []
    for _, r in frame.iterrows():
        gains = [_gap(r, f"depth_gain_{s}") if pd.notna(r[f"depth_gain_{s}"]) else "" for s in "ab"]
        rows.append([r["setting"], f"{int(r['unique_tokens']):,}", f"{int(r['run_tokens']):,}", int(r["d_model"]),
                     r["warmup_steps"], _num(r["joint_tflop"], 1), *gains,
                     f"{int(r['runs_finished'])} of {int(r['runs_needed'])}",
                     "yes" if r["depth_pays"] is True or r["depth_pays"] == "True" else "no"])
    return _table(["rung", "unique tokens", "tokens per run", "d_model", "warmup", "TFLOP (joint run)",
                   "depth gain pre", "depth gain post", "runs done", "depth pays"], rows)


def ladder_runs_table(profile: str) -> str:
    """The final val_ce (summary.json) of every finished ladder run: a row per rung, a column per arm and seed."""
    cells = pd.read_csv(grid_dir(profile, "ladder") / "runs.csv")
    cells = cells[cells["status"] == "finished"]
    cells = cells.assign(val_ce=[read_finished(run_path(profile, n))[0].val_ce for n in cells["run_name"]],
                         arm=cells["norm"] + "-" + cells["schedule"] + " s" + cells["seed"].astype(str))
    table = cells.pivot(index="setting", columns="arm", values="val_ce")
    arms = sorted(table.columns, key=lambda a: (a.split("-")[0] != "pre", a))
    return _table(["rung", *arms], [[setting, *(_num(table.loc[setting, a], 4) for a in arms)]
                                    for setting in dict.fromkeys(cells["setting"])])


def shapes_table(profile: str) -> str:
    """A row per curriculum shape (grid.csv's depth gains, curriculum.csv's grown students): the depth gain, each
    grown student's final val_ce and its gap to its own single block, the phase-end gaps and leaders."""
    folder = grid_dir(profile, "shapes")
    gains = pd.read_csv(folder / "grid.csv").set_index("setting")
    rows = []
    for _, r in pd.read_csv(folder / "curriculum.csv").iterrows():
        g = gains.loc[r["setting"]]
        rows.append([r["stages"], r["n_seeds"],
                     *(_gap(g, f"depth_gain_{s}") for s in "ab"), _num(r["grow_a"]), _num(r["grow_b"]),
                     *(_gap(r, f"grow_vs_single_{s}") for s in "ab"),
                     r["phase_gaps"], r["phase_leaders"]])
    return _table(["stages", "seeds", "depth gain pre", "depth gain post", "grown pre", "grown post",
                   "grown - single pre", "grown - single post", "pre - post at each phase end", "leader"], rows)


def robustness_table(profile: str) -> str:
    """A row per setting of the robustness map (grid.csv): the pair it compares (a - b), the joint gap, the grow gap
    and the interaction (grow gap - joint gap) with their MDEs, each placement's depth gain, and both verdicts; paired
    by seed, 95% intervals."""
    rows = []
    for _, r in pd.read_csv(grid_dir(profile, "robustness") / "grid.csv").iterrows():
        rows.append([r["setting"], f"{r['a']} - {r['b']}", int(r["n_seeds"]), _gap(r, "joint_gap", "joint"),
                     f"{_gap(r, 'grow_gap', 'grow')} ({_num(r['grow_mde'])})",
                     f"{_gap(r, 'interaction')} ({_num(r['interaction_mde'])})", _gap(r, "depth_gain_a"),
                     _gap(r, "depth_gain_b"), r["grow_verdict"], r["interaction_verdict"]])
    return _table(["setting", "a - b", "seeds", "joint gap", "grow gap (MDE)", "interaction (MDE)", "depth gain a",
                   "depth gain b", "grow claim", "interaction claim"], rows)


def _lr(x: float) -> str:
    """1.69704e-2 -> '1.70e-2'."""
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _neighbours(means: pd.Series, value, fmt) -> str:
    """The nearest candidates below and above value (means indexed by lr or warmup), each with its mean val_ce."""
    below = max(means.index[means.index < value], default=None)
    above = min(means.index[means.index > value], default=None)
    return ", ".join(f"{fmt(k)} {means[k]:.4f}" for k in (below, above) if k is not None) or "none tried"


def tuning_table(profile: str) -> str:
    """A row per arm of each sweep record of the profile (outputs/sweep/<profile>/sweep.json, then each placements'
    folder's): the lr and warmup it chose, their mean final val_ce over the seeds, and the nearest candidates on each
    side in lr (at its warmup) and in warmup (at its lr) with theirs: the bracket behind each optimum."""
    root = sweep_dir(profile)
    rows = []
    for path in [root / "sweep.json", *sorted(root.glob("*/sweep.json"))]:
        record = json.loads(path.read_text())
        means = pd.DataFrame(record["rows"]).groupby(["norm", "schedule", "lr", "warmup_steps"])["val_ce"].mean()
        for norm in record["norms"]:
            for schedule in record["schedules"]:
                chosen = record["chosen"][norm][schedule]
                arm = means.loc[(norm, schedule)]
                lr, warmup = chosen["lr"], chosen["warmup_steps"]
                same_warmup = arm.xs(warmup, level="warmup_steps")
                same_lr = arm.xs(lr, level="lr")
                rows.append([f"{norm}-{schedule}", _lr(lr), warmup, f"{chosen['val_ce']:.4f}",
                             f"lr {_neighbours(same_warmup, lr, _lr)}; warmup {_neighbours(same_lr, warmup, str)}"])
    return _table(["arm", "lr", "warmup (steps a phase)", "mean val_ce", "the neighbours (mean val_ce)"], rows)


BASIN_FACTORS = (0.7071, 1.0, 1.4142)
"""The lr factors (of each arm's tuned lr, at its tuned warmup) that the cpu sweep tried for every pre- and post-norm
arm on seeds 0-2."""


def basin_table(profile: str) -> str:
    """How much post-norm's lead needs its tuned optimum (Wortsman et al. 2023 read a basin, not a point): per
    schedule, the paired gap pre(lr x f_pre) - post(lr x f_post) over the seeds both arms finished, each arm at its
    tuned warmup, for every pair of factors the sweep record (outputs/sweep/<profile>/sweep.json) holds; no run
    trained for it."""
    from .analysis.stats import mean_ci
    from .config import load_profile
    from .train.spec import for_arm
    train = load_profile(profile).train
    rows = pd.DataFrame(json.loads((sweep_dir(profile) / "sweep.json").read_text())["rows"])
    table = []
    for schedule in ("joint", "grow", "single"):
        at = {}
        for norm in ("pre", "post"):
            lr = for_arm("train.lr", train.lr, norm, schedule)
            warmup = for_arm("train.warmup_steps", train.warmup_steps, norm, schedule)
            arm = rows[(rows["norm"] == norm) & (rows["schedule"] == schedule) & (rows["warmup_steps"] == warmup)]
            for f in BASIN_FACTORS:
                hit = arm[(arm["lr"] / lr - f).abs() < 1e-3]
                at[norm, f] = hit.set_index("seed")["val_ce"]
        for f_pre in BASIN_FACTORS:
            cells = []
            for f_post in BASIN_FACTORS:
                pre, post = at["pre", f_pre], at["post", f_post]
                seeds = pre.index.intersection(post.index)
                g = mean_ci(pre[seeds] - post[seeds])
                cells.append(interval(g["mean"], g["ci_low"], g["ci_high"], sign=True) if g["n"] else "not tried")
            table.append([schedule, f"x{f_pre:g}", *cells])
    return _table(["schedule", "pre-norm's lr", *(f"post-norm's lr x{f:g}" for f in BASIN_FACTORS)], table)


def subset_curve(run_dir: Path) -> dict[int, float]:
    """A grown run's validation CE on the fixed evaluation subset at every checkpoint after step 0 (eval and
    growth_eval records, and each phase end's own subset value), by tokens trained."""
    curve = {}
    for r in read_metrics(run_dir, note=False):
        if r["kind"] in ("eval", "growth_eval") and r["step"] > 0 and not r.get("full_split"):
            curve[r["tokens"]] = r["val_ce"]
        elif r["kind"] == "phase_end" and r.get("val_ce_subset") is not None:
            curve[r["tokens"]] = r["val_ce_subset"]
    return curve


def crossover_curve_table(profile: str) -> str:
    """The crossover read along the whole curriculum: at every checkpoint both grown students share (the same
    subset rows each time), the paired gap pre-grow - post-grow over the study's seeds, with a simultaneous 95%
    band over the checkpoints (Bonferroni: each a t interval at 1 - 0.05 / K). The rule, fixed before a larger
    record is read: a crossover is a checkpoint whose band lies wholly on one side of zero followed by a later one
    wholly on the other; a band on one side only, from some checkpoint on, is a lead held from there."""
    from .analysis.stats import t_quantile
    runs = pd.read_csv(study_dir(profile) / "summary.csv")
    seeds = sorted(set(runs.loc[runs["variant"] == "pre-grow", "seed"]) & set(runs.loc[runs["variant"] == "post-grow", "seed"]))
    curves = {(norm, s): subset_curve(run_path(profile, f"{norm}-grow-s{s}")) for norm in ("pre", "post") for s in seeds}
    tokens = sorted(set.intersection(*(set(c) for c in curves.values())))
    n, k = len(seeds), len(tokens)
    q = t_quantile(1 - 0.05 / (2 * k), n - 1) if n > 1 and k else float("nan")
    rows, sides = [], []
    for t in tokens:
        d = pd.Series([curves["pre", s][t] - curves["post", s][t] for s in seeds])
        half = q * d.std(ddof=1) / n ** 0.5
        side = "post-norm leads" if d.mean() - half > 0 else "pre-norm leads" if d.mean() + half < 0 else "not resolved"
        sides.append(side)
        rows.append([f"{t:,}", f"{d.mean():+.3f}", f"[{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]", side])
    resolved = [x for x in sides if x != "not resolved"]
    crossed = any(a != b for a, b in zip(resolved, resolved[1:]))
    at = ", ".join(row[0] for row, side in zip(rows, sides) if side != "not resolved")
    verdict = (f"crossover (resolved at {at} tokens)" if crossed else
               f"no crossover: {resolved[0]} at every resolved checkpoint ({len(resolved)} of {k}: {at} tokens)"
               if resolved else "not resolved at any checkpoint")
    return (_table(["tokens trained", "pre-grow - post-grow (subset)", f"simultaneous 95% band ({n} seeds, {k} "
                    "checkpoints)", "reading"], rows) + f"\n\n{verdict}.")


TIME_PARTS = ("steps_s", "eval_s", "checkpoint_s", "other_s")
"""A run's wall time in parts: its training steps (metrics.jsonl's train records: tokens per step / tok_s), its
evaluations and checkpoints (summary.json's eval_s and checkpoint_s), and the rest (step-0 set-up, compilation, data).
Start-up before a run's clock starts (the kernel, imports, the cache key) is not in wall_s."""


def _add_run(totals: dict, profile: str, summary: Summary) -> None:
    """One run's wall time and its TIME_PARTS added to totals (a run without eval_s, before numerics 3, is skipped)."""
    if summary.eval_s is None:
        return
    tokens_per_step = summary.tokens / summary.steps
    train = [r for r in read_metrics(run_path(profile, summary.run_name)) if r["kind"] == "train"]
    steps_s = sum(tokens_per_step / r["tok_s"] for r in train)
    totals["runs"] += 1
    totals["wall_s"] += summary.wall_s
    totals["steps_s"] += steps_s
    totals["eval_s"] += summary.eval_s
    totals["checkpoint_s"] += summary.checkpoint_s
    totals["other_s"] += summary.wall_s - steps_s - summary.eval_s - summary.checkpoint_s


def study_time_shares(profile: str) -> dict[str, dict[str, float]]:
    """{variant: {runs, wall_s, and each of TIME_PARTS}} summed over the study's runs of each variant (the runs the
    report counts, assigned by their recorded parameters)."""
    from .analysis.variants import collect_runs
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (variant, _), summary in collect_runs(profile).assigned.items():
        _add_run(totals[variant], profile, summary)
    return {v: dict(t) for v, t in sorted(totals.items())}


def grid_time_shares(profile: str, grid: str) -> dict[str, dict[str, float]]:
    """{"<setting> <schedule>": the same sums} over the grid's finished runs; a run that serves several settings
    (the study's own, or one shared by identity) is counted under the first setting that reads it."""
    from .grid import read_cells
    from .grid_plan import load_grid, plan_grid
    plan = plan_grid(profile, load_grid(grid))
    runs = read_cells(plan)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counted = set()
    for cell in plan.cells:
        run = runs[cell.run_name]
        if run.status != "finished" or cell.run_name in counted:
            continue
        counted.add(cell.run_name)
        _add_run(totals[f"{cell.setting} {cell.schedule}"], profile, run.summary)
    return {k: dict(t) for k, t in totals.items()}


def time_shares_table(profile: str, grid: str | None = None) -> str:
    """Each variant's (or grid setting's) mean wall seconds and the TIME_PARTS' shares of its wall time, and all runs'."""
    rows = grid_time_shares(profile, grid) if grid else study_time_shares(profile)
    whole: dict[str, float] = defaultdict(float)
    for t in rows.values():
        for k, v in t.items():
            whole[k] += v
    return _table([("setting schedule" if grid else "variant"), "runs", "wall s (mean)", "steps", "evaluations",
                   "checkpoints", "other"],
                  [[name, f"{t['runs']:.0f}", f"{t['wall_s'] / t['runs']:.1f}",
                    *(f"{100 * t[k] / t['wall_s']:.1f}%" for k in TIME_PARTS)]
                   for name, t in [*rows.items(), *([("all", whole)] if whole else [])]])


def compare_studies(a_dir: Path, b_dir: Path) -> str:
    """Two trainings of one study side by side, from the two folders' summary.csv and gaps.csv: how far each run's
    final val_ce moved, each variant's mean, and each gap with its interval. Runs are joined by name; a run in one
    folder only is listed, never dropped silently."""
    a, b = (pd.read_csv(d / "summary.csv") for d in (a_dir, b_dir))
    runs = a.merge(b, on="run_name", how="outer", suffixes=("_a", "_b"), indicator=True)
    lines = [f"a: {a_dir}", f"b: {b_dir}", ""]
    for side, label in (("left_only", "a"), ("right_only", "b")):
        only = sorted(runs.loc[runs["_merge"] == side, "run_name"])
        if only:
            lines.append(f"runs in {label} only: {', '.join(only)}")
    both = runs[runs["_merge"] == "both"].copy()
    both["d"] = both["val_ce_b"] - both["val_ce_a"]
    d = both["d"].abs()
    lines += [f"{len(both)} runs in both: final val_ce b - a, |median| {d.median():.4f}, |max| {d.max():.4f} "
              f"({both.loc[d.idxmax(), 'run_name']})", ""]
    lines.append(_table(["variant", "runs", "mean a", "mean b", "b - a"],
                        [[variant, len(g), f"{g['val_ce_a'].mean():.3f}", f"{g['val_ce_b'].mean():.3f}",
                          f"{g['val_ce_b'].mean() - g['val_ce_a'].mean():+.3f}"]
                         for variant, g in both.groupby("variant_a")]))
    gaps = pd.read_csv(a_dir / "gaps.csv").merge(pd.read_csv(b_dir / "gaps.csv"), on=["gap", "metric"],
                                                 suffixes=("_a", "_b"))
    lines += ["", _table(["gap", "metric", "a [95% CI]", "b [95% CI]", "b - a"],
                         [[g["gap"], g["metric"],
                           *(interval(g[f"mean_{s}"], g[f"ci_low_{s}"], g[f"ci_high_{s}"], sign=True) for s in "ab"),
                           f"{g['mean_b'] - g['mean_a']:+.3f}"] for _, g in gaps.iterrows()])]
    return "\n".join(lines)


def width_table(profile: str) -> str:
    """The width grid (width.csv) by width (width.by_width): a row per quantity, a column per rung."""
    from .width import by_width
    return _table(*by_width(pd.read_csv(grid_dir(profile, "width") / "width.csv")))


def width_trend_table(profile: str) -> str:
    """The width grid's trends (trend.csv): each quantity's least-squares slope per doubling of width over the rungs'
    per-seed values, its 95% interval, and the reading."""
    t = pd.read_csv(grid_dir(profile, "width") / "trend.csv")
    return _table(["quantity", "points", "rungs", "slope per doubling [95% CI]", "reference", "reading"],
                  [[r["quantity"], int(r["n"]), int(r["rungs"]), interval(r["slope"], r["ci_low"], r["ci_high"], 4,
                                                                          sign=True),
                    "" if pd.isna(r["reference"]) else r["reference"], r["direction"]] for _, r in t.iterrows()])


def width_transfer_table(profile: str) -> str:
    """The lr brackets of the width grid (transfer.csv): each arm's mean final val_ce at each factor of its
    transferred lr, the best factor, how far x1 is from the best, and whether the transfer holds."""
    t = pd.read_csv(grid_dir(profile, "width") / "transfer.csv")
    return _table(["profile", "parametrization", "arm", "x0.5", "x1", "x2", "best", "x1 - best", "reading"],
                  [[r["profile"], r["parametrization"], "" if pd.isna(r["arm"]) else r["arm"],
                    *(_num(r[f], 3) for f in ("x0.5", "x1", "x2")),
                    "" if pd.isna(r["best_factor"]) else f"x{r['best_factor']:g}", _num(r["x1_minus_best"], 3),
                    r["verdict"]] for _, r in t.iterrows()])


TABLES = {"study": study_tables, "ladder": ladder_table, "ladder-runs": ladder_runs_table, "shapes": shapes_table,
          "robustness": robustness_table, "tuning": tuning_table, "basin": basin_table,
          "crossover-curve": crossover_curve_table, "time-shares": time_shares_table, "width": width_table,
          "width-trend": width_trend_table, "width-transfer": width_transfer_table}


def record_of(table: str, profile: str):
    """The folder a table reads: the study's, the sweeps', or the grid's its name begins with."""
    if table in ("tuning", "basin"):
        return sweep_dir(profile)
    return (study_dir(profile) if table in ("study", "time-shares", "crossover-curve")
            else grid_dir(profile, table.split("-")[0]))


def main(argv: list[str] | None = None) -> int:
    from .cli import parse
    args = parse("results", argv)
    if args.table not in (*TABLES, "compare"):
        raise SystemExit(f"python -m normgrow.results: no table {args.table!r}; the tables: {', '.join(TABLES)}, "
                         "compare")
    if (args.against is not None) != (args.table == "compare"):
        raise SystemExit("python -m normgrow.results: --against DIR goes with compare, and only with it")
    if args.grid is not None and args.table != "time-shares":
        raise SystemExit("python -m normgrow.results: --grid goes with time-shares only")
    if args.table == "compare":
        print(compare_studies(study_dir(args.profile), Path(args.against)))
    elif args.table == "time-shares":
        print(time_shares_table(args.profile, args.grid))
    else:
        print(TABLES[args.table](args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
