"""How the grown students fared, per setting of a grid with grown runs (grid.curriculum): one panel per setting, the
mean phase-end val_ce of each placement's grown runs against depth, beside its single run (the first stage alone,
at the first stage's depth) and its joint run (the last stage's depth). One plotly figure for the grid's page and,
exported (render.write_svg), for README. Colours, line styles and markers are the palette's."""
from __future__ import annotations

import math

from ..student.placements import PLACEMENTS
from . import palette

PER_ROW = 4


def curriculum_figure(items: list[dict]):
    """items: grid.curriculum's. Each panel is titled by its setting and its stages; a panel without finished grown
    runs says so. Every panel shares the val_ce axis, so settings compare at a glance."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .render import style_figure
    rows = max(1, math.ceil(len(items) / PER_ROW))
    cols = min(PER_ROW, max(1, len(items)))
    fig = make_subplots(rows, cols, shared_yaxes=True, horizontal_spacing=0.03, vertical_spacing=0.5 / rows,
                        subplot_titles=[f"<b>{it['setting']}</b><br>stages {' '.join(map(str, it['stages']))}"
                                        for it in items])
    finite = lambda v: v is not None and math.isfinite(v)  # noqa: E731
    for i, it in enumerate(items):
        row, col = i // PER_ROW + 1, i % PER_ROW + 1
        drawn = False
        for norm, arm in it["arms"].items():
            colour = palette.colour(norm)
            marks = [("grow", [d for d, v in zip(it["stages"], arm["phases"]) if finite(v)],
                      [v for v in arm["phases"] if finite(v)], palette.symbol("grow")),
                     ("single", [it["stages"][0]], [arm["single"]], palette.symbol("single") + "-open"),
                     ("joint", [it["stages"][-1]], [arm["joint"]], palette.symbol("joint"))]
            for schedule, x, y, symbol in marks:
                if not y or not all(finite(v) for v in y):
                    continue
                drawn |= schedule == "grow"
                name = f"{PLACEMENTS[norm].label}: {schedule}"
                fig.add_trace(go.Scatter(
                    x=x, y=y, mode="lines+markers" if schedule == "grow" else "markers", name=name,
                    legendgroup=norm, showlegend=False, meta=palette.meta(norm, schedule),
                    line=dict(color=colour, dash=palette.dash(schedule), width=1.5),
                    marker=dict(color=colour, symbol=symbol, size=8),
                    hovertemplate=f"{it['setting']}, {name}: %{{y:.4f}} at depth %{{x}}<extra></extra>"), row, col)
        if not drawn:
            fig.add_annotation(text="no finished grown runs yet", showarrow=False, font=dict(color="#666"),
                               xref=f"x{i + 1 if i else ''} domain", yref=f"y{i + 1 if i else ''} domain", x=0.5, y=0.5)
        fig.update_xaxes(tickvals=sorted(set(it["stages"])), range=[0.5, max(it["stages"]) + 0.5], row=row, col=col)
    # the legend: a colour per placement (its grown runs' line), a marker per schedule
    for norm in dict.fromkeys(n for it in items for n in it["arms"]):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines+markers", name=f"{PLACEMENTS[norm].label}: grown, "
                                 "each phase's end", legendgroup=norm, meta=palette.meta(norm, "grow"),
                                 line=dict(color=palette.colour(norm), dash=palette.dash("grow"), width=1.5),
                                 marker=dict(color=palette.colour(norm), symbol=palette.symbol("grow"), size=8)))
    for schedule, symbol, name in (("single", palette.symbol("single") + "-open", "single (first stage alone)"),
                                   ("joint", palette.symbol("joint"), "joint (all blocks from step 0)")):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, meta=palette.meta(schedule=schedule),
                                 marker=dict(color="#444", symbol=symbol, size=8)))
    fig.update_yaxes(matches="y")  # one val_ce scale for every setting
    fig.update_yaxes(title_text="val CE (nats)", col=1)
    fig.add_annotation(text="depth (blocks) at each phase's end; final validation CE (nats), mean over seeds",
                       xref="paper", yref="paper", x=0.5, y=0, yshift=-45, showarrow=False, font=dict(color="#666"))
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.0 + 0.3 / rows, x=0))
    style_figure(fig, height=180 + 280 * rows)
    fig.update_layout(margin=dict(t=120, b=70))
    return fig
