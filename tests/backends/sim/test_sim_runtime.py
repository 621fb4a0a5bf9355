"""The CPU simulator's runtime: dispatch, attributes, barriers, buffers, cache."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend, build
from mlxsci.kernel.signature import METAL_ATTRIBUTES
from mlxsci.kernel.spec import CompileError, KernelFault, KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")


@pytest.fixture(scope="module")
def backend():
    return SimBackend(launch_timeout_s=30.0)


def make(backend, name, inputs, outputs, source, header=""):
    return backend.kernel(KernelSpec(name, tuple(inputs), tuple(outputs), source, header))


def test_elementwise_scalars_template_and_init_value(backend):
    src = """
        uint i = thread_position_in_grid.x;
        if (i >= n) return;
        out[i] = T(x[i] * a + float(N));
    """
    k = make(backend, "axpb", ["x", "a", "n"], ["out"], src)
    x = mx.arange(100, dtype=mx.float32)
    (o,) = k(
        inputs=[x, 2.0, 100],
        output_shapes=[(100,)],
        output_dtypes=[mx.float32],
        grid=(128, 1, 1),
        threadgroup=(32, 1, 1),
        template=[("T", mx.float32), ("N", 3)],
    )
    np.testing.assert_array_equal(np.asarray(o), np.arange(100) * 2.0 + 3)

    # With init_value every output starts filled; without, a garbage pattern.
    src2 = "uint i = thread_position_in_grid.x; if (i % 2 == 0) out[i] = 1.0f;"
    k2 = make(backend, "half_write", [], ["out"], src2)
    (o,) = k2(
        inputs=[],
        output_shapes=[(10,)],
        output_dtypes=[mx.float32],
        grid=(10, 1, 1),
        threadgroup=(4, 1, 1),
        init_value=-3,
    )
    np.testing.assert_array_equal(np.asarray(o), [1, -3] * 5)
    (o,) = k2(
        inputs=[],
        output_shapes=[(10,)],
        output_dtypes=[mx.float32],
        grid=(10, 1, 1),
        threadgroup=(4, 1, 1),
    )
    odd = np.asarray(o)[1::2]
    assert np.all(np.isfinite(odd)) and np.all(odd != 0) and np.all(odd == odd[0])


def test_shapes_strides_ndim_and_small_constant_inputs(backend):
    src = """
        uint i = thread_position_in_grid.x;
        uint j = thread_position_in_grid.y;
        int64_t loc = i * inp_strides[1] + j * inp_strides[0];
        out[j * inp_shape[1] + i] = inp[loc] * w[0] + float(inp_ndim) + s;
    """
    k = make(backend, "strided", ["inp", "w", "s"], ["out"], src)
    a = mx.arange(12, dtype=mx.float32).reshape(3, 4)
    (o,) = k(
        inputs=[a, mx.array([10.0, 0.0]), mx.array(0.5)],
        output_shapes=[(3, 4)],
        output_dtypes=[mx.float32],
        grid=(4, 3, 1),
        threadgroup=(2, 2, 1),
    )
    np.testing.assert_array_equal(np.asarray(o), np.arange(12).reshape(3, 4) * 10.0 + 2.5)


def test_barrier_tile_reverse(backend):
    src = """
        threadgroup float tile[64];
        uint l = thread_position_in_threadgroup.x;
        uint g = thread_position_in_grid.x;
        tile[l] = x[g];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        y[g] = tile[63 - l];
    """
    k = make(backend, "rev", ["x"], ["y"], src)
    x = mx.arange(256, dtype=mx.float32)
    (o,) = k(
        inputs=[x],
        output_shapes=[(256,)],
        output_dtypes=[mx.float32],
        grid=(256, 1, 1),
        threadgroup=(64, 1, 1),
    )
    np.testing.assert_array_equal(np.asarray(o), np.arange(256).reshape(4, 64)[:, ::-1].reshape(-1))


def test_templated_threadgroup_array(backend):
    src = """
        threadgroup T tile[N];
        uint l = thread_position_in_threadgroup.x;
        uint g = thread_position_in_grid.x;
        tile[l] = x[g];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        y[g] = tile[(l + 1) % N] + tile[l];
    """
    k = make(backend, "trot", ["x"], ["y"], src)
    x = mx.arange(64, dtype=mx.int32)
    (o,) = k(
        inputs=[x],
        output_shapes=[(64,)],
        output_dtypes=[mx.int32],
        grid=(64, 1, 1),
        threadgroup=(16, 1, 1),
        template=[("T", mx.int32), ("N", 16)],
    )
    xs = np.arange(64).reshape(4, 16)
    np.testing.assert_array_equal(np.asarray(o), (np.roll(xs, -1, axis=1) + xs).reshape(-1))


def test_stencil_with_halo_and_partial_edge_group(backend):
    # 3-point stencil through a tile with a halo; the grid (100) is not a
    # multiple of the threadgroup (32), so the last group has 4 threads.
    src = """
        threadgroup float tile[34];
        uint l = thread_position_in_threadgroup.x;
        uint g = thread_position_in_grid.x;
        uint tn = threads_per_threadgroup.x;
        tile[l + 1] = x[g];
        if (l == 0) tile[0] = g > 0 ? x[g - 1] : 0.0f;
        if (l == tn - 1) tile[tn + 1] = g + 1 < n ? x[g + 1] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        y[g] = tile[l] + 2.0f * tile[l + 1] + tile[l + 2];
    """
    k = make(backend, "stencil", ["x", "n"], ["y"], src)
    xs = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    (o,) = k(
        inputs=[mx.array(xs), 100],
        output_shapes=[(100,)],
        output_dtypes=[mx.float32],
        grid=(100, 1, 1),
        threadgroup=(32, 1, 1),
    )
    p = np.concatenate([[0], xs, [0]]).astype(np.float32)
    np.testing.assert_allclose(np.asarray(o), p[:-2] + 2 * p[1:-1] + p[2:], rtol=1e-6)


def test_threadgroup_memory_is_poison_at_group_start(backend):
    # A kernel that reads threadgroup memory it never wrote sees poison (all
    # ones: NaN as a float), the same in every group (no leftovers from the
    # previous group).
    src = """
        threadgroup uint t[4];
        uint l = thread_position_in_threadgroup.x;
        out[thread_position_in_grid.x] = t[l];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        t[l] = 7;
    """
    k = make(backend, "tg_garbage", [], ["out"], src)
    (o,) = k(
        inputs=[],
        output_shapes=[(8,)],
        output_dtypes=[mx.uint32],
        grid=(8, 1, 1),
        threadgroup=(4, 1, 1),
    )
    assert np.all(np.asarray(o) == 0xFFFFFFFF)


def _attr_model(grid, tg):
    G = np.array(grid)
    D = np.minimum(np.array(tg), G)
    ngroups = -(-G // D)
    rows = {}
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                p = np.array([x, y, z])
                g = p // D
                lid = p % D
                tsz = np.minimum(D, G - g * D)
                lin = lid[0] + lid[1] * tsz[0] + lid[2] * tsz[0] * tsz[1]
                nthr = int(np.prod(tsz))
                dprod = int(np.prod(D))
                vals = {
                    "dispatch_quadgroups_per_threadgroup": -(-dprod // 4),
                    "dispatch_simdgroups_per_threadgroup": -(-dprod // 32),
                    "dispatch_threads_per_threadgroup": D,
                    "grid_origin": [0, 0, 0],
                    "grid_size": G,
                    "quadgroup_index_in_threadgroup": lin // 4,
                    "quadgroups_per_threadgroup": -(-nthr // 4),
                    "simdgroup_index_in_threadgroup": lin // 32,
                    "simdgroups_per_threadgroup": -(-nthr // 32),
                    "thread_execution_width": 32,
                    "thread_index_in_quadgroup": lin % 4,
                    "thread_index_in_simdgroup": lin % 32,
                    "thread_index_in_threadgroup": lin,
                    "thread_position_in_grid": p,
                    "thread_position_in_threadgroup": lid,
                    "threadgroup_position_in_grid": g,
                    "threadgroups_per_grid": ngroups,
                    "threads_per_grid": G,
                    "threads_per_simdgroup": 32,
                    "threads_per_threadgroup": tsz,
                }
                row = []
                for name, typ in METAL_ATTRIBUTES:
                    v = vals[name]
                    row.extend(list(np.asarray(v).reshape(-1)) if typ == "uint3" else [int(v)])
                rows[(x, y, z)] = row
    return rows


def test_all_twenty_attributes_on_3d_grid_with_partial_groups(backend):
    width = sum(3 if t == "uint3" else 1 for _, t in METAL_ATTRIBUTES)
    lines = [
        "uint3 p = thread_position_in_grid;",
        "uint3 gs = threads_per_grid;",
        f"uint base = (p.x + p.y * gs.x + p.z * gs.x * gs.y) * {width};",
        "uint c = 0;",
    ]
    for name, typ in METAL_ATTRIBUTES:
        if typ == "uint3":
            lines += [
                f"out[base + c++] = {name}.x;",
                f"out[base + c++] = {name}.y;",
                f"out[base + c++] = {name}.z;",
            ]
        else:
            lines.append(f"out[base + c++] = {name};")
    k = make(backend, "attrs", [], ["out"], "\n".join(lines))
    for grid, tg in [((7, 5, 3), (4, 2, 2)), ((70, 3, 1), (64, 1, 1)), ((3, 2, 2), (8, 8, 8))]:
        n = grid[0] * grid[1] * grid[2]
        (o,) = k(
            inputs=[],
            output_shapes=[(n, width)],
            output_dtypes=[mx.uint32],
            grid=grid,
            threadgroup=tg,
        )
        got = np.asarray(o)
        model = _attr_model(grid, tg)
        for (x, y, z), row in model.items():
            i = x + y * grid[0] + z * grid[0] * grid[1]
            np.testing.assert_array_equal(
                got[i], row, err_msg=f"thread {(x, y, z)} grid {grid} tg {tg}"
            )


def test_fiber_path_gives_same_attributes(backend):
    # The same attribute kernel forced onto fibers must agree with the fast path.
    src = (
        "out[thread_position_in_grid.x + thread_position_in_grid.y * 9] = "
        "thread_index_in_threadgroup * 1000 + threads_per_threadgroup.x * 10 + "
        "threadgroup_position_in_grid.y;"
    )
    spec = KernelSpec("attr_fib", (), ("out",), src)
    fast = SimBackend().kernel(spec)
    fib = SimBackend(force_fibers=True).kernel(spec)
    kw = dict(
        inputs=[],
        output_shapes=[(5, 9)],
        output_dtypes=[mx.uint32],
        grid=(9, 5, 1),
        threadgroup=(4, 2, 1),
    )
    np.testing.assert_array_equal(np.asarray(fast(**kw)[0]), np.asarray(fib(**kw)[0]))


def test_launch_errors(backend):
    k = make(backend, "noop", [], ["out"], "out[0] = 1;")
    kw = dict(inputs=[], output_shapes=[(1,)], output_dtypes=[mx.int32])
    with pytest.raises(KernelFault) as e:
        k(grid=(2048, 1, 1), threadgroup=(64, 32, 1), **kw)
    assert e.value.kind == "launch"
    assert e.value.message == (
        "kernel noop: threads per threadgroup = 2048 (threadgroup (64, 32, 1)) "
        "exceeds Metal's limit of 1024"
    )
    for grid, tg in [((0, 1, 1), (1, 1, 1)), ((4, 1, 1), (0, 1, 1)), ((-1, 1, 1), (1, 1, 1))]:
        with pytest.raises(KernelFault) as e:
            k(grid=grid, threadgroup=tg, **kw)
        assert e.value.kind == "launch"
    # the clamp: threadgroup (1024,1,1) on a grid of 3 is fine
    (o,) = k(grid=(3, 1, 1), threadgroup=(1024, 1, 1), **kw)
    assert int(np.asarray(o)[0]) == 1


def test_fast_path_large_elementwise_launch(backend):
    # A 2^20-thread launch on the fast path, run again after its compiling
    # first run, gives exact results. How long it takes is measured by
    # bench/bench_sim_launch.py (saxpy at 1M), not asserted here: a test's
    # time depends on the machine's load.
    k = make(
        backend, "scale", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = x[i] * 3.0f;"
    )
    n = 1 << 20
    x = mx.random.normal((n,))
    mx.eval(x)
    kw = dict(
        inputs=[x],
        output_shapes=[(n,)],
        output_dtypes=[mx.float32],
        grid=(n, 1, 1),
        threadgroup=(256, 1, 1),
    )
    k(**kw)  # compile
    for _ in range(3):
        (o,) = k(**kw)
        mx.eval(o)
    np.testing.assert_array_equal(np.asarray(o), np.asarray(x) * 3)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_determinism_and_compile_cache(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    src = """
        threadgroup float acc[32];
        uint l = thread_position_in_threadgroup.x;
        acc[l] = x[thread_position_in_grid.x] * 1.1f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float s = 0;
        for (uint i = 0; i <= l; ++i) s += acc[i];
        y[thread_position_in_grid.x] = s;
    """
    spec = KernelSpec("det", ("x",), ("y",), src)
    x = mx.random.normal((96,), key=mx.random.key(1))
    kw = dict(
        inputs=[x],
        output_shapes=[(96,)],
        output_dtypes=[mx.float32],
        grid=(96, 1, 1),
        threadgroup=(32, 1, 1),
    )
    before = build.STATS["compiles"]
    a = np.asarray(backend.kernel(spec)(**kw)[0]).copy()
    assert build.STATS["compiles"] == before + 1
    assert list(tmp_path.joinpath("sim").glob("k-*.so"))
    # A new kernel object with identical text: served from the cache.
    b = np.asarray(backend.kernel(spec)(**kw)[0])
    assert build.STATS["compiles"] == before + 1
    assert a.tobytes() == b.tobytes()


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_compile_cache_is_keyed_by_content_not_path(backend, tmp_path, monkeypatch):
    # The same text from two files compiles once; each file's compile error
    # still names that file (the TU says <candidate-file>, the log is renamed).
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    kw = dict(
        inputs=[mx.ones(8)],
        output_shapes=[(8,)],
        output_dtypes=[mx.float32],
        grid=(8, 1, 1),
        threadgroup=(8, 1, 1),
    )
    src = "uint i = thread_position_in_grid.x;\ny[i] = x[i] * 2.0f;"
    before = build.STATS["compiles"]
    for path in ("/tmp/a/one.metal", "/tmp/b/two.metal"):
        spec = KernelSpec("same", ("x",), ("y",), src, source_file=path, body_line=7)
        np.testing.assert_array_equal(np.asarray(backend.kernel(spec)(**kw)[0]), np.full(8, 2.0))
    assert build.STATS["compiles"] == before + 1
    bad = src.replace("x[i]", "x[i] + nowhere")
    for path in ("/tmp/a/one.metal", "/tmp/b/two.metal"):
        spec = KernelSpec("bad", ("x",), ("y",), bad, source_file=path, body_line=7)
        with pytest.raises(CompileError) as e:
            backend.kernel(spec)(**kw)
        assert e.value.line == 8 and f"{path}:8:" in e.value.log
        assert build.CANDIDATE_FILE not in e.value.log
    assert build.STATS["compiles"] == before + 2


def test_ucontext_fallback(monkeypatch):
    monkeypatch.setenv("MLXSCI_SIM_UCONTEXT", "1")
    be = SimBackend()
    src = """
        threadgroup int t[8];
        uint l = thread_position_in_threadgroup.x;
        t[l] = int(l) * 3;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[thread_position_in_grid.x] = t[7 - l] + simd_sum(1);
    """
    (o,) = be.kernel(KernelSpec("uc", (), ("out",), src))(
        inputs=[],
        output_shapes=[(16,)],
        output_dtypes=[mx.int32],
        grid=(16, 1, 1),
        threadgroup=(8, 1, 1),
    )
    np.testing.assert_array_equal(np.asarray(o), np.tile((7 - np.arange(8)) * 3 + 8, 2))


def test_device_info(backend):
    info = backend.device_info()
    assert info["name"].startswith("CPU simulator (")
    assert len(info["fingerprint"]) >= 8
    assert info == backend.device_info()
    assert isinstance(backend.to_device(np.zeros(3, np.float32)), mx.array)
