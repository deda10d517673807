"""scripts/grid_rows_one_cpu.py on the committed robustness map of the cpu profile and its committed copies of
pre-norm's runs trained on a second CPU (xeon-pre-*): the grid's own reading of each row is the grid's, and only rows
whose other placement trained on the copies' CPU are read again."""
from pathlib import Path

import pandas as pd
import pytest
from repo_scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "outputs" / "grid" / "cpu" / "robustness"


def test_the_grid_s_reading_is_the_grid_s_and_mixed_cpu_rows_are_left_out(monkeypatch):
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)  # the repository's committed outputs
    differences, rows_read = load_script("grid_rows_one_cpu").readings("cpu", "robustness", "pre", "xeon-")
    # copies exist of the study's pre-norm runs only (the map's protocol settings train pre-norm runs of their own)
    assert set(differences) == {f"xeon-pre-{s}-s{seed}" for s in ("joint", "grow", "single") for seed in range(3)}
    committed = pd.read_csv(GRID / "grid.csv").set_index("setting")
    read = {(setting, label): gaps for setting, label, gaps in rows_read}
    settings = {setting for setting, _ in read}
    # the placement rows trained their placement on the copies' CPU; the protocol rows' post-norm did not
    assert settings == {"mix", "peri", "deepnorm", "lns"}
    for setting in settings:
        gaps = read[(setting, "grid's runs")]
        for gap, column in (("joint", "joint_gap"), ("grow", "grow_gap"), ("interaction", "interaction")):
            assert gaps[gap]["mean"] == pytest.approx(committed.loc[setting, column], abs=1e-9)
        assert (setting, "pre from xeon-*") in read
