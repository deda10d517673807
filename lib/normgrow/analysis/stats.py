"""Statistics of the study's runs: per-variant means with Student-t intervals over seeds, paired gaps between
variants, the phase-wise crossover, line fits over a grid's settings.

A variant's mean over seeds has a two-sided Student-t confidence interval (95% by default); a gap ``a - b`` is
computed per seed on the seeds both variants finished (paired) and summarised the same way. Fewer than two paired
seeds give no interval (NaN). Every finished seed counts, whatever params/study.yaml lists (variants.collect_runs).
A gap's resolution: its interval's half-width (mde) and the seeds its spread would need to resolve the reference's
value (seeds_needed). Equivalence to zero within a margin is an equivalence test on the same paired differences
(tost), never "the interval includes zero", which more spread would only make likelier.

The regime and depth checks are regime.py's; claims.py turns these numbers into verdicts; report.py renders them.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from .reference import GapSpec
from .variants import StudyRuns

LEVEL = 0.95
ALPHA = 0.05
"""Level of each one-sided test of an equivalence test (tost): a gap exactly at the margin is called equivalent in
at most 5% of studies, the same error rate as a false difference at the 95% intervals (1 - LEVEL)."""
METRICS = ("val_ce", "val_kd_ce")  # the validation metrics every run reports
RUN_FIELDS = ("run_name", "variant", "seed", "norm", "schedule", "freeze_prefix", "match_active_layer_tokens",
              "depth", "val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "trainable_layer_tokens", "wall_s",
              "eval_s", "checkpoint_s", "machine")
PHASE_FIELDS = ("depth", "tokens", "active_layer_tokens", "val_ce", "val_kd_ce", "val_ce_after_growth")



# ------------------------------------------------------------------------------------------------------ statistics

def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with df degrees of freedom (scipy.stats.t), e.g. t_quantile(0.975, 2) = 4.3027."""
    return float(scipy_stats.t.ppf(p, df))


def _finite(values) -> np.ndarray:
    return np.asarray([v for v in np.asarray(values, dtype=float).ravel() if np.isfinite(v)], dtype=float)


def mean_ci(values, level: float = LEVEL) -> dict:
    """n, mean, sd, and the two-sided Student-t interval of the mean over the finite values (NaN when n < 2)."""
    x = _finite(values)
    n = int(x.size)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return {"n": n, "mean": mean, "sd": math.nan, "half_width": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    sd = float(x.std(ddof=1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "ci_low": mean - half, "ci_high": mean + half}


def tost(values, margin: float, alpha: float = ALPHA) -> dict:
    """Two one-sided t-tests (TOST) of equivalence for the mean of the finite values (paired per-seed differences,
    as every gap here is): H0 mean <= -margin against mean > -margin (p_lower) and H0 mean >= margin against
    mean < margin (p_upper), each a one-sample t-test with n - 1 df. p = max(p_lower, p_upper); equivalent iff
    p < alpha, i.e. both one-sided tests reject, which is the same as the two-sided (1 - 2 alpha) interval of the
    mean lying inside (-margin, margin). Fewer than two values give NaN p-values and not equivalent; zero spread
    gives p 0 or 1 by which side of each bound the mean lies."""
    x = _finite(values)
    n = int(x.size)
    out = {"n": n, "margin": margin, "alpha": alpha, "mean": float(x.mean()) if n else math.nan,
           "t_lower": math.nan, "t_upper": math.nan, "p_lower": math.nan, "p_upper": math.nan, "p": math.nan,
           "equivalent": False}
    if n < 2:
        return out
    se = float(x.std(ddof=1)) / math.sqrt(n)
    mean = out["mean"]
    if se == 0:
        p_lower, p_upper = float(not mean > -margin), float(not mean < margin)
        t_lower = t_upper = math.nan
    else:
        t_lower, t_upper = (mean + margin) / se, (mean - margin) / se
        p_lower, p_upper = float(scipy_stats.t.sf(t_lower, n - 1)), float(scipy_stats.t.cdf(t_upper, n - 1))
    p = max(p_lower, p_upper)
    return out | {"t_lower": t_lower, "t_upper": t_upper, "p_lower": p_lower, "p_upper": p_upper, "p": p,
                  "equivalent": bool(p < alpha)}


SEEDS_LIMIT = 10_000
"""seeds_needed searches no further: 10,000 paired seeds (100,000 runs of the study's 10 variants) is beyond any study
of this kind, so a larger answer only says "out of reach", and the search stays bounded when target is tiny."""


def seeds_needed(sd: float, target: float, p: float = 0.5 + LEVEL / 2) -> int | None:
    """The smallest number of seeds n >= 2 at which an interval of half-width t_p(n - 1) * sd / sqrt(n) is narrower
    than target: with p = 0.975 (default) how many seeds would resolve a gap of size target from zero at this
    per-seed spread; with p = 1 - alpha how many would show equivalence when |mean| is target below the margin.
    None when sd or target is not finite and > 0 (no spread measured: fewer than two seeds, or identical ones), or
    when more than SEEDS_LIMIT seeds would be needed."""
    if not (np.isfinite(sd) and sd > 0 and np.isfinite(target) and target > 0):
        return None
    wide = lambda n: t_quantile(p, n - 1) * sd / math.sqrt(n) >= target  # non-increasing in n
    if wide(SEEDS_LIMIT):
        return None
    lo, hi = 1, SEEDS_LIMIT  # bisect between lo (taken as too wide: n = 1 has no interval) and hi (narrow enough)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if wide(mid) else (lo, mid)
    return hi


# ------------------------------------------------------------------------------------------------------- the runs

def runs_frame(study: StudyRuns) -> pd.DataFrame:
    """One row per assigned run: the RUN_FIELDS plus, for every phase i, ``<field>_p<i>`` for the PHASE_FIELDS, and
    for every phase that grew the model ``growth_jump_p<i>``: its val_ce just after the growth step minus the
    previous phase's final val_ce on the same rows (PhaseSummary.jump_base; the prefix before the blocks were
    appended): what the appended blocks did to the loss before any update (0 for an operator that preserves the function); machine: where it
    trained (study.machines; None where not given). Sorted by variant and seed."""
    rows = []
    for (variant, seed), summary in study.assigned.items():
        record = summary.to_json()
        row = {k: record.get(k) for k in RUN_FIELDS} | {"variant": variant, "seed": seed,
                                                         "machine": study.machines.get(summary.run_name)}
        for ph in summary.phases:
            row.update({f"{k}_p{ph.phase}": getattr(ph, k) for k in PHASE_FIELDS})
            if ph.phase and ph.val_ce_after_growth is not None:
                row[f"growth_jump_p{ph.phase}"] = ph.val_ce_after_growth - summary.phases[ph.phase - 1].jump_base()
        rows.append(row)
    df = pd.DataFrame(rows, columns=None if rows else list(RUN_FIELDS))
    if rows:
        df = df.sort_values(["variant", "seed"], kind="stable").reset_index(drop=True)
    return df


def n_phases(runs: pd.DataFrame) -> int:
    idx = [int(m.group(1)) for c in runs.columns if (m := re.fullmatch(r"val_ce_p(\d+)", c))]
    return max(idx) + 1 if idx else 0


def phase_metric(runs: pd.DataFrame, phase: int | None, metric: str) -> str:
    return metric if phase is None else f"{metric}_p{phase}"


def variant_stats(runs: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Per variant: seeds, and mean / sd / CI of val_ce and val_kd_ce over seeds; mean tokens, budget and wall time."""
    rows = []
    for variant, g in runs.groupby("variant", sort=True) if len(runs) else []:
        row = {"variant": variant, "n_seeds": len(g), "seeds": " ".join(str(s) for s in sorted(g["seed"]))}
        for m in METRICS:
            s = mean_ci(g[m], level)
            row.update({f"{m}_mean": s["mean"], f"{m}_sd": s["sd"], f"{m}_ci_low": s["ci_low"],
                        f"{m}_ci_high": s["ci_high"], f"{m}_half_width": s["half_width"]})
        for k in ("depth", "tokens", "active_layer_tokens", "trainable_layer_tokens", "wall_s"):
            row[f"{k}_mean"] = float(pd.to_numeric(g[k], errors="coerce").mean())
        rows.append(row)
    return pd.DataFrame(rows)


def paired_differences(runs: pd.DataFrame, a: str, b: str, metric: str = "val_ce",
                       phase: int | None = None) -> pd.Series:
    """Per seed, value(a) - value(b) on the seeds both variants finished (index: seed)."""
    col = phase_metric(runs, phase, metric)
    if not len(runs) or col not in runs.columns:
        return pd.Series(dtype=float, name=f"{a} - {b}")
    def by_seed(v):
        g = runs[runs["variant"] == v]
        return pd.to_numeric(g.set_index("seed")[col], errors="coerce").dropna()
    va, vb = by_seed(a), by_seed(b)
    common = sorted(set(va.index) & set(vb.index))
    return pd.Series([float(va[s] - vb[s]) for s in common], index=pd.Index(common, name="seed"),
                     name=f"{a} - {b}", dtype=float)


def paired_gap(runs: pd.DataFrame, a: str, b: str, metric: str = "val_ce", phase: int | None = None,
               level: float = LEVEL) -> dict:
    """Mean and CI of value(a) - value(b) over paired seeds; which variants are missing; which seeds are unpaired."""
    present = set(runs["variant"]) if len(runs) else set()
    diffs = paired_differences(runs, a, b, metric, phase)
    seeds = lambda v: set(runs.loc[runs["variant"] == v, "seed"]) if v in present else set()
    unpaired = sorted((seeds(a) | seeds(b)) - set(diffs.index))
    return {"a": a, "b": b, "metric": metric, **mean_ci(diffs.values, level),
            "seeds": " ".join(map(str, diffs.index)), "unpaired_seeds": " ".join(map(str, unpaired)),
            "missing": " ".join(v for v in (a, b) if v not in present)}


def gap_table(runs: pd.DataFrame, gaps: dict[str, GapSpec], metrics=METRICS, level: float = LEVEL) -> pd.DataFrame:
    """The paired gaps (params/reference.yaml's gaps, reference.load_reference: a - b by seed) for every metric, with the
    reference values beside them and two resolution columns. mde (minimum detectable effect): the half-width of the
    gap's interval at its number of paired seeds, the smallest |mean| these seeds at this spread resolve from zero.
    seeds_to_resolve_reference: seeds_needed(sd, |reference|), how many paired seeds at the observed per-seed spread
    would resolve a gap of the reference's size from zero (None without a nonzero reference, or without a measured
    spread)."""
    rows = []
    for metric in metrics:
        for spec in gaps.values():
            g = paired_gap(runs, spec.a, spec.b, metric, level=level)
            mde = g.pop("half_width")
            reference = spec.reference if metric == "val_ce" else None
            resolve = seeds_needed(g["sd"], abs(reference), 0.5 + level / 2) if reference else None
            rows.append({"gap": spec.name, "comparison": f"{spec.a} - {spec.b}", "metric": metric, **g, "mde": mde,
                         "seeds_to_resolve_reference": resolve, "reference": reference,
                         "reference_text": spec.reference_text if metric == "val_ce" else "",
                         "meaning": spec.meaning})
    df = pd.DataFrame(rows)
    # seed counts with None kept as Python ints (object): a float column would write 12.0 to gaps.csv
    df["seeds_to_resolve_reference"] = pd.Series([r["seeds_to_resolve_reference"] for r in rows], dtype=object)
    return df


def gap_differences(runs: pd.DataFrame, first: GapSpec, second: GapSpec, metric: str = "val_ce") -> pd.Series:
    """(first.a - first.b) - (second.a - second.b) per seed, on the seeds all four variants finished (index: seed)."""
    d1 = paired_differences(runs, first.a, first.b, metric)
    d2 = paired_differences(runs, second.a, second.b, metric)
    common = sorted(set(d1.index) & set(d2.index))
    return pd.Series([d1[s] - d2[s] for s in common], index=pd.Index(common, name="seed"), dtype=float)


def difference_in_gaps(runs: pd.DataFrame, first: GapSpec, second: GapSpec, metric: str = "val_ce",
                       level: float = LEVEL) -> dict:
    """The mean and interval of gap_differences, with the seeds they pair on."""
    d = gap_differences(runs, first, second, metric)
    return {**mean_ci(list(d.values), level), "seeds": " ".join(map(str, d.index))}


def gap_ratio(gaps: pd.DataFrame, metric: str = "val_ce", first: str = "grow", second: str = "joint") -> dict:
    """Mean first gap / mean second gap (gap names of the gap table; the study's: grow over joint), with whether the
    second is resolved from zero, and the reference's ratio (from the table's reference column: 0.0328 / 0.0004,
    about 80x, for grow over joint)."""
    g = gaps[gaps["metric"] == metric].set_index("gap")
    one, two = g.loc[first], g.loc[second]
    ratio = one["mean"] / two["mean"] if np.isfinite(two["mean"]) and two["mean"] != 0 else math.nan
    second_resolved = bool(np.isfinite(two["ci_low"]) and (two["ci_low"] > 0 or two["ci_high"] < 0))
    return {"first_mean": one["mean"], "second_mean": two["mean"], "ratio": ratio, "second_resolved": second_resolved,
            "reference_ratio": one["reference"] / two["reference"]}


# ------------------------------------------------------------------------------------------------------ crossover

def crossover_table(runs: pd.DataFrame, a: str, b: str, metric: str = "val_ce",
                    level: float = LEVEL) -> pd.DataFrame:
    """Validation metric of a and b at the end of every stage: means and CIs over seeds, the paired gap a - b with its
    CI, and which leads (lower is better): 'b' when the gap's CI is above zero, 'a' when below, else unresolved."""
    rows = []
    n = max(n_phases(runs[runs["variant"] == v]) for v in (a, b)) if len(runs) else 0
    for phase in range(n):
        col = phase_metric(runs, phase, metric)
        row = {"stage": phase}
        depths = pd.to_numeric(runs.loc[runs["variant"].isin([a, b]), f"depth_p{phase}"], errors="coerce").dropna()
        row["depth"] = int(depths.iloc[0]) if len(depths) else None
        tokens = pd.to_numeric(runs.loc[runs["variant"].isin([a, b]), f"tokens_p{phase}"], errors="coerce").dropna()
        row["tokens"] = int(tokens.iloc[0]) if len(tokens) else None
        for v in (a, b):
            s = mean_ci(runs.loc[runs["variant"] == v, col] if col in runs.columns else [], level)
            row.update({f"{v}_mean": s["mean"], f"{v}_ci_low": s["ci_low"], f"{v}_ci_high": s["ci_high"],
                        f"{v}_n": s["n"]})
        g = paired_gap(runs, a, b, metric, phase, level)
        row.update({"gap_mean": g["mean"], "gap_ci_low": g["ci_low"], "gap_ci_high": g["ci_high"], "n_pairs": g["n"]})
        resolved = g["n"] >= 2 and np.isfinite(g["ci_low"])
        resolved_leader = (b if resolved and g["ci_low"] > 0 else a if resolved and g["ci_high"] < 0 else "")
        if resolved_leader:
            lead = f"{resolved_leader} (resolved)"
        elif np.isfinite(g["mean"]) and g["mean"] != 0:
            lead = f"{b if g['mean'] > 0 else a} (not resolved)"
        else:
            lead = "none"
        row["leader"] = lead
        row["resolved_leader"] = resolved_leader
        rows.append(row)
    return pd.DataFrame(rows)


def line_fit(x, y, level: float = LEVEL) -> dict:
    """The least-squares line y = intercept + slope x over the finite points, the slope's two-sided Student-t
    interval (n - 2 degrees of freedom) and what a band needs (x kept, residual sd s, t, xbar, sxx); slope NaN with
    fewer than 3 points or one x."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(x.size)
    if n < 3 or np.ptp(x) == 0:
        return {"n": n, "slope": math.nan, "intercept": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    xbar, sxx = x.mean(), float(((x - x.mean()) ** 2).sum())
    slope = float(((x - xbar) * (y - y.mean())).sum() / sxx)
    intercept = float(y.mean() - slope * xbar)
    s = math.sqrt(float(((y - intercept - slope * x) ** 2).sum()) / (n - 2))
    t = t_quantile(0.5 + level / 2, n - 2)
    half = t * s / math.sqrt(sxx)
    return {"n": n, "slope": slope, "intercept": intercept, "ci_low": slope - half, "ci_high": slope + half,
            "x": x, "s": s, "t": t, "xbar": xbar, "sxx": sxx}


def depth_trend(compute, gains, margin: float, level: float = LEVEL) -> dict:
    """Where does depth start to pay? The least-squares line of the depth gains (one per rung of a ladder: a
    placement's mean single - joint val_ce) against log10 of the compute (TFLOP of a joint run), its slope per decade
    with a Student-t interval (n - 2 df), and the compute at which the line reaches the depth margin: ``at`` (the
    line's crossing, when the slope is positive) and the interval of computes where the line's pointwise
    confidence band holds the margin (``from``: the band's upper edge reaches it, ``to``: its lower edge does; None
    when that edge never does, i.e. the data do not exclude that depth never pays; ``band_everywhere`` when the band
    holds the margin even 3 decades below the data, i.e. it is too wide to locate anything). A trend over the ladder's rungs,
    which change data, tokens and width together: it locates, it does not separate the three. NaN points are left
    out; fewer than 3 rungs give no interval."""
    fit = line_fit(np.log10(np.asarray(compute, dtype=float)), gains, level)
    n = fit["n"]
    out = {"n": n, "intercept": None, "slope_per_decade": math.nan, "slope_ci_low": math.nan, "slope_ci_high": math.nan,
           "at_tflop": None, "from_tflop": None, "to_tflop": None, "band_everywhere": None, "margin": margin}
    if not math.isfinite(fit["slope"]):
        return out
    x, slope, intercept, s, t, xbar, sxx = (fit[k] for k in ("x", "slope", "intercept", "s", "t", "xbar", "sxx"))
    out |= {"intercept": intercept, "slope_per_decade": slope, "slope_ci_low": fit["ci_low"],
            "slope_ci_high": fit["ci_high"]}
    if slope > 0:
        out["at_tflop"] = float(10 ** ((margin - intercept) / slope))
    # band(x0) = line(x0) +- t s sqrt(1/n + (x0 - xbar)^2 / sxx); the edges' crossings of the margin on a fine grid
    # of log10 compute, from 3 decades below the data to 6 above (beyond that an extrapolation says nothing)
    grid = np.linspace(x.min() - 3, x.max() + 6, 9001)
    line = intercept + slope * grid
    width = t * s * np.sqrt(1 / n + (grid - xbar) ** 2 / sxx)
    upper, lower = line + width >= margin, line - width >= margin
    out["band_everywhere"] = bool(upper[0])  # the band holds the margin 3 decades below the data: nothing located
    if upper.any() and not upper[0]:
        out["from_tflop"] = float(10 ** grid[np.argmax(upper)])
    if lower.any() and slope > 0:
        out["to_tflop"] = float(10 ** grid[np.argmax(lower)])
    return out
