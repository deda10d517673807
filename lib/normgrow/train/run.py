"""One run of the study: a student distilled from the cached teacher under a depth schedule.

Entry point: ``run_variant(spec)`` (what notebooks/run_variant.ipynb calls, on a spec.make_run_spec that validated
every parameter before any heavy work or output directory): it trains, evaluates, checkpoints and writes
outputs/runs/<profile>/<run>/{config.json, metrics.jsonl, summary.json, checkpoints/}.

The run's choices (what is evaluated after growth, data order, seeds of new blocks, mixed precision, resume, data
parallel, evaluations) are DESIGN.md's "How a run flows"; the step itself is step.py.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..data.batches import Batches
from ..data.corpus import loss_mask_np
from .evaluate import EVAL_BATCH_TOKENS, autocast, eval_stance, evaluate, evaluation_plan, subset_rows
from .growth import Phase, plan_phases
from .optim import lr_at, make_optimizer, set_trainable
from .resume import MetricsLog, load_resume_state, new_counters, prepare_run_dir
from .step import DistillStep, NonFiniteStep, StepSetup, compile_blocks, compile_enabled, train_step
from ..data.token_classes import DEFAULT_N, group_masks, make_batch
from ..student.boundary import boundary_rms
from ..student.growth_ops import GROWTH_OPS
from ..student.model import Student, StudentConfig, save_student
from ..progress import progress_bar
from ..ranks import Ranks, check_processes, on_ranks
from ..rundir import (BOUNDARY, CHECKPOINTS, FINAL, GROWTH, LAST, METRICS,
                      PhaseSummary, RunLock, Summary, metrics_record,
                      phase_checkpoint, read_summary, run_path, write_summary)
from .spec import RunSpec
from .tracking import RunTrackers
from ..utils import (dtype_name, resolve_device, resolve_dtype,
                     stable_hash)
from ..data.vocab import VocabMap


# ----------------------------------------------------------------------------------------------------- the run

class NonFiniteError(RuntimeError):
    """A loss, gradient norm or validation metric is NaN or infinite: the run stops unfinished."""


def check_finite(run_name: str, step: int, values: dict, cache=None, split: str = "", rows=()) -> None:
    """NonFiniteError naming the step and the values when any of them is NaN or infinite. The teacher cache's rows
    the values came from (split, rows) are then checked (teacher_cache.bad_rows, only after a failure: it reads
    every array of those rows): when one of them is not a distribution, the message names the cache file, the row
    and the position, and says to rebuild the cache instead of lowering the lr."""
    bad = {k: v for k, v in values.items() if not math.isfinite(v)}
    if not bad:
        return
    what = f"run {run_name}: {', '.join(f'{k}={v}' for k, v in bad.items())} at step {step}; the run stops unfinished"
    from ..data.teacher_cache import bad_rows
    finding = bad_rows(cache, split, rows) if cache is not None and len(rows) else None
    if finding is not None:
        raise NonFiniteError(f"{what}: the teacher cache is the cause: {finding}. Delete the cache (rm -rf "
                             f"{cache.dir}); the next run rebuilds it. Then rerun with force=True")
    raise NonFiniteError(f"{what} (its last checkpoint is kept). Lower train.lr, check distill.temperature and the "
                         "teacher cache, then rerun with force=True")


def _grow_generator(seed: int, phase: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(stable_hash({"seed": seed, "phase": phase}, 8), 16))


@dataclass
class Run:
    """A run in progress: its spec, data, model, counters, log and progress bar (set up by start_run)."""
    spec: RunSpec
    dir: Path
    cache: object
    vocab: VocabMap
    device: torch.device
    dtype: torch.dtype
    phases: list[Phase]
    model: Student
    counters: dict
    log: MetricsLog | None  # rank 0 only
    batches: Batches
    evaluations: dict  # global step -> Evaluation (evaluation_plan)
    eval_subset: np.ndarray  # the validation rows of a subset evaluation (subset_rows)
    resume_optimizer: dict | None  # the optimiser state of last.pt, consumed by the phase it belongs to
    bar: object  # a tqdm bar (progress.progress_bar)
    ranks: Ranks = Ranks()
    accelerator: object = None  # accelerate.Accelerator of a data-parallel run (DDP wrapping, backward)
    compiled: bool = False
    boundary_batch: dict | None = None  # log_boundaries' fixed batch, built at its first use
    session_start: float = field(default_factory=time.perf_counter)
    wall_before: float = 0.0

    @property
    def tokens_per_step(self) -> int:
        return self.spec.profile.train.batch_size * self.spec.profile.data.seq_len

    def wall_s(self) -> float:
        return self.wall_before + time.perf_counter() - self.session_start

    def evaluate(self, full: bool) -> dict:
        """The validation metrics of the model now on the whole split (full) or the fixed subset (eval_subset), with
        "full_split" saying which, its wall seconds added to counters["eval_s"]. A whole-split evaluation of a run
        whose subset is smaller also records the subset's values (val_ce_subset, val_kd_ce_subset) from the same
        forward (evaluate's subset), so that a learning curve can be drawn on one set of rows throughout (the subset
        differs from the whole split by a few hundredths of a nat, docs/DESIGN.md "Evaluation"). Batches of
        EVAL_BATCH_TOKENS tokens, or of train.batch_size rows if those are more."""
        tp, t0 = self.spec.profile.train, time.perf_counter()
        batch_rows = max(tp.batch_size, EVAL_BATCH_TOKENS // self.spec.profile.data.seq_len)
        n_rows = self.cache.val.tokens.shape[0]
        rows = np.arange(n_rows) if full else self.eval_subset
        whole = len(rows) == n_rows
        metrics = evaluate(self.model, self.cache.val, rows, batch_rows, self.device, self.dtype, self.vocab,
                           self.ranks, self.eval_subset if whole and len(self.eval_subset) < n_rows else None)
        check_finite(self.spec.run_name, self.counters["step"], {k: metrics[k] for k in ("val_ce", "val_kd_ce")},
                     self.cache, "val", rows)
        self.counters["eval_s"] += time.perf_counter() - t0
        return metrics | {"full_split": whole}

    def log_boundaries(self, step: int) -> None:
        """A BOUNDARY record of the model now (rank 0): student.boundary.boundary_rms on the fixed batch of the
        first DEFAULT_N validation rows (data.token_classes.make_batch), mapped to the student's vocabulary, under
        the run's autocast; its seconds count as evaluation time."""
        t0 = time.perf_counter()
        if self.boundary_batch is None:
            batch = make_batch(self.cache.val, self.cache, DEFAULT_N, cache_key=self.cache.key)
            self.boundary_batch = {"tokens": self.vocab.restrict(batch)["tokens"].to(self.device),
                                   "masks": {g: m.to(self.device) for g, m in group_masks(batch["classes"]).items()}}
        was_training = self.model.training
        self.model.eval()
        with eval_stance(self.device), autocast(self.device, self.dtype):
            rms = boundary_rms(self.model, self.boundary_batch["tokens"], self.boundary_batch["masks"])
        self.model.train(was_training)
        self.log.write({"kind": BOUNDARY, "step": step, "depth": self.model.cfg.n_layers, "rms": rms})
        self.counters["eval_s"] += time.perf_counter() - t0

    def save(self, path: Path, extra: dict) -> None:
        """save_student of the model now, its wall seconds added to counters["checkpoint_s"] (counted in the next
        checkpoint, as the wall time is)."""
        t0 = time.perf_counter()
        save_student(path, self.model, extra)
        self.counters["checkpoint_s"] += time.perf_counter() - t0


def start_run(spec: RunSpec, cache, run_dir: Path, phases: list[Phase], state: dict | None, progress: bool,
              ranks: Ranks = Ranks()) -> Run:
    """Set-up: device, dtype, vocabulary, and the model and counters, new or resumed from state (load_resume_state)."""
    prof, tp = spec.profile, spec.profile.train
    device = ranks.device(resolve_device(tp.device))
    vocab = VocabMap.for_cache(cache, prof.student.vocab)
    if state is None:
        torch.manual_seed(spec.seed)
        model = Student(StudentConfig.from_params(prof.student, vocab_size=vocab.size, n_layers=phases[0].depth,
                                                  norm=spec.norm, max_seq_len=max(prof.data.seq_len, 16),
                                                  placement_depth=tp.stages[-1],  # placements.py: final depth
                                                  boundary_depths=tuple(tp.stages[:-1])))  # where blocks attach
        counters = new_counters()
    else:
        model = Student(StudentConfig.from_saved(state["config"]))
        model.load_state_dict(state["model"])
        counters = copy.deepcopy(state["counters"])
        if ranks.main:
            print(f"resuming {run_dir} at step {counters['step']}")
    model.to(device).train()
    dtype = resolve_dtype(tp.dtype, device)
    run = Run(spec=spec, dir=run_dir, cache=cache, vocab=vocab, device=device, dtype=dtype,
              phases=phases, model=model, counters=counters,
              log=MetricsLog(run_dir / METRICS, counters["metrics_lines"],
                             (lambda: RunTrackers(tp.trackers, run_dir, spec.run_name, spec.identity(),
                                                  counters["step"])) if tp.trackers else None) if ranks.main else None,
              batches=Batches(cache.train, tp.batch_size, spec.seed, device, vocab, ranks),
              evaluations=evaluation_plan(phases, tp),
              eval_subset=subset_rows(cache.val.tokens.shape[0], tp.eval_tokens, prof.data.seq_len),
              resume_optimizer=None if state is None else state.get("optimizer"),
              bar=progress_bar(total=sum(p.steps for p in phases), initial=counters["step"], desc=spec.run_name,
                               disable=not (progress and ranks.main), unit="step"),
              ranks=ranks, accelerator=_accelerator(device) if ranks.world > 1 else None,
              compiled=compile_enabled(tp.compile, device, dtype), wall_before=counters["wall_s"])
    if run.compiled:
        compile_blocks(model)
    if counters["step"] == 0:  # the untrained model: the start of every learning curve (no checkpoint: no lines)
        metrics = run.evaluate(full=False)  # the regime gate's flatness reads it as its start (regime.eval_curve)
        if ranks.main:
            run.log.write({"kind": "eval", "step": 0, "phase": 0, "depth": phases[0].depth, "tokens": 0,
                           "active_layer_tokens": 0, **metrics})
            run.log_boundaries(0)
    return run


def grow_to(run: Run, phase: Phase) -> bool:
    """Append the phase's new blocks (student.new_block_init, from a generator of (seed, phase)) unless the model
    has them already (resumed inside the phase: the blocks are in the checkpoint); compiled before the evaluation
    after growth, so that it runs the blocks the phase trains. Whether it grew."""
    model = run.model
    if model.cfg.n_layers >= phase.depth:
        return False
    model.append_blocks(phase.depth - model.cfg.n_layers, run.spec.profile.student.new_block_init,
                        generator=_grow_generator(run.spec.seed, phase.index))
    model.to(run.device)
    if run.compiled:
        compile_blocks(model)
    return True


def phase_optimizer(run: Run, phase: Phase, phase_start: int, previous: torch.optim.Optimizer | None):
    """Freeze the phase's prefix and build its AdamW (train.optimizer_on_grow: from `previous` or fresh), with the
    optimiser state of last.pt where the run resumes inside this phase."""
    set_trainable(run.model, phase)
    optimizer = make_optimizer(run.model, run.spec.profile.train, previous)
    if run.resume_optimizer is not None and run.counters["step"] > phase_start:
        optimizer.load_state_dict(run.resume_optimizer)
    run.resume_optimizer = None
    return optimizer


def checkpoint(run: Run, phase: Phase, optimizer: torch.optim.Optimizer, phase_end_record: dict | None) -> None:
    """last.pt (model, optimiser, counters) and, at the phase's end (phase_end_record: its evaluation), the phase's
    summary and its checkpoint, which carries the counters, so that a damaged last.pt can resume from it
    (load_resume_state)."""
    counters = run.counters
    counters["wall_s"] = run.wall_s()
    if phase_end_record is not None:
        counters["phases"].append(dataclasses.asdict(PhaseSummary(
            phase=phase.index, depth=phase.depth, step=counters["step"], tokens=counters["tokens"],
            active_layer_tokens=counters["active_layer_tokens"],
            trainable_layer_tokens=counters["trainable_layer_tokens"], val_ce=phase_end_record["val_ce"],
            val_kd_ce=phase_end_record["val_kd_ce"],
            val_ce_subset=phase_end_record.get("val_ce_subset", phase_end_record["val_ce"]),
            val_ce_after_growth=counters.get("val_ce_after_growth") if phase.index else None)))
    counters["metrics_lines"] = run.log.lines
    if phase_end_record is not None:
        run.save(phase_checkpoint(run.dir, phase.index, phase.depth),
                 {"step": counters["step"], "phase": phase.index, "run": run.spec.run_name,
                  "vocab": run.vocab.to_json(), "counters": counters})
    run.save(run.dir / CHECKPOINTS / LAST, {"optimizer": optimizer.state_dict(), "counters": counters,
                                            "vocab": run.vocab.to_json()})


def train_phase(run: Run, phase: Phase, phase_start: int, optimizer: torch.optim.Optimizer | None):
    """One phase: grow the model to the phase's depth and evaluate it before any update (grow_to), freeze its prefix
    and build its optimiser (phase_optimizer), then step to the phase's end (train_step), logging each step and the
    evaluations of evaluation_plan, with the phase checkpoint and resume checkpoints (checkpoint). Returns the
    phase's optimiser."""
    spec, tp, counters, model = run.spec, run.spec.profile.train, run.counters, run.model
    phase_end = phase_start + phase.steps
    grow_op = GROWTH_OPS[spec.profile.student.new_block_init]
    grows = grow_to(run, phase)
    grown = model.blocks[run.phases[phase.index - 1].depth:] if phase.index else []

    def at_step(step: int) -> None:  # the operator sees the phase's updates after this step (growth_ops.py)
        grow_op.at_step(grown, step - phase_start, phase.steps, spec.profile.student)

    if grows:
        at_step(phase_start)
        counters["val_ce_after_growth"] = run.evaluate(full=False)["val_ce"]
        if run.ranks.main:
            run.log.write({"kind": GROWTH, "step": phase_start, "phase": phase.index, "depth": phase.depth,
                           "val_ce_before": counters["phases"][-1]["val_ce_subset"],
                           "val_ce_after": counters["val_ce_after_growth"]})
    optimizer = phase_optimizer(run, phase, phase_start, optimizer)
    forward = DistillStep(model, spec.profile.distill, run.compiled)
    if run.accelerator is not None:  # wrapped per phase: DDP fixes its parameters (appended, frozen) when it wraps
        run.accelerator.free_memory()  # drops the previous phase's wrapper
        forward = run.accelerator.prepare_model(forward)
    setup = StepSetup(forward, optimizer, [p for p in model.parameters() if p.requires_grad], tp.grad_clip,
                      run.device, run.dtype, run.ranks, run.accelerator)

    while counters["step"] < phase_end:
        t0, step = time.perf_counter(), counters["step"]
        lr = lr_at(step, run.phases, tp)
        at_step(step + 1)  # the model this step trains is the one evaluated after it
        try:
            means, grad_norm = train_step(setup, run.batches(step), lr, max(run.batches.positions(step), 1))
        except NonFiniteStep as err:
            check_finite(spec.run_name, step + 1, err.values, run.cache, "train", run.batches.local_rows(step))
        counters["step"] += 1
        counters["tokens"] += run.tokens_per_step
        counters["active_layer_tokens"] += run.tokens_per_step * phase.depth
        counters["trainable_layer_tokens"] += run.tokens_per_step * (phase.depth - phase.first_trainable_block)
        step_s = time.perf_counter() - t0
        evaluation = run.evaluations.get(counters["step"])
        if evaluation is not None:
            record = {"kind": evaluation.kind, "step": counters["step"], "phase": phase.index, "depth": phase.depth,
                      "tokens": counters["tokens"], "active_layer_tokens": counters["active_layer_tokens"],
                      **run.evaluate(evaluation.full)}
        if not run.ranks.main:  # the other ranks only take part in the collectives above
            continue
        run.log.write({"kind": "train", "step": counters["step"], "phase": phase.index, "depth": phase.depth,
                       "lr": lr, **means, "grad_norm": grad_norm, "tokens": counters["tokens"],
                       "active_layer_tokens": counters["active_layer_tokens"], "tok_s": run.tokens_per_step / step_s})
        run.bar.set_postfix(phase=phase.index, depth=phase.depth, tokens=f"{counters['tokens']:,}",
                            loss=f"{means['loss']:.3f}", tok_s=f"{run.tokens_per_step / step_s:.0f}",
                            refresh=False)  # drawn at the bar's next redraw (progress.progress_bar's interval)
        run.bar.update(1)
        if evaluation is not None:
            run.log.write(record)
            run.log_boundaries(counters["step"])
        at_phase_end = counters["step"] == phase_end
        if at_phase_end or counters["step"] % tp.checkpoint_every == 0:
            checkpoint(run, phase, optimizer, record if at_phase_end else None)
    return optimizer


def finish_run(run: Run) -> Summary:
    """final.pt (a hard link to the last phase checkpoint), summary.json, and last.pt removed."""
    prof, counters, ckpt_dir = run.spec.profile, run.counters, run.dir / CHECKPOINTS
    run.bar.close()
    final_phase = PhaseSummary(**counters["phases"][-1])
    final = ckpt_dir / FINAL
    final.unlink(missing_ok=True)
    os.link(phase_checkpoint(run.dir, final_phase.phase, final_phase.depth), final)
    summary = Summary(
        run_name=run.spec.run_name, profile=prof.name, norm=run.spec.norm, schedule=run.spec.schedule,
        freeze_prefix=run.spec.freeze_prefix, match_active_layer_tokens=run.spec.match_active_layer_tokens,
        seed=run.spec.seed, teacher_key=run.cache.key, depth=final_phase.depth, val_ce=final_phase.val_ce,
        val_kd_ce=final_phase.val_kd_ce, tokens=counters["tokens"], active_layer_tokens=counters["active_layer_tokens"],
        trainable_layer_tokens=counters["trainable_layer_tokens"], steps=counters["step"], wall_s=counters["wall_s"],
        train_tok_s=counters["tokens"] / max(counters["wall_s"], 1e-9),
        n_params=sum(p.numel() for p in run.model.parameters()), device=str(run.device), dtype=dtype_name(run.dtype),
        vocab={"mode": prof.student.vocab, "size": run.vocab.size,
               "teacher_mass_outside": run.vocab.outside_mass(run.cache.val, loss_mask_np(run.cache.val.doc_start))},
        phases=tuple(PhaseSummary(**p) for p in counters["phases"]), eval_s=counters["eval_s"],
        checkpoint_s=counters["checkpoint_s"], metrics=metrics_record(run.dir))
    write_summary(run.dir, summary)
    # optimiser state is only needed to resume; the phase checkpoints stay. A run finished again after its
    # summary.json was lost resumed from its last phase checkpoint and has no last.pt
    (ckpt_dir / LAST).unlink(missing_ok=True)
    return summary


def run_variant(spec: RunSpec, progress: bool = True) -> dict:
    """Train (or resume, or return the finished) run described by spec; returns its summary as a dict.

    On train.processes > 1 ranks (ranks.py: forked here, or started by accelerate launch); rank 0 holds the run
    directory's lock throughout, so a second job on the same run stops with the holder's pid."""
    from ..data.teacher_cache import ensure_cache  # heavy import, only once parameters are valid

    prof, tp = spec.profile, spec.profile.train
    budget = None
    if spec.match_active_layer_tokens:
        budget = read_summary(run_path(prof.name, spec.match_active_layer_tokens)).active_layer_tokens
    phases = plan_phases(spec.schedule, tp.stages, tp.stage_tokens, tp.batch_size * prof.data.seq_len,
                         spec.freeze_prefix, budget)
    device = resolve_device(tp.device)  # a device this machine lacks fails here, before the run directory exists
    check_processes("train.processes", tp.processes)
    cache = ensure_cache(prof, progress=progress)
    summary = on_ranks(tp.processes, device, train_ranks, spec, cache, phases, progress)
    return (summary if summary is not None else read_summary(spec.dir)).to_json()


def train_ranks(ranks: Ranks, spec: RunSpec, cache, phases: list[Phase], progress: bool) -> Summary:
    """One rank's part of a run, from start (or resume, or the finished run) to its summary. Rank 0 alone takes the
    lock, checks and prepares the directory and settles a damaged last.pt before the others read the resume state."""
    with RunLock(spec.dir) if ranks.main else nullcontext():
        finished = None
        if ranks.main:
            _, finished = prepare_run_dir(spec, cache.key)
            if finished is not None:
                print(f"{spec.dir} is finished (summary.json); not re-running. To train it again: --force on the command "
                      "line, force=True in the notebook.")
        finished = ranks.from_main(finished)
        if finished is not None:
            return finished
        with ranks.main_first():
            state = load_resume_state(spec.dir, spec.profile.train.optimizer_on_grow)
        run = start_run(spec, cache, spec.dir, phases, state, progress, ranks)
        try:
            optimizer, phase_start = None, 0
            for phase in phases:
                if run.counters["step"] < phase_start + phase.steps:
                    optimizer = train_phase(run, phase, phase_start, optimizer)
                phase_start += phase.steps
            summary = finish_run(run) if ranks.main else None
        finally:
            if run.log is not None:
                run.log.close()  # the trackers, also when the run stops on an error
        return ranks.from_main(summary)


def _accelerator(device: torch.device):
    """accelerate's Accelerator of a data-parallel rank (the process group is already joined, ranks.py): it wraps
    the training forward in DDP and runs the backward. Mixed precision stays ours (train.dtype's autocast)."""
    from accelerate import Accelerator
    return Accelerator(cpu=device.type == "cpu", mixed_precision="no")
