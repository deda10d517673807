"""Training-throughput benchmark: normgrow's student step against transformers baselines, in one process.

    python -m normgrow.bench --profile cpu          (make bench)

Candidates (same batch, same student shape: the profile's full depth train.stages[-1], pre-norm so it maps to
Qwen3ForCausalLM; every one is a full training step: forward, loss, backward, grad-norm clip, AdamW step, loss.item()):
  normgrow           Student under bf16 autocast (train.dtype) + distill_loss_chunked (cached top-k teacher, fused
                     chunked head) called inside the autocast region, so the head runs in the autocast dtype
  normgrow_compiled  normgrow with the student's body (embedding, blocks, final norm) under torch.compile, as
                     train.compile: on runs it (train.DistillStep); the head stays eager. Its first call compiles, so
                     it needs warmup >= 1; ratios.normgrow_vs_normgrow_compiled is compiled / eager step time
  normgrow_trainpy   the same, with the loss called after the autocast region (a float32 head; train.py calls it inside,
                     as normgrow does): what the head's dtype costs
  normgrow_reference the same as normgrow_trainpy with fused=False: the per-chunk autograd head that the fused head
                     replaced
  hf_cached          transformers Qwen3ForCausalLM of the same shape under the same autocast, full logits
                     (model(input_ids).logits) + normgrow's cached top-k loss (distill.distill_loss on full logits):
                     the same loss, the model/head implementation differs
  hf_online          the same HF student + the teacher run online (bf16, no_grad) on the batch + full-vocabulary
                     KL(teacher || student) on full logits: what one does without a cache
Timing: candidates are interleaved round by round (warmup rounds first) and each reports the median step time, so
machine noise (shared cores) hits them alike; ratios are taken between medians of the same run.
Also reported: the validation head (bench_eval_head), the teacher's forward throughput (timed inside hf_online)
and the study-level teacher cost (one cached pass over the profile's tokens vs one teacher pass per run of
params/study.yaml), the student step's matmul FLOPs,
the machine's measured bf16 / float32 matmul peak and MFU, and peak memory per step (RSS sampling, see
measure_memory). Writes outputs/bench/<profile>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import distill
from .config import PARAMS_DIR, load_profile, outputs_dir, read_yaml
from .growth import plan_phases
from .model import Student, StudentConfig
from .variants import load_variants
from .utils import TRAIN_DTYPES, cpu_flags, dtype_name, resolve_dtype

CANDIDATES = ("normgrow", "normgrow_compiled", "normgrow_trainpy", "normgrow_reference", "hf_cached", "hf_online")


# ----------------------------------------------------------------------------------------------- FLOPs
def student_step_flops(cfg: StudentConfig, batch: int, seq_len: int) -> dict:
    """Matmul FLOPs of one training step (forward x 3 for forward + backward).

    Forward, per token: 2 * in * out for every linear (q, k, v, o, gate, up, down per block, and the vocabulary head),
    plus attention's QK^T and AV, 2 * seq_len * head_dim * n_heads each per token per block (the full square, not
    halved for the causal mask). Norms, RoPE, softmax and the loss's elementwise work are not counted. The embedding
    lookup is not a matmul. The backward pass is counted as 2 x forward (input and weight gradients).
    """
    d, hd, H, KV, ff = cfg.d_model, cfg.head_dim, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff
    linear_params = d * H * hd + 2 * d * KV * hd + H * hd * d + 3 * d * ff
    per_token_block = 2 * linear_params + 2 * (2 * seq_len * hd * H)
    per_token_head = 2 * d * cfg.vocab_size
    tokens = batch * seq_len
    fwd = tokens * (cfg.n_layers * per_token_block + per_token_head)
    return {"forward": fwd, "step": 3 * fwd, "head_fraction": per_token_head / (cfg.n_layers * per_token_block
                                                                                + per_token_head),
            "method": "3 x forward matmul FLOPs: 2*in*out per token per linear (q,k,v,o,gate,up,down, vocab head) + "
                      "attention QK^T and AV at 2*T*head_dim*n_heads per token each (full square); "
                      "norms/RoPE/softmax/loss elementwise not counted"}


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Measured FLOP/s of an n x n x n matmul in dtype (median of repeats, after one warmup)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times)


# ----------------------------------------------------------------------------------------------- data
def synthetic_batch(batch: int, seq_len: int, k: int, vocab: int, seed: int = 0) -> dict:
    """A [B, L] batch of the cache's shapes: random tokens, distinct top-k ids, a sorted top-k and its tail."""
    from .data import loss_mask
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


def load_batch(profile, data: str, vocab: int | None = None) -> tuple[dict, str]:
    """(batch of the profile's train.batch_size x data.seq_len, a description of where it came from)."""
    B, L, k = profile.train.batch_size, profile.data.seq_len, profile.cache.k
    if data in ("auto", "cache"):
        try:
            from .teacher import open_cache
            from .train import rows_to_batch
            from .vocab import VocabMap
            cache = open_cache(profile)
            if cache.train.tokens.shape[0] >= B:
                # the teacher's full vocabulary: the candidates (HF Qwen3 included) share the teacher's head size
                batch = rows_to_batch(cache.train, np.arange(B), torch.device("cpu"), VocabMap(None, 0))
                return batch, f"teacher cache {cache.key} (first {B} training sequences)"
            if data == "cache":
                raise ValueError(f"the cache holds {cache.train.tokens.shape[0]} < {B} sequences")
        except Exception as e:  # noqa: BLE001 - auto falls back to synthetic arrays of the same shapes
            if data == "cache":
                raise
            print(f"[bench] no usable teacher cache for profile {profile.name!r} ({type(e).__name__}: "
                  f"{str(e)[:120]}); using synthetic top-k arrays of the cache's shapes")
    return synthetic_batch(B, L, k, vocab or _vocab_size(profile)), (
        f"synthetic top-k arrays of the cache's shapes ([{B}, {L}] tokens, k={k}); throughput does not depend on values")


def _vocab_size(profile) -> int:
    """The teacher's vocabulary (its config; the model is not loaded)."""
    from transformers import AutoConfig

    from .teacher import resolve_source
    return int(AutoConfig.from_pretrained(resolve_source(profile.teacher, progress=False)).vocab_size)


# ----------------------------------------------------------------------------------------------- candidates
def _autocast(dtype: torch.dtype):
    return nullcontext() if dtype == torch.float32 else torch.autocast("cpu", dtype=dtype)


def _finish(model, opt, loss, clip: float) -> float:
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def build_steps(profile, batch: dict, names, dtype: torch.dtype, teacher=None, chunk_size: int | None = None,
                seed: int = 0) -> tuple[dict, dict]:
    """({name: step()}, info) for the requested candidates; teacher is loaded only for hf_online when None."""
    from .export import to_qwen3
    from .train import make_optimizer, run_profile

    profile = run_profile(profile.name, "pre", "joint")  # train.lr resolved for the pre-norm student the bench builds
    tp, P = profile.train, profile.distill
    chunk = chunk_size or distill.DEFAULT_CHUNK
    vocab = _vocab_size(profile) if teacher is None else int(teacher.get_output_embeddings().weight.shape[0])
    torch.manual_seed(seed)
    cfg = StudentConfig.from_params(profile.student, vocab_size=vocab, n_layers=tp.stages[-1], norm="pre",
                                    max_seq_len=max(profile.data.seq_len, 16))
    proto = Student(cfg)
    tokens = batch["tokens"]
    flat = distill.flatten_batch({k: v for k, v in batch.items() if k != "tokens"})
    mask = flat["mask"]
    steps, info = {}, {"student_config": cfg.__dict__ | {}, "chunk_size": chunk}

    def normgrow_step(loss_in_autocast: bool, fused: bool, compiled: bool = False):
        model = Student(cfg)
        model.load_state_dict(proto.state_dict())
        model.train()
        opt = make_optimizer(model, tp, None)
        body = torch.compile(model.hidden) if compiled else model.hidden

        def step():
            with _autocast(dtype):
                hidden = body(tokens)
                if loss_in_autocast:
                    loss, _ = distill.distill_loss_chunked(hidden.flatten(0, 1), model.head_weight, flat, P,
                                                           chunk_size=chunk, fused=fused)
            if not loss_in_autocast:
                loss, _ = distill.distill_loss_chunked(hidden.flatten(0, 1), model.head_weight, flat, P,
                                                       chunk_size=chunk, fused=fused)
            return _finish(model, opt, loss, tp.grad_clip)
        return step

    def hf_model():
        hf = to_qwen3(proto).train()
        return hf, make_optimizer(hf, tp, None)

    if "normgrow" in names:
        steps["normgrow"] = normgrow_step(True, True)
    if "normgrow_compiled" in names:
        steps["normgrow_compiled"] = normgrow_step(True, True, compiled=True)
    if "normgrow_trainpy" in names:
        steps["normgrow_trainpy"] = normgrow_step(False, True)
    if "normgrow_reference" in names:
        steps["normgrow_reference"] = normgrow_step(False, False)
    if "hf_cached" in names:
        hf, opt = hf_model()

        def hf_cached():
            with _autocast(dtype):
                logits = hf(input_ids=tokens, use_cache=False).logits
            loss, _ = distill.distill_loss(logits.flatten(0, 1), flat, P)
            return _finish(hf, opt, loss, tp.grad_clip)
        steps["hf_cached"] = hf_cached
    if "hf_online" in names:
        if teacher is None:
            from .teacher import load_teacher
            teacher, _ = load_teacher(profile.teacher, progress=False)
        teacher.eval()
        info["teacher"] = {"class": type(teacher).__name__, "dtype": str(next(teacher.parameters()).dtype),
                           "params": sum(p.numel() for p in teacher.parameters())}
        hf2, opt2 = hf_model()
        teacher_times: list[float] = []
        info["teacher_times"] = teacher_times
        T = P.temperature

        def hf_online():
            t0 = time.perf_counter()
            with torch.no_grad():
                t_logits = teacher(input_ids=tokens, use_cache=False).logits
            teacher_times.append(time.perf_counter() - t0)
            with _autocast(dtype):
                logits = hf2(input_ids=tokens, use_cache=False).logits
            s_logp = F.log_softmax(logits.flatten(0, 1).float() / T, dim=-1)
            t_logp = F.log_softmax(t_logits.flatten(0, 1).float() / T, dim=-1)
            kl = F.kl_div(s_logp, t_logp, log_target=True, reduction="none").sum(-1)
            loss = T * T * distill.masked_mean(kl, mask)
            return _finish(hf2, opt2, loss, tp.grad_clip)
        steps["hf_online"] = hf_online
    return steps, info


def bench_eval_head(batch: dict, d_model: int, vocab: int, dtype: torch.dtype, repeats: int, warmup: int) -> dict:
    """The validation head on one batch: distill.eval_sums (fused; what train.evaluate and the diagnostics run)
    against the per-chunk reference head under no_grad (distill_loss_chunked(fused=False): a log-softmax and a
    masked logsumexp per chunk, like evaluation before eval_sums), interleaved; medians and their ratio. The head's
    cost does not depend on the hidden states' values, so they are random."""
    g = torch.Generator().manual_seed(0)
    rows = distill.flatten_batch(batch)
    hidden = torch.randn(rows["targets"].shape[0], d_model, generator=g)
    weight = 0.05 * torch.randn(vocab, d_model, generator=g)
    heads = {"fused": lambda: distill.eval_sums(hidden, weight, rows),
             "reference": lambda: distill.distill_loss_chunked(hidden, weight, rows, distill.REPORTED, fused=False)}
    times: dict[str, list[float]] = {n: [] for n in heads}
    with torch.no_grad(), _autocast(dtype):
        for r in range(warmup + repeats):
            for n, head in heads.items():
                t0 = time.perf_counter()
                head()
                if r >= warmup:
                    times[n].append(time.perf_counter() - t0)
    med = {n: statistics.median(t) for n, t in times.items()}
    return {"tokens": int(hidden.shape[0]), "fused_s": med["fused"], "reference_s": med["reference"],
            "speedup": med["reference"] / med["fused"]}


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
           "--data", args.data, "--threads", str(torch.get_num_threads()), "--dtype", args.dtype]
    if args.chunk_size:
        cmd += ["--chunk-size", str(args.chunk_size)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("MEMORY ")]
    if out.returncode or not lines:
        return {"error": (out.stderr or out.stdout)[-500:]}
    return json.loads(lines[-1][len("MEMORY "):])


# ----------------------------------------------------------------------------------------------- study cost
def study_teacher_cost(profile, teacher_tok_s: float) -> dict:
    """Estimated teacher seconds: one cached pass over the profile's tokens vs one online pass per run x seed."""
    study = read_yaml(PARAMS_DIR / "study.yaml")
    variants = load_variants()
    runs = {name: variants[name].parameters() for name in study["runs"]}
    tp = profile.train
    tps = tp.batch_size * profile.data.seq_len
    tokens, alt = {}, {}
    for name, r in sorted(runs.items(), key=lambda kv: bool(kv[1].get("match_active_layer_tokens"))):
        budget = alt.get(r.get("match_active_layer_tokens")) if r.get("match_active_layer_tokens") else None
        phases = plan_phases(r["schedule"], tp.stages, tp.stage_tokens, tps, bool(r.get("freeze_prefix", False)),
                             budget)
        tokens[name] = sum(p.steps for p in phases) * tps
        alt[name] = sum(p.active_layer_tokens(tps) for p in phases)
    seeds = len(study["seeds"])
    online_tokens = seeds * sum(tokens.values())
    cached_tokens = profile.data.train_tokens + profile.data.val_tokens
    return {"runs": len(runs), "seeds": seeds, "run_tokens": tokens, "online_teacher_tokens": online_tokens,
            "cached_teacher_tokens": cached_tokens, "teacher_tok_s": teacher_tok_s,
            "online_teacher_s": online_tokens / teacher_tok_s, "cached_teacher_s": cached_tokens / teacher_tok_s,
            "ratio": online_tokens / cached_tokens,
            "method": "teacher forward tok/s measured in this run (hf_online's teacher pass) x tokens; online = the "
                      "training tokens of every run x seed of params/study.yaml (plan_phases steps x batch x seq_len; "
                      "evaluation passes not counted); cached = data.train_tokens + data.val_tokens once"}


# ----------------------------------------------------------------------------------------------- the run
def machine() -> dict:
    model = platform.processor()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    flags = cpu_flags()
    return {"cpu": model, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "load_avg_1m": os.getloadavg()[0]}


def run_bench(profile_name: str = "cpu", repeats: int = 5, warmup: int = 1, candidates=CANDIDATES,
              data: str = "auto", dtype: str = "auto", chunk_size: int | None = None, teacher=None,
              memory: str = "subprocess", args=None, out: Path | None = None, peak_size: int = 2048) -> dict:
    profile = load_profile(profile_name)
    dt = resolve_dtype(dtype, torch.device("cpu"))
    dtype = dtype_name(dt)
    vocab = None if teacher is None else int(teacher.get_output_embeddings().weight.shape[0])
    batch, data_desc = load_batch(profile, data, vocab)
    steps, info = build_steps(profile, batch, candidates, dt, teacher=teacher, chunk_size=chunk_size)
    names = [n for n in CANDIDATES if n in steps]
    times: dict[str, list[float]] = {n: [] for n in names}
    warmup_times: dict[str, list[float]] = {n: [] for n in names}  # the first includes normgrow_compiled's compile
    losses = {}
    for r in range(warmup + repeats):
        for n in names:
            t0 = time.perf_counter()
            losses[n] = steps[n]()
            (times if r >= warmup else warmup_times)[n].append(time.perf_counter() - t0)
        print(f"[bench] round {r + 1}/{warmup + repeats}" + ("" if r < warmup else ": " + ", ".join(
            f"{n} {times[n][-1]:.2f}s" for n in names)), flush=True)
    tokens = batch["tokens"].numel()
    cfg = StudentConfig(**info["student_config"])
    flops = student_step_flops(cfg, *batch["tokens"].shape)
    peak_bf16, peak_fp32 = matmul_peak(torch.bfloat16, peak_size), matmul_peak(torch.float32, peak_size)
    peak = peak_bf16 if dt == torch.bfloat16 else peak_fp32
    results = {}
    for n in names:
        med = statistics.median(times[n])
        results[n] = {"step_s": med, "step_s_all": times[n], "warmup_s": warmup_times[n], "tok_s": tokens / med, "flop_s": flops["step"] / med,
                      "mfu": flops["step"] / med / peak, "loss": losses[n]}
    if memory == "subprocess" and args is not None:
        for n in names:
            results[n]["memory"] = _memory_subprocess(args, n)
    elif memory == "inprocess":
        for n in names:
            results[n]["memory"] = measure_memory(steps[n], steps=1)
    ratios = {}
    if "normgrow" in results:
        for n in names:
            if n != "normgrow":
                ratios[f"normgrow_vs_{n}"] = results[n]["step_s"] / results["normgrow"]["step_s"]
    eval_head = bench_eval_head(batch, cfg.d_model, cfg.vocab_size, dt, repeats, warmup)
    teacher_cost = None
    if info.get("teacher_times"):
        t_s = statistics.median(info["teacher_times"][warmup:] or info["teacher_times"])
        teacher_cost = study_teacher_cost(profile, tokens / t_s)
    report = {"profile": profile.name, "command": " ".join(["python -m normgrow.bench"] + (sys.argv[1:] if args else [])),
              "machine": machine(), "data": data_desc, "dtype": dtype,
              "shapes": {"batch": int(batch["tokens"].shape[0]), "seq_len": int(batch["tokens"].shape[1]),
                         "k": int(batch["topk_ids"].shape[-1]), "vocab": cfg.vocab_size, "depth": cfg.n_layers,
                         "d_model": cfg.d_model, "tokens_per_step": tokens},
              "repeats": repeats, "warmup": warmup, "chunk_size": info["chunk_size"],
              "timing_method": "candidates interleaved round by round; median wall time of `repeats` steps after "
                               "`warmup` rounds; each step = forward + loss + backward + clip + AdamW + loss.item()",
              "candidates": results, "ratios": ratios, "flops": flops,
              "matmul_peak_flop_s": {"bfloat16": peak_bf16, "float32": peak_fp32, "size": peak_size},
              "memory_method": "peak RSS (psutil, sampled every 2 ms by a thread) over 2 steps minus the RSS just "
                               "before them, each candidate in a fresh subprocess after one warmup step (the fused "
                               "head's reusable chunk buffers are freed before, so they count)"
                               if memory == "subprocess" else "in-process RSS sampling (after the timed steps)",
              "teacher": info.get("teacher"), "study_teacher_cost": teacher_cost, "eval_head": eval_head}
    out = out or outputs_dir() / "bench" / f"{profile.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(format_table(report))
    print(f"wrote {out}")
    return report


def format_table(report: dict) -> str:
    c = report["candidates"]
    base = c.get("normgrow", {}).get("step_s")
    lines = [f"profile {report['profile']}: {report['shapes']}, dtype {report['dtype']}, data: {report['data']}",
             f"machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, torch threads "
             f"{report['machine']['torch_threads']}, load avg {report['machine']['load_avg_1m']:.1f}",
             "| candidate | step s (median) | tok/s | x slower than normgrow | MFU (bf16 peak) | peak step memory |",
             "|---|---|---|---|---|---|"]
    for n, r in c.items():
        mem = r.get("memory", {}).get("peak_step_bytes")
        lines.append(f"| {n} | {r['step_s']:.3f} | {r['tok_s']:,.0f} | "
                     f"{r['step_s'] / base if base else float('nan'):.2f} | {100 * r['mfu']:.1f}% | "
                     f"{'n/a' if mem is None else f'{mem / 2**20:,.0f} MiB'} |")
    pk = report["matmul_peak_flop_s"]
    lines.append(f"student step: {report['flops']['step'] / 1e9:.1f} GFLOP (head {100 * report['flops']['head_fraction']:.0f}% "
                 f"of forward); matmul peak bf16 {pk['bfloat16'] / 1e9:.0f} GFLOP/s, float32 {pk['float32'] / 1e9:.0f} GFLOP/s")
    ev = report["eval_head"]
    lines.append(f"validation head ({ev['tokens']:,} tokens): fused eval_sums {ev['fused_s']:.3f} s, reference "
                 f"{ev['reference_s']:.3f} s ({ev['speedup']:.1f}x)")
    sc = report.get("study_teacher_cost")
    if sc:
        lines.append(f"teacher {sc['teacher_tok_s']:,.0f} tok/s: study ({sc['runs']} runs x {sc['seeds']} seeds) online "
                     f"{sc['online_teacher_s'] / 3600:.2f} h of teacher vs cached once {sc['cached_teacher_s'] / 3600:.2f} h "
                     f"({sc['ratio']:.1f}x)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m normgrow.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    ap.add_argument("--data", default="auto", choices=("auto", "cache", "synthetic"))
    ap.add_argument("--dtype", default="auto", choices=TRAIN_DTYPES,
                    help="auto: bf16 where the CPU computes it natively (AMX / AVX512-BF16), else float32")
    ap.add_argument("--chunk-size", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    ap.add_argument("--memory", default="subprocess", choices=("subprocess", "inprocess", "none"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--memory-probe", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_probe:
        profile = load_profile(args.profile)
        batch, _ = load_batch(profile, args.data)
        dt = resolve_dtype(args.dtype, torch.device("cpu"))
        steps, _ = build_steps(profile, batch, [args.memory_probe], dt, chunk_size=args.chunk_size)
        step = steps[args.memory_probe]
        step()  # warmup: optimizer state, lazy init
        distill.release_workspace()  # count the fused head's reusable chunk buffers in the step's peak
        print("MEMORY " + json.dumps(measure_memory(step)))
        return 0
    run_bench(args.profile, args.repeats, args.warmup, args.candidates, args.data, args.dtype, args.chunk_size,
              memory=args.memory, args=args, out=args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
