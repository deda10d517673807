"""The top-k teacher cache: what the teacher (teacher.py) predicts on the corpus's rows, computed once.

``ensure_cache(profile)`` builds (once) and returns the teacher cache for a profile::

    outputs/teacher/<key>/
        meta.json  teacher.json  tokenizer/  checksums.json  COMPLETE (written last, holds the key)
        train/ val/   tokens.npy [N,L] int32, doc_start.npy [N,L] bool, topk_ids.npy [N,L,k] int32,
                      topk_logp.npy [N,L,k] float32, tail_logp.npy [N,L] float32, target_logp.npy [N,L] float32

key = hash(teacher identity + compute dtype, tokenizer identity, data key, seq_len, k). Deriving it has no side
effects (``open_cache`` never writes): a GGUF teacher's identity is its file's name and size (and, for files other
than the bundled one, its path and mtime), and its tokenizer is read from the converted folder when that exists, else
straight from the GGUF. The build happens in
``outputs/teacher/.tmp-<key>-<pid>/`` and is renamed into place after ``COMPLETE`` is written, so a directory under
its final name is either complete or (left by an older / foreign writer without a marker) deleted and rebuilt.
Every open checks the files against ``checksums.json`` (cache.verify_cache), which only the build writes. A cache
that fails (a file differs, or the record is missing) has every row of every array checked (full_check) to name
what is wrong, and is then rebuilt by ``ensure_cache`` or refused by ``open_cache`` with a CacheDamagedError naming
the file; its checksums are never recorded again. Then every open proves the cache is the one asked
for (check_cache: recorded key, k, seq_len, vocabulary, array shapes, a sample of the probabilities, the teacher
baseline) and raises CacheMismatchError otherwise; a directory whose COMPLETE marker names another key is reported
with both keys and never deleted (cache.check_marker).

Sanity gate (sanity_failures; DESIGN.md, "Data"): a teacher fed rows it cannot read still produces a cache that
looks fine, so every open compares its validation CE with a unigram model's in two position buckets and, under
``teacher.sanity: enforce``, raises TeacherSanityError naming the failed check (``warn``: prints it at every open).
"""
from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config import ParamError, Profile, TeacherParams
from .cache import (CacheDamagedError, CacheMismatchError, check_marker, damaged_message, is_complete, publish,
                    reuse_or_clear, temp_build_dir, verify_cache)
from .corpus import (DataSet, document_start_id, ensure_data, loss_mask_np, normalize_source, tokenizer_identity,
                     unigram_logp)
from ..progress import progress_bar, say
from ..ranks import Ranks, check_processes, launched_ranks, on_ranks
from ..utils import atomic_write_json, read_json, resolve_device, stable_hash
from . import teacher

TAIL_FLOOR = -80.0  # log tail mass floor: finite, exp() still a normal float32
CACHE_VERSION = 1

FIRST_POSITIONS = 4  # the first predictions of a row (positions 0-3), bucketed apart in the sanity gate
SANITY_MARGIN = 0.5  # nats the teacher must beat the unigram model by on the later positions
FIRST_POSITIONS_SLACK = 2.0  # nats the teacher may be above the unigram model on the first positions


class TeacherSanityError(RuntimeError):
    """The cached teacher fails the sanity gate (module docstring); the message names the check and the numbers."""


# ----------------------------------------------------------------------------------------------- keys
def cache_key(profile: Profile, tokenizer, data_key: str) -> str:
    return stable_hash({"teacher": teacher.teacher_identity(profile.teacher),
                        "tokenizer": tokenizer_identity(tokenizer), "data": data_key, "seq_len": profile.data.seq_len,
                        "k": profile.cache.k,
                        "version": CACHE_VERSION}, 16)


# ----------------------------------------------------------------------------------------------- cache objects
@dataclass
class CacheSplit:
    tokens: np.ndarray  # [N, L] int32, memmap; packed, BOS at each document start, no padding
    doc_start: np.ndarray  # [N, L] bool, True where a document starts (a BOS position)
    topk_ids: np.ndarray  # [N, L, k] int32, teacher top-k next-token ids (descending log-prob)
    topk_logp: np.ndarray  # [N, L, k] float32, teacher log-probs (T=1, log_softmax in float32)
    tail_logp: np.ndarray  # [N, L] float32, log(1 - sum(exp(topk_logp))), floored at TAIL_FLOOR
    target_logp: np.ndarray | None = None  # [N, L] float32, teacher log p(tokens[:, t+1]) (0 at t = L-1)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


ARRAYS = ("tokens", "doc_start", "topk_ids", "topk_logp", "tail_logp", "target_logp")


def _open_split(d: Path) -> CacheSplit:
    return CacheSplit(**{name: np.load(d / f"{name}.npy", mmap_mode="r") for name in ARRAYS})


class TeacherCache:
    def __init__(self, d: Path, key: str):
        self.dir = Path(d)
        self.key = key
        self.meta: dict = read_json(self.dir / "meta.json")
        self.meta["tokenizer_dir"] = str(self.dir / "tokenizer")  # meta.json has the build-time path; outputs move
        self.train = _open_split(self.dir / "train")
        self.val = _open_split(self.dir / "val")
        self._tokenizer = None

    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer
            self._tokenizer = AutoTokenizer.from_pretrained(self.meta["tokenizer_dir"])
        return self._tokenizer

    @property
    def report(self) -> dict:
        """teacher.json: val_ce, val_ppl, tokens, k, seq_len, timings, tail mass."""
        return read_json(self.dir / "teacher.json")

    def __reduce__(self):
        """Pickled as its directory and key (ranks launched by the caller reopen the memory maps, ranks.py)."""
        return TeacherCache, (self.dir, self.key)

    def __repr__(self) -> str:
        return (f"TeacherCache(key={self.key}, train={self.train.tokens.shape}, val={self.val.tokens.shape}, "
                f"k={self.meta['k']}, dir={self.dir})")


# ----------------------------------------------------------------------------------------------- the teacher pass
LOGITS_BUDGET_BYTES = 1 << 29
"""Bytes of one float32 [positions, vocabulary] array the pass may hold at once (rows_per_forward); the logits and
their log-softmax are two such arrays. A 262,144-id teacher's 2,048-position batch built 2.1 GB arrays of this kind
(7.25 GB peak for Gemma-3-270M); the bundled 49,152-id teacher's batch of 8 x 256 positions (403 MB) fits, so its
forwards are unchanged."""


def rows_per_forward(batch_rows: int, seq_len: int, vocab: int) -> int:
    """Rows of a teacher.batch_size batch that one forward takes: all of them where their float32 log-probabilities
    fit LOGITS_BUDGET_BYTES, else as many as fit (at least one). A pure function of the profile and the teacher, so
    a cache is computed the same way every time (rounding may depend on the rows a forward holds)."""
    return max(1, min(batch_rows, LOGITS_BUDGET_BYTES // (seq_len * vocab * 4)))


def teacher_flops_per_token(model, seq_len: int) -> float:
    """Matmul FLOPs of the teacher's forward per token: 2 x in x out of every linear layer (the head included) plus
    attention's QK^T and AV over the full square (2 x 2 x seq_len x the query width per layer), as
    train.step.step_flops counts the student's."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return float(2 * linear + 4 * seq_len * cfg.num_attention_heads * head_dim * cfg.num_hidden_layers)


@torch.no_grad()
def topk_forward(model, tokens: torch.Tensor, k: int, chunk_positions: int = 2048):
    """One teacher forward over full-length rows: (topk_ids, topk_logp, tail_logp, target_logp), all on CPU.

    log-probs are log_softmax in float32 of the model's logits (temperature 1); the tail is logsumexp over the
    non-top-k probabilities (stable), floored at TAIL_FLOOR. Post-processing runs in chunks of positions to bound
    the float32 [positions, vocab] temporaries.
    """
    device = next(model.parameters()).device
    x = tokens.to(device=device, dtype=torch.long)
    B, L = x.shape
    logits = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits  # [B, L, V]
    flat = logits.reshape(B * L, -1)
    nxt = torch.cat([x[:, 1:], x[:, -1:]], dim=1).reshape(-1)
    ids, lps, tails, tgts = [], [], [], []
    for s in range(0, B * L, chunk_positions):
        lp = torch.log_softmax(flat[s:s + chunk_positions].float(), dim=-1)
        top_lp, top_id = lp.topk(k, dim=-1)  # sorted, descending
        tgts.append(lp.gather(1, nxt[s:s + chunk_positions, None])[:, 0])
        # tail = log of the sum of the non-top-k probabilities: exact, no cancellation (unlike log1p(-sum top-k)),
        # and cheaper than a masked logsumexp (probabilities are <= 1, so exp() cannot overflow).
        prob = lp.exp_()
        prob.scatter_(1, top_id, 0.0)
        tails.append(prob.sum(dim=-1).log().clamp_min(TAIL_FLOOR))
        ids.append(top_id.int())
        lps.append(top_lp)
        del lp, prob
    del logits, flat
    target = torch.cat(tgts).reshape(B, L)
    target[:, -1] = 0.0
    return (torch.cat(ids).reshape(B, L, k).cpu(), torch.cat(lps).reshape(B, L, k).cpu(),
            torch.cat(tails).reshape(B, L).cpu(), target.cpu())


def preallocate(path: Path) -> None:
    """Reserve the disk blocks of a file np.lib.format.open_memmap created sparse: on a full disk, writing through
    the memory map would kill the process with SIGBUS mid-pass; reserving first raises OSError(ENOSPC) at once.
    (No-op where os.posix_fallocate does not exist: macOS, Windows.)"""
    if hasattr(os, "posix_fallocate"):
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(path)) from e
        finally:
            os.close(fd)


PROGRESS_FILES = "progress-rank*.json"  # in the build's temp directory, one per rank: {"tokens_done", "tokens_total"}
PASS_FILE = "pass.json"  # in the build's temp directory: what rank 0 learnt loading the teacher (for meta.json)
OUTPUTS = {"topk_ids": (np.int32, True), "topk_logp": (np.float32, True), "tail_logp": (np.float32, False),
           "target_logp": (np.float32, False)}  # name: (dtype, has a k axis)


def _allocate_split(tokens: np.ndarray, starts: np.ndarray, out: Path, k: int) -> None:
    """The split's inputs, and its outputs as full-size .npy files with their blocks reserved, for the ranks to fill."""
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "tokens.npy", np.ascontiguousarray(tokens, dtype=np.int32))
    np.save(out / "doc_start.npy", np.ascontiguousarray(starts, dtype=bool))
    for name, (dtype, with_k) in OUTPUTS.items():
        np.lib.format.open_memmap(out / f"{name}.npy", mode="w+", dtype=dtype,
                                  shape=tokens.shape + ((k,) if with_k else ())).flush()
        preallocate(out / f"{name}.npy")


def teacher_pass(ranks: Ranks, params: TeacherParams, splits: list[str], tmp: Path, k: int, progress: bool) -> None:
    """Sharded pass: one rank's share of the teacher forwards over every split allocated in tmp.

    The batches are those of a one-process pass (teacher.batch_size consecutive sequences) and rank r takes batches
    r, r + world, ...: a batch's numbers do not depend on which rank computes it, so the assembled cache is the
    one-process cache byte for byte (on the same dtype and device kind). Each rank writes its rows straight into the
    shared .npy files (disjoint rows of memory maps) and its progress into its own file; rank 0 records what loading
    the teacher told it (PASS_FILE)."""
    device = ranks.device(resolve_device(params.device))
    t0 = time.time()
    if not ranks.main:  # one loading bar per job: rank 0's (transformers draws it whatever progress says)
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    model, _ = teacher.load_teacher(params, progress and ranks.main, device=device)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if k >= vocab:
        raise ParamError(f"cache.k={k} must be smaller than the teacher's vocabulary ({vocab})")
    inputs = {split: np.load(tmp / split / "tokens.npy", mmap_mode="r") for split in splits}
    seq_len = next(iter(inputs.values())).shape[1]
    if ranks.main:
        atomic_write_json(tmp / PASS_FILE, {"vocab_size": vocab, "teacher_class": type(model).__name__,
                                            "device": str(device), "load_s": round(time.time() - t0, 2),
                                            "flops_per_token": teacher_flops_per_token(model, seq_len)})
    tokens_total, done = sum(t.size for t in inputs.values()), 0
    step = rows_per_forward(params.batch_size, seq_len, vocab)
    bar = progress_bar(total=tokens_total // ranks.world,
                       desc=f"teacher pass (rank 0 of {ranks.world})" if ranks.world > 1 else "teacher pass",
                       unit="tok", disable=not (progress and ranks.main))
    t1 = time.time()
    for split, tokens in inputs.items():
        N, L = tokens.shape
        outputs = [np.load(tmp / split / f"{name}.npy", mmap_mode="r+") for name in OUTPUTS]
        for start in range(ranks.rank * params.batch_size, N, params.batch_size * ranks.world):
            stop = min(N, start + params.batch_size)  # a batch of the one-process pass, `step` rows per forward
            for s in range(start, stop, step):
                e = min(stop, s + step)
                results = topk_forward(model, torch.from_numpy(np.array(tokens[s:e], dtype=np.int64)), k)
                for array, result in zip(outputs, results):
                    array[s:e] = result.numpy()
            if done == 0 and ranks.main and progress:  # the first batch, warm-up included: an upper bound
                per_token = (time.time() - t1) / ((stop - start) * L)
                say(f"teacher pass: about {per_token * tokens_total / ranks.world / 60:.0f} min for "
                    f"{tokens_total:,} tokens on {ranks.world} process(es) (from the first batch: "
                    f"{1 / per_token:,.0f} tok/s)")
            done += (stop - start) * L
            bar.set_postfix(tok_s=f"{done / max(time.time() - t1, 1e-9):,.0f}", refresh=False)  # at the next redraw
            bar.update((stop - start) * L)
            atomic_write_json(tmp / PROGRESS_FILES.replace("*", str(ranks.rank)),
                              {"tokens_done": done, "tokens_total": tokens_total})
        for array in outputs:
            array.flush()
    bar.close()
    del model
    gc.collect()
    # every rank's rows are written before any rank goes on: in a launched job rank 0 reads them next (statistics)
    # and publishes the directory, which a slower rank would otherwise still be writing into
    ranks.barrier()


def _unigram(d: Path, vocab_size: int) -> np.ndarray:
    """corpus.unigram_logp of the cache (or build) directory d's splits."""
    return unigram_logp(*(np.load(d / split / "tokens.npy", mmap_mode="r") for split in SPLITS), vocab_size)


def _split_stats(out: Path, unigram: np.ndarray) -> dict:
    """The teacher's CE and tail mass over a finished split (read back from the files the ranks wrote), and the CE
    of the teacher and of the unigram model (log-probs `unigram`) in the sanity gate's position buckets."""
    tokens = np.load(out / "tokens.npy", mmap_mode="r")
    starts = np.load(out / "doc_start.npy")
    tail = np.load(out / "tail_logp.npy", mmap_mode="r")
    target = np.asarray(np.load(out / "target_logp.npy", mmap_mode="r"), dtype=np.float64)
    mask = loss_mask_np(starts)
    nxt = np.roll(np.asarray(tokens), -1, axis=1)  # the target of position t (masked at the last position)
    first = np.arange(starts.shape[1]) < FIRST_POSITIONS
    positions = {}
    for bucket, where in (("first", mask & first), ("later", mask & ~first)):
        positions[bucket] = {"teacher_ce": float(-target[where].mean()) if where.any() else None,
                             "unigram_ce": float(-unigram[nxt[where]].mean()) if where.any() else None,
                             "positions": int(where.sum())}
    return {"tokens": int(starts.size), "ce": float(-target[mask].mean()),
            "mean_tail_mass": float(np.exp(np.asarray(tail, dtype=np.float64)).mean()),
            "loss_positions": int(mask.sum()), "positions": positions}


def sanity_failures(positions: dict) -> list[str]:
    """The sanity gate's failed checks (module docstring) for teacher.json's "positions" of the validation split."""
    failures = []
    later, first = positions["later"], positions["first"]
    if later["teacher_ce"] is not None and later["teacher_ce"] > later["unigram_ce"] - SANITY_MARGIN:
        failures.append(f"on positions {FIRST_POSITIONS}+ the teacher's CE {later['teacher_ce']:.3f} is not "
                        f"{SANITY_MARGIN} nats below the unigram model's {later['unigram_ce']:.3f}")
    if first["teacher_ce"] is not None and first["teacher_ce"] > first["unigram_ce"] + FIRST_POSITIONS_SLACK:
        failures.append(f"on positions 0-{FIRST_POSITIONS - 1} the teacher's CE {first['teacher_ce']:.3f} is more "
                        f"than {FIRST_POSITIONS_SLACK} nats above the unigram model's {first['unigram_ce']:.3f}")
    return failures


def check_sanity(cache: "TeacherCache", mode: str) -> None:
    """Apply the sanity gate to an opened cache: raise (enforce) or print (warn) on a failed check. The position
    buckets of the validation split are computed again at every open (_split_stats, 65k positions of the cpu cache:
    milliseconds), so the gate applies today's thresholds and unigram level (corpus.unigram_logp) whatever
    teacher.json recorded when the cache was built."""
    positions = _split_stats(cache.dir / "val", _unigram(cache.dir, int(cache.meta["vocab_size"])))["positions"]
    failures = sanity_failures(positions)
    if not failures:
        return
    what = (f"the teacher of cache {cache.dir} fails the sanity gate: {'; '.join(failures)}. Its distillation "
            "targets are probably corrupted: check that the tokenizer belongs to the teacher and that the teacher "
            "reads rows beginning with its start token (data.document_start_id)")
    if mode == "enforce":
        raise TeacherSanityError(f"{what}. To use the cache anyway, set teacher.sanity: warn (every open then "
                                 "prints this warning)")
    print(f"WARNING: {what} (teacher.sanity: warn)", flush=True)


SAMPLE_ROWS = 64  # rows per split whose contents check_cache reads (evenly spaced, the first and the last included)
FULL_CHECK_ROWS = 256  # rows per block of full_check (the cpu cache's block: 16 MB of float64 top-k log-probs)
PROBABILITY_TOLERANCE = 1e-3  # |sum of top-k probabilities + tail mass - 1|, and |log p| agreements (float32 sums)
BASELINE_TOLERANCE = 1e-4  # nats/token between teacher.json's val_ce and the one recomputed from target_logp.npy


def _mismatch(cache: "TeacherCache", file: str, what: str, recorded, expected) -> CacheMismatchError:
    finding = f"{cache.dir / file}: {what} is {recorded}, expected {expected}"
    return CacheMismatchError(
        f"{finding}: the directory does not hold the teacher "
        f"cache of key {cache.key} its name and COMPLETE marker claim (copied from another cache, or altered with "
        f"checksums.json rewritten). Nothing was deleted; delete it (rm -rf {cache.dir}) and the next build "
        f"(ensure_cache, a run, or notebooks/00_teacher.ipynb) makes the right one", finding)


def check_cache(cache: "TeacherCache", profile: Profile, tokenizer, dkey: str, full: bool = False) -> None:
    """Prove that an opened cache is the one this profile asks for; CacheMismatchError naming the file, the field,
    the recorded and the expected value otherwise. checksums.json (cache.verify_cache) proves the files are those
    written at build time, but not which build: a foreign cache copied under this key, or arrays altered with the
    checksums rewritten, pass it. So every open also checks:

    * records: meta.json's key, version, data key, tokenizer identity, k and seq_len, and teacher.json's key, k and
      seq_len, against what this profile derives; the vocabulary size exceeds k;
    * shapes and dtypes of every array of both splits ([n_seq, seq_len] and [n_seq, seq_len, k], meta.json's n_seq);
    * contents, on SAMPLE_ROWS evenly spaced rows of each split (deterministic; full=True: every row, full_check):
      the top-k probabilities plus the
      tail mass sum to 1 within PROBABILITY_TOLERANCE (a distribution); the token and top-k ids lie in [0, vocab_size); every
      row begins with the start token (data.pack_rows); and target_logp agrees with the other arrays (the next
      token's log-prob is its top-k entry when it is in the top k, else at most the tail's log mass);
    * the teacher baseline: the validation CE recomputed from the whole of val/target_logp.npy over the loss mask
      (what regime.baselines reports, read from teacher.json) agrees with teacher.json's val_ce within
      BASELINE_TOLERANCE.

    Cost, on the cpu profile's 105 MB cache (1,280 + 256 rows of 256 positions, k = 32; AMD EPYC, 2 cores busy with
    a training job, page cache warm): 0.05-0.10 s, of which the sample (2 x 64 rows) is 0.02-0.04 s and the rest
    the tokenizer identity and the baseline (65,536 float32); the sha256 checks take 0.1 s there. Cheap next to
    deriving the key (4 s), so it runs at every open."""
    meta, report, k, seq_len = cache.meta, cache.report, profile.cache.k, profile.data.seq_len
    expected = {"key": cache.key, "version": CACHE_VERSION, "data_key": dkey,
                "tokenizer_identity": tokenizer_identity(tokenizer), "k": k, "seq_len": seq_len}
    for file, record, names in (("meta.json", meta, expected), ("teacher.json", report, ("key", "k", "seq_len"))):
        for name in names:
            if record.get(name) != expected[name]:
                raise _mismatch(cache, file, name, repr(record.get(name)), repr(expected[name]))
    vocab = meta.get("vocab_size")  # the teacher's logits; a tokenizer may hold added ids beyond them (a GGUF's pad)
    if not isinstance(vocab, int) or vocab <= k:
        raise _mismatch(cache, "meta.json", "vocab_size", repr(vocab), f"an integer > k={k}")
    layouts = {"tokens": (np.int32, False), "doc_start": (np.bool_, False), **OUTPUTS}
    for split_name in SPLITS:
        split, n = getattr(cache, split_name), meta["n_seq"][split_name]
        for name, (dtype, with_k) in layouts.items():
            array, shape = getattr(split, name), (n, seq_len) + ((k,) if with_k else ())
            if array.shape != shape or array.dtype != dtype:
                raise _mismatch(cache, f"{split_name}/{name}.npy", "the array", f"{array.dtype}{list(array.shape)}",
                                f"{np.dtype(dtype)}{list(shape)}")
        for rows in _content_rows(len(split), full):
            check_rows(cache, split_name, split, vocab, rows)
    target = np.asarray(cache.val.target_logp, dtype=np.float64)
    val_ce = float(-target[loss_mask_np(cache.val.doc_start)].mean())
    if not abs(val_ce - report["val_ce"]) <= BASELINE_TOLERANCE:
        raise _mismatch(cache, "teacher.json", "val_ce (the teacher baseline)", f"{report['val_ce']!r}",
                        f"{val_ce!r}, recomputed from val/target_logp.npy (tolerance {BASELINE_TOLERANCE})")


def _content_rows(n: int, full: bool) -> list[np.ndarray]:
    """The rows whose contents check_cache reads, in blocks: SAMPLE_ROWS evenly spaced rows (the first and the last
    included), or (full) every row, FULL_CHECK_ROWS at a time (bounds the float64 copies of one block)."""
    if full:
        return [np.arange(s, min(n, s + FULL_CHECK_ROWS)) for s in range(0, n, FULL_CHECK_ROWS)]
    return [np.unique(np.linspace(0, n - 1, min(n, SAMPLE_ROWS)).round().astype(np.int64))]


def check_rows(cache: "TeacherCache", split_name: str, split: CacheSplit, vocab: int, rows: np.ndarray) -> None:
    """check_cache's content checks on the given rows (sorted) of one split; CacheMismatchError naming the file, the
    row and the position of the first failure."""
    tokens, starts = np.asarray(split.tokens[rows]), np.asarray(split.doc_start[rows])
    ids, logp = np.asarray(split.topk_ids[rows]), np.asarray(split.topk_logp[rows], dtype=np.float64)
    tail, target = (np.asarray(a[rows], dtype=np.float64) for a in (split.tail_logp, split.target_logp))

    def fail(file: str, what: str, where, recorded, expected) -> CacheMismatchError:
        row, position = int(rows[where[0][0]]), int(where[1][0])
        return _mismatch(cache, f"{split_name}/{file}", f"{what} at row {row}, position {position}", recorded,
                         expected)
    total = np.exp(logp).sum(-1) + np.exp(tail)
    bad = np.nonzero(~(np.abs(total - 1) <= PROBABILITY_TOLERANCE))
    if bad[0].size:
        raise fail("topk_logp.npy", "the top-k probabilities plus the tail mass (tail_logp.npy)", bad,
                   f"{total[bad][0]:.6f}", f"1 within {PROBABILITY_TOLERANCE} (a distribution)")
    bad = np.nonzero(((ids < 0) | (ids >= vocab)).any(-1))
    if bad[0].size:
        raise fail("topk_ids.npy", "a token id", bad, ids[bad][0].tolist(), f"ids in [0, {vocab}) (meta.json vocab_size)")
    bad = np.nonzero((tokens < 0) | (tokens >= vocab))
    if bad[0].size:
        raise fail("tokens.npy", "a token id", bad, int(tokens[bad][0]), f"ids in [0, {vocab}) (meta.json vocab_size)")
    bos = cache.meta["bos_id"]
    bad = np.nonzero(~starts[:, :1] | (starts & (tokens != bos)))
    if bad[0].size:
        raise fail("doc_start.npy", "the start flag and token", bad,
                   f"doc_start={starts[bad][0]}, token={tokens[bad][0]}",
                   f"every row beginning with the start token {bos} (meta.json bos_id), flagged wherever it stands")
    hit = ids[:, :-1] == tokens[:, 1:, None]  # the next token's entry among the top k (the last position has none)
    expected = np.where(hit.any(-1), np.where(hit, logp[:, :-1], -np.inf).max(-1), tail[:, :-1])
    bad = np.nonzero(~(target[:, :-1] <= expected + PROBABILITY_TOLERANCE) |
                     (hit.any(-1) & ~(np.abs(target[:, :-1] - expected) <= PROBABILITY_TOLERANCE)))
    if bad[0].size:
        raise fail("target_logp.npy", "the next token's log-prob", bad, f"{target[:, :-1][bad][0]:.6f}",
                   f"its top-k log-prob {expected[bad][0]:.6f} (topk_logp.npy) when in the top k, else at most the "
                   f"tail's log mass (tail_logp.npy)")


# ----------------------------------------------------------------------------------------------- public entry points
def validate(profile: Profile) -> str:
    """Every cheap check, before any heavy work (teacher source form, data source form, k); returns the teacher's
    form (teacher.check_teacher_source)."""
    kind = teacher.check_teacher_source(profile.teacher.source)
    normalize_source(profile.data.source)
    if not isinstance(profile.cache.k, int) or profile.cache.k <= 0:
        raise ParamError(f"cache.k={profile.cache.k!r} must be > 0")
    return kind


def resolve_key(profile: Profile):
    """(tokenizer, bos_id, data key, cache key); reads only (see the module docstring)."""
    from .corpus import data_key
    tokenizer = teacher.load_tokenizer(profile.teacher)
    bos_id = document_start_id(tokenizer)
    dkey = data_key(profile.data, tokenizer, bos_id)
    return tokenizer, bos_id, dkey, cache_key(profile, tokenizer, dkey)


def open_cache(profile: Profile) -> TeacherCache:
    """The complete cache for this profile; never builds nor writes. Raises FileNotFoundError with the command that
    builds it, CacheDamagedError naming the damaged file and what to do, or CacheMismatchError when the directory
    holds another cache (check_marker, check_cache)."""
    validate(profile)
    try:
        tokenizer, _, dkey, key = resolve_key(profile)
    except teacher.TeacherLoadError as e:
        raise FileNotFoundError(f"teacher cache for profile {profile.name!r} unavailable: {e}. Build it with "
                                f"`papermill notebooks/00_teacher.ipynb out.ipynb -p profile {profile.name}`") from e
    d = teacher.teacher_root() / key
    check_marker(d, key)
    if not is_complete(d, key):
        held = {p.name for p in d.iterdir()} if d.is_dir() else set()
        state = ("not built on this machine (its folder holds only teacher.json, the committed record of a cache built "
                 "elsewhere)" if held and held <= {"teacher.json"} else
                 "incomplete (interrupted build)" if d.exists() else "missing")
        raise FileNotFoundError(
            f"teacher cache for profile {profile.name!r} is {state} at {d}; build it with "
            f"`papermill notebooks/00_teacher.ipynb out.ipynb -p profile {profile.name}` "
            f"(run notebooks/00_teacher.ipynb -p profile {profile.name}) or normgrow.data.teacher_cache.ensure_cache(profile)")
    try:
        verify_cache(d)
    except CacheDamagedError as e:
        raise CacheDamagedError(damaged_message(d, full_check(d, key, profile, tokenizer, dkey, e))) from e
    return _checked(d, key, profile, tokenizer, dkey)


def full_check(d: Path, key: str, profile: Profile, tokenizer, dkey: str,
               damage: CacheDamagedError) -> CacheDamagedError:
    """damage (verify_cache's: a file differs from its record, or the record is missing), with what check_cache
    finds on every row of every array added: the first failed check's file, row and position, or that every row
    passes. Either way the cache stays damaged (refused or rebuilt by the callers): passing the content checks
    does not prove the files are those the build wrote, so no record is written from them. An array too short for
    its header cannot be opened: damage alone, which names it. Cost: see DESIGN.md, "Reliability"."""
    try:
        check_cache(TeacherCache(d, key), profile, tokenizer, dkey, full=True)
    except CacheMismatchError as e:
        return CacheDamagedError(f"{damage}; every row checked: {e.finding}")
    except (OSError, ValueError, KeyError, TypeError):  # unreadable: truncated arrays, broken meta.json
        return damage
    return CacheDamagedError(f"{damage}; every row of every array passes the content checks, but without a "
                             "matching record the files are not proven to be the build's")


def bad_rows(cache: "TeacherCache", split_name: str, rows: np.ndarray) -> str | None:
    """What is wrong with the given rows of a split (check_rows' finding: file, row, position), or None when they
    pass: asked when a loss computed from them is not finite (train.run.check_finite)."""
    split = getattr(cache, split_name)
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    try:
        for block in range(0, len(rows), FULL_CHECK_ROWS):
            check_rows(cache, split_name, split, cache.meta["vocab_size"], rows[block:block + FULL_CHECK_ROWS])
    except CacheMismatchError as e:
        return e.finding
    return None


def _checked(d: Path, key: str, profile: Profile, tokenizer, dkey: str) -> TeacherCache:
    """The cache in d, opened after check_cache and the sanity gate (what open_cache and ensure_cache return)."""
    cache = TeacherCache(d, key)
    check_cache(cache, profile, tokenizer, dkey)
    check_sanity(cache, profile.teacher.sanity)
    return cache


@contextmanager
def pass_threads(threads: int):
    """torch's threads for the teacher pass (teacher.threads: a CPU pass's bits depend on them), the caller's
    restored afterwards; 0 leaves them alone. Forked ranks (ranks.on_ranks) divide this count among them."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def ensure_cache(profile: Profile, progress: bool = True) -> TeacherCache:
    """Build data + teacher cache if missing (loading the teacher only then); reuse at once when complete.

    The teacher pass runs on teacher.processes ranks (ranks.py, teacher_pass). In a job started by accelerate launch
    every process calls this: rank 0 checks, builds the data and the temp directory and publishes, and the others
    take part in the pass and then open the same cache."""
    validate(profile)
    tokenizer, bos_id, dkey, key = resolve_key(profile)
    ranks = launched_ranks(resolve_device(profile.teacher.device))
    final = teacher.teacher_root() / key
    with ranks.main_first():  # complete and undamaged: reused; anything else there is deleted (by rank 0) and rebuilt
        complete = reuse_or_clear(final, key, lambda d, e: full_check(d, key, profile, tokenizer, dkey, e))
    if not complete:
        check_processes("teacher.processes", profile.teacher.processes)
        if ranks.main and progress:
            n = profile.data.train_tokens + profile.data.val_tokens
            say(f"teacher cache {key}: not on this machine, so it is built once (every later run of this profile "
                f"and dtype reuses it): the corpus tokenized and packed ({n:,} tokens, a bar), a GGUF teacher "
                "converted once (about a minute, said when it starts), then the teacher pass over those tokens "
                "(its duration said after the first batch, a bar)")
        with ranks.main_first():
            data = ensure_data(profile.data, tokenizer, bos_id, progress)  # before the teacher loads
            teacher.resolve_source(profile.teacher, progress)  # converts a GGUF teacher once, before the ranks load it
        with pass_threads(profile.teacher.threads):
            if ranks.main:
                _build_cache(profile, ranks, tokenizer, bos_id, dkey, key, data, progress)
            else:
                teacher_pass(ranks, profile.teacher, list(SPLITS), ranks.from_main(None), profile.cache.k, progress)
        ranks.barrier()
    return _checked(final, key, profile, tokenizer, dkey)


SPLITS = ("train", "val")


def _peak_fraction(tok_s: float, flops_per_token: float, dtype: str, device: str, processes: int) -> dict:
    """The pass's matmul FLOP/s against the matmul peak measured now in its dtype (utils.matmul_peak_sampler: the
    median of 5 samples on this process's threads, times the processes, each product sized to about 0.1 s:
    utils.peak_size); on CPU only (a GPU pass is timed by its
    device, not this process)."""
    out = {"flops_per_token": flops_per_token, "flop_s": tok_s * flops_per_token}
    if not device.startswith("cpu"):
        return out
    from ..utils import matmul_peak_sampler, peak_size
    sample = matmul_peak_sampler(getattr(torch, dtype), peak_size(getattr(torch, dtype)))
    peak = float(np.median([sample() for _ in range(5)])) * processes
    return out | {"matmul_peak_flop_s": peak, "peak_fraction": out["flop_s"] / peak}


def _build_cache(profile: Profile, ranks: Ranks, tokenizer, bos_id: int, dkey: str, key: str, data: DataSet,
                 progress: bool) -> None:
    """Rank 0 (or the one process): allocate the cache in a temp directory, run the pass on the ranks, then write
    the statistics and meta files and publish it under its key (cache.publish: COMPLETE last, one rename)."""
    root, k = teacher.teacher_root(), profile.cache.k
    # the temp dir goes if the build fails; a full disk raises OSError(ENOSPC) naming the file (temp_build_dir)
    with temp_build_dir(root, f".tmp-{key}-") as tmp:
        tokenizer.save_pretrained(tmp / "tokenizer")
        for split in SPLITS:
            _allocate_split(getattr(data, split).tokens, getattr(data, split).doc_start, tmp / split, k)
        ranks.from_main(tmp)  # where the launched ranks write
        t1 = time.time()
        on_ranks(profile.teacher.processes, resolve_device(profile.teacher.device), teacher_pass, profile.teacher,
                 list(SPLITS), tmp, k, progress)
        build_s = time.time() - t1
        loaded = read_json(tmp / PASS_FILE)
        for leftover in [tmp / PASS_FILE, *tmp.glob(PROGRESS_FILES)]:
            os.remove(leftover)
        unigram = _unigram(tmp, loaded["vocab_size"])
        stats = {split: _split_stats(tmp / split, unigram) for split in SPLITS}
        n_tok = sum(s["tokens"] for s in stats.values())
        special = sorted({int(i) for i in tokenizer.all_special_ids} | {bos_id})
        meta = {
            "key": key, "version": CACHE_VERSION, "vocab_size": loaded["vocab_size"], "k": k,
            "seq_len": profile.data.seq_len, "bos_id": bos_id, "bos_token": tokenizer.convert_ids_to_tokens(bos_id),
            "pad_id": int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else bos_id),
            "special_ids": special, "teacher": profile.teacher.source,
            "teacher_identity": teacher.teacher_identity(profile.teacher),
            "teacher_class": loaded["teacher_class"], "dtype": teacher.teacher_dtype(profile.teacher),
            "device": loaded["device"], "tokenizer_dir": str(root / key / "tokenizer"),
            "tokenizer_identity": tokenizer_identity(tokenizer), "data_key": dkey, "data_dir": str(data.dir),
            "data_source": data.meta["source"] if "source" in data.meta else None,
            "n_seq": {s: int(getattr(data, s).tokens.shape[0]) for s in stats}, "tail_floor": TAIL_FLOOR,
            "profile": profile.name,
        }
        report = {
            "val_ce": stats["val"]["ce"], "val_ppl": float(np.exp(stats["val"]["ce"])),
            "train_ce": stats["train"]["ce"],
            "tokens": {"train": stats["train"]["tokens"], "val": stats["val"]["tokens"]},
            "loss_positions": {s: stats[s]["loss_positions"] for s in stats},
            "k": k, "seq_len": profile.data.seq_len, "bos_id": bos_id,
            "mean_tail_mass": {s: stats[s]["mean_tail_mass"] for s in stats},
            "positions": {s: stats[s]["positions"] for s in stats},
            "sanity": {"failures": sanity_failures(stats["val"]["positions"]), "first_positions": FIRST_POSITIONS,
                       "margin": SANITY_MARGIN, "first_positions_slack": FIRST_POSITIONS_SLACK},
            "timings": {"load_s": loaded["load_s"], "cache_build_s": round(build_s, 2),
                        "tok_per_s": round(n_tok / max(build_s, 1e-9), 1), "threads": torch.get_num_threads(),
                        "processes": profile.teacher.processes, **_peak_fraction(
                            n_tok / max(build_s, 1e-9), loaded["flops_per_token"], meta["dtype"], meta["device"],
                            profile.teacher.processes)},
            "teacher": profile.teacher.source, "dtype": meta["dtype"], "device": meta["device"],
            "key": key, "data_key": dkey, "profile": profile.name,
        }
        if progress:
            pos = report["positions"]["val"]
            print(f"teacher val CE {report['val_ce']:.3f}: positions 0-{FIRST_POSITIONS - 1} "
                  f"{pos['first']['teacher_ce']:.3f} (unigram {pos['first']['unigram_ce']:.3f}), positions "
                  f"{FIRST_POSITIONS}+ {pos['later']['teacher_ce']:.3f} (unigram {pos['later']['unigram_ce']:.3f}); "
                  f"sanity gate: {'; '.join(report['sanity']['failures']) or 'passed'}", flush=True)
        atomic_write_json(tmp / "meta.json", meta)
        atomic_write_json(tmp / "teacher.json", report)
        publish(tmp, root / key, key)
