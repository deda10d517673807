"""Statistics of the study's runs: per-variant means with Student-t intervals over seeds, paired gaps between
variants, the phase-wise crossover, the training-regime check (is a variant clearly trained?) and the depth check
(does depth pay at this scale?).

A variant's mean over seeds has a two-sided Student-t confidence interval (95% by default); a gap ``a - b`` is
computed per seed on the seeds both variants finished (paired) and summarised the same way. Fewer than two paired
seeds give no interval (NaN). Every finished seed counts, whatever params/study.yaml lists (variants.collect_runs).
A gap's resolution: its interval's half-width (mde) and the seeds its spread would need to resolve the reference's
value (seeds_needed). Equivalence to zero within a margin is an equivalence test on the same paired differences
(tost), never "the interval includes zero", which more spread would only make likelier.

Regime: a variant is trained when its mean final val_ce is at least UNIGRAM_MARGIN below the unigram baseline and
every seed's validation curve has flattened (FLAT_TAIL, FLAT_LIMIT); see regime_check. Depth: a placement's
full-depth joint variant beats its first-stage single variant by a margin; see depth_check. claims.py turns these
numbers into verdicts; report.py renders them.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ..config import smoke_note
from ..rundir import FLAT_TAIL, RunDirError, read_metrics, run_path
from .reference import GapSpec
from .variants import StudyRuns, Variant

LEVEL = 0.95
ALPHA = 0.05
"""Level of each one-sided test of an equivalence test (tost): a gap exactly at the margin is called equivalent in
at most 5% of studies, the same error rate as a false difference at the 95% intervals (1 - LEVEL)."""
METRICS = ("val_ce", "val_kd_ce")  # the validation metrics every run reports
RUN_FIELDS = ("run_name", "variant", "seed", "norm", "schedule", "freeze_prefix", "match_active_layer_tokens",
              "depth", "val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "trainable_layer_tokens", "wall_s",
              "eval_s", "checkpoint_s", "machine")
PHASE_FIELDS = ("depth", "tokens", "active_layer_tokens", "val_ce", "val_kd_ce", "val_ce_after_growth")
UNIGRAM_MARGIN = 1.0
"""Nats/token every seed's final val_ce must lie below the unigram baseline for its variant to count as trained (the
mean alone would pass a variant with one seed left on the plateau beside two trained ones). The
unigram model is the context-free level: a student within a nat of it (perplexity within a factor e) has learned
little beyond token frequencies, and two such students differ in how fast they leave that plateau (optimisation at
this budget), not in what norm placement does to a trained model, which is what the claims are about."""
FLAT_LIMIT = 0.10
"""A run has flattened when its last FLAT_TAIL of tokens improved val_ce by less than this fraction of the run's
total improvement; a curve still falling faster than that means a longer budget would move the numbers compared."""
CURVE_KINDS = ("eval", "phase_end")  # metrics.jsonl records that carry step, tokens and val_ce
FLAT_FIELDS = ("v_start", "v_80", "tokens_80", "flat_ratio", "flattened", "flat_note")
REGIME_FIELDS = ("variant", "n_seeds", "seeds", "val_ce_mean", "unigram_val_ce", "margin_below_unigram",
                 "below_unigram", "max_flat_ratio", "flattened", "trained", "reason")
DEPTH_FIELDS = ("norm", "single", "joint", "single_n", "joint_n", "single_val_ce_mean", "joint_val_ce_mean",
                "depth_gain", "margin", "pays", "reason")



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


def eval_curve(run_dir: Path) -> list[dict]:
    """The whole-split validation records of run_dir/metrics.jsonl (kind in CURVE_KINDS, full_split, which records
    before numerics version 4 lack and were: kind, step, tokens, val_ce) and the step-0 record, ordered by step
    (rundir.read_metrics: one per step); [] when the file is missing or damaged, and the run then counts as not
    flattened (see flatness). The other subset points are left out so that the gate compares v_80 and the end over
    the same positions; the start (on the subset from numerics version 5) only scales the ratio, and the untrained
    model reads alike on either (9.5897 on the subset, 9.5886 on the whole split: pre-joint-s0, numerics 4)."""
    try:
        records = read_metrics(run_dir)
    except RunDirError as err:
        print(f"no validation curve: {err}")
        return []
    curve = [{k: r[k] for k in ("kind", "step", "tokens", "val_ce")} for r in records
             if r.get("kind") in CURVE_KINDS and (r.get("full_split", True) or r["step"] == 0)]
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


def regime_line(run_dir: Path, summary: dict, cache) -> str:
    """One line on the run by the regime gate's two criteria (stats.regime_check, applied to this run alone): its
    final val_ce at least UNIGRAM_MARGIN below the unigram level of its cache, and its curve flattened. A run that
    fails either says so with WARNING, in the notebook and the command line alike."""
    from ..data.corpus import unigram_val_ce
    unigram = unigram_val_ce(cache.train.tokens, cache.val.tokens, cache.val.doc_start, cache.meta["vocab_size"])
    below = unigram - summary["val_ce"]
    flat = flatness(eval_curve(run_dir), summary["val_ce"], summary["tokens"])
    head = f"{summary['run_name']}: final val_ce {summary['val_ce']:.4f}"
    problems = ([f"it ends {abs(below):.3f} nats {'above' if below < 0 else 'below'} the unigram level {unigram:.3f} "
                 f"(trained needs {UNIGRAM_MARGIN:.1f} below)"] if below < UNIGRAM_MARGIN else [])
    problems += [] if flat["flattened"] else [f"its curve has not flattened ({flat['flat_note']})"]
    if problems:
        return f"WARNING: {head}; not trained by the regime gate: {'; '.join(problems)}"
    return (f"{head}, {below:.3f} nats below the unigram level {unigram:.3f}, its curve flattened (ratio "
            f"{flat['flat_ratio']:.3f}): trained by the regime gate")


def run_verdict(spec, summary: dict) -> str:
    """The lines a run ends with, printed after run_variant (by the command line, run_variant.ipynb and an in-process
    sweep): its regime line, on the teacher cache run_variant opened (ensure_cache reuses it), and for a smoke
    profile the note that its numbers are not results."""
    from ..data.teacher_cache import ensure_cache
    note = smoke_note(spec.profile.name)
    return regime_line(spec.dir, summary, ensure_cache(spec.profile, progress=False)) + (f"\n{note}" if note else "")


def with_flatness(runs: pd.DataFrame, profile: str) -> pd.DataFrame:
    """runs with the FLAT_FIELDS of every run, from its outputs/runs/<profile>/<run>/metrics.jsonl."""
    rows = [flatness(eval_curve(run_path(profile, name)), ce, tokens)
            for name, ce, tokens in zip(runs["run_name"], runs["val_ce"], runs["tokens"])]
    return pd.concat([runs, pd.DataFrame(rows, index=runs.index, columns=list(FLAT_FIELDS))], axis=1)


def _level_failure(worst_seed, worst: float, margin: float, unigram_val_ce: float | None) -> str:
    """Why a variant fails the trained-below-unigram criterion (its worst seed's numbers)."""
    if unigram_val_ce is None:
        return "no unigram baseline (no teacher cache), so the level cannot be checked"
    side = "below" if margin >= 0 else "above"  # margin = unigram - worst: negative for a student above the level
    return (f"seed {worst_seed}'s val_ce {worst:.3f} is {abs(margin):.3f} nats {side} the unigram level "
            f"{unigram_val_ce:.3f} (every seed needs >= {UNIGRAM_MARGIN:.1f} below)")


def _flatness_failure(group: pd.DataFrame) -> str:
    """Which seeds of a variant have not flattened, and why."""
    bad = group[~group["flattened"].astype(bool)]
    return "not flattened: " + ", ".join(f"seed {s} ({note})" for s, note in zip(bad["seed"], bad["flat_note"]))


def regime_check(runs: pd.DataFrame, unigram_val_ce: float | None) -> pd.DataFrame:
    """Per variant (the REGIME_FIELDS): is it clearly trained? Both criteria must hold, over its seeds:
    below unigram: every seed's final val_ce at least UNIGRAM_MARGIN below unigram_val_ce (margin_below_unigram is
    the worst seed's; no baseline: not shown, fails); flattened: every seed's curve has flattened (see flatness;
    runs need the FLAT_FIELDS, see with_flatness). reason names the failed criteria with their numbers."""
    rows = []
    for variant, g in runs.groupby("variant", sort=True) if len(runs) else []:
        ce = pd.to_numeric(g["val_ce"], errors="coerce")
        mean = float(ce.mean())
        worst = float(ce.max()) if ce.notna().all() else math.nan
        worst_seed = g["seed"].iloc[int(ce.reset_index(drop=True).idxmax())] if ce.notna().all() else None
        margin = unigram_val_ce - worst if unigram_val_ce is not None else math.nan
        below, flat = bool(margin >= UNIGRAM_MARGIN), bool(g["flattened"].all())  # NaN margin: not below
        failures = ([] if below else [_level_failure(worst_seed, worst, margin, unigram_val_ce)]) + (
            [] if flat else [_flatness_failure(g)])
        rows.append({"variant": variant, "n_seeds": len(g), "seeds": " ".join(str(s) for s in sorted(g["seed"])),
                     "val_ce_mean": mean, "unigram_val_ce": unigram_val_ce, "margin_below_unigram": margin,
                     "below_unigram": below, "max_flat_ratio": g["flat_ratio"].max(), "flattened": flat,
                     "trained": below and flat, "reason": "; ".join(failures) or "meets both criteria"})
    return pd.DataFrame(rows, columns=list(REGIME_FIELDS))


def undertrained(regime: pd.DataFrame) -> pd.DataFrame:
    """The rows of regime_check's table whose variant is not trained."""
    return regime[~regime["trained"].astype(bool)]


def depth_check(runs: pd.DataFrame, variants: dict[str, Variant], margin: float) -> pd.DataFrame:
    """Per norm placement (the DEPTH_FIELDS): does depth pay at this scale? depth_gain = mean final val_ce of the
    placement's single variant (the first-stage prefix alone, same tokens) minus that of its joint variant (every
    block from step 0), each over all its finished seeds (means, not paired: the two are separate variants and any
    seed of either tells its level); pays iff depth_gain >= margin (reference.Reference.depth_margin, whose reason
    params/reference.yaml gives). A placement without a single or joint run file, or without finished runs of one,
    does not pay (not shown). The variants are found by their parameters (norm, schedule), not their names."""
    by_key = {v.key(): v.name for v in variants.values()}
    rows = []
    for norm in sorted({v.norm for v in variants.values()}, key=lambda n: (n != "pre", n)):  # pre first, as elsewhere
        single, joint = by_key.get((norm, "single", False, None)), by_key.get((norm, "joint", False, None))
        row = {"norm": norm, "single": single, "joint": joint, "margin": margin}
        for role, name in (("single", single), ("joint", joint)):
            ce = pd.to_numeric(runs.loc[runs["variant"] == name, "val_ce"], errors="coerce").dropna()
            row[f"{role}_n"], row[f"{role}_val_ce_mean"] = len(ce), float(ce.mean()) if len(ce) else math.nan
        row["depth_gain"] = row["single_val_ce_mean"] - row["joint_val_ce_mean"]
        row["pays"] = bool(row["depth_gain"] >= margin)  # NaN: does not pay
        if single is None or joint is None:
            row["reason"] = f"no {'single' if single is None else 'joint'} run file of params/runs for {norm}-norm"
        elif not (row["single_n"] and row["joint_n"]):
            row["reason"] = f"no finished runs of {single if not row['single_n'] else joint}"
        else:
            gain = row["depth_gain"]
            row["reason"] = (f"{joint} is {abs(gain):.3f} nats {'below' if gain >= 0 else 'above'} {single} "
                             f"({'>=' if row['pays'] else 'needs >='} {margin:.3f} below)")
        rows.append(row)
    return pd.DataFrame(rows, columns=list(DEPTH_FIELDS))


def runs_teacher_key(summaries) -> str | None:
    """The teacher pass a set of runs distilled from (Summary.teacher_key) when they share one, else None: what
    baselines reads, so that a table rebuilt on another CPU kind (another auto dtype, another cache key) keeps the
    level its runs were judged at."""
    keys = {summary.teacher_key for summary in summaries}
    return keys.pop() if len(keys) == 1 else None


def baselines(profile: str, overrides: dict | None = None, teacher_key: str | None = None) -> dict:
    """{"teacher_val_ce", "unigram_val_ce"} on the validation positions of the profile (with dotted overrides: a grid
    setting's data) (the levels that frame a student's val_ce) with where each comes from ("teacher_source",
    "unigram_source"), or {} when no teacher pass was recorded for it (no cache and no teacher.json, or runs without
    a profile file). teacher_key: the cache the runs recorded (Summary.teacher_key), which on another CPU kind is
    not the one the profile resolves to (auto's dtype); None: the profile's. The unigram model is fitted on the
    cache's training tokens; where the cache itself is absent but its teacher.json (committed with the results) is
    there, on the same tokens re-made from the corpus (corpus.ensure_data: seconds, no teacher pass; the data key
    teacher.json records must match), so that a grid table or page rebuilt on a machine without the cache keeps the
    level every regime gate reads."""
    from ..config import ParamError, load_profile
    from ..data.corpus import ensure_data, unigram_val_ce
    from ..data.teacher import TeacherLoadError, teacher_root
    from ..data.teacher_cache import open_cache, resolve_key
    from ..utils import read_json
    try:
        prof = load_profile(profile, overrides)
        cache = open_cache(prof)
    except ParamError:
        return {}
    except FileNotFoundError:
        cache = None
    if cache is not None and teacher_key in (None, cache.key):
        key, report, tokens = cache.key, cache.report, (cache.train.tokens, cache.val.tokens, cache.val.doc_start)
        fitted = f"outputs/teacher/{key}/train tokens, add-0.5 smoothed over the ids that occur in the cache, " \
                 f"scored on outputs/teacher/{key}/val"
    else:
        try:
            tokenizer, bos_id, dkey, key = resolve_key(prof)
        except TeacherLoadError:
            return {}
        key = teacher_key or key
        path = teacher_root() / key / "teacher.json"
        report = read_json(path) if path.is_file() else {}
        if report.get("data_key") != dkey:
            return {}
        data = ensure_data(prof.data, tokenizer, bos_id, progress=False)
        tokens = (data.train.tokens, data.val.tokens, data.val.doc_start)
        fitted = f"outputs/data/{dkey}/train tokens (the cache's, re-made from the corpus: no cache here), " \
                 f"add-0.5 smoothed over the ids that occur in them, scored on outputs/data/{dkey}/val"
    vocab = int(max(tokens[0].max(), tokens[1].max())) + 1  # sizes the array only: the level is over the ids seen
    return {"teacher_val_ce": report["val_ce"], "teacher_source": f"outputs/teacher/{key}/teacher.json (val_ce)",
            "unigram_val_ce": unigram_val_ce(*tokens, vocab),
            "unigram_source": f"normgrow.data.corpus.unigram_val_ce: unigram fitted on {fitted}"}




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
