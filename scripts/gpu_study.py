"""A profile's study on a machine whose Python has torch (CUDA) but not the notebook stack (papermill, ipykernel),
such as a lent GPU machine: the teacher cache (data.teacher_cache.ensure_cache, as a run's kernel builds it), then
params/study.yaml's runs for the profile's seeds, --jobs at a time in spawned processes, each run_variant(spec) on the
spec the study's runner gives its kernel (runner.run_spec), the matched runs once their donors have finished; then the
study's tables (report.build_report, write_report: summary.csv ... claims.csv, report.html). No run starts after
--deadline seconds: the runs finished by then are the result, and the output says so. Prints the machine, the cache's
and each run's seconds, and a JSON record on its last line. What the study's runner adds (executed notebooks, a live
bar, SLURM) is left out; the numbers are the same code's.

Run: PYTHONPATH=lib python scripts/gpu_study.py --profile gpu --deadline 420"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor

import torch

from normgrow.config import load_profile
from normgrow.data.teacher_cache import ensure_cache
from normgrow.runner import default_jobs, run_spec
from normgrow.study import load_study
from normgrow.train.run import run_variant


def train(profile: str, job, threads: int) -> dict:
    torch.set_num_threads(threads)
    t0 = time.time()
    summary = run_variant(run_spec(profile, job, None), progress=False)
    return {"run": job.name, "seconds": time.time() - t0, "val_ce": summary["val_ce"], "wall_s": summary["wall_s"],
            "eval_s": summary.get("eval_s"), "train_tok_s": summary.get("train_tok_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="gpu")
    ap.add_argument("--jobs", type=int, default=None, help="runs at once (default: params/study.yaml's for the profile)")
    ap.add_argument("--deadline", type=float, default=420.0, help="seconds after which no run starts")
    args = ap.parse_args()
    start = time.time()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip() if torch.cuda.is_available() else "no CUDA"
    record = {"machine": {"gpu": smi, "cpu_count": mp.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__}, "profile": args.profile}
    print(json.dumps(record["machine"]), flush=True)
    prof = load_profile(args.profile)
    cache = ensure_cache(prof, progress=False)
    record["cache"] = {"key": cache.key, "seconds": time.time() - start}
    print(f"teacher cache {cache.key}: {record['cache']['seconds']:.0f} s", flush=True)
    runs = load_study(profile=args.profile)
    jobs = args.jobs or default_jobs(args.profile)
    threads = max(1, mp.cpu_count() // jobs)
    waves = [[r.job(args.profile, None) for r in runs if (r.depends_on is None) == first] for first in (True, False)]
    done, not_started = [], []
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        for wave in waves:
            futures = []
            for job in wave:
                if time.time() - start > args.deadline:
                    not_started.append(job.name)
                    continue
                futures.append(pool.submit(train, args.profile, job, threads))
            for future in futures:
                result = future.result()
                done.append(result)
                print(f"{result['run']}: val_ce {result['val_ce']:.4f}, {result['seconds']:.1f} s "
                      f"(train {result['train_tok_s']:,.0f} tok/s, evaluations {result['eval_s']:.1f} s) at "
                      f"{time.time() - start:.0f} s", flush=True)
    record |= {"runs": done, "not_started": not_started, "runs_s": time.time() - start - record["cache"]["seconds"],
               "jobs": jobs, "threads_per_run": threads}
    if not not_started:
        from normgrow.viz import report
        rep = report.build_report(args.profile)
        report.write_report(rep)
        record["claims"] = rep.claims_frame()[["claim", "status"]].to_dict("records")
    record["total_s"] = time.time() - start
    print(f"{len(done)} runs in {record['runs_s']:.0f} s, {len(not_started)} not started; total {record['total_s']:.0f} s")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
