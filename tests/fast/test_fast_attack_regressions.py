"""Regression guards from an adversarial review of mlxsci.fast: behaviours
verified correct (faults found in patterns the other tests do not use, correct
kernels not flagged, argument errors of MLX's types, simulate() bookkeeping,
transformations composed), in both dialects where both apply."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from helpers import mlx_verbose_output

from mlxsci import fast


def run(k, inputs, shape, dtype=mx.float32, grid=None, tg=(4, 1, 1), **kw):
    n = int(np.prod(shape))
    return k(
        inputs=inputs,
        grid=grid or (n, 1, 1),
        threadgroup=tg,
        output_shapes=[shape],
        output_dtypes=[dtype],
        **kw,
    )


# -- faults found ------------------------------------------------------------

LAST_GROUP_METAL = """
threadgroup float buf[4];
uint t = thread_position_in_threadgroup.x;
uint g = threadgroup_position_in_grid.x;
uint i = thread_position_in_grid.x;
if (!(g == threadgroups_per_grid.x - 1 && t == 0)) buf[t] = x[i];
threadgroup_barrier(mem_flags::mem_threadgroup);
y[i] = buf[(t + 1) % 4];
"""

LAST_BLOCK_CUDA = """
__shared__ float buf[4];
int t = threadIdx.x; int i = blockIdx.x * blockDim.x + t;
if (!(blockIdx.x == gridDim.x - 1 && t == 0)) buf[t] = x[i];
__syncthreads();
y[i] = buf[(t + 1) % 4];
"""


def test_uninitialised_group_memory_in_the_last_group_only_raises_in_both_dialects():
    x = mx.arange(16, dtype=mx.float32)
    with pytest.raises(fast.UninitializedReadError, match="kernel 'lastg'"):
        run(fast.metal_kernel("lastg", ["x"], ["y"], LAST_GROUP_METAL), [x], (16,))
    with pytest.raises(fast.UninitializedReadError, match="kernel 'lastg'"):
        run(fast.cuda_kernel("lastg", ["x"], ["y"], LAST_BLOCK_CUDA), [x], (16,))


def test_partial_edge_threadgroup_summing_slots_it_did_not_write_raises():
    src = """
    threadgroup float buf[4];
    uint t = thread_position_in_threadgroup.x;
    uint i = thread_position_in_grid.x;
    buf[t] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[i] = buf[0] + buf[1] + buf[2] + buf[3];
    """
    k = fast.metal_kernel("edge", ["x"], ["y"], src)
    x = mx.arange(10, dtype=mx.float32)  # groups of 4, 4, 2: the last has 2 threads
    with pytest.raises(fast.UninitializedReadError, match="kernel 'edge'"):
        run(k, [x], (10,))


def test_cuda_dynamic_shared_memory_read_before_write_raises():
    src = """
    extern __shared__ float buf[];
    int t = threadIdx.x; int i = blockIdx.x * blockDim.x + t;
    if (t > 0) buf[t] = x[i];
    __syncthreads();
    y[i] = buf[(t + 1) % 4];
    """
    k = fast.cuda_kernel("dyn", ["x"], ["y"], src, shared_memory=16)
    with pytest.raises(fast.UninitializedReadError):
        run(k, [mx.arange(16, dtype=mx.float32)], (16,))


@pytest.mark.parametrize(
    "dtype", [mx.bool_, mx.int8, mx.uint8, mx.float16, mx.bfloat16, mx.int64, mx.complex64]
)
def test_an_unwritten_element_of_any_output_dtype_is_named(dtype):
    x = mx.arange(16).astype(dtype)
    metal = fast.metal_kernel(
        "part", ["x"], ["y"], "uint i = thread_position_in_grid.x; if (i < 15) y[i] = x[i];"
    )
    cuda = fast.cuda_kernel(
        "part",
        ["x"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 15) y[i] = x[i];",
    )
    for k in (metal, cuda):
        with pytest.raises(fast.UnwrittenOutputError) as exc:
            run(k, [x], (16,), dtype=dtype)
        assert (exc.value.buffer, exc.value.element) == ("y", 15)


def test_only_the_faulty_output_of_several_is_named():
    k = fast.metal_kernel(
        "two",
        ["x"],
        ["a", "b"],
        "uint i = thread_position_in_grid.x; a[i] = x[i]; if (i) b[i] = x[i];",
    )
    with pytest.raises(fast.UnwrittenOutputError) as exc:
        k(
            inputs=[mx.arange(8, dtype=mx.float32)],
            grid=(8, 1, 1),
            threadgroup=(4, 1, 1),
            output_shapes=[(8,), (8,)],
            output_dtypes=[mx.float32, mx.float32],
        )
    assert (exc.value.buffer, exc.value.element) == ("b", 0)


def test_a_group_reading_what_an_earlier_group_wrote_to_device_memory_is_a_race():
    src = """
    uint g = threadgroup_position_in_grid.x;
    y[g] = x[g] + ((g > 0) ? y[g - 1] : 0.0f);
    """
    k = fast.metal_kernel("chain", ["x"], ["y"], src)
    with pytest.raises(fast.RaceError):
        run(k, [mx.ones(8)], (8,), tg=(1, 1, 1), init_value=0)


# -- correct kernels pass ------------------------------------------------------


def test_simd_and_warp_reductions_are_not_flagged():
    x = mx.arange(64, dtype=mx.float32)
    want = [float(sum(range(32))), float(sum(range(32, 64)))]
    simd_sum = fast.metal_kernel(
        "ssum",
        ["x"],
        ["y"],
        """
        uint i = thread_position_in_grid.x;
        float s = simd_sum(x[i]);
        if (thread_index_in_simdgroup == 0) y[i / 32] = s;
        """,
    )
    shuffle = fast.metal_kernel(
        "shuf",
        ["x"],
        ["y"],
        """
        uint i = thread_position_in_grid.x;
        float v = x[i];
        for (ushort o = 16; o > 0; o /= 2) v += simd_shuffle_down(v, o);
        if (thread_index_in_simdgroup == 0) y[i / 32] = v;
        """,
    )
    warp = fast.cuda_kernel(
        "wsum",
        ["x"],
        ["y"],
        """
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = x[i];
        for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
        if ((threadIdx.x & 31) == 0) y[i / 32] = v;
        """,
    )
    for k in (simd_sum, shuffle, warp):
        (y,) = run(k, [x], (2,), grid=(64, 1, 1), tg=(64, 1, 1))
        assert np.array(y).tolist() == want


def test_threadgroup_atomics_and_integer_atomic_max_are_not_flagged():
    count = fast.metal_kernel(
        "tgcount",
        ["x"],
        ["y"],
        """
        threadgroup atomic_int cnt;
        uint t = thread_position_in_threadgroup.x;
        if (t == 0) atomic_store_explicit(&cnt, 0, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        atomic_fetch_add_explicit(&cnt, 1, memory_order_relaxed);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (t == 0) y[threadgroup_position_in_grid.x] = atomic_load_explicit(&cnt, memory_order_relaxed);
        """,
    )
    (y,) = run(count, [mx.zeros(8)], (2,), dtype=mx.int32, grid=(64, 1, 1), tg=(32, 1, 1))
    assert np.array(y).tolist() == [32, 32]
    amax = fast.metal_kernel(
        "amax",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; "
        "atomic_fetch_max_explicit(&y[0], x[i], memory_order_relaxed);",
        atomic_outputs=True,
    )
    (y,) = run(
        amax,
        [mx.arange(100, dtype=mx.int32)],
        (1,),
        dtype=mx.int32,
        grid=(100, 1, 1),
        tg=(32, 1, 1),
        init_value=0,
    )
    assert y.item() == 99


def test_a_thread_reading_back_its_own_output_is_not_flagged():
    k = fast.metal_kernel(
        "rb", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = x[i]; y[i] = y[i] * 2;"
    )
    (y,) = run(k, [mx.arange(8, dtype=mx.float32)], (8,))
    assert np.array(y).tolist() == [2.0 * i for i in range(8)]


@pytest.mark.parametrize("case", ["rev", "rev2d", "transposed", "broadcast", "offset"])
def test_cuda_strided_inputs_as_stored_read_through_elem_to_loc(case):
    base = mx.arange(16, dtype=mx.float32)
    a = {
        "rev": base[::-1],
        "rev2d": base.reshape(4, 4)[::-1, ::-1],
        "transposed": base.reshape(4, 4).T,
        "broadcast": mx.broadcast_to(mx.arange(4, dtype=mx.float32), (4, 4)),
        "offset": base[3:11],
    }[case]
    src = (
        f"int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < {a.size}) "
        "y[i] = x[elem_to_loc(i, x_shape.data(), x_strides.data(), x_ndim)];"
    )
    k = fast.cuda_kernel("strided", ["x"], ["y"], src, ensure_row_contiguous=False)
    (y,) = run(k, [a], (a.size,))
    assert np.array(y).tolist() == np.array(a).reshape(-1).tolist()


# -- argument errors: MLX's exception types -------------------------------------

DOUBLE = "uint i = thread_position_in_grid.x; y[i] = x[i];"
ARGS = dict(
    inputs=[mx.arange(8, dtype=mx.float32)],
    grid=(8, 1, 1),
    threadgroup=(8, 1, 1),
    output_shapes=[(8,)],
    output_dtypes=[mx.float32],
)


@pytest.mark.parametrize(
    "change, error",
    [
        (dict(grid=(8.0, 1, 1)), TypeError),
        (dict(grid=(8, 1)), TypeError),
        (dict(grid=(2**31, 1, 1)), TypeError),
        (dict(threadgroup=(8.0, 1.0, 1.0)), TypeError),
        (dict(output_shapes=None), TypeError),
        (dict(output_shapes=[8]), TypeError),
        (dict(output_shapes=[(8.0,)]), TypeError),
        (dict(output_dtypes=["float32"]), TypeError),
        (dict(inputs=None), TypeError),
        (dict(inputs={"x": 1}), TypeError),
        (dict(template={"T": 1}), TypeError),
        (dict(template=[("T", 1.5)]), ValueError),
        (dict(template=[("T", np.int64(3))]), ValueError),
        (dict(template=[("T", np.bool_(True))]), ValueError),
        (dict(init_value="0"), TypeError),
        (dict(verbose=1), TypeError),
        (dict(stream="gpu"), TypeError),
        (dict(stream=mx.cpu), ValueError),
        (dict(inputs=[]), ValueError),
        (dict(output_shapes=[(8,), (8,)]), ValueError),
    ],
)
def test_bad_call_arguments_raise_mlx_exception_types(change, error):
    k = fast.metal_kernel("args", ["x"], ["y"], DOUBLE)
    with pytest.raises(error):
        k(**{**ARGS, **change})


def test_call_arguments_mlx_accepts_are_accepted():
    k = fast.metal_kernel("args", ["x"], ["y"], DOUBLE)
    for change in (
        dict(inputs=(mx.arange(8, dtype=mx.float32),)),
        dict(inputs=[np.arange(8, dtype=np.float32)]),
        dict(grid=[8, 1, 1]),
        dict(grid=(np.int64(8), 1, 1)),
        dict(output_shapes=[[8]]),
        dict(output_shapes=[(np.int64(8),)]),
        dict(init_value=0),
        dict(init_value=np.float32(0)),
    ):
        (y,) = k(**{**ARGS, **change})
        assert np.array(y).tolist() == list(range(8))


@pytest.mark.parametrize(
    "change, error",
    [
        (dict(name=None), TypeError),
        (dict(input_names="x"), TypeError),
        (dict(input_names=(n for n in ["x"])), TypeError),
        (dict(output_names=[]), ValueError),
        (dict(source=b"y[0] = 1;"), TypeError),
        (dict(header=None), TypeError),
        (dict(ensure_row_contiguous=1), TypeError),
        (dict(atomic_outputs=0), TypeError),
        (dict(compile_options={"foo": 1}), ValueError),
        (dict(compile_options={"math_mode": "turbo"}), ValueError),
        (dict(compile_options=["fast"]), ValueError),
    ],
)
def test_bad_constructor_arguments_raise_mlx_exception_types(change, error):
    args = dict(name="k", input_names=["x"], output_names=["y"], source=DOUBLE)
    with pytest.raises(error):
        fast.metal_kernel(**{**args, **change})


# -- simulate() ----------------------------------------------------------------


def test_simulate_restores_mlx_after_an_exception_and_nested_options():
    mlx_metal = fast.kernels.MLX_CONSTRUCTORS["metal"]
    with pytest.raises(KeyError), fast.simulate():
        raise KeyError("inside")
    assert mx.fast.metal_kernel is mlx_metal and not fast.simulating()
    with fast.simulate(checks=False):
        with fast.simulate(checks=True):
            assert mx.fast.metal_kernel("k", ["x"], ["y"], DOUBLE).checks is True
        assert mx.fast.metal_kernel("k", ["x"], ["y"], DOUBLE).checks is False
        assert fast.simulating()
    assert mx.fast.metal_kernel is mlx_metal and not fast.simulating()


def test_simulate_takes_mlx_positional_constructor_arguments():
    with fast.simulate():
        k = mx.fast.metal_kernel("k", ["x"], ["y"], DOUBLE, "", True, False, None)
        assert isinstance(k, fast.FastKernel)
        (y,) = k(**ARGS)
    assert np.array(y).tolist() == list(range(8))


# -- transformations -----------------------------------------------------------

SQUARE = "uint i = thread_position_in_grid.x; y[i] = x[i] * x[i];"
TWICE = "uint i = thread_position_in_grid.x; y[i] = 2.0f * x[i] * g[i];"


def _launch(k, *inputs):
    return k(
        inputs=list(inputs),
        grid=(inputs[0].size, 1, 1),
        threadgroup=(4, 1, 1),
        output_shapes=[inputs[0].shape],
        output_dtypes=[mx.float32],
    )[0]


def test_transformations_composed_give_the_right_value_or_refuse():
    square = fast.metal_kernel("square", ["x"], ["y"], SQUARE)
    twice = fast.metal_kernel("twice", ["x", "g"], ["y"], TWICE)

    @mx.custom_function
    def f(x):
        return _launch(square, x)

    @f.vjp
    def f_vjp(x, cotangent, output):
        return _launch(twice, x, cotangent)

    x = mx.array([1.0, -2.0, 3.0, 0.5])
    want = [2.0, -4.0, 6.0, 1.0]
    g = mx.grad(mx.checkpoint(lambda v: f(v).sum()))(x)
    assert np.array(g).tolist() == want
    # a kernel output behind stop_gradient, or a kernel of a stopped input: no VJP needed
    g = mx.grad(lambda v: (mx.stop_gradient(_launch(square, v)) * v).sum())(x)
    assert np.array(g).tolist() == [1.0, 4.0, 9.0, 0.25]
    g = mx.grad(lambda v: (_launch(square, mx.stop_gradient(v)) * v).sum())(x)
    assert np.array(g).tolist() == [1.0, 4.0, 9.0, 0.25]

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = mx.array([1.0, 2.0, 3.0, 4.0])

        def __call__(self, v):
            return _launch(square, self.w * v).sum()

    model = Model()
    with pytest.raises(fast.TransformError):
        nn.value_and_grad(model, lambda m, v: m(v))(model, x)
    with pytest.raises(fast.TransformError):
        mx.grad(mx.checkpoint(lambda v: _launch(square, v).sum()))(x)


# -- verbose against the installed MLX --------------------------------------------

VERBOSE_CASES = {
    "small_constant_and_scalar": dict(
        source="uint i = thread_position_in_grid.x; if (i < 4) y[i] = a[i] + s;",
        header="",
        input_names=["a", "s"],
        inputs=[("float32", [7]), ("float32", [])],
    ),
    "shape_by_substring_and_a_header": dict(
        source="uint i = thread_position_in_grid.x; if (i < 4) y[i] = xx[i] + xx_shape[0] + x[0];",
        header="#define FOO 1\n",
        input_names=["x", "xx"],
        inputs=[("float32", [8]), ("int8", [9, 2])],
    ),
    "bool_and_uint64_inputs": dict(
        source="uint i = thread_position_in_grid.x; if (i < 4) y[i] = b[i] ? u[i] : 0;",
        header="",
        input_names=["b", "u"],
        inputs=[("bool", [8]), ("uint64", [8])],
    ),
}


@pytest.mark.parametrize("case", sorted(VERBOSE_CASES))
def test_verbose_matches_installed_mlx_for_tricky_signatures(case, capfd):
    c = VERBOSE_CASES[case]
    job = dict(
        name="vb",
        input_names=c["input_names"],
        output_names=["y"],
        source=c["source"],
        header=c["header"],
        inputs=c["inputs"],
        output_dtypes=["float32"],
        template=None,
        atomic_outputs=False,
    )
    mlx_prints = mlx_verbose_output(job)
    k = fast.metal_kernel("vb", c["input_names"], ["y"], c["source"], header=c["header"])
    dtypes = {"bool": mx.bool_}
    inputs = [mx.zeros(shape, dtype=dtypes.get(d) or getattr(mx, d)) for d, shape in c["inputs"]]
    capfd.readouterr()
    k(
        inputs=inputs,
        grid=(4, 1, 1),
        threadgroup=(4, 1, 1),
        output_shapes=[(4,)],
        output_dtypes=[mx.float32],
        verbose=True,
        checks=False,
    )
    assert capfd.readouterr().out == mlx_prints
