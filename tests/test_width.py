"""The width grid's record (normgrow.width) on synthetic study and sweep records of the committed rung profiles: each
quantity is the paired per-seed difference the study defines, the trend is the least-squares slope of the per-seed
values against log2(width) with its t interval, and the transfer check reads each arm's bracket."""
import math

import numpy as np
import pandas as pd
import pytest

from normgrow import width
from normgrow.analysis.stats import t_quantile
from normgrow.config import ParamError, load_profile
from normgrow.grid_plan import load_grid

VARIANTS = ("pre-joint", "post-joint", "pre-grow", "post-grow", "pre-single", "post-single", "pre-grow-freeze",
            "post-grow-freeze", "pre-joint-matched", "post-joint-matched")
GRID = width.WidthGrid(rungs=["cpu-w32", "cpu-w64", "cpu-w128"], brackets={"cpu-w128": [0.5, 1, 2]},
                       bracket_seeds=[0, 1], transfer_margin=0.01)


def write_study(outputs, profile, grow_gap, seeds=(0, 1, 2)):
    """A study record whose grow gap is grow_gap + seed / 100 per seed, and whose other variants sit at 5.0."""
    rows = []
    for seed in seeds:
        for v in VARIANTS:
            val = 5.0 + (grow_gap + seed / 100 if v == "pre-grow" else 0.0)
            rows.append({"run_name": f"{v}-s{seed}", "variant": v, "seed": seed, "val_ce": val,
                         "val_ce_p0": val + 0.3, "val_ce_p1": val + 0.1, "val_ce_p2": val})
    d = outputs / "study" / profile
    d.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(d / "summary.csv", index=False)
    pd.DataFrame([{"claim": "headline-grow", "status": "supported"}]).to_csv(d / "claims.csv", index=False)


def test_quantities_and_trend_over_the_rungs(outputs):
    gaps = {"cpu-w32": 0.10, "cpu-w64": 0.08, "cpu-w128": 0.06}  # -0.02 nats per doubling of width
    for profile, gap in gaps.items():
        write_study(outputs, profile, gap)
    table = width.width_frame(GRID)
    grow = table[table["quantity"] == "grow gap"].set_index("width")
    assert grow.loc[64, "mean"] == pytest.approx(0.08 + 0.01) and grow.loc[64, "n"] == 3
    half = t_quantile(0.975, 2) * 0.01 / math.sqrt(3)  # per-seed values 0.08, 0.09, 0.10: sd 0.01
    assert grow.loc[64, "ci_high"] - grow.loc[64, "mean"] == pytest.approx(half)
    assert grow.loc[64, "status"] == "supported"
    increment = table[table["quantity"] == "growth increment"].set_index("width")
    assert increment.loc[128, "mean"] == pytest.approx(0.06 + 0.01)  # single gap 0
    trend = width.trend_frame(GRID).set_index("quantity")
    assert trend.loc["grow gap", "slope"] == pytest.approx(-0.02) and trend.loc["grow gap", "n"] == 9
    x = np.log2([32] * 3 + [64] * 3 + [128] * 3)
    y = [gaps[f"cpu-w{int(2 ** v)}"] + s / 100 for v, s in zip(x, [0, 1, 2] * 3)]
    b, a = np.polyfit(x, y, 1)
    se = math.sqrt(((np.array(y) - a - b * x) ** 2).sum() / 7 / ((x - x.mean()) ** 2).sum())
    assert trend.loc["grow gap", "ci_high"] - trend.loc["grow gap", "slope"] == pytest.approx(t_quantile(0.975, 7) * se)
    assert trend.loc["grow gap", "direction"] == "toward the reference"  # 0.10 at 32, heading to 0.0328
    assert trend.loc["joint gap", "direction"] == "not enough rungs" or "flat" in trend.loc["joint gap", "direction"]
    fig = width.width_figure(table)
    assert [len(t.x) for t in fig.data] == [3, 3, 3] and not [a for a in fig.layout.annotations if a.text == "not yet"]
    assert "reference 0.0328" in [a.text for a in fig.layout.annotations]


def test_a_trend_that_passes_the_reference_says_so(outputs):
    """A grow gap fitted from 0.0 at 32 to 0.06 at 128 passes the reference's 0.0328: not 'toward the reference'
    (bug: any slope pointing from the narrowest rung at the reference read as toward it; the width grid's joint gap,
    -0.024 at 32 and +0.028 at 128 against 0.0004, read so); one moving from 0.07 to 0.11 heads away."""
    import shutil
    for gaps, direction in (((-0.01, 0.02, 0.05), "crosses the reference"), ((0.06, 0.08, 0.10), "away from the reference")):
        shutil.rmtree(outputs / "study", ignore_errors=True)
        for profile, gap in zip(GRID.rungs, gaps):
            write_study(outputs, profile, gap)
        assert width.trend_frame(GRID).set_index("quantity").loc["grow gap", "direction"] == direction


def test_a_rung_without_its_study_is_named_not_counted(outputs):
    write_study(outputs, "cpu-w32", 0.1)
    table = width.width_frame(GRID)
    assert set(table.loc[table["status"] == "study not finished", "rung"]) == {"cpu-w64", "cpu-w128"}
    fig = width.width_figure(table)
    assert [len(t.x) for t in fig.data] == [1, 1, 1] and [a.text for a in fig.layout.annotations].count("not yet") == 6
    assert width.trend_frame(GRID).set_index("quantity").loc["grow gap", "direction"] == "not enough rungs"


def test_transfer_reads_each_arm_s_bracket(outputs, monkeypatch):
    lr = load_profile("cpu-w128").train.lr
    rows = []
    for (norm, schedule), losses in {("pre", "joint"): (5.00, 4.90, 4.95), ("post", "grow"): (4.80, 4.85, 4.99)}.items():
        for factor, loss in zip((0.5, 1, 2), losses):
            for seed in (0, 1):
                rows.append({"norm": norm, "schedule": schedule, "lr": lr[norm][schedule] * factor, "warmup_steps": 48,
                             "seed": seed, "val_ce": loss + seed * 0.001})
    monkeypatch.setattr(width, "bracket_rows", lambda profile, factors, seeds: rows if profile == "cpu-w128" else [])
    t = width.transfer_frame(GRID).set_index("arm")
    assert t.loc["pre-grow", "verdict"] == "bracket incomplete"
    assert t.loc["pre-joint", "verdict"] == "transfers" and t.loc["pre-joint", "x1_minus_best"] == pytest.approx(0)
    assert t.loc["post-grow", "best_factor"] == 0.5
    assert t.loc["post-grow", "x1_minus_best"] == pytest.approx(0.05)
    assert t.loc["post-grow", "verdict"] == "does not transfer; best at the bracket's edge"


def test_the_width_grid_file_loads_and_the_grid_runner_sends_it_to_its_own():
    grid = width.load_width_grid()
    assert [width.width_of(p) for p in grid.rungs] == [32, 64, 128, 256]
    assert all(load_profile(p).student.parametrization == "mup" for p in grid.rungs)
    assert all(load_profile(p).train.lr == load_profile("cpu").train.lr for p in grid.rungs)
    with pytest.raises(ParamError, match="a grid of studies .* python -m normgrow.width"):
        load_grid("width")


def test_the_grid_trains_each_width_bracket_then_study_then_its_control(monkeypatch, tmp_path):
    from normgrow import study, sweep
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    calls = []
    monkeypatch.setattr(study, "main", lambda argv: calls.append(("study", argv[1])) or 0)
    monkeypatch.setattr(sweep, "main", lambda argv: calls.append(("sweep", argv[1])) or 0)
    width.train(width.load_width_grid(), jobs=2)
    assert calls == [("study", "cpu-w32"), ("study", "cpu-w64"), ("sweep", "cpu-w128"), ("study", "cpu-w128"),
                     ("sweep", "cpu-w256"), ("study", "cpu-w256"), ("sweep", "cpu-w256-standard")]


def test_a_restarted_grid_skips_the_parts_that_finished(monkeypatch, tmp_path, capsys):
    """A rung whose study has every run finished and its record written is not run again (its record, rebuilt on
    another CPU, would read that CPU's teacher pass); a study missing one run, or its record, still runs."""
    from normgrow import study, sweep
    from normgrow.rundir import run_path, study_dir
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    for run in study.load_study(profile="cpu-w32"):
        run_path("cpu-w32", run.name).mkdir(parents=True)
        (run_path("cpu-w32", run.name) / "summary.json").write_text("{}")
    for run in study.load_study(profile="cpu-w64")[1:]:  # one run unfinished
        run_path("cpu-w64", run.name).mkdir(parents=True)
        (run_path("cpu-w64", run.name) / "summary.json").write_text("{}")
    for profile in ("cpu-w32", "cpu-w64"):
        study_dir(profile).mkdir(parents=True)
        (study_dir(profile) / "claims.csv").write_text("claim\n")
    calls = []
    monkeypatch.setattr(study, "main", lambda argv: calls.append(("study", argv[1])) or 0)
    monkeypatch.setattr(sweep, "main", lambda argv: calls.append(("sweep", argv[1])) or 0)
    width.train(width.load_width_grid(), jobs=2)
    assert calls[:2] == [("study", "cpu-w64"), ("sweep", "cpu-w128")]
    assert "the study of cpu-w32: every run finished and its record written; skipped" in capsys.readouterr().out
