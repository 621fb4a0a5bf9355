"""The simulator's CUDA dialect: MLX's generated cuda_kernel text run on the CPU
with CUDA semantics (whole blocks, built-in indices, __shared__, warp
functions, atomics, cooperative groups) and the simulator's diagnostics."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.kernel.spec import CompileError, KernelFault, KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")


@pytest.fixture(scope="module")
def backend():
    return SimBackend(dialect="cuda", launch_timeout_s=30.0)


def make(backend, name, inputs, outputs, source, header="", **kw):
    return backend.kernel(
        KernelSpec(name, tuple(inputs), tuple(outputs), source, header, dialect="cuda", **kw)
    )


def test_dialect_must_match(backend):
    with pytest.raises(ValueError):
        backend.kernel(KernelSpec("k", (), ("o",), "o[0] = 1;"))


@pytest.mark.slow
def test_saxpy_scalars_are_pointers(backend):
    src = """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < N[0]) y_out[i] = a[0] * x[i] + y[i];
    """
    k = make(backend, "saxpy", ["x", "y", "a", "N"], ["y_out"], src)
    x = mx.arange(1000, dtype=mx.float32)
    (o,) = k(
        inputs=[x, mx.ones(1000), 2.0, mx.array(1000, dtype=mx.uint32)],
        output_shapes=[(1000,)],
        output_dtypes=[mx.float32],
        grid=(1000, 1, 1),
        threadgroup=(256, 1, 1),
    )
    np.testing.assert_array_equal(np.asarray(o), 2 * np.arange(1000) + 1)


@pytest.mark.slow
def test_whole_blocks_are_launched(backend):
    # 100 threads requested in blocks of 64: 128 run; the count says so.
    k = make(backend, "count", [], ["n"], "atomicAdd(&n[0], 1);")
    (n,) = k(
        inputs=[],
        output_shapes=[(1,)],
        output_dtypes=[mx.int32],
        grid=(100, 1, 1),
        threadgroup=(64, 1, 1),
        init_value=0,
    )
    assert int(n[0]) == 128
    # Without a guard the extra threads write past the end.
    k = make(backend, "noguard", [], ["o"], "o[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;")
    with pytest.raises(KernelFault) as e:
        for _ in range(2):  # placement alternates between end- and start-aligned
            k(
                inputs=[],
                output_shapes=[(100,)],
                output_dtypes=[mx.float32],
                grid=(100, 1, 1),
                threadgroup=(64, 1, 1),
            )
    assert e.value.kind == "out_of_bounds" and e.value.details["buffer"] == "o"
    assert "block" in e.value.message


@pytest.mark.slow
def test_indices_on_a_3d_launch(backend):
    src = """
        uint32_t gx = blockIdx.x * blockDim.x + threadIdx.x;
        uint32_t gy = blockIdx.y * blockDim.y + threadIdx.y;
        uint32_t gz = blockIdx.z * blockDim.z + threadIdx.z;
        uint32_t W = gridDim.x * blockDim.x, H = gridDim.y * blockDim.y;
        int* r = out + 12 * ((gz * H + gy) * W + gx);
        r[0] = threadIdx.x; r[1] = threadIdx.y; r[2] = threadIdx.z;
        r[3] = blockIdx.x; r[4] = blockIdx.y; r[5] = blockIdx.z;
        r[6] = blockDim.x; r[7] = blockDim.y; r[8] = blockDim.z;
        r[9] = gridDim.x; r[10] = gridDim.y; r[11] = gridDim.z + warpSize * 0 + WARP_SIZE * 0;
    """
    k = make(backend, "idx3", [], ["out"], src)
    grid, tg = (5, 3, 2), (2, 2, 4)
    block = tuple(min(t, g) for t, g in zip(tg, grid))  # (2, 2, 2)
    blocks = tuple(-(-g // t) for g, t in zip(grid, tg))  # (3, 2, 1)
    W, H, D = (b * n for b, n in zip(block, blocks))
    (o,) = k(
        inputs=[],
        output_shapes=[(D, H, W, 12)],
        output_dtypes=[mx.int32],
        grid=grid,
        threadgroup=tg,
    )
    z, y, x = np.meshgrid(np.arange(D), np.arange(H), np.arange(W), indexing="ij")
    want = np.stack(
        [
            x % 2,
            y % 2,
            z % 2,
            x // 2,
            y // 2,
            z // 2,
            *(np.full_like(x, v) for v in block + blocks),
        ],
        axis=-1,
    )
    np.testing.assert_array_equal(np.asarray(o), want)


@pytest.mark.slow
def test_shared_tile_reverse_with_syncthreads(backend):
    src = """
        __shared__ float tile[64];
        int t = threadIdx.x;
        int base = blockIdx.x * 64;
        tile[t] = inp[base + t];
        __syncthreads();
        out[base + t] = tile[63 - t];
    """
    k = make(backend, "rev", ["inp"], ["out"], src)
    x = mx.arange(256, dtype=mx.float32)
    (o,) = k(
        inputs=[x],
        output_shapes=[(256,)],
        output_dtypes=[mx.float32],
        grid=(256, 1, 1),
        threadgroup=(64, 1, 1),
    )
    np.testing.assert_array_equal(np.asarray(o), np.arange(256).reshape(4, 64)[:, ::-1].reshape(-1))


@pytest.mark.slow
def test_dynamic_shared_memory(backend):
    @dataclass(frozen=True)
    class Spec(KernelSpec):
        shared_memory: int = 0

    src = """
        extern __shared__ float smem[];
        int t = threadIdx.x;
        smem[t] = inp[blockIdx.x * 32 + t] * 2.0f;
        __syncthreads();
        out[blockIdx.x * 32 + t] = smem[31 - t];
    """
    k = backend.kernel(Spec("dyn", ("inp",), ("out",), src, dialect="cuda", shared_memory=128))
    x = mx.arange(64, dtype=mx.float32)
    (o,) = k(
        inputs=[x],
        output_shapes=[(64,)],
        output_dtypes=[mx.float32],
        grid=(64, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_array_equal(
        np.asarray(o), 2 * np.arange(64).reshape(2, 32)[:, ::-1].reshape(-1)
    )
    # Without shared_memory bytes the launch is refused with a clear message.
    k0 = make(backend, "dyn0", ["inp"], ["out"], src)
    with pytest.raises(KernelFault) as e:
        k0(
            inputs=[x],
            output_shapes=[(64,)],
            output_dtypes=[mx.float32],
            grid=(64, 1, 1),
            threadgroup=(32, 1, 1),
        )
    assert e.value.kind == "launch" and "shared_memory" in e.value.message


# ---------------------------------------------------------------- warp functions
WARP_OPS = {
    "shfl_idx": "__shfl_sync(0xffffffffu, v, (lane * 7 + 3) % 32)",
    "shfl_idx_w8": "__shfl_sync(0xffffffffu, v, lane + 3, 8)",
    "shfl_up": "__shfl_up_sync(0xffffffffu, v, 3)",
    "shfl_up_w8": "__shfl_up_sync(0xffffffffu, v, 2, 8)",
    "shfl_down": "__shfl_down_sync(0xffffffffu, v, 3)",
    "shfl_down_w8": "__shfl_down_sync(0xffffffffu, v, 2, 8)",
    "shfl_xor": "__shfl_xor_sync(0xffffffffu, v, 5)",
    "shfl_xor_w8": "__shfl_xor_sync(0xffffffffu, v, 12, 8)",
    "ballot": "(int)__ballot_sync(0xffffffffu, v % 3 == 0)",
    "any": "__any_sync(0xffffffffu, v % 37 == 0)",
    "all": "__all_sync(0xffffffffu, v >= 0)",
    "all_false": "__all_sync(0xffffffffu, v % 2 == 0)",
    "activemask": "(lane < 20 ? (int)__activemask() : -1)",
    "reduce_add": "__reduce_add_sync(0xffffffffu, v)",
    "reduce_min": "__reduce_min_sync(0xffffffffu, v - 50)",
    "reduce_max": "(int)__reduce_max_sync(0xffffffffu, (unsigned)v)",
    "reduce_and": "(int)__reduce_and_sync(0xffffffffu, (unsigned)v | 1u)",
    "reduce_or": "(int)__reduce_or_sync(0xffffffffu, (unsigned)v)",
    "reduce_xor": "(int)__reduce_xor_sync(0xffffffffu, (unsigned)v)",
    "match_any": "(int)__match_any_sync(0xffffffffu, v % 4)",
    "loop_sum": "warp_sum(v)",
    "tile8_down": "tile8.shfl_down(v, 1)",
    "tile8_rank": "(int)(tile8.thread_rank() * 100 + tile8.meta_group_rank())",
    "tile8_reduce": "cg::reduce(tile8, v, cg::plus<int>())",
}


def _segments(a, w):
    return a.reshape(-1, w)


def _model(name, v):
    """v: values of one warp (32 lanes) -> expected results."""
    lane = np.arange(32)
    out = np.empty(32, dtype=np.int64)
    if name == "shfl_idx":
        return v[(lane * 7 + 3) % 32]
    if name == "shfl_idx_w8":
        return v[lane // 8 * 8 + (lane + 3) % 8]
    if name in ("shfl_up", "shfl_up_w8", "shfl_down", "shfl_down_w8"):
        d, w = (3, 32) if not name.endswith("w8") else (2, 8)
        li = lane % w
        for l in lane:
            if name.startswith("shfl_up"):
                out[l] = v[l - d] if li[l] - d >= 0 else v[l]
            else:
                out[l] = v[l + d] if li[l] + d < w else v[l]
        return out
    if name == "shfl_xor":
        return v[lane ^ 5]
    if name == "shfl_xor_w8":
        src = lane ^ 12
        return np.where(src // 8 > lane // 8, v, v[src])
    if name == "ballot":
        bits = sum(1 << int(l) for l in lane if v[l] % 3 == 0)
        return np.full(32, np.int64(bits).astype(np.uint32).astype(np.int32))
    if name == "any":
        return np.full(32, int(np.any(v % 37 == 0)))
    if name == "all":
        return np.full(32, 1)
    if name == "all_false":
        return np.full(32, int(np.all(v % 2 == 0)))
    if name == "activemask":
        return np.where(lane < 20, (1 << 20) - 1, -1)
    if name == "reduce_add":
        return np.full(32, v.sum())
    if name == "reduce_min":
        return np.full(32, (v - 50).min())
    if name == "reduce_max":
        return np.full(32, v.max())
    if name == "reduce_and":
        return np.full(32, np.bitwise_and.reduce(v | 1))
    if name == "reduce_or":
        return np.full(32, np.bitwise_or.reduce(v))
    if name == "reduce_xor":
        return np.full(32, np.bitwise_xor.reduce(v))
    if name == "match_any":
        return (
            np.array(
                [sum(1 << int(k) for k in lane if v[k] % 4 == v[l] % 4) for l in lane],
                dtype=np.int64,
            )
            .astype(np.uint32)
            .astype(np.int32)
        )
    if name == "loop_sum":
        return np.full(32, v.sum())  # lane 0's sum is the warp's; others partial -> see below
    if name == "tile8_down":
        return np.where(lane % 8 < 7, v[np.minimum(lane + 1, 31)], v)
    if name == "tile8_rank":
        return (lane % 8) * 100 + lane // 8  # within a warp; meta rank adds warp * 4 below
    if name == "tile8_reduce":
        return np.repeat(_segments(v, 8).sum(axis=1), 8)
    raise KeyError(name)


@pytest.fixture(scope="module")
def warp_results(backend):
    header = """
__device__ int warp_sum(int v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}
"""
    lines = [
        "int i = blockIdx.x * blockDim.x + threadIdx.x;",
        "int lane = threadIdx.x % 32;",
        "int v = x[i];",
        "auto tile8 = cg::tiled_partition<8>(cg::this_thread_block());",
        "int r = 0;",
    ]
    for k, expr in enumerate(WARP_OPS.values()):
        lines.append(f"r = {expr}; out[{k} * n[0] + i] = r;")
    k = make(backend, "warps", ["x", "n"], ["out"], "\n".join(lines), header)
    n = 128
    rng = np.random.default_rng(0)
    x = rng.integers(0, 100, n).astype(np.int32)
    (o,) = k(
        inputs=[mx.array(x), mx.array(n, dtype=mx.int32)],
        output_shapes=[(len(WARP_OPS), n)],
        output_dtypes=[mx.int32],
        grid=(n, 1, 1),
        threadgroup=(64, 1, 1),
    )
    return x, np.asarray(o)


@pytest.mark.parametrize("name", list(WARP_OPS))
@pytest.mark.slow
def test_warp_function_matches_model(warp_results, name):
    x, o = warp_results
    got = o[list(WARP_OPS).index(name)]
    for w in range(len(x) // 32):
        v = x[w * 32 : (w + 1) * 32].astype(np.int64)
        want = _model(name, v)
        g = got[w * 32 : (w + 1) * 32]
        if name == "loop_sum":
            assert g[0] == v.sum()
            continue
        if name == "tile8_rank":
            want = want + (w % 2) * 4  # two warps per block of 64
        np.testing.assert_array_equal(g, want, err_msg=f"{name}, warp {w}")


# ---------------------------------------------------------------- atomics, cg, types
@pytest.mark.slow
def test_atomics_from_many_threads(backend):
    src = """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= 1000) return;
        atomicAdd(&ic[i % 4], 1);
        atomicAdd(&fc[i % 4], 0.5f);
        atomicMax(&mx_[0], (int)((i * 37) % 1000));
        atomicMin(&mn[0], (int)((i * 37) % 1000) - 5);
        atomicAdd(&u64[0], 1ull << 33);
        atomicCAS(&cas[0], 0, (int)i + 1);
        atomicOr(&bits[0], 1u << (i % 32));
        atomicSub(&sub[0], 2);
    """
    k = make(backend, "atom", [], ["ic", "fc", "mx_", "mn", "u64", "cas", "bits", "sub"], src)
    outs = k(
        inputs=[],
        output_shapes=[(4,), (4,), (1,), (1,), (1,), (1,), (1,), (1,)],
        output_dtypes=[
            mx.int32,
            mx.float32,
            mx.int32,
            mx.int32,
            mx.uint64,
            mx.int32,
            mx.uint32,
            mx.int32,
        ],
        grid=(1000, 1, 1),
        threadgroup=(128, 1, 1),
        init_value=0,
    )
    ic, fc, mxv, mn, u64, cas, bits, sub = (np.asarray(a) for a in outs)
    np.testing.assert_array_equal(ic, [250] * 4)
    np.testing.assert_array_equal(fc, [125.0] * 4)
    assert mxv[0] == 999 and mn[0] == -5
    assert int(u64[0]) == 1000 << 33
    assert cas[0] == 1 and bits[0] == 0xFFFFFFFF and sub[0] == -2000


@pytest.mark.slow
def test_cooperative_groups_thread_rank(backend):
    src = """
        auto grid = cg::this_grid();
        auto block = cg::this_thread_block();
        unsigned long long r = grid.thread_rank();
        out[r] = (int)r;
        lin[r] = (int)(block.thread_rank() * 1000 + block.size());
        block.sync();
    """
    k = make(backend, "cgrank", [], ["out", "lin"], src)
    # grid (10, 6) in blocks of (4, 4): 3 x 2 blocks of 16, all 96 threads.
    o, lin = k(
        inputs=[],
        output_shapes=[(96,), (96,)],
        output_dtypes=[mx.int32, mx.int32],
        grid=(10, 6, 1),
        threadgroup=(4, 4, 1),
    )
    np.testing.assert_array_equal(np.asarray(o), np.arange(96))
    np.testing.assert_array_equal(np.asarray(lin), (np.arange(96) % 16) * 1000 + 16)


@pytest.mark.slow
def test_vector_types_and_half(backend):
    src = """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n4[0]) return;
        float4 v = reinterpret_cast<const float4*>(x)[i];
        reinterpret_cast<float4*>(out)[i] = make_float4(v.w, v.z, v.y, v.x + 100.0f);
        float2 p = make_float2(__half2float(h[i]), 0.5f);
        hout[i] = __float2half(p.x * 2.0f + p.y);
        int3 q = make_int3(1, 2, 3);
        hout[i] = hout[i] + (__half)(q.x + q.y + q.z - 6);
    """
    k = make(backend, "vec4", ["x", "h", "n4"], ["out", "hout"], src)
    x = np.arange(32, dtype=np.float32)
    h = (np.arange(8) * 0.25).astype(np.float16)
    o, ho = k(
        inputs=[mx.array(x), mx.array(h), mx.array(8, dtype=mx.uint32)],
        output_shapes=[(32,), (8,)],
        output_dtypes=[mx.float32, mx.float16],
        grid=(8, 1, 1),
        threadgroup=(8, 1, 1),
    )
    want = x.reshape(8, 4)[:, ::-1].copy()
    want[:, 3] += 100
    np.testing.assert_array_equal(np.asarray(o).reshape(8, 4), want)
    np.testing.assert_array_equal(
        np.asarray(ho), (h.astype(np.float32) * 2 + 0.5).astype(np.float16)
    )


@pytest.mark.slow
def test_vector_types_have_no_arithmetic(backend):
    k = make(
        backend,
        "vecadd",
        [],
        ["o"],
        "float4 a = make_float4(1, 2, 3, 4);\nfloat4 b = a + a;\no[0] = b.x;",
        source_file="cand.cu",
        body_line=20,
    )
    with pytest.raises(CompileError) as e:
        k(
            inputs=[],
            output_shapes=[(1,)],
            output_dtypes=[mx.float32],
            grid=(1, 1, 1),
            threadgroup=(1, 1, 1),
        )
    assert e.value.line == 21


@pytest.mark.slow
def test_template_params_shapes_and_math(backend):
    src = """
        int i = threadIdx.x + blockIdx.x * blockDim.x;
        if (i >= inp_shape[0] * inp_shape[1]) return;
        int64_t loc = elem_to_loc(i, inp_shape.data(), inp_strides.data(), inp_ndim);
        T v = static_cast<T>(inp[loc]) * N;
        if (B) v = sqrtf(v) + rsqrtf(4.0f) + __expf(0.0f) + fminf(v, 0.0f) + min(3, 4) - max(1u, 1u);
        out[i] = v + __popc(0xF0u) - 4 + __clz(1) - 31 + __ffs(8) - 4 + (int)__brev(1u << 31) - 1
                 + __saturatef(2.0f) - 1.0f + cuda::std::numeric_limits<float>::infinity() * 0.0f;
    """
    k = make(backend, "tmpl", ["inp"], ["out"], src)
    a = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    (o,) = k(
        inputs=[a],
        output_shapes=[(12,)],
        output_dtypes=[mx.float32],
        grid=(12, 1, 1),
        threadgroup=(8, 1, 1),
        template=[("T", mx.float32), ("N", 4), ("B", True)],
    )
    got = np.asarray(o)
    assert np.isnan(got).all()  # inf * 0 is NaN (MLX 0.32.4 has no `inf` macro)
    src2 = src.replace(" + cuda::std::numeric_limits<float>::infinity() * 0.0f", "")
    k2 = make(backend, "tmpl2", ["inp"], ["out"], src2)
    (o,) = k2(
        inputs=[a],
        output_shapes=[(12,)],
        output_dtypes=[mx.float32],
        grid=(12, 1, 1),
        threadgroup=(8, 1, 1),
        template=[("T", mx.float32), ("N", 4), ("B", True)],
    )
    np.testing.assert_allclose(
        np.asarray(o), np.sqrt(np.arange(12) * 4) + 0.5 + 1 + 0 + 3 - 1, rtol=1e-6
    )


@pytest.mark.slow
def test_zero_d_input_named_in_the_source_is_refused(backend):
    # `s_shape` occurs in the body: MLX passes the argument, the signature has no parameter.
    k = make(backend, "quirk", ["x", "s"], ["o"], "// s_shape unused\no[0] = x[0] * s[0];")
    with pytest.raises(KernelFault) as e:
        k(
            inputs=[mx.ones(4), 2.0],
            output_shapes=[(1,)],
            output_dtypes=[mx.float32],
            grid=(1, 1, 1),
            threadgroup=(1, 1, 1),
        )
    assert e.value.kind == "launch" and "misaligned" in e.value.message


# ---------------------------------------------------------------- diagnostics
@pytest.mark.slow
def test_compile_error_maps_to_candidate_lines(backend):
    k = make(
        backend,
        "cerr",
        [],
        ["o"],
        "int i = threadIdx.x;\no[i] = undefined_name;",
        source_file="cand.cu",
        body_line=40,
    )
    with pytest.raises(CompileError) as e:
        k(
            inputs=[],
            output_shapes=[(1,)],
            output_dtypes=[mx.float32],
            grid=(1, 1, 1),
            threadgroup=(1, 1, 1),
        )
    assert e.value.line == 41 and "undefined_name" in e.value.message
    k = make(
        backend,
        "herr",
        [],
        ["o"],
        "o[0] = f();",
        header="__device__ float f() {\n  return nope;\n}\n",
        source_file="cand.cu",
        header_line=3,
        body_line=10,
    )
    with pytest.raises(CompileError) as e:
        k(
            inputs=[],
            output_shapes=[(1,)],
            output_dtypes=[mx.float32],
            grid=(1, 1, 1),
            threadgroup=(1, 1, 1),
        )
    assert e.value.line == 4


def test_barrier_divergence_early_return(backend):
    src = """
        __shared__ float s[64];
        if (threadIdx.x >= 40) return;
        s[threadIdx.x] = 1.0f;
        __syncthreads();
        o[threadIdx.x] = s[0];
    """
    k = make(backend, "div", [], ["o"], src, source_file="cand.cu", body_line=1)
    with pytest.raises(KernelFault) as e:
        k(
            inputs=[],
            output_shapes=[(64,)],
            output_dtypes=[mx.float32],
            grid=(64, 1, 1),
            threadgroup=(64, 1, 1),
        )
    assert e.value.kind == "barrier_divergence"
    assert e.value.details["lines"] == [5] and "__syncthreads" in e.value.message
    assert e.value.details["n_done"] == 24


@pytest.mark.slow
def test_timeout():
    be = SimBackend(dialect="cuda", launch_timeout_s=0.5)
    k = be.kernel(
        KernelSpec(
            "spin", ("n",), ("o",), "int k = 0; while (n[0] > 0) { k++; } o[0] = k;", dialect="cuda"
        )
    )
    with pytest.raises(KernelFault) as e:
        k(
            inputs=[mx.array(1, dtype=mx.int32)],
            output_shapes=[(1,)],
            output_dtypes=[mx.int32],
            grid=(1, 1, 1),
            threadgroup=(1, 1, 1),
        )
    assert e.value.kind == "timeout"


def test_clock64_starts_again_at_every_launch(backend):
    """clock64() counts calls within a launch only: a kernel cannot number its
    launches with it (and so tell a timed run from a check that comes after)."""
    src = """
        if (threadIdx.x == 0) o[0] = (float)clock64();
    """
    k = make(backend, "clock_probe", [], ["o"], src)
    seen = []
    for _ in range(3):
        (o,) = k(
            inputs=[],
            output_shapes=[(1,)],
            output_dtypes=[mx.float32],
            grid=(32, 1, 1),
            threadgroup=(32, 1, 1),
        )
        seen.append(float(np.asarray(o)[0]))
    assert seen == [seen[0]] * 3
