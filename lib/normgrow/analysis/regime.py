"""Is a variant trained, and does depth pay: the regime check and the depth check every claim is gated by, with the
baselines they compare against.

Regime: a variant is trained when every seed's final val_ce is at least UNIGRAM_MARGIN below the unigram baseline
and every seed's validation curve has flattened (FLAT_TAIL, FLAT_LIMIT); see regime_check. Depth: a placement's
full-depth joint variant beats its first-stage single variant by a margin; see depth_check.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..config import smoke_note
from ..rundir import FLAT_TAIL, RunDirError, read_metrics, run_path
from .variants import Variant

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
    """One line on the run by the regime gate's two criteria (regime_check, applied to this run alone): its
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
