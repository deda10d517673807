"""The forest plot of a grid (a row per setting: the grow gap and the interaction with their intervals, zero and the
reference marked, the verdict as colour): one plotly figure for the pages and, exported (render.write_svg), for
README. Drawn from grid.csv's frame (grid.grid_frame).

Each panel's axis spans the intervals of the rows whose students trained (panel_span): a row the regime gate stopped
as undertrained carries diverged runs' numbers (an interval of +-2.4 nats where the others are +-0.05), which would
press every other row into a few pixels about zero. Whatever lies beyond the axis is drawn to its edge, marked by a
triangle there with its value written beside it (edge_marks), so no number is hidden and none is drawn false."""
from __future__ import annotations


import pandas as pd

from ..analysis.claims import NOT_JUDGED
from ..analysis.reference import load_reference
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
