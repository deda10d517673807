"""Training runs on a synthetic cache: schedules, accounting, freezing, resume after SIGKILL, no overwrite."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import fakes
from normgrow.config import ParamError
from normgrow.train.growth import plan_phases
from normgrow.student.model import load_student
from normgrow.train.tracking import TENSORBOARD_DIR
from normgrow.train.spec import derive_run_name, for_arm, make_run_spec
from normgrow.train.run import run_variant
from fakes import kill_mid_phase


def run(**kw):
    """A run on the fake cache, named as the study would name it without overrides (derive_run_name would append
    the overrides' hash)."""
    kw.setdefault("overrides", fakes.TINY_OVERRIDES)
    kw.setdefault("run_name", derive_run_name(kw.get("norm", "pre"), kw.get("schedule", "grow"),
                                              kw.get("freeze_prefix", False), kw.get("match_active_layer_tokens"),
                                              kw.get("seed", 0)))
    return run_variant(make_run_spec(profile="tiny", **kw), progress=False)


def test_plan_phases_accounting():
    grow = plan_phases("grow", (3, 6, 9), (1000, 2048, 4096), 256)
    assert [(p.depth, p.steps) for p in grow] == [(3, 3), (6, 8), (9, 16)]
    assert sum(p.active_layer_tokens(256) for p in grow) == 256 * (3 * 3 + 6 * 8 + 9 * 16)
    frozen = plan_phases("grow", (3, 6, 9), (1024,) * 3, 256, freeze_prefix=True)
    assert [p.first_trainable_block for p in frozen] == [0, 3, 6]
    assert [p.trainable_layer_tokens(256) for p in frozen] == [256 * 4 * 3] * 3
    (joint,) = plan_phases("joint", (3, 6, 9), (1024,) * 3, 256)
    assert (joint.depth, joint.steps) == (9, 12)
    (single,) = plan_phases("single", (3, 6, 9), (1024,) * 3, 256)
    assert (single.depth, single.steps) == (3, 12)
    (matched,) = plan_phases("joint", (3, 6, 9), (1024,) * 3, 256, active_layer_token_budget=256 * 4 * 18)
    assert matched.steps == 8 and matched.active_layer_tokens(256) == 256 * 4 * 18


@pytest.mark.parametrize("kw, needle", [
    ({"norm": "sideways"}, "norm='sideways' is not allowed; allowed values: pre, post"),
    ({"schedule": "zigzag"}, "schedule='zigzag' is not allowed; allowed values: joint, grow, single"),
    ({"seed": -1}, "seed=-1 must be an integer in [0, 2**32)"),
    ({"seed": 18446744073709551616}, "seed=18446744073709551616 must be an integer in [0, 2**32)"),
    ({"profile": "../../params/profiles/tiny"}, "params/profiles/tiny is not a profile file"),
    ({"run_name": "a\n"}, "run_name='a\\n' must be 1-128 letters"),
    ({"overrides": {"name": "/tmp/victim"}}, "unknown profile section 'name'"),
    ({"schedule": "joint", "match_active_layer_tokens": "/tmp/fakedonor/zzz"},
     "match_active_layer_tokens='/tmp/fakedonor/zzz' must be"),
    ({"overrides": {"train.stages": [3, 3, 9]}}, "train.stages=[3, 3, 9] must strictly increase"),
    ({"overrides": {"train.lr": -1}}, "train.lr=-1.0 must be > 0"),
    ({"overrides": {"train.bogus": 1}}, "unknown key train.bogus"),
    ({"profile": "huge"}, "profile='huge' is not a profile; allowed values:"),
    ({"schedule": "joint", "freeze_prefix": True}, "freeze_prefix=True needs schedule='grow'"),
    ({"schedule": "joint", "match_active_layer_tokens": "post-grow"}, "no run"),
    ({"run_name": "../escape"}, "run_name='../escape'"),
])
def test_bad_parameters_fail_before_any_output(outputs, kw, needle):
    with pytest.raises(ParamError) as err:
        make_run_spec(**kw)
    assert needle in str(err.value)
    assert not (outputs / "runs").exists()


def test_grow_run_phases_and_exact_accounting(outputs):
    summary = run(norm="post", schedule="grow")
    tokens_per_step = 8 * 16
    assert [p["depth"] for p in summary["phases"]] == [1, 2, 3]
    assert summary["tokens"] == 3 * 4 * tokens_per_step
    assert summary["active_layer_tokens"] == 4 * tokens_per_step * (1 + 2 + 3)
    assert summary["val_ce"] == summary["phases"][-1]["val_ce"]
    for key in ("val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "wall_s", "phases"):
        assert key in summary
    run_dir = outputs / "runs" / "tiny" / "post-grow-s0"
    train_lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in train_lines if r["kind"] == "train"]
    assert [r["step"] for r in steps] == list(range(1, 13))
    assert sum(tokens_per_step * r["depth"] for r in steps) == summary["active_layer_tokens"]
    assert load_student(run_dir / "checkpoints" / "final.pt").cfg.n_layers == 3
    assert not (run_dir / "checkpoints" / "last.pt").exists()
    # the time outside the steps is recorded: evaluations (step 0, every 2 steps, the two after growth) and checkpoints
    assert 0 < summary["eval_s"] and 0 < summary["checkpoint_s"]
    assert summary["eval_s"] + summary["checkpoint_s"] < summary["wall_s"]


def _params(path):
    return {n: p.detach().clone() for n, p in load_student(path).named_parameters()}


def test_freeze_prefix_trains_only_new_blocks(outputs):
    run(norm="pre", schedule="grow", freeze_prefix=True)
    ckpt = outputs / "runs" / "tiny" / "pre-grow-freeze-s0" / "checkpoints"
    p0, p1, p2 = (_params(ckpt / f"phase{i}_depth{i + 1}.pt") for i in range(3))
    for name, value in p0.items():  # block 0 and the tied embedding never move after phase 0 (the final norm trains)
        assert torch.equal(value, p2[name]) == (not name.startswith("norm")), name
    for name, value in p1.items():  # in phase 2 only blocks.2 (new) and the final norm train
        assert torch.equal(value, p2[name]) == (not name.startswith("norm")), name


def test_unfrozen_grow_retrains_the_prefix(outputs):
    run(norm="pre", schedule="grow")
    ckpt = outputs / "runs" / "tiny" / "pre-grow-s0" / "checkpoints"
    p0, p2 = _params(ckpt / "phase0_depth1.pt"), _params(ckpt / "phase2_depth3.pt")
    assert not torch.equal(p0["blocks.0.mlp.down_proj.weight"], p2["blocks.0.mlp.down_proj.weight"])


def test_appended_blocks_receive_the_prefix_output(outputs):
    run(norm="post", schedule="grow")
    model = load_student(outputs / "runs" / "tiny" / "post-grow-s0" / "checkpoints" / "final.pt")
    seen = {}
    model.blocks[1].register_forward_pre_hook(lambda m, args: seen.update(input=args[0].detach()))
    tokens = torch.randint(0, fakes.VOCAB, (2, 16))
    boundaries = model.boundaries(tokens)
    torch.testing.assert_close(seen["input"], boundaries[1], rtol=0, atol=0)


@pytest.mark.parametrize("schedule", ["joint", "grow"])
def test_a_run_s_boundary_operation_acts_at_the_depths_where_its_blocks_attach(outputs, schedule):
    """student.boundary reaches the trained student with the run's boundary depths (train.stages but the last), in
    the joint run as in the grown one: the block above each reads h at unit RMS."""
    from normgrow.config import load_profile
    overrides = fakes.TINY_OVERRIDES | {"student.boundary": "normalize"}
    run(norm="pre", schedule=schedule, overrides=overrides)
    model = load_student(outputs / "runs" / "tiny" / f"pre-{schedule}-s0" / "checkpoints" / "final.pt")
    stages = load_profile("tiny", overrides).train.stages
    assert model.cfg.boundary == "normalize" and list(model.cfg.boundary_depths) == list(stages[:-1]) != []
    with torch.no_grad():
        hs = model.boundaries(torch.randint(0, fakes.VOCAB, (2, 16)))
    for d in model.cfg.boundary_depths:
        torch.testing.assert_close(hs[d].pow(2).mean(-1), torch.ones(2, 16), atol=2e-2, rtol=0)  # rms_eps, small h


def test_matched_joint_gets_the_donor_budget(outputs):
    donor = run(norm="post", schedule="grow")
    with pytest.raises(ParamError, match="freeze_prefix=True needs"):
        make_run_spec(schedule="single", freeze_prefix=True)
    matched = run(norm="post", schedule="joint", match_active_layer_tokens="post-grow")
    assert matched["run_name"] == "post-joint-match-post-grow-s0"
    assert matched["match_active_layer_tokens"] == "post-grow-s0"
    assert matched["active_layer_tokens"] == donor["active_layer_tokens"]  # 12 steps x depth 3 = 4 x (1+2+3)
    assert matched["tokens"] < donor["tokens"]


def test_a_donor_named_with_the_run_s_seed_is_named_once():
    assert derive_run_name("post", "joint", False, "post-grow-s0", 0) == "post-joint-match-post-grow-s0"
    assert derive_run_name("post", "joint", False, "post-grow", 0) == "post-joint-match-post-grow-s0"
    assert derive_run_name("post", "joint", False, "post-grow-s1", 0) == "post-joint-match-post-grow-s1-s0"


def test_unfinished_donor_is_refused(outputs):
    (outputs / "runs" / "tiny" / "post-grow-s0").mkdir(parents=True)
    with pytest.raises(ParamError, match="is not finished"):
        make_run_spec(schedule="joint", match_active_layer_tokens="post-grow")


def test_finished_run_is_not_overwritten(outputs):
    first = run(norm="pre", schedule="single")
    summary_path = outputs / "runs" / "tiny" / "pre-single-s0" / "summary.json"
    stamp = summary_path.stat().st_mtime_ns
    again = run(norm="pre", schedule="single")
    assert again == first and summary_path.stat().st_mtime_ns == stamp
    retrained = run(norm="pre", schedule="single", force=True)
    assert summary_path.stat().st_mtime_ns != stamp
    assert retrained["val_ce"] == pytest.approx(first["val_ce"], abs=1e-6)  # deterministic on CPU


def test_finished_run_with_other_parameters_is_refused(outputs):
    run(norm="pre", schedule="single")
    changed = dict(fakes.TINY_OVERRIDES, **{"train.lr": 1e-3})
    with pytest.raises(ParamError, match="finished run with different parameters \\(profile.train.lr\\)"):
        run(norm="pre", schedule="single", overrides=changed)


def test_unfinished_run_with_other_parameters_is_refused(outputs):
    spec = make_run_spec(profile="tiny", norm="pre", schedule="grow", run_name="mine", overrides=fakes.TINY_OVERRIDES)
    from normgrow.train.resume import prepare_run_dir
    prepare_run_dir(spec, "fake")
    with pytest.raises(ParamError, match="different parameters"):
        run(norm="post", schedule="grow", run_name="mine")


@pytest.mark.parametrize("extra", [{}, {"student.new_block_init": "gated", "student.gate_ramp_steps": 4},
                                   {"train.compile": "on"}], ids=["random", "gated", "compiled"])
@pytest.mark.slow  # trains several runs or starts a process (over 10 s): not in make test-fast
def test_resume_after_sigkill_matches_uninterrupted_run(outputs, tmp_path, extra):
    """gated: the run resumes from step 4 or 6 of phase 1 (steps 4-8), whose mask ramps over all 4 of its steps
    (0.75 for the step after 6): the resumed run computes the mask from the step, as the uninterrupted one did."""
    overrides = fakes.TINY_OVERRIDES | extra
    reference = run(norm="pre", schedule="grow", run_name="reference", overrides=overrides)
    run_dir = outputs / "runs" / "tiny" / "pre-grow-s0"
    kill_mid_phase(run_dir, extra)
    resumed = run(norm="pre", schedule="grow", overrides=overrides)
    for key in ("val_ce", "val_kd_ce", "tokens", "active_layer_tokens", "steps"):
        assert resumed[key] == pytest.approx(reference[key], abs=1e-6), key
    for a, b in zip(resumed["phases"], reference["phases"]):
        assert a == pytest.approx(b, abs=1e-6)
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["kind"] == "train"] == list(range(1, 13))
    # the event file is cut back to the checkpoint as metrics.jsonl is: each step once, with the resumed values
    events = EventAccumulator(str(run_dir / TENSORBOARD_DIR))
    events.Reload()
    losses = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert [s for s, _ in losses] == list(range(1, 13))
    assert [v for _, v in losses] == pytest.approx([r["loss"] for r in lines if r["kind"] == "train"], rel=1e-6)


def test_lr_per_placement_and_schedule():
    lr = {"pre": {"joint": 1e-3, "grow": 2e-3, "single": 3e-3}, "post": 4e-4}
    assert [for_arm("train.lr", lr, "pre", s) for s in ("joint", "grow", "single")] == [1e-3, 2e-3, 3e-3]
    assert for_arm("train.lr", lr, "post", "grow") == 4e-4 and for_arm("train.lr", 5e-3, "post", "single") == 5e-3
    # a placement swept for joint and grow runs those two; its single run is refused with the sweep that fills it
    partial = {"pre": {"joint": 1e-3, "grow": 2e-3}, "post": 1e-3}
    assert for_arm("train.lr", partial, "pre", "grow") == 2e-3
    with pytest.raises(ParamError, match=r"train.lr.pre=.* no learning rate for schedule='single'; sweep it: "
                                         r"python -m normgrow.sweep --norms pre --schedules single --write"):
        for_arm("train.lr", partial, "pre", "single")
    with pytest.raises(ParamError, match=r"unknown schedule.s. gro; allowed keys: joint, grow, single"):
        for_arm("train.lr", {"pre": {"joint": 1e-3, "gro": 2e-3}}, "pre", "joint")
    # a freeze control takes its placement's grow lr, a matched run its joint lr (through make_run_spec)
    freeze = make_run_spec(profile="tiny", norm="pre", schedule="grow", freeze_prefix=True,
                           overrides=fakes.TINY_OVERRIDES | {"train.lr": lr})
    assert freeze.profile.train.lr == 2e-3


def test_warmup_per_placement_and_schedule_is_resolved_for_the_run_and_recorded_as_a_number():
    """train.warmup_steps takes the lr's forms (spec.for_arm); a run records its arm's number, so a scalar profile
    and a mapping giving the arm the same number are the same run; bad values name the key."""
    warmup = {"pre": {"joint": 4, "grow": 2, "single": 6}, "post": 3}
    spec = make_run_spec(profile="tiny", norm="pre", schedule="grow", overrides=fakes.TINY_OVERRIDES | {
        "train.warmup_steps": warmup})
    assert spec.profile.train.warmup_steps == 2
    assert make_run_spec(profile="tiny", norm="post", schedule="single", overrides=fakes.TINY_OVERRIDES | {
        "train.warmup_steps": warmup}).profile.train.warmup_steps == 3
    same = make_run_spec(profile="tiny", norm="pre", schedule="grow", overrides=fakes.TINY_OVERRIDES | {
        "train.warmup_steps": 2})
    assert same.identity()["profile"] == spec.identity()["profile"]
    with pytest.raises(ParamError, match=r"train.warmup_steps=-1 must be >= 0 \(one value, or a mapping like"):
        make_run_spec(profile="tiny", overrides=fakes.TINY_OVERRIDES | {"train.warmup_steps": {"pre": -1}})
    with pytest.raises(ParamError, match=r"train.warmup_steps=.* gives no warmup for norm='post'"):
        make_run_spec(profile="tiny", norm="post", overrides=fakes.TINY_OVERRIDES | {"train.warmup_steps": {"pre": 2}})


@pytest.mark.parametrize("profile", ["tiny", "quick", "cpu", "gpu", "paper"])
def test_a_run_crosses_into_its_kernel_once_as_its_resolved_spec(profile):
    """RunSpec.to_json is what a runner hands run_variant.ipynb: its profile is the run's own, the arm's peak lr a
    number (never the profile's mapping), and from_json gives back the same spec and identity without the profile's
    file. A spec whose lr is a mapping is refused."""
    import dataclasses
    from normgrow.config import load_profile
    from normgrow.train.spec import RunSpec
    for norm, schedule in (("pre", "joint"), ("post", "grow"), ("post", "single")):
        spec = make_run_spec(profile=profile, norm=norm, schedule=schedule, seed=3, run_name="x")
        raw = json.loads(json.dumps(spec.to_json()))
        assert isinstance(raw["profile"]["train"]["lr"], float)
        assert raw["profile"]["train"]["lr"] == for_arm("train.lr", load_profile(profile).train.lr, norm, schedule)
        assert RunSpec.from_json(raw) == spec and RunSpec.from_json(raw).identity() == spec.identity()
    mapping = dataclasses.replace(spec.profile.train, lr={"pre": 1e-3})
    with pytest.raises(ParamError, match=r"a run trains at one peak lr, its arm's"):
        dataclasses.replace(spec, profile=dataclasses.replace(spec.profile, train=mapping))
    mapping = dataclasses.replace(spec.profile.train, warmup_steps={"pre": 3})
    with pytest.raises(ParamError, match=r"a run trains at one warmup, its arm's"):
        dataclasses.replace(spec, profile=dataclasses.replace(spec.profile, train=mapping))


def test_lr_mapping_needs_only_the_runs_placement():
    """A mapping tuned for pre and post runs those two; another placement needs its own key; a key that is no
    placement is still an error."""
    lr = {"pre": 1e-3, "post": 4e-4}
    assert for_arm("train.lr", lr, "post", "joint") == 4e-4
    assert for_arm("train.lr", {"mix": 2e-3}, "mix", "grow") == 2e-3
    with pytest.raises(ParamError, match=r"train.lr=.* gives no learning rate for norm='peri' \(keys given: pre, "
                                         r"post\); add train.lr.peri"):
        for_arm("train.lr", lr, "peri", "joint")
    with pytest.raises(ParamError, match="unknown placement.s. sandwich; allowed keys: pre, post, mix, peri, "
                                         "deepnorm, lns"):
        for_arm("train.lr", lr | {"sandwich": 1e-3}, "pre", "joint")
    with pytest.raises(ParamError, match="no learning rate for norm='lns'"):
        make_run_spec(profile="tiny", norm="lns", overrides=fakes.TINY_OVERRIDES | {"train.lr": lr})


def test_keep_carries_the_old_parameters_adamw_state_exactly():
    """optimizer_on_grow keep: after growth the old parameters' exp_avg, exp_avg_sq and step are those before it
    (torch.equal) and the appended block's parameters have no state; reset: no parameter has state."""
    from normgrow.config import TrainParams
    from normgrow.student.model import Student, StudentConfig
    from normgrow.train.optim import make_optimizer
    torch.manual_seed(0)
    model = Student(StudentConfig(vocab_size=fakes.VOCAB, n_layers=1, d_model=16, n_heads=2, n_kv_heads=1,
                                  head_dim=8, d_ff=32))
    keep, reset = TrainParams(optimizer_on_grow="keep"), TrainParams(optimizer_on_grow="reset")
    opt = make_optimizer(model, keep, None)
    for _ in range(2):
        model(torch.randint(0, fakes.VOCAB, (2, 8))).logsumexp(-1).mean().backward()
        opt.step()
        opt.zero_grad()
    before = {p: {k: v.clone() for k, v in opt.state[p].items()} for p in model.parameters()}
    model.append_blocks(1, init="random")
    kept = make_optimizer(model, keep, opt)
    new = set(model.blocks[1].parameters())
    for p in model.parameters():
        if p in new:
            assert p not in kept.state
        else:
            assert kept.state[p].keys() == before[p].keys() == {"step", "exp_avg", "exp_avg_sq"}
            assert all(torch.equal(kept.state[p][k], before[p][k]) for k in before[p])
    assert not make_optimizer(model, reset, opt).state


@pytest.mark.slow  # trains several runs or starts a process (over 10 s): not in make test-fast
@pytest.mark.parametrize("norm", ["mix", "peri", "deepnorm", "lns"])
def test_every_schedule_trains_the_other_placements(outputs, norm):
    """joint, grow (gated), single, freeze and matched runs finish with finite losses; a grown run records the
    validation CE just after each growth step, equal to the previous phase's final one (gated growth preserves the
    function), and none for its first phase nor for a joint run."""
    gated = fakes.TINY_OVERRIDES | {"student.new_block_init": "gated", "student.gate_ramp_steps": 3}
    grow = run_variant(make_run_spec(profile="tiny", norm=norm, schedule="grow", overrides=gated,
                                     run_name=f"{norm}-grow-s0"), progress=False)
    phases = grow["phases"]
    assert phases[0]["val_ce_after_growth"] is None
    for before, after in zip(phases, phases[1:]):
        assert after["val_ce_after_growth"] == pytest.approx(before["val_ce_subset"], abs=1e-6)
    joint = run(norm=norm, schedule="joint")
    assert joint["phases"][0]["val_ce_after_growth"] is None
    for kw in ({"schedule": "single"}, {"schedule": "grow", "freeze_prefix": True},
               {"schedule": "joint", "match_active_layer_tokens": f"{norm}-grow"}):
        summary = run(norm=norm, **kw)
        assert all(math.isfinite(p["val_ce"]) for p in summary["phases"]), kw
    assert summary["active_layer_tokens"] == grow["active_layer_tokens"]


def test_zero_out_growth_of_pre_norm_keeps_the_validation_loss(outputs):
    summary = run(norm="pre", schedule="grow", overrides=fakes.TINY_OVERRIDES | {"student.new_block_init": "zero_out"})
    for before, after in zip(summary["phases"], summary["phases"][1:]):
        assert after["val_ce_after_growth"] == pytest.approx(before["val_ce_subset"], abs=1e-6)


def test_evaluations_read_by_a_claim_or_gate_cover_the_whole_split():
    """Phase ends and the last eval_every point at or before 80% of the run's steps (the
    flatness gate's v_80) are full; the other eval_every points and the growth evaluations read the subset."""
    from types import SimpleNamespace
    from normgrow.train.evaluate import evaluation_plan
    params = SimpleNamespace(eval_every=128, eval_after_growth=(8, 32, 64))
    joint = evaluation_plan(plan_phases("joint", (3, 6, 9), (262144,) * 3, 1024), params)
    assert {s: (e.kind, e.full) for s, e in joint.items()} == {
        128: ("eval", False), 256: ("eval", False), 384: ("eval", False), 512: ("eval", True), 640: ("eval", False),
        768: ("phase_end", True)}
    grow = evaluation_plan(plan_phases("grow", (3, 6, 9), (262144,) * 3, 1024), params)
    assert {s for s, e in grow.items() if e.full} == {256, 512, 768}
    assert {s for s, e in grow.items() if e.kind == "growth_eval"} == {264, 288, 320, 520, 544, 576}
    assert not any(e.full for e in grow.values() if e.kind != "phase_end")  # 512, the gate's point, is a phase end


def test_the_validation_subset_is_evenly_spread_and_fixed():
    from normgrow.train.evaluate import subset_rows
    rows = subset_rows(256, 16384, 256)
    assert len(rows) == 64 and rows[0] == 0 and rows[-1] == 255 and (rows == subset_rows(256, 16384, 256)).all()
    assert set(np.diff(rows).tolist()) == {4, 5}  # 255 / 63 apart: no stretch of the split left out
    assert (subset_rows(10, 0, 256) == range(10)).all() and (subset_rows(10, 1 << 20, 256) == range(10)).all()


def test_subset_points_are_recorded_as_such_and_the_gate_reads_whole_split_points(outputs):
    """A run's records say which evaluations read the subset; its full-split points are the values a run on the
    whole split records at the same steps, and the flatness curve (regime.eval_curve) holds only those and the start
    (numerics version 5: the untrained model on the subset)."""
    from normgrow.analysis.regime import eval_curve
    subset = {**fakes.TINY_OVERRIDES, "train.eval_tokens": 64}  # 4 of the fake cache's 8 validation rows
    run(norm="pre", schedule="joint", overrides=subset, run_name="subset")
    run(norm="pre", schedule="joint", run_name="whole")
    read = lambda name: [json.loads(l) for l in (outputs / "runs" / "tiny" / name / "metrics.jsonl").read_text()
                         .splitlines() if json.loads(l)["kind"] in ("eval", "phase_end")]
    sub, whole = read("subset"), read("whole")
    assert [r["step"] for r in sub] == [r["step"] for r in whole]
    assert any(not r["full_split"] for r in sub) and all(r["full_split"] for r in whole)
    assert not sub[0]["full_split"] and sub[0]["step"] == 0
    for s, w in zip(sub, whole):
        # the same model: equal where both are full (to float32 rounding: the subset's rows are batched first)
        assert (s["val_ce"] == pytest.approx(w["val_ce"], rel=1e-6)) == s["full_split"]
        assert s["eval_positions"] < w["eval_positions"] or s["full_split"]
    assert [r["step"] for r in eval_curve(outputs / "runs" / "tiny" / "subset")] == [
        r["step"] for r in sub if r["full_split"] or r["step"] == 0]
    # whole-split points carry the subset's value too, and the run's curve is drawn on the subset throughout
    from normgrow.viz.plots import val_records
    assert all("val_ce_subset" in r for r in sub if r["full_split"]) and not any("val_ce_subset" in r for r in whole)
    curve = val_records(outputs / "runs" / "tiny" / "subset")
    assert list(curve["val_ce"]) == [r["val_ce_subset"] if r["full_split"] else r["val_ce"] for r in sub]
    assert list(val_records(outputs / "runs" / "tiny" / "whole")["val_ce"]) == [r["val_ce"] for r in whole]


def test_a_whole_split_evaluation_gives_the_subsets_values_of_an_evaluation_of_the_subset_alone():
    """numerics version 5: the subset's rows go first, in batches of their own, so its means from the whole split's
    forward equal those of the subset alone bit for bit, and the whole split's means are its rows' (every row once)."""
    from normgrow.data.vocab import VocabMap
    from normgrow.student.model import Student, StudentConfig
    from normgrow.train.evaluate import evaluate, subset_rows
    cache = fakes.fake_cache(n_val=12)
    torch.manual_seed(0)
    model = Student(StudentConfig(vocab_size=fakes.VOCAB, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1,
                                  head_dim=8, d_ff=32, max_seq_len=16, norm="post"))
    vocab = VocabMap.for_cache(cache, "full")
    subset, rows = subset_rows(12, 5 * 16, 16), np.arange(12)
    args = (model, cache.val, rows, 3, torch.device("cpu"), torch.float32, vocab)
    whole = evaluate(*args, subset=subset)
    alone = evaluate(model, cache.val, subset, 3, torch.device("cpu"), torch.float32, vocab)
    assert (whole["val_ce_subset"], whole["val_kd_ce_subset"]) == (alone["val_ce"], alone["val_kd_ce"])
    plain = evaluate(*args)
    assert "val_ce_subset" not in plain and whole["eval_positions"] == plain["eval_positions"]
    assert whole["val_ce"] == pytest.approx(plain["val_ce"], rel=1e-6)  # the same rows, summed in another order
    assert whole["val_ce"] != pytest.approx(whole["val_ce_subset"], rel=1e-3)


def test_a_run_says_at_its_end_whether_the_regime_gate_counts_it_trained(outputs):
    """A tiny run on the synthetic cache ends within a nat of the unigram level with a curve that did not improve:
    its verdict (what the command line, the notebook and an in-process sweep print after run_variant) is a WARNING
    naming both criteria, then the note that tiny is a smoke profile; with the level passed (a doctored final
    val_ce) only the curve is named."""
    from normgrow.analysis.regime import regime_line, run_verdict
    from normgrow.config import load_profile, smoke_note
    from normgrow.data import teacher_cache
    summary = run(norm="pre", schedule="joint")
    spec = make_run_spec(profile="tiny", norm="pre", schedule="joint", overrides=fakes.TINY_OVERRIDES,
                         run_name="pre-joint-s0")
    line, last = run_verdict(spec, summary).splitlines()
    assert last == smoke_note("tiny") and last.startswith("note: tiny is a smoke profile") and smoke_note("cpu") == ""
    assert line.startswith("WARNING: pre-joint-s0: final val_ce") and "not trained by the regime gate" in line
    assert "the unigram level" in line and "has not flattened" in line
    cache = teacher_cache.ensure_cache(load_profile("tiny", fakes.TINY_OVERRIDES))  # the synthetic cache (fakes)
    level_passed = regime_line(outputs / "runs" / "tiny" / "pre-joint-s0", {**summary, "val_ce": 0.5}, cache)
    assert "unigram" not in level_passed and "has not flattened" in level_passed


def test_a_run_redraws_its_bar_at_the_bar_s_interval_not_at_every_step(outputs, monkeypatch):
    """The loop's postfix (loss, tokens, tok/s) is drawn at the bar's next redraw, not forced at every step: in a
    runner's notebook, whose bar is redrawn every 10 s, a 12-step run writes it at its start and its end (bug:
    set_postfix redrew the bar at every step, and each executed notebook of the cpu study kept 768 redraws, 5 MB)."""
    import io
    import sys

    import ipykernel  # noqa: F401 (a kernel's process has it loaded)
    from normgrow import progress
    notebook = io.StringIO()
    monkeypatch.setattr(sys, "stdout", notebook)
    monkeypatch.setenv(progress.RUNNER_KERNEL, "1")
    run_variant(make_run_spec(profile="tiny", norm="pre", schedule="joint", overrides=fakes.TINY_OVERRIDES,
                              run_name="drawn"), progress=True)
    assert notebook.getvalue().count("drawn: ") == 2, notebook.getvalue()

