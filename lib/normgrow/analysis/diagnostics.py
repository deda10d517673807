"""Boundary diagnostics: residual-stream scale per token class, block update ratios, skip-block CE, scale drift.

Everything is measured on one *fixed validation batch*: the first ``n`` validation sequences of the profile's
teacher cache (``fixed_batch(profile, n)``), in float32 on the CPU, for any saved student checkpoint.

Token classes and the fixed batch: data/token_classes.py.

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
Per study (``diagnose_study``): every finished run of outputs/runs/<profile>/ plus the claims table and the verdicts
of observations 4 and 5 of docs/STUDY.md (judged by measured_claims.py from these measurements), written to
outputs/study/<profile>/diagnostics.json.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from torch import Tensor

from ..config import load_profile
from ..train.distill import eval_sums
from ..student.model import Student, load_checkpoint
from ..rundir import (DIAGNOSTICS, finished_runs, is_finished, phase_checkpoints, read_identity, run_disk_bytes,
                      study_diagnostics)
from ..data.token_classes import CLASSES, DEFAULT_N, GROUPS, VERSION, group_masks, make_batch
from ..utils import atomic_write_json, read_json
from .measured_claims import judge_measured
from .reference import load_reference
from .variants import collect_runs
from ..data.vocab import VocabMap

# ------------------------------------------------------------------------------------------------ the fixed batch
def fixed_batch(profile, n: int = DEFAULT_N, cache=None) -> dict:
    """The first n validation sequences of the profile's teacher cache, with targets, loss mask, teacher top-k and
    token classes (float32-ready CPU tensors), plus "meta": {n, cache_key, fingerprint, class_counts}."""
    from ..data.teacher_cache import open_cache
    if cache is None:
        prof = load_profile(profile) if isinstance(profile, str) else profile
        cache = open_cache(prof)
    return make_batch(cache.val, cache, n, cache_key=getattr(cache, "key", None))



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
    # the run by name, not by folder: the study's diagnostics.json holds these records and is committed
    result = {"version": VERSION, "run": run_dir.name, "norm": checkpoints[-1]["norm"],
              "schedule": info.get("schedule"), "freeze_prefix": info.get("freeze_prefix"), "seed": info.get("seed"),
              "finished": is_finished(run_dir), "batch": batch["meta"], "skip": skip,
              "checkpoint_files": [p.name for _, _, p in ckpts], "checkpoints": checkpoints,
              "drift": _drift(checkpoints), "wall_s": time.perf_counter() - t0,
              "disk_bytes": run_disk_bytes(run_dir)}
    atomic_write_json(cache_path, result)
    return result


# ------------------------------------------------------------------------------------------------ the study


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
    """The study's diagnostics.json content: every run's diagnostics (with its variant) and the measured claims
    (measured_claims.py judges them from these measurements)."""
    counts = {g: batch_meta["class_counts"].get(g, 0) for g in GROUPS}  # GROUPS order (diagnostics.json sorts keys)
    claims = judge_measured(load_reference(), runs, counts)
    return {"version": VERSION, "profile": profile, "batch": batch_meta, "classes": list(CLASSES),
            "groups": list(GROUPS), "runs": runs, "claims": [c.to_json() for c in claims],
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


def attach_drift(study: dict, a: str = "pre-grow", b: str = "post-grow") -> list[float]:
    """What grown variant a's new blocks receive at each growth against b's: the top-boundary RMS (all positions) at
    the end of every phase but the last, the boundary the next phase's blocks attach to, a over b, each a geometric
    mean over the seeds (diagnostics.json's runs.<run>.drift.top.all). The drift factors of the boundary
    intervention that injects pre-norm's drift into post-norm (params/profiles/cpu-boundary-drift.yaml)."""
    def top(variant):
        runs = [r["drift"]["top"]["all"] for r in study["runs"].values() if r.get("variant") == variant]
        if not runs:
            raise ValueError(f"no {variant} runs in the diagnostics")
        return [statistics.geometric_mean(r[p] for r in runs) for p in range(len(runs[0]) - 1)]
    return [x / y for x, y in zip(top(a), top(b))]
