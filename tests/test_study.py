"""The study runner end to end on the tiny profile (integration: real bundled teacher, real text, papermill).

A reduced study (seed 0, post-grow and its compute-matched joint control) runs to completion; a second invocation
trains nothing; a study whose process tree is SIGKILLed mid-run and restarted ends with the same numbers.

Outputs go to temporary NORMGROW_OUTPUTS trees. The tiny teacher cache is shared read-only by symlinking
outputs/teacher and outputs/data: the repository's when its tiny cache is complete, else one built once per test
session (conftest.share_cache, about a minute).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tiny_study import (COMMAND, METRIC_COLUMNS, PROFILE, REPO, RUN_NAMES, RUNS, STUDY_TIMEOUT, check_ok, kill_tree,
                        make_outputs, notebook_streams, read_summary, run_study, study_env)

pytestmark = pytest.mark.integration


def run_state(root: Path) -> dict:
    runs = root / "runs" / PROFILE
    return {p.name: (p / "summary.json").stat().st_mtime_ns if (p / "summary.json").is_file() else None
            for p in sorted(runs.iterdir()) if p.is_dir()}


def test_reduced_study_completes(finished_study):
    root, summary = finished_study
    assert sorted(summary.index) == sorted(RUN_NAMES)
    assert set(summary["variant"]) == set(RUNS) and set(summary["seed"]) == {0}
    for name in RUN_NAMES:
        run = root / "runs" / PROFILE / name
        assert (run / "summary.json").is_file() and (run / "run.ipynb").is_file()
    # the matched joint run got post-grow's active-layer-token budget (same compute)
    grow, matched = summary.loc["post-grow-s0"], summary.loc["post-joint-matched-s0"]
    assert matched["active_layer_tokens"] == pytest.approx(grow["active_layer_tokens"], rel=0.1)
    assert matched["schedule"] == "joint" and grow["schedule"] == "grow"
    for name in ("summary.csv", "variant_stats.csv", "gaps.csv", "crossover.csv", "claims.csv", "report.html"):
        assert (root / "study" / PROFILE / name).is_file(), name
    assert (root / "study" / PROFILE / "summary.ipynb").is_file()
    assert "Baselines on the same validation positions: teacher" in (root / "study" / PROFILE / "report.html").read_text()


def test_rerun_trains_nothing(finished_study, tmp_path):
    """Run again on a copy of the finished study (the test run's shared study stays as it was for the tests that
    read it)."""
    finished, summary = finished_study
    root = tmp_path / "outputs"
    shutil.copytree(finished, root, symlinks=True)  # teacher/ and data/ stay links to the shared cache; mtimes kept
    before = run_state(root)
    proc = run_study(root)
    check_ok(proc)
    assert "runs: 2 of 2 finished, 0 to run" in proc.stdout
    assert run_state(root) == before  # no new run directories, summary.json untouched: nothing trained
    pd.testing.assert_frame_equal(read_summary(root), summary)


def test_other_processes_are_refused_as_other_settings(finished_study, monkeypatch):
    """--processes 2 on runs made with one process: they are results of other settings (train.processes is part of
    a run's identity), so the study refuses them instead of counting or resuming them."""
    from normgrow.identity import directory_conflict
    from normgrow.rundir import run_path
    from normgrow.study import load_study
    root, _ = finished_study
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(root))
    for run in load_study(seeds=[0], variants=list(RUNS)):
        assert directory_conflict(run_path(PROFILE, run.name), run.identity(PROFILE)) is None
        assert "(profile.train.processes)" in directory_conflict(run_path(PROFILE, run.name), run.identity(PROFILE, 2))


def test_killed_study_resumes_to_the_same_numbers(finished_study, tmp_path, share_cache):
    _, reference = finished_study
    root = make_outputs(tmp_path / "outputs", share_cache)
    first = root / "runs" / PROFILE / RUN_NAMES[0]
    proc = subprocess.Popen(COMMAND, cwd=REPO, env=study_env(root), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + STUDY_TIMEOUT
        while not (first / "checkpoints" / "last.pt").is_file():  # mid-run: a resumable checkpoint exists
            assert proc.poll() is None, f"the study ended (rc {proc.returncode}) before the first checkpoint"
            assert time.time() < deadline, "no checkpoint before the timeout"
            time.sleep(0.2)
    finally:
        kill_tree(proc)
    assert not (first / "summary.json").is_file(), "the first run finished before the kill: nothing was tested"
    assert not (root / "study" / PROFILE / "summary.csv").is_file()

    proc = run_study(root)
    check_ok(proc)
    assert "runs: 0 of 2 finished, 2 to run" in proc.stdout
    resumed = read_summary(root)
    assert sorted(resumed.index) == sorted(reference.index)
    for col in METRIC_COLUMNS:
        a, b = resumed[col].astype(float), reference[col].astype(float)
        assert (a.isna() == b.isna()).all(), col
        diff = (a - b).abs().fillna(0.0).max()
        assert diff <= 1e-6, f"{col}: resumed study differs from the uninterrupted one by {diff}"


def test_failed_donor_is_reported_and_its_matched_run_skipped(tmp_path, share_cache):
    """post-grow-s0 fails (another process holds its run directory's lock, so run_variant stops with the holder's
    pid): the runner names the executed notebook, skips the matched run that takes its budget, and exits non-zero."""
    root = make_outputs(tmp_path / "outputs", share_cache)
    donor = root / "runs" / PROFILE / RUN_NAMES[0]
    donor.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", f"import fcntl, os, time; fd = os.open({str(donor / 'LOCK')!r}, "
                               "os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
                               "os.write(fd, str(os.getpid()).encode()); time.sleep(600)"])
    try:
        while not (donor / "LOCK").is_file() or not (donor / "LOCK").read_text():
            time.sleep(0.05)
        proc = run_study(root)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert f"FAILED {RUN_NAMES[0]}: PapermillExecutionError" in proc.stdout
    assert f"executed notebook {donor / 'run.ipynb'}" in proc.stdout
    assert f"is being written by another process (pid {holder.pid}" in (donor / "run.ipynb").read_text()
    assert f"skipped {RUN_NAMES[1]}: its budget donor {RUN_NAMES[0]} failed" in proc.stdout
    assert not (donor / "summary.json").exists() and not (root / "runs" / PROFILE / RUN_NAMES[1]).exists()
    assert "study tiny: 0/2 runs finished" in proc.stdout


def test_run_with_other_settings_is_refused_by_name(tmp_path, share_cache):
    """A directory of a study run holding a run made with other settings is refused before anything runs, named with
    the differing keys, and left as it is."""
    root = make_outputs(tmp_path / "outputs", share_cache)
    donor = root / "runs" / PROFILE / RUN_NAMES[0]
    donor.mkdir(parents=True)
    (donor / "config.json").write_text('{"run_name": "someone-else"}')
    proc = run_study(root)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert f"refused {RUN_NAMES[0]}: {donor} holds a run made with other settings" in proc.stdout
    assert f"skipped {RUN_NAMES[1]}: its budget donor {RUN_NAMES[0]} failed" in proc.stdout
    assert (donor / "config.json").read_text() == '{"run_name": "someone-else"}' and not (donor / "run.ipynb").exists()


def test_killed_runner_takes_its_workers_and_kernels_along(tmp_path, share_cache):
    """SIGKILL of the runner alone (not its process group): its workers get SIGTERM from the OS and stop their
    kernels, so nothing keeps training the run."""
    import psutil
    root = make_outputs(tmp_path / "outputs", share_cache)
    first = root / "runs" / PROFILE / RUN_NAMES[0]
    proc = subprocess.Popen(COMMAND, cwd=REPO, env=study_env(root), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + STUDY_TIMEOUT
        while not (first / "metrics.jsonl").is_file():  # the run's kernel is training
            assert proc.poll() is None, f"the study ended (rc {proc.returncode}) before the run started"
            assert time.time() < deadline, "the run did not start before the timeout"
            time.sleep(0.2)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert len(descendants) >= 2  # a worker and its kernel at least
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        _, alive = psutil.wait_procs(descendants, timeout=30)
        assert not alive, f"left running after the runner was killed: {[p.cmdline()[:3] for p in alive]}"
    finally:
        kill_tree(proc)


@pytest.mark.parametrize("jobs, needle", [("[2]", "jobs: expected a mapping, got \\[2\\]"),
                                          ("{tiny: 0}", "jobs.tiny=0 must be an integer >= 1"),
                                          ("{tiny: two}", "jobs.tiny: expected int, got 'two'")])
def test_bad_jobs_are_named(tmp_path, jobs, needle):
    from normgrow.config import ParamError
    from normgrow.runner import default_jobs
    path = tmp_path / "study.yaml"
    path.write_text(f"runs: [pre-grow]\nseeds: [0]\njobs: {jobs}\n")
    with pytest.raises(ParamError, match=needle):
        default_jobs("tiny", path)


def test_jobs_default_to_one_and_small_students_run_two():
    from normgrow.runner import default_jobs
    assert default_jobs("paper") == 1
    assert default_jobs("tiny") == default_jobs("quick") == default_jobs("cpu") == 2


def test_a_run_started_from_the_command_line_keeps_its_executed_notebook(tmp_path, share_cache):
    """``python -m normgrow run`` trains without a notebook, then executes run_variant.ipynb on the finished run into
    the run directory: the notebook reads the run back (summary.json untouched) and a second command leaves it."""
    root = make_outputs(tmp_path / "outputs", share_cache)
    command = [sys.executable, "-m", "normgrow", "run", "--profile", PROFILE, "--norm", "pre", "--schedule", "joint",
               "--overrides", "{train.stages: [1], train.stage_tokens: [2048], train.eval_every: 4}"]
    proc = subprocess.run(command, cwd=REPO, env=study_env(root), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = next((root / "runs" / PROFILE).iterdir())
    notebook = run / "run.ipynb"
    assert f"executed notebook: {notebook}" in proc.stdout
    summary_mtime = (run / "summary.json").stat().st_mtime_ns
    assert f"{run} is finished (summary.json); not re-running" in notebook_streams(notebook)
    notebook_mtime = notebook.stat().st_mtime_ns
    again = subprocess.run(command, cwd=REPO, env=study_env(root), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "executed notebook" not in again.stdout
    assert (run / "summary.json").stat().st_mtime_ns == summary_mtime and notebook.stat().st_mtime_ns == notebook_mtime
