"""The transfer grade as a pure function of measurements
(mlxsci/transfer/grading.py): every grade, the rules' order, the noise band's
and TRANSFER_FRACTION's boundaries, on constructed numbers."""

import math

import pytest

from mlxsci.evaluation.verdicts import NOISE_FLOOR
from mlxsci.transfer.grading import (
    TRANSFER_FRACTION,
    Figure,
    Measurements,
    Place,
    grade,
    speedup,
)

BASE = 0.10  # the baseline's S and Phi everywhere unless a test says otherwise


def ok(value, noise=0.0):
    return Figure(True, value, noise)


def failing(reason="correctness failed at size secret held-out: max_abs=0.3"):
    return Figure(False, None, None, reason)


def place(name, candidate, baseline=None):
    return Place(name, f"{name} sizes", candidate, baseline or ok(BASE))


def measured(r_in=3.0, r_held=2.5, r_second=2.5, findings=(), coverage=None, **places):
    """Measurements whose speedups are r_in, r_held and r_second (None: the
    place is not measured) unless `places` gives a Place outright."""
    m = {
        "in_dist": place("in-distribution", ok(BASE * r_in)),
        "held_out": None if r_held is None else place("held-out", ok(BASE * r_held)),
        "second": None
        if r_second is None
        else place("second input distribution", ok(BASE * r_second)),
    }
    m.update(places)
    return Measurements(findings=list(findings), coverage=coverage, **m)


def finding(value=768, held_out_only=True, line=12):
    sets = ["held-out"] if held_out_only else ["in-dist"]
    return {
        "what": f"comparison `NX == {value}u`: NX = {value} in {sets[0]}",
        "where": f"line {line}",
        "numbers": {"value": value, "params": ["NX"], "sets": sets, "held_out_only": held_out_only},
    }


def test_a_win_that_holds_everywhere_transfers_with_every_number_in_its_evidence():
    listed = finding(256, held_out_only=False)
    judged = grade(measured(findings=[listed]))
    assert judged["grade"] == "transfers"
    whats = [e["what"] for e in judged["evidence"]]
    assert whats[0].startswith("in-distribution speedup 3x, improved")
    assert any(w.startswith("held-out speedup 2.5x, improved") for w in whats)
    assert any(w.startswith("second input distribution speedup 2.5x") for w in whats)
    assert listed in judged["evidence"]  # every finding, even when it decides nothing
    held = next(e for e in judged["evidence"] if e["what"].startswith("held-out"))
    assert held["numbers"]["kept_fraction"] == pytest.approx(math.log(2.5) / math.log(3.0))
    assert held["numbers"]["verdict"] == "improved" and held["numbers"]["transfers"] is True


def test_the_seed_against_itself_is_no_win_and_still_shows_the_other_numbers():
    judged = grade(measured(r_in=1.0, r_held=1.0, r_second=1.0, findings=[finding()]))
    assert judged["grade"] == "no-win"
    assert "1x is within noise" in judged["reason"]
    whats = [e["what"] for e in judged["evidence"]]
    assert any(w.startswith("held-out speedup 1x") for w in whats)
    assert any(w.startswith("second input distribution speedup 1x") for w in whats)
    assert finding() in judged["evidence"]


@pytest.mark.parametrize(
    "r_in, expected",
    [
        (1.0 + NOISE_FLOOR, "no-win"),  # the band's boundary is within noise
        (1.0 + NOISE_FLOOR + 1e-9, "transfers"),
        (1.0 / (1.0 + NOISE_FLOOR) - 1e-9, "no-win"),  # regressed
    ],
)
def test_the_in_distribution_win_must_lie_beyond_the_noise_band(r_in, expected):
    # the other places keep the whole gain, so only the in-distribution band decides
    judged = grade(measured(r_in=r_in, r_held=r_in * 1.5, r_second=r_in * 1.5))
    assert judged["grade"] == expected


def test_a_measured_noise_widens_the_in_distribution_band():
    noisy = place("in-distribution", ok(BASE * 1.2, noise=0.25))
    assert grade(measured(in_dist=noisy))["grade"] == "no-win"
    assert grade(measured(r_in=1.2))["grade"] == "transfers"


def test_a_candidate_failing_in_distribution_is_no_win():
    judged = grade(measured(in_dist=place("in-distribution", failing("compile error: x.metal:3"))))
    assert judged["grade"] == "no-win"
    assert "fails at the search sizes" in judged["reason"]
    assert "compile error" in judged["evidence"][0]["what"]


def test_a_baseline_without_s_gives_no_win():
    judged = grade(measured(in_dist=place("in-distribution", ok(0.3), failing())))
    assert judged["grade"] == "no-win" and "the baseline has no S" in judged["reason"]


def test_failing_at_the_held_out_where_the_baseline_passes_is_b_with_the_cold_arms():
    arms = [
        {"line": 17, "column": 1, "kind": "if", "hits": 0},
        {"line": 17, "column": 1, "kind": "not-taken", "hits": 900},
    ]
    m = measured(held_out=place("held-out", failing()), findings=[finding()], coverage=arms)
    judged = grade(m)
    assert judged["grade"] == "B"  # before C: the enumeration is also there
    first, second = judged["evidence"][:2]
    assert first["what"].startswith("held-out: the candidate fails: correctness failed")
    assert second == {
        "what": "`if` arm never ran at the search sizes",
        "where": "line 17",
        "numbers": {"hits": 0, "kind": "if", "column": 1},
    }
    assert finding() in judged["evidence"]


def test_failing_with_the_second_distribution_is_b_too():
    failed = place("second input distribution", failing("correctness failed at size 67x45x5"))
    judged = grade(measured(second=failed))
    assert judged["grade"] == "B" and "second input distribution" in judged["reason"]


def test_a_baseline_that_also_fails_at_the_held_out_makes_no_b_and_no_a():
    both = place("held-out", failing(), failing("the seed fails too"))
    judged = grade(measured(held_out=both))
    assert judged["grade"] == "transfers"
    assert "not judged: held-out" in judged["reason"]
    item = next(e for e in judged["evidence"] if e["what"].startswith("held-out"))
    assert "the baseline fails there too" in item["what"]
    assert item["numbers"]["transfers"] is None


def test_a_value_only_the_published_held_out_has_is_c_even_when_speed_transfers():
    judged = grade(measured(findings=[finding(256, held_out_only=False), finding(768)]))
    assert judged["grade"] == "C"
    assert judged["evidence"][0] == finding(768)
    assert "enumerates the published held-out" in judged["reason"]
    assert finding(256, held_out_only=False) in judged["evidence"]


def test_c_comes_before_d_and_a():
    judged = grade(measured(r_held=0.5, r_second=0.5, findings=[finding()]))
    assert judged["grade"] == "C"


def test_a_win_lost_on_the_other_data_is_d_before_a():
    judged = grade(measured(r_second=1.02, r_held=0.9))
    assert judged["grade"] == "D"
    assert judged["evidence"][0]["what"].startswith("second input distribution speedup 1.02x")
    assert "within noise" in judged["reason"]


@pytest.mark.parametrize("where", ["second", "held_out"])
def test_the_transfer_fraction_boundary(where):
    r_in = 16.0
    at = r_in**TRANSFER_FRACTION  # 2x keeps exactly a quarter of a 16x gain
    expected = {"second": "D", "held_out": "A"}[where]
    assert grade(measured(r_in=r_in, **{f"r_{where.split('_')[0]}": at}))["grade"] == "transfers"
    below = at * 0.99  # still "improved", but keeps less than the fraction
    judged = grade(measured(r_in=r_in, **{f"r_{where.split('_')[0]}": below}))
    assert judged["grade"] == expected
    assert f"keeps {math.log(below) / math.log(r_in):.2f} of the gain" in judged["reason"]


def test_a_held_out_speedup_on_the_band_boundary_does_not_transfer():
    judged = grade(measured(r_in=1.2, r_held=1.0 + NOISE_FLOOR))
    assert judged["grade"] == "A" and "within noise" in judged["reason"]
    noisy = place("held-out", ok(BASE * 1.3, noise=0.4), ok(BASE))
    assert grade(measured(r_in=1.5, held_out=noisy))["grade"] == "A"


def test_a_slower_held_out_is_a_with_the_numbers():
    judged = grade(measured(r_in=8.14, r_held=0.90))
    assert judged["grade"] == "A"
    first = judged["evidence"][0]
    assert first["where"] == "held-out sizes"
    assert first["numbers"]["verdict"] == "regressed"
    assert first["numbers"]["kept_fraction"] < 0


def test_a_correct_candidate_without_a_held_out_figure_does_not_transfer():
    # correct but no Phi (an implausible time): nothing shows the win there
    judged = grade(measured(held_out=place("held-out", Figure(True, None, None))))
    assert judged["grade"] == "A" and "no figure at the held-out" in judged["reason"]


def test_places_not_measured_are_said_in_the_reason():
    judged = grade(measured(r_held=None, r_second=None))
    assert judged["grade"] == "transfers"
    assert "held-out (not measured)" in judged["reason"]
    assert "second distribution (not measured)" in judged["reason"]


def test_speedup_uses_the_larger_noise_as_its_band():
    numbers = speedup(place("held-out", ok(0.2, noise=0.02), ok(0.1, noise=0.3)), r_in=4.0)
    assert numbers["band"] == 0.3 and numbers["ratio"] == pytest.approx(2.0)
    assert numbers["kept_fraction"] == pytest.approx(0.5) and numbers["transfers"] is True


def test_an_interleaved_timing_decides_the_speedup_over_the_figures_ratio():
    """Figures measured apart in time say the held-out win holds (2.5x);
    the two timed interleaved at the held-out say 1.02x: A, from the timing,
    with its spread as the band. A comparison that failed, or holds no
    finite speedup, leaves the figures' ratio."""
    held = place("held-out", ok(BASE * 2.5))
    timed = Place(
        held.name, held.where, held.candidate, held.baseline, {"speedup": 1.02, "noise": 0.01}
    )
    judged = grade(measured(held_out=timed))
    assert judged["grade"] == "A"
    numbers = speedup(timed, 3.0)
    assert numbers["ratio"] == pytest.approx(1.02) and numbers["timed_interleaved"]
    assert numbers["band"] == NOISE_FLOOR and numbers["verdict"] == "within noise"
    noisy = Place(
        held.name, held.where, held.candidate, held.baseline, {"speedup": 1.3, "noise": 0.4}
    )
    assert speedup(noisy, 3.0)["verdict"] == "within noise"  # inside its own 40 % spread
    for broken in ({"error": "comparison failed"}, {"speedup": math.inf}, {"speedup": -1.0}, {}):
        fallback = Place(held.name, held.where, held.candidate, held.baseline, broken)
        assert speedup(fallback, 3.0)["ratio"] == pytest.approx(2.5)
    assert (
        grade(
            measured(
                held_out=Place(held.name, held.where, held.candidate, held.baseline, {"error": "x"})
            )
        )["grade"]
        == "transfers"
    )


STOPPED = "the machine's time limit of 900 s ran out before a verdict"


def stopped():
    """A figure the machine stopped before a verdict (Evaluation.not_judged)."""
    return Figure(False, None, None, f"runtime error at size 256: timeout: {STOPPED}", STOPPED)


@pytest.mark.parametrize("where", ["held_out", "second"])
def test_a_place_the_machine_stopped_is_not_judged_never_a_wrong_arm(where):
    """The false accusation of issue 38: fft3d's best ran out of the
    simulator's time limit at the published held-out and was graded B. The
    same measurements with the figure judged incorrect are B; stopped by the
    machine they are not-judged, and the reason says why."""
    name = "held-out" if where == "held_out" else "second input distribution"
    wrong = grade(measured(**{where: place(name, failing())}))
    assert wrong["grade"] == "B"
    judged = grade(measured(**{where: place(name, stopped())}))
    assert judged["grade"] == "not-judged"
    assert STOPPED in judged["reason"] and name in judged["reason"]
    assert any("was not judged" in e["what"] for e in judged["evidence"] if isinstance(e, dict))


def test_stopped_at_the_search_sizes_is_not_judged_not_no_win():
    judged = grade(measured(in_dist=place("in-distribution", stopped())))
    assert judged["grade"] == "not-judged"
    assert judged["reason"].startswith("not judged at the search sizes")


def test_a_wrong_arm_elsewhere_still_wins_over_a_stopped_place():
    """B at the second distribution is a verdict about the kernel; a held-out
    the machine could not finish does not hide it."""
    judged = grade(
        measured(
            held_out=place("held-out", stopped()),
            second=place("second input distribution", failing()),
        )
    )
    assert judged["grade"] == "B"
