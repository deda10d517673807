"""The residual stream's scale at every block boundary h_0 .. h_N of a student, per token group: what a run records at
each evaluation (rundir.BOUNDARY, under the run's autocast) and the ``boundaries`` entry of the diagnostics of a
checkpoint (analysis/diagnostics.py)."""
from __future__ import annotations

import torch
from torch import Tensor

from .model import Student


@torch.no_grad()
def boundary_rms(model: Student, tokens: Tensor, masks: dict[str, Tensor]) -> dict[str, list]:
    """{group: [rms of h_0, ..., h_N]} of the model on tokens (in its own vocabulary), sqrt(mean h^2) over the
    group's positions (masks: bool [B, L] per group) and all channels, in float64; None for a group without
    positions. In whatever precision the caller runs the model."""
    mean_squares = [h.double().pow(2).mean(-1) for h in model.boundaries(tokens)]
    return {g: [float(ms[m].double().mean().sqrt()) if bool(m.any()) else None for ms in mean_squares]
            for g, m in masks.items()}
