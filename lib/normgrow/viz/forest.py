"""The forest plot of a grid (a row per setting: the grow gap and the interaction with their intervals, zero and the
reference marked, the verdict as colour), as a plotly figure for the pages and as a static SVG for README (plotly's
image export needs a browser). Drawn from grid.csv's frame (grid.grid_frame)."""
from __future__ import annotations

import html

import pandas as pd

from ..analysis.variants import load_reference
from .render import STATUS_COLORS, style_figure


def reference_marks() -> dict[str, float]:
    """The reference's grow gap and interaction (grow gap - joint gap), pre - post (params/reference.yaml)."""
    gaps = load_reference().gaps
    return {"grow": gaps["grow"].reference, "interaction": gaps["grow"].reference - (gaps["joint"].reference or 0.0)}


def forest_figure(frame: pd.DataFrame, reference: dict[str, float]):
    """A row per setting: the grow gap and the interaction (a - b, nats) with their intervals, zero and the
    reference's values marked; the colour is the row's verdict, named in the legend. A trace per panel and verdict,
    since plotly takes one colour per trace for error bars; the reference line is named in the legend rather than
    annotated, where its label would sit on the panel titles."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    judged = frame[frame["n_seeds"].notna()].assign(
        label=lambda f: [f"{s} ({a}-{b})" for s, a, b in zip(f["setting"], f["a"], f["b"])])
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("grow gap: a-grow - b-grow", "interaction: grow gap - joint gap"))
    shown = set()
    for col, (quantity, verdict) in enumerate((("grow", "grow_verdict"), ("interaction", "interaction_verdict")), 1):
        mean = "grow_gap" if quantity == "grow" else "interaction"
        for status, rows in judged.groupby(verdict, sort=False):
            colour = STATUS_COLORS.get(status, "#000")
            fig.add_trace(go.Scatter(
                x=rows[mean], y=rows["label"], mode="markers", marker=dict(size=10, color=colour), name=status,
                legendgroup=status, showlegend=status not in shown,
                error_x=dict(type="data", symmetric=False, array=rows[f"{quantity}_ci_high"] - rows[mean],
                             arrayminus=rows[mean] - rows[f"{quantity}_ci_low"], thickness=1.5, color=colour),
                customdata=list(zip(rows[verdict], rows["n_seeds"])),
                hovertemplate="%{y}: %{x:.4f}<br>%{customdata[0]} (%{customdata[1]} seeds)<extra></extra>"), 1, col)
            shown.add(status)
        fig.add_vline(x=0, line=dict(color="#444", width=1), row=1, col=col)
        if reference.get(quantity) is not None:
            fig.add_vline(x=reference[quantity], line=dict(color="#888", dash="dash"), row=1, col=col)
    if any(v is not None for v in reference.values()):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color="#888", dash="dash"),
                                 name="reference", hoverinfo="skip"), 1, 1)
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=list(judged["label"]))
    fig.update_xaxes(title_text="nats/token (> 0: b better)")
    fig.update_layout(legend=dict(title_text="colour = verdict"))
    return style_figure(fig, height=150 + 34 * len(judged))


def forest_svg(frame: pd.DataFrame, reference: dict[str, float]) -> str:
    """The forest figure as a static SVG (README shows it; plotly's image export needs a browser): the same rows,
    intervals, zero and reference lines and verdict colours as forest_figure, drawn by hand."""
    rows = frame[frame["n_seeds"].notna()].reset_index(drop=True)
    panels = (("grow", "grow_gap", "grow gap: a-grow - b-grow"), ("interaction", "interaction",
                                                                  "interaction: grow gap - joint gap"))
    label_w, panel_w, gap, row_h, top = 250, 330, 30, 26, 46
    height = top + row_h * len(rows) + 74
    values = [v for q, col, _ in panels for c in (col, f"{q}_ci_low", f"{q}_ci_high") for v in rows[c]
              if pd.notna(v)] + [0.0] + [v for v in reference.values() if v is not None]
    lo, hi = min(values), max(values)
    pad = 0.05 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{label_w + 2 * panel_w + gap + 10}' height='{height}' "
           "font-family='sans-serif' font-size='12'>", "<rect width='100%' height='100%' fill='white'/>"]
    for i, r in rows.iterrows():
        y = top + row_h * i + row_h / 2
        out.append(f"<text x='{label_w - 8}' y='{y + 4}' text-anchor='end'>{html.escape(f'{r.setting} ({r.a}-{r.b})')}"
                   "</text>")
    for k, (quantity, col, title) in enumerate(panels):
        x0 = label_w + k * (panel_w + gap)
        x = lambda v, x0=x0: x0 + (v - lo) / (hi - lo) * panel_w
        out.append(f"<text x='{x0 + panel_w / 2}' y='18' text-anchor='middle' font-weight='bold'>{title}</text>")
        out.append(f"<rect x='{x0}' y='{top - 6}' width='{panel_w}' height='{row_h * len(rows) + 12}' fill='none' "
                   "stroke='#ccc'/>")
        out.append(f"<line x1='{x(0)}' x2='{x(0)}' y1='{top - 6}' y2='{top + row_h * len(rows) + 6}' stroke='#444'/>")
        bottom = top + row_h * len(rows) + 6
        ticks = sorted([(0.0, "0", "#444")] + ([(reference[quantity], f"{reference[quantity]:+.3f}", "#666")]
                                               if reference.get(quantity) is not None else []))
        for k_tick, (value, text, colour) in enumerate(ticks):  # the lower label left of its tick, the higher right
            anchor, dx = ("end", -3) if k_tick == 0 else ("start", 3)
            out.append(f"<line x1='{x(value)}' x2='{x(value)}' y1='{bottom}' y2='{bottom + 5}' stroke='{colour}'/>"
                       f"<text x='{x(value) + dx}' y='{bottom + 14}' text-anchor='{anchor}' fill='{colour}' "
                       f"font-size='10'>{text}</text>")
        if reference.get(quantity) is not None:
            xr = x(reference[quantity])
            out.append(f"<line x1='{xr}' x2='{xr}' y1='{top - 6}' y2='{bottom}' stroke='#888' "
                       f"stroke-dasharray='5,4'/><text x='{xr}' y='{top - 10}' text-anchor='middle' fill='#666'>"
                       "reference</text>")
        for i, r in rows.iterrows():
            y = top + row_h * i + row_h / 2
            colour = STATUS_COLORS.get(r[f"{quantity}_verdict"], "#000")
            if pd.notna(r[f"{quantity}_ci_low"]):
                out.append(f"<line x1='{x(r[f'{quantity}_ci_low'])}' x2='{x(r[f'{quantity}_ci_high'])}' y1='{y}' "
                           f"y2='{y}' stroke='{colour}' stroke-width='2'/>")
            if pd.notna(r[col]):
                out.append(f"<circle cx='{x(r[col])}' cy='{y}' r='5' fill='{colour}'/>")
        axis_y = top + row_h * len(rows) + 34
        out.append(f"<text x='{x0}' y='{axis_y}'>{lo:+.2f}</text><text x='{x0 + panel_w}' y='{axis_y}' "
                   f"text-anchor='end'>{hi:+.2f}</text><text x='{x0 + panel_w / 2}' y='{axis_y + 14}' "
                   "text-anchor='middle' fill='#666'>nats/token (&lt; 0: a better, &gt; 0: b better)</text>")
    legend = ", ".join(f"<tspan fill='{c}'>{html.escape(s)}</tspan>" for s, c in STATUS_COLORS.items())
    out.append(f"<text x='8' y='{height - 4}' font-size='10'>colour = verdict: {legend}</text></svg>")
    return "\n".join(out)
