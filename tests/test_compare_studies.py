"""python -m normgrow.results compare: two trainings of a study side by side, from their summary.csv and gaps.csv."""
from pathlib import Path

import pandas as pd

from normgrow import results


def write_study(folder: Path, val_ce: dict[str, float], grow_gap: float) -> Path:
    folder.mkdir(parents=True)
    pd.DataFrame({"run_name": list(val_ce), "variant": [n.rsplit("-s", 1)[0] for n in val_ce],
                  "val_ce": list(val_ce.values())}).to_csv(folder / "summary.csv", index=False)
    pd.DataFrame({"gap": ["grow"], "metric": ["val_ce"], "mean": [grow_gap], "ci_low": [grow_gap - 0.05],
                  "ci_high": [grow_gap + 0.05]}).to_csv(folder / "gaps.csv", index=False)
    return folder


def test_runs_variants_and_gaps_are_compared_and_unmatched_runs_named(tmp_path):
    a = write_study(tmp_path / "a", {"pre-grow-s0": 4.80, "pre-grow-s1": 4.82, "post-grow-s0": 4.90}, -0.010)
    b = write_study(tmp_path / "b", {"pre-grow-s0": 4.81, "pre-grow-s1": 4.79, "post-grow-s1": 4.95}, +0.020)
    text = results.compare_studies(a, b)
    assert "runs in a only: post-grow-s0" in text and "runs in b only: post-grow-s1" in text
    assert "2 runs in both: final val_ce b - a, |median| 0.0200, |max| 0.0300 (pre-grow-s1)" in text
    assert "| pre-grow | 2 | 4.810 | 4.800 | -0.010 |" in text  # the variant means over the runs in both
    assert "| grow | val_ce | -0.010 [-0.060, +0.040] | +0.020 [-0.030, +0.070] | +0.030 |" in text
