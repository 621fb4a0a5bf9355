"""A fault the simulator names at the held-out configuration is a held-out
correctness failure for the transfer grade (issue 27).

The fixture (tests/transfer/candidates/hmc_b_fixed_width.*) is the hmc seed
with its positions loaded at a width instantiated for the in-distribution
dimensions: at d = 24 the last chain reads past the end of q_in. An Apple GPU
read those elements silently and returned wrong samples; the simulator names
the read. Here the held-out place is measured for real (an evaluation of the
fixture and of the seed at a cheap configuration shaped like the held-out),
the in-distribution win is given, and the grade must be B with the named
fault as its evidence."""

from pathlib import Path

import pytest

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.task import Size
from mlxsci.transfer.grading import Figure, Measurements, Place, grade
from mlxsci.transfer.measurement import figure_of

HERE = Path(__file__).parent / "candidates"
# d = 24 as at hmc's held-out; fewer chains and steps than its 2048 x 200
# (enough for its statistical check) keep it to seconds.
HELD_OUT = [Size("held-out d24", {"d": 24, "K": 1024, "T": 60}, True)]
SEARCH = [Size("d16", {"d": 16, "K": 1024, "T": 60})]


def judged(dialect: str, sizes: list[Size], source: str | None = None) -> dict:
    name = None if source is None else f"hmc_b_fixed_width.{source}"
    text = None if name is None else (HERE / name).read_text()
    ev = evaluate(
        "hmc", text, backend="sim", sizes=sizes, filename=name, dialect=dialect,
        n_warmup=1, n_measure=1,
    )  # fmt: skip
    return ev.to_json()


@pytest.mark.parametrize("dialect,ext", [("metal", "metal"), ("cuda", "cu")])
@pytest.mark.slow
def test_a_read_past_the_end_at_the_held_out_grades_b_with_the_named_fault(dialect, ext):
    # its passing twin: the same kernel at a search size (d = 16, its exact width)
    at_search = judged(dialect, SEARCH, ext)
    assert at_search["candidate"]["correct"] is True

    cand = judged(dialect, HELD_OUT, ext)
    reason = cand["candidate"]["fail_reason"]
    assert cand["candidate"]["correct"] is False
    # the buffer, the element (the last chain's row ends at 1024 * 24 - 1), the thread
    assert "out-of-bounds read" in reason and "'q_in'" in reason, reason
    assert "valid elements 0..24575" in reason and "thread (" in reason, reason

    seed = judged(dialect, HELD_OUT)
    assert seed["candidate"]["correct"] is True
    held = Place(
        "held-out", "held-out d24", figure_of(cand, held_out=True), figure_of(seed, held_out=True)
    )
    assert held.candidate.correct is False and held.candidate.fail_reason == reason

    win = Place("in-distribution", "search sizes", Figure(True, 0.3, 0.0), Figure(True, 0.1, 0.0))
    result = grade(Measurements(in_dist=win, held_out=held))
    assert result["grade"] == "B", result
    said = " ".join(str(item) for item in result["evidence"])
    assert "out-of-bounds read" in said and "'q_in'" in said, said
