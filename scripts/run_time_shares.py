"""Where runs spent their wall time: training steps, evaluations, checkpoints and the rest (the step-0 set-up,
compilation, data), from the runs' own records: a profile's study runs by run file of params/runs/, or a grid
record's finished runs by setting and schedule (each run once, as the grid reads them). A step's time is what
metrics.jsonl's train record measured (tokens per step / tok_s); evaluations and checkpoints are summary.json's eval_s
and checkpoint_s (numerics version 3 onwards; older runs lack them and are skipped). Start-up before a run's clock
starts (the kernel, imports, the cache key) is not in wall_s. Run:
.venv/bin/python scripts/run_time_shares.py cpu
.venv/bin/python scripts/run_time_shares.py cpu --grid ladder"""
import argparse
from collections import defaultdict

from normgrow.analysis.variants import collect_runs
from normgrow.grid import load_grid, plan_grid, read_cells
from normgrow.rundir import Summary, read_metrics, run_path

PARTS = ("steps_s", "eval_s", "checkpoint_s", "other_s")


def add_run(totals: dict, profile: str, summary: Summary) -> None:
    """One run's wall time and its parts added to totals (a run without eval_s is skipped)."""
    if summary.eval_s is None:
        return
    tokens_per_step = summary.tokens / summary.steps
    train = [r for r in read_metrics(run_path(profile, summary.run_name)) if r["kind"] == "train"]
    steps_s = sum(tokens_per_step / r["tok_s"] for r in train)
    totals["runs"] += 1
    totals["wall_s"] += summary.wall_s
    totals["steps_s"] += steps_s
    totals["eval_s"] += summary.eval_s
    totals["checkpoint_s"] += summary.checkpoint_s
    totals["other_s"] += summary.wall_s - steps_s - summary.eval_s - summary.checkpoint_s


def shares(profile: str) -> dict[str, dict[str, float]]:
    """{variant: {runs, wall_s, steps_s, eval_s, checkpoint_s, other_s}} summed over the study's runs of each variant
    (the runs the report counts, assigned by their recorded parameters)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (variant, _), summary in collect_runs(profile).assigned.items():
        add_run(totals[variant], profile, summary)
    return {v: dict(t) for v, t in sorted(totals.items())}


def grid_shares(profile: str, grid: str) -> dict[str, dict[str, float]]:
    """{"<setting> <schedule>": the same sums} over the grid's finished runs; a run that serves several settings
    (the study's own, or one shared by identity) is counted under the first setting that reads it."""
    plan = plan_grid(profile, load_grid(grid))
    runs = read_cells(plan)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counted = set()
    for cell in plan.cells:
        run = runs[cell.run_name]
        if run.status != "finished" or cell.run_name in counted:
            continue
        counted.add(cell.run_name)
        add_run(totals[f"{cell.setting} {cell.schedule}"], profile, run.summary)
    return {k: dict(t) for k, t in totals.items()}


def table(rows: dict[str, dict[str, float]], label: str) -> str:
    """A markdown table of each row's mean wall seconds and the PARTS' shares of its wall time, and of all rows."""
    lines = [f"| {label} | runs | wall s (mean) | steps | evaluations | checkpoints | other |",
             "|---|---|---|---|---|---|---|"]
    whole: dict[str, float] = defaultdict(float)
    for t in rows.values():
        for k, v in t.items():
            whole[k] += v
    for name, t in [*rows.items(), *([("all", whole)] if whole else [])]:
        lines.append(f"| {name} | {t['runs']:.0f} | {t['wall_s'] / t['runs']:.1f} | "
                     + " | ".join(f"{100 * t[k] / t['wall_s']:.1f}%" for k in PARTS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", nargs="?", default="cpu")
    parser.add_argument("--grid", help="a grid of params/grids/ (its record's finished runs) instead of the study")
    args = parser.parse_args(argv)
    if args.grid:
        print(table(grid_shares(args.profile, args.grid), "setting schedule"))
    else:
        print(table(shares(args.profile), "variant"))


if __name__ == "__main__":
    main()
