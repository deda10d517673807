"""The lr sweep: the profile's lr line rewrite, the choice and its grid warnings, and a tiny sweep end to end on the
synthetic cache (tmp NORMGROW_OUTPUTS, a tmp copy of the profiles, so params/profiles is never touched)."""
from __future__ import annotations

import csv
import json
import math
import shutil

import pytest
import torch
import yaml

import fakes
from normgrow import sweep
from normgrow.config import PARAMS_DIR, ParamError

PROFILE = """\
# a synthetic profile: comments and odd spacing must survive
student:
  d_model: 32   # width
  lr: 9.9e-9    # not train's lr
train:
  # peak lr below
  stages: [1, 2, 3]
  lr: 3.0e-3    # old comment
  warmup_steps: 2
distill:
  temperature: 1.0
"""


# fakes' tiny profile, 3 steps per run
OVERRIDES = dict(fakes.TINY_OVERRIDES, **{"train.stage_tokens": [128, 128, 128]})


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """A tmp outputs tree, the synthetic cache, one torch thread (a 16-wide model gains nothing from two, and on a
    shared machine two threads contend: seconds instead of a fraction of one per run)."""
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    fakes.install(monkeypatch)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path / "outputs"
    torch.set_num_threads(threads)


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b) if x != y]


def test_float_lr_becomes_a_mapping_and_nothing_else_changes():
    new = sweep.rewrite_lr_line(PROFILE, {"pre": 1e-3, "post": 1.5e-3}, "sweep X")
    assert changed_lines(PROFILE, new) == [("  lr: 3.0e-3    # old comment\n",
                                            "  lr: {pre: 1.0e-3, post: 1.5e-3}  # sweep X\n")]
    assert yaml.safe_load(new)["train"]["lr"] == {"pre": 1e-3, "post": 1.5e-3}


def test_partial_sweep_keeps_the_other_norm():
    from_float = sweep.rewrite_lr_line(PROFILE, {"post": 1e-3}, "c")
    assert yaml.safe_load(from_float)["train"]["lr"] == {"pre": 3e-3, "post": 1e-3}
    again = sweep.rewrite_lr_line(from_float, {"pre": 6e-3}, "d")
    assert changed_lines(from_float, again) == [("  lr: {pre: 3.0e-3, post: 1.0e-3}  # c\n",
                                                 "  lr: {pre: 6.0e-3, post: 1.0e-3}  # d\n")]


def test_block_mapping_and_crlf_line_endings():
    text = PROFILE.replace("  lr: 3.0e-3    # old comment\n", "  lr:\n    pre: 2.0e-3\n    post: 1.0e-3\n")
    text = text.replace("\n", "\r\n")
    new = sweep.rewrite_lr_line(text, {"post": 5e-4}, "c")
    assert "  lr: {pre: 2.0e-3, post: 5.0e-4}  # c\r\n  warmup_steps: 2\r\n" in new
    assert new.replace("  lr: {pre: 2.0e-3, post: 5.0e-4}  # c\r\n", "") == \
        text.replace("  lr:\r\n    pre: 2.0e-3\r\n    post: 1.0e-3\r\n", "")


def test_profile_without_a_train_lr_line_is_refused():
    with pytest.raises(ParamError, match="the train section has no lr line"):
        sweep.rewrite_lr_line(PROFILE.replace("  lr: 3.0e-3    # old comment\n", ""), {"pre": 1e-3}, "c")


def rows(norm, scores):
    return [{"norm": norm, "lr": lr, "val_ce": ce} for lr, ce in scores.items()]


def test_argmin_and_grid_edge_warnings():
    chosen = sweep.choose_lrs(rows("pre", {1e-3: 5.0, 3e-3: 4.5, 1e-2: 4.8}) + rows("post", {1e-3: 4.9, 3e-3: 5.2})
                              + rows("x", {1e-3: 6.0, 3e-3: 5.0, 1e-2: math.nan}))
    assert chosen["pre"] == {"lr": 3e-3, "val_ce": 4.5, "edge": None}
    assert chosen["post"] == {"lr": 1e-3, "val_ce": 4.9, "edge": "lowest"}
    assert chosen["x"] == {"lr": 3e-3, "val_ce": 5.0, "edge": None}  # bracketed by a diverged run
    assert sweep.grid_warnings(chosen) == ["post: the best lr 1e-03 is the lowest point of the grid; "
                                           "extend the grid below it"]
    assert sweep.choose_lrs(rows("pre", {1e-3: 5.0, 3e-3: 4.0}))["pre"]["edge"] == "highest"
    diverged = sweep.choose_lrs(rows("pre", {1e-2: math.inf}))
    assert diverged["pre"]["lr"] is None and "every candidate diverged" in sweep.grid_warnings(diverged)[0]


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
    plan = sweep.make_plan("tiny", ["post"], [3e-3, 1e-3], seed=0, overrides=OVERRIDES)
    result = sweep.sweep(plan, write=True, profiles_dir=profiles, progress=False, command="test")

    out = outputs / "sweep" / "tiny"
    table = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["run_name"] for r in table] == ["sweep-post-joint-lr1e-03-s0", "sweep-post-joint-lr3e-03-s0"]
    assert list(table[0]) == list(sweep.COLUMNS)
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["rows"] == result["rows"] and saved["profile"] == "tiny" and saved["command"] == "test"
    best = min(result["rows"], key=lambda r: r["val_ce"])
    assert saved["chosen"]["post"]["lr"] == best["lr"]
    assert len(saved["warnings"]) == 1  # two-point grid: the best is always at an edge

    after = (profiles / "tiny.yaml").read_text()
    ((old, new),) = changed_lines(before, after)
    assert old == "  lr: 3.0e-3\n"
    assert new.startswith(f"  lr: {{pre: 3.0e-3, post: {sweep.yaml_float(best['lr'])}}}  # sweep {saved['date']}: ")
    assert str(out / "sweep.json") in new and f"(val_ce post {best['val_ce']:.4f})" in new
    assert (PARAMS_DIR / "profiles" / "tiny.yaml").read_text() == before

    summary = outputs / "runs" / "tiny" / "sweep-post-joint-lr1e-03-s0" / "summary.json"
    stamp = summary.stat().st_mtime_ns
    assert sweep.sweep(plan, progress=False)["rows"] == result["rows"]  # resumed: finished runs are read back
    assert summary.stat().st_mtime_ns == stamp


def test_write_is_refused_before_training(outputs, tmp_path):
    (tmp_path / "tiny.yaml").write_text(PROFILE.replace("  lr: 3.0e-3    # old comment\n", ""))
    plan = sweep.make_plan("tiny", ["pre"], [1e-3], overrides=OVERRIDES)
    with pytest.raises(ParamError, match="no lr line"):
        sweep.sweep(plan, write=True, profiles_dir=tmp_path, progress=False)
    assert not (outputs / "runs").exists()


def test_grid_per_placement(outputs, tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text("schedule: joint\nseed: 0\nlrs:\n  tiny: {pre: [3.0e-3, 1.0e-3], post: [5.0e-4]}\n")
    plan = sweep.make_plan("tiny", config_path=config)
    assert plan.lrs == {"pre": (1e-3, 3e-3), "post": (5e-4,)}
    assert [(s.norm, s.profile.train.lr) for s in plan.specs] == [("pre", 1e-3), ("pre", 3e-3), ("post", 5e-4)]
    config.write_text("lrs:\n  tiny: {pre: [3.0e-3]}\n")
    with pytest.raises(ParamError, match=r"lrs.tiny.post=None must be a non-empty list"):
        sweep.make_plan("tiny", config_path=config)
