"""Every committed study and grid is still counted the same: its tables, recomputed by today's code from its
committed runs (summary.json, metrics.jsonl, config.json) and diagnostics.json, equal the committed files byte for
byte. The baselines come from the committed study's baselines.json and each grid setting's from its grid.csv row, so
a clone without the teacher caches checks the same thing."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from normgrow import grid, grid_plan
from normgrow.analysis import diagnostics
from normgrow.viz import report

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.parent.name for p in (ROOT / "outputs" / "study").glob("*/claims.csv"))
GRIDS = sorted(p.parent.relative_to(ROOT / "outputs" / "grid").as_posix()
               for p in (ROOT / "outputs" / "grid").glob("*/*/grid.csv"))
TABLES = ("summary", "variant_stats", "gaps", "crossover", "claims", "regime", "depth", "unassigned")


@pytest.mark.slow  # builds every table of each committed study (about 20 s)
@pytest.mark.parametrize("profile", STUDIES)
def test_a_committed_study_recomputes_to_its_committed_tables(profile, monkeypatch, tmp_path):
    committed = ROOT / "outputs" / "study" / profile
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)  # the repository's committed outputs
    monkeypatch.setattr(report, "baselines",
                        lambda name, teacher_key=None: json.loads((committed / "baselines.json").read_text()))
    files = report.write_report(report.build_report(profile), out_dir=tmp_path)
    changed = [name for name in TABLES if files[name].read_text() != (committed / f"{name}.csv").read_text()]
    assert not changed, f"outputs/study/{profile}: today's code counts {changed} differently"
    # the page too: it draws the committed grids and names every run it does not count (plotly.js's path is the
    # page's place, here a temporary folder)
    page = lambda path: re.sub(r"[\w./-]*assets/plotly-[\d.]+\.min\.js", "plotly.js", path.read_text())  # noqa: E731
    assert page(files["report"]) == page(committed / "report.html"), \
        f"outputs/study/{profile}/report.html is not the page its runs and grids make today"


@pytest.mark.parametrize("profile", [p for p in STUDIES if (ROOT / "outputs" / "study" / p / "diagnostics.json").is_file()])
def test_a_committed_study_s_measured_claims_are_judged_the_same(profile):
    """diagnostics.json rebuilt from its own measurements (observations 4 and 5 judged again by today's code) is the
    committed file, sentences included."""
    measured = json.loads((ROOT / "outputs" / "study" / profile / "diagnostics.json").read_text())
    again = diagnostics.study_result(profile, measured["batch"], measured["runs"])
    assert json.loads(json.dumps(again)) == measured


@pytest.mark.slow  # reads the metrics of every run of each committed grid (about 10 s)
@pytest.mark.parametrize("where", GRIDS)
def test_a_committed_grid_recomputes_to_its_committed_table(where, monkeypatch):
    """grid.csv (every setting's gaps, gates and the verdicts of the claim declarations) and curriculum.csv (grids
    with grown runs) from the committed runs."""
    profile, name = where.split("/")
    committed = ROOT / "outputs" / "grid" / where
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)
    frame = pd.read_csv(committed / "grid.csv").set_index("setting")
    monkeypatch.setattr(grid, "setting_unigram", lambda plan, setting, runs: frame.loc[setting.name, "unigram_val_ce"])
    plan = grid_plan.plan_grid(profile, grid_plan.load_grid(name), json.loads((committed / "grid.json").read_text())["seeds"])
    runs = grid.read_cells(plan)
    assert grid.grid_frame(plan, runs).to_csv(index=False) == (committed / "grid.csv").read_text()
    if (committed / "curriculum.csv").is_file():  # grids with grown runs: how the grown students fared
        assert (grid.curriculum_frame(grid.curriculum(plan, runs)).to_csv(index=False)
                == (committed / "curriculum.csv").read_text())


def test_there_is_a_committed_grid_to_check():
    """A grid (the regime ladder, the map) is always committed. A study may not be: a numerics version bump moves the
    study it invalidates to outputs/archive/ until the study is trained again (README says which)."""
    assert GRIDS, "no committed grid under outputs/grid/"
