"""Every task's seeds pass on the simulator with each of its held-out input
distributions, at the smoke sizes, in both dialects: the references stay
within their tolerances on those data."""

import pytest

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.task import Size, load_task, task_names


def distribution_sizes(name: str) -> list[Size]:
    """Each smoke size once per input distribution of the task."""
    task = load_task(name)
    return [
        Size(f"{size.label}-{dist}", dict(size.params, distribution=dist))
        for size in task.size_set("smoke")
        for dist in task.distributions
    ]


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize("name", task_names())
@pytest.mark.slow
def test_seed_passes_each_distribution_on_simulator(name, dialect):
    sizes = distribution_sizes(name)
    assert len(sizes) >= 2
    ev = evaluate(name, None, backend="sim", sizes=sizes, n_warmup=1, n_measure=1, dialect=dialect)
    assert ev.compile_ok and ev.correct, ev.fail_reason
    assert [s.label for s in ev.sizes] == [s.label for s in sizes]
    assert all(s.correct for s in ev.sizes), [(s.label, s.correct) for s in ev.sizes]
