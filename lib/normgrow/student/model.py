"""The student: a Qwen3-style decoder whose norm placement is a parameter and whose depth can grow.

Architecture (each choice follows transformers' Qwen3 so a pre-norm student exports to Qwen3ForCausalLM):
  - RMSNorm computed in float32, cast back to the input dtype, then multiplied by the gain (Qwen3RMSNorm).
  - Attention: grouped-query attention (n_kv_heads divides n_heads), q/k/v/o projections without bias,
    per-head RMSNorm over head_dim on queries and keys (q_norm, k_norm) applied BEFORE RoPE, RoPE with the
    rotate_half convention and the default rope type (inv_freq = theta^(-2i/head_dim)), causal scaled
    dot-product attention with scale 1/sqrt(head_dim). No dropout anywhere.
  - The attention kernel runs in float32 on CPU whatever the autocast dtype (q, k, v cast up, the output cast back):
    CPU kernels compute bf16 attention by converting inside the kernel, which made its backward twice as slow
    (docs/LOG.md); the projections around it stay in the autocast dtype. On CUDA it keeps the autocast dtype (flash
    attention).
  - MLP: SwiGLU, down_proj(silu(gate_proj(x)) * up_proj(x)).
  - Head: tied to the embedding matrix (tie_embeddings) or a separate bias-free linear layer.

Norm placement (cfg.norm), the variable of the study: one class each in placements.py (PLACEMENTS), which says
where a block's RMSNorms sit, which norms it has, whether the stack has a final norm before the head, any init
scaling and whether the student exports to Qwen3. The study's two:
  pre   h = h + attn(attn_norm(h)); h = h + mlp(mlp_norm(h)); a final norm before the head (Qwen3).
  post  h = attn_norm(h + attn(h)); h = mlp_norm(h + mlp(h)); NO separate final norm (classical post-LN).
They have exactly the same parameters except the final norm (pre only). The others (mix, peri, deepnorm, lns) are
defined, with their sources, in placements.py; depth-dependent ones read cfg.placement_depth, the run's final depth.

Initialisation: every linear and embedding weight ~ N(0, init_std) (transformers' initializer_range; no
depth-dependent rescaling except where a placement defines one (DeepNorm's beta), so pre and post start from the
same distribution and an appended block is initialised exactly like a block present from step 0); norm gains are 1.
Under student.parametrization mup a block's projections start at init_std / sqrt(d_model / base_width) and the head
reads the final hidden state times base_width / d_model (parametrization.py).

Growth: append_blocks() stacks new blocks on top of the trained prefix, under the final norm and the head, so each
new block receives the prefix's boundary representation h_N. How a new block is initialised is a growth operator
(growth_ops.py, GROWTH_OPS: random, copy_last, zero_out, gated), which also says under which placements the grown
model computes exactly the prefix's function.

Parameter names map to transformers' Qwen3 as follows for a placement that exports to it (pre; see export.py):
  embed_tokens.weight                 model.embed_tokens.weight
  blocks.{i}.self_attn.{q,k,v,o}_proj model.layers.{i}.self_attn.{q,k,v,o}_proj
  blocks.{i}.self_attn.{q,k}_norm     model.layers.{i}.self_attn.{q,k}_norm
  blocks.{i}.attn_norm                model.layers.{i}.input_layernorm
  blocks.{i}.mlp_norm                 model.layers.{i}.post_attention_layernorm
  blocks.{i}.mlp.{gate,up,down}_proj  model.layers.{i}.mlp.{gate,up,down}_proj
  norm (placements with a final norm) model.norm
  lm_head (untied only)               lm_head
The norms are named after the sublayer they belong to rather than HF's names, because under post-norm the
attention norm is applied after the attention, not at the block input. Peri-LN's output norms are
blocks.{i}.{attn,mlp}_out_norm.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .growth_ops import GROWTH_OPS
from .parametrization import PARAMETRIZATIONS, hidden_init_std, output_mult
from .placements import PLACEMENTS
from ..schema import POSITIVE, UNIT_INTERVAL, Bool, Float, Int, Str, Tuple, in_range, one_of, section
from ..utils import disk_full_errors

NORMS = tuple(PLACEMENTS)
BOUNDARY_OPS = ("none", "normalize", "scale")
BOUNDARY_READS = {"scale": ("student.boundary_scale",)}
"""Profile keys only a boundary operation reads (train.spec.unread_keys records them at their defaults elsewhere)."""


@section
class ModelParams:
    """The model's part of a profile's student section (config.StudentParams extends it with the keys the training
    loop reads). Declared here, once, with each key's schema (schema.py): StudentConfig extends it with what a
    run decides, so the model reads these fields under the names the profile gives them."""
    d_model: Annotated[Int, POSITIVE] = 128
    n_heads: Annotated[Int, POSITIVE] = 4
    n_kv_heads: Annotated[Int, POSITIVE] = 2
    head_dim: Annotated[Int, POSITIVE] = 32
    d_ff: Annotated[Int, POSITIVE] = 384
    tie_embeddings: Bool = True
    rope_theta: Annotated[Float, POSITIVE] = 10000.0
    rms_eps: Annotated[Float, POSITIVE] = 1e-6
    init_std: Annotated[Float, POSITIVE] = 0.02
    # norm mix (Mix-LN): post-norm in the first floor(mix_alpha * final depth) blocks
    mix_alpha: Annotated[Float, UNIT_INTERVAL] = 0.25
    # How init, lrs and the head's scale follow width (parametrization.py): standard | mup. Under mup, init_std and
    # the arms' lrs are those of a student of width base_width (the width they were tuned at), and d_model may differ.
    parametrization: Annotated[Str, one_of(PARAMETRIZATIONS)] = "standard"
    base_width: Annotated[Int, POSITIVE] = 64
    # The boundary intervention: a fixed operation on the residual stream where a grown run's new blocks attach (the
    # depths of train.stages but the last), in every schedule alike, once a block sits above it: none | normalize
    # (to unit RMS, no gain) | scale (times boundary_scale[i] at the i-th of those depths). Does the scale that new
    # blocks read cause the grow gap? (BOUNDARY_OPS)
    boundary: Annotated[Str, one_of(BOUNDARY_OPS)] = "none"
    boundary_scale: Annotated[Tuple, in_range("a list of positive factors, one per boundary depth", lambda v: all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in v))] = ()


@dataclass(frozen=True, kw_only=True)
class StudentConfig(ModelParams):
    """A student: the model's part of the profile's student section (ModelParams) plus what the run decides.
    Frozen: a grown model gets a new config (Student.append_blocks), so no caller's config changes under it."""
    vocab_size: int
    n_layers: int
    norm: str = "pre"  # a name of placements.PLACEMENTS (NORMS)
    max_seq_len: int = 4096
    # The depth a depth-dependent placement refers to (Mix-LN's L, DeepNorm's N): the run's final depth
    # (train.stages[-1], set by train.start_run) for every schedule, so a grown student's blocks are those of its
    # joint counterpart (placements.py). None: n_layers.
    placement_depth: int | None = None
    # The depths where a grown run's new blocks attach (train.stages but the last, set by train.start_run for every
    # schedule): where cfg.boundary acts.
    boundary_depths: tuple = ()

    def __post_init__(self):
        if self.norm not in NORMS:
            raise ValueError(f"StudentConfig.norm={self.norm!r} is not supported; allowed values: {', '.join(NORMS)}")
        if not 0 <= self.mix_alpha <= 1:
            raise ValueError(f"StudentConfig.mix_alpha={self.mix_alpha!r} must be in [0, 1]")
        if self.placement_depth is None:
            object.__setattr__(self, "placement_depth", self.n_layers)
        if self.placement_depth < 1:
            raise ValueError(f"StudentConfig.placement_depth={self.placement_depth!r} must be >= 1")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"StudentConfig.n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"StudentConfig.head_dim={self.head_dim} must be even (RoPE rotates pairs)")
        if self.boundary not in BOUNDARY_OPS:
            raise ValueError(f"StudentConfig.boundary={self.boundary!r}; allowed values: {', '.join(BOUNDARY_OPS)}")
        if self.boundary == "scale" and len(self.boundary_scale) != len(self.boundary_depths):
            raise ValueError(f"StudentConfig.boundary_scale={list(self.boundary_scale)!r} needs one factor per "
                             f"boundary depth {list(self.boundary_depths)!r}")
        if self.parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"StudentConfig.parametrization={self.parametrization!r}; allowed values: "
                             f"{', '.join(PARAMETRIZATIONS)}")

    @classmethod
    def from_params(cls, student: ModelParams, **fields_from_run) -> "StudentConfig":
        """The config of a profile's student section (its ModelParams fields) plus what the run decides
        (vocab_size, n_layers, norm, max_seq_len, ...)."""
        return cls(**{f.name: getattr(student, f.name) for f in dataclasses.fields(ModelParams)} | fields_from_run)

    @classmethod
    def from_saved(cls, saved: dict) -> "StudentConfig":
        """The config a checkpoint saved; one saved before ModelParams left out the section's training keys
        (new_block_init, gate_ramp_steps, vocab) holds those too, and they are dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


class RMSNorm(nn.Module):
    """transformers' Qwen3RMSNorm: normalise in float32, cast back, multiply by the gain."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Default RoPE: cos/sin [T, head_dim] in float32 for positions 0..T-1 (frequencies duplicated per half)."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seq_len: int) -> tuple[Tensor, Tensor]:
        freqs = torch.arange(seq_len, device=self.inv_freq.device).float()[:, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """x [B, H, T, head_dim]; rope = (cos, sin) [T, head_dim]."""
    cos, sin = (t.to(x.dtype) for t in rope)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: StudentConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        dtype = q.dtype
        if x.device.type == "cpu":  # module docstring; autocast would cast it back down
            with torch.autocast("cpu", enabled=False):
                y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True,
                                                   scale=self.head_dim ** -0.5,
                                                   enable_gqa=self.n_kv_heads != self.n_heads).to(dtype)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.head_dim ** -0.5,
                                               enable_gqa=self.n_kv_heads != self.n_heads)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: StudentConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """One decoder block at layer `index`: its placement (placements.py, cfg.norm) says which norms it holds and how
    it combines them with its sublayers."""

    def __init__(self, cfg: StudentConfig, index: int):
        super().__init__()
        self.placement = PLACEMENTS[cfg.norm](cfg, index)
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        for name in self.placement.norms:
            setattr(self, name, RMSNorm(cfg.d_model, cfg.rms_eps))
        # growth_ops.Gated's mask m while the block is being grown in (output h + m * (block(h) - h)); None otherwise.
        # Non-persistent: never in a checkpoint, set from the step by train.train_phase.
        self.register_buffer("gate", None, persistent=False)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], return_residual_sum: bool = False):
        """Block output; with return_residual_sum, (output, residual sum before the output norm): the output itself
        when the placement has no output norm. The gate, when set, applies to the output only."""
        out, residual_sum = self.placement.forward(self, x, rope)
        if self.gate is not None:
            out = x + self.gate * (out - x)
        return (out, residual_sum) if return_residual_sum else out


def init_weights(module: nn.Module, cfg: StudentConfig, generator: torch.Generator | None = None) -> None:
    """Every linear and embedding weight below module ~ N(0, std), in module order: cfg.init_std for the embedding
    and an untied head, parametrization.hidden_init_std for a block's projections (the same under standard); norm
    gains 1."""
    hidden_std = hidden_init_std(cfg)
    for name, m in module.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            std = cfg.init_std if isinstance(m, nn.Embedding) or name == "lm_head" else hidden_std
            with torch.no_grad():
                m.weight.normal_(0.0, std, generator=generator)
        elif isinstance(m, RMSNorm):
            nn.init.ones_(m.weight)


class Student(nn.Module):
    def __init__(self, cfg: StudentConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(self.cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.rms_eps) if PLACEMENTS[cfg.norm].final_norm else nn.Identity()
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)
        init_weights(self, cfg)
        for block in self.blocks:
            block.placement.init_block(block)

    @property
    def head_weight(self) -> Tensor:
        """[V, d]: the embedding matrix when tied."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def boundaries(self, idx: Tensor, residual_sums: bool = False):
        """Residual stream at every block boundary: [h_0 = embeddings, h_1, ..., h_N], each [B, T, d]. With
        residual_sums, (boundaries, [s_0, ..., s_{N-1}]): also each block's residual sum before its output norm
        (what post-norm normalises; the diagnostics measure it)."""
        T = idx.shape[1]
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len={self.cfg.max_seq_len}")
        rope = self.rope(T)
        hs, sums = [self.embed_tokens(idx)], []
        for i, block in enumerate(self.blocks):
            if i in self.cfg.boundary_depths and self.cfg.boundary != "none":  # h_i as the blocks above read it
                hs[-1] = self.at_boundary(hs[-1], self.cfg.boundary_depths.index(i))
            out = block(hs[-1], rope, return_residual_sum=residual_sums)
            if residual_sums:
                out, s = out
                sums.append(s)
            hs.append(out)
        return (hs, sums) if residual_sums else hs

    def at_boundary(self, h: Tensor, k: int) -> Tensor:
        """cfg.boundary at the k-th boundary depth: h at unit RMS per position (in float32, as RMSNorm, without a
        gain), or h times boundary_scale[k]."""
        if self.cfg.boundary == "normalize":
            h32 = h.float()
            return (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + self.cfg.rms_eps)).to(h.dtype)
        return h * self.cfg.boundary_scale[k]

    def hidden(self, idx: Tensor) -> Tensor:
        """[B, T, d]: the final hidden state the head consumes (the final norm of h_N, or h_N itself when the
        placement has none), times the parametrization's output multiplier (1 under standard and at the base
        width, where no multiplication runs)."""
        h = self.norm(self.boundaries(idx)[-1])
        mult = output_mult(self.cfg)
        return h if mult == 1.0 else h * mult

    def forward(self, idx: Tensor) -> Tensor:
        """Logits [B, T, V]."""
        return F.linear(self.hidden(idx), self.head_weight)

    def fresh_block(self, generator: torch.Generator | None = None) -> Block:
        """A new block for layer len(self.blocks), initialised like a block present from step 0 (init_weights from
        generator, then its placement's init scaling); growth operators start from it."""
        block = Block(self.cfg, len(self.blocks))
        init_weights(block, self.cfg, generator)
        block.placement.init_block(block)
        return block

    def append_blocks(self, n: int, init: str = "random", generator: torch.Generator | None = None) -> None:
        """Stack n new blocks on top (under the final norm and head), each from the growth operator `init`."""
        if init not in GROWTH_OPS:
            raise ValueError(f"append_blocks init={init!r}; allowed values: {', '.join(GROWTH_OPS)}")
        ref = self.embed_tokens.weight
        for _ in range(n):
            block = GROWTH_OPS[init].new_block(self, generator)
            self.blocks.append(block.to(device=ref.device, dtype=ref.dtype))
        self.cfg = dataclasses.replace(self.cfg, n_layers=len(self.blocks))


def save_student(path, model: Student, extra: dict | None = None) -> None:
    """torch.save({"config", "model", **extra}) atomically (temporary file, then os.replace). A failed write leaves
    no temporary file; a full disk says so and names the file (utils.disk_full_errors)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with disk_full_errors(path):
            torch.save({"config": asdict(model.cfg), "model": model.state_dict(), **(extra or {})}, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def resolve_checkpoint(path) -> Path:
    """A .pt file, a run dir (checkpoints/final.pt) or a normgrow export dir (student.pt)."""
    path = Path(path)
    if path.is_dir():
        for candidate in (path / "checkpoints" / "final.pt", path / "student.pt"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{path} holds neither checkpoints/final.pt (a run dir) nor student.pt (an export)")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return path


def load_checkpoint(path, map_location="cpu") -> tuple[Student, dict]:
    """(student, extra): the model saved by save_student and the extra entries saved with it."""
    ckpt = torch.load(resolve_checkpoint(path), map_location=map_location, weights_only=True)
    model = Student(StudentConfig.from_saved(ckpt.pop("config")))
    model.load_state_dict(ckpt.pop("model"))
    return model, ckpt


def load_student(path, map_location="cpu") -> Student:
    return load_checkpoint(path, map_location)[0]
