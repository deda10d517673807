"""Statistics of the study's runs: per-variant means with Student-t intervals over seeds, paired gaps between
variants, the phase-wise crossover, and the training-regime check (is a variant clearly trained?).

A variant's mean over seeds has a two-sided Student-t confidence interval (95% by default); a gap ``a - b`` is
computed per seed on the seeds both variants finished (paired) and summarised the same way. Fewer than two paired
seeds give no interval (NaN).

Regime: a variant is trained when its mean final val_ce is at least UNIGRAM_MARGIN below the unigram baseline and
every seed's validation curve has flattened (FLAT_TAIL, FLAT_LIMIT); see regime_check. claims.py turns these
numbers into verdicts; report.py renders them.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .rundir import METRICS as METRICS_FILE
from .rundir import run_path
from .variants import GapSpec, StudyRuns

LEVEL = 0.95
METRICS = ("val_ce", "val_kd_ce")  # the validation metrics every run reports
RUN_FIELDS = ("run_name", "variant", "seed", "norm", "schedule", "freeze_prefix", "match_active_layer_tokens",
              "depth", "val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "trainable_layer_tokens", "wall_s")
PHASE_FIELDS = ("depth", "tokens", "active_layer_tokens", "val_ce", "val_kd_ce")
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



# ------------------------------------------------------------------------------------------------------- the runs

def runs_frame(study: StudyRuns) -> pd.DataFrame:
    """One row per assigned run: the RUN_FIELDS plus, for every phase i, ``<field>_p<i>`` for the PHASE_FIELDS.
    Sorted by variant and seed."""
    rows = []
    for (variant, seed), summary in study.assigned.items():
        record = summary.to_json()
        row = {k: record.get(k) for k in RUN_FIELDS} | {"variant": variant, "seed": seed}
        for ph in summary.phases:
            row.update({f"{k}_p{ph.phase}": getattr(ph, k) for k in PHASE_FIELDS})
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
    """The paired gaps (variants.load_gaps: a - b by seed) for every metric, with the reference values beside them."""
    rows = []
    for metric in metrics:
        for spec in gaps.values():
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
    """Mean grow gap / mean joint gap, with whether the joint gap is resolved from zero, and the reference's ratio
    (from the reference column of the gap table: 0.0328 / 0.0004, about 80x)."""
    g = gaps[gaps["metric"] == metric].set_index("gap")
    grow, joint = g.loc["grow"], g.loc["joint"]
    ratio = grow["mean"] / joint["mean"] if np.isfinite(joint["mean"]) and joint["mean"] != 0 else math.nan
    joint_resolved = bool(np.isfinite(joint["ci_low"]) and (joint["ci_low"] > 0 or joint["ci_high"] < 0))
    return {"grow_mean": grow["mean"], "joint_mean": joint["mean"], "ratio": ratio,
            "abs_ratio": abs(ratio) if np.isfinite(ratio) else math.nan, "joint_resolved": joint_resolved,
            "reference_ratio": grow["reference"] / joint["reference"]}


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


def eval_curve(run_dir: Path) -> list[dict]:
    """The validation records of run_dir/metrics.jsonl (kind in CURVE_KINDS; kind, step, tokens, val_ce), ordered by
    step (stable sort: after a resume the re-written record follows the one it replaces); [] when the file is missing
    or unreadable, and the run then counts as not flattened (see flatness)."""
    path = run_dir / METRICS_FILE
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
    rows = [flatness(eval_curve(run_path(profile, name)), ce, tokens)
            for name, ce, tokens in zip(runs["run_name"], runs["val_ce"], runs["tokens"])]
    return pd.concat([runs, pd.DataFrame(rows, index=runs.index, columns=list(FLAT_FIELDS))], axis=1)


def _level_failure(mean: float, margin: float, unigram_val_ce: float | None) -> str:
    """Why a variant fails the trained-below-unigram criterion."""
    if unigram_val_ce is None:
        return "no unigram baseline (no teacher cache), so the level cannot be checked"
    side = "below" if margin >= 0 else "above"  # margin = unigram - mean: negative for a student above the level
    return (f"mean val_ce {mean:.3f} is {abs(margin):.3f} nats {side} the unigram level {unigram_val_ce:.3f} "
            f"(needs >= {UNIGRAM_MARGIN:.1f} below)")


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


