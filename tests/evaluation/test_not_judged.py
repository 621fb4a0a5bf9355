"""A limit of the machine is never a verdict about the kernel: a candidate
that only runs out of the size's time limit is "not judged", with the
reason, in the evaluation, in a re-score record's verdict and in a search's
outcome; never incorrect, never a held-out failure or grade B."""

import pytest

from mlxsci.evaluation.evaluator import evaluate, machine_stop
from mlxsci.import_metal_sci import records
from mlxsci.search.outcomes import classify
from mlxsci.task import Size

# saxpy, correct, with a busy loop whose length the compiler cannot know
# (N iterations per thread: ~10^10 steps at the smoke size), so only the
# time limit stops it.
SLOW_SAXPY = """//! kernel saxpy
uint i = thread_position_in_grid.x;
if (i >= N) {
    return;
}
float acc = 0.0f;
for (uint k = 0; k < N; ++k) {
    acc = fma(acc, 0.5f, x[k % N]);
}
y_out[i] = a * x[i] + y[i] + (acc > 3.0e38f ? 1.0f : 0.0f);
"""

LIMIT_S = 4.0
# Long enough for a first build on a machine whose compiler cache is cold.
BUILD_S = 300.0


def built(source: str) -> None:
    """Evaluate `source` at a size where its loop is short, so that the
    kernel is built (and cached) before a test times the smoke size: a
    build on a cold machine takes longer than LIMIT_S."""
    ev = evaluate(
        "saxpy", source, backend="sim", sizes=[Size("1000", {"N": 1000})], n_measure=1,
        timeout=BUILD_S,
    )  # fmt: skip
    assert ev.compile_ok, ev.fail_reason


@pytest.mark.slow
def test_a_kernel_that_only_runs_out_of_time_is_not_judged():
    built(SLOW_SAXPY)
    ev = evaluate(
        "saxpy", SLOW_SAXPY, backend="sim", size_set="smoke", n_measure=1, timeout=LIMIT_S
    )
    assert ev.compile_ok and not ev.correct
    assert ev.not_judged is not None and f"{LIMIT_S:g} s" in ev.not_judged
    assert ev.score is None  # no verdict, so no S of 0 either
    (size,) = ev.sizes
    assert size.not_judged == ev.not_judged and "timeout" in size.flags
    record = ev.to_json()["candidate"]
    assert record["not_judged"] == ev.not_judged
    # the re-score's word for it, beside the four verdicts a kernel can earn
    verdict = records.mlxsci_verdict(ev.compile_ok, ev.correct, ev.fail_reason, ev.not_judged)
    assert verdict == records.NOT_JUDGED and verdict not in records.VERDICTS


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_fault_of_the_kernel_is_still_judged():
    """An out-of-bounds write fails the size as before: only machine stops
    are not judged."""
    wild = SLOW_SAXPY.replace("y_out[i] = ", "y_out[i + 4096 * N] = ")
    ev = evaluate("saxpy", wild, backend="sim", size_set="smoke", n_measure=1, timeout=BUILD_S)
    assert not ev.correct and ev.not_judged is None
    assert "out_of_bounds" in ev.fail_reason or "out of bounds" in ev.fail_reason


def test_which_stops_are_the_machines():
    assert machine_stop("timeout", "timeout: no verdict within 900 s", 900.0)
    assert machine_stop("timeout", "kernel did not finish within 60 s", None)
    killed = "the worker process died of SIGKILL, killed from outside, most often by ..."
    assert machine_stop("crash", killed, 900.0)
    assert machine_stop("crash", "the worker process died of SIGSEGV, a fault ...", 900.0) is None
    assert machine_stop("out_of_bounds", "write past the end of y_out", None) is None


def test_a_search_whose_best_was_not_judged_at_the_held_out_did_not_fail_there():
    numbers = dict(
        seed_score=0.3,
        best_score=0.6,
        held_out_seed=0.5,
        held_out_best=None,
        held_out_best_not_judged="the machine's time limit of 900 s ran out before a verdict",
    )
    assert classify(numbers) == "held_out_not_judged"
    assert classify({**numbers, "held_out_best_not_judged": None}) == "held_out_failure"
