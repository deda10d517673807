import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/fakes.py


def built_once(tmp_path_factory, name: str, build) -> Path:
    """<shared folder>/<name>/outputs, which build(root) makes once per pytest run: by whichever pytest-xdist worker
    (`make test` runs two) asks first, under a file lock while the others wait. The shared folder is the parent of a
    worker's base temporary folder, which every worker of this run sees, or the base folder itself without workers
    (its parent holds earlier pytest runs' folders too). A root left without its DONE mark is a build that failed in
    another worker: reported, not built over."""
    import os
    from filelock import FileLock
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / name / "outputs"
    with FileLock(shared / f"{name}.lock"):
        if not (root / "DONE").is_file():
            if root.exists():
                pytest.fail(f"{root}: its build did not finish in another worker")
            build(root)
            (root / "DONE").touch()
    return root


@pytest.fixture(scope="session")
def share_cache(tmp_path_factory) -> Path:
    """An outputs root holding a complete tiny teacher cache, which the studies of the tests symlink instead of each
    building one: the repository's outputs/ when its tiny cache is complete, else a temporary one built once per
    pytest run (built_once; ``python -m normgrow cache --profile tiny``, about a minute)."""
    import subprocess
    from tiny_study import REPO, repo_tiny_cache_complete, study_env
    if repo_tiny_cache_complete():
        return REPO / "outputs"

    def build(root: Path) -> None:
        root.mkdir(parents=True)
        subprocess.run([sys.executable, "-m", "normgrow", "cache", "--profile", "tiny"], cwd=REPO,
                       env=study_env(root), check=True, stdout=subprocess.DEVNULL, timeout=900)
    return built_once(tmp_path_factory, "tiny-cache", build)


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory, share_cache):
    """The uninterrupted reduced tiny study (tiny_study.py) (post-grow and post-joint-matched, seed 0, with its
    diagnostics and summary notebooks) on the shared tiny cache: (outputs root, summary.csv frame). One study a
    pytest run (built_once, about a minute), shared by test_study.py, test_browser.py, test_slurm.py and others, which
    only read it."""
    from tiny_study import check_ok, make_outputs, read_summary, run_study
    root = built_once(tmp_path_factory, "finished-study",
                      lambda root: check_ok(run_study(make_outputs(root, share_cache))))
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
