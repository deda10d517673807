"""Finished run directories with known numbers, written as train.run_variant writes them (no training, no
teacher): the report, grid, sweep and reliability tests read them."""
from __future__ import annotations

import json

from normgrow.rundir import NUMERICS_VERSION
from normgrow.train.spec import run_profile
from normgrow.analysis.variants import Variant, load_variants


def write_run(root, variant, seed, val_ce, phase_ce=None, val_kd_ce=None, profile="tiny", schedule=None,
              tokens=1000, depths=(1, 2, 3), evals=None, run_name=None, lr=None):
    """A finished run directory (config.json, summary.json, metrics.jsonl) as train.run_variant writes it, for a run
    file of params/runs (its norm, schedule, freeze_prefix and donor are recorded, as a real run records them). evals:
    the eval records' (tokens, val_ce), default a flattened curve: the untrained model 4 nats above val_ce at step 0,
    then within 0.01 of it at 80% of the tokens (flat ratio 0.0025); metrics.jsonl also gets a phase_end record per
    phase. lr: record another learning rate than the profile's (a run made with overrides)."""
    v = load_variants().get(variant) or Variant(variant.split("-")[0], schedule or "grow", name=variant)
    phase_ce = list(phase_ce) if phase_ce is not None else [val_ce]
    depths = list(depths)[-len(phase_ce):] if len(phase_ce) < len(depths) else list(depths)[:len(phase_ce)]
    phases = [{"phase": i, "depth": d, "step": 8 * (i + 1), "tokens": tokens * (i + 1) // len(phase_ce),
               "active_layer_tokens": 10 * (i + 1), "val_ce": ce, "val_kd_ce": ce - 3.0,
               "trainable_layer_tokens": 10 * (i + 1)} for i, (ce, d) in enumerate(zip(phase_ce, depths))]
    phases[-1]["val_ce"] = val_ce
    phases[-1]["val_kd_ce"] = val_kd_ce if val_kd_ce is not None else val_ce - 3.0  # the final numbers: the last phase's
    name = run_name or f"{variant}-s{seed}"
    d = root / "runs" / profile / name
    d.mkdir(parents=True)
    donor = f"{v.match_active_layer_tokens}-s{seed}" if v.match_active_layer_tokens else None
    summary = {"run_name": name, "profile": profile, "norm": v.norm, "schedule": v.schedule,
               "freeze_prefix": v.freeze_prefix, "match_active_layer_tokens": donor, "seed": seed,
               "teacher_key": "synthetic", "depth": phases[-1]["depth"], "val_ce": val_ce,
               "val_kd_ce": val_kd_ce if val_kd_ce is not None else val_ce - 3.0, "tokens": tokens,
               "active_layer_tokens": 30, "trainable_layer_tokens": 30, "steps": 24, "wall_s": 1.5,
               "train_tok_s": tokens / 1.5, "n_params": 1000, "device": "cpu", "dtype": "float32",
               "vocab": {"mode": "full", "size": 48, "teacher_mass_outside": 0.0}, "phases": phases}
    (d / "summary.json").write_text(json.dumps(summary))
    recorded = run_profile(profile, v.norm, v.schedule).to_dict()
    if lr is not None:
        recorded["train"]["lr"] = lr
    (d / "config.json").write_text(json.dumps({"profile": recorded, "numerics": NUMERICS_VERSION, "seed": seed}))
    evals = evals if evals is not None else [(0, val_ce + 4.0), (tokens * 8 // 10, val_ce + 0.01)]
    records = [{"kind": "eval", "step": t, "tokens": t, "val_ce": ce} for t, ce in evals]
    records += [{"kind": "phase_end", "step": ph["tokens"], "tokens": ph["tokens"], "val_ce": ph["val_ce"],
                 "val_kd_ce": ph["val_kd_ce"]}
                for ph in phases]
    records.append({"kind": "train", "step": tokens, "tokens": tokens, "loss": 1.0})  # ignored by the report
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sorted(records, key=lambda r: r["step"])))
    return d


def write_metrics(run_dir, evals):
    """Replace a run's metrics.jsonl by these eval records (tokens, val_ce)."""
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"kind": "eval", "step": t, "tokens": t, "val_ce": ce})
                                                   + "\n" for t, ce in evals))
