"""Where does depth pay? A grid's depth gains (single - joint final val_ce, paired by seed, with 95% intervals) of both
placements against the compute of a joint run (grid.csv's joint_tflop, log scale), the depth margin of the gate
marked: as a plotly figure for the grid's page and as a static SVG for README (plotly's image export needs a
browser). Drawn from grid.csv's frame (grid.grid_frame)."""
from __future__ import annotations

import html
import math

import pandas as pd

from ..student.placements import PLACEMENTS
from . import palette

def _points(frame: pd.DataFrame) -> list[dict]:
    """One point per setting and placement with a finished joint run: setting, placement, its side (a or b), x
    (TFLOP), gain, interval, and the placement's colour (palette, as on every page)."""
    points = []
    for _, r in frame[pd.to_numeric(frame["joint_tflop"], errors="coerce").notna()].iterrows():
        for side in "ab":
            if pd.notna(r[f"depth_gain_{side}"]):
                points.append({"setting": r["setting"], "norm": r[side], "side": side, "x": float(r["joint_tflop"]),
                               "gain": float(r[f"depth_gain_{side}"]), "low": r[f"depth_gain_{side}_ci_low"],
                               "high": r[f"depth_gain_{side}_ci_high"], "colour": palette.colour(r[side])})
    return points


def _trend_lines(points: list[dict], trends: dict | None) -> list[dict]:
    """Per placement with a trend (grid.depth_trends): its fitted line over the range of its points, in its colour."""
    lines = []
    for norm, t in (trends or {}).items():
        mine = [p for p in points if p["norm"] == norm]
        if mine and math.isfinite(t["slope_per_decade"]) and t.get("intercept") is not None:
            x0, x1 = min(p["x"] for p in mine), max(p["x"] for p in mine)
            lines.append({"norm": norm, "colour": mine[0]["colour"], "x": (x0, x1),
                          "y": tuple(t["intercept"] + t["slope_per_decade"] * math.log10(v) for v in (x0, x1))})
    return lines


def depth_figure(frame: pd.DataFrame, trends: dict | None = None):
    """Plotly: the depth gains of every setting against its joint run's TFLOP, one trace per placement role, and each
    placement's trend line (grid.depth_trends) dotted."""
    import plotly.graph_objects as go
    from .render import style_figure
    fig = go.Figure()
    points = _points(frame)
    for norm in dict.fromkeys(p["norm"] for p in points):
        mine = [p for p in points if p["norm"] == norm]
        colour = palette.colour(norm)
        fig.add_trace(go.Scatter(
            x=[p["x"] for p in mine], y=[p["gain"] for p in mine], mode="markers", marker=dict(size=9, color=colour),
            meta=palette.meta(norm),
            name=PLACEMENTS[norm].label,
            error_y=dict(type="data", symmetric=False, color=colour,
                         array=[p["high"] - p["gain"] if pd.notna(p["high"]) else 0 for p in mine],
                         arrayminus=[p["gain"] - p["low"] if pd.notna(p["low"]) else 0 for p in mine]),
            text=[f"{p['setting']} ({p['norm']})" for p in mine],
            hovertemplate="%{text}: %{y:.3f} nats at %{x:.1f} TFLOP<extra></extra>"))
    for line in _trend_lines(points, trends):
        fig.add_trace(go.Scatter(x=line["x"], y=line["y"], mode="lines", name=f"{line['norm']}: trend",
                                 line=dict(color=line["colour"], dash="dot", width=1), meta=palette.meta(line["norm"])))
    margin = frame["depth_margin"].dropna()
    if len(margin):
        fig.add_hline(y=float(margin.iloc[0]), line=dict(color="#888", dash="dash"), annotation_text="depth margin",
                      annotation_position="bottom right")
    fig.add_hline(y=0, line=dict(color="#444", width=1))
    fig.update_xaxes(type="log", title_text="matmul TFLOP of one joint run")
    fig.update_yaxes(title_text="depth gain: single - joint val_ce (nats)")
    return style_figure(fig, height=420)


def depth_svg(frame: pd.DataFrame, trends: dict | None = None) -> str:
    """depth_figure as a static SVG: the same points, intervals, trend lines, zero and margin lines (the margin named
    left of the plot, where no point lies), each rung numbered above its points and listed by number beside the
    plot."""
    points = _points(frame)
    width, height, left, right, top, bottom = 820, 420, 110, 240, 30, 60
    xs = [math.log10(p["x"]) for p in points] or [0.0, 1.0]
    margin = frame["depth_margin"].dropna()
    ys = [v for p in points for v in (p["gain"], p["low"], p["high"]) if pd.notna(v)] + [0.0] + (
        [float(margin.iloc[0])] if len(margin) else [])
    x_lo, x_hi = min(xs) - 0.1, max(xs) + 0.1
    y_lo, y_hi = min(ys), max(ys)
    pad = 0.08 * (y_hi - y_lo or 1.0)
    y_lo, y_hi = y_lo - pad, y_hi + pad
    plot_w, plot_h = width - left - right, height - top - bottom
    x = lambda v: left + (math.log10(v) - x_lo) / (x_hi - x_lo) * plot_w
    y = lambda v: top + (y_hi - v) / (y_hi - y_lo) * plot_h
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' "
           "font-size='11'>", "<rect width='100%' height='100%' fill='white'/>",
           f"<rect x='{left}' y='{top}' width='{plot_w}' height='{plot_h}' fill='none' stroke='#ccc'/>",
           f"<line x1='{left}' x2='{left + plot_w}' y1='{y(0)}' y2='{y(0)}' stroke='#444'/>",
           f"<text x='{left - 6}' y='{y(0) + 4}' text-anchor='end'>0</text>"]
    if len(margin):
        ym = y(float(margin.iloc[0]))
        out.append(f"<line x1='{left}' x2='{left + plot_w}' y1='{ym}' y2='{ym}' stroke='#888' stroke-dasharray='5,4'/>"
                   f"<text x='{left - 6}' y='{ym + 4}' text-anchor='end' fill='#666'>margin "
                   f"{float(margin.iloc[0]):.3f}</text>")
    decades = [10.0 ** t for t in range(math.ceil(x_lo), math.floor(x_hi) + 1)]
    for tick in decades or sorted({p["x"] for p in points}):  # no decade in range: the points' own values
        out.append(f"<text x='{x(tick)}' y='{top + plot_h + 16}' text-anchor='middle'>{tick:.3g}</text>")
    for p in points:
        px = x(p["x"]) + (-4 if p["side"] == "a" else 4)  # a rung's two placements side by side
        if pd.notna(p["low"]) and pd.notna(p["high"]):
            out.append(f"<line x1='{px}' x2='{px}' y1='{y(p['low'])}' y2='{y(p['high'])}' stroke='{p['colour']}'/>")
        out.append(f"<circle cx='{px}' cy='{y(p['gain'])}' r='4' fill='{p['colour']}'/>")
    for line in _trend_lines(points, trends):
        (xa, xb), (ya, yb) = line["x"], line["y"]
        out.append(f"<line x1='{x(xa)}' x2='{x(xb)}' y1='{y(ya)}' y2='{y(yb)}' stroke='{line['colour']}' "
                   "stroke-dasharray='2,3'/>")
    rungs = list(dict.fromkeys(p["setting"] for p in points))
    for k, setting in enumerate(rungs, 1):  # its number above the rung's highest point or interval
        mine = [p for p in points if p["setting"] == setting]
        top_y = min(y(v) for p in mine for v in (p["gain"], p["high"]) if pd.notna(v))
        out.append(f"<text x='{x(mine[0]['x'])}' y='{top_y - 7:.1f}' text-anchor='middle' font-weight='bold'>{k}"
                   "</text>")
    line = 0
    for k, setting in enumerate(rungs, 1):
        out.append(f"<text x='{left + plot_w + 10}' y='{top + 12 + 14 * line}' font-weight='bold'>{k} "
                   f"{html.escape(setting)}</text>")
        for p in sorted((p for p in points if p["setting"] == setting), key=lambda p: p["side"]):
            line += 1
            out.append(f"<text x='{left + plot_w + 22}' y='{top + 12 + 14 * line}' fill='{p['colour']}'>"
                       f"{html.escape(p['norm'])}: {p['gain']:+.3f}</text>")
        line += 1
    out.append(f"<text x='{left + plot_w / 2}' y='{height - 22}' text-anchor='middle' fill='#666'>matmul TFLOP of one "
               "joint run (log scale)</text>")
    out.append(f"<text x='14' y='{top + plot_h / 2}' text-anchor='middle' fill='#666' transform='rotate(-90 14 "
               f"{top + plot_h / 2})'>depth gain: single - joint val_ce (nats)</text></svg>")
    return "\n".join(out)
