"""A grid's rows read with one placement's runs replaced by copies trained on another CPU: runs are bit for bit
reproducible on one CPU kind, not across kinds (bf16 kernels round differently), so a row whose two placements trained
on different CPUs mixes that rounding into its gaps. The copies are runs of the same recorded parameters under the
name PREFIX + the grid's run name (e.g. `python -m normgrow run --profile cpu --norm pre --schedule joint --seed 0
--run-name xeon-pre-joint-s0` on the other CPU). Prints, per setting whose runs of NORM were all copied, the joint
gap, grow gap and interaction (NORM - the other placement, paired by seed, 95% t-interval) from the grid's runs and
with the copies, where the other placement's runs trained on the copies' CPU; and each copy's val_ce minus the
original's. Run: .venv/bin/python scripts/grid_rows_one_cpu.py PROFILE GRID NORM PREFIX
(e.g. cpu robustness pre xeon-)."""
import sys

import pandas as pd

from normgrow.analysis.stats import mean_ci
from normgrow.rundir import grid_dir, read_finished, run_machine, run_path


def val_ce(profile: str, name: str) -> float:
    return read_finished(run_path(profile, name))[0].val_ce


def interval(c: dict) -> str:
    return f"{c['mean']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"


def readings(profile: str, grid: str, norm: str, prefix: str) -> tuple[dict[str, float], list[tuple[str, str, dict]]]:
    """({copy: its val_ce - the original's}, [(setting, which runs, {joint, grow, interaction: stats.mean_ci})])."""
    runs = pd.read_csv(grid_dir(profile, grid) / "runs.csv")
    copied = {n for n in runs.run_name[runs.norm == norm] if (run_path(profile, prefix + n) / "summary.json").exists()}
    machines = {run_machine(read_finished(run_path(profile, prefix + name))[1]) for name in copied}
    differences = {prefix + n: val_ce(profile, prefix + n) - val_ce(profile, n) for n in sorted(copied)}
    rows_read = []
    for setting, rows in runs.groupby("setting", sort=False):
        other = next((n for n in rows.norm.unique() if n != norm), None)
        if (other is None or not set(rows.run_name[rows.norm == norm]) <= copied
                or set(rows.machine[rows.norm == other]) != machines):
            continue
        for label, rename in (("grid's runs", ""), (f"{norm} from {prefix}*", prefix)):
            def ce(n: str, schedule: str) -> list[float]:
                names = rows[(rows.norm == n) & (rows.schedule == schedule)].sort_values("seed").run_name
                return [val_ce(profile, (rename if n == norm else "") + r) for r in names]
            joint = [a - b for a, b in zip(ce(norm, "joint"), ce(other, "joint"))]
            grow = [a - b for a, b in zip(ce(norm, "grow"), ce(other, "grow"))]
            rows_read.append((setting, label, {"joint": mean_ci(joint), "grow": mean_ci(grow),
                                               "interaction": mean_ci([g - j for g, j in zip(grow, joint)])}))
    return differences, rows_read


def main(profile: str, grid: str, norm: str, prefix: str) -> None:
    differences, rows_read = readings(profile, grid, norm, prefix)
    for name, difference in differences.items():
        print(f"{name} - {name[len(prefix):]}: {difference:+.4f}")
    for setting, label, gaps in rows_read:
        print(f"{setting} ({label}): joint gap {interval(gaps['joint'])}, grow gap {interval(gaps['grow'])}, "
              f"interaction {interval(gaps['interaction'])}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
