"""The boundary intervention's claims (analysis/intervention.py, params/interventions.yaml) on synthetic runs: each
direction can come out either way, the joint gaps are read beside them, undertrained variants gate a claim, and a
declaration naming an unknown intervention is refused by name."""
from __future__ import annotations

import pandas as pd
import pytest

from normgrow.analysis import intervention as I
from normgrow.analysis.claims import NOT_JUDGED, NOT_RESOLVED, NOT_TESTABLE, SUPPORTED
from normgrow.paths import ParamError

SEEDS = range(6)
JITTER = [0.004, -0.003, 0.002, -0.004, 0.003, -0.002]


def frame(values: dict[str, float], flattened: bool = True) -> pd.DataFrame:
    """One run per variant and seed at its value plus a small per-seed jitter, trained by the regime gate's rules
    (5 nats, well below a unigram level of 7.0; flattened unless told)."""
    return pd.DataFrame([{"variant": v, "seed": s, "val_ce": x + JITTER[s] * (1 + k % 3), "flattened": flattened,
                          "flat_ratio": 0.01, "flat_note": "flattened" if flattened else "still improving"}
                         for k, (v, x) in enumerate(values.items()) for s in SEEDS])


CONTROL = {"pre-grow": 5.08, "post-grow": 5.00, "pre-joint": 4.90, "post-joint": 4.90}


def test_normalizing_that_closes_the_gap_and_drift_that_costs_nothing_read_as_such():
    inter = I.load_interventions()
    runs = frame(CONTROL | {"pre-grow@normalize": 5.001, "pre-joint@normalize": 4.90, "post-joint@normalize": 4.90,
                            "post-grow@drift": 5.0, "pre-joint@drift": 4.90, "post-joint@drift": 4.90})
    claims = {c.claim: c for c in I.judge(inter, runs, unigram_val_ce=7.0)}
    assert claims["normalize-helps-pre"].status == SUPPORTED
    assert claims["normalize-closes"].status == SUPPORTED and claims["normalize-joint-level"].status == SUPPORTED
    assert claims["drift-opens"].status == NOT_RESOLVED  # the drift moved nothing: the negative reads plainly
    assert claims["drift-joint-level"].status == SUPPORTED
    gaps = I.gap_frame(inter, runs)
    assert I.share_closed(gaps) == pytest.approx((5.08 - 5.001) / 0.08, abs=0.02)


def test_a_normalized_boundary_that_leaves_the_gap_and_a_drift_that_opens_one():
    inter = I.load_interventions()
    runs = frame(CONTROL | {"pre-grow@normalize": 5.08, "post-grow@drift": 5.09})
    claims = {c.claim: c for c in I.judge(inter, runs, unigram_val_ce=7.0)}
    assert claims["normalize-helps-pre"].status == NOT_RESOLVED and claims["normalize-closes"].status != SUPPORTED
    assert claims["drift-opens"].status == SUPPORTED
    assert claims["normalize-joint-level"].status == NOT_TESTABLE  # no joint runs under the operation yet


def test_an_undertrained_intervention_gates_its_claims():
    inter = I.load_interventions()
    runs = pd.concat([frame(CONTROL), frame({"pre-grow@normalize": 5.0}, flattened=False)])
    claims = {c.claim: c for c in I.judge(inter, runs, unigram_val_ce=7.0)}
    assert claims["normalize-helps-pre"].status == NOT_JUDGED and "still improving" in claims["normalize-helps-pre"].sentence


def test_a_gap_naming_an_undeclared_intervention_is_refused(tmp_path):
    text = I.PATH.read_text().replace("b: pre-grow@normalize,", "b: pre-grow@nowhere,", 1)
    (tmp_path / "interventions.yaml").write_text(text)
    with pytest.raises(ParamError, match=r"names 'pre-grow@nowhere': a run file of params/runs, or run@name with "
                                         r"name one of normalize, drift"):
        I.load_interventions(tmp_path / "interventions.yaml")


def test_the_boundary_is_read_beside_the_loss_from_each_study_s_diagnostics(monkeypatch):
    """The control's committed diagnostics (cpu-w64): its grown variants' top-boundary drift is the width grid's
    (width.csv, the same geometric mean over seeds of last over first phase), its final-block ratio obs5's."""
    from normgrow.paths import REPO_ROOT
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)  # the repository's committed records
    table = pd.read_csv(REPO_ROOT / "outputs" / "grid" / "cpu" / "width" / "width.csv")
    drift = table[(table["rung"] == "cpu-w64") & table["quantity"].str.startswith("top-boundary drift", na=False)]
    frame = I.diagnostics_frame(I.load_interventions()).set_index("variant")
    assert list(frame["study"]) == ["control", "control"] and set(frame["n"]) == {6}
    for norm in ("pre", "post"):
        expected = drift.loc[drift["quantity"] == f"top-boundary drift ({norm})", "mean"].item()
        assert frame.loc[f"{norm}-grow", "top_drift_all"] == pytest.approx(expected, rel=1e-9)
    assert frame.loc["pre-grow", "final_block_ratio"] < 0.5 < frame.loc["post-grow", "final_block_ratio"]
