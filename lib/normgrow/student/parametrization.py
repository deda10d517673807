"""Width parametrizations: how a student's initialisation, its AdamW learning rates and its output scale follow its
width, so that an lr tuned at one width (student.base_width) holds at another (student.parametrization).

  standard  every weight ~ N(0, init_std), every parameter at the arm's lr: what the study was tuned under.
  mup       muP for Adam (Yang et al. 2022, Tensor Programs V, Table 3; the mup package's MuAdamW and
            MuSharedReadout), with m = d_model / base_width:
              hidden matrices (every block's projections, both dimensions grow with width): init variance
                init_std^2 / m, lr / m, weight decay x m (so lr x weight decay, AdamW's per-step decay, stays put:
                MuAdamW without decoupled_wd);
              embedding (and an untied head), norm gains: init and lr as at the base width;
              the head reads the final hidden state times 1 / m (MuReadout; with tied embeddings the one matrix is
                the input weights and the readout, as MuSharedReadout).
            head_dim stays fixed as width grows (more heads), so attention's 1/sqrt(head_dim) does not move.
            Width only: a depth parametrization (CompleteP, u-muP) ties residual multipliers to the total depth,
            which growth changes. At the base width every factor is exactly 1.0, so a muP student there computes
            today's standard student bit for bit (tests/test_parametrization.py).

The factors live here alone: the model reads hidden_init_std and output_mult, the optimiser hidden_lr_scale.
"""
from __future__ import annotations

import math

PARAMETRIZATIONS = ("standard", "mup")
READS = {"mup": ("student.base_width",)}
"""Profile keys only a parametrization reads (train.spec.unread_keys records them at their defaults elsewhere)."""


def width_mult(cfg) -> float:
    """m = d_model / base_width under mup; 1.0 under standard."""
    if cfg.parametrization == "standard":
        return 1.0
    return cfg.d_model / cfg.base_width


def hidden_init_std(cfg) -> float:
    """The init std of a block's projection matrices: init_std / sqrt(m)."""
    m = width_mult(cfg)
    return cfg.init_std if m == 1.0 else cfg.init_std / math.sqrt(m)


def output_mult(cfg) -> float:
    """What the head's input is multiplied by: 1 / m."""
    return 1.0 / width_mult(cfg)


def hidden_lr_scale(cfg) -> float:
    """The lr (and inverse weight-decay) factor of a block's projection matrices: 1 / m."""
    return 1.0 / width_mult(cfg)


def is_hidden_matrix(name: str, ndim: int) -> bool:
    """A parameter whose both dimensions grow with width: a block's projection (blocks.{i}.*.weight, a matrix)."""
    return name.startswith("blocks.") and ndim >= 2
