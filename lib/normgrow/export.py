"""Export a trained student.

A placement that exports to Qwen3 (placements.py, exports_to_qwen3: pre)
          -> a transformers Qwen3ForCausalLM folder (save_pretrained). The student is a Qwen3 decoder, so the
             weights map one to one (table below); the export checks the logits against the student before
             returning and records the largest difference in OUT_DIR/normgrow_export.json.
any other -> no transformers architecture computes it (post-norm's norm after the residual sum, Mix-LN, Peri-LN's
             output norms, DeepNorm's alpha, LayerNorm-Scaling's 1/sqrt(l)), so the export is a normgrow
             checkpoint: OUT_DIR/student.pt (save_student format) + OUT_DIR/config.json (StudentConfig), loadable
             with normgrow.student.model.load_student(OUT_DIR).

The teacher's tokenizer is copied into OUT_DIR (find_tokenizer: the checkpoint's "tokenizer_dir" entry, else the
teacher cache the run was trained on, named by teacher_key in the run's config.json / summary.json, else a tokenizer
saved next to the checkpoint by an earlier export). A student with the corpus vocabulary (student.vocab: corpus,
vocab.py) also gets OUT_DIR/normgrow_vocab.json: model id i is tokenizer id teacher_ids[i]. The exported config's
bos / eos / pad ids are the tokenizer's mapped to the student's ids (student_token_ids): the tokenizer's own ids
would name other tokens of the student (its id 1 may be a newline, so generation would stop there).

Destination safety: OUT_DIR must not be, or lie inside, a run directory or outputs/runs (an export there would
overwrite the run's config.json), and an existing non-empty OUT_DIR needs force=True (files are then overwritten
one by one; nothing is ever deleted). A full disk raises OSError(ENOSPC) naming the file (utils.disk_full_errors).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from .rundir import CHECKPOINTS, CONFIG, METRICS, SUMMARY, RunDirError, read_identity, runs_base
from .student.model import Student, load_checkpoint, resolve_checkpoint, save_student
from .student.parametrization import output_mult
from .student.placements import PLACEMENTS
from .utils import atomic_write_json, disk_full_errors

# normgrow parameter name prefix -> transformers Qwen3ForCausalLM name prefix (first match wins).
QWEN3_NAMES = (
    ("embed_tokens.", "model.embed_tokens."),
    ("blocks.", "model.layers."),
    ("norm.", "model.norm."),
    ("lm_head.", "lm_head."),
)
QWEN3_BLOCK_NAMES = (
    (".attn_norm.", ".input_layernorm."),
    (".mlp_norm.", ".post_attention_layernorm."),
)
PARITY_TOL = 1e-4


def qwen3_name(name: str) -> str:
    """Map one student state_dict key to its Qwen3ForCausalLM key."""
    for ours, theirs in QWEN3_NAMES:
        if name.startswith(ours):
            name = theirs + name[len(ours):]
            break
    else:
        raise KeyError(f"no Qwen3 name for student parameter {name!r}")
    for ours, theirs in QWEN3_BLOCK_NAMES:
        name = name.replace(ours, theirs)
    return name


def qwen3_config(model: Student, **token_ids):
    """Qwen3Config with the student's sizes (token_ids: bos_token_id / eos_token_id / pad_token_id)."""
    from transformers import Qwen3Config

    cfg = model.cfg
    return Qwen3Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, hidden_act="silu", max_position_embeddings=cfg.max_seq_len,
        initializer_range=cfg.init_std, rms_norm_eps=cfg.rms_eps, use_cache=True,
        tie_word_embeddings=cfg.tie_embeddings, rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        attention_bias=False, attention_dropout=0.0, use_sliding_window=False, **token_ids)


def to_qwen3(model: Student, **token_ids):
    """A Qwen3ForCausalLM (float32, eval mode) computing the same function as a pre-norm student."""
    from transformers import Qwen3ForCausalLM

    if not PLACEMENTS[model.cfg.norm].exports_to_qwen3:
        raise ValueError(f"norm={model.cfg.norm!r} has no transformers architecture; only "
                         f"{', '.join(n for n, p in PLACEMENTS.items() if p.exports_to_qwen3)} maps to Qwen3")
    if model.cfg.boundary != "none":
        raise ValueError(f"boundary={model.cfg.boundary!r}: Qwen3 has no operation between its layers; export the "
                         "student as a normgrow checkpoint")
    hf = Qwen3ForCausalLM(qwen3_config(model, **token_ids)).float().eval()
    state = {qwen3_name(k): v.detach().float() for k, v in model.state_dict().items()}
    state["model.norm.weight"] = state["model.norm.weight"] * output_mult(model.cfg)  # muP's head multiplier
    missing, unexpected = hf.load_state_dict(state, strict=False)
    allowed_missing = {"lm_head.weight"} if model.cfg.tie_embeddings else set()
    if unexpected or set(missing) - allowed_missing:
        raise RuntimeError(f"Qwen3 weight mapping failed: missing={missing}, unexpected={unexpected}")
    if model.cfg.tie_embeddings:
        hf.tie_weights()
    return hf


@torch.no_grad()
def max_logit_diff(model: Student, hf, seq_len: int = 16, seed: int = 0) -> float:
    """Largest |logit difference| between a student and an HF model (both float32, eval) on random tokens."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(model.cfg.vocab_size, (2, min(seq_len, model.cfg.max_seq_len)), generator=g)
    ours = model(idx)
    theirs = hf(input_ids=idx).logits
    return (ours - theirs).abs().max().item()


def _is_run_dir(d: Path) -> bool:
    """A run directory: checkpoints/ or metrics.jsonl or summary.json next to a config.json (rundir's names)."""
    return (d / CONFIG).is_file() and any((d / name).exists() for name in (METRICS, SUMMARY, CHECKPOINTS))


def check_destination(out_dir: Path, force: bool = False) -> None:
    """Refuse a destination whose files an export would overwrite (see the module docstring); force=True only
    allows writing into an existing non-empty folder that is not a run's."""
    out = Path(out_dir).resolve()
    runs = runs_base().resolve()
    for d in (out, *out.parents):
        if d == runs or _is_run_dir(d):
            raise FileExistsError(f"export destination {out_dir} is {'' if d == out else 'inside '}"
                                  f"{'outputs/runs' if d == runs else 'the run directory ' + str(d)}; an export "
                                  f"there would overwrite the run's files. Choose a folder outside "
                                  f"{runs if d == runs else d} (--force does not change this)")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"export destination {out_dir} is a file; choose a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FileExistsError(f"export destination {out_dir} exists and is not empty; choose a new folder, or pass "
                              f"--force (force=True) to overwrite the files an export writes there")


def find_tokenizer(ckpt_path: Path, extra: dict) -> str | None:
    """The tokenizer folder of the checkpoint's teacher, or None (see the module docstring for the order)."""
    from .data.teacher import teacher_root
    if extra.get("tokenizer_dir"):
        return str(extra["tokenizer_dir"])
    folder = ckpt_path.parent
    run = folder.parent if folder.name == "checkpoints" else folder
    try:
        key = (read_identity(run) or {}).get("teacher_key")
    except RunDirError:
        key = None
    if key and (teacher_root() / key / "tokenizer").is_dir():
        return str(teacher_root() / key / "tokenizer")
    return str(folder) if (folder / "tokenizer_config.json").is_file() else None


def student_token_ids(token_ids: dict, vocab: dict | None) -> tuple[dict, list[str]]:
    """The tokenizer's special ids (bos_token_id, eos_token_id, pad_token_id) in the student's ids, and a warning
    per id the student lacks. With the teacher's vocabulary (vocab None or without teacher_ids) they are the same
    ids. With the corpus vocabulary, tokenizer id t is student id i where teacher_ids[i] == t; an id that never
    occurred in the corpus has no student id and becomes None (generation then runs to max_new_tokens rather than
    stopping on another token; transformers pads with eos, or asks for a pad id), and the warning says so."""
    teacher_ids = (vocab or {}).get("teacher_ids")
    if teacher_ids is None:
        return dict(token_ids), []
    index = {int(t): i for i, t in enumerate(teacher_ids)}
    mapped = {name: index.get(int(t)) for name, t in token_ids.items()}
    warnings = [f"{name}={token_ids[name]} of the tokenizer is not in the student's corpus vocabulary, so the exported "
                f"config sets it to None" for name, i in mapped.items() if i is None]
    return mapped, warnings


def _copy_tokenizer(tokenizer_dir, out_dir: Path) -> dict:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.save_pretrained(out_dir)
    return {k: getattr(tok, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
            if getattr(tok, k, None) is not None}


def export_student(src, out_dir, force: bool = False) -> dict:
    """Export the checkpoint at src (a run dir or a .pt file) into out_dir; returns what was written."""
    out_dir = Path(out_dir)
    check_destination(out_dir, force)
    ckpt_path = resolve_checkpoint(src)
    model, extra = load_checkpoint(ckpt_path)
    model = model.float().eval()
    with disk_full_errors(out_dir):
        return _write_export(model, extra, ckpt_path, out_dir)


def _write_export(model: Student, extra: dict, ckpt_path: Path, out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = find_tokenizer(ckpt_path, extra)
    vocab = extra.get("vocab") or {}
    token_ids, warnings = student_token_ids(_copy_tokenizer(tokenizer_dir, out_dir) if tokenizer_dir else {}, vocab)
    for warning in warnings:
        print(f"WARNING: {warning}", flush=True)
    info = {"source": str(ckpt_path), "norm": model.cfg.norm, "n_layers": model.cfg.n_layers,
            "tokenizer_dir": tokenizer_dir, "token_ids": token_ids, "warnings": warnings}
    if PLACEMENTS[model.cfg.norm].exports_to_qwen3:
        hf = to_qwen3(model, **token_ids)
        diff = max_logit_diff(model, hf)
        if diff > PARITY_TOL:
            raise RuntimeError(f"exported Qwen3 logits differ from the student by {diff:.3g} > {PARITY_TOL}")
        hf.save_pretrained(out_dir)
        info.update(format="transformers", architecture="Qwen3ForCausalLM", max_logit_diff=diff,
                    message=f"wrote a transformers Qwen3ForCausalLM to {out_dir} "
                            f"(AutoModelForCausalLM.from_pretrained works; max |logit diff| {diff:.2e})")
    else:
        save_student(out_dir / "student.pt", model, extra)
        atomic_write_json(out_dir / "config.json", {**asdict(model.cfg), "format": "normgrow"})
        info.update(format="normgrow", architecture="normgrow.student.model.Student",
                    message=f"norm={model.cfg.norm!r} is not a transformers architecture (Qwen3 and its relatives "
                            f"are pre-norm); wrote a normgrow checkpoint to {out_dir / 'student.pt'} - load it with "
                            f"normgrow.student.model.load_student({str(out_dir)!r})")
    if vocab.get("teacher_ids") is not None:  # student.vocab: corpus (vocab.py): model ids are not tokenizer ids
        atomic_write_json(out_dir / "normgrow_vocab.json", vocab)
        info["vocab"] = (f"corpus vocabulary of {len(vocab['teacher_ids'])} ids: model id i is tokenizer id "
                         f"teacher_ids[i] of normgrow_vocab.json; map tokenizer ids through it before and after")
        info["message"] += f". {info['vocab']}" + "".join(f"; {w}" for w in warnings)
    if tokenizer_dir is None:
        info["message"] += (". No tokenizer found (the checkpoint names none and the run's teacher cache is gone): "
                            "copy the teacher's tokenizer in by hand (outputs/teacher/<teacher_key>/tokenizer)")
    atomic_write_json(out_dir / "normgrow_export.json", info)
    return info
