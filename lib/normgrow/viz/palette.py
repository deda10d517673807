"""One look for every page, figure and widget: a colour per placement, a line style and marker per schedule, and
verdict colours that no placement uses (so red never means both pre-norm and "not supported").

A trace drawn for a placement or a schedule carries ``meta`` = {"norm": ..., "schedule": ...} (``meta``), so the
browser test reads from a page itself that each trace has its placement's colour and its schedule's line style.
"""
from __future__ import annotations

from ..analysis.claims import NOT_JUDGED, NOT_JUDGED_DEPTH, NOT_RESOLVED, NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED

# plotly's D3 colours, one per registered placement (student.placements); anything else is drawn grey
PLACEMENT_COLOUR = {"pre": "#d62728", "post": "#1f77b4", "mix": "#9467bd", "peri": "#2ca02c", "deepnorm": "#ff7f0e",
                    "lns": "#8c564b"}
OTHER_COLOUR = "#555555"
# schedule families: a variant's schedule, "-freeze" for a frozen prefix, "-matched" for a compute-matched joint run
SCHEDULE_DASH = {"joint": "solid", "grow": "dash", "single": "dot", "grow-freeze": "dashdot",
                 "joint-matched": "longdash"}
SCHEDULE_SYMBOL = {"joint": "circle", "grow": "square", "single": "diamond", "grow-freeze": "triangle-up",
                   "joint-matched": "cross"}
OTHER_DASH, OTHER_SYMBOL = "longdashdot", "x"
# verdicts: darker tones and greys, none of them a placement's colour
STATUS_COLOUR = {SUPPORTED: "#1b7837", NOT_SUPPORTED: "#b2182b", NOT_RESOLVED: "#b35806", NOT_TESTABLE: "#9e9e9e",
                 NOT_JUDGED: "#4d4d4d", NOT_JUDGED_DEPTH: "#737373"}


def colour(norm: str) -> str:
    return PLACEMENT_COLOUR.get(norm, OTHER_COLOUR)


def dash(schedule: str) -> str:
    return SCHEDULE_DASH.get(schedule, OTHER_DASH)


def symbol(schedule: str) -> str:
    return SCHEDULE_SYMBOL.get(schedule, OTHER_SYMBOL)


def meta(norm: str | None = None, schedule: str | None = None) -> dict:
    """What a trace draws, for the browser's check of the palette."""
    return {k: v for k, v in (("norm", norm), ("schedule", schedule)) if v}


def variant_style(norm: str, schedule: str) -> dict:
    """Colour (placement), dash and marker symbol (schedule) of a variant."""
    return {"color": colour(norm), "dash": dash(schedule), "symbol": symbol(schedule)}


def faint(color: str, alpha: float = 0.18) -> str:
    """'#rrggbb' as an rgba string with this opacity (bands, seed markers)."""
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
