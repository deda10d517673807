"""The slurm executor against a real scheduler: a one-node SLURM cluster started on this machine (conftest's slurm
fixture; skipped without the Debian packages slurm-wlm and munge). The reduced tiny study (tiny_study.py) runs as
SLURM jobs to the numbers of the local executor, its teacher cache built by a job the runs wait for; a sweep's
candidates run as jobs and are read back; a runner stopped and started again follows the jobs it finds queued or
running; a job cancelled mid-run is submitted again and its run resumes from its last checkpoint to the same
numbers."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from tiny_study import (COMMAND, METRIC_COLUMNS, PROFILE, REPO, RUN_NAMES, STUDY_TIMEOUT, check_ok, kill_tree,
                        make_outputs, read_summary, study_env)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SLURM = ["--executor", "slurm", "--cpus-per-run", "1"]


def same_numbers(summary, reference, tolerance: float = 1e-6) -> None:
    assert sorted(summary.index) == sorted(reference.index)
    for col in METRIC_COLUMNS:
        a, b = summary[col].astype(float), reference[col].astype(float)
        assert (a.isna() == b.isna()).all(), col
        assert (a - b).abs().fillna(0.0).max() <= tolerance, f"{col}: slurm {a.tolist()} local {b.tolist()}"


def cache_arrays(outputs_root) -> dict[str, str]:
    """The sha256 of every array of each teacher cache under an outputs root, by '<key>/<file>' (checksums.json)."""
    return {f"{p.parent.name}/{name}": entry["sha256"] for p in (outputs_root / "teacher").glob("*/checksums.json")
            for name, entry in json.loads(p.read_text()).items() if name.endswith(".npy")}


def start(root, slurm) -> subprocess.Popen:
    return subprocess.Popen(COMMAND + SLURM, cwd=REPO, env=study_env(root) | slurm.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def job_of(root, run: str) -> str | None:
    record = root / "runs" / PROFILE / run / "slurm.json"
    return str(json.loads(record.read_text())["job_id"]) if record.is_file() else None


def wait_for(what: str, condition, proc: subprocess.Popen, timeout: float = STUDY_TIMEOUT) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert proc.poll() is None, f"the runner ended (rc {proc.returncode}) before {what}:\n{proc.stdout.read()}"
        assert time.time() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.5)


def test_a_study_as_slurm_jobs_its_teacher_cache_one_of_them_gives_the_local_executor_s_numbers(finished_study,
                                                                                                tmp_path, slurm,
                                                                                                share_cache):
    """On an outputs root without a teacher cache: the cache is built by one job, the runs' jobs wait for it
    (submitted while it is queued or running, with a dependency on it), and the numbers are the local executor's.
    Exactly where the job's cache is bit for bit the local one (AVX512-BF16, float32); where it is not, the bf16
    pass of the job's one CPU rounded differently from the local pass's two threads (Intel AMX: docs/DESIGN.md,
    teacher.processes), the same cache key and files with other last bits, and the runs trained on those targets end
    within 5e-3 nats of the local ones (5.7e-4 measured on a Xeon with AMX)."""
    _, reference = finished_study
    root = tmp_path / "outputs"
    root.mkdir()
    proc = start(root, slurm)
    out, _ = proc.communicate(timeout=STUDY_TIMEOUT)
    check_ok(subprocess.CompletedProcess(proc.args, proc.returncode, out, ""))
    assert "the runs wait for it" in out and "to run as jobs of slurm" in out
    cache_job = json.loads((root / "study" / PROFILE / "00_teacher.ipynb.slurm.json").read_text())["job_id"]
    built, shared = cache_arrays(root), cache_arrays(share_cache)
    assert built and set(built) <= set(shared)  # the same cache: its key and its files
    same_numbers(read_summary(root), reference, 1e-6 if all(built[f] == shared[f] for f in built) else 5e-3)
    for run in RUN_NAMES:  # each run was one job, its log beside its files, submitted after the cache's job
        assert job_of(root, run) and list((root / "runs" / PROFILE / run / "slurm").glob("*_log.out"))
        assert int(job_of(root, run)) > int(cache_job)


def test_a_restarted_runner_follows_its_jobs_and_a_cancelled_job_resumes(finished_study, tmp_path, share_cache,
                                                                          slurm):
    """The first runner is killed once post-grow-s0's job runs: the job goes on. A second runner finds it running
    and follows it instead of submitting it again; the job is then cancelled mid-run (scancel) after a checkpoint,
    and the runner submits it again once: the run resumes from its last checkpoint to the local executor's numbers."""
    _, reference = finished_study
    root = make_outputs(tmp_path / "outputs", share_cache)
    first, run_dir = RUN_NAMES[0], root / "runs" / PROFILE / RUN_NAMES[0]
    proc = start(root, slurm)
    try:
        wait_for("a running job", lambda: job_of(root, first) and slurm.job_state(job_of(root, first)) == "RUNNING",
                 proc)
    finally:
        kill_tree(proc)
    job = job_of(root, first)
    assert slurm.job_state(job) == "RUNNING", "the job did not outlive its runner"

    proc = start(root, slurm)
    try:
        wait_for("a checkpoint", lambda: (run_dir / "checkpoints" / "last.pt").is_file(), proc)
        assert job_of(root, first) == job, "the second runner submitted the running job again"
        slurm.run("scancel", job)
        assert not (run_dir / "summary.json").is_file(), "the run finished before the cancel: nothing was tested"
        out, _ = proc.communicate(timeout=STUDY_TIMEOUT)
    except BaseException:
        kill_tree(proc)
        raise
    check_ok(subprocess.CompletedProcess(proc.args, proc.returncode, out, ""))
    assert f"{first}: job {job} already running; followed, not submitted again" in out
    assert f"{first}: job {job} ended without finishing the run; submitted again (it resumes)" in out
    assert job_of(root, first) != job
    same_numbers(read_summary(root), reference)


def test_a_sweep_as_slurm_jobs_reads_every_candidate_back(tmp_path, share_cache, slurm):
    """python -m normgrow.sweep --executor slurm: each candidate is one job (its id and log in its run directory),
    and the record holds every candidate read back from its run once the jobs have ended."""
    root = make_outputs(tmp_path / "outputs", share_cache)
    command = [sys.executable, "-m", "normgrow.sweep", "--profile", PROFILE, "--norms", "pre", "--schedules", "joint",
               "--lrs", "1e-3", "3e-3", "--seeds", "0", *SLURM]
    proc = subprocess.run(command, cwd=REPO, env=study_env(root) | slurm.env, capture_output=True, text=True,
                          timeout=STUDY_TIMEOUT)
    check_ok(proc)
    assert "to run as jobs of slurm" in proc.stdout
    rows = json.loads((root / "sweep" / PROFILE / "pre" / "sweep.json").read_text())["rows"]
    assert sorted(r["lr"] for r in rows) == [1e-3, 3e-3] and all(math.isfinite(r["val_ce"]) for r in rows)
    for row in rows:
        run_dir = root / "runs" / PROFILE / row["run_name"]
        assert job_of(root, row["run_name"]) and list((run_dir / "slurm").glob("*_log.out"))
        assert json.loads((run_dir / "summary.json").read_text())["val_ce"] == row["val_ce"]
