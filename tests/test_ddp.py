"""Data-parallel runs (train.processes = 2, gloo on CPU) on the synthetic cache: the same numbers as one process on
the same global batch, rank 0 alone writing, growth and freezing under DDP, resume after an interruption, and the
identity of runs recorded before train.processes / train.compile existed, and train.compile."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fakes
from fakes import kill_mid_phase
from normgrow import identity, rundir
from normgrow import ranks
from normgrow.train import run as train
from normgrow.train import step as train_step
from normgrow.config import ParamError
from normgrow.data.vocab import VocabMap
from normgrow.student.model import Student, StudentConfig, load_student
from normgrow.train.distill import DistillParams
from normgrow.ranks import Ranks
from normgrow.train.spec import make_run_spec
from normgrow.data.batches import Batches, rows_to_batch
from normgrow.train.evaluate import autocast
from normgrow.train.run import run_variant

pytestmark = pytest.mark.slow  # processes, subprocesses or model conversions: not in make test-fast

TWO = {"train.processes": 2}


def spec(run_name, extra=None, **kw):
    return make_run_spec(profile="tiny", norm=kw.pop("norm", "pre"), schedule=kw.pop("schedule", "grow"),
                         run_name=run_name, overrides=fakes.TINY_OVERRIDES | (extra or {}), **kw)


def train_records(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["kind"] == "train"], [r for r in lines if r["kind"] not in ("train", "growth", "boundary")]


def test_ranks_split_the_rows_of_the_same_global_batch():
    cache = fakes.fake_cache()
    whole = Batches(cache.train, 7, seed=3, device=torch.device("cpu"), vocab=None)
    parts = [Batches(cache.train, 7, seed=3, device=torch.device("cpu"), vocab=None, ranks=Ranks(r, 2))
             for r in range(2)]
    for step in (0, 5, 9, 40):  # 40 x 7 rows crosses several epochs of the 64-row split
        rows = [p.local_rows(step) for p in parts]
        assert [len(r) for r in rows] == [4, 3]
        np.testing.assert_array_equal(np.concatenate(rows), np.sort(whole.rows(step)))
        assert parts[1].positions(step) == whole.positions(step)


@pytest.mark.parametrize("norm, schedule, freeze", [("pre", "grow", False), ("post", "grow", True)])
def test_two_processes_match_one_process(outputs, norm, schedule, freeze):
    """Same global batch, same token accounting, val_ce within 1e-3 nats; growth, freezing and the optimizer
    rebuilt per phase under DDP. batch_size 8 split 4 + 4 rows; the fake cache's documents give the ranks different
    numbers of loss positions, which the loss weighting has to get right."""
    one = run_variant(spec("one", norm=norm, schedule=schedule, freeze_prefix=freeze), progress=False)
    two = run_variant(spec("two", TWO, norm=norm, schedule=schedule, freeze_prefix=freeze), progress=False)
    for key in ("tokens", "active_layer_tokens", "trainable_layer_tokens", "steps", "depth"):
        assert two[key] == one[key], key
    assert two["val_ce"] == pytest.approx(one["val_ce"], abs=1e-5)  # 1e-3 would do; measured 0 here
    for a, b in zip(two["phases"], one["phases"]):
        assert a["val_ce"] == pytest.approx(b["val_ce"], abs=1e-5)
        assert a["val_kd_ce"] == pytest.approx(b["val_kd_ce"], abs=1e-5)
    root = outputs / "runs" / "tiny"
    (steps_one, evals_one), (steps_two, evals_two) = train_records(root / "one"), train_records(root / "two")
    assert [r["step"] for r in steps_two] == list(range(1, 13))  # one line per step: only rank 0 writes
    for a, b in zip(steps_two, steps_one):
        assert (a["tokens"], a["active_layer_tokens"]) == (b["tokens"], b["active_layer_tokens"])
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-4)  # the global batch's loss, not rank 0's
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-3)
    assert [e["eval_positions"] for e in evals_two] == [e["eval_positions"] for e in evals_one]
    ckpt = root / "two" / "checkpoints"
    if freeze:  # block 0 and the tied embedding never move after phase 0
        p0, p2 = (dict(load_student(ckpt / f"phase{i}_depth{i + 1}.pt").named_parameters()) for i in (0, 2))
        for name in ("embed_tokens.weight", "blocks.0.mlp.down_proj.weight"):
            assert torch.equal(p0[name], p2[name]), name
    assert load_student(ckpt / "final.pt").cfg.n_layers == 3
    assert not (ckpt / "last.pt").exists()


def test_two_processes_killed_mid_phase_resume_to_the_same_numbers(outputs):
    """The run's process group (caller and forked ranks) SIGKILLed mid-phase 1; the rerun resumes from last.pt on
    two ranks (taking over the dead rank 0's lock) and ends with the numbers of the uninterrupted two-process run."""
    reference = run_variant(spec("reference", TWO), progress=False)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    kill_mid_phase(run_dir, TWO)
    step = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["counters"]["step"]
    assert 3 <= step < 12
    resumed = run_variant(spec("pre-grow-s0", TWO), progress=False)
    for key in ("val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "steps"):
        assert resumed[key] == pytest.approx(reference[key], abs=1e-6), key
    steps, _ = train_records(run_dir)
    assert [r["step"] for r in steps] == list(range(1, 13))


def test_an_interrupted_rank_stops_the_run(outputs, monkeypatch):
    """A KeyboardInterrupt inside the ranks (Ctrl-C reaches the whole process group) ends the run with an error
    naming it, instead of leaving the caller waiting; the rerun resumes from last.pt."""
    real = train.Batches.__call__

    def interrupted(self, step):
        if step == 7:
            raise KeyboardInterrupt
        return real(self, step)
    with monkeypatch.context() as m:
        m.setattr(train.Batches, "__call__", interrupted)
        with pytest.raises(ranks.RankError, match="KeyboardInterrupt"):
            run_variant(spec("pre-grow-s0", TWO), progress=False)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["counters"]["step"] == 6
    assert run_variant(spec("pre-grow-s0", TWO), progress=False)["steps"] == 12


def test_a_failing_rank_stops_the_run_with_its_error(outputs, monkeypatch):
    real = train.Batches.__call__

    def failing(self, step):
        if step == 2 and self.ranks.rank == 1:
            raise RuntimeError("rank 1 broke")
        return real(self, step)
    monkeypatch.setattr(train.Batches, "__call__", failing)
    with pytest.raises(Exception, match="rank 1 broke"):
        run_variant(spec("broken", TWO), progress=False)
    assert not (outputs / "runs" / "tiny" / "broken" / "summary.json").exists()


def test_processes_are_validated(outputs):
    with pytest.raises(ParamError, match="train.processes=0 must be > 0"):
        spec("x", {"train.processes": 0})
    with pytest.raises(ParamError, match="train.processes=9 must be <= train.batch_size=8"):
        spec("x", {"train.processes": 9})
    with pytest.raises(ParamError, match="train.compile='fast' is not allowed; allowed values: auto, on, off"):
        spec("x", {"train.compile": "fast"})


def test_identities_recorded_before_processes_and_compile_still_match():
    """config.json of runs made before train.processes and train.compile existed lacks them: they compare as
    their defaults (1, auto), and as nothing else."""
    auto = {"train.compile": "auto"}  # the tiny profile says off
    current = spec("x", auto).identity()
    old = json.loads(json.dumps(current))
    del old["profile"]["train"]["processes"], old["profile"]["train"]["compile"]
    assert identity.identity_differences(old, current) == []
    assert identity.identity_differences(current, old) == []
    two = spec("x", TWO | auto).identity()
    assert identity.identity_differences(old, two) == ["profile.train.processes"]


def test_compile_setting_resolves_per_device_and_dtype():
    cpu, cuda, bf16, f32 = torch.device("cpu"), torch.device("cuda"), torch.bfloat16, torch.float32
    assert train_step.compile_enabled("auto", cuda, f32) and not train_step.compile_enabled("off", cuda, bf16)
    assert train_step.compile_enabled("on", cpu, f32)
    assert train_step.compile_enabled("auto", cpu, bf16) and not train_step.compile_enabled("auto", cpu, f32)
    assert not train_step.compile_enabled("auto", torch.device("mps"), bf16)


def test_compiled_blocks_train_like_the_eager_ones(outputs):
    """train.compile: on (each block compiled, the head eager) against off, grown over three stages: same accounting,
    every phase's val_ce within 1e-4 nats (float32; compilation only reorders arithmetic)."""
    eager = run_variant(spec("eager", {"train.compile": "off"}), progress=False)
    compiled = run_variant(spec("compiled", {"train.compile": "on"}), progress=False)
    assert (compiled["tokens"], compiled["steps"]) == (eager["tokens"], eager["steps"])
    for a, b in zip(compiled["phases"], eager["phases"]):
        assert a["val_ce"] == pytest.approx(b["val_ce"], abs=1e-4)


def test_every_evaluation_of_a_compiled_run_runs_the_compiled_blocks(outputs, monkeypatch):
    """The untrained model's evaluation and the one just after each growth run the same compiled blocks as the
    steps (under numerics version 2 they ran eager blocks: the blocks were compiled when a phase's first step was
    built)."""
    compiled_at_eval = []
    evaluate = train.evaluate

    def spy(model, *args, **kwargs):
        compiled_at_eval.append([block._compiled_call_impl is not None for block in model.blocks])
        return evaluate(model, *args, **kwargs)

    monkeypatch.setattr(train, "evaluate", spy)
    run_variant(spec("compiled", {"train.compile": "on"}), progress=False)
    kinds = [r["kind"] for r in train_records(rundir.run_path("tiny", "compiled"))[1]]
    assert len(compiled_at_eval) == len(kinds) + 2  # the two evaluations after growth are in summary.json
    assert [len(blocks) for blocks in compiled_at_eval[:2]] == [1, 1]  # step 0 and the first phase end: depth 1
    assert all(all(blocks) for blocks in compiled_at_eval)


def eager_and_compiled(cache) -> tuple[Student, Student]:
    """A 2-block student on the synthetic cache's vocabulary and a copy whose blocks are compiled (compile_blocks)."""
    torch.manual_seed(0)
    cfg = StudentConfig(vocab_size=int(cache.meta["vocab_size"]), n_layers=2, d_model=32, n_heads=2, n_kv_heads=1,
                        head_dim=16, d_ff=64, max_seq_len=16)
    eager = Student(cfg)
    compiled = copy.deepcopy(eager)
    train_step.compile_blocks(compiled)
    return eager, compiled


def test_a_cpu_evaluation_of_compiled_blocks_runs_them_eager():
    """On CPU an evaluation (and a boundary record's forward) runs the blocks eager also where training compiled them
    (train.evaluate.eval_stance, numerics version 6): the metrics of a compiled bf16 student equal the uncompiled
    copy's bit for bit, and the evaluation compiles no graph (the no-grad graph's trace cost ~5 s a cpu run)."""
    from torch._dynamo.utils import counters
    from normgrow.data.vocab import VocabMap as Vocab
    from normgrow.train.evaluate import evaluate
    cache = fakes.fake_cache()
    eager, compiled = eager_and_compiled(cache)
    vocab, rows, cpu = Vocab.for_cache(cache, "full"), np.arange(8), torch.device("cpu")
    graphs = counters["stats"]["unique_graphs"]
    got = evaluate(compiled, cache.val, rows, 4, cpu, torch.bfloat16, vocab)
    assert counters["stats"]["unique_graphs"] == graphs
    assert got == evaluate(eager, cache.val, rows, 4, cpu, torch.bfloat16, vocab)


@pytest.mark.parametrize("dtype, rel", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["float32", "bf16"])
def test_a_compiled_step_computes_the_eager_loss_and_gradients(dtype, rel):
    """One training step of DistillStep with its blocks compiled against the eager step from the same weights: the
    loss and every gradient agree to `rel` of the gradient's largest value. Measured on AMD EPYC (AVX512-BF16):
    float32, the loss bitwise equal and the gradients within 5e-7 (reordered sums only); bf16 autocast, the loss
    within 7e-6 and the gradients within 1.1e-2, about one bf16 step (inductor keeps elementwise intermediates in
    float32 where eager rounds them to bf16). Checked on a student that grew after it was compiled (its new block
    compiled too) and whose first block is frozen."""
    cache = fakes.fake_cache()
    batch = rows_to_batch(cache.train, np.arange(4), torch.device("cpu"), VocabMap.for_cache(cache, "full"))
    params = DistillParams()
    eager, compiled = eager_and_compiled(cache)
    for model in (eager, compiled):
        model.append_blocks(1, generator=torch.Generator().manual_seed(1))
        model.blocks[0].requires_grad_(False)
    forward = train_step.DistillStep(compiled, params, compiled=True)
    assert all(b._compiled_call_impl is not None for b in compiled.blocks)

    def loss_and_grads(forward, model):
        with autocast(torch.device("cpu"), dtype):
            loss, _ = forward(batch)
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    want, want_grads = loss_and_grads(train_step.DistillStep(eager, params, compiled=False), eager)
    got, got_grads = loss_and_grads(forward, compiled)
    assert got.item() == pytest.approx(want.item(), rel=rel)
    assert set(got_grads) == set(want_grads) and not any(n.startswith("blocks.0.") for n in got_grads)
    for name, g in want_grads.items():
        assert (got_grads[name] - g).abs().max() <= rel * g.abs().max(), name


def test_gpu_ranks_are_launched_and_launched_jobs_need_their_processes_setting(monkeypatch):
    """A caller forks CPU ranks but launches GPU ranks (a CUDA context made before a fork is unusable in the child;
    test_sharded_teacher.py runs the launched way on CPU). In a launched job the profile's processes key must equal
    the launched world size."""
    assert ranks._forks(torch.device("cpu")) and not ranks._forks(torch.device("cuda", 0))
    ranks.check_processes("train.processes", 3)  # not launched: any setting
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert ranks.launched_world() == 2
    with pytest.raises(ParamError, match="train.processes=1 but this job was launched with 2 processes"):
        ranks.check_processes("train.processes", 1)
    ranks.check_processes("train.processes", 2)


EXIT_CHECK = """
import atexit
atexit.register(lambda: print("interpreter finalized", flush=True))
from normgrow.ranks import _joined_ranks, end_launched_rank
ranks = _joined_ranks(cpu=True)
ranks.barrier()
print(f"rank {ranks.rank} done")  # not flushed: end_launched_rank must flush it
end_launched_rank()
"""


def test_a_launched_rank_ends_without_the_interpreters_finalization(tmp_path):
    """A rank that leaves its gloo threads to the interpreter's finalization sometimes aborts after its work is done
    ("terminate called without an active exception"; 10 of 40 launches of a small two-rank job, docs/LOG.md), and the
    launcher then reports the whole job failed. A launched rank ends with end_launched_rank: its output flushed, no
    finalization (no exit handler runs), exit status 0."""
    script = tmp_path / "job.py"
    script.write_text(EXIT_CHECK)
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", str(script)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rank 0 done" in proc.stdout and "rank 1 done" in proc.stdout, proc.stdout
    assert "interpreter finalized" not in proc.stdout


def test_teacher_processes_do_not_change_a_runs_identity():
    """The cache is the same on any number of teacher processes: runs recorded before the key existed, or with
    another value, still count and resume."""
    current = spec("x").identity()
    old = json.loads(json.dumps(current))
    del old["profile"]["teacher"]["processes"]
    assert identity.identity_differences(old, current) == []
    assert identity.identity_differences(spec("x", {"teacher.processes": 2}).identity(), current) == []
