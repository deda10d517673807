"""Norm placements: where a block's RMSNorms sit relative to its sublayers and its residual sum.

A placement is one class here, registered once in PLACEMENTS under its name (the ``norm`` parameter of a run,
StudentConfig.norm). Each block builds its own instance, ``PLACEMENTS[cfg.norm](cfg, index)``, because some
placements depend on the layer index (Mix-LN, LayerNorm-Scaling) or on the depth (DeepNorm). A class declares:

  norms            the RMSNorms a block holds, created in this order after its attention and MLP (model.Block);
                   their names are parameter names (blocks.{i}.<name>.weight)
  forward          (output, residual sum): the block's output from its input, and the residual sum before its
                   output norm (the output itself when there is none; the diagnostics read it)
  output_norm      whether the block's output is an RMSNorm's output (the diagnostics compare the residual sum then)
  final_norm       whether the stack has an RMSNorm before the head (model.Student.norm)
  init_block       a scaling of a freshly initialised block's weights, applied after model.init_weights
  exports_to_qwen3 whether a student maps one to one onto transformers' Qwen3ForCausalLM (export.py); every
                   other placement is exported as a normgrow checkpoint
  label            its display name (its colour is viz.palette's)

Depth-dependent placements read ``cfg.placement_depth``, the depth the definition refers to: the run's final depth
(train.stages[-1], set by train.start_run) for every schedule, so a grown student's blocks get exactly the placement
its joint counterpart has, and a single-schedule student (the grown run's first-stage prefix trained alone) gets
the prefix's. With the depth at build time a grown student's prefix and its appended blocks would get different
constants, and it would not be an instance of the placement at its final depth.

pre and post are the study's two placements; their computations, parameters and names are those of the string
branches they replace (tests/test_placements.py pins them bit for bit).
"""
from __future__ import annotations

import math

from torch import Tensor

PLACEMENTS: dict[str, type["Placement"]] = {}


def register(cls: type["Placement"]) -> type["Placement"]:
    """Class decorator: add a placement to PLACEMENTS under cls.name (once)."""
    if cls.name in PLACEMENTS:
        raise ValueError(f"placement {cls.name!r} is registered twice")
    PLACEMENTS[cls.name] = cls
    return cls


class Placement:
    """The interface (module docstring); a subclass sets name, label and forward."""
    name: str
    label: str
    norms: tuple[str, ...] = ("attn_norm", "mlp_norm")
    output_norm: bool = False
    final_norm: bool = True
    exports_to_qwen3: bool = False
    reads: tuple[str, ...] = ()  # profile keys only this placement reads (spec.run_profile records them only here)

    def __init__(self, cfg, index: int):
        """A block's constants from the config and its 0-based layer index; none by default."""

    def forward(self, block, x: Tensor, rope) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def init_block(self, block) -> None:
        """No rescaling: the block keeps init_weights' N(0, init_std) (model.py, Initialisation)."""


@register
class Pre(Placement):
    """Pre-norm (GPT-2, Radford et al. 2019; analysed by Xiong et al. 2020; Llama, Qwen3):
    h = h + attn(attn_norm(h)); h = h + mlp(mlp_norm(h)), and a final norm before the head. The residual stream is
    never normalised, so its scale can drift with depth."""
    name, label = "pre", "pre-norm"
    exports_to_qwen3 = True

    def forward(self, block, x, rope):
        h = x + block.self_attn(block.attn_norm(x), rope)
        out = h + block.mlp(block.mlp_norm(h))
        return out, out


@register
class Post(Placement):
    """Post-norm (Vaswani et al. 2017): h = attn_norm(h + attn(h)); h = mlp_norm(h + mlp(h)), and no separate final
    norm: the last block's output norm already feeds the head. Every block boundary is an RMSNorm output, so its
    scale is pinned by the gains."""
    name, label = "post", "post-norm"
    output_norm = True
    final_norm = False

    def forward(self, block, x, rope):
        h = block.attn_norm(x + block.self_attn(x, rope))
        residual_sum = h + block.mlp(h)
        return block.mlp_norm(residual_sum), residual_sum


@register
class Mix(Placement):
    """Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and Post-LN"):
    post-norm in the first floor(alpha * L) blocks, pre-norm above, alpha = cfg.mix_alpha (student.mix_alpha; the
    paper's default 0.25) and L = cfg.placement_depth (the module docstring: the run's final depth). The top blocks
    are pre-norm, so the stack has a final norm before the head. A block appended by growth sits at index >= the
    first stage's depth, so it is pre-norm whenever the first stage holds the post-norm blocks
    (floor(alpha * L) <= train.stages[0]: every profile here); otherwise it is the post-norm block its joint
    counterpart has at that index."""
    name, label = "mix", "Mix-LN"
    reads = ("student.mix_alpha",)

    def __init__(self, cfg, index):
        super().__init__(cfg, index)
        self.inner = (Post if index < math.floor(cfg.mix_alpha * cfg.placement_depth) else Pre)(cfg, index)
        self.output_norm = self.inner.output_norm

    def forward(self, block, x, rope):
        return self.inner.forward(block, x, rope)


@register
class Peri(Placement):
    """Peri-LN (Kim et al. 2025, "Peri-LN: Revisiting Layer Normalization in the Transformer Architecture"; the
    sandwich norm of Gemma 2 and 3, Gemma Team 2024): each sublayer F is wrapped as x + out_norm(F(in_norm(x))), the
    residual stream is not normalised, and a final norm feeds the head. The output norms are two extra RMSNorms per
    block (attn_out_norm, mlp_out_norm). RMSNorm maps 0 to 0, so a block whose output projections are zero is still
    an identity (growth_ops.ZeroOut)."""
    name, label = "peri", "Peri-LN"
    norms = ("attn_norm", "mlp_norm", "attn_out_norm", "mlp_out_norm")

    def forward(self, block, x, rope):
        h = x + block.attn_out_norm(block.self_attn(block.attn_norm(x), rope))
        out = h + block.mlp_out_norm(block.mlp(block.mlp_norm(h)))
        return out, out


@register
class DeepNorm(Placement):
    """DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers"): post-norm with the residual
    up-weighted, h = attn_norm(alpha * h + attn(h)); h = mlp_norm(alpha * h + mlp(h)), and the value, output and
    feed-forward projections (v_proj, o_proj, gate_proj, up_proj, down_proj) initialised scaled by beta. The
    decoder-only constants of the paper (its Table 1): alpha = (2N)^(1/4), beta = (8N)^(-1/4), N = the number of
    blocks, here cfg.placement_depth (the module docstring: the run's final depth). As for post-norm, no final
    norm."""
    name, label = "deepnorm", "DeepNorm"
    output_norm = True
    final_norm = False
    SCALED = ("self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")

    def __init__(self, cfg, index):
        super().__init__(cfg, index)
        self.alpha = (2 * cfg.placement_depth) ** 0.25
        self.beta = (8 * cfg.placement_depth) ** -0.25

    def forward(self, block, x, rope):
        h = block.attn_norm(self.alpha * x + block.self_attn(x, rope))
        residual_sum = self.alpha * h + block.mlp(h)
        return block.mlp_norm(residual_sum), residual_sum

    def init_block(self, block):
        """The paper's beta on the v/o/FFN projections (its Xavier gain; here a factor on N(0, init_std))."""
        for name in self.SCALED:
            block.get_submodule(name).weight.data.mul_(self.beta)


@register
class LNS(Placement):
    """LayerNorm-Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models"): pre-norm whose norm
    outputs in block l (1-based) are scaled by 1/sqrt(l), h = h + attn(attn_norm(h) / sqrt(l)); h = h +
    mlp(mlp_norm(h) / sqrt(l)), with a final norm. It damps the growth of the output variance with depth that
    leaves deep pre-norm blocks close to identities. The scale is the block's own, so an appended block gets its
    layer's."""
    name, label = "lns", "LayerNorm-Scaling"

    def __init__(self, cfg, index):
        super().__init__(cfg, index)
        self.scale = 1 / math.sqrt(index + 1)

    def forward(self, block, x, rope):
        h = x + block.self_attn(block.attn_norm(x) * self.scale, rope)
        out = h + block.mlp(block.mlp_norm(h) * self.scale)
        return out, out
