"""Every task's seed passes on the simulator at its smoke sizes."""
import pytest

from mlxsci.evaluate import evaluate
from mlxsci.task import task_names


@pytest.mark.parametrize("task", task_names())
def test_seed_passes_smoke_on_simulator(task):
    ev = evaluate(task, None, backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
    assert ev.compile_ok and ev.correct, ev.fail_reason
    assert all(s.correct and s.fraction > 0 for s in ev.sizes)
