"""A run's spec: the parameters of run_variant.ipynb (and of ``python -m normgrow run``) validated against the
profile before any heavy work or output directory, each error naming the parameter and its allowed values
(make_run_spec); the run's identity and its default name (RunSpec, derive_run_name); the lr and warmup of an arm
(for_arm); the settings a run never reads (unread_keys); the step's memory against the machine's (check_step_budget); the disk
a finished run keeps (run_disk_estimate).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch

from ..config import RULES, ParamError, Profile, check_seed, load_profile, profile_from_dict, with_processes
from .growth import GROWS, SCHEDULES
from ..student.growth_ops import GROWTH_OPS
from ..student.model import BOUNDARY_READS, NORMS, Student, StudentConfig
from ..student.parametrization import READS as PARAMETRIZATION_READS
from ..student.placements import PLACEMENTS
from ..rundir import (NUMERICS_VERSION, SUMMARY, finished_runs,
                      check_name, is_finished, run_path, runs_root)
from .tracking import missing_trackers
from ..utils import read_json, stable_hash
from ..data.vocab import VocabMap


@dataclass(frozen=True)
class RunSpec:
    """A validated run: the profile plus the papermill parameters of run_variant.ipynb. Its profile is the run's own
    (run_profile): the overrides applied, the arm's peak lr and warmup numbers, the keys the run never reads at their
    defaults. It crosses into a run's kernel once, as JSON (to_json, from_json), so no layer below the one that
    made it reads or resolves the profile file again."""
    profile: Profile
    norm: str
    schedule: str
    freeze_prefix: bool
    match_active_layer_tokens: str | None  # resolved run name of the budget donor
    seed: int
    run_name: str
    force: bool = False
    overrides: dict = field(default_factory=dict)

    def __post_init__(self):
        for name, what in (("lr", "one peak lr"), ("warmup_steps", "one warmup")):
            value = getattr(self.profile.train, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ParamError(f"train.{name}={value!r}: a run trains at {what}, its arm's (spec.for_arm), a number")

    @property
    def dir(self) -> Path:
        return run_path(self.profile.name, self.run_name)

    def identity(self) -> dict:
        """What changes the run's numbers (see rundir): a directory must agree on all of it to be resumed or reused.
        Overrides are in it through the profile content they change."""
        return {"profile": self.profile.to_dict(), "norm": self.norm, "schedule": self.schedule,
                "freeze_prefix": self.freeze_prefix, "match_active_layer_tokens": self.match_active_layer_tokens,
                "seed": self.seed, "run_name": self.run_name, "numerics": NUMERICS_VERSION}

    def to_json(self) -> dict:
        """This spec as JSON, what run_variant.ipynb takes as its ``run_spec`` parameter (the runner's kernels,
        record_notebook): every field, the profile as its dict (Profile.to_dict)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {"profile": self.profile.to_dict()}

    @classmethod
    def from_json(cls, raw: dict) -> "RunSpec":
        """The spec to_json wrote: its profile rebuilt from the dict (config.profile_from_dict: types and tuples as
        loaded), never from the profile's file, which the kernel need not even see."""
        profile = dict(raw["profile"])
        return cls(**raw | {"profile": profile_from_dict(profile, profile.pop("name"))})


def derive_run_name(norm: str, schedule: str, freeze_prefix: bool, match: str | None, seed: int,
                    overrides: dict | None = None) -> str:
    """The default run name: the parameters in order, then '-o<hash>' when overrides change the profile (so a run
    with other settings never lands in, or is taken for, the directory of the study's run), then '-s<seed>'. A donor
    named with this run's own seed is named once: post-grow and post-grow-s0 are the same donor of a seed-0 run
    (resolve_match_target), so both give post-joint-match-post-grow-s0, never ...-s0-s0."""
    donor = match.removesuffix(f"-s{seed}") if match else None
    parts = [norm, schedule] + (["freeze"] if freeze_prefix else []) + ([f"match-{donor}"] if donor else [])
    if overrides:
        parts.append(f"o{stable_hash(overrides, 8)}")
    return "-".join(parts + [f"s{seed}"])


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ParamError(f"{name}={value!r} is not allowed; allowed values: {', '.join(map(str, allowed))}")


def resolve_match_target(profile_name: str, target: str, seed: int) -> Path:
    """The finished run whose active-layer tokens a matched run gets: NAME, or NAME-s<seed> for a seedless name.
    Only runs of the same profile count: the name is checked like a run name, so it cannot point elsewhere."""
    root = runs_root(profile_name)
    check_name("match_active_layer_tokens", target)
    for name in (target, f"{target}-s{seed}"):
        if (root / name).is_dir():
            if not is_finished(root / name):
                raise ParamError(f"match_active_layer_tokens={target!r}: run {root / name} is not finished "
                                 "(no summary.json); run it to completion first")
            return root / name
    finished = sorted(p.parent.name for p in root.glob(f"*/{SUMMARY}"))
    raise ParamError(f"match_active_layer_tokens={target!r}: no run {root / target} (nor {target}-s{seed}); "
                     f"finished runs of profile {profile_name!r}: {', '.join(finished) or 'none'}")


def _check_keys(where: str, mapping: dict, allowed, kind: str) -> None:
    """ParamError naming the keys of mapping that are not in allowed, and the allowed ones."""
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise ParamError(f"{where}={mapping!r}: unknown {kind}(s) {', '.join(unknown)}; allowed keys: "
                         f"{', '.join(allowed)}")


def for_arm(key: str, value, norm: str, schedule: str):
    """The value of a per-arm key (schema.Rule.per_arm: train.lr, train.warmup_steps) for a run: one value; one per
    placement ({pre: X, post: Y}); or one per placement and schedule ({pre: {joint: X, grow: Y, single: Z}, post:
    {...}}), since a placement's best lr and warmup differ between the joint and the grown schedule (python -m
    normgrow.sweep measures each). A mapping needs the run's placement and schedule only (a profile tuned for pre and
    post still runs those two; a placement swept for joint and grow runs those); a key that is no placement or
    schedule is an error. A freeze control trains at its placement's grow value and a matched run at its joint
    value: they are those schedules with one setting changed."""
    if not isinstance(value, dict):
        return value
    what = {"train.lr": "learning rate", "train.warmup_steps": "warmup"}.get(key, "value")
    _check_keys(key, value, NORMS, "placement")
    if norm not in value:
        raise ParamError(f"{key}={value!r} gives no {what} for norm={norm!r} (keys given: {', '.join(value)}); add "
                         f"{key}.{norm}")
    per_norm = value[norm]
    if not isinstance(per_norm, dict):
        return per_norm
    _check_keys(f"{key}.{norm}", per_norm, SCHEDULES, "schedule")
    if schedule not in per_norm:
        raise ParamError(f"{key}.{norm}={per_norm!r} gives no {what} for schedule={schedule!r}; sweep it: "
                         f"python -m normgrow.sweep --norms {norm} --schedules {schedule} --write")
    return per_norm[schedule]


def unread_keys(prof: Profile, norm: str, schedule: str) -> list[str]:
    """The dotted profile keys a run of this placement and schedule never reads: those declared for growing runs only
    (schema.Rule.grows_only) and the growth operator's own (GrowthOp.reads) when the schedule does not grow, and
    every other placement's own keys (Placement.reads), and those of the parametrizations (parametrization.READS) and
    boundary operations (model.BOUNDARY_READS) the student does not use."""
    unread = [k for name, cls in PLACEMENTS.items() if name != norm for k in cls.reads]
    unread += [k for name, keys in PARAMETRIZATION_READS.items() if name != prof.student.parametrization for k in keys]
    unread += [k for name, keys in BOUNDARY_READS.items() if name != prof.student.boundary for k in keys]
    op = GROWTH_OPS[prof.student.new_block_init]
    unread += [k for other in GROWTH_OPS.values() if other is not op or schedule not in GROWS for k in other.reads]
    if schedule not in GROWS:
        unread += [key for key, rule in RULES.items() if rule.grows_only]
    return list(dict.fromkeys(unread))


def run_profile(profile: str, norm: str, schedule: str, overrides: dict | None = None) -> Profile:
    """The profile a run trains with: the file, the overrides, train.lr and train.warmup_steps resolved for the run's
    placement and schedule, and every key the run never reads (unread_keys) at its default. So a run records only settings that
    can change its numbers, and a setting that cannot (a growth operator for a joint run) leaves its identity as it
    is: the grid's plan (grid_plan.py) then shares that run between settings instead of training it twice."""
    prof = load_profile(profile, overrides)
    sections = {}
    for key, rule in RULES.items():  # the per-arm keys (train.lr, train.warmup_steps), resolved for this arm
        if rule.per_arm:
            section, name = key.split(".")
            sections.setdefault(section, {})[name] = for_arm(key, getattr(getattr(prof, section), name), norm, schedule)
    for key in unread_keys(prof, norm, schedule):
        section, name = key.split(".")
        sections.setdefault(section, {})[name] = getattr(type(getattr(prof, section))(), name)
    return dataclasses.replace(prof, **{section: dataclasses.replace(getattr(prof, section), **values)
                                        for section, values in sections.items()})


def make_run_spec(profile: str = "tiny", norm: str = "pre", schedule: str = "grow", freeze_prefix: bool = False,
                  match_active_layer_tokens: str | None = None, seed: int = 0, run_name: str = "",
                  force: bool = False, overrides: dict | None = None, processes: int | None = None) -> RunSpec:
    """Validate run_variant's parameters; every error names the parameter and its allowed values. processes: the
    run's data-parallel processes and those of a teacher pass it starts (config.with_processes); None: the
    profile's."""
    _choice("norm", norm, NORMS)
    _choice("schedule", schedule, SCHEDULES)
    for name, value in (("freeze_prefix", freeze_prefix), ("force", force)):
        if not isinstance(value, bool):
            raise ParamError(f"{name}={value!r} must be True or False")
    check_seed("seed", seed)
    if freeze_prefix and schedule != "grow":
        raise ParamError(f"freeze_prefix=True needs schedule='grow' (got schedule={schedule!r})")
    if match_active_layer_tokens in ("", "None", "null"):
        match_active_layer_tokens = None
    if match_active_layer_tokens is not None and schedule != "joint":
        raise ParamError(f"match_active_layer_tokens needs schedule='joint' (got schedule={schedule!r})")
    if overrides is not None and not isinstance(overrides, dict):
        raise ParamError(f"overrides={overrides!r} must be a mapping of dotted keys, e.g. {{'train.lr': 1e-3}}")
    overrides = with_processes(overrides, processes)
    prof = run_profile(profile, norm, schedule, overrides)
    if prof.train.processes > prof.train.batch_size:
        raise ParamError(f"train.processes={prof.train.processes} must be <= train.batch_size="
                         f"{prof.train.batch_size}: every process trains on at least one row of the global batch")
    if len(prof.train.stages) < 2 and schedule == "grow":
        raise ParamError(f"schedule='grow' needs at least two train.stages (got {list(prof.train.stages)})")
    check_step_budget(prof)
    if (why := missing_trackers(prof.train.trackers)) is not None:
        raise ParamError(why)
    match_name = None
    if match_active_layer_tokens is not None:
        match_name = resolve_match_target(prof.name, str(match_active_layer_tokens), seed).name
    run_name = run_name or derive_run_name(norm, schedule, freeze_prefix, match_active_layer_tokens, seed, overrides)
    check_name("run_name", run_name)
    return RunSpec(prof, norm, schedule, freeze_prefix, match_name, seed, run_name, force, dict(overrides or {}))


def step_memory(prof: Profile) -> tuple[int, int]:
    """(batch-array bytes, activation bytes) per position of one training step: a lower bound of what a step holds.

    * batch arrays, as rows_to_batch builds them: tokens and targets (int64), the loss mask (bool), the tail log mass
      (float32) and the top-k ids (int64) and log-probs (float32): 21 + 12k bytes;
    * activations, on CPU only (on a GPU they live in device memory, which is not checked here: asking for it would
      start CUDA in the process that plans the runs): autograd keeps at least each block's input, its two norm
      outputs, its attention output and its MLP's gate, up and product, in float32: 4 (4 d_model + 3 d_ff) bytes
      per block at the final depth.
    The head's logits are not counted: the distillation head holds at most 1,024 positions x vocabulary at a time
    (distill.chunked_head_loss), whatever the batch. Nor are the cache arrays: they are memory-mapped, paged in as
    read and evictable, never required to be resident at once."""
    per_block = 4 * (4 * prof.student.d_model + 3 * prof.student.d_ff)
    device = prof.train.device  # resolve_device's rule, without its error for a device this machine lacks
    on_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    return 21 + 12 * prof.cache.k, per_block * prof.train.stages[-1] if on_cpu else 0


def check_step_budget(prof: Profile) -> None:
    """Reject, before any allocation or directory, a step that cannot run (ParamError naming the keys):

    * more rows per step than the training split has: data.train_tokens // data.seq_len rows (what ensure_data
      packs at most). Batches draws a step's rows from consecutive epochs of the split, so a larger batch would hold
      some rows twice in one step;
    * a step whose memory (step_memory, a lower bound) exceeds the machine's (psutil.virtual_memory().total). No
      safety factor: the rule refuses only a step that cannot fit; one under the total can still fail at allocation
      (other processes, temporaries), as before."""
    tp, dp = prof.train, prof.data
    rows = dp.train_tokens // dp.seq_len
    if tp.batch_size > rows:
        raise ParamError(f"train.batch_size={tp.batch_size} is more rows per step than the training split has: "
                         f"{rows} (data.train_tokens={dp.train_tokens} // data.seq_len={dp.seq_len}); a step "
                         f"would hold rows twice. Lower train.batch_size to at most {rows}, or raise data.train_tokens")
    batch, activations = step_memory(prof)
    need, total = tp.batch_size * dp.seq_len * (batch + activations), psutil.virtual_memory().total
    if need > total:
        raise ParamError(f"train.batch_size={tp.batch_size}: one step needs at least {need / 2**30:.1f} GiB "
                         f"({tp.batch_size} rows x {dp.seq_len} positions x ({batch} bytes of batch arrays + "
                         f"{activations} bytes of activations), spec.step_memory), more than this machine's "
                         f"{total / 2**30:.1f} GiB (psutil.virtual_memory().total); lower train.batch_size")


# ----------------------------------------------------------------------------------------------------------- disk

CHECKPOINT_OVERHEAD = 16 * 1024  # torch.save zip entries, key names, config and extras (measured 6-14 KB, tiny)


def student_param_count(profile, depth: int, vocab_size: int) -> int:
    """Parameters of a student of the profile at a depth over vocab_size ids, for the placement with the most
    (placements differ by their norms: pre's final norm, Peri-LN's output norms), so that the disk estimate bounds
    every run (built on the meta device: no memory)."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    with torch.device("meta"):
        return max(sum(p.numel() for p in Student(StudentConfig.from_params(
            prof.student, vocab_size=vocab_size, n_layers=depth, norm=norm)).parameters()) for norm in NORMS)


def run_disk_estimate(profile, cache=None) -> dict:
    """Bytes of the phase checkpoints a finished run keeps (float32 weights, one file per phase; final.pt is a
    hardlink, last.pt is deleted at the end), per schedule, and the transient peak with last.pt (weights + AdamW's
    two moments of every parameter; an upper bound for frozen-prefix runs). The vocabulary is the one the profile's
    students train with (VocabMap.for_cache: the teacher's, or the corpus ids) on its teacher cache (`cache`, else
    the profile's, opened read-only): the head is most of a small student's weights, so no fixed size will do.
    Without a cache (a clone of committed results) the vocabulary a finished run of the profile recorded is used."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    try:
        if cache is None:
            from ..data.teacher_cache import open_cache
            cache = open_cache(prof)
        vocab_size = VocabMap.for_cache(cache, prof.student.vocab).size
    except FileNotFoundError:
        recorded = [read_json(d / SUMMARY)["vocab"]["size"] for d in finished_runs(prof.name)]
        if not recorded:
            raise
        vocab_size = recorded[0]
    stages = list(prof.train.stages)
    params = {d: student_param_count(prof, d, vocab_size) for d in sorted(set(stages))}
    ckpt = {d: 4 * n + CHECKPOINT_OVERHEAD for d, n in params.items()}
    kept = {"grow": sum(ckpt[d] for d in stages), "joint": ckpt[stages[-1]], "single": ckpt[stages[0]]}
    last = 3 * (ckpt[stages[-1]] - CHECKPOINT_OVERHEAD) + CHECKPOINT_OVERHEAD
    return {"profile": prof.name, "vocab_size": vocab_size,
            "checkpoint_bytes": {str(d): b for d, b in sorted(ckpt.items())},
            "kept_bytes": kept, "peak_extra_last_pt_bytes": last,
            "params": {str(d): n for d, n in params.items()}}
