"""The study's variants and which finished runs make up the study.

A variant is a run file of params/runs (``post-grow.yaml``: norm, schedule, freeze_prefix, match_active_layer_tokens);
the study runs each variant once per seed as ``<variant>-s<seed>``. The gaps the report computes between variants,
with the reference study's numbers, are data too: params/reference.yaml.

``collect_runs(profile)`` reads every finished run of outputs/runs/<profile>/ and assigns it to a variant by the
parameters recorded in the run (summary.json: norm, schedule, freeze_prefix, the budget donor's own variant, seed),
never by parsing its name, so a run launched by hand (``-p match_active_layer_tokens post-grow-s0`` is named
``post-joint-match-post-grow-s0-s0``) counts where it belongs. A run is left unassigned, with the reason, when its
parameters match no variant, when its recorded settings differ from the current profile file (an ``overrides`` run,
or a profile edited since), or when another run already holds its (variant, seed) (the study's own name wins).
"""
from __future__ import annotations

from dataclasses import dataclass, fields


from .config import PARAMS_DIR, ParamError, read_yaml
from .rundir import (NUMERICS_VERSION, RunDirError, Summary, finished_runs, identity_differences, read_identity,
                     read_summary, seeded_name)

RUN_KEYS = ("norm", "schedule", "freeze_prefix", "match_active_layer_tokens")


@dataclass(frozen=True)
class Variant:
    name: str  # the run file's stem
    norm: str
    schedule: str
    freeze_prefix: bool = False
    match_active_layer_tokens: str | None = None  # the donor *variant* of a compute-matched run

    def parameters(self) -> dict:
        """The papermill parameters of run_variant.ipynb this run file sets."""
        return {k: getattr(self, k) for k in RUN_KEYS if getattr(self, k) not in (None, False)}

    def key(self) -> tuple:
        return self.norm, self.schedule, self.freeze_prefix, self.match_active_layer_tokens


def load_variants() -> dict[str, Variant]:
    """Every run file of params/runs, by name; unknown keys and matched-on-matched chains are ParamErrors."""
    variants = {}
    for path in sorted((PARAMS_DIR / "runs").glob("*.yaml")):
        raw = read_yaml(path) or {}
        bad = sorted(set(raw) - set(RUN_KEYS))
        if bad:
            raise ParamError(f"{path}: unknown key {bad[0]!r}; allowed keys: {', '.join(RUN_KEYS)}")
        variants[path.stem] = Variant(path.stem, **raw)
    for v in variants.values():
        donor = v.match_active_layer_tokens
        if donor is not None and (donor not in variants or variants[donor].match_active_layer_tokens):
            raise ParamError(f"params/runs/{v.name}.yaml: match_active_layer_tokens={donor!r} must name a run file "
                             "that is not itself a matched run")
    return variants


@dataclass(frozen=True)
class GapSpec:
    """A paired gap ``a - b`` (by seed). direction=+1: the reference reports it positive; 0: reported as ~0."""
    name: str
    a: str
    b: str
    reference: float | None
    reference_text: str
    direction: int
    meaning: str


def load_gaps() -> dict[str, GapSpec]:
    """params/reference.yaml's gaps, by name; every a and b must be a variant."""
    path = PARAMS_DIR / "reference.yaml"
    variants = load_variants()
    gaps = {}
    for raw in (read_yaml(path) or {}).get("gaps") or []:
        names = {f.name for f in fields(GapSpec)}
        if set(raw) != names:
            raise ParamError(f"{path}: a gap needs exactly the keys {', '.join(sorted(names))} (got {sorted(raw)})")
        spec = GapSpec(**raw)
        for v in (spec.a, spec.b):
            if v not in variants:
                raise ParamError(f"{path}: gap {spec.name!r} names {v!r}, which is not a run file of params/runs")
        gaps[spec.name] = spec
    for needed in ("joint", "grow"):  # the headline claims
        if needed not in gaps:
            raise ParamError(f"{path}: gap {needed!r} is missing")
    return gaps


@dataclass(frozen=True)
class StudyRuns:
    """The finished runs assigned to (variant, seed), and those that are not, with why."""
    assigned: dict[tuple[str, int], Summary]
    unassigned: dict[str, str]  # run name -> reason


def collect_runs(profile: str) -> StudyRuns:
    """Assign every finished study run of a profile (see the module docstring)."""
    from .train import run_profile  # train imports torch; only what a run records is needed here
    variants = load_variants()
    by_key = {v.key(): v.name for v in variants.values()}
    summaries, unassigned, expected = {}, {}, {}
    for run_dir in finished_runs(profile):
        try:
            summaries[run_dir.name] = (read_summary(run_dir), read_identity(run_dir))
        except RunDirError as err:
            unassigned[run_dir.name] = str(err)

    def variant_of(summary: Summary) -> str | None:
        donor = summary.match_active_layer_tokens
        donor_variant = None
        if donor is not None:
            if donor not in summaries:
                return None
            donor_variant = variant_of(summaries[donor][0])
            if donor_variant is None:
                return None
        return by_key.get((summary.norm, summary.schedule, summary.freeze_prefix, donor_variant))

    candidates: dict[tuple[str, int], list[str]] = {}
    for name, (summary, identity) in summaries.items():
        variant = variant_of(summary)
        if variant is None:
            unassigned[name] = (f"its parameters (norm={summary.norm}, schedule={summary.schedule}, freeze_prefix="
                                f"{summary.freeze_prefix}, match={summary.match_active_layer_tokens}) match no run "
                                "file of params/runs")
            continue
        arm = (summary.norm, summary.schedule)  # train.lr may differ per placement and schedule
        if arm not in expected:
            expected[arm] = {"profile": run_profile(profile, *arm).to_dict(), "numerics": NUMERICS_VERSION}
        recorded = {"profile": (identity or {}).get("profile"), "numerics": (identity or {}).get("numerics")}
        differing = identity_differences(recorded, expected[arm])
        if differing:
            unassigned[name] = (f"recorded settings differ from params/profiles/{profile}.yaml "
                                f"({', '.join(differing[:4])}{', ...' if len(differing) > 4 else ''})")
            continue
        candidates.setdefault((variant, summary.seed), []).append(name)
    assigned = {}
    for (variant, seed), names in sorted(candidates.items()):
        keep = seeded_name(variant, seed) if seeded_name(variant, seed) in names else sorted(names)[0]
        assigned[(variant, seed)] = summaries[keep][0]
        for other in names:
            if other != keep:
                unassigned[other] = f"another run ({keep}) already holds {variant} seed {seed}"
    return StudyRuns(assigned, dict(sorted(unassigned.items())))
