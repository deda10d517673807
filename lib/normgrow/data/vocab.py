"""The student's vocabulary: the teacher's ids, or only the ids that occur in the corpus (student.vocab).

Why: a small student's step is dominated by its vocabulary head (73% of the FLOPs at d_model 128 over the
teacher's 49,152 ids), and most of those ids never occur in a few MB of text (20,405 do in the bundled corpus).
A token that never occurs is never an input nor a next-token target, so dropping it changes only the soft target:

  - student ids are the sorted teacher ids that occur in the cache's tokens (train and validation splits);
  - tokens and targets are mapped to student ids (every one of them occurs, by construction);
  - a teacher top-k entry whose id is outside the student's vocabulary is dropped and its probability joins the
    tail bucket: tail' = log(exp(tail) + sum of the dropped exp(logp)). The bucket keeps meaning "all the mass the
    student's top-k classes do not name", so the distillation target still sums to one;
  - a dropped entry keeps its slot (the cache has k columns per position) as a padding entry: log-prob -inf
    (teacher probability 0) and the id of the row's first kept entry (or the target, if none is kept), so it
    names no new student class. distill's losses give such entries zero weight and zero gradient.

With student.vocab = full the map is the identity and batches are passed through untouched. When every id occurs,
the corpus map is the identity permutation and reproduces the full-vocabulary loss and gradients exactly
(tests/test_vocab.py).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import Tensor

from .corpus import occurring_ids

VOCABS = ("full", "corpus")  # allowed values of student.vocab (config.StudentParams refers here)


def corpus_ids(cache) -> np.ndarray:
    """Sorted teacher ids that occur in the cache's train and validation tokens."""
    return occurring_ids(cache.train.tokens, cache.val.tokens)


class VocabMap:
    """Student id <-> teacher id. teacher_ids[i] is the teacher id of student id i; None means the identity."""

    def __init__(self, teacher_ids, teacher_vocab_size: int):
        self.teacher_vocab_size = int(teacher_vocab_size)
        self.teacher_ids = None if teacher_ids is None else np.asarray(teacher_ids, dtype=np.int64)
        self._lut = None
        if self.teacher_ids is not None:
            lut = np.full(self.teacher_vocab_size, -1, dtype=np.int64)
            lut[self.teacher_ids] = np.arange(len(self.teacher_ids))
            self._lut = torch.from_numpy(lut)

    @classmethod
    def for_cache(cls, cache, vocab: str) -> "VocabMap":
        if vocab not in VOCABS:
            raise ValueError(f"student.vocab={vocab!r}; allowed values: {', '.join(VOCABS)}")
        size = int(cache.meta["vocab_size"])
        return cls(corpus_ids(cache) if vocab == "corpus" else None, size)

    @property
    def size(self) -> int:
        return self.teacher_vocab_size if self.teacher_ids is None else len(self.teacher_ids)

    def to_json(self) -> dict:
        """What a checkpoint stores (save_student extra "vocab") so that it can be read without the cache."""
        ids = None if self.teacher_ids is None else self.teacher_ids.tolist()
        return {"teacher_vocab_size": self.teacher_vocab_size, "teacher_ids": ids}

    @classmethod
    def from_json(cls, d: dict | None, teacher_vocab_size: int = 0) -> "VocabMap":
        """The map a checkpoint stored; None (a checkpoint from before vocab.py) is the full vocabulary."""
        return cls(None, teacher_vocab_size) if d is None else cls(d["teacher_ids"], d["teacher_vocab_size"])

    def restrict(self, batch: Mapping[str, Tensor]) -> dict:
        """A batch in teacher ids -> the same batch in student ids (see module docstring). Other keys pass through."""
        if self._lut is None:
            return dict(batch)
        lut = self._lut.to(batch["tokens"].device)
        ids = lut[batch["topk_ids"]]
        out = ids < 0
        logp = batch["topk_logp"]
        dropped = torch.logsumexp(logp.masked_fill(~out, float("-inf")), dim=-1)
        targets = lut[batch["targets"]]
        first_kept = ids.gather(-1, (~out).to(torch.uint8).argmax(-1, keepdim=True))
        pad = torch.where(first_kept < 0, targets.unsqueeze(-1), first_kept)
        return dict(batch) | {"tokens": lut[batch["tokens"]], "targets": targets,
                              "topk_ids": torch.where(out, pad, ids),
                              "topk_logp": logp.masked_fill(out, float("-inf")),
                              "tail_logp": torch.logaddexp(batch["tail_logp"], dropped)}

    def outside_mass(self, split, mask: np.ndarray) -> float:
        """Mean teacher top-k probability, over mask positions of a cache split, on ids outside this vocabulary."""
        if self._lut is None:
            return 0.0
        ids = np.asarray(split.topk_ids)[mask]
        p = np.exp(np.asarray(split.topk_logp, dtype=np.float64)[mask])
        return float((p * (self._lut.numpy()[ids] < 0)).sum(-1).mean())
