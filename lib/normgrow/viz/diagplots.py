"""Plotly figures, tables and ipywidgets controls for the boundary diagnostics (notebooks/diagnostics.ipynb calls
these); ``export_html`` writes diagnostics.html in the report's style (normgrow.viz.render).

Every function takes the study dict of ``normgrow.analysis.diagnostics.diagnose_study`` (or the diagnostics.json it writes).
Choices, and why:

- Variants, not runs: a study has ~30 runs (10 variants x 3 seeds), too many lines for one panel. A variant is drawn
  as the mean over its seeds (a line) with every seed as a faint marker, so the spread shows without a legend entry
  per run. Colour per placement, line style and marker per schedule family (palette, as on every page): no two
  variants look alike and a pre/post pair reads at a glance.
- Curriculum plots (drift across phases) draw grown runs only, against the depth reached at each phase checkpoint;
  a joint run has one checkpoint, so it is drawn as a thin horizontal reference line at its final value (at the
  same boundary), not as a stray point. Single-block runs have one shallow checkpoint and are left out there.
- The per-run drift table (runs x token groups, 150+ rows) is a heatmap of the last/first-phase ratio per grown
  variant and token group instead; diagnostics.json keeps every row.
- Every log axis is log for all panels that share it (plotly.js ignores ``matches`` between axes of different types
  and logs a warning on every redraw) and is labelled at 1, 2, 5 per decade (render.style_figure).
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..data.token_classes import GROUPS
from ..analysis.measured_claims import geo_mean_of_logs
from ..student.placements import PLACEMENTS
from . import palette
from .palette import faint
from .render import Page, claims_html, details, split_variant, style_figure, table

METRIC_LABEL = {"rms": "boundary RMS", "max_abs": "max |activation|"}
LEGEND_TITLE = "variant (colour: placement; line and marker: schedule)"
MAX_COLS = 3  # panels per row: five token groups on a laptop screen stay readable at three per row


def load_study(path) -> dict:
    import json
    return json.loads(Path(path).read_text())


def variant_of(name: str, run: dict | None = None) -> str:
    """The run's variant as diagnostics.diagnose_study recorded it (by the run's parameters, variants.collect_runs);
    a run diagnosed on its own, with no variant recorded, is a group of its own under its name (names are never
    parsed)."""
    return (run or {}).get("variant") or name


def counterpart(study: dict, name: str) -> str | None:
    """The run of the same seed whose variant differs from this run's only in its placement (post-norm for pre-norm,
    pre-norm for every other placement), from the run files' parameters (variants.load_variants): the overlay of the
    widget. None when the run has no recorded variant or the study holds no such run."""
    from ..analysis.variants import load_variants
    run = study["runs"].get(name)
    variants = load_variants()
    mine = variants.get(variant_of(name, run)) if run else None
    if mine is None:
        return None
    other = "post" if mine.norm == "pre" else "pre"
    arm = lambda v: (v.schedule, v.freeze_prefix, v.match_active_layer_tokens is not None)  # noqa: E731
    names = {v.name for v in variants.values() if v.norm == other and arm(v) == arm(mine)}
    hits = sorted(n for n, d in study["runs"].items() if variant_of(n, d) in names and d.get("seed") == run.get("seed"))
    return hits[0] if hits else None


def _groups_present(study: dict) -> list[str]:
    """Groups with at least one position in the fixed batch (e.g. 'special' may be empty)."""
    counts = study.get("batch", {}).get("class_counts")
    groups = study.get("groups", list(GROUPS))
    return [g for g in groups if not counts or counts.get(g, 0) > 0]


def _select(study: dict, runs) -> dict:
    allr = study["runs"]
    if runs is None:
        return allr
    runs = [runs] if isinstance(runs, str) else list(runs)
    return {n: allr[n] for n in runs if n in allr}


def by_variant(runs: dict) -> dict[str, list[tuple[str, dict]]]:
    """{variant: [(run name, run), ...]} in a stable order: schedule family, then placement in PLACEMENTS' order
    (pre before post), then seed."""
    out: dict[str, list] = {}
    for name in sorted(runs, key=lambda n: (runs[n].get("seed") or 0, n)):
        out.setdefault(variant_of(name, runs[name]), []).append((name, runs[name]))
    order = {norm: i for i, norm in enumerate(PLACEMENTS)}
    return dict(sorted(out.items(), key=lambda kv: (split_variant(kv[0])[1],
                                                    order.get(split_variant(kv[0])[0], len(order)))))


def _checkpoint(run: dict, checkpoint: int) -> dict | None:
    ckpts = run["checkpoints"]
    return ckpts[checkpoint] if -len(ckpts) <= checkpoint < len(ckpts) else None


def checkpoint_label(runs: dict, checkpoint: int) -> str:
    """'final checkpoint' for -1; else the phase and depth the selected runs have at that index."""
    if checkpoint == -1:
        return "final checkpoint"
    found = {(c["phase"], c["depth"]) for c in (_checkpoint(d, checkpoint) for d in runs.values()) if c}
    return ", ".join(f"phase {p} (depth {d})" for p, d in sorted(found)) or f"checkpoint {checkpoint}"


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(vals)) if vals else None


def _grid(groups: list[str], shared_y: bool = True):
    cols = min(MAX_COLS, len(groups))
    rows = -(-len(groups) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"{g} tokens" for g in groups], shared_xaxes="all",
                        shared_yaxes="all" if shared_y else False, horizontal_spacing=0.05,
                        vertical_spacing=0.16 if rows > 1 else 0.1)
    return fig, rows, cols


def _variant_traces(fig, variant: str, x_by_seed: list[list], y_by_seed: list[list], row: int, col: int,
                    showlegend: bool, hover: str, mode: str = "lines+markers") -> None:
    """One variant in one panel: the mean over seeds (line) and each seed (faint markers, when there are several).
    Seeds share x (same schedule); the mean is taken point by point over the seeds that have a value."""
    norm, family = split_variant(variant)
    st = palette.variant_style(norm, family)
    xs = x_by_seed[0]
    mean = [_mean([y[i] if i < len(y) else None for y in y_by_seed]) for i in range(len(xs))]
    n = len(y_by_seed)
    if n > 1:
        fig.add_trace(go.Scatter(
            x=[x for xx in x_by_seed for x in xx], y=[v for yy in y_by_seed for v in yy], mode="markers",
            marker=dict(color=faint(st["color"], 0.45), size=6, symbol=st["symbol"]), legendgroup=variant,
            meta=palette.meta(norm, family),
            showlegend=False, hovertemplate=f"{variant} (one seed)<br>{hover}<extra></extra>"), row=row, col=col)
    fig.add_trace(go.Scatter(
        x=xs, y=mean, mode=mode, name=f"{variant} ({n} seed{'s' if n != 1 else ''})", legendgroup=variant,
        showlegend=showlegend, line=dict(color=st["color"], dash=st["dash"], width=2), meta=palette.meta(norm, family),
        marker=dict(symbol=st["symbol"], size=6, color=st["color"]),
        hovertemplate=f"{variant}, mean of {n}<br>{hover}<extra></extra>"), row=row, col=col)


def _axis_titles(fig, rows: int, cols: int, x: str, y: str, log_y: bool) -> None:
    for r in range(1, rows + 1):
        fig.update_yaxes(title_text=y, row=r, col=1)
    for c in range(1, cols + 1):
        fig.update_xaxes(title_text=x, row=rows, col=c)
    fig.update_xaxes(showticklabels=True)
    fig.update_yaxes(type="log" if log_y else "linear")  # every axis: matched axes must share the type


def boundary_figure(study: dict, runs=None, groups=None, checkpoint: int = -1, metric: str = "rms",
                    log_y: bool = True) -> go.Figure:
    """Boundary RMS (or max |h|) against boundary index h_0..h_N, one panel per token group, one line per variant
    (mean over seeds, seeds as faint markers), at one checkpoint (index into each run's phases; -1 = final).
    Dotted verticals: the growth boundaries of that checkpoint (where the last appended blocks attach)."""
    runs = _select(study, runs)
    groups = groups or _groups_present(study)
    fig, rows, cols = _grid(groups)
    growth = set()
    for variant, members in by_variant(runs).items():
        ckpts = [(n, _checkpoint(d, checkpoint)) for n, d in members]
        ckpts = [(n, c) for n, c in ckpts if c]
        if not ckpts:
            continue
        growth.update(c["growth_boundary"] for _, c in ckpts if c.get("growth_boundary") is not None)
        for k, g in enumerate(groups):
            ys = [[b[metric][g] for b in c["boundaries"]] for _, c in ckpts]
            xs = [list(range(len(y))) for y in ys]
            _variant_traces(fig, variant, xs, ys, k // cols + 1, k % cols + 1, k == 0, "h_%{x}: %{y:.4g}")
    for k in range(len(groups)):
        for x in sorted(growth):
            fig.add_vline(x=x, line=dict(color="#999999", dash="dot", width=1), row=k // cols + 1, col=k % cols + 1)
    label = METRIC_LABEL.get(metric, metric)
    _axis_titles(fig, rows, cols, "boundary h_i (after i blocks)", label, log_y)
    fig.update_xaxes(dtick=1)
    fig.update_layout(title=f"{label} at every block boundary, {checkpoint_label(runs, checkpoint)}")
    return style_figure(fig, height=150 + 280 * rows, legend_title=LEGEND_TITLE)


def _drift_index(run: dict, ckpt: dict, kind: str, layer: int | None, fixed: int | None = None) -> int | None:
    """The boundary followed: h_layer; else the top h_N, the growth boundary (top when the phase has none) or the
    fixed first-phase boundary (fixed, when given, overrides the run's own: a joint reference uses the grown runs')."""
    if layer is not None:
        return layer
    top = len(ckpt["boundaries"]) - 1
    if kind == "top":
        return top
    if kind == "growth":
        return ckpt["growth_boundary"] if ckpt["growth_boundary"] is not None else top
    return fixed if fixed is not None else run["drift"]["fixed_boundary"]


def drift_figure(study: dict, runs=None, groups=None, kind: str = "top", layer: int | None = None,
                 metric: str = "rms", log_y: bool = True) -> go.Figure:
    """Scale drift across the curriculum, for grown runs: the value at one boundary at every phase checkpoint,
    against the depth reached. kind: 'top' (h_N), 'growth' (the growth boundary of each phase), 'fixed' (h_{depth of
    phase 0}); layer=i overrides kind with boundary h_i. Joint runs (one checkpoint) are dotted horizontal reference
    lines at their final value at the same boundary (none for 'growth': a joint run has no growth boundary), thin,
    in the joint schedule's line style."""
    runs = _select(study, runs)
    groups = groups or _groups_present(study)
    fig, rows, cols = _grid(groups)
    variants = by_variant(runs)
    grown = {v: m for v, m in variants.items() if m[0][1].get("schedule") == "grow"}
    joint = {v: m for v, m in variants.items() if m[0][1].get("schedule") == "joint"}
    depths = sorted({c["depth"] for m in grown.values() for _, d in m for c in d["checkpoints"]})
    fixed = next((d["drift"]["fixed_boundary"] for m in grown.values() for _, d in m), None)
    for variant, members in grown.items():
        xs = [[c["depth"] for c in d["checkpoints"]] for _, d in members]
        for k, g in enumerate(groups):
            ys = []
            for _, d in members:
                y = []
                for c in d["checkpoints"]:
                    i = _drift_index(d, c, kind, layer)
                    y.append(c["boundaries"][i][metric][g] if i is not None and i < len(c["boundaries"]) else None)
                ys.append(y)
            _variant_traces(fig, variant, xs, ys, k // cols + 1, k % cols + 1, k == 0, "depth %{x}: %{y:.4g}")
    references = bool(depths and joint and (kind != "growth" or layer is not None))
    if references:
        for variant, members in joint.items():
            for k, g in enumerate(groups):
                vals = []
                for _, d in members:
                    c = d["checkpoints"][-1]
                    i = _drift_index(d, c, kind, layer, fixed)
                    vals.append(c["boundaries"][i][metric][g] if i is not None and i < len(c["boundaries"]) else None)
                y = _mean(vals)
                if y is None:
                    continue
                norm, family = split_variant(variant)
                line = dict(color=palette.colour(norm), width=1, dash=palette.dash(family))
                fig.add_trace(go.Scatter(
                    x=[depths[0], depths[-1]], y=[y, y], mode="lines", name=f"{variant} (final, reference)",
                    legendgroup=variant, showlegend=k == 0, line=line, meta=palette.meta(norm, family),
                    hovertemplate=f"{variant} final, mean of {len(members)}: {y:.4g}<extra></extra>"),
                    row=k // cols + 1, col=k % cols + 1)
    where = f"h_{layer}" if layer is not None else {"top": "the top boundary h_N", "growth": "the growth boundary",
                                                    "fixed": f"the first-phase boundary h_{fixed}"}[kind]
    label = METRIC_LABEL.get(metric, metric)
    _axis_titles(fig, rows, cols, "depth at the phase checkpoint", label, log_y)
    fig.update_xaxes(tickvals=depths)
    drawn = "grown runs; thin lines: joint runs" if references else "grown runs"
    fig.update_layout(title=f"Drift across the curriculum: {label} at {where} ({drawn})")
    return style_figure(fig, height=150 + 280 * rows, legend_title=LEGEND_TITLE)


def block_figure(study: dict, runs=None, checkpoint: int = -1, group: str = "all") -> go.Figure:
    """Per block j (h_j -> h_j+1): update ratio ||h_out - h_in|| / ||h_in||, cosine(h_in, h_out) and the validation
    CE change when the block is skipped; variant means over seeds with seeds as faint markers. A block with an output
    norm (post-norm, DeepNorm, Mix-LN's lower blocks) also gets cosine(h_in, s) (s its residual sum before that norm)
    as open markers."""
    runs = _select(study, runs)
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=(f"update ratio ({group} tokens)", f"cosine(h_in, h_out) ({group} tokens)",
                                        "val CE change when skipped"))
    for variant, members in by_variant(runs).items():
        ckpts = [c for c in (_checkpoint(d, checkpoint) for _, d in members) if c]
        if not ckpts:
            continue
        xs = [[b["index"] for b in c["blocks"]] for c in ckpts]
        _variant_traces(fig, variant, xs, [[b["update_ratio"][group] for b in c["blocks"]] for c in ckpts], 1, 1,
                        True, "block %{x}: %{y:.4g}")
        _variant_traces(fig, variant, xs, [[b["cosine"][group] for b in c["blocks"]] for c in ckpts], 1, 2, False,
                        "block %{x}: %{y:.4f}")
        normed = [i for i in range(len(xs[0])) if all("cosine_residual_sum" in c["blocks"][i] for c in ckpts)]
        if normed:  # the blocks with an output norm (diagnostics.py): all under post-norm, the lower ones of Mix-LN
            norm, family = split_variant(variant)
            st = palette.variant_style(norm, family)
            fig.add_trace(go.Scatter(
                x=normed, y=[_mean([c["blocks"][i]["cosine_residual_sum"][group] for c in ckpts]) for i in normed],
                mode="markers", legendgroup=variant, showlegend=False, meta=palette.meta(norm, family),
                marker=dict(symbol=st["symbol"] + "-open", size=8, color=st["color"]),
                hovertemplate=f"{variant} residual sum, block %{{x}}: %{{y:.4f}}<extra></extra>"), row=1, col=2)
        skip = [[b.get("skip_delta_ce") for b in c["blocks"]] for c in ckpts]
        if any(v is not None for s in skip for v in s):
            _variant_traces(fig, variant, xs, skip, 1, 3, False, "block %{x}: %{y:.4f} nats")
    fig.update_xaxes(title_text="block j (h_j -> h_j+1)", dtick=1)
    fig.update_yaxes(type="log", title_text="update ratio", row=1, col=1)
    fig.update_yaxes(title_text="cosine", row=1, col=2)
    fig.update_yaxes(title_text="delta val CE (nats/token)", row=1, col=3)
    fig.update_layout(title=f"Blocks at the {checkpoint_label(runs, checkpoint)}")
    return style_figure(fig, height=480, legend_title=LEGEND_TITLE)


def drift_heatmap(study: dict, groups=None) -> go.Figure:
    """Top-boundary RMS at the last phase over the first phase, per grown variant (geometric mean over seeds) and
    token group; colour on a log2 scale centred at 1 (no drift), the ratio written in each cell."""
    groups = groups or _groups_present(study)
    runs = study.get("runs", {})
    rows = [r for r in study.get("claims_table", {}).get("boundary_drift", [])
            if r["group"] in groups and r.get("ratio") and runs.get(r["run"], {}).get("schedule") == "grow"]
    variants = list(dict.fromkeys(v for v in by_variant({r["run"]: runs[r["run"]] for r in rows})))
    z, text = [], []
    for v in variants:
        zr, tr = [], []
        for g in groups:
            vals = [r["ratio"] for r in rows if variant_of(r["run"], runs[r["run"]]) == v and r["group"] == g]
            gm = float(np.exp(np.mean(np.log(vals)))) if vals else None
            zr.append(math.log2(gm) if gm else None)
            tr.append(f"x{gm:.2f}" if gm else "")
        z.append(zr)
        text.append(tr)
    lim = max([abs(x) for r in z for x in r if x is not None] + [0.1])
    fig = go.Figure(go.Heatmap(
        z=z, x=groups, y=variants, text=text, texttemplate="%{text}", colorscale="RdBu_r", zmid=0, zmin=-lim,
        zmax=lim, colorbar=dict(title=dict(text="log2 ratio", side="right"), thickness=12, nticks=3),  # labels apart
        hovertemplate="%{y}, %{x} tokens: %{text}<extra></extra>"))
    fig.update_layout(title="Top-boundary RMS, last phase / first phase (grown variants, geometric mean over seeds)",
                      yaxis=dict(autorange="reversed"), xaxis_title="token group")
    return style_figure(fig, height=max(240, 140 + 36 * len(variants)))


def final_block_frame(study: dict) -> pd.DataFrame:
    """claims_table.final_block per variant: the final block's update ratio, cosine and skip CE change (means over
    seeds), its ratio to the median of the other blocks (the geometric mean over seeds, the number observation 5's
    claim judges: measured_claims), and the ranks of the seeds (1 = smallest update)."""
    rows = study.get("claims_table", {}).get("final_block", [])
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    runs = study.get("runs", {})
    df["variant"] = [variant_of(n, runs.get(n)) for n in df["run"]]
    agg = df.groupby("variant", sort=False).agg(
        seeds=("run", "count"), depth=("depth", "first"), update_ratio=("final_block_update_ratio", "mean"),
        median_other_ratio=("median_other_update_ratio", "mean"), ratio_to_median=(
            "ratio_to_median", lambda r: geo_mean_of_logs([math.log(x) for x in r if x and x > 0])),
        cosine=("final_block_cosine", "mean"), skip_delta_ce=("final_block_skip_delta_ce", "mean"),
        ranks=("rank", lambda r: " ".join(str(int(x)) for x in r)))
    order = [v for v in by_variant({n: runs[n] for n in df["run"] if n in runs}) if v in agg.index]
    return agg.loc[order or list(agg.index)].reset_index()


FINAL_BLOCK_NAMES = {"update_ratio": "final block update ratio",
                     "median_other_ratio": "median ratio of the other blocks",
                     "ratio_to_median": "ratio to median (geometric mean)", "skip_delta_ce": "skip: delta val CE",
                     "ranks": "rank per seed (1 = smallest)"}

SECTIONS = {  # name: (heading, caption) of each static figure, in page order
    "boundary_rms_final": ("Residual scale at every boundary (final checkpoint)",
                           "RMS of the residual stream after i blocks, per token group; dotted verticals: where the "
                           "last blocks were appended."),
    "max_abs_final": ("Largest activation at every boundary (final checkpoint)",
                      "Max |activation| per token group: sink tokens (first position, separators) show up here."),
    "drift_top": ("Drift of the top boundary across the curriculum",
                  "What the head's norm and the next appended block receive, at each phase checkpoint of the grown "
                  "runs; dotted horizontals: joint runs at their final checkpoint."),
    "drift_growth": ("Drift at the growth boundary",
                     "At each phase, the boundary where that phase's blocks attach (the top boundary for phase 0)."),
    "drift_fixed": ("Drift of the first-phase boundary",
                    "The boundary the first phase ended on, followed as blocks are appended above it."),
    "drift_heatmap": ("Top-boundary drift per variant and token group",
                      "Last phase over first phase; red: grew, blue: shrank."),
    "blocks_final": ("Blocks at the final checkpoint",
                     "Update ratio and cosine per block, and how much validation CE rises when the block is skipped "
                     "(observation 5: a final block near identity has a small ratio, cosine near 1, small CE change)."),
}


def static_figures(study: dict) -> dict[str, go.Figure]:
    """The figures of the HTML export, by name (SECTIONS gives their headings)."""
    if not study.get("runs"):
        return {}
    return {"boundary_rms_final": boundary_figure(study),
            "max_abs_final": boundary_figure(study, metric="max_abs"),
            "drift_top": drift_figure(study, kind="top"),
            "drift_growth": drift_figure(study, kind="growth"),
            "drift_fixed": drift_figure(study, kind="fixed"),
            "drift_heatmap": drift_heatmap(study),
            "blocks_final": block_figure(study)}


def batch_html(study: dict) -> str:
    """The fixed batch in one sentence and one row of positions per token group."""
    b = study.get("batch", {})
    if not b:
        return ""
    counts = b.get("class_counts", {})
    head = (f"<p>Fixed batch: the first {b.get('n', '?')} validation sequences of {b.get('seq_len', '?')} tokens "
            f"(teacher cache {html.escape(str(b.get('cache_key', '?')))}, fingerprint "
            f"{html.escape(str(b.get('fingerprint', '?')))}). Positions per token group:</p>")
    return head + (table(pd.DataFrame([counts])) if counts else "")


def export_html(study: dict, path, claims: list[dict], figures: dict | None = None) -> Path:
    """diagnostics.html: one page in the report's style (plotly.js from the shared asset, no CDN): the fixed
    batch, the claims, the static figures with headings and captions, the final-block table.

    claims: observations 4 and 5 as the study judges them, through its regime and depth gates (Claim.to_json of
    report.build_report(profile).diagnostics_claims), never diagnostics.json's ungated verdicts: report.html shows the
    same records, so the two pages cannot disagree."""
    figures = figures if figures is not None else static_figures(study)
    page = Page(f"normgrow diagnostics: {study.get('profile')}")
    runs = study.get("runs", {})
    page.add(f"<h1>Boundary diagnostics: study <code>{html.escape(str(study.get('profile')))}</code></h1>",
             f"<p class='note'>{len(runs)} runs of {len(by_variant(runs)) if runs else 0} variants; each line is a "
             "variant's mean over its seeds, faint markers are the seeds. One colour per placement (pre-norm red, post-norm blue) and one line "
             "style and marker per schedule, as on the study's report.</p>",
             batch_html(study), "<h2>Observations 4 and 5</h2>",
             claims_html(claims) or "<p class='note'>No claims (no diagnosed runs).</p>")
    for name, fig in figures.items():
        heading, caption = SECTIONS.get(name, (name, None))
        page.add(f"<h2>{html.escape(heading)}</h2>")
        page.figure(fig, div_id=f"fig-{name}", caption=caption)
    final = final_block_frame(study)
    if len(final):
        page.add("<h2>Final block per variant (observation 5)</h2>",
                 details(f"{len(final)} variants (every run: diagnostics.json, claims_table.final_block)",
                         table(final, rename=FINAL_BLOCK_NAMES), open_=True))
    return page.write(Path(path))


def default_run(study: dict) -> str:
    """The run the widget opens on: the pre-norm grown run (no freeze) of the lowest seed, the grown student of
    observation 5, found by its recorded parameters; else the first run."""
    runs = study["runs"]
    grown = sorted((d.get("seed", 0), n) for n, d in runs.items()
                   if d.get("norm") == "pre" and d.get("schedule") == "grow" and not d.get("freeze_prefix"))
    return grown[0][1] if grown else sorted(runs)[0]


def widget_figures(study: dict, run: str, group: str = "all", layer: int = 1, checkpoint: int = -1,
                   overlay: bool = True, metric: str = "rms") -> list[go.Figure]:
    """What the widget draws for these settings: boundary scale at the checkpoint, drift at h_layer, drift at the
    growth boundary (both in the chosen metric) and the blocks, for the run and, with overlay, its pre/post
    counterpart."""
    other = counterpart(study, run)
    selected = [run] + ([other] if overlay and other is not None else [])
    return [boundary_figure(study, selected, checkpoint=checkpoint, metric=metric),
            drift_figure(study, selected, groups=[group], layer=layer, metric=metric),
            drift_figure(study, selected, groups=[group], kind="growth", metric=metric),
            block_figure(study, selected, checkpoint=checkpoint, group=group)]


def interactive(study: dict, draw: bool = False):
    """ipywidgets controls (run, token group, layer, phase, pre/post overlay, metric) over the study's diagnostics.

    Returns a VBox; display it in JupyterLab. Figures are drawn into an Output widget (no anywidget needed) when
    a control changes or "draw" is clicked. draw=True also draws at once; the default leaves the Output empty
    because drawing into an Output widget during a headless nbclient/papermill run can stall the run (observed
    with ipykernel 7 / nbclient 0.11: the cell waits for its execution timeout), and headless runs never fire
    callbacks. The metric toggle (RMS / max |h|) applies to the three boundary figures; the block figure has no
    such choice.
    """
    import ipywidgets as w
    from IPython.display import display

    names = sorted(study["runs"])
    if not names:
        return w.HTML("no diagnosed runs")
    max_depth = max(len(d["checkpoints"][-1]["boundaries"]) - 1 for d in study["runs"].values())
    run = w.Dropdown(options=names, value=default_run(study), description="run")
    group = w.Dropdown(options=_groups_present(study), value="all", description="tokens")
    layer = w.IntSlider(value=1, min=0, max=max_depth, description="layer h_i")
    phase = w.Dropdown(options=[("final", -1)], value=-1, description="phase")
    overlay = w.Checkbox(value=True, description="overlay pre vs post")
    metric = w.ToggleButtons(options=[("RMS", "rms"), ("max |h|", "max_abs")], value="rms", description="metric")
    out = w.Output()

    def phases_for(name):
        return [("final", -1)] + [(f"p{c['phase']} depth {c['depth']}", i)
                                  for i, c in enumerate(study["runs"][name]["checkpoints"])]

    def redraw(*_):
        out.clear_output(wait=True)
        with out:
            for fig in widget_figures(study, run.value, group.value, layer.value, phase.value, overlay.value,
                                      metric.value):
                display(fig)

    def on_run(change):
        phase.options = phases_for(run.value)
        phase.value = -1

    phase.options = phases_for(run.value)
    button = w.Button(description="draw", button_style="primary", tooltip="draw the figures for these settings")
    button.on_click(redraw)
    run.observe(on_run, names="value")
    for control in (run, group, layer, phase, overlay, metric):
        control.observe(redraw, names="value")
    if draw:
        redraw()
    return w.VBox([w.HBox([run, group, phase, button]), w.HBox([layer, overlay, metric]), out])
