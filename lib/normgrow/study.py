"""The study: ``python -m normgrow.study --profile cpu`` (what ``make study`` calls).

What defines it: every run file of params/study.yaml x seeds (load_study), each run ``<variant>-s<seed>`` through
notebooks/run_variant.ipynb into outputs/runs/<profile>/<run>/, matched runs after the runs whose budget they take;
then notebooks/diagnostics.ipynb (when present) and notebooks/summary.ipynb into outputs/study/<profile>/. The
teacher cache, the execution, resuming, failures and the exit code are the runner's (runner.py), as for the sweep
and the grid. --processes N gives every run, and the teacher pass, N processes (the notebooks' ``processes``
parameter: forked CPU ranks, or GPUs 0..N-1 through accelerate launch, ranks.py); a run made with another number of
processes is refused, not resumed (train.processes is part of its identity).
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("study")

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .cli import parse
from .config import (PARAMS_DIR, ParamError, load_profile, read_study_file, smoke_note, with_processes,
                     writable_outputs_dir)
from .rundir import runner_lock, seeded_name, study_dir
from .runner import (ExecutorParams, Job, default_jobs, ensure_teacher_cache, execute_notebooks, executor_of,
                     parse_seeds, report_failures, run_jobs, runner_exit)
from .train.spec import make_run_spec
from .analysis.reference import load_reference
from .analysis.variants import Variant, load_variants


@dataclass(frozen=True)
class StudyRun:
    variant: Variant
    seed: int

    @property
    def name(self) -> str:
        return seeded_name(self.variant.name, self.seed)

    @property
    def params(self) -> dict:
        """The papermill parameters of this run file (the donor as this seed's run of the donor variant)."""
        return self.variant.parameters()

    @property
    def depends_on(self) -> str | None:
        donor = self.variant.match_active_layer_tokens
        return seeded_name(donor, self.seed) if donor else None

    def identity(self, profile: str, processes: int | None = None) -> dict:
        """The identity this run's directory must hold (spec.RunSpec.identity; a matched run's donor by name, since
        the donor need not exist yet)."""
        params = {k: v for k, v in self.params.items() if k != "match_active_layer_tokens"}
        identity = make_run_spec(profile=profile, seed=self.seed, run_name=self.name, processes=processes,
                                 **params).identity()
        return identity | ({"match_active_layer_tokens": self.depends_on} if self.depends_on else {})

    def job(self, profile: str, processes: int | None = None) -> Job:
        return Job(self.name, {"seed": self.seed, "run_name": self.name, **self.params},
                   self.identity(profile, processes), self.depends_on)


def _unique(values: list, what: str) -> list:
    """values without repeats (first occurrence kept), saying which were dropped."""
    seen = list(dict.fromkeys(values))
    if len(seen) < len(values):
        print(f"note: duplicate {what} ignored: {' '.join(map(str, sorted({v for v in values if values.count(v) > 1})))}")
    return seen


def _listed(path: Path, key: str, value, valid, allowed: str) -> list:
    """value when it is a non-empty list whose items are all valid, else a ParamError naming the file, the key and
    what is allowed (checked before repeats are dropped, which needs comparable, hashable items)."""
    if not isinstance(value, list) or not value or not all(valid(v) for v in value):
        raise ParamError(f"{path}: {key}={value!r} must be a non-empty list of {allowed}")
    return value


def _is_seed(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _seed_list(path: Path, key: str, value) -> list[int]:
    return _unique(_listed(path, key, value, _is_seed, "integers >= 0, e.g. [0, 1, 2]"), "seeds")


def study_seeds(profile: str | None, path: Path | None = None, value=None) -> list[int]:
    """params/study.yaml's seeds for a profile (value: the file's ``seeds`` when the caller has read it already).
    ``seeds`` is one list for every profile, or a mapping of profile names to lists in which ``default`` covers the
    profiles it does not name (the cpu study runs more seeds than a gpu user should pay for by default). Validated;
    repeats dropped with a note."""
    path = Path(path or PARAMS_DIR / "study.yaml")
    if value is None:
        value = read_study_file(path).seeds
    key = "seeds"
    if isinstance(value, dict):
        from .config import available_profiles
        unknown = sorted(set(value) - set(available_profiles()) - {"default"})
        if unknown:
            raise ParamError(f"{path}: seeds.{unknown[0]} names no profile; allowed keys: "
                             f"{', '.join(available_profiles())}, default")
        name = profile if profile in value else "default"
        if name not in value:
            raise ParamError(f"{path}: seeds gives no list for profile {profile!r} and no default; add seeds.{profile} "
                             "or seeds.default")
        value, key = value[name], f"seeds.{name}"
    return _seed_list(path, key, value)


def load_study(path: Path | None = None, seeds: list[int] | None = None, variants: list[str] | None = None,
               profile: str | None = None) -> list[StudyRun]:
    """Read params/study.yaml and the run files; validate; drop repeated runs and seeds; order so that matched runs
    follow their donors. Seeds: the given ones, else the file's for the profile (study_seeds)."""
    path = Path(path or PARAMS_DIR / "study.yaml")
    study = read_study_file(path)
    available = load_variants()
    names = _unique(_listed(path, "runs", variants or study.runs, lambda v: isinstance(v, str),
                            f"run file names ({', '.join(available)})"), "runs")
    seeds = study_seeds(profile, path, study.seeds) if seeds is None else _seed_list(path, "seeds", seeds)
    runs = []
    for name in names:
        if name not in available:
            raise ParamError(f"study run {name!r} has no file params/runs/{name}.yaml; allowed values: "
                             f"{', '.join(available)}")
        donor = available[name].match_active_layer_tokens
        if donor and donor not in names:
            raise ParamError(f"params/runs/{name}.yaml: match_active_layer_tokens={donor!r} is not a run of the "
                             f"study ({', '.join(names)})")
        runs += [StudyRun(available[name], seed) for seed in seeds]
    # donors first: a stable sort on "has a dependency" suffices because donors are never matched runs themselves
    return sorted(runs, key=lambda r: (r.depends_on is not None, names.index(r.variant.name), r.seed))


def run_study(profile: str, seeds: list[int] | None = None, variants: list[str] | None = None,
              jobs: int | None = None, processes: int | None = None,
              executor: ExecutorParams = ExecutorParams()) -> int:
    prof = load_profile(profile, with_processes(None, processes))  # validate before anything heavy
    runs = load_study(seeds=seeds, variants=variants, profile=profile)  # every run file, its values included
    load_reference()  # the report reads it after the last run: a mistake there is named before the first
    jobs = default_jobs(profile) if jobs is None else jobs
    if jobs < 1:
        raise ParamError(f"jobs={jobs} must be >= 1")
    planned = [r.job(profile, processes) for r in runs]  # every run's parameters validated up front
    out_dir = study_dir(profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    teacher_key, cache_job = ensure_teacher_cache(prof, out_dir, processes, executor=executor)
    names = [j.name for j in planned]
    done, failed = run_jobs(profile, planned, dict.fromkeys(names, teacher_key), jobs, processes, f"study {profile}",
                            executor, dict.fromkeys(names, cache_job) if cache_job else None)
    execute_notebooks(["diagnostics", "summary"], out_dir, {"profile": profile}, failed)
    print(f"study {profile}: {len(done)}/{len(runs)} runs finished in {time.time() - start:.0f} s; results in "
          f"{out_dir}")
    if note := smoke_note(profile):
        print(note)
    return report_failures(failed)


def main(argv: list[str] | None = None) -> int:
    args = parse("study", argv)

    def work() -> int:
        seeds = parse_seeds(args.seeds) if args.seeds else None
        writable_outputs_dir()
        with runner_lock():
            return run_study(args.profile, seeds, args.runs, args.jobs, args.processes, executor_of(args))
    return runner_exit(work)


if __name__ == "__main__":
    sys.exit(main())
