"""Token classes and the fixed validation batch on which a student's residual stream is measured (a run's boundary
records at each evaluation, train/run.py; the boundary diagnostics of every checkpoint, analysis/diagnostics.py).

The fixed batch (make_batch): the first ``n`` sequences of a cache split, in teacher ids (each model maps it to its
own vocabulary), with each position's token class.

Token classes (``CLASSES``; every position gets exactly one, in this order of precedence):
  first      position 0 of a sequence, a document start (doc_start, where the packer put the BOS) or the BOS id
  special    any other special token id (the tokenizer's ``all_special_ids`` / the cache's ``meta["special_ids"]``)
  separator  a token whose decoded text is non-empty and made only of whitespace (spaces, tabs, newlines) and
             Unicode punctuation (categories P*: ``.,;:!?'"()-[]`` ...). The id set is derived once per tokenizer
             by decoding every vocabulary id on its own (``tokenizer.decode([id])``); byte fragments that decode
             to U+FFFD are *not* separators. Ids beyond the tokenizer's vocabulary are content.
  content    everything else.
Groups pool classes: ``all`` (every position), ``structural`` (first + special + separator) and each class.
"""
from __future__ import annotations

import unicodedata

import numpy as np
import torch
from torch import Tensor

from .batches import rows_to_batch
from .vocab import VocabMap
from ..utils import stable_hash

VERSION = 2  # of the diagnostics: diagnostics.json and the fixed batch's meta, which a cached result must match
CLASSES = ("first", "special", "separator", "content")
STRUCTURAL = ("first", "special", "separator")
GROUPS = ("all", "structural") + CLASSES
DEFAULT_N = 8  # validation sequences in the fixed batch

def _is_separator_text(text: str) -> bool:
    return bool(text) and all(c.isspace() or unicodedata.category(c).startswith("P") for c in text)


_SEPARATOR_CACHE: dict = {}


def separator_ids(tokenizer) -> frozenset:
    """Ids whose decoded text is only whitespace / punctuation (see module docstring); cached per tokenizer."""
    key = (getattr(tokenizer, "name_or_path", None) or id(tokenizer), len(tokenizer))
    if key not in _SEPARATOR_CACHE:
        ids = [[i] for i in range(len(tokenizer))]
        if hasattr(tokenizer, "batch_decode"):
            texts = tokenizer.batch_decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        else:
            texts = [tokenizer.decode(i) for i in ids]
        _SEPARATOR_CACHE[key] = frozenset(i for i, t in enumerate(texts) if _is_separator_text(t))
    return _SEPARATOR_CACHE[key]


_TOKENIZERS: dict = {}


def _load_tokenizer(path: str):
    if path not in _TOKENIZERS:
        from transformers import AutoTokenizer
        _TOKENIZERS[path] = AutoTokenizer.from_pretrained(path)
    return _TOKENIZERS[path]


def vocab_sets(tokenizer_or_meta) -> dict:
    """{"bos_id", "special_ids", "separator_ids"} from a tokenizer, a cache meta dict or a TeacherCache.

    A meta dict may carry "separator_ids" directly (synthetic caches); otherwise its "tokenizer_dir" is loaded.
    Special ids exclude nothing here; token_classes gives "first" precedence.
    """
    src = tokenizer_or_meta
    if hasattr(src, "meta") and isinstance(getattr(src, "meta"), dict):  # a TeacherCache
        src = src.meta
    if isinstance(src, dict):
        meta = src
        special = set(int(i) for i in meta.get("special_ids", []))
        bos = meta.get("bos_id")
        if "separator_ids" in meta:
            seps = frozenset(int(i) for i in meta["separator_ids"])
        elif meta.get("tokenizer_dir"):
            tok = _load_tokenizer(str(meta["tokenizer_dir"]))
            seps = separator_ids(tok)
            special |= set(int(i) for i in tok.all_special_ids)
        else:
            seps = frozenset()
    else:  # a tokenizer
        tok = src
        seps = separator_ids(tok)
        special = set(int(i) for i in getattr(tok, "all_special_ids", []))
        bos = getattr(tok, "bos_token_id", None)
    bos = None if bos is None else int(bos)
    if bos is not None:
        special.add(bos)
    return {"bos_id": bos, "special_ids": frozenset(special), "separator_ids": frozenset(seps) - special}


def token_classes(tokens: Tensor, doc_start: Tensor, tokenizer_or_meta) -> Tensor:
    """LongTensor [B, L] of indices into CLASSES; each position exactly one class (see module docstring)."""
    tokens = torch.as_tensor(np.asarray(tokens) if not isinstance(tokens, Tensor) else tokens).long()
    doc_start = torch.as_tensor(np.asarray(doc_start) if not isinstance(doc_start, Tensor) else doc_start).bool()
    sets = vocab_sets(tokenizer_or_meta)
    size = max([int(tokens.max()) + 1 if tokens.numel() else 1] + [i + 1 for i in sets["special_ids"]]
               + [i + 1 for i in sets["separator_ids"]])
    table = torch.full((size,), CLASSES.index("content"), dtype=torch.long)
    if sets["separator_ids"]:
        table[torch.tensor(sorted(sets["separator_ids"]))] = CLASSES.index("separator")
    if sets["special_ids"]:
        table[torch.tensor(sorted(sets["special_ids"]))] = CLASSES.index("special")
    classes = table[tokens]
    first = doc_start.clone()
    first[:, 0] = True
    if sets["bos_id"] is not None:
        first |= tokens == sets["bos_id"]
    classes[first] = CLASSES.index("first")
    return classes


def group_masks(classes: Tensor) -> dict[str, Tensor]:
    """{group: bool [B, L]} for GROUPS."""
    masks = {c: classes == i for i, c in enumerate(CLASSES)}
    masks["structural"] = masks["first"] | masks["special"] | masks["separator"]
    masks["all"] = torch.ones_like(classes, dtype=torch.bool)
    return {g: masks[g] for g in GROUPS}


def make_batch(split, tokenizer_or_meta, n: int = DEFAULT_N, cache_key: str | None = None) -> dict:
    """Batch of the first n sequences of a cache split (train.rows_to_batch, in teacher ids: each checkpoint maps it
    to its own vocabulary), plus doc_start, the token classes and "meta"."""
    n = min(int(n), int(split.tokens.shape[0]))
    if n < 1:
        raise ValueError("the validation split is empty (or n < 1)")
    batch = rows_to_batch(split, np.arange(n), torch.device("cpu"), VocabMap(None, 0))
    batch["doc_start"] = torch.from_numpy(np.array(split.doc_start[:n], dtype=bool))
    tokens = batch["tokens"]
    batch["classes"] = token_classes(tokens, batch["doc_start"], tokenizer_or_meta)
    counts = {g: int(m.sum()) for g, m in group_masks(batch["classes"]).items()}
    fingerprint = stable_hash({"tokens": tokens.flatten().tolist(), "classes": batch["classes"].flatten().tolist()}, 12)
    batch["meta"] = {"n": n, "seq_len": int(tokens.shape[1]), "cache_key": cache_key, "fingerprint": fingerprint,
                     "class_counts": counts, "version": VERSION}
    return batch
