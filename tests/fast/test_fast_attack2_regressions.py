"""Regression guards from a second adversarial review of mlxsci.fast (the
checked run's exact checks, isolated=True, task_from_kernel): behaviours
verified correct. Correct real-world kernel patterns are not flagged (vector
loads at a buffer's exact end, reductions with partial edge groups, tiled
matmul with halo loads, outputs read back after a barrier, in-place
accumulation with init_value, atomics, wide struct copies of the garbage
byte's value), faults one element off are named in every form tried, and an
isolated call matches the in-process one.

The functions given to task_from_kernel are this module's (the worker
imports them by name from this file), so it imports nothing at its top that
the sandboxed worker may not read."""

import sys
import warnings

import mlx.core as mx
import numpy as np
import pytest

import mlxsci
from mlxsci import fast

F32 = mx.float32


def run(k, inputs, shape, dtype=F32, grid=None, tg=(4, 1, 1), **kw):
    n = int(np.prod(shape))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fast.OrderDependenceWarning)
        return k(
            inputs=inputs,
            grid=grid or (n, 1, 1),
            threadgroup=tg,
            output_shapes=[shape],
            output_dtypes=[dtype],
            **kw,
        )


# -- correct kernels pass the checked run ----------------------------------------


def test_vector_loads_and_stores_at_a_buffers_exact_end_are_not_flagged():
    x = mx.arange(12, dtype=F32)
    load = fast.metal_kernel(
        "v4",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; float4 v = ((device const float4*)x)[i]; "
        "y[i] = v.x + v.y + v.z + v.w;",
    )
    load_cu = fast.cuda_kernel(
        "v4",
        ["x"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 3) { "
        "float4 v = reinterpret_cast<const float4*>(x)[i]; y[i] = v.x + v.y + v.z + v.w; }",
    )
    for k in (load, load_cu):
        (y,) = run(k, [x], (3,), grid=(3, 1, 1), tg=(3, 1, 1))
        assert y.tolist() == [6.0, 22.0, 38.0]
    store = fast.metal_kernel(
        "v4s",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; ((device float4*)y)[i] = float4(x[i]);",
    )
    (y,) = run(store, [mx.array([1.0, 2.0, 3.0])], (12,), grid=(3, 1, 1), tg=(3, 1, 1))
    assert y.tolist() == [1.0] * 4 + [2.0] * 4 + [3.0] * 4
    half2 = fast.cuda_kernel(
        "h2",
        ["x"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 3) { "
        "__half2 v = reinterpret_cast<const __half2*>(x)[i]; y[i] = __low2half(v) + __high2half(v); }",
    )
    (y,) = run(half2, [mx.arange(6).astype(mx.float16)], (3,), dtype=mx.float16, tg=(32, 1, 1))
    assert y.tolist() == [1.0, 5.0, 9.0]
    # a float4 head and a scalar tail over a buffer whose size is no multiple of 16 bytes
    tail = fast.metal_kernel(
        "vtail",
        ["x"],
        ["y"],
        """
        uint n = x_shape[0]; float s = 0;
        for (uint j = 0; j < n / 4; ++j) { float4 v = ((device const float4*)x)[j]; s += v.x + v.y + v.z + v.w; }
        for (uint j = n / 4 * 4; j < n; ++j) s += x[j];
        y[0] = s;
        """,
    )
    for n in (9, 10, 13):
        (y,) = run(tail, [mx.ones(n)], (1,), grid=(1, 1, 1), tg=(1, 1, 1))
        assert y.item() == n


def test_struct_and_packed_vector_copies_are_not_flagged():
    pair = fast.metal_kernel(
        "pair",
        ["x"],
        ["y"],
        """
        struct P { float a; float b; };
        uint i = thread_position_in_grid.x;
        P p = ((device const P*)x)[i];
        ((device P*)y)[i] = P{p.b, p.a};
        """,
    )
    (y,) = run(pair, [mx.arange(8, dtype=F32)], (8,), grid=(4, 1, 1))
    assert y.tolist() == [1.0, 0.0, 3.0, 2.0, 5.0, 4.0, 7.0, 6.0]
    packed = fast.metal_kernel(
        "p3",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; packed_float3 p = ((device const packed_float3*)x)[i]; "
        "y[i] = p.x + p.y + p.z;",
    )
    (y,) = run(packed, [mx.arange(9, dtype=F32)], (3,), tg=(3, 1, 1))
    assert y.tolist() == [3.0, 12.0, 21.0]


def test_wide_copies_of_the_garbage_bytes_value_read_back_are_not_flagged():
    """32-byte struct copies (wider than the hooks see) of -1 (0xFF: the
    checked run's garbage byte) into an output, then read back."""
    metal = fast.metal_kernel(
        "wide",
        ["x"],
        ["y"],
        """
        struct W { int v[8]; };
        uint i = thread_position_in_grid.x;
        ((device W*)y)[i] = ((device const W*)x)[i];
        y[i * 8] = y[i * 8] + 1;
        """,
    )
    cuda = fast.cuda_kernel(
        "wide",
        ["x"],
        ["y"],
        """
        struct W { int v[8]; };
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < 4) { ((W*)y)[i] = ((const W*)x)[i]; y[i * 8] = y[i * 8] + 1; }
        """,
    )
    want = ([0] + [-1] * 7) * 4
    for k in (metal, cuda):
        (y,) = run(k, [mx.full((32,), -1, dtype=mx.int32)], (32,), mx.int32, grid=(4, 1, 1))
        assert y.tolist() == want
    # one thread copies a row (a loop the compiler may widen), the others read it after a barrier
    row = fast.metal_kernel(
        "rowcp",
        ["x"],
        ["y", "z"],
        """
        threadgroup int buf[64];
        uint t = thread_position_in_threadgroup.x;
        if (t == 0) for (int j = 0; j < 64; ++j) { y[j] = x[j]; buf[j] = x[j]; }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
        z[t] = y[(t * 7) % 64] + buf[(t * 5) % 64];
        """,
    )
    y, z = row(
        inputs=[mx.full((64,), -1, dtype=mx.int32)],
        grid=(64, 1, 1),
        threadgroup=(64, 1, 1),
        output_shapes=[(64,), (64,)],
        output_dtypes=[mx.int32, mx.int32],
    )
    assert y.tolist() == [-1] * 64 and z.tolist() == [-2] * 64


METAL_TG_REDUCTION = """
threadgroup float buf[64];
uint t = thread_position_in_threadgroup.x;
uint n = threads_per_threadgroup.x;
buf[t] = x[thread_position_in_grid.x];
threadgroup_barrier(mem_flags::mem_threadgroup);
for (uint s = 32; s > 0; s >>= 1) {
  if (t < s && t + s < n) buf[t] += buf[t + s];
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (t == 0) y[threadgroup_position_in_grid.x] = buf[0];
"""

CUDA_SHARED_REDUCTION = """
__shared__ float buf[64];
int t = threadIdx.x; int i = blockIdx.x * blockDim.x + t;
buf[t] = i < x_shape[0] ? x[i] : 0.0f;
__syncthreads();
for (int s = 32; s > 0; s >>= 1) { if (t < s) buf[t] += buf[t + s]; __syncthreads(); }
if (t == 0) y[blockIdx.x] = buf[0];
"""

METAL_SIMD_TG_REDUCTION = """
threadgroup float part[32];
uint t = thread_position_in_threadgroup.x;
uint nsg = (threads_per_threadgroup.x + 31) / 32;
float v = simd_sum(x[thread_position_in_grid.x]);
if (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = v;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (simdgroup_index_in_threadgroup == 0) {
  v = thread_index_in_simdgroup < nsg ? part[thread_index_in_simdgroup] : 0.0f;
  v = simd_sum(v);
  if (t == 0) y[threadgroup_position_in_grid.x] = v;
}
"""

CUDA_WARP_SHARED_REDUCTION = """
__shared__ float part[32];
int t = threadIdx.x; int i = blockIdx.x * blockDim.x + t;
float v = i < x_shape[0] ? x[i] : 0.0f;
for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
if ((t & 31) == 0) part[t >> 5] = v;
__syncthreads();
if (t < 32) {
  v = t < (blockDim.x >> 5) ? part[t] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
  if (t == 0) y[blockIdx.x] = v;
}
"""


def test_reductions_with_a_partial_edge_group_are_not_flagged_in_both_dialects():
    cases = [
        (fast.metal_kernel("tgred", ["x"], ["y"], METAL_TG_REDUCTION), 100, 64),
        (fast.cuda_kernel("shred", ["x"], ["y"], CUDA_SHARED_REDUCTION), 100, 64),
        (fast.metal_kernel("sred", ["x"], ["y"], METAL_SIMD_TG_REDUCTION), 300, 128),
        (fast.cuda_kernel("wred", ["x"], ["y"], CUDA_WARP_SHARED_REDUCTION), 300, 128),
    ]
    for k, n, group in cases:
        groups = -(-n // group)
        (y,) = run(k, [mx.ones(n)], (groups,), grid=(n, 1, 1), tg=(group, 1, 1))
        want = [float(group)] * (groups - 1) + [float(n - group * (groups - 1))]
        assert y.tolist() == want, k.definition.name


def test_halo_loads_into_group_memory_with_a_partial_edge_group_are_not_flagged():
    stencil = fast.metal_kernel(
        "stencil",
        ["x"],
        ["y"],
        """
        threadgroup float tile[34];
        uint t = thread_position_in_threadgroup.x;
        uint i = thread_position_in_grid.x;
        uint n = x_shape[0];
        tile[t + 1] = x[i];
        if (t == 0) tile[0] = i > 0 ? x[i - 1] : 0.0f;
        if (t == threads_per_threadgroup.x - 1) tile[t + 2] = i + 1 < n ? x[i + 1] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        y[i] = tile[t] + tile[t + 1] + tile[t + 2];
        """,
    )
    (y,) = run(stencil, [mx.ones(70)], (70,), tg=(32, 1, 1))
    assert y.tolist() == [2.0] + [3.0] * 68 + [2.0]


TILED_MM = {
    "metal": """
    constexpr int T = 4;
    threadgroup float As[T][T]; threadgroup float Bs[T][T];
    uint tx = thread_position_in_threadgroup.x, ty = thread_position_in_threadgroup.y;
    int col = threadgroup_position_in_grid.x * T + tx, row = threadgroup_position_in_grid.y * T + ty;
    int M = a_shape[0], K = a_shape[1], N = b_shape[1];
    float acc = 0;
    for (int k0 = 0; k0 < K; k0 += T) {
      As[ty][tx] = (row < M && k0 + (int)tx < K) ? a[row * K + k0 + tx] : 0.0f;
      Bs[ty][tx] = (col < N && k0 + (int)ty < K) ? b[(k0 + ty) * N + col] : 0.0f;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (int j = 0; j < T; ++j) acc += As[ty][j] * Bs[j][tx];
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (row < M && col < N) c[row * N + col] = acc;
    """,
    "cuda": """
    constexpr int T = 4;
    __shared__ float As[T][T]; __shared__ float Bs[T][T];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * T + tx, row = blockIdx.y * T + ty;
    int M = a_shape[0], K = a_shape[1], N = b_shape[1];
    float acc = 0;
    for (int k0 = 0; k0 < K; k0 += T) {
      As[ty][tx] = (row < M && k0 + tx < K) ? a[row * K + k0 + tx] : 0.0f;
      Bs[ty][tx] = (col < N && k0 + ty < K) ? b[(k0 + ty) * N + col] : 0.0f;
      __syncthreads();
      for (int j = 0; j < T; ++j) acc += As[ty][j] * Bs[j][tx];
      __syncthreads();
    }
    if (row < M && col < N) c[row * N + col] = acc;
    """,
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_tiled_matmul_over_edge_tiles_is_right_and_not_flagged(dialect):
    m, n, k = 10, 9, 11
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    make = fast.metal_kernel if dialect == "metal" else fast.cuda_kernel
    kernel = make("mm", ["a", "b"], ["c"], TILED_MM[dialect])
    # whole tiles (Metal rounds the grid up itself; CUDA runs whole blocks)
    grid = (12, 12, 1) if dialect == "metal" else (n, m, 1)
    (c,) = kernel(
        inputs=[mx.array(a), mx.array(b)],
        grid=grid,
        threadgroup=(4, 4, 1),
        output_shapes=[(m, n)],
        output_dtypes=[F32],
    )
    np.testing.assert_allclose(np.array(c), a @ b, rtol=1e-5, atol=1e-5)


def test_metal_tiled_matmul_on_the_exact_grid_reads_tiles_no_thread_loaded():
    """Metal runs exactly `grid` threads: the edge groups' missing threads load
    nothing, so the tile reads are reads of memory nobody wrote."""
    kernel = fast.metal_kernel("mm", ["a", "b"], ["c"], TILED_MM["metal"])
    with pytest.raises(fast.UninitializedReadError) as exc:
        kernel(
            inputs=[mx.ones((10, 11)), mx.ones((11, 9))],
            grid=(9, 10, 1),
            threadgroup=(4, 4, 1),
            output_shapes=[(10, 9)],
            output_dtypes=[F32],
        )
    assert exc.value.buffer in ("As", "Bs")


def test_simdgroup_matrices_through_group_and_device_memory_are_not_flagged():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    via_group = """
    threadgroup float As[64]; threadgroup float Bs[64];
    for (uint j = thread_index_in_simdgroup; j < 64; j += 32) { As[j] = a[j]; Bs[j] = b[j]; }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 A, B, C = simdgroup_float8x8(0);
    simdgroup_load(A, As, 8); simdgroup_load(B, Bs, 8);
    simdgroup_multiply_accumulate(C, A, B, C);
    simdgroup_store(C, c, 8);
    """
    via_device = """
    simdgroup_float8x8 A, B, C = simdgroup_float8x8(0);
    simdgroup_load(A, a, 8); simdgroup_load(B, b, 8);
    simdgroup_multiply_accumulate(C, A, B, C);
    simdgroup_store(C, c, 8);
    """
    for name, src in (("sg_group", via_group), ("sg_device", via_device)):
        k = fast.metal_kernel(name, ["a", "b"], ["c"], src)
        (c,) = k(
            inputs=[mx.array(a), mx.array(b)],
            grid=(32, 1, 1),
            threadgroup=(32, 1, 1),
            output_shapes=[(8, 8)],
            output_dtypes=[F32],
        )
        np.testing.assert_allclose(np.array(c), a @ b, rtol=1e-5, atol=1e-5)


def test_outputs_read_back_after_a_barrier_or_accumulated_with_init_value_pass():
    metal = fast.metal_kernel(
        "nb",
        ["x"],
        ["y"],
        """
        uint i = thread_position_in_grid.x;
        y[i] = x[i];
        threadgroup_barrier(mem_flags::mem_device);
        float o = y[i ^ 1];
        threadgroup_barrier(mem_flags::mem_device);
        y[i] = y[i] + o;
        """,
    )
    cuda = fast.cuda_kernel(
        "nb",
        ["x"],
        ["y"],
        """
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        y[i] = x[i];
        __syncthreads();
        float o = y[i ^ 1];
        __syncthreads();
        y[i] = y[i] + o;
        """,
    )
    for k in (metal, cuda):
        (y,) = run(k, [mx.arange(8, dtype=F32)], (8,), tg=(8, 1, 1))
        assert y.tolist() == [1.0, 1.0, 5.0, 5.0, 9.0, 9.0, 13.0, 13.0]
    acc = fast.metal_kernel(
        "acc",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; for (int r = 0; r < 4; ++r) y[i] += x[i * 4 + r];",
    )
    (y,) = run(acc, [mx.ones(32)], (8,), init_value=1.5)
    assert y.tolist() == [5.5] * 8


def test_integer_atomic_histograms_in_device_and_shared_memory_pass_without_a_warning():
    x = mx.array([0, 1, 1, 2, 2, 2, 3, 3, 0, 0], dtype=mx.int32)
    metal = fast.metal_kernel(
        "hist",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; "
        "atomic_fetch_add_explicit(&y[x[i]], 1, memory_order_relaxed);",
        atomic_outputs=True,
    )
    cuda = fast.cuda_kernel(
        "hist",
        ["x"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) atomicAdd(&y[x[i]], 1);",
    )
    shared = fast.cuda_kernel(
        "shist",
        ["x"],
        ["y"],
        """
        __shared__ int h[4];
        int t = threadIdx.x; int i = blockIdx.x * blockDim.x + t;
        if (t < 4) h[t] = 0;
        __syncthreads();
        if (i < x_shape[0]) atomicAdd(&h[x[i]], 1);
        __syncthreads();
        if (t < 4) atomicAdd(&y[t], h[t]);
        """,
    )
    for k, tg in ((metal, (4, 1, 1)), (cuda, (4, 1, 1)), (shared, (8, 1, 1))):
        (y,) = run(k, [x], (4,), mx.int32, grid=(10, 1, 1), tg=tg, init_value=0)
        assert y.tolist() == [3, 2, 3, 2], k.definition.name


def test_small_constant_zero_d_and_scalar_inputs_pass_in_both_dialects():
    metal = fast.metal_kernel(
        "mix",
        ["a", "s", "c"],
        ["y"],
        "uint i = thread_position_in_grid.x; y[i] = a * s + c[i % 3];",
    )
    cuda = fast.cuda_kernel(
        "mix",
        ["a", "s", "c"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 5) y[i] = a[0] * s[0] + c[i % 3];",
    )
    for k in (metal, cuda):
        (y,) = run(k, [mx.array(2.0), 3.0, mx.array([1.0, 2.0, 3.0])], (5,))
        assert y.tolist() == [7.0, 8.0, 9.0, 7.0, 8.0]


def test_half_and_bfloat16_elementwise_kernels_pass_in_both_dialects():
    x = mx.arange(7)
    metal = fast.metal_kernel(
        "bf", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = x[i] * bfloat16_t(2.0f);"
    )
    cuda_bf = fast.cuda_kernel(
        "bf",
        ["x"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; "
        "if (i < x_shape[0]) y[i] = __float2bfloat16(__bfloat162float(x[i]) * 2.0f);",
    )
    cuda_h = fast.cuda_kernel(
        "h",
        ["x"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; "
        "if (i < x_shape[0]) y[i] = __hmul(x[i], __float2half(2.0f));",
    )
    want = [2.0 * i for i in range(7)]
    for k, dt in ((metal, mx.bfloat16), (cuda_bf, mx.bfloat16), (cuda_h, mx.float16)):
        (y,) = run(k, [x.astype(dt)], (7,), dt)
        assert y.astype(F32).tolist() == want


# -- faults one off are named -----------------------------------------------------

OFF_BY_ONE = [
    # (name, dialect, source, input, init_value, buffer, element)
    (
        "uint_minus_one",
        "metal",
        "uint i = thread_position_in_grid.x; y[i] = x[i - 1];",
        "x8",
        None,
        "x",
        4294967295,
    ),
    (
        "int_minus_one",
        "metal",
        "int i = thread_position_in_grid.x; y[i] = x[i - 1];",
        "x8",
        None,
        "x",
        -1,
    ),
    (
        "store_past",
        "metal",
        "uint i = thread_position_in_grid.x; y[i + 1] = x[i];",
        "x8",
        None,
        "y",
        8,
    ),
    (
        "small_constant",
        "metal",
        "uint i = thread_position_in_grid.x; y[i] = x[i % 4];",
        "x3",
        None,
        "x",
        3,
    ),
    (
        "small_cuda",
        "cuda",
        "int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i % 4];",
        "x3",
        None,
        "x",
        3,
    ),
    (
        "zero_d",
        "metal",
        "uint i = thread_position_in_grid.x; y[i] = (&x)[i % 2];",
        "x0",
        None,
        "x",
        1,
    ),
    (
        "zero_d_cuda",
        "cuda",
        "int i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i % 2];",
        "x0",
        None,
        "x",
        1,
    ),
    (
        "atomic_past",
        "cuda",
        "int i = blockIdx.x * blockDim.x + threadIdx.x; atomicAdd(&y[i + 1], 1);",
        "x8",
        0,
        "y",
        8,
    ),
]


@pytest.mark.parametrize("case", OFF_BY_ONE, ids=[c[0] for c in OFF_BY_ONE])
def test_an_access_one_off_is_named(case):
    name, dialect, src, given, init, buffer, element = case
    x = {
        "x8": mx.arange(8, dtype=F32),
        "x3": mx.arange(3, dtype=F32),
        "x0": mx.array(1.0),
    }[given]
    make = fast.metal_kernel if dialect == "metal" else fast.cuda_kernel
    dtype = mx.int32 if init is not None else F32
    with pytest.raises(fast.OutOfBoundsError) as exc:
        run(make(name, ["x"], ["y"], src), [x], (8,), dtype, init_value=init)
    assert (exc.value.buffer, exc.value.element) == (buffer, element)


def test_group_memory_one_past_its_end_is_named_in_every_kind():
    metal = fast.metal_kernel(
        "tgo",
        ["x"],
        ["y"],
        """
        threadgroup float buf[2][4]; uint t = thread_position_in_threadgroup.x;
        buf[0][t] = x[thread_position_in_grid.x]; buf[1][t] = 0;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        y[thread_position_in_grid.x] = buf[1][t + 1];
        """,
    )
    static = fast.cuda_kernel(
        "tgo",
        ["x"],
        ["y"],
        """
        __shared__ float buf[4]; int t = threadIdx.x;
        buf[t] = x[blockIdx.x * 4 + t]; __syncthreads();
        y[blockIdx.x * 4 + t] = buf[t + 1];
        """,
    )
    dynamic = fast.cuda_kernel(
        "dyo",
        ["x"],
        ["y"],
        """
        extern __shared__ float buf[]; int t = threadIdx.x;
        buf[t] = x[blockIdx.x * 4 + t]; __syncthreads();
        y[blockIdx.x * 4 + t] = buf[t + 1];
        """,
        shared_memory=16,
    )
    for k in (metal, static, dynamic):
        with pytest.raises(fast.OutOfBoundsError) as exc:
            run(k, [mx.arange(8, dtype=F32)], (8,))
        assert exc.value.thread == (3, 0, 0)


def test_a_float4_load_one_past_a_buffers_end_is_named():
    k = fast.metal_kernel(
        "v4o",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; float4 v = ((device const float4*)x)[i]; y[i] = v.w;",
    )
    with pytest.raises(fast.OutOfBoundsError) as exc:
        run(k, [mx.arange(11, dtype=F32)], (3,), tg=(3, 1, 1))
    assert (exc.value.buffer, exc.value.element, exc.value.thread) == ("x", 11, (2, 0, 0))


@pytest.mark.parametrize("index, ok", [("-i", True), ("-i - 1", False), ("i", False)])
def test_metal_inputs_as_stored_with_negative_strides_are_valid_over_their_span(index, ok):
    """x[::-1] as stored: the kernel's pointer is at its last element, so
    x[0] .. x[-7] are the data and x[1] or x[-8] are not."""
    k = fast.metal_kernel(
        "neg",
        ["x"],
        ["y"],
        f"int i = thread_position_in_grid.x; y[i] = x[{index}];",
        ensure_row_contiguous=False,
    )
    x = mx.arange(8, dtype=F32)[::-1]
    if ok:
        (y,) = run(k, [x], (8,))
        assert y.tolist() == list(range(7, -1, -1))
    else:
        with pytest.raises(fast.OutOfBoundsError):
            run(k, [x], (8,))


def test_metal_broadcast_input_as_stored_is_valid_over_its_data_only():
    x = mx.broadcast_to(mx.arange(4, dtype=F32), (4, 4))
    through = fast.metal_kernel(
        "bc",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; y[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)];",
        ensure_row_contiguous=False,
    )
    (y,) = run(through, [x], (16,))
    assert y.tolist() == [0.0, 1.0, 2.0, 3.0] * 4
    flat = fast.metal_kernel(
        "bcf",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; y[i] = x[i];",
        ensure_row_contiguous=False,
    )
    with pytest.raises(fast.OutOfBoundsError) as exc:
        run(flat, [x], (16,))
    assert (exc.value.buffer, exc.value.element) == ("x", 4)


def test_reading_ones_own_output_before_writing_it_is_an_uninitialised_read():
    k = fast.metal_kernel(
        "rbw", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = y[i] * 0.0f + x[i];"
    )
    with pytest.raises(fast.UninitializedReadError) as exc:
        run(k, [mx.arange(8, dtype=F32)], (8,))
    assert exc.value.buffer == "y"


# -- isolated=True --------------------------------------------------------------


def _sandbox_ok() -> bool:
    if sys.platform != "linux":
        return False
    from mlxsci.sandbox import landlock

    return landlock.abi_version() >= 1


needs_sandbox = pytest.mark.skipif(
    not _sandbox_ok(), reason="the sandbox needs Linux with Landlock"
)


@pytest.fixture
def fresh_workers():
    from mlxsci.fast import isolated

    isolated.close_all()
    yield
    isolated.close_all()


@needs_sandbox
@pytest.mark.slow
def test_isolated_matches_in_process_for_views_warnings_and_a_crash_then_a_good_call(
    fresh_workers,
):
    strided = fast.cuda_kernel(
        "ns",
        ["x"],
        ["y"],
        "int i = blockIdx.x * blockDim.x + threadIdx.x; "
        "if (i < 8) y[i] = x[elem_to_loc(i, x_shape.data(), x_strides.data(), x_ndim)];",
        ensure_row_contiguous=False,
    )
    x = mx.arange(16, dtype=F32).reshape(4, 4)[::-1, 1::2]
    args = dict(grid=(8, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(8,)], output_dtypes=[F32])
    here = strided(inputs=[x], **args)[0].tolist()
    assert (
        strided(inputs=[x], isolated=True, **args)[0].tolist()
        == here
        == [
            13.0,
            15.0,
            9.0,
            11.0,
            5.0,
            7.0,
            1.0,
            3.0,
        ]
    )
    fsum = fast.metal_kernel(
        "fsum",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; "
        "atomic_fetch_add_explicit(&y[0], x[i], memory_order_relaxed);",
        atomic_outputs=True,
    )
    xs = mx.array(np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 1e3)
    for isolate in (False, True):
        with pytest.warns(fast.OrderDependenceWarning):
            fsum(
                inputs=[xs],
                grid=(4096, 1, 1),
                threadgroup=(256, 1, 1),
                output_shapes=[(1,)],
                output_dtypes=[F32],
                init_value=0,
                isolated=isolate,
            )
    wild = fast.metal_kernel(
        "wild",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x; "
        "device float* p = (device float*)(uintptr_t)(0x10 + i); y[i] = *p;",
        isolated=True,
    )
    good = fast.metal_kernel(
        "good", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = x[i] + 1;", isolated=True
    )
    args = dict(
        inputs=[mx.arange(8, dtype=F32)],
        grid=(8, 1, 1),
        threadgroup=(4, 1, 1),
        output_shapes=[(8,)],
        output_dtypes=[F32],
    )
    for _ in range(2):
        with pytest.raises(fast.KernelCrashError):
            wild(**args)
        assert good(**args)[0].tolist() == [float(i + 1) for i in range(8)]


# -- task_from_kernel -------------------------------------------------------------

SAXPY_CUDA = """
int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) y[i] = a[0] * x[i] + b[i];
"""


def saxpy_inputs(size, seed):
    rng = np.random.default_rng(seed)
    n = size["N"]
    return {
        "a": np.array(2.0, np.float32),
        "x": rng.standard_normal(n).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32),
    }


def saxpy_reference(inputs, size):
    """y = a * x + b."""
    return {"y": inputs["a"] * inputs["x"] + inputs["b"]}


def _saxpy_task(source, **overrides):
    kernel = fast.cuda_kernel("saxpy_attack2", ["a", "x", "b"], ["y"], source)
    arguments = dict(
        reference=saxpy_reference,
        make_inputs=saxpy_inputs,
        sizes={"smoke": {"N": 100}, "in-dist": [{"N": 1000}], "held-out": {"N": 777}},
        grid=("N", 1, 1),
        threadgroup=(64, 1, 1),
        output_shapes=[("N",)],
        output_dtypes=[F32],
        chain={},
    )
    arguments.update(overrides)
    return mlxsci.task_from_kernel(kernel, **arguments)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_cuda_kernels_task_evaluates_and_a_wrong_one_fails_with_a_verdict():
    ev = mlxsci.evaluate(_saxpy_task(SAXPY_CUDA), backend="sim", size_set="smoke")
    assert ev.correct and ev.compile_ok
    wrong = SAXPY_CUDA.replace("a[0] * x[i]", "x[i]")
    ev = mlxsci.evaluate(_saxpy_task(wrong), backend="sim", size_set="smoke")
    assert ev.compile_ok and not ev.correct
    assert "correctness failed" in ev.fail_reason


@pytest.mark.parametrize(
    "change, error, says",
    [
        (dict(sizes={"N": 0}), ValueError, "not positive"),
        (dict(sizes={"N": True}), ValueError, "not an int or a float"),
        (dict(grid=("__import__('os').system('true')", 1, 1)), ValueError, "not allowed"),
        (dict(grid=("M", 1, 1)), ValueError, "unknown name 'M'"),
        # MLX's CUDA block is min(threadgroup, grid): 64 x 32 threads here
        (dict(grid=("N", 32, 1), threadgroup=(64, 32, 1)), ValueError, "1024"),
        (dict(output_dtypes=["floaty"]), ValueError, "unsupported dtype"),
        (dict(reference=lambda i, s: i), ValueError, "lambda"),
        (dict(tolerance="1e-3"), TypeError, "tolerance must be"),
        (dict(chain={"x": "q"}), ValueError, "keys are inputs"),
        (dict(bound="memory"), ValueError, "bound must be"),
        (dict(name="my task"), ValueError, "identifier"),
    ],
)
def test_task_from_kernel_refuses_bad_arguments_saying_what(change, error, says):
    with pytest.raises(error, match=says):
        _saxpy_task(SAXPY_CUDA, **change)
