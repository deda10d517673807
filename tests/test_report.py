"""normgrow.viz.report on synthetic run directories with known numbers (fast: no training, no teacher)."""
from __future__ import annotations

import json
import math
import re
import shutil

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs_version
import pytest

from normgrow import config
from normgrow.analysis import claims, reference, regime, stats, variants
from normgrow.viz import palette, report, report_figures
from normgrow.rundir import unfinished_runs
from normgrow.analysis.reference import load_reference
from normgrow.analysis.variants import collect_runs
from synthetic_runs import write_metrics, write_run

# Student t 0.975 quantiles (scipy.stats.t.ppf(0.975, df)); df=2 has the closed form 0.95 * sqrt(2 / (1 - 0.95^2)).
T975 = {1: 12.706204736174698, 2: 0.95 * math.sqrt(2 / (1 - 0.95 ** 2)), 3: 3.182446305284263,
        4: 2.7764451051977987, 9: 2.2621571627409915, 29: 2.045229642132703}


UNIGRAM = 7.5  # the synthetic studies' val_ce are 5.0-6.1 in every seed: more than UNIGRAM_MARGIN below it


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    return tmp_path


@pytest.fixture
def trained(monkeypatch):
    """Baselines as a teacher cache would give them (unigram at UNIGRAM), so that the synthetic students pass the
    regime gate's level criterion."""
    monkeypatch.setattr(report, "baselines", lambda profile, teacher_key=None: {
        "teacher_val_ce": 3.0, "teacher_source": "synthetic", "unigram_val_ce": UNIGRAM, "unigram_source": "synthetic"})


def write_study(root, grow_gaps, joint_gaps, matched_gaps=None, single_gaps=None, freeze_gaps=None,
                stage0_gaps=None, base=5.0, post_joint_shift=0.0, depth_gain=0.5):
    """pre/post pairs whose per-seed differences (pre - post) are exactly the given gaps (post-joint's moved by
    post_joint_shift). The single runs are always written (single_gaps default 0), post-single depth_gain above
    post-joint's unshifted level: post-norm's depth gain (single - joint) is depth_gain - post_joint_shift, pre-norm's
    depth_gain + mean(single_gaps) - mean(joint_gaps)."""
    seeds = range(len(grow_gaps))
    single_gaps = single_gaps if single_gaps is not None else [0.0] * len(grow_gaps)
    for s in seeds:
        b = base + 0.1 * s  # seed effect, cancelled by pairing
        s0 = stage0_gaps[s] if stage0_gaps is not None else 0.0
        write_run(root, "post-grow", s, b, phase_ce=[b + 1.0, b + 0.5, b])
        write_run(root, "pre-grow", s, b + grow_gaps[s], phase_ce=[b + 1.0 + s0, b + 0.5 + grow_gaps[s] / 2,
                                                                   b + grow_gaps[s]])
        write_run(root, "post-joint", s, b + 0.2 + post_joint_shift, schedule="joint", depths=(3,))
        write_run(root, "pre-joint", s, b + 0.2 + joint_gaps[s], schedule="joint", depths=(3,))
        if matched_gaps is not None:
            write_run(root, "post-joint-matched", s, b + matched_gaps[s], schedule="joint", depths=(3,))
        write_run(root, "post-single", s, b + 0.2 + depth_gain, schedule="single", depths=(1,))
        write_run(root, "pre-single", s, b + 0.2 + depth_gain + single_gaps[s], schedule="single", depths=(1,))
        if freeze_gaps is not None:
            write_run(root, "post-grow-freeze", s, b + 0.3, phase_ce=[b + 1.0, b + 0.6, b + 0.3])
            write_run(root, "pre-grow-freeze", s, b + 0.3 + freeze_gaps[s], phase_ce=[b + 1.0, b + 0.6,
                                                                                     b + 0.3 + freeze_gaps[s]])


def claims_by_id(rep):
    return {c.claim: c.to_json() for c in rep.claims}


# ------------------------------------------------------------------------------------------------------ statistics

def test_mean_ci_hand_computation():
    x = [1.0, 2.0, 4.0]
    s = stats.mean_ci(x)
    mean, sd = 7 / 3, math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    half = T975[2] * sd / math.sqrt(3)
    assert s["n"] == 3 and s["mean"] == pytest.approx(mean) and s["sd"] == pytest.approx(sd)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((mean - half, mean + half))


def test_mean_ci_single_and_empty_and_nan():
    one = stats.mean_ci([3.0])
    assert one["n"] == 1 and one["mean"] == 3.0 and math.isnan(one["ci_low"]) and math.isnan(one["sd"])
    none = stats.mean_ci([])
    assert none["n"] == 0 and math.isnan(none["mean"])
    assert stats.mean_ci([1.0, float("nan"), 3.0])["n"] == 2


def test_judge_three_ways():
    s = lambda lo, hi: {"n": 3, "mean": (lo + hi) / 2, "ci_low": lo, "ci_high": hi}
    assert claims.judge(s(0.1, 0.2)) == claims.SUPPORTED
    assert claims.judge(s(-0.1, 0.2)) == claims.NOT_RESOLVED
    assert claims.judge(s(-0.2, -0.1)) == claims.NOT_SUPPORTED
    assert claims.judge(s(-0.2, -0.1), direction=-1) == claims.SUPPORTED
    assert claims.judge({"n": 1, "mean": 1.0, "ci_low": math.nan, "ci_high": math.nan}) == claims.NOT_RESOLVED
    assert claims.judge({"n": 0}) == claims.NOT_TESTABLE


# ------------------------------------------------------------------------------------------------------- collection

def test_collect_runs_and_variant_stats(outputs):
    for seed, ce in enumerate([5.0, 5.2, 5.6]):
        write_run(outputs, "post-grow", seed, ce, phase_ce=[7.0 + seed, 6.0, ce])
    write_run(outputs, "pre-grow", 0, 5.5, phase_ce=[7.0, 6.1, 5.5])
    (outputs / "runs" / "tiny" / "pre-grow-s1").mkdir()  # unfinished: no summary.json
    write_run(outputs, "sweep-pre-joint-lr3e-03", 0, 4.0)  # the lr sweep's runs are not study runs
    (outputs / "runs" / "tiny" / "sweep-post-joint-lr1e-03-s0").mkdir()
    config_json = outputs / "runs" / "tiny" / "post-grow-s1" / "config.json"  # trained elsewhere: still counted
    config_json.write_text(json.dumps(json.loads(config_json.read_text()) | {"environment": {"cpu": "CPU A"}}))
    runs = stats.runs_frame(collect_runs("tiny"))
    assert list(runs["run_name"]) == ["post-grow-s0", "post-grow-s1", "post-grow-s2", "pre-grow-s0"]
    assert list(runs["machine"]) == ["not recorded", "CPU A", "not recorded", "not recorded"]
    assert list(runs["variant"]) == ["post-grow"] * 3 + ["pre-grow"]
    assert list(runs["seed"]) == [0, 1, 2, 0]
    assert list(runs["val_ce_p0"]) == [7.0, 8.0, 9.0, 7.0]
    assert stats.n_phases(runs) == 3
    assert unfinished_runs("tiny") == ["pre-grow-s1"]
    table = stats.variant_stats(runs).set_index("variant")
    x = np.array([5.0, 5.2, 5.6])
    half = T975[2] * x.std(ddof=1) / math.sqrt(3)
    assert table.loc["post-grow", "n_seeds"] == 3 and table.loc["post-grow", "seeds"] == "0 1 2"
    assert table.loc["post-grow", "val_ce_mean"] == pytest.approx(x.mean())
    assert table.loc["post-grow", "val_ce_ci_low"] == pytest.approx(x.mean() - half)
    assert table.loc["post-grow", "val_kd_ce_ci_high"] == pytest.approx(x.mean() - 3.0 + half)
    assert table.loc["pre-grow", "n_seeds"] == 1 and math.isnan(table.loc["pre-grow", "val_ce_ci_low"])


def test_runs_are_assigned_by_recorded_parameters_not_names(outputs, trained):
    """A matched run launched by hand (named by derive_run_name) counts as post-joint-matched; a run recorded with
    another lr, a second run of the same variant and seed, and a run that matches no run file are listed, not
    counted."""
    for seed in (0, 1):
        write_run(outputs, "post-grow", seed, 5.0 + seed)
    write_run(outputs, "post-joint-matched", 0, 5.3, run_name="post-joint-match-post-grow-s0-s0")
    write_run(outputs, "post-joint-matched", 1, 5.4, run_name="post-joint-matched-s1")
    write_run(outputs, "post-joint-matched", 1, 9.9, run_name="post-joint-match-post-grow-s1-s1")
    write_run(outputs, "pre-single", 0, 4.0, lr=0.5)  # as with overrides: {train.lr: 0.5}
    write_run(outputs, "post-joint", 0, 4.0, run_name="odd", schedule="grow")
    summary = json.loads((outputs / "runs" / "tiny" / "odd" / "summary.json").read_text())
    (outputs / "runs" / "tiny" / "odd" / "summary.json").write_text(json.dumps(summary | {"freeze_prefix": True,
                                                                                         "schedule": "single"}))
    study = collect_runs("tiny")
    assert {k: s.run_name for k, s in study.assigned.items()} == {
        ("post-grow", 0): "post-grow-s0", ("post-grow", 1): "post-grow-s1",
        ("post-joint-matched", 0): "post-joint-match-post-grow-s0-s0", ("post-joint-matched", 1): "post-joint-matched-s1"}
    assert "another run (post-joint-matched-s1) already holds post-joint-matched seed 1" in \
        study.unassigned["post-joint-match-post-grow-s1-s1"]
    assert "differ from params/profiles/tiny.yaml (profile.train.lr)" in study.unassigned["pre-single-s0"]
    assert "match no run file" in study.unassigned["odd"]
    rep = report.build_report("tiny")
    gap = rep.gaps.set_index(["metric", "gap"]).loc[("val_ce", "matched")]
    assert gap["n"] == 2 and gap["mean"] == pytest.approx(((5.3 - 5.0) + (5.4 - 6.0)) / 2)
    assert any("[not counted] pre-single-s0" in line for line in rep.sentences())
    files = report.write_report(rep)
    assert set(pd.read_csv(files["unassigned"])["run"]) == {"post-joint-match-post-grow-s1-s1", "pre-single-s0", "odd"}
    # the first screen counts them; the list, with each reason, closes the page, collapsed
    page = files["report"].read_text()
    assert "3 finished runs not counted (listed at the end of the page" in page
    assert page.index("<summary>3 finished runs not counted, and why") > page.index("<section id='runs'>")
    assert page.index("<li>odd: ") > page.index("<section id='runs'>")


def test_empty_profile_gives_empty_report(outputs):
    rep = report.build_report("tiny")
    assert len(rep.runs) == 0 and len(rep.stats) == 0 and len(rep.crossover) == 0
    assert all(c.status == claims.NOT_TESTABLE for c in rep.claims)
    files = report.write_report(rep)
    assert files["summary"].is_file() and files["report"].is_file()
    assert rep.baselines == {} and "no teacher cache" in files["report"].read_text()
    assert "no teacher cache" in json.loads(files["baselines"].read_text())["note"]
    assert rep.regime_verdict() == "no finished runs: nothing to judge" and files["regime"].is_file()


def test_unigram_val_ce():
    from normgrow.data.corpus import unigram_logp, unigram_val_ce
    train = np.array([[0, 1, 2, 3], [0, 0, 1, 1]])  # counts 3, 3, 1, 1 of 8
    val = np.array([[0, 1, 2, 3]])
    starts = np.array([[True, False, True, False]])  # the target at position 1 is a new document's BOS: masked
    # loss positions t = 0 and 2 (t = 3 has no target), targets 1 and 3
    expected = -(np.log(3 / 8) + np.log(1 / 8)) / 2
    assert -unigram_logp(train, val, 4, pseudo_count=0.0)[[1, 3]].mean() == pytest.approx(expected)
    smoothed = -(np.log(3.5 / 10) + np.log(1.5 / 10)) / 2
    assert unigram_val_ce(train, val, starts, vocab_size=4) == pytest.approx(smoothed)


def test_the_unigram_level_smooths_over_the_ids_that_occur_not_the_teachers_vocabulary():
    """A teacher vocabulary of 262,144 ids over a corpus using 4 of them: the smoothing mass stays on the 4 ids (the
    level is the same as with a 4-id vocabulary, where it used to grow with the teacher's vocabulary); an id that
    occurs only in the validation tokens is in the support with the pseudo count alone."""
    from normgrow.data.corpus import UNIGRAM_PSEUDO_COUNT, unigram_logp, unigram_val_ce
    train = np.array([[0, 1, 2, 3], [0, 0, 1, 1]])
    val, starts = np.array([[0, 1, 2, 3]]), np.array([[True, False, True, False]])
    assert unigram_val_ce(train, val, starts, vocab_size=262_144) == pytest.approx(
        unigram_val_ce(train, val, starts, vocab_size=4))
    logp = unigram_logp(train, np.array([[0, 7]]), vocab_size=262_144)
    assert np.isfinite(logp).sum() == 5 and np.exp(logp[np.isfinite(logp)]).sum() == pytest.approx(1.0)
    assert np.exp(logp[7]) == pytest.approx(UNIGRAM_PSEUDO_COUNT / (8 + 5 * UNIGRAM_PSEUDO_COUNT))


# ------------------------------------------------------------------------------------------------------------ gaps

def test_paired_gaps_pair_by_seed_and_cancel_seed_effects(outputs):
    write_study(outputs, grow_gaps=[0.03, 0.04, 0.05], joint_gaps=[0.001, -0.002, 0.0015],
                matched_gaps=[0.02, 0.03, 0.025])
    write_run(outputs, "post-grow", 7, 1.0)  # unpaired seed: ignored by the gap
    runs = stats.runs_frame(collect_runs("tiny"))
    g = stats.paired_gap(runs, "pre-grow", "post-grow")
    assert g["n"] == 3 and g["seeds"] == "0 1 2" and g["unpaired_seeds"] == "7"
    half = T975[2] * np.std([0.03, 0.04, 0.05], ddof=1) / math.sqrt(3)
    assert g["mean"] == pytest.approx(0.04) and g["ci_low"] == pytest.approx(0.04 - half)
    table = stats.gap_table(runs, load_reference().gaps).set_index(["metric", "gap"])
    assert table.loc[("val_ce", "joint"), "mean"] == pytest.approx(0.0005 / 3)
    assert table.loc[("val_ce", "joint"), "reference"] == 0.0004
    assert table.loc[("val_ce", "grow"), "reference"] == 0.0328
    assert table.loc[("val_ce", "matched"), "mean"] == pytest.approx(0.025)
    assert table.loc[("val_kd_ce", "grow"), "mean"] == pytest.approx(0.04)  # val_kd_ce = val_ce - 3 here
    assert table.loc[("val_ce", "freeze"), "missing"] == "pre-grow-freeze post-grow-freeze"
    ratio = stats.gap_ratio(table.reset_index())
    assert ratio["ratio"] == pytest.approx(0.04 / (0.0005 / 3)) and not ratio["second_resolved"]


def test_crossover_table_detects_the_switch(outputs, trained):
    # stage 0: pre-grow better by 0.1 (gap -0.1 +- noise); final stage: post-grow better.
    write_study(outputs, grow_gaps=[0.03, 0.04, 0.05], joint_gaps=[0.0, 0.001, -0.001],
                stage0_gaps=[-0.10, -0.12, -0.11])
    rep = report.build_report("tiny")
    t = rep.crossover
    assert list(t["stage"]) == [0, 1, 2] and list(t["depth"]) == [1, 2, 3]
    assert t.loc[0, "gap_mean"] == pytest.approx(-0.11) and t.loc[0, "resolved_leader"] == "pre-grow"
    assert t.loc[2, "gap_mean"] == pytest.approx(0.04) and t.loc[2, "resolved_leader"] == "post-grow"
    assert t.loc[2, "post-grow_mean"] == pytest.approx(5.1)
    c = claims_by_id(rep)["obs2-crossover"]
    assert c["status"] == claims.SUPPORTED and c["supported"] is True
    assert "stage 1" in c["sentence"] or "stage 2" in c["sentence"]
    fig = report_figures.crossover_figure(rep)
    assert len(fig.data) == 3


# ------------------------------------------------------------------------------------------------ claims flip

def test_claims_supported(outputs, trained):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005],
                matched_gaps=[0.02, 0.025, 0.03], single_gaps=[0.0, 0.002, -0.002],
                freeze_gaps=[0.02, 0.025, 0.022], stage0_gaps=[-0.05, -0.06, -0.055])
    c = claims_by_id(report.build_report("tiny"))
    for cid in ("headline-joint", "headline-grow", "headline-ratio", "obs1-matched", "obs2-crossover",
                "obs3-controls", "obs3-single", "obs3-freeze"):
        assert c[cid]["status"] == claims.SUPPORTED, (cid, c[cid]["sentence"])
        assert c[cid]["sentence"].startswith("Supported")
    assert "+0.0350" in c["headline-grow"]["sentence"]  # the numbers are in the sentence


def test_claims_not_resolved_when_interval_includes_zero(outputs, trained):
    write_study(outputs, grow_gaps=[0.05, -0.04, 0.02], joint_gaps=[0.03, 0.031, 0.029],
                matched_gaps=[0.05, -0.05, 0.01], single_gaps=[0.05, -0.04, 0.02],
                freeze_gaps=[0.03, -0.03, 0.01], stage0_gaps=[-0.05, 0.05, 0.01])
    c = claims_by_id(report.build_report("tiny"))
    for cid in ("headline-grow", "obs1-matched", "obs2-crossover", "obs3-freeze", "obs3-controls"):
        assert c[cid]["status"] == claims.NOT_RESOLVED, (cid, c[cid]["sentence"])
        assert c[cid]["supported"] is None and c[cid]["sentence"].startswith("Not resolved")
    assert "includes zero" in c["headline-grow"]["sentence"]
    # a claim left open says how large an effect its seeds could have detected: the interval's half-width
    grow = c["headline-grow"]
    mde = (grow["evidence"]["ci_high"] - grow["evidence"]["ci_low"]) / 2
    assert f"an effect of {mde:.3f} or more (MDE" in grow["sentence"]
    # the joint gap is resolved away from zero here: "indistinguishable" is not supported
    assert c["headline-joint"]["status"] == claims.NOT_SUPPORTED
    assert "post-norm is better" in c["headline-joint"]["sentence"]


def test_claims_not_supported_when_wrong_direction(outputs, trained):
    write_study(outputs, grow_gaps=[-0.03, -0.035, -0.04], joint_gaps=[0.001, -0.001, 0.0005],
                matched_gaps=[-0.02, -0.025, -0.03], single_gaps=[0.10, 0.11, 0.12],
                freeze_gaps=[-0.02, -0.025, -0.022], stage0_gaps=[-0.05, -0.06, -0.055])
    c = claims_by_id(report.build_report("tiny"))
    for cid in ("headline-grow", "headline-ratio", "obs1-matched", "obs2-crossover", "obs3-single",
                "obs3-freeze", "obs3-controls"):
        assert c[cid]["status"] == claims.NOT_SUPPORTED, (cid, c[cid]["sentence"])
        assert c[cid]["supported"] is False and c[cid]["sentence"].startswith("Not supported")
    assert "pre-norm still leads" in c["obs2-crossover"]["sentence"]


def test_crossover_not_supported_when_post_leads_from_the_start(outputs, trained):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.002, -0.001, 0.0005],
                stage0_gaps=[0.05, 0.06, 0.055])
    by_id = claims_by_id(report.build_report("tiny"))
    c = by_id["obs2-crossover"]
    assert c["status"] == claims.NOT_SUPPORTED
    assert c["sentence"].startswith("Not supported: no crossover: post-norm leads from the first stage (depth 1)")
    # a joint gap level with zero gives no ratio: the sentence says why instead of printing one
    ratio = by_id["headline-ratio"]["sentence"]
    assert "No ratio of gaps is read" in ratio and "so a ratio to it is unbounded" in ratio
    assert not re.search(r"[-+]?\d+\.\dx \(", ratio) and "ratio" not in by_id["headline-ratio"]["evidence"]


def test_single_seed_and_missing_variants(outputs, trained):
    write_study(outputs, grow_gaps=[0.03], joint_gaps=[0.001])
    rep = report.build_report("tiny")
    c = claims_by_id(rep)
    assert c["headline-grow"]["status"] == claims.NOT_RESOLVED
    assert "1 paired seed" in c["headline-grow"]["sentence"] and "no CI" in c["headline-grow"]["sentence"]
    assert c["headline-joint"]["status"] == claims.NOT_RESOLVED
    assert c["obs2-crossover"]["status"] == claims.NOT_RESOLVED
    assert c["obs1-matched"]["status"] == claims.NOT_TESTABLE
    assert "post-joint-matched" in c["obs1-matched"]["sentence"]
    g = rep.gaps.set_index(["metric", "gap"]).loc[("val_ce", "grow")]
    assert g["n"] == 1 and g["mean"] == pytest.approx(0.03) and math.isnan(g["ci_low"])


# ------------------------------------------------------------------------------------------------------- writing

def test_write_report_files_and_diagnostics(outputs, trained):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005])
    rep = report.build_report("tiny")
    assert rep.diagnostics_claims is None and "not available" in rep.diagnostics_note
    assert any("not available" in s for s in rep.sentences())
    files = report.write_report(rep)
    summary = pd.read_csv(files["summary"])
    assert len(summary) == 18 and {"variant", "seed", "val_ce", "val_kd_ce", "tokens", "active_layer_tokens",
                                   "wall_s", "val_ce_p0", "val_ce_p2"} <= set(summary.columns)
    assert set(pd.read_csv(files["variant_stats"])["variant"]) == {"pre-grow", "post-grow", "pre-joint",
                                                                   "post-joint", "pre-single", "post-single"}
    regime_table = pd.read_csv(files["regime"])
    assert (list(regime_table.columns) == list(regime.REGIME_FIELDS) and regime_table["trained"].all()
            and len(regime_table) == 6)
    assert json.loads(files["baselines"].read_text()) == {"teacher_val_ce": 3.0, "teacher_source": "synthetic",
                                                         "unigram_val_ce": UNIGRAM, "unigram_source": "synthetic"}
    assert {"flat_ratio", "flattened", "flat_note"} <= set(summary.columns)
    assert pd.read_csv(files["claims"])["variants"].iloc[0] == "pre-joint post-joint"
    page = files["report"].read_text()
    assert page.index("Baselines on the same") < page.index("Training regime") < page.index("<h2>Claims")
    assert f"not recorded, 18 runs, {18 * 1.5 / 3600:.2f} run-hours" in page  # synthetic runs: no environment
    assert "students trained: claims judged" in page and "flatness per run" in page
    # plotly.js from the outputs root's one copy, by a relative path (no CDN, not inlined)
    assert re.findall(r"<script[^>]*src='([^']+)'", page) == [f"../../assets/plotly-{get_plotlyjs_version()}.min.js"]
    assert (outputs / "assets" / f"plotly-{get_plotlyjs_version()}.min.js").is_file() and len(page) < 1_000_000
    assert "Diagnostics are not available" in page
    assert str(outputs) not in page  # a committed page names no folder of the machine that wrote it

    study = outputs / "study" / "tiny"
    diag = [claims.Claim("obs4-boundary-scale", "post-norm keeps boundary scale stable", claims.SUPPORTED,
                         "Supported: ratio x1.02", {"ratio": 1.02}, ("pre-grow", "post-grow")),
            claims.Claim("obs5-identity", "final pre-norm block near identity", claims.NOT_TESTABLE,
                         "Not testable: update/input 0.03", {}, ("pre-grow",))]
    (study / "diagnostics.json").write_text(json.dumps({"claims": [c.to_json() for c in diag]}))
    (study / "diagnostics.html").write_text("<html>diag</html>")
    rep = report.build_report("tiny")
    assert rep.diagnostics_claims == diag  # the same records, through the regime gate (all trained here)
    page = report.report_html(rep)
    assert "obs4-boundary-scale" in page and "Supported: ratio x1.02" in page and "href='diagnostics.html'" in page
    (study / "diagnostics.json").write_text(json.dumps({"claims": [{"claim": 4, "supported": True}]}))  # old format
    rep = report.build_report("tiny")
    assert rep.diagnostics_claims is None and "could not be read as claims" in rep.diagnostics_note
    (study / "diagnostics.json").write_bytes(b"\xff\xfe not text")
    note = report.build_report("tiny").diagnostics_note
    assert "UnicodeDecodeError" in note and str(outputs) not in note


# --------------------------------------------------------------------------------------------------- regime gate

def curve(*records):
    """(kind, tokens, val_ce) -> eval_curve records, step = tokens."""
    return [{"kind": k, "step": t, "tokens": t, "val_ce": ce} for k, t, ce in records]


def test_flatness_ratio_hand_computed():
    c = curve(("eval", 0, 10.0), ("eval", 500, 6.0), ("phase_end", 800, 5.5), ("eval", 900, 5.2))
    f = regime.flatness(c, val_ce=5.0, tokens=1000)  # v_80: the phase_end at exactly 80% of the tokens
    assert (f["v_start"], f["v_80"], f["tokens_80"]) == (10.0, 5.5, 800)
    assert f["flat_ratio"] == pytest.approx(0.5 / 5.0) and not f["flattened"]  # 0.10 is not < 0.10
    assert "still improving" in f["flat_note"]
    f = regime.flatness(c, val_ce=5.0, tokens=999)  # 800 > 0.8 * 999: v_80 is the record at 500 tokens
    assert f["v_80"] == 6.0 and f["flat_ratio"] == pytest.approx(1.0 / 5.0) and not f["flattened"]
    f = regime.flatness(curve(("eval", 0, 10.0), ("eval", 800, 5.2)), val_ce=5.0, tokens=1000)
    assert f["flat_ratio"] == pytest.approx(0.04) and f["flattened"] and f["flat_note"] == "flattened"
    # no step-0 record: the first eval record is the start
    f = regime.flatness(curve(("eval", 100, 8.0), ("eval", 700, 5.6)), val_ce=5.0, tokens=1000)
    assert f["v_start"] == 8.0 and f["flat_ratio"] == pytest.approx(0.2) and not f["flattened"]


def test_flatness_undecidable_counts_as_not_flattened():
    one = regime.flatness(curve(("eval", 0, 10.0)), val_ce=5.0, tokens=1000)
    assert not one["flattened"] and math.isnan(one["flat_ratio"]) and one["v_start"] == 10.0
    assert one["flat_note"].startswith("too few eval records")
    only_end = regime.flatness(curve(("eval", 0, 10.0), ("phase_end", 1000, 5.0)), val_ce=5.0, tokens=1000)
    assert not only_end["flattened"] and only_end["flat_note"].startswith("too few eval records")
    none = regime.flatness([], val_ce=5.0, tokens=1000)
    assert not none["flattened"] and "no eval record" in none["flat_note"]
    worse = regime.flatness(curve(("eval", 0, 5.0), ("eval", 800, 5.5)), val_ce=6.0, tokens=1000)
    assert not worse["flattened"] and "did not improve" in worse["flat_note"]


def test_regime_from_run_directories(outputs):
    write_run(outputs, "post-joint", 0, 5.0, schedule="joint", depths=(3,), evals=[(0, 10.0), (500, 6.0), (700, 5.6)])
    write_run(outputs, "post-joint", 1, 5.2, schedule="joint", depths=(3,))  # default: ratio 0.01 / 4
    d = write_run(outputs, "pre-joint", 0, 4.0, schedule="joint", depths=(3,))
    write_metrics(d, [(0, 10.0)])  # one eval record only
    write_run(outputs, "pre-joint", 1, 4.2, schedule="joint", depths=(3,))
    runs = regime.with_flatness(stats.runs_frame(collect_runs("tiny")), "tiny").set_index("run_name")
    assert runs.loc["post-joint-s0", "flat_ratio"] == pytest.approx(0.6 / 5.0)
    assert runs.loc["post-joint-s1", "flat_ratio"] == pytest.approx(0.0025)
    assert not runs.loc["pre-joint-s0", "flattened"] and math.isnan(runs.loc["pre-joint-s0", "flat_ratio"])
    checked = regime.regime_check(runs.reset_index(), unigram_val_ce=6.5).set_index("variant")
    post, pre = checked.loc["post-joint"], checked.loc["pre-joint"]
    assert post["val_ce_mean"] == pytest.approx(5.1) and post["margin_below_unigram"] == pytest.approx(1.3)  # seed 1
    assert post["below_unigram"] and post["max_flat_ratio"] == pytest.approx(0.12)
    assert not post["flattened"] and not post["trained"]
    assert post["reason"] == "not flattened: seed 0 (still improving: ratio 0.120 >= 0.10)"
    assert pre["below_unigram"] and not pre["flattened"] and not pre["trained"]
    assert pre["max_flat_ratio"] == pytest.approx(0.0025)  # over the seeds that give a ratio
    assert "seed 0 (too few eval records" in pre["reason"]
    level = regime.regime_check(runs.reset_index(), unigram_val_ce=6.0).set_index("variant").loc["post-joint"]
    assert not level["below_unigram"] and "seed 1's val_ce 5.200 is 0.800 nats below the unigram level 6.000 (every seed needs >= 1.0 below)" in level["reason"]
    above = regime.regime_check(runs.reset_index(), unigram_val_ce=4.6).set_index("variant").loc["post-joint"]
    assert above["margin_below_unigram"] == pytest.approx(-0.6)
    assert "seed 1's val_ce 5.200 is 0.600 nats above the unigram level 4.600 (every seed needs >= 1.0 below)" in \
        above["reason"]
    assert "no unigram baseline" in regime.regime_check(runs.reset_index(), None).loc[0, "reason"]


SUPPORTED_STUDY = dict(grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005],
                       matched_gaps=[0.02, 0.025, 0.03], single_gaps=[0.0, 0.002, -0.002],
                       freeze_gaps=[0.02, 0.025, 0.022], stage0_gaps=[-0.05, -0.06, -0.055])


def test_trained_study_judges_claims(outputs, trained):
    write_study(outputs, **SUPPORTED_STUDY)
    rep = report.build_report("tiny")
    assert rep.regime["trained"].all() and len(rep.regime) == 9
    assert rep.regime_verdict() == "students trained: claims judged"
    assert list(rep.regime["max_flat_ratio"]) == pytest.approx([0.0025] * 9)
    assert rep.regime.set_index("variant").loc["post-grow", "margin_below_unigram"] == pytest.approx(UNIGRAM - 5.2)
    assert all(c.status == claims.SUPPORTED for c in rep.claims)


def test_post_joint_above_unigram_margin_is_not_judged(outputs, trained):
    # post-joint 6.6-6.8: its worst seed 0.7 below unigram; the single runs above it (so that depth pays) are
    # undertrained too
    write_study(outputs, **SUPPORTED_STUDY, post_joint_shift=1.4, depth_gain=1.9)
    rep = report.build_report("tiny")
    c = claims_by_id(rep)
    assert list(rep.regime.loc[~rep.regime["trained"], "variant"]) == ["post-joint", "post-single", "pre-single"]
    assert rep.regime_verdict() == ("3 variants undertrained (post-joint, post-single, pre-single): claims that "
                                    "compare them are not judged")
    assert list(rep.depth["depth_gain"]) == pytest.approx([1.9 - 0.0005 / 3, 0.5])  # pre, post
    for cid in ("headline-joint", "headline-ratio"):
        assert c[cid]["status"] == claims.NOT_JUDGED == "not judged: students undertrained"
        assert c[cid]["supported"] is None
        assert c[cid]["sentence"].startswith("Not judged: students undertrained (post-joint: seed 2's val_ce 6.800 "
                                             "is 0.700 nats below the unigram level 7.500 (every seed needs >= 1.0 "
                                             "below))")
        assert "Ungated reading" in c[cid]["sentence"] and "pre-joint - post-joint" in c[cid]["sentence"]
    assert c["headline-joint"]["evidence"]["ungated_status"] == claims.NOT_SUPPORTED  # the gap is now -1.4
    for cid in ("obs3-controls", "obs3-single"):
        assert c[cid]["status"] == claims.NOT_JUDGED and "pre-single: seed 2's val_ce 7.298" in c[cid]["sentence"]
    for cid in ("headline-grow", "obs1-matched", "obs2-crossover", "obs3-freeze"):
        assert c[cid]["status"] == claims.SUPPORTED, (cid, c[cid]["sentence"])
    frame = rep.claims_frame().set_index("claim")
    assert frame.loc["headline-joint", "variants"] == "pre-joint post-joint"
    assert frame.loc["headline-joint", "status"] == claims.NOT_JUDGED


def test_one_eval_record_run_makes_its_variant_undertrained(outputs, trained):
    write_study(outputs, **SUPPORTED_STUDY)
    write_metrics(outputs / "runs" / "tiny" / "post-grow-s1", [(0, 9.1)])
    rep = report.build_report("tiny")
    c = claims_by_id(rep)
    row = rep.regime.set_index("variant").loc["post-grow"]
    assert not row["trained"] and row["below_unigram"] and "seed 1 (too few eval records" in row["reason"]
    for cid in ("headline-grow", "headline-ratio", "obs1-matched", "obs2-crossover", "obs3-controls", "obs3-single"):
        assert c[cid]["status"] == claims.NOT_JUDGED and "post-grow: not flattened: seed 1" in c[cid]["sentence"]
    for cid in ("headline-joint", "obs3-freeze"):
        assert c[cid]["status"] == claims.SUPPORTED


def test_without_baselines_claims_are_not_judged_and_missing_stays_not_testable(outputs):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005])
    rep = report.build_report("tiny")
    assert not rep.regime["trained"].any() and rep.regime_verdict().startswith("6 variants undertrained")
    c = claims_by_id(rep)
    assert c["headline-grow"]["status"] == claims.NOT_JUDGED and "no unigram baseline" in c["headline-grow"]["sentence"]
    assert c["obs1-matched"]["status"] == claims.NOT_TESTABLE


# ---------------------------------------------------------------------------------------------------- depth gate

GROWTH_CLAIMS = ("headline-grow", "headline-ratio", "obs1-matched", "obs2-crossover", "obs3-controls", "obs3-single",
                 "obs3-freeze")


def test_depth_within_margin_leaves_growth_claims_not_judged(outputs, trained):
    """Single runs 0.05 nats above the joint runs (margin 3 x 0.0328): every growth claim is not judged, with both
    placements' gains in the sentence; the joint claim is judged."""
    write_study(outputs, **SUPPORTED_STUDY, depth_gain=0.05)
    rep = report.build_report("tiny")
    pre_gain = 0.05 - 0.0005 / 3  # pre-single - pre-joint: depth_gain + mean(single_gaps) - mean(joint_gaps)
    depth = rep.depth.set_index("norm")
    assert list(rep.depth["norm"]) == ["pre", "post"] and not rep.depth["pays"].any()
    assert depth.loc["pre", "depth_gain"] == pytest.approx(pre_gain) and depth.loc["post", "depth_gain"] == \
        pytest.approx(0.05)
    assert depth.loc["post", "margin"] == pytest.approx(3 * 0.0328)
    assert (depth.loc["post", "single"], depth.loc["post", "joint"], depth.loc["post", "single_n"]) == \
        ("post-single", "post-joint", 3)
    assert depth.loc["post", "reason"] == "post-joint is 0.050 nats below post-single (needs >= 0.098 below)"
    c = claims_by_id(rep)
    for cid in GROWTH_CLAIMS:
        assert c[cid]["status"] == claims.NOT_JUDGED_DEPTH == "not judged: depth does not pay at this scale"
        assert c[cid]["supported"] is None and c[cid]["evidence"]["ungated_status"] == claims.SUPPORTED
    assert c["headline-grow"]["sentence"].startswith(
        "Not judged: depth does not pay at this scale (pre: +0.050 nats, post: +0.050 nats, needs >= 0.098)")
    assert "Ungated reading" in c["headline-grow"]["sentence"] and "+0.0350" in c["headline-grow"]["sentence"]
    assert c["obs1-matched"]["sentence"].startswith("Not judged: depth does not pay at this scale (post: +0.050 "
                                                    "nats, needs >= 0.098)")  # a post-norm control: post only
    assert c["headline-joint"]["status"] == claims.SUPPORTED  # joint training: no appended blocks to judge
    assert rep.depth_verdict() == ("depth does not pay for pre, post: pre-joint is 0.050 nats below pre-single "
                                   "(needs >= 0.098 below); post-joint is 0.050 nats below post-single (needs >= "
                                   "0.098 below); growth claims comparing them are not judged")
    assert "[depth] depth does not pay" in rep.sentences()[1]
    files = report.write_report(rep)
    written = pd.read_csv(files["depth"])
    assert list(written.columns) == list(regime.DEPTH_FIELDS) and not written["pays"].any()
    page = files["report"].read_text()
    assert "Does depth pay?" in page and "Depth: depth does not pay for pre, post" in page
    assert page.index("Does depth pay?") < page.index("<h2>Claims")


def test_depth_beyond_margin_judges_growth_claims(outputs, trained):
    write_study(outputs, **SUPPORTED_STUDY, depth_gain=0.2)
    rep = report.build_report("tiny")
    assert rep.depth["pays"].all() and list(rep.depth["depth_gain"]) == pytest.approx([0.2 - 0.0005 / 3, 0.2])
    assert rep.depth_verdict() == "depth pays for pre and post (joint beats single by >= 0.098 nats): growth claims " \
                                  "judged"
    assert all(c.status == claims.SUPPORTED for c in rep.claims)


def test_depth_gate_asks_only_the_placements_a_claim_compares(outputs, trained):
    """Pre-norm's single runs 0.45 below post-norm's: depth pays for post only. Pre/post comparisons are not
    judged; the post-norm matched control is; without pre-single runs the gate says so."""
    study = SUPPORTED_STUDY | {"single_gaps": [-0.45, -0.45, -0.45]}
    write_study(outputs, **study, depth_gain=0.5)
    rep = report.build_report("tiny")
    assert list(rep.depth["pays"]) == [False, True]
    c = claims_by_id(rep)
    assert c["obs1-matched"]["status"] == claims.SUPPORTED
    assert c["headline-grow"]["status"] == claims.NOT_JUDGED_DEPTH
    assert "(pre: +0.050 nats, post: +0.500 nats, needs >= 0.098)" in c["headline-grow"]["sentence"]
    for seed in range(3):
        for f in (outputs / "runs" / "tiny" / f"pre-single-s{seed}").iterdir():
            f.unlink()
        (outputs / "runs" / "tiny" / f"pre-single-s{seed}").rmdir()
    rep = report.build_report("tiny")
    assert rep.depth.set_index("norm").loc["pre", "reason"] == "no finished runs of pre-single"
    sentence = claims_by_id(rep)["headline-grow"]["sentence"]
    assert "(pre: no finished runs of pre-single, post: +0.500 nats, needs >= 0.098)" in sentence


def test_undertrained_claims_keep_the_regime_reason_before_depth(outputs, trained):
    write_study(outputs, **SUPPORTED_STUDY, depth_gain=0.05)
    write_metrics(outputs / "runs" / "tiny" / "post-grow-s1", [(0, 9.1)])
    c = claims_by_id(report.build_report("tiny"))
    assert c["headline-grow"]["status"] == claims.NOT_JUDGED  # the regime's reason is the more basic one
    assert c["obs3-freeze"]["status"] == claims.NOT_JUDGED_DEPTH


# -------------------------------------------------------------------------------------- equivalence and resolution

def test_joint_claim_is_an_equivalence_test(outputs, trained):
    """A wide 3-seed joint gap (mean inside the margin, interval wider): not shown equivalent, with the TOST p-values
    of tests/test_stats.py (the same differences) and the seeds that would show it; a tight 10-seed gap is shown
    equivalent (seeds 0-9: params/study.yaml lists 0-2, every finished seed counts)."""
    wide = [0.03, -0.03, 0.01]
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=wide)
    c = claims_by_id(report.build_report("tiny"))["headline-joint"]
    assert c["status"] == claims.NOT_RESOLVED and c["supported"] is None
    assert c["sentence"].startswith("Not shown equivalent (too few seeds / spread too large): pre-joint - post-joint "
                                    "= +0.0033")
    assert "one-sided p 0.158 (gap > -0.02) and 0.222 (gap < +0.02)" in c["sentence"]
    room = 0.02 - np.mean(wide)
    assert f"about {stats.seeds_needed(np.std(wide, ddof=1), room, 0.95)} paired seeds would show it" in c["sentence"]
    assert c["evidence"]["tost_p"] == pytest.approx(0.22222222222222224, rel=1e-6)  # scipy.stats.ttest_1samp
    assert c["evidence"]["equivalence_margin"] == 0.02

    for d in (outputs / "runs" / "tiny").iterdir():
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    tight = [0.002, -0.001, 0.0015, -0.002, 0.0005, 0.001, -0.0015, 0.0, 0.002, -0.0005]
    write_study(outputs, grow_gaps=[0.03 + 0.001 * (s % 3) for s in range(10)], joint_gaps=tight)
    rep = report.build_report("tiny")
    assert set(rep.stats["n_seeds"]) == {10} and rep.stats.set_index("variant").loc["pre-joint", "seeds"] == \
        " ".join(map(str, range(10)))
    c = claims_by_id(rep)["headline-joint"]
    assert c["status"] == claims.SUPPORTED and c["sentence"].startswith("Supported (equivalent within +-0.02 nats)")
    assert c["evidence"]["tost_p"] == pytest.approx(4.427530151147787e-12, rel=1e-3)
    assert "10 paired seeds" in c["sentence"] and "both reject at alpha 0.05" in c["sentence"]


def test_joint_claim_outside_the_margin_is_not_shown_equivalent_at_any_seed_count(outputs, trained):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.05, -0.01, 0.03])  # mean 0.0233
    c = claims_by_id(report.build_report("tiny"))["headline-joint"]
    assert c["status"] == claims.NOT_RESOLVED
    assert "the mean lies outside +-0.02, so more seeds at this mean would not show equivalence" in c["sentence"]


def test_gap_table_mde_and_seeds_to_resolve_reference(outputs, trained):
    """grow gaps 0.03, 0.05, 0.07 (sd 0.02): mde = t(0.975, 2) * 0.02 / sqrt(3) = 0.0497; 4 seeds resolve the
    reference 0.0328 (n = 3: 0.0497, n = 4: 3.1824 * 0.02 / 2 = 0.0318); no reference: None."""
    write_study(outputs, grow_gaps=[0.03, 0.05, 0.07], joint_gaps=[0.001, -0.001, 0.0005],
                matched_gaps=[0.02, 0.025, 0.03])
    rep = report.build_report("tiny")
    g = rep.gaps.set_index(["metric", "gap"])
    assert g.loc[("val_ce", "grow"), "mde"] == pytest.approx(T975[2] * 0.02 / math.sqrt(3))
    assert g.loc[("val_ce", "grow"), "seeds_to_resolve_reference"] == 4
    joint_sd = np.std([0.001, -0.001, 0.0005], ddof=1)
    assert g.loc[("val_ce", "joint"), "seeds_to_resolve_reference"] == 29  # about (1.96 * sd / 0.0004)^2 = 26
    half = lambda n: stats.t_quantile(0.975, n - 1) * joint_sd / math.sqrt(n)
    assert half(29) < 0.0004 <= half(28)
    assert g.loc[("val_ce", "matched"), "seeds_to_resolve_reference"] is None  # no reference value
    assert g.loc[("val_kd_ce", "grow"), "seeds_to_resolve_reference"] is None  # references are val_ce
    assert "half_width" not in rep.gaps.columns  # mde is that column
    files = report.write_report(rep)
    written = pd.read_csv(files["gaps"], dtype={"seeds_to_resolve_reference": str}).set_index(["metric", "gap"])
    assert written.loc[("val_ce", "grow"), "seeds_to_resolve_reference"] == "4"
    page = files["report"].read_text()
    assert "MDE (minimum detectable effect)" in page and "seeds to resolve reference" in page


def write_candidates(root, rows, numerics=None, record="sweep.json"):
    """Sweep candidates as the sweep leaves them: a finished run directory per row (norm, schedule, lr, seed,
    val_ce; ``numerics``, or a row's own "numerics": the version its config.json records, default the current one)
    and the record outputs/sweep/tiny/<record> listing them."""
    from normgrow.rundir import NUMERICS_VERSION
    for r in rows:
        version = r.pop("numerics", None) or numerics or NUMERICS_VERSION
        r["run_name"] = f"sweep-{r['norm']}-{r['schedule']}-lr{r['lr']:g}-s{r['seed']}"
        d = write_run(root, f"{r['norm']}-{r['schedule']}", r["seed"], r["val_ce"], run_name=r["run_name"], lr=r["lr"])
        config = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps(config | {"numerics": version}))
    path = root / "sweep" / "tiny" / record
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, "chosen": {}, "date": "2026-12-01", "seeds": [0, 1]}))


def test_lr_figure_shows_every_arm_of_the_sweep(outputs, trained):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005])
    rep = report.build_report("tiny")
    assert report_figures.lr_figure(rep) is None  # no sweep: no figure, and the page has no lr section
    assert "fig-lr" not in report.report_html(rep)
    rows = [{"norm": n, "schedule": s, "lr": lr, "seed": seed, "val_ce": 5.0 + abs(lr - best) * 100 + 0.01 * seed}
            for n, best in (("pre", 1e-2), ("post", 5e-3)) for s in ("joint", "grow")
            for lr in (2.5e-3, 5e-3, 1e-2, 2e-2) for seed in (0, 1)]
    rows[-1]["val_ce"] = 9.0  # a diverged point: drawn on the panel's edge, its value kept for the hover
    write_candidates(outputs, rows)
    fig = report_figures.lr_figure(rep)
    lines = [t for t in fig.data if t.mode == "lines"]
    stars = [t for t in fig.data if t.mode == "markers" and t.marker.symbol == "star"]
    seeds = [t for t in fig.data if t.mode == "markers" and t.marker.symbol == "circle"]
    off = [t for t in fig.data if t.mode == "markers" and t.marker.symbol == "x"]
    # 2 placements x 2 schedules, each at the one warmup its runs trained at: a bold line in the schedule's style
    # (palette), the runs' lr, seeds
    assert len(lines) == len(stars) == len(seeds) == 4 and all(t.line.width == 2 for t in lines)
    assert {(t.meta["schedule"], t.line.dash) for t in lines} == {(s, palette.dash(s)) for s in ("joint", "grow")}
    best = min(r["val_ce"] for r in rows if r["schedule"] == "joint")
    mean = [min(5.0 + abs(lr - 1e-2) * 100 + 0.005, best + report_figures.LR_SHOWN) for lr in (2.5e-3, 5e-3, 1e-2, 2e-2)]
    assert list(lines[0].y) == pytest.approx(mean)  # the mean of the two seeds, clipped to the panel's edge
    assert max(max(t.y) for t in seeds) <= 5.0 + report_figures.LR_SHOWN  # on the scale: circles; off it: an x on the edge
    assert all(y == pytest.approx(5.0 + report_figures.LR_SHOWN) for t in off for y in t.y)
    assert sum(len(t.x) for t in seeds + off) == len(rows) and 9.0 in [v[0] for t in off for v in t.customdata]
    assert [float(t.x[0]) for t in stars] == [3e-3] * 4  # the tiny profile's lr, which every run recorded
    assert "seeds 0 1" in fig.layout.title.text
    assert "fig-lr" in report.report_html(rep)


def test_the_answer_comes_first_with_both_headline_gaps_and_their_verdicts(outputs, trained):
    write_study(outputs, **SUPPORTED_STUDY)
    rep = report.build_report("tiny")
    page = report.report_html(rep, figs={k: go.Figure() for k in ("curves", "overlay", "variants", "gaps", "crossover")})
    answer = page[page.index("<section id='answer'>"):page.index("</section>")]
    assert page.index("<section id='answer'>") < page.index("Training regime")
    grow = rep.gaps.set_index(["metric", "gap"]).loc[("val_ce", "grow")]
    assert f"pre-grow - post-grow = {grow['mean']:+.4f} [{grow['ci_low']:+.4f}, {grow['ci_high']:+.4f}]" in answer
    assert "pre-joint - post-joint = " in answer and answer.count(f"[{claims.SUPPORTED}]") == 3
    ratio = next(c for c in rep.claims if c.claim == "headline-ratio").evidence
    assert f"grow gap - joint gap = {ratio['mean']:+.4f} [{ratio['ci_low']:+.4f}, {ratio['ci_high']:+.4f}]" in answer
    assert "positive means post-norm (b) is better" in answer and "<i>Reference</i>" in answer


def test_summary_has_the_loss_jump_at_each_growth(outputs):
    """growth_jump_p<i> = val_ce just after phase i's growth step - phase i-1's final val_ce; none for phase 0, for
    joint runs and for summaries without the field."""
    d = write_run(outputs, "pre-grow", 0, 5.0, phase_ce=[6.0, 5.5, 5.0])
    summary = json.loads((d / "summary.json").read_text())
    summary["phases"][1]["val_ce_after_growth"] = 6.25
    summary["phases"][2]["val_ce_after_growth"] = 5.5
    (d / "summary.json").write_text(json.dumps(summary))
    write_run(outputs, "pre-joint", 0, 4.9, schedule="joint", depths=(3,))
    runs = stats.runs_frame(collect_runs("tiny")).set_index("run_name")
    assert runs.loc["pre-grow-s0", "growth_jump_p1"] == pytest.approx(0.25)
    assert runs.loc["pre-grow-s0", "growth_jump_p2"] == pytest.approx(0.0)
    assert "growth_jump_p0" not in runs.columns and math.isnan(runs.loc["pre-joint-s0", "growth_jump_p1"])


# ------------------------------------------------------------------------------------------------ claims as data

def test_every_claim_kind_has_one_judge():
    """reference.CLAIM_KINDS is the list of kinds; claims.JUDGES judges all but all_of (combines judged claims) and
    measured (diagnostics.py), so a kind without a judge cannot be declared."""
    assert set(claims.JUDGES) | {"all_of", "measured"} == set(reference.CLAIM_KINDS)


def test_a_declared_claim_is_judged_without_code(outputs, trained, tmp_path, monkeypatch):
    """Adding a claim is one declaration in params/reference.yaml: a directional claim on the single gap (pre-single
    - post-single > 0) is judged, with its statement filled in, in the file's order."""
    params = tmp_path / "params"
    shutil.copytree(config.PARAMS_DIR, params)
    monkeypatch.setattr(variants, "PARAMS_DIR", params)
    monkeypatch.setattr(reference, "PARAMS_DIR", params)
    path = params / "reference.yaml"
    path.write_text(path.read_text() + (
        "  - name: obs6-single\n    kind: directional\n    gaps: [single]\n"
        "    statement: \"As the prefix alone, {b} beats {a}.\"\n    if_supported: post-norm's prefix is better\n"
        "    if_refuted: pre-norm's prefix is better\n"))
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005],
                single_gaps=[0.05, 0.06, 0.055])
    judged = report.build_report("tiny").claims
    assert judged[-1].claim == "obs6-single" and judged[-1].statement == "As the prefix alone, post-single beats pre-single."
    assert judged[-1].status == claims.SUPPORTED and "+0.0550" in judged[-1].sentence
    assert judged[-1].variants == ("pre-single", "post-single")


@pytest.mark.parametrize("claim, needle", [
    ("  - name: bad\n    kind: directional\n    gaps: [nowhere]\n    statement: x\n",
     "claim 'bad' reads gap 'nowhere', which is missing from gaps"),
    ("  - name: bad\n    kind: interaction\n    gaps: [grow]\n    statement: x\n",
     "claim 'bad': a claim of kind interaction reads 2 gaps"),
    ("  - name: bad\n    kind: vote\n    gaps: [grow]\n    statement: x\n",
     "claim 'bad': kind='vote' is not allowed; allowed values: equivalence, directional"),
    ("  - name: bad\n    kind: directional\n    gaps: [grow]\n    statement: \"{c} wins\"\n",
     "claim 'bad': its statement names a field it does not have"),
    ("  - name: bad\n    kind: all_of\n    gaps: []\n    parts: [{key: x, claim: nowhere, label: X}]\n    statement: x\n",
     "claim 'bad': part 'nowhere' is not another declared claim"),
    ("  - name: bad\n    kind: all_of\n    gaps: []\n    parts: [{claim: headline-grow}]\n    statement: x\n",
     "claim 'bad': parts must be a list of mappings with exactly the keys claim, key, label"),
    ("  - name: headline-grow\n    kind: directional\n    gaps: [grow]\n    statement: x\n",
     "claim 'headline-grow' is declared twice"),
])
def test_a_bad_claim_declaration_is_named_at_load(tmp_path, monkeypatch, claim, needle):
    params = tmp_path / "params"
    shutil.copytree(config.PARAMS_DIR, params)
    monkeypatch.setattr(variants, "PARAMS_DIR", params)
    monkeypatch.setattr(reference, "PARAMS_DIR", params)
    path = params / "reference.yaml"
    path.write_text(path.read_text() + claim)
    with pytest.raises(config.ParamError, match=re.escape(needle)):
        reference.load_reference()


PAGE_VERDICT = re.compile(r"<div class='claim'[^>]*><b>([^<]+)</b> <span class='status'[^>]*>\[([^\]]+)\]")


def test_both_pages_show_the_gated_verdicts_and_the_lrs_the_runs_recorded(outputs, trained, tmp_path):
    """One study, both pages: every claim box of report.html and diagnostics.html carries the verdict the study's
    gates give (observation 4 is supported in diagnostics.json, but depth does not pay here), and the lr panel stars
    the lr each arm's runs recorded in config.json (not the sweep record's stale choice), drawing only candidates
    trained as this numerics version trains (rundir.SAME_TRAINING)."""
    from normgrow.rundir import SAME_TRAINING, read_identity, run_path
    from normgrow.viz import diagplots
    write_study(outputs, **SUPPORTED_STUDY, depth_gain=0.05)
    study = outputs / "study" / "tiny"
    ungated = [claims.Claim("obs4-stability", "post-norm's boundary is stable", claims.SUPPORTED, "Supported: x1.02",
                            {}, ("pre-grow", "post-grow")),
               claims.Claim("obs5-identity", "pre-norm's final block is near identity", claims.NOT_SUPPORTED,
                            "Not supported: rank 3", {}, ("pre-grow",))]
    record = json.dumps({"profile": "tiny", "runs": {}, "claims": [c.to_json() for c in ungated]})
    study.mkdir(parents=True, exist_ok=True)
    (study / "diagnostics.json").write_text(record)
    write_candidates(outputs, [{"norm": "post", "schedule": "grow", "lr": lr, "seed": 0, "val_ce": 5.0 + lr}
                               for lr in (1.5e-3, 3e-3)], record="post/sweep.json")
    write_candidates(outputs, [  # listed by the record: one trained under a version that trains otherwise, one alike
        {"norm": "post", "schedule": "grow", "lr": 1.2e-2, "seed": 0, "val_ce": 4.0, "numerics": min(SAME_TRAINING) - 1},
        {"norm": "post", "schedule": "grow", "lr": 6e-3, "seed": 0, "val_ce": 5.006, "numerics": min(SAME_TRAINING)}])

    rep = report.build_report("tiny")
    files = report.write_report(rep)
    diag_page = diagplots.export_html({"profile": "tiny", "runs": {}}, study / "diagnostics.html",
                                      [c.to_json() for c in rep.diagnostics_claims])
    gated = {c.claim: c.status for c in rep.claims + rep.diagnostics_claims}
    assert gated["obs4-stability"] == gated["obs5-identity"] == claims.NOT_JUDGED_DEPTH
    shown = PAGE_VERDICT.findall(files["report"].read_text())
    assert dict(shown) == gated and len(shown) == len(gated)
    assert dict(PAGE_VERDICT.findall(diag_page.read_text())) == {k: gated[k] for k in ("obs4-stability",
                                                                                         "obs5-identity")}

    fig = report_figures.lr_figure(rep)
    recorded = {read_identity(run_path("tiny", f"post-grow-s{s}"))["profile"]["train"]["lr"] for s in range(3)}
    stars = [t for t in fig.data if t.marker.symbol == "star"]
    assert [list(t.x) for t in stars] == [sorted(recorded)] == [[3e-3]]
    assert list(stars[0].y) == pytest.approx([rep.stats.set_index("variant").loc["post-grow", "val_ce_mean"]])
    drawn = {float(x) for t in fig.data if t.marker.symbol != "star" for x in t.x}
    assert drawn == {1.5e-3, 3e-3, 6e-3}  # the candidate at 1.2e-2, trained otherwise, is left out
    assert "fig-lr" in files["report"].read_text()


def test_the_growth_increment_is_drawn_a_point_per_paired_seed(outputs):
    """obs3-single's evidence as a figure: each seed's (pre-grow - post-grow) - (pre-single - post-single), the
    mean's interval as its band, the reference's grow gap as a line."""
    grow, single = [0.05, 0.08, 0.02, 0.07], [0.01, 0.03, 0.04, 0.00]
    write_study(outputs, grow_gaps=grow, joint_gaps=[0.0] * 4, single_gaps=single)
    rep = report.build_report("tiny")
    fig = report_figures.increment_figure(rep)
    (points,) = fig.data
    expected = [g - s for g, s in zip(grow, single)]
    assert list(points.x) == ["0", "1", "2", "3"] and list(points.y) == pytest.approx(expected, abs=1e-9)
    ci = stats.mean_ci(expected)
    band = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(band) == 1 and (band[0].y0, band[0].y1) == pytest.approx((ci["ci_low"], ci["ci_high"]), abs=1e-9)
    lines = sorted(round(s.y0, 6) for s in fig.layout.shapes if s.type == "line")
    assert lines == sorted(round(v, 6) for v in (0.0, ci["mean"], load_reference().gaps["grow"].reference))
    assert "fig-increment" in report.report_html(rep, report.figures(rep))
    shutil.rmtree(outputs / "runs" / "tiny")  # no seed with both pairs: no figure, a line that says so
    write_study(outputs, grow_gaps=grow, joint_gaps=[0.0] * 4)
    for s in range(4):
        shutil.rmtree(outputs / "runs" / "tiny" / f"pre-single-s{s}")
    rep = report.build_report("tiny")
    assert report_figures.increment_figure(rep) is None
    assert "no seed has both the grow and the single-block pairs" in report.report_html(rep, report.figures(rep))
