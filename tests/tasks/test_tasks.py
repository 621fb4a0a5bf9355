"""Every task's seeds pass on the simulator at their smoke sizes, in both dialects."""

import pytest

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.task import task_names


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize("task", task_names())
@pytest.mark.slow
def test_seed_passes_smoke_on_simulator(task, dialect):
    ev = evaluate(
        task, None, backend="sim", size_set="smoke", n_warmup=1, n_measure=1, dialect=dialect
    )
    assert ev.dialect == dialect
    assert ev.compile_ok and ev.correct, ev.fail_reason
    assert all(s.correct and s.fraction > 0 for s in ev.sizes)
