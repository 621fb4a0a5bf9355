"""SIMD-group and quad-group functions of the simulator against NumPy models.

Threadgroups of 40 threads: simdgroup 0 has 32 lanes, simdgroup 1 only 8
(a partial simdgroup). A shuffle_up/down whose source lane is out of range
keeps the caller's own value (defined by the specification); one whose source
lane is inactive (past the end of the partial simdgroup) reads poison, NaN.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.kernel.spec import KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

TG = 40
GRID = 120  # three threadgroups

# name -> (C++ expression, kind); kinds pick the input and the model.
OPS = {
    "simd_shuffle": "simd_shuffle(v, ushort((lane * 7 + 3) % 32))",
    "simd_shuffle_xor": "simd_shuffle_xor(v, ushort(5))",
    "simd_shuffle_up": "simd_shuffle_up(v, ushort(3))",
    "simd_shuffle_down": "simd_shuffle_down(v, ushort(3))",
    "simd_shuffle_rotate_up": "simd_shuffle_rotate_up(v, ushort(5))",
    "simd_shuffle_rotate_down": "simd_shuffle_rotate_down(v, ushort(5))",
    "simd_broadcast": "simd_broadcast(v, ushort(2))",
    "simd_broadcast_first": "simd_broadcast_first(v)",
    "simd_sum": "simd_sum(v)",
    "simd_product": "simd_product(p)",
    "simd_max": "simd_max(v)",
    "simd_min": "simd_min(v)",
    "simd_and": "float(simd_and(u))",
    "simd_or": "float(simd_or(u))",
    "simd_xor": "float(simd_xor(u))",
    "simd_prefix_inclusive_sum": "simd_prefix_inclusive_sum(v)",
    "simd_prefix_exclusive_sum": "simd_prefix_exclusive_sum(v)",
    "simd_prefix_inclusive_product": "simd_prefix_inclusive_product(p)",
    "simd_prefix_exclusive_product": "simd_prefix_exclusive_product(p)",
    "simd_ballot": "float(uint64_t(simd_ballot(v > 0.0f)) & 0xffffffffull)",
    "simd_any": "float(simd_any(v > 14.0f))",
    "simd_all": "float(simd_all(v > -15.0f))",
    "simd_is_first": "float(simd_is_first())",
    "simd_active_threads_mask": "float(uint64_t(simd_active_threads_mask()) & 0xffffffffull)",
    "quad_shuffle": "quad_shuffle(v, ushort((lane + 1) % 4))",
    "quad_shuffle_xor": "quad_shuffle_xor(v, ushort(1))",
    "quad_shuffle_up": "quad_shuffle_up(v, ushort(1))",
    "quad_shuffle_down": "quad_shuffle_down(v, ushort(2))",
    "quad_broadcast": "quad_broadcast(v, ushort(3))",
    "quad_sum": "quad_sum(v)",
    "quad_max": "quad_max(v)",
    "quad_min": "quad_min(v)",
    "quad_prefix_inclusive_sum": "quad_prefix_inclusive_sum(v)",
    "quad_prefix_exclusive_sum": "quad_prefix_exclusive_sum(v)",
}


def _inputs():
    rng = np.random.default_rng(7)
    v = rng.integers(-16, 16, GRID).astype(np.float32)
    p = rng.choice(np.array([1, 2, -1, 0.5, 1, 1], np.float32), GRID)
    u = rng.integers(0, 2**31, GRID).astype(np.uint32)
    return v, p, u


def _segments(width):
    """(start, count) of every simdgroup (width 32) or quad (width 4) in the grid."""
    segs = []
    for g0 in range(0, GRID, TG):
        n = min(TG, GRID - g0)
        for s in range(0, n, 32):
            m = min(32, n - s)
            if width == 32:
                segs.append((g0 + s, m))
            else:
                for q in range(0, m, 4):
                    segs.append((g0 + s + q, min(4, m - q)))
    return segs


def _model(name, v, p, u):
    w = 4 if name.startswith("quad_") else 32
    out = np.zeros(GRID, np.float64)
    for start, m in _segments(w):
        xs = v[start : start + m].astype(np.float64)
        ps = p[start : start + m].astype(np.float64)
        us = u[start : start + m]
        for i in range(m):

            def src(j, m=m, xs=xs, i=i):
                if 0 <= j < m:
                    return xs[j]
                return xs[i] if j < 0 or j >= w else np.nan  # out of range / inactive

            lane = i  # lane within the segment
            if name == "simd_shuffle":
                r = src((i * 7 + 3) % 32)
            elif name == "simd_shuffle_xor":
                r = src(i ^ 5)
            elif name in ("simd_shuffle_up", "quad_shuffle_up"):
                r = src(i - (3 if w == 32 else 1))
            elif name in ("simd_shuffle_down", "quad_shuffle_down"):
                r = src(i + (3 if w == 32 else 2))
            elif name == "simd_shuffle_rotate_up":
                r = src((i - 5) % 32)
            elif name == "simd_shuffle_rotate_down":
                r = src((i + 5) % 32)
            elif name == "simd_broadcast":
                r = src(2)
            elif name == "simd_broadcast_first":
                r = xs[0]
            elif name in ("simd_sum", "quad_sum"):
                r = xs.sum()
            elif name == "simd_product":
                r = ps.prod()
            elif name in ("simd_max", "quad_max"):
                r = xs.max()
            elif name in ("simd_min", "quad_min"):
                r = xs.min()
            elif name == "simd_and":
                r = float(np.bitwise_and.reduce(us))
            elif name == "simd_or":
                r = float(np.bitwise_or.reduce(us))
            elif name == "simd_xor":
                r = float(np.bitwise_xor.reduce(us))
            elif name in ("simd_prefix_inclusive_sum", "quad_prefix_inclusive_sum"):
                r = xs[: i + 1].sum()
            elif name in ("simd_prefix_exclusive_sum", "quad_prefix_exclusive_sum"):
                r = xs[:i].sum()
            elif name == "simd_prefix_inclusive_product":
                r = ps[: i + 1].prod()
            elif name == "simd_prefix_exclusive_product":
                r = ps[:i].prod()
            elif name == "simd_ballot":
                r = float(sum(1 << j for j in range(m) if xs[j] > 0))
            elif name == "simd_any":
                r = float(np.any(xs > 14))
            elif name == "simd_all":
                r = float(np.all(xs > -15))
            elif name == "simd_is_first":
                r = float(i == 0)
            elif name == "simd_active_threads_mask":
                r = float((1 << m) - 1)
            elif name == "quad_shuffle":
                r = src((lane + 1) % 4)
            elif name == "quad_shuffle_xor":
                r = src(i ^ 1)
            elif name == "quad_broadcast":
                r = src(3)
            else:
                raise AssertionError(name)
            out[start + i] = r
    return out.astype(np.float32)


@pytest.fixture(scope="module")
def results():
    names = list(OPS)
    body = [
        "uint g = thread_position_in_grid.x;",
        "uint lane = thread_index_in_simdgroup;",
        "float v = x[g]; float p = px[g]; uint u = ux[g];",
    ]
    for i, name in enumerate(names):
        body.append(f"out[{i} * {GRID} + g] = {OPS[name]};")
    k = SimBackend().kernel(
        KernelSpec("simd_all_ops", ("x", "px", "ux"), ("out",), "\n".join(body))
    )
    v, p, u = _inputs()
    (o,) = k(
        inputs=[mx.array(v), mx.array(p), mx.array(u)],
        output_shapes=[(len(names), GRID)],
        output_dtypes=[mx.float32],
        grid=(GRID, 1, 1),
        threadgroup=(TG, 1, 1),
    )
    got = np.asarray(o)
    return {name: got[i] for i, name in enumerate(names)}, (v, p, u)


@pytest.mark.parametrize("name", list(OPS))
def test_simd_function_matches_model(results, name):
    got, (v, p, u) = results
    np.testing.assert_array_equal(got[name], _model(name, v, p, u), err_msg=name)


def test_divergent_lanes_form_their_own_rendezvous():
    # Lanes split by a branch each reduce over their own active set; a lane
    # skipping the call does not take part.
    src = """
        uint g = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        float v = x[g];
        float r = -1.0f;
        if (lane % 3 == 0) {
            r = simd_sum(v);
        } else if (lane % 3 == 1) {
            r = simd_max(v) + 1000.0f * float(simd_is_first());
        }
        out[g] = r;
    """
    k = SimBackend().kernel(KernelSpec("simd_div", ("x",), ("out",), src))
    v = np.arange(64, dtype=np.float32)
    (o,) = k(
        inputs=[mx.array(v)],
        output_shapes=[(64,)],
        output_dtypes=[mx.float32],
        grid=(64, 1, 1),
        threadgroup=(64, 1, 1),
    )
    got = np.asarray(o)
    exp = np.full(64, -1.0, np.float32)
    for base in (0, 32):
        lanes = np.arange(32)
        a = base + lanes[lanes % 3 == 0]
        b = base + lanes[lanes % 3 == 1]
        exp[a] = v[a].sum()
        exp[b] = v[b].max()
        exp[b[0]] += 1000
    np.testing.assert_array_equal(got, exp)


def test_vector_and_integer_operands_and_loop_reduction():
    src = """
        uint g = thread_position_in_grid.x;
        float4 a = float4(x[g], 2.0f * x[g], -x[g], 1.0f);
        float4 s = simd_sum(a);
        float4 m = simd_max(a);
        int k = int(g);
        for (ushort off = 16; off > 0; off /= 2) k += simd_shuffle_down(k, off);
        out[g * 9 + 0] = s.x; out[g * 9 + 1] = s.y; out[g * 9 + 2] = s.z; out[g * 9 + 3] = s.w;
        out[g * 9 + 4] = m.x; out[g * 9 + 5] = m.y; out[g * 9 + 6] = m.z; out[g * 9 + 7] = m.w;
        out[g * 9 + 8] = float(k);
        simdgroup_barrier(mem_flags::mem_none);
    """
    k = SimBackend().kernel(KernelSpec("simd_vec", ("x",), ("out",), src))
    v = np.arange(32, dtype=np.float32) - 10
    (o,) = k(
        inputs=[mx.array(v)],
        output_shapes=[(32, 9)],
        output_dtypes=[mx.float32],
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
    )
    got = np.asarray(o)
    np.testing.assert_array_equal(
        got[:, 0:4], np.tile([v.sum(), 2 * v.sum(), -v.sum(), 32], (32, 1))
    )
    np.testing.assert_array_equal(
        got[:, 4:8], np.tile([v.max(), 2 * v.max(), -v.min(), 1], (32, 1))
    )
    # tree reduction with shuffle_down: lane 0 holds the full sum
    assert got[0, 8] == sum(range(32))


def test_hidden_simd_call_falls_back_to_fibers():
    # The text search for SIMD/barrier names cannot see through token pasting;
    # the fast path notices the first collective call and relaunches on fibers.
    header = "#define PASTE(a, b) a##b\n"
    src = "uint g = thread_position_in_grid.x;\nout[g] = PASTE(sim, d_sum)(float(g));\n"
    k = SimBackend().kernel(KernelSpec("hidden_simd", (), ("out",), src, header=header))
    assert not k._needs_fibers
    (o,) = k(
        inputs=[],
        output_shapes=[(64,)],
        output_dtypes=[mx.float32],
        grid=(64, 1, 1),
        threadgroup=(64, 1, 1),
    )
    exp = np.repeat([sum(range(32)), sum(range(32, 64))], 32).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(o), exp)
