"""The robustness grid: what a run records (train.unread_keys), the plan's sharing of runs, validation of grid files,
and a tiny grid trained on the synthetic cache and judged (tmp NORMGROW_OUTPUTS, a tmp grids folder)."""
from __future__ import annotations

import dataclasses
import json
import math
import re

import pandas as pd
import pytest

import fakes
from chromium import CHROMIUM
from normgrow import grid, grid_plan
from normgrow.analysis.claims import NOT_JUDGED, NOT_JUDGED_DEPTH, NOT_TESTABLE
from normgrow.analysis.reference import load_reference
from normgrow.config import ParamError, load_profile
from normgrow.rundir import read_finished
from normgrow.train.spec import make_run_spec
from normgrow.train.run import run_variant

OVERRIDES = dict(fakes.TINY_OVERRIDES, **{"train.stage_tokens": [128, 128, 128]})  # 3 steps per phase


def write_grid(folder, name: str, text: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)


@pytest.fixture
def grids(tmp_path, monkeypatch):
    monkeypatch.setattr(grid_plan, "GRIDS_DIR", tmp_path / "grids")
    return tmp_path / "grids"


@pytest.fixture
def outputs(synthetic_outputs):
    return synthetic_outputs


def identity(**kw) -> dict:
    return make_run_spec(profile="cpu", run_name="x", **kw).identity()


def test_a_run_records_at_their_defaults_the_settings_it_never_reads():
    growth = {"student.new_block_init": "gated", "student.gate_ramp_steps": 5, "train.optimizer_on_grow": "keep",
              "train.lr_schedule": "global", "student.mix_alpha": 0.5}
    for schedule in ("joint", "single"):
        assert identity(norm="pre", schedule=schedule, overrides=growth) == identity(norm="pre", schedule=schedule)
    grown = identity(norm="pre", schedule="grow", overrides=growth)["profile"]
    assert (grown["student"]["new_block_init"], grown["student"]["gate_ramp_steps"],
            grown["train"]["optimizer_on_grow"], grown["train"]["lr_schedule"]) == ("gated", 5, "keep", "global")
    assert grown["student"]["mix_alpha"] == 0.25  # only Mix-LN reads it
    # the ramp is the gated operator's own key: another operator's grown run does not record it
    assert identity(norm="pre", schedule="grow", overrides={"student.gate_ramp_steps": 5}) == identity(
        norm="pre", schedule="grow")


GRID = """\
placements: [pre, post]
seeds: [0, 1]
settings:
  - {name: default, about: the protocol}
  - {name: copy_last, overrides: {student.new_block_init: copy_last}, about: copies}
  - {name: at_joint_tuning, tuning_of: {grow: joint}, about: joint lr and warmup}
  - {name: mix, placements: [pre, mix], overrides: {train.warmup_steps: {pre: 48, post: 48}}, about: Mix-LN}
"""


def test_plan_shares_every_run_a_setting_does_not_change(grids):
    write_grid(grids, "g", GRID)
    plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("g"))
    # this setting's warmups name no Mix-LN arm: it cannot run, and says which key lacks what
    assert plan.not_run.keys() == {"mix"} and "gives no warmup for norm='mix'" in plan.not_run["mix"]
    cells = {(c.setting, c.norm, c.schedule, c.seed): c for c in plan.cells}
    assert len(cells) == 3 * 2 * 3 * 2
    for norm in ("pre", "post"):
        for seed in (0, 1):
            for schedule in ("joint", "single"):  # no setting changes them: the study's runs, in every setting
                assert {cells[(s, norm, schedule, seed)].run_name for s in ("default", "copy_last", "at_joint_tuning")} \
                    == {f"{norm}-{schedule}-s{seed}"}
            assert cells[("default", norm, "grow", seed)].run_name == f"{norm}-grow-s{seed}"
            assert cells[("copy_last", norm, "grow", seed)].run_name == f"grid-copy_last-{norm}-grow-s{seed}"
            at_joint = cells[("at_joint_tuning", norm, "grow", seed)]
            assert at_joint.run_name == f"grid-at_joint_tuning-{norm}-grow-s{seed}"
            assert at_joint.lr == cells[("default", norm, "joint", seed)].lr != cells[("default", norm, "grow", seed)].lr
    assert len(plan.jobs) == 12 + 4 + 4  # the study's 12 core runs and the 8 grown runs two settings change
    assert plan.jobs["grid-copy_last-pre-grow-s0"].params["overrides"] == {"student.new_block_init": "copy_last"}
    with pytest.raises(ParamError, match="setting 'mix': train.warmup_steps=.* gives no warmup for norm='mix'"):
        grid_plan.plan_grid("cpu", grid_plan.load_grid("g"), only=["mix"])
    with pytest.raises(ParamError, match="'nope' is not a setting of grid 'g'; allowed values: default, copy_last"):
        grid_plan.plan_grid("cpu", grid_plan.load_grid("g"), only=["nope"])


def test_two_settings_that_make_the_same_run_share_it(grids):
    write_grid(grids, "g", GRID.split("  - {name: copy_last")[0]
               + "  - {name: a, overrides: {train.optimizer_on_grow: keep}}\n"
               + "  - {name: b, overrides: {train.optimizer_on_grow: keep}, about: same run}\n")
    plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("g"))
    by = {(c.setting, c.norm, c.schedule, c.seed): c.run_name for c in plan.cells}
    assert by[("b", "post", "grow", 1)] == by[("a", "post", "grow", 1)] == "grid-a-post-grow-s1"


@pytest.mark.parametrize("text, needle", [
    ("placements: [pre, post]\nseeds: [0]\n", "missing key 'settings'; required keys: placements, seeds, settings"),
    ("placements: [pre, post]\nseeds: [0]\nschedules: [joint, grow]\nsettings: [{name: a}]\n", "holding joint and single"),
    ("placements: [pre, pre]\nseeds: [0]\nsettings: [{name: a}]\n", "two different placements"),
    ("placements: [pre, post]\nseeds: [0, -1]\nsettings: [{name: a}]\n", "seeds=[0, -1] must be"),
    ("placements: [pre, post]\nseeds: [0]\nsettings: [{name: a, colour: red}]\n",
     "unknown key settings[0].colour; allowed keys: name, about"),
    ("placements: [pre, post]\nseeds: [0]\nsettings: [{name: 'a b'}]\n", "name='a b' must be"),
    ("placements: [pre, post]\nseeds: [0]\nsettings: [{name: a}, {name: a}]\n", "setting names must be unique"),
    ("placements: [pre, post]\nseeds: [0]\nsettings: [{name: a, tuning_of: {grow: fast}}]\n", "tuning_of="),
    ("placements: [pre, post]\nseeds: [0]\nsettings: [{name: a, overrides: {train.lr: 0.1}}]\n", "other than train.lr"),
    ("placements: [pre, post]\nseeds: [0]\nsettings: [{name: a, lr_scale: 0}]\n", "settings[0].lr_scale=0.0 must be"),
    ("placements: [pre, post]\nseeds: [0]\nsettings: [{name: a, lr_scale: half}]\n",
     "settings[0].lr_scale: expected float, got 'half'"),
])
def test_bad_grid_files_name_the_key(grids, text, needle):
    write_grid(grids, "bad", text)
    with pytest.raises(ParamError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        grid_plan.load_grid("bad")


def test_lr_scale_multiplies_every_arms_lr(grids):
    write_grid(grids, "g", "placements: [pre, post]\nseeds: [0]\nschedules: [joint, single]\nsettings:\n"
                           "  - {name: base}\n  - {name: half, lr_scale: 0.5, tuning_of: {single: joint}}\n")
    plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("g"))
    lr = {(c.setting, c.norm, c.schedule): c.lr for c in plan.cells}
    for norm in ("pre", "post"):
        assert lr[("half", norm, "joint")] == pytest.approx(0.5 * lr[("base", norm, "joint")], rel=1e-12)
        # tuning_of picks the schedule, lr_scale then multiplies its lr
        assert lr[("half", norm, "single")] == pytest.approx(0.5 * lr[("base", norm, "joint")], rel=1e-12)
        run = next(c.run_name for c in plan.cells if (c.setting, c.norm, c.schedule) == ("half", norm, "joint"))
        assert run == f"grid-half-{norm}-joint-s0" and plan.jobs[run].params["overrides"]["train.lr"] == lr[
            ("half", norm, "joint")]


def test_tuning_of_trains_an_arm_at_another_arms_lr_and_warmup(grids):
    """{grow: joint}: the grown runs take the joint arm's lr and its warmup (the profile tunes both per arm), as a
    freeze control takes its grow arm's; the other arms keep their own."""
    write_grid(grids, "g", "placements: [pre, post]\nseeds: [0]\nsettings:\n  - {name: base}\n"
                           "  - {name: joint_tuned, tuning_of: {grow: joint}}\n")
    plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("g"))
    cell = {(c.setting, c.norm, c.schedule): c for c in plan.cells}
    train = load_profile("cpu").train
    for norm in ("pre", "post"):
        joint, grown = cell[("base", norm, "joint")], cell[("joint_tuned", norm, "grow")]
        assert (grown.lr, grown.warmup_steps) == (joint.lr, joint.warmup_steps) == (
            train.lr[norm]["joint"], train.warmup_steps[norm]["joint"])
        assert cell[("joint_tuned", norm, "single")] == dataclasses.replace(cell[("base", norm, "single")],
                                                                              setting="joint_tuned")
        assert plan.jobs[grown.run_name].params["overrides"]["train.warmup_steps"] == joint.warmup_steps


def test_a_grid_pins_its_lrs_and_warmup_so_a_later_tuning_leaves_its_runs_standing(grids):
    """The grid file's overrides sit under every setting's own and may give train.lr (per arm): the ladder pins the
    lrs and warmup it trained at, so a profile with other ones (here plan-level overrides, as a sweep's --write would
    leave it) plans the same runs; only the study's sharing follows the profile. A setting may still not give
    train.lr, and a rung's own warmup wins over the pinned one."""
    pinned = ("overrides: {train.lr: {pre: {joint: 2.0e-2, single: 1.0e-2}, post: {joint: 5.0e-3, single: 4.0e-3}},"
              " train.warmup_steps: 40}\n")
    write_grid(grids, "g", "placements: [pre, post]\nseeds: [0]\nschedules: [joint, single]\n" + pinned +
               "settings:\n  - {name: base}\n  - {name: wide, lr_scale: 0.5, overrides: {train.warmup_steps: 96}}\n")
    def planned(**kw):
        plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("g"), **kw)
        return {(c.setting, c.norm, c.schedule): {k: v for k, v in plan.jobs[c.run_name].identity.items()
                                                  if k != "run_name"} for c in plan.cells}
    today, retuned = planned(), planned(overrides={"train.lr": 1.0e-3, "train.warmup_steps": 7})
    assert today == retuned
    assert today[("base", "post", "single")]["profile"]["train"]["lr"] == 4.0e-3
    assert today[("base", "pre", "joint")]["profile"]["train"]["warmup_steps"] == 40
    assert today[("wide", "pre", "joint")]["profile"]["train"]["lr"] == pytest.approx(1.0e-2, rel=1e-12)
    assert today[("wide", "pre", "joint")]["profile"]["train"]["warmup_steps"] == 96
    write_grid(grids, "g", "placements: [pre, post]\nseeds: [0]\nsettings:\n"
                           "  - {name: base, overrides: {train.lr: 1.0e-3}}\n")
    with pytest.raises(ParamError, match="other than train.lr"):
        grid_plan.load_grid("g")
    write_grid(grids, "g", "placements: [pre, post]\nseeds: [0]\noverrides: [train.lr]\nsettings:\n  - {name: a}\n")
    with pytest.raises(ParamError, match=r"overrides: expected a mapping, got \['train.lr'\]"):
        grid_plan.load_grid("g")


def test_unknown_grid_lists_the_grids(grids):
    write_grid(grids, "g", GRID)
    with pytest.raises(ParamError, match="grid='h' has no file .*allowed values: g"):
        grid_plan.load_grid("h")


@pytest.mark.slow  # trains several runs or starts a process (over 10 s): not in make test-fast
def test_tiny_grid_trained_and_judged(grids, outputs, monkeypatch):
    write_grid(grids, "g", GRID.split("  - {name: mix")[0])
    plan = grid_plan.plan_grid("tiny", grid_plan.load_grid("g"), overrides=OVERRIDES)
    for job in plan.jobs.values():  # the runner executes these through run_variant.ipynb; here in-process
        run_variant(make_run_spec(profile="tiny", **job.params), progress=False)
    reads = []  # the record reads each finished run once, though settings share runs
    monkeypatch.setattr(grid, "read_finished", lambda run_dir: reads.append(run_dir) or read_finished(run_dir))
    files = grid.write_grid(plan, command="test")
    assert len(reads) == len(set(reads)) == len({c.run_name for c in plan.cells}) < len(plan.cells)
    frame = pd.read_csv(files["grid"])
    assert list(frame["setting"]) == ["default", "copy_last", "at_joint_tuning"]
    runs = grid.setting_runs(plan, "copy_last", grid.read_cells(plan))
    by = runs.set_index(["variant", "seed"])["val_ce"]
    row = frame.set_index("setting").loc["copy_last"]
    grow = [by[("pre-grow", s)] - by[("post-grow", s)] for s in (0, 1)]
    joint = [by[("pre-joint", s)] - by[("post-joint", s)] for s in (0, 1)]
    assert row["grow_gap"] == pytest.approx(sum(grow) / 2, abs=1e-12)
    assert row["interaction"] == pytest.approx((sum(grow) - sum(joint)) / 2, abs=1e-12)
    assert row["n_seeds"] == 2 and row["runs_finished"] == row["runs_needed"] == 12
    # the synthetic cache has no unigram baseline, so no variant counts as trained: the gate says so
    assert row["grow_verdict"] == row["interaction_verdict"] == NOT_JUDGED and "no unigram baseline" in row["gate"]
    saved = json.loads(files["json"].read_text())
    assert saved["command"] == "test" and [s["name"] for s in saved["settings"]] == list(frame["setting"])
    page = files["report"].read_text()
    assert "fig-forest" in page and "copy_last (pre-post)" in page
    if CHROMIUM:  # the forest exported (render.write_svg)
        svg = files["figure"].read_text()
        assert svg.startswith("<svg") and svg.count('<path class="point') == 2 * 3 and "at_joint_tuning (pre-post)" in svg
    cells = pd.read_csv(files["runs"])
    assert (cells["status"] == "finished").all() and len(cells) == 36
    # each run's machine and wall time, and per machine each run once though settings share runs
    from normgrow.utils import cpu_model
    assert (cells["machine"] == cpu_model()).all() and (cells["wall_s"] > 0).all()
    unique = cells.drop_duplicates("run_name")
    assert len(unique) < len(cells)
    assert saved["machines"] == {cpu_model(): {"runs": len(unique),
                                               "run_hours": pytest.approx(unique["wall_s"].sum() / 3600)}}
    assert f"{cpu_model()}, {len(unique)} runs" in page
    from normgrow.viz import report  # the study's report shows the map of every grid of its profile
    page = report.report_html(report.build_report("tiny"))
    assert "Where does it hold? Grid g" in page and "fig-grid-g" in page


def test_a_setting_without_finished_runs_is_not_testable(grids, outputs):
    write_grid(grids, "g", GRID)
    plan = grid_plan.plan_grid("tiny", grid_plan.load_grid("g"), only=["copy_last"], overrides=OVERRIDES)
    row = grid.judge_setting(plan, plan.grid.settings[1], load_reference(), unigram=10.0,
                             cell_runs=grid.read_cells(plan))
    assert row["grow_verdict"] == NOT_TESTABLE and row["gate"].startswith("no finished runs of pre-joint")


def test_the_record_covers_every_setting_whichever_were_asked_for(grids, outputs):
    """--settings chooses what trains; grid.csv and the report keep every setting, so a run of one setting never
    drops the others from the committed record. An unknown setting is still refused by name."""
    write_grid(grids, "g", GRID)
    assert grid.main(["--profile", "tiny", "--grid", "g", "--settings", "copy_last", "--report-only"]) == 0
    frame = pd.read_csv(outputs / "grid" / "tiny" / "g" / "grid.csv")
    assert list(frame["setting"]) == [s.name for s in grid_plan.load_grid("g").settings]
    assert grid.main(["--profile", "tiny", "--grid", "g", "--settings", "nowhere", "--report-only"]) == 2


@pytest.mark.slow  # plans and reads a grid on the synthetic cache (about 30 s): not in make test-fast
def test_a_gap_from_one_seed_reads_as_its_mean_alone(grids, outputs):
    """One paired seed has no interval: the page prints the gap's mean, never '[nan, nan]'."""
    write_grid(grids, "g", GRID)
    plan = grid_plan.plan_grid("tiny", grid_plan.load_grid("g"), overrides=OVERRIDES)
    frame = grid.grid_frame(plan, grid.read_cells(plan))
    frame.loc[0, ["grow_gap", "grow_ci_low", "grow_ci_high", "n_seeds"]] = [0.0123, math.nan, math.nan, 1]
    page = grid.grid_report_html(plan, frame, {})
    assert ">+0.0123</td>" in page and "nan]" not in page


@pytest.mark.slow  # reads the committed ladder's runs (a few seconds)
def test_a_grid_without_grown_runs_draws_no_forest_and_names_its_unfinished_settings(monkeypatch):
    """The committed regime ladder trains joint and single runs only: its page asks where depth pays, describes no
    forest or dashed reference lines it does not draw, lists the settings not finished with their run counts, and
    speaks no function names."""
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)  # the repository's committed runs
    plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("ladder"))
    frame = grid.grid_frame(plan, grid.read_cells(plan))
    page = re.sub(r"<script.*?</script>", "", grid.grid_report_html(plan, frame, {}), flags=re.S)
    assert "fig-forest" not in page and "dashed lines" not in page and "grow verdict" not in page
    assert "Where does depth pay? Grid <code>ladder</code>" in page and "stats." not in page
    unfinished = frame[frame["runs_finished"] < frame["runs_needed"]]
    assert len(unfinished) and all(f"{r.setting} ({r.runs_finished} of {r.runs_needed} runs)" in page
                                   for r in unfinished.itertuples())


def test_a_setting_is_judged_by_the_claim_declarations_on_its_own_pair(monkeypatch):
    """The grid's verdicts are those of params/reference.yaml's headline-grow and headline-ratio with their gaps
    re-pointed at the setting's placements; a declaration whose gap is not between two core variants is refused by
    name."""
    reference = grid.setting_reference(load_reference(), "pre", "mix")
    assert (reference.gaps["grow"].a, reference.gaps["grow"].b) == ("pre-grow", "mix-grow")
    assert (reference.gaps["joint"].a, reference.gaps["joint"].b) == ("pre-joint", "mix-joint")
    assert reference.gaps["matched"] == load_reference().gaps["matched"]  # not read by a setting's claims
    assert [reference.claim(c).kind for c in grid.SETTING_CLAIMS.values()] == ["directional", "ratio"]
    monkeypatch.setitem(grid.SETTING_CLAIMS, "matched_verdict", "obs1-matched")
    with pytest.raises(ParamError, match="claim 'obs1-matched' reads gap 'matched' \\(post-joint-matched - post-grow\\)"):
        grid.setting_reference(load_reference(), "pre", "mix")


@pytest.mark.slow  # trains 16 tiny runs
def test_a_ladder_grid_of_joint_and_single_arms_measures_the_depth_gain_per_rung(grids, outputs):
    """A grid of schedules [joint, single] (the regime ladder): per setting, each placement's depth gain (single -
    joint, paired by seed, with its interval), the rung's regime from its overrides, the compute of its joint run,
    no grow verdict, and the depth figure with a point per placement and setting (no forest without grown runs)."""
    write_grid(grids, "ladder", "placements: [pre, post]\nseeds: [0, 1]\nschedules: [joint, single]\nsettings:\n"
                                "  - {name: short, about: the profile}\n"
                                "  - {name: long, overrides: {train.stage_tokens: [256, 256, 256], "
                                "train.warmup_steps: 3}, about: twice the tokens}\n")
    plan = grid_plan.plan_grid("tiny", grid_plan.load_grid("ladder"), overrides=OVERRIDES)
    assert {c.schedule for c in plan.cells} == {"joint", "single"} and len(plan.jobs) == 16
    for job in plan.jobs.values():
        run_variant(make_run_spec(profile="tiny", **job.params), progress=False)
    files = grid.write_grid(plan, command="test")
    frame = pd.read_csv(files["grid"]).set_index("setting")
    by = grid.setting_runs(plan, "long", grid.read_cells(plan)).set_index(["variant", "seed"])["val_ce"]
    for side, norm in (("a", "pre"), ("b", "post")):
        gains = [by[(f"{norm}-single", s)] - by[(f"{norm}-joint", s)] for s in (0, 1)]
        assert frame.loc["long", f"depth_gain_{side}"] == pytest.approx(sum(gains) / 2, abs=1e-12)
        low, high = frame.loc["long", [f"depth_gain_{side}_ci_low", f"depth_gain_{side}_ci_high"]]
        assert low < sum(gains) / 2 < high
    assert (frame.loc["long", ["run_tokens", "warmup_steps", "d_model"]].tolist() == [768, 3, 16]
            and frame.loc["short", "run_tokens"] == 384)
    assert frame.loc["long", "joint_tflop"] == pytest.approx(2 * frame.loc["short", "joint_tflop"])
    assert frame["grow_verdict"].str.startswith(NOT_TESTABLE).all() and frame["grow_gap"].isna().all()
    assert "figure" not in files and (not CHROMIUM or files["depth"].read_text().count('<path class="point') == 2 * 2)
    assert "fig-depth" in files["report"].read_text()
    # two rungs: each placement's trend has its two points and no interval, and the page says so
    def refuse(word):
        raise AssertionError(f"grid.json holds {word}, which JSON.parse rejects")
    saved = json.loads(files["json"].read_text(), parse_constant=refuse)  # strict JSON: a missing number is null
    assert saved["rows"][0]["grow_gap"] is None
    trends = saved["depth_trend"]
    assert trends.keys() == {"pre", "post"} and all(t["n"] == 2 and t["from_tflop"] is None for t in trends.values())
    assert "pre: not enough rungs for a trend (2 rungs at 2 computes)" in files["report"].read_text()


@pytest.mark.slow  # trains 24 tiny runs
def test_a_grid_of_curriculum_shapes_reads_how_the_grown_students_fared(grids, outputs):
    """Settings that change train.stages (params/grids/shapes.yaml): runs of the grid's own (share_study_runs:
    false), joint and single runs the same numbers whatever the shape (they read only its first and last stage),
    and curriculum.csv per setting: grow - single per placement paired by seed, the grown runs' mean val_ce at each
    phase end, the gap a - b there and its leader, each equal to a direct computation from the runs; curriculum.svg
    draws a panel per setting."""
    write_grid(grids, "shapes", "placements: [pre, post]\nseeds: [0, 1]\nshare_study_runs: false\nsettings:\n"
                                "  - {name: 1-2-3, about: a block a stage}\n"
                                "  - {name: 1-3, overrides: {train.stages: [1, 3], train.stage_tokens: [128, 256]}, "
                                "about: two stages}\n")
    plan = grid_plan.plan_grid("tiny", grid_plan.load_grid("shapes"), overrides=OVERRIDES)
    assert len(plan.jobs) == 24 and all(name.startswith("grid-") for name in plan.jobs)
    for job in plan.jobs.values():
        run_variant(make_run_spec(profile="tiny", **job.params), progress=False)
    files = grid.write_grid(plan, command="test")
    cells = grid.read_cells(plan)
    runs = {name: grid.setting_runs(plan, name, cells).set_index(["variant", "seed"]) for name in ("1-2-3", "1-3")}
    for variant in ("pre-joint", "post-single"):  # the same run under either shape, bit for bit
        assert (runs["1-2-3"].loc[variant, "val_ce"] == runs["1-3"].loc[variant, "val_ce"]).all()
    table = pd.read_csv(files["curriculum"]).set_index("setting")
    for name, stages in (("1-2-3", [1, 2, 3]), ("1-3", [1, 3])):
        by, row = runs[name], table.loc[name]
        assert row["stages"] == " ".join(map(str, stages)) and row["n_seeds"] == 2
        for side, norm in (("a", "pre"), ("b", "post")):
            diffs = [by.loc[(f"{norm}-grow", s), "val_ce"] - by.loc[(f"{norm}-single", s), "val_ce"] for s in (0, 1)]
            assert row[f"grow_vs_single_{side}"] == pytest.approx(sum(diffs) / 2, abs=1e-12)
            assert row[f"grow_vs_single_{side}_ci_low"] < sum(diffs) / 2 < row[f"grow_vs_single_{side}_ci_high"]
            phases = [float(v) for v in row[f"phase_val_ce_{side}"].split()]
            assert phases == pytest.approx([by.loc[f"{norm}-grow", f"val_ce_p{i}"].mean() for i in range(len(stages))],
                                           abs=1e-4)
            assert phases[-1] == pytest.approx(row[f"grow_{side}"], abs=1e-4)
        gaps = [float(v) for v in row["phase_gaps"].split()]
        direct = [(by.loc["pre-grow", f"val_ce_p{i}"] - by.loc["post-grow", f"val_ce_p{i}"]).mean()
                  for i in range(len(stages))]
        assert gaps == pytest.approx(direct, abs=1e-4)
        assert row["phase_leaders"].split() == ["post" if g > 0 else "pre" for g in direct]
    from normgrow.viz.curriculum import curriculum_figure
    fig = curriculum_figure(grid.curriculum(plan, cells))
    grown = [t for t in fig.data if t.meta["schedule"] == "grow" and t.x[0] is not None]  # not the legend's
    assert sorted(len(t.x) for t in grown) == [2, 2, 3, 3] and all(t.line.dash == "dash" for t in grown)
    if CHROMIUM:  # the same figure, exported
        svg = files["curriculum_figure"].read_text()
        assert svg.startswith("<svg") and "stages 1 2 3" in svg and "stages 1 3" in svg
    assert "How the grown students fared" in files["report"].read_text()


def test_forest_plots_colour_error_bars_by_verdict_and_mark_zero_and_the_reference():
    """Both forest plots of a two-row frame: plotly's error bars take one colour per trace (a list of colours was
    drawn black, with a console warning), the legend names each verdict and the reference; the SVG has x ticks
    and each panel has its zero and reference lines."""
    from normgrow.viz.forest import forest_figure
    from normgrow.viz.palette import STATUS_COLOUR
    rows = [{"setting": s, "a": "pre", "b": "post", "n_seeds": 3, "grow_gap": g, "grow_ci_low": g - 0.1,
             "grow_ci_high": g + 0.1, "interaction": g, "interaction_ci_low": g - 0.2, "interaction_ci_high": g + 0.2,
             "grow_verdict": v, "interaction_verdict": v} for s, g, v in (("x", 0.05, NOT_JUDGED_DEPTH),
                                                                          ("y", -0.3, NOT_TESTABLE))]
    frame, reference = pd.DataFrame(rows), {"grow": 0.0328, "interaction": 0.0324}
    fig = forest_figure(frame, reference)
    bars = [t for t in fig.data if t.error_x.array is not None]
    assert all(t.error_x.color == t.marker.color == STATUS_COLOUR[t.name] for t in bars) and len(bars) == 4
    assert {t.name for t in fig.data if t.showlegend is not False} == {NOT_JUDGED_DEPTH, NOT_TESTABLE, "reference"}
    lines = sorted((s.xref, s.x0) for s in fig.layout.shapes)
    assert lines == [("x", 0), ("x", 0.0328), ("x2", 0), ("x2", 0.0324)]


def test_a_forest_axis_spans_the_rows_whose_students_trained_and_marks_what_runs_beyond():
    """An undertrained row's diverged interval (-1.06 [-3.48, +1.35], the 1-5-9 map's shape-3-6-9) no longer sets the
    axis, which pressed the trained rows 0.39 nats apart into 27 of a panel's 330 pixels: both panels span the
    trained rows, the undertrained row's mean gets no marker, and triangles at both edges write its reading; with
    every row undertrained the axis spans them all."""
    from normgrow.viz.forest import forest_figure, panel_span
    row = lambda s, g, low, high, v: {"setting": s, "a": "pre", "b": "post", "n_seeds": 3, "grow_gap": g,
                                      "grow_ci_low": low, "grow_ci_high": high, "interaction": g,
                                      "interaction_ci_low": low, "interaction_ci_high": high, "grow_verdict": v,
                                      "interaction_verdict": v}
    frame = pd.DataFrame([row("ok", 0.09, 0.04, 0.14, "supported"), row("copy", -0.30, -0.35, -0.26, "not supported"),
                          row("diverged", -1.06, -3.48, 1.35, NOT_JUDGED)])
    reference = {"grow": 0.0328, "interaction": 0.0324}
    fig = forest_figure(frame, reference)
    for axis in (fig.layout.xaxis, fig.layout.xaxis2):
        assert axis.range == pytest.approx((-0.35 - 0.0245, 0.14 + 0.0245))
    beyond = [t for t in fig.data if t.mode == "markers+text"]
    assert len(beyond) == 2 and list(beyond[0].text) == ["-1.06 [-3.48, +1.35]", "+1.35"]
    diverged = next(t for t in fig.data if t.name == NOT_JUDGED and t.error_x.array is not None)
    assert list(diverged.marker.size) == [0] and diverged.x[0] == pytest.approx(-0.3745)
    assert {t.name for t in fig.data if t.showlegend is not False} >= {NOT_JUDGED, "reference"}
    stalled = frame.assign(grow_verdict=NOT_JUDGED)
    assert panel_span(stalled, "grow", "grow_gap", reference) == pytest.approx((-3.48 - 0.2415, 1.35 + 0.2415))


def test_the_depth_trend_per_placement_reads_each_placement_from_its_side():
    """depth_trends: a placement's gains come from the side (a or b) it sits on in each row; the sentence names the
    slope, its interval and where the band reaches the margin."""
    frame = pd.DataFrame({"a": ["pre", "pre", "post"], "b": ["post", "post", "pre"],
                          "joint_tflop": [1.0, 10.0, 100.0], "depth_gain_a": [0.01, 0.04, 0.07],
                          "depth_gain_b": [0.02, 0.03, 0.10]})
    trends = grid.depth_trends(frame, 0.098)
    assert trends["pre"]["slope_per_decade"] == pytest.approx(0.045) and trends["pre"]["n"] == 3
    assert trends["post"]["slope_per_decade"] == pytest.approx(0.025)
    sentence = grid.trend_sentence("pre", trends["pre"])
    assert sentence.startswith("pre: the depth gain changes by +0.045 nats per tenfold compute (95% interval ")
    assert "The fitted line reaches the margin at" in sentence and sentence.endswith(".")
    # every setting at one compute (a map, not a ladder): no slope, and no nan in the sentence
    flat = grid.depth_trends(frame.assign(joint_tflop=7.4), 0.098)
    assert flat["pre"]["computes"] == 1 and grid.trend_sentence("pre", flat["pre"]) == (
        "pre: not enough rungs for a trend (3 rungs at 1 compute)") and not grid.spans_computes(frame.assign(joint_tflop=7.4))
    from normgrow.viz.depth import depth_figure
    frame = frame.assign(setting=["x", "y", "z"], depth_margin=0.098, **{f"depth_gain_{s}_ci_{e}": math.nan
                                                                         for s in "ab" for e in ("low", "high")})
    trend_lines = [t for t in depth_figure(frame, trends).data if t.mode == "lines"]
    assert sorted(t.name for t in trend_lines) == ["post: trend", "pre: trend"]
    assert all(t.line.dash == "dot" for t in trend_lines)


def test_a_settings_warmup_is_one_number_or_each_arms(grids):
    write_grid(grids, "g", "placements: [pre, post]\nseeds: [0]\nschedules: [joint, single]\nsettings:\n"
                           "  - {name: same, overrides: {train.warmup_steps: 48}}\n"
                           "  - {name: per_arm, overrides: {train.warmup_steps: {pre: 4, post: 8}}}\n")
    plan = grid_plan.plan_grid("cpu", grid_plan.load_grid("g"))
    for setting, expected in (("same", 48), ("per_arm", "pre-joint 4 pre-single 4 post-joint 8 post-single 8")):
        assert grid.setting_warmups([c for c in plan.cells if c.setting == setting]) == expected
