"""A run's identity and the one rule by which a directory holds a run: its config.json (rundir.read_identity) agrees
with the identity expected (spec.RunSpec.identity, plus the teacher cache's key) on every key but provenance and
NOT_COMPARED, a key a run recorded before it existed comparing as its default (config.SECTIONS). Read by the training
loop before it trains (train.resume.prepare_run_dir), the runner before it schedules (runner.plan_jobs) and the analysis
before it counts (analysis.variants.collect_runs)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .config import RULES, SECTIONS
from .rundir import is_finished, read_identity, set_aside_advice


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


NOT_COMPARED = tuple(f"profile.{key}" for key, rule in RULES.items() if not rule.compared)
"""Recorded, but not part of what must agree: the profile keys declared so (schema.Rule.compared; each says why
beside its field: the teacher pass's processes and sanity mode, extra evaluations, trackers)."""


def _profile_defaults() -> dict:
    """Every profile key's default (config.SECTIONS), flattened as recorded ('profile.train.compile': 'auto')."""
    return _flatten({"profile": json.loads(json.dumps({name: dataclasses.asdict(cls())
                                                       for name, cls in SECTIONS.items()}))})


def identity_differences(recorded: dict, expected: dict) -> list[str]:
    """The dotted keys (e.g. 'profile.train.lr') on which two identities differ; provenance and NOT_COMPARED are not
    compared. A profile key absent on one side (a run recorded before the key existed) compares as the key's default:
    the rule for adding a profile key is that its default is what runs did before it existed (one process, ``auto``
    compilation, ``max_doc_chars`` ...), so no key needs a special case here."""
    a, b = _flatten(recorded), _flatten(expected)
    defaults = _profile_defaults()
    for flat in (a, b):
        if any(k.startswith("profile.") for k in flat):
            for key, default in defaults.items():
                if not any(k == key or k.startswith(key + ".") for k in flat):
                    flat[key] = default
    return sorted(k for k in set(a) | set(b)
                  if k.split(".")[0] != "environment" and k not in NOT_COMPARED and a.get(k) != b.get(k))


def identity_conflict(recorded: dict, expected: dict, finished: bool) -> list[str]:
    """The one rule by which a directory holds a run: the dotted keys on which the recorded
    identity differs from the expected one (identity_differences). Only the keys expected names are compared, so a
    reader that knows part of a run (the report: its profile and numerics version) compares that part. The teacher
    cache key, when expected names it, is compared only for an unfinished run: resuming it on another cache would mix
    two, while a finished run made on another cache of the same profile, which differs only in the dtype ``auto``
    resolved to on the machine that built it (committed results made with bf16, opened on a CPU without native
    bf16), stays a result of that run."""
    if finished:
        expected = {k: v for k, v in expected.items() if k != "teacher_key"}
    return identity_differences({k: v for k, v in recorded.items() if k in expected}, expected)


def directory_conflict(run_dir: Path, expected: dict) -> str | None:
    """Why run_dir holds a run other than the one of identity ``expected`` (identity_conflict), or None when it holds
    none or that one. Such a directory is never counted nor resumed."""
    recorded = read_identity(run_dir)
    if recorded is None:
        return None
    differing = identity_conflict(recorded, expected, is_finished(run_dir))
    if not differing:
        return None
    return (f"{run_dir} holds a run made with other settings ({', '.join(differing[:4])}); "
            f"{set_aside_advice(run_dir)}, and run again")
