"""Runs x threads per run: how should a machine's cores be shared between runs? For a profile (and overrides), the
joint pre-norm run shortened to --tokens, trained by ``python -m normgrow run`` in each layout of --layouts: RxT is R
runs at once with T threads each (OMP_NUM_THREADS), on the same teacher cache. Throughput = the tokens all runs
trained / the wall time until the last one finished (kernel start, evaluations and checkpoints included, as in a
study). The layout with the most tokens per second is what params/study.yaml's ``jobs`` should say for that profile.

Run on a quiet machine (nothing else training), e.g.:
    .venv/bin/python scripts/runs_x_threads.py --profile cpu --layouts 1x2 2x1 \
        --overrides '{data.train_tokens: 2359296, train.warmup_steps: 192, train.eval_every: 512}'
Each run goes to a temporary outputs root holding a link to this root's teacher caches (none is rebuilt); prints one
line per layout and a JSON record on the last line."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from normgrow.paths import outputs_dir


def layout(text: str) -> tuple[int, int]:
    runs, threads = text.lower().split("x")
    return int(runs), int(threads)


def measure(profile: str, overrides: dict, runs: int, threads: int, root: Path) -> dict:
    """R runs at once (seeds 0..R-1), T threads each, in their own outputs root; their tokens and the wall time."""
    out = root / f"{runs}x{threads}"
    out.mkdir()
    (out / "teacher").symlink_to(outputs_dir() / "teacher")
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "NORMGROW_OUTPUTS": str(out)}
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "normgrow", "run", "--profile", profile, "--norm", "pre",
                               "--schedule", "joint", "--seed", str(seed), "--run-name", f"rxt-s{seed}",
                               "--overrides", json.dumps(overrides)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for seed in range(runs)]
    errors = [p.communicate()[1] for p in procs]
    wall = time.perf_counter() - start
    if any(p.returncode for p in procs):
        raise SystemExit("a run failed:\n" + "\n".join(e[-2000:] for e in errors if e))
    summaries = [json.loads(next((out / "runs").glob(f"*/rxt-s{seed}/summary.json")).read_text())
                 for seed in range(runs)]
    tokens = sum(s["tokens"] for s in summaries)
    return {"layout": f"{runs}x{threads}", "runs": runs, "threads": threads, "tokens": tokens, "wall_s": wall,
            "tok_s": tokens / wall, "run_wall_s": [s["wall_s"] for s in summaries]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--overrides", default="{}", help="YAML mapping of dotted profile keys")
    ap.add_argument("--tokens", type=int, default=262144, help="tokens per run (one stage of stages[-1] blocks)")
    ap.add_argument("--layouts", nargs="+", default=["1x2", "2x1"], help="RxT: R runs at once, T threads each")
    args = ap.parse_args()
    overrides = yaml.safe_load(args.overrides) or {}
    from normgrow.config import load_profile
    stages = len(load_profile(args.profile, overrides).train.stages)
    overrides = overrides | {"train.stage_tokens": [args.tokens // stages] * stages}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for text in args.layouts:
            row = measure(args.profile, overrides, *layout(text), Path(tmp))
            rows.append(row)
            print(f"{row['layout']}: {row['tokens']:,} tokens in {row['wall_s']:.0f} s = {row['tok_s']:,.0f} tok/s "
                  f"(runs {', '.join(f'{w:.0f}' for w in row['run_wall_s'])} s)", flush=True)
    best = max(rows, key=lambda r: r["tok_s"])
    print(json.dumps({"profile": args.profile, "overrides": overrides, "cpu_count": os.cpu_count(), "rows": rows,
                      "best": best["layout"]}))


if __name__ == "__main__":
    main()
