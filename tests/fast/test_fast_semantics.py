"""mlxsci.fast keeps a GPU's semantics, not a friendlier one: strided inputs
as stored, compile options, CUDA dynamic shared memory, verbose output
(checked against the installed MLX's own), variants per source, dtype,
shape class and template, init_value, Metal's exact-grid and CUDA's
whole-block launches."""

import mlx.core as mx
import numpy as np
import pytest
from helpers import mlx_verbose_output

from mlxsci import fast

COPY = "uint i = thread_position_in_grid.x; y[i] = x[i];"
COPY_STRIDED = (
    "uint i = thread_position_in_grid.x; y[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)];"
)


def run1(k, inputs, shape, dtype=mx.float32, grid=None, tg=(4, 1, 1), **kw):
    n = int(np.prod(shape))
    (y,) = k(
        inputs=inputs,
        grid=grid or (n, 1, 1),
        threadgroup=tg,
        output_shapes=[shape],
        output_dtypes=[dtype],
        **kw,
    )
    return np.array(y)


@pytest.fixture
def transposed():
    return mx.arange(12, dtype=mx.float32).reshape(3, 4).T  # (4, 3), not row-contiguous


def test_ensure_row_contiguous_false_passes_a_strided_input_as_stored(transposed):
    want = np.array(transposed)
    plain = fast.metal_kernel("cp", ["x"], ["y"], COPY, ensure_row_contiguous=False)
    got = run1(plain, [transposed], (4, 3))
    # the kernel forgot elem_to_loc: it reads storage order, as on a GPU
    np.testing.assert_array_equal(got.ravel(), np.arange(12))
    assert not np.array_equal(got, want)
    strided = fast.metal_kernel("cp", ["x"], ["y"], COPY_STRIDED, ensure_row_contiguous=False)
    np.testing.assert_array_equal(run1(strided, [transposed], (4, 3)), want)
    # the default copies the input row-contiguous first: plain indexing is right
    np.testing.assert_array_equal(
        run1(fast.metal_kernel("cp", ["x"], ["y"], COPY), [transposed], (4, 3)), want
    )


def test_a_broadcast_input_as_stored_has_zero_strides_and_plain_indexing_overruns():
    row = mx.broadcast_to(mx.array([1.0, 2.0, 3.0]), (4, 3))
    strided = fast.metal_kernel("cp", ["x"], ["y"], COPY_STRIDED, ensure_row_contiguous=False)
    np.testing.assert_array_equal(run1(strided, [row], (4, 3)), np.array(row))
    plain = fast.metal_kernel("cp", ["x"], ["y"], COPY, ensure_row_contiguous=False)
    with pytest.raises(fast.OutOfBoundsError) as exc:
        run1(plain, [row], (4, 3))
    # the storage holds 3 elements (a read in the few bytes of alignment slack
    # after them is not caught; the first beyond them is)
    assert exc.value.buffer == "x" and exc.value.element >= 3
    assert "valid elements 0..2" in str(exc.value)


def test_cuda_strides_as_stored():
    src = """
    auto i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 12) y[i] = x[elem_to_loc(i, x_shape.data(), x_strides.data(), x_ndim)];
    """
    t = mx.arange(12, dtype=mx.float32).reshape(3, 4).T
    k = fast.cuda_kernel("cp", ["x"], ["y"], src, ensure_row_contiguous=False)
    np.testing.assert_array_equal(run1(k, [t], (4, 3)), np.array(t))


FAST_MATH_PROBE = """
#ifdef __FAST_MATH__
y[0] = 1;
#else
y[0] = 0;
#endif
"""


@pytest.mark.parametrize(
    "options, defined",
    [
        (None, 0),
        ({"math_mode": "safe"}, 0),
        ({"math_mode": "relaxed"}, 0),
        ({"math_mode": "fast"}, 1),
    ],
)
def test_fast_math_is_defined_only_for_math_mode_fast(options, defined):
    k = fast.metal_kernel("fm", ["x"], ["y"], FAST_MATH_PROBE, compile_options=options)
    assert run1(k, [mx.zeros(1)], (1,), grid=(1, 1, 1), tg=(1, 1, 1))[0] == defined


DYN = """
extern __shared__ float buf[];
int t = threadIdx.x;
buf[t] = x[blockIdx.x * blockDim.x + t];
__syncthreads();
y[blockIdx.x * blockDim.x + t] = buf[blockDim.x - 1 - t];
"""


def test_cuda_shared_memory_is_honoured():
    x = mx.arange(8, dtype=mx.float32)
    k = fast.cuda_kernel("rev", ["x"], ["y"], DYN, shared_memory=4 * 4)
    np.testing.assert_array_equal(run1(k, [x], (8,)), [3, 2, 1, 0, 7, 6, 5, 4])
    small = fast.cuda_kernel("rev", ["x"], ["y"], DYN, shared_memory=4 * 4)  # blocks of 8 need 32 B
    with pytest.raises(fast.OutOfBoundsError, match="extern __shared__"):
        run1(small, [x], (8,), tg=(8, 1, 1))
    none = fast.cuda_kernel("rev", ["x"], ["y"], DYN)
    with pytest.raises(fast.LaunchError, match="shared_memory=0"):
        run1(none, [x], (8,))


def test_verbose_prints_what_the_installed_mlx_prints(capfd):
    case = dict(
        name="vb",
        input_names=["a", "s"],
        output_names=["o"],
        source="uint i = thread_position_in_grid.x; if (i < 4) o[i] = a[i] * s + a_shape[0];",
        header="inline float two() { return 2.0f; }\n",
        inputs=[("float32", [100]), ("float32", [])],
        output_dtypes=["float32"],
        template=None,
        atomic_outputs=False,
    )
    mlx_prints = mlx_verbose_output(case)
    k = fast.metal_kernel("vb", ["a", "s"], ["o"], case["source"], header=case["header"])
    capfd.readouterr()
    k(
        inputs=[mx.zeros(100), mx.array(1.0)],
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        output_shapes=[(4,)],
        output_dtypes=[mx.float32],
        verbose=True,
        checks=False,
    )
    assert capfd.readouterr().out == mlx_prints


def test_same_name_other_source_never_shares_a_variant():
    x = mx.arange(4, dtype=mx.float32)
    one = fast.metal_kernel(
        "same", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = x[i] + 1;"
    )
    two = fast.metal_kernel(
        "same", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = x[i] + 2;"
    )
    for _ in range(2):  # interleaved, twice
        np.testing.assert_array_equal(run1(one, [x], (4,)), [1, 2, 3, 4])
        np.testing.assert_array_equal(run1(two, [x], (4,)), [2, 3, 4, 5])


def test_other_dtypes_shapes_and_templates_compile_their_own_variants():
    src = (
        "uint i = thread_position_in_grid.x; y[i] = T(x[i]) * T(N) + T(x_shape[0] < 8 ? 1000 : 0);"
    )
    k = fast.metal_kernel("tmpl", ["x"], ["y"], src)
    small = mx.arange(4, dtype=mx.float32)  # size < 8: MLX makes it a `constant` pointer
    big = mx.arange(9, dtype=mx.float32)
    a = run1(k, [small], (4,), template=[("T", mx.float32), ("N", 3)])
    np.testing.assert_array_equal(a, np.arange(4) * 3 + 1000)
    b = run1(k, [big], (9,), template=[("T", mx.float32), ("N", 2)])
    np.testing.assert_array_equal(b, np.arange(9) * 2)
    c = run1(
        k, [mx.arange(9, dtype=mx.int32)], (9,), mx.int32, template=[("T", mx.int32), ("N", 5)]
    )
    np.testing.assert_array_equal(c, np.arange(9) * 5)
    assert c.dtype == np.int32
    sk = k._sim._sim_kernel()  # each has its plain build, and its checked one
    assert len({v.kernel_name for v in sk._variants.values()}) == 3


def test_init_value_fills_every_output_before_the_kernel():
    k = fast.metal_kernel(
        "acc",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; atomic_fetch_add_explicit(&y[i % 2], x[i], memory_order_relaxed);",
        atomic_outputs=True,
    )
    y = run1(k, [mx.arange(8, dtype=mx.float32)], (2,), grid=(8, 1, 1), init_value=100.0)
    np.testing.assert_array_equal(y, [100 + 0 + 2 + 4 + 6, 100 + 1 + 3 + 5 + 7])


def test_metal_runs_exactly_grid_threads_and_cuda_whole_blocks():
    count = "atomic_fetch_add_explicit(&y[0], 1, memory_order_relaxed);"
    k = fast.metal_kernel("count", ["x"], ["y"], count, atomic_outputs=True)
    y = run1(k, [mx.zeros(1)], (1,), mx.int32, grid=(10, 1, 1), tg=(4, 1, 1), init_value=0)
    assert y[0] == 10
    ck = fast.cuda_kernel("count", ["x"], ["y"], "atomicAdd(&y[0], 1);")
    y = run1(ck, [mx.zeros(1)], (1,), mx.int32, grid=(10, 1, 1), tg=(4, 1, 1), init_value=0)
    assert y[0] == 12


def test_float64_outputs_stay_float64_in_cuda_and_do_not_compile_in_metal():
    src = "auto i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 2) y[i] = x[i] + 1e-12;"
    k = fast.cuda_kernel("f64", ["x"], ["y"], src)
    x = mx.array([1.0, 2.0], dtype=mx.float64)
    (y,) = k(
        inputs=[x],
        grid=(2, 1, 1),
        threadgroup=(2, 1, 1),
        output_shapes=[(2,)],
        output_dtypes=[mx.float64],
    )
    assert y.dtype == mx.float64 and np.array(y)[0] == 1.0 + 1e-12
    m = fast.metal_kernel("f64", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(fast.CompileError, match="Metal has no double"):
        run1(m, [x], (1,), mx.float32, grid=(1, 1, 1), tg=(1, 1, 1))


def test_template_ints_beyond_a_cpp_int_are_mlxs_value_error():
    k = fast.metal_kernel("t", ["x"], ["y"], "y[0] = N;")
    with pytest.raises(ValueError, match="Invalid template argument"):
        run1(k, [mx.zeros(1)], (1,), grid=(1, 1, 1), tg=(1, 1, 1), template=[("N", 2**31)])


def test_names_mlx_accepts_are_accepted():
    k = fast.metal_kernel("2d_conv", ["x"], ["y"], "y[0] = x[0] + 1;")
    assert run1(k, [mx.zeros(1)], (1,), grid=(1, 1, 1), tg=(1, 1, 1))[0] == 1
    with pytest.raises(ValueError, match="letters, digits and _"):
        fast.metal_kernel("my-kernel", ["x"], ["y"], "y[0] = 1;")


def test_verbose_of_a_templated_kernel_prints_mlxs_instantiation_line(capfd):
    case = dict(
        name="tp",
        input_names=["a"],
        output_names=["o"],
        source="uint i = thread_position_in_grid.x; if (i < 4) o[i] = T(a[i]) * N;",
        header="",
        inputs=[("float32", [100])],
        output_dtypes=["float32"],
        template=[["T", "float32", "dtype"], ["N", -3, "int"], ["B", True, "bool"]],
        atomic_outputs=False,
    )
    mlx_prints = mlx_verbose_output(case)
    assert "template [[host_name(" in mlx_prints
    k = fast.metal_kernel("tp", ["a"], ["o"], case["source"])
    capfd.readouterr()
    run1(
        k,
        [mx.zeros(100)],
        (4,),
        grid=(32, 1, 1),
        tg=(32, 1, 1),
        template=[("T", mx.float32), ("N", -3), ("B", True)],
        verbose=True,
        checks=False,
    )
    assert capfd.readouterr().out == mlx_prints
