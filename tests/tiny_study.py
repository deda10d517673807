"""The reduced tiny study the integration tests share (test_study.py, conftest's fixtures): its command, an outputs
tree on the shared teacher cache, running it with a timeout, reading its summary and the text its notebooks printed,
killing its process tree."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
PROFILE = "tiny"
RUNS = ("post-grow", "post-joint-matched")
COMMAND = [sys.executable, "-m", "normgrow.study", "--profile", PROFILE, "--seeds", "0", "--runs", *RUNS]
RUN_NAMES = [f"{r}-s0" for r in RUNS]
METRIC_COLUMNS = ("val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "trainable_layer_tokens",
                  "val_ce_p0", "val_ce_p1", "val_ce_p2", "val_kd_ce_p2")
STUDY_TIMEOUT = 900


def repo_tiny_cache_complete() -> bool:
    saved = os.environ.pop("NORMGROW_OUTPUTS", None)
    try:
        from normgrow.config import load_profile
        from normgrow.data.teacher_cache import open_cache
        open_cache(load_profile(PROFILE))
        return True
    except FileNotFoundError:
        return False
    finally:
        if saved is not None:
            os.environ["NORMGROW_OUTPUTS"] = saved


def make_outputs(root: Path, cache_root: Path) -> Path:
    """A fresh outputs tree whose teacher/ and data/ are symlinks to cache_root's (a complete tiny cache, read only)."""
    root.mkdir(parents=True)
    for name in ("teacher", "data"):
        (root / name).symlink_to(cache_root / name, target_is_directory=True)
    return root


def study_env(root: Path) -> dict:
    env = dict(os.environ, NORMGROW_OUTPUTS=str(root), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "lib"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_study(root: Path, timeout: float = STUDY_TIMEOUT) -> subprocess.CompletedProcess:
    """Run the study to completion; on timeout kill its whole tree (kernels included) and fail with its output."""
    proc = subprocess.Popen(COMMAND, cwd=REPO, env=study_env(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate()
        pytest.fail(f"the study did not finish within {timeout} s (hung notebook?):\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(COMMAND, proc.returncode, out, err)


def check_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"study failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


def read_summary(root: Path) -> pd.DataFrame:
    path = root / "study" / PROFILE / "summary.csv"
    assert path.is_file(), f"no {path}"
    return pd.read_csv(path).set_index("run_name").sort_index()


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the runner's process group and every descendant (Jupyter kernels run in sessions of their own)."""
    import psutil
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone already
        pass
    for child in descendants:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)
    psutil.wait_procs(descendants, timeout=30)


def notebook_streams(path: Path) -> str:
    """Everything the cells of an executed notebook printed (its stream outputs), in cell order."""
    import nbformat
    return "".join(o.text for c in nbformat.read(path, as_version=4).cells for o in c.get("outputs", [])
                   if o.output_type == "stream")
