"""Where a profile's study runs spent their wall time: training steps, evaluations, checkpoints and the rest (the
step-0 set-up, compilation, data), per run file of params/runs/, from the runs' own records. A step's time is what
metrics.jsonl's train record measured (tokens per step / tok_s); evaluations and checkpoints are summary.json's eval_s
and checkpoint_s (numerics version 3 onwards; older runs lack them and are skipped). Start-up before a run's clock
starts (the kernel, imports, the cache key) is not in wall_s. Run:
.venv/bin/python scripts/run_time_shares.py cpu"""
import sys
from collections import defaultdict

from normgrow.analysis.variants import collect_runs
from normgrow.rundir import read_metrics, run_path


def shares(profile: str) -> dict[str, dict[str, float]]:
    """{variant: {wall_s, steps_s, eval_s, checkpoint_s, other_s}} summed over the study's runs of each variant (the
    runs the report counts, assigned by their recorded parameters)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (variant, _), summary in collect_runs(profile).assigned.items():
        if summary.eval_s is None:
            continue
        tokens_per_step = summary.tokens / summary.steps
        train = [r for r in read_metrics(run_path(profile, summary.run_name)) if r["kind"] == "train"]
        steps_s = sum(tokens_per_step / r["tok_s"] for r in train)
        t = totals[variant]
        t["runs"] += 1
        t["wall_s"] += summary.wall_s
        t["steps_s"] += steps_s
        t["eval_s"] += summary.eval_s
        t["checkpoint_s"] += summary.checkpoint_s
        t["other_s"] += summary.wall_s - steps_s - summary.eval_s - summary.checkpoint_s
    return {v: dict(t) for v, t in sorted(totals.items())}


def main(profile: str) -> None:
    rows = shares(profile)
    print("| variant | runs | wall s (mean) | steps | evaluations | checkpoints | other |")
    print("|---|---|---|---|---|---|---|")
    whole = defaultdict(float)
    for variant, t in rows.items():
        for k, v in t.items():
            whole[k] += v
        print(f"| {variant} | {t['runs']:.0f} | {t['wall_s'] / t['runs']:.1f} | "
              + " | ".join(f"{100 * t[k] / t['wall_s']:.1f}%" for k in ("steps_s", "eval_s", "checkpoint_s", "other_s"))
              + " |")
    if whole:
        print(f"| all | {whole['runs']:.0f} | {whole['wall_s'] / whole['runs']:.1f} | "
              + " | ".join(f"{100 * whole[k] / whole['wall_s']:.1f}%"
                           for k in ("steps_s", "eval_s", "checkpoint_s", "other_s")) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
