"""How the grown students fared, per setting of a grid with grown runs (grid.curriculum): one panel per setting, the
mean phase-end val_ce of each placement's grown runs against depth, beside its single run (the first stage alone,
at the first stage's depth) and its joint run (the last stage's depth), as a static SVG for README and the grid's
page. Colours, line styles and markers are the palette's (a colour per placement, a line and marker per schedule)."""
from __future__ import annotations

import html
import math

from ..student.placements import PLACEMENTS
from . import palette

PANEL_W, PANEL_H, GAP, LEFT, BOTTOM, PER_ROW = 230, 210, 18, 56, 44, 4
CHAR_W, LINE_H = 6.4, 16  # the width of a character of the 11 px sans-serif labels (an upper bound), a legend line


def marker(schedule: str, x: float, y: float, colour: str, filled: bool = True) -> str:
    """The schedule's marker (palette.SCHEDULE_SYMBOL: circle, square or diamond) centred at (x, y)."""
    paint = f"fill='{colour}'" if filled else f"fill='none' stroke='{colour}' stroke-width='1.5'"
    shape = palette.symbol(schedule)
    if shape == "square":
        return f"<rect x='{x - 3.5:.1f}' y='{y - 3.5:.1f}' width='7' height='7' {paint}/>"
    if shape == "diamond":
        return f"<path d='M{x:.1f},{y - 5:.1f} l5,5 l-5,5 l-5,-5 z' {paint}/>"
    return f"<circle cx='{x:.1f}' cy='{y:.1f}' r='4' {paint}/>"


def legend(norms: list[str], width: float) -> tuple[list[str], float]:
    """The legend's SVG, its entries wrapped onto as many lines as the image's width needs, and the height it takes:
    every entry inside the image however many placements the grid compares."""
    grown = lambda n: lambda x, y: (f"<line x1='{x}' x2='{x + 18}' y1='{y}' y2='{y}' stroke='{palette.colour(n)}' "
                                    f"stroke-width='2' stroke-dasharray='{palette.SVG_DASH[palette.dash('grow')]}'/>"
                                    + marker("grow", x + 9, y, palette.colour(n)))
    entries = [(grown(n), f"{PLACEMENTS[n].label}: grown, each phase's end") for n in norms]
    entries += [(lambda x, y: marker("single", x + 9, y, "#444", filled=False), "single (first stage alone)"),
                (lambda x, y: marker("joint", x + 9, y, "#444"), "joint (all blocks from step 0)")]
    out, x, y = [], LEFT, 12
    for mark, text in entries:
        w = 22 + CHAR_W * len(text) + 24
        if x > LEFT and x + w > width - 10:
            x, y = LEFT, y + LINE_H
        out.append(mark(x, y) + f"<text x='{x + 22}' y='{y + 4}'>{html.escape(text)}</text>")
        x += w
    return out, y + 4


def curriculum_svg(items: list[dict]) -> str:
    """items: grid.curriculum's. Each panel is titled by its setting, its stages beneath; an item without finished
    grown runs draws an empty panel that says so."""
    values = [v for it in items for arm in it["arms"].values()
              for v in (*arm["phases"], arm["single"], arm["joint"]) if v is not None and math.isfinite(v)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = 0.06 * (hi - lo or 1.0)
    lo, hi = lo - pad, hi + pad
    depth_max = max((max(it["stages"]) for it in items), default=1)
    rows = max(1, math.ceil(len(items) / PER_ROW))
    cols = min(PER_ROW, max(1, len(items)))
    width = LEFT + cols * (PANEL_W + GAP) + 10
    norms = list(dict.fromkeys(n for it in items for n in it["arms"]))
    legend_svg, legend_h = legend(norms, width)
    top = legend_h + 36
    height = top + rows * (PANEL_H + BOTTOM) + 10
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' "
           "font-size='11'>", "<rect width='100%' height='100%' fill='white'/>", *legend_svg]
    for i, it in enumerate(items):
        x0 = LEFT + (i % PER_ROW) * (PANEL_W + GAP)
        y0 = top + (i // PER_ROW) * (PANEL_H + BOTTOM)
        x = lambda d: x0 + 10 + (d - 1) / max(depth_max - 1, 1) * (PANEL_W - 20)
        y = lambda v: y0 + (hi - v) / (hi - lo) * PANEL_H
        out.append(f"<rect x='{x0}' y='{y0}' width='{PANEL_W}' height='{PANEL_H}' fill='none' stroke='#ccc'/>"
                   f"<text x='{x0 + PANEL_W / 2}' y='{y0 - 18}' text-anchor='middle' font-weight='bold'>"
                   f"{html.escape(it['setting'])}</text><text x='{x0 + PANEL_W / 2}' y='{y0 - 5}' "
                   f"text-anchor='middle' fill='#666'>stages {html.escape(' '.join(map(str, it['stages'])))}</text>")
        for d in sorted(set(it["stages"])):
            out.append(f"<text x='{x(d)}' y='{y0 + PANEL_H + 14}' text-anchor='middle' fill='#666'>{d}</text>")
        if i % PER_ROW == 0:
            for v in (lo + pad, (lo + hi) / 2, hi - pad):
                out.append(f"<text x='{x0 - 4}' y='{y(v) + 4}' text-anchor='end' fill='#666'>{v:.2f}</text>")
        drawn = False
        for k, (norm, arm) in enumerate(it["arms"].items()):
            colour, nudge = palette.colour(norm), (-3 if k == 0 else 3)
            points = [(x(d) + nudge, y(v)) for d, v in zip(it["stages"], arm["phases"])
                      if v is not None and math.isfinite(v)]
            if len(points) > 1:
                out.append(f"<polyline points='{' '.join(f'{px:.1f},{py:.1f}' for px, py in points)}' fill='none' "
                           f"stroke='{colour}' stroke-width='1.5' stroke-dasharray='{palette.SVG_DASH[palette.dash('grow')]}'/>")
            out += [marker("grow", px, py, colour) for px, py in points]
            drawn |= bool(points)
            if arm["single"] is not None and math.isfinite(arm["single"]):
                sx, sy = x(it["stages"][0]) + nudge, y(arm["single"])
                out.append(marker("single", sx, sy, colour, filled=False))
            if arm["joint"] is not None and math.isfinite(arm["joint"]):
                jx, jy = x(it["stages"][-1]) + nudge, y(arm["joint"])
                out.append(marker("joint", jx, jy, colour))
        if not drawn:
            out.append(f"<text x='{x0 + PANEL_W / 2}' y='{y0 + PANEL_H / 2}' text-anchor='middle' fill='#666'>"
                       "no finished grown runs yet</text>")
    out.append(f"<text x='{LEFT + (width - LEFT) / 2}' y='{height - 8}' text-anchor='middle' fill='#666'>depth "
               "(blocks) at each phase's end; final validation CE (nats), mean over seeds</text></svg>")
    return "\n".join(out)
