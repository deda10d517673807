"""The width grid: ``python -m normgrow.width [--report-only] [--jobs N]``: does the study's answer hold as the
student widens?

params/grids/width.yaml names the rungs (derived profiles: the cpu study at another width under muP, lrs transferred
from cpu) and the lr brackets that justify the transfer. Training runs, in order and resumably, each bracket's sweep
(``python -m normgrow.sweep --profile <p> --lr-factors ... --seeds ...``) and each rung's study (``python -m
normgrow.study --profile <rung>``), each with its own runner, record and gates. The record (outputs/grid/cpu/width/)
reads only their finished records:
  width.csv     a row per rung and quantity: mean over paired seeds, 95% interval, n, the study's verdict
  trend.csv     a row per quantity: the slope of the per-seed values against log2(width), its 95% interval, and
                whether the gap heads toward the reference's value
  transfer.csv  a row per bracketed arm: mean final val_ce at each lr factor, the best factor, x1 - best, transfers
  width.svg     the joint gap, the grow gap and the growth increment against width, with the reference's values
  report.html   the figure and the three tables
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("width")

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Annotated

import pandas as pd

from .analysis.formats import interval
from .analysis.stats import LEVEL, line_fit, mean_ci
from .cli import parse
from .config import PARAMS_DIR, load_profile, read_yaml
from .identity import directory_conflict
from .rundir import grid_dir, is_finished, read_finished, run_path, study_dir
from .runner import default_jobs, runner_exit
from .schema import AT_LEAST_ZERO, POSITIVE, Float, Int, Str, in_range, section, validate
from .utils import atomic_write_json, atomic_write_text

GRID_FILE = PARAMS_DIR / "grids" / "width.yaml"
SEED_QUANTITIES = {
    # name: (a, b) variants of a per-seed difference a - b, or (first, second) quantities for first - second
    "joint gap": ("pre-joint", "post-joint"),
    "grow gap": ("pre-grow", "post-grow"),
    "single gap": ("pre-single", "post-single"),
    "growth increment": ("grow gap", "single gap"),
    "freeze gap": ("pre-grow-freeze", "post-grow-freeze"),
    "matched (post)": ("post-joint-matched", "post-grow"),
    "depth gain (pre)": ("pre-single", "pre-joint"),
    "depth gain (post)": ("post-single", "post-joint"),
}
"""The per-seed quantities of a rung (nats of final validation CE; gaps are pre - post: positive, post-norm better)."""
PHASE_GAPS = "grow gap at phase {} end"
CLAIM_OF = {"joint gap": "headline-joint", "grow gap": "headline-grow", "growth increment": "obs3-single",
            "freeze gap": "obs3-freeze", "matched (post)": "obs1-matched"}
REFERENCE = {"joint gap": 0.0004, "grow gap": 0.0328}
FIGURE_QUANTITIES = ("joint gap", "grow gap", "growth increment")


@section
class WidthGrid:
    """params/grids/width.yaml: the rungs (profiles, one study each), the lr brackets (profile: lr factors holding 1,
    run on bracket_seeds) and the loss margin within which the transferred lr counts as transferring."""
    rungs: list[Str]
    brackets: dict[str, Annotated[list, in_range("positive lr factors holding 1", lambda v: 1 in v and all(
        isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in v))]]
    bracket_seeds: list[Annotated[Int, AT_LEAST_ZERO]]
    transfer_margin: Annotated[Float, POSITIVE]


def load_width_grid(path: Path = GRID_FILE) -> WidthGrid:
    grid = validate(WidthGrid, read_yaml(path) or {}, str(path))
    for profile in [*grid.rungs, *grid.brackets]:
        load_profile(profile)  # a ParamError naming the profile's file and key
    return grid


def width_of(profile: str) -> int:
    return load_profile(profile).student.d_model


def rung_seeds(profile: str) -> pd.DataFrame | None:
    """The rung's per-seed quantities (SEED_QUANTITIES and the phase-end grow gaps), a row per seed, from its
    study's summary.csv; None before the study's record exists."""
    path = study_dir(profile) / "summary.csv"
    if not path.is_file():
        return None
    runs = pd.read_csv(path)
    runs = runs[runs["variant"].notna()]
    table = runs.pivot_table(index="seed", columns="variant", values="val_ce", aggfunc="first")
    out = pd.DataFrame(index=table.index)
    for name, (a, b) in SEED_QUANTITIES.items():
        if a in out and b in out:
            out[name] = out[a] - out[b]
        elif a in table and b in table:
            out[name] = table[a] - table[b]
    phases = sorted(int(c.removeprefix("val_ce_p")) for c in runs.columns if c.startswith("val_ce_p"))
    for p in phases[:-1]:
        grown = runs.pivot_table(index="seed", columns="variant", values=f"val_ce_p{p}", aggfunc="first")
        if {"pre-grow", "post-grow"} <= set(grown):
            out[PHASE_GAPS.format(p)] = grown["pre-grow"] - grown["post-grow"]
    return out


def rung_claims(profile: str) -> dict[str, str]:
    path = study_dir(profile) / "claims.csv"
    return dict(pd.read_csv(path)[["claim", "status"]].values) if path.is_file() else {}


def rung_drift(profile: str) -> tuple[dict[str, float], str]:
    """The top-boundary RMS drift over the curriculum per placement (the diagnostics' obs4 evidence, all positions:
    last phase over first, geometric mean over seeds) and obs4's status."""
    path = study_dir(profile) / "diagnostics.json"
    if not path.is_file():
        return {}, ""
    claims = {c["claim"]: c for c in json.loads(path.read_text()).get("claims", [])}
    obs4 = claims.get("obs4-stability", {})
    evidence = obs4.get("evidence", {})
    return ({f"top-boundary drift ({norm})": evidence[f"{norm}/all"] for norm in ("pre", "post")
             if f"{norm}/all" in evidence}, obs4.get("status", ""))


def width_frame(grid: WidthGrid) -> pd.DataFrame:
    """width.csv: a row per rung and quantity."""
    rows = []
    for profile in grid.rungs:
        seeds, claims = rung_seeds(profile), rung_claims(profile)
        base = {"rung": profile, "width": width_of(profile)}
        if seeds is None:
            rows.append(base | {"quantity": "", "status": "study not finished"})
            continue
        for name in [*SEED_QUANTITIES, *(c for c in seeds if c.startswith("grow gap at phase"))]:
            if name in seeds:
                s = mean_ci(seeds[name])
                rows.append(base | {"quantity": name, "mean": s["mean"], "ci_low": s["ci_low"],
                                    "ci_high": s["ci_high"], "n": s["n"], "status": claims.get(CLAIM_OF.get(name), "")})
        drift, status = rung_drift(profile)
        for name, value in drift.items():
            rows.append(base | {"quantity": name, "mean": value, "n": len(seeds), "status": status})
    return pd.DataFrame(rows, columns=["rung", "width", "quantity", "mean", "ci_low", "ci_high", "n", "status"])


def trend_frame(grid: WidthGrid) -> pd.DataFrame:
    """trend.csv: each per-seed quantity's slope against log2(width) over every finished rung's seeds. With the
    interval excluding 0: toward the reference when the fitted gap at the widest rung is nearer the reference's value
    than at the narrowest, away when farther, and crosses the reference when the fitted line passes it between them."""
    frames = []
    for profile in grid.rungs:
        seeds = rung_seeds(profile)
        if seeds is not None:
            frames.append(seeds.assign(log2_width=math.log2(width_of(profile))))
    if not frames:
        return pd.DataFrame(columns=["quantity", "n", "rungs", "slope", "ci_low", "ci_high", "reference", "direction"])
    data = pd.concat(frames)
    rows = []
    for name in [*SEED_QUANTITIES, *sorted(c for c in data if c.startswith("grow gap at phase"))]:
        if name not in data:
            continue
        fit = line_fit(data["log2_width"], data[name])
        ref = REFERENCE.get(name)
        rungs = int(data.loc[data[name].notna(), "log2_width"].nunique())
        if not math.isfinite(fit["slope"]) or rungs < 2:
            direction = "not enough rungs"
        elif fit["ci_low"] <= 0 <= fit["ci_high"]:
            direction = "flat (interval includes 0)"
        elif ref is None:
            direction = "grows with width" if fit["slope"] > 0 else "shrinks with width"
        else:
            narrow, wide = (fit["intercept"] + fit["slope"] * x for x in (data["log2_width"].min(),
                                                                        data["log2_width"].max()))
            if (narrow - ref) * (wide - ref) < 0:
                direction = "crosses the reference"
            else:
                direction = "toward the reference" if abs(wide - ref) < abs(narrow - ref) else "away from the reference"
        rows.append({"quantity": name, "n": fit["n"], "rungs": rungs, "slope": fit["slope"], "ci_low": fit["ci_low"],
                     "ci_high": fit["ci_high"], "reference": ref, "direction": direction})
    return pd.DataFrame(rows)


def bracket_rows(profile: str, factors: list, seeds: list) -> list[dict]:
    """The finished candidates of a bracket's sweep as planned (sweep.make_plan: the same run names and lrs), each
    read like the sweep's record reads it (sweep.candidate_row), so an interrupted sweep counts what it finished."""
    from .sweep import candidate_row, make_plan
    plan = make_plan(profile, ["pre", "post"], None, seeds, schedules=["joint", "grow", "single"], lr_factors=factors)
    rows = []
    for spec in plan.specs:
        if is_finished(spec.dir) and not directory_conflict(spec.dir, spec.identity()):
            summary, identity = read_finished(spec.dir)
            rows.append(candidate_row(identity, summary.to_json()))
    return rows


def transfer_frame(grid: WidthGrid) -> pd.DataFrame:
    """transfer.csv: per bracketed profile and arm, mean final val_ce over the bracket seeds at each lr factor of
    the transferred lr (its finished candidates: bracket_rows), the best factor, x1 - best and whether the transfer
    holds; an arm without every factor on every seed is incomplete."""
    rows = []
    for profile, factors in grid.brackets.items():
        prof = load_profile(profile)
        base = {"profile": profile, "width": prof.student.d_model, "parametrization": prof.student.parametrization}
        records = pd.DataFrame(bracket_rows(profile, factors, grid.bracket_seeds))
        if records.empty:
            rows.append(base | {"arm": "", "verdict": "bracket not trained"})
            continue
        for norm, schedule in ((n, s) for n in ("pre", "post") for s in ("joint", "grow", "single")):
            arm = records[(records["norm"] == norm) & (records["schedule"] == schedule)]
            lr1 = prof.train.lr[norm][schedule] if isinstance(prof.train.lr, dict) else prof.train.lr
            arm = arm.assign(factor=(arm["lr"] / lr1).round(3))
            means = arm.groupby("factor")["val_ce"].agg(["mean", "count"])
            means = means[means["count"] == len(grid.bracket_seeds)]["mean"]
            row = base | {"arm": f"{norm}-{schedule}"} | {f"x{f:g}": means.get(round(f, 3)) for f in factors}
            if 1.0 not in means or len(means) < len(factors):
                rows.append(row | {"verdict": "bracket incomplete"})
                continue
            best = float(means.idxmin())
            gap = float(means[1.0] - means.min())
            edge = best in (min(factors), max(factors)) and best != 1.0
            holds = gap <= grid.transfer_margin
            verdict = ("transfers" if holds else "does not transfer") + ("; best at the bracket's edge" if edge else "")
            rows.append(row | {"best_factor": best, "x1_minus_best": gap, "verdict": verdict})
    return pd.DataFrame(rows)


def width_figure(table: pd.DataFrame):
    """The FIGURE_QUANTITIES against width (log scale): means with their 95% intervals, one panel each, the
    reference's value as a dashed line where it has one, zero as a grey line; a rung not yet finished is named, not
    drawn. The width page draws it; width.svg is its export (render.write_svg)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .viz.render import style_figure
    rows = table[table["quantity"].isin(FIGURE_QUANTITIES)]
    widths = sorted(int(w) for w in table["width"].unique())
    fig = make_subplots(1, len(FIGURE_QUANTITIES), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"<b>{name}</b> (pre - post)" for name in FIGURE_QUANTITIES])
    for col, name in enumerate(FIGURE_QUANTITIES, 1):
        mine = rows[(rows["quantity"] == name) & rows["mean"].notna()].sort_values("width")
        fig.add_trace(go.Scatter(
            x=mine["width"], y=mine["mean"], mode="markers", marker=dict(color="#333", size=8), name=name,
            showlegend=False, error_y=dict(type="data", symmetric=False, color="#333",
                                           array=mine["ci_high"] - mine["mean"], arrayminus=mine["mean"] - mine["ci_low"]),
            hovertemplate=f"{name} at width %{{x}}: %{{y:+.4f}} nats<extra></extra>"), 1, col)
        fig.add_hline(y=0, line=dict(color="#bbb", width=1), row=1, col=col)
        if name in REFERENCE:
            fig.add_hline(y=REFERENCE[name], line=dict(color="#888", dash="dash"), row=1, col=col,
                          annotation_text=f"reference {REFERENCE[name]:g}", annotation_position="bottom left")
        for wd in sorted(set(widths) - set(int(w) for w in mine["width"])):
            fig.add_annotation(x=math.log10(wd), y=0, yref=f"y{col if col > 1 else ''} domain", yanchor="bottom",
                               text="not yet", showarrow=False, font=dict(color="#999"), row=1, col=col)
    style_figure(fig, height=380)
    fig.update_xaxes(type="log", tickmode="array", tickvals=widths, ticktext=[str(w) for w in widths],
                     range=[math.log10(widths[0]) - 0.15, math.log10(widths[-1]) + 0.15],
                     title_text="student width (d_model)")
    fig.update_yaxes(title_text="final val CE gap (nats; > 0: post-norm better)", col=1)
    fig.update_layout(margin=dict(t=70))
    return fig


def by_width(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """width.csv as a row per quantity and a column per rung: the mean over paired seeds with its 95% interval (a
    drift as a factor, last phase over first), the seeds and the rung's verdict where the quantity is a claim's (a
    drift's is obs4-stability's); the first row says whether each rung's study has finished. (header, rows)."""
    rungs = list(dict.fromkeys(table["rung"]))
    cell = {}
    for _, r in table[table["quantity"].notna() & (table["quantity"] != "")].iterrows():
        drift = r["quantity"].startswith("top-boundary drift")
        value = f"x{r['mean']:.2f}" if drift else interval(r["mean"], r["ci_low"], r["ci_high"], 4, sign=True)
        status = "" if pd.isna(r["status"]) or r["status"] == "" else f" {'obs4-stability ' if drift else ''}{r['status']}"
        cell[r["quantity"], r["rung"]] = f"{value} ({int(r['n'])}){status}"
    unfinished = {r: st for r, q, st in table[["rung", "quantity", "status"]].itertuples(index=False)
                  if pd.isna(q) or q == ""}
    quantities = dict.fromkeys(q for q in table["quantity"] if pd.notna(q) and q != "")
    rows = [[q, *(cell.get((q, g), "") for g in rungs)] for q in quantities]
    return ["quantity (seeds)", *rungs], [["study", *(unfinished.get(g, "finished") for g in rungs)], *rows]


def report_page(table: pd.DataFrame, trend: pd.DataFrame, transfer: pd.DataFrame):
    """The width grid's page in the report's style (render.Page): the figure, the quantities by width, the trend and
    the transfer."""
    from .viz.render import Page, table as html_table
    header, rows = by_width(table)
    page = Page("normgrow width grid").add(
        "<h1>Does the study's answer hold as the student widens?</h1>",
        "<p>Each width is the whole cpu study (every variant, its gates and diagnostics) under muP, its lrs "
        "transferred from width 64; held fixed: tokens per run (786,432: a wider student sees fewer tokens per "
        "parameter), depth 9, stages 1-5-9, head_dim 16. Gaps are pre - post, in nats (positive: post-norm "
        "better).</p>")
    page.figure(width_figure(table), div_id="fig-width",
                caption=f"Mean over paired seeds with its {round(LEVEL * 100)}% interval (width.csv).")
    return page.add(
        "<h2>Per width</h2><p class='note'>Mean over paired seeds with its 95% interval, the seeds in brackets, the "
        "rung's verdict where the quantity is a claim's; a drift is the top-boundary RMS at the last phase over the "
        "first (obs4-stability's verdict). Every column: width.csv.</p>",
        html_table(pd.DataFrame(rows, columns=header)),
        f"<h2>Trend against log2(width)</h2><p class='note'>Slope of the per-seed values over every finished width, "
        f"nats per doubling, with its {round(LEVEL * 100)}% interval (trend.csv).</p>",
        html_table(trend, rename={"n": "seeds", "ci_low": "95% low", "ci_high": "95% high"}),
        "<h2>Does the lr transfer?</h2><p class='note'>Mean final val_ce over the bracket's seeds at each factor of the "
        "transferred lr, warmup as transferred (transfer.csv).</p>",
        html_table(transfer))


def write_record(grid: WidthGrid, out: Path) -> dict:
    table, trend, transfer = width_frame(grid), trend_frame(grid), transfer_frame(grid)
    from .viz.render import write_svg
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in (("width.csv", table), ("trend.csv", trend), ("transfer.csv", transfer)):
        atomic_write_text(out / name, frame.to_csv(index=False))
    write_svg(width_figure(table), out / "width.svg")
    report_page(table, trend, transfer).write(out / "report.html")
    atomic_write_json(out / "width.json", {"grid": dataclasses.asdict(grid), "finished_rungs": sorted(set(
        table.loc[table["quantity"] != "", "rung"]))})
    return {"table": table, "trend": trend, "transfer": transfer}


BRACKET_ARMS = {"norms": ["pre", "post"], "schedules": ["joint", "grow", "single"]}
"""The arms every lr bracket trains."""


def part_finished(grid: WidthGrid, profile: str, is_study: bool) -> bool:
    """Whether a part of the grid (a rung's study, a profile's bracket) has every run finished and its record
    written. train skips such a part, so a restarted grid neither reruns its diagnostics nor rewrites its record,
    which rebuilt on another CPU would read that CPU's teacher pass (``python -m normgrow.study`` or ``sweep``
    rewrites it on purpose)."""
    from . import study, sweep
    if is_study:
        runs = [run_path(profile, r.name) for r in study.load_study(profile=profile)]
        record = study_dir(profile) / "claims.csv"
    else:
        plan = sweep.make_plan(profile, seeds=grid.bracket_seeds, lr_factors=grid.brackets[profile], **BRACKET_ARMS)
        runs, record = [spec.dir for spec in plan.specs], plan.out_dir / "sweep.json"
    return record.is_file() and all(is_finished(r) for r in runs)


def train(grid: WidthGrid, jobs: int | None) -> None:
    """Width by width, narrowest first: the bracket of its rung, its rung's study, then any control bracket (a
    profile not a rung; each resumable, each its own runner and record), so that an interrupted grid has finished
    its narrow rungs and the wide rung's study does not wait on its control. A finished part is skipped
    (part_finished)."""
    from . import study, sweep
    tasks = sorted([(width_of(p), 0 if p in grid.rungs else 2, p) for p in grid.brackets]
                   + [(width_of(p), 1, p) for p in grid.rungs])
    for _, order, profile in tasks:
        is_study = order == 1
        what = "the study" if is_study else f"the lr bracket (x {', '.join(map(str, grid.brackets[profile]))})"
        if part_finished(grid, profile, is_study):
            print(f"width grid: {what} of {profile}: every run finished and its record written; skipped", flush=True)
            continue
        print(f"width grid: {what} of {profile}", flush=True)
        if is_study:
            failed = study.main(["--profile", profile, *(["--jobs", str(jobs)] if jobs else [])])
        else:
            failed = sweep.main(["--profile", profile, "--lr-factors", *map(str, grid.brackets[profile]), "--seeds",
                                 *map(str, grid.bracket_seeds), "--schedules", *BRACKET_ARMS["schedules"],
                                 "--norms", *BRACKET_ARMS["norms"], "--jobs", str(jobs or default_jobs(profile))])
        if failed:
            raise SystemExit(f"width grid: {profile} failed (exit {failed}); its runner named the runs")


def main(argv: list[str] | None = None) -> int:
    args = parse("width", argv)

    def work() -> None:
        grid = load_width_grid()
        if not args.report_only:
            train(grid, args.jobs)
        out = grid_dir("cpu", "width")
        result = write_record(grid, out)
        print(result["table"].to_string(index=False))
        print(result["trend"].to_string(index=False))
        print(result["transfer"].to_string(index=False))
        print(f"record: {out}")
    return runner_exit(work)


if __name__ == "__main__":
    sys.exit(main())
