"""Batches of the cached teacher's rows: the training data of a run as a pure function of the step (Batches), and
the rows of any batch, the evaluation's and the diagnostics' included, gathered for the student (rows_to_batch).

Data order: step s reads sequences [s*B, (s+1)*B) of an endless stream of epochs, each a permutation drawn from
(seed, epoch). The order is a pure function of the step, so a resumed run sees exactly the data it would have; under
data parallelism each rank reads its contiguous slice of the global batch's sorted rows.
"""
from __future__ import annotations

import numpy as np
import torch

from ..ranks import Ranks
from .corpus import loss_mask, loss_mask_np
from .vocab import VocabMap


class Batches:
    """Training batches as a pure function of the step (module docstring). Each rank reads its contiguous slice
    of the global batch's sorted rows (np.array_split, so slices differ by at most one row)."""

    def __init__(self, split, batch_size: int, seed: int, device: torch.device, vocab: VocabMap,
                 ranks: Ranks = Ranks()):
        self.split, self.batch_size, self.seed, self.device, self.vocab = split, batch_size, seed, device, vocab
        self.ranks = ranks
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

    def local_rows(self, step: int) -> np.ndarray:
        return np.array_split(np.sort(self.rows(step)), self.ranks.world)[self.ranks.rank]

    def positions(self, step: int) -> int:
        """Loss-mask positions of the global batch (what the loss of a step is a mean over)."""
        return int(loss_mask_np(self.split.doc_start[np.sort(self.rows(step))]).sum())

    def __call__(self, step: int) -> dict:
        return rows_to_batch(self.split, self.local_rows(step), self.device, self.vocab)


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
