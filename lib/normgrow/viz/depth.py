"""Where does depth pay? A grid's depth gains (single - joint final val_ce, paired by seed, with 95% intervals) of both
placements against the compute of a joint run (grid.csv's joint_tflop, log scale), the depth margin of the gate
marked: one plotly figure for the grid's page and, exported (render.write_svg), for README. Drawn from grid.csv's
frame (grid.grid_frame)."""
from __future__ import annotations

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
