import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/fakes.py


@pytest.fixture(scope="session")
def share_cache(tmp_path_factory) -> Path:
    """An outputs root holding a complete tiny teacher cache, which the studies of the tests symlink instead of each
    building one: the repository's outputs/ when its tiny cache is complete, else a temporary one built here once
    (``python -m normgrow cache --profile tiny``, about a minute)."""
    import os
    import subprocess
    from tiny_study import REPO, repo_tiny_cache_complete, study_env
    if repo_tiny_cache_complete():
        return REPO / "outputs"
    root = tmp_path_factory.mktemp("tiny-cache") / "outputs"
    root.mkdir()
    subprocess.run([sys.executable, "-m", "normgrow", "cache", "--profile", "tiny"], cwd=REPO, env=study_env(root),
                   check=True, stdout=subprocess.DEVNULL, timeout=900)
    assert os.path.isdir(root / "teacher")
    return root


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory, share_cache):
    """The uninterrupted reduced tiny study (tiny_study.py) (post-grow and post-joint-matched, seed 0, with its
    diagnostics and summary notebooks) on the shared tiny cache: (outputs root, summary.csv frame, seconds). Session-scoped so that
    test_study.py and test_browser.py share one study run (about a minute) instead of running two."""
    from tiny_study import check_ok, make_outputs, read_summary, run_study
    root = make_outputs(tmp_path_factory.mktemp("study") / "outputs", share_cache)
    proc, seconds = run_study(root)
    check_ok(proc)
    return root, read_summary(root), seconds


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """tmp_path as the outputs root, with the synthetic cache (fakes.install) in place of the teacher's."""
    import fakes
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    fakes.install(monkeypatch)
    return tmp_path


@pytest.fixture
def synthetic_outputs(tmp_path, monkeypatch):
    """A tmp outputs tree, the synthetic cache (fakes.install), one torch thread (a 16-wide model gains nothing from
    two, and on a shared machine two threads contend: seconds instead of a fraction of one per run)."""
    import fakes
    import torch
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    fakes.install(monkeypatch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path / "outputs"
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node SLURM cluster on this machine (slurm_cluster.py), started for a test module and stopped after it;
    its environment (SLURM_CONF) points sbatch, squeue and submitit at it. Skipped, naming the packages, without
    slurm-wlm and munge."""
    from slurm_cluster import Cluster, missing
    why = missing()
    if why:
        pytest.skip(why)
    cluster = Cluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()
