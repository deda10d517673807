"""normgrow.analysis.stats' tests of resolution: the equivalence test (TOST) and the seeds a gap needs, checked against
scipy's paired t-tests (values written here) and hand computations."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from normgrow.analysis import regime, stats

MARGIN = 0.02
WIDE = [0.03, -0.03, 0.01]  # 3 seeds, spread 0.03: the mean is inside the margin, its interval is not
TIGHT = [0.002, -0.001, 0.0015, -0.002, 0.0005, 0.001, -0.0015, 0.0, 0.002, -0.0005]  # 10 seeds, spread 0.0015
MIDDLE = [0.004, 0.012, -0.003, 0.009, 0.001]  # 5 seeds, mean 0.0046


def t_cdf_df2(t: float) -> float:
    """Student's t CDF with 2 df in closed form."""
    return 0.5 + t / (2 * math.sqrt(2 + t * t))


@pytest.mark.parametrize("values,p_lower,p_upper,equivalent", [
    (WIDE, 0.15843497446801338, 0.22222222222222224, False),
    (TIGHT, 3.7009645955146675e-12, 4.427530151147787e-12, True),
    (MIDDLE, 0.00039929526922972237, 0.002317919708952205, True)])
def test_tost_matches_scipy(values, p_lower, p_upper, equivalent):
    """p_lower: scipy.stats.ttest_1samp(values, -MARGIN, alternative='greater'); p_upper: ttest_1samp(values,
    +MARGIN, alternative='less')."""
    r = stats.tost(values, MARGIN)
    assert r["n"] == len(values) and r["mean"] == pytest.approx(np.mean(values))
    assert r["p_lower"] == pytest.approx(p_lower, rel=1e-6, abs=1e-15)
    assert r["p_upper"] == pytest.approx(p_upper, rel=1e-6, abs=1e-15)
    assert r["p"] == max(r["p_lower"], r["p_upper"]) and r["equivalent"] is equivalent


def test_tost_by_hand_and_as_an_interval():
    """WIDE by hand (df 2, closed-form CDF); equivalence iff the 90% interval lies inside +-margin."""
    x = np.array(WIDE)
    se = x.std(ddof=1) / math.sqrt(3)
    r = stats.tost(WIDE, MARGIN)
    assert r["t_upper"] == pytest.approx((x.mean() - MARGIN) / se)
    assert r["p_upper"] == pytest.approx(t_cdf_df2((x.mean() - MARGIN) / se), abs=1e-14)
    assert r["p_lower"] == pytest.approx(1 - t_cdf_df2((x.mean() + MARGIN) / se), abs=1e-14)
    for values in (WIDE, TIGHT, MIDDLE, [0.015, 0.019, 0.017, 0.016]):
        ci = stats.mean_ci(values, level=0.90)
        inside = -MARGIN < ci["ci_low"] and ci["ci_high"] < MARGIN
        assert stats.tost(values, MARGIN)["equivalent"] is inside


def test_tost_degenerate_cases():
    one = stats.tost([0.001], MARGIN)
    assert one["n"] == 1 and math.isnan(one["p"]) and not one["equivalent"]
    assert stats.tost([0.001, 0.001], MARGIN)["p"] == 0.0  # no spread, inside: both tests reject
    assert not stats.tost([0.03, 0.03], MARGIN)["equivalent"]  # no spread, outside


def test_seeds_needed_hand_computed():
    # sd 0.02, target 0.0328: n = 3 gives 4.3027 * 0.02 / sqrt(3) = 0.0497, n = 4 gives 3.1824 * 0.02 / 2 = 0.0318
    assert stats.seeds_needed(0.02, 0.0328) == 4
    assert stats.seeds_needed(0.001, 0.0328) == 2  # 12.706 * 0.001 / sqrt(2) = 0.0090
    # one-sided 95% (equivalence): sd 0.018, room 0.02: t(0.95, 3) * 0.018 / 2 = 0.0212, t(0.95, 4) * 0.018 / sqrt(5) = 0.0172
    assert stats.seeds_needed(0.018, 0.02, 0.95) == 5
    n = stats.seeds_needed(0.018, 0.0004)  # about (1.96 * 0.018 / 0.0004)^2 = 7779
    half = lambda k: stats.t_quantile(0.975, k - 1) * 0.018 / math.sqrt(k)
    assert 7779 <= n <= 7800 and half(n) < 0.0004 <= half(n - 1)
    for sd, target in ((0.0, 0.03), (math.nan, 0.03), (0.01, 0.0), (0.01, math.nan)):
        assert stats.seeds_needed(sd, target) is None


def test_regime_needs_every_seed_below_unigram_not_the_mean():
    """Two seeds 2 nats below unigram and one on the plateau (0.2 below): the mean is 1.4 below, which passed the
    margin when the gate judged the mean; the variant is not trained, and the reason names the seed."""
    import pandas as pd
    runs = pd.DataFrame({"variant": ["post-grow"] * 3, "seed": [0, 1, 2], "val_ce": [4.5, 6.3, 4.5],
                         "flattened": [True] * 3, "flat_ratio": [0.01] * 3})
    row = regime.regime_check(runs, unigram_val_ce=6.5).iloc[0]
    assert row["val_ce_mean"] == pytest.approx(5.1)
    assert row["margin_below_unigram"] == pytest.approx(0.2)  # the worst seed's
    assert not row["below_unigram"] and not row["trained"]
    assert "seed 1's val_ce 6.300" in row["reason"]
    trained = regime.regime_check(runs.assign(val_ce=[4.5, 5.4, 4.5]), unigram_val_ce=6.5).iloc[0]
    assert trained["trained"] and trained["margin_below_unigram"] == pytest.approx(1.1)


def test_depth_trend_line_interval_and_crossings():
    # five rungs, one decade apart; gains on a line of 0.03 nats per decade plus fixed residuals
    compute = [0.1, 1.0, 10.0, 100.0, 1000.0]
    residual = np.array([0.004, -0.006, 0.001, 0.005, -0.004])
    x = np.log10(compute)
    gains = 0.02 + 0.03 * x + residual
    trend = stats.depth_trend(compute, gains, margin=0.098)
    slope, intercept = np.polyfit(x, gains, 1)
    assert trend["n"] == 5 and trend["slope_per_decade"] == pytest.approx(slope, rel=1e-12)
    # the slope's interval: t(0.975, 3) x the textbook standard error s / sqrt(Sxx)
    s = math.sqrt(((gains - intercept - slope * x) ** 2).sum() / 3)
    half = 3.182446305284263 * s / math.sqrt(((x - x.mean()) ** 2).sum())
    assert (trend["slope_ci_low"], trend["slope_ci_high"]) == pytest.approx((slope - half, slope + half), rel=1e-9)
    assert math.log10(trend["at_tflop"]) == pytest.approx((0.098 - intercept) / slope, rel=1e-12)
    # the band's edges reach the margin on either side of the crossing, within the 0.001-decade search grid
    band = lambda x0: 3.182446305284263 * s * math.sqrt(1 / 5 + (x0 - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum())
    lo, hi = math.log10(trend["from_tflop"]), math.log10(trend["to_tflop"])
    assert lo < math.log10(trend["at_tflop"]) < hi
    assert intercept + slope * lo + band(lo) == pytest.approx(0.098, abs=slope * 2e-3)
    assert intercept + slope * hi - band(hi) == pytest.approx(0.098, abs=slope * 2e-3)


def test_depth_trend_says_when_the_data_do_not_exclude_never():
    # a flat, noisy trend: the lower band never reaches the margin, so the latest compute is open (None)
    trend = stats.depth_trend([1, 10, 100, 1000], [0.03, 0.06, 0.02, 0.05], margin=0.098)
    assert trend["slope_ci_low"] < 0 < trend["slope_ci_high"] and trend["to_tflop"] is None
    # three scattered rungs: the band is wide enough to hold the margin anywhere, so nothing is located
    wide = stats.depth_trend([30, 38, 93], [0.049, 0.025, -0.005], margin=0.098)
    assert wide["band_everywhere"] and wide["from_tflop"] is None and wide["to_tflop"] is None
    # two rungs: a line but no interval
    assert stats.depth_trend([1, 10], [0.03, 0.05], margin=0.098)["from_tflop"] is None


@pytest.mark.integration  # the bundled teacher's tokenizer and corpus, the shared tiny cache
def test_the_unigram_level_survives_without_the_teacher_cache(share_cache, tmp_path, monkeypatch):
    """Where the cache is gone but its teacher.json (committed with the results) is there, the levels are the same
    numbers, the unigram re-made from the corpus's tokens (bug: without the cache a grid table rebuilt with
    --report-only lost the unigram level, and every regime gate read "cannot be checked"). With no teacher pass
    recorded at all there is no level."""
    import shutil
    from normgrow.analysis.regime import baselines
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(share_cache))
    with_cache = baselines("tiny")
    key = with_cache["teacher_source"].split("/")[2]
    bare = tmp_path / "outputs"
    (bare / "teacher" / key).mkdir(parents=True)
    shutil.copy(share_cache / "teacher" / key / "teacher.json", bare / "teacher" / key / "teacher.json")
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(bare))
    without = baselines("tiny")
    assert without["unigram_val_ce"] == pytest.approx(with_cache["unigram_val_ce"], abs=1e-12)
    assert without["teacher_val_ce"] == with_cache["teacher_val_ce"] and "outputs/data/" in without["unigram_source"]
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "empty"))
    assert baselines("tiny") == {}
    # runs that recorded another teacher pass (auto's dtype on another CPU kind): its level, not the cache the
    # profile resolves to here (bug: the cpu report rebuilt on an AVX2 CPU showed the float32 pass's teacher level
    # beside runs distilled from the bf16 one)
    both = tmp_path / "both"
    (both / "teacher").mkdir(parents=True)
    (both / "teacher" / key).symlink_to(share_cache / "teacher" / key)
    other = "0123456789abcdef"
    (both / "teacher" / other).mkdir()
    recorded = json.loads((share_cache / "teacher" / key / "teacher.json").read_text())
    (both / "teacher" / other / "teacher.json").write_text(json.dumps({**recorded, "val_ce": 9.25}))
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(both))
    assert baselines("tiny")["teacher_val_ce"] == with_cache["teacher_val_ce"]
    theirs = baselines("tiny", teacher_key=other)
    assert theirs["teacher_val_ce"] == 9.25 and other in theirs["teacher_source"]
    assert theirs["unigram_val_ce"] == pytest.approx(with_cache["unigram_val_ce"], abs=1e-12)
