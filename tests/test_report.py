"""normgrow.report on synthetic run directories with known numbers (fast: no training, no teacher)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from normgrow import report

# Student t 0.975 quantiles (scipy.stats.t.ppf(0.975, df)); df=2 has the closed form 0.95 * sqrt(2 / (1 - 0.95^2)).
T975 = {1: 12.706204736174698, 2: 0.95 * math.sqrt(2 / (1 - 0.95 ** 2)), 3: 3.182446305284263,
        4: 2.7764451051977987, 9: 2.2621571627409915, 29: 2.045229642132703}


def write_run(root, variant, seed, val_ce, phase_ce=None, val_kd_ce=None, profile="synth", schedule="grow",
              tokens=1000, depths=(1, 2, 3)):
    """A finished run directory (summary.json only) as train.run_variant writes it."""
    phase_ce = list(phase_ce) if phase_ce is not None else [val_ce]
    depths = list(depths)[-len(phase_ce):] if len(phase_ce) < len(depths) else list(depths)[:len(phase_ce)]
    phases = [{"phase": i, "depth": d, "step": 8 * (i + 1), "tokens": tokens * (i + 1) // len(phase_ce),
               "active_layer_tokens": 10 * (i + 1), "val_ce": ce, "val_kd_ce": ce - 3.0,
               "trainable_layer_tokens": 10 * (i + 1)} for i, (ce, d) in enumerate(zip(phase_ce, depths))]
    phases[-1]["val_ce"] = val_ce
    name = f"{variant}-s{seed}"
    d = root / "runs" / profile / name
    d.mkdir(parents=True)
    summary = {"run_name": name, "profile": profile, "norm": variant.split("-")[0], "schedule": schedule,
               "freeze_prefix": "freeze" in variant, "match_active_layer_tokens": None, "seed": seed,
               "depth": phases[-1]["depth"], "val_ce": val_ce,
               "val_kd_ce": val_kd_ce if val_kd_ce is not None else val_ce - 3.0, "tokens": tokens,
               "active_layer_tokens": 30, "trainable_layer_tokens": 30, "wall_s": 1.5, "phases": phases}
    (d / "summary.json").write_text(json.dumps(summary))
    return d


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    return tmp_path


def write_study(root, grow_gaps, joint_gaps, matched_gaps=None, single_gaps=None, freeze_gaps=None,
                stage0_gaps=None, base=5.0):
    """pre/post pairs whose per-seed differences (pre - post) are exactly the given gaps."""
    seeds = range(len(grow_gaps))
    for s in seeds:
        b = base + 0.1 * s  # seed effect, cancelled by pairing
        s0 = stage0_gaps[s] if stage0_gaps is not None else 0.0
        write_run(root, "post-grow", s, b, phase_ce=[b + 1.0, b + 0.5, b])
        write_run(root, "pre-grow", s, b + grow_gaps[s], phase_ce=[b + 1.0 + s0, b + 0.5 + grow_gaps[s] / 2,
                                                                   b + grow_gaps[s]])
        write_run(root, "post-joint", s, b + 0.2, schedule="joint", depths=(3,))
        write_run(root, "pre-joint", s, b + 0.2 + joint_gaps[s], schedule="joint", depths=(3,))
        if matched_gaps is not None:
            write_run(root, "post-joint-matched", s, b + matched_gaps[s], schedule="joint", depths=(3,))
        if single_gaps is not None:
            write_run(root, "post-single", s, b + 0.7, schedule="single", depths=(1,))
            write_run(root, "pre-single", s, b + 0.7 + single_gaps[s], schedule="single", depths=(1,))
        if freeze_gaps is not None:
            write_run(root, "post-grow-freeze", s, b + 0.3, phase_ce=[b + 1.0, b + 0.6, b + 0.3])
            write_run(root, "pre-grow-freeze", s, b + 0.3 + freeze_gaps[s], phase_ce=[b + 1.0, b + 0.6,
                                                                                     b + 0.3 + freeze_gaps[s]])


def claims_by_id(rep):
    return {c["claim"]: c for c in rep.claims}


# ------------------------------------------------------------------------------------------------------ statistics

@pytest.mark.parametrize("df", sorted(T975))
def test_t_quantile_matches_scipy_values(df):
    assert report.t_quantile(0.975, df) == pytest.approx(T975[df], rel=1e-9)


def test_t_quantile_other_levels_and_large_df():
    assert report.t_quantile(0.95, 1) == pytest.approx(6.313751514675041, rel=1e-9)
    assert report.t_quantile(0.995, 5) == pytest.approx(4.032142983557536, rel=1e-9)
    assert report.t_quantile(0.975, 100000) == pytest.approx(1.959963984540054, rel=1e-4)
    with pytest.raises(ValueError):
        report.t_quantile(0.4, 3)


def test_mean_ci_hand_computation():
    x = [1.0, 2.0, 4.0]
    s = report.mean_ci(x)
    mean, sd = 7 / 3, math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    half = T975[2] * sd / math.sqrt(3)
    assert s["n"] == 3 and s["mean"] == pytest.approx(mean) and s["sd"] == pytest.approx(sd)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((mean - half, mean + half))


def test_mean_ci_single_and_empty_and_nan():
    one = report.mean_ci([3.0])
    assert one["n"] == 1 and one["mean"] == 3.0 and math.isnan(one["ci_low"]) and math.isnan(one["sd"])
    none = report.mean_ci([])
    assert none["n"] == 0 and math.isnan(none["mean"])
    assert report.mean_ci([1.0, float("nan"), 3.0])["n"] == 2


def test_judge_three_ways():
    s = lambda lo, hi: {"n": 3, "mean": (lo + hi) / 2, "ci_low": lo, "ci_high": hi}
    assert report.judge(s(0.1, 0.2)) == report.SUPPORTED
    assert report.judge(s(-0.1, 0.2)) == report.NOT_RESOLVED
    assert report.judge(s(-0.2, -0.1)) == report.NOT_SUPPORTED
    assert report.judge(s(-0.2, -0.1), direction=-1) == report.SUPPORTED
    assert report.judge({"n": 1, "mean": 1.0, "ci_low": math.nan, "ci_high": math.nan}) == report.NOT_RESOLVED
    assert report.judge({"n": 0}) == report.NOT_TESTABLE


# ------------------------------------------------------------------------------------------------------- collection

def test_collect_runs_and_variant_stats(outputs):
    for seed, ce in enumerate([5.0, 5.2, 5.6]):
        write_run(outputs, "post-grow", seed, ce, phase_ce=[7.0 + seed, 6.0, ce])
    write_run(outputs, "pre-grow", 0, 5.5, phase_ce=[7.0, 6.1, 5.5])
    (outputs / "runs" / "synth" / "pre-grow-s1").mkdir()  # unfinished: no summary.json
    runs = report.collect_runs("synth")
    assert list(runs["run_name"]) == ["post-grow-s0", "post-grow-s1", "post-grow-s2", "pre-grow-s0"]
    assert list(runs["variant"]) == ["post-grow"] * 3 + ["pre-grow"]
    assert list(runs["seed"]) == [0, 1, 2, 0]
    assert list(runs["val_ce_p0"]) == [7.0, 8.0, 9.0, 7.0]
    assert report.n_phases(runs) == 3
    assert report.unfinished_runs("synth") == ["pre-grow-s1"]
    stats = report.variant_stats(runs).set_index("variant")
    x = np.array([5.0, 5.2, 5.6])
    half = T975[2] * x.std(ddof=1) / math.sqrt(3)
    assert stats.loc["post-grow", "n_seeds"] == 3 and stats.loc["post-grow", "seeds"] == "0 1 2"
    assert stats.loc["post-grow", "val_ce_mean"] == pytest.approx(x.mean())
    assert stats.loc["post-grow", "val_ce_ci_low"] == pytest.approx(x.mean() - half)
    assert stats.loc["post-grow", "val_kd_ce_ci_high"] == pytest.approx(x.mean() - 3.0 + half)
    assert stats.loc["pre-grow", "n_seeds"] == 1 and math.isnan(stats.loc["pre-grow", "val_ce_ci_low"])


def test_split_run_name():
    assert report.split_run_name("post-joint-matched-s12") == ("post-joint-matched", 12)
    assert report.split_run_name("my-run", 3) == ("my-run", 3)


def test_empty_profile_gives_empty_report(outputs):
    rep = report.build_report("synth")
    assert len(rep.runs) == 0 and len(rep.stats) == 0 and len(rep.crossover) == 0
    assert all(c["status"] == report.NOT_TESTABLE for c in rep.claims)
    files = report.write_report(rep)
    assert files["summary"].is_file() and files["report"].is_file()
    assert rep.baselines == {} and "no teacher cache" in files["report"].read_text()


def test_unigram_val_ce():
    from normgrow.data import unigram_val_ce
    train = np.array([[0, 1, 2, 3], [0, 0, 1, 1]])  # counts 3, 3, 1, 1 of 8
    val = np.array([[0, 1, 2, 3]])
    starts = np.array([[True, False, True, False]])  # the target at position 1 is a new document's BOS: masked
    # loss positions t = 0 and 2 (t = 3 has no target), targets 1 and 3
    expected = -(np.log(3 / 8) + np.log(1 / 8)) / 2
    assert unigram_val_ce(train, val, starts, vocab_size=4, pseudo_count=0.0) == pytest.approx(expected)
    smoothed = -(np.log(3.5 / 10) + np.log(1.5 / 10)) / 2
    assert unigram_val_ce(train, val, starts, vocab_size=4) == pytest.approx(smoothed)


# ------------------------------------------------------------------------------------------------------------ gaps

def test_paired_gaps_pair_by_seed_and_cancel_seed_effects(outputs):
    write_study(outputs, grow_gaps=[0.03, 0.04, 0.05], joint_gaps=[0.001, -0.002, 0.0015],
                matched_gaps=[0.02, 0.03, 0.025])
    write_run(outputs, "post-grow", 7, 1.0)  # unpaired seed: ignored by the gap
    runs = report.collect_runs("synth")
    g = report.paired_gap(runs, "pre-grow", "post-grow")
    assert g["n"] == 3 and g["seeds"] == "0 1 2" and g["unpaired_seeds"] == "7"
    half = T975[2] * np.std([0.03, 0.04, 0.05], ddof=1) / math.sqrt(3)
    assert g["mean"] == pytest.approx(0.04) and g["ci_low"] == pytest.approx(0.04 - half)
    table = report.gap_table(runs).set_index(["metric", "gap"])
    assert table.loc[("val_ce", "joint"), "mean"] == pytest.approx(0.0005 / 3)
    assert table.loc[("val_ce", "joint"), "reference"] == 0.0004
    assert table.loc[("val_ce", "grow"), "reference"] == 0.0328
    assert table.loc[("val_ce", "matched"), "mean"] == pytest.approx(0.025)
    assert table.loc[("val_kd_ce", "grow"), "mean"] == pytest.approx(0.04)  # val_kd_ce = val_ce - 3 here
    assert table.loc[("val_ce", "freeze"), "missing"] == "pre-grow-freeze post-grow-freeze"
    ratio = report.gap_ratio(table.reset_index())
    assert ratio["ratio"] == pytest.approx(0.04 / (0.0005 / 3)) and not ratio["joint_resolved"]


def test_crossover_table_detects_the_switch(outputs):
    # stage 0: pre-grow better by 0.1 (gap -0.1 +- noise); final stage: post-grow better.
    write_study(outputs, grow_gaps=[0.03, 0.04, 0.05], joint_gaps=[0.0, 0.001, -0.001],
                stage0_gaps=[-0.10, -0.12, -0.11])
    rep = report.build_report("synth")
    t = rep.crossover
    assert list(t["stage"]) == [0, 1, 2] and list(t["depth"]) == [1, 2, 3]
    assert t.loc[0, "gap_mean"] == pytest.approx(-0.11) and t.loc[0, "resolved_leader"] == "pre-grow"
    assert t.loc[2, "gap_mean"] == pytest.approx(0.04) and t.loc[2, "resolved_leader"] == "post-grow"
    assert t.loc[2, "post-grow_mean"] == pytest.approx(5.1)
    c = claims_by_id(rep)["obs2-crossover"]
    assert c["status"] == report.SUPPORTED and c["supported"] is True
    assert "stage 1" in c["sentence"] or "stage 2" in c["sentence"]
    fig = report.crossover_figure(rep)
    assert len(fig.data) == 3


# ------------------------------------------------------------------------------------------------ claims flip

def test_claims_supported(outputs):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005],
                matched_gaps=[0.02, 0.025, 0.03], single_gaps=[0.0, 0.002, -0.002],
                freeze_gaps=[0.02, 0.025, 0.022], stage0_gaps=[-0.05, -0.06, -0.055])
    c = claims_by_id(report.build_report("synth"))
    for cid in ("headline-joint", "headline-grow", "headline-ratio", "obs1-matched", "obs2-crossover",
                "obs3-controls", "obs3-single", "obs3-freeze"):
        assert c[cid]["status"] == report.SUPPORTED, (cid, c[cid]["sentence"])
        assert c[cid]["sentence"].startswith("Supported")
    assert "+0.0350" in c["headline-grow"]["sentence"]  # the numbers are in the sentence


def test_claims_not_resolved_when_interval_includes_zero(outputs):
    write_study(outputs, grow_gaps=[0.05, -0.04, 0.02], joint_gaps=[0.03, 0.031, 0.029],
                matched_gaps=[0.05, -0.05, 0.01], single_gaps=[0.05, -0.04, 0.02],
                freeze_gaps=[0.03, -0.03, 0.01], stage0_gaps=[-0.05, 0.05, 0.01])
    c = claims_by_id(report.build_report("synth"))
    for cid in ("headline-grow", "obs1-matched", "obs2-crossover", "obs3-freeze", "obs3-controls"):
        assert c[cid]["status"] == report.NOT_RESOLVED, (cid, c[cid]["sentence"])
        assert c[cid]["supported"] is None and c[cid]["sentence"].startswith("Not resolved")
    assert "includes zero" in c["headline-grow"]["sentence"]
    # the joint gap is resolved away from zero here: "indistinguishable" is not supported
    assert c["headline-joint"]["status"] == report.NOT_SUPPORTED
    assert "post-norm is better" in c["headline-joint"]["sentence"]


def test_claims_not_supported_when_wrong_direction(outputs):
    write_study(outputs, grow_gaps=[-0.03, -0.035, -0.04], joint_gaps=[0.001, -0.001, 0.0005],
                matched_gaps=[-0.02, -0.025, -0.03], single_gaps=[0.10, 0.11, 0.12],
                freeze_gaps=[-0.02, -0.025, -0.022], stage0_gaps=[-0.05, -0.06, -0.055])
    c = claims_by_id(report.build_report("synth"))
    for cid in ("headline-grow", "headline-ratio", "obs1-matched", "obs2-crossover", "obs3-single",
                "obs3-freeze", "obs3-controls"):
        assert c[cid]["status"] == report.NOT_SUPPORTED, (cid, c[cid]["sentence"])
        assert c[cid]["supported"] is False and c[cid]["sentence"].startswith("Not supported")
    assert "pre-norm still leads" in c["obs2-crossover"]["sentence"]


def test_crossover_not_supported_when_post_leads_from_the_start(outputs):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.0, 0.0, 0.0],
                stage0_gaps=[0.05, 0.06, 0.055])
    c = claims_by_id(report.build_report("synth"))["obs2-crossover"]
    assert c["status"] == report.NOT_SUPPORTED and "already leads" in c["sentence"]


def test_single_seed_and_missing_variants(outputs):
    write_study(outputs, grow_gaps=[0.03], joint_gaps=[0.001])
    rep = report.build_report("synth")
    c = claims_by_id(rep)
    assert c["headline-grow"]["status"] == report.NOT_RESOLVED
    assert "1 paired seed" in c["headline-grow"]["sentence"] and "no CI" in c["headline-grow"]["sentence"]
    assert c["headline-joint"]["status"] == report.NOT_RESOLVED
    assert c["obs2-crossover"]["status"] == report.NOT_RESOLVED
    assert c["obs1-matched"]["status"] == report.NOT_TESTABLE
    assert "post-joint-matched" in c["obs1-matched"]["sentence"]
    g = rep.gaps.set_index(["metric", "gap"]).loc[("val_ce", "grow")]
    assert g["n"] == 1 and g["mean"] == pytest.approx(0.03) and math.isnan(g["ci_low"])


# ------------------------------------------------------------------------------------------------------- writing

def test_write_report_files_and_diagnostics(outputs):
    write_study(outputs, grow_gaps=[0.03, 0.035, 0.04], joint_gaps=[0.001, -0.001, 0.0005])
    rep = report.build_report("synth")
    assert rep.diagnostics_claims is None and "not available" in rep.diagnostics_note
    assert any("not available" in s for s in rep.sentences())
    files = report.write_report(rep)
    summary = pd.read_csv(files["summary"])
    assert len(summary) == 12 and {"variant", "seed", "val_ce", "val_kd_ce", "tokens", "active_layer_tokens",
                                   "wall_s", "val_ce_p0", "val_ce_p2"} <= set(summary.columns)
    assert set(pd.read_csv(files["variant_stats"])["variant"]) == {"pre-grow", "post-grow", "pre-joint",
                                                                   "post-joint"}
    page = files["report"].read_text()
    assert "<script src=" not in page and "<script type=\"text/javascript\" src=" not in page  # no CDN
    assert "Plotly" in page and len(page) > 1_000_000  # plotly.js embedded
    assert "Diagnostics are not available" in page

    study = outputs / "study" / "synth"
    diag = [{"claim": "obs4-boundary-scale", "statement": "post-norm keeps boundary scale stable",
             "supported": True, "evidence": {"ratio": 1.02}},
            {"claim": "obs5-identity", "statement": "final pre-norm block near identity", "supported": None,
             "evidence": "update/input 0.03"}]
    (study / "diagnostics.json").write_text(json.dumps({"claims": diag}))
    (study / "diagnostics.html").write_text("<html>diag</html>")
    rep = report.build_report("synth")
    assert rep.diagnostics_claims == diag  # verbatim
    page = report.report_html(rep)
    assert "obs4-boundary-scale" in page and "href='diagnostics.html'" in page
