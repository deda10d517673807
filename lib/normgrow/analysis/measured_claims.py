"""The measured claims of params/reference.yaml (kind ``measured``: observations 4 and 5 of docs/STUDY.md), judged
from the boundary diagnostics' measurements: diagnostics.py measures every run on the fixed batch, this module
judges, as claims.py judges the claims read from final losses. MEASURED_JUDGES holds one judge per declared measured
claim, each taking (its declaration, the runs' diagnostics, its gap, the fixed batch's positions per token group).
"""
from __future__ import annotations

import math

from .claims import NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED, Claim
from .formats import sig
from .reference import ClaimSpec, GapSpec, Reference

# Claim thresholds (documented in the claims' statements and evidence).
STABLE_RATIO = 1.25  # post-norm boundary RMS counts as stable when last/first phase stays within [1/1.25, 1.25]
CONCENTRATION_MARGIN = 1.25
"""Pre-norm's drift counts as concentrated on structural tokens only when the structural group's drift exceeds the
content group's by this factor (|log structural ratio| >= |log content ratio| + log 1.25): x1.63 against x1.54 is
the whole stream drifting, not drift concentrated on some tokens."""
IDENTITY_RATIO = 0.5  # final block counts as "nearly identity" when its update ratio < 0.5 x median of the others


def _log_ratio(first, last):
    if first is None or last is None or first <= 0 or last <= 0:
        return None
    return math.log(last / first)


def geo_mean_of_logs(values):
    """exp of the mean of the given logs (None dropped): the geometric mean the measured claims average seeds by."""
    values = [v for v in values if v is not None]
    return math.exp(sum(values) / len(values)) if values else None


def _of_variant(runs: dict[str, dict], variant: str) -> dict[str, dict]:
    return {n: d for n, d in runs.items() if d.get("variant") == variant}


def _drift(runs: dict[str, dict], grow: GapSpec, class_counts: dict[str, int]) -> dict | None:
    """What both halves of observation 4 read from the grow gap's variants (grow.a pre-norm, grow.b post-norm): the
    top-boundary RMS at the last phase over the first (r) and at the last growth boundary over the first top (rg) per
    placement and token group, geometric means over seeds; None without multi-phase runs of both."""
    pre = {n: d for n, d in _of_variant(runs, grow.a).items() if len(d["checkpoints"]) > 1}
    post = {n: d for n, d in _of_variant(runs, grow.b).items() if len(d["checkpoints"]) > 1}
    if not pre or not post:
        return None
    groups = [g for g, count in class_counts.items() if count > 0]

    def ratios(group_runs, g, kind="top"):
        return geo_mean_of_logs([_log_ratio(d["drift"][kind][g][0], d["drift"][kind][g][-1]) for d in group_runs.values()])

    r = {(norm, g): ratios(rs, g) for norm, rs in (("pre", pre), ("post", post)) for g in groups}
    rg = {(norm, g): ratios(rs, g, "growth") for norm, rs in (("pre", pre), ("post", post)) for g in groups}
    sizes = ", ".join(f"{g} {class_counts[g]}" for g in groups)
    empty = [g for g, count in class_counts.items() if count == 0]
    per_class = "; ".join(f"{g}: pre x{sig(r[('pre', g)])}, post x{sig(r[('post', g)])}" for g in groups if g != "first")
    first = (f" The first position of each sequence (the start token; {class_counts['first']} positions) on its own: "
             f"pre x{sig(r[('pre', 'first')])}, post x{sig(r[('post', 'first')])}." if "first" in groups else "")
    growth = "; ".join(f"{g}: pre x{sig(rg[('pre', g)])}, post x{sig(rg[('post', g)])}"
                       for g in ("all", "structural", "content") if g in groups)
    measured = (f"Top-boundary RMS (h_N, what the head's norm and the next appended block receive) at the last phase "
                f"over the first phase, geometric mean over seeds ({len(pre)} pre-grow, {len(post)} post-grow runs); "
                f"positions per group in the fixed batch: {sizes}"
                + (f" ({', '.join(empty)}: no positions, left out)" if empty else "") + f". {per_class}.{first} "
                f"At the growth boundary of the last phase against the first phase's top boundary: {growth}.")
    evidence = ({f"{norm}/{g}": v for (norm, g), v in r.items()} | {f"growth/{norm}/{g}": v for (norm, g), v in rg.items()}
                | {f"positions/{g}": count for g, count in class_counts.items()})
    return {"r": r, "dev": {k: abs(math.log(v)) if v else None for k, v in r.items()}, "measured": measured,
            "evidence": evidence, "pre": len(pre), "post": len(post)}


def _untestable(spec: ClaimSpec, runs: dict[str, dict], grow: GapSpec) -> Claim:
    counts = [len([d for d in _of_variant(runs, v).values() if len(d["checkpoints"]) > 1]) for v in (grow.a, grow.b)]
    return Claim(spec.name, spec.statement, NOT_TESTABLE, f"Not testable: needs finished multi-phase runs of both "
                 f"{grow.a} ({counts[0]}) and {grow.b} ({counts[1]}).", {}, (grow.a, grow.b))


def boundary_stability(spec: ClaimSpec, runs: dict[str, dict], grow: GapSpec, class_counts: dict[str, int]) -> Claim:
    """Observation 4's first half: post-norm's top-boundary RMS (all positions) stays within the stability band
    across growth and drifts less than pre-norm's."""
    d = _drift(runs, grow, class_counts)
    if d is None:
        return _untestable(spec, runs, grow)
    r, dev = d["r"], d["dev"]
    stable = dev.get(("post", "all")) is not None and dev[("post", "all")] <= math.log(STABLE_RATIO)
    less = None not in (dev.get(("post", "all")), dev.get(("pre", "all"))) and dev[("post", "all")] < dev[("pre", "all")]
    supported = bool(stable and less)
    why = (f"post-norm's all-token drift x{sig(r.get(('post', 'all')))} is "
           f"{'within' if stable else 'outside'} the stability band [1/{STABLE_RATIO}, {STABLE_RATIO}] and "
           f"{'smaller' if less else 'not smaller'} than pre-norm's x{sig(r.get(('pre', 'all')))}. By construction a "
           "post-norm boundary is an RMSNorm's output, so its RMS is that norm's learned gain (1 at initialisation) and "
           "its stability is built in rather than found. ")
    return Claim(spec.name, spec.statement, SUPPORTED if supported else NOT_SUPPORTED,
                 f"{'Supported' if supported else 'Not supported'}: {why}{d['measured']}", d["evidence"],
                 (grow.a, grow.b))


def structural_drift(spec: ClaimSpec, runs: dict[str, dict], grow: GapSpec, class_counts: dict[str, int]) -> Claim:
    """Observation 4's second half: pre-norm's top-boundary drift on structural tokens exceeds its drift on content
    tokens by CONCENTRATION_MARGIN (in |log ratio|)."""
    d = _drift(runs, grow, class_counts)
    if d is None:
        return _untestable(spec, runs, grow)
    r, dev = d["r"], d["dev"]
    structural, content = dev.get(("pre", "structural")), dev.get(("pre", "content"))
    concentrated = None not in (structural, content) and structural >= content + math.log(CONCENTRATION_MARGIN)
    why = (f"pre-norm's structural drift x{sig(r.get(('pre', 'structural')))} "
           f"{'exceeds' if concentrated else 'does not exceed'} its content drift x{sig(r.get(('pre', 'content')))} by "
           f"the margin x{CONCENTRATION_MARGIN} (in |log ratio|)"
           + ("" if concentrated else ": the whole stream drifts, not structural tokens alone") + ". ")
    return Claim(spec.name, spec.statement, SUPPORTED if concentrated else NOT_SUPPORTED,
                 f"{'Supported' if concentrated else 'Not supported'}: {why}{d['measured']}", d["evidence"],
                 (grow.a, grow.b))


def final_block_identity(spec: ClaimSpec, runs: dict[str, dict], grow: GapSpec,
                         class_counts: dict[str, int]) -> Claim:
    """Observation 5 from the pre-norm grown runs (grow.a), with the post-norm ones (grow.b) for context; class_counts
    is not read (one signature for every measured judge)."""
    name, statement = spec.name, spec.statement
    variants = (grow.a,)
    pre = _of_variant(runs, grow.a)
    if not pre:
        return Claim(name, statement, NOT_TESTABLE, f"Not testable: needs finished {grow.a} runs.", {},
                     variants)
    fb = [d["checkpoints"][-1]["final_block"] for d in pre.values()]
    rel = [f["ratio_to_median"] for f in fb if f and f["ratio_to_median"] is not None]
    if not rel:
        return Claim(name, statement, NOT_TESTABLE,
                     f"Not testable: the {grow.a} students have a single block; no other blocks to compare with.", {},
                     variants)
    rel_gm = geo_mean_of_logs([math.log(x) for x in rel if x > 0])
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    post = _of_variant(runs, grow.b)
    post_rel = [d["checkpoints"][-1]["final_block"]["ratio_to_median"] for d in post.values()
                if d["checkpoints"][-1]["final_block"]["ratio_to_median"]]
    supported = rel_gm is not None and rel_gm < IDENTITY_RATIO
    evidence = (f"Final pre-grow block update ratio ||h_N - h_(N-1)|| / ||h_(N-1)|| = "
                f"{sig(mean([f['final_block_update_ratio'] for f in fb]))} (mean over {len(fb)} seeds) against a "
                f"median of {sig(mean([f['median_other_update_ratio'] for f in fb]))} for the other blocks (interior blocks "
                f"1..N-2; block 0 reads the raw embedding): "
                f"x{sig(rel_gm)} the median (geometric mean), rank(s) {[f['rank'] for f in fb]} of "
                f"{fb[0]['n_blocks']} (1 = smallest), cosine(h_in, h_out) {sig(mean([f['final_block_cosine'] for f in fb]))}, "
                f"skip-block validation CE change {sig(mean([f['final_block_skip_delta_ce'] for f in fb if f['final_block_skip_delta_ce'] is not None]))} nats/token"
                + (f"; post-grow final block: x{sig(geo_mean_of_logs([math.log(x) for x in post_rel]))} its median"
                   + (" (smaller still, so near-identity is not specific to pre-norm here)"
                      if rel_gm is not None and geo_mean_of_logs([math.log(x) for x in post_rel]) < rel_gm else "")
                   if post_rel else "")
                + f". Threshold for 'nearly identity': below {IDENTITY_RATIO} x the median.")
    return Claim(name, statement, SUPPORTED if supported else NOT_SUPPORTED,
                 f"{'Supported' if supported else 'Not supported'}: {evidence}",
                 {"ratio_to_median_geomean": rel_gm,
                  "post_ratio_to_median_geomean": geo_mean_of_logs([math.log(x) for x in post_rel]) if post_rel else None},
                 variants)


MEASURED_JUDGES = {"obs4-stability": boundary_stability, "obs4-structural": structural_drift,
                   "obs5-identity": final_block_identity}
"""The judge of each measured claim params/reference.yaml declares, by its name."""


def judge_measured(reference: Reference, runs: dict[str, dict], class_counts: dict[str, int]) -> list[Claim]:
    """Every measured claim of the reference, in the file's order, judged from the runs' diagnostics (a declared
    measured claim without a judge here is an error naming it)."""
    claims = []
    for spec in (c for c in reference.claims if c.kind == "measured"):
        if spec.name not in MEASURED_JUDGES:
            raise ValueError(f"params/reference.yaml declares the measured claim {spec.name!r}, which no judge of "
                             f"measured_claims.MEASURED_JUDGES measures (judged: {', '.join(MEASURED_JUDGES)})")
        claims.append(MEASURED_JUDGES[spec.name](spec, runs, reference.gaps[spec.gaps[0]], class_counts))
    return claims
