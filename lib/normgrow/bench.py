"""Training-throughput benchmark: ``python -m normgrow.bench --profile cpu`` (make bench).

The study's training step (train.step.train_step on the profile's own student) against transformers baselines
(hf_cached: Qwen3ForCausalLM on the same cached loss; hf_online: the teacher run online), timed in one process with
the candidates interleaved round by round beside a matmul peak, and against earlier numerics versions as their
records measured them (earlier_numerics). Writes outputs/bench/<profile>-<CPU kind>.json. What each candidate is,
the timing and MFU rules: DESIGN.md, "Performance".
"""
from __future__ import annotations

if __name__ == "__main__":  # --help and usage errors before the imports below load torch (cli.py)
    from .cli import parse_early
    parse_early("bench")

import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .cli import bench_parser, parse
from .train import distill
from .config import PARAMS_DIR, read_yaml
from .paths import outputs_dir
from .train.growth import plan_phases
from .student.model import Student, StudentConfig
from .data.batches import rows_to_batch
from .train.evaluate import autocast, evaluation_plan, subset_rows
from .train.optim import make_optimizer
from .train.step import DistillStep, StepSetup, compile_enabled, step_flops, train_step
from .train.spec import _choice, run_profile
from .analysis.variants import load_variants
from .utils import (TRAIN_DTYPES, cpu_kind, dtype_name, json_safe, machine_description, matmul_peak_sampler,
                    resolve_dtype)

CANDIDATES = ("normgrow", "hf_cached", "hf_online")
CPU = torch.device("cpu")


# ----------------------------------------------------------------------------------------------- FLOPs
def mfu_label(dtype: torch.dtype) -> str:
    """The MFU column's name: the dtype whose measured matmul peak it divides by."""
    return f"MFU ({'bf16' if dtype == torch.bfloat16 else dtype_name(dtype)} peak)"


# ----------------------------------------------------------------------------------------------- data
def synthetic_batch(batch: int, seq_len: int, k: int, vocab: int, seed: int = 0) -> dict:
    """A [B, L] batch of the cache's shapes: random tokens, distinct top-k ids, a sorted top-k and its tail."""
    from .data.corpus import loss_mask
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab, (batch, seq_len), generator=g)
    doc_start = torch.zeros(batch, seq_len, dtype=torch.bool)
    doc_start[:, 0] = True
    step = max(1, vocab // k)
    ids = (torch.randint(vocab, (batch, seq_len, 1), generator=g) + torch.arange(k) * step) % vocab
    logp = torch.log_softmax(2 * torch.randn(batch, seq_len, k + 1, generator=g), dim=-1)
    top = logp[..., :k].sort(dim=-1, descending=True).values
    return {"tokens": tokens, "targets": torch.roll(tokens, -1, dims=1), "mask": loss_mask(doc_start),
            "topk_ids": ids, "topk_logp": top, "tail_logp": logp[..., k]}


@dataclass
class BenchBatch:
    """One batch of the profile's train.batch_size x data.seq_len, in the student's vocabulary and in the teacher's
    (the same sequences; hf_online's teacher and full-vocabulary student read the second)."""
    student: dict
    teacher: dict
    vocab_size: int
    teacher_vocab_size: int
    vocabulary: str  # how the student's vocabulary was decided
    source: str  # where the batch came from


def load_batch(profile, data: str = "auto", cache=None, vocab_size: int | None = None,
               teacher_vocab_size: int | None = None) -> BenchBatch:
    """The bench's batch (module docstring). data: auto (the cache, else synthetic, saying so) | cache | synthetic.
    cache: an opened teacher cache (default: teacher_cache.open_cache(profile)). vocab_size: the student's vocabulary
    of a synthetic batch. teacher_vocab_size: the teacher's, when the caller has the teacher (default: its config)."""
    from .data.vocab import VocabMap
    _choice("data", data, ("auto", "cache", "synthetic"))
    B, L, k = profile.train.batch_size, profile.data.seq_len, profile.cache.k
    if data in ("auto", "cache"):
        try:
            if cache is None:
                from .data.teacher_cache import open_cache
                cache = open_cache(profile)
            if cache.train.tokens.shape[0] < B:
                raise ValueError(f"the cache holds {cache.train.tokens.shape[0]} < train.batch_size={B} sequences")
        except Exception as e:  # noqa: BLE001 - auto falls back to synthetic arrays of the same shapes
            if data == "cache":
                raise
            print(f"[bench] no usable teacher cache for profile {profile.name!r} ({type(e).__name__}: "
                  f"{str(e)[:160]}); using a synthetic batch of the cache's shapes")
        else:
            if vocab_size is not None:
                raise ValueError(f"--vocab-size={vocab_size}: the teacher cache {cache.key} gives the student's "
                                 f"vocabulary (student.vocab={profile.student.vocab}); --vocab-size applies to a "
                                 "synthetic batch only (--data synthetic, or no cache)")
            vocab = VocabMap.for_cache(cache, profile.student.vocab)
            teacher = rows_to_batch(cache.train, np.arange(B), CPU, VocabMap(None, 0))
            return BenchBatch(vocab.restrict(teacher), teacher, vocab.size, vocab.teacher_vocab_size,
                              f"student.vocab={profile.student.vocab}: {vocab.size:,} of the teacher's "
                              f"{vocab.teacher_vocab_size:,} ids (VocabMap.for_cache, cache {cache.key})",
                              f"teacher cache {cache.key} (first {B} training sequences)")
    teacher_vocab = teacher_vocab_size or _teacher_vocab_size(profile)
    if vocab_size is not None:
        if not k < vocab_size <= teacher_vocab:
            raise ValueError(f"--vocab-size={vocab_size} must be in ({k}, {teacher_vocab}]: above cache.k={k} (distinct "
                             f"top-k ids) and at most the teacher's vocabulary (its tokens feed the teacher too)")
        size, vocabulary = vocab_size, f"synthetic: {vocab_size:,} ids (--vocab-size)"
    elif profile.student.vocab == "full":
        size, vocabulary = teacher_vocab, f"synthetic: student.vocab=full, the teacher's {teacher_vocab:,} ids"
    else:
        raise ValueError(f"student.vocab={profile.student.vocab!r}: the student's vocabulary is the ids the teacher "
                         f"cache holds, and there is none to read (--data {data}); build the cache (make study, or "
                         "notebooks/00_teacher.ipynb), or pass --vocab-size N for a synthetic vocabulary of N ids")
    print(f"[bench] student vocabulary: {vocabulary}")
    batch = synthetic_batch(B, L, k, size)  # ids < size <= teacher_vocab: valid teacher ids as well
    return BenchBatch(batch, batch, size, teacher_vocab, vocabulary,
                      f"synthetic top-k arrays of the cache's shapes ([{B}, {L}] tokens, k={k}); throughput does not "
                      "depend on values")


def _teacher_vocab_size(profile) -> int:
    """The teacher's vocabulary (its config; the model is not loaded)."""
    from transformers import AutoConfig

    from .data.teacher import resolve_source
    return int(AutoConfig.from_pretrained(resolve_source(profile.teacher, progress=False)).vocab_size)


# ----------------------------------------------------------------------------------------------- candidates
@dataclass
class Candidate:
    """One benchmarked training step and what the report needs to know about it."""
    step: Callable[[], float]  # one training step on the bench's batch; returns its loss
    model: nn.Module  # what the step trains
    cfg: StudentConfig  # the student shape whose FLOPs the step is counted at
    vocabulary: str  # "student" (the profile's student vocabulary) | "teacher" (the teacher's full one)


def _finish(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, grad_clip: float) -> float:
    """A baseline's step after its forward, as train_step's in one process: backward, global-norm clip over the
    trainable parameters, optimiser step, zero_grad; then loss.item()."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def build_candidates(profile, batch: BenchBatch, names, dtype: torch.dtype, teacher=None,
                     seed: int = 0) -> tuple[dict[str, Candidate], dict]:
    """({name: Candidate} for the requested names, info: the profile's student config, hf_online's teacher and its
    forward times). teacher is loaded only for hf_online when None. profile: as spec.run_profile gives it for the
    pre-norm joint run."""
    from .export import to_qwen3

    tp, P = profile.train, profile.distill
    for name in names:
        _choice("candidates", name, CANDIDATES)

    def config(vocab_size: int, **fields) -> StudentConfig:
        return StudentConfig.from_params(profile.student, vocab_size=vocab_size, n_layers=tp.stages[-1], norm="pre",
                                         max_seq_len=max(profile.data.seq_len, 16), **fields)

    torch.manual_seed(seed)
    proto = Student(config(batch.vocab_size))
    candidates: dict[str, Candidate] = {}
    info: dict = {"student": proto.cfg}

    def normgrow():
        model = Student(config(batch.vocab_size))
        model.load_state_dict(proto.state_dict())
        model.train()
        optimizer = make_optimizer(model, tp, None)
        forward = DistillStep(model, P, compile_enabled(tp.compile, CPU, dtype))
        setup = StepSetup(forward, optimizer, [p for p in model.parameters() if p.requires_grad], tp.grad_clip, CPU,
                          dtype)
        lr, positions = optimizer.param_groups[0]["lr"], int(batch.student["mask"].sum())

        def step() -> float:  # the run's step (train_step), on the bench's batch at the profile's peak lr
            return train_step(setup, batch.student, lr, positions)[0]["loss"]
        return Candidate(step, model, model.cfg, "student")

    def hf_model(student: Student):
        hf = to_qwen3(student).train()
        return hf, make_optimizer(hf, tp, None)

    if "normgrow" in names:
        candidates["normgrow"] = normgrow()
    if "hf_cached" in names:
        hf, opt = hf_model(proto)
        rows = distill.flatten_batch({k: v for k, v in batch.student.items() if k != "tokens"})

        def hf_cached() -> float:
            with autocast(CPU, dtype):
                logits = hf(input_ids=batch.student["tokens"], use_cache=False).logits
            loss, _ = distill.distill_loss(logits.flatten(0, 1), rows, P)
            return _finish(hf, opt, loss, tp.grad_clip)
        candidates["hf_cached"] = Candidate(hf_cached, hf, proto.cfg, "student")
    if "hf_online" in names:
        if teacher is None:
            from .data.teacher import load_teacher
            teacher, _ = load_teacher(profile.teacher, progress=False)
        teacher.eval()
        full = Student(config(batch.teacher_vocab_size))
        hf2, opt2 = hf_model(full)
        tokens, mask, T = batch.teacher["tokens"], batch.teacher["mask"].flatten(), P.temperature
        teacher_times: list[float] = []
        info["teacher_times"] = teacher_times
        info["teacher"] = {"class": type(teacher).__name__, "dtype": str(next(teacher.parameters()).dtype),
                           "params": sum(p.numel() for p in teacher.parameters())}

        def hf_online() -> float:
            t0 = time.perf_counter()
            with torch.no_grad():
                t_logits = teacher(input_ids=tokens, use_cache=False).logits
            teacher_times.append(time.perf_counter() - t0)
            with autocast(CPU, dtype):
                logits = hf2(input_ids=tokens, use_cache=False).logits
            s_logp = F.log_softmax(logits.flatten(0, 1).float() / T, dim=-1)
            t_logp = F.log_softmax(t_logits.flatten(0, 1).float() / T, dim=-1)
            kl = F.kl_div(s_logp, t_logp, log_target=True, reduction="none").sum(-1)
            loss = T * T * distill.masked_mean(kl, mask)
            return _finish(hf2, opt2, loss, tp.grad_clip)
        candidates["hf_online"] = Candidate(hf_online, hf2, full.cfg, "teacher")
    return candidates, info


@contextmanager
def _row_block_bytes(n: int):
    """distill.ROW_BLOCK_BYTES set to n inside the block."""
    saved, distill.ROW_BLOCK_BYTES = distill.ROW_BLOCK_BYTES, n
    try:
        yield
    finally:
        distill.ROW_BLOCK_BYTES = saved


ONE_BLOCK = 1 << 62
"""ROW_BLOCK_BYTES that makes every chunk one row block: the fused head before row blocks (the same numbers)."""


def bench_head(batch: dict, d_model: int, vocab: int, dtype: torch.dtype, params, repeats: int, warmup: int) -> dict:
    """The distillation head alone on one batch, each variant interleaved with its baselines; medians and each
    baseline's median over the fused head's.

    eval: distill.eval_sums (fused, in L2-sized row blocks; what train.evaluate and the diagnostics run) against
    one_block (the same head, each chunk one row block) and reference (distill_loss_chunked(fused=False): a
    log-softmax and a masked logsumexp per chunk under no_grad). train: distill_loss_chunked with its gradients
    (forward and backward of the head in a training step) against one_block. Every timed call follows an untimed
    one of the same variant, so each times its own reusable buffers warm. The head's cost does not depend on the
    hidden states' values, so they are random."""
    g = torch.Generator().manual_seed(0)
    rows = distill.flatten_batch(batch)
    hidden = torch.randn(rows["targets"].shape[0], d_model, generator=g)
    weight = 0.05 * torch.randn(vocab, d_model, generator=g)

    def train_head():
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.enable_grad():
            loss, _ = distill.distill_loss_chunked(h, w, rows, params)
            loss.backward()

    variants = {("eval", "fused"): (lambda: distill.eval_sums(hidden, weight, rows), None),
                ("eval", "one_block"): (lambda: distill.eval_sums(hidden, weight, rows), ONE_BLOCK),
                ("eval", "reference"): (lambda: distill.distill_loss_chunked(hidden, weight, rows, distill.REPORTED,
                                                                             fused=False), None),
                ("train", "fused"): (train_head, None), ("train", "one_block"): (train_head, ONE_BLOCK)}
    times: dict = {v: [] for v in variants}
    with torch.no_grad(), autocast(CPU, dtype):
        for r in range(warmup + repeats):
            for v, (head, block_bytes) in variants.items():
                with _row_block_bytes(block_bytes or distill.ROW_BLOCK_BYTES):
                    head()
                    t0 = time.perf_counter()
                    head()
                    if r >= warmup:
                        times[v].append(time.perf_counter() - t0)
    distill.release_workspace()
    med = {v: statistics.median(t) for v, t in times.items()}
    out: dict = {"tokens": int(hidden.shape[0]), "row_block_bytes": distill.ROW_BLOCK_BYTES}
    for part in ("eval", "train"):
        names = [n for p, n in med if p == part]
        out[part] = {f"{n}_s": med[(part, n)] for n in names} | {
            f"{n}_vs_fused": med[(part, n)] / med[(part, "fused")] for n in names if n != "fused"}
    return out


# ----------------------------------------------------------------------------------------------- memory
def _rss() -> int:
    import psutil
    return psutil.Process().memory_info().rss


def measure_memory(step, steps: int = 2, interval_s: float = 0.002) -> dict:
    """Peak resident memory of `steps` calls of step above the RSS just before them (bytes).

    A thread samples the process RSS (psutil) every interval_s while the steps run; torch's CPU tensors are
    malloc'ed, so tracemalloc does not see them, and ru_maxrss cannot be reset. Run in a fresh process (see
    --memory subprocess) so no earlier candidate's freed-but-cached pages hide this one's peak.
    """
    base = _rss()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(interval_s)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        for _ in range(steps):
            step()
    finally:
        done.set()
        th.join()
    peak[0] = max(peak[0], _rss())
    return {"peak_step_bytes": peak[0] - base, "rss_before_bytes": base,
            "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _memory_subprocess(args, name: str) -> dict:
    cmd = [sys.executable, "-m", "normgrow.bench", "--profile", args.profile, "--memory-probe", name,
           "--data", args.data, "--threads", str(torch.get_num_threads())]
    cmd += ["--dtype", args.dtype] if args.dtype else []
    cmd += ["--vocab-size", str(args.vocab_size)] if args.vocab_size else []
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("MEMORY ")]
    if out.returncode or not lines:
        return {"error": (out.stderr or out.stdout)[-500:]}
    return json.loads(lines[-1][len("MEMORY "):])


# ----------------------------------------------------------------------------------------------- study cost
def study_phases(profile) -> tuple[dict[str, list], int]:
    """({run file: its phases (growth.plan_phases)} for the runs of params/study.yaml, the number of seeds): what
    one seed of the study trains, the compute-matched runs at their donors' active-layer-token budgets."""
    study = read_yaml(PARAMS_DIR / "study.yaml")
    variants = load_variants()
    runs = {name: variants[name].parameters() for name in study["runs"]}
    tp = profile.train
    tps = tp.batch_size * profile.data.seq_len
    phases, alt = {}, {}
    for name, r in sorted(runs.items(), key=lambda kv: bool(kv[1].get("match_active_layer_tokens"))):
        budget = alt.get(r.get("match_active_layer_tokens")) if r.get("match_active_layer_tokens") else None
        phases[name] = plan_phases(r["schedule"], tp.stages, tp.stage_tokens, tps, bool(r.get("freeze_prefix", False)),
                                   budget)
        alt[name] = sum(p.active_layer_tokens(tps) for p in phases[name])
    from .study import study_seeds
    return phases, len(study_seeds(profile.name))


def study_teacher_cost(profile, teacher_tok_s: float) -> dict:
    """Estimated teacher seconds: one cached pass over the profile's tokens vs one online pass per run x seed."""
    phases, seeds = study_phases(profile)
    tps = profile.train.batch_size * profile.data.seq_len
    tokens = {name: sum(p.steps for p in ps) * tps for name, ps in phases.items()}
    online_tokens = seeds * sum(tokens.values())
    cached_tokens = profile.data.train_tokens + profile.data.val_tokens
    return {"runs": len(phases), "seeds": seeds, "run_tokens": tokens, "online_teacher_tokens": online_tokens,
            "cached_teacher_tokens": cached_tokens, "teacher_tok_s": teacher_tok_s,
            "online_teacher_s": online_tokens / teacher_tok_s, "cached_teacher_s": cached_tokens / teacher_tok_s,
            "ratio": online_tokens / cached_tokens,
            "method": "teacher forward tok/s measured in this run (hf_online's teacher pass) x tokens; online = the "
                      "training tokens of every run x seed of params/study.yaml (plan_phases steps x batch x seq_len; "
                      "evaluation passes not counted); cached = data.train_tokens + data.val_tokens once"}


def study_compute(profile, cfg: StudentConfig, peak_flop_s: float, cores: int) -> dict:
    """The matmul FLOPs of the study's runs (study_phases: params/study.yaml's runs x seeds) and their time at the
    measured peak on every core, the physical limit a study's wall time is measured against. A training step counts
    3 x forward for the trainable blocks and the head and 1 x for a frozen prefix (nothing below it trains, so no
    gradient flows through it); each evaluation a run makes (train.evaluation_plan, plus step 0 and each grown
    model before its first update, both on the subset) counts one forward over its validation rows. cfg: the
    study's student (its vocabulary); per-token FLOPs as step_flops counts them."""
    phases, seeds = study_phases(profile)
    tp, L = profile.train, profile.data.seq_len
    tps = tp.batch_size * L
    val_tokens = (profile.data.val_tokens // L) * L
    subset_tokens = len(subset_rows(val_tokens // L, tp.eval_tokens, L)) * L

    def forward(depth: int) -> tuple[float, float]:  # (per token of one block, per token of the head)
        f = step_flops(replace(cfg, n_layers=depth), 1, L)
        head = f["head_fraction"] * f["forward"] / L
        return (f["forward"] / L - head) / depth, head

    train = evals = 0.0
    for ps in phases.values():
        plan, start = evaluation_plan(ps, tp), 0
        for phase in ps:
            block, head = forward(phase.depth)
            frozen = phase.first_trainable_block
            train += phase.steps * tps * (3 * ((phase.depth - frozen) * block + head) + frozen * block)
            whole = phase.depth * block + head
            # the untrained model at step 0 (run.start_run), each grown one before its first update (train_phase)
            evals += subset_tokens * whole
            evals += sum(val_tokens if e.full else subset_tokens for step, e in plan.items()
                         if start < step <= start + phase.steps) * whole
            start += phase.steps
    total = seeds * (train + evals)
    return {"train_flops": seeds * train, "eval_flops": seeds * evals, "flops": total, "runs": len(phases) * seeds,
            "peak_flop_s": peak_flop_s, "cores": cores, "at_peak_s": total / (peak_flop_s * cores),
            "method": "matmul FLOPs (step_flops per token) of every step and evaluation of params/study.yaml's "
                      "runs x seeds; at_peak_s = flops / (the median matmul peak of one thread x cores)"}


# ----------------------------------------------------------------------------------------------- the run
def machine() -> dict:
    return {**machine_description(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "load_avg_1m": os.getloadavg()[0]}


def run_bench(profile_name: str = "cpu", repeats: int = 5, warmup: int = 1, candidates=CANDIDATES,
              data: str = "auto", dtype: str | None = None, vocab_size: int | None = None, teacher=None, cache=None,
              overrides: dict | None = None, memory: str = "subprocess", args=None, out: Path | None = None,
              peak_size: int = 2048) -> dict:
    """Build the candidates, time them in interleaved rounds with one matmul-peak sample per round, write and print
    the report. dtype None: the profile's train.dtype. teacher / cache / overrides: what tests pass instead of
    the bundled teacher, the profile's cache and the profile file alone."""
    profile = run_profile(profile_name, "pre", "joint", overrides)  # train.lr resolved for the bench's student
    dt = resolve_dtype(dtype or profile.train.dtype, CPU)
    teacher_vocab = None if teacher is None else int(teacher.get_output_embeddings().weight.shape[0])
    batch = load_batch(profile, data, cache, vocab_size, teacher_vocab)
    built, info = build_candidates(profile, batch, candidates, dt, teacher=teacher)
    names = [n for n in CANDIDATES if n in built]
    peak = matmul_peak_sampler(dt, peak_size)
    times: dict[str, list[float]] = {n: [] for n in names}
    warmup_times: dict[str, list[float]] = {n: [] for n in names}  # the first includes a compiled normgrow's compile
    peaks, warmup_peaks = [], []
    losses = {}
    for r in range(warmup + repeats):
        timed = r >= warmup
        for n in names:
            t0 = time.perf_counter()
            losses[n] = built[n].step()
            (times if timed else warmup_times)[n].append(time.perf_counter() - t0)
        (peaks if timed else warmup_peaks).append(peak())
        print(f"[bench] round {r + 1}/{warmup + repeats}" + (": " + ", ".join(
            f"{n} {times[n][-1]:.3f}s" for n in names) + f", peak {peaks[-1] / 1e9:.0f} GFLOP/s" if timed else ""),
            flush=True)
    B, L = batch.student["tokens"].shape
    tokens = B * L
    peak_flop_s = statistics.median(peaks)
    results = {}
    for n in names:
        med = statistics.median(times[n])
        flops = step_flops(built[n].cfg, B, L)["step"]
        results[n] = {"step_s": med, "step_s_all": times[n], "warmup_s": warmup_times[n], "tok_s": tokens / med,
                      "vocabulary": built[n].vocabulary, "vocab_size": built[n].cfg.vocab_size,
                      "step_flops": flops, "flop_s": flops / med, "mfu": flops / med / peak_flop_s,
                      "loss": losses[n]}
    if memory == "subprocess" and args is not None:
        for n in names:
            results[n]["memory"] = _memory_subprocess(args, n)
    elif memory == "inprocess":
        for n in names:
            results[n]["memory"] = measure_memory(built[n].step, steps=1)
    ratios = {f"normgrow_vs_{n}": results[n]["step_s"] / results["normgrow"]["step_s"]
              for n in names if n != "normgrow" and "normgrow" in results}
    cfg = info["student"]
    head = bench_head(batch.student, cfg.d_model, batch.vocab_size, dt, profile.distill, repeats, warmup)
    compute = study_compute(profile, cfg, peak_flop_s, os.cpu_count() or 1)
    teacher_cost = None
    if info.get("teacher_times"):
        t_s = statistics.median(info["teacher_times"][warmup:] or info["teacher_times"])
        teacher_cost = study_teacher_cost(profile, tokens / t_s)
    report = {"profile": profile.name, "command": " ".join(["python -m normgrow.bench"] + (sys.argv[1:] if args else [])),
              "machine": machine(), "data": batch.source, "dtype": dtype_name(dt),
              "vocabulary": {"student": batch.vocabulary, "student_size": batch.vocab_size,
                             "teacher_size": batch.teacher_vocab_size},
              "shapes": {"batch": B, "seq_len": L, "k": int(batch.student["topk_ids"].shape[-1]),
                         "vocab": batch.vocab_size, "depth": cfg.n_layers, "d_model": cfg.d_model,
                         "tokens_per_step": tokens},
              "repeats": repeats, "warmup": warmup,
              "timing_method": "candidates interleaved round by round, each round ending with one matmul-peak sample; "
                               "median wall time of `repeats` steps after `warmup` rounds; each step = forward + loss "
                               "+ backward + clip + AdamW + loss.item()",
              "candidates": results, "ratios": ratios, "flops": step_flops(cfg, B, L),
              "matmul_peak": {"dtype": dtype_name(dt), "size": peak_size, "flop_s": peak_flop_s,
                              "per_round": peaks, "warmup_rounds": warmup_peaks, "mfu_label": mfu_label(dt)},
              "memory_method": "peak RSS (psutil, sampled every 2 ms by a thread) over 2 steps minus the RSS just "
                               "before them, each candidate in a fresh subprocess after one warmup step (the fused "
                               "head's reusable chunk buffers are freed before, so they count)"
                               if memory == "subprocess" else "in-process RSS sampling (after the timed steps)",
              "teacher": info.get("teacher"), "study_teacher_cost": teacher_cost, "head": head,
              "study_compute": compute}
    out = out or outputs_dir() / "bench" / f"{profile.name}-{cpu_kind()}.json"
    report["earlier_numerics"] = earlier_numerics(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(report), indent=1, default=str, allow_nan=False))  # strict JSON
    print(format_table(report))
    print(f"wrote {out}")
    return report


def earlier_numerics(record: Path) -> dict:
    """The earlier numerics versions' step times on this CPU kind from the record at `record` (the one this bench
    replaces): its own earlier_numerics and any normgrow_v<N> candidate it timed, each with the command and CPU that
    measured it. Empty when there is no record."""
    if not record.exists():
        return {}
    old = json.loads(record.read_text())
    kept = dict(old.get("earlier_numerics", {}))
    for name, r in old["candidates"].items():
        if name.startswith("normgrow_v"):
            kept[name] = {"step_s": r["step_s"], "command": old["command"], "cpu": old["machine"]["cpu"]}
    return kept


def format_table(report: dict) -> str:
    c, pk, voc = report["candidates"], report["matmul_peak"], report["vocabulary"]
    base = c.get("normgrow", {}).get("step_s")
    sizes = {"student": f"student {voc['student_size']:,}", "teacher": f"teacher {voc['teacher_size']:,}"}
    lines = [f"profile {report['profile']}: {report['shapes']}, dtype {report['dtype']}, data: {report['data']}",
             f"student vocabulary: {voc['student']}",
             f"machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, torch threads "
             f"{report['machine']['torch_threads']}, load avg {report['machine']['load_avg_1m']:.1f}",
             f"| candidate | vocabulary | step s (median) | tok/s | x normgrow step time | GFLOP/step | "
             f"{pk['mfu_label']} | peak step memory |",
             "|---|---|---|---|---|---|---|---|"]
    for n, r in c.items():
        mem = r.get("memory", {}).get("peak_step_bytes")
        lines.append(f"| {n} | {sizes[r['vocabulary']]} | {r['step_s']:.3f} | {r['tok_s']:,.0f} | "
                     f"{r['step_s'] / base if base else float('nan'):.2f} | {r['step_flops'] / 1e9:.1f} | "
                     f"{100 * r['mfu']:.1f}% | {'n/a' if mem is None else f'{mem / 2**20:,.0f} MiB'} |")
    for name, r in report.get("earlier_numerics", {}).items():
        lines.append(f"{name} (recorded: {r['command']}, {r['cpu']}): {r['step_s']:.3f} s, "
                     f"{r['step_s'] / base if base else float('nan'):.2f}x this step (another process)")
    lines.append(f"student step: {report['flops']['step'] / 1e9:.1f} GFLOP (head {100 * report['flops']['head_fraction']:.0f}% "
                 f"of forward); matmul peak {pk['dtype']} {pk['flop_s'] / 1e9:.0f} GFLOP/s (median of one "
                 f"{pk['size']}^3 sample per round; rounds {min(pk['per_round']) / 1e9:.0f}-"
                 f"{max(pk['per_round']) / 1e9:.0f})")
    hd = report["head"]
    ev, tr = hd["eval"], hd["train"]
    lines.append(f"head ({hd['tokens']:,} tokens, row blocks of {hd['row_block_bytes'] / 2**20:g} MiB): evaluation "
                 f"{ev['fused_s'] * 1e3:.1f} ms, one block per chunk {ev['one_block_vs_fused']:.2f}x that, reference "
                 f"{ev['reference_vs_fused']:.2f}x; training (forward + gradients) {tr['fused_s'] * 1e3:.1f} ms, one "
                 f"block per chunk {tr['one_block_vs_fused']:.2f}x")
    sc = report.get("study_compute")
    if sc:
        lines.append(f"study: {sc['runs']} runs, {sc['flops'] / 1e12:.0f} TFLOP ({sc['eval_flops'] / sc['flops']:.0%} "
                     f"evaluations); at this peak on {sc['cores']} cores {sc['at_peak_s'] / 60:.1f} min (the physical "
                     "limit of its wall time)")
    sc = report.get("study_teacher_cost")
    if sc:
        lines.append(f"teacher {sc['teacher_tok_s']:,.0f} tok/s: study ({sc['runs']} runs x {sc['seeds']} seeds) online "
                     f"{sc['online_teacher_s'] / 3600:.2f} h of teacher vs cached once {sc['cached_teacher_s'] / 3600:.2f} h "
                     f"({sc['ratio']:.1f}x)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = bench_parser()  # for the usage errors below
    args = parse("bench", argv)
    unknown = sorted(set(args.candidates or ()) - set(CANDIDATES))
    if unknown:
        ap.error(f"--candidates {' '.join(unknown)}: allowed values: {', '.join(CANDIDATES)}")
    if args.dtype not in (None, *TRAIN_DTYPES):
        ap.error(f"--dtype {args.dtype}: allowed values: {', '.join(TRAIN_DTYPES)}")
    args.candidates = args.candidates or list(CANDIDATES)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_probe:
        profile = run_profile(args.profile, "pre", "joint")
        batch = load_batch(profile, args.data, vocab_size=args.vocab_size)
        dt = resolve_dtype(args.dtype or profile.train.dtype, CPU)
        step = build_candidates(profile, batch, [args.memory_probe], dt)[0][args.memory_probe].step
        step()  # warmup: optimizer state, lazy init
        distill.release_workspace()  # count the fused head's reusable chunk buffers in the step's peak
        print("MEMORY " + json.dumps(measure_memory(step)))
        return 0
    run_bench(args.profile, args.repeats, args.warmup, args.candidates, args.data, args.dtype, args.vocab_size,
              memory=args.memory, args=args, out=args.out, peak_size=args.peak_size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
