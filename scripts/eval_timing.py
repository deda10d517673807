"""Seconds per evaluation of a grown run's student at each phase checkpoint (docs/DESIGN.md, "Evaluation"), in the
CPU's autocast dtype, one thread: the first and the next evaluation of 16 evenly spaced validation rows and one of the
whole split, with the blocks compiled as a run has them, evaluated eager as a run evaluates them on CPU
(train.evaluate.eval_stance, numerics version 6) and through the compiled blocks (the no-grad graph, whose first
evaluation compiles it; version 5), with the whole split's val_ce under each; and one boundary record
(student.boundary.boundary_rms on the fixed batch).
Run: .venv/bin/python scripts/eval_timing.py PROFILE RUN (a finished grown run of outputs/runs/PROFILE/, e.g. cpu
sweep-pre-grow-lr5.99979e-03-wu96-s0)."""
import json
import sys
import time
from contextlib import nullcontext

import numpy as np
import torch

from normgrow.config import profile_from_dict
from normgrow.data.teacher_cache import open_cache
from normgrow.data.token_classes import DEFAULT_N, group_masks, make_batch
from normgrow.data.vocab import VocabMap
from normgrow.rundir import run_path
from normgrow.student.boundary import boundary_rms
from normgrow.student.model import load_student
from normgrow.train import evaluate as evaluation
from normgrow.train.step import compile_blocks
from normgrow.utils import resolve_dtype

torch.set_num_threads(1)
profile, run = sys.argv[1], sys.argv[2]
recorded = json.loads((run_path(profile, run) / "config.json").read_text())["profile"]
prof = profile_from_dict({k: v for k, v in recorded.items() if k != "name"}, profile)
cache = open_cache(prof)
vocab = VocabMap.for_cache(cache, prof.student.vocab)
dev = torch.device("cpu")
dtype = resolve_dtype(prof.train.dtype, dev)
n_rows = cache.val.tokens.shape[0]
subset = np.unique(np.linspace(0, n_rows - 1, 16).round().astype(np.int64))
eager_stance = evaluation.eval_stance


def timed(model, rows) -> tuple[float, float]:
    t = time.perf_counter()
    val_ce = evaluation.evaluate(model, cache.val, rows, 16, dev, dtype, vocab)["val_ce"]
    return round(time.perf_counter() - t, 3), val_ce


for path in sorted((run_path(profile, run) / "checkpoints").glob("phase*.pt")):
    out, val_ce = {}, {}
    for how, stance in (("eager", eager_stance), ("compiled", lambda device: nullcontext())):
        evaluation.eval_stance = stance
        model = load_student(path).eval()
        compile_blocks(model)
        first, _ = timed(model, subset)
        next_, _ = timed(model, subset)
        whole, val_ce[how] = timed(model, np.arange(n_rows))
        out[how] = {"16 first": first, "16 next": next_, f"{n_rows} rows": whole}
    out["val_ce eager - compiled"] = val_ce["eager"] - val_ce["compiled"]
    evaluation.eval_stance = eager_stance
    b = make_batch(cache.val, cache, DEFAULT_N, cache_key=cache.key)
    t = time.perf_counter()
    with eager_stance(dev), evaluation.autocast(dev, dtype):
        boundary_rms(model, vocab.restrict(b)["tokens"], group_masks(b["classes"]))
    out["boundary"] = round(time.perf_counter() - t, 3)
    print(path.name, model.cfg.n_layers, out, flush=True)
