"""A simulated kernel under mx.compile, mx.vmap, mx.grad / vjp / jvp: it
works or raises an error that says what to do, never a silent wrong value;
mx.custom_function with a kernel-based VJP (MLX's documented pattern) works."""

import mlx.core as mx
import numpy as np
import pytest

from mlxsci import fast

SQUARE = "uint i = thread_position_in_grid.x; y[i] = x[i] * x[i];"
SCALE = "uint i = thread_position_in_grid.x; y[i] = 2.0f * x[i] * g[i];"

square_k = fast.metal_kernel("square", ["x"], ["y"], SQUARE)
scale_k = fast.metal_kernel("dsquare", ["x", "g"], ["y"], SCALE)


def square(x):
    return square_k(
        inputs=[x],
        grid=(x.size, 1, 1),
        threadgroup=(4, 1, 1),
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
    )[0]


def d_square(x, g):
    return scale_k(
        inputs=[x, g],
        grid=(x.size, 1, 1),
        threadgroup=(4, 1, 1),
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
    )[0]


X = mx.array([1.0, -2.0, 3.0, 0.5])


@pytest.mark.parametrize(
    "transform",
    [
        lambda: mx.grad(lambda x: square(x).sum())(X),
        lambda: mx.value_and_grad(lambda x: square(x).sum())(X),
        lambda: mx.vjp(square, [X], [mx.ones(4)]),
        lambda: mx.jvp(square, [X], [mx.ones(4)]),
    ],
    ids=["grad", "value_and_grad", "vjp", "jvp"],
)
def test_differentiating_a_kernel_without_a_custom_vjp_raises(transform):
    # Without the guard these return zeros: the simulator's outputs are new arrays.
    with pytest.raises(fast.TransformError, match="mx.custom_function") as exc:
        mx.eval(transform())
    assert exc.value.kernel == "square"


def test_compile_and_vmap_traces_raise_an_error_that_says_what_to_do():
    with pytest.raises(fast.TransformError, match="mx.disable_compile"):
        mx.compile(square)(X)
    with pytest.raises(fast.TransformError, match="vmap"):
        mx.vmap(square)(mx.ones((3, 4)))


def test_under_simulate_a_compiled_function_runs_its_kernels():
    with fast.simulate():
        out = mx.compile(lambda x: square(x) + 1)(X)
    np.testing.assert_allclose(np.array(out), np.array(X) ** 2 + 1)


def test_custom_function_with_a_kernel_vjp_gives_the_right_gradient():
    @mx.custom_function
    def f(x):
        return square(x)

    @f.vjp
    def f_vjp(x, cotangent, output):  # one input: MLX hands the array itself
        return d_square(x, cotangent)

    g = mx.grad(lambda x: f(x).sum())(X)
    np.testing.assert_allclose(np.array(g), 2 * np.array(X))
    value, g2 = mx.value_and_grad(lambda x: (f(x) * mx.arange(4)).sum())(X)
    assert float(value) == pytest.approx(float((np.array(X) ** 2 * np.arange(4)).sum()))
    np.testing.assert_allclose(np.array(g2), 2 * np.array(X) * np.arange(4))
