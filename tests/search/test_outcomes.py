"""The one outcome vocabulary (search/outcomes.py), shared by summary.json and the report,
and the line that says why a run found nothing."""

import pytest
from click.testing import CliRunner
from scripted_runs import SEED, Crafted, Scripted, fenced, variant

from mlxsci.evaluation.verdicts import NOISE_FLOOR
from mlxsci.report import build as report
from mlxsci.search import __main__ as search_cli
from mlxsci.search import loop, options
from mlxsci.search.outcomes import OUTCOMES, SATURATED_SEED, classify, classify_summary
from mlxsci.search.progress import why_nothing_found

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
    "held_out_not_judged": dict(
        best_score=0.60,
        held_out_best=None,
        held_out_best_not_judged="the machine's time limit of 900 s ran out before a verdict",
    ),
    "held_out_failure": dict(best_score=0.60, held_out_best=None),
    "held_out_regression": dict(best_score=0.60, held_out_best=0.40),
    "not_transferred": dict(best_score=0.60, held_out_best=0.50),
    "improved": dict(best_score=0.60, held_out_best=0.60),
    "within_noise": dict(best_score=0.30 * (1 + NOISE_FLOOR), held_out_best=0.50),
}


def test_the_vocabulary_is_the_summary_names_in_rule_order():
    assert list(OUTCOMES) == [
        "no_candidates",
        "saturated",
        "flat",
        "held_out_not_judged",
        "held_out_failure",
        "held_out_regression",
        "not_transferred",
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
    old = dict(seed_score=0.30, best_score=0.33, held_out_seed=0.5, held_out_best=0.55)
    assert classify(old) == "improved"
    # a Phi merely not worse: a gain that does not carry to the held-out
    assert classify(dict(old, held_out_best=0.52)) == "not_transferred"
    # a seed that fails at the held-out size too: the best's failure is not the finding
    assert classify(dict(old, held_out_seed=None, held_out_best=None)) == "improved"


def test_a_win_must_transfer_in_speed_beyond_the_held_out_noise():
    """The held-out speed gate: with S 2x, Phi 1.06x (beyond the 5 % floor)
    transfers; Phi 1.04x does not, nor does it under a 30 % held-out noise."""
    numbers = {**BASE, "best_score": 0.60, "held_out_best": 0.50 * 1.06}
    assert classify(numbers) == "improved"
    assert classify(dict(numbers, held_out_best=0.50 * 1.04)) == "not_transferred"
    assert classify(dict(numbers, held_out_best=0.50 * 1.04, held_out_seed_noise=0.30)) == (
        "not_transferred"
    )


# -- why a run found nothing, in one line -------------------------------------------------


def test_a_flat_run_says_in_one_line_why_it_found_nothing(tmp_path, monkeypatch):
    """The README's first search may end flat: its output says why, from what the run measured."""
    table = {"seed": SEED, "slower": (0.29, 0.02, 0.5, 0.02), "close": (0.295, 0.01, 0.49, 0.02)}
    monkeypatch.setattr(loop, "evaluate", Crafted(table))
    proposer = Scripted([fenced(variant("slower")), fenced(variant("close"))])
    monkeypatch.setattr(options, "make_proposer", lambda model, **kw: proposer)
    args = ["--task", "saxpy", "--model", "scripted", "--iterations", "2", "--backend", "sim"]
    out = CliRunner().invoke(search_cli.main, [*args, "--out", str(tmp_path / "run"), "--quiet"])
    assert out.exit_code == 0, out.output
    assert "outcome flat (noise band 5.0%)" in out.output
    assert [line for line in out.output.splitlines() if line.startswith("why ")] == [
        "why flat: no candidate scored above the seed's S 0.3000: the closest of 2 scored, "
        "iteration 2, has S 0.2950, 0.983x the seed's, within the 5.0% noise band"
    ]


def record(iteration, role="candidate", score=None, **kw):
    correct = role != "skipped" and score is not None
    return {"iteration": iteration, "role": role, "score": score, "correct": correct, **kw}


SEED_RECORD = record(0, "seed", 0.30)
EXHAUSTED = "the proposer has nothing left to propose (autotune: search space exhausted)"


@pytest.mark.parametrize(
    "summary,line",
    [
        (  # every candidate failed, and the autotuner's space ran out
            dict(
                outcome="flat",
                history=[
                    SEED_RECORD,
                    record(1, fail_reason="correctness failed at size 1M: max_abs=1\nmore"),
                    record(2, "skipped", exhausted=True, fail_reason="autotune: exhausted"),
                ],
                stopped=EXHAUSTED,
            ),
            "why flat: none of the 1 candidate(s) scored (correct and counted); 1 candidate(s) "
            "failed (correctness failed at size 1M: max_abs=1); stopped early: " + EXHAUSTED,
        ),
        (  # faster, but re-timed within the noise: not kept
            dict(
                outcome="flat",
                history=[
                    SEED_RECORD,
                    record(
                        1,
                        score=0.36,
                        comparison={"accepted": False, "reason": "not accepted: re-timed"},
                    ),
                    record(2, "skipped", fail_reason="no fenced code block in the response"),
                ],
            ),
            "why flat: iteration 1 scored S 0.3600, 1.200x the seed's 0.3000, but was not "
            "accepted: re-timed; 1 proposal(s) gave no candidate",
        ),
        (  # far slower: below the band
            dict(
                outcome="saturated",
                seed_score=0.85,
                history=[record(0, "seed", 0.85), record(1, score=0.425)],
            ),
            "why saturated: the seed already scores S 0.8500 (>= 0.8); no candidate scored "
            "above the seed's S 0.8500: the closest of 1 scored, iteration 1, has S 0.4250, "
            "0.500x the seed's, below the 5.0% noise band",
        ),
        (
            dict(
                outcome="within_noise",
                best_iteration=1,
                best_score=0.31,
                history=[SEED_RECORD, record(1, score=0.31)],
            ),
            "why within_noise: the best, iteration 1, scores S 0.3100, 1.033x the seed's "
            "0.3000, inside the 5.0% noise band: no evidence of a change",
        ),
        (
            dict(
                outcome="flat",
                seed_score=None,
                history=[record(0, "seed", fail_reason="compile error: x.metal:3: oops")],
            ),
            "why flat: the seed has no S to compare a candidate's with (compile error: "
            "x.metal:3: oops)",
        ),
        (dict(outcome="improved", history=[SEED_RECORD, record(1, score=0.6)]), None),
    ],
)
def test_why_nothing_was_found(summary, line):
    summary = {"seed_score": 0.30, "improvement_band": NOISE_FLOOR, "stopped": None, **summary}
    assert why_nothing_found(summary) == line


def test_the_last_lines_tell_what_each_speedup_measured(capsys):
    """S's ratio (two evaluations apart) and the transfer check's (the best
    and the seed timed in turn in one worker) differ; the run shows both and
    says which is which, rather than two unexplained speedups."""
    from mlxsci.search.__main__ import show_result

    summary = {
        "task": "heat2d", "model": "autotune", "backend": "sim", "sim_gpu": "apple-m1-pro",
        "seed_score": 0.0231, "best_score": 0.0523, "held_out_seed": 0.02,
        "held_out_best": 0.05, "outcome": "improved", "improvement_band": 0.05,
        "tokens": {"input": 0, "output": 0}, "cost_usd": 0.0, "run_dir": "r",
        "held_out": {"mode": "metal-sci"}, "best_iteration": 3,
        "transfer": {"grade": "transfers", "reason": "the 4.03x in-distribution win (timed "
                     "against the baseline, interleaved) holds where it was not measured"},
    }  # fmt: skip
    show_result(summary, quiet=False)
    out = capsys.readouterr().out
    assert "S 0.0231 -> 0.0523 (2.26x, each scored alone)" in out
    assert "4.03x in-distribution win (timed against the baseline, interleaved)" in out


def test_the_transfer_reason_says_its_ratio_was_timed_interleaved():
    from mlxsci.transfer.grading import holds, not_kept

    assert "4.03x in-distribution win (timed against the baseline, interleaved)" in holds(
        _no_places(), 4.03, None, None
    )
    said = not_kept("held-out", 2.0, {"ratio": 1.01, "kept_fraction": 0.01, "verdict": "flat"})
    assert said.startswith("the 2x in-distribution win (timed against the baseline, interleaved)")


def _no_places():
    from mlxsci.transfer.grading import Measurements

    return Measurements(in_dist=None, held_out=None, second=None)  # type: ignore[arg-type]
