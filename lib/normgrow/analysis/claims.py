"""Claims: each claim params/reference.yaml declares (the headline three and observations 1-5 of docs/STUDY.md)
judged from this study's numbers (never written in advance), as one Claim record that the report, the diagnostics
(observations 4 and 5, kind measured) and the gates share. A declaration names its kind (how it is judged: JUDGES),
the gaps it reads and its statement; adding a claim is one declaration there and its test.

A directional claim is judged from the interval of its gap: excludes zero in the claimed direction -> supported;
includes zero -> not resolved at this number of seeds; excludes zero in the other direction -> not supported; a
missing variant makes it not testable. The claim of no difference (headline-joint) is an equivalence test (stats.tost
on the paired differences, margin params/reference.yaml equivalence_margin): equivalent -> supported; a resolved
difference -> not supported; neither -> not resolved ("not shown equivalent"). An interval that includes zero is no
evidence of equality: fewer seeds or more spread make it likelier.

Two gates follow. The regime gate (gate_claims) marks a claim "not judged: students undertrained" when it compares a
variant that regime.regime_check finds not clearly trained. The depth gate (depth_gate) marks a claim about growth
"not judged: depth does not pay at this scale" when, for a placement it compares, the full-depth joint run does not
beat the first-stage single run by params/reference.yaml's depth_margin (regime.depth_check).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .stats import (ALPHA, LEVEL, SEEDS_LIMIT, crossover_table, difference_in_gaps, gap_ratio, gap_table,
                    paired_differences, paired_gap, seeds_needed, tost)

from .regime import undertrained
from .formats import gap_interval, signed
from ..rundir import study_diagnostics
from .reference import ClaimSpec, Reference
from .variants import Variant

# Status words of a judged claim and the value of its "supported" field (the diagnostics.json convention).
SUPPORTED, NOT_RESOLVED, NOT_SUPPORTED, NOT_TESTABLE = "supported", "not resolved", "not supported", "not testable"
NOT_JUDGED = "not judged: students undertrained"
NOT_JUDGED_DEPTH = "not judged: depth does not pay at this scale"
GATED = (NOT_JUDGED, NOT_JUDGED_DEPTH)  # the statuses a gate gives; the sentence keeps the ungated reading
SUPPORTED_VALUE = {SUPPORTED: True, NOT_SUPPORTED: False, NOT_RESOLVED: None, NOT_TESTABLE: None, NOT_JUDGED: None,
                   NOT_JUDGED_DEPTH: None}



@dataclass(frozen=True)
class Claim:
    """One claim and its verdict. status: one of STATUSES; sentence: the verdict in words with the numbers; evidence:
    the numbers (JSON-ready); variants: the variants it compares (what the regime gate checks)."""
    claim: str
    statement: str
    status: str
    sentence: str
    evidence: dict = field(default_factory=dict)
    variants: tuple = ()

    def __post_init__(self):
        if self.status not in SUPPORTED_VALUE:
            raise ValueError(f"claim {self.claim}: status {self.status!r} is not one of {', '.join(SUPPORTED_VALUE)}")

    @property
    def supported(self) -> bool | None:
        """True / False for a judged claim, None when it is not resolved, not testable or not judged."""
        return SUPPORTED_VALUE[self.status]

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"supported": self.supported, "variants": list(self.variants)}

    @classmethod
    def from_json(cls, raw: dict) -> "Claim":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names} | {"variants": tuple(raw.get("variants", ()))})


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


def _missing(runs: pd.DataFrame, variants) -> list[str]:
    """The variants without finished runs."""
    present = set(runs["variant"]) if len(runs) else set()
    return [v for v in variants if v not in present]


def _directional(spec: ClaimSpec, runs: pd.DataFrame, stats: dict, label: str, variants, level: float) -> Claim:
    """A claim that a quantity is > 0: the sentence states the status and why, from the numbers."""
    missing = _missing(runs, variants)
    evidence = {k: stats.get(k) for k in ("n", "mean", "ci_low", "ci_high", "seeds")}
    if missing:
        return Claim(spec.name, spec.statement, NOT_TESTABLE,
                     f"Not testable: no finished runs of {', '.join(missing)}.", evidence, variants)
    status = judge(stats, +1)
    where = f"{label} = {gap_interval(stats, level)}"
    if status == SUPPORTED:
        text = f"Supported: {where}; the interval excludes zero in the claimed direction ({spec.if_supported})."
    elif status == NOT_SUPPORTED:
        text = f"Not supported: {where}; the interval excludes zero in the opposite direction ({spec.if_refuted})."
    elif stats["n"] < 2:
        text = f"Not resolved: {where}, so the sign cannot be judged; run more seeds."
    else:
        text = (f"Not resolved at {stats['n']} seeds: {where}; the interval includes zero, and these seeds detect an "
                f"effect of {stats['half_width']:.3f} or more (MDE: the interval's half-width).")
    return Claim(spec.name, spec.statement, status, text, evidence, variants)


def _gap_claim(spec: ClaimSpec, reference: Reference, runs: pd.DataFrame, metric: str, level: float) -> Claim:
    """directional: the gap a - b is > 0."""
    gap = reference.gaps[spec.gaps[0]]
    return _directional(spec, runs, paired_gap(runs, gap.a, gap.b, metric, level=level), f"{gap.a} - {gap.b}",
                        (gap.a, gap.b), level)


def _interaction_claim(spec: ClaimSpec, reference: Reference, runs: pd.DataFrame, metric: str,
                       level: float) -> Claim:
    """interaction: (first a - b) - (second a - b) is > 0, paired by seed over the four variants."""
    one, two = (reference.gaps[name] for name in spec.gaps)
    return _directional(spec, runs, difference_in_gaps(runs, one, two, metric, level),
                        f"({one.a} - {one.b}) - ({two.a} - {two.b})", (one.a, one.b, two.a, two.b), level)


def _ratio_claim(spec: ClaimSpec, reference: Reference, runs: pd.DataFrame, metric: str, level: float) -> Claim:
    """ratio: the interaction claim, with the ratio of the two mean gaps as context (the reference states a ratio;
    it is only bounded when the second gap is resolved from zero, so the verdict is the difference's)."""
    c = _interaction_claim(spec, reference, runs, metric, level)
    if c.status == NOT_TESTABLE:
        return c
    first, second = spec.gaps
    one, two = reference.gaps[first], reference.gaps[second]
    ratio = gap_ratio(gap_table(runs, reference.gaps, (metric,), level), metric, first, second)
    stated = f"the reference states +{one.reference} / +{two.reference} = ~{ratio['reference_ratio']:.0f}x"
    if np.isfinite(ratio["ratio"]) and ratio["second_resolved"]:
        note = (f" Ratio of mean gaps: {first} {signed(ratio['first_mean'])} / {second} "
                f"{signed(ratio['second_mean'])} = {ratio['ratio']:.1f}x ({stated}).")
        return dataclasses.replace(c, sentence=c.sentence + note, evidence=c.evidence | {"ratio": ratio["ratio"]})
    why = (f"is {signed(ratio['second_mean'])} and its interval includes zero, so a ratio to it is unbounded"
           if np.isfinite(ratio["ratio"]) else "mean is zero or missing")
    note = f" No ratio of gaps is read ({stated}): the {second} gap {why}; the difference above is the reading."
    return dataclasses.replace(c, sentence=c.sentence + note)


def _all_of(spec: ClaimSpec, parts: list[Claim]) -> Claim:
    """all_of: supported when every part is; refuted when one is; else not testable / not resolved."""
    statuses = [p.status for p in parts]
    status = (NOT_SUPPORTED if NOT_SUPPORTED in statuses else NOT_TESTABLE if NOT_TESTABLE in statuses
              else SUPPORTED if all(s == SUPPORTED for s in statuses) else NOT_RESOLVED)
    needs = "both parts" if len(parts) == 2 else f"all {len(parts)} parts"
    sentence = f"{status.capitalize()} (the claim needs {needs} supported). " + " ".join(
        f"{part.label}: {claim.sentence}" for part, claim in zip(spec.parts, parts))
    return Claim(spec.name, spec.statement, status, sentence, {part.key: claim.evidence for part, claim in
                                                          zip(spec.parts, parts)},
                 tuple(v for claim in parts for v in claim.variants))


def _equivalence_claim(spec: ClaimSpec, reference: Reference, runs: pd.DataFrame, metric: str,
                       level: float) -> Claim:
    """equivalence: the gap lies within +-equivalence_margin (see the module docstring); the TOST runs on the same
    paired differences as the gap's interval."""
    gap, margin = reference.gaps[spec.gaps[0]], reference.equivalence_margin
    s = paired_gap(runs, gap.a, gap.b, metric, level=level)
    eq = tost(paired_differences(runs, gap.a, gap.b, metric), margin)
    statement = spec.statement
    evidence = {k: s.get(k) for k in ("n", "mean", "ci_low", "ci_high", "seeds")} | {
        "equivalence_margin": margin, "tost_p_lower": eq["p_lower"], "tost_p_upper": eq["p_upper"], "tost_p": eq["p"]}
    variants = (gap.a, gap.b)
    missing = _missing(runs, variants)
    if missing:
        return Claim(spec.name, statement, NOT_TESTABLE,
                     f"Not testable: no finished runs of {', '.join(missing)}.", evidence, variants)
    where = f"{gap.a} - {gap.b} = {gap_interval(s, level)}"
    if s["n"] < 2:
        return Claim(spec.name, statement, NOT_RESOLVED,
                     f"Not resolved: {where}, so equivalence cannot be tested; run more seeds.", evidence, variants)
    test = (f"equivalence test (TOST) against +-{margin:g} nats: one-sided p {eq['p_lower']:.3g} (gap > "
            f"-{margin:g}) and {eq['p_upper']:.3g} (gap < +{margin:g})")
    resolved = s["ci_low"] > 0 or s["ci_high"] < 0
    if eq["equivalent"]:
        also = (" The interval excludes zero: a difference smaller than the margin is resolved." if resolved else "")
        return Claim(spec.name, statement, SUPPORTED,
                     f"Supported (equivalent within +-{margin:g} nats): {where}; {test}: both reject at alpha "
                     f"{ALPHA:g}.{also}", evidence, variants)
    if resolved:
        better = "post-norm" if s["mean"] > 0 else "pre-norm"
        return Claim(spec.name, statement, NOT_SUPPORTED,
                     f"Not supported: {where}; the interval excludes zero, so the joint runs differ ({better} is "
                     f"better); {test}.", evidence, variants)
    room = margin - abs(s["mean"])
    need = seeds_needed(s["sd"], room, 1 - ALPHA) if room > 0 else None
    if room <= 0:
        more = f"the mean lies outside +-{margin:g}, so more seeds at this mean would not show equivalence"
    elif need is None:
        more = f"at this spread more than {SEEDS_LIMIT:,} paired seeds would be needed to show it"
    else:
        more = f"at this spread about {need} paired seeds would show it if the mean stayed at {signed(s['mean'])}"
    return Claim(spec.name, statement, NOT_RESOLVED,
                 f"Not shown equivalent (too few seeds / spread too large): {where}; {test}: neither a difference nor "
                 f"equivalence is shown; {more}.", evidence, variants)


def _crossover_claim(spec: ClaimSpec, reference: Reference, runs: pd.DataFrame, metric: str,
                     level: float) -> Claim:
    """crossover: the gap's a (pre-norm) leads at the first stage end and its b (post-norm) at the last, each
    resolved (the stage-end intervals of crossover_table)."""
    grow, statement = reference.gaps[spec.gaps[0]], spec.statement
    variants = (grow.a, grow.b)
    missing = _missing(runs, variants)
    if missing:
        return Claim(spec.name, statement, NOT_TESTABLE,
                     f"Not testable: no finished runs of {', '.join(missing)}.", {}, variants)
    table = crossover_table(runs, grow.a, grow.b, metric=metric, level=level)
    evidence = {"stages": [{k: r[k] for k in ("stage", "depth", "gap_mean", "gap_ci_low", "gap_ci_high", "n_pairs")}
                           for r in table.to_dict("records")]}
    if len(table) < 2:
        return Claim(spec.name, statement, NOT_TESTABLE,
                     "Not testable: the grown runs have fewer than two stages.", evidence, variants)
    per_stage = "; ".join(f"stage {r['stage']} (depth {r['depth']}): {grow.a} - {grow.b} = "
                          f"{gap_interval({'n': r['n_pairs'], 'mean': r['gap_mean'], 'ci_low': r['gap_ci_low'], 'ci_high': r['gap_ci_high']}, level)}"
                          for r in table.to_dict("records"))
    first, last = table.iloc[0], table.iloc[-1]
    first_lead, last_lead = first["resolved_leader"], last["resolved_leader"]
    later_post = [int(r["stage"]) for r in table.iloc[1:].to_dict("records") if r["resolved_leader"] == grow.b]
    if int(last["n_pairs"]) < 2:
        status, why = NOT_RESOLVED, "fewer than two paired seeds give no intervals"
    elif first_lead == grow.a and last_lead == grow.b:
        status = SUPPORTED
        why = (f"pre-norm leads before any block is appended and post-norm leads from stage {later_post[0]} on "
               f"(intervals exclude zero)")
    elif first_lead == grow.b:
        status = NOT_SUPPORTED
        why = f"no crossover: post-norm leads from the first stage (depth {int(first['depth'])}), before any block is appended"
    elif last_lead == grow.a:
        status, why = NOT_SUPPORTED, "pre-norm still leads at the end of the curriculum"
    elif last_lead == grow.b:
        status = NOT_RESOLVED
        why = ("post-norm leads at the end, but the ranking before appending is not resolved (interval includes "
               "zero), so a change of sign is not established")
    else:
        status, why = NOT_RESOLVED, "the final-stage interval includes zero"
    words = {SUPPORTED: "Supported", NOT_SUPPORTED: "Not supported", NOT_RESOLVED: "Not resolved"}[status]
    return Claim(spec.name, statement, status, f"{words}: {why}. {per_stage}.", evidence, variants)


JUDGES = {"equivalence": _equivalence_claim, "directional": _gap_claim, "interaction": _interaction_claim,
          "ratio": _ratio_claim, "crossover": _crossover_claim}
"""The judge of each kind of params/reference.yaml judged here (reference.CLAIM_KINDS); all_of combines judged
claims, and measured claims are judged by measured_claims.py from the diagnostics."""


def evaluate_claims(runs: pd.DataFrame, reference: Reference, metric: str = "val_ce",
                    level: float = LEVEL) -> list[Claim]:
    """Every claim params/reference.yaml declares that this study's runs judge (all but the measured ones), in the
    file's order, each from this study's numbers; reference from reference.load_reference (the claims, the gaps they
    read, the reference's numbers, the equivalence margin)."""
    judged = {c.name: JUDGES[c.kind](c, reference, runs, metric, level) for c in reference.claims if c.kind in JUDGES}
    for c in reference.claims:
        if c.kind == "all_of":
            judged[c.name] = _all_of(c, [judged[p.claim] for p in c.parts])
    return [judged[c.name] for c in reference.claims if c.name in judged]


def gate_claims(claims: list[Claim], regime: pd.DataFrame) -> list[Claim]:
    """The regime gate: a judged claim (supported, not supported, not resolved) that compares a variant regime_check
    finds undertrained becomes NOT_JUDGED, since a verdict between students that have not left the unigram plateau
    or are still improving is about this budget's optimisation, not about norm placement. Its sentence names the
    variants and the criteria they fail, then keeps the ungated reading with the numbers; evidence keeps the ungated
    status. A not-testable claim (a variant has no runs) stays not testable."""
    bad = undertrained(regime)
    failing = dict(zip(bad["variant"], bad["reason"]))
    gated = []
    for c in claims:
        failed = [v for v in c.variants if v in failing]
        if not failed or c.status == NOT_TESTABLE:
            gated.append(c)
            continue
        why = "; ".join(f"{v}: {failing[v]}" for v in failed)
        gated.append(Claim(c.claim, c.statement, NOT_JUDGED,
                            f"Not judged: students undertrained ({why}). Ungated reading of the numbers, not a "
                            f"verdict: {c.sentence}", {**c.evidence, "ungated_status": c.status},
                            c.variants))
    return gated


def depth_gate(claims: list[Claim], depth: pd.DataFrame, variants: dict[str, Variant]) -> list[Claim]:
    """The depth gate: a judged claim about growth (one that compares a grown variant, schedule grow with or without
    a frozen prefix) becomes NOT_JUDGED_DEPTH unless depth pays (regime.depth_check's table) for every norm placement
    among its variants: both for a pre/post comparison, the one for a single-placement control (obs1-matched). When
    the blocks appended after the first stage buy less than a few times the effect under test (the margin's reason
    is in params/reference.yaml), how well they are appended cannot be resolved. Claims about joint training only
    (headline-joint) compare no appended blocks and pass; a claim the regime gate already took out (students
    undertrained: the more basic reason) or a not-testable one stays as it is. The sentence gives each placement's
    depth gain and the margin, then keeps the ungated reading; evidence keeps the ungated status."""
    rows = depth.set_index("norm")
    gated = []
    for c in claims:
        known = [variants[v] for v in c.variants if v in variants]
        norms = list(dict.fromkeys(v.norm for v in known))
        if (c.status in GATED or c.status == NOT_TESTABLE or not any(v.schedule == "grow" for v in known)
                or all(rows.loc[n, "pays"] for n in norms)):
            gated.append(c)
            continue
        gains = ", ".join(f"{n}: {rows.loc[n, 'depth_gain']:+.3f} nats" if np.isfinite(rows.loc[n, "depth_gain"])
                          else f"{n}: {rows.loc[n, 'reason']}" for n in norms)
        margin = float(rows["margin"].iloc[0])
        gated.append(Claim(c.claim, c.statement, NOT_JUDGED_DEPTH,
                           f"Not judged: depth does not pay at this scale ({gains}, needs >= {margin:.3f}): the "
                           f"full-depth joint run must beat the first-stage single run by this margin for each "
                           f"placement compared. Ungated reading of the numbers, not a verdict: {c.sentence}",
                           {**c.evidence, "ungated_status": c.status}
                           | {f"depth_gain_{n}": float(rows.loc[n, "depth_gain"]) for n in norms},
                           c.variants))
    return gated


def read_diagnostics(profile: str) -> tuple[list[Claim] | None, str]:
    """The claims of outputs/study/<profile>/diagnostics.json (observations 4 and 5, judged by measured_claims.py and
    written by diagnostics.py as Claim records), and a note saying where they come from or why there are none. The
    note names the file within the study's folder, never the folder itself: the page is committed and read on other
    machines."""
    path = study_diagnostics(profile)
    if not path.is_file():
        return None, (f"Diagnostics are not available: {path.name} does not exist in this folder "
                      "(notebooks/diagnostics.ipynb not run).")
    try:
        claims = [Claim.from_json(c) for c in json.loads(path.read_text())["claims"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        reason = err.strerror if isinstance(err, OSError) else err  # an OSError's text would name the path
        return None, (f"Diagnostics are not available: {path.name} in this folder could not be read as claims "
                      f"({type(err).__name__}: {reason}); rerun notebooks/diagnostics.ipynb.")
    return claims, "Observations 4 and 5: the claims of diagnostics.json in this folder."
