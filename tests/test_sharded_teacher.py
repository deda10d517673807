"""Multi-process jobs on the bundled teacher and corpus (tiny profile, fewer tokens): the teacher pass sharded on two
ranks writes the one-process cache byte for byte, and a job started by `accelerate launch` (two gloo processes on
CPU) builds the cache and trains a run to the numbers of a one-process run."""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from normgrow.data import teacher_cache
from normgrow.config import load_profile
from normgrow.train.spec import make_run_spec
from normgrow.train.run import run_variant
from tiny_study import notebook_streams

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # processes, subprocesses or model conversions: not in make test-fast

SMALL = {"data.train_tokens": 2048, "data.val_tokens": 1024}  # the tiny profile's corpus and teacher, fewer tokens
# A one-process reference pass on one thread, as each of two ranks runs on these 2 cores: bf16 matmuls round
# differently with one and two threads on some CPUs (AMX: the two passes differed in 8 of 12 files), so "byte for
# byte" holds between passes whose processes use the same number of threads (teacher.threads).
ONE_THREAD = {"teacher.threads": 1}
RUN = {"train.stages": [1, 2], "train.stage_tokens": [1024, 1024], "train.dtype": "float32", "train.eval_every": 2,
       "train.checkpoint_every": 2}


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    models = REPO / "outputs" / "teacher" / "models"  # the converted bundled teacher, when this clone has it
    if models.is_dir():
        (tmp_path / "outputs" / "teacher").mkdir(parents=True)
        (tmp_path / "outputs" / "teacher" / "models").symlink_to(models, target_is_directory=True)
    return tmp_path / "outputs"


def cache_files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*.npy"))


def assert_same_cache(a: Path, b: Path) -> None:
    """Two cache directories hold the same .npy files, byte for byte (meta.json differs: it has timings)."""
    files = cache_files(a)
    assert files == cache_files(b)
    _, differing, errors = filecmp.cmpfiles(a, b, files, shallow=False)
    assert differing == [] and errors == []


def test_two_process_pass_writes_the_one_process_cache(outputs):
    one = teacher_cache.ensure_cache(load_profile("tiny", SMALL | ONE_THREAD), progress=False)
    reference = outputs / "reference"
    shutil.move(one.dir, reference)
    two = teacher_cache.ensure_cache(load_profile("tiny", SMALL | {"teacher.processes": 2}), progress=False)
    assert two.key == one.key  # the number of processes is not part of the cache
    assert len(cache_files(two.dir)) == 12
    assert_same_cache(reference, two.dir)
    assert not list(two.dir.glob(teacher_cache.PROGRESS_FILES)) and not (two.dir / teacher_cache.PASS_FILE).exists()
    assert not list(outputs.glob("teacher/.tmp-*"))  # the build directory was renamed into place


def launch(*args: str, overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`accelerate launch` of python -m normgrow on two CPU processes (--multi_gpu starts them with torchrun; each
    finds no GPU and joins a gloo group)."""
    command = [str(Path(sys.executable).with_name("accelerate")), "launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
               "-m", "normgrow", *args, "--profile", "tiny", "--overrides", overrides]
    proc = subprocess.run(command, cwd=REPO, env=env or dict(os.environ), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def test_accelerate_launch_builds_the_cache_and_trains_a_run(outputs):
    """The launched path: every process runs the same command, rank 0 writes. The cache equals the one-process
    cache, and the two-process run ends with the one-process run's tokens and val_ce within 1e-3 nats."""
    small = "{data.train_tokens: 2048, data.val_tokens: 1024}"
    proc = launch("cache", overrides=small[:-1] + ", teacher.processes: 2}")
    assert proc.stdout.count("TeacherCache(") == 1  # printed by rank 0 only
    one = teacher_cache.open_cache(load_profile("tiny", SMALL))
    launched = outputs / "launched"
    shutil.move(one.dir, launched)
    reference = teacher_cache.ensure_cache(load_profile("tiny", SMALL | ONE_THREAD), progress=False)
    assert_same_cache(launched, reference.dir)

    one_process = run_variant(make_run_spec(profile="tiny", norm="post", schedule="grow", run_name="one",
                                            overrides=SMALL | RUN), progress=False)
    run = small[:-1] + ", train.stages: [1, 2], train.stage_tokens: [1024, 1024], train.dtype: float32, " \
        "train.eval_every: 2, train.checkpoint_every: 2, train.processes: 2}"
    proc = launch("run", "--norm", "post", "--schedule", "grow", "--run-name", "two", overrides=run)
    assert proc.stdout.count("two: val_ce") == 1
    from normgrow.rundir import read_summary
    two = read_summary(outputs / "runs" / "tiny" / "two").to_json()
    for key in ("tokens", "active_layer_tokens", "steps", "depth"):
        assert two[key] == one_process[key], key
    assert two["val_ce"] == pytest.approx(one_process["val_ce"], abs=1e-3)
    # rank 0 gave the run its executed notebook, in a kernel outside the launched job
    assert "executed notebook:" in proc.stdout and (outputs / "runs" / "tiny" / "two" / "run.ipynb").is_file()


SLOW_RANK_1 = """
import os
if os.environ.get("LOCAL_RANK") == "1":  # rank 1 of a launched job loads the teacher 5 s later than rank 0
    import time
    import normgrow.data.teacher
    load = normgrow.data.teacher.load_teacher
    def slow_load(*args, **kwargs):
        time.sleep(5)
        return load(*args, **kwargs)
    normgrow.data.teacher.load_teacher = slow_load
"""


def test_a_slow_rank_finishes_its_rows_before_the_cache_is_published(outputs, tmp_path):
    """In a launched job rank 0 is a rank too: it must wait for the others' rows before it reads them and publishes
    the directory they write into. Rank 1 made slow (a sitecustomize module in its PYTHONPATH) still gives the
    one-process cache byte for byte."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_RANK_1)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]))
    launch("cache", overrides="{data.train_tokens: 2048, data.val_tokens: 1024, teacher.processes: 2, "
           "teacher.batch_size: 2}", env=env)  # batches of 2 rows: rank 1 computes half of them
    profile = load_profile("tiny", SMALL | {"teacher.batch_size": 2})  # the same batches in one process
    shutil.move(teacher_cache.open_cache(profile).dir, outputs / "launched")
    reference = teacher_cache.ensure_cache(load_profile("tiny", SMALL | ONE_THREAD | {"teacher.batch_size": 2}),
                                           progress=False)
    assert_same_cache(outputs / "launched", reference.dir)


def test_ranks_the_caller_launches_build_the_cache_and_train_a_run(outputs, monkeypatch):
    """The GPU way of a notebook or the study (ranks.py: a CUDA caller cannot fork, so it runs accelerate launch on a
    pickled job), taken here on CPU: the cache equals the one-process cache byte for byte, and the run ends with the
    one-process run's tokens and val_ce within 1e-3 nats."""
    from normgrow import ranks
    reference = teacher_cache.ensure_cache(load_profile("tiny", SMALL | ONE_THREAD), progress=False)
    one_process = run_variant(make_run_spec(profile="tiny", norm="post", schedule="grow", run_name="one",
                                            overrides=SMALL | RUN), progress=False)
    shutil.move(reference.dir, outputs / "reference")
    monkeypatch.setattr(ranks, "_forks", lambda device: False)
    two = run_variant(make_run_spec(profile="tiny", norm="post", schedule="grow", run_name="two",
                                    overrides=SMALL | RUN, processes=2), progress=False)
    launched = teacher_cache.open_cache(load_profile("tiny", SMALL))
    assert_same_cache(outputs / "reference", launched.dir)
    for key in ("tokens", "active_layer_tokens", "steps", "depth"):
        assert two[key] == one_process[key], key
    assert two["val_ce"] == pytest.approx(one_process["val_ce"], abs=1e-3)
    from normgrow.rundir import read_identity
    assert read_identity(outputs / "runs" / "tiny" / "two")["profile"]["train"]["processes"] == 2


def test_a_rank_the_caller_launched_fails_with_its_traceback(monkeypatch):
    """A failure in a launched rank reaches the caller as RankError with that rank's traceback (json.loads stands in
    for a failing job: any importable function pickles, and it fails on the Ranks it is given)."""
    from normgrow import ranks
    monkeypatch.setattr(ranks, "_forks", lambda device: False)
    with pytest.raises(ranks.RankError, match=r"(?s)rank [01] of 2 failed first:.*TypeError: the JSON object must be"):
        ranks.on_ranks(2, torch.device("cpu"), json.loads)


def test_papermill_processes_parameter_trains_on_two_forked_ranks(outputs):
    """run_variant.ipynb's processes parameter (what the study's --processes passes): two forked ranks in the
    papermill kernel; rank 0's progress bar is text there (a widget from a fork never reaches the notebook)."""
    import papermill as pm
    out = outputs.parent / "nb.ipynb"  # (outputs itself exists only once something is written there)
    pm.execute_notebook(str(REPO / "notebooks" / "run_variant.ipynb"), str(out), cwd=str(REPO / "notebooks"),
                        parameters={"profile": "tiny", "norm": "post", "schedule": "grow", "run_name": "nb",
                                    "overrides": SMALL | RUN, "processes": 2}, progress_bar=False)
    identity = json.loads((outputs / "runs" / "tiny" / "nb" / "config.json").read_text())
    assert identity["profile"]["train"]["processes"] == identity["profile"]["teacher"]["processes"] == 2
    streams = notebook_streams(out)
    assert "nb: 100%" in streams, streams[-2000:]
    # papermill wrote this notebook elsewhere: the run directory got its own executed copy, which read the run back
    streams = notebook_streams(outputs / "runs" / "tiny" / "nb" / "run.ipynb")
    assert "is finished (summary.json); not re-running" in streams, streams[-2000:]


def test_interrupting_the_caller_stops_the_ranks_it_launched(tmp_path, monkeypatch):
    """A notebook's interrupt reaches the kernel alone (SIGINT to the caller's process here, not to its group): the
    caller stops the launcher and its ranks before it raises, so nothing keeps running."""
    import signal
    import threading
    import time

    import psutil

    import fakes
    from normgrow import ranks
    monkeypatch.setattr(ranks, "_forks", lambda device: False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))

    def interrupt_once_started():
        deadline = time.time() + 120
        while len(list(tmp_path.glob("rank*"))) < 2 and time.time() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)
    # Python raises KeyboardInterrupt on SIGINT unless it started with SIGINT ignored, as a command put in the
    # background by a non-interactive shell (`make test &`) does: install the handler a kernel has
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ranks.on_ranks(2, torch.device("cpu"), fakes.sleeping_rank, str(tmp_path))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0", "rank1"]  # both ranks had started
    assert [p.cmdline() for p in psutil.Process().children(recursive=True) if "normgrow.ranks" in p.cmdline()] == []


def test_the_pass_runs_on_the_profiles_threads_and_gives_the_callers_back(outputs):
    """teacher.threads fixes the pass's torch threads (a CPU pass's bf16 matrix products split their work by thread
    count: the cpu cache built on 2 threads differed from the committed one, built on 1) and the caller's count is
    restored; the count is not part of the cache's key."""
    before = torch.get_num_threads()
    threads = 2 if before == 1 else 1
    cache = teacher_cache.ensure_cache(load_profile("tiny", SMALL | {"teacher.threads": threads}), progress=False)
    assert cache.report["timings"]["threads"] == threads and torch.get_num_threads() == before
    assert cache.key == teacher_cache.open_cache(load_profile("tiny", SMALL)).key
