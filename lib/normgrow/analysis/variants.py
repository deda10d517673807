"""The study's variants and which finished runs make up the study.

A variant is a run file of params/runs (``post-grow.yaml``: norm, schedule, freeze_prefix, match_active_layer_tokens);
the study runs each variant once per seed as ``<variant>-s<seed>``. The gaps the report computes between variants,
with the reference study's numbers, and the margins the claims are judged with are data too: params/reference.yaml
(reference.py).

``collect_runs(profile)`` reads every finished run of outputs/runs/<profile>/ and assigns it to a variant by the
parameters recorded in the run (summary.json: norm, schedule, freeze_prefix, the budget donor's own variant, seed),
never by parsing its name, so a run launched by hand (``-p match_active_layer_tokens post-grow-s0`` is named
``post-joint-match-post-grow-s0``) counts where it belongs. A run is left unassigned, with the reason, when its
parameters match no variant, when its recorded settings differ from the current profile file (an ``overrides`` run,
or a profile edited since), or when another run already holds its (variant, seed) (the study's own name wins).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from ..config import PARAMS_DIR, ParamError, read_yaml
from ..identity import identity_conflict
from ..rundir import (NUMERICS_VERSION, RunDirError, Summary, finished_runs, read_finished,
                      run_machine, seeded_name)
from ..schema import Bool, Str, one_of, section, validate
from ..student.model import NORMS
from ..train.growth import SCHEDULES

RUN_KEYS = ("norm", "schedule", "freeze_prefix", "match_active_layer_tokens")


@section
class Variant:
    """A run file (its keys RUN_KEYS; norm and schedule required, the others default to an unfrozen, unmatched run)."""
    norm: Annotated[Str, one_of(NORMS)]
    schedule: Annotated[Str, one_of(SCHEDULES)]
    freeze_prefix: Bool = False
    match_active_layer_tokens: Str | None = None  # the donor *variant* of a compute-matched run
    name: Str = field(default="", kw_only=True)  # the run file's stem (load_variants)

    def parameters(self) -> dict:
        """The papermill parameters of run_variant.ipynb this run file sets."""
        return {k: getattr(self, k) for k in RUN_KEYS if getattr(self, k) not in (None, False)}

    def key(self) -> tuple:
        return self.norm, self.schedule, self.freeze_prefix, self.match_active_layer_tokens


def load_variants() -> dict[str, Variant]:
    """Every run file of params/runs, by name; a file that is not a mapping, a missing or unknown key, a value no run
    accepts and matched-on-matched chains are ParamErrors naming the file and the key."""
    variants = {}
    for path in sorted((PARAMS_DIR / "runs").glob("*.yaml")):
        raw = read_yaml(path)
        if not isinstance(raw, dict) or "name" in raw:
            raise ParamError(f"{path}: a run file is a mapping of the keys {', '.join(RUN_KEYS)} (got "
                             f"{'an empty file' if raw is None else repr(raw)}), e.g. norm: post, schedule: grow")
        variants[path.stem] = validate(Variant, raw | {"name": path.stem}, str(path))
    seen: dict[tuple, str] = {}
    for v in variants.values():  # a variant is defined once: two files would split its runs between two names
        if v.key() in seen:
            raise ParamError(f"params/runs/{seen[v.key()]}.yaml and params/runs/{v.name}.yaml define the same variant "
                             f"({', '.join(f'{k}={getattr(v, k)}' for k in RUN_KEYS)}); remove one")
        seen[v.key()] = v.name
    for v in variants.values():
        donor = v.match_active_layer_tokens
        if donor is not None and (donor not in variants or variants[donor].match_active_layer_tokens):
            raise ParamError(f"params/runs/{v.name}.yaml: match_active_layer_tokens={donor!r} must name a run file "
                             "that is not itself a matched run")
    return variants


@dataclass(frozen=True)
class StudyRuns:
    """The finished runs assigned to (variant, seed), those that are not, with why, and the damaged ones (a
    summary.json or config.json that does not read or validate: rundir.read_finished), with the error; machines:
    the machine each assigned run trained on (rundir.run_machine), by run name."""
    assigned: dict[tuple[str, int], Summary]
    unassigned: dict[str, str]  # run name -> reason
    damaged: dict[str, str] = field(default_factory=dict)  # run name -> the error naming the file
    machines: dict[str, str] = field(default_factory=dict)  # run name -> machine


def collect_runs(profile: str) -> StudyRuns:
    """Assign every finished study run of a profile (see the module docstring)."""
    from ..train.spec import run_profile  # train imports torch; only what a run records is needed here
    variants = load_variants()
    by_key = {v.key(): v.name for v in variants.values()}
    summaries, unassigned, expected, damaged = {}, {}, {}, {}
    for run_dir in finished_runs(profile):
        try:
            summaries[run_dir.name] = read_finished(run_dir)
        except RunDirError as err:
            damaged[run_dir.name] = str(err)

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
        if summary.match_active_layer_tokens in damaged:
            unassigned[name] = f"its budget donor {summary.match_active_layer_tokens} is damaged"
            continue
        if variant is None:
            unassigned[name] = (f"its parameters (norm={summary.norm}, schedule={summary.schedule}, freeze_prefix="
                                f"{summary.freeze_prefix}, match={summary.match_active_layer_tokens}) match no run "
                                "file of params/runs")
            continue
        arm = (summary.norm, summary.schedule)  # train.lr may differ per placement and schedule
        if arm not in expected:
            expected[arm] = {"profile": run_profile(profile, *arm).to_dict(), "numerics": NUMERICS_VERSION}
        differing = identity_conflict(identity or {}, expected[arm], finished=True)
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
    machines = {s.run_name: run_machine(summaries[s.run_name][1]) for s in assigned.values()}
    return StudyRuns(assigned, dict(sorted(unassigned.items())), dict(sorted(damaged.items())), machines)
