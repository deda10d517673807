"""Results that cannot be miscounted: a variant defined twice, damaged run files, the outputs root, one runner per
outputs. Each test reproduces the failure the guarantee removes (synthetic run directories, tmp NORMGROW_OUTPUTS)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from normgrow import config, paths, rundir, runner
from normgrow.analysis import reference, variants
from normgrow.viz import report
from normgrow.config import ParamError
from normgrow.rundir import RunDirError, runner_lock
from synthetic_runs import write_run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    return tmp_path / "outputs"


def test_two_run_files_of_one_variant_are_an_error_naming_both(tmp_path, monkeypatch):
    shutil.copytree(config.PARAMS_DIR, tmp_path / "params")
    monkeypatch.setattr(variants, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setattr(reference, "PARAMS_DIR", tmp_path / "params")
    (tmp_path / "params" / "runs" / "zz-my-grow.yaml").write_text("norm: post\nschedule: grow\n")
    with pytest.raises(ParamError, match=r"params/runs/post-grow.yaml and params/runs/zz-my-grow.yaml define the "
                                         r"same variant \(norm=post, schedule=grow"):
        variants.load_variants()


def test_damaged_summaries_are_named_and_never_counted(outputs):
    """A val_ce turned into a string, a deleted summary field and a deleted config.json: each run is damaged (not
    finished, not unassigned), the report says so, and the matched run whose donor is damaged says that."""
    for seed in (0, 1, 2):
        write_run(outputs, "post-grow", seed, 5.0 + seed)
        write_run(outputs, "post-joint-matched", seed, 5.5 + seed)
    runs = outputs / "runs" / "tiny"
    raw = json.loads((runs / "post-grow-s0" / "summary.json").read_text())
    (runs / "post-grow-s0" / "summary.json").write_text(json.dumps(raw | {"val_ce": "4.9"}))
    del raw["val_ce"]
    (runs / "post-grow-s1" / "summary.json").write_text(json.dumps(raw | {"run_name": "post-grow-s1", "seed": 1}))
    (runs / "post-joint-matched-s2" / "config.json").unlink()
    found = variants.collect_runs("tiny")
    assert set(found.damaged) == {"post-grow-s0", "post-grow-s1", "post-joint-matched-s2"}
    assert "field val_ce='4.9' is not a float" in found.damaged["post-grow-s0"]
    assert "config.json is missing" in found.damaged["post-joint-matched-s2"]
    assert found.unassigned == {"post-joint-matched-s0": "its budget donor post-grow-s0 is damaged",
                                "post-joint-matched-s1": "its budget donor post-grow-s1 is damaged"}
    assert set(found.assigned) == {("post-grow", 2)}
    rep = report.build_report("tiny")
    assert any(line.startswith("[damaged, not counted] post-grow-s1") for line in rep.sentences())
    files = report.write_report(rep)
    table = pd.read_csv(files["unassigned"]).set_index("run")
    assert table.loc["post-joint-matched-s2", "status"] == "damaged"
    assert table.loc["post-joint-matched-s0", "status"] == "unassigned"
    assert "damaged, not counted (3)" in files["report"].read_text()
    names = ["post-grow-s0", "post-grow-s2", "post-joint-matched-s2"]
    done, failed, pending = runner.plan_jobs("tiny", [runner.Job(name, {}, {}) for name in names])
    assert done == {"post-grow-s2"} and pending == [] and all(why.startswith("damaged: ") for why in failed.values())


def test_a_changed_metrics_file_is_damaged_and_an_unrecorded_one_counts(outputs, capsys):
    """summary.json records metrics.jsonl's line count and sha256: a line added, a line cut or a value changed
    after the run finished makes the run damaged (collect_runs, unassigned.csv, the runner's exit code); a summary
    without the record (runs finished before it existed) counts as before."""
    for seed in (0, 1, 2, 3):
        d = write_run(outputs, "post-grow", seed, 5.0 + seed)
        if seed < 3:
            summary = json.loads((d / "summary.json").read_text())
            (d / "summary.json").write_text(json.dumps(summary | {"metrics": rundir.metrics_record(d)}))
    runs = outputs / "runs" / "tiny"
    with open(runs / "post-grow-s0" / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"kind": "eval", "step": 999, "tokens": 999, "val_ce": 1.0}) + "\n")
    lines = (runs / "post-grow-s1" / "metrics.jsonl").read_text().splitlines(keepends=True)
    (runs / "post-grow-s1" / "metrics.jsonl").write_text("".join(lines[:-1]))
    (runs / "post-grow-s3" / "metrics.jsonl").write_text("")  # not recorded: not checked
    found = variants.collect_runs("tiny")
    assert set(found.damaged) == {"post-grow-s0", "post-grow-s1"}
    assert re.search(r"post-grow-s0/metrics.jsonl holds \d+ lines .*, but summary.json recorded \d+ lines",
                     found.damaged["post-grow-s0"])
    assert set(found.assigned) == {("post-grow", 2), ("post-grow", 3)}
    table = pd.read_csv(report.write_report(report.build_report("tiny"))["unassigned"]).set_index("run")
    assert table.loc["post-grow-s1", "status"] == "damaged"
    done, failed, _ = runner.plan_jobs("tiny", [runner.Job(f"post-grow-s{seed}", {}, {}) for seed in range(4)])
    assert done == {"post-grow-s2", "post-grow-s3"}
    assert runner.report_failures(failed) == 1 and "damaged post-grow-s0" in capsys.readouterr().out


def test_a_summary_edited_after_the_run_is_damaged_not_counted(outputs):
    """Every table counts summary.json, so its numbers are checked against metrics.jsonl's phase_end records: a
    final val_ce edited by hand (the depth gate would flip on it) makes the run damaged, named by file and number,
    also in a summary without the metrics record; an untouched run counts."""
    for seed in (0, 1):
        write_run(outputs, "post-grow", seed, 5.0 + seed)
    path = outputs / "runs" / "tiny" / "post-grow-s0" / "summary.json"
    summary = json.loads(path.read_text())
    assert summary.get("metrics") is None
    path.write_text(json.dumps(summary | {"val_ce": 4.0}))
    found = variants.collect_runs("tiny")
    assert set(found.damaged) == {"post-grow-s0"} and set(found.assigned) == {("post-grow", 1)}
    assert re.search(r"post-grow-s0/summary.json: the final val_ce / val_kd_ce \(4.0, 2.0\) is not what .*metrics.jsonl "
                     r"recorded at the phase end, \(5.0, 2.0\)", found.damaged["post-grow-s0"])
    summary["phases"][0]["val_kd_ce"] = 1.5
    path.write_text(json.dumps(summary))
    assert "phase 0's val_ce / val_kd_ce (5.0, 1.5)" in variants.collect_runs("tiny").damaged["post-grow-s0"]


@pytest.mark.parametrize("value, expected", [("relout", "relout"), ("./a/../b", "b")])
def test_a_relative_outputs_root_is_the_repository_s_whatever_the_cwd(monkeypatch, tmp_path, value, expected):
    monkeypatch.setenv("NORMGROW_OUTPUTS", value)
    monkeypatch.chdir(tmp_path)
    assert paths.outputs_dir().resolve() == (paths.REPO_ROOT / expected).resolve()


def test_an_empty_a_file_or_an_unwritable_outputs_root_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMGROW_OUTPUTS", "")
    with pytest.raises(ParamError, match="NORMGROW_OUTPUTS is set but empty"):
        paths.outputs_dir()
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "file"))
    with pytest.raises(ParamError, match="is a file, not a directory"):
        config.writable_outputs_dir()
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "ro"))
        with pytest.raises(ParamError, match="is not writable"):
            config.writable_outputs_dir()
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "new" / "out"))
    assert config.writable_outputs_dir().is_dir() and os.environ["NORMGROW_OUTPUTS"] == str(tmp_path / "new" / "out")


def test_a_second_runner_on_the_same_outputs_is_refused_naming_the_first(outputs):
    holder = subprocess.Popen([sys.executable, "-c", "import time; from normgrow.rundir import runner_lock; "
                               "runner_lock().acquire(); print('locked', flush=True); time.sleep(60)"],
                              env=dict(os.environ, PYTHONPATH=str(REPO / "lib")), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunDirError, match=rf"being written by another process \(pid {holder.pid} .*-c"):
            runner_lock().acquire()
        proc = subprocess.run([sys.executable, "-m", "normgrow.study", "--profile", "tiny"], capture_output=True,
                              text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "lib")), timeout=120)
        assert proc.returncode == 2 and f"pid {holder.pid}" in proc.stderr and "teacher" not in proc.stdout
    finally:
        holder.kill()
        holder.wait()
    deadline = time.time() + 10
    while True:  # the kernel releases a dead holder's flock
        try:
            runner_lock().acquire().release()
            break
        except RunDirError:
            assert time.time() < deadline
            time.sleep(0.1)


def test_a_torn_last_line_of_metrics_costs_that_line_only(outputs, capsys):
    from normgrow.rundir import read_metrics
    from normgrow.analysis.regime import eval_curve
    run_dir = write_run(outputs, "post-grow", 0, 5.0)
    path = run_dir / "metrics.jsonl"
    whole = eval_curve(run_dir)
    path.write_text(path.read_text() + '{"kind": "eval", "step": 99')  # a writer killed mid-line
    assert eval_curve(run_dir) == whole and len(whole) >= 3
    assert "last line" in capsys.readouterr().out
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:1] + ["{torn"] + lines[1:]) + "\n")  # inside the file: damaged, and said
    with pytest.raises(RunDirError, match="line 2 is not JSON"):
        read_metrics(run_dir)
    assert eval_curve(run_dir) == []


def test_a_record_written_again_for_a_step_replaces_the_earlier_one(outputs):
    from normgrow.rundir import read_metrics
    run_dir = write_run(outputs, "post-grow", 0, 5.0)
    path = run_dir / "metrics.jsonl"
    path.write_text(path.read_text() + json.dumps({"kind": "eval", "step": 0, "tokens": 0, "val_ce": 1.5}) + "\n")
    evals = [r for r in read_metrics(run_dir) if r["kind"] == "eval"]
    assert [r["val_ce"] for r in evals if r["step"] == 0] == [1.5]


def test_a_gap_the_claims_judge_cannot_be_removed_from_the_reference(tmp_path, monkeypatch):
    shutil.copytree(config.PARAMS_DIR, tmp_path / "params")
    monkeypatch.setattr(variants, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setattr(reference, "PARAMS_DIR", tmp_path / "params")
    path = tmp_path / "params" / "reference.yaml"
    text = path.read_text()
    start = text.index("  - {name: freeze")
    path.write_text(text[:start] + text[text.index("# Equivalence margin"):])
    with pytest.raises(ParamError, match="claim 'obs3-freeze' reads gap 'freeze', which is missing from gaps"):
        reference.load_reference()


# What runner.execute_runs does around its runs, with a 'kernel' that holds a multiprocessing lock (as a kernel's
# tqdm does) in place of a notebook: spawn workers (runner._worker_init), SIGTERM raised as KeyboardInterrupt,
# kill_descendants, pool shutdown.
RUNNER = '''
import multiprocessing, signal, subprocess, sys, time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from normgrow import runner

KERNEL = ("import multiprocessing, pathlib, sys, time; lock = multiprocessing.get_context('spawn').Lock(); "
          "pathlib.Path(sys.argv[1]).touch(); time.sleep(120)")
if __name__ == "__main__":
    signal.signal(signal.SIGTERM, runner._raise_keyboard_interrupt)
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"), initializer=runner._worker_init,
                               initargs=(None,))
    try:
        for i in range(2):
            pool.submit(subprocess.run, [sys.executable, "-c", KERNEL, str(Path(sys.argv[1]) / f"kernel{i}")])
        time.sleep(120)
    except KeyboardInterrupt:
        start = time.time()
        runner.kill_descendants()
        print(f"stopped in {time.time() - start:.1f} s", flush=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
'''


def test_sigterm_stops_the_runs_without_a_traceback(tmp_path):
    """SIGTERM to the runner stops its workers and their kernels and leaves no traceback: multiprocessing's
    resource trackers are left to end by themselves (utils.descendants). Killing the runner's own tracker used to
    leave 5 `resource_tracker KeyError` tracebacks, after a 5 s wait."""
    (tmp_path / "runner.py").write_text(RUNNER)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO / "lib"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while not all((tmp_path / f"kernel{i}").exists() for i in range(2)) and time.time() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "kernel0").exists() and (tmp_path / "kernel1").exists(), "the kernels did not start"
    proc.terminate()
    log = proc.communicate(timeout=60)[0]
    assert "stopped in" in log and "Traceback" not in log, log
    assert float(log.split("stopped in ")[1].split(" s")[0]) < 5.0  # nothing waited for the trackers' timeout


@pytest.fixture
def read_only_runs(outputs):
    """outputs/runs/tiny, a folder no write reaches: a read-only tmpfs for root (whom file modes do not stop), mode
    0o500 for a user."""
    folder = outputs / "runs" / "tiny"
    folder.mkdir(parents=True)
    if os.geteuid() != 0:
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)]).returncode != 0:
        pytest.skip("root without the right to mount: no folder here refuses root's writes")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_run_folder_is_one_error_line_before_any_kernel(read_only_runs, capsys, monkeypatch):
    """Before, the run lock raised a raw OSError in each kernel and the study named as each failure an executed
    notebook that could not exist."""
    from normgrow import study
    import fakes
    fakes.install(monkeypatch)
    with pytest.raises(RunDirError, match=r"runs/tiny/pre-joint-s0 cannot be created \((Read-only file system|"
                                          r"Permission denied)\)"):
        runner.Job("pre-joint-s0", {"seed": 0, "run_name": "pre-joint-s0", "norm": "pre", "schedule": "joint"},
                   {}).spec("tiny", None)
    with pytest.raises(RunDirError, match=r"runs/tiny/run cannot be created"):
        rundir.RunLock(read_only_runs / "run").acquire()
    capsys.readouterr()
    assert study.main(["--profile", "tiny", "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "runs/tiny is not writable" in err[0], err
