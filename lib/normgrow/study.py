"""The study runner: ``python -m normgrow.study --profile cpu`` (what ``make study`` calls).

Order: notebooks/00_teacher.ipynb (skipped when the teacher cache is complete), then every run of
params/study.yaml x seeds through notebooks/run_variant.ipynb into outputs/runs/<profile>/<run>/run.ipynb,
matched runs after the runs whose budget they take, then notebooks/diagnostics.ipynb (when present) and
notebooks/summary.ipynb into outputs/study/<profile>/.

Finished runs (summary.json) are skipped; interrupted runs resume from their last checkpoint (run_variant does
that). A failing run is reported with the path of its executed notebook; the other runs go on (runs that depend
on it are skipped), and the runner exits non-zero.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from tqdm.auto import tqdm

from .config import PARAMS_DIR, REPO_ROOT, ParamError, load_profile, outputs_dir
from .train import make_run_spec, runs_dir

NOTEBOOKS = REPO_ROOT / "notebooks"
RUN_KEYS = ("norm", "schedule", "freeze_prefix", "match_active_layer_tokens")


@dataclass(frozen=True)
class StudyRun:
    variant: str  # file stem in params/runs
    seed: int
    params: dict  # the run file's keys (papermill parameters)

    @property
    def name(self) -> str:
        return f"{self.variant}-s{self.seed}"

    @property
    def depends_on(self) -> str | None:
        target = self.params.get("match_active_layer_tokens")
        return f"{target}-s{self.seed}" if target else None


def load_study(path: Path | None = None, seeds: list[int] | None = None, variants: list[str] | None = None) -> list[StudyRun]:
    """Read params/study.yaml and the run files; validate; order so that matched runs follow their donors."""
    path = Path(path or PARAMS_DIR / "study.yaml")
    study = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(study) - {"runs", "seeds"})
    if unknown:
        raise ParamError(f"{path}: unknown key {unknown[0]!r}; allowed keys: runs, seeds")
    available = sorted(p.stem for p in (PARAMS_DIR / "runs").glob("*.yaml"))
    names = variants or study.get("runs", [])
    seeds = seeds if seeds is not None else study.get("seeds", [0])
    if not names or not seeds:
        raise ParamError(f"{path}: runs and seeds must be non-empty lists")
    runs = []
    for name in names:
        if name not in available:
            raise ParamError(f"study run {name!r} has no file params/runs/{name}.yaml; allowed values: {', '.join(available)}")
        params = yaml.safe_load((PARAMS_DIR / "runs" / f"{name}.yaml").read_text()) or {}
        bad = sorted(set(params) - set(RUN_KEYS))
        if bad:
            raise ParamError(f"params/runs/{name}.yaml: unknown key {bad[0]!r}; allowed keys: {', '.join(RUN_KEYS)}")
        target = params.get("match_active_layer_tokens")
        if target and target not in names:
            raise ParamError(f"params/runs/{name}.yaml: match_active_layer_tokens={target!r} is not a run of the study "
                             f"({', '.join(names)})")
        for seed in seeds:
            if not isinstance(seed, int) or seed < 0:
                raise ParamError(f"{path}: seeds must be integers >= 0 (got {seed!r})")
            runs.append(StudyRun(name, seed, params))
    # donors first: a stable sort on "has a dependency" suffices because donors are never matched runs themselves
    matched_names = {r.variant for r in runs if r.depends_on}
    for r in runs:
        if r.depends_on and r.params["match_active_layer_tokens"] in matched_names:
            raise ParamError(f"params/runs/{r.variant}.yaml: a matched run cannot take its budget from another matched run")
    return sorted(runs, key=lambda r: (r.depends_on is not None, names.index(r.variant), r.seed))


def execute_notebook(notebook: Path, output: Path, parameters: dict) -> None:
    import papermill as pm
    output.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(NOTEBOOKS),
                        kernel_name="python3", progress_bar=False, log_output=False)


class RunWatcher:
    """Refreshes the study bar every few seconds with the current run's last logged step (from metrics.jsonl),
    so progress stays visible while a run's notebook executes in its kernel."""

    def __init__(self, bar, interval: float = 5.0):
        self.bar, self.interval, self.run_dir, self.name = bar, interval, None, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def watch(self, name: str, run_dir: Path) -> None:
        self.name, self.run_dir = name, run_dir

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            step = ""
            metrics = self.run_dir / "metrics.jsonl" if self.run_dir else None
            if metrics is not None and metrics.is_file():
                lines = metrics.read_text().splitlines()
                try:
                    step = f"step {json.loads(lines[-1])['step']}" if lines else ""
                except ValueError:  # a line being written
                    pass
            self.bar.set_postfix_str(f"{self.name} {step}".strip())  # also redraws elapsed / remaining

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def run_study(profile: str, seeds: list[int] | None = None, variants: list[str] | None = None) -> int:
    prof = load_profile(profile)  # validate before anything heavy
    runs = load_study(seeds=seeds, variants=variants)
    for r in runs:  # validate every run's parameters up front (matched donors may not exist yet)
        make_run_spec(profile=profile, seed=r.seed, run_name=r.name,
                      **{k: v for k, v in r.params.items() if k != "match_active_layer_tokens"})
    study_dir = outputs_dir() / "study" / profile
    study_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()

    from .teacher import open_cache
    try:
        print(f"teacher cache: complete, reused ({open_cache(prof).dir})")
    except FileNotFoundError:
        print("teacher cache: building (notebooks/00_teacher.ipynb)")
        execute_notebook(NOTEBOOKS / "00_teacher.ipynb", study_dir / "00_teacher.ipynb", {"profile": profile})

    failed: dict[str, Path] = {}
    done = {r.name for r in runs if (runs_dir(profile) / r.name / "summary.json").is_file()}
    todo = [r for r in runs if r.name not in done]
    print(f"runs: {len(done)} of {len(runs)} finished, {len(todo)} to run")
    bar = tqdm(total=len(runs), initial=len(done), desc=f"study {profile}", unit="run", file=sys.stdout)
    watcher = RunWatcher(bar)
    for r in todo:
        notebook = runs_dir(profile) / r.name / "run.ipynb"
        if r.depends_on in failed:
            failed[r.name] = failed[r.depends_on]
            print(f"\nskipped {r.name}: its budget donor {r.depends_on} failed")
            bar.update(1)
            continue
        watcher.watch(r.name, notebook.parent)
        try:
            execute_notebook(NOTEBOOKS / "run_variant.ipynb", notebook,
                             {"profile": profile, "seed": r.seed, "run_name": r.name, **r.params})
        except Exception as err:  # papermill raises PapermillExecutionError with the cell's traceback
            failed[r.name] = notebook
            print(f"\nFAILED {r.name}: {type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"
                  f"\n  executed notebook: {notebook}")
        bar.update(1)
    watcher.close()
    bar.close()

    for name in ("diagnostics", "summary"):
        if (NOTEBOOKS / f"{name}.ipynb").exists():
            print(f"{name}: notebooks/{name}.ipynb -> {study_dir / (name + '.ipynb')}")
            try:
                execute_notebook(NOTEBOOKS / f"{name}.ipynb", study_dir / f"{name}.ipynb", {"profile": profile})
            except Exception as err:
                failed[name] = study_dir / f"{name}.ipynb"
                print(f"FAILED {name}: {type(err).__name__}\n  executed notebook: {study_dir / (name + '.ipynb')}")
    print(f"study {profile}: {len(runs) - len([f for f in failed if f not in ('diagnostics', 'summary')])}"
          f"/{len(runs)} runs finished in {time.time() - start:.0f} s; results in {study_dir}")
    if failed:
        print("failures:\n" + "\n".join(f"  {name}: {path}" for name, path in failed.items()))
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normgrow.study", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", help="a file in params/profiles (default: cpu)")
    parser.add_argument("--seeds", type=int, nargs="+", help="override the seeds of params/study.yaml")
    parser.add_argument("--runs", nargs="+", help="only these run files (donors of matched runs must be included)")
    args = parser.parse_args(argv)
    try:
        return run_study(args.profile, args.seeds, args.runs)
    except ParamError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
