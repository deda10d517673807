"""Numbers in words: every number the pages, tables and claim sentences show is formatted here, so that one value
reads the same everywhere.

  cell          a table cell, by column name: 4 decimals (validation CE and gaps: the gaps of interest are
                0.0004-0.03 nats), 3 significant digits for ratios, thousands separators for counts, yes/no
  interval      a mean with its interval, '4.921 [4.904, 4.938]'
  signed        a gap in a claim's sentence, sign always shown, '+0.0390'
  gap_interval  a paired gap in a claim's sentence with its interval and seed count
  sig           a ratio or a scale in a diagnostics sentence, 3 significant digits, 'n/a' when missing
"""
from __future__ import annotations

import math

import numpy as np

from .stats import LEVEL

INT_WORDS = ("tokens", "n_seeds", "n_pairs", "depth", "stage", "seed", "rank", "index", "phase", "count")


def cell(x, column: str = "") -> str:
    """One cell: '' for None/NaN, yes/no for booleans, thousands separators for integers and integral counts
    (columns named like INT_WORDS), 3 significant digits for ratios, whole seconds for wall time, else 4 decimals."""
    if x is None or (isinstance(x, (float, np.floating)) and math.isnan(x)):
        return ""
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    if isinstance(x, (float, np.floating)):
        col = column.lower()
        if any(w in col for w in INT_WORDS) and float(x).is_integer():
            return f"{int(x):,}"
        if "ratio" in col:
            return f"{x:.3g}"
        if "wall" in col:
            return f"{x:,.0f}"
        return f"{x:.4f}"
    return str(x)


def interval(mean, low, high, digits: int = 3, sign: bool = False) -> str:
    """'4.921 [4.904, 4.938]' (sign: '+0.083 [+0.064, +0.102]'); the mean alone when the interval is undefined (one
    seed); '' without a mean."""
    if mean is None or not np.isfinite(mean):
        return ""
    f = f"{'+' if sign else ''}.{digits}f"
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return f"{mean:{f}}"
    return f"{mean:{f}} [{low:{f}}, {high:{f}}]"


def signed(x: float, digits: int = 4) -> str:
    return "nan" if x is None or not np.isfinite(x) else f"{x:+.{digits}f}"


def gap_interval(s: dict, level: float = LEVEL) -> str:
    """A paired gap's stats (n, mean, ci_low, ci_high) in words: the mean, its interval and the number of seeds."""
    if s["n"] < 2:
        return f"{signed(s['mean'])} from {s['n']} paired seed{'s' if s['n'] != 1 else ''} (no CI: needs at least 2)"
    return (f"{signed(s['mean'])} ({round(level * 100)}% CI [{signed(s['ci_low'])}, {signed(s['ci_high'])}], "
            f"{s['n']} paired seeds)")


def sig(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"
