"""The study runner: ``python -m normgrow.study --profile cpu`` (what ``make study`` calls).

Order: notebooks/00_teacher.ipynb (skipped when the teacher cache is complete), then every run of
params/study.yaml x seeds through notebooks/run_variant.ipynb into outputs/runs/<profile>/<run>/run.ipynb,
matched runs after the runs whose budget they take, then notebooks/diagnostics.ipynb (when present) and
notebooks/summary.ipynb into outputs/study/<profile>/.

Finished runs (summary.json) are skipped; interrupted runs resume from their last checkpoint (run_variant does
that). Runs execute in worker processes, ``jobs`` at a time (params/study.yaml per profile, or --jobs), a matched
run only once its donor has finished; with jobs > 1 each run's kernel gets cores / jobs threads. --processes N gives
every run, and the teacher pass, N processes (the notebooks' ``processes`` parameter: forked CPU ranks, or GPUs
0..N-1 through accelerate launch, ranks.py); a run made with another number of processes is refused, not resumed
(train.processes is part of its identity). A failing run is
reported with the path of its executed notebook; the other runs go on (runs that depend on it are skipped), and the
runner exits non-zero.
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("study")

import json
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import psutil
from tqdm.auto import tqdm

from .cli import parse
from .config import NOTEBOOKS, PARAMS_DIR, ParamError, load_profile, read_yaml, with_processes, writable_outputs_dir
from .rundir import (NOTEBOOK, RunDirError, identity_differences, is_finished, read_finished, read_identity, read_metrics,
                     run_path, runner_lock, seeded_name, set_aside, study_dir)
from .train.spec import make_run_spec
from .utils import descendants, execute_notebook, stop_processes
from .analysis.variants import Variant, load_reference, load_variants


@dataclass(frozen=True)
class Job:
    """One execution of run_variant.ipynb: the run's name, its parameters besides profile and processes (seed,
    run_name, norm, schedule, overrides, ...), and the run whose budget it takes, which must finish first."""
    name: str
    params: dict
    depends_on: str | None = None


@dataclass(frozen=True)
class StudyRun:
    variant: Variant
    seed: int

    @property
    def name(self) -> str:
        return seeded_name(self.variant.name, self.seed)

    @property
    def params(self) -> dict:
        """The papermill parameters of this run file (the donor as this seed's run of the donor variant)."""
        return self.variant.parameters()

    @property
    def depends_on(self) -> str | None:
        donor = self.variant.match_active_layer_tokens
        return seeded_name(donor, self.seed) if donor else None

    def job(self) -> Job:
        return Job(self.name, {"seed": self.seed, "run_name": self.name, **self.params}, self.depends_on)


def _unique(values: list, what: str) -> list:
    """values without repeats (first occurrence kept), saying which were dropped."""
    seen = list(dict.fromkeys(values))
    if len(seen) < len(values):
        print(f"note: duplicate {what} ignored: {' '.join(map(str, sorted({v for v in values if values.count(v) > 1})))}")
    return seen


def parse_seeds(words: list[str]) -> list[int]:
    """The seeds of --seeds: each word a seed (``3``) or an inclusive range (``0-5``: seeds 0 to 5), in order, e.g.
    ["0-2", "7"] -> [0, 1, 2, 7]. A word of another form, or a range whose end is below its start, is a ParamError
    naming the word. Repeats are load_study's to drop; the range [0, 2**32) is checked with every run's parameters
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


def _listed(path: Path, key: str, value, valid, allowed: str) -> list:
    """value when it is a non-empty list whose items are all valid, else a ParamError naming the file, the key and
    what is allowed (checked before repeats are dropped, which needs comparable, hashable items)."""
    if not isinstance(value, list) or not value or not all(valid(v) for v in value):
        raise ParamError(f"{path}: {key}={value!r} must be a non-empty list of {allowed}")
    return value


def _is_seed(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _seed_list(path: Path, key: str, value) -> list[int]:
    return _unique(_listed(path, key, value, _is_seed, "integers >= 0, e.g. [0, 1, 2]"), "seeds")


def study_seeds(profile: str | None, path: Path | None = None, value=None) -> list[int]:
    """params/study.yaml's seeds for a profile (value: the file's ``seeds`` when the caller has read it already).
    ``seeds`` is one list for every profile, or a mapping of profile names to lists in which ``default`` covers the
    profiles it does not name (the cpu study runs more seeds than a gpu user should pay for by default). Validated;
    repeats dropped with a note."""
    path = Path(path or PARAMS_DIR / "study.yaml")
    if value is None:
        value = (read_yaml(path) or {}).get("seeds", [0])
    key = "seeds"
    if isinstance(value, dict):
        from .config import available_profiles
        unknown = sorted(set(value) - set(available_profiles()) - {"default"})
        if unknown:
            raise ParamError(f"{path}: seeds.{unknown[0]} names no profile; allowed keys: "
                             f"{', '.join(available_profiles())}, default")
        name = profile if profile in value else "default"
        if name not in value:
            raise ParamError(f"{path}: seeds gives no list for profile {profile!r} and no default; add seeds.{profile} "
                             "or seeds.default")
        value, key = value[name], f"seeds.{name}"
    return _seed_list(path, key, value)


def load_study(path: Path | None = None, seeds: list[int] | None = None, variants: list[str] | None = None,
               profile: str | None = None) -> list[StudyRun]:
    """Read params/study.yaml and the run files; validate; drop repeated runs and seeds; order so that matched runs
    follow their donors. Seeds: the given ones, else the file's for the profile (study_seeds)."""
    path = Path(path or PARAMS_DIR / "study.yaml")
    study = read_yaml(path) or {}
    unknown = sorted(set(study) - {"runs", "seeds", "jobs"})
    if unknown:
        raise ParamError(f"{path}: unknown key {unknown[0]!r}; allowed keys: runs, seeds, jobs")
    available = load_variants()
    names = _unique(_listed(path, "runs", variants or study.get("runs", []), lambda v: isinstance(v, str),
                            f"run file names ({', '.join(available)})"), "runs")
    seeds = (study_seeds(profile, path, study.get("seeds", [0])) if seeds is None else
             _seed_list(path, "seeds", seeds))
    runs = []
    for name in names:
        if name not in available:
            raise ParamError(f"study run {name!r} has no file params/runs/{name}.yaml; allowed values: "
                             f"{', '.join(available)}")
        donor = available[name].match_active_layer_tokens
        if donor and donor not in names:
            raise ParamError(f"params/runs/{name}.yaml: match_active_layer_tokens={donor!r} is not a run of the "
                             f"study ({', '.join(names)})")
        runs += [StudyRun(available[name], seed) for seed in seeds]
    # donors first: a stable sort on "has a dependency" suffices because donors are never matched runs themselves
    return sorted(runs, key=lambda r: (r.depends_on is not None, names.index(r.variant.name), r.seed))


def conflicting_run(profile: str, run: StudyRun, teacher_key: str | None, processes: int | None = None) -> str | None:
    """Why the directory of a study run holds something else (a run made with other settings, e.g. by hand with
    overrides), or None when it is empty or holds this run. Such a directory is never counted nor resumed.

    The teacher cache key is compared only for an unfinished run (resuming it on another cache would mix two). A
    finished run made on another cache of the same profile, which differs only in the dtype `auto` resolved to on
    the machine that built it (committed results made with bf16, opened on a CPU without native bf16), stays a
    result of this study; run_study says so."""
    params = {k: v for k, v in run.params.items() if k != "match_active_layer_tokens"}
    expected = make_run_spec(profile=profile, seed=run.seed, run_name=run.name, processes=processes, **params).identity()
    if run.depends_on:
        expected["match_active_layer_tokens"] = run.depends_on
    return directory_conflict(run_path(profile, run.name), expected, teacher_key)


def directory_conflict(run_dir: Path, expected: dict, teacher_key: str | None) -> str | None:
    """Why run_dir holds a run other than the one of identity ``expected`` (see conflicting_run), or None."""
    recorded = read_identity(run_dir)
    if recorded is None:
        return None
    if teacher_key is not None and not is_finished(run_dir):
        expected = {**expected, "teacher_key": teacher_key}
    differing = identity_differences({k: v for k, v in recorded.items() if k in expected}, expected)
    if not differing:
        return None
    return (f"{run_dir} holds a run made with other settings ({', '.join(differing[:4])}); "
            f"{set_aside(run_dir)}, and run the study again")


def study_jobs(profile: str, path: Path | None = None) -> int:
    """Runs executed at once for this profile: params/study.yaml's ``jobs: {profile: n}``; 1 when not listed."""
    path = Path(path or PARAMS_DIR / "study.yaml")
    jobs = (read_yaml(path) or {}).get("jobs") or {}
    if not isinstance(jobs, dict):
        raise ParamError(f"{path}: jobs must map profile names to run counts, e.g. {{tiny: 2}} (got {jobs!r})")
    n = jobs.get(profile, 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ParamError(f"{path}: jobs.{profile}={n!r} must be an integer >= 1")
    return n


def _error_line(err: Exception) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[-1] if text else ''}"


def _worker_init(threads: int | None) -> None:
    """In each worker: its thread count (inherited by the kernels it starts), and its fate tied to the runner's: the
    kernel sends SIGTERM when the runner dies, even by SIGKILL (Linux PR_SET_PDEATHSIG), and SIGTERM stops the
    worker's kernels before the worker exits, so no orphan keeps training a run a restarted runner would resume."""
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
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


def finished_jobs(names: list[str], profile: str, failed: dict[str, str]) -> set[str]:
    """The runs of names (not already in failed) that are finished: summary.json and config.json read and validate
    (rundir.read_finished). A run with a summary.json that is damaged goes to failed, with the file and the error:
    it is neither finished nor retrained (its directory may hold results someone wants to look at)."""
    done = set()
    for name in names:
        run_dir = run_path(profile, name)
        if name in failed or not is_finished(run_dir):
            continue
        try:
            read_finished(run_dir)
            done.add(name)
        except RunDirError as err:
            failed[name] = f"damaged: {err}"
            print(f"damaged {name}: {err}")
    return done


def ensure_teacher_cache(prof, out_dir: Path, processes: int | None = None, overrides: dict | None = None,
                         notebook: str = "00_teacher.ipynb") -> str:
    """The key of the teacher cache of prof (the profile with the dotted overrides it was loaded with), built first
    (notebooks/00_teacher.ipynb, executed into out_dir/notebook) when it is not complete."""
    from .data.teacher_cache import open_cache
    try:
        key = open_cache(prof).key
        print(f"teacher cache: complete, reused (outputs/teacher/{key})")
        return key
    except FileNotFoundError:
        print(f"teacher cache: building (notebooks/00_teacher.ipynb{' with ' + str(overrides) if overrides else ''})")
        build_teacher_cache(prof.name, out_dir, processes, overrides, notebook)
        return open_cache(prof).key


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def execute_runs(profile: str, pending: list[Job], jobs: int, processes: int | None, desc: str, done: set[str],
                 failed: dict[str, str], initial: int = 0, total: int | None = None) -> None:
    """Execute run_variant.ipynb for every pending job, ``jobs`` at a time in worker processes, a job only once the
    job it depends on is in ``done``; adds each job's name to done, or to failed with why (its executed notebook, or
    "skipped" when its donor failed). A live bar shows the running runs' steps. SIGTERM and Ctrl-C stop every
    run (they resume from their last checkpoint) and raise KeyboardInterrupt. The study and the grid (grid.py) both
    run their runs through here."""
    pending = list(pending)
    bar = tqdm(total=len(pending) + initial if total is None else total, initial=initial, desc=desc, unit="run",
               file=sys.stdout)
    running: dict[str, Path] = {}  # run name -> run directory, while its notebook executes
    poller = Poller(lambda: bar.set_postfix_str(_run_steps(running)))  # also redraws elapsed / remaining
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init,
                               initargs=(threads,))
    try:
        futures = {}  # future -> Job
        while pending or futures:
            for r in list(pending):
                if r.depends_on in failed:
                    why = "is damaged" if failed[r.depends_on].startswith("damaged") else "failed"
                    failed[r.name] = f"skipped: its budget donor {r.depends_on} {why}"
                    print(f"\nskipped {r.name}: its budget donor {r.depends_on} {why}")
                    pending.remove(r)
                    bar.update(1)
                elif len(futures) < jobs and (r.depends_on is None or r.depends_on in done):
                    notebook = run_path(profile, r.name) / NOTEBOOK
                    future = pool.submit(_execute_run, NOTEBOOKS / "run_variant.ipynb", notebook,
                                         {"profile": profile, "processes": processes, **r.params})
                    futures[future] = r
                    running[r.name] = notebook.parent
                    pending.remove(r)
            if not futures:  # the last runs were skipped
                if pending:  # cannot happen: load_study and grid.plan put every donor among the jobs, ahead of its runs
                    raise RuntimeError(f"no run can start: {[r.name for r in pending]} wait on missing donors")
                break
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                r = futures.pop(future)
                del running[r.name]
                error = future.result()
                if error is None:
                    done.add(r.name)
                else:
                    failed[r.name] = f"executed notebook {run_path(profile, r.name) / NOTEBOOK}"
                    print(f"\nFAILED {r.name}: {error}\n  {failed[r.name]}")
                bar.update(1)
    except KeyboardInterrupt:
        print(f"\n{desc} interrupted: stopping its runs (they resume from their last checkpoint next time)")
        kill_descendants()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        signal.signal(signal.SIGTERM, previous)
        poller.close()
        bar.close()


def run_study(profile: str, seeds: list[int] | None = None, variants: list[str] | None = None,
              jobs: int | None = None, processes: int | None = None) -> int:
    prof = load_profile(profile, with_processes(None, processes))  # validate before anything heavy
    runs = load_study(seeds=seeds, variants=variants, profile=profile)  # every run file, its values included
    load_reference()  # the report reads it after the last run: a mistake there is named before the first
    jobs = study_jobs(profile) if jobs is None else jobs
    if jobs < 1:
        raise ParamError(f"jobs={jobs} must be >= 1")
    for r in runs:  # validate every run's parameters up front (matched donors may not exist yet)
        make_run_spec(profile=profile, seed=r.seed, run_name=r.name, processes=processes,
                      **{k: v for k, v in r.params.items() if k != "match_active_layer_tokens"})
    out_dir = study_dir(profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()

    teacher_key = ensure_teacher_cache(prof, out_dir, processes)
    failed: dict[str, str] = {}  # run name -> why (the executed notebook, or the reason it did not start)
    for r in runs:
        conflict = conflicting_run(profile, r, teacher_key, processes)
        if conflict:
            failed[r.name] = conflict
            print(f"refused {r.name}: {conflict}")
    done = finished_jobs([r.name for r in runs], profile, failed)
    other_cache = sorted(r for r in done if read_identity(run_path(profile, r)).get("teacher_key") != teacher_key)
    if other_cache:
        print(f"note: {len(other_cache)} finished run(s) were made on another teacher cache of this profile (the dtype "
              f"`auto` resolved to where they ran); kept as results: {' '.join(other_cache)}")
    pending = [r for r in runs if r.name not in done and r.name not in failed]
    print(f"runs: {len(done)} of {len(runs)} finished, {len(pending)} to run"
          + (f", {jobs} at a time" if jobs > 1 else ""))
    execute_runs(profile, [r.job() for r in pending], jobs, processes, f"study {profile}", done, failed,
                 initial=len(done) + len(failed), total=len(runs))

    for name in ("diagnostics", "summary"):
        if (NOTEBOOKS / f"{name}.ipynb").exists():
            print(f"{name}: notebooks/{name}.ipynb -> {out_dir / (name + '.ipynb')}")
            try:
                execute_notebook(NOTEBOOKS / f"{name}.ipynb", out_dir / f"{name}.ipynb", {"profile": profile})
            except Exception as err:
                failed[name] = f"executed notebook {out_dir / (name + '.ipynb')}"
                print(f"FAILED {name}: {_error_line(err)}\n  {failed[name]}")
    print(f"study {profile}: {len(done)}/{len(runs)} runs finished in {time.time() - start:.0f} s; results in "
          f"{out_dir}")
    return report_failures(failed)


def report_failures(failed: dict[str, str]) -> int:
    """Print every failed, refused, skipped or damaged run with why; the runner's exit code (1 if any, else 0)."""
    if failed:
        print("failures:\n" + "\n".join(f"  {name}: {why}" for name, why in failed.items()))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse("study", argv)
    def work() -> int:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        writable_outputs_dir()
        with runner_lock():
            return run_study(args.profile, seeds, args.runs, args.jobs, args.processes)
    return runner_exit(work)


def runner_exit(work, input_errors: tuple = ()) -> int:
    """A runner's exit code: work()'s (None: 0), 2 with one `error: ...` line for a ParamError or RunDirError (bad
    input, a locked or damaged directory) or one of input_errors (what a command's bad input raises besides),
    130 for Ctrl-C or SIGTERM. Every command line shares it (study, grid, python -m normgrow)."""
    try:
        return work() or 0
    except (ParamError, RunDirError, *input_errors) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
