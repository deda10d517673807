"""README's result tables, printed as Markdown from a study's committed files (outputs/study/<profile>/*.csv,
baselines.json). Run: .venv/bin/python scripts/readme_tables.py cpu"""
import json
import sys

import pandas as pd

from normgrow.rundir import study_dir


def f(x, d=3):
    return "" if pd.isna(x) else f"{x:.{d}f}"


def ci(mean, lo, hi, d=3, sign=False):
    s = "+" if sign else ""
    return f"{mean:{s}.{d}f} [{lo:{s}.{d}f}, {hi:{s}.{d}f}]" if pd.notna(lo) else f"{mean:{s}.{d}f}"


def main(profile: str) -> None:
    d = study_dir(profile)
    base = json.loads((d / "baselines.json").read_text())
    print(f"Baselines: teacher val CE {base.get('teacher_val_ce', float('nan')):.4f}, "
          f"unigram val CE {base.get('unigram_val_ce', float('nan')):.4f}\n")
    stats, runs = pd.read_csv(d / "variant_stats.csv"), pd.read_csv(d / "summary.csv")
    regime = pd.read_csv(d / "regime.csv").set_index("variant")
    print("| variant | seeds | val_ce mean [95% CI] | val_kd_ce mean [95% CI] | below unigram | flat ratio (max) | "
          "trained | tokens | active-layer tokens | wall s (mean) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _, r in stats.iterrows():
        g = regime.loc[r["variant"]]
        print(f"| {r['variant']} | {r['n_seeds']} | {ci(r['val_ce_mean'], r['val_ce_ci_low'], r['val_ce_ci_high'])} | "
              f"{ci(r['val_kd_ce_mean'], r['val_kd_ce_ci_low'], r['val_kd_ce_ci_high'])} | "
              f"{f(g['margin_below_unigram'])} | {f(g['max_flat_ratio'])} | {'yes' if g['trained'] else 'no'} | "
              f"{r['tokens_mean']:,.0f} | {r['active_layer_tokens_mean']:,.0f} | {r['wall_s_mean']:.0f} |")
    seeds = sorted(runs["seed"].unique())
    print("\n| variant | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for v, g in runs.groupby("variant"):
        by = dict(zip(g["seed"], g["val_ce"]))
        print(f"| {v} | " + " | ".join(f(by.get(s)) for s in seeds) + " |")
    gaps = pd.read_csv(d / "gaps.csv")
    print("\n| paired gap (val_ce) | n | mean [95% CI] | reference |")
    print("|---|---|---|---|")
    for _, r in gaps[gaps["metric"] == "val_ce"].iterrows():
        print(f"| {r['comparison']} | {r['n']} | {ci(r['mean'], r['ci_low'], r['ci_high'], 4, True)} | "
              f"{r['reference_text']} |")
    cross = pd.read_csv(d / "crossover.csv")
    print("\n| stage end | depth | pre-grow | post-grow | pre - post [95% CI] | leader |")
    print("|---|---|---|---|---|---|")
    for _, r in cross.iterrows():
        print(f"| {r['stage']} | {r['depth']} | {f(r['pre-grow_mean'])} | {f(r['post-grow_mean'])} | "
              f"{ci(r['gap_mean'], r['gap_ci_low'], r['gap_ci_high'], 4, True)} | {r['leader']} |")
    claims = pd.read_csv(d / "claims.csv")
    print()
    for _, r in claims.iterrows():
        print(f"- **{r['claim']}** ({r['status']}): {r['sentence']}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
