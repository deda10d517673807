"""One run of the study: a student distilled from the cached teacher under a depth schedule.

Entry point: ``run_variant(...)`` (what notebooks/run_variant.ipynb calls). It validates every parameter before any
heavy work or output directory, then trains, evaluates, checkpoints and writes
outputs/runs/<profile>/<run>/{config.json, metrics.jsonl, summary.json, checkpoints/}.

Choices made explicit here (see growth.py for the schedules and the token accounting):
  - Optimiser: AdamW, weight decay on matrices only (not norm gains), global-norm gradient clipping.
  - At each growth step the optimiser follows train.optimizer_on_grow: ``reset`` builds a fresh AdamW (progressive
    stacking does this), ``keep`` carries the moments of parameters that already existed; new blocks start fresh.
  - Learning rate: linear warmup then cosine decay to lr * min_lr_ratio. ``per_stage`` restarts warmup + cosine at
    every phase (each phase is an optimisation problem of its own); ``global`` runs one schedule over all steps.
  - Data order: step s reads sequences [s*B, (s+1)*B) of an endless stream of epochs, each a permutation drawn from
    (seed, epoch). The order is a pure function of the step, so a resumed run sees exactly the data it would have.
  - New blocks are initialised from a generator seeded by (seed, phase), so growth is reproducible after a resume.
  - Mixed precision: autocast in train.dtype (auto = bf16 where the hardware has it); losses in float32.
  - Resume: checkpoints/last.pt (model, optimiser, step, counters, metrics line count) every checkpoint_every steps
    and at every phase end; a restarted run truncates metrics.jsonl to the checkpoint and continues. A finished run
    (summary.json present) is returned as is unless force=True, which deletes it first.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from . import distill
from .config import ParamError, outputs_dir, Profile, load_profile
from .data import loss_mask, loss_mask_np
from .growth import SCHEDULES, Phase, plan_phases
from .model import NORMS, Student, StudentConfig, load_student, save_student
from .vocab import VocabMap
from .utils import atomic_write_json, read_json, resolve_device, resolve_dtype, stable_hash

RUN_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def runs_dir(profile_name: str) -> Path:
    return outputs_dir() / "runs" / profile_name


@dataclass(frozen=True)
class RunSpec:
    """A validated run: the profile plus the papermill parameters of run_variant.ipynb."""
    profile: Profile
    norm: str
    schedule: str
    freeze_prefix: bool
    match_active_layer_tokens: str | None  # resolved run name of the budget donor
    seed: int
    run_name: str
    force: bool = False
    overrides: dict = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return runs_dir(self.profile.name) / self.run_name

    def identity(self) -> dict:
        """What a run directory must agree with to be resumed (everything but force)."""
        return {"profile": self.profile.to_dict(), "norm": self.norm, "schedule": self.schedule,
                "freeze_prefix": self.freeze_prefix, "match_active_layer_tokens": self.match_active_layer_tokens,
                "seed": self.seed, "run_name": self.run_name}


def derive_run_name(norm: str, schedule: str, freeze_prefix: bool, match: str | None, seed: int) -> str:
    parts = [norm, schedule] + (["freeze"] if freeze_prefix else []) + ([f"match-{match}"] if match else [])
    return "-".join(parts + [f"s{seed}"])


def _choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ParamError(f"{name}={value!r} is not allowed; allowed values: {', '.join(map(str, allowed))}")


def resolve_match_target(profile_name: str, target: str, seed: int) -> Path:
    """The finished run whose active-layer tokens a matched run gets: NAME, or NAME-s<seed> for a seedless name."""
    root = runs_dir(profile_name)
    for name in (target, f"{target}-s{seed}"):
        if (root / name).is_dir():
            if not (root / name / "summary.json").is_file():
                raise ParamError(f"match_active_layer_tokens={target!r}: run {root / name} is not finished "
                                 "(no summary.json); run it to completion first")
            return root / name
    finished = sorted(p.parent.name for p in root.glob("*/summary.json"))
    raise ParamError(f"match_active_layer_tokens={target!r}: no run {root / target} (nor {target}-s{seed}); "
                     f"finished runs of profile {profile_name!r}: {', '.join(finished) or 'none'}")


def lr_for_norm(lr, norm: str) -> float:
    """The peak learning rate of a run: train.lr itself, or its entry for this placement ({pre: X, post: Y})."""
    if not isinstance(lr, dict):
        return lr
    missing = [n for n in NORMS if n not in lr]
    unknown = sorted(set(lr) - set(NORMS))
    if missing or unknown:
        raise ParamError(f"train.lr={lr!r} must give one learning rate per placement ({', '.join(NORMS)}); "
                         f"missing: {', '.join(missing) or 'none'}, unknown: {', '.join(unknown) or 'none'}")
    return lr[norm]


def make_run_spec(profile: str = "tiny", norm: str = "pre", schedule: str = "grow", freeze_prefix: bool = False,
                  match_active_layer_tokens: str | None = None, seed: int = 0, run_name: str = "",
                  force: bool = False, overrides: dict | None = None) -> RunSpec:
    """Validate run_variant's parameters; every error names the parameter and its allowed values."""
    _choice("norm", norm, NORMS)
    _choice("schedule", schedule, SCHEDULES)
    for name, value in (("freeze_prefix", freeze_prefix), ("force", force)):
        if not isinstance(value, bool):
            raise ParamError(f"{name}={value!r} must be True or False")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ParamError(f"seed={seed!r} must be an integer >= 0")
    if freeze_prefix and schedule != "grow":
        raise ParamError(f"freeze_prefix=True needs schedule='grow' (got schedule={schedule!r})")
    if match_active_layer_tokens in ("", "None", "null"):
        match_active_layer_tokens = None
    if match_active_layer_tokens is not None and schedule != "joint":
        raise ParamError(f"match_active_layer_tokens needs schedule='joint' (got schedule={schedule!r})")
    if overrides is not None and not isinstance(overrides, dict):
        raise ParamError(f"overrides={overrides!r} must be a mapping of dotted keys, e.g. {{'train.lr': 1e-3}}")
    prof = load_profile(profile, overrides)
    prof = dataclasses.replace(prof, train=dataclasses.replace(prof.train, lr=lr_for_norm(prof.train.lr, norm)))
    if len(prof.train.stages) < 2 and schedule == "grow":
        raise ParamError(f"schedule='grow' needs at least two train.stages (got {list(prof.train.stages)})")
    match_name = None
    if match_active_layer_tokens is not None:
        match_name = resolve_match_target(prof.name, str(match_active_layer_tokens), seed).name
    run_name = run_name or derive_run_name(norm, schedule, freeze_prefix, match_active_layer_tokens, seed)
    if not isinstance(run_name, str) or not RUN_NAME_PATTERN.match(run_name):
        raise ParamError(f"run_name={run_name!r} must be letters, digits, '.', '_' or '-' (no '/')")
    return RunSpec(prof, norm, schedule, freeze_prefix, match_name, seed, run_name, force, dict(overrides or {}))


# ----------------------------------------------------------------------------------------------------------- data

class Batches:
    """Training batches as a pure function of the step (see module docstring)."""

    def __init__(self, split, batch_size: int, seed: int, device: torch.device, vocab: VocabMap):
        self.split, self.batch_size, self.seed, self.device, self.vocab = split, batch_size, seed, device, vocab
        self.n_rows = split.tokens.shape[0]
        if self.n_rows < 1:
            raise ValueError("the training split is empty")
        self._perms: dict[int, np.ndarray] = {}

    def rows(self, step: int) -> np.ndarray:
        start = step * self.batch_size
        index = np.arange(start, start + self.batch_size)
        epochs, offsets = np.divmod(index, self.n_rows)
        return np.array([self._permutation(int(e))[o] for e, o in zip(epochs, offsets)])

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            self._perms = {epoch: np.random.default_rng([self.seed, epoch]).permutation(self.n_rows)}
        return self._perms[epoch]

    def __call__(self, step: int) -> dict:
        return rows_to_batch(self.split, np.sort(self.rows(step)), self.device, self.vocab)


def rows_to_batch(split, rows: np.ndarray, device: torch.device, vocab: VocabMap) -> dict:
    """Gather whole sequences (one copy per array, no per-token loops), move them to the device and map them to
    the student's vocabulary."""
    tokens = torch.from_numpy(np.asarray(split.tokens[rows], dtype=np.int64))
    doc_start = torch.from_numpy(np.asarray(split.doc_start[rows], dtype=bool))
    targets = torch.roll(tokens, -1, dims=1)  # the last position's target is masked out by loss_mask
    batch = {"tokens": tokens, "targets": targets, "mask": loss_mask(doc_start),
             "topk_ids": torch.from_numpy(np.asarray(split.topk_ids[rows], dtype=np.int64)),
             "topk_logp": torch.from_numpy(np.asarray(split.topk_logp[rows], dtype=np.float32)),
             "tail_logp": torch.from_numpy(np.asarray(split.tail_logp[rows], dtype=np.float32))}
    return vocab.restrict({k: v.to(device, non_blocking=True) for k, v in batch.items()})


# ------------------------------------------------------------------------------------------------ optimisation

def lr_at(step: int, phases: list[Phase], params) -> float:
    """Warmup + cosine, per phase or over the whole run (train.lr_schedule)."""
    if params.lr_schedule == "global":
        local, total = step, sum(p.steps for p in phases)
    else:
        start = 0
        for phase in phases:
            if step < start + phase.steps:
                break
            start += phase.steps
        local, total = step - start, phase.steps
    warmup = min(params.warmup_steps, max(total - 1, 0))
    if local < warmup:
        return params.lr * (local + 1) / (warmup + 1)
    progress = (local - warmup) / max(total - warmup, 1)
    floor = params.lr * params.min_lr_ratio
    return floor + 0.5 * (params.lr - floor) * (1 + math.cos(math.pi * progress))


def set_trainable(model: Student, phase: Phase) -> None:
    """Freeze blocks [0, first_trainable_block) and, when blocks are frozen, a tied embedding (see growth.py)."""
    frozen_prefix = phase.first_trainable_block > 0
    for i, block in enumerate(model.blocks):
        block.requires_grad_(i >= phase.first_trainable_block)
    model.embed_tokens.requires_grad_(not frozen_prefix)
    for name, p in model.named_parameters():
        if not name.startswith(("blocks.", "embed_tokens.")):
            p.requires_grad_(True)  # final norm, untied head


def make_optimizer(model: Student, params, previous: torch.optim.Optimizer | None) -> torch.optim.AdamW:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if p.ndim >= 2], "weight_decay": params.weight_decay},
              {"params": [p for n, p in named if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=params.lr, betas=tuple(params.betas), fused=False)
    if previous is not None and params.optimizer_on_grow == "keep":
        for _, p in named:
            if p in previous.state:
                opt.state[p] = previous.state[p]
    return opt


def _autocast(device: torch.device, dtype: torch.dtype):
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@torch.no_grad()
def evaluate(model: Student, split, n_rows: int, batch_size: int, device, dtype, vocab: VocabMap) -> dict:
    """Student next-token CE and soft-target CE against the teacher (T=1, tail bucket) on the first n_rows
    validation sequences, averaged over loss_mask positions (nats/token)."""
    was_training = model.training
    model.eval()
    sums = {"val_ce": 0.0, "val_kd_ce": 0.0}
    count = 0
    for start in range(0, n_rows, batch_size):
        batch = rows_to_batch(split, np.arange(start, min(start + batch_size, n_rows)), device, vocab)
        rows = distill.flatten_batch(batch)
        with _autocast(device, dtype):
            batch_sums, batch_count = distill.eval_sums(model.hidden(batch["tokens"]).flatten(0, 1),
                                                        model.head_weight, rows)
        sums["val_ce"] += batch_sums["ce"]
        sums["val_kd_ce"] += batch_sums["kd_ce"]
        count += batch_count
    model.train(was_training)
    return {k: v / max(count, 1) for k, v in sums.items()} | {"eval_positions": count}


# ----------------------------------------------------------------------------------------------------- the run

class MetricsLog:
    """metrics.jsonl, append-only; truncated to a checkpoint's line count on resume."""

    def __init__(self, path: Path, keep_lines: int):
        self.path = path
        lines = path.read_text().splitlines(keepends=True) if path.exists() else []
        path.write_text("".join(lines[:keep_lines]))
        self.lines = min(keep_lines, len(lines))

    def write(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        self.lines += 1


def _student_config(spec: RunSpec, vocab_size: int, depth: int) -> StudentConfig:
    s = spec.profile.student
    return StudentConfig(vocab_size=vocab_size, n_layers=depth, d_model=s.d_model, n_heads=s.n_heads,
                         n_kv_heads=s.n_kv_heads, head_dim=s.head_dim, d_ff=s.d_ff, norm=spec.norm,
                         tie_embeddings=s.tie_embeddings, rope_theta=s.rope_theta, rms_eps=s.rms_eps,
                         init_std=s.init_std, max_seq_len=max(spec.profile.data.seq_len, 16))


def _grow_generator(seed: int, phase: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(stable_hash({"seed": seed, "phase": phase}, 8), 16))


def prepare_run_dir(spec: RunSpec, teacher_key: str) -> tuple[Path, dict | None]:
    """Create or validate the run directory. Returns (dir, summary if already finished).

    A directory holding a run (finished or not) with other parameters is never reused nor overwritten."""
    run_dir = spec.dir
    if spec.force and run_dir.exists():
        shutil.rmtree(run_dir)
    identity = spec.identity() | {"teacher_key": teacher_key}
    if (run_dir / "config.json").is_file():
        existing = read_json(run_dir / "config.json")
        if existing != identity:
            differing = sorted(k for k in identity if existing.get(k) != identity[k])
            state = "a finished" if (run_dir / "summary.json").is_file() else "an unfinished"
            raise ParamError(f"{run_dir} holds {state} run with different parameters ({', '.join(differing)}); "
                             "pass force=True to discard it, or choose another run_name")
    if (run_dir / "summary.json").is_file():
        return run_dir, read_json(run_dir / "summary.json")
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "config.json", identity)
    return run_dir, None


def run_variant(spec: RunSpec, progress: bool = True) -> dict:
    """Train (or resume, or return the finished) run described by spec; returns its summary."""
    from .teacher import ensure_cache  # heavy import, only once parameters are valid

    prof, tp = spec.profile, spec.profile.train
    budget = None
    if spec.match_active_layer_tokens:
        budget = read_json(runs_dir(prof.name) / spec.match_active_layer_tokens / "summary.json")["active_layer_tokens"]
    tokens_per_step = tp.batch_size * prof.data.seq_len
    phases = plan_phases(spec.schedule, tp.stages, tp.stage_tokens, tokens_per_step, spec.freeze_prefix, budget)

    cache = ensure_cache(prof, progress=progress)
    run_dir, finished = prepare_run_dir(spec, cache.key)
    if finished is not None:
        print(f"{run_dir} is finished (summary.json); not re-running. Pass force=True to retrain.")
        return finished

    device = resolve_device(tp.device)
    dtype = resolve_dtype(tp.dtype, device)
    vocab = VocabMap.for_cache(cache, prof.student.vocab)
    ckpt_dir = run_dir / "checkpoints"
    last_path = ckpt_dir / "last.pt"
    state = torch.load(last_path, map_location="cpu", weights_only=False) if last_path.exists() else None

    if state is None:
        torch.manual_seed(spec.seed)
        model = Student(_student_config(spec, vocab.size, phases[0].depth))
        counters = {"step": 0, "tokens": 0, "active_layer_tokens": 0, "trainable_layer_tokens": 0, "wall_s": 0.0,
                    "metrics_lines": 0, "phases": []}
    else:
        model = Student(StudentConfig(**state["config"]))
        model.load_state_dict(state["model"])
        counters = state["counters"]
        print(f"resuming {run_dir} at step {counters['step']}")
    model.to(device).train()
    log = MetricsLog(run_dir / "metrics.jsonl", counters["metrics_lines"])
    batches = Batches(cache.train, tp.batch_size, spec.seed, device, vocab)
    val_rows = cache.val.tokens.shape[0]
    eval_rows = val_rows if tp.eval_tokens == 0 else max(1, min(val_rows, tp.eval_tokens // prof.data.seq_len))

    total_steps = sum(p.steps for p in phases)
    bar = tqdm(total=total_steps, initial=counters["step"], desc=spec.run_name, disable=not progress, unit="step")
    session_start = time.perf_counter()
    wall_before = counters["wall_s"]
    if counters["step"] == 0 and log.lines == 0:  # the untrained model: the start of every learning curve
        log.write({"kind": "eval", "step": 0, "phase": 0, "depth": phases[0].depth, "tokens": 0,
                   "active_layer_tokens": 0, **evaluate(model, cache.val, eval_rows, tp.batch_size, device, dtype,
                                                        vocab)})
    optimizer = None
    phase_start = 0
    for phase in phases:
        phase_end = phase_start + phase.steps
        if counters["step"] >= phase_end:
            phase_start = phase_end
            continue
        if model.cfg.n_layers < phase.depth:
            model.append_blocks(phase.depth - model.cfg.n_layers, prof.student.new_block_init,
                                generator=_grow_generator(spec.seed, phase.index))
            model.to(device)
        set_trainable(model, phase)
        optimizer = make_optimizer(model, tp, optimizer)
        if state is not None and counters["step"] > phase_start:
            optimizer.load_state_dict(state["optimizer"])
        state = None
        trainable = [p for p in model.parameters() if p.requires_grad]

        while counters["step"] < phase_end:
            step = counters["step"]
            t0 = time.perf_counter()
            lr = lr_at(step, phases, tp)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = batches(step)
            with _autocast(device, dtype):  # the head's matmuls too; the loss math itself runs in float32
                hidden = model.hidden(batch["tokens"])
                loss, stats = distill.distill_loss_chunked(hidden.flatten(0, 1), model.head_weight,
                                                           distill.flatten_batch(batch), prof.distill)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(trainable, tp.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            counters["step"] += 1
            counters["tokens"] += tokens_per_step
            counters["active_layer_tokens"] += tokens_per_step * phase.depth
            counters["trainable_layer_tokens"] += tokens_per_step * (phase.depth - phase.first_trainable_block)
            step_s = time.perf_counter() - t0
            log.write({"kind": "train", "step": counters["step"], "phase": phase.index, "depth": phase.depth,
                       "lr": lr, "loss": loss.item(), **{k: float(v) for k, v in stats.items()},
                       "grad_norm": float(grad_norm), "tokens": counters["tokens"],
                       "active_layer_tokens": counters["active_layer_tokens"], "tok_s": tokens_per_step / step_s})
            bar.update(1)
            bar.set_postfix(phase=phase.index, depth=phase.depth, loss=f"{loss.item():.3f}",
                            tok_s=f"{tokens_per_step / step_s:.0f}")
            at_phase_end = counters["step"] == phase_end
            if at_phase_end or counters["step"] % tp.eval_every == 0:
                n = val_rows if at_phase_end else eval_rows
                metrics = evaluate(model, cache.val, n, tp.batch_size, device, dtype, vocab)
                record = {"kind": "phase_end" if at_phase_end else "eval", "step": counters["step"],
                          "phase": phase.index, "depth": phase.depth, "tokens": counters["tokens"],
                          "active_layer_tokens": counters["active_layer_tokens"], **metrics}
                log.write(record)
                if at_phase_end:
                    counters["phases"].append({k: record[k] for k in ("phase", "depth", "step", "tokens",
                                               "active_layer_tokens", "val_ce", "val_kd_ce")}
                                              | {"trainable_layer_tokens": counters["trainable_layer_tokens"]})
                    save_student(ckpt_dir / f"phase{phase.index}_depth{phase.depth}.pt", model,
                                 {"step": counters["step"], "phase": phase.index, "run": spec.run_name,
                                  "vocab": vocab.to_json()})
            if at_phase_end or counters["step"] % tp.checkpoint_every == 0:
                counters["wall_s"] = wall_before + time.perf_counter() - session_start
                counters["metrics_lines"] = log.lines
                save_student(last_path, model, {"optimizer": optimizer.state_dict(), "counters": counters,
                                                "vocab": vocab.to_json()})
        phase_start = phase_end
    bar.close()

    final_phase = counters["phases"][-1]
    final = ckpt_dir / f"phase{final_phase['phase']}_depth{final_phase['depth']}.pt"
    if (ckpt_dir / "final.pt").exists():
        os.remove(ckpt_dir / "final.pt")
    os.link(final, ckpt_dir / "final.pt")
    summary = {"run_name": spec.run_name, "profile": prof.name, "norm": spec.norm, "schedule": spec.schedule,
               "freeze_prefix": spec.freeze_prefix, "match_active_layer_tokens": spec.match_active_layer_tokens,
               "seed": spec.seed, "teacher_key": cache.key, "depth": final_phase["depth"],
               "val_ce": final_phase["val_ce"], "val_kd_ce": final_phase["val_kd_ce"],
               "tokens": counters["tokens"], "active_layer_tokens": counters["active_layer_tokens"],
               "trainable_layer_tokens": counters["trainable_layer_tokens"], "steps": counters["step"],
               "wall_s": counters["wall_s"], "train_tok_s": counters["tokens"] / max(counters["wall_s"], 1e-9),
               "n_params": sum(p.numel() for p in model.parameters()), "device": str(device), "dtype": str(dtype),
               "vocab": {"mode": prof.student.vocab, "size": vocab.size,
                         "teacher_mass_outside": vocab.outside_mass(cache.val, loss_mask_np(cache.val.doc_start))},
               "phases": counters["phases"]}
    atomic_write_json(run_dir / "summary.json", summary)
    os.remove(last_path)  # optimiser state is only needed to resume; the phase checkpoints stay
    return summary
