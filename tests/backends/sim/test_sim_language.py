"""Metal language features through real kernels on the CPU simulator.

Each test builds an `mx.fast.metal_kernel`-style kernel with SimBackend and
checks its outputs against NumPy. The prelude itself is unit-tested in
test_sim_prelude.py; here the whole path is exercised: MLX's generated
signature, the rewrite, the prelude, the runtime (threadgroups, barriers).
"""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
sim = pytest.importorskip("mlxsci.backends.sim")

from mlxsci.kernel.spec import CompileError, KernelSpec  # noqa: E402

SimBackend = sim.SimBackend


@pytest.fixture(scope="module")
def backend():
    return SimBackend()


def run(
    backend,
    body,
    inputs,
    output_shapes,
    output_dtypes,
    grid,
    threadgroup,
    *,
    input_names=None,
    output_names=None,
    header="",
    atomic_outputs=False,
    init_value=None,
    template=None,
    name="lang",
):
    input_names = input_names or tuple(f"in{i}" for i in range(len(inputs)))
    output_names = output_names or tuple(f"out{i}" for i in range(len(output_shapes)))
    spec = KernelSpec(
        name=name,
        input_names=tuple(input_names),
        output_names=tuple(output_names),
        source=body,
        header=header,
        atomic_outputs=atomic_outputs,
    )
    k = backend.kernel(spec)
    outs = k(
        inputs=[mx.array(x) if isinstance(x, np.ndarray) else x for x in inputs],
        output_shapes=output_shapes,
        output_dtypes=output_dtypes,
        grid=grid,
        threadgroup=threadgroup,
        template=template,
        init_value=init_value,
    )
    return [np.array(o.astype(mx.float32)) if o.dtype == mx.bfloat16 else np.array(o) for o in outs]


@pytest.mark.slow
def test_vector_constructors_swizzles_and_conversions(backend):
    x = (np.arange(64, dtype=np.float32) * 0.37 - 5).astype(np.float32)
    body = """
    uint i = thread_position_in_grid.x;
    float a = x[i];
    float2 p = float2(a, a + 1.0f);
    float4 v = float4(p.yx, 2.0f, 1);          // (a+1, a, 2, 1)
    float3 w = v.zyx;                           // (2, a, a+1)
    v.xy = w.yz * 2.0f;                         // (2a, 2a+2, 2, 1)
    int4 iv = int4(v);                          // truncation toward zero
    float4 back = (float4)iv + float4(uint4(1u)) + static_cast<float4>(int4(0, 0, 1, 1));
    half4 h = half4(v);
    bool4 m = v > 0.0f;
    out[4 * i + 0] = back.x;
    out[4 * i + 1] = back.y;
    out[4 * i + 2] = back.z + float(h.w) + (all(m.zw) ? 10.0f : 0.0f);
    out[4 * i + 3] = dot(float4(w, 1.0f), float4(1.0f)) + select(0.0f, 100.0f, m.x);
    """
    (out,) = run(
        backend,
        body,
        [x],
        [(256,)],
        [mx.float32],
        (64, 1, 1),
        (32, 1, 1),
        input_names=("x",),
        output_names=("out",),
    )
    out = out.reshape(64, 4)
    a = x.astype(np.float64)
    np.testing.assert_array_equal(out[:, 0], np.trunc(np.float32(2) * x) + 1)
    np.testing.assert_array_equal(out[:, 1], np.trunc(np.float32(2) * x + 2) + 1)
    np.testing.assert_array_equal(out[:, 2], 2 + 1 + 1 + 1 + 10)
    np.testing.assert_allclose(out[:, 3], 2 + a + a + 1 + 1 + 100 * (2 * a > 0), rtol=1e-6)


def test_math_functions(backend):
    x = np.linspace(-3, 3, 100).astype(np.float32)
    body = """
    uint i = thread_position_in_grid.x;
    float v = x[i];
    out[i] = sin(v) + metal::exp(-v * v) + sqrt(abs(v)) + fast::tanh(v)
           + metal::precise::pow(fabs(v), 1.5f) + fract(v) + clamp(v, -1.0f, 1.0f)
           + rsqrt(1.0f + v * v) + atan2(v, 2.0f) + M_PI_F + fmod(v, 0.7f);
    """
    (out,) = run(
        backend,
        body,
        [x],
        [(100,)],
        [mx.float32],
        (100, 1, 1),
        (32, 1, 1),
        input_names=("x",),
        output_names=("out",),
    )
    v = x.astype(np.float64)
    want = (
        np.sin(v)
        + np.exp(-v * v)
        + np.sqrt(np.abs(v))
        + np.tanh(v)
        + np.abs(v) ** 1.5
        + (v - np.floor(v))
        + np.clip(v, -1, 1)
        + 1 / np.sqrt(1 + v * v)
        + np.arctan2(v, 2)
        + np.pi
        + np.fmod(v, np.float32(0.7))
    )
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_half_buffers_round_like_numpy(backend):
    rng = np.random.default_rng(0)
    a = rng.uniform(-8, 8, 256).astype(np.float16)
    b = rng.uniform(0.5, 4, 256).astype(np.float16)
    body = """
    uint i = thread_position_in_grid.x;
    half x = a[i], y = b[i];
    out[i] = x * y + x - y / (x + 0.5h);
    """
    (out,) = run(
        backend,
        body,
        [a, b],
        [(256,)],
        [mx.float16],
        (256, 1, 1),
        (64, 1, 1),
        input_names=("a", "b"),
        output_names=("out",),
    )
    with np.errstate(all="ignore"):
        want = a * b + a - b / (a + np.float16(0.5))
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


@pytest.mark.slow
def test_bfloat16_buffers(backend):
    x = mx.array(np.linspace(-2, 2, 64).astype(np.float32)).astype(mx.bfloat16)
    body = """
    uint i = thread_position_in_grid.x;
    bfloat16_t v = x[i];
    out[i] = v * bfloat16_t(3.0f);
    outf[i] = float(v) * 3.0f;
    """
    out, outf = run(
        backend,
        body,
        [x],
        [(64,), (64,)],
        [mx.bfloat16, mx.float32],
        (64, 1, 1),
        (32, 1, 1),
        input_names=("x",),
        output_names=("out", "outf"),
    )
    xf = np.array(x.astype(mx.float32))
    want = np.array((x * mx.array(3.0, dtype=mx.bfloat16)).astype(mx.float32))
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(outf, xf * 3)


@pytest.mark.slow
def test_device_atomics_int(backend):
    n = 1000
    body = """
    uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit(&out[0], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&out[1 + (i % 4)], int(i), memory_order_relaxed);
    atomic_fetch_max_explicit(&out[5], int(i), memory_order_relaxed);
    atomic_fetch_min_explicit(&out[6], -int(i), memory_order_relaxed);
    atomic_fetch_or_explicit(&out[7], 1 << (i % 31), memory_order_relaxed);
    """
    (out,) = run(
        backend,
        body,
        [np.zeros(8, np.float32)],
        [(8,)],
        [mx.int32],
        (n, 1, 1),
        (64, 1, 1),
        output_names=("out",),
        atomic_outputs=True,
        init_value=0,
    )
    i = np.arange(n)
    want = [n] + [int(i[i % 4 == r].sum()) for r in range(4)] + [n - 1, -(n - 1), 0x7FFFFFFF]
    assert out.tolist() == want


@pytest.mark.slow
def test_device_atomics_float_and_uint(backend):
    x = np.linspace(0, 1, 512).astype(np.float32)
    body = """
    uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit(&total[0], x[i], memory_order_relaxed);
    """
    (total,) = run(
        backend,
        body,
        [x],
        [(1,)],
        [mx.float32],
        (512, 1, 1),
        (128, 1, 1),
        input_names=("x",),
        output_names=("total",),
        atomic_outputs=True,
        init_value=0,
    )
    np.testing.assert_allclose(total, [x.astype(np.float64).sum()], rtol=1e-5)

    body = """
    uint i = thread_position_in_grid.x;
    uint old = atomic_fetch_add_explicit(&c[0], 1u, memory_order_relaxed);
    atomic_fetch_max_explicit(&c[1], old, memory_order_relaxed);
    uint expected = 0u;
    // only the first thread finds 0 there and swaps in its id + 100
    atomic_compare_exchange_weak_explicit(&c[2], &expected, i + 100u,
                                          memory_order_relaxed, memory_order_relaxed);
    """
    (c,) = run(
        backend,
        body,
        [x],
        [(3,)],
        [mx.uint32],
        (300, 1, 1),
        (64, 1, 1),
        input_names=("x",),
        output_names=("c",),
        atomic_outputs=True,
        init_value=0,
    )
    assert c[0] == 300 and c[1] == 299 and 100 <= c[2] < 400


@pytest.mark.slow
def test_threadgroup_atomics_and_arrays(backend):
    x = np.random.default_rng(1).uniform(0, 1, 256).astype(np.float32)
    body = """
    threadgroup atomic_int count;
    threadgroup float tile[64];
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint grp = threadgroup_position_in_grid.x;
    if (lid == 0) atomic_store_explicit(&count, 0, memory_order_relaxed);
    tile[lid] = x[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (x[gid] > 0.5f) atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    for (uint s = 32; s > 0; s >>= 1) {
        if (lid < s) tile[lid] += tile[lid + s];
        threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    }
    if (lid == 0) {
        sums[grp] = tile[0];
        counts[grp] = atomic_load_explicit(&count, memory_order_relaxed);
    }
    """
    sums, counts = run(
        backend,
        body,
        [x],
        [(4,), (4,)],
        [mx.float32, mx.int32],
        (256, 1, 1),
        (64, 1, 1),
        input_names=("x",),
        output_names=("sums", "counts"),
    )
    g = x.reshape(4, 64)
    np.testing.assert_allclose(sums, g.astype(np.float64).sum(1), rtol=1e-5)
    assert counts.tolist() == (g > 0.5).sum(1).tolist()


@pytest.mark.slow
def test_threadgroup_vector_arrays_and_2d_tiles(backend):
    x = np.arange(16 * 16, dtype=np.float32).reshape(16, 16)
    body = """
    threadgroup float2 pairs[8][8];
    threadgroup float tile[10][10];
    uint2 l = thread_position_in_threadgroup.xy;
    uint2 g = thread_position_in_grid.xy;
    float v = x[g.y * 16 + g.x];
    pairs[l.y][l.x] = float2(v, -v);
    tile[l.y + 1][l.x + 1] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float2 q = pairs[7 - l.y][7 - l.x];
    out[g.y * 16 + g.x] = q.x + q.y * 0.5f + tile[l.y + 1][l.x + 1];
    """
    (out,) = run(
        backend,
        body,
        [x],
        [(16, 16)],
        [mx.float32],
        (16, 16, 1),
        (8, 8, 1),
        input_names=("x",),
        output_names=("out",),
    )
    want = np.empty_like(x)
    for gy in range(16):
        for gx in range(16):
            by, bx, ly, lx = gy // 8 * 8, gx // 8 * 8, gy % 8, gx % 8
            m = x[by + 7 - ly, bx + 7 - lx]
            want[gy, gx] = m * 0.5 + x[gy, gx]
    np.testing.assert_array_equal(out, want)


def test_elem_to_loc_and_shape_params(backend):
    x = mx.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    body = """
    uint i = thread_position_in_grid.x;
    int64_t loc = elem_to_loc(i, x_shape, x_strides, x_ndim);
    out[i] = x[loc] + float(ceildiv(x_ndim, 2));
    """
    (out,) = run(
        backend,
        body,
        [x],
        [(24,)],
        [mx.float32],
        (24, 1, 1),
        (8, 1, 1),
        input_names=("x",),
        output_names=("out",),
    )
    np.testing.assert_array_equal(out, np.arange(24) + 2)


def test_header_helpers_templates_and_packed(backend):
    header = """#include <metal_stdlib>
using namespace metal;

struct Body { packed_float3 pos; float mass; };

inline float3 centre(const device float* p, uint i) {
    return float3(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
}
template <typename T> inline T sq(T v) { return v * v; }
constant float WEIGHTS[3] = {0.5f, 0.25f, 0.25f};
"""
    rng = np.random.default_rng(3)
    p = rng.normal(size=(32, 3)).astype(np.float32)
    body = """
    uint i = thread_position_in_grid.x;
    const device packed_float3* pk = (const device packed_float3*)pos;
    float3 a = pk[i];
    float3 b = centre(pos, i);
    Body bd;
    bd.pos = a * 2.0f;
    bd.mass = length(b);
    float3 c = bd.pos;
    threadgroup T buf[N];
    buf[i % N] = T(0);
    out[i] = sq(bd.mass) + dot(c, float3(WEIGHTS[0], WEIGHTS[1], WEIGHTS[2])) + float(sizeof(Body))
           + float(buf[i % N]);
    """
    (out,) = run(
        backend,
        body,
        [p],
        [(32,)],
        [mx.float32],
        (32, 1, 1),
        (32, 1, 1),
        input_names=("pos",),
        output_names=("out",),
        header=header,
        template=[("T", mx.float32), ("N", 4)],
    )
    want = (p.astype(np.float64) ** 2).sum(1) + 2 * p @ np.array([0.5, 0.25, 0.25]) + 16
    np.testing.assert_allclose(out, want, rtol=1e-5)


def test_compile_error_maps_to_candidate_line(backend):
    body = "uint i = thread_position_in_grid.x;\nfloat4 v = float4(1.0f, 2.0f);\nout[i] = v.x;\n"
    spec = KernelSpec(
        name="bad",
        input_names=("x",),
        output_names=("out",),
        source=body,
        source_file="cand.py",
        body_line=20,
    )
    k = backend.kernel(spec)
    with pytest.raises(CompileError) as ei:
        k(
            inputs=[mx.zeros((8,))],
            output_shapes=[(8,)],
            output_dtypes=[mx.float32],
            grid=(8, 1, 1),
            threadgroup=(8, 1, 1),
        )
    assert ei.value.line == 21, ei.value


def test_program_scope_constants_are_constant_expressions(backend):
    # Metal's program-scope `constant` variables are read-only and usable as
    # array bounds; a table in `constant` memory reads like any array.
    header = "constant uint TILE = 8;\nconstant float W[3] = {0.5f, 1.0f, 2.0f};\n"
    body = """
    threadgroup float buf[TILE];
    uint i = thread_position_in_grid.x;
    uint l = thread_position_in_threadgroup.x;
    buf[l] = x[i] * W[i % 3];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = buf[TILE - 1 - l];
    """
    x = np.arange(32, dtype=np.float32)
    (out,) = run(
        backend,
        body,
        [x],
        [(32,)],
        [mx.float32],
        (32, 1, 1),
        (8, 1, 1),
        input_names=("x",),
        output_names=("out",),
        header=header,
    )
    scaled = x * np.array([0.5, 1.0, 2.0], dtype=np.float32)[np.arange(32) % 3]
    np.testing.assert_array_equal(out, scaled.reshape(4, 8)[:, ::-1].reshape(-1))
