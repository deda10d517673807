import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/fakes.py


def session_dir(tmp_path_factory) -> Path:
    """A folder of this test session that every pytest-xdist worker sees (`make test` runs two): the parent of a
    worker's base temporary folder, or the base folder itself without workers (its parent would hold earlier
    sessions' folders too)."""
    import os
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def share_cache(tmp_path_factory) -> Path:
    """An outputs root holding a complete tiny teacher cache, which the studies of the tests symlink instead of each
    building one: the repository's outputs/ when its tiny cache is complete, else a temporary one built once per
    session, by whichever worker asks first, while the others wait (``python -m normgrow cache --profile tiny``,
    about a minute)."""
    import subprocess
    from filelock import FileLock
    from tiny_study import REPO, repo_tiny_cache_complete, study_env
    if repo_tiny_cache_complete():
        return REPO / "outputs"
    shared = session_dir(tmp_path_factory)
    root = shared / "tiny-cache" / "outputs"
    with FileLock(shared / "tiny-cache.lock"):
        if not (root / "BUILT").is_file():
            root.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, "-m", "normgrow", "cache", "--profile", "tiny"], cwd=REPO,
                           env=study_env(root), check=True, stdout=subprocess.DEVNULL, timeout=900)
            (root / "BUILT").touch()
    return root


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory, share_cache):
    """The uninterrupted reduced tiny study (tiny_study.py) (post-grow and post-joint-matched, seed 0, with its
    diagnostics and summary notebooks) on the shared tiny cache: (outputs root, summary.csv frame). One study a
    session (about a minute), run by whichever worker asks first while the others wait, shared by test_study.py,
    test_browser.py, test_slurm.py and others, which only read it."""
    from filelock import FileLock
    from tiny_study import check_ok, make_outputs, read_summary, run_study
    shared = session_dir(tmp_path_factory)
    root = shared / "finished-study" / "outputs"
    with FileLock(shared / "finished-study.lock"):
        if not (root / "FINISHED").is_file():
            if root.exists():
                pytest.fail(f"{root}: a study that did not finish in another worker")
            check_ok(run_study(make_outputs(root, share_cache)))
            (root / "FINISHED").touch()
    return root, read_summary(root)


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
