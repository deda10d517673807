"""The runner of every set of runs: the study (study.py), a sweep (sweep.py) and a grid (grid.py, the regime ladder
among them) each define a list of Jobs, and everything after that happens here, the same way for all three, so they cannot
diverge.

Order: the teacher cache is built once before any run (ensure_teacher_cache; a grid builds one per distinct data);
plan_jobs sorts the jobs into refused (a directory holding another run: identity.directory_conflict, the one identity
rule), damaged (a summary.json that does not read), finished (skipped) and pending; execute_runs, the one job loop
of both executors, trains the pending ones, a matched run only once its donor has finished, and each interrupted
run resumes from its last checkpoint
(train.run does that; nothing here tracks progress but the run directories). report_failures names every failed,
refused, skipped or damaged run, and runner_exit turns the outcome into the exit code of every command.

Choices:
  - Runs execute as notebooks/run_variant.ipynb on the run's validated spec (run_spec), by the executor that
    params/executors.yaml or --executor chooses (load_executor, validated once): ``local`` (LocalRuns), in worker
    processes, ``jobs`` at a time (params/study.yaml per profile, or --jobs), each kernel with cores / jobs threads
    when jobs > 1; ``slurm`` (slurm.SlurmRuns), each run one SLURM job. The kernel's executed notebook is the run's record
    (run.ipynb), and a kernel that dies takes only its run with it.
  - Stopping: under the local executor SIGTERM and Ctrl-C stop every run (they resume from their last checkpoint)
    and exit 130; a worker dies with the runner even on SIGKILL (PR_SET_PDEATHSIG), so no orphan keeps training a
    run a restarted runner would resume. SLURM jobs outlive their runner, which a restart follows (slurm.py).
  - A failing run is reported with the path of its executed notebook; the other runs go on (runs that depend on it
    are skipped), and the runner exits 1.
"""
from __future__ import annotations

import errno
import importlib.util
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import psutil
from tqdm.auto import tqdm

from .config import ParamError, read_study_file, read_yaml
from .paths import NOTEBOOKS, PARAMS_DIR, REPO_ROOT
from .progress import RUNNER_KERNEL
from .ranks import outside_launch
from .schema import AT_LEAST_ONE, AT_LEAST_ZERO, Int, Str, in_range, one_of, section, validate
from .identity import directory_conflict
from .rundir import (NOTEBOOK, RunDirError, is_finished, read_finished, read_identity,
                     read_metrics, run_path, runs_root, writable_dir)
from .train.spec import RunSpec, make_run_spec
from .utils import descendants, execute_notebook, stop_processes


EXECUTORS = ("local", "slurm")
EXECUTORS_FILE = PARAMS_DIR / "executors.yaml"


PARTITION = in_range("a partition's name or null (the default)", lambda v: bool(v.strip()))


@section
class SlurmParams:
    """params/executors.yaml's slurm section (its comments say what each is)."""
    partition: Annotated[Str, PARTITION] | None = None
    time_limit_min: Annotated[Int, AT_LEAST_ONE] = 240
    cpus_per_run: Annotated[Int, AT_LEAST_ONE] = 2
    gpus_per_run: Annotated[Int, AT_LEAST_ZERO] = 0
    in_flight: Annotated[Int, AT_LEAST_ONE] = 16
    requeues: Annotated[Int, AT_LEAST_ZERO] = 3


@section
class ExecutorParams:
    """How a runner executes its runs: ``local`` (worker processes) or ``slurm`` (slurm.py), and the slurm jobs'
    parameters."""
    executor: Annotated[Str, one_of(EXECUTORS)] = "local"
    slurm: SlurmParams = SlurmParams()


@dataclass(frozen=True)
class Job:
    """One run of a set: its name, its run_variant.ipynb parameters besides profile and processes (seed, run_name,
    norm, schedule, overrides, ...), the identity its directory must hold (spec.RunSpec.identity), and the run whose
    budget it takes, which must finish first."""
    name: str
    params: dict
    identity: dict
    depends_on: str | None = None

    def spec(self, profile: str, processes: int | None) -> RunSpec:
        """The validated run (spec.make_run_spec), made when the job starts: a matched run's donor is resolved only
        once it has finished. Its kernel gets it whole (RunSpec.to_json), so the kernel reads no profile file."""
        spec = make_run_spec(profile=profile, processes=processes, **self.params)
        writable_dir(spec.dir)
        return spec


# ------------------------------------------------------------------------------------------------- parameters

def parse_seeds(words: list[str]) -> list[int]:
    """The seeds of --seeds: each word a seed (``3``) or an inclusive range (``0-5``: seeds 0 to 5), in order, e.g.
    ["0-2", "7"] -> [0, 1, 2, 7]. A word of another form, or a range whose end is below its start, is a ParamError
    naming the word. Repeats are the command's to drop; the range [0, 2**32) is checked with every run's parameters
    (spec.make_run_spec)."""
    seeds = []
    for word in words:
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", word.strip())
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ParamError(f"--seeds {word!r} is neither a seed (an integer >= 0, e.g. 3) nor a range first-last "
                             f"with first <= last (e.g. 0-5)")
        first = int(m.group(1))
        seeds += range(first, int(m.group(2) or first) + 1)
    return seeds


def default_jobs(profile: str, path: Path | None = None) -> int:
    """Runs executed at once for this profile: params/study.yaml's ``jobs: {profile: n}``; 1 when not listed."""
    return read_study_file(path).jobs.get(profile, 1)


def load_executor(flags: dict | None = None, path: Path = EXECUTORS_FILE) -> ExecutorParams:
    """params/executors.yaml with the command line's flags over it (flags: executor, or a key of the slurm section,
    None where not given), validated: every error names the key and what is allowed."""
    raw = dict(read_yaml(path) or {})
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    if "executor" in given:
        raw["executor"] = given.pop("executor")
    if given and isinstance(raw.get("slurm") or {}, dict):
        raw["slurm"] = {**(raw.get("slurm") or {}), **given}
    params = validate(ExecutorParams, raw, str(path))
    if params.executor == "slurm":
        missing = [c for c in ("sbatch", "squeue") if shutil.which(c) is None]
        missing += [] if importlib.util.find_spec("submitit") else ["the Python package submitit"]
        if missing:
            raise ParamError(f"executor=slurm needs SLURM's sbatch and squeue on PATH and submitit; missing: "
                             f"{', '.join(missing)}")
    return params


def executor_of(args) -> ExecutorParams:
    """The executor of a command's arguments (cli.add_executor's flags) over params/executors.yaml."""
    return load_executor({"executor": args.executor, "partition": args.partition, "time_limit_min": args.time_limit,
                          "cpus_per_run": args.cpus_per_run, "gpus_per_run": args.gpus_per_run,
                          "in_flight": args.in_flight})


def git_commit() -> str | None:
    """HEAD of the repository, which every record of a set of runs carries; None outside a git checkout.
    Uncommitted edits are not captured."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# ------------------------------------------------------------------------------------------------ teacher cache

class Poller:
    """Calls update() every few seconds on a daemon thread, so progress stays live while a notebook executes in
    its kernel (the kernels' own progress bars are not shown)."""

    def __init__(self, update, interval: float = 5.0):
        self.update, self.interval = update, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.update()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _show_cache_build(bar) -> None:
    """Teacher tokens done / total of the cache build in progress (the progress files of its ranks, in its temp
    directory)."""
    from .data.teacher import teacher_root
    from .data.teacher_cache import PROGRESS_FILES
    try:
        latest = max(teacher_root().glob(".tmp-*/"), key=lambda p: p.stat().st_mtime, default=None)
        ranks = [json.loads(p.read_text()) for p in latest.glob(PROGRESS_FILES)] if latest is not None else []
        if ranks:
            bar.total, bar.n = ranks[0]["tokens_total"], sum(r["tokens_done"] for r in ranks)
    except (OSError, ValueError):  # renamed away as the build finished, or a file being replaced
        return
    bar.refresh()


def build_teacher_cache(profile: str, out_dir: Path, processes: int | None = None, overrides: dict | None = None,
                        notebook: str = "00_teacher.ipynb") -> None:
    """Execute notebooks/00_teacher.ipynb (into out_dir/notebook) on the profile with dotted overrides, with a live
    bar of the teacher's pass over the corpus."""
    bar = tqdm(desc="teacher cache", unit="tok", file=sys.stdout)
    poller = Poller(lambda: _show_cache_build(bar))
    try:
        execute_notebook(NOTEBOOKS / "00_teacher.ipynb", out_dir / notebook,
                         {"profile": profile, "processes": processes, "overrides": overrides or {}})
        bar.n = bar.total or 0  # done (the last poll may predate the last batches)
    finally:
        poller.close()
        bar.close()


def ensure_teacher_cache(prof, out_dir: Path, processes: int | None = None, overrides: dict | None = None,
                         notebook: str = "00_teacher.ipynb", executor: ExecutorParams = ExecutorParams()
                         ) -> tuple[str | None, str | None]:
    """(key, job) of the teacher cache of prof (the profile with the dotted overrides it was loaded with). A complete
    cache: (its key, None). Else it is built by notebooks/00_teacher.ipynb, executed into out_dir/notebook: here and
    now under the local executor, (its key, None); under slurm as one job the runs wait for, (None, the job's id): its
    key exists once the job has run, and the runs' kernels check it (train.resume.prepare_run_dir). The first step of
    every runner, so it first checks that the profile's runs folder is writable (rundir.writable_dir)."""
    from .data.teacher_cache import open_cache
    writable_dir(runs_root(prof.name))
    try:
        key = open_cache(prof).key
        print(f"teacher cache: complete, reused (outputs/teacher/{key})")
        return key, None
    except FileNotFoundError:
        if executor.executor == "slurm":
            from .slurm import cache_job
            return None, cache_job(prof.name, out_dir, processes, overrides, notebook, executor.slurm)
        print(f"teacher cache: building (notebooks/00_teacher.ipynb{' with ' + str(overrides) if overrides else ''})")
        build_teacher_cache(prof.name, out_dir, processes, overrides, notebook)
        return open_cache(prof).key, None


# ------------------------------------------------------------------------------------------------------- the plan

def plan_jobs(profile: str, jobs: list[Job], teacher_keys: dict[str, str] | None = None
              ) -> tuple[set[str], dict[str, str], list[Job]]:
    """(done, failed, pending) of jobs. failed: a directory holding another run (identity.directory_conflict against
    the job's identity and, when teacher_keys names it, the key of the cache it trains on) is refused, never counted
    nor resumed; a finished run whose summary.json or config.json does not read or validate (rundir.read_finished) is
    damaged: neither counted nor retrained, since its directory may hold results someone wants to look at. done: the
    finished runs; pending: the rest, in the given order."""
    done, failed = set(), {}
    for job in jobs:
        run_dir = run_path(profile, job.name)
        key = (teacher_keys or {}).get(job.name)
        conflict = directory_conflict(run_dir, job.identity | ({"teacher_key": key} if key else {}))
        if conflict:
            failed[job.name] = conflict
            print(f"refused {job.name}: {conflict}")
        elif is_finished(run_dir):
            try:
                read_finished(run_dir)
                done.add(job.name)
            except RunDirError as err:
                failed[job.name] = f"damaged: {err}"
                print(f"damaged {job.name}: {err}")
    other_cache = sorted(n for n in done if teacher_keys and teacher_keys.get(n)
                         and read_identity(run_path(profile, n)).get("teacher_key") != teacher_keys[n])
    if other_cache:
        print(f"note: {len(other_cache)} finished run(s) were made on another teacher cache of this profile (the dtype "
              f"`auto` resolved to where they ran); kept as results: {' '.join(other_cache)}")
    return done, failed, [job for job in jobs if job.name not in done and job.name not in failed]


def run_jobs(profile: str, jobs: list[Job], teacher_keys: dict[str, str | None] | None, parallel: int,
             processes: int | None, desc: str, executor: ExecutorParams = ExecutorParams(),
             after: dict[str, str] | None = None) -> tuple[set[str], dict[str, str]]:
    """Plan the jobs (plan_jobs), say how many are finished, and execute the pending ones by the one job loop
    (execute_runs): here, ``parallel`` at a time (LocalRuns), or as SLURM jobs (slurm.SlurmRuns; after: run name ->
    the teacher cache job it waits for). (done, failed) with why for every run that failed, was refused, skipped or
    is damaged."""
    done, failed, pending = plan_jobs(profile, jobs, teacher_keys)
    if executor.executor == "slurm":
        from . import slurm
        runs = slurm.SlurmRuns(profile, executor.slurm, processes, after)
        how = f" as jobs of {slurm.describe(executor.slurm)}"
    else:
        runs, how = LocalRuns(profile, parallel, processes), f", {parallel} at a time" if parallel > 1 else ""
    print(f"runs: {len(done)} of {len(jobs)} finished, {len(pending)} to run{how}")
    execute_runs(runs, pending, desc, done, failed, len(done) + len(failed), len(jobs))
    return done, failed


# ------------------------------------------------------------------------------------------------------ execution

def _error_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[-1] if text else ''}"


def _worker_init(threads: int | None) -> None:
    """In each worker: its thread count (inherited by the kernels it starts), and its fate tied to the runner's: the
    kernel sends SIGTERM when the runner dies, even by SIGKILL (Linux PR_SET_PDEATHSIG), and SIGTERM stops the
    worker's kernels before the worker exits, so no orphan keeps training a run a restarted runner would resume."""
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    os.environ[RUNNER_KERNEL] = "1"  # its kernels' bars stay in their notebooks (progress.progress_bar)
    if sys.platform == "linux":
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    signal.signal(signal.SIGTERM, _stop_worker)


def kill_descendants() -> None:
    """Terminate every descendant of this process (workers, their kernels), then kill what is left (utils.descendants:
    multiprocessing's resource trackers excepted, which is what keeps a SIGTERM's log free of tracebacks)."""
    stop_processes(descendants(psutil.Process()))


def _stop_worker(signum, frame) -> None:
    kill_descendants()
    os._exit(128 + signum)


def _execute_run(notebook: Path, output: Path, parameters: dict) -> str | None:
    """In a worker process: execute one run's notebook; the error line on failure (exceptions do not cross)."""
    try:
        execute_notebook(notebook, output, parameters)
        return None
    except Exception as err:  # papermill raises PapermillExecutionError with the cell's traceback
        return _error_line(err)


def _run_steps(running: dict[str, Path]) -> str:
    """'name step N, ...' for the running runs, from the last record of each run's metrics.jsonl."""
    shown = []
    for name, run_dir in list(running.items()):
        try:
            records = read_metrics(run_dir, note=False)  # the last line may be being written
        except RunDirError:
            records = []
        shown.append(name + (f" step {records[-1].get('step')}" if records else ""))
    return ", ".join(shown)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def execute_runs(runs, pending: list[Job], desc: str, done: set[str], failed: dict[str, str], initial: int = 0,
                 total: int | None = None) -> None:
    """The one job loop of every executor (runs: LocalRuns or slurm.SlurmRuns): start each pending job while fewer
    than runs.capacity are in flight, a matched run only once its donor is in ``done`` (skipped when its donor
    failed); as each ends, add it to done, or to failed with why. An executor that resubmits (runs.resubmits)
    starts a job that ended without finishing its run once more (the run resumes). Interrupted (SIGTERM, Ctrl-C),
    the executor says what becomes of the runs in flight, and KeyboardInterrupt goes on."""
    pending, again = list(pending), set()
    bar = tqdm(total=len(pending) + initial if total is None else total, initial=initial, desc=desc, unit="run",
               file=sys.stdout)
    runs.open(bar)
    try:
        while pending or runs.flying:
            for r in list(pending):
                if r.depends_on in failed:
                    why = "is damaged" if failed[r.depends_on].startswith("damaged") else "failed"
                    failed[r.name] = f"skipped: its budget donor {r.depends_on} {why}"
                    print(f"\nskipped {r.name}: its budget donor {r.depends_on} {why}")
                elif len(runs.flying) < runs.capacity and (r.depends_on is None or r.depends_on in done):
                    try:
                        runs.start(r)
                    except ParamError as err:  # its spec: e.g. a donor whose summary no longer reads
                        failed[r.name] = str(err)
                        print(f"\nFAILED {r.name}: {err}")
                else:
                    continue
                pending.remove(r)
                if r.name in failed:
                    bar.update(1)
            if not runs.flying:  # the last runs were skipped
                if pending:  # cannot happen: every command puts each donor among its jobs, ahead of its runs
                    raise RuntimeError(f"no run can start: {[r.name for r in pending]} wait on missing donors")
                break
            for r, error in runs.ended():
                if error is None:
                    done.add(r.name)
                elif runs.resubmits and r.name not in again:
                    again.add(r.name)
                    print(f"\n{r.name}: {error}; submitted again (it resumes)")
                    pending.insert(0, r)
                    continue
                else:
                    failed[r.name] = runs.failure(r.name, error)
                    print(f"\nFAILED {r.name}: {error}" + (f"\n  {failed[r.name]}" if failed[r.name] != error else ""))
                bar.update(1)
    except KeyboardInterrupt:
        runs.interrupted(desc)
        raise
    finally:
        runs.close()
        bar.close()


class LocalRuns:
    """The local executor: each run's notebook in a worker process of a pool, ``jobs`` at a time, each with cores /
    jobs threads when jobs > 1; a live bar shows the running runs' steps. SIGTERM and Ctrl-C stop every run (they
    resume from their last checkpoint)."""
    resubmits = False

    def __init__(self, profile: str, jobs: int, processes: int | None):
        self.profile, self.capacity, self.processes = profile, jobs, processes
        self.flying: dict[str, tuple[Job, Path]] = {}  # run name -> (job, run directory) while its notebook executes
        self.futures: dict = {}  # future -> run name

    def open(self, bar) -> None:
        threads = max(1, (os.cpu_count() or 1) // self.capacity) if self.capacity > 1 else None
        self.previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        self.pool = ProcessPoolExecutor(self.capacity, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_worker_init, initargs=(threads,))
        self.poller = Poller(lambda: bar.set_postfix_str(_run_steps({n: d for n, (_, d) in self.flying.items()})))

    def start(self, job: Job) -> None:
        spec = job.spec(self.profile, self.processes)
        notebook = spec.dir / NOTEBOOK
        future = self.pool.submit(_execute_run, NOTEBOOKS / "run_variant.ipynb", notebook,
                                  {"run_spec": spec.to_json()})
        self.futures[future] = job.name
        self.flying[job.name] = (job, notebook.parent)

    def ended(self) -> list[tuple[Job, str | None]]:
        """The jobs whose notebooks have ended (waiting for one at least), each with its error line or None."""
        finished, _ = wait(self.futures, return_when=FIRST_COMPLETED)
        return [(self.flying.pop(self.futures.pop(f))[0], f.result()) for f in finished]

    def failure(self, name: str, error: str) -> str:
        notebook = run_path(self.profile, name) / NOTEBOOK
        return f"executed notebook {notebook}" if notebook.exists() else error

    def interrupted(self, desc: str) -> None:
        print(f"\n{desc} interrupted: stopping its runs (they resume from their last checkpoint next time)")
        kill_descendants()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        signal.signal(signal.SIGTERM, self.previous)
        self.poller.close()


def execute_notebooks(names: list[str], out_dir: Path, parameters: dict, failed: dict[str, str]) -> None:
    """Execute notebooks/<name>.ipynb (those present) into out_dir, in order, after the runs (the study's diagnostics
    and summary); a failing one goes to failed with its executed notebook, and the next still executes."""
    for name in names:
        if (NOTEBOOKS / f"{name}.ipynb").exists():
            print(f"{name}: notebooks/{name}.ipynb -> {out_dir / (name + '.ipynb')}")
            try:
                execute_notebook(NOTEBOOKS / f"{name}.ipynb", out_dir / f"{name}.ipynb", parameters)
            except Exception as err:
                failed[name] = f"executed notebook {out_dir / (name + '.ipynb')}"
                print(f"FAILED {name}: {_error_line(err)}\n  {failed[name]}")


# ----------------------------------------------------------------------------------------------------------- exit

def report_failures(failed: dict[str, str]) -> int:
    """Print every failed, refused, skipped or damaged run with why; the runner's exit code (1 if any, else 0)."""
    if failed:
        print("failures:\n" + "\n".join(f"  {name}: {why}" for name, why in failed.items()))
    return 1 if failed else 0


FULL_DISK_BYTES = 64 * 2 ** 20
"""Free bytes under which a failed write is put down to a full disk (disk_full): a checkpoint of the cpu student is
~3.5 MB, a teacher checkpoint ~0.5 GB; writers that fail for lack of space do not all say so (torch.save: 'file write
failed')."""


def disk_full(err: BaseException) -> str | None:
    """Why err is a full disk, or None: an OSError of ENOSPC or EDQUOT anywhere in its chain, or any error while
    the outputs folder has under FULL_DISK_BYTES free."""
    from .paths import outputs_dir
    chain = err
    while chain is not None:
        if isinstance(chain, OSError) and chain.errno in (errno.ENOSPC, errno.EDQUOT):
            break
        chain = chain.__cause__ or chain.__context__
    try:
        root = outputs_dir()
        free = shutil.disk_usage(root if root.exists() else root.parent).free
    except (OSError, ParamError):
        return None
    if chain is None and free >= FULL_DISK_BYTES:
        return None
    return (f"the disk of {root} is full ({free / 2 ** 20:.1f} MiB free) and a write failed: "
            f"{str(err).splitlines()[-1] if str(err) else type(err).__name__}; free space or choose another "
            "folder (--outputs or NORMGROW_OUTPUTS), and run again: a run resumes from its last checkpoint")


def runner_exit(work, input_errors: tuple = ()) -> int:
    """A command's exit code: work()'s (None: 0), 2 with one `error: ...` line for a ParamError or RunDirError (bad
    input, a locked or damaged directory) or one of input_errors (what a command's bad input raises besides), 1 with
    one `error: ...` line for a full disk (disk_full), 130 for Ctrl-C or SIGTERM. Every command line shares it
    (study, sweep, grid, python -m normgrow)."""
    try:
        return work() or 0
    except (ParamError, RunDirError, *input_errors) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        why = disk_full(err)
        if why is None:
            raise
        print(f"error: {why}", file=sys.stderr)
        return 1


def record_notebook(spec: RunSpec) -> Path | None:
    """Give a finished run its executed notebook, ``<run>/run.ipynb``, when it has none; the path written, or None.

    A run started by the study runner has it already (papermill writes its output there from the first cell on); one
    started from ``python -m normgrow run``, from JupyterLab or by papermill into another path gets it here:
    run_variant.ipynb executed on the same parameters, which finds the run finished and draws it (seconds, no
    training). So every run directory holds its notebook, whichever way the run was started."""
    path = spec.dir / NOTEBOOK
    if path.exists() or not is_finished(spec.dir):
        return None
    with outside_launch():  # under accelerate launch, the kernel is not one more rank of this job
        execute_notebook(NOTEBOOKS / "run_variant.ipynb", path, {"run_spec": spec.to_json()})
    return path
