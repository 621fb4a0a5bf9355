"""Every built-in task's secret held-out draws (Task.draw_held_out) and input
distributions (Task.distributions): valid under held_out.draw_problems,
varied by the secret, repeatable, never a listed size; and distributions
whose data have make_inputs' form but other values."""

import numpy as np
import pytest

from mlxsci import held_out
from mlxsci.task import load_task, task_names

TASKS = task_names()
SECRETS = 300


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_every_secret_draws_a_valid_configuration(name):
    task = load_task(name)
    assert task.draw_held_out is not None and task.distributions
    listed = [_key(s.params) for s in held_out.listed_sizes(task)]
    for secret in range(SECRETS):
        size = held_out.draw(task, secret)
        assert size.held_out and size.label == held_out.SECRET_LABEL
        assert held_out.draw_problems(task, size.params) == [], (secret, size.params)
        assert _key(size.params) not in listed
        assert size.params["distribution"] in task.distributions
        assert all(type(v) in (int, float, str) for v in size.params.values())


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_the_task_function_itself_mostly_draws_valid_configurations(name):
    # held_out.draw redraws what fails; a declaration whose raw draws mostly
    # fail would be a rejection sampler in disguise (and slow for lj, whose
    # cost check counts pairs).
    task = load_task(name)
    rng = np.random.default_rng(7)
    valid = sum(not held_out.draw_problems(task, task.draw_held_out(rng)) for _ in range(100))
    assert valid >= 50, valid


@pytest.mark.parametrize("name", TASKS)
def test_secrets_vary_the_draw_and_a_secret_repeats_it(name):
    task = load_task(name)
    draws = [held_out.draw(task, secret).params for secret in range(50)]
    distinct = {_key(p) for p in draws}
    # fft3d has 2 lengths (powers of two within the cost cap) x 3 signals.
    assert len(distinct) >= (5 if name == "fft3d" else 20), distinct
    assert {p["distribution"] for p in draws} == set(task.distributions)
    for secret in (0, 17, 2**100 + 3):
        assert held_out.draw(task, secret).params == held_out.draw(task, secret).params


@pytest.mark.parametrize("name", TASKS)
def test_distributions_have_make_inputs_form_and_other_values(name):
    task = load_task(name)
    for smoke in task.size_set("smoke"):
        base = task.make_inputs(smoke.params)
        for dist, make in task.distributions.items():
            params = dict(smoke.params, distribution=dist)
            data = task.inputs(params)
            assert set(data) == set(base), (dist, set(data) ^ set(base))
            for key, value in base.items():
                assert data[key].shape == value.shape and data[key].dtype == value.dtype, key
                assert np.all(np.isfinite(data[key].astype(np.float64))), (dist, key)
            differ = [k for k in base if not np.array_equal(data[k], base[k])]
            assert differ, f"{dist} gives make_inputs' data"
            # Fixed data without a seed; a secret seed varies them, repeatably.
            assert all(np.array_equal(v, make(params)[k]) for k, v in data.items())
            seeded = task.inputs(params, seed=5)
            assert any(not np.array_equal(seeded[k], data[k]) for k in differ), dist
            again = task.inputs(params, seed=5)
            assert all(np.array_equal(v, again[k]) for k, v in seeded.items())


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_draw_has_the_size_of_its_distributions_inputs(name):
    # At a drawn size (not only the smoke one) every distribution's inputs
    # have the shapes make_inputs gives that size. fft3d and morton draw
    # N = 256 cubes: checked at the smallest draw of 20 secrets.
    task = load_task(name)
    sizes = [held_out.draw(task, s).params for s in range(20)]
    params = min(sizes, key=lambda p: held_out.cost(task, p)[2])
    if held_out.cost(task, params)[2] > 1e8:
        pytest.skip("no draw small enough to build here")
    base = task.make_inputs({k: v for k, v in params.items() if k != "distribution"})
    data = task.inputs(params, seed=3)
    assert {k: (v.shape, v.dtype) for k, v in data.items()} == {
        k: (v.shape, v.dtype) for k, v in base.items()
    }


# ------------------------------------------------------------ draw_problems
HEAT2D = load_task("heat2d")
GOOD = {"NX": 700, "NY": 650, "n_steps": 60, "distribution": "smooth"}


def test_a_good_heat2d_configuration_has_no_problems():
    assert held_out.draw_problems(HEAT2D, GOOD) == []


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"NX": 768, "NY": 768, "n_steps": 75, "distribution": None}, "it is a listed size"),
        ({"NX": 512}, "NX=512 is a listed value"),
        ({"NX": 1024}, "NX=1024 is a listed value"),
        ({"NY": 2048}, "NY=2048 is a power of two"),
        ({"n_steps": 64}, "n_steps=64 is a power of two"),
        ({"n_steps": 50}, "n_steps=50 is a listed value"),
        ({"NX": np.int64(700)}, "must be a Python int, float or str"),
        ({"n_steps": np.int32(60)}, "must be a Python int, float or str"),
        ({"NX": 1500, "NY": 1500}, "exceed 2x the listed held-out's"),
        ({"n_steps": 200}, "exceed 2x the listed held-out's"),
        ({"distribution": "plaid"}, "no input distribution 'plaid'"),
        ({"n_steps": 0}, "the task refuses it"),
    ],
)
def test_draw_problems_refuses(change, problem):
    params = {k: v for k, v in dict(GOOD, **change).items() if v is not None}
    problems = held_out.draw_problems(HEAT2D, params)
    assert any(problem in p for p in problems), problems


def test_draw_problems_lets_power_of_two_params_keep_listed_values():
    fft3d = load_task("fft3d")
    assert fft3d.power_of_two_params == ("N",)
    assert held_out.draw_problems(fft3d, {"N": 256, "distribution": "real"}) == []
    assert "it is a listed size" in held_out.draw_problems(fft3d, {"N": 256})
    # Beyond twice the listed held-out's cost (N = 512 costs 8x).
    assert held_out.draw_problems(fft3d, {"N": 512, "distribution": "real"})
