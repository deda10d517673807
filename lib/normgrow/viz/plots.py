"""Plotly figures of training curves, shared by the notebooks and the study report (they only call these).

Validation records are the ``eval`` and ``phase_end`` records of a run's metrics.jsonl; the x axis is student
active-layer tokens (tokens x active depth), the compute measure of the study, so that grown, joint and matched runs
sit on one scale.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import rundir
from ..rundir import METRICS
from ..student.placements import PLACEMENTS
from . import palette
from .palette import faint
from .render import split_variant, style_figure

VAL_KINDS = ("eval", "phase_end", rundir.GROWTH_EVAL)  # the curves draw the evaluations after growth too


def read_metrics(run_dir: Path) -> pd.DataFrame:
    """metrics.jsonl as a frame, one row per record (rundir.read_metrics: one per kind and step)."""
    return pd.DataFrame(rundir.read_metrics(run_dir))


CURVE_COLUMNS = ("kind", "step", "phase", "depth", "tokens", "active_layer_tokens")


def val_records(run_dir: Path, metric: str = "val_ce") -> pd.DataFrame | None:
    """The validation records of one run, one per step (a resumed run re-writes a record: the later one is kept);
    None, with a printed note, when metrics.jsonl is missing, unreadable or lacks the fields of a curve, so that one
    broken run leaves the other curves of a figure drawn."""
    path = Path(run_dir) / METRICS
    try:
        df = read_metrics(run_dir)
    except rundir.RunDirError as err:
        print(f"no learning curve: {err}")
        return None
    missing = [c for c in (*CURVE_COLUMNS, metric) if c not in df.columns]
    if missing:
        print(f"no learning curve from {path}: no {', '.join(missing)}")
        return None
    df = df[df["kind"].isin(VAL_KINDS)]
    return on_one_set_of_rows(df, metric).drop_duplicates("step", keep="last").sort_values("step")


def on_one_set_of_rows(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """A run's validation records with `metric` on one set of rows at every point: a run that evaluated a subset
    at some points (full_split False) is drawn on the subset throughout (the whole-split points carry the subset's
    value as <metric>_subset); a whole-split point without it (a run from before it was recorded) is left out rather
    than drawn a few hundredths of a nat off the line. Other runs are returned as they are."""
    if "full_split" not in df.columns or df["full_split"].fillna(True).astype(bool).all():
        return df
    subset = f"{metric}_subset"
    full = df["full_split"].fillna(True).astype(bool)
    values = df[metric].where(~full, df[subset] if subset in df.columns else float("nan"))
    return df.assign(**{metric: values}).dropna(subset=[metric])


def val_ce_curve(run_dirs: list[Path] | Path, metric: str = "val_ce") -> go.Figure:
    """Validation CE against active-layer tokens, one line per run (on one set of rows: on_one_set_of_rows), phase
    ends marked (dotted lines, depth labels)."""
    run_dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else run_dirs
    fig = go.Figure()
    for run_dir in run_dirs:
        df = read_metrics(run_dir)
        evals = on_one_set_of_rows(df[df["kind"].isin(VAL_KINDS)], metric)
        fig.add_trace(go.Scatter(x=evals["active_layer_tokens"], y=evals[metric], mode="lines+markers",
                                 name=Path(run_dir).name))
        for _, row in df[df["kind"] == "phase_end"].iterrows():
            fig.add_vline(x=row["active_layer_tokens"], line_dash="dot", line_color="gray",
                          annotation_text=f"depth {row['depth']}", annotation_position="top left")
    fig.update_layout(xaxis_title="student active-layer tokens (tokens x active depth)",
                      yaxis_title=f"{metric} (nats/token)")
    return style_figure(fig, height=420)


def seed_curve(run_dirs: list[Path], metric: str = "val_ce") -> pd.DataFrame | None:
    """The seeds of one variant on their common evaluation steps: step, active_layer_tokens, depth, phase, phase_end
    and the metric's mean, min, max and number of seeds n (and tokens) (None when no seed has a curve). Seeds of a variant share
    the schedule, so their records line up by step; a step some seed lacks is averaged over the seeds that have it."""
    frames = [f for f in (val_records(d, metric) for d in run_dirs) if f is not None and len(f)]
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    g = df.groupby("step")
    out = g.agg(tokens=("tokens", "first"), active_layer_tokens=("active_layer_tokens", "first"), depth=("depth", "first"),
                phase=("phase", "first"), mean=(metric, "mean"), low=(metric, "min"), high=(metric, "max"),
                n=(metric, "count"))
    out["phase_end"] = g["kind"].agg(lambda k: (k == "phase_end").any())
    return out.reset_index()


def _family_order(families) -> list[str]:
    known = [f for f in palette.SCHEDULE_DASH if f in families]
    return known + sorted(set(families) - set(known))


def learning_curves(run_dirs: dict[str, list[Path]], baselines: dict | None = None, metric: str = "val_ce",
                    title: str = "") -> go.Figure:
    """Validation CE against active-layer tokens per variant: one panel per schedule family (joint, grow, single,
    grow-freeze, joint-matched), each placement in its colour and the family's line style (palette). A line is the mean over the variant's
    seeds and the band their range (min to max): at 2-3 seeds a t-interval is 4-13 sds wide and would hide the
    curves; the intervals of the final values are in the report's tables. Diamonds mark growth points (the end of
    every stage but the last, where blocks are appended), also drawn as dotted verticals. Horizontal lines: the
    teacher's and the unigram model's val CE on the same validation positions (baselines), when given. The y range
    runs from just below the teacher (or the lowest curve) to 1 nat above the unigram level (or 0.5 above the worst
    final value, if higher): the untrained start (~ln(vocabulary) nats, off the top) would otherwise squeeze the
    trained part, where variants differ by tenths of a nat, into a sliver.
    run_dirs: {variant: [run directory of each seed]}."""
    baselines = baselines or {}
    families: dict[str, list[str]] = {}
    for variant in sorted(run_dirs):
        families.setdefault(split_variant(variant)[1], []).append(variant)
    order = _family_order(families)
    cols = min(3, max(1, len(order)))
    rows = max(1, -(-len(order) // cols))
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes="all", shared_yaxes="all", subplot_titles=order or [""],
                        horizontal_spacing=0.05, vertical_spacing=0.12)
    x_max = 0
    lows, finals = [], []
    legend_norms = set()
    for k, family in enumerate(order):
        row, col = k // cols + 1, k % cols + 1
        growth_x = set()
        for variant in families[family]:
            norm = split_variant(variant)[0]
            placement = PLACEMENTS.get(norm)  # None for a variant without a placement prefix
            color = palette.colour(norm)
            c = seed_curve(run_dirs[variant], metric)
            if c is None:
                continue
            x = c["active_layer_tokens"]
            x_max = max(x_max, float(x.max()))
            lows.append(float(c["low"].min()))
            finals.append(float(c["high"].iloc[-1]))
            n = int(c["n"].max())
            if n > 1:
                fig.add_trace(go.Scatter(x=list(x) + list(x[::-1]), y=list(c["high"]) + list(c["low"][::-1]),
                                         mode="lines", fill="toself", fillcolor=faint(color), line=dict(width=0),
                                         hoverinfo="skip", showlegend=False, legendgroup=norm), row=row, col=col)
            fig.add_trace(go.Scatter(
                x=x, y=c["mean"], mode="lines", line=dict(color=color, width=2, dash=palette.dash(family)),
                legendgroup=norm, meta=palette.meta(norm, family),
                name=placement.label if placement else variant, showlegend=norm not in legend_norms,
                customdata=c[["n", "depth"]], hovertemplate=f"{variant}<br>%{{x:,}} active-layer tokens<br>"
                f"{metric} %{{y:.4f}} (mean of %{{customdata[0]}} seeds)<br>depth %{{customdata[1]}}<extra></extra>"),
                row=row, col=col)
            legend_norms.add(norm)
            last_phase = c["phase"].max()
            grow = c[c["phase_end"] & (c["phase"] < last_phase)]
            if len(grow):
                growth_x.update(grow["active_layer_tokens"])
                fig.add_trace(go.Scatter(
                    x=grow["active_layer_tokens"], y=grow["mean"], mode="markers", legendgroup="growth",
                    name="growth point", showlegend="growth" not in legend_norms,
                    marker=dict(symbol="diamond", size=9, color=color, line=dict(color="white", width=1)),
                    hovertemplate=f"{variant}: blocks appended after depth %{{customdata}}<extra></extra>",
                    customdata=grow["depth"]), row=row, col=col)
                legend_norms.add("growth")
        for gx in sorted(growth_x):
            fig.add_vline(x=gx, line=dict(color="#999999", dash="dot", width=1), row=row, col=col)
    for key, label, dash in (("teacher_val_ce", "teacher", "dashdot"), ("unigram_val_ce", "unigram", "dot")):
        if baselines.get(key) is None:
            continue
        y = float(baselines[key])
        for k in range(len(order)):
            fig.add_trace(go.Scatter(x=[0, x_max], y=[y, y], mode="lines", line=dict(color="#444444", dash=dash,
                                     width=1.2), name=f"{label} ({y:.3f})", legendgroup=label, showlegend=k == 0,
                                     hovertemplate=f"{label} val CE {y:.4f}<extra></extra>"),
                          row=k // cols + 1, col=k % cols + 1)
    if finals and baselines.get("unigram_val_ce") is not None and baselines.get("teacher_val_ce") is not None:
        top = max(float(baselines["unigram_val_ce"]) + 1.0, max(finals) + 0.5)
        fig.update_yaxes(range=[min(float(baselines["teacher_val_ce"]), *lows) - 0.2, top])
    for r in range(1, rows + 1):
        fig.update_yaxes(title_text=f"{metric} (nats/token)", row=r, col=1)
    for c in range(1, cols + 1):
        fig.update_xaxes(title_text="active-layer tokens", row=rows, col=c)
    fig.update_xaxes(showticklabels=True, tickformat="~s")
    fig.update_layout(title=title or f"{metric} against active-layer tokens: seed mean, band = seed range",
                      hovermode="closest")
    return style_figure(fig, height=260 + 250 * rows)


TRAIN_SMOOTHING = 32
"""Steps of the trailing mean drawn for the train loss: one step's loss is one batch (4 x 256 tokens on the cpu
profile), whose batch-to-batch noise (~0.1 nats) is as large as the gaps the study compares."""


def train_curve(run_dirs: list[Path], window: int = TRAIN_SMOOTHING) -> pd.DataFrame | None:
    """The seeds of one variant's train loss, each smoothed by a trailing mean over `window` steps (fewer at the
    start) that restarts at every phase (a growth changes the model, and the mean should not blend the two), then
    averaged over seeds by step: step, tokens, active_layer_tokens, phase, mean. None when no seed has train
    records."""
    frames, columns = [], ["step", "tokens", "active_layer_tokens", "phase", "loss"]
    for run_dir in run_dirs:
        try:
            df = read_metrics(run_dir)
        except rundir.RunDirError as err:
            print(f"no train curve: {err}")
            continue
        if "kind" not in df.columns:
            continue
        df = df[df["kind"] == "train"].drop_duplicates("step", keep="last").sort_values("step")
        if not len(df) or any(c not in df.columns or df[c].isna().any() for c in columns):
            if len(df):
                print(f"no train curve from {run_dir}: its train records lack some of {', '.join(columns)}")
            continue
        df = df.assign(smooth=df.groupby("phase")["loss"].transform(lambda s: s.rolling(window, min_periods=1).mean()))
        frames.append(df[[*columns[:-1], "smooth"]])
    if not frames:
        return None
    g = pd.concat(frames, ignore_index=True).groupby("step")
    return g.agg(tokens=("tokens", "first"), active_layer_tokens=("active_layer_tokens", "first"),
                 phase=("phase", "first"), mean=("smooth", "mean")).reset_index()


OVERLAY_SPAN = 1.5  # nats of each row's y range: the gaps and growth jumps (tenths of a nat) stay readable
OVERLAY_X = {"tokens": "tokens seen (the data budget)",
             "active_layer_tokens": "active-layer tokens (tokens x active depth: the compute)"}


def schedule_overlay(run_dirs: dict[str, list[Path]], metric: str = "val_ce", window: int = TRAIN_SMOOTHING,
                     schedules: tuple = ("joint", "grow")) -> go.Figure:
    """Grown against joint, one column per placement: validation CE (top row; the extra evaluations after each growth
    included, train.eval_after_growth) and the train loss smoothed over `window` steps (bottom row), seed means of the
    joint (solid) and grown (dashed) variants; diamonds mark the growth points. A menu switches the x axis between
    tokens seen (equal data: where the grown student stands against the joint one at the same point of the data) and
    active-layer tokens (equal compute). run_dirs: {variant: [run directory of each seed]}; variants of other
    schedule families are left out."""
    by_norm: dict[str, dict[str, str]] = {}
    for variant in sorted(run_dirs):
        norm, family = split_variant(variant)
        if family in schedules and norm in PLACEMENTS:
            by_norm.setdefault(norm, {})[family] = variant
    norms = [n for n in PLACEMENTS if n in by_norm]
    cols = max(1, len(norms))
    fig = make_subplots(rows=2, cols=cols, shared_xaxes="columns", shared_yaxes="rows", vertical_spacing=0.08,
                        horizontal_spacing=0.04, subplot_titles=[PLACEMENTS[n].label for n in norms] or [""])
    xs = {axis: [] for axis in OVERLAY_X}  # per trace, in trace order: the menu restyles x with these
    lows = {1: [], 2: []}  # per row: the y range starts just below the lowest curve and spans SPAN nats
    for col, norm in enumerate(norms, start=1):
        placement = PLACEMENTS[norm]
        for family in schedules:
            variant = by_norm[norm].get(family)
            if variant is None:
                continue
            val = seed_curve(run_dirs[variant], metric)
            train = train_curve(run_dirs[variant], window)
            for row, curve, what in ((1, val, metric), (2, train, f"train loss, mean of {window} steps")):
                if curve is None:
                    continue
                fig.add_trace(go.Scatter(
                    x=curve["tokens"], y=curve["mean"], mode="lines", line=dict(color=palette.colour(norm),
                    dash=palette.dash(family), width=2 if row == 1 else 1.5), meta=palette.meta(norm, family),
                    name=f"{placement.label} {family}", legendgroup=f"{norm}-{family}",
                    showlegend=row == 1, hovertemplate=f"{variant}<br>{what} %{{y:.4f}}<extra></extra>"),
                    row=row, col=col)
                for axis in OVERLAY_X:
                    xs[axis].append(list(curve[axis]))
                lows[row].append(float(curve["mean"].min()))
            if val is not None and family != schedules[0]:
                grow = val[val["phase_end"] & (val["phase"] < val["phase"].max())]
                fig.add_trace(go.Scatter(x=grow["tokens"], y=grow["mean"], mode="markers", name="growth point",
                                         legendgroup="growth", showlegend=col == 1, marker=dict(
                                             symbol="diamond", size=9, color=palette.colour(norm),
                                             line=dict(color="white", width=1)),
                                         hovertemplate=f"{variant}: blocks appended after depth %{{customdata}}"
                                                       "<extra></extra>", customdata=grow["depth"]), row=1, col=col)
                for axis in OVERLAY_X:
                    xs[axis].append(list(grow[axis]))
    bottom = [f"xaxis{'' if k == 1 else k}" for k in range(cols + 1, 2 * cols + 1)]
    fig.update_layout(updatemenus=[dict(
        type="buttons", direction="right", x=1, xanchor="right", y=1.1, yanchor="bottom", showactive=True,
        buttons=[dict(label=f"x: {axis.replace('_', '-')}", method="update",
                      args=[{"x": xs[axis]}, {f"{a}.title.text": title for a in bottom}])
                 for axis, title in OVERLAY_X.items()])])
    for k in range(1, cols + 1):
        fig.update_xaxes(title_text=OVERLAY_X["tokens"], row=2, col=k)
    fig.update_xaxes(showticklabels=True, tickformat="~s")
    for row, title in ((1, f"{metric} (nats/token)"), (2, "train loss (nats/token)")):
        fig.update_yaxes(title_text=title, row=row, col=1)
        if lows[row]:  # the untrained start (~ln(vocabulary)) is off the top, as in learning_curves
            fig.update_yaxes(range=[min(lows[row]) - 0.1, min(lows[row]) + OVERLAY_SPAN], row=row)
    fig.update_layout(title="grown (dashed) against joint (solid), per placement: seed means", hovermode="closest")
    return style_figure(fig, height=640)
