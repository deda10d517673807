"""The slurm executor of the runner (runner.py, ``--executor slurm``): every run one SLURM job, submitted through
submitit, the teacher cache one job the runs depend on; the runner's one job loop (runner.execute_runs) drives it
as it drives the local pool (SlurmRuns).

Choices:
  - A run's job executes the run's notebook exactly as the local executor's worker does (notebooks/run_variant.ipynb
    on the run's spec, into <run>/run.ipynb), so a run's numbers do not depend on where it ran. Its kernel gets the
    job's CPUs as threads (SLURM_CPUS_PER_TASK).
  - Resuming is the run's own: a job that is requeued (scontrol requeue, preemption, its time limit: submitit's
    checkpoint() resubmits the same call) starts the notebook again, which resumes from the run's last checkpoint.
    A job that ends without finishing its run (scancel, a node lost) is submitted again once by the runner; a second
    end without finishing is a failure naming the job's log.
  - The job id of every submission is recorded where the job writes (the run directory's slurm.json, the teacher
    cache's beside its notebook), and the runner asks the scheduler (squeue) which recorded jobs are still queued or
    running: a runner stopped and started again follows those jobs instead of submitting them twice, and resubmits
    only a job that has left the queue without finishing its run. Jobs outlive the runner: Ctrl-C stops the waiting,
    never the jobs.
  - States come from squeue, not sacct: a job in the queue (pending, running, requeued, completing) is in flight, a
    job that has left it has ended, and whether it finished is what its run directory says (summary.json). This needs
    no accounting database, which small clusters (and the test's one-node cluster) do not run.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from .paths import NOTEBOOKS
from .rundir import NOTEBOOK, SLURM_DIR, SLURM_RECORD, is_finished, run_path
from .utils import atomic_write_json, execute_notebook, read_json

POLL_S = 3.0  # seconds between two looks at the queue: one squeue call, however many jobs


class NotebookJob:
    """What one job executes: a notebook of notebooks/ on its parameters into output. submitit calls checkpoint()
    when the job is preempted or reaches its time limit; the requeued job executes the same call again (a run
    resumes from its last checkpoint, a teacher cache build reuses its finished shards)."""

    def __init__(self, notebook: str, output: Path, parameters: dict):
        self.notebook, self.output, self.parameters = notebook, Path(output), parameters

    def __call__(self) -> None:
        threads = os.environ.get("SLURM_CPUS_PER_TASK")
        if threads:
            os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = threads
        execute_notebook(NOTEBOOKS / self.notebook, self.output, self.parameters)

    def checkpoint(self, *args, **kwargs):
        import submitit
        return submitit.helpers.DelayedSubmission(self)


def in_queue() -> dict[str, str]:
    """{job id: state} of every job the scheduler still holds as pending, running, requeued or completing
    (squeue); a job absent from it has ended."""
    out = subprocess.run(["squeue", "--noheader", "--format=%i %T"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"squeue failed (rc {out.returncode}): {out.stderr.strip()}")
    return dict(line.split(maxsplit=1) for line in out.stdout.splitlines() if line.strip())


def recorded_job(record: Path) -> str | None:
    """The job id a runner recorded in record (a slurm.json), None when there is none."""
    return str(read_json(record)["job_id"]) if record.is_file() else None


def submit(job: NotebookJob, folder: Path, record: Path, params, name: str, after: str | None = None) -> str:
    """Submit job through submitit (its scripts and logs in folder), with the executor's parameters (params:
    runner.SlurmParams) and, after: a job id it must wait for (afterok); record its id in record. The job id."""
    import submitit
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=params.requeues)
    executor.update_parameters(job_name=name, time=params.time_limit_min, cpus_per_task=params.cpus_per_run,
                               partition=params.partition, gpus_per_node=params.gpus_per_run or None,
                               dependency=f"afterok:{after}" if after else None,
                               # a job whose cache job failed leaves the queue instead of waiting on it for ever
                               additional_parameters={"kill-on-invalid-dep": "yes"} if after else None)
    submitted = executor.submit(job)
    atomic_write_json(record, {"job_id": submitted.job_id, "log": str(folder)})
    return str(submitted.job_id)


def cache_job(profile: str, out_dir: Path, processes: int | None, overrides: dict | None, notebook: str,
              params) -> str:
    """The id of the job building a teacher cache (notebooks/00_teacher.ipynb into out_dir/notebook): the one
    recorded beside that notebook while it is still queued or running, else a new one."""
    record = out_dir / f"{notebook}.{SLURM_RECORD}"
    job_id = recorded_job(record)
    if job_id is not None and job_id in in_queue():
        print(f"teacher cache: job {job_id} already queued or running")
        return job_id
    job = NotebookJob("00_teacher.ipynb", out_dir / notebook,
                      {"profile": profile, "processes": processes, "overrides": overrides or {}})
    job_id = submit(job, out_dir / SLURM_DIR, record, params, "teacher-cache")
    print(f"teacher cache: job {job_id} submitted; the runs wait for it")
    return job_id


def job_of(profile: str, job, queue: dict[str, str], params, processes: int | None, cache: str | None) -> str:
    """The id of the SLURM job of a run (job: runner.Job): the one recorded in its directory while the queue still
    holds it (a runner started again follows it), else a new submission of its spec (runner.Job.spec), after the
    teacher cache's job while that is queued."""
    run_dir = run_path(profile, job.name)
    job_id = recorded_job(run_dir / SLURM_RECORD)
    if job_id is not None and job_id in queue:
        print(f"\n{job.name}: job {job_id} already {queue[job_id].lower()}; followed, not submitted again")
        return job_id
    spec = job.spec(profile, processes)
    notebook = NotebookJob("run_variant.ipynb", run_dir / NOTEBOOK, {"run_spec": spec.to_json()})
    return submit(notebook, run_dir / SLURM_DIR, run_dir / SLURM_RECORD, params, job.name,
                  cache if cache in queue else None)


class SlurmRuns:
    """The slurm executor of the runner's job loop (runner.execute_runs): every run a SLURM job (job_of), at most
    params.in_flight queued or running at once, each after its teacher cache's job (after: run name -> job id). A
    job has ended when it has left the queue; its run is done when the run finished, and else the loop submits it
    once more (resubmits: the run resumes). Jobs outlive the runner: Ctrl-C stops the waiting, never the jobs."""
    resubmits = True

    def __init__(self, profile: str, params, processes: int | None, after: dict[str, str] | None = None):
        self.profile, self.params, self.processes, self.after = profile, params, processes, after or {}
        self.capacity = params.in_flight
        self.flying: dict[str, tuple] = {}  # run name -> (job, job id)
        self.queue: dict[str, str] = {}

    def open(self, bar) -> None:
        self.bar, self.queue = bar, in_queue()

    def start(self, job) -> None:
        self.flying[job.name] = (job, job_of(self.profile, job, self.queue, self.params, self.processes,
                                             self.after.get(job.name)))

    def ended(self) -> list[tuple]:
        """The jobs that have left the queue since the last look (POLL_S later), each with None when its run finished,
        else why not."""
        time.sleep(POLL_S)
        self.queue = in_queue()
        out = []
        for name, (job, job_id) in [(n, f) for n, f in self.flying.items() if f[1] not in self.queue]:
            del self.flying[name]
            out.append((job, None if is_finished(run_path(self.profile, name))
                        else f"job {job_id} ended without finishing the run"))
        self.bar.set_postfix_str(", ".join(f"{n} {self.queue.get(j, '?').lower()}" for n, (_, j) in self.flying.items()))
        return out

    def failure(self, name: str, error: str) -> str:
        run_dir = run_path(self.profile, name)
        job_id = recorded_job(run_dir / SLURM_RECORD)
        return (f"{error}: its log {run_dir / SLURM_DIR / f'{job_id}_0_log.err'}, executed notebook "
                f"{run_dir / NOTEBOOK}")

    def interrupted(self, desc: str) -> None:
        print(f"\nstopped waiting; {len(self.flying)} job(s) stay queued or running "
              f"({', '.join(j for _, j in self.flying.values())}): run the same command again to follow them")

    def close(self) -> None:
        pass


def describe(params) -> str:
    """The executor's parameters in a few words, for the runner's first line."""
    return (f"slurm (partition {params.partition or 'default'}, {params.time_limit_min} min, {params.cpus_per_run} "
            f"CPUs and {params.gpus_per_run} GPUs per run, {params.in_flight} in flight)")

