"""saxpy facts from the spec and a deliberately wrong candidate."""

import pytest
from helpers import smoke_eval

from mlxsci.evaluation.references import get_reference
from mlxsci.task import load_task

TASK = load_task("saxpy")


def test_tolerance_matches_spec():
    size = TASK.size_set("in-dist")[0]
    assert get_reference(TASK, size.params).tolerance == pytest.approx(1.256e-4, rel=1e-3)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_off_by_one_is_rejected():
    src = TASK.seed().replace(
        "y_out[i] = a * x[i] + y[i];", "y_out[i] = a * x[min(i + 1, N - 1)] + y[i];"
    )
    assert src != TASK.seed()
    ev = smoke_eval("saxpy", src)
    assert not ev.correct
    assert "correctness failed at size 100003: max_abs=" in ev.fail_reason


# --- CUDA dialect on the simulator --------------------------------------------------

CUDA_SEED = TASK.seed("cuda")


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_cuda_off_by_one_is_rejected():
    # The Metal off-by-one above, in CUDA: every element reads its right neighbour's x.
    old = "y_out[i] = a[0] * x[i] + y[i];"
    assert old in CUDA_SEED
    bad = CUDA_SEED.replace(old, "y_out[i] = a[0] * x[min(i + 1, N[0] - 1)] + y[i];")
    ev = smoke_eval("saxpy", bad, dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert "correctness failed at size 100003: max_abs=" in ev.fail_reason
