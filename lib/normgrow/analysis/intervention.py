"""The boundary intervention (params/interventions.yaml): the control profile's runs and each intervention profile's,
one frame in which a variant trained under intervention ``name`` is ``<variant>@<name>``, judged by the study's
claim kinds (claims.py) with the regime gate over every variant a claim compares. An intervention changes the
boundary scale and watches the gap move; both directions are declared, so either could fail.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..config import PARAMS_DIR, available_profiles, read_yaml
from ..paths import ParamError
from ..rundir import study_dir
from ..schema import Float, Int, Str, section, validate
from ..utils import read_json
from .claims import Claim, evaluate_claims, gate_claims
from .stats import LEVEL, paired_gap, runs_frame
from .regime import regime_check, with_flatness
from .reference import GapSpec, Reference, check_claims, load_reference
from .variants import collect_runs, load_variants

PATH = PARAMS_DIR / "interventions.yaml"


@section
class BracketStage:
    """One sweep of an intervention's bracket (python -m normgrow.sweep --lr-factors ... [--warmup-factors ...])."""
    lr_factors: list[Float]
    warmup_factors: list[Float] | None = None


@section
class Bracket:
    seeds: list[Int]
    schedules: list[Str]
    norms: list[Str]
    stages: list[BracketStage]


@section
class InterventionsFile:
    """params/interventions.yaml as written (load_interventions)."""
    control: Str  # the control profile
    interventions: dict[str, Str]  # name -> intervention profile
    bracket: Bracket
    gaps: list[GapSpec]
    claims: list  # checked against the gaps by reference.check_claims


@dataclass(frozen=True)
class Interventions:
    """params/interventions.yaml, validated: the control profile, {name: intervention profile}, and its gaps and
    claims as a Reference (the study's equivalence margin; no depth gate: the control study's applies)."""
    control: str
    profiles: dict[str, str]
    bracket: Bracket
    reference: Reference


def load_interventions(path: Path = PATH) -> Interventions:
    raw = validate(InterventionsFile, read_yaml(path) or {}, str(path))
    profiles = available_profiles()
    for name, profile in {"control": raw.control, **raw.interventions}.items():
        if profile not in profiles:
            raise ParamError(f"{path}: {name}={profile!r} is not a profile; allowed values: {', '.join(profiles)}")
    variants, gaps = load_variants(), {}
    for spec in raw.gaps:
        for side in (spec.a, spec.b):
            run, _, name = side.partition("@")
            if run not in variants or (name and name not in raw.interventions):
                raise ParamError(f"{path}: gap {spec.name!r} names {side!r}: a run file of params/runs, or "
                                 f"run@name with name one of {', '.join(raw.interventions)}")
        gaps[spec.name] = spec
    margin = load_reference().equivalence_margin
    return Interventions(raw.control, dict(raw.interventions), raw.bracket,
                         Reference(gaps, margin, 0.0, "", check_claims(path, raw.claims, gaps, margin)))


def combined_runs(inter: Interventions) -> pd.DataFrame:
    """The control's runs as they are and every intervention's with its variants renamed <variant>@<name>, each
    with its profile and its curve's flatness (regime.with_flatness): one frame the claims pair by seed."""
    frames = []
    for name, profile in {"": inter.control, **inter.profiles}.items():
        runs = runs_frame(collect_runs(profile))
        if len(runs):
            runs = with_flatness(runs, profile).assign(profile=profile)
            frames.append(runs.assign(variant=runs["variant"] + f"@{name}") if name else runs)
    return pd.concat(frames, ignore_index=True) if frames else runs_frame(collect_runs(inter.control))


def judge(inter: Interventions, runs: pd.DataFrame, unigram_val_ce: float | None, level: float = LEVEL) -> list[Claim]:
    """Every declared claim from runs (combined_runs), through the regime gate (every run 1 nat below the unigram
    level, its curve flat; the profiles share the control's teacher pass, so one unigram level)."""
    return gate_claims(evaluate_claims(runs, inter.reference, level=level), regime_check(runs, unigram_val_ce))


def gap_frame(inter: Interventions, runs: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Every declared gap, paired by seed (stats.paired_gap)."""
    return pd.DataFrame([{"gap": g.name, "a": g.a, "b": g.b, "meaning": g.meaning,
                          **paired_gap(runs, g.a, g.b, level=level)} for g in inter.reference.gaps.values()])


def share_closed(gaps: pd.DataFrame) -> float | None:
    """The share of the control's grow gap that normalizing pre-norm's boundary closes: normalize-pre over grow, a
    ratio of means (context beside the claims, not a claim; None until both gaps have runs)."""
    means = {g: m for g, m, n in zip(gaps["gap"], gaps["mean"], gaps["n"]) if n}
    return means["normalize-pre"] / means["grow"] if means.get("grow") and "normalize-pre" in means else None


def diagnostics_frame(inter: Interventions, variants=("pre-grow", "post-grow")) -> pd.DataFrame:
    """Beside the claims, so the scale and the loss are read together: per study (the control and each intervention)
    and grown variant, from its diagnostics.json, the top-boundary RMS at the last phase over the first (all and
    structural positions) and the final block's update over the median block's, geometric means over the seeds."""
    rows = []
    for name, profile in {"control": inter.control, **inter.profiles}.items():
        path = study_dir(profile) / "diagnostics.json"
        runs = read_json(path).get("runs", {}) if path.is_file() else {}
        for variant in variants:
            mine = [r for r in runs.values() if r.get("variant") == variant and len(r.get("checkpoints", [])) > 1]
            if not mine:
                continue
            drift = lambda g: statistics.geometric_mean(r["drift"]["top"][g][-1] / r["drift"]["top"][g][0]  # noqa: E731
                                                        for r in mine)
            rows.append({"study": name, "profile": profile, "variant": variant, "n": len(mine),
                         "top_drift_all": drift("all"), "top_drift_structural": drift("structural"),
                         "final_block_ratio": statistics.geometric_mean(
                             r["checkpoints"][-1]["final_block"]["ratio_to_median"] for r in mine)})
    return pd.DataFrame(rows, columns=["study", "profile", "variant", "n", "top_drift_all", "top_drift_structural",
                                       "final_block_ratio"])
