"""The Python API (mlxsci/api.py) and the custom-task example (examples/conv1d)."""

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import mlxsci
from mlxsci.kernel.candidate import CandidateError
from mlxsci.task import load_reference

ROOT = Path(__file__).resolve().parent.parent
CONV1D = ROOT / "examples" / "conv1d"


def numpy_inputs(inputs: dict) -> dict:
    return {k: np.array(v) for k, v in inputs.items()}


def test_package_exports_the_api():
    assert callable(mlxsci.evaluate) and callable(mlxsci.kernel_function)
    assert mlxsci.load_task("saxpy").name == "saxpy"
    from mlxsci.evaluation.evaluator import Evaluation  # the library module is importable  # noqa: F401


def test_no_exported_name_hides_a_module():
    """`mlxsci.evaluate` is the function; were there also a module of that name,
    `import mlxsci.evaluate` would replace the attribute with the module."""
    hidden = [n for n in mlxsci.__all__ if importlib.util.find_spec(f"mlxsci.{n}") is not None]
    assert hidden == []
    alias = importlib.import_module("mlxsci.eval")  # the `python -m mlxsci.eval` spelling
    assert callable(mlxsci.evaluate) and alias.evaluate is mlxsci.evaluate


def test_saxpy_function_matches_the_reference():
    saxpy = mlxsci.kernel_function("saxpy", backend="sim")
    assert saxpy.input_names == ("x", "y", "a", "N") and saxpy.size_names == ("N",)
    inputs = mlxsci.task_inputs("saxpy", {"N": 5001})
    out = saxpy(**inputs)
    assert set(out) == {"y"} and isinstance(out["y"], mx.array)
    ref = load_reference("saxpy").solve(numpy_inputs(inputs), {"N": 5001})["y"]
    np.testing.assert_array_equal(np.array(out["y"]), ref)
    # Python numbers and float64 NumPy arrays are converted; N may come from size=.
    x = np.linspace(-1, 1, 300)
    y = saxpy(x=x, y=np.ones(300), a=2, size={"N": 300})["y"]
    assert y.dtype == mx.float32
    np.testing.assert_allclose(np.array(y), 2 * x + 1, atol=1e-6)


def test_heat2d_function_matches_the_reference_with_a_candidate_file(tmp_path):
    path = tmp_path / "best.metal"  # as a run's best.metal would be used
    path.write_text(mlxsci.load_task("heat2d").seed())
    heat = mlxsci.kernel_function("heat2d", path, backend="sim")
    inputs = mlxsci.task_inputs("heat2d", {"NX": 37, "NY": 21, "n_steps": 4})
    u = heat(inputs, size={"n_steps": 4})["u"]
    ref = load_reference("heat2d").solve(numpy_inputs(inputs), {"n_steps": 4})["u"]
    assert u.shape == (21, 37)
    np.testing.assert_allclose(np.array(u), ref, atol=1e-5)
    # NX, NY from size= instead of inputs; a size label works too.
    u2 = heat(u_in=inputs["u_in"], alpha=0.2, size={"NX": 37, "NY": 21, "n_steps": 4})["u"]
    np.testing.assert_array_equal(np.array(u2), np.array(u))
    smoke = mlxsci.task_inputs("heat2d", "67x45x5", numpy=True)
    assert isinstance(smoke["u_in"], np.ndarray)
    u3 = heat(smoke, size="67x45x5")["u"]
    np.testing.assert_allclose(
        np.array(u3), load_reference("heat2d").solve(smoke, {"n_steps": 5})["u"], atol=1e-5
    )


def test_clear_errors_for_missing_inputs_and_sizes():
    saxpy = mlxsci.kernel_function("saxpy", backend="sim")
    x = mx.zeros(10)
    with pytest.raises(TypeError, match=r"saxpy needs input\(s\) y .*all inputs: x, y, a, N"):
        saxpy(x=x, a=1.0, N=10)
    with pytest.raises(TypeError, match="no input.*z"):
        saxpy(x=x, y=x, a=1.0, N=10, z=x)
    with pytest.raises(ValueError, match=r"needs size parameter\(s\) N"):
        saxpy(x=x, y=x, a=1.0)
    with pytest.raises(ValueError, match="disagrees"):
        saxpy(x=x, y=x, a=1.0, N=10, size={"N": 11})
    with pytest.raises(ValueError, match="must be a scalar"):
        saxpy(x=x, y=x, a=x, N=10)
    heat = mlxsci.kernel_function("heat2d", backend="sim")
    with pytest.raises(ValueError, match=r"needs size parameter\(s\) n_steps"):
        heat(u_in=mx.zeros((4, 5)), NX=5, NY=4, alpha=0.2)
    with pytest.raises(CandidateError, match="lacks"):
        mlxsci.kernel_function("saxpy", "//! kernel other\nint i = 0;\n", backend="sim")
    with pytest.raises(ValueError, match="not one of"):
        mlxsci.kernel_function(
            "saxpy",
            "//! param V = 1 {1, 2}\n//! kernel saxpy\ny_out[0] = 0;\n",
            backend="sim",
            params={"V": 3},
        )


# --- the custom-task example -------------------------------------------------

WRONG_CONV1D = """\
//! kernel conv1d
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
// Wrong: the taps are reversed (a convolution, not the task's correlation).
uint i = thread_position_in_grid.x;
if (i >= N) return;
float acc = 0.0f;
for (int k = 0; k < 7; ++k) {
    int j = int(i) + k - 3;
    if (j >= 0 && j < int(N)) acc += w[6 - k] * x[j];
}
out[i] = acc;
"""


@pytest.mark.slow
def test_conv1d_task_loads_by_path_and_its_function_matches_numpy():
    task = mlxsci.load_task(str(CONV1D))
    assert task.name == "conv1d" and task.kernel_names == ["conv1d"]
    conv = mlxsci.kernel_function(CONV1D, backend="sim")
    x = np.random.default_rng(3).standard_normal(1001).astype(np.float32)
    w = np.arange(1, 8, dtype=np.float32)
    out = np.array(conv(x=x, w=w, N=1001)["out"])
    np.testing.assert_allclose(out, np.correlate(x, w, mode="same"), rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_conv1d_seed_is_correct_in_both_dialects_and_a_wrong_candidate_fails():
    for dialect in ("metal", "cuda"):
        ev = mlxsci.evaluate(str(CONV1D), backend="sim", size_set="smoke", dialect=dialect)
        assert ev.correct, ev.fail_reason
        assert ev.task == "conv1d" and ev.score > 0
    ev = mlxsci.evaluate(str(CONV1D), WRONG_CONV1D, backend="sim", size_set="smoke")
    assert not ev.correct and ev.score == 0.0
    assert "correctness failed" in ev.fail_reason


def run_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_eval_cli_takes_a_task_folder(tmp_path):
    proc = run_cli("mlxsci.eval", str(CONV1D), "--backend", "sim", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["task"] == "conv1d" and result["candidate"]["correct"]
    proc = run_cli("mlxsci.eval", str(tmp_path / "nowhere"), "--backend", "sim", cwd=tmp_path)
    assert proc.returncode == 2
    assert "neither a built-in task" in proc.stderr and "saxpy" in proc.stderr


@pytest.mark.slow
def test_search_cli_on_a_task_folder_writes_a_summary(tmp_path):
    proc = run_cli(
        "mlxsci.search",
        "--task",
        str(CONV1D),
        "--model",
        "autotune",
        "--iterations",
        "2",
        "--backend",
        "sim",
        "--quiet",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    runs = list((tmp_path / "results").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("conv1d_autotune_")  # named by the task
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["task"] == "conv1d" and summary["iterations"] == 2
    assert summary["seed_score"] > 0 and summary["held_out_seed"] is not None
    assert json.loads((runs[0] / "run.json").read_text())["task"] == str(CONV1D)
    assert (runs[0] / "best.metal").is_file()


def test_a_run_directorys_candidate_needs_trusted_on_the_simulator(tmp_path):
    (tmp_path / "run.json").write_text("{}")  # a search's run directory
    best = tmp_path / "best.metal"
    best.write_text(mlxsci.load_task("saxpy").seed())
    with pytest.raises(ValueError, match="trusted=True"):
        mlxsci.kernel_function("saxpy", best, backend="sim")
    saxpy = mlxsci.kernel_function("saxpy", best, backend="sim", trusted=True)
    x = np.linspace(-1, 1, 50)
    y = saxpy(x=x, y=np.ones(50), a=2, size={"N": 50})["y"]
    np.testing.assert_allclose(np.array(y), 2 * x + 1, atol=1e-6)
