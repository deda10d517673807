"""Plotly figures and ipywidgets controls for the boundary diagnostics (notebooks/diagnostics.ipynb calls these).

Every function takes the study dict of ``normgrow.diagnostics.diagnose_study`` (or the diagnostics.json it writes).
Pre-norm runs are drawn solid, post-norm runs dashed, one colour per variant pair, so a pre/post overlay reads at
a glance. ``export_html`` writes the static figures into one self-contained HTML file (plotly.js inlined once: no
CDN, the study machine is offline).
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from .diagnostics import GROUPS

DASH = {"pre": "solid", "post": "dash"}
PALETTE = qualitative.D3


def load_study(path) -> dict:
    return json.loads(Path(path).read_text())


def _pair(name: str) -> str:
    """Variant pair key: pre-grow-s0 and post-grow-s0 share 'grow-s0'."""
    for prefix in ("pre-", "post-"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def counterpart(name: str) -> str | None:
    if name.startswith("pre-"):
        return "post-" + name[4:]
    if name.startswith("post-"):
        return "pre-" + name[5:]
    return None


def _colors(names) -> dict:
    pairs = sorted({_pair(n) for n in names})
    return {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(pairs)}


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


def _panels(study: dict, runs, groups):
    """(selected runs, token groups, a colour per norm pair, a figure with one panel per group)."""
    runs = _select(study, runs)
    groups = groups or _groups_present(study)
    return runs, groups, _colors(runs), make_subplots(rows=1, cols=len(groups), subplot_titles=groups,
                                                      shared_yaxes=True)


def _line(fig, x, y, name, norm, color, row=None, col=None, showlegend=True, mode="lines+markers"):
    trace = go.Scatter(x=x, y=y, name=name, legendgroup=name, showlegend=showlegend, mode=mode,
                       line=dict(dash=DASH.get(norm, "dot"), color=color))
    if row is None:
        fig.add_trace(trace)
    else:
        fig.add_trace(trace, row=row, col=col)


def boundary_figure(study: dict, runs=None, groups=None, checkpoint: int = -1, metric: str = "rms",
                    log_y: bool = True) -> go.Figure:
    """Boundary RMS (or max |h|) against boundary index h_0..h_N, one panel per token group, one line per run,
    at one checkpoint (index into the run's phases; -1 = final)."""
    runs, groups, colors, fig = _panels(study, runs, groups)
    for name, d in sorted(runs.items()):
        ckpts = d["checkpoints"]
        if not -len(ckpts) <= checkpoint < len(ckpts):
            continue
        c = ckpts[checkpoint]
        for k, g in enumerate(groups):
            y = [b[metric][g] for b in c["boundaries"]]
            _line(fig, list(range(len(y))), y, name, d["norm"], colors[_pair(name)], 1, k + 1, showlegend=k == 0)
        if c.get("growth_boundary") is not None:
            for k in range(len(groups)):
                fig.add_vline(x=c["growth_boundary"], line_dash="dot", line_color="gray", row=1, col=k + 1)
    label = "boundary RMS" if metric == "rms" else "max |activation|"
    fig.update_layout(title=f"{label} at every block boundary (checkpoint {checkpoint}; dotted: growth boundary)",
                      template="plotly_white", height=380, legend_title="run (pre solid, post dashed)")
    fig.update_xaxes(title_text="boundary h_i", dtick=1)
    fig.update_yaxes(type="log" if log_y else "linear", title_text=label, col=1)
    return fig


def drift_figure(study: dict, runs=None, groups=None, kind: str = "top", layer: int | None = None,
                 metric: str = "rms", log_y: bool = True) -> go.Figure:
    """Scale drift across the curriculum: one point per phase checkpoint. kind: 'top' (h_N), 'growth' (the growth
    boundary of each phase), 'fixed' (h_{depth of phase 0}); layer=i overrides kind with boundary h_i."""
    runs, groups, colors, fig = _panels(study, runs, groups)
    for name, d in sorted(runs.items()):
        ckpts = d["checkpoints"]
        x = [f"p{c['phase']} d{c['depth']}" for c in ckpts]
        for k, g in enumerate(groups):
            if layer is None and metric == "rms":
                y = d["drift"][kind][g]
            else:
                idx = layer
                y = []
                for c in ckpts:
                    i = idx if idx is not None else {"top": len(c["boundaries"]) - 1,
                                                     "growth": c["growth_boundary"] if c["growth_boundary"] is not None
                                                     else len(c["boundaries"]) - 1,
                                                     "fixed": d["drift"]["fixed_boundary"]}[kind]
                    y.append(c["boundaries"][i][metric][g] if i < len(c["boundaries"]) else None)
            _line(fig, x, y, name, d["norm"], colors[_pair(name)], 1, k + 1, showlegend=k == 0)
    where = f"h_{layer}" if layer is not None else {"top": "the top boundary h_N", "growth": "the growth boundary",
                                                    "fixed": "the first-phase boundary"}[kind]
    fig.update_layout(title=f"Scale drift across the curriculum: {metric} at {where}, per token group",
                      template="plotly_white", height=380, legend_title="run (pre solid, post dashed)")
    fig.update_xaxes(title_text="phase checkpoint")
    fig.update_yaxes(type="log" if log_y else "linear", title_text=metric, col=1)
    return fig


def block_figure(study: dict, runs=None, checkpoint: int = -1, group: str = "all") -> go.Figure:
    """Per block: update ratio ||h_out - h_in|| / ||h_in||, cosine(h_in, h_out) and skip-block CE change."""
    runs = _select(study, runs)
    colors = _colors(runs)
    fig = make_subplots(rows=1, cols=3, subplot_titles=(f"update ratio ({group})", f"cosine(h_in, h_out) ({group})",
                                                        "validation CE change when skipped"))
    for name, d in sorted(runs.items()):
        ckpts = d["checkpoints"]
        if not -len(ckpts) <= checkpoint < len(ckpts):
            continue
        blocks = ckpts[checkpoint]["blocks"]
        x = [b["index"] for b in blocks]
        color, norm = colors[_pair(name)], d["norm"]
        _line(fig, x, [b["update_ratio"][group] for b in blocks], name, norm, color, 1, 1)
        _line(fig, x, [b["cosine"][group] for b in blocks], name, norm, color, 1, 2, showlegend=False)
        if norm == "post" and "cosine_residual_sum" in blocks[0]:
            _line(fig, x, [b["cosine_residual_sum"][group] for b in blocks], name + " (residual sum)", norm, color,
                  1, 2, mode="markers")
        _line(fig, x, [b.get("skip_delta_ce") for b in blocks], name, norm, color, 1, 3, showlegend=False)
    fig.update_layout(title=f"Blocks at checkpoint {checkpoint}", template="plotly_white", height=380,
                      legend_title="run (pre solid, post dashed)")
    fig.update_xaxes(title_text="block j (h_j -> h_j+1)", dtick=1)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(title_text="nats/token", row=1, col=3)
    return fig


def claims_table(study: dict) -> go.Figure:
    claims = study.get("claims", [])
    verdict = {True: "supported", False: "not supported", None: "not tested"}
    fig = go.Figure(go.Table(
        columnwidth=[1, 5, 2, 9],
        header=dict(values=["claim", "statement", "verdict", "evidence"], align="left"),
        cells=dict(values=[[c["claim"] for c in claims], [c["statement"] for c in claims],
                           [verdict[c["supported"]] for c in claims], [c["sentence"] for c in claims]],
                   align="left")))
    fig.update_layout(title="Diagnostic claims (STUDY.md observations 4 and 5), computed from the runs",
                      height=260 + 120 * len(claims))
    return fig


def drift_table(study: dict, groups=None) -> go.Figure:
    rows = [r for r in study.get("claims_table", {}).get("boundary_drift", [])
            if r["group"] in (groups or _groups_present(study))]
    fmt = lambda v: "" if v is None else f"{v:.4g}"  # noqa: E731
    fig = go.Figure(go.Table(
        header=dict(values=["run", "norm", "group", "RMS first phase", "RMS last phase", "last / first"]),
        cells=dict(values=[[r["run"] for r in rows], [r["norm"] for r in rows], [r["group"] for r in rows],
                           [fmt(r["rms_first_phase"]) for r in rows], [fmt(r["rms_last_phase"]) for r in rows],
                           [fmt(r["ratio"]) for r in rows]])))
    fig.update_layout(title="Top-boundary RMS, last phase over first phase", height=min(1200, 200 + 22 * len(rows)))
    return fig


def static_figures(study: dict) -> dict[str, go.Figure]:
    """The figures of the HTML export, by name."""
    if not study.get("runs"):
        return {"claims": claims_table(study)}
    return {"claims": claims_table(study),
            "boundary_rms_final": boundary_figure(study),
            "max_abs_final": boundary_figure(study, metric="max_abs"),
            "drift_top": drift_figure(study, kind="top"),
            "drift_growth": drift_figure(study, kind="growth"),
            "drift_fixed": drift_figure(study, kind="fixed"),
            "blocks_final": block_figure(study),
            "drift_table": drift_table(study)}


def export_html(study: dict, path, figures: dict | None = None) -> Path:
    """One self-contained HTML page (plotly.js inlined once, no CDN) with the claims and the static figures."""
    figures = figures or static_figures(study)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    verdict = {True: "supported", False: "not supported", None: "not tested"}
    parts = [f"<h1>Boundary diagnostics: profile {html.escape(str(study.get('profile')))}</h1>",
             f"<p>Fixed batch: {html.escape(json.dumps(study.get('batch', {})))}</p>"]
    for c in study.get("claims", []):
        parts.append(f"<p><b>Claim {c['claim']}</b> ({verdict[c['supported']]}): {html.escape(c['statement'])}<br>"
                     f"{html.escape(c['sentence'])}</p>")
    for i, (name, fig) in enumerate(figures.items()):
        parts.append(f"<h2>{html.escape(name)}</h2>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"fig-{name}"))
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>normgrow diagnostics</title></head><body>"
            + "\n".join(parts) + "</body></html>")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


def interactive(study: dict, draw: bool = False):
    """ipywidgets controls (run, token group, layer, phase, pre/post overlay) over the study's diagnostics.

    Returns a VBox; display it in JupyterLab. Figures are drawn into an Output widget (no anywidget needed) when
    a control changes or "draw" is clicked. draw=True also draws at once; the default leaves the Output empty
    because drawing into an Output widget during a headless nbclient/papermill run can stall the run (observed
    with ipykernel 7 / nbclient 0.11: the cell waits for its execution timeout), and headless runs never fire
    callbacks.
    """
    import ipywidgets as w
    from IPython.display import display

    names = sorted(study["runs"])
    if not names:
        return w.HTML("no diagnosed runs")
    max_depth = max(len(d["checkpoints"][-1]["boundaries"]) - 1 for d in study["runs"].values())
    run = w.Dropdown(options=names, value=next((n for n in names if n.startswith("pre-grow")), names[0]),
                     description="run")
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
        other = counterpart(run.value)
        selected = [run.value] + ([other] if overlay.value and other in study["runs"] else [])
        out.clear_output(wait=True)
        with out:
            display(boundary_figure(study, selected, checkpoint=phase.value, metric=metric.value))
            display(drift_figure(study, selected, groups=[group.value], layer=layer.value, metric=metric.value))
            display(drift_figure(study, selected, groups=[group.value], kind="growth"))
            display(block_figure(study, selected, checkpoint=phase.value, group=group.value))

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
