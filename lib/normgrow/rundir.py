"""The run directory: where a run lives, what its files are called, who may write it, and what summary.json holds.

Every module that reads or writes a run goes through here; nothing else builds these paths or parses these names::

    outputs/runs/<profile>/<run_name>/
        config.json      the run's identity (run_identity), written once when the run starts
        LOCK             held (flock) by the one process writing the run; holds its pid
        metrics.jsonl    one JSON record per line (kind: eval | train | phase_end | growth_eval)
        checkpoints/     last.pt (resume state, deleted when the run finishes), phase<i>_depth<d>.pt (the model at
                         the end of phase i), final.pt (hard link to the last phase checkpoint)
        summary.json     a Summary record, written last: its presence means the run finished; it records what
                         metrics.jsonl held then (its line count and sha256), so a changed file is named as damage
        run.ipynb        the executed notebook (train.run.record_notebook)
        diagnostics.json the run's cached diagnostics (analysis/diagnostics.py)
        slurm.json       under the slurm executor: the id of the run's job; slurm/ its scripts and logs (slurm.py)
    outputs/study/<profile>/   the study's tables, claims, report

Names: a profile name or run name is letters, digits, '.', '_', '-', starting with a letter or digit (so never
'..', never a path separator, never a newline). ``runs_root`` / ``run_path`` / ``study_dir`` check the name and that
the resolved path lies inside outputs/, before anything is created or deleted there.

Identity: config.json holds everything that changes a run's numbers: the profile content after overrides (so a run
with ``overrides: {train.lr: 0.5}`` differs from one without), the run parameters, the teacher cache key and
NUMERICS_VERSION. A directory whose config.json differs is never resumed, counted or overwritten (identity.py: identity_conflict, the one
rule: train/run.py, runner.py, the report). Library versions (torch, python) are recorded beside it as provenance but not compared: a patch release
does not change what a run means, and refusing every run after an upgrade would lose more than it protects.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import fcntl
import os
import re
import shlex
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from .paths import ParamError, check_name, outputs_dir, profile_name
from .utils import atomic_write_json, file_sha256, read_json

NUMERICS_VERSION = 6
"""Bump when a code change changes the numbers a run produces: runs recorded with another value no longer count.
2: every row begins with the document-start token (data.PACK_VERSION 2, one sectioning rule), the attention kernel in
float32 on CPU, fused AdamW.
3: train.compile auto compiles the student's blocks on CPU too (inductor reorders and fuses their arithmetic), and
every evaluation runs through the compiled blocks (the untrained model's and the one just after growth included).
4: evaluations no claim or gate reads cover a fixed subset of the validation split (train.evaluate.evaluation_plan; every
record says full_split); train.compile auto compiles on CPU only in bfloat16 (eager in float32, where it did not pay).
5: a whole-split evaluation takes the subset's values from its own forward (the subset's rows first, in batches of
their own: train.evaluate.evaluate); the untrained model (step 0) and each grown model before its first update are
evaluated on the subset, and a phase records its end's subset value (PhaseSummary.val_ce_subset), which the growth
jump reads.
6: on CPU every evaluation (and boundary record) runs the blocks eager, also where training compiles them
(train.evaluate.eval_stance): evaluations move in their last bits, training does not (the same steps bit for bit)."""

SAME_TRAINING = (5, 6)
"""The numerics versions whose training steps are this version's bit for bit (version 6 changed evaluations only): an
lr sweep's candidate finished under any of them still counts in the choice of this version's lr and warmup
(sweep.earlier_rows, the report's lr panel). Its final val_ce is then read with version 5's compiled evaluation,
which differs from version 6's eager one by at most 1.4e-4 nats on the cpu profile's final checkpoints (docs/LOG.md
2026-12-05), about a tenth of the smallest margin between an arm's optimum and a neighbour (0.0013)."""

SWEEP_RUN_PREFIX = "sweep-"
"""Run names of the lr sweep (sweep.py) start with this; they share outputs/runs/<profile>/ with the study's runs, so
the report and the diagnostics skip them (their results are outputs/sweep/<profile>/)."""

GRID_RUN_PREFIX = "grid-"
"""Run names of the robustness grid (grid.py) that the study does not share start with this; the study's report
skips them like sweep runs (their results are outputs/grid/<profile>/<grid>/)."""

CONFIG, SUMMARY, METRICS, LOCK, NOTEBOOK = "config.json", "summary.json", "metrics.jsonl", "LOCK", "run.ipynb"
SLURM_RECORD, SLURM_DIR = "slurm.json", "slurm"
"""Under the slurm executor (slurm.py): the id of the job a runner submitted for the run (SLURM_RECORD), and the job's
scripts and logs (SLURM_DIR/), in the run directory, where the job writes."""
GROWTH_EVAL = "growth_eval"
"""The metrics.jsonl kind of the extra evaluations after a growth (train.eval_after_growth): drawn with the curves,
never counted by the regime's flatness (regime.CURVE_KINDS), whose points are the whole-split ones of eval_every and
phase ends."""
FLAT_TAIL = 0.2
"""The final fraction of a run's tokens whose improvement tells whether its validation curve has flattened (the
regime gate, analysis.regime.flatness); a run evaluates the whole split at the last point before it
(train.evaluate.evaluation_plan). Here, not in analysis.stats, so that the training loop reads it without pandas."""
GROWTH = "growth"
"""The metrics.jsonl kind of a growth event: the step it happens at (the previous phase's last), the new depth, and
val_ce before (the previous phase's end) and after (the grown model before any update, the whole split)."""
BOUNDARY = "boundary"
"""The metrics.jsonl kind of the residual stream's scale at each evaluation: rms per token group (data.token_classes.GROUPS)
at every block boundary h_0 .. h_N of the model on the fixed batch (student.boundary.boundary_rms); a view for TensorBoard,
never read by a claim (the claims read the phase checkpoints' diagnostics.json)."""
DIAGNOSTICS = "diagnostics.json"  # a run's cached diagnostics (<run>/), and the study's (outputs/study/<profile>/)
CHECKPOINTS, LAST, FINAL = "checkpoints", "last.pt", "final.pt"
PHASE_FILE = re.compile(r"phase(\d+)_depth(\d+)\.pt")


class RunDirError(RuntimeError):
    """A run directory is locked, damaged or holds something else; the message names the file and what to do."""


# ----------------------------------------------------------------------------------------------------------- paths

def inside(root: Path, path: Path) -> Path:
    """path if it resolves (symlinks followed) inside root (resolved); ParamError otherwise. The path is returned as
    given, not resolved, so that messages name a symlinked run directory by the path the user sees."""
    resolved, base = Path(path).resolve(), Path(root).resolve()
    if not resolved.is_relative_to(base):
        raise ParamError(f"{path} resolves to {resolved}, outside {base}; refusing to write or delete there")
    return Path(path)


def set_aside_advice(run_dir: Path) -> str:
    """The advice for a run directory that is damaged or holds another run: move it away or delete it; for a
    symlink, remove the link alone, since the directory it points to may be another run's."""
    run_dir = Path(run_dir)
    if run_dir.is_symlink():
        return f"remove the link (rm {run_dir}); the directory it points to, {os.readlink(run_dir)}, stays as it is"
    return f"move {run_dir} away or delete it"


def runs_base() -> Path:
    """outputs/runs: every profile's runs."""
    return outputs_dir() / "runs"


def runs_root(profile: str) -> Path:
    return inside(outputs_dir(), runs_base() / check_name("profile", profile_name(profile)))


def run_path(profile: str, run_name: str) -> Path:
    return inside(runs_root(profile), runs_root(profile) / check_name("run_name", run_name))


def study_dir(profile: str) -> Path:
    return inside(outputs_dir(), outputs_dir() / "study" / check_name("profile", profile_name(profile)))


def study_diagnostics(profile: str) -> Path:
    """outputs/study/<profile>/diagnostics.json: every run's diagnostics and the claims of observations 4 and 5."""
    return study_dir(profile) / DIAGNOSTICS


def sweep_dir(profile: str, placements: str | None = None) -> Path:
    """outputs/sweep/<profile>/ (the study's placements: the report draws it), or outputs/sweep/<profile>/<placements>/
    for a sweep of other placements (sweep.py names it), so that it never overwrites the study's sweep files."""
    root = outputs_dir() / "sweep" / check_name("profile", profile_name(profile))
    return root if placements is None else inside(root, root / check_name("placements", placements))


def grids_root(profile: str) -> Path:
    """outputs/grid/<profile>/: every grid of a profile."""
    return inside(outputs_dir(), outputs_dir() / "grid" / check_name("profile", profile_name(profile)))


def grid_dir(profile: str, grid: str) -> Path:
    """outputs/grid/<profile>/<grid>/: a grid's tables, page and figure (grid.py)."""
    return grids_root(profile) / check_name("grid", grid)


def seeded_name(variant: str, seed: int) -> str:
    """The study's run name for a variant (a file stem of params/runs) and a seed: 'post-grow', 2 -> 'post-grow-s2'."""
    return f"{variant}-s{seed}"


def is_study_run(run_dir: Path) -> bool:
    return not Path(run_dir).name.startswith((SWEEP_RUN_PREFIX, GRID_RUN_PREFIX))


def phase_checkpoint(run_dir: Path, phase: int, depth: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"phase{phase}_depth{depth}.pt"


def phase_checkpoints(run_dir: Path) -> list[tuple[int, int, Path]]:
    """[(phase, depth, path)] of a run's phase checkpoints, in phase order."""
    found = [(int(m[1]), int(m[2]), p) for p in (Path(run_dir) / CHECKPOINTS).glob("phase*_depth*.pt")
             if (m := PHASE_FILE.fullmatch(p.name))]
    return sorted(found)


def is_finished(run_dir: Path) -> bool:
    return (Path(run_dir) / SUMMARY).is_file()


def finished_runs(profile: str) -> list[Path]:
    """The study's finished run directories of a profile (sweep and grid runs excluded), by name."""
    root = runs_root(profile)
    return sorted(p.parent for p in root.glob(f"*/{SUMMARY}") if is_study_run(p.parent))


def unfinished_runs(profile: str) -> list[str]:
    """Names of the study's run directories without summary.json (running, interrupted or failed)."""
    root = runs_root(profile)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and is_study_run(p) and not is_finished(p)) \
        if root.is_dir() else []


# -------------------------------------------------------------------------------------------------------- identity

def read_identity(run_dir: Path) -> dict | None:
    """config.json of a run (None when absent); a damaged one is a RunDirError naming it."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        return None
    try:
        return read_json(path)
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path} is damaged ({err}); the run's parameters are unknown: "
                          f"{set_aside_advice(run_dir)}") from err


# --------------------------------------------------------------------------------------------------------- summary

@dataclass(frozen=True)
class PhaseSummary:
    """The model at the end of one phase (a stage of the schedule).

    val_ce_after_growth: the validation CE of the model just after this phase's growth step, before any update
    (train.train_phase): on the fixed subset from numerics version 5, on the whole split before; None for the first
    phase and for joint and single runs, and in summaries written before it was recorded. The loss before growth is
    the previous phase's end, measured on the same rows by the same model, so it is not measured again:
    val_ce_subset, its value on the subset's rows (numerics version 5 on; None before, when the jump reads val_ce)."""
    phase: int
    depth: int
    step: int
    tokens: int
    active_layer_tokens: int
    trainable_layer_tokens: int
    val_ce: float
    val_kd_ce: float
    val_ce_after_growth: float | None = None
    val_ce_subset: float | None = None

    def jump_base(self) -> float:
        """The loss before the next phase's growth on the rows its val_ce_after_growth reads (val_ce_subset where
        recorded, else the whole split's val_ce)."""
        return self.val_ce if self.val_ce_subset is None else self.val_ce_subset


@dataclass(frozen=True)
class Summary:
    """summary.json: the finished run's parameters, final numbers and one PhaseSummary per phase.

    Read and written only through read_summary / write_summary: a missing, unknown or mistyped field is an error
    naming the file, so a renamed field cannot silently become a NaN column in a table. The one exception is a field
    with a default (PhaseSummary.val_ce_after_growth, val_ce_subset): added after summaries had been written without
    it, it may be absent and then reads as its default (so are eval_s and checkpoint_s)."""
    run_name: str
    profile: str
    norm: str
    schedule: str
    freeze_prefix: bool
    match_active_layer_tokens: str | None  # run name of the budget donor (same profile)
    seed: int
    teacher_key: str
    depth: int
    val_ce: float
    val_kd_ce: float
    tokens: int
    active_layer_tokens: int
    trainable_layer_tokens: int
    steps: int
    wall_s: float
    train_tok_s: float
    n_params: int
    device: str
    dtype: str
    vocab: dict  # {mode, size, teacher_mass_outside}
    phases: tuple[PhaseSummary, ...]
    # wall seconds of wall_s spent in evaluations and in writing checkpoints (None: written before they were recorded)
    eval_s: float | None = None
    checkpoint_s: float | None = None
    # what metrics.jsonl held when the run finished: {"lines", "sha256"} (metrics_record); None: not recorded (runs
    # finished before it was, the committed ones included), which count as before
    metrics: dict | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"phases": [dataclasses.asdict(p) for p in self.phases]}


_TYPES = {"str": (str,), "bool": (bool,), "int": (int,), "float": (int, float), "dict": (dict,),
          "str | None": (str, type(None)), "float | None": (int, float, type(None)), "dict | None": (dict, type(None))}


def _typed(cls, raw, where: str):
    if not isinstance(raw, dict):
        raise RunDirError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    names = [f.name for f in fields(cls)]
    required = [f.name for f in fields(cls) if f.default is dataclasses.MISSING]  # a field with a default came later
    missing, unknown = [n for n in required if n not in raw], sorted(set(raw) - set(names))
    if missing or unknown:
        raise RunDirError(f"{where}: missing field(s) {missing or 'none'}, unknown field(s) {unknown or 'none'}; "
                          f"{cls.__name__} has {', '.join(names)}")
    for f in fields(cls):
        if f.name not in raw:
            continue
        allowed, value = _TYPES.get(str(f.type)), raw[f.name]
        if allowed and (not isinstance(value, allowed) or (bool not in allowed and isinstance(value, bool))):
            raise RunDirError(f"{where}: field {f.name}={value!r} is not a {f.type}")
    return raw


def read_summary(run_dir: Path) -> Summary:
    path = Path(run_dir) / SUMMARY
    try:
        raw = read_json(path)
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path} cannot be read ({err}); rerun the run with force=True") from err
    _typed(Summary, raw, str(path))
    if not isinstance(raw["phases"], list) or not raw["phases"]:
        raise RunDirError(f"{path}: field phases must be a non-empty list")
    phases = tuple(PhaseSummary(**_typed(PhaseSummary, p, f"{path} phases[{i}]")) for i, p in enumerate(raw["phases"]))
    return Summary(**(raw | {"phases": phases}))


def read_metrics(run_dir: Path, note: bool = True) -> list[dict]:
    """The records of a run's metrics.jsonl in file order, one per (kind, step): a record written again for the same
    step (a resumed run repeats the steps after its checkpoint; train.MetricsLog truncates the file to the
    checkpoint's lines first, so this matters only for a file written otherwise) replaces the earlier one. A torn last
    line (a writer killed mid-line, or one still writing it) costs that line only, with a note (note=False: without);
    an unreadable line elsewhere is a RunDirError
    naming the file and the line. No file: []. Every reader of metrics.jsonl reads it here."""
    path = Path(run_dir) / METRICS
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    except OSError as err:
        raise RunDirError(f"{path} cannot be read ({err})") from err
    records: dict[tuple, dict] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if number == len(lines):
                if note:
                    print(f"note: {path}: last line {number} is incomplete (a writer stopped mid-line); skipped")
                break
            raise RunDirError(f"{path}: line {number} is not JSON; the file is damaged") from None
        records.pop((record.get("kind"), record.get("step")), None)  # the later record, at its later place
        records[(record.get("kind"), record.get("step"))] = record
    return list(records.values())


def runner_lock() -> RunLock:
    """The lock of the study and grid runners on the whole outputs root (outputs/LOCK): two runners on one outputs
    would each train, lock and count the same runs (one reports the other's runs as failed, both build the teacher
    cache), so the second is refused at start, naming the first's pid and command."""
    return RunLock(outputs_dir())


def metrics_record(run_dir: Path) -> dict:
    """What a run's metrics.jsonl holds now: {"lines": its line count, "sha256": of its bytes} (Summary.metrics)."""
    path = Path(run_dir) / METRICS
    return {"lines": path.read_bytes().count(b"\n"), "sha256": file_sha256(path)}


def check_metrics(run_dir: Path, summary: Summary) -> None:
    """RunDirError naming metrics.jsonl when it no longer holds what summary.json recorded at the end of the run
    (lines cut, added or changed): the run's curves are not those it finished with, so it is damaged. A summary
    without the record (written before it existed) is not checked."""
    if summary.metrics is None:
        return
    path = Path(run_dir) / METRICS
    try:
        have = metrics_record(run_dir)
    except OSError as err:
        raise RunDirError(f"{path} cannot be read ({err}); summary.json recorded {summary.metrics['lines']} lines: "
                          f"the run is damaged: {set_aside_advice(run_dir)}") from err
    if have != summary.metrics:
        raise RunDirError(f"{path} holds {have['lines']} lines (sha256 {have['sha256'][:12]}), but summary.json "
                          f"recorded {summary.metrics['lines']} lines (sha256 {summary.metrics['sha256'][:12]}) when "
                          f"the run finished: its curves were changed since; {set_aside_advice(run_dir)}")


def check_numbers(run_dir: Path, summary: Summary) -> None:
    """RunDirError naming summary.json when its numbers are not those its metrics.jsonl's phase_end records hold
    (each phase's val_ce and val_kd_ce, and the final ones the last phase's): every table counts summary.json, so a
    number edited there would change a verdict unnoticed. A run without phase_end records is not checked."""
    path = Path(run_dir) / METRICS
    try:
        ends = [json.loads(line) for line in path.read_bytes().splitlines() if b'"phase_end"' in line]
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path} cannot be read ({err}): the run is damaged: {set_aside_advice(run_dir)}") from err
    ends = [r for r in ends if r.get("kind") == "phase_end"]
    if not ends:
        return
    if len(ends) != len(summary.phases):
        raise RunDirError(f"{Path(run_dir) / SUMMARY} records {len(summary.phases)} phases, {path} {len(ends)} phase "
                          f"ends: the summary is not this run's; {set_aside_advice(run_dir)}")
    recorded = [(p.val_ce, p.val_kd_ce) for p in summary.phases] + [(summary.val_ce, summary.val_kd_ce)]
    expected = [(r.get("val_ce"), r.get("val_kd_ce")) for r in ends]
    expected.append(expected[-1])
    if recorded != expected:
        where = next(i for i, (a, b) in enumerate(zip(recorded, expected)) if a != b)
        what = "the final" if where == len(recorded) - 1 else f"phase {where}'s"
        raise RunDirError(f"{Path(run_dir) / SUMMARY}: {what} val_ce / val_kd_ce {recorded[where]} is not what "
                          f"{path} recorded at the phase end, {expected[where]}: "
                          f"the summary was changed since the run finished; {set_aside_advice(run_dir)}")


def read_finished(run_dir: Path) -> tuple[Summary, dict]:
    """A finished run's summary and identity. A run counts as finished only when both read and validate, its
    metrics.jsonl is what summary.json recorded (check_metrics) and its numbers are metrics.jsonl's (check_numbers):
    a missing config.json, a summary.json or
    config.json that does not read or validate, or a changed metrics.jsonl is a RunDirError naming the file (the
    run is damaged: its numbers, its parameters or its curves are unknown)."""
    summary = read_summary(run_dir)
    check_metrics(run_dir, summary)
    check_numbers(run_dir, summary)
    identity = read_identity(run_dir)
    if identity is None:
        raise RunDirError(f"{Path(run_dir) / CONFIG} is missing; the run's parameters are unknown: "
                          f"{set_aside_advice(run_dir)}")
    return summary, identity


def run_machine(identity: dict) -> str:
    """The machine a run trained on, as its config.json's environment recorded it (utils.machine_description): the
    GPU's name where it had one, else the CPU's model. Records that pool runs name it (sweep.csv, the grid's
    runs.csv, the study's summary.csv): bf16 matmuls round differently from one CPU to another, the teacher cache
    built there included, so runs of one record trained on two machines differ by that rounding as well as by their
    parameters."""
    environment = identity.get("environment", {})
    return environment.get("gpu") or environment.get("cpu") or "not recorded"


def machine_hours(rows) -> dict[str, dict]:
    """{machine: {"runs", "run_hours"}} over rows that carry "machine" and "wall_s" (a run's wall seconds): how
    many runs each machine trained and their wall time summed, in hours (core-hours where each run had one core, as
    on 2 cores two at a time), machines in order of first appearance."""
    out: dict[str, dict] = {}
    for row in rows:
        entry = out.setdefault(row["machine"], {"runs": 0, "run_hours": 0.0})
        entry["runs"] += 1
        entry["run_hours"] += row["wall_s"] / 3600
    return out


def write_summary(run_dir: Path, summary: Summary) -> None:
    _typed(Summary, summary.to_json(), "summary")
    atomic_write_json(Path(run_dir) / SUMMARY, summary.to_json())


# ------------------------------------------------------------------------------------------------------------ lock

def writable_dir(folder: Path) -> Path:
    """folder, created when absent; RunDirError naming it when this process cannot write there (a read-only runs/
    folder is one error line before any kernel starts, not a failed run each)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise RunDirError(f"{folder} cannot be created ({err.strerror}); make its parent writable or set "
                          "NORMGROW_OUTPUTS to a writable folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RunDirError(f"{folder} is not writable (a read-only mount, or another user's); make it writable or "
                          "set NORMGROW_OUTPUTS to a writable folder")
    return Path(folder)


class RunLock:
    """One writer per run directory: an exclusive flock on <run_dir>/LOCK, which holds the writer's pid and command.
    The study and the grid runners take one on the outputs root too (runner_lock): one runner per outputs at a time.

    flock is released by the kernel when its holder dies, so a lock left by a killed process is simply taken over;
    a live holder makes acquire() raise RunDirError with its pid. The LOCK file itself stays (removing it would let
    a second writer lock a new inode while the first still holds the old one)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        writable_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise RunDirError(f"{self.path.parent} is being written by another process (pid {holder}; {self.path}); "
                              "wait for it to finish or stop it, then run again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {shlex.join(sys.argv)}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# ----------------------------------------------------------------------------------------------------------- disk

def run_disk_bytes(run_dir) -> dict:
    """Bytes on disk of a run: checkpoints (hardlinks counted once) and everything."""
    seen, ckpt, total = set(), 0, 0
    for p in Path(run_dir).rglob("*"):
        if not p.is_file():
            continue
        st = p.stat()
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_size
        if p.parent.name == "checkpoints":
            ckpt += st.st_size
    return {"checkpoints": ckpt, "total": total}
