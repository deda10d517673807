"""Parameter validation (config.py): every bad value fails at load time, with the key or the file and line."""
import math
import re
import shutil

import numpy as np
import pytest
import torch

from normgrow import config
from normgrow.config import ParamError, check_seed, load_profile


@pytest.mark.parametrize("key,value,match", [
    ("train.device", "banana", "train.device='banana' is not a device; allowed values: auto, cpu, cuda, cuda:N, mps"),
    ("teacher.device", "cuda:x", "teacher.device='cuda:x' is not a device"),
    ("train.betas", [2, 3], r"train.betas=\[2, 3\] must be two numbers in \[0, 1\)"),
    ("train.betas", [0.9], r"train.betas=\[0.9\] must be two numbers"),
    ("student.init_std", -1, r"student.init_std=-1.0 must be > 0"),
    ("student.init_std", float("inf"), "student.init_std=inf must be a finite number"),
    ("train.lr", float("nan"), "train.lr=nan must be > 0 and finite"),
    ("train.lr", "inf", "train.lr=inf must be > 0 and finite"),
    ("train.lr", {"pre": float("nan"), "post": 1e-3}, "train.lr=nan must be > 0 and finite"),
    ("distill.temperature", float("nan"), "distill.temperature=nan must be a finite number"),
    ("train.min_lr_ratio", 1.5, r"train.min_lr_ratio=1.5 must be in \[0, 1\]"),
    ("train.grad_clip", 0, "train.grad_clip=0.0 must be > 0"),
    ("data.split_seed", 2 ** 64, r"data.split_seed=18446744073709551616 must be an integer in \[0, 2\*\*32\)"),
    ("data.source", {"files": ["a.txt"], "weights": [float("nan")]}, r"data.source.weights\[0\]=nan must be a finite number"),
    # an unquoted `train.compile: on` (YAML 1.1 reads it as true) is named with the fix
    ("train.compile", True, r'train.compile: expected str, got True \(YAML reads an unquoted on, off, yes or no as a '
                            r'boolean: write train.compile: "on"\)'),
])
def test_bad_values_fail_at_load(key, value, match):
    with pytest.raises(ParamError, match=match):
        load_profile("tiny", {key: value})


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1", "mps"])
def test_device_names_accepted(device):
    assert load_profile("tiny", {"train.device": device}).train.device == device


def test_committed_profiles_load():
    for name in config.available_profiles():
        assert load_profile(name).name == name


def test_seed_range_is_what_numpy_and_torch_accept():
    top = config.SEED_LIMIT - 1
    assert check_seed("seed", top) == top
    np.random.seed(top)  # the narrowest seeding API: the largest allowed seed works there
    torch.manual_seed(top)
    with pytest.raises(ValueError):
        np.random.seed(config.SEED_LIMIT)  # ... and the first rejected one is rejected there too
    for bad in (config.SEED_LIMIT, 18446744073709551616, -1, True, 1.0, "3"):
        with pytest.raises(ParamError, match=r"seed=.* must be an integer in \[0, 2\*\*32\)"):
            check_seed("seed", bad)


def test_integer_override_key():
    with pytest.raises(ParamError, match="override key 3 must be a dotted string"):
        load_profile("tiny", {3: 1})


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """A params dir holding a copy of the tiny profile; returns the profiles folder."""
    (tmp_path / "profiles").mkdir()
    shutil.copy(config.PARAMS_DIR / "profiles" / "tiny.yaml", tmp_path / "profiles" / "tiny.yaml")
    monkeypatch.setattr(config, "PARAMS_DIR", tmp_path)
    return tmp_path / "profiles"


def test_profile_files_must_be_complete(profiles):
    (profiles / "empty.yaml").write_text("# nothing here\n")
    with pytest.raises(ParamError, match=r"empty.yaml is empty; a profile needs the sections teacher, data"):
        load_profile("empty")
    tiny = (profiles / "tiny.yaml").read_text()
    (profiles / "nocache.yaml").write_text(tiny.replace("cache:\n  k: 8\n", ""))
    with pytest.raises(ParamError, match=r"nocache.yaml lacks the section\(s\) cache"):
        load_profile("nocache")
    (profiles / "list.yaml").write_text("- teacher\n")
    with pytest.raises(ParamError, match="list.yaml is not a mapping of sections"):
        load_profile("list")
    assert load_profile("tiny").cache.k == 8


def test_a_derived_profile_is_its_base_with_overrides(profiles):
    """base + dotted overrides: the base's every other value (its per-arm lrs included), the file's own name; bad
    forms are named with the file."""
    (profiles / "wide.yaml").write_text("base: tiny\noverrides: {student.d_model: 64, student.parametrization: mup}\n")
    wide, tiny = load_profile("wide"), load_profile("tiny")
    assert wide.name == "wide" and wide.student.d_model == 64 and wide.student.parametrization == "mup"
    assert wide.train == tiny.train and wide.data == tiny.data
    assert load_profile("wide", {"student.d_model": 96}).student.d_model == 96
    for text, match in (("base: tiny\nstudent: {d_model: 8}\n", r"keys base, overrides only"),
                        ("base: nowhere\n", r"base='nowhere' is not a profile; allowed values: .*tiny"),
                        ("base: loop\n", r"base='loop' derives from itself"),
                        ("base: tiny\noverrides: {student.d_model: -1}\n", r"loop.yaml: student.d_model=-1")):
        (profiles / "loop.yaml").write_text(text)
        with pytest.raises(ParamError, match=match):
            load_profile("loop")


def test_duplicate_key_names_key_file_and_line(profiles):
    tiny = (profiles / "tiny.yaml").read_text()
    assert "  lr: 3.0e-3\n" in tiny
    (profiles / "dup.yaml").write_text(tiny.replace("  lr: 3.0e-3\n", "  lr: 3.0e-3\n  lr: 1.0e-2\n"))
    line = tiny.splitlines().index("  lr: 3.0e-3") + 2  # 1-based line of the second lr
    with pytest.raises(ParamError, match=rf"dup.yaml:{line}:3: invalid YAML: duplicate key 'lr' "
                                         rf"\(first given on line {line - 1}\)"):
        load_profile("dup")
    # merge keys are not duplicates; explicit keys still override merged ones
    assert config.read_yaml(_write(profiles / "merge.yaml", "a: &x {k: 1}\nb: {<<: *x, k: 2}\n")) == \
        {"a": {"k": 1}, "b": {"k": 2}}


def test_invalid_yaml_names_file_and_line(profiles):
    (profiles / "bad.yaml").write_text("teacher:\n  source: bundled\ndata: [1, 2\n")
    with pytest.raises(ParamError, match=r"bad.yaml:\d+:\d+: invalid YAML: .*fix the file") as e:
        load_profile("bad")
    assert "<unicode string>" not in str(e.value)


def _write(path, text):
    path.write_text(text)
    return path


def test_nan_check_does_not_reject_finite_floats():
    p = load_profile("tiny", {"train.lr": "3e-3", "student.init_std": 0.05})
    assert p.train.lr == 3e-3 and math.isfinite(p.student.init_std)


@pytest.mark.parametrize("processes", [0, -1, 1.5, True, "2"])
def test_bad_processes_parameter_is_named(processes):
    from normgrow.config import with_processes
    with pytest.raises(ParamError, match=r"processes=.* must be a positive integer"):
        with_processes({}, processes)


def test_processes_parameter_sets_both_process_keys():
    from normgrow.config import with_processes
    assert with_processes({"train.lr": 1e-3}, None) == {"train.lr": 1e-3}
    assert with_processes(None, 2) == {"train.processes": 2, "teacher.processes": 2}
    profile = load_profile("tiny", with_processes({}, 2))
    assert profile.train.processes == profile.teacher.processes == 2


def test_study_seeds_take_lists_and_ranges(capsys):
    from normgrow.runner import parse_seeds
    from normgrow.study import load_study, main
    assert parse_seeds(["0-5"]) == [0, 1, 2, 3, 4, 5]
    assert parse_seeds(["0", "1", "2"]) == [0, 1, 2]
    assert parse_seeds(["0-2", "7", "9-9"]) == [0, 1, 2, 7, 9]
    runs = load_study(seeds=parse_seeds(["0-2", "1-3"]), variants=["pre-grow"])  # repeats dropped, with a note
    assert [r.seed for r in runs] == [0, 1, 2, 3] and "duplicate seeds ignored: 1 2" in capsys.readouterr().out
    for word in ("5-2", "a", "-1", "1-", "1.5", "0-2-4", ""):
        with pytest.raises(ParamError, match=rf"--seeds '{word}' is neither a seed \(an integer >= 0, e\.g\. 3\) nor a "
                                             r"range first-last with first <= last \(e\.g\. 0-5\)"):
            parse_seeds([word])
    assert main(["--profile", "tiny", "--seeds", "0-2", "5-2"]) == 2  # refused before any work
    assert "error: --seeds '5-2' is neither a seed" in capsys.readouterr().err


@pytest.mark.parametrize("old,new,match", [
    ("equivalence_margin: 0.02", "equivalence_margin: -1", "equivalence_margin=-1.0 must be a finite number > 0"),
    ("equivalence_margin: 0.02", "equivalence_margin: .nan", "equivalence_margin=nan must be a finite number"),
    ("{multiple: 3, of: grow}", "{multiple: 0, of: grow}", "depth_margin.multiple=0.0 must be a finite number > 0"),
    ("{multiple: 3, of: grow}", "{multiple: 3, of: matched}",
     "depth_margin.of='matched' must name a gap with a nonzero reference value; allowed values: joint, grow"),
    ("{multiple: 3, of: grow}", "0.1", "depth_margin: expected a mapping, got 0.1"),
    ("equivalence_margin: 0.02", "alpha: 0.05",
     "missing key 'equivalence_margin'; required keys: gaps, equivalence_margin, depth_margin, claims"),
    ("equivalence_margin: 0.02", "equivalence_margin: 0.02\nalpha: 0.05", "unknown key 'alpha'; allowed keys: gaps, "),
])
def test_reference_margins_fail_at_load(tmp_path, monkeypatch, old, new, match):
    from normgrow.analysis import reference, variants
    shutil.copytree(config.PARAMS_DIR, tmp_path / "params")
    monkeypatch.setattr(variants, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setattr(reference, "PARAMS_DIR", tmp_path / "params")
    loaded = reference.load_reference()
    assert loaded.equivalence_margin == 0.02 and loaded.depth_margin == pytest.approx(3 * 0.0328)
    path = tmp_path / "params" / "reference.yaml"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(ParamError, match=match):
        reference.load_reference()


def test_stage_tokens_must_be_whole_steps_and_a_bad_value_names_its_file():
    """[4000, 4000, 4000] at 512 tokens a step used to be rounded per phase: the joint arm trained 11,776 tokens and
    the grown arm 10,752 (9% fewer), silently. Refused now, naming the profile's file, the overrides and the key."""
    from normgrow.config import PARAMS_DIR
    tiny = PARAMS_DIR / "profiles" / "tiny.yaml"
    with pytest.raises(ParamError, match=re.escape(f"{tiny} with overrides {{'train.stage_tokens': [4000, 4000, "
                                                   "4000]}: train.stage_tokens=[4000, 4000, 4000]: every stage must be whole "
                                                   "steps of train.batch_size x data.seq_len = 512 tokens, and 4000 "
                                                   "is not (e.g. 3584 or 4096)")):
        load_profile("tiny", {"train.stage_tokens": [4000, 4000, 4000]})
    with pytest.raises(ParamError, match=re.escape(f"{tiny} with overrides {{'train.grad_clip': -1.0}}: "
                                                   "train.grad_clip=-1.0 must be > 0")):
        load_profile("tiny", {"train.grad_clip": -1.0})
    assert load_profile("tiny", {"train.stage_tokens": [512, 1024, 4096]}).train.stage_tokens == (512, 1024, 4096)


def test_step_budget_is_checked_before_any_work(tmp_path, monkeypatch):
    """A batch larger than the training split, or a step larger than the machine's memory, is a ParamError from
    make_run_spec: nothing allocated, no run directory (train.batch_size: 100000000 used to die after 80 s in
    Batches with a bare MemoryError, leaving one behind)."""
    from types import SimpleNamespace

    from normgrow.train import spec
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    with pytest.raises(ParamError, match=r"train.batch_size=100000000 is more rows per step than the training split "
                                         r"has: 256 \(data.train_tokens=16384 // data.seq_len=64\)"):
        spec.make_run_spec("tiny", overrides={"train.batch_size": 100_000_000,
                                              "train.stage_tokens": [100_000_000 * 64] * 3})
    big = {"train.device": "cpu", "data.train_tokens": 8192 * 64, "train.batch_size": 8192,
           "train.stage_tokens": [8192 * 64] * 3}
    batch, activations = spec.step_memory(load_profile("tiny", big))
    assert (batch, activations) == (21 + 12 * 8, 4 * (4 * 32 + 3 * 64) * 3)  # k 8, d_model 32, d_ff 64, depth 3
    need = 8192 * 64 * (batch + activations)
    monkeypatch.setattr(spec.psutil, "virtual_memory", lambda: SimpleNamespace(total=need - 1))
    with pytest.raises(ParamError, match=r"train.batch_size=8192: one step needs at least 1.9 GiB \(8192 rows x 64 "
                                         r"positions x \(117 bytes of batch arrays \+ 3840 bytes of activations\)"):
        spec.make_run_spec("tiny", overrides=big)
    monkeypatch.setattr(spec.psutil, "virtual_memory", lambda: SimpleNamespace(total=need))
    assert spec.make_run_spec("tiny", overrides=big).profile.train.batch_size == 8192
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("text,match", [
    ("schedule: grow\n", r"zz.yaml: missing key 'norm'; required keys: norm, schedule"),
    ("- norm: post\n  schedule: grow\n", r"zz.yaml: a run file is a mapping of the keys norm, schedule, "
                                        r"freeze_prefix, match_active_layer_tokens \(got \[\{'norm'"),
    ("", r"zz.yaml: a run file is a mapping .*\(got an empty file\)"),
])
def test_bad_run_files_are_named(tmp_path, monkeypatch, text, match):
    from normgrow.analysis import reference, variants
    shutil.copytree(config.PARAMS_DIR, tmp_path / "params")
    monkeypatch.setattr(variants, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setattr(reference, "PARAMS_DIR", tmp_path / "params")
    (tmp_path / "params" / "runs" / "zz.yaml").write_text(text)
    with pytest.raises(ParamError, match=match):
        variants.load_variants()


@pytest.mark.parametrize("line,match", [
    ('seeds: [0, 0, "a"]', r"seeds=\[0, 0, 'a'\] must be a non-empty list of integers >= 0"),
    ('seeds: [0, "a", "a", 0]', r"seeds=\[0, 'a', 'a', 0\] must be a non-empty list of integers >= 0"),
    ("seeds: 3", r"seeds=3 must be a non-empty list of integers >= 0, e.g. \[0, 1, 2\]"),
    ("seeds: [0, [1]]", r"seeds=\[0, \[1\]\] must be a non-empty list"),
    ("seeds: []", r"seeds=\[\] must be a non-empty list"),
])
def test_bad_study_seeds_are_named(tmp_path, line, match):
    from normgrow.study import load_study
    path = _write(tmp_path / "study.yaml", f"runs: [pre-joint]\n{line}\n")
    with pytest.raises(ParamError, match=rf"{path}: {match}"):
        load_study(path)


def test_bad_study_runs_are_named(tmp_path):
    from normgrow.study import load_study
    path = _write(tmp_path / "study.yaml", "runs: pre-joint\nseeds: [0]\n")
    with pytest.raises(ParamError, match=rf"{path}: runs='pre-joint' must be a non-empty list of run file names "
                                         r"\(post-grow-freeze, post-grow, "):
        load_study(path)
    assert [r.name for r in load_study(_write(path, "runs: [pre-joint]\nseeds: [0, 1]\n"))] == ["pre-joint-s0",
                                                                                             "pre-joint-s1"]


def test_study_seeds_per_profile(tmp_path):
    """seeds may map profile names to lists, ``default`` covering the others; an unknown profile key or a profile
    with neither its own list nor a default is named."""
    from normgrow.study import load_study, study_seeds
    path = _write(tmp_path / "study.yaml", "runs: [pre-joint]\nseeds: {cpu: [0, 1, 2, 3], default: [0, 1]}\n")
    assert study_seeds("cpu", path) == [0, 1, 2, 3] and study_seeds("gpu", path) == [0, 1]
    assert [r.seed for r in load_study(path, profile="cpu")] == [0, 1, 2, 3]
    assert [r.seed for r in load_study(path, profile="quick")] == [0, 1]
    assert [r.seed for r in load_study(path, seeds=[5], profile="cpu")] == [5]  # --seeds wins
    with pytest.raises(ParamError, match=r"seeds.cpus names no profile; allowed keys: .*cpu.*, default"):
        study_seeds("cpu", _write(path, "runs: [pre-joint]\nseeds: {cpus: [0]}\n"))
    with pytest.raises(ParamError, match=r"seeds gives no list for profile 'gpu' and no default"):
        study_seeds("gpu", _write(path, "runs: [pre-joint]\nseeds: {cpu: [0]}\n"))
    with pytest.raises(ParamError, match=r"seeds.cpu=\[-1\] must be a non-empty list of integers >= 0"):
        study_seeds("cpu", _write(path, "runs: [pre-joint]\nseeds: {cpu: [-1]}\n"))


@pytest.mark.parametrize("text,match", [
    ("norm: banana\nschedule: grow\n", r"zz.yaml: norm='banana' is not allowed; allowed values: pre, post"),
    ("norm: post\nschedule: sideways\n", r"zz.yaml: schedule='sideways' is not allowed; allowed values: joint, grow"),
    ("norm: post\nschedule: grow\nfreeze_prefix: maybe\n", r"zz.yaml: freeze_prefix: expected bool, got 'maybe'"),
    ("norm: post\nschedule: grow\nnaem: x\n", r"zz.yaml: unknown key 'naem'; allowed keys: norm, schedule, freeze_prefix"),
])
def test_bad_run_file_values_name_the_file_and_key(tmp_path, monkeypatch, text, match):
    """A value no run accepts is named with its run file and key when the run files are read, and the study runner
    reads every run file (and params/reference.yaml) before its first run: nothing trains, nothing is written."""
    from normgrow import study
    from normgrow.analysis import reference, variants
    shutil.copytree(config.PARAMS_DIR, tmp_path / "params")
    monkeypatch.setattr(variants, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setattr(reference, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    (tmp_path / "params" / "runs" / "zz.yaml").write_text(text)
    with pytest.raises(ParamError, match=match):
        variants.load_variants()
    with pytest.raises(ParamError, match=match):
        study.run_study("tiny", seeds=[0], variants=["post-grow"])  # zz is not one of its runs, and still read
    assert not (tmp_path / "outputs").exists()


def test_the_reference_is_checked_before_the_first_run(tmp_path, monkeypatch):
    from normgrow import study
    from normgrow.analysis import reference, variants
    shutil.copytree(config.PARAMS_DIR, tmp_path / "params")
    monkeypatch.setattr(variants, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setattr(reference, "PARAMS_DIR", tmp_path / "params")
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    path = tmp_path / "params" / "reference.yaml"
    path.write_text(path.read_text().replace("equivalence_margin: 0.02", "equivalence_margin: -1"))
    with pytest.raises(ParamError, match="equivalence_margin"):
        study.run_study("tiny", seeds=[0], variants=["post-grow"])
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("args,match", [
    (["run", "--profile", "tiny", "--norm", "banana", "--schedule", "grow"], "norm='banana' is not allowed"),
    (["run", "--profile", "tiny", "--norm", "pre", "--schedule", "grow", "--overrides", "[1"],
     "--overrides '\\[1' is not YAML"),
    (["cache", "--profile", "tiny", "--overrides", "{cache.k: -1}"], r"cache.k=-1 must be > 0"),
    (["cache", "--profile", "nosuch"], "profile='nosuch' is not a profile"),
])
def test_the_command_line_names_a_bad_parameter_in_one_line(tmp_path, monkeypatch, capsys, args, match):
    """python -m normgrow run / cache: a bad parameter is one `error: ...` line and exit code 2, no traceback."""
    import re
    from normgrow.__main__ import main
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and re.search(match, err), err


@pytest.mark.parametrize("text,flags,needle", [
    ("executor: cluster\n", {}, "executor='cluster' is not allowed; allowed values: local, slurm"),
    ("executor: local\nslurm: {cpus: 2}\n", {}, "unknown key slurm.cpus; allowed keys: partition, time_limit_min"),
    ("executor: local\nslurm: {in_flight: 0}\n", {}, "slurm.in_flight=0 must be an integer >= 1"),
    ("executor: local\n", {"time_limit_min": -5}, "slurm.time_limit_min=-5 must be an integer >= 1"),
    ("executor: local\nslurm: {partition: ''}\n", {}, "slurm.partition='' must be a partition's name or null"),
    ("executor: local\nwhere: here\n", {}, "unknown key 'where'; allowed keys: executor, slurm"),
])
def test_bad_executor_parameters_are_named(tmp_path, text, flags, needle):
    """params/executors.yaml and the command line's flags over it are validated once, naming the key."""
    from normgrow.runner import load_executor
    path = _write(tmp_path / "executors.yaml", text)
    with pytest.raises(ParamError, match=re.escape(needle)):
        load_executor(flags, path)


def test_executor_flags_override_the_file():
    from normgrow.cli import PARSERS
    from normgrow.runner import executor_of, load_executor
    assert load_executor().executor == "local"  # the repository's default
    args = PARSERS["grid"]().parse_args(["--partition", "gpu", "--in-flight", "3", "--cpus-per-run", "4"])
    chosen = executor_of(args)
    assert (chosen.slurm.partition, chosen.slurm.in_flight, chosen.slurm.cpus_per_run) == ("gpu", 3, 4)
    assert chosen.slurm.time_limit_min == load_executor().slurm.time_limit_min


def test_each_profile_key_is_declared_once_and_its_rule_is_what_the_checks_read():
    """config.RULES holds every key of every section, from the field that declares it (its schema.py annotation and setting()); the
    identity's keys not compared and a run's unread growth keys come from those declarations, and every key with
    allowed values refuses another value, naming them."""
    import dataclasses
    from normgrow import identity
    from normgrow.train.spec import unread_keys
    keys = [f"{name}.{f.name}" for name, cls in config.SECTIONS.items() for f in dataclasses.fields(cls)]
    assert list(config.RULES) == keys and len(set(keys)) == len(keys)
    assert set(identity.NOT_COMPARED) == {"profile.teacher.processes", "profile.teacher.threads",
                                          "profile.teacher.sanity", "profile.train.eval_after_growth",
                                          "profile.train.trackers"}
    grows_only = {"student.new_block_init", "train.optimizer_on_grow", "train.lr_schedule"}
    assert {k for k, r in config.RULES.items() if r.grows_only} == grows_only
    assert grows_only <= set(unread_keys(load_profile("tiny"), "pre", "joint"))
    assert not grows_only & set(unread_keys(load_profile("tiny"), "pre", "grow"))
    for key, rule in config.RULES.items():
        allowed = rule.allowed()
        if allowed is None:
            continue
        with pytest.raises(config.ParamError, match=f"allowed values: {', '.join(allowed)}"):
            load_profile("tiny", {key: "not-a-value"})
