"""The one outcome vocabulary (search/outcomes.py), shared by summary.json and the report."""

import pytest

from mlxsci.evaluation.verdicts import NOISE_FLOOR
from mlxsci.report import build as report
from mlxsci.search.outcomes import OUTCOMES, SATURATED_SEED, classify, classify_summary

# summary.json numbers: seed S 0.30, Phi 0.50; noises 0.01 (so the 5 % floor is the band)
BASE = dict(
    seed_score=0.30,
    held_out_seed=0.50,
    seed_noise=0.01,
    best_noise=0.01,
    held_out_seed_noise=0.01,
    held_out_best_noise=0.01,
)
CASES = {
    "flat": dict(best_score=0.30, held_out_best=0.50),
    "saturated": dict(seed_score=SATURATED_SEED, best_score=SATURATED_SEED, held_out_best=0.5),
    "held_out_failure": dict(best_score=0.60, held_out_best=None),
    "held_out_regression": dict(best_score=0.60, held_out_best=0.40),
    "improved": dict(best_score=0.60, held_out_best=0.50),
    "within_noise": dict(best_score=0.30 * (1 + NOISE_FLOOR), held_out_best=0.50),
}


def test_the_vocabulary_is_the_summary_names_in_rule_order():
    assert list(OUTCOMES) == [
        "no_candidates",
        "saturated",
        "flat",
        "held_out_failure",
        "held_out_regression",
        "improved",
        "within_noise",
    ]
    assert all(isinstance(meaning, str) and meaning for meaning in OUTCOMES.values())


@pytest.mark.parametrize("outcome", list(CASES))
def test_each_outcome_and_the_report_agrees(outcome):
    summary = {**BASE, **CASES[outcome]}
    assert classify(summary) == outcome
    # the report labels the same numbers with the same name
    assert report.outcome_label(summary) == outcome
    assert classify(summary, no_candidates=True) == "no_candidates"


def test_no_candidates_is_kept_from_the_summary():
    """The numbers of a run without candidates look flat: the recorded outcome says more."""
    flat = {**BASE, **CASES["flat"]}
    assert classify_summary(dict(flat, outcome="no_candidates")) == "no_candidates"
    assert report.outcome_label(dict(flat, outcome="no_candidates")) == "no_candidates"
    # any other recorded outcome is recomputed, not trusted
    assert classify_summary(dict(flat, outcome="improved")) == "flat"


def test_a_held_out_regression_counts_even_with_a_gain_inside_the_noise():
    numbers = {**BASE, "best_score": 0.31, "held_out_best": 0.40}
    assert classify(numbers) == "held_out_regression"
    # within the held-out size's own 30 % noise it is no regression
    assert classify(dict(numbers, held_out_best_noise=0.30)) == "within_noise"


def test_missing_numbers_and_old_summaries():
    assert classify({}) == "flat"  # nothing measured
    assert classify({"seed_score": 0.3, "best_score": None}) == "flat"
    assert classify({"seed_score": 0.9, "best_score": None}) == "saturated"
    # no noise keys (written before noise was measured): the floor decides
    old = dict(seed_score=0.30, best_score=0.33, held_out_seed=0.5, held_out_best=0.5)
    assert classify(old) == "improved"
    # a seed that fails at the held-out size too: the best's failure is not the finding
    assert classify(dict(old, held_out_seed=None, held_out_best=None)) == "improved"
