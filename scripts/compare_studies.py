"""Two trainings of one study side by side (another CPU, another numerics version, another torch): how far each
run's final val_ce moved, each variant's mean, and each gap with its interval, from the two study folders' own
tables (summary.csv and gaps.csv, as the report writes them). Runs are joined by name; a run in one folder only is
listed, never dropped silently. Run:
.venv/bin/python scripts/compare_studies.py outputs/study/cpu /elsewhere/outputs/study/cpu"""
import sys
from pathlib import Path

import pandas as pd


def compare(a_dir: Path, b_dir: Path) -> str:
    a, b = (pd.read_csv(d / "summary.csv") for d in (a_dir, b_dir))
    runs = a.merge(b, on="run_name", how="outer", suffixes=("_a", "_b"), indicator=True)
    lines = [f"a: {a_dir}", f"b: {b_dir}", ""]
    for side, label in (("left_only", "a"), ("right_only", "b")):
        only = sorted(runs.loc[runs["_merge"] == side, "run_name"])
        if only:
            lines.append(f"runs in {label} only: {', '.join(only)}")
    both = runs[runs["_merge"] == "both"].copy()
    both["d"] = both["val_ce_b"] - both["val_ce_a"]
    d = both["d"].abs()
    lines += [f"{len(both)} runs in both: final val_ce b - a, |median| {d.median():.4f}, |max| {d.max():.4f} "
              f"({both.loc[d.idxmax(), 'run_name']})", "",
              "| variant | runs | mean a | mean b | b - a |", "|---|---|---|---|---|"]
    for variant, g in both.groupby("variant_a"):
        ma, mb = g["val_ce_a"].mean(), g["val_ce_b"].mean()
        lines.append(f"| {variant} | {len(g)} | {ma:.3f} | {mb:.3f} | {mb - ma:+.3f} |")
    gaps = pd.read_csv(a_dir / "gaps.csv").merge(pd.read_csv(b_dir / "gaps.csv"), on=["gap", "metric"],
                                                 suffixes=("_a", "_b"))
    lines += ["", "| gap | metric | a [95% CI] | b [95% CI] | b - a |", "|---|---|---|---|---|"]
    for _, g in gaps.iterrows():
        cell = [f"{g[f'mean_{s}']:+.3f} [{g[f'ci_low_{s}']:+.3f}, {g[f'ci_high_{s}']:+.3f}]" for s in "ab"]
        lines.append(f"| {g['gap']} | {g['metric']} | {cell[0]} | {cell[1]} | {g['mean_b'] - g['mean_a']:+.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare_studies.py STUDY_DIR_A STUDY_DIR_B (each an outputs/study/<profile> folder)")
    print(compare(Path(sys.argv[1]), Path(sys.argv[2])))
