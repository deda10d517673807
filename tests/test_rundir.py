"""The run directory contract (rundir.py) and what train.py guarantees through it: one writer per run, no run with
other settings taken for a study run, non-finite numbers stop a run, damaged checkpoints are replaced or named."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

import fakes
from normgrow import identity, rundir
from normgrow.train import run as train
from normgrow.config import ParamError, load_profile
from normgrow.rundir import RunDirError, RunLock
from normgrow.train.spec import RunSpec, derive_run_name, make_run_spec
from normgrow.train.run import NonFiniteError, run_variant


def spec(run_name="pre-grow-s0", **kw):
    return make_run_spec(profile="tiny", norm=kw.pop("norm", "pre"), schedule=kw.pop("schedule", "grow"),
                         run_name=run_name, overrides=kw.pop("overrides", fakes.TINY_OVERRIDES), **kw)


def test_names_and_paths_stay_inside_outputs(outputs):
    for bad in ("..", "../x", "a/b", "/tmp/victim", "a\n", "", ".hidden", "x" * 129, 3):
        with pytest.raises(ParamError):
            rundir.check_name("run_name", bad)
    assert rundir.run_path("tiny", "pre-grow-s0") == (outputs / "runs" / "tiny" / "pre-grow-s0").resolve()
    (outputs / "runs" / "tiny").mkdir(parents=True)
    (outputs / "runs" / "tiny" / "link").symlink_to(outputs.parent)  # a symlinked run dir pointing outside
    with pytest.raises(ParamError, match="outside"):
        rundir.run_path("tiny", "link")


def test_overrides_change_the_derived_name():
    plain = derive_run_name("pre", "single", False, None, 0)
    assert plain == "pre-single-s0"
    tuned = derive_run_name("pre", "single", False, None, 0, {"train.lr": 0.5})
    assert tuned.startswith("pre-single-o") and tuned.endswith("-s0") and tuned != plain
    assert make_run_spec(profile="tiny", schedule="single", overrides={"train.lr": 0.5}).run_name == tuned


def test_summary_record_fails_loudly(outputs):
    summary = run_variant(spec(), progress=False)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    assert rundir.read_summary(run_dir).to_json() == summary
    raw = json.loads((run_dir / "summary.json").read_text())
    raw["valid_ce"] = raw.pop("val_ce")  # a renamed field
    (run_dir / "summary.json").write_text(json.dumps(raw))
    with pytest.raises(RunDirError, match=r"missing field\(s\) \['val_ce'\], unknown field\(s\) \['valid_ce'\]"):
        rundir.read_summary(run_dir)
    raw["val_ce"] = "5.0"
    del raw["valid_ce"]
    (run_dir / "summary.json").write_text(json.dumps(raw))
    with pytest.raises(RunDirError, match="field val_ce='5.0' is not a float"):
        rundir.read_summary(run_dir)


def test_a_finished_run_missing_its_summary_is_finished_again(outputs):
    """summary.json records metrics.jsonl (lines, sha256); a finished run whose summary.json was lost resumes from
    its last phase checkpoint (it has no last.pt) and is finished again with the same numbers, without training."""
    first = run_variant(spec(), progress=False)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    assert first["metrics"] == rundir.metrics_record(run_dir)
    assert first["metrics"]["lines"] == len((run_dir / "metrics.jsonl").read_text().splitlines())
    (run_dir / "summary.json").unlink()
    again = run_variant(spec(), progress=False)
    assert {k: again[k] for k in ("val_ce", "steps", "tokens", "phases", "metrics")} == \
        {k: first[k] for k in ("val_ce", "steps", "tokens", "phases", "metrics")}
    rundir.read_finished(run_dir)


def test_records_written_before_the_placement_keys_still_read_and_match(outputs):
    """summary.json without val_ce_after_growth reads it as None; config.json without student.mix_alpha and
    student.gate_ramp_steps (absent keys compare as their defaults) is the same identity when the profile has their
    defaults, and another value still differs."""
    summary = run_variant(spec(), progress=False)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    assert [p["val_ce_after_growth"] is None for p in summary["phases"]] == [True, False, False]
    raw = json.loads((run_dir / "summary.json").read_text())
    for phase in raw["phases"]:
        del phase["val_ce_after_growth"]
    (run_dir / "summary.json").write_text(json.dumps(raw))
    assert [p.val_ce_after_growth for p in rundir.read_summary(run_dir).phases] == [None] * 3
    recorded = rundir.read_identity(run_dir)
    del recorded["profile"]["student"]["mix_alpha"], recorded["profile"]["student"]["gate_ramp_steps"]
    expected = spec().identity() | {"teacher_key": recorded["teacher_key"]}
    assert identity.identity_differences(recorded, expected) == []
    other = json.loads(json.dumps(expected))  # a pre-norm run never records another mix_alpha (train.unread_keys)
    other["profile"]["student"]["mix_alpha"] = 0.5
    assert identity.identity_differences(recorded, other) == ["profile.student.mix_alpha"]


def test_one_writer_per_run_directory(outputs):
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    with RunLock(run_dir):
        with pytest.raises(RunDirError, match=rf"being written by another process \(pid {__import__('os').getpid()}"):
            run_variant(spec(), progress=False)
    # a lock left by a process that died is taken over: flock is released with its holder
    subprocess.run([sys.executable, "-c", f"import fcntl, os; fd = os.open({str(run_dir / 'LOCK')!r}, os.O_RDWR); "
                    "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'99999'); os._exit(9)"], check=False)
    assert run_variant(spec(), progress=False)["steps"] == 12


def test_non_finite_loss_stops_the_run_naming_the_step(outputs, monkeypatch):
    from normgrow.train import distill
    real = distill.distill_loss_chunked
    calls = {"n": 0}

    def poisoned(*args, **kw):
        loss, stats = real(*args, **kw)
        calls["n"] += torch.is_grad_enabled()  # training steps only (evaluation runs under no_grad)
        return (loss * float("nan"), stats) if calls["n"] == 5 and torch.is_grad_enabled() else (loss, stats)

    monkeypatch.setattr(distill, "distill_loss_chunked", poisoned)
    with pytest.raises(NonFiniteError, match=r"loss=nan, grad_norm=nan at step 5; the run stops unfinished"):
        run_variant(spec(), progress=False)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    assert not (run_dir / "summary.json").exists()
    assert "NaN" not in (run_dir / "metrics.jsonl").read_text()


def test_non_finite_loss_from_the_cache_names_its_file_and_row(outputs, tmp_path):
    """A row of the teacher cache that is not a distribution (NaN log-probs) makes the loss NaN: the error names
    the cache file, the row and the position, and says to rebuild the cache rather than lower the lr."""
    from normgrow.data import teacher_cache
    cache = teacher_cache.ensure_cache(None)  # the synthetic cache of the outputs fixture
    cache.dir = tmp_path / "teacher" / cache.key
    cache.train.topk_logp[37, 5] = np.nan
    with pytest.raises(NonFiniteError, match=r"loss=nan.*the teacher cache is the cause: .*train/topk_logp.npy: the "
                                             r"top-k probabilities .* at row 37, position 5 is nan.*rm -rf"):
        run_variant(spec(), progress=False)


def _interrupt_at(monkeypatch, step):
    real = train.Batches.__call__

    def interrupted(self, s):
        if s == step:
            raise KeyboardInterrupt
        return real(self, s)
    monkeypatch.setattr(train.Batches, "__call__", interrupted)


def test_damaged_last_checkpoint_resumes_from_the_phase_checkpoint(outputs, monkeypatch):
    reference = run_variant(spec("reference"), progress=False)
    with monkeypatch.context() as m:
        _interrupt_at(m, 7)  # phase 0 ends at step 4; last.pt is rewritten at step 6 (checkpoint_every 3)
        with pytest.raises(KeyboardInterrupt):
            run_variant(spec(), progress=False)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    last = run_dir / "checkpoints" / "last.pt"
    assert torch.load(last, weights_only=False)["counters"]["step"] == 6
    last.write_bytes(last.read_bytes()[:1000])  # truncated
    resumed = run_variant(spec(), progress=False)
    assert (run_dir / "checkpoints" / "last.pt.damaged").is_file()
    for key in ("val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "steps"):
        assert resumed[key] == pytest.approx(reference[key], abs=1e-6), key
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "train"]
    assert steps == list(range(1, 13))


def test_damaged_checkpoints_without_replacement_name_the_way_forward(outputs, monkeypatch):
    with monkeypatch.context() as m:
        _interrupt_at(m, 3)  # before the first phase end: only last.pt (step 3) exists
        with pytest.raises(KeyboardInterrupt):
            run_variant(spec(), progress=False)
    last = outputs / "runs" / "tiny" / "pre-grow-s0" / "checkpoints" / "last.pt"
    last.write_bytes(b"garbage")
    with pytest.raises(RunDirError, match="last.pt is damaged .* rerun with force=True"):
        run_variant(spec(), progress=False)
    assert run_variant(spec(force=True), progress=False)["steps"] == 12


def test_a_run_whose_metrics_lost_records_is_refused_not_resumed(outputs, monkeypatch):
    """metrics.jsonl removed (or cut short) after a checkpoint: resuming would finish the run with a curve missing
    every record before the checkpoint (and the regime gate would read no evaluation). The resume stops, naming the
    file, both counts and the way forward; nothing is written."""
    with monkeypatch.context() as m:
        _interrupt_at(m, 7)  # last.pt at step 6, written with the lines metrics.jsonl held then
        with pytest.raises(KeyboardInterrupt):
            run_variant(spec(), progress=False)
    metrics = outputs / "runs" / "tiny" / "pre-grow-s0" / "metrics.jsonl"
    kept = metrics.read_text().splitlines(keepends=True)
    counted = torch.load(metrics.parent / "checkpoints" / "last.pt", weights_only=False)["counters"]["metrics_lines"]
    metrics.write_text("".join(kept[:3]))
    with pytest.raises(RunDirError, match=rf"metrics.jsonl holds 3 records where the run's checkpoint counted "
                                          rf"{counted}: records were lost .* move .* away or delete it"):
        run_variant(spec(), progress=False)
    assert metrics.read_text() == "".join(kept[:3]) and not (metrics.parent / "summary.json").exists()
    metrics.write_text("".join(kept))  # restored: the run resumes
    assert run_variant(spec(), progress=False)["steps"] == 12


def test_force_empties_only_the_run_directory(outputs):
    run_variant(spec(), progress=False)
    keep = outputs / "runs" / "tiny" / "keep.txt"
    keep.write_text("not a run")
    run_variant(spec(force=True), progress=False)
    assert keep.read_text() == "not a run"


def test_study_refuses_a_run_made_with_other_settings(outputs, capsys):
    """A run launched by hand into a study run's directory with overrides (an lr 0.5 run) is reported by name
    and never counted as finished; the study's own run with the profile's settings is accepted."""
    from normgrow import study
    (single,) = study.load_study(seeds=[0], variants=["pre-single"])
    run_variant(make_run_spec(profile="tiny", schedule="single", run_name="pre-single-s0",
                              overrides=fakes.TINY_OVERRIDES | {"train.lr": 0.5}), progress=False)
    why = identity.directory_conflict(rundir.run_path("tiny", "pre-single-s0"), single.identity("tiny"))
    assert "pre-single-s0 holds a run made with other settings (profile." in why
    other = make_run_spec(profile="tiny", schedule="single", seed=1, run_name="pre-single-s1")
    rundir.run_path("tiny", "pre-single-s1").mkdir(parents=True)
    (rundir.run_path("tiny", "pre-single-s1") / "config.json").write_text(json.dumps(other.identity()))
    (matching,) = study.load_study(seeds=[1], variants=["pre-single"])
    assert identity.directory_conflict(rundir.run_path("tiny", "pre-single-s1"), matching.identity("tiny")) is None


def test_study_drops_repeated_runs_and_seeds(capsys):
    from normgrow import study
    runs = study.load_study(seeds=[0, 0, 1], variants=["pre-single", "pre-single", "post-grow", "post-joint-matched"])
    assert [r.name for r in runs] == ["pre-single-s0", "pre-single-s1", "post-grow-s0", "post-grow-s1",
                                      "post-joint-matched-s0", "post-joint-matched-s1"]
    assert runs[-1].depends_on == "post-grow-s1"
    out = capsys.readouterr().out
    assert "duplicate runs ignored: pre-single" in out and "duplicate seeds ignored: 0" in out


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"),
                                     RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64")])
def test_full_disk_is_named_and_leaves_no_temporary_file(tmp_path, monkeypatch, failure):
    """torch.save on a full disk raises OSError(ENOSPC) or, from its zip writer, a RuntimeError that does not say why:
    both become 'no space left on device' with the file, and the temporary file is removed."""
    import shutil
    from normgrow.student import model as model_module
    student = model_module.Student(model_module.StudentConfig(vocab_size=8, n_layers=1, d_model=8, n_heads=2,
                                                              n_kv_heads=1, head_dim=4, d_ff=16))

    def full(obj, path):
        open(path, "wb").write(b"partial")
        raise failure
    monkeypatch.setattr(model_module.torch, "save", full)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 << 30, 10 << 30, 0))
    target = tmp_path / "checkpoints" / "last.pt"
    with pytest.raises(OSError, match=f"no space left on device while writing {target}"):
        model_module.save_student(target, student)
    assert list(target.parent.iterdir()) == []


def test_finished_run_on_another_teacher_cache_stays_a_result(outputs):
    """A finished run recorded with another teacher cache key (committed bf16 results opened where `auto` gives
    float32) is kept; an unfinished one is refused, since resuming it would mix two caches."""
    from normgrow import study
    (single,) = study.load_study(seeds=[0], variants=["pre-single"])
    recorded = make_run_spec(profile="tiny", schedule="single", run_name="pre-single-s0").identity()
    run_dir = rundir.run_path("tiny", "pre-single-s0")
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(recorded | {"teacher_key": "bf16-cache"}))
    expected = single.identity("tiny") | {"teacher_key": "float32-cache"}
    assert "teacher_key" in identity.directory_conflict(run_dir, expected)
    (run_dir / "summary.json").write_text("{}")
    assert identity.directory_conflict(run_dir, expected) is None


def test_a_profile_key_absent_from_a_recorded_run_compares_as_its_default():
    expected = {"profile": load_profile("tiny").to_dict(), "numerics": 2}
    expected["profile"]["train"]["compile"] = "auto"  # the default (the tiny profile says off)
    recorded = json.loads(json.dumps(expected))
    del recorded["profile"]["data"]["max_doc_chars"]  # recorded before the key existed
    del recorded["profile"]["train"]["compile"]
    assert identity.identity_differences(recorded, expected) == []
    changed = json.loads(json.dumps(expected))
    changed["profile"]["data"]["max_doc_chars"] = 0  # a non-default value is a difference
    assert identity.identity_differences(recorded, changed) == ["profile.data.max_doc_chars"]


def test_a_run_records_the_machine_it_trained_on_and_another_machine_still_counts(outputs, monkeypatch):
    """config.json's environment names the CPU and its bf16 instructions (bf16 matmuls round differently on AMX,
    AVX512-BF16 and emulated paths); a finished run recorded on another machine is still this run (never resumed
    or refused for it)."""
    from normgrow import utils
    monkeypatch.setattr(utils, "cpu_model", lambda: "Test CPU 9000")
    summary = run_variant(spec(), progress=False)
    config = json.loads((outputs / "runs" / "tiny" / "pre-grow-s0" / "config.json").read_text())
    assert config["environment"]["cpu"] == "Test CPU 9000"
    flags = utils.cpu_flags()
    assert config["environment"]["amx_bf16"] == ("amx_bf16" in flags)
    assert config["environment"]["avx512_bf16"] == ("avx512_bf16" in flags)
    monkeypatch.setattr(utils, "cpu_model", lambda: "Another CPU")
    assert run_variant(spec(), progress=False) == summary  # read back, not trained again


def test_a_symlinked_run_directory_is_named_as_seen_and_never_emptied_through(outputs):
    """pre-grow-s0 is a link to another run's directory (post-single-s0, other parameters): every refusal names the
    link, not its target; the advice is to remove the link, never to delete the directory or to pass force=True,
    and force=True does not empty the other run through the link."""
    other = run_variant(spec("post-single-s0", norm="post", schedule="single"), progress=False)
    runs = outputs / "runs" / "tiny"
    (runs / "pre-grow-s0").symlink_to(runs / "post-single-s0", target_is_directory=True)
    link = runs / "pre-grow-s0"
    named = rf"^{link} holds a finished run .*remove the link \(rm {link}\); the directory it points to"
    with pytest.raises(ParamError, match=named) as refused:
        run_variant(spec(), progress=False)
    assert "force=True" not in str(refused.value)
    with pytest.raises(ParamError, match=rf"^{link} is a link to .*post-single-s0; force=True would empty"):
        run_variant(spec(force=True), progress=False)
    assert rundir.read_summary(runs / "post-single-s0").to_json() == other  # untouched
    why = identity.directory_conflict(rundir.run_path("tiny", "pre-grow-s0"), spec().identity())
    assert why.startswith(f"{link} holds a run made with other settings") and "remove the link" in why
    assert "delete" not in why
    (runs / "post-single-s0" / "config.json").unlink()
    with pytest.raises(RunDirError, match=rf"^{link / 'config.json'} is missing.*remove the link"):
        rundir.read_finished(link)


def test_a_profile_file_outside_the_repository_runs(outputs, tmp_path, capsys):
    """A profile is a name or a path: the tiny profile's file copied to a folder outside the repository trains as
    --profile <path>; its runs go under outputs/runs/<file stem>, its spec crosses into a kernel whole (RunSpec.to_json:
    the kernel needs no file), and the other entry points take it too (study results, sweep learning rates by stem)."""
    from normgrow import config, study, sweep
    from normgrow.__main__ import main
    path = tmp_path / "elsewhere" / "mytiny.yaml"
    path.parent.mkdir()
    raw = yaml.safe_load((config.PARAMS_DIR / "profiles" / "tiny.yaml").read_text())
    for dotted, value in fakes.TINY_OVERRIDES.items():  # the tiny profile on the synthetic cache, in the file itself
        section, key = dotted.split(".")
        raw[section][key] = value
    path.write_text(yaml.safe_dump(raw))
    s = make_run_spec(profile=str(path))
    assert s.dir == outputs / "runs" / "mytiny" / "pre-grow-s0" and RunSpec.from_json(s.to_json()) == s
    summary = run_variant(s, progress=False)
    assert summary["profile"] == "mytiny" and rundir.is_finished(outputs / "runs" / "mytiny" / "pre-grow-s0")
    assert rundir.study_dir(str(path)) == outputs / "study" / "mytiny"
    assert study.load_study(profile=str(path), variants=["pre-grow"])[0].name == "pre-grow-s0"
    (tmp_path / "sweep.yaml").write_text("lrs: {tiny: [0.001]}\n")
    with pytest.raises(ParamError, match="no candidate learning rates for profile 'mytiny'"):
        sweep.make_plan(str(path), config_path=tmp_path / "sweep.yaml")
    assert main(["cache", "--profile", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml is not a profile file" in capsys.readouterr().err


def test_the_runner_and_the_run_judge_a_directory_by_one_rule(outputs):
    """A finished run whose config.json holds a key today's identity does not name (recorded by an earlier version)
    is the same run to the runner (runner.plan_jobs), to run_variant (train.resume.prepare_run_dir) and to the report
    (variants.collect_runs): all three go through identity.identity_conflict. Before, run_variant compared every
    recorded key and refused the directory the runner had scheduled as finished."""
    from normgrow import runner
    s = spec()
    summary = run_variant(s, progress=False)
    config = s.dir / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"retired_key": 1}))
    done, failed, _ = runner.plan_jobs("tiny", [runner.Job(s.run_name, {}, s.identity())])
    assert done == {s.run_name} and failed == {}
    assert run_variant(s, progress=False) == summary
    config.write_text(json.dumps(json.loads(config.read_text()) | {"seed": 7}))
    _, failed, _ = runner.plan_jobs("tiny", [runner.Job(s.run_name, {}, s.identity())])
    assert "holds a run made with other settings (seed)" in failed[s.run_name]
    with pytest.raises(ParamError, match=r"holds a finished run with different parameters \(seed\)"):
        run_variant(s, progress=False)
