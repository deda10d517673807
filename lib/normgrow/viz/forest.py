"""The forest plot of a grid (a row per setting: the grow gap and the interaction with their intervals, zero and the
reference marked, the verdict as colour), as a plotly figure for the pages and as a static SVG for README (plotly's
image export needs a browser). Drawn from grid.csv's frame (grid.grid_frame).

Each panel's axis spans the intervals of the rows whose students trained (panel_span): a row the regime gate stopped
as undertrained carries diverged runs' numbers (an interval of +-2.4 nats where the others are +-0.05), which would
press every other row into a few pixels about zero. Whatever lies beyond the axis is drawn to its edge, marked by a
triangle there with its value written beside it (edge_marks), so no number is hidden and none is drawn false."""
from __future__ import annotations

import html

import pandas as pd

from ..analysis.claims import NOT_JUDGED
from ..analysis.variants import load_reference
from .palette import STATUS_COLOUR
from .render import style_figure


def reference_marks() -> dict[str, float]:
    """The reference's grow gap and interaction (grow gap - joint gap), pre - post (params/reference.yaml)."""
    gaps = load_reference().gaps
    return {"grow": gaps["grow"].reference, "interaction": gaps["grow"].reference - (gaps["joint"].reference or 0.0)}


BEYOND = "beyond the axis (value written)"
PANELS = (("grow", "grow_gap", "grow gap: a-grow - b-grow"),
          ("interaction", "interaction", "interaction: grow gap - joint gap"))  # (quantity, mean column, title)


def forest_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows a forest draws (settings with paired seeds), labelled 'setting (a-b)', numbered from 0."""
    rows = frame[frame["n_seeds"].notna()].reset_index(drop=True)
    return rows.assign(label=[f"{s} ({a}-{b})" for s, a, b in zip(rows["setting"], rows["a"], rows["b"])])


def panel_span(rows: pd.DataFrame, quantity: str, mean: str, reference: dict[str, float]) -> tuple[float, float]:
    """A panel's x range: the means and intervals of the rows whose students trained (every row's where the regime
    gate stopped them all), zero and the reference, padded 5% a side (module docstring)."""
    trained = rows[rows[f"{quantity}_verdict"] != NOT_JUDGED]
    drawn = lambda f: [v for c in (mean, f"{quantity}_ci_low", f"{quantity}_ci_high") for v in f[c] if pd.notna(v)]
    values = (drawn(trained) or drawn(rows)) + [0.0] + (
        [reference[quantity]] if reference.get(quantity) is not None else [])
    lo, hi = min(values), max(values)
    pad = 0.05 * (hi - lo or 1.0)
    return lo - pad, hi + pad


def edge_marks(rows: pd.DataFrame, quantity: str, mean: str, span: tuple[float, float]) -> list[dict]:
    """What a panel's span cannot hold: a mark per row and edge its interval runs beyond, at that edge, with its text:
    the interval's end, or the whole reading 'mean [low, high]' at the edge the mean itself lies beyond (its marker is
    then not drawn)."""
    lo, hi = span
    marks = []
    for i, r in rows.iterrows():
        m, low, high = r[mean], r[f"{quantity}_ci_low"], r[f"{quantity}_ci_high"]
        # NaN compares False: a row without an interval gets no mark
        for edge, side, end, crosses, beyond in ((lo, "left", low, low < lo, m < lo),
                                                 (hi, "right", high, high > hi, m > hi)):
            if crosses:
                text = f"{m:+.2f} [{low:+.2f}, {high:+.2f}]" if beyond else f"{end:+.2f}"
                marks.append({"row": i, "label": r["label"], "x": edge, "side": side, "text": text,
                              "status": r[f"{quantity}_verdict"]})
    return marks


def forest_figure(frame: pd.DataFrame, reference: dict[str, float]):
    """A row per setting: the grow gap and the interaction (a - b, nats) with their intervals, zero and the
    reference's values marked; the colour is the row's verdict, named in the legend. A trace per panel and verdict,
    since plotly takes one colour per trace for error bars; the reference line is named in the legend rather than
    annotated, where its label would sit on the panel titles. Means and intervals are clipped to the panel's span
    (a mean beyond it gets no marker) and edge_marks' triangles say what runs beyond, their hover the whole reading.
    The legend's entries are traces of their own, so a verdict whose every mean lies beyond shows its colour too."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    judged = forest_rows(frame)
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[title for _, _, title in PANELS])
    legend = {}  # name: marker, in the order first drawn
    for col, (quantity, mean, _) in enumerate(PANELS, 1):
        lo, hi = span = panel_span(judged, quantity, mean, reference)
        verdict = f"{quantity}_verdict"
        for status, rows in judged.groupby(verdict, sort=False):
            colour = STATUS_COLOUR.get(status, "#000")
            x = rows[mean].clip(lo, hi)
            fig.add_trace(go.Scatter(
                x=x, y=rows["label"], mode="markers", name=status, legendgroup=status, showlegend=False,
                marker=dict(size=[10 if lo <= m <= hi else 0 for m in rows[mean]], color=colour),
                error_x=dict(type="data", symmetric=False, array=rows[f"{quantity}_ci_high"].clip(lo, hi) - x,
                             arrayminus=x - rows[f"{quantity}_ci_low"].clip(lo, hi), thickness=1.5, color=colour),
                customdata=list(zip(rows[verdict], rows["n_seeds"], rows[mean], rows[f"{quantity}_ci_low"],
                                    rows[f"{quantity}_ci_high"])),
                hovertemplate="%{y}: %{customdata[2]:.4f} [%{customdata[3]:.4f}, %{customdata[4]:.4f}]<br>"
                              "%{customdata[0]} (%{customdata[1]} seeds)<extra></extra>"), 1, col)
            legend.setdefault(status, dict(size=10, color=colour))
        marks = edge_marks(judged, quantity, mean, span)
        if marks:
            fig.add_trace(go.Scatter(
                x=[m["x"] for m in marks], y=[m["label"] for m in marks], mode="markers+text", cliponaxis=False,
                text=[m["text"] for m in marks], textfont=dict(size=10),
                textposition=["top right" if m["side"] == "left" else "top left" for m in marks],
                marker=dict(size=11, symbol=[f"triangle-{m['side']}" for m in marks],
                            color=[STATUS_COLOUR.get(m["status"], "#000") for m in marks]),
                name=BEYOND, legendgroup=BEYOND, showlegend=False, hovertemplate="%{y}: %{text}<extra></extra>"), 1, col)
            legend.setdefault(BEYOND, dict(size=11, symbol="triangle-left", color="#444"))
        fig.update_xaxes(range=[lo, hi], row=1, col=col)
        fig.add_vline(x=0, line=dict(color="#444", width=1), row=1, col=col)
        if reference.get(quantity) is not None:
            fig.add_vline(x=reference[quantity], line=dict(color="#888", dash="dash"), row=1, col=col)
    for name, marker in legend.items():
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", marker=marker, name=name, legendgroup=name,
                                 hoverinfo="skip"), 1, 1)
    if any(v is not None for v in reference.values()):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", line=dict(color="#888", dash="dash"),
                                 name="reference", hoverinfo="skip"), 1, 1)
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=list(judged["label"]))
    fig.update_xaxes(title_text="nats/token (> 0: b better)")
    fig.update_layout(legend=dict(title_text="colour = verdict"))
    return style_figure(fig, height=150 + 34 * len(judged))


def forest_svg(frame: pd.DataFrame, reference: dict[str, float]) -> str:
    """The forest figure as a static SVG (README shows it; plotly's image export needs a browser): the same rows,
    spans, intervals, edge marks, zero and reference lines and verdict colours as forest_figure, drawn by hand."""
    rows = forest_rows(frame)
    spans = [panel_span(rows, quantity, col, reference) for quantity, col, _ in PANELS]
    marks = [edge_marks(rows, quantity, col, span) for (quantity, col, _), span in zip(PANELS, spans)]
    label_w, panel_w, gap, row_h, top = 250, 330, 30, 26, 46
    height = top + row_h * len(rows) + 74 + (14 if any(marks) else 0)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{label_w + 2 * panel_w + gap + 10}' height='{height}' "
           "font-family='sans-serif' font-size='12'>", "<rect width='100%' height='100%' fill='white'/>"]
    for i, r in rows.iterrows():
        y = top + row_h * i + row_h / 2
        out.append(f"<text x='{label_w - 8}' y='{y + 4}' text-anchor='end'>{html.escape(r['label'])}</text>")
    for k, (quantity, col, title) in enumerate(PANELS):
        x0 = label_w + k * (panel_w + gap)
        lo, hi = spans[k]
        x = lambda v, x0=x0: x0 + (min(max(v, lo), hi) - lo) / (hi - lo) * panel_w
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
            colour = STATUS_COLOUR.get(r[f"{quantity}_verdict"], "#000")
            if pd.notna(r[f"{quantity}_ci_low"]):
                out.append(f"<line x1='{x(r[f'{quantity}_ci_low'])}' x2='{x(r[f'{quantity}_ci_high'])}' y1='{y}' "
                           f"y2='{y}' stroke='{colour}' stroke-width='2'/>")
            if pd.notna(r[col]) and lo <= r[col] <= hi:
                out.append(f"<circle cx='{x(r[col])}' cy='{y}' r='5' fill='{colour}'/>")
        for m in marks[k]:
            y, xe = top + row_h * m["row"] + row_h / 2, x(m["x"])
            d, anchor = (1, "start") if m["side"] == "left" else (-1, "end")  # the triangle points out of the panel
            out.append(f"<polygon points='{xe - 7 * d},{y} {xe},{y - 5} {xe},{y + 5}' "
                       f"fill='{STATUS_COLOUR.get(m['status'], '#000')}'/><text class='beyond' x='{xe + 3 * d}' "
                       f"y='{y - 5}' text-anchor='{anchor}' font-size='10'>{html.escape(m['text'])}</text>")
        axis_y = top + row_h * len(rows) + 34
        out.append(f"<text x='{x0}' y='{axis_y}'>{lo:+.2f}</text><text x='{x0 + panel_w}' y='{axis_y}' "
                   f"text-anchor='end'>{hi:+.2f}</text><text x='{x0 + panel_w / 2}' y='{axis_y + 14}' "
                   "text-anchor='middle' fill='#666'>nats/token (&lt; 0: a better, &gt; 0: b better)</text>")
    legend = ", ".join(f"<tspan fill='{c}'>{html.escape(s)}</tspan>" for s, c in STATUS_COLOUR.items())
    if any(marks):
        out.append(f"<text x='8' y='{height - 18}' font-size='10'>a triangle at a panel's edge: the interval runs "
                   "beyond the axis (the axis spans the rows whose students trained); its value is written beside "
                   "it</text>")
    out.append(f"<text x='8' y='{height - 4}' font-size='10'>colour = verdict: {legend}</text></svg>")
    return "\n".join(out)
