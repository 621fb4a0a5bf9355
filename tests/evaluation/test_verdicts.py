"""One vocabulary for changes: the noise band and the verdict on a ratio."""

import math

import pytest

from mlxsci.evaluation.verdicts import (
    IMPROVED,
    NOISE_FLOOR,
    REGRESSED,
    WITHIN_NOISE,
    assess,
    assess_summary,
    band,
    change,
    judge,
    ratio,
)


def test_band_is_the_largest_noise_or_the_floor():
    assert NOISE_FLOOR == 0.05
    assert band() == NOISE_FLOOR
    assert band(0.01, 0.02) == NOISE_FLOOR  # in-process noise under the floor
    assert band(0.01, 0.12) == 0.12
    assert band(0.30, 0.12) == 0.30
    assert band(None, None) == NOISE_FLOOR  # old results: no noise recorded
    assert band(None, 0.07) == 0.07
    assert band(float("nan"), 0.06) == 0.06


@pytest.mark.parametrize(
    "r,b,verdict",
    [
        (1.0, 0.05, WITHIN_NOISE),
        (1.05, 0.05, WITHIN_NOISE),  # the upper boundary is within noise
        (math.nextafter(1.05, 2.0), 0.05, IMPROVED),
        (1.12, 0.05, IMPROVED),
        (1.12, 0.15, WITHIN_NOISE),  # the H100 autotune "gains"
        (1.0 / 1.05, 0.05, WITHIN_NOISE),  # the lower boundary is within noise
        (math.nextafter(1.0 / 1.05, 0.0), 0.05, REGRESSED),
        (0.96, 0.05, WITHIN_NOISE),  # 1 / 1.05 = 0.952...
        (0.95, 0.05, REGRESSED),
        (0.80, 0.25, WITHIN_NOISE),  # 1 / 1.25 = 0.8 exactly
        (0.79, 0.25, REGRESSED),
        (1.25, 0.25, WITHIN_NOISE),
        (1.26, 0.25, IMPROVED),
        (float("inf"), 0.05, IMPROVED),
        (0.0, 0.05, REGRESSED),
    ],
)
def test_change_boundaries(r, b, verdict):
    assert change(r, b) == verdict


def test_change_needs_a_ratio():
    with pytest.raises(ValueError):
        change(None, 0.05)
    with pytest.raises(ValueError):
        change(float("nan"), 0.05)


def test_ratio_and_judge():
    assert ratio(0.6, 0.3) == pytest.approx(2.0)
    assert ratio(None, 0.3) is None and ratio(0.6, None) is None and ratio(0.6, 0.0) is None
    assert judge(0.315, 0.30, 0.01, 0.02) == {
        "ratio": pytest.approx(1.05),
        "band": 0.05,
        "verdict": WITHIN_NOISE,
    }
    assert judge(0.33, 0.30, 0.08, 0.02)["verdict"] == IMPROVED  # 1.1 > 1.08
    assert judge(0.33, 0.30, 0.12)["verdict"] == WITHIN_NOISE  # 1.1 < 1.12
    assert judge(None, 0.30)["verdict"] is None


def test_assess_uses_each_comparisons_own_noise():
    v = assess(
        0.30,
        0.36,
        0.50,
        0.40,
        seed_noise=0.02,
        best_noise=0.03,
        held_out_seed_noise=0.30,
        held_out_best_noise=0.01,
    )
    assert v["improvement"] == pytest.approx(1.2) and v["improvement_band"] == 0.05
    assert v["improvement_verdict"] == IMPROVED
    assert v["held_out_ratio"] == pytest.approx(0.8) and v["held_out_band"] == 0.30
    assert v["held_out_verdict"] == WITHIN_NOISE  # 0.8 > 1 / 1.3
    v = assess(0.30, 0.36, 0.50, 0.40)
    assert v["held_out_verdict"] == REGRESSED and v["held_out_band"] == NOISE_FLOOR
    v = assess(0.30, 0.36, None, 0.40)  # the seed has no Phi
    assert v["held_out_ratio"] is None and v["held_out_verdict"] is None


def test_assess_summary_reads_old_summaries_without_noise():
    old = {"seed_score": 0.30, "best_score": 0.32, "held_out_seed": 0.5, "held_out_best": 0.5}
    v = assess_summary(old)
    assert v["improvement_band"] == NOISE_FLOOR and v["improvement_verdict"] == IMPROVED
    new = dict(old, seed_noise=0.1, best_noise=0.02)
    assert assess_summary(new)["improvement_verdict"] == WITHIN_NOISE
