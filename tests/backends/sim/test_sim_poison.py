"""Undefined values are poison (issue 10, outcome 3).

The GPU leaves two kinds of read undefined, and the simulator returns poison
for both (all bytes 0xFF: NaN for float32/float16/bfloat16, -1 / 0xFFFFFFFF
for integers), so a kernel that depends on one fails verification:
- a SIMD/warp shuffle or broadcast whose source lane is not active in the call
  (diverged away, returned, past the end of a partial simdgroup/warp, or, in
  CUDA, not named in the mask). Metal Shading Language Specification 3.2,
  6.9.2: "A thread needs to only read data from another active thread in the
  SIMD-group"; CUDA C++ Programming Guide, Warp Shuffle Functions: "If the
  target thread is inactive, the retrieved value is undefined".
- threadgroup / __shared__ memory never written in this launch.
Each wrong kernel has a correct twin that reads only defined values and must
pass: reductions over the active lanes, the lanes shuffle_up/down leave
unchanged, and memory written before the barrier are all defined.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.spec import KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

POISON_U32 = 0xFFFFFFFF


@pytest.fixture(scope="module")
def metal():
    return SimBackend(launch_timeout_s=30.0)


@pytest.fixture(scope="module")
def cuda():
    return SimBackend(dialect="cuda", launch_timeout_s=30.0)


def run(backend, name, src, n, tg, dtype=mx.float32, inputs=("x",)):
    """Runs `src` on a grid of n threads (groups of tg) with x = 0..n-1; returns out."""
    dialect = "cuda" if "blockIdx" in src or "__shared__" in src else "metal"
    k = backend.kernel(KernelSpec(name, tuple(inputs), ("out",), src, dialect=dialect))
    args = [mx.array(np.arange(n, dtype=np.float32))] if inputs else []
    (o,) = k(
        inputs=args,
        output_shapes=[(n,)],
        output_dtypes=[dtype],
        grid=(n, 1, 1),
        threadgroup=(tg, 1, 1),
    )
    return np.asarray(o)


# ---------------------------------------------------------------- Metal SIMD groups
def test_metal_shuffle_from_a_lane_outside_the_branch_is_nan(metal):
    # Lanes 16..31 did not take the branch, so lanes 0..15 read inactive lanes.
    src = """
        uint g = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        float r = -1.0f;
        if (lane < 16) r = simd_shuffle(x[g], ushort(lane + 16));
        out[g] = r;
    """
    got = run(metal, "poison_div_shuffle", src, 64, 64)
    lane = np.arange(64) % 32
    assert np.all(np.isnan(got[lane < 16]))
    assert np.all(got[lane >= 16] == -1.0)


def test_metal_shuffle_before_the_branch_is_defined(metal):
    src = """
        uint g = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        float t = simd_shuffle(x[g], ushort(lane ^ 16));
        out[g] = lane < 16 ? t : -1.0f;
    """
    got = run(metal, "poison_div_shuffle_ok", src, 64, 64)
    g = np.arange(64)
    np.testing.assert_array_equal(got, np.where(g % 32 < 16, g ^ 16, -1.0))


TREE_SUM = """
    uint g = thread_position_in_grid.x;
    float v = x[g];
    for (ushort off = 16; off > 0; off /= 2) v += simd_shuffle_down(v, off);
    out[g] = v;
"""


def test_metal_tree_reduction_in_a_partial_simdgroup_is_nan(metal):
    # 40 threads: simdgroup 1 holds lanes 0..7 only; lane 0 reads lanes 16, 8
    # which do not exist (inactive), as on the GPU.
    got = run(metal, "poison_partial_tree", TREE_SUM, 40, 40)
    assert got[0] == sum(range(32))  # full simdgroup: defined
    assert np.isnan(got[32])


@pytest.mark.slow
def test_metal_tree_reduction_in_a_full_simdgroup_and_simd_sum_are_defined(metal):
    # shuffle_down leaves the upper `delta` lanes' own value (defined), and
    # simd_sum reduces over the active lanes of a partial simdgroup.
    got = run(metal, "poison_full_tree", TREE_SUM, 64, 64)
    assert got[0] == sum(range(32)) and got[32] == sum(range(32, 64))
    src = "uint g = thread_position_in_grid.x; out[g] = simd_sum(x[g]);"
    got = run(metal, "poison_partial_sum", src, 40, 40)
    np.testing.assert_array_equal(got, [sum(range(32))] * 32 + [sum(range(32, 40))] * 8)


@pytest.mark.slow
def test_metal_broadcast_from_a_returned_lane_is_nan(metal):
    src = """
        uint g = thread_position_in_grid.x;
        if (thread_index_in_simdgroup == 0) { out[g] = -1.0f; return; }
        out[g] = simd_broadcast(x[g], ushort(0));
    """
    got = run(metal, "poison_bcast_returned", src, 32, 32)
    assert got[0] == -1.0 and np.all(np.isnan(got[1:]))


def test_metal_broadcast_first_after_a_return_is_defined(metal):
    src = """
        uint g = thread_position_in_grid.x;
        if (thread_index_in_simdgroup == 0) { out[g] = -1.0f; return; }
        out[g] = simd_broadcast_first(x[g]);
    """
    got = run(metal, "poison_bcast_first", src, 32, 32)
    np.testing.assert_array_equal(got, [-1.0] + [1.0] * 31)


def test_metal_integer_and_half_poison(metal):
    # Integers read all ones; half reads NaN. Lane 0 diverged away.
    src = """
        uint g = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        if (lane == 0) { out[g] = 0; return; }
        uint u = simd_shuffle_up(uint(g), ushort(1));
        half h = simd_shuffle_up(half(x[g]), ushort(1));
        out[g] = lane == 1 ? (u == 0xFFFFFFFFu && isnan(float(h)) ? 1u : 2u) : u;
    """
    got = run(metal, "poison_int_half", src, 32, 32, dtype=mx.uint32)
    assert got[0] == 0 and got[1] == 1  # both poisoned
    np.testing.assert_array_equal(got[2:], np.arange(1, 31))  # active sources


def test_metal_quad_shuffle_reads_only_active_quad_lanes(metal):
    src = """
        uint g = thread_position_in_grid.x;
        uint q = thread_index_in_quadgroup;
        float all_active = quad_shuffle(x[g], ushort(q ^ 3));
        float r = -1.0f;
        if (q < 2) r = quad_shuffle(x[g], ushort(q ^ 3));   // lanes 3, 2: not here
        out[g] = q < 2 ? r : all_active;
    """
    got = run(metal, "poison_quad", src, 32, 32)
    q = np.arange(32) % 4
    assert np.all(np.isnan(got[q < 2]))
    np.testing.assert_array_equal(got[q >= 2], (np.arange(32) ^ 3)[q >= 2])


@pytest.mark.slow
def test_metal_rotate_and_fill_read_inactive_lanes_as_nan(metal):
    # A partial simdgroup of 8 lanes: rotate_down(1) on lane 7 wraps to lane 0
    # (active); shuffle_and_fill_down(…, 1) on lane 7 takes filling of lane 8
    # (absent): poison.
    src = """
        uint g = thread_position_in_grid.x;
        float v = x[g];
        float rot = simd_shuffle_rotate_down(v, ushort(1));
        float fill = simd_shuffle_and_fill_down(v, v + 100.0f, ushort(1));
        out[g] = thread_index_in_simdgroup == 7 ? fill : rot;
    """
    got = run(metal, "poison_rot_fill", src, 8, 8)
    np.testing.assert_array_equal(got[:7], np.arange(1, 8))
    assert np.isnan(got[7])


# ---------------------------------------------------------------- CUDA warps
@pytest.mark.slow
def test_cuda_shuffle_from_a_lane_not_in_the_mask_is_nan(cuda):
    src = """
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        int lane = threadIdx.x % 32;
        float r = -1.0f;
        if (lane < 16) r = __shfl_sync(0x0000ffffu, x[g], lane + 16);
        out[g] = r;
    """
    got = run(cuda, "poison_cu_mask", src, 64, 64)
    lane = np.arange(64) % 32
    assert np.all(np.isnan(got[lane < 16]))
    assert np.all(got[lane >= 16] == -1.0)


@pytest.mark.slow
def test_cuda_shuffle_with_the_full_mask_is_defined(cuda):
    src = """
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        int lane = threadIdx.x % 32;
        float t = __shfl_sync(0xffffffffu, x[g], lane ^ 16);
        out[g] = lane < 16 ? t : -1.0f;
    """
    got = run(cuda, "poison_cu_full", src, 64, 64)
    g = np.arange(64)
    np.testing.assert_array_equal(got, np.where(g % 32 < 16, g ^ 16, -1.0))


@pytest.mark.slow
def test_cuda_tree_reduction_in_a_partial_warp(cuda):
    # A block of 40 threads: warp 1 has lanes 0..7. Reading lanes 8..31 is
    # undefined (poison); guarding the sum by the warp's real size is the fix.
    wrong = """
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        float v = x[g];
        for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
        out[g] = v;
    """
    right = """
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        int lane = threadIdx.x % 32;
        int lanes = min(32, (int)blockDim.x - (int)(threadIdx.x / 32) * 32);
        float v = x[g];
        for (int off = 16; off > 0; off /= 2) {
            float o = __shfl_down_sync(0xffffffffu, v, off);
            if (lane + off < lanes) v += o;
        }
        out[g] = v;
    """
    got = run(cuda, "poison_cu_tree", wrong, 40, 40)
    assert got[0] == sum(range(32)) and np.isnan(got[32])
    got = run(cuda, "poison_cu_tree_ok", right, 40, 40)
    assert got[0] == sum(range(32)) and got[32] == sum(range(32, 40))


@pytest.mark.slow
def test_cuda_shuffle_from_an_exited_lane(cuda):
    wrong = """
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        if (threadIdx.x % 32 == 5) { out[g] = -1; return; }
        out[g] = __shfl_sync(0xffffffffu, (int)g, 5);
    """
    right = """
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        int v = __shfl_sync(0xffffffffu, (int)g, 5);
        if (threadIdx.x % 32 == 5) { out[g] = -1; return; }
        out[g] = v;
    """
    got = run(cuda, "poison_cu_exit", wrong, 32, 32, dtype=mx.int32)
    np.testing.assert_array_equal(got, np.full(32, -1))  # lane 5's -1; the rest read poison, -1
    got = run(cuda, "poison_cu_exit_ok", right, 32, 32, dtype=mx.int32)
    np.testing.assert_array_equal(got, [-1 if i == 5 else 5 for i in range(32)])


@pytest.mark.slow
def test_cuda_up_down_keep_their_own_value_at_the_segment_edge(cuda):
    # Defined by the guide: lower/upper `delta` lanes of each width segment are unchanged.
    src = """
        int g = blockIdx.x * blockDim.x + threadIdx.x;
        float u = __shfl_up_sync(0xffffffffu, x[g], 2, 8);
        float d = __shfl_down_sync(0xffffffffu, x[g], 2, 8);
        out[g] = u * 1000.0f + d;
    """
    got = run(cuda, "poison_cu_edges", src, 32, 32)
    li = np.arange(32) % 8
    g = np.arange(32)
    up = np.where(li >= 2, g - 2, g)
    down = np.where(li < 6, g + 2, g)
    np.testing.assert_array_equal(got, up * 1000.0 + down)


# ---------------------------------------------------------------- threadgroup memory
TG_METAL = """
    threadgroup float tile[32];
    uint l = thread_position_in_threadgroup.x;
    uint g = thread_position_in_grid.x;
    if ({cond}) tile[l] = x[g];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[g] = tile[31 - l];
"""
TG_CUDA = """
    __shared__ float tile[32];
    int l = threadIdx.x;
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    if ({cond}) tile[l] = x[g];
    __syncthreads();
    out[g] = tile[31 - l];
"""


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow
def test_unwritten_threadgroup_memory_is_nan(metal, cuda, dialect):
    backend, src = (metal, TG_METAL) if dialect == "metal" else (cuda, TG_CUDA)
    got = run(backend, f"poison_tg_{dialect}", src.format(cond="l % 2 == 0"), 64, 32)
    g = np.arange(64)
    reads_even = (31 - g % 32) % 2 == 0
    assert np.all(np.isnan(got[~reads_even]))
    np.testing.assert_array_equal(got[reads_even], (g // 32 * 32 + 31 - g % 32)[reads_even])


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow
def test_written_threadgroup_memory_is_defined(metal, cuda, dialect):
    backend, src = (metal, TG_METAL) if dialect == "metal" else (cuda, TG_CUDA)
    got = run(backend, f"poison_tg_ok_{dialect}", src.format(cond="true"), 64, 32)
    g = np.arange(64)
    np.testing.assert_array_equal(got, g // 32 * 32 + 31 - g % 32)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_unwritten_threadgroup_integers_and_halves_are_all_ones(metal, cuda, dialect):
    if dialect == "metal":
        backend = metal
        src = """
            threadgroup uint iu[4];
            threadgroup half ih[4];
            threadgroup bfloat ib[4];
            uint g = thread_position_in_grid.x;
            out[g] = iu[g % 4] == 0xFFFFFFFFu && isnan(float(ih[g % 4])) && isnan(float(ib[g % 4]));
        """
    else:
        backend = cuda
        src = """
            __shared__ unsigned iu[4];
            __shared__ __half ih[4];
            __shared__ __nv_bfloat16 ib[4];
            int g = blockIdx.x * blockDim.x + threadIdx.x;
            out[g] = iu[g % 4] == 0xFFFFFFFFu && isnan((float)ih[g % 4]) && isnan((float)ib[g % 4]);
        """
    got = run(backend, f"poison_tg_types_{dialect}", src, 8, 4, dtype=mx.uint32, inputs=())
    np.testing.assert_array_equal(got, np.ones(8))


# ---------------------------------------------------------------- verification end to end
# saxpy whose lanes swap x with a neighbour and back: right only when the
# neighbour is active. Threads past N return early, so at the tail (N = 100003
# on the smoke size, 100003 % 32 = 3) lane 2's neighbour is gone.
SAXPY_SWAP = {
    "metal": """//! kernel saxpy
uint i = thread_position_in_grid.x;
{guard}
float xv = simd_shuffle_xor(simd_shuffle_xor(x[{j}], ushort(1)), ushort(1));
if (i < N) y_out[i] = a * xv + y[i];
""",
    "cuda": """//! kernel saxpy
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
{guard}
float xv = __shfl_xor_sync(0xffffffffu, __shfl_xor_sync(0xffffffffu, x[{j}], 1), 1);
if (i < N[0]) y_out[i] = a[0] * xv + y[i];
""",
}
EARLY_RETURN = {"metal": ("if (i >= N) return;", "i"), "cuda": ("if (i >= N[0]) return;", "i")}
CLAMPED = {"metal": ("", "min(i, N - 1)"), "cuda": ("", "min(i, N[0] - 1)")}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_candidate_reading_a_returned_lane_fails_verification(dialect):
    guard, j = EARLY_RETURN[dialect]
    ev = evaluate(
        "saxpy",
        SAXPY_SWAP[dialect].format(guard=guard, j=j),
        backend="sim",
        dialect=dialect,
        size_set="smoke",
        n_warmup=1,
        n_measure=1,
    )
    assert ev.compile_ok and not ev.correct, ev.fail_reason


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_its_twin_with_every_lane_active_passes(dialect):
    guard, j = CLAMPED[dialect]
    ev = evaluate(
        "saxpy",
        SAXPY_SWAP[dialect].format(guard=guard, j=j),
        backend="sim",
        dialect=dialect,
        size_set="smoke",
        n_warmup=1,
        n_measure=1,
    )
    assert ev.compile_ok and ev.correct, ev.fail_reason
