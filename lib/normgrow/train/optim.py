"""The optimiser of a run and its learning-rate schedules.

  - AdamW, weight decay on matrices only (not norm gains), the fused implementation (one kernel over all parameters);
    global-norm gradient clipping (the loop's step).
  - At each growth step the optimiser follows train.optimizer_on_grow: ``reset`` builds a fresh AdamW, as
    progressive stacking does (prts: a new optimiser, with a new warmup, after each stacking); ``keep`` carries the
    moments (exp_avg, exp_avg_sq, step) of parameters that already existed, as MSG (Yao et al. 2023) and staged
    training (Shen et al. 2022) do; new blocks start with empty state either way (tests/test_train.py pins both).
  - Learning rate (train.lr_schedule, one entry of LR_SCHEDULES each): linear warmup then cosine decay to
    lr * min_lr_ratio. ``per_stage`` restarts warmup + cosine at every phase (each phase is an optimisation problem
    of its own; with ``reset`` this is prts's recipe); ``global`` runs one schedule over all steps, growth or not
    (with ``keep`` this is staged training's: Shen et al. 2022 carry the whole training state, optimiser and
    schedule, across growth). MSG instead carries the moments and rewinds its schedule at growth to an earlier
    point; that rewind is not implemented: ``keep`` with ``per_stage`` restarts the schedule from its start (warmup
    included) rather than rewinding it part way. A new schedule is one function registered with @lr_schedule.
  - Freezing (freeze_prefix, growth.py): the prefix's blocks and a tied embedding stop training (set_trainable).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from ..student.model import Student
from ..student.parametrization import hidden_lr_scale, is_hidden_matrix
from .growth import Phase

LR_SCHEDULES: dict[str, Callable] = {}
"""train.lr_schedule's allowed values (its declaration in config.TrainParams reads them here): name -> f(step, phases, params) -> lr."""


def lr_schedule(name: str):
    """Register f(step, phases, params) -> the peak-relative lr of a step as the schedule ``name``."""
    def register(fn):
        LR_SCHEDULES[name] = fn
        return fn
    return register


def warmup_cosine(local: int, total: int, params) -> float:
    """Linear warmup over params.warmup_steps (at most total - 1), then cosine from params.lr to lr * min_lr_ratio
    at step ``local`` of ``total``."""
    warmup = min(params.warmup_steps, max(total - 1, 0))
    if local < warmup:
        return params.lr * (local + 1) / (warmup + 1)
    progress = (local - warmup) / max(total - warmup, 1)
    floor = params.lr * params.min_lr_ratio
    return floor + 0.5 * (params.lr - floor) * (1 + math.cos(math.pi * progress))


@lr_schedule("per_stage")
def per_stage(step: int, phases: list[Phase], params) -> float:
    """Warmup + cosine restarted at every phase."""
    start = 0
    for phase in phases:
        if step < start + phase.steps:
            break
        start += phase.steps
    return warmup_cosine(step - start, phase.steps, params)


@lr_schedule("global")
def global_schedule(step: int, phases: list[Phase], params) -> float:
    """One warmup + cosine over the whole run."""
    return warmup_cosine(step, sum(p.steps for p in phases), params)


def lr_at(step: int, phases: list[Phase], params) -> float:
    """The lr of a step under params.lr_schedule (LR_SCHEDULES)."""
    return LR_SCHEDULES[params.lr_schedule](step, phases, params)


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
    """AdamW over the trainable parameters (weight decay on matrices only), carrying `previous`'s state under
    optimizer_on_grow: keep. Each group's lr_scale multiplies the step's lr (train.step.train_step): 1 except for a
    muP student's block matrices away from its base width (parametrization.hidden_lr_scale). The fused kernel on CPU
    and CUDA: one kernel for all parameters instead of ~10 ops per tensor."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if p.ndim >= 2], "weight_decay": params.weight_decay, "lr_scale": 1.0},
              {"params": [p for n, p in named if p.ndim < 2], "weight_decay": 0.0, "lr_scale": 1.0}]
    cfg = getattr(model, "cfg", None)  # the bench also builds transformers' Qwen3 here: standard, no cfg
    scale = 1.0 if cfg is None else hidden_lr_scale(cfg)
    if scale != 1.0:  # muP away from its base width: the blocks' matrices get a group of their own
        hidden = [p for n, p in named if is_hidden_matrix(n, p.ndim)]
        groups[0]["params"] = [p for n, p in named if p.ndim >= 2 and not is_hidden_matrix(n, p.ndim)]
        groups.insert(0, {"params": hidden, "weight_decay": params.weight_decay / scale, "lr_scale": scale})
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    opt = torch.optim.AdamW(groups, lr=params.lr, betas=tuple(params.betas), fused=fused)
    if previous is not None and params.optimizer_on_grow == "keep":
        for _, p in named:
            if p in previous.state:
                opt.state[p] = previous.state[p]
    return opt
