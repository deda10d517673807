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
from functools import cache

import pandas as pd

from normgrow.grid import setting_gaps
from normgrow.rundir import grid_dir, read_finished, run_machine, run_path


@cache
def finished(profile: str, name: str) -> tuple:
    """rundir.read_finished of a run, read once however many rows share it."""
    return read_finished(run_path(profile, name))


def interval(c: dict) -> str:
    return f"{c['mean']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"


def readings(profile: str, grid: str, norm: str, prefix: str) -> tuple[dict[str, float], list[tuple[str, str, dict]]]:
    """({copy: its val_ce - the original's}, [(setting, which runs, grid.setting_gaps: joint, grow, interaction)])."""
    runs = pd.read_csv(grid_dir(profile, grid) / "runs.csv")
    copied = {n for n in runs.run_name[runs.norm == norm] if (run_path(profile, prefix + n) / "summary.json").exists()}
    machines = {run_machine(finished(profile, prefix + name)[1]) for name in copied}
    val_ce = lambda name: finished(profile, name)[0].val_ce
    differences = {prefix + n: val_ce(prefix + n) - val_ce(n) for n in sorted(copied)}
    rows_read = []
    for setting, rows in runs.groupby("setting", sort=False):
        other = next((n for n in rows.norm.unique() if n != norm), None)
        if (other is None or not set(rows.run_name[rows.norm == norm]) <= copied
                or set(rows.machine[rows.norm == other]) != machines):
            continue
        for label, rename in (("grid's runs", ""), (f"{norm} from {prefix}*", prefix)):
            frame = pd.DataFrame({"variant": rows.norm + "-" + rows.schedule, "seed": rows.seed,
                                  "val_ce": [val_ce((rename if n == norm else "") + r)
                                             for n, r in zip(rows.norm, rows.run_name)]})
            rows_read.append((setting, label, setting_gaps(frame, norm, other)))
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
