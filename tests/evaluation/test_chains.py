"""Chains (Task.chain): a run started from the previous run's results, and the
per-step counters a Launcher makes once and reuses across runs."""

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.kernel.candidate import parse
from mlxsci.task import chain_inputs, load_task, step_counter, task_names
from mlxsci.worker.launch import Launcher

CONV1D = Path(__file__).resolve().parents[2] / "examples" / "conv1d"
TASKS = task_names() + [str(CONV1D)]


def smoke_pipeline(name: str):
    """(task, launcher, inputs, run) for the seed at the task's first smoke size;
    run(inputs) evaluates one pipeline run on the simulator."""
    task = load_task(name)
    params = task.size_set("smoke")[0].params
    cand = parse(task.seed("metal"), dialect="metal", filename=str(task.seed_path("metal")))
    launcher = Launcher(SimBackend(), task, cand, params)
    inputs = {k: mx.array(v) for k, v in task.make_inputs(params).items()}

    def run(inp, launch=launcher):
        results = task.run(launch, inp, params)
        mx.eval(list(results.values()))
        return results

    return task, launcher, inputs, run


class Recording:
    """Passes launches to the Launcher and notes which task inputs a launch was
    given a kernel output for: the inputs the pipeline evolves."""

    def __init__(self, task, launcher, inputs):
        self.task, self.launcher, self.inputs = task, launcher, inputs
        self.produced: list = []
        self.evolving: set = set()

    def __call__(self, name, inputs, outputs):
        for n in self.task.kernel(name).inputs:
            if n in self.inputs and any(inputs[n] is o for o in self.produced):
                self.evolving.add(n)
        out = self.launcher(name, inputs, outputs)
        self.produced.extend(out.values())
        return out

    def counter(self, value):
        return self.launcher.counter(value)


@pytest.mark.parametrize("name", TASKS, ids=lambda n: Path(n).name)
def test_chain_feeds_each_state_input_from_a_result_of_its_shape(name):
    task, launcher, inputs, run = smoke_pipeline(name)
    assert task.chain, f"{task.name} chains no input"
    recording = Recording(task, launcher, inputs)
    results = run(inputs, recording)
    assert set(task.chain) <= set(inputs)
    assert set(task.chain.values()) <= set(results)
    # Every input a kernel is handed a kernel output for is state a next run needs.
    assert recording.evolving <= set(task.chain), recording.evolving - set(task.chain)
    for inp, res in task.chain.items():
        assert results[res].shape == inputs[inp].shape, (inp, res)
        assert results[res].dtype == inputs[inp].dtype, (inp, res)

    following = chain_inputs(task, inputs, results)
    assert set(following) == set(inputs)
    for k, v in following.items():
        assert v is (results[task.chain[k]] if k in task.chain else inputs[k])
    again = run(following)
    assert set(again) == set(results)
    for k in results:
        assert again[k].shape == results[k].shape and again[k].dtype == results[k].dtype


def test_chained_saxpy_continues_from_the_previous_y():
    task, _, inputs, run = smoke_pipeline("saxpy")
    first = run(inputs)
    second = run(chain_inputs(task, inputs, first))
    a, x, y = (np.array(inputs[k]) for k in ("a", "x", "y"))
    expected = a * x + (a * x + y)
    np.testing.assert_allclose(np.array(second["y"]), expected, rtol=1e-5, atol=1e-5)
    # The chain does not touch the original inputs: an unchained run still starts from y0.
    np.testing.assert_allclose(np.array(run(inputs)["y"]), a * x + y, rtol=1e-5, atol=1e-5)


def test_ising_counters_are_made_once_and_reused():
    task, launcher, inputs, run = smoke_pipeline("ising")
    n = 2 * task.size_set("smoke")[0].params["n_sweeps"]
    run(inputs)
    made = dict(launcher.counters)
    assert sorted(made) == list(range(n))
    for value, a in made.items():
        assert a.shape == () and a.dtype == mx.uint32 and a.item() == value
    run(inputs)
    assert len(launcher.counters) == n
    assert all(launcher.counters[v] is a for v, a in made.items())


def test_a_plain_launch_function_gets_fresh_counters():
    # The prompt builder's dry run passes a plain function as launch.
    a = step_counter(lambda name, inputs, outputs: {}, 7)
    assert a.shape == () and a.dtype == mx.uint32 and a.item() == 7
