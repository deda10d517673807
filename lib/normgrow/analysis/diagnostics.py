"""Boundary diagnostics: residual-stream scale per token class, block update ratios, skip-block CE, scale drift.

Everything is measured on one *fixed validation batch*: the first ``n`` validation sequences of the profile's
teacher cache (``fixed_batch(profile, n)``), in float32 on the CPU, for any saved student checkpoint.

Token classes (``CLASSES``; every position gets exactly one, in this order of precedence):
  first      position 0 of a sequence, a document start (doc_start, where the packer put the BOS) or the BOS id
  special    any other special token id (the tokenizer's ``all_special_ids`` / the cache's ``meta["special_ids"]``)
  separator  a token whose decoded text is non-empty and made only of whitespace (spaces, tabs, newlines) and
             Unicode punctuation (categories P*: ``.,;:!?'"()-[]`` ...). The id set is derived once per tokenizer
             by decoding every vocabulary id on its own (``tokenizer.decode([id])``); byte fragments that decode
             to U+FFFD are *not* separators. Ids beyond the tokenizer's vocabulary are content.
  content    everything else.
Groups pool classes: ``all`` (every position), ``structural`` (first + special + separator) and each class.

Per checkpoint (``diagnose_model``):
  boundaries  for h_0 (embeddings) .. h_N: ``rms`` = sqrt(mean h^2) over the group's positions and all channels,
              ``max_abs`` = max |h| over them (massive activations).
  blocks      block j maps h_j -> h_{j+1}: ``update_ratio`` = mean over positions of ||h_{j+1} - h_j|| / ||h_j||,
              ``cosine`` = mean cos(h_j, h_{j+1}); a block with an output norm (placements.py: post-norm, DeepNorm,
              Mix-LN's lower blocks) also ``cosine_residual_sum`` = mean cos(h_j, s_j) with s_j the block's residual
              sum before its output norm; ``skip_delta_ce`` / ``skip_delta_kd_ce``: the
              change in validation next-token CE / soft-target CE (loss_mask positions) when block j is removed
              (h_j fed straight into block j+1: exactly the model rebuilt without block j).
  final_block the last block's update ratio against the other blocks' (median, ratio, rank; rank 1 = smallest).
Per run (``diagnose_run``): every phase checkpoint (checkpoints/phase{i}_depth{d}.pt) in phase order, the growth
boundary of each phase (phase i > 0: h_{depth of phase i-1}, what the appended blocks receive) and drift curves
per group across phases: ``top`` (h_N of each checkpoint: what the head's norm and any next appended block
receive), ``growth`` (the growth boundary of each phase; phase 0: its top) and ``fixed`` (h_{depth of phase 0} in
every checkpoint). Cached as <run_dir>/diagnostics.json, recomputed when a checkpoint is newer or the batch differs.
Per study (``diagnose_study``): every finished run of outputs/runs/<profile>/ plus the claims table for
observations 4 and 5 of docs/STUDY.md, written to outputs/study/<profile>/diagnostics.json.
"""
from __future__ import annotations

import math
import statistics
import time
import unicodedata
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from .formats import sig
from .claims import NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED, Claim
from ..config import load_profile
from ..train.distill import eval_sums
from ..student.model import NORMS, Student, StudentConfig, load_checkpoint
from ..rundir import (DIAGNOSTICS, SUMMARY, finished_runs, is_finished, phase_checkpoints, read_identity, study_diagnostics)
from ..train.run import rows_to_batch
from ..utils import atomic_write_json, read_json, stable_hash
from .variants import GapSpec, collect_runs, load_gaps, load_reference
from ..data.vocab import VocabMap

VERSION = 2
CLASSES = ("first", "special", "separator", "content")
STRUCTURAL = ("first", "special", "separator")
GROUPS = ("all", "structural") + CLASSES
DEFAULT_N = 8  # validation sequences in the fixed batch

# Claim thresholds (documented in the claims' statements and evidence).
STABLE_RATIO = 1.25  # post-norm boundary RMS counts as stable when last/first phase stays within [1/1.25, 1.25]
CONCENTRATION_MARGIN = 1.25
"""Pre-norm's drift counts as concentrated on structural tokens only when the structural group's drift exceeds the
content group's by this factor (|log structural ratio| >= |log content ratio| + log 1.25): x1.63 against x1.54 is
the whole stream drifting, not drift concentrated on some tokens."""
IDENTITY_RATIO = 0.5  # final block counts as "nearly identity" when its update ratio < 0.5 x median of the others



# ------------------------------------------------------------------------------------------------ token classes
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


# ------------------------------------------------------------------------------------------------ the fixed batch
def fixed_batch(profile, n: int = DEFAULT_N, cache=None) -> dict:
    """The first n validation sequences of the profile's teacher cache, with targets, loss mask, teacher top-k and
    token classes (float32-ready CPU tensors), plus "meta": {n, cache_key, fingerprint, class_counts}."""
    from ..data.teacher import open_cache
    if cache is None:
        prof = load_profile(profile) if isinstance(profile, str) else profile
        cache = open_cache(prof)
    return make_batch(cache.val, cache, n, cache_key=getattr(cache, "key", None))


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


# ------------------------------------------------------------------------------------------------ one model
def _loss_rows(batch: dict) -> dict:
    keys = ("targets", "mask", "topk_ids", "topk_logp", "tail_logp")
    return {k: batch[k].flatten(0, 1) for k in keys}


@torch.no_grad()
def val_losses(model: Student, final_h: Tensor, batch: dict) -> dict:
    """Mean next-token CE and soft-target CE over loss_mask positions from the last boundary h_N."""
    sums, count = eval_sums(model.norm(final_h).flatten(0, 1), model.head_weight, _loss_rows(batch))
    return {k: v / max(count, 1) for k, v in sums.items()}


@torch.no_grad()
def skip_block_losses(model: Student, hs: list[Tensor], batch: dict, j: int) -> dict:
    """Validation losses of the model with block j removed (reusing h_j from the full forward)."""
    rope = model.rope(batch["tokens"].shape[1])
    h = hs[j]
    for block in list(model.blocks)[j + 1:]:
        h = block(h, rope)
    return val_losses(model, h, batch)


def _group_stats(values: Tensor, masks: dict[str, Tensor], reduce: str) -> dict:
    out = {}
    for g, m in masks.items():
        if not bool(m.any()):
            out[g] = None
        elif reduce == "mean":
            out[g] = float(values[m].double().mean())
        elif reduce == "rms":  # values are per-position mean squares
            out[g] = float(values[m].double().mean().sqrt())
        else:
            out[g] = float(values[m].max())
    return out


def _cos(a: Tensor, b: Tensor) -> Tensor:
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1, eps=1e-12).float()


@torch.no_grad()
def diagnose_model(model: Student, batch: dict, skip: bool = True) -> dict:
    """Boundary, block and final-block diagnostics of one model on the fixed batch (see module docstring)."""
    model = model.float().eval()
    masks = group_masks(batch["classes"])
    hs, sums = model.boundaries(batch["tokens"], residual_sums=True)
    base = val_losses(model, hs[-1], batch)
    boundaries = []
    for i, h in enumerate(hs):
        boundaries.append({"index": i, "rms": _group_stats(h.double().pow(2).mean(-1), masks, "rms"),
                           "max_abs": _group_stats(h.abs().amax(-1), masks, "max")})
    blocks = []
    for j in range(len(model.blocks)):
        h_in, h_out = hs[j].double(), hs[j + 1].double()
        ratio = (h_out - h_in).norm(dim=-1) / h_in.norm(dim=-1).clamp_min(1e-12)
        entry = {"index": j, "update_ratio": _group_stats(ratio, masks, "mean"),
                 "cosine": _group_stats(_cos(h_in, h_out), masks, "mean")}
        if model.blocks[j].placement.output_norm:
            entry["cosine_residual_sum"] = _group_stats(_cos(h_in, sums[j]), masks, "mean")
        if skip:
            lost = skip_block_losses(model, hs, batch, j)
            entry["skip_ce"], entry["skip_kd_ce"] = lost["ce"], lost["kd_ce"]
            entry["skip_delta_ce"], entry["skip_delta_kd_ce"] = lost["ce"] - base["ce"], lost["kd_ce"] - base["kd_ce"]
        blocks.append(entry)
    return {"norm": model.cfg.norm, "depth": len(model.blocks), "val_ce": base["ce"], "val_kd_ce": base["kd_ce"],
            "boundaries": boundaries, "blocks": blocks, "final_block": final_block_summary(blocks)}


def final_block_summary(blocks: list[dict]) -> dict | None:
    """How close the last block is to an identity map, against the other blocks (all-token update ratios).

    The median is over the *interior* blocks 1..N-2 when N >= 3: block 0 reads the raw embedding (scale init_std,
    tiny), so its update ratio is huge by construction and would inflate the median of a shallow stack. With
    N = 2 the median is block 0's ratio. rank counts all blocks (1 = smallest update ratio).
    """
    if not blocks:
        return None
    ratios = [b["update_ratio"]["all"] for b in blocks]
    final = ratios[-1]
    others = ratios[:-1]
    reference = ratios[1:-1] if len(ratios) >= 3 else others
    median = statistics.median(reference) if reference else None
    last = blocks[-1]
    return {"index": last["index"], "final_block_update_ratio": final,
            "median_other_update_ratio": median,
            "median_over_blocks": list(range(1, len(blocks) - 1)) if len(blocks) >= 3 else list(range(len(blocks) - 1)),
            "ratio_to_median": (final / median) if median else None,
            "rank": 1 + sum(r < final for r in others), "n_blocks": len(blocks),
            "final_block_cosine": last["cosine"]["all"],
            "final_block_skip_delta_ce": last.get("skip_delta_ce")}


# ------------------------------------------------------------------------------------------------ runs
def _drift(checkpoints: list[dict]) -> dict:
    """{kind: {group: [rms per phase]}} for kind in top, growth, fixed (see module docstring)."""
    out = {"top": {}, "growth": {}, "fixed": {}, "phases": [c["phase"] for c in checkpoints],
           "depths": [c["depth"] for c in checkpoints]}
    if not checkpoints:
        return out
    fixed_index = checkpoints[0]["depth"]
    for g in GROUPS:
        out["top"][g] = [c["boundaries"][-1]["rms"][g] for c in checkpoints]
        out["growth"][g] = [c["boundaries"][c["growth_boundary"] if c["growth_boundary"] is not None else -1]["rms"][g]
                            for c in checkpoints]
        out["fixed"][g] = [c["boundaries"][fixed_index]["rms"][g] if fixed_index < len(c["boundaries"]) else None
                           for c in checkpoints]
    out["growth_boundaries"] = [c["growth_boundary"] for c in checkpoints]
    out["fixed_boundary"] = fixed_index
    return out


def diagnose_run(run_dir, batch: dict, force: bool = False, skip: bool = True) -> dict:
    """Diagnostics of every phase checkpoint of a run, cached as <run_dir>/diagnostics.json."""
    run_dir = Path(run_dir)
    ckpts = phase_checkpoints(run_dir)
    if not ckpts:
        raise FileNotFoundError(f"{run_dir} has no phase checkpoints (checkpoints/phase*_depth*.pt)")
    cache_path = run_dir / DIAGNOSTICS
    if cache_path.is_file() and not force:
        cached = read_json(cache_path)
        newest = max(p.stat().st_mtime for _, _, p in ckpts)
        if (cached.get("version") == VERSION and cached.get("batch") == batch["meta"]
                and cached.get("checkpoint_files") == [p.name for _, _, p in ckpts]
                and cache_path.stat().st_mtime >= newest and cached.get("skip") == skip):
            return cached
    t0 = time.perf_counter()
    info = read_identity(run_dir) or {}
    checkpoints = []
    prev_depth = None
    for phase, depth, path in ckpts:
        model, extra = load_checkpoint(path)
        d = diagnose_model(model, VocabMap.from_json(extra.get("vocab")).restrict(batch), skip=skip)
        d.update({"file": path.name, "phase": phase, "step": extra.get("step"),
                  "growth_boundary": prev_depth if prev_depth is not None and prev_depth < depth else None})
        checkpoints.append(d)
        prev_depth = depth
        del model
    result = {"version": VERSION, "run": run_dir.name, "run_dir": str(run_dir), "norm": checkpoints[-1]["norm"],
              "schedule": info.get("schedule"), "freeze_prefix": info.get("freeze_prefix"), "seed": info.get("seed"),
              "finished": is_finished(run_dir), "batch": batch["meta"], "skip": skip,
              "checkpoint_files": [p.name for _, _, p in ckpts], "checkpoints": checkpoints,
              "drift": _drift(checkpoints), "wall_s": time.perf_counter() - t0,
              "disk_bytes": run_disk_bytes(run_dir)}
    atomic_write_json(cache_path, result)
    return result


def run_disk_bytes(run_dir) -> dict:
    """Bytes on disk of a run: checkpoints (hardlinks counted once) and everything."""
    seen, ckpt, total = set(), 0, 0
    for p in Path(run_dir).rglob("*"):
        if not p.is_file():
            continue
        st = p.stat()
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_size
        if p.parent.name == "checkpoints":
            ckpt += st.st_size
    return {"checkpoints": ckpt, "total": total}


CHECKPOINT_OVERHEAD = 16 * 1024  # torch.save zip entries, key names, config and extras (measured 6-14 KB, tiny)


def student_param_count(profile, depth: int, vocab_size: int) -> int:
    """Parameters of a student of the profile at a depth over vocab_size ids, for the placement with the most
    (placements differ by their norms: pre's final norm, Peri-LN's output norms), so that the disk estimate bounds
    every run (built on the meta device: no memory)."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    with torch.device("meta"):
        return max(sum(p.numel() for p in Student(StudentConfig.from_params(
            prof.student, vocab_size=vocab_size, n_layers=depth, norm=norm)).parameters()) for norm in NORMS)


def run_disk_estimate(profile, cache=None) -> dict:
    """Bytes of the phase checkpoints a finished run keeps (float32 weights, one file per phase; final.pt is a
    hardlink, last.pt is deleted at the end), per schedule, and the transient peak with last.pt (weights + AdamW's
    two moments of every parameter; an upper bound for frozen-prefix runs). The vocabulary is the one the profile's
    students train with (VocabMap.for_cache: the teacher's, or the corpus ids) on its teacher cache (`cache`, else
    the profile's, opened read-only): the head is most of a small student's weights, so no fixed size will do.
    Without a cache (a clone of committed results) the vocabulary a finished run of the profile recorded is used."""
    prof = load_profile(profile) if isinstance(profile, str) else profile
    try:
        if cache is None:
            from ..data.teacher import open_cache
            cache = open_cache(prof)
        vocab_size = VocabMap.for_cache(cache, prof.student.vocab).size
    except FileNotFoundError:
        recorded = [read_json(d / SUMMARY)["vocab"]["size"] for d in finished_runs(prof.name)]
        if not recorded:
            raise
        vocab_size = recorded[0]
    stages = list(prof.train.stages)
    ckpt = {d: 4 * student_param_count(prof, d, vocab_size) + CHECKPOINT_OVERHEAD for d in set(stages)}
    kept = {"grow": sum(ckpt[d] for d in stages), "joint": ckpt[stages[-1]], "single": ckpt[stages[0]]}
    last = 3 * (ckpt[stages[-1]] - CHECKPOINT_OVERHEAD) + CHECKPOINT_OVERHEAD
    return {"profile": prof.name, "vocab_size": vocab_size,
            "checkpoint_bytes": {str(d): b for d, b in sorted(ckpt.items())},
            "kept_bytes": kept, "peak_extra_last_pt_bytes": last,
            "params": {str(d): student_param_count(prof, d, vocab_size) for d in sorted(set(stages))}}


# ------------------------------------------------------------------------------------------------ the study


def _log_ratio(first, last):
    if first is None or last is None or first <= 0 or last <= 0:
        return None
    return math.log(last / first)


def _geo_mean(values):
    values = [v for v in values if v is not None]
    return math.exp(sum(values) / len(values)) if values else None


def drift_rows(runs: dict[str, dict], kind: str = "top") -> list[dict]:
    """One row per (run, group): boundary RMS at the first and last phase and their ratio."""
    rows = []
    for name, d in sorted(runs.items()):
        curve = d["drift"][kind]
        for g in GROUPS:
            first, last = curve[g][0], curve[g][-1]
            rows.append({"run": name, "variant": d.get("variant"), "seed": d.get("seed"), "norm": d["norm"], "group": g,
                         "boundary": kind, "rms_first_phase": first, "rms_last_phase": last,
                         "ratio": (last / first) if first and last is not None else None})
    return rows


def _of_variant(runs: dict[str, dict], variant: str) -> dict[str, dict]:
    return {n: d for n, d in runs.items() if d.get("variant") == variant}


def _statement(claim: str) -> str:
    """The statement params/reference.yaml declares for a measured claim (observations 4 and 5 are judged here)."""
    return load_reference().claim(claim).statement


def claim4(runs: dict[str, dict], grow: GapSpec, class_counts: dict[str, int]) -> Claim:
    """Observation 4 from the grow gap's variants (grow.a pre-norm, grow.b post-norm), see the evidence text.
    class_counts: positions per group in the fixed batch (groups with none are left out of the evidence)."""
    statement = _statement("obs4-boundary")
    variants = (grow.a, grow.b)
    pre = {n: d for n, d in _of_variant(runs, grow.a).items() if len(d["checkpoints"]) > 1}
    post = {n: d for n, d in _of_variant(runs, grow.b).items() if len(d["checkpoints"]) > 1}
    if not pre or not post:
        return Claim("obs4-boundary", statement, NOT_TESTABLE,
                     f"Not testable: needs finished multi-phase runs of both {grow.a} ({len(pre)}) and {grow.b} "
                     f"({len(post)}).", {}, variants)
    groups = [g for g in GROUPS if class_counts.get(g, 0) > 0]

    def ratios(group_runs, g, kind="top"):  # geometric mean over seeds of last/first-phase RMS
        return _geo_mean([_log_ratio(d["drift"][kind][g][0], d["drift"][kind][g][-1]) for d in group_runs.values()])

    r = {(norm, g): ratios(rs, g) for norm, rs in (("pre", pre), ("post", post)) for g in groups}
    rg = {(norm, g): ratios(rs, g, "growth") for norm, rs in (("pre", pre), ("post", post)) for g in groups}
    dev = {k: abs(math.log(v)) if v else None for k, v in r.items()}
    post_stable = dev.get(("post", "all")) is not None and dev[("post", "all")] <= math.log(STABLE_RATIO)
    post_less = None not in (dev.get(("post", "all")), dev.get(("pre", "all"))) and \
        dev[("post", "all")] < dev[("pre", "all")]
    structural, content = dev.get(("pre", "structural")), dev.get(("pre", "content"))
    concentrated = None not in (structural, content) and structural >= content + math.log(CONCENTRATION_MARGIN)
    supported = bool(post_stable and post_less and concentrated)
    sizes = ", ".join(f"{g} {class_counts[g]}" for g in groups)
    empty = [g for g in GROUPS if class_counts.get(g, 0) == 0]
    per_class = "; ".join(f"{g}: pre x{sig(r[('pre', g)])}, post x{sig(r[('post', g)])}"
                          for g in groups if g != "first")
    first = (f" The first position of each sequence (the start token; {class_counts['first']} positions) on its own: "
             f"pre x{sig(r[('pre', 'first')])}, post x{sig(r[('post', 'first')])}." if "first" in groups else "")
    growth = "; ".join(f"{g}: pre x{sig(rg[('pre', g)])}, post x{sig(rg[('post', g)])}"
                       for g in ("all", "structural", "content") if g in groups)
    evidence = (f"Top-boundary RMS (h_N, what the head's norm and the next appended block receive) at the last phase "
                f"over the first phase, geometric mean over seeds ({len(pre)} pre-grow, {len(post)} post-grow runs); "
                f"positions per group in the fixed batch: {sizes}"
                + (f" ({', '.join(empty)}: no positions, left out)" if empty else "") + f". {per_class}.{first} "
                f"Post-norm all-token drift x{sig(r.get(('post', 'all')))} is "
                f"{'within' if post_stable else 'outside'} the stability band [1/{STABLE_RATIO}, {STABLE_RATIO}] and "
                f"{'smaller' if post_less else 'not smaller'} than pre-norm's x{sig(r.get(('pre', 'all')))}; by "
                "construction a post-norm boundary is an RMSNorm's output, so its RMS is that norm's learned gain "
                "(1 at initialisation) and its stability is built in rather than found. Pre-norm structural drift "
                f"x{sig(r.get(('pre', 'structural')))} "
                f"{'exceeds' if concentrated else 'does not exceed'} content drift x{sig(r.get(('pre', 'content')))} "
                f"by the margin x{CONCENTRATION_MARGIN} (in |log ratio|)"
                + ("" if concentrated else ": the drift is not concentrated on structural tokens") +
                f". At the growth boundary of the last phase against the first phase's top boundary: {growth}.")
    return Claim("obs4-boundary", statement, SUPPORTED if supported else NOT_SUPPORTED,
                 f"{'Supported' if supported else 'Not supported'}: {evidence}",
                 {f"{norm}/{g}": v for (norm, g), v in r.items()} | {f"growth/{norm}/{g}": v for (norm, g), v in rg.items()}
                 | {f"positions/{g}": class_counts.get(g, 0) for g in GROUPS},
                 variants)


def claim5(runs: dict[str, dict], grow: GapSpec) -> Claim:
    """Observation 5 from the pre-norm grown runs (grow.a), with the post-norm ones (grow.b) for context."""
    statement = _statement("obs5-identity")
    variants = (grow.a,)
    pre = _of_variant(runs, grow.a)
    if not pre:
        return Claim("obs5-identity", statement, NOT_TESTABLE, f"Not testable: needs finished {grow.a} runs.", {},
                     variants)
    fb = [d["checkpoints"][-1]["final_block"] for d in pre.values()]
    rel = [f["ratio_to_median"] for f in fb if f and f["ratio_to_median"] is not None]
    if not rel:
        return Claim("obs5-identity", statement, NOT_TESTABLE,
                     f"Not testable: the {grow.a} students have a single block; no other blocks to compare with.", {},
                     variants)
    rel_gm = _geo_mean([math.log(x) for x in rel if x > 0])
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    post = _of_variant(runs, grow.b)
    post_rel = [d["checkpoints"][-1]["final_block"]["ratio_to_median"] for d in post.values()
                if d["checkpoints"][-1]["final_block"]["ratio_to_median"]]
    supported = rel_gm is not None and rel_gm < IDENTITY_RATIO
    evidence = (f"Final pre-grow block update ratio ||h_N - h_(N-1)|| / ||h_(N-1)|| = "
                f"{sig(mean([f['final_block_update_ratio'] for f in fb]))} (mean over {len(fb)} seeds) against a "
                f"median of {sig(mean([f['median_other_update_ratio'] for f in fb]))} for the other blocks (interior blocks "
                f"1..N-2; block 0 reads the raw embedding): "
                f"x{sig(rel_gm)} the median (geometric mean), rank(s) {[f['rank'] for f in fb]} of "
                f"{fb[0]['n_blocks']} (1 = smallest), cosine(h_in, h_out) {sig(mean([f['final_block_cosine'] for f in fb]))}, "
                f"skip-block validation CE change {sig(mean([f['final_block_skip_delta_ce'] for f in fb if f['final_block_skip_delta_ce'] is not None]))} nats/token"
                + (f"; post-grow final block: x{sig(_geo_mean([math.log(x) for x in post_rel]))} its median"
                   + (" (smaller still, so near-identity is not specific to pre-norm here)"
                      if rel_gm is not None and _geo_mean([math.log(x) for x in post_rel]) < rel_gm else "")
                   if post_rel else "")
                + f". Threshold for 'nearly identity': below {IDENTITY_RATIO} x the median.")
    return Claim("obs5-identity", statement, SUPPORTED if supported else NOT_SUPPORTED,
                 f"{'Supported' if supported else 'Not supported'}: {evidence}",
                 {"ratio_to_median_geomean": rel_gm,
                  "post_ratio_to_median_geomean": _geo_mean([math.log(x) for x in post_rel]) if post_rel else None},
                 variants)


def final_block_rows(runs: dict[str, dict]) -> list[dict]:
    rows = []
    for name, d in sorted(runs.items()):
        fb = d["checkpoints"][-1]["final_block"]
        if fb:
            rows.append({"run": name, "norm": d["norm"], "depth": d["checkpoints"][-1]["depth"], **fb})
    return rows


def _same_positions(a: dict, b: dict) -> bool:
    """Whether two fixed-batch metas describe the same positions (everything but the teacher cache key)."""
    return {k: v for k, v in a.items() if k != "cache_key"} == {k: v for k, v in b.items() if k != "cache_key"}


def study_result(profile: str, batch_meta: dict, runs: dict[str, dict]) -> dict:
    """The study's diagnostics.json content: every run's diagnostics (with its variant) and the claims."""
    grow = load_gaps()["grow"]
    return {"version": VERSION, "profile": profile, "batch": batch_meta, "classes": list(CLASSES),
            "groups": list(GROUPS), "runs": runs, "claims": [claim4(runs, grow, batch_meta["class_counts"]).to_json(), claim5(runs, grow).to_json()],
            "claims_table": {"boundary_drift": drift_rows(runs, "top"), "final_block": final_block_rows(runs)},
            "disk_bytes": {name: d.get("disk_bytes") for name, d in runs.items()}}


def diagnose_study(profile: str, n: int = DEFAULT_N, force: bool = False, skip: bool = True,
                   progress: bool = True) -> dict:
    """Diagnose every finished run of outputs/runs/<profile>/ (a run whose checkpoints are gone keeps its entry of the
    previous diagnostics.json, when measured on the same fixed batch); write outputs/study/<profile>/diagnostics.json.
    Without a teacher cache and without checkpoints (a clone of committed results: neither is committed), an
    existing diagnostics.json is returned as measured, with a note, instead of failing on the missing cache."""
    variant_of = {summary.run_name: variant for (variant, _), summary in collect_runs(profile).assigned.items()}
    path = study_diagnostics(profile)
    run_dirs = [d for d in finished_runs(profile) if d.name in variant_of]  # others: not the study's (report.py)
    try:
        batch = fixed_batch(profile, n)
    except FileNotFoundError as err:
        if not path.is_file() or any(phase_checkpoints(d) for d in run_dirs):
            raise
        if progress:
            print(f"diagnostics: {err}; no run has checkpoints here either, so {path} is shown as measured "
                  "(its claims judged again by today's rules)")
        measured = read_json(path)
        return study_result(profile, measured["batch"], measured["runs"])
    previous = read_json(path).get("runs", {}) if path.is_file() else {}
    runs = {}
    for run_dir in run_dirs:
        if not phase_checkpoints(run_dir):
            # checkpoints deleted (a fresh clone of committed results has none): keep what was measured on the same
            # fixed batch (same sequences and token classes; the cache key may differ by the dtype `auto` resolved
            # to, which changes only the teacher's numbers) rather than drop the run from the claims
            kept = previous.get(run_dir.name)
            if kept is not None and _same_positions(kept.get("batch") or {}, batch["meta"]):
                runs[run_dir.name] = kept | {"variant": variant_of[run_dir.name]}
                if progress:
                    print(f"diagnostics {run_dir.name}: no checkpoints, kept from {path}")
            continue
        t0 = time.perf_counter()
        runs[run_dir.name] = diagnose_run(run_dir, batch, force=force, skip=skip) | {"variant": variant_of[run_dir.name]}
        if progress:
            print(f"diagnostics {run_dir.name}: {time.perf_counter() - t0:.1f} s")
    result = study_result(profile, batch["meta"], runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, result)
    return result
