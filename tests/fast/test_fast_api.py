"""mlxsci.fast's constructors and call: MLX 0.32's signatures, its argument
errors (same exception types), backend routing, results in both dialects."""

import inspect

import mlx.core as mx
import numpy as np
import pytest

from mlxsci import fast
from mlxsci.fast import kernels

DOUBLE_METAL = "uint i = thread_position_in_grid.x; y[i] = 2 * x[i];"
DOUBLE_CUDA = """
auto i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) y[i] = 2 * x[i];
"""


def double_metal(**kw):
    return fast.metal_kernel("double", ["x"], ["y"], DOUBLE_METAL, **kw)


def call(k, x, **kw):
    args = dict(
        inputs=[x],
        grid=(x.size, 1, 1),
        threadgroup=(4, 1, 1),
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
    )
    args.update(kw)
    return k(**args)


def _params(fn) -> list[tuple]:
    return [
        (p.name, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.kind != p.KEYWORD_ONLY
    ]


def test_constructors_take_mlx_arguments_in_mlx_order():
    assert _params(fast.metal_kernel) == [
        ("name", inspect.Parameter.empty),
        ("input_names", inspect.Parameter.empty),
        ("output_names", inspect.Parameter.empty),
        ("source", inspect.Parameter.empty),
        ("header", ""),
        ("ensure_row_contiguous", True),
        ("atomic_outputs", False),
        ("compile_options", None),
    ]
    assert _params(fast.cuda_kernel) == [
        ("name", inspect.Parameter.empty),
        ("input_names", inspect.Parameter.empty),
        ("output_names", inspect.Parameter.empty),
        ("source", inspect.Parameter.empty),
        ("header", ""),
        ("ensure_row_contiguous", True),
        ("shared_memory", 0),
    ]
    mlx_call = (
        "inputs output_shapes output_dtypes grid threadgroup template init_value verbose stream"
    )
    ours = inspect.signature(fast.FastKernel.__call__).parameters
    assert all(ours[n].kind == inspect.Parameter.KEYWORD_ONLY for n in mlx_call.split())


def test_metal_and_cuda_kernels_compute_and_return_a_list_of_arrays():
    x = mx.arange(10, dtype=mx.float32)
    out = call(double_metal(), x)
    assert isinstance(out, list) and len(out) == 1 and isinstance(out[0], mx.array)
    np.testing.assert_array_equal(np.array(out[0]), 2 * np.arange(10))
    ck = fast.cuda_kernel("double", ["x"], ["y"], DOUBLE_CUDA)
    (y,) = call(ck, x)  # 10 threads in blocks of 4: 12 run, the kernel checks bounds
    np.testing.assert_array_equal(np.array(y), 2 * np.arange(10))


def test_python_scalars_are_converted_as_mlx_converts_them():
    k = fast.metal_kernel(
        "scal", ["a", "b", "c"], ["y"], "y[0] = float(a) + b + (c ? 100.0f : 0.0f);"
    )
    (y,) = k(
        inputs=[3, 0.5, True],
        grid=(1, 1, 1),
        threadgroup=(1, 1, 1),
        output_shapes=[(1,)],
        output_dtypes=[mx.float32],
    )
    assert float(y[0]) == 103.5


@pytest.mark.parametrize(
    "change, error, words",
    [
        (dict(inputs=[]), ValueError, "Expected `inputs` to have size 1 but got size 0"),
        (
            dict(output_shapes=[(4,), (4,)]),
            ValueError,
            "Expected `output_shapes` to have size 1 but got size 2",
        ),
        (
            dict(output_dtypes=[mx.float32, mx.float32]),
            ValueError,
            "Expected `output_dtypes` to have size 1",
        ),
        (dict(template=[("T", 1.5)]), ValueError, "Invalid template argument"),
        (dict(grid=(4, 1)), TypeError, "grid"),
        (dict(grid=(4.0, 1, 1)), TypeError, "grid"),
        (dict(grid=(2**31, 1, 1)), TypeError, "2^31"),
        (dict(output_shapes=[(4.0,)]), TypeError, "output shape of 'y'"),
        (dict(output_shapes=[(2**31,)]), ValueError, "output shape of 'y'"),
        (dict(output_dtypes=["float32"]), TypeError, "output dtype of 'y'"),
        (dict(inputs=["x"]), ValueError, "input 'x'"),
        (dict(init_value="x"), TypeError, "init_value"),
        (dict(stream=mx.cpu), ValueError, "Only supports the GPU."),
        (dict(threadgroup=(0, 1, 1)), ValueError, "must be positive"),
    ],
)
def test_bad_call_arguments_raise_mlx_exception_types(change, error, words):
    x = mx.arange(4, dtype=mx.float32)
    with pytest.raises(error) as exc:
        call(double_metal(), x, **change)
    assert words in str(exc.value)


def test_cuda_call_errors_carry_mlx_cuda_tags():
    k = fast.cuda_kernel("double", ["x"], ["y"], DOUBLE_CUDA)
    x = mx.arange(4, dtype=mx.float32)
    with pytest.raises(ValueError, match=r"^\[custom_kernel\] Expected `inputs`"):
        call(k, x, inputs=[x, x])
    with pytest.raises(ValueError, match=r"^\[cuda_kernel\] Invalid template argument"):
        call(k, x, template=[("T", "float")])


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(output_names=[]), ValueError, "[metal_kernel] Must specify at least one output."),
        (dict(compile_options={"foo": 1}), ValueError, "Unknown compile option `foo`"),
        (dict(compile_options={"math_mode": "turbo"}), ValueError, "Expected math_mode"),
        (dict(compile_options="fast"), ValueError, "Expected `compile_options` to be a dict"),
        (dict(name=1), TypeError, "`name` must be a str"),
        (dict(input_names="x"), TypeError, "`input_names` must be a sequence"),
        (dict(input_names=["x y"]), ValueError, "not a C++ identifier"),
    ],
)
def test_bad_constructor_arguments_raise_mlx_exception_types(kwargs, error, words):
    args = dict(name="k", input_names=["x"], output_names=["y"], source=DOUBLE_METAL)
    args.update(kwargs)
    with pytest.raises(error) as exc:
        fast.metal_kernel(**args)
    assert words in str(exc.value)


def test_backend_auto_is_the_simulator_without_a_gpu_backend_and_mlx_is_mlx(monkeypatch):
    monkeypatch.setattr(kernels, "mlx_has", lambda dialect: False)
    x = mx.arange(4, dtype=mx.float32)
    (y,) = call(double_metal(backend="auto"), x)
    np.testing.assert_array_equal(np.array(y), [0, 2, 4, 6])
    # "mlx" hands the call to MLX's own kernel: this build has no Metal, so MLX's own error.
    seen = []

    def mlx_own(**kw):
        seen.append(kw["name"])
        return mx.fast.metal_kernel(**kw)

    monkeypatch.setitem(kernels.MLX_CONSTRUCTORS, "metal", mlx_own)
    with pytest.raises(RuntimeError, match="No Metal back-end"):
        call(double_metal(backend="mlx"), x)
    assert seen == ["double"]
    # with a GPU backend present, auto goes to MLX too
    monkeypatch.setattr(kernels, "mlx_has", lambda dialect: True)
    with pytest.raises(RuntimeError, match="No Metal back-end"):
        call(double_metal(backend="auto"), x)


def test_the_backend_variable_chooses_and_a_bad_value_is_refused(monkeypatch):
    monkeypatch.setenv("MLXSCI_FAST_BACKEND", "mlx")
    assert double_metal().backend == "mlx"
    monkeypatch.setenv("MLXSCI_FAST_BACKEND", "gpu")
    with pytest.raises(ValueError, match=r"\$MLXSCI_FAST_BACKEND is 'gpu'"):
        double_metal()
    with pytest.raises(ValueError, match="backend is 'cpu'"):
        double_metal(backend="cpu")
