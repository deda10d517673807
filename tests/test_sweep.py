"""The lr sweep: the tuned file --write generates (the hand-written profile untouched), the choice and its grid
warnings, and a tiny sweep end to end on the synthetic cache (tmp NORMGROW_OUTPUTS, a tmp copy of the profiles, so
params/ is never touched)."""
from __future__ import annotations

import csv
import json
import math
import shutil

import pytest
import yaml

import fakes
from normgrow import config, runner, sweep
from normgrow.config import PARAMS_DIR, ParamError

# fakes' tiny profile, 3 steps per run
OVERRIDES = dict(fakes.TINY_OVERRIDES, **{"train.stage_tokens": [128, 128, 128]})


@pytest.fixture
def outputs(synthetic_outputs):
    return synthetic_outputs


ALL_3E3 = {"joint": 3e-3, "grow": 3e-3, "single": 3e-3}
OTHERS = ("mix", "peri", "deepnorm", "lns")


def test_a_single_lr_becomes_a_value_per_arm_for_every_placement():
    """merge_arms: the swept arms take the choice, every other arm keeps the profile's value; a single value applies
    to every placement, so every placement is written out."""
    merged = sweep.merge_arms("lr", 3e-3, {"pre": {"joint": 1e-3}, "post": {"grow": 1.5e-3}})
    assert merged == {"pre": ALL_3E3 | {"joint": 1e-3}, "post": ALL_3E3 | {"grow": 1.5e-3}} | {n: ALL_3E3 for n in OTHERS}


def test_partial_sweeps_keep_the_other_arms():
    once = sweep.merge_arms("lr", {"pre": 3e-3, "post": 1e-3}, {"post": {"single": 2e-3}})
    assert once == {"pre": ALL_3E3, "post": {"joint": 1e-3, "grow": 1e-3, "single": 2e-3}}
    assert sweep.merge_arms("lr", once, {"pre": {"grow": 6e-3}}) == {
        "pre": ALL_3E3 | {"grow": 6e-3}, "post": {"joint": 1e-3, "grow": 1e-3, "single": 2e-3}}


def test_a_placement_outside_the_study_is_written_for_the_schedules_it_swept():
    """mix swept for joint and grow: the value gains mix's two arms and keeps pre's and post's; a study placement
    missing a schedule is still an error naming the sweep that fills it."""
    current = {"pre": {"joint": 1e-3, "grow": 2e-3, "single": 3e-3}, "post": {"joint": 4e-4, "grow": 5e-4, "single": 6e-4}}
    lr = sweep.merge_arms("lr", current, {"mix": {"joint": 6e-3, "grow": 6e-3}})
    assert lr["mix"] == {"joint": 6e-3, "grow": 6e-3} and lr["pre"]["single"] == 3e-3 and lr["post"]["grow"] == 5e-4
    del current["post"]["single"]
    with pytest.raises(ParamError, match="no value for post-single; sweep it too"):
        sweep.merge_arms("lr", current, {"mix": {"joint": 6e-3}})


def written(profile_dir, name: str = "tiny") -> dict:
    return yaml.safe_load((profile_dir.parent / "tuned" / f"{name}.yaml").read_text())


def rows(norm, scores, schedule="joint"):
    return [{"norm": norm, "schedule": schedule, "lr": lr, "warmup_steps": 48, "val_ce": ce} for lr, ce in scores.items()]


def test_the_choice_is_the_best_mean_over_seeds_and_a_diverged_seed_rules_an_lr_out():
    rows = [{"norm": "post", "schedule": "grow", "lr": lr, "warmup_steps": 48, "seed": seed, "val_ce": ce}
            for lr, ces in {4e-3: [4.80, 4.80], 6e-3: [4.79, 4.78], 8.5e-3: [4.77, 6.60], 1.2e-2: [4.70, math.nan]}.items()
            for seed, ce in enumerate(ces)]
    chosen = sweep.choose_arms(rows)["post"]["grow"]
    assert chosen["lr"] == 6e-3 and chosen["val_ce"] == pytest.approx(4.785)  # 8.5e-3 won seed 0 only
    assert chosen["edge"] is None


def test_argmin_and_grid_edge_warnings_per_arm():
    chosen = sweep.choose_arms(rows("pre", {1e-3: 5.0, 3e-3: 4.5, 1e-2: 4.8}) + rows("post", {1e-3: 4.9, 3e-3: 5.2})
                              + rows("x", {1e-3: 6.0, 3e-3: 5.0, 1e-2: math.nan})
                              + rows("pre", {1e-3: 5.0, 3e-3: 4.8, 1e-2: 4.7}, "grow"))
    one = {"warmup_steps": 48, "warmup_edge": "only"}
    assert chosen["pre"]["joint"] == {"lr": 3e-3, "val_ce": 4.5, "edge": None} | one
    assert chosen["pre"]["grow"] == {"lr": 1e-2, "val_ce": 4.7, "edge": "highest"} | one  # its own optimum
    assert chosen["post"]["joint"] == {"lr": 1e-3, "val_ce": 4.9, "edge": "lowest"} | one
    assert chosen["x"]["joint"] == {"lr": 3e-3, "val_ce": 5.0, "edge": None} | one  # bracketed by a diverged run
    warnings = sweep.grid_warnings(chosen)
    assert [w for w in warnings if "best lr" in w] == [
        "pre-grow: the best lr 1e-02 is the highest point of the grid at warmup 48; extend the grid above it",
        "post-joint: the best lr 1e-03 is the lowest point of the grid at warmup 48; extend the grid below it"]
    # one warmup tried: its optimum is not bracketed, and every arm says so
    assert "pre-joint: the best warmup 48 is the only warmup tried at lr 3e-03; try warmups on both sides of it" \
        in warnings and len(warnings) == 2 + 4
    diverged = sweep.choose_arms(rows("pre", {1e-2: math.inf}))
    assert diverged["pre"]["joint"]["lr"] is None and "every candidate diverged" in sweep.grid_warnings(diverged)[0]


@pytest.mark.parametrize("argv, needle", [
    (["--profile", "huge"], "profile='huge' is not a profile"),
    (["--profile", "tiny", "--lrs", "1e-3", "0"], "lr=0.0 must be a finite number > 0"),
    (["--profile", "tiny", "--norms", "sideways"], "norm='sideways' is not allowed; allowed values: pre, post"),
])
def test_bad_inputs_exit_2_before_any_run(outputs, capsys, argv, needle):
    assert sweep.main(argv) == 2
    assert needle in capsys.readouterr().err
    assert not outputs.exists()


def test_tiny_sweep_end_to_end(outputs, tmp_path):
    profiles = tmp_path / "profiles"
    shutil.copytree(PARAMS_DIR / "profiles", profiles)
    before = (profiles / "tiny.yaml").read_text()
    plan = sweep.make_plan("tiny", ["post"], [3e-3, 1e-3], seeds=[0], overrides=OVERRIDES, schedules=["joint"])
    result = sweep.sweep(plan, write=True, profiles_dir=profiles, progress=False, command="test")

    out = outputs / "sweep" / "tiny" / "post"  # not the study's placements (pre, post): its own folder
    table = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["run_name"] for r in table] == ["sweep-post-joint-lr1e-03-wu2-s0", "sweep-post-joint-lr3e-03-wu2-s0"]
    assert list(table[0]) == list(sweep.COLUMNS)
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["rows"] == result["rows"] and saved["profile"] == "tiny" and saved["command"] == "test"
    best = min(result["rows"], key=lambda r: r["val_ce"])
    assert saved["chosen"]["post"]["joint"]["lr"] == best["lr"]
    assert len(saved["warnings"]) == 2  # two-point grid: the best lr is always at an edge; one warmup tried

    # the choice goes to the generated tuned file; the hand-written profile is not touched
    assert (profiles / "tiny.yaml").read_text() == before
    tuned = written(profiles)
    assert tuned["train.lr"] == {"pre": ALL_3E3, "post": ALL_3E3 | {"joint": best["lr"]}} | {n: ALL_3E3 for n in OTHERS}
    assert "train.warmup_steps" not in tuned  # one warmup tried: the profile's stays
    assert tuned["chosen_by"] == {"post-joint": {"record": str(out / "sweep.json"), "date": saved["date"], "seeds": [0],
                                                 "val_ce": round(best["val_ce"], 4)}}
    # the profile still sets train.lr itself: ambiguous until it says `lr: tuned`, then it trains at the choice
    with pytest.raises(ParamError, match=r"sets train.lr itself while .*tuned/tiny.yaml holds a sweep's choice"):
        config.load_profile(profiles / "tiny.yaml")
    (profiles / "tiny.yaml").write_text(before.replace("  lr: 3.0e-3\n", "  lr: tuned\n"))
    assert config.load_profile(profiles / "tiny.yaml").train.lr == tuned["train.lr"]
    assert (PARAMS_DIR / "profiles" / "tiny.yaml").read_text() == before
    assert not (PARAMS_DIR / "tuned" / "tiny.yaml").exists()

    summary = outputs / "runs" / "tiny" / "sweep-post-joint-lr1e-03-wu2-s0" / "summary.json"
    stamp = summary.stat().st_mtime_ns
    assert sweep.sweep(plan, progress=False)["rows"] == result["rows"]  # resumed: finished runs are read back
    assert summary.stat().st_mtime_ns == stamp


def test_a_sweep_that_extends_the_grid_keeps_the_earlier_candidates(outputs, capsys):
    """A second invocation with other lrs adds its candidates to sweep.csv and the choice instead of replacing the
    record; an earlier candidate whose run is gone is left out of the choice, saying so, and its recorded row is
    kept in sweep.json's dropped (bug: it was lost from the record)."""
    first = sweep.make_plan("tiny", ["post"], [3e-3], seeds=[0], overrides=OVERRIDES, schedules=["joint"])
    sweep.sweep(first, progress=False, command="first")
    second = sweep.make_plan("tiny", ["post"], [1e-3], seeds=[0], overrides=OVERRIDES, schedules=["joint"])
    result = sweep.sweep(second, progress=False, command="second")
    out = outputs / "sweep" / "tiny" / "post"
    table = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["run_name"] for r in table] == ["sweep-post-joint-lr1e-03-wu2-s0", "sweep-post-joint-lr3e-03-wu2-s0"]
    assert result["earlier_runs"] == ["sweep-post-joint-lr3e-03-wu2-s0"] and result["command"] == "second"
    best = min(result["rows"], key=lambda r: r["val_ce"])
    assert result["chosen"]["post"]["joint"]["lr"] == best["lr"]  # the choice is over both invocations' candidates
    shutil.rmtree(outputs / "runs" / "tiny" / "sweep-post-joint-lr3e-03-wu2-s0")
    again = sweep.sweep(second, progress=False, command="third")
    assert [r["run_name"] for r in again["rows"]] == ["sweep-post-joint-lr1e-03-wu2-s0"] and again["earlier_runs"] == []
    assert "an earlier candidate no longer counts, left out of the choice (kept in sweep.json's dropped): " \
           "sweep-post-joint-lr3e-03-wu2-s0" in capsys.readouterr().out
    lost = [r for r in result["rows"] if r["run_name"] == "sweep-post-joint-lr3e-03-wu2-s0"]
    assert [d["row"] for d in again["dropped"]] == lost and "sweep-post-joint-lr3e-03-wu2-s0" in again["dropped"][0]["why"]
    # a later invocation keeps the dropped candidate in the record (not in the choice) with its first reason
    later = sweep.sweep(second, progress=False, command="fourth")
    assert later["dropped"] == again["dropped"] and later["chosen"]["post"]["joint"]["lr"] == 1e-3


def test_a_record_names_the_machine_that_trained_each_candidate(outputs, monkeypatch, capsys):
    """sweep.csv's machine column and sweep.json's machines come from each candidate's config.json: a sweep extended
    on another CPU keeps the earlier candidates' machine (bf16 rounds differently there), and counts each machine's
    runs and wall hours (before, the record did not say which machine trained what)."""
    from normgrow import utils
    monkeypatch.setattr(utils, "cpu_model", lambda: "CPU A")
    sweep.sweep(sweep.make_plan("tiny", ["post"], [3e-3], seeds=[0, 1], overrides=OVERRIDES, schedules=["joint"]),
                progress=False)
    monkeypatch.setattr(utils, "cpu_model", lambda: "CPU B")
    result = sweep.sweep(sweep.make_plan("tiny", ["post"], [1e-3], seeds=[0], overrides=OVERRIDES,
                                         schedules=["joint"]), progress=False)
    table = list(csv.DictReader((outputs / "sweep" / "tiny" / "post" / "sweep.csv").open()))
    assert [(r["lr"], r["seed"], r["machine"]) for r in table] == [
        ("0.001", "0", "CPU B"), ("0.003", "0", "CPU A"), ("0.003", "1", "CPU A")]
    walls = {m: sum(float(r["wall_s"]) for r in table if r["machine"] == m) / 3600 for m in ("CPU A", "CPU B")}
    assert result["machines"] == {"CPU B": {"runs": 1, "run_hours": pytest.approx(walls["CPU B"])},
                                  "CPU A": {"runs": 2, "run_hours": pytest.approx(walls["CPU A"])}}
    printed = capsys.readouterr().out
    assert "trained on CPU A: 2 runs" in printed and "trained on CPU B: 1 run," in printed


def test_write_is_refused_before_training(outputs, tmp_path):
    plan = sweep.make_plan("tiny", ["pre"], [1e-3], overrides=OVERRIDES)
    with pytest.raises(ParamError, match="--write: no profile file"):
        sweep.sweep(plan, write=True, profiles_dir=tmp_path, progress=False)
    assert not (outputs / "runs").exists()


def test_a_profile_reads_tuned_values_from_its_tuned_file_only(tmp_path):
    """`lr: tuned` takes the tuned file's value; without the file, or without the key in it, it is an error naming
    the sweep that writes it."""
    profiles = tmp_path / "profiles"
    shutil.copytree(PARAMS_DIR / "profiles", profiles)
    text = (profiles / "tiny.yaml").read_text().replace("  lr: 3.0e-3\n", "  lr: tuned\n")
    (profiles / "tiny.yaml").write_text(text)
    with pytest.raises(ParamError, match=r"train.lr is tuned, but .*tuned/tiny.yaml does not exist; write it with "
                                         r"python -m normgrow.sweep --profile tiny --write"):
        config.load_profile(profiles / "tiny.yaml")
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "tiny.yaml").write_text("train.warmup_steps: 3\n")
    with pytest.raises(ParamError, match="holds no train.lr"):
        config.load_profile(profiles / "tiny.yaml")
    (tmp_path / "tuned" / "tiny.yaml").write_text("train.lr: {pre: 1.0e-3, post: 2.0e-3}\n")
    assert config.load_profile(profiles / "tiny.yaml").train.lr == {"pre": 1e-3, "post": 2e-3}


def test_a_derived_profile_s_own_sweep_replaces_the_lrs_it_inherits(tmp_path):
    """A derived profile takes its base's lrs (transferred) until its own sweep writes its tuned file; then the file's
    values replace the inherited ones (the base's runs keep theirs), and an override set by hand beside the file is
    an error naming both."""
    profiles = tmp_path / "profiles"
    shutil.copytree(PARAMS_DIR / "profiles", profiles)
    (profiles / "wide.yaml").write_text("base: tiny\noverrides: {student.d_model: 64}\n")
    assert config.load_profile(profiles / "wide.yaml").train.lr == 3e-3  # tiny's
    arms = ("joint", "grow", "single")
    result = {"date": "2026-12-07", "seeds": [0], "rows": [{"norm": "pre", "schedule": s, "warmup_steps": 2}
                                                           for s in arms],
              "chosen": {"pre": {s: {"lr": 1e-3, "warmup_steps": 2, "val_ce": 5.0} for s in arms}}}
    path = sweep.write_tuned(profiles / "wide.yaml", result, tmp_path / "sweep.json")
    assert path == tmp_path / "tuned" / "wide.yaml"
    lr = config.load_profile(profiles / "wide.yaml").train.lr
    assert lr["pre"] == {s: 1e-3 for s in arms} and lr["post"] == ALL_3E3
    assert config.load_profile(profiles / "tiny.yaml").train.lr == 3e-3
    (profiles / "wide.yaml").write_text("base: tiny\noverrides: {student.d_model: 64, train.lr: 2.0e-3}\n")
    with pytest.raises(ParamError, match="sets train.lr itself while"):
        config.load_profile(profiles / "wide.yaml")


def test_grid_per_placement(outputs, tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text("schedules: [joint, grow]\nseeds: [0]\nlrs:\n  tiny: {pre: [3.0e-3, 1.0e-3], post: [5.0e-4]}\n")
    plan = sweep.make_plan("tiny", config_path=config)
    assert plan.lrs == {"pre": (1e-3, 3e-3), "post": (5e-4,)} and plan.schedules == ("joint", "grow")
    arms = [("pre", 1e-3), ("pre", 3e-3), ("post", 5e-4)]
    assert [(s.schedule, s.norm, s.profile.train.lr) for s in plan.specs] == \
        [("joint", *a) for a in arms] + [("grow", *a) for a in arms]
    assert plan.specs[3].run_name == "sweep-pre-grow-lr1e-03-wu2-s0"
    with pytest.raises(ParamError, match="schedule='sideways' is not allowed"):
        sweep.make_plan("tiny", config_path=config, schedules=["sideways"])
    config.write_text("lrs:\n  tiny: {pre: [3.0e-3]}\n")
    with pytest.raises(ParamError, match=r"lrs.tiny.post=None must be a non-empty list"):
        sweep.make_plan("tiny", config_path=config)


def test_jobs_hand_the_unfinished_candidates_to_the_executor(outputs, monkeypatch):
    """--jobs N: the teacher cache is ensured once, then the candidates not yet finished go to runner.execute_runs as
    run_variant.ipynb parameters (executed here in-process instead of in worker kernels), then every row is read
    back. (Bug: the sweep handed the candidates over without building the cache, so each worker kernel built its
    own, all at once.) A sweep with nothing left to train does not build a cache."""
    from normgrow.train.spec import make_run_spec
    from normgrow.train.run import run_variant
    plan = sweep.make_plan("tiny", ["pre"], [1e-3, 3e-3], seeds=[0], overrides=OVERRIDES, schedules=["joint"])
    run_variant(plan.specs[0], progress=False)  # finished before the sweep: not handed over again
    calls = []

    def ensure(prof, out_dir, *args, **kw):
        calls.append(("cache", prof.name))
        return "synthetic-key", None

    def execute(runs, pending, desc, done, failed, *args):
        assert isinstance(runs, runner.LocalRuns) and runs.capacity == 2
        for job in pending:
            calls.append(("run", job.name))
            run_variant(make_run_spec(profile=runs.profile, **job.params), progress=False)
            done.add(job.name)
    monkeypatch.setattr(sweep, "ensure_teacher_cache", ensure)
    monkeypatch.setattr(runner, "execute_runs", execute)
    rows = sweep.run_candidates(plan, progress=False, jobs=2)
    assert calls == [("cache", "tiny"), ("run", "sweep-pre-joint-lr3e-03-wu2-s0")]
    assert [r["run_name"] for r in rows] == ["sweep-pre-joint-lr1e-03-wu2-s0", "sweep-pre-joint-lr3e-03-wu2-s0"]
    calls.clear()
    assert sweep.run_candidates(plan, progress=False, jobs=2) == rows and calls == []


def test_a_candidate_directory_holding_another_numerics_version_is_refused_before_training(outputs, monkeypatch):
    """A finished candidate recorded under another NUMERICS_VERSION is neither counted nor trained over, and the
    sweep says so before training any candidate (bug: with --jobs it was skipped as finished, the others trained,
    and the sweep failed only when reading the rows back)."""
    from normgrow import rundir
    from normgrow.train.run import run_variant
    plan = sweep.make_plan("tiny", ["pre"], [1e-3, 3e-3], seeds=[0], overrides=OVERRIDES, schedules=["joint"])
    run_variant(plan.specs[0], progress=False)
    config = plan.specs[0].dir / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"numerics": rundir.NUMERICS_VERSION - 1}))
    handed = []
    monkeypatch.setattr(runner, "execute_runs", lambda runs, pending, *a, **kw: handed.extend(pending))
    for jobs in (1, 2):
        with pytest.raises(rundir.RunDirError, match=r"sweep refused before training: .*sweep-pre-joint-lr1e-03-wu2-s0 "
                                                     r"holds a run made with other settings \(numerics\)"):
            sweep.run_candidates(plan, progress=False, jobs=jobs)
    assert handed == [] and not plan.specs[1].dir.exists()


def test_the_choice_is_bracketed_in_lr_and_in_warmup():
    """A cross-shaped search (warmups at one lr, lrs at the best warmup): the optimum is bracketed in lr among the
    lrs tried at its warmup and in warmup among the warmups tried at its lr; an lr that moved from the warmup stage's
    lr has one warmup tried there, which the warnings say."""
    cross = {(3e-3, 24): 5.0, (3e-3, 48): 4.8, (3e-3, 96): 4.9, (1e-3, 48): 4.95, (1e-2, 48): 4.85}
    rows = [{"norm": "pre", "schedule": "joint", "lr": lr, "warmup_steps": w, "seed": 0, "val_ce": ce}
            for (lr, w), ce in cross.items()]
    chosen = sweep.choose_arms(rows)["pre"]["joint"]
    assert chosen == {"lr": 3e-3, "warmup_steps": 48, "val_ce": 4.8, "edge": None, "warmup_edge": None}
    assert sweep.grid_warnings({"pre": {"joint": chosen}}) == []
    moved = sweep.choose_arms(rows + [{**rows[0], "lr": 2e-2, "warmup_steps": 48, "val_ce": 4.7},
                                      {**rows[0], "lr": 5e-2, "warmup_steps": 48, "val_ce": 4.75}])["pre"]["joint"]
    assert (moved["lr"], moved["edge"], moved["warmup_edge"]) == (2e-2, None, "only")
    assert sweep.grid_warnings({"pre": {"joint": moved}}) == [
        "pre-joint: the best warmup 48 is the only warmup tried at lr 2e-02; try warmups on both sides of it"]


def test_lr_factors_scale_each_arms_lr_and_warmups_multiply_the_candidates(outputs):
    lr = {"pre": {"joint": 2.4e-2, "grow": 1.2e-2, "single": 1.2e-2}, "post": 6e-3}
    plan = sweep.make_plan("tiny", ["pre", "post"], seeds=[0, 1], schedules=["joint", "grow"], warmups=[96, 48],
                           lr_factors=[0.7, 1], overrides=OVERRIDES | {"train.lr": lr})
    assert plan.lrs == {"pre-joint": (0.0168, 0.024), "post-joint": (0.0042, 0.006), "pre-grow": (0.0084, 0.012),
                        "post-grow": (0.0042, 0.006)}
    assert set(plan.warmups.values()) == {(48, 96)} and len(plan.specs) == 4 * 2 * 2 * 2
    assert plan.specs[0].run_name == "sweep-pre-joint-lr1.68e-02-wu48-s0"
    assert (plan.specs[0].profile.train.lr, plan.specs[0].profile.train.warmup_steps) == (0.0168, 48)
    # without --warmups every arm runs at its own profile warmup
    own = sweep.make_plan("tiny", ["pre", "post"], [1e-3], seeds=[0], schedules=["joint"],
                          overrides=OVERRIDES | {"train.warmup_steps": {"pre": 5, "post": 7}})
    assert [s.profile.train.warmup_steps for s in own.specs] == [5, 7]
    with pytest.raises(ParamError, match="--lrs and --lr-factors exclude each other"):
        sweep.make_plan("tiny", lrs=[1e-3], lr_factors=[1])
    # --arms: only those arms train, at their own lrs; the record stays the placements' (its folder)
    some = sweep.make_plan("tiny", ["pre", "post"], seeds=[0], schedules=["joint", "grow"], lr_factors=[2, 4],
                           arms=["post-grow"], overrides=OVERRIDES | {"train.lr": lr})
    assert some.lrs == {"post-grow": (0.012, 0.024)} and [s.run_name for s in some.specs] == [
        "sweep-post-grow-lr1.2e-02-wu2-s0", "sweep-post-grow-lr2.4e-02-wu2-s0"]
    assert some.out_dir == plan.out_dir
    with pytest.raises(ParamError, match="arm='post-single' is not one of the placements x schedules swept; allowed "
                                         "values: pre-joint, post-joint, pre-grow, post-grow"):
        sweep.make_plan("tiny", ["pre", "post"], schedules=["joint", "grow"], lr_factors=[2], arms=["post-single"])
    with pytest.raises(ParamError, match=r"--warmups=\[-1\] must be a non-empty list of warmup steps"):
        sweep.make_plan("tiny", lrs=[1e-3], warmups=[-1])
    # --warmup-factors: each arm's own warmup times the factors, so a staged search around per-arm optima stays
    # per arm (pre-joint at 6: 3 and 12; post-joint at 7: 4 and 14, rounded)
    around = sweep.make_plan("tiny", ["pre", "post"], seeds=[0], schedules=["joint"], lr_factors=[1],
                             warmup_factors=[0.5, 2], overrides=OVERRIDES | {"train.warmup_steps": {"pre": 6, "post": 7}})
    assert around.warmups == {"pre-joint": (3, 12), "post-joint": (4, 14)}
    assert [s.run_name for s in around.specs] == ["sweep-pre-joint-lr3e-03-wu3-s0", "sweep-pre-joint-lr3e-03-wu12-s0",
                                                  "sweep-post-joint-lr3e-03-wu4-s0", "sweep-post-joint-lr3e-03-wu14-s0"]
    with pytest.raises(ParamError, match="--warmups and --warmup-factors exclude each other"):
        sweep.make_plan("tiny", lrs=[1e-3], warmups=[1], warmup_factors=[2])
    with pytest.raises(ParamError, match=r"--warmup-factors=\[0\] must be a non-empty list of finite numbers > 0"):
        sweep.make_plan("tiny", lrs=[1e-3], warmup_factors=[0])


def test_a_warmup_sweep_writes_the_warmup_per_arm(outputs, tmp_path):
    """--write after a sweep that tried two warmups: the tuned file's train.warmup_steps holds the chosen one for the
    swept arm and the profile's value for every other arm of every placement (bug: only pre and post were written,
    and a map's mix-grow run had no warmup); train.lr is written as before."""
    profiles = tmp_path / "profiles"
    shutil.copytree(PARAMS_DIR / "profiles", profiles)
    plan = sweep.make_plan("tiny", ["pre"], seeds=[0], schedules=["joint"], warmups=[1, 2], lr_factors=[1],
                           overrides=OVERRIDES)
    result = sweep.sweep(plan, write=True, profiles_dir=profiles, progress=False, command="test")
    best = min(result["rows"], key=lambda r: r["val_ce"])
    assert [r["warmup_steps"] for r in result["rows"]] == [1, 2]
    assert result["chosen"]["pre"]["joint"]["warmup_steps"] == best["warmup_steps"]
    tuned = written(profiles)
    assert tuned["train.warmup_steps"] == {"pre": {"joint": best["warmup_steps"], "grow": 2, "single": 2}} | {
        norm: {"joint": 2, "grow": 2, "single": 2} for norm in ("post", *OTHERS)}
    assert tuned["train.lr"]["pre"]["joint"] == best["lr"]


def test_a_write_replaces_the_record_of_the_arms_it_chose_and_keeps_the_others(tmp_path):
    """Two writes, the second of pre's arms only: pre's values and chosen_by entries are the second record's, mix's
    stay the first's (the profile reads `tuned`, so the second write starts from the first's values)."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    profile = profiles / "p.yaml"
    profile.write_text((PARAMS_DIR / "profiles" / "tiny.yaml").read_text().replace("  lr: 3.0e-3\n", "  lr: tuned\n"))
    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "p.yaml").write_text("train.lr: 2.0e-3\n")
    arms = ("joint", "grow", "single")

    def result(date, norms, lr):
        return {"date": date, "seeds": [0], "rows": [{"norm": n, "schedule": s, "warmup_steps": 4} for n in norms
                                                     for s in arms],
                "chosen": {n: {s: {"lr": lr, "warmup_steps": 4, "val_ce": 4.5} for s in arms} for n in norms}}
    sweep.write_tuned(profile, result("2026-12-01", ["pre", "mix"], 3e-3), tmp_path / "first.json")
    sweep.write_tuned(profile, result("2026-12-02", ["pre"], 4e-3), tmp_path / "second.json")
    tuned = written(profiles, "p")
    assert tuned["train.lr"]["pre"] == {s: 4e-3 for s in arms} and tuned["train.lr"]["mix"] == {s: 3e-3 for s in arms}
    assert tuned["train.lr"]["post"] == {s: 2e-3 for s in arms}  # never swept: the value the profile trained at
    assert {arm: e["record"] for arm, e in tuned["chosen_by"].items()} == {
        **{f"mix-{s}": str(tmp_path / "first.json") for s in arms}, **{f"pre-{s}": str(tmp_path / "second.json")
                                                                         for s in arms}}
    assert config.load_profile(profile).train.lr["pre"]["grow"] == 4e-3


def test_a_factor_lands_on_an_lr_the_record_already_holds(outputs):
    """--lr-factors around a written lr: a product within 1e-3 of a candidate the record holds for the arm is that
    candidate (its finished runs are read back), not a new one a hair away (bug: 0.7071 x 8.4852e-3 = 5.99988e-3
    ran again beside the recorded 6e-3). Another arm's lrs do not attract it."""
    record = outputs / "sweep" / "tiny" / "pre" / "sweep.json"  # a sweep of pre alone: its own folder
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"rows": [{"norm": "pre", "schedule": "joint", "lr": 2.1213e-3},
                                           {"norm": "pre", "schedule": "grow", "lr": 4.2427e-3}]}))
    plan = sweep.make_plan("tiny", ["pre"], seeds=[0], schedules=["joint"], lr_factors=[0.70711, 1.4142],
                           overrides=OVERRIDES)
    assert plan.lrs == {"pre-joint": (2.1213e-3, 4.2426e-3)}
    assert [s.run_name for s in plan.specs] == ["sweep-pre-joint-lr2.1213e-03-wu2-s0",
                                                "sweep-pre-joint-lr4.2426e-03-wu2-s0"]
