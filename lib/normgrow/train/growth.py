"""Depth schedules: which depth trains for how many steps, and which blocks train.

Schedules (STUDY.md):
  joint   full depth (train.stages[-1]) from step 0, for the whole token budget sum(train.stage_tokens)
          (or, with match_active_layer_tokens, for the active-layer-token budget of another run).
  grow    one phase per stage: depth train.stages[i] for train.stage_tokens[i] tokens; new blocks are appended
          on top of the trained prefix, under the final norm and head.
  single  the first-stage prefix alone (depth train.stages[0]) for the same total token budget as joint and grow,
          so shallow-block quality is compared at equal data.

Accounting (exact integers):
  tokens per step          = batch_size * seq_len (every input position of every sequence)
  active layers of a step  = the blocks that run in the forward pass, i.e. the current depth. Frozen prefix blocks
                             are active (they compute the boundary representation) but not trainable; the frozen
                             count is recorded separately as trainable_layer_tokens.
  active_layer_tokens      = sum over steps of tokens_per_step * depth
A phase's token budget is whole steps (config refuses stage tokens that are not multiples of the tokens per step);
a matched run's active-layer-token budget is rounded to whole steps; the recorded tokens are what was trained.

freeze_prefix (grow only): in every phase after the first, the blocks that existed before the phase are frozen;
the appended blocks and the final norm train. With tied embeddings the embedding matrix is both the prefix's
input and the head: it stays frozen (otherwise the prefix's input would change). An untied head trains.
"""
from __future__ import annotations

from dataclasses import dataclass

SCHEDULES = ("joint", "grow", "single")
GROWS = ("grow",)  # the schedules with more than one phase: only their runs append blocks


@dataclass(frozen=True)
class Phase:
    index: int
    depth: int
    steps: int
    first_trainable_block: int  # blocks [0, first_trainable_block) are frozen in this phase

    def active_layer_tokens(self, tokens_per_step: int) -> int:
        return self.steps * tokens_per_step * self.depth

    def trainable_layer_tokens(self, tokens_per_step: int) -> int:
        return self.steps * tokens_per_step * (self.depth - self.first_trainable_block)


def _steps(tokens: int, tokens_per_step: int) -> int:
    return max(1, tokens // tokens_per_step)


def plan_phases(schedule: str, stages: tuple, stage_tokens: tuple, tokens_per_step: int,
                freeze_prefix: bool = False, active_layer_token_budget: int | None = None) -> list[Phase]:
    """The phases of a run. active_layer_token_budget (joint only) replaces the token budget."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}; allowed values: {', '.join(SCHEDULES)}")
    if freeze_prefix and schedule != "grow":
        raise ValueError(f"freeze_prefix=True needs schedule='grow' (got {schedule!r}): only a grown run has a prefix")
    if active_layer_token_budget is not None and schedule != "joint":
        raise ValueError(f"match_active_layer_tokens needs schedule='joint' (got {schedule!r})")
    total = sum(stage_tokens)
    if schedule == "grow":
        return [Phase(i, depth, _steps(tokens, tokens_per_step), stages[i - 1] if (freeze_prefix and i) else 0)
                for i, (depth, tokens) in enumerate(zip(stages, stage_tokens))]
    depth = stages[-1] if schedule == "joint" else stages[0]
    if active_layer_token_budget is not None:
        steps = max(1, round(active_layer_token_budget / (tokens_per_step * depth)))
    else:
        steps = _steps(total, tokens_per_step)
    return [Phase(0, depth, steps, 0)]
