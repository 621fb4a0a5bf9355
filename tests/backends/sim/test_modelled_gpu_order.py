"""The modelled GPU's clock orders kernels as a GPU does (issue 36, point 8).

Each test launches two kernels we wrote that do the same work in two ways
whose order on a GPU follows from how GPUs work, in both dialects (Metal on
the modelled apple-m1-pro, CUDA on the modelled nvidia-h100), and asserts
the order of their modelled times: never an absolute time, never host time.
Beside each order, the count that explains it (SimBackend.model_parts: the
runtime's counts of the profiled launch and the model's bounds), so a test
that passes passes for the reason it names.

A launch is timed as the sim timer times the first launch of its kind
(mlxsci/timing/timers.py, SimTimer.time; mlxsci/backends/sim/kernel.py,
_timing_of): the backend listens (`activity`) with no launch modelled yet
(`launch_models = {}`), so the launch runs the profiled variant
(mlxsci/backends/sim/profile.py) and its modelled seconds are recorded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend, profile
from mlxsci.kernel.spec import KernelSpec

pytestmark = [
    pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available"),
    pytest.mark.skipif(not profile.supported(), reason="the profiled build reads x86-64 assembly"),
]

DIALECTS = ("metal", "cuda")


@pytest.fixture(scope="module")
def backends() -> dict:
    return {d: SimBackend(dialect=d, launch_timeout_s=60.0) for d in DIALECTS}


@dataclass(frozen=True)
class Modelled:
    """One launch on the modelled GPU: its seconds, the runtime's counts and
    the model's bounds (SimBackend.model_parts), its outputs."""

    seconds: float
    counts: dict
    outputs: list


def kernel_of(backend: SimBackend, name: str, inputs, outputs, body: str):
    spec = KernelSpec(name, tuple(inputs), tuple(outputs), body, "", dialect=backend.dialect)
    return backend.kernel(spec)


def modelled(backend: SimBackend, kernel, **call) -> Modelled:
    """`kernel` launched once as the sim timer's first launch of its kind."""
    parts: dict = {}
    backend.activity = []
    backend.launch_models = {}
    backend.model_parts = parts
    try:
        outs = kernel(**call)
        records = backend.activity
    finally:
        backend.activity = None
        backend.launch_models = None
        backend.model_parts = None
    (record,) = records
    assert kernel.spec.name in parts, "the launch was not profiled"
    return Modelled(record[1], parts[kernel.spec.name], [np.asarray(o) for o in outs])


def launch(backend, name, params, outputs, body, **call) -> Modelled:
    return modelled(backend, kernel_of(backend, name, params, outputs, body), **call)


def one_d(n: int, threadgroup: int) -> dict:
    """A launch of n threads in groups of `threadgroup`, one float output of n."""
    return dict(
        output_shapes=[(n,)],
        output_dtypes=[mx.float32],
        grid=(n, 1, 1),
        threadgroup=(threadgroup, 1, 1),
    )


# ------------------------------------------------------------ coalescing
# Thread i reads x[(i * S) % N] (N a power of two, so `& (N - 1)`): S = 1 is
# coalesced, a simdgroup's 32 reads fall in 4 sectors; S = 33 scatters them
# over 32. The same instructions either way: S is an input, not a constant.
GATHER = {
    "metal": """
        uint i = thread_position_in_grid.x;
        out[i] = x[(i * uint(S)) & uint(N - 1)] * 2.0f + 1.0f;
    """,
    "cuda": """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        out[i] = x[(i * uint32_t(S[0])) & uint32_t(N[0] - 1)] * 2.0f + 1.0f;
    """,
}


# At 4096 threads the launch is latency-bound: the strided request's sectors
# pass its core's L1 one after another, so it waits longer as well as moving more.
@pytest.mark.parametrize("n", [4096, 262144])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_coalesced_loads_beat_strided_loads(backends, dialect, n):
    backend = backends[dialect]
    x = mx.random.normal((n,), key=mx.random.key(0))
    k = kernel_of(backend, "gather", ["x", "S", "N"], ["out"], GATHER[dialect])
    coalesced = modelled(backend, k, inputs=[x, 1, n], **one_d(n, 256))
    strided = modelled(backend, k, inputs=[x, 33, n], **one_d(n, 256))
    xs = np.asarray(x)
    idx = (np.arange(n) * 33) % n
    np.testing.assert_allclose(coalesced.outputs[0], xs * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(strided.outputs[0], xs[idx] * 2 + 1, rtol=1e-6)
    # The same SIMD instructions and memory instructions, more sectors (at
    # 262144 threads, estimates from a sample of the groups: every group
    # alike, so the same up to rounding).
    assert strided.counts["issue"] == pytest.approx(coalesced.counts["issue"], rel=1e-9)
    assert strided.counts["dev_requests"] == pytest.approx(coalesced.counts["dev_requests"])
    assert strided.counts["dev_sectors"] > 2 * coalesced.counts["dev_sectors"]
    assert coalesced.seconds < strided.seconds


# ------------------------------------------------------------ tiling
# heat2d's step on an N x N grid (edges copied). The naive kernel loads its
# cell and four neighbours from device memory; the tiled one has its group's
# 32 x 8 threads load the (8 + 2) x (32 + 2) tile once, together, into
# threadgroup memory (row pitch 35), wait at a barrier, and read the five
# values from there: one or two device loads per simdgroup instead of five.
NAIVE = {
    "metal": """
        const uint n = N;
        uint gx = thread_position_in_grid.x, gy = thread_position_in_grid.y;
        uint idx = gy * n + gx;
        float c = u[idx];
        if (gx == 0 || gy == 0 || gx == n - 1 || gy == n - 1) { out[idx] = c; return; }
        out[idx] = c + 0.1f * (u[idx - 1] + u[idx + 1] + u[idx - n] + u[idx + n] - 4.0f * c);
    """,
    "cuda": """
        const uint32_t n = uint32_t(N[0]);
        uint32_t gx = blockIdx.x * blockDim.x + threadIdx.x;
        uint32_t gy = blockIdx.y * blockDim.y + threadIdx.y;
        uint32_t idx = gy * n + gx;
        float c = u[idx];
        if (gx == 0 || gy == 0 || gx == n - 1 || gy == n - 1) { out[idx] = c; return; }
        out[idx] = c + 0.1f * (u[idx - 1] + u[idx + 1] + u[idx - n] + u[idx + n] - 4.0f * c);
    """,
}
TILED = {
    "metal": """
        constexpr uint TX = 32, TY = 8, P = 35;
        threadgroup float tile[(TY + 2) * P];
        const uint n = N;
        uint lx = thread_position_in_threadgroup.x, ly = thread_position_in_threadgroup.y;
        uint gx = thread_position_in_grid.x, gy = thread_position_in_grid.y;
        uint x0 = threadgroup_position_in_grid.x * TX, y0 = threadgroup_position_in_grid.y * TY;
        for (uint k = ly * TX + lx; k < (TX + 2) * (TY + 2); k += TX * TY) {
            uint r = k / (TX + 2), q = k % (TX + 2);
            int sx = clamp(int(x0 + q) - 1, 0, int(n) - 1);
            int sy = clamp(int(y0 + r) - 1, 0, int(n) - 1);
            tile[r * P + q] = u[uint(sy) * n + uint(sx)];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint t = (ly + 1) * P + lx + 1;
        float c = tile[t];
        uint idx = gy * n + gx;
        if (gx == 0 || gy == 0 || gx == n - 1 || gy == n - 1) { out[idx] = c; return; }
        out[idx] = c + 0.1f * (tile[t - 1] + tile[t + 1] + tile[t - P] + tile[t + P] - 4.0f * c);
    """,
    "cuda": """
        constexpr uint32_t TX = 32, TY = 8, P = 35;
        __shared__ float tile[(TY + 2) * P];
        const uint32_t n = uint32_t(N[0]);
        uint32_t lx = threadIdx.x, ly = threadIdx.y;
        uint32_t gx = blockIdx.x * TX + lx, gy = blockIdx.y * TY + ly;
        uint32_t x0 = blockIdx.x * TX, y0 = blockIdx.y * TY;
        for (uint32_t k = ly * TX + lx; k < (TX + 2) * (TY + 2); k += TX * TY) {
            uint32_t r = k / (TX + 2), q = k % (TX + 2);
            int sx = min(max(int(x0 + q) - 1, 0), int(n) - 1);
            int sy = min(max(int(y0 + r) - 1, 0), int(n) - 1);
            tile[r * P + q] = u[uint32_t(sy) * n + uint32_t(sx)];
        }
        __syncthreads();
        uint32_t t = (ly + 1) * P + lx + 1;
        float c = tile[t];
        uint32_t idx = gy * n + gx;
        if (gx == 0 || gy == 0 || gx == n - 1 || gy == n - 1) { out[idx] = c; return; }
        out[idx] = c + 0.1f * (tile[t - 1] + tile[t + 1] + tile[t - P] + tile[t + P] - 4.0f * c);
    """,
}


def heat_step(u: np.ndarray) -> np.ndarray:
    out = u.copy()
    c = u[1:-1, 1:-1]
    lap = u[1:-1, :-2] + u[1:-1, 2:] + u[:-2, 1:-1] + u[2:, 1:-1] - 4 * c
    out[1:-1, 1:-1] = c + np.float32(0.1) * lap
    return out


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_tiled_stencil_with_a_barrier_beats_the_naive_one_where_latency_bounds_it(
    backends, dialect
):
    # 64 x 64: 16 groups of 256 threads, fewer than the modelled GPU holds
    # at once, so each simdgroup's wait on device memory is what a launch
    # costs; the tiled kernel's simdgroups wait on two or three device
    # accesses, the naive one's on six or seven. (At larger sizes the model
    # charges the tiled kernel's extra instructions more than the naive
    # kernel's re-reads, which it lets a group's L1 catch whatever the L1's
    # size: reported with issue 36, not asserted here.)
    backend, n = backends[dialect], 64
    u = mx.random.normal((n * n,), key=mx.random.key(1))
    call = dict(
        inputs=[u, n],
        output_shapes=[(n * n,)],
        output_dtypes=[mx.float32],
        grid=(n, n, 1),
        threadgroup=(32, 8, 1),
    )
    naive = launch(backend, "heat_naive", ["u", "N"], ["out"], NAIVE[dialect], **call)
    tiled = launch(backend, "heat_tiled", ["u", "N"], ["out"], TILED[dialect], **call)
    want = heat_step(np.asarray(u).reshape(n, n)).reshape(-1)
    np.testing.assert_allclose(naive.outputs[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tiled.outputs[0], want, rtol=1e-5, atol=1e-6)
    assert tiled.counts["barriers"] > 0 and naive.counts["barriers"] == 0
    assert tiled.counts["tg_requests"] > 0
    assert tiled.counts["dev_requests"] < naive.counts["dev_requests"] / 1.5
    assert tiled.counts["path_cycles_max"] < naive.counts["path_cycles_max"]
    assert tiled.seconds < naive.seconds


# ------------------------------------------------------------ bank conflicts
# A 64 x 64 transpose through a 32 x 32 tile in threadgroup memory with row
# pitch P: each thread writes its row's element and reads its column's. With
# P = 32 a simdgroup's 32 reads of a column all fall in one bank (32-way
# conflict); with P = 33 each falls in its own.
TRANSPOSE = {
    "metal": """
        threadgroup float tile[32 * 33];
        const uint p = P, n = N;
        uint lx = thread_position_in_threadgroup.x, ly = thread_position_in_threadgroup.y;
        uint gx = thread_position_in_grid.x, gy = thread_position_in_grid.y;
        tile[ly * p + lx] = x[gy * n + gx];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint ox = threadgroup_position_in_grid.y * 32 + lx;
        uint oy = threadgroup_position_in_grid.x * 32 + ly;
        out[oy * n + ox] = tile[lx * p + ly];
    """,
    "cuda": """
        __shared__ float tile[32 * 33];
        const uint32_t p = uint32_t(P[0]), n = uint32_t(N[0]);
        uint32_t lx = threadIdx.x, ly = threadIdx.y;
        uint32_t gx = blockIdx.x * 32 + lx, gy = blockIdx.y * 32 + ly;
        tile[ly * p + lx] = x[gy * n + gx];
        __syncthreads();
        uint32_t ox = blockIdx.y * 32 + lx, oy = blockIdx.x * 32 + ly;
        out[oy * n + ox] = tile[lx * p + ly];
    """,
}


def transposed(backend, kernel, x, pitch: int, n: int) -> Modelled:
    return modelled(
        backend,
        kernel,
        inputs=[x, pitch, n],
        output_shapes=[(n * n,)],
        output_dtypes=[mx.float32],
        grid=(n, n, 1),
        threadgroup=(32, 32, 1),
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_padded_threadgroup_array_beats_a_bank_conflicting_one(backends, dialect):
    backend, n = backends[dialect], 64
    x = mx.random.normal((n * n,), key=mx.random.key(2))
    k = kernel_of(backend, "transpose", ["x", "P", "N"], ["out"], TRANSPOSE[dialect])
    conflicting = transposed(backend, k, x, 32, n)
    padded = transposed(backend, k, x, 33, n)
    want = np.asarray(x).reshape(n, n).T.reshape(-1)
    np.testing.assert_array_equal(conflicting.outputs[0], want)
    np.testing.assert_array_equal(padded.outputs[0], want)
    # One wavefront per request padded; the column reads serialise unpadded.
    assert padded.counts["tg_wavefronts"] == padded.counts["tg_requests"]
    assert conflicting.counts["tg_requests"] == padded.counts["tg_requests"]
    assert conflicting.counts["tg_wavefronts"] > 8 * padded.counts["tg_wavefronts"]
    assert conflicting.counts["issue"] == padded.counts["issue"]
    assert padded.seconds < conflicting.seconds


# ------------------------------------------------------------ spreading the work
WORK = {
    "metal": """
        uint i = thread_position_in_grid.x;
        float v = x[i];
        for (uint k = 0; k < 64; ++k) v = v * 1.0001f + 0.5f;
        out[i] = v;
    """,
    "cuda": """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = x[i];
        for (uint32_t k = 0; k < 64; ++k) v = v * 1.0001f + 0.5f;
        out[i] = v;
    """,
}
SERIAL_WORK = {
    "metal": """
        for (uint i = 0; i < uint(N); ++i) {
            float v = x[i];
            for (uint k = 0; k < 64; ++k) v = v * 1.0001f + 0.5f;
            out[i] = v;
        }
    """,
    "cuda": """
        for (uint32_t i = 0; i < uint32_t(N[0]); ++i) {
            float v = x[i];
            for (uint32_t k = 0; k < 64; ++k) v = v * 1.0001f + 0.5f;
            out[i] = v;
        }
    """,
}


def work_reference(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float32)
    for _ in range(64):
        v = v * np.float32(1.0001) + np.float32(0.5)
    return v


@pytest.mark.parametrize("dialect", DIALECTS)
def test_many_small_groups_beat_one_big_group_at_a_small_size(backends, dialect):
    # 1024 threads: one group of 1024 runs on one core; 32 groups of 32
    # spread over the GPU's cores.
    backend, n = backends[dialect], 1024
    x = mx.random.normal((n,), key=mx.random.key(3))
    k = kernel_of(backend, "spread", ["x"], ["out"], WORK[dialect])
    one = modelled(backend, k, inputs=[x], **one_d(n, 1024))
    many = modelled(backend, k, inputs=[x], **one_d(n, 32))
    want = work_reference(np.asarray(x))
    np.testing.assert_allclose(one.outputs[0], want, rtol=1e-5)
    np.testing.assert_array_equal(many.outputs[0], one.outputs[0])
    assert (one.counts["groups"], many.counts["groups"]) == (1, 32)
    assert one.counts["issue"] == many.counts["issue"]
    assert many.seconds < one.seconds


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_parallel_grid_beats_one_thread_doing_everything(backends, dialect):
    backend, n = backends[dialect], 1024
    x = mx.random.normal((n,), key=mx.random.key(4))
    parallel = launch(backend, "spread", ["x"], ["out"], WORK[dialect], inputs=[x], **one_d(n, 32))
    serial = launch(
        backend,
        "serial",
        ["x", "N"],
        ["out"],
        SERIAL_WORK[dialect],
        inputs=[x, n],
        output_shapes=[(n,)],
        output_dtypes=[mx.float32],
        grid=(1, 1, 1),
        threadgroup=(1, 1, 1),
    )
    np.testing.assert_array_equal(serial.outputs[0], parallel.outputs[0])
    assert serial.counts["threads"] == 1 and parallel.counts["threads"] == n
    # Beyond the dispatch both pay (35 us a launch on the modelled H100).
    dispatch = parallel.counts["dispatch_s"]
    assert 10 * (parallel.seconds - dispatch) < serial.seconds - dispatch


# ------------------------------------------------------------ divergence
# Thread i takes one of two loops of equal length by the parity of i / D:
# D = 1 splits every simdgroup (odd and even lanes: each simdgroup runs both
# arms, half its lanes masked in each), D = 32 sends each whole simdgroup one
# way. Every thread does the same work either way.
BRANCHES = {
    "metal": """
        uint i = thread_position_in_grid.x;
        float v = x[i];
        if ((i / uint(D)) & 1) {
            for (uint k = 0; k < 64; ++k) v = v * 1.0001f + 0.5f;
        } else {
            for (uint k = 0; k < 64; ++k) v = v * 0.9999f - 0.25f;
        }
        out[i] = v;
    """,
    "cuda": """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = x[i];
        if ((i / uint32_t(D[0])) & 1) {
            for (uint32_t k = 0; k < 64; ++k) v = v * 1.0001f + 0.5f;
        } else {
            for (uint32_t k = 0; k < 64; ++k) v = v * 0.9999f - 0.25f;
        }
        out[i] = v;
    """,
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_uniform_branches_beat_divergent_ones(backends, dialect):
    backend, n = backends[dialect], 4096
    x = mx.random.normal((n,), key=mx.random.key(5))
    k = kernel_of(backend, "branches", ["x", "D"], ["out"], BRANCHES[dialect])
    divergent = modelled(backend, k, inputs=[x, 1], **one_d(n, 256))
    uniform = modelled(backend, k, inputs=[x, 32], **one_d(n, 256))
    # The threads' own work is the same; the simdgroups' differs.
    assert divergent.counts["thread_ops"] == uniform.counts["thread_ops"]
    assert divergent.counts["issue"] > 1.5 * uniform.counts["issue"]
    assert uniform.seconds < divergent.seconds


# ------------------------------------------------------------ determinism
COPY = {
    "metal": """
        uint i = thread_position_in_grid.x;
        if (i < uint(N)) out[i] = x[i] * 2.0f;
    """,
    "cuda": """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < uint32_t(N[0])) out[i] = x[i] * 2.0f;
    """,
}


def twice_and_afresh(dialect: str, backend: SimBackend, n: int) -> list[Modelled]:
    """Two launches of one kernel in a row (the simulator places buffers
    end-aligned, then start-aligned), then one on a fresh backend."""
    x = mx.random.normal((n,), key=mx.random.key(6))
    call = dict(inputs=[x, n], **one_d(((n + 255) // 256) * 256, 256))
    call["output_shapes"] = [(n,)]
    k = kernel_of(backend, "copy", ["x", "N"], ["out"], COPY[dialect])
    runs = [modelled(backend, k, **call), modelled(backend, k, **call)]
    fresh = SimBackend(dialect=dialect)
    runs.append(
        modelled(fresh, kernel_of(fresh, "copy", ["x", "N"], ["out"], COPY[dialect]), **call)
    )
    return runs


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_same_launch_gets_the_same_modelled_time(backends, dialect):
    runs = twice_and_afresh(dialect, backends[dialect], 16384)
    assert len({r.seconds for r in runs}) == 1
    assert all(r.counts == runs[0].counts for r in runs)


# Sectors count from each buffer's start, so the simulator's placement of a
# ragged buffer in its guard pages (end- or start-aligned by turns) changes nothing.
@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_same_launch_gets_the_same_modelled_time_at_a_ragged_size(backends, dialect):
    runs = twice_and_afresh(dialect, backends[dialect], 16385)
    assert len({r.seconds for r in runs}) == 1
    assert all(r.counts == runs[0].counts for r in runs)


# Groups of unequal work: group g loops (g * 37) % 64 times.
UNEQUAL_GROUPS = {
    "metal": """
        uint i = thread_position_in_grid.x;
        float v = x[i];
        for (uint k = 0; k < (threadgroup_position_in_grid.x * 37u) % 64u; ++k) v = v * 1.0001f;
        out[i] = v;
    """,
    "cuda": """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = x[i];
        for (uint32_t k = 0; k < (blockIdx.x * 37u) % 64u; ++k) v = v * 1.0001f;
        out[i] = v;
    """,
}


# Every group's instructions are counted; only the analysis of accesses is
# sampled, and here every group's accesses are alike.
@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_same_launch_gets_the_same_modelled_time_where_groups_are_sampled(backends, dialect):
    backend, n = backends[dialect], 262144
    x = mx.random.normal((n,), key=mx.random.key(9))
    k = kernel_of(backend, "unequal", ["x"], ["out"], UNEQUAL_GROUPS[dialect])
    runs = [modelled(backend, k, inputs=[x], **one_d(n, 64)) for _ in range(4)]
    assert runs[0].counts["sampled"] < 1
    assert len({r.seconds for r in runs}) == 1


def _burn(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for k in range(10_000):
            x ^= k * k


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_busy_host_does_not_change_the_modelled_time(backends, dialect):
    backend, n = backends[dialect], 64
    x = mx.random.normal((n * n,), key=mx.random.key(7))
    k = kernel_of(backend, "transpose", ["x", "P", "N"], ["out"], TRANSPOSE[dialect])
    quiet = [transposed(backend, k, x, 32, n) for _ in range(2)]
    stop = threading.Event()
    burners = [threading.Thread(target=_burn, args=(stop,), daemon=True) for _ in range(2)]
    for t in burners:
        t.start()
    try:
        busy = [transposed(backend, k, x, 32, n) for _ in range(2)]
    finally:
        stop.set()
        for t in burners:
            t.join()
    # Launch by launch (the buffers' placement alternates between launches).
    for q, b in zip(quiet, busy):
        assert b.seconds == q.seconds
        assert b.counts == q.counts
