"""docs/DESIGN.md evidence (Multi-process runs): wall time of the tiny profile's teacher pass and of one tiny run on 1
process, on 2 forked ranks and on 2 ranks launched by the caller, in this process, each in a fresh outputs folder (the
converted bundled teacher is shared). On a 2-core machine every setting uses both cores (1 x 2 threads against
2 x 1 thread), so this measures the overhead of the ranks, not a speed-up. Run:
.venv/bin/python scripts/processes_timing.py"""
import json
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fresh_outputs() -> Path:
    root = Path(tempfile.mkdtemp(prefix="normgrow-timing-")) / "outputs"
    (root / "teacher").mkdir(parents=True)
    (root / "teacher" / "models").symlink_to(REPO / "outputs" / "teacher" / "models", target_is_directory=True)
    os.environ["NORMGROW_OUTPUTS"] = str(root)
    return root


from normgrow import ranks  # noqa: E402
from normgrow.config import load_profile  # noqa: E402
from normgrow.data.teacher_cache import ensure_cache  # noqa: E402
from normgrow.train.spec import make_run_spec  # noqa: E402
from normgrow.train.run import run_variant  # noqa: E402

# (name, processes, forked): the 2-process jobs once forked (the CPU way) and once launched by the caller (the GPU
# way, ranks._launch: fresh processes that import everything and reopen the cache)
SETTINGS = (("1 process", 1, True), ("2 forked", 2, True), ("2 launched by the caller", 2, False))
times = {}
for name, processes, forked in SETTINGS:
    ranks._forks = lambda device, forked=forked: forked
    root = fresh_outputs()
    cache = ensure_cache(load_profile("tiny", {"teacher.processes": processes}), progress=False)
    times[f"teacher pass, {name}"] = json.loads((cache.dir / "teacher.json").read_text())["timings"]["cache_build_s"]
    t0 = time.perf_counter()
    summary = run_variant(make_run_spec(profile="tiny", norm="post", schedule="grow",
                                        overrides={"train.processes": processes}), progress=False)
    times[f"post-grow run, {name} (wall incl. start)"] = round(time.perf_counter() - t0, 2)
    times[f"post-grow run, {name} val_ce"] = round(summary["val_ce"], 5)
for name, value in times.items():
    print(f"{name}: {value}")
one = times["teacher pass, 1 process"]
print(f"teacher pass ratio 2 forked / 1: {times['teacher pass, 2 forked'] / one:.2f}, "
      f"2 launched / 1: {times['teacher pass, 2 launched by the caller'] / one:.2f}")
