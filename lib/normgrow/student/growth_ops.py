"""Growth operators: how a block appended on top of a trained prefix is initialised (student.new_block_init).

An operator is one class here, registered once in GROWTH_OPS under its name. model.Student.append_blocks asks it for
each new block (``new_block(model, generator)``; the block is for layer len(model.blocks), and
``model.fresh_block`` is a block initialised like one present from step 0, its placement's init scaling included).
train.train_phase calls ``at_step`` with the blocks appended in the phase before every training step and every
evaluation (``step`` = the phase's updates the model has had after that step, so 0 just after growth), so an
operator whose blocks change over the phase computes them from the step alone and a resumed run computes the same.

``preserves`` names the placements (placements.PLACEMENTS) under which the grown model computes exactly the
prefix's function just after growth; tests/test_growth_ops.py checks every pair it names, and that zero_out does
not preserve it under post and deepnorm.
"""
from __future__ import annotations

import copy

import torch

from .placements import PLACEMENTS

GROWTH_OPS: dict[str, "GrowthOp"] = {}


def register(cls: type["GrowthOp"]) -> type["GrowthOp"]:
    """Class decorator: add an operator (an instance of cls) to GROWTH_OPS under cls.name (once)."""
    if cls.name in GROWTH_OPS:
        raise ValueError(f"growth operator {cls.name!r} is registered twice")
    GROWTH_OPS[cls.name] = cls()
    return cls


class GrowthOp:
    """The interface (module docstring); a subclass sets name, preserves and new_block."""
    name: str
    preserves: frozenset[str] = frozenset()
    reads: tuple[str, ...] = ()  # profile keys only this operator reads (spec.run_profile records them only here)

    def new_block(self, model, generator: torch.Generator | None):
        raise NotImplementedError

    def at_step(self, blocks, step: int, phase_steps: int, student) -> None:
        """Nothing changes over the phase: the block is an ordinary block from the start."""


@register
class Random(GrowthOp):
    """A fresh block (the ablation baseline): N(0, init_std) like a block present from step 0. It changes the
    function under every placement."""
    name = "random"

    def new_block(self, model, generator):
        return model.fresh_block(generator)


@register
class CopyLast(GrowthOp):
    """A deep copy of the last block (progressive stacking, Gong et al. 2019), with the placement of its own layer
    (Mix-LN and LayerNorm-Scaling depend on the index). Applying the last block twice changes the function."""
    name = "copy_last"

    def new_block(self, model, generator):
        if not len(model.blocks):
            raise ValueError("append_blocks init='copy_last' needs at least one existing block")
        block = copy.deepcopy(model.blocks[-1])
        block.placement = type(block.placement)(model.cfg, len(model.blocks))
        return block


@register
class ZeroOut(GrowthOp):
    """A fresh block with o_proj and down_proj zeroed (LLaMA Pro, Wu et al. 2024): both sublayers output 0, so a
    residual block whose sublayer outputs are added to an unnormalised stream is an identity: pre-norm,
    LayerNorm-Scaling and Peri-LN (RMSNorm(0) = 0), and Mix-LN, whose appended blocks are pre-norm (placements.Mix).
    Under post-norm and DeepNorm the block still normalises its input (RMSNorm(alpha * x + 0) is x only if x is
    already normalised with unit gains), so the function changes."""
    name = "zero_out"
    preserves = frozenset({"pre", "lns", "peri", "mix"})

    def new_block(self, model, generator):
        block = model.fresh_block(generator)
        torch.nn.init.zeros_(block.self_attn.o_proj.weight)
        torch.nn.init.zeros_(block.mlp.down_proj.weight)
        return block


@register
class Gated(GrowthOp):
    """MSG's mask (Yao et al. 2023, "Masked Structural Growth for 2x Faster Language Model Pre-training"): a fresh
    block whose output is h + m * (block(h) - h), m ramped linearly from 0 to 1 over student.gate_ramp_steps updates
    of the phase: m = min(1, step / R), R = min(gate_ramp_steps, the phase's steps), so that every phase ends with
    m = 1 and its checkpoint is an ordinary block (the gate is a non-persistent buffer, never saved). At m = 0 the
    block is an identity under every placement (x + 0 * (y - x) is x exactly); once m reaches 1 the gate is removed
    from the computation (model.Block.gate = None). MSG masks each new structure inside the layer; the block-level
    mask is its form for whole layers."""
    name = "gated"
    preserves = frozenset(PLACEMENTS)
    reads = ("student.gate_ramp_steps",)

    def new_block(self, model, generator):
        block = model.fresh_block(generator)
        block.gate = torch.zeros(())
        return block

    def at_step(self, blocks, step, phase_steps, student):
        m = min(1.0, step / min(student.gate_ramp_steps, phase_steps))
        for block in blocks:
            block.gate = None if m >= 1 else torch.tensor(m, device=block.self_attn.o_proj.weight.device)
