"""One optimiser step, read top to bottom in train_step: the run loop's (run.py) and the bench's (bench.py).

    set the lr -> forward under autocast (the student's blocks, then the fused distillation head) -> backward ->
    clip -> the global batch's means (summed across ranks) -> finite check -> AdamW step

What a phase's steps share (the forward, the optimiser, the parameters it trains, the ranks) is a StepSetup, built
once per phase by the loop: growth appends blocks and freezing changes what trains, so both change only there.

Compilation (train.compile, auto = on for CUDA and for bf16 on CPU): torch.compile of each block (compile_blocks: one
graph shared by the blocks and the depths of a run), done when a run starts and right after each growth. On CUDA the
evaluations go through the compiled blocks too (a no-grad graph of their own); on CPU they run the blocks eager
(evaluate.eval_stance). The fused distillation head stays eager: it is a custom autograd function with hand-written
gradients and reused buffers, and compiled it was 2x slower on CPU (docs/LOG.md). Compiled code is kept in a
persistent inductor cache (INDUCTOR_CACHE), so only a machine's first run pays the cold compilation.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import distill
from .evaluate import autocast
from ..ranks import Ranks
from ..student.model import Student

INDUCTOR_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "normgrow" / "inductor"
"""Where compiled kernels are kept across processes and reboots (torch's default lies under /tmp) unless
TORCHINDUCTOR_CACHE_DIR says otherwise: a per-user cache outside outputs/, because it depends on the machine and the
torch build, not on a study, and every outputs folder of a machine (tests' included) shares it."""


def compile_enabled(setting: str, device: torch.device, dtype: torch.dtype) -> bool:
    """train.compile resolved: on / off as given; auto compiles on CUDA, and on CPU where the run computes in
    bfloat16: measured per CPU kind (docs/LOG.md), compiling pays in bf16 (AMX, AVX512-BF16) and not in float32, so a
    float32 CPU run stays eager; other devices (mps) stay eager."""
    if setting != "auto":
        return setting == "on"
    return device.type == "cuda" or (device.type == "cpu" and dtype == torch.bfloat16)


def compile_blocks(model: Student) -> None:
    """torch.compile each block of the student in place (regional compilation; the embedding, the final norm and
    the fused head stay eager). Blocks of one placement share their code and dynamo takes a block's parameters as
    inputs, so one graph serves every block, every depth of a grown run and, from the inductor cache, every later
    run: a cpu run's first step compiles for 4 s (warm cache; 10-20 s cold), where compiling the whole body took
    10-26 s per depth, warm. Evaluations on CUDA go through the same blocks (a no-grad graph of their own). Blocks
    already compiled are left as they are, so a phase compiles only what growth appended. A placement whose blocks
    differ in a constant may need a graph per block, so the recompile limit is raised to 4 per block."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4 * len(model.blocks))
    for block in model.blocks:
        if getattr(block, "_compiled_call_impl", None) is None:
            block.compile()


class DistillStep(nn.Module):
    """The training forward: the student's body (its blocks compiled or not, compile_blocks) and the fused
    distillation head, as one module so that DistributedDataParallel wraps every use of the parameters (the tied
    head included) in its forward. Returns the batch's mean loss and the head's statistics."""

    def __init__(self, model: Student, params, compiled: bool):
        super().__init__()
        self.model, self.params = model, params
        if compiled:
            compile_blocks(model)

    def forward(self, batch: dict) -> tuple[torch.Tensor, dict]:
        hidden = self.model.hidden(batch["tokens"])
        return distill.distill_loss_chunked(hidden.flatten(0, 1), self.model.head_weight, distill.flatten_batch(batch),
                                            self.params)


class NonFiniteStep(ArithmeticError):
    """A step whose loss or gradient norm is NaN or infinite, raised before any parameter moves; values: both. The
    loop, which knows the run and the batch's rows, turns it into the run's error (run.check_finite)."""

    def __init__(self, values: dict):
        super().__init__(", ".join(f"{k}={v}" for k, v in values.items()))
        self.values = values


@dataclass
class StepSetup:
    """What the steps of a phase share."""
    forward: nn.Module  # DistillStep, wrapped in DDP under data parallelism
    optimizer: torch.optim.Optimizer
    trainable: list  # the parameters the optimiser moves (the phase's unfrozen ones): the clip's norm is theirs
    grad_clip: float
    device: torch.device
    dtype: torch.dtype
    ranks: Ranks = Ranks()
    accelerator: object = None  # accelerate.Accelerator of a data-parallel run: its backward


def train_step(setup: StepSetup, batch: dict, lr: float, global_positions: int) -> tuple[dict, float]:
    """One optimiser step at lr on this rank's rows of the global batch, whose loss-mask positions number
    global_positions. Returns the global batch's means (loss and the head's statistics) and the gradient norm before
    clipping.

    A rank differentiates its mean loss times N x its positions / the global positions (exactly 1.0 in one process),
    so that DDP's average of the ranks' gradients is the gradient of the global batch's mean (ranks hold different
    numbers of positions). The finite check comes after the clip and before the optimiser step, so that a NaN never
    reaches the parameters (the run's last checkpoint stays a finite model)."""
    for group in setup.optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)  # optim.make_optimizer: muP's per-group factor
    with autocast(setup.device, setup.dtype):
        loss, stats = setup.forward(batch)
    positions = int(batch["mask"].sum())
    weighted = loss * (positions * setup.ranks.world / global_positions)
    if setup.accelerator is None:
        weighted.backward()
    else:
        setup.accelerator.backward(weighted)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(setup.trainable, setup.grad_clip))
    values = [loss.item(), *(float(v) for v in stats.values())]
    if setup.ranks.world > 1:  # means over the global batch: position-weighted sums over the ranks
        values = [v / global_positions for v in setup.ranks.sum([v * positions for v in values])]
    means = dict(zip(["loss", *stats], values))
    if not (math.isfinite(means["loss"]) and math.isfinite(grad_norm)):
        raise NonFiniteStep({"loss": means["loss"], "grad_norm": grad_norm})
    setup.optimizer.step()
    setup.optimizer.zero_grad(set_to_none=True)
    return means, grad_norm


def step_flops(cfg, batch: int, seq_len: int) -> dict:
    """Matmul FLOPs of one training step (forward x 3 for forward + backward).

    Forward, per token: 2 * in * out for every linear (q, k, v, o, gate, up, down per block, and the vocabulary head),
    plus attention's QK^T and AV, 2 * seq_len * head_dim * n_heads each per token per block (the full square, not
    halved for the causal mask). Norms, RoPE, softmax and the loss's elementwise work are not counted. The embedding
    lookup is not a matmul. The backward pass is counted as 2 x forward (input and weight gradients).
    tests/test_bench.py checks the count against torch's FlopCounterMode on a step. cfg: a StudentConfig.
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
