"""Seconds per evaluation of a grown run's student at each phase checkpoint (docs/DESIGN.md, "Evaluation"): 256, 128,
64 and 32 validation rows of the profile's teacher cache, evenly spaced (train.evaluate.evaluate, compiled blocks in
the CPU's autocast dtype, as a run has them; the first evaluation of each checkpoint compiles and is not timed), and
one boundary record (student.boundary.boundary_rms on the fixed batch). One thread.
Run: .venv/bin/python scripts/eval_timing.py PROFILE RUN (a finished grown run of outputs/runs/PROFILE/ whose
profile's cache holds 256 validation rows, e.g. cpu grid-1-5-9-pre-grow-s0)."""
import json
import sys
import time

import numpy as np
import torch

from normgrow.config import profile_from_dict
from normgrow.data.teacher_cache import open_cache
from normgrow.data.vocab import VocabMap
from normgrow.rundir import run_path
from normgrow.student.model import load_student
from normgrow.train.evaluate import autocast, evaluate
from normgrow.train.step import compile_blocks
from normgrow.data.token_classes import DEFAULT_N, group_masks, make_batch
from normgrow.student.boundary import boundary_rms
from normgrow.utils import resolve_dtype

torch.set_num_threads(1)
profile, run = sys.argv[1], sys.argv[2]
recorded = json.loads((run_path(profile, run) / "config.json").read_text())["profile"]
prof = profile_from_dict({k: v for k, v in recorded.items() if k != "name"}, profile)
cache = open_cache(prof)
vocab = VocabMap.for_cache(cache, prof.student.vocab)
dev = torch.device("cpu")
dtype = resolve_dtype(prof.train.dtype, dev)
ck = run_path(profile, run) / "checkpoints"
rows_all = np.arange(cache.val.tokens.shape[0])
for path in sorted(ck.glob("phase*.pt")):
    model = load_student(path)
    model.eval()
    compile_blocks(model)
    evaluate(model, cache.val, rows_all[:16], 16, dev, dtype, vocab)  # compile
    out = {}
    for n in (256, 128, 64, 32):
        rows = np.unique(np.linspace(0, 255, n).round().astype(np.int64))
        t = time.perf_counter()
        evaluate(model, cache.val, rows, 16, dev, dtype, vocab)
        out[n] = time.perf_counter() - t
    b = make_batch(cache.val, cache, DEFAULT_N, cache_key=cache.key)
    tokens, masks = vocab.restrict(b)["tokens"], group_masks(b["classes"])
    t = time.perf_counter()
    with autocast(dev, dtype):
        boundary_rms(model, tokens, masks)
    out["boundary"] = time.perf_counter() - t
    print(path.name, model.cfg.n_layers, {k: round(v, 3) for k, v in out.items()}, flush=True)
