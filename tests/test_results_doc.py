"""docs/RESULTS.md is current: every table that ``python -m normgrow.results`` prints from a record committed outside
the archive (the study, the ladder, the curriculum's shapes, the map, the tuning) stands in RESULTS.md line for line,
so a record trained again, or counted differently by today's code, fails here until RESULTS.md shows its new
numbers."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from normgrow import results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "RESULTS.md"
PROFILE = "cpu"


def committed(table: str) -> bool:
    folder = results.record_of(table, PROFILE)
    return folder.is_dir() and any(folder.glob("*.csv"))


@pytest.fixture
def repository_outputs(monkeypatch):
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)  # the repository's committed outputs


@pytest.mark.parametrize("table", list(results.TABLES))
def test_results_doc_holds_each_committed_table_as_printed(table, repository_outputs):
    if not committed(table):
        pytest.skip(f"no committed record for the {table} table")
    lines = set(RESULTS.read_text().splitlines())
    printed = [line for line in results.TABLES[table](PROFILE).splitlines() if line.strip()]
    stale = [line for line in printed if line not in lines]
    assert not stale, (f"docs/RESULTS.md lacks {len(stale)} of the {len(printed)} lines of `python -m normgrow.results "
                       f"--profile {PROFILE} {table}`, e.g. {stale[0][:200]!r}")


def test_every_table_has_a_committed_record(repository_outputs):
    """The check above is not vacuous: each table's record is committed."""
    assert [t for t in results.TABLES if not committed(t)] == []


def test_a_table_changes_with_its_record(repository_outputs, tmp_path, monkeypatch):
    """A study whose claims read otherwise prints another claims table (what the check above would catch)."""
    import shutil
    copy = tmp_path / "study" / PROFILE
    shutil.copytree(ROOT / "outputs" / "study" / PROFILE, copy)
    before = results.study_tables(PROFILE)
    claims = (copy / "claims.csv").read_text()
    (copy / "claims.csv").write_text(claims.replace("not resolved", "supported", 1))
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    after = results.study_tables(PROFILE)
    assert after != before
    assert [line for line in after.splitlines() if line not in set(RESULTS.read_text().splitlines())]


def test_an_unknown_table_is_an_error_naming_the_tables(capsys):
    with pytest.raises(SystemExit) as exit_:
        results.main(["nonsense"])
    assert "study, ladder, ladder-runs, shapes" in str(exit_.value)


def test_the_tuning_table_reads_each_optimum_and_its_nearest_neighbours(tmp_path, monkeypatch):
    """Means over seeds; the neighbours are the nearest lr on each side at the optimum's warmup and the nearest
    warmup on each side at its lr, whatever else was tried; a side never tried says so."""
    import json
    folder = tmp_path / "sweep" / PROFILE
    folder.mkdir(parents=True)
    grid = {(1e-3, 10): 5.0, (2e-3, 10): 4.0, (4e-3, 10): 4.5, (8e-3, 10): 4.1, (2e-3, 20): 4.2, (4e-3, 20): 3.0}
    rows = [{"norm": "pre", "schedule": "joint", "lr": lr, "warmup_steps": wu, "seed": seed, "val_ce": ce + d}
            for (lr, wu), ce in grid.items() for seed, d in ((0, -0.1), (1, 0.1))]
    record = {"norms": ["pre"], "schedules": ["joint"], "rows": rows,
              "chosen": {"pre": {"joint": {"lr": 2e-3, "warmup_steps": 10, "val_ce": 4.0}}}}
    (folder / "sweep.json").write_text(json.dumps(record))
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    assert results.tuning_table(PROFILE).splitlines()[-1] == \
        "| pre-joint | 2.00e-3 | 10 | 4.0000 | lr 1.00e-3 5.0000, 4.00e-3 4.5000; warmup 20 4.2000 |"
    record["chosen"]["pre"]["joint"] = {"lr": 1e-3, "warmup_steps": 10, "val_ce": 5.0}
    (folder / "sweep.json").write_text(json.dumps(record))
    assert results.tuning_table(PROFILE).splitlines()[-1] == \
        "| pre-joint | 1.00e-3 | 10 | 5.0000 | lr 2.00e-3 4.0000; warmup none tried |"


def test_the_basin_table_pairs_every_factor_of_each_arm_at_its_tuned_warmup(tmp_path, monkeypatch):
    """pre(lr x f_pre) - post(lr x f_post) over the seeds both finished, each arm's lr and warmup the profile's; a
    candidate at another warmup is not read, a factor never tried says so."""
    import json
    from normgrow.config import load_profile
    from normgrow.train.spec import for_arm
    train = load_profile(PROFILE).train
    rows = []
    for norm, base in (("pre", 5.0), ("post", 4.9)):
        for schedule in ("joint", "grow", "single"):
            lr = for_arm("train.lr", train.lr, norm, schedule)
            wu = for_arm("train.warmup_steps", train.warmup_steps, norm, schedule)
            for f in results.BASIN_FACTORS[:2] if norm == "post" else results.BASIN_FACTORS:
                for seed in (0, 1, 2):
                    rows.append({"norm": norm, "schedule": schedule, "lr": lr * f, "warmup_steps": wu, "seed": seed,
                                 "val_ce": base + f / 10 + seed / 100})
                    rows.append({"norm": norm, "schedule": schedule, "lr": lr * f, "warmup_steps": wu + 1,
                                 "seed": seed, "val_ce": 9.0})
    folder = tmp_path / "sweep" / PROFILE
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"rows": rows}))
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    lines = results.basin_table(PROFILE).splitlines()
    grow_x1 = next(line for line in lines if line.startswith("| grow | x1 |"))
    assert grow_x1 == "| grow | x1 | +0.129 [+0.129, +0.129] | +0.100 [+0.100, +0.100] | not tried |"  # no spread


def test_the_crossover_curve_bands_each_shared_checkpoint_and_reads_a_crossover(tmp_path, monkeypatch):
    """Subset values at every shared checkpoint (step 0 and whole-split values left out, a phase end's own subset
    value in), paired by seed, a Bonferroni band over the checkpoints; a lead that changes sides is a crossover."""
    import json
    from normgrow.analysis.stats import t_quantile
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    gaps = {100: -0.2, 200: 0.0, 300: 0.2}  # pre - post: pre-norm leads, then level, then post-norm leads
    for seed in range(3):
        for norm in ("pre", "post"):
            d = tmp_path / "runs" / PROFILE / f"{norm}-grow-s{seed}"
            d.mkdir(parents=True)
            ce = {t: 5.0 + (g + seed / 100 if norm == "pre" else 0.0) for t, g in gaps.items()}
            records = [{"kind": "eval", "step": 0, "tokens": 0, "val_ce": 9.0, "full_split": False},
                       {"kind": "eval", "step": 1, "tokens": 100, "val_ce": ce[100], "full_split": False},
                       {"kind": "eval", "step": 4, "tokens": 400, "val_ce": 7.0, "full_split": True},
                       {"kind": "growth_eval", "step": 2, "tokens": 200, "val_ce": ce[200]},
                       {"kind": "phase_end", "step": 3, "tokens": 300, "val_ce": 8.0, "val_ce_subset": ce[300]}]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    study = tmp_path / "study" / PROFILE
    study.mkdir(parents=True)
    pd.DataFrame([{"variant": f"{n}-grow", "seed": s} for n in ("pre", "post") for s in range(3)]).to_csv(
        study / "summary.csv", index=False)
    lines = results.crossover_curve_table(PROFILE).splitlines()
    half = t_quantile(1 - 0.05 / 6, 2) * 0.01 / 3 ** 0.5  # per-seed gaps g, g + 0.01, g + 0.02
    assert lines[2] == f"| 100 | -0.190 | [{-0.19 - half:+.3f}, {-0.19 + half:+.3f}] | pre-norm leads |"
    assert lines[3].endswith("| not resolved |") and lines[4].endswith("| post-norm leads |")
    assert lines[-1] == "crossover (resolved at 100, 300 tokens)."


def test_the_map_table_reads_each_setting_s_gaps_and_verdicts(monkeypatch):
    """On the archived map (3-block prefix, numerics version 4): each setting's row holds grid.csv's gaps as RESULTS.md's
    archived section quotes them, with the MDEs, and both verdicts."""
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(ROOT / "outputs" / "archive" / "cpu-numerics4"))
    rows = {line.split(" | ")[0].lstrip("| "): line for line in results.robustness_table(PROFILE).splitlines()[2:]}
    assert len(rows) == 11
    assert rows["default"].startswith("| default | pre - post | 3 | +0.001 [-0.015, +0.018] | "
                                      "+0.020 [-0.021, +0.061] (0.041) | +0.019 [-0.029, +0.066] (0.047) |")
    assert "| peri | pre - peri | 3 | -0.125 [-0.173, -0.077] |" in rows["peri"]
    assert all(line.endswith("| not judged: depth does not pay at this scale | not judged: depth does not pay at this "
                             "scale |") for line in rows.values())


def test_the_width_table_reads_each_rung_s_quantities_and_an_unfinished_rung(tmp_path, monkeypatch):
    """A rung's gap with its interval, seeds and verdict; a drift as a factor with obs4-stability's verdict; a rung without a
    finished study in the first row, its cells empty."""
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    folder = tmp_path / "grid" / PROFILE / "width"
    folder.mkdir(parents=True)
    pd.DataFrame([
        {"rung": "cpu-w32", "width": 32, "quantity": "grow gap", "mean": 0.0643, "ci_low": 0.0365, "ci_high": 0.0921,
         "n": 3, "status": "supported"},
        {"rung": "cpu-w32", "width": 32, "quantity": "single gap", "mean": 0.03, "ci_low": -0.016, "ci_high": 0.077,
         "n": 3, "status": None},
        {"rung": "cpu-w32", "width": 32, "quantity": "top-boundary drift (pre)", "mean": 3.3384, "n": 3,
         "status": "supported"},
        {"rung": "cpu-w128", "width": 128, "quantity": None, "status": "study not finished"},
    ]).to_csv(folder / "width.csv", index=False)
    lines = results.width_table(PROFILE).splitlines()
    assert lines[0] == "| quantity (seeds) | cpu-w32 | cpu-w128 |"
    assert lines[2] == "| study | finished | study not finished |"
    assert lines[3] == "| grow gap | +0.0643 [+0.0365, +0.0921] (3) supported |  |"
    assert lines[4] == "| single gap | +0.0300 [-0.0160, +0.0770] (3) |  |"
    assert lines[5] == "| top-boundary drift (pre) | x3.34 (3) obs4-stability supported |  |"
