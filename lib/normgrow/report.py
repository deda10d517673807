"""The study summary: every finished run of outputs/runs/<profile>/, per-variant statistics over seeds, the paired
gaps the reference reports, the phase-wise crossover, and one sentence per claim of shared/STUDY.md, computed from
the numbers (never written in advance). notebooks/summary.ipynb calls this and shows the result.

    rep = build_report("tiny")      # collect + compute (no files written)
    write_report(rep)               # outputs/study/<profile>/{summary.csv, variant_stats.csv, gaps.csv,
                                    #   crossover.csv, claims.csv, regime.csv, baselines.json, report.html}

Statistics: a variant's mean over seeds with a two-sided Student-t confidence interval (95% by default); a gap
``a - b`` is computed per seed on the seeds both variants finished (paired) and summarised the same way. A claim is
judged from the interval of its gap: excludes zero in the claimed direction -> supported; includes zero -> not
resolved at this number of seeds; excludes zero in the other direction -> not supported. Fewer than two paired
seeds give no interval (NaN) and the claim is not resolved; a missing variant makes the claim not testable.

Regime gate: a claim is judged only between students that are clearly trained. A variant is trained when its mean
final val_ce is at least UNIGRAM_MARGIN below the unigram baseline and every seed's validation curve has flattened
(FLAT_TAIL, FLAT_LIMIT). A claim comparing a variant that is not becomes "not judged: students undertrained", with
the failed criteria and the ungated numbers in its sentence (see regime_check, gate_claims).
"""
from __future__ import annotations

import html
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .config import is_study_run, outputs_dir
from .utils import atomic_write_json, atomic_write_text

LEVEL = 0.95
METRICS = ("val_ce", "val_kd_ce")
RUN_FIELDS = ("run_name", "variant", "seed", "norm", "schedule", "freeze_prefix", "match_active_layer_tokens",
              "depth", "val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "trainable_layer_tokens", "wall_s")
PHASE_FIELDS = ("depth", "tokens", "active_layer_tokens", "val_ce", "val_kd_ce")
SEED_SUFFIX = re.compile(r"^(?P<variant>.+)-s(?P<seed>\d+)$")

# Status words of a judged claim and the value of its "supported" field (the diagnostics.json convention).
SUPPORTED, NOT_RESOLVED, NOT_SUPPORTED, NOT_TESTABLE = "supported", "not resolved", "not supported", "not testable"
NOT_JUDGED = "not judged: students undertrained"
SUPPORTED_VALUE = {SUPPORTED: True, NOT_SUPPORTED: False, NOT_RESOLVED: None, NOT_TESTABLE: None, NOT_JUDGED: None}

UNIGRAM_MARGIN = 1.0
"""Nats/token a variant's mean final val_ce must lie below the unigram baseline for it to count as trained. The
unigram model is the context-free level: a student within a nat of it (perplexity within a factor e) has learned
little beyond token frequencies, and two such students differ in how fast they leave that plateau (optimisation at
this budget), not in what norm placement does to a trained model, which is what the claims are about."""
FLAT_TAIL = 0.2
"""The final fraction of a run's tokens whose improvement tells whether its validation curve has flattened."""
FLAT_LIMIT = 0.10
"""A run has flattened when its last FLAT_TAIL of tokens improved val_ce by less than this fraction of the run's
total improvement; a curve still falling faster than that means a longer budget would move the numbers compared."""
CURVE_KINDS = ("eval", "phase_end")  # metrics.jsonl records that carry step, tokens and val_ce
FLAT_FIELDS = ("v_start", "v_80", "tokens_80", "flat_ratio", "flattened", "flat_note")
REGIME_FIELDS = ("variant", "n_seeds", "seeds", "val_ce_mean", "unigram_val_ce", "margin_below_unigram",
                 "below_unigram", "max_flat_ratio", "flattened", "trained", "reason")


@dataclass(frozen=True)
class GapSpec:
    """A paired gap ``a - b`` (by seed). direction=+1: the reference reports it positive; 0: reported as ~0."""
    name: str
    a: str
    b: str
    reference: float | None  # the reference value, where the reference gives one
    reference_text: str
    direction: int
    meaning: str


GAPS = (
    GapSpec("joint", "pre-joint", "post-joint", 0.0004, "0.0004 (indistinguishable)", 0,
            "pre-norm minus post-norm, both trained jointly at full depth"),
    GapSpec("grow", "pre-grow", "post-grow", 0.0328, "0.0328 (post-norm better)", +1,
            "pre-norm minus post-norm, both grown by appending blocks"),
    GapSpec("matched", "post-joint-matched", "post-grow", None, "> 0 (matched joint still worse)", +1,
            "post-norm joint run with post-grow's active-layer-token budget minus post-grow"),
    GapSpec("pre-matched", "pre-joint-matched", "pre-grow", None, "not reported", 0,
            "pre-norm joint run with pre-grow's active-layer-token budget minus pre-grow (context)"),
    GapSpec("single", "pre-single", "post-single", None, "not reported (small: shallow blocks alike)", 0,
            "pre-norm minus post-norm, the first-stage prefix alone"),
    GapSpec("freeze", "pre-grow-freeze", "post-grow-freeze", None, "> 0 (the gain survives a frozen prefix)", +1,
            "pre-norm minus post-norm, grown with the prefix frozen"),
)
GAP_BY_NAME = {g.name: g for g in GAPS}
REFERENCE_RATIO = 0.0328 / 0.0004  # ~80x


# ------------------------------------------------------------------------------------------------------ statistics

def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t with integer df (p > 0.5), e.g. t_quantile(0.975, 2) = 4.3027.

    Exact: bisection on the closed-form two-sided CDF of Abramowitz & Stegun 26.7.3/26.7.4, so no scipy is needed.
    """
    if not 0.5 < p < 1.0:
        raise ValueError(f"p={p} must be in (0.5, 1)")
    if int(df) != df or df < 1:
        raise ValueError(f"df={df} must be an integer >= 1")
    df, target = int(df), 2.0 * p - 1.0  # P(|T| < t) = 2p - 1

    def two_sided(theta: float) -> float:
        s, c = math.sin(theta), math.cos(theta)
        if df % 2 == 0:
            term, total = 1.0, 1.0
            for j in range(1, df // 2):
                term *= c * c * (2 * j - 1) / (2 * j)
                total += term
            return s * total
        if df == 1:
            return 2.0 * theta / math.pi
        term, total = c, c
        for j in range(1, (df - 1) // 2):
            term *= c * c * (2 * j) / (2 * j + 1)
            total += term
        return 2.0 / math.pi * (theta + s * total)

    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if two_sided(mid) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan(0.5 * (lo + hi))


def mean_ci(values, level: float = LEVEL) -> dict:
    """n, mean, sd, and the two-sided Student-t interval of the mean over the finite values (NaN when n < 2)."""
    x = np.asarray([v for v in np.asarray(values, dtype=float).ravel() if np.isfinite(v)], dtype=float)
    n = int(x.size)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return {"n": n, "mean": mean, "sd": math.nan, "half_width": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    sd = float(x.std(ddof=1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "ci_low": mean - half, "ci_high": mean + half}


def judge(stats: dict, direction: int = +1) -> str:
    """Status of the claim "the quantity has the sign of direction", from its interval (see module docstring)."""
    if stats.get("n", 0) == 0:
        return NOT_TESTABLE
    low, high = stats["ci_low"], stats["ci_high"]
    if not (np.isfinite(low) and np.isfinite(high)):
        return NOT_RESOLVED
    if (direction > 0 and low > 0) or (direction < 0 and high < 0):
        return SUPPORTED
    if (direction > 0 and high < 0) or (direction < 0 and low > 0):
        return NOT_SUPPORTED
    return NOT_RESOLVED


# ------------------------------------------------------------------------------------------------------- the runs

def study_dir(profile: str) -> Path:
    return outputs_dir() / "study" / profile


def runs_root(profile: str) -> Path:
    return outputs_dir() / "runs" / profile


def split_run_name(run_name: str, seed: int | None = None) -> tuple[str, int | None]:
    """'post-grow-s2' -> ('post-grow', 2); a name without the -s<seed> suffix keeps its name and the given seed."""
    m = SEED_SUFFIX.match(run_name)
    if m:
        return m["variant"], int(m["seed"])
    return run_name, seed


def collect_runs(profile: str) -> pd.DataFrame:
    """One row per finished run (summary.json) of outputs/runs/<profile>/: the RUN_FIELDS plus, for every phase i,
    ``<field>_p<i>`` for the PHASE_FIELDS. Sorted by variant and seed."""
    root = runs_root(profile)
    rows = []
    for path in sorted(p for p in root.glob("*/summary.json") if is_study_run(p.parent)) if root.is_dir() else []:
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:  # written atomically, so this is a foreign or damaged file
            print(f"skipping {path}: {err}")
            continue
        run_name = summary.get("run_name") or path.parent.name
        variant, seed = split_run_name(run_name, summary.get("seed"))
        row = {k: summary.get(k) for k in RUN_FIELDS}
        row.update(run_name=run_name, variant=variant, seed=seed)
        for ph in summary.get("phases", []):
            i = ph.get("phase")
            for k in PHASE_FIELDS:
                row[f"{k}_p{i}"] = ph.get(k)
        rows.append(row)
    df = pd.DataFrame(rows, columns=None if rows else list(RUN_FIELDS))
    if rows:
        df = df.sort_values(["variant", "seed"], kind="stable").reset_index(drop=True)
    return df


def unfinished_runs(profile: str) -> list[str]:
    """Run directories without summary.json (running, interrupted or failed)."""
    root = runs_root(profile)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and is_study_run(p) and not (p / "summary.json").is_file())


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


def gap_table(runs: pd.DataFrame, metrics=METRICS, level: float = LEVEL) -> pd.DataFrame:
    """The paired gaps of GAPS (a - b by seed) for every metric, with the reference values beside them."""
    rows = []
    for metric in metrics:
        for spec in GAPS:
            g = paired_gap(runs, spec.a, spec.b, metric, level=level)
            rows.append({"gap": spec.name, "comparison": f"{spec.a} - {spec.b}", "metric": metric, **g,
                         "reference": spec.reference if metric == "val_ce" else None,
                         "reference_text": spec.reference_text if metric == "val_ce" else "",
                         "meaning": spec.meaning})
    return pd.DataFrame(rows)


def difference_in_gaps(runs: pd.DataFrame, first: GapSpec, second: GapSpec, metric: str = "val_ce",
                       level: float = LEVEL) -> dict:
    """(first.a - first.b) - (second.a - second.b), per seed on the seeds all four variants finished."""
    d1 = paired_differences(runs, first.a, first.b, metric)
    d2 = paired_differences(runs, second.a, second.b, metric)
    common = sorted(set(d1.index) & set(d2.index))
    return {**mean_ci([d1[s] - d2[s] for s in common], level), "seeds": " ".join(map(str, common))}


def gap_ratio(gaps: pd.DataFrame, metric: str = "val_ce") -> dict:
    """Mean grow gap / mean joint gap (reference ~80x), with whether the joint gap is resolved from zero."""
    g = gaps[gaps["metric"] == metric].set_index("gap")
    grow, joint = g.loc["grow"], g.loc["joint"]
    ratio = grow["mean"] / joint["mean"] if np.isfinite(joint["mean"]) and joint["mean"] != 0 else math.nan
    joint_resolved = bool(np.isfinite(joint["ci_low"]) and (joint["ci_low"] > 0 or joint["ci_high"] < 0))
    return {"grow_mean": grow["mean"], "joint_mean": joint["mean"], "ratio": ratio,
            "abs_ratio": abs(ratio) if np.isfinite(ratio) else math.nan, "joint_resolved": joint_resolved,
            "reference_ratio": REFERENCE_RATIO}


# ------------------------------------------------------------------------------------------------------ crossover

def crossover_table(runs: pd.DataFrame, a: str = "pre-grow", b: str = "post-grow", metric: str = "val_ce",
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
        status = judge(g, +1)
        if status == SUPPORTED:
            lead = f"{b} (resolved)"
        elif status == NOT_SUPPORTED:
            lead = f"{a} (resolved)"
        elif np.isfinite(g["mean"]) and g["mean"] != 0:
            lead = f"{b if g['mean'] > 0 else a} (not resolved)"
        else:
            lead = "none"
        row["leader"] = lead
        row["resolved_leader"] = {SUPPORTED: b, NOT_SUPPORTED: a}.get(status, "")
        rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------------- claims

def _fmt(x: float, digits: int = 4) -> str:
    return "nan" if x is None or not np.isfinite(x) else f"{x:+.{digits}f}"


def _interval(s: dict, level: float = LEVEL) -> str:
    if s["n"] < 2:
        return f"{_fmt(s['mean'])} from {s['n']} paired seed{'s' if s['n'] != 1 else ''} (no CI: needs at least 2)"
    return f"{_fmt(s['mean'])} (95% CI [{_fmt(s['ci_low'])}, {_fmt(s['ci_high'])}], {s['n']} paired seeds)".replace(
        "95%", f"{round(level * 100)}%")


def _missing(runs: pd.DataFrame, variants) -> list[str]:
    present = set(runs["variant"]) if len(runs) else set()
    return [v for v in variants if v not in present]


def _claim(claim: str, statement: str, status: str, sentence: str, evidence: dict, variants) -> dict:
    """A claim record; variants: the variants it compares (what the regime gate checks)."""
    return {"claim": claim, "statement": statement, "status": status, "supported": SUPPORTED_VALUE[status],
            "sentence": sentence, "evidence": evidence, "variants": tuple(variants)}


def _directional(claim: str, statement: str, runs: pd.DataFrame, stats: dict, label: str, direction: int,
                 variants, yes: str, no: str, level: float) -> dict:
    """A claim that a quantity is > 0 (direction +1): the sentence states the status and why, from the numbers."""
    missing = _missing(runs, variants)
    evidence = {k: stats.get(k) for k in ("n", "mean", "ci_low", "ci_high", "seeds")}
    if missing:
        return _claim(claim, statement, NOT_TESTABLE,
                      f"Not testable: no finished runs of {', '.join(missing)}.", evidence, variants)
    status = judge(stats, direction)
    where = f"{label} = {_interval(stats, level)}"
    if status == SUPPORTED:
        text = f"Supported: {where}; the interval excludes zero in the claimed direction ({yes})."
    elif status == NOT_SUPPORTED:
        text = f"Not supported: {where}; the interval excludes zero in the opposite direction ({no})."
    elif stats["n"] < 2:
        text = f"Not resolved: {where}, so the sign cannot be judged; run more seeds."
    else:
        text = f"Not resolved at {stats['n']} seeds: {where}; the interval includes zero."
    return _claim(claim, statement, status, text, evidence, variants)


def _combine(parts: list[dict]) -> str:
    statuses = [p["status"] for p in parts]
    if NOT_SUPPORTED in statuses:
        return NOT_SUPPORTED
    if NOT_TESTABLE in statuses:
        return NOT_TESTABLE
    if all(s == SUPPORTED for s in statuses):
        return SUPPORTED
    return NOT_RESOLVED


def evaluate_claims(runs: pd.DataFrame, metric: str = "val_ce", level: float = LEVEL) -> list[dict]:
    """The headline comparison and observations 1-3 of shared/STUDY.md, each judged from this study's numbers.

    Each entry: claim (id), statement (the reference's claim), status, supported (True / False / None), sentence (the
    verdict in words, with the numbers), evidence (the numbers)."""
    g = {name: paired_gap(runs, s.a, s.b, metric, level=level) for name, s in GAP_BY_NAME.items()}
    claims = []

    # Headline (a): joint gap indistinguishable from zero (a claim of no detectable difference).
    s, spec = g["joint"], GAP_BY_NAME["joint"]
    statement = "Jointly trained, pre-norm and post-norm are indistinguishable (reference gap 0.0004)."
    evidence = {k: s.get(k) for k in ("n", "mean", "ci_low", "ci_high", "seeds")}
    variants = (spec.a, spec.b)
    missing = _missing(runs, variants)
    if missing:
        claims.append(_claim("headline-joint", statement, NOT_TESTABLE,
                             f"Not testable: no finished runs of {', '.join(missing)}.", evidence, variants))
    elif s["n"] < 2:
        claims.append(_claim("headline-joint", statement, NOT_RESOLVED,
                             f"Not resolved: pre-joint - post-joint = {_interval(s, level)}.", evidence, variants))
    elif s["ci_low"] <= 0 <= s["ci_high"]:
        claims.append(_claim("headline-joint", statement, SUPPORTED,
                             f"Supported (no detectable difference): pre-joint - post-joint = {_interval(s, level)}; "
                             f"the interval includes zero, as the reference's near-zero gap implies (absence of a "
                             f"detected difference at {s['n']} seeds, not proof of equality).", evidence, variants))
    else:
        better = "post-norm" if s["mean"] > 0 else "pre-norm"
        claims.append(_claim("headline-joint", statement, NOT_SUPPORTED,
                             f"Not supported: pre-joint - post-joint = {_interval(s, level)}; the interval excludes "
                             f"zero, so the joint runs differ ({better} is better).", evidence, variants))

    # Headline (b): grow gap favours post-norm.
    claims.append(_directional(
        "headline-grow", "Grown by appending blocks, post-norm beats pre-norm (reference pre-grow - post-grow = "
        "0.0328).", runs, g["grow"], "pre-grow - post-grow", +1, ("pre-grow", "post-grow"),
        "post-norm is better when grown", "pre-norm is better when grown", level))

    # Headline (c): the placement matters more under growth than jointly (difference of the two gaps, paired).
    did = difference_in_gaps(runs, GAP_BY_NAME["grow"], GAP_BY_NAME["joint"], metric, level)
    ratio = gap_ratio(gap_table(runs, (metric,), level), metric)
    c = _directional(
        "headline-ratio", "The grow gap is much larger than the joint gap (reference about 80x).", runs, did,
        "(pre-grow - post-grow) - (pre-joint - post-joint)", +1, ("pre-grow", "post-grow", "pre-joint", "post-joint"),
        "post-norm's advantage is larger under growth", "post-norm's advantage is smaller under growth", level)
    if c["status"] != NOT_TESTABLE:
        if np.isfinite(ratio["ratio"]):
            note = (f" Ratio of mean gaps: grow {_fmt(ratio['grow_mean'])} / joint {_fmt(ratio['joint_mean'])} = "
                    f"{ratio['ratio']:.1f}x (reference +0.0328 / +0.0004 = ~{REFERENCE_RATIO:.0f}x)"
                    + ("" if ratio["joint_resolved"] else "; the joint gap's interval includes zero, so the ratio is "
                       "unbounded and only the difference above is meaningful") + ".")
        else:
            note = " The ratio of mean gaps is undefined (joint gap mean is zero or missing)."
        c["sentence"] += note
        c["evidence"]["ratio"] = ratio["ratio"]
    claims.append(c)

    # Observation 1: compute-matched joint still worse than grow.
    claims.append(_directional(
        "obs1-matched", "A post-norm joint run given post-grow's active-layer-token budget is still worse than "
        "post-grow: compute alone does not explain the gain.", runs, g["matched"], "post-joint-matched - post-grow",
        +1, ("post-joint-matched", "post-grow"), "the matched joint run is worse",
        "the matched joint run is better: compute explains the gain", level))

    # Observation 2: phase-wise crossover of pre-grow vs post-grow.
    claims.append(_crossover_claim(runs, metric, level))

    # Observation 3: single-block and freeze controls.
    statement = ("Single-block and freeze controls place the change at block appending, not at the quality of the "
                 "shallow blocks nor at retraining of the prefix.")
    single = _directional(
        "obs3-single", "Post-norm's advantage when grown exceeds its advantage as the shallow prefix alone.", runs,
        difference_in_gaps(runs, GAP_BY_NAME["grow"], GAP_BY_NAME["single"], metric, level),
        "(pre-grow - post-grow) - (pre-single - post-single)", +1,
        ("pre-grow", "post-grow", "pre-single", "post-single"),
        "post-norm fares better relative to pre-norm when grown than as the shallow prefix alone",
        "post-norm fares better relative to pre-norm as the shallow prefix alone than when grown", level)
    freeze = _directional(
        "obs3-freeze", "With the prefix frozen while new blocks train, post-norm still beats pre-norm.", runs,
        g["freeze"], "pre-grow-freeze - post-grow-freeze", +1, ("pre-grow-freeze", "post-grow-freeze"),
        "the gain does not need prefix retraining", "pre-norm is better with a frozen prefix", level)
    status = _combine([single, freeze])
    claims.append(_claim("obs3-controls", statement, status,
                         f"{status.capitalize()} (the claim needs both controls supported). Single-block control: "
                         f"{single['sentence']} Freeze control: {freeze['sentence']}",
                         {"single": single["evidence"], "freeze": freeze["evidence"]},
                         single["variants"] + freeze["variants"]))
    claims.extend([single, freeze])
    return claims


def _crossover_claim(runs: pd.DataFrame, metric: str, level: float) -> dict:
    statement = ("The pre/post ranking crosses over during the curriculum: post-norm takes the lead once blocks are "
                 "appended.")
    variants = ("pre-grow", "post-grow")
    missing = _missing(runs, variants)
    if missing:
        return _claim("obs2-crossover", statement, NOT_TESTABLE,
                      f"Not testable: no finished runs of {', '.join(missing)}.", {}, variants)
    table = crossover_table(runs, metric=metric, level=level)
    evidence = {"stages": [{k: r[k] for k in ("stage", "depth", "gap_mean", "gap_ci_low", "gap_ci_high", "n_pairs")}
                           for r in table.to_dict("records")]}
    if len(table) < 2:
        return _claim("obs2-crossover", statement, NOT_TESTABLE,
                      "Not testable: the grown runs have fewer than two stages.", evidence, variants)
    per_stage = "; ".join(f"stage {r['stage']} (depth {r['depth']}): pre-grow - post-grow = "
                          f"{_interval({'n': r['n_pairs'], 'mean': r['gap_mean'], 'ci_low': r['gap_ci_low'], 'ci_high': r['gap_ci_high']}, level)}"
                          for r in table.to_dict("records"))
    first, last = table.iloc[0], table.iloc[-1]
    first_lead, last_lead = first["resolved_leader"], last["resolved_leader"]
    later_post = [int(r["stage"]) for r in table.iloc[1:].to_dict("records") if r["resolved_leader"] == "post-grow"]
    if int(last["n_pairs"]) < 2:
        status, why = NOT_RESOLVED, "fewer than two paired seeds give no intervals"
    elif first_lead == "pre-grow" and last_lead == "post-grow":
        status = SUPPORTED
        why = (f"pre-norm leads before any block is appended and post-norm leads from stage {later_post[0]} on "
               f"(intervals exclude zero)")
    elif first_lead == "post-grow":
        status, why = NOT_SUPPORTED, "post-norm already leads before any block is appended, so there is no crossover"
    elif last_lead == "pre-grow":
        status, why = NOT_SUPPORTED, "pre-norm still leads at the end of the curriculum"
    elif last_lead == "post-grow":
        status = NOT_RESOLVED
        why = ("post-norm leads at the end, but the ranking before appending is not resolved (interval includes "
               "zero), so a change of sign is not established")
    else:
        status, why = NOT_RESOLVED, "the final-stage interval includes zero"
    words = {SUPPORTED: "Supported", NOT_SUPPORTED: "Not supported", NOT_RESOLVED: "Not resolved"}[status]
    return _claim("obs2-crossover", statement, status, f"{words}: {why}. {per_stage}.", evidence, variants)


# ---------------------------------------------------------------------------------------------------- regime gate

def eval_curve(run_dir: Path) -> list[dict]:
    """The validation records of run_dir/metrics.jsonl (kind in CURVE_KINDS; kind, step, tokens, val_ce), ordered by
    step (stable sort: after a resume the re-written record follows the one it replaces); [] when the file is missing
    or unreadable, and the run then counts as not flattened (see flatness)."""
    path = run_dir / "metrics.jsonl"
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as err:
        print(f"no validation curve from {path}: {err}")
        return []
    curve = [{k: r[k] for k in ("kind", "step", "tokens", "val_ce")} for r in records if r.get("kind") in CURVE_KINDS]
    return sorted(curve, key=lambda r: r["step"])


def flatness(curve: list[dict], val_ce: float, tokens: float) -> dict:
    """How much of a run's improvement came in its last FLAT_TAIL of tokens (the FLAT_FIELDS).

    v_start: val_ce of the first eval record (the step-0 evaluation of the untrained model, where the run has one);
    v_80: val_ce of the last record after it with tokens <= (1 - FLAT_TAIL) * tokens; v_end: the final val_ce
    (summary.json). flat_ratio = (v_80 - v_end) / (v_start - v_end); flattened iff flat_ratio < FLAT_LIMIT. A run
    whose records cannot give the ratio (no eval record, none after the start by the 80% point, no improvement)
    counts as not flattened, since the gate asks for evidence of training; flat_note says why."""
    out = dict.fromkeys(FLAT_FIELDS, math.nan) | {"flattened": False}
    evals = [r for r in curve if r["kind"] == "eval"]
    if not evals:
        return out | {"flat_note": "no eval record in metrics.jsonl"}
    start = evals[0]
    out["v_start"] = start["val_ce"]
    cut = (1 - FLAT_TAIL) * tokens
    before = [r for r in curve if r["step"] > start["step"] and r["tokens"] <= cut]
    if not before:
        return out | {"flat_note": f"too few eval records: none after step {start['step']} by "
                                   f"{1 - FLAT_TAIL:.0%} of the tokens"}
    out.update(v_80=before[-1]["val_ce"], tokens_80=before[-1]["tokens"])
    total = start["val_ce"] - val_ce
    if not total > 0:
        return out | {"flat_note": "val_ce did not improve over the run"}
    ratio = (out["v_80"] - val_ce) / total
    flattened = bool(ratio < FLAT_LIMIT)
    return out | {"flat_ratio": ratio, "flattened": flattened,
                  "flat_note": "flattened" if flattened else f"still improving: ratio {ratio:.3f} >= {FLAT_LIMIT:.2f}"}


def with_flatness(runs: pd.DataFrame, profile: str) -> pd.DataFrame:
    """runs with the FLAT_FIELDS of every run, from its outputs/runs/<profile>/<run>/metrics.jsonl."""
    rows = [flatness(eval_curve(runs_root(profile) / name), ce, tokens)
            for name, ce, tokens in zip(runs["run_name"], runs["val_ce"], runs["tokens"])]
    return pd.concat([runs, pd.DataFrame(rows, index=runs.index, columns=list(FLAT_FIELDS))], axis=1)


def _level_failure(mean: float, margin: float, unigram_val_ce: float | None) -> str:
    """Why a variant fails the trained-below-unigram criterion."""
    if unigram_val_ce is None:
        return "no unigram baseline (no teacher cache), so the level cannot be checked"
    return (f"mean val_ce {mean:.3f} is {margin:.3f} nats below the unigram level {unigram_val_ce:.3f} "
            f"(needs >= {UNIGRAM_MARGIN:.1f})")


def _flatness_failure(group: pd.DataFrame) -> str:
    """Which seeds of a variant have not flattened, and why."""
    bad = group[~group["flattened"].astype(bool)]
    return "not flattened: " + ", ".join(f"seed {s} ({note})" for s, note in zip(bad["seed"], bad["flat_note"]))


def regime_check(runs: pd.DataFrame, unigram_val_ce: float | None) -> pd.DataFrame:
    """Per variant (the REGIME_FIELDS): is it clearly trained? Both criteria must hold, over its seeds:
    below unigram: mean final val_ce at least UNIGRAM_MARGIN below unigram_val_ce (no baseline: not shown, fails);
    flattened: every seed's curve has flattened (see flatness; runs need the FLAT_FIELDS, see with_flatness).
    reason names the failed criteria with their numbers."""
    rows = []
    for variant, g in runs.groupby("variant", sort=True) if len(runs) else []:
        mean = float(pd.to_numeric(g["val_ce"], errors="coerce").mean())
        margin = unigram_val_ce - mean if unigram_val_ce is not None else math.nan
        below, flat = bool(margin >= UNIGRAM_MARGIN), bool(g["flattened"].all())  # NaN margin: not below
        failures = ([] if below else [_level_failure(mean, margin, unigram_val_ce)]) + (
            [] if flat else [_flatness_failure(g)])
        rows.append({"variant": variant, "n_seeds": len(g), "seeds": " ".join(str(s) for s in sorted(g["seed"])),
                     "val_ce_mean": mean, "unigram_val_ce": unigram_val_ce, "margin_below_unigram": margin,
                     "below_unigram": below, "max_flat_ratio": g["flat_ratio"].max(), "flattened": flat,
                     "trained": below and flat, "reason": "; ".join(failures) or "meets both criteria"})
    return pd.DataFrame(rows, columns=list(REGIME_FIELDS))


def undertrained(regime: pd.DataFrame) -> pd.DataFrame:
    """The rows of regime_check's table whose variant is not trained."""
    return regime[~regime["trained"].astype(bool)]


def gate_claims(claims: list[dict], regime: pd.DataFrame) -> list[dict]:
    """The regime gate: a judged claim (supported, not supported, not resolved) that compares a variant regime_check
    finds undertrained becomes NOT_JUDGED, since a verdict between students that have not left the unigram plateau
    or are still improving is about this budget's optimisation, not about norm placement. Its sentence names the
    variants and the criteria they fail, then keeps the ungated reading with the numbers; evidence keeps the ungated
    status. A not-testable claim (a variant has no runs) stays not testable."""
    bad = undertrained(regime)
    failing = dict(zip(bad["variant"], bad["reason"]))
    gated = []
    for c in claims:
        failed = [v for v in c["variants"] if v in failing]
        if not failed or c["status"] == NOT_TESTABLE:
            gated.append(c)
            continue
        why = "; ".join(f"{v}: {failing[v]}" for v in failed)
        gated.append(_claim(c["claim"], c["statement"], NOT_JUDGED,
                            f"Not judged: students undertrained ({why}). Ungated reading of the numbers, not a "
                            f"verdict: {c['sentence']}", {**c["evidence"], "ungated_status": c["status"]},
                            c["variants"]))
    return gated


def read_diagnostics(profile: str) -> tuple[list[dict] | None, str]:
    """The "claims" list of outputs/study/<profile>/diagnostics.json verbatim (observations 4 and 5), and a note."""
    path = study_dir(profile) / "diagnostics.json"
    if not path.is_file():
        return None, f"Diagnostics are not available: {path} does not exist (notebooks/diagnostics.ipynb not run)."
    try:
        claims = json.loads(path.read_text()).get("claims")
    except (OSError, json.JSONDecodeError, AttributeError) as err:
        return None, f"Diagnostics are not available: {path} could not be read ({err})."
    if not isinstance(claims, list):
        return None, f"Diagnostics are not available: {path} has no 'claims' list."
    return claims, f"Observations 4 and 5: claims of {path}, verbatim."


# ------------------------------------------------------------------------------------------------------- report

@dataclass
class Report:
    profile: str
    runs: pd.DataFrame
    stats: pd.DataFrame
    gaps: pd.DataFrame
    ratio: dict
    crossover: pd.DataFrame
    claims: list[dict]
    diagnostics_claims: list[dict] | None
    diagnostics_note: str
    unfinished: list[str] = field(default_factory=list)
    level: float = LEVEL
    baselines: dict = field(default_factory=dict)  # teacher_val_ce, unigram_val_ce and their sources (baselines())
    regime: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(REGIME_FIELDS)))

    def regime_verdict(self) -> str:
        """One line: are the claims judged (see gate_claims)?"""
        if not len(self.regime):
            return "no finished runs: nothing to judge"
        bad = list(undertrained(self.regime)["variant"])
        if not bad:
            return "students trained: claims judged"
        return (f"{len(bad)} variant{'s' if len(bad) != 1 else ''} undertrained ({', '.join(bad)}): claims that "
                f"compare them are not judged")

    def baselines_text(self) -> str:
        if not self.baselines:
            return "Baselines: no teacher cache for this profile, so the teacher and unigram levels are not shown."
        b = self.baselines
        return (f"Baselines on the same validation positions: teacher {b['teacher_val_ce']:.3f} nats/token; "
                f"unigram model fitted on the training tokens {b['unigram_val_ce']:.3f} nats/token.")

    def claims_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.claims, columns=["claim", "status", "supported", "sentence", "statement", "variants",
                                                "evidence"])
        df["variants"] = df["variants"].map(" ".join)
        df["evidence"] = df["evidence"].map(lambda e: json.dumps(e, default=_json_default))
        return df

    def sentences(self) -> list[str]:
        out = [f"[regime] {self.regime_verdict()}"] + [f"[{c['claim']}] {c['sentence']}" for c in self.claims]
        if self.diagnostics_claims is None:
            out.append(self.diagnostics_note)
        else:
            out += [f"[{c.get('claim')}] supported={c.get('supported')}: {c.get('statement')}"
                    for c in self.diagnostics_claims]
        return out


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    return str(o)


def baselines(profile: str) -> dict:
    """{"teacher_val_ce", "unigram_val_ce"} on the profile's validation positions (the levels that frame a student's
    val_ce) with where each comes from ("teacher_source", "unigram_source"), or {} when there is no teacher cache for
    it (not built, or runs without a profile file)."""
    from .config import ParamError, load_profile
    from .data import unigram_val_ce
    from .teacher import open_cache
    try:
        cache = open_cache(load_profile(profile))
    except (FileNotFoundError, ParamError):
        return {}
    where = f"outputs/teacher/{cache.key}"
    return {"teacher_val_ce": cache.report["val_ce"], "teacher_source": f"{where}/teacher.json (val_ce)",
            "unigram_val_ce": unigram_val_ce(cache.train.tokens, cache.val.tokens, cache.val.doc_start,
                                             cache.meta["vocab_size"]),
            "unigram_source": f"normgrow.data.unigram_val_ce: unigram fitted on {where}/train tokens, scored on "
                              f"{where}/val"}


def build_report(profile: str, level: float = LEVEL) -> Report:
    """Collect the finished runs (with their flatness) and compute every table; the claims pass the regime gate."""
    runs = with_flatness(collect_runs(profile), profile)
    gaps = gap_table(runs, level=level)
    diag, note = read_diagnostics(profile)
    base = baselines(profile)
    regime = regime_check(runs, base.get("unigram_val_ce"))
    return Report(profile=profile, runs=runs, stats=variant_stats(runs, level), gaps=gaps,
                  ratio=gap_ratio(gaps), crossover=crossover_table(runs, level=level),
                  claims=gate_claims(evaluate_claims(runs, level=level), regime), diagnostics_claims=diag,
                  diagnostics_note=note, unfinished=unfinished_runs(profile), level=level, baselines=base,
                  regime=regime)


# --------------------------------------------------------------------------------------------------------- figures
# Rendering: the figures and page of the report; the look (style, tables, number formats) is normgrow.render's.

def crossover_figure(rep: Report, a: str = "pre-grow", b: str = "post-grow"):
    """Validation CE at each stage end (mean and CI over seeds) of a and b, and their paired gap below."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from .render import NORM_COLOR, split_variant, style_figure
    t = rep.crossover
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.6, 0.4],
                        subplot_titles=("validation CE at each stage end", f"paired gap {a} - {b} (> 0: {b} leads)"))
    if len(t):
        x = [f"stage {int(s)} (depth {d})" for s, d in zip(t["stage"], t["depth"])]
        for v in (a, b):
            err = (t[f"{v}_ci_high"] - t[f"{v}_mean"]).fillna(0)
            fig.add_trace(go.Scatter(x=x, y=t[f"{v}_mean"], error_y=dict(type="data", array=err), name=v,
                                     mode="lines+markers", line=dict(color=NORM_COLOR[split_variant(v)[0]])),
                          row=1, col=1)
        err = (t["gap_ci_high"] - t["gap_mean"]).fillna(0)
        fig.add_trace(go.Scatter(x=x, y=t["gap_mean"], error_y=dict(type="data", array=err), name=f"{a} - {b}",
                                 mode="lines+markers", line=dict(color="black")), row=2, col=1)
        fig.add_hline(y=0, line_dash="dot", line_color="gray", row=2, col=1)
    fig.update_yaxes(title_text="val CE (nats/token)", row=1, col=1)
    fig.update_yaxes(title_text="gap (nats/token)", row=2, col=1)
    fig.update_layout(title=f"crossover: mean and {round(rep.level * 100)}% CI over seeds")
    return style_figure(fig, height=520)


def variants_figure(rep: Report, metric: str = "val_ce"):
    """Final validation metric per variant (pre and post of a schedule side by side): mean with CI, every seed as a
    faint dot, pre-norm red and post-norm blue."""
    import plotly.graph_objects as go

    from .render import NORM_COLOR, faint, split_variant, style_figure
    fig = go.Figure()
    s = rep.stats
    if len(s):
        order = sorted(s["variant"], key=lambda v: (split_variant(v)[1], split_variant(v)[0] != "pre"))
        s = s.set_index("variant").loc[order].reset_index()
        r = rep.runs
        for norm in sorted({split_variant(v)[0] for v in order}):
            color = NORM_COLOR.get(norm, "#555555")
            mine = s[[split_variant(v)[0] == norm for v in s["variant"]]]
            seeds = r[[split_variant(v)[0] == norm for v in r["variant"]]]
            fig.add_trace(go.Scatter(x=seeds["variant"], y=seeds[metric], mode="markers", legendgroup=norm,
                                     showlegend=False, text=[f"seed {x}" for x in seeds["seed"]],
                                     marker=dict(size=7, color=faint(color, 0.45)),
                                     hovertemplate="%{x} %{text}: %{y:.4f}<extra></extra>"))
            fig.add_trace(go.Scatter(x=mine["variant"], y=mine[f"{metric}_mean"], mode="markers",
                                     name=f"{norm}-norm mean", legendgroup=norm,
                                     marker=dict(size=14, symbol="line-ew-open", color=color, line=dict(width=3)),
                                     error_y=dict(type="data", array=mine[f"{metric}_half_width"].fillna(0),
                                                  color=color)))
        fig.update_xaxes(categoryorder="array", categoryarray=order)
    fig.update_layout(yaxis_title=f"{metric} (nats/token)",
                      title=f"final {metric} per variant: mean, {round(rep.level * 100)}% CI, seeds")
    return style_figure(fig, height=400)


def gaps_figure(rep: Report, metric: str = "val_ce"):
    """The paired gaps with their CIs, the reference values as crosses where the reference gives one."""
    import plotly.graph_objects as go

    from .render import style_figure
    g = rep.gaps[rep.gaps["metric"] == metric]
    fig = go.Figure()
    labels = [f"{n}: {c}" for n, c in zip(g["gap"], g["comparison"])]
    fig.add_trace(go.Scatter(x=g["mean"], y=labels, mode="markers", name="this study", marker=dict(size=9),
                             error_x=dict(type="data", array=(g["ci_high"] - g["mean"]).fillna(0))))
    ref = g["reference"].astype(float)
    fig.add_trace(go.Scatter(x=ref, y=labels, mode="markers", name="reference", marker=dict(symbol="x", size=10)))
    fig.add_vline(x=0, line_dash="dot", line_color="gray")
    fig.update_layout(xaxis_title=f"{metric} gap a - b (nats/token)", yaxis=dict(autorange="reversed"),
                      title=f"paired gaps a - b by seed, {round(rep.level * 100)}% CI")
    return style_figure(fig, height=140 + 40 * len(g))


def curves_figure(rep: Report, metric: str = "val_ce"):
    """The learning curves of every variant (plots.learning_curves) from the runs' metrics.jsonl, with the teacher
    and unigram levels of rep.baselines."""
    from .plots import learning_curves
    root = runs_root(rep.profile)
    dirs = {v: [root / n for n in g["run_name"]] for v, g in rep.runs.groupby("variant")} if len(rep.runs) else {}
    return learning_curves(dirs, rep.baselines, metric)


def figures(rep: Report) -> dict:
    return {"curves": curves_figure(rep), "crossover": crossover_figure(rep), "variants": variants_figure(rep),
            "gaps": gaps_figure(rep)}


# ------------------------------------------------------------------------------------------------------- writing

STATUS_COLORS = {SUPPORTED: "#2ca02c", NOT_SUPPORTED: "#d62728", NOT_RESOLVED: "#ff7f0e", NOT_TESTABLE: "#7f7f7f",
                 NOT_JUDGED: "#9467bd"}
REGIME_CRITERIA = (f"A variant is trained when its mean final val_ce is at least {UNIGRAM_MARGIN:.1f} nat below the "
                   f"unigram baseline and, for every seed, the last {FLAT_TAIL:.0%} of its tokens improved val_ce by "
                   f"less than {FLAT_LIMIT:.0%} of the run's total improvement (flat_ratio = (v_80 - v_end) / "
                   f"(v_start - v_end), v_start the step-0 evaluation). A claim comparing a variant that is not "
                   f"trained is '{NOT_JUDGED}'.")


def _regime_html(rep: Report) -> str:
    """The regime check, first on the page: the verdict in a coloured box, the criteria, the per-variant table and
    (closed) every run's flatness."""
    from .render import details, table
    e = html.escape
    judged = len(rep.regime) and not len(undertrained(rep.regime))
    color = STATUS_COLORS[SUPPORTED] if judged else STATUS_COLORS[NOT_JUDGED]
    per_run = ["run_name", "tokens", "v_start", "tokens_80", "v_80", "val_ce", "flat_ratio", "flattened", "flat_note"]
    names = {"n_seeds": "seeds", "val_ce_mean": "val_ce mean", "margin_below_unigram": "below unigram (nats)",
             "max_flat_ratio": "flat ratio (max over seeds)", "tokens_80": "tokens at 80%", "v_start": "val_ce start",
             "v_80": "val_ce at 80%", "val_ce": "val_ce end", "flat_note": "note", "run_name": "run"}
    return (f"<div class='verdict' style='border-color:{color}'><b>Training regime: {e(rep.regime_verdict())}</b>."
            f"</div><h2>Training regime</h2><p class='note'>{e(REGIME_CRITERIA)}</p>"
            + table(rep.regime, ["variant", "n_seeds", "val_ce_mean", "margin_below_unigram", "max_flat_ratio",
                                 "trained", "reason"], names)
            + details("flatness per run", table(rep.runs.reindex(columns=per_run), rename=names)))


def _ci_column(df: pd.DataFrame, prefix: str, digits: int) -> list[str]:
    from .render import interval
    return [interval(m, lo, hi, digits) for m, lo, hi in zip(df[f"{prefix}_mean"], df[f"{prefix}_ci_low"],
                                                               df[f"{prefix}_ci_high"])]


def _stats_table(rep: Report) -> str:
    from .render import table
    s, ci = rep.stats, f"mean [{round(rep.level * 100)}% CI]"
    if not len(s):
        return "<p class='note'>No finished runs.</p>"
    df = pd.DataFrame({"variant": s["variant"], "seeds": s["n_seeds"], f"val_ce {ci}": _ci_column(s, "val_ce", 3),
                       f"val_kd_ce {ci}": _ci_column(s, "val_kd_ce", 3), "depth": s["depth_mean"],
                       "tokens": s["tokens_mean"], "active-layer tokens": s["active_layer_tokens_mean"],
                       "wall s (mean)": s["wall_s_mean"]})
    return table(df)


def _gaps_table(rep: Report, metric: str) -> str:
    from .render import table
    g = rep.gaps[rep.gaps["metric"] == metric]
    df = pd.DataFrame({"gap": g["gap"], "a - b": g["comparison"], "seeds": g["n"],
                       f"mean [{round(rep.level * 100)}% CI]": [
                           f"{m:+.4f}" + (f" [{lo:+.4f}, {hi:+.4f}]" if np.isfinite(lo) else "") if np.isfinite(m)
                           else "" for m, lo, hi in zip(g["mean"], g["ci_low"], g["ci_high"])],
                       "reference": g["reference_text"], "meaning": g["meaning"], "missing": g["missing"]})
    return table(df)


def _crossover_table(rep: Report, a: str = "pre-grow", b: str = "post-grow") -> str:
    from .render import table
    t = rep.crossover
    if not len(t):
        return "<p class='note'>No stage ends to compare.</p>"
    ci = f"mean [{round(rep.level * 100)}% CI]"
    df = pd.DataFrame({"stage": t["stage"], "depth": t["depth"], "tokens": t["tokens"],
                       f"{a} {ci}": _ci_column(t, a, 4),
                       f"{b} {ci}": _ci_column(t, b, 4), f"{a} - {b} {ci}": _ci_column(t, "gap", 4),
                       "leader": t["leader"]})
    return table(df)


def _diagnostics_html(rep: Report) -> str:
    """Observations 4 and 5 as verdict boxes (render.diagnostic_claims_html) and a link to diagnostics.html when it
    exists."""
    from .render import diagnostic_claims_html
    parts = [f"<p class='note'>{html.escape(rep.diagnostics_note)}</p>",
             diagnostic_claims_html(rep.diagnostics_claims or [])]
    if (study_dir(rep.profile) / "diagnostics.html").is_file():
        parts.append("<p>Figures and tables of the boundary diagnostics: <a href='diagnostics.html'>"
                     "diagnostics.html</a> (same folder).</p>")
    return "".join(parts)


def report_html(rep: Report, figs: dict | None = None) -> str:
    """A self-contained page (render.Page: plotly.js inlined once, no CDN), in reading order: baselines and the
    regime check, the claims, learning curves, final values, gaps, crossover, diagnostics, runs."""
    from .render import Page, details, table
    figs = figs if figs is not None else figures(rep)
    e = html.escape
    pct = round(rep.level * 100)
    n_variants = rep.runs["variant"].nunique() if len(rep.runs) else 0
    page = Page(f"normgrow study: {rep.profile}")
    page.add(f"<h1>Normalization placement under depth growth: study <code>{e(rep.profile)}</code></h1>",
             f"<p class='note'>{len(rep.runs)} finished runs of {n_variants} variants"
             + (f"; unfinished run directories: {e(', '.join(rep.unfinished))}" if rep.unfinished else "")
             + f". Intervals: two-sided {pct}% Student-t over seeds; gaps are paired by seed. A claim is supported "
             "when its interval excludes zero in the claimed direction, not resolved when it includes zero, not "
             "supported when it excludes zero the other way.</p>",
             f"<p>{e(rep.baselines_text())}</p>",
             "<nav class='toc'><a href='#claims'>claims</a><a href='#curves'>learning curves</a>"
             "<a href='#variants'>final values</a><a href='#gaps'>gaps</a><a href='#crossover'>crossover</a>"
             "<a href='#diagnostics'>diagnostics</a><a href='#runs'>runs</a></nav>",
             _regime_html(rep), "<section id='claims'><h2>Claims</h2>")
    for c in rep.claims:  # a not-judged claim's sentence repeats the regime table: closed, on demand
        color = STATUS_COLORS.get(c["status"], "#000")
        sentence = (details("why not judged, and the ungated reading", e(c["sentence"])) if c["status"] == NOT_JUDGED
                    else f"<br>{e(c['sentence'])}")
        page.add(f"<div class='claim' style='border-color:{color}'><b>{e(c['claim'])}</b> "
                 f"<span class='status' style='color:{color}'>[{e(c['status'])}]</span>: "
                 f"<span class='statement'>{e(c['statement'])}</span>{sentence}</div>")
    page.add("</section><section id='curves'><h2>Learning curves</h2>")
    page.figure(figs["curves"], div_id="fig-curves", caption="Validation CE (nats/token) against student active-layer tokens, one panel "
                "per schedule, pre-norm red, post-norm blue: the line is the mean over seeds, the band the range of "
                "the seeds; diamonds and dotted verticals mark growth points (blocks appended); horizontal lines: "
                "teacher and unigram model on the same validation positions.")
    page.add("</section><section id='variants'><h2>Final validation CE per variant</h2>", _stats_table(rep))
    page.figure(figs["variants"], div_id="fig-variants")
    ratio = rep.ratio
    ratio_text = f"{ratio['ratio']:.1f}x" if np.isfinite(ratio["ratio"]) else "undefined"
    caveat = "" if ratio["joint_resolved"] else "; the joint gap's interval includes zero, so the ratio is unbounded"
    page.add("</section><section id='gaps'><h2>Paired gaps (a - b by seed)</h2>",
             f"<p>Grow gap / joint gap (val_ce, ratio of means): {ratio_text} (reference "
             f"~{REFERENCE_RATIO:.0f}x){caveat}.</p>", _gaps_table(rep, "val_ce"))
    page.figure(figs["gaps"], div_id="fig-gaps")
    page.add(details("the same gaps in val_kd_ce (soft-target CE against the teacher)", _gaps_table(rep, "val_kd_ce")),
             "</section><section id='crossover'><h2>Crossover: pre-grow vs post-grow at every stage end</h2>",
             _crossover_table(rep))
    page.figure(figs["crossover"], div_id="fig-crossover")
    page.add("</section><section id='diagnostics'><h3>Observations 4 and 5 (boundary diagnostics)</h3>",
             _diagnostics_html(rep), "</section>")
    run_cols = (["run_name", "seed", "depth", "val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "wall_s"]
                + sorted(c for c in rep.runs.columns if c.startswith("val_ce_p")) + ["flat_ratio", "flattened"])
    page.add("<section id='runs'><h2>Runs (one row per run and seed)</h2>",
             details(f"{len(rep.runs)} runs (every column: summary.csv)",
                     table(rep.runs, run_cols, {"run_name": "run", "wall_s": "wall s"})), "</section>")
    return page.html()


def write_report(rep: Report, out_dir: Path | None = None, figs: dict | None = None) -> dict:
    """Write summary.csv (one row per run and seed), variant_stats.csv, gaps.csv, crossover.csv, claims.csv,
    regime.csv, baselines.json (the baselines with their sources, or a note that there are none) and report.html
    into outputs/study/<profile>/ (or out_dir). Returns {name: path}."""
    out = Path(out_dir) if out_dir is not None else study_dir(rep.profile)
    out.mkdir(parents=True, exist_ok=True)
    files = {"summary": out / "summary.csv", "variant_stats": out / "variant_stats.csv", "gaps": out / "gaps.csv",
             "crossover": out / "crossover.csv", "claims": out / "claims.csv", "regime": out / "regime.csv",
             "baselines": out / "baselines.json", "report": out / "report.html"}
    atomic_write_text(files["summary"], rep.runs.to_csv(index=False))
    atomic_write_text(files["variant_stats"], rep.stats.to_csv(index=False))
    atomic_write_text(files["gaps"], rep.gaps.to_csv(index=False))
    atomic_write_text(files["crossover"], rep.crossover.to_csv(index=False))
    atomic_write_text(files["claims"], rep.claims_frame().to_csv(index=False))
    atomic_write_text(files["regime"], rep.regime.to_csv(index=False))
    atomic_write_json(files["baselines"], rep.baselines or {"note": rep.baselines_text()})
    atomic_write_text(files["report"], report_html(rep, figs))
    return files
