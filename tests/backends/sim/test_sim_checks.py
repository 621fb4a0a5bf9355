"""The simulator's opt-in checks, made by the profiled variant's hooks
(mlxsci/backends/sim/profile.py, Checks; runtime/sim_check.inc).

SimBackend.check_threadgroup_reads: a load of threadgroup (Metal) /
__shared__ (CUDA, static and `extern __shared__`) memory that no thread of
the group wrote since the group began is a KernelFault("uninitialized_read")
naming the array, the element, the thread, the group and the kernel. Each
faulty kernel has a correct twin that must pass with the output it has with
the check off: the write before the barrier, every slot written, an atomic
counter set by atomic_store, a kernel with no threadgroup memory. A store
the hooks cannot see (a loop the compiler turns into a memset of the fill
byte) is no report, and a read of unwritten memory after it still is.

SimBackend.watch_writes: the threads that stored to one element, in order.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend, profile
from mlxsci.kernel.spec import KernelFault, KernelSpec

pytestmark = [
    pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available"),
    pytest.mark.skipif(not profile.supported(), reason="the checks run in the profiled build"),
]


@pytest.fixture
def metal():
    return SimBackend(dialect="metal", launch_timeout_s=30.0)


@pytest.fixture
def cuda():
    return SimBackend(dialect="cuda", launch_timeout_s=30.0)


def launch(backend, name, body, *, grid, threadgroup, n=None, dtype=mx.float32, **spec):
    """The output of `body` (no inputs, one output `out` of n elements), or
    the KernelFault it raised."""
    k = backend.kernel(KernelSpec(name, (), ("out",), body, dialect=backend.dialect, **spec))
    try:
        (out,) = k(
            inputs=[],
            output_shapes=[(n or grid[0] * grid[1] * grid[2],)],
            output_dtypes=[dtype],
            grid=grid,
            threadgroup=threadgroup,
            init_value=0,
        )
    except KernelFault as fault:
        return fault
    return np.asarray(out)


def checked_and_unchecked(backend, name, body, **call):
    """(with the check on, with it off) of one kernel."""
    backend.check_threadgroup_reads = True
    on = launch(backend, name, body, **call)
    backend.check_threadgroup_reads = False
    return on, launch(backend, name, body, **call)


def assert_read_fault(fault, array, element, thread, group, kernel):
    assert isinstance(fault, KernelFault), fault
    assert fault.kind == "uninitialized_read", fault
    d = fault.details
    assert (d["array"], d["element"], d["thread"], d["group"], d["access"]) == (
        array,
        element,
        thread,
        group,
        "read",
    ), d
    assert f"'{kernel}'" in fault.message


# ---------------------------------------------------------------- Metal tiles
# A 2D tile of 4x2 threads with a halo column: thread (x, y) stores tile[y][x]
# and, where x == 3, the halo tile[y][4]; after the barrier each reads its
# right neighbour's slot. Groups of 4x2 on an 8x4 grid.
TILE = """
uint2 l = thread_position_in_threadgroup.xy;
uint2 g = thread_position_in_grid.xy;
threadgroup float tile[2][5];
tile[l.y][l.x] = float(g.y * 8 + g.x);
{halo}
threadgroup_barrier(mem_flags::mem_threadgroup);
out[g.y * 8 + g.x] = tile[l.y][l.x + 1];
"""
HALO = "if (l.x == 3) tile[l.y][4] = float(g.y * 8 + g.x + 1);"


def tile_expected():
    return np.arange(32, dtype=np.float32) + 1


def test_metal_read_of_the_halo_nobody_wrote_names_array_element_thread_group(metal):
    fault, unchecked = checked_and_unchecked(
        metal, "tile_no_halo", TILE.format(halo=""), grid=(8, 4, 1), threadgroup=(4, 2, 1)
    )
    # Thread (3, 0) of the first group reads tile[0][4], flat element 4.
    assert_read_fault(fault, "tile", 4, [3, 0, 0], [0, 0, 0], "tile_no_halo")
    assert "threadgroup array 'tile' (float[2][5]) element 4" in fault.message
    assert "thread (3, 0, 0) of threadgroup (0, 0, 0)" in fault.message
    # unchecked, the same read returns poison: NaN
    assert np.isnan(unchecked.reshape(4, 8)[:, [3, 7]]).all()


def test_metal_tile_with_the_halo_written_before_the_barrier_passes_unchanged(metal):
    checked, unchecked = checked_and_unchecked(
        metal, "tile_halo", TILE.format(halo=HALO), grid=(8, 4, 1), threadgroup=(4, 2, 1)
    )
    np.testing.assert_array_equal(checked, tile_expected())
    np.testing.assert_array_equal(checked, unchecked)


@pytest.mark.parametrize("schedule", [1, 2])
def test_the_fault_names_the_first_reader_in_the_order_the_schedule_ran(metal, schedule):
    # reversed: the last group first, its threads last first; shuffled: some
    # thread x == 3 reads its row's halo (the launch's runs replay one seed)
    metal.schedule, metal.schedule_seed = schedule, 1234
    fault, _ = checked_and_unchecked(
        metal, "tile_no_halo", TILE.format(halo=""), grid=(8, 4, 1), threadgroup=(4, 2, 1)
    )
    if schedule == 1:
        assert_read_fault(fault, "tile", 9, [3, 1, 0], [1, 1, 0], "tile_no_halo")
    else:
        y = fault.details["thread"][1]
        assert_read_fault(
            fault, "tile", 5 * y + 4, [3, y, 0], fault.details["group"], "tile_no_halo"
        )


def test_the_check_and_the_modelled_clock_share_a_profiled_launch(metal):
    """The sim timer's first launch of a kind runs the profiled variant with
    its counters; the check runs in the same launch."""
    metal.activity, metal.launch_models, metal.model_parts = [], {}, {}
    metal.check_threadgroup_reads = True
    out = launch(
        metal, "tile_clocked", TILE.format(halo=HALO), grid=(8, 4, 1), threadgroup=(4, 2, 1)
    )
    np.testing.assert_array_equal(out, tile_expected())
    assert [a[0] for a in metal.activity] == ["tile_clocked"]
    assert metal.model_parts["tile_clocked"]["tg_requests"] > 0
    metal.launch_models = {}
    fault = launch(
        metal, "tile_clocked_bad", TILE.format(halo=""), grid=(8, 4, 1), threadgroup=(4, 2, 1)
    )
    assert_read_fault(fault, "tile", 4, [3, 0, 0], [0, 0, 0], "tile_clocked_bad")


def test_metal_every_slot_written_then_read_anywhere_passes(metal):
    body = """
    uint l = thread_position_in_threadgroup.x;
    uint i = thread_position_in_grid.x;
    threadgroup float slots[64];
    slots[2 * l] = float(i);
    slots[2 * l + 1] = float(i) + 0.5f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = slots[63 - l] + slots[(5 * l) % 64];
    """
    checked, unchecked = checked_and_unchecked(
        metal, "all_slots", body, grid=(64, 1, 1), threadgroup=(32, 1, 1)
    )
    assert not np.isnan(checked).any()
    np.testing.assert_array_equal(checked, unchecked)


def test_metal_read_of_a_slot_no_thread_writes_on_the_fiber_free_path(metal):
    # No barrier, so the fiber-free path: thread 1 reads slot 1, which only
    # thread 0 would have written had it taken the branch.
    body = """
    uint l = thread_position_in_threadgroup.x;
    uint i = thread_position_in_grid.x;
    threadgroup float t[8];
    if (l != 1) t[l] = 2.0f;
    out[i] = t[l];
    """
    fault, _ = checked_and_unchecked(
        metal, "fast_path", body, grid=(16, 1, 1), threadgroup=(8, 1, 1)
    )
    assert_read_fault(fault, "t", 1, [1, 0, 0], [0, 0, 0], "fast_path")


def test_metal_vector_load_over_an_unwritten_element_is_reported(metal):
    body = """
    uint l = thread_position_in_threadgroup.x;
    uint i = thread_position_in_grid.x;
    threadgroup float t[32 * 4];
    for (int j = 0; j < 4; ++j) if (j != 2 || l != 7) t[4 * l + j] = float(j);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float4 v = ((threadgroup float4*)t)[(l + 1) % 32];
    out[i] = v.x + v.y + v.z + v.w;
    """
    fault, _ = checked_and_unchecked(metal, "vec4", body, grid=(32, 1, 1), threadgroup=(32, 1, 1))
    assert_read_fault(fault, "t", 30, [6, 0, 0], [0, 0, 0], "vec4")


# ---------------------------------------------------------------- atomics
ATOMIC_COUNTER = """
uint l = thread_position_in_threadgroup.x;
uint i = thread_position_in_grid.x;
threadgroup atomic_uint count;
{init}
atomic_fetch_add_explicit(&count, 1u, memory_order_relaxed);
threadgroup_barrier(mem_flags::mem_threadgroup);
out[i] = atomic_load_explicit(&count, memory_order_relaxed);
"""
ATOMIC_INIT = """if (l == 0) atomic_store_explicit(&count, 0u, memory_order_relaxed);
threadgroup_barrier(mem_flags::mem_threadgroup);"""


def test_metal_atomic_counter_set_by_atomic_store_is_no_false_positive(metal):
    checked, unchecked = checked_and_unchecked(
        metal,
        "atomic_init",
        ATOMIC_COUNTER.format(init=ATOMIC_INIT),
        grid=(48, 1, 1),
        threadgroup=(32, 1, 1),
        dtype=mx.uint32,
    )
    np.testing.assert_array_equal(checked, [32] * 32 + [16] * 16)
    np.testing.assert_array_equal(checked, unchecked)


def test_metal_atomic_counter_never_set_is_read_by_its_first_add(metal):
    fault, _ = checked_and_unchecked(
        metal,
        "atomic_no_init",
        ATOMIC_COUNTER.format(init=""),
        grid=(48, 1, 1),
        threadgroup=(32, 1, 1),
        dtype=mx.uint32,
    )
    assert_read_fault(fault, "count", 0, [0, 0, 0], [0, 0, 0], "atomic_no_init")


# ---------------------------------------------------------------- unseen stores
# Thread 0 sets the first `n` slots to all ones in a loop, which the compiler
# may turn into a memset of 0xFF: a store the hooks do not see, of the very
# byte threadgroup memory is poisoned with.
ALL_ONES = """
uint l = thread_position_in_threadgroup.x;
uint i = thread_position_in_grid.x;
threadgroup uint t[32];
if (l == 0) for (int j = 0; j < {n}; ++j) t[j] = 0xFFFFFFFFu;
threadgroup_barrier(mem_flags::mem_threadgroup);
out[i] = t[l] - 1u;
"""


def test_store_of_the_poison_byte_the_hooks_may_not_see_is_no_false_positive(metal):
    checked, unchecked = checked_and_unchecked(
        metal,
        "all_ones",
        ALL_ONES.format(n=32),
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        dtype=mx.uint32,
    )
    np.testing.assert_array_equal(checked, [0xFFFFFFFE] * 32)
    np.testing.assert_array_equal(checked, unchecked)


def test_read_of_unwritten_memory_after_such_a_store_is_still_reported(metal):
    fault, _ = checked_and_unchecked(
        metal,
        "half_ones",
        ALL_ONES.format(n=16),
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        dtype=mx.uint32,
    )
    assert_read_fault(fault, "t", 16, [16, 0, 0], [0, 0, 0], "half_ones")


# ---------------------------------------------------------------- CUDA
SHARED = """
int l = threadIdx.x;
int i = blockIdx.x * blockDim.x + threadIdx.x;
__shared__ float s[32];
if (l != {skip}) s[l] = float(i);
__syncthreads();
out[i] = s[(l + 1) % 32];
"""


def test_cuda_shared_read_before_write_names_array_and_block(cuda):
    fault, _ = checked_and_unchecked(
        cuda, "shared_gap", SHARED.format(skip=9), grid=(64, 1, 1), threadgroup=(32, 1, 1)
    )
    assert_read_fault(fault, "s", 9, [8, 0, 0], [0, 0, 0], "shared_gap")
    assert "__shared__ array 's' (float[32]) element 9" in fault.message
    assert "before any thread of the block wrote it" in fault.message
    assert "thread (8, 0, 0) of block (0, 0, 0)" in fault.message


def test_cuda_shared_fully_written_passes_unchanged(cuda):
    checked, unchecked = checked_and_unchecked(
        cuda, "shared_full", SHARED.format(skip=-1), grid=(64, 1, 1), threadgroup=(32, 1, 1)
    )
    np.testing.assert_array_equal(checked, (np.arange(64) // 32) * 32 + (np.arange(64) + 1) % 32)
    np.testing.assert_array_equal(checked, unchecked)


DYNAMIC = """
int l = threadIdx.x;
int i = blockIdx.x * blockDim.x + threadIdx.x;
extern __shared__ float dyn[];
if (l < {written}) dyn[l] = float(i);
__syncthreads();
out[i] = dyn[31 - l];
"""


def test_cuda_extern_shared_read_before_write_names_the_byte(cuda):
    fault, _ = checked_and_unchecked(
        cuda,
        "dyn_gap",
        DYNAMIC.format(written=30),
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        shared_memory=32 * 4,
    )
    # Thread 0 reads dyn[31], bytes 124..127.
    assert_read_fault(fault, "extern __shared__", 124, [0, 0, 0], [0, 0, 0], "dyn_gap")
    assert "dynamic shared memory (extern __shared__) at byte 124" in fault.message


def test_cuda_extern_shared_fully_written_passes_unchanged(cuda):
    checked, unchecked = checked_and_unchecked(
        cuda,
        "dyn_full",
        DYNAMIC.format(written=32),
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        shared_memory=32 * 4,
    )
    np.testing.assert_array_equal(checked, 31 - np.arange(32))
    np.testing.assert_array_equal(checked, unchecked)


# ---------------------------------------------------------------- no threadgroup memory
def test_kernel_without_threadgroup_memory_is_not_checked(metal):
    body = "uint i = thread_position_in_grid.x; out[i] = float(i) * 2.0f;"
    checked, unchecked = checked_and_unchecked(
        metal, "no_tg", body, grid=(40, 1, 1), threadgroup=(32, 1, 1)
    )
    np.testing.assert_array_equal(checked, np.arange(40) * 2.0)
    np.testing.assert_array_equal(checked, unchecked)
    metal.check_threadgroup_reads = True
    assert profile.checks_of(metal, 0) is None  # the plain variant runs: nothing to check
    assert profile.checks_of(metal, 128) is not None


def test_check_off_by_default():
    backend = SimBackend(dialect="metal")
    assert backend.check_threadgroup_reads is False
    assert backend.watch_writes is None
    assert profile.checks_of(backend, 128) is None


# ---------------------------------------------------------------- watched writes
RACE = """
uint i = thread_position_in_grid.x;
if (i == 3 || i == {second}) out[0] = float(i);
else if (i != 0) out[i] = 1.0f;
"""


def test_watch_records_both_threads_that_write_one_element_in_order(metal):
    metal.watch_writes = ("out", 0)
    launch(metal, "race", RACE.format(second=9), grid=(16, 1, 1), threadgroup=(8, 1, 1))
    assert metal.watched_write_count == 2
    assert metal.watched_writes == [
        {"group": [0, 0, 0], "thread": [3, 0, 0]},
        {"group": [1, 0, 0], "thread": [1, 0, 0]},
    ]
    metal.schedule = 1  # reversed: the last group first
    launch(metal, "race", RACE.format(second=9), grid=(16, 1, 1), threadgroup=(8, 1, 1))
    assert [w["group"][0] for w in metal.watched_writes] == [1, 0]


def test_watch_records_the_one_writer(metal):
    metal.watch_writes = ("out", 0)
    launch(metal, "one_writer", RACE.format(second=3), grid=(16, 1, 1), threadgroup=(8, 1, 1))
    assert metal.watched_write_count == 1
    assert metal.watched_writes == [{"group": [0, 0, 0], "thread": [3, 0, 0]}]
    metal.watch_writes = ("out", 5)
    launch(metal, "one_writer", RACE.format(second=3), grid=(16, 1, 1), threadgroup=(8, 1, 1))
    assert metal.watched_writes == [{"group": [0, 0, 0], "thread": [5, 0, 0]}]


def test_watch_sees_atomic_stores_and_caps_its_records(cuda):
    body = """
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&out[0], 1.0f);
    """
    cuda.watch_writes = ("out", 0)
    out = launch(cuda, "atomic_watch", body, grid=(100, 1, 1), threadgroup=(32, 1, 1), n=1)
    # CUDA runs whole blocks: 4 blocks of 32 threads
    assert out[0] == 128
    assert cuda.watched_write_count == 128
    assert len(cuda.watched_writes) == profile.WATCH_CAP
    assert cuda.watched_writes[33] == {"group": [1, 0, 0], "thread": [1, 0, 0]}


def test_watch_of_an_unknown_buffer_or_element_is_refused(metal):
    metal.watch_writes = ("nope", 0)
    with pytest.raises(ValueError, match="nope"):
        launch(
            metal,
            "w",
            "out[thread_position_in_grid.x] = 1.0f;",
            grid=(4, 1, 1),
            threadgroup=(4, 1, 1),
        )
    metal.watch_writes = ("out", 4)
    with pytest.raises(ValueError, match="out of range"):
        launch(
            metal,
            "w",
            "out[thread_position_in_grid.x] = 1.0f;",
            grid=(4, 1, 1),
            threadgroup=(4, 1, 1),
        )
