"""simulate() and the pytest plugin route mx.fast.metal_kernel / cuda_kernel
to the simulator, so unchanged code runs its kernels; both put MLX's own
back afterwards."""

import os
import subprocess
import sys
import textwrap

import mlx.core as mx
import numpy as np
import pytest

from mlxsci import fast
from mlxsci.fast import kernels

MLX_METAL = kernels.MLX_CONSTRUCTORS["metal"]
MLX_CUDA = kernels.MLX_CONSTRUCTORS["cuda"]


def project_code():
    """What an MLX project writes: nothing of mlxsci in it."""
    k = mx.fast.metal_kernel(
        name="axpy",
        input_names=["a", "x", "y"],
        output_names=["out"],
        source="uint i = thread_position_in_grid.x; out[i] = a * x[i] + y[i];",
    )
    x, y = mx.arange(6, dtype=mx.float32), mx.ones(6)
    return k(
        inputs=[2.0, x, y],
        grid=(6, 1, 1),
        threadgroup=(2, 1, 1),
        output_shapes=[(6,)],
        output_dtypes=[mx.float32],
    )[0]


def test_simulate_routes_mx_fast_and_restores_it():
    assert not fast.simulating()
    with pytest.raises(RuntimeError, match="No Metal back-end"):
        mx.eval(project_code())  # plain MLX on a machine without Metal
    with fast.simulate():
        assert fast.simulating() and fast.can_run("metal") and fast.can_run("cuda")
        np.testing.assert_array_equal(np.array(project_code()), 2 * np.arange(6) + 1)
        with fast.simulate(checks=False):  # nested: still routed
            project_code()
        project_code()
    assert mx.fast.metal_kernel is MLX_METAL and mx.fast.cuda_kernel is MLX_CUDA
    assert not fast.simulating()


def test_simulate_restores_mlx_after_an_exception_and_refuses_a_bad_backend():
    with pytest.raises(KeyError):
        with fast.simulate():
            raise KeyError("the test body failed")
    assert mx.fast.metal_kernel is MLX_METAL
    with pytest.raises(ValueError, match="use one of sim, auto, mlx"):
        with fast.simulate(backend="gpu"):
            pass
    assert mx.fast.metal_kernel is MLX_METAL and not fast.simulating()


def test_can_run_says_what_a_test_gate_needs():
    assert fast.can_run("metal") == kernels.mlx_has("metal")
    with pytest.raises(ValueError, match="'metal' or 'cuda'"):
        fast.can_run("rocm")


PROJECT_TEST = """
import mlx.core as mx
import numpy as np

def relu_kernel():
    return mx.fast.metal_kernel(
        name="relu", input_names=["x"], output_names=["y"],
        source="uint i = thread_position_in_grid.x; y[i] = max(x[i], 0.0f);",
    )

def test_relu():
    x = mx.array([-1.0, 2.0, -3.0, 4.0])
    (y,) = relu_kernel()(inputs=[x], grid=(4, 1, 1), threadgroup=(4, 1, 1),
                         output_shapes=[(4,)], output_dtypes=[mx.float32])
    assert np.array(y).tolist() == [0.0, 2.0, 0.0, 4.0]

def test_oob_is_an_exception():
    bad = mx.fast.metal_kernel(
        name="bad", input_names=["x"], output_names=["y"],
        source="uint i = thread_position_in_grid.x; y[i] = x[i + 4];",
    )
    try:
        bad(inputs=[mx.zeros(4)], grid=(4, 1, 1), threadgroup=(4, 1, 1),
            output_shapes=[(4,)], output_dtypes=[mx.float32])
    except RuntimeError as exc:
        assert "out-of-bounds read of input 'x'" in str(exc)
    else:
        raise AssertionError("no exception")
"""


@pytest.mark.slow
def test_the_pytest_plugin_runs_a_projects_unchanged_tests(tmp_path):
    (tmp_path / "test_project.py").write_text(textwrap.dedent(PROJECT_TEST))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    without = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert without.returncode == 1 and "No Metal back-end" in without.stdout
    plugged = subprocess.run(
        cmd[:3] + ["-p", "mlxsci.fast.pytest_plugin"] + cmd[3:],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert plugged.returncode == 0, plugged.stdout + plugged.stderr
    assert "2 passed" in plugged.stdout


def test_simulate_leaves_compile_disabled_when_the_user_had_disabled_it():
    from mlxsci.fast import patching

    mx.disable_compile()
    try:
        with fast.simulate():
            pass
        assert not patching.compile_enabled()
    finally:
        mx.enable_compile()
    with fast.simulate():
        assert not patching.compile_enabled()
    assert patching.compile_enabled()


@pytest.mark.slow
def test_the_plugin_routes_kernels_a_conftest_makes_on_import(tmp_path):
    (tmp_path / "kpkg.py").write_text(
        textwrap.dedent(
            """
            import mlx.core as mx
            NEG = mx.fast.metal_kernel(
                name="neg", input_names=["x"], output_names=["y"],
                source="uint i = thread_position_in_grid.x; y[i] = -x[i];",
            )
            """
        )
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text("import kpkg  # noqa: F401\n")
    (tests / "test_neg.py").write_text(
        textwrap.dedent(
            """
            import mlx.core as mx
            import kpkg

            def test_neg():
                (y,) = kpkg.NEG(inputs=[mx.array([1.0, -2.0])], grid=(2, 1, 1),
                                threadgroup=(2, 1, 1), output_shapes=[(2,)],
                                output_dtypes=[mx.float32])
                assert y.tolist() == [-1.0, 2.0]
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["-p", "mlxsci.fast.pytest_plugin", "tests"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
