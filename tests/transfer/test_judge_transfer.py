"""judge_transfer (mlxsci/transfer/measurement.py) with a stand-in for the
search's evaluate callback: what it evaluates and how it labels it, what it
takes from `known`, the coverage it reads as hostile input, and that a
secret draw's values are named nowhere before the caller reveals them."""

import dataclasses
import json

import pytest

from mlxsci.task import Size, load_task
from mlxsci.transfer import judge_transfer
from mlxsci.transfer.coverage import MAX_ARMS, coverage_arms

TASK = load_task("heat2d")
SMOKE = list(TASK.size_set("smoke"))
LISTED = list(TASK.size_set("held-out"))
DRAWN = [
    Size(
        "secret held-out", {"NX": 611, "NY": 877, "n_steps": 61, "distribution": "hot-spots"}, True
    )
]
SEED = TASK.seed("metal")
FAST = SEED.replace("// Naive seed", "// A faster kernel")


def evaluation(score, phi=None, correct=True, noise=0.01, coverage=None, sizes=()):
    data = {
        "backend": "sim",
        "candidate": {
            "compile_ok": True,
            "correct": correct,
            "score": score,
            "phi": phi,
            "noise": noise,
            "fail_reason": None if correct else "correctness failed at size secret held-out",
        },
        "sizes": [
            {"label": s.label, "held_out": TASK.is_held_out(s), "correct": correct, "noise": noise}
            for s in sizes
        ],
    }
    if coverage is not None:
        data["coverage"] = coverage
    return data


class Recorder:
    """The evaluate callback: scores from `speed` (source -> S, Phi factor),
    every call recorded."""

    def __init__(self, held_out_speed=2.0, coverage=None):
        self.calls = []
        self.held_out_speed = held_out_speed
        self.coverage = coverage

    def __call__(self, source, filename, sizes, coverage=False):
        self.calls.append(
            (filename, [s.label for s in sizes], [dict(s.params) for s in sizes], coverage)
        )
        fast = source == FAST
        if coverage:
            return evaluation(0.3 if fast else 0.1, coverage=self.coverage, sizes=sizes)
        if any(TASK.is_held_out(s) for s in sizes):
            phi = 0.1 * (self.held_out_speed if fast else 1.0)
            return evaluation(None, phi=phi, sizes=sizes)
        return evaluation(0.3 if fast else 0.1, sizes=sizes)


def judge(recorder, held_out=LISTED, **kwargs):
    return judge_transfer(
        TASK, FAST, SEED, dialect="metal", search_sizes=SMOKE, held_out=held_out,
        evaluate=recorder, **kwargs,
    )  # fmt: skip


def test_it_evaluates_both_everywhere_and_the_second_distribution_at_the_search_sizes():
    rec = Recorder()
    judged = judge(rec, coverage=False)
    assert judged["grade"] == "transfers"
    assert [(f, labels) for f, labels, _, _ in rec.calls] == [
        ("candidate.metal", ["67x45x5"]),
        ("baseline.metal", ["67x45x5"]),
        ("candidate.metal", ["768x768x75"]),
        ("baseline.metal", ["768x768x75"]),
        ("candidate.metal", ["67x45x5 (smooth data)"]),
        ("baseline.metal", ["67x45x5 (smooth data)"]),
    ]
    second_params = rec.calls[4][2][0]
    assert second_params == {"NX": 67, "NY": 45, "n_steps": 5, "distribution": "smooth"}
    numbers = judged["numbers"]
    assert numbers["second_distribution"]["distribution"] == "smooth"
    assert numbers["held_out"]["ratio"] == pytest.approx(2.0)
    assert numbers["in_dist"]["ratio"] == pytest.approx(3.0)


def test_what_is_known_is_not_evaluated_again():
    rec = Recorder()
    known = {
        "candidate_in_dist": evaluation(0.3, sizes=SMOKE),
        "baseline_in_dist": evaluation(0.1, sizes=SMOKE),
        "candidate_held_out": evaluation(None, phi=0.05, sizes=LISTED),
        "baseline_held_out": evaluation(None, phi=0.1, sizes=LISTED),
    }
    judged = judge(rec, known=known, coverage=False)
    assert [labels for _, labels, _, _ in rec.calls] == [["67x45x5 (smooth data)"]] * 2
    assert judged["grade"] == "A"  # the known held-out figures decide


def test_a_secret_draw_names_nothing_of_itself_in_labels_or_numbers():
    rec = Recorder()
    judged = judge(rec, held_out=DRAWN, coverage=False)
    assert rec.calls[4][1] == ["67x45x5 (the held-out's data)"]
    assert rec.calls[4][2][0]["distribution"] == "hot-spots"  # the draw's, as the brief says
    text = json.dumps(judged)
    for value in ("611", "877", "hot-spots"):
        assert value not in text
    assert "secret held-out" in text
    assert judged["numbers"]["second_distribution"]["from_held_out_draw"] is True


def test_coverage_is_measured_when_asked_and_its_cold_arms_back_a_b():
    arms = {"measured": True, "reason": None, "arms": [
        {"line": 17, "column": 1, "kind": "if", "hits": 0},
        {"line": 26, "column": 1, "kind": "if", "hits": 480},
    ]}  # fmt: skip
    rec = Recorder(coverage=arms)
    rec_calls_before = len(rec.calls)
    known = {
        "candidate_held_out": evaluation(None, phi=None, correct=False, sizes=LISTED),
    }
    judged = judge(rec, known=known, coverage=True)
    assert rec.calls[-1][3] is True and rec.calls[-1][1] == ["67x45x5"]
    assert len(rec.calls) - rec_calls_before == 6  # baseline held-out, both x2 others, coverage
    assert judged["grade"] == "B"
    cold = [e for e in judged["evidence"] if "never ran" in e["what"]]
    assert cold == [{
        "what": "`if` arm never ran at the search sizes",
        "where": "line 17",
        "numbers": {"hits": 0, "kind": "if", "column": 1},
    }]  # fmt: skip


def test_coverage_follows_the_backend_when_not_said():
    rec = Recorder(coverage={"measured": False, "reason": "the size failed", "arms": []})
    judged = judge(rec)  # the sim backend measures coverage
    assert rec.calls[-1][3] is True
    notes = [e["what"] for e in judged["evidence"] if "coverage" in e["what"]]
    assert notes == ["branch coverage was asked for and not measured: the size failed"]


def test_a_task_without_another_distribution_says_so():
    saxpy = dataclasses.replace(load_task("saxpy"), distributions={})  # a task of your own
    judged = judge_transfer(
        saxpy, "x", "y", dialect="metal", search_sizes=list(saxpy.size_set("smoke")),
        held_out=[], evaluate=lambda *a, **k: evaluation(0.1), coverage=False,
    )  # fmt: skip
    assert judged["numbers"]["second_distribution"] == {"measured": False}
    assert judged["numbers"]["held_out"] == {"measured": False}


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "arms",
        {"measured": True, "arms": "many"},
        {"measured": "yes", "arms": [{"line": 3, "kind": "if", "hits": 0}]},
        [{"line": True, "kind": "if", "hits": 0}],
    ],
)
def test_coverage_that_is_not_a_measured_record_is_none_or_dropped(raw):
    arms = coverage_arms({"coverage": raw})
    assert not arms


def test_coverage_arms_are_checked_one_by_one_and_bounded():
    raw = [
        {"line": 3, "column": 5, "kind": "if", "hits": 0},
        {"line": 0, "kind": "if", "hits": 1},  # no line 0 in a file
        {"line": 4, "kind": "if", "hits": -1},
        {"line": 5, "kind": "x" * 500, "hits": 2},
        {"line": 6, "kind": "bad\nkind", "count": 7},
        ["not", "a", "dict"],
    ]
    arms = coverage_arms({"coverage": {"measured": True, "arms": raw}})
    assert arms == [
        {"line": 3, "column": 5, "kind": "if", "hits": 0},
        {"line": 5, "column": 0, "kind": "x" * 40, "hits": 2},
        {"line": 6, "column": 0, "kind": "branch", "hits": 7},
    ]
    many = [{"line": k + 1, "kind": "if", "hits": 0} for k in range(MAX_ARMS + 10)]
    assert len(coverage_arms({"coverage": {"measured": True, "arms": many}})) == MAX_ARMS


def test_evaluations_missing_their_keys_count_as_not_correct():
    judged = judge_transfer(
        TASK, FAST, SEED, dialect="metal", search_sizes=SMOKE, held_out=LISTED,
        evaluate=lambda *a, **k: {"candidate": "garbage"}, coverage=False,
    )  # fmt: skip
    assert judged["grade"] == "no-win"
