"""The evaluation protocol end to end on the simulator, and each integrity rule
with an adversarial candidate."""

import json

import pytest

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.task import load_task

SAXPY = """//! kernel saxpy
uint i = thread_position_in_grid.x;
if (i >= N) {{
    return;
}}
{body}
"""


def saxpy(body: str) -> str:
    return SAXPY.format(body=body)


def run_smoke(task, source, **kw):
    return evaluate(task, source, backend="sim", size_set="smoke", n_measure=2, **kw)


@pytest.mark.parametrize("task", ["saxpy", "heat2d"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_seed_correct_on_smoke(task):
    ev = run_smoke(task, None)
    assert ev.compile_ok and ev.correct, ev.fail_reason
    (size,) = ev.sizes
    assert size.error <= size.tol
    assert size.seconds > 0 and size.fraction > 0 and size.unit == "GB/s"
    assert ev.score == pytest.approx(size.fraction)


@pytest.mark.parametrize("task", ["saxpy", "heat2d"])
@pytest.mark.slow
def test_seed_correct_on_first_in_dist_size(task):
    size = load_task(task).size_set("in-dist")[0]
    ev = evaluate(task, None, backend="sim", sizes=[size], n_warmup=1, n_measure=1)
    assert ev.correct, ev.fail_reason
    assert ev.sizes[0].label == size.label


@pytest.mark.slow
def test_unwritten_output_is_caught():
    # Skips the last 8 elements: whatever the buffer held must not pass.
    ev = run_smoke("saxpy", saxpy("if (i + 8 < N) y_out[i] = a * x[i] + y[i];"))
    assert not ev.correct and ev.score == 0.0
    assert "unwritten" in ev.sizes[0].flags
    assert "8 element(s) of y never written" in ev.fail_reason


@pytest.mark.slow
def test_mutated_input_is_caught():
    body = "y_out[i] = a * x[i] + y[i];\nconst_cast<device float*>(x)[i] = x[i] * 1.0001f;"
    ev = run_smoke("saxpy", saxpy(body))
    assert not ev.correct
    assert "input_mutated" in ev.sizes[0].flags
    assert "input mutated: x" in ev.fail_reason


@pytest.mark.slow
def test_nan_output_fails_even_against_nan_unsafe_comparison():
    ev = run_smoke("saxpy", saxpy("y_out[i] = NAN;"))
    assert not ev.correct
    assert ev.sizes[0].error == float("inf")


@pytest.mark.slow
def test_zero_output_fails():
    ev = run_smoke("saxpy", saxpy("y_out[i] = 0.0f;"))
    assert not ev.correct and "correctness failed" in ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_compile_error_points_at_candidate_line():
    src = saxpy("y_out[i] = a * x[i] + undeclared_thing;")
    ev = run_smoke("saxpy", src, filename="bad.metal")
    assert not ev.compile_ok and not ev.correct
    line = src.splitlines().index("y_out[i] = a * x[i] + undeclared_thing;") + 1
    assert f"bad.metal:{line}:" in ev.fail_reason


@pytest.mark.slow
def test_hang_becomes_a_timeout_verdict():
    src = saxpy("while (x[i] == x[i]) { y_out[i] += 1.0f; }")
    ev = run_smoke("saxpy", src, timeout=5)
    assert not ev.correct
    assert "timeout" in ev.fail_reason and "within 5 s" in ev.fail_reason


def test_missing_kernel_is_a_structured_failure():
    ev = run_smoke("heat2d", saxpy("y_out[i] = 0.0f;"))
    assert not ev.compile_ok
    assert "heat_step" in ev.fail_reason and "saxpy" in ev.fail_reason


def test_bad_launch_expression_is_a_structured_failure():
    src = "//! kernel saxpy\n//! grid = (M, 1, 1)\nuint i = thread_position_in_grid.x;\n"
    ev = run_smoke("saxpy", src)
    assert not ev.compile_ok and "M" in ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_json_shape():
    data = run_smoke("saxpy", None).to_json()
    json.dumps(data)
    assert set(data) == {
        "task",
        "backend",
        "device",
        "dialect",
        "timer",
        "candidate",
        "sizes",
        "input_seed",
        "roofline",
        "sim_gpu",
    }
    assert data["timer"] == "sim" and isinstance(data["input_seed"], int)
    assert data["sim_gpu"] == "apple-m1-pro"  # the GPU the simulator's clock models
    assert {"compile_ok", "correct", "score", "noise", "fail_reason", "implausible"} <= set(
        data["candidate"]
    )
    assert {
        "label",
        "correct",
        "error",
        "tol",
        "seconds",
        "achieved",
        "unit",
        "ceiling",
        "fraction",
        "flags",
        "timer",
        "noise",
        "kernels",
        "warmup",
    } <= set(data["sizes"][0])


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_sizes_record_their_timer_noise_and_kernel_breakdown():
    ev = evaluate("heat2d", None, backend="sim", size_set="smoke", n_measure=3)
    assert ev.correct, ev.fail_reason
    (size,) = ev.sizes
    assert size.timer == "sim" and size.timer_info["statistic"] == "min"
    assert size.seconds == size.seconds_min  # the sim timer's statistic
    # the noise of a minimum: the spread of the fastest runs, within (max - min) / min
    assert 0 <= size.noise <= (size.seconds_max - size.seconds_min) / size.seconds_min
    ((name, entry),) = size.kernels.items()
    assert name == "heat_step" and entry["launches"] == size.params["n_steps"]
    assert entry["seconds"] > 0
    assert ev.noise == pytest.approx(size.noise)  # one scored size: S's noise is its noise


@pytest.mark.slow
def test_wall_timer_on_request_reports_its_repeats_and_floor():
    ev = evaluate("saxpy", None, backend="sim", size_set="smoke", n_measure=2, timer="wall")
    assert ev.correct, ev.fail_reason and ev.timer == "wall"
    (size,) = ev.sizes
    assert size.timer == "wall" and size.timer_info["repeats"] >= 1
    assert size.timer_info["floor_seconds"] >= 0 and size.kernels == {}


def test_unknown_timer_is_refused_before_any_run():
    with pytest.raises(ValueError, match="unknown timer"):
        evaluate("saxpy", None, backend="sim", size_set="smoke", timer="stopwatch")


@pytest.mark.slow
def test_score_is_over_in_dist_sizes_and_phi_over_held_out():
    task = load_task("saxpy")
    smoke, first = task.size_set("smoke")[0], task.size_set("in-dist")[0]
    held = task.size_set("held-out")[0]
    ev = evaluate("saxpy", None, backend="sim", sizes=[smoke, first, held], n_measure=1)
    assert ev.correct, ev.fail_reason
    by_label = {s.label: s for s in ev.sizes}
    assert by_label[held.label].held_out and not by_label[first.label].held_out
    assert ev.score == pytest.approx(by_label[first.label].fraction)  # smoke not scored
    assert ev.phi == pytest.approx(by_label[held.label].fraction)
