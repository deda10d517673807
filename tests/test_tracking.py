"""Experiment tracking (tracking.py) and the evaluations after growth: the event file reads back as metrics.jsonl,
and observing a run never changes what it trains."""
from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fakes
from normgrow.train import tracking
from normgrow.config import ParamError, load_profile
from normgrow.identity import identity_differences
from normgrow.rundir import GROWTH_EVAL, read_identity
from normgrow.analysis.regime import eval_curve
from normgrow.train.spec import make_run_spec
from normgrow.train.run import run_variant


def run(name: str, **overrides) -> dict:
    spec = make_run_spec(profile="tiny", norm="pre", schedule="grow", run_name=name,
                         overrides=fakes.TINY_OVERRIDES | overrides)
    return run_variant(spec, progress=False)


def records(outputs, name: str) -> list[dict]:
    return [json.loads(line) for line in (outputs / "runs" / "tiny" / name / "metrics.jsonl").read_text().splitlines()]


def scalars(outputs, name: str) -> dict[str, list]:
    acc = EventAccumulator(str(outputs / "runs" / "tiny" / name / tracking.TENSORBOARD_DIR))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_read_back_as_the_metrics(outputs):
    run("tracked")
    lines = records(outputs, "tracked")
    got = scalars(outputs, "tracked")
    train = [r for r in lines if r["kind"] == "train"]
    assert [s for s, _ in got["train/loss"]] == [r["step"] for r in train] == list(range(1, 13))
    for (_, value), r in zip(got["train/loss"], train):
        assert value == pytest.approx(r["loss"], rel=1e-6)  # float32 in the event file
    assert [v for _, v in got["train/lr"]] == pytest.approx([r["lr"] for r in train], rel=1e-6)
    assert [v for _, v in got["run/depth"]] == [r["depth"] for r in train]  # the phase boundaries: 1, 2, 3
    evals = [r for r in lines if r["kind"] not in ("train", "growth", "boundary")]
    assert [s for s, _ in got["val/ce"]] == [r["step"] for r in evals]
    assert [v for _, v in got["val/ce"]] == pytest.approx([r["val_ce"] for r in evals], rel=1e-6)


def test_committed_runs_get_event_files_replayed_from_their_metrics(tmp_path, monkeypatch, capsys):
    """`python -m normgrow events` (make tensorboard's first step): a finished run with only its committed files
    (config.json, metrics.jsonl, summary.json) gets the event file its tracker would have written, whose scalars
    read back as its metrics.jsonl (the growth records and each evaluation's subset value included); a second call
    writes nothing."""
    import shutil
    from pathlib import Path

    from normgrow.__main__ import main
    from normgrow.rundir import read_metrics
    runs = Path(__file__).resolve().parents[1] / "outputs" / "runs" / "cpu"
    committed = runs / "post-grow-s0"  # a committed grown run of the study
    run_dir = tmp_path / "runs" / "cpu" / committed.name
    run_dir.mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl", "summary.json"):
        shutil.copy(committed / name, run_dir / name)
    other = tmp_path / "runs" / "cpu" / "sweep-post-grow-lr1e-3-wu8-s0"  # a run of no study: chosen on request
    shutil.copytree(run_dir, other)
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    assert main(["events", "--profile", "cpu"]) == 0  # the study's runs by default
    assert ": event files written for 1, the others" in capsys.readouterr().out and not (other / "tensorboard").exists()
    acc = EventAccumulator(str(run_dir / tracking.TENSORBOARD_DIR))
    acc.Reload()
    lines = read_metrics(run_dir)
    train = [r for r in lines if r["kind"] == "train"]
    assert [e.value for e in acc.Scalars("train/loss")] == pytest.approx([r["loss"] for r in train], rel=1e-6)
    whole = [r for r in lines if r.get("kind") in ("eval", "phase_end", "growth_eval") and r.get("full_split", True)]
    assert [e.value for e in acc.Scalars("val/ce")] == pytest.approx([r["val_ce"] for r in whole], rel=1e-6)
    growth = [r for r in lines if r["kind"] == "growth"]
    phases = json.loads((run_dir / "summary.json").read_text())["phases"]
    assert len(growth) == len(phases) - 1 > 0
    assert [e.step for e in acc.Scalars("growth/val_ce_after")] == [r["step"] for r in growth]
    subset = sorted(r["step"] for r in lines if "val_ce_subset" in r or r.get("full_split") is False)
    assert [e.step for e in acc.Scalars("val/ce_subset")] == subset
    assert main(["events", "--profile", "cpu", "--runs", "sweep-*"]) == 0 and (other / "tensorboard").is_dir()
    assert main(["events", "--profile", "cpu", "--runs", "all"]) == 0
    assert "2 finished runs of" in (out := capsys.readouterr().out) and "event files written for 0," in out
    assert main(["events", "--profile", "cpu", "--runs", "nothing-*"]) == 2
    assert "error: --runs nothing-*: no finished run of" in capsys.readouterr().err
    served = []
    monkeypatch.setattr("subprocess.run", lambda command, check: served.append(command))
    assert main(["events", "--profile", "cpu", "--serve", "--serve-args", "--port 6007"]) == 0
    (command,) = served  # TensorBoard on the study's run only, its flags passed on
    assert command[1:] == ["--logdir_spec", f"{run_dir.name}:{run_dir / 'tensorboard'}", "--port", "6007"]


def test_no_trackers_writes_no_event_file(outputs):
    run("untracked", **{"train.trackers": []})
    assert not (outputs / "runs" / "tiny" / "untracked" / tracking.TENSORBOARD_DIR).exists()


@pytest.mark.slow  # trains several runs or starts a process (over 10 s): not in make test-fast
def test_evaluations_after_growth_leave_the_training_bitwise_unchanged(outputs):
    """Two extra evaluations 1 and 2 steps after each growth: the same losses, gradient norms and final numbers to the
    last bit, the extra records marked growth_eval, and the regime's flatness curve the same as without them; the
    two runs are the same run by identity (identity.NOT_COMPARED)."""
    plain = run("plain")
    dense = run("dense", **{"train.eval_after_growth": [1, 2]})
    a, b = records(outputs, "plain"), records(outputs, "dense")
    train = lambda rs: [(r["step"], r["loss"], r["grad_norm"]) for r in rs if r["kind"] == "train"]  # noqa: E731
    assert train(a) == train(b)
    assert plain["val_ce"] == dense["val_ce"] and plain["phases"] == dense["phases"]
    # phases of 4 steps start at steps 4 and 8; eval_every 2 already evaluates steps 6 and 10
    assert [r["step"] for r in b if r["kind"] == GROWTH_EVAL] == [5, 9]
    assert not any(r["kind"] == GROWTH_EVAL for r in a)
    assert eval_curve(outputs / "runs" / "tiny" / "plain") == eval_curve(outputs / "runs" / "tiny" / "dense")
    ida, idb = (read_identity(outputs / "runs" / "tiny" / n) for n in ("plain", "dense"))
    ida["run_name"] = idb["run_name"]
    assert identity_differences(ida, idb) == []


@pytest.mark.parametrize("value", [[0], [4, 2], [2, 2], ["8"]])
def test_bad_evaluations_after_growth_are_refused(value):
    with pytest.raises(ParamError, match="train.eval_after_growth"):
        load_profile("tiny", {"train.eval_after_growth": value})


def test_unknown_or_missing_trackers_are_refused_before_any_work(outputs, monkeypatch):
    with pytest.raises(ParamError, match="tensorboard, wandb, trackio"):
        load_profile("tiny", {"train.trackers": ["mlflow"]})
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda n: None if n == "wandb" else real(n))
    with pytest.raises(ParamError, match="pip install wandb"):
        make_run_spec(profile="tiny", norm="pre", schedule="grow", run_name="w",
                      overrides=fakes.TINY_OVERRIDES | {"train.trackers": ["tensorboard", "wandb"]})
    assert not (outputs / "runs").exists()


@pytest.mark.slow  # trains several runs or starts a process (over 10 s): not in make test-fast
def test_a_tracked_run_gives_accelerate_s_process_state_back(outputs, monkeypatch):
    """A single-process run that leaves accelerate's process state behind makes the ranks a later data-parallel run
    forks from the same process (a notebook, this test session) read rank 0 of 1 from it, and both take the run's
    lock (seen in tests/test_ddp.py after these tests); the state is given back at the end and on an error."""
    from accelerate import PartialState
    assert not PartialState._shared_state
    run("tracked")
    assert not PartialState._shared_state
    import normgrow.train.run as train

    def broken(self, step):
        raise RuntimeError("no batch")

    monkeypatch.setattr(train.Batches, "__call__", broken)
    with pytest.raises(RuntimeError, match="no batch"):  # the run stops at its first step, trackers open
        run("stopped")
    assert not PartialState._shared_state


def test_growth_events_and_the_parameters_land_in_the_run_s_own_event_file(outputs):
    """A grown run's metrics.jsonl holds a growth record per growth (step, new depth, val_ce before: the previous
    phase's end; after: the phase summary's val_ce_after_growth), TensorBoard shows them as growth/* scalars, and
    the hyperparameters sit in the run's own event folder: no second run folder beside it."""
    summary = run("grown")
    growth = [r for r in records(outputs, "grown") if r["kind"] == "growth"]
    assert [(r["step"], r["depth"]) for r in growth] == [(4, 2), (8, 3)]
    phases = summary["phases"]
    assert [r["val_ce_before"] for r in growth] == [p["val_ce"] for p in phases[:2]]
    assert [r["val_ce_after"] for r in growth] == [p["val_ce_after_growth"] for p in phases[1:]]
    got = scalars(outputs, "grown")
    assert got["growth/depth"] == [(4, 2.0), (8, 3.0)]
    assert [v for _, v in got["growth/val_ce_after"]] == pytest.approx([r["val_ce_after"] for r in growth], rel=1e-6)
    folder = outputs / "runs" / "tiny" / "grown" / tracking.TENSORBOARD_DIR
    assert not [p for p in folder.rglob("*") if p.is_dir()]  # accelerate's add_hparams made a timestamped subfolder
    acc = EventAccumulator(str(folder))
    acc.Reload()
    assert acc.summary_metadata  # the hparams plugin's summaries, in this event file


def test_every_evaluation_logs_the_boundary_scales_by_token_group(outputs):
    """A boundary record after every evaluation (step 0 included): rms per token group at each block boundary h_0 ..
    h_depth of the model then, the whole-batch group equal to student.boundary.boundary_rms of the final checkpoint on the
    same fixed batch (up to the run's float32 arithmetic), and TensorBoard's boundary_rms/<group>/h<i> scalars."""
    from normgrow.data.token_classes import DEFAULT_N, group_masks, make_batch
    from normgrow.student.boundary import boundary_rms
    from normgrow.config import load_profile
    from normgrow.data import teacher_cache
    from normgrow.data.vocab import VocabMap
    from normgrow.student.model import load_student
    run("scaled")
    lines = records(outputs, "scaled")
    evals = [r["step"] for r in lines if r["kind"] in ("eval", "phase_end", "growth_eval")]
    bounds = [r for r in lines if r["kind"] == "boundary"]
    assert [r["step"] for r in bounds] == evals and [len(r["rms"]["all"]) for r in bounds][-1] == 3 + 1
    cache = teacher_cache.ensure_cache(load_profile("tiny", fakes.TINY_OVERRIDES))
    batch = make_batch(cache.val, cache, DEFAULT_N)
    model = load_student(outputs / "runs" / "tiny" / "scaled" / "checkpoints" / "final.pt").eval()
    vocab = load_profile("tiny", fakes.TINY_OVERRIDES).student.vocab
    batch["tokens"] = VocabMap.for_cache(cache, vocab).restrict(batch)["tokens"]
    assert bounds[-1]["rms"]["all"] == pytest.approx(boundary_rms(model, batch["tokens"], group_masks(batch["classes"]))["all"], rel=1e-5)
    got = scalars(outputs, "scaled")
    assert [v for _, v in got["boundary_rms/all/h3"]][-1] == pytest.approx(bounds[-1]["rms"]["all"][3], rel=1e-6)
