"""The hand-tuned candidates the GPU bench scores (bench/candidates/) are
correct, on the simulator, at the task's smoke size and at a size that is not
a multiple of their vector width."""

from pathlib import Path

import pytest

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.dialects import name_of_file
from mlxsci.task import load_task

CANDIDATES = sorted((Path(__file__).parent.parent / "bench" / "candidates").glob("*.*"))


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.name)
@pytest.mark.slow
def test_bench_candidate_is_correct(path):
    task = path.name.split("_")[0]
    sizes = list(load_task(task).size_set("smoke"))
    if "N" in load_task(task).defaults:  # a length that no vector width divides
        sizes.append(load_task(task).custom_size({"N": 4 * 1000 + 3}))
    ev = evaluate(
        task,
        path.read_text(),
        backend="sim",
        sizes=sizes,
        filename=str(path),
        dialect=name_of_file(path),
        n_measure=1,
    )
    assert ev.correct, ev.fail_reason
