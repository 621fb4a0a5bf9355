"""The simulator's device-memory race detector and its lock-step lanes
(runtime/sim_race.inc; issue 41, outcome 1).

The simulator runs a launch's threads one after another between barriers, so
two threads that touch one element of a buffer without anything ordering
them never interleave, and the answer is the one a GPU gives only sometimes.
With SimBackend.check_device_races the profiled variant's hooks name such a
race between two stores: the buffer, the element and both threads. Each
racy kernel has a twin that is not a race (a barrier between the stores, a
SIMD operation, an atomic, the same value written twice), which must run
clean. A load racing a store is left to the other orders, which show it
where it changes an output. The lock-step order runs each simdgroup's lanes in turns at every
device-memory access, as a GPU's do, so a read-modify-write split into two
atomic operations loses updates there and not in the other orders.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.base import RunMode
from mlxsci.backends.sim import SimBackend, profile
from mlxsci.kernel.spec import KernelFault, KernelSpec

pytestmark = [
    pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available"),
    pytest.mark.skipif(not profile.supported(), reason="the detector runs in the profiled build"),
]

INDEX = {
    "metal": "int i = int(thread_position_in_grid.x);",
    "cuda": "int i = blockIdx.x * blockDim.x + threadIdx.x;",
}
BARRIER = {
    "metal": "threadgroup_barrier(mem_flags::mem_device);",
    "cuda": "__syncthreads();",
}
SIMD_BARRIER = {"metal": "simdgroup_barrier(mem_flags::mem_device);", "cuda": "__syncwarp();"}
ATOMIC_ADD = {
    "metal": "atomic_fetch_add_explicit((device atomic_int*)&y[x[i]], 1, memory_order_relaxed);",
    "cuda": "atomicAdd(&y[x[i]], 1);",
}
# The same count with the read-modify-write split into two atomic operations:
# no data race (both are atomic), but lanes that read before any writes back
# lose updates.
SPLIT_ADD = {
    "metal": """device atomic_int* c = (device atomic_int*)&y[x[i]];
int s = atomic_load_explicit(c, memory_order_relaxed);
atomic_store_explicit(c, s + 1, memory_order_relaxed);""",
    "cuda": """int s = atomicAdd(&y[x[i]], 0);
atomicExch(&y[x[i]], s + 1);""",
}
BINS = np.arange(64, dtype=np.int32) % 5  # thread i counts into bin i % 5


@pytest.fixture(params=["metal", "cuda"])
def dialect(request):
    return request.param


def run(dialect, body, *, races=True, mode=None, tg=32, n=64, out=8):
    """The int32 output of one launch of `body` (after `i`, the thread's
    index) over x = BINS, or the KernelFault it raised."""
    backend = SimBackend(dialect=dialect, launch_timeout_s=30.0)
    backend.check_device_races = races
    spec = KernelSpec("k", ("x",), ("y",), INDEX[dialect] + "\n" + body, dialect=dialect)
    try:
        (y,) = backend.kernel(spec)(
            inputs=[mx.array(BINS[:n])],
            output_shapes=[(out,)],
            output_dtypes=[mx.int32],
            grid=(n, 1, 1),
            threadgroup=(tg, 1, 1),
            init_value=0,
            mode=mode,
        )
    except KernelFault as fault:
        return fault
    return np.asarray(y)


def assert_race(fault, element, first, second):
    """`fault` names a data race on output y's `element`: `first` and
    `second` are (access, group, thread) of the earlier and the later access."""
    assert isinstance(fault, KernelFault) and fault.kind == "race", fault
    d = fault.details
    assert (d["buffer"], d["role"], d["element"], d["kernel"]) == ("y", "output", element, "k")
    for seen, (access, group, thread) in ((d["first"], first), (d["second"], second)):
        assert seen["access"] == access
        assert tuple(seen["group"]) == group and tuple(seen["thread"]) == thread
    assert f"data race on output 'y' element {element} in kernel 'k'" in fault.message


def test_a_scatter_without_atomics_is_a_race_naming_both_threads(dialect):
    fault = run(dialect, "y[x[i]] = y[x[i]] + 1;")
    # Thread 0 stores bin 0; thread 5 (bin 0 too) stores over it: two stores
    # end the launch at once (thread 5's load of thread 0's store is a
    # suspect until then).
    assert_race(fault, 0, ("write", (0, 0, 0), (0, 0, 0)), ("write", (0, 0, 0), (5, 0, 0)))
    assert "neither access atomic" in fault.message
    # The same kernel without the detector: the right count, as the simulator
    # runs the threads one after another (no GPU promises it).
    assert list(run(dialect, "y[x[i]] = y[x[i]] + 1;", races=False)[:5]) == [13, 13, 13, 13, 12]


def test_the_scatter_with_an_atomic_add_is_no_race(dialect):
    assert list(run(dialect, ATOMIC_ADD[dialect])[:5]) == [13, 13, 13, 13, 12]


def test_threads_writing_the_value_already_there_are_no_race(dialect):
    # Every thread of a bin writes the same value: benign, whatever the order.
    assert list(run(dialect, "y[x[i]] = 7;")[:6]) == [7, 7, 7, 7, 7, 0]


def test_stores_by_two_groups_are_a_race(dialect):
    # Thread 0 of group 1 stores over what thread 0 of group 0 stored: nothing orders groups.
    body = "if (i == 0) y[0] = 5;\nif (i == 32) y[0] = 6;"
    fault = run(dialect, body)
    assert_race(fault, 0, ("write", (0, 0, 0), (0, 0, 0)), ("write", (1, 0, 0), (0, 0, 0)))
    assert "in different threadgroups" in fault.message or "in different blocks" in fault.message


def test_a_barrier_orders_the_stores_of_its_group(dialect):
    # Thread i stores y[i], then y[i + 1], which thread i + 1 stored.
    racy = "y[i] = i;\ny[(i + 1) % 8] = 10 * i;"
    fault = run(dialect, racy, n=8, tg=8)
    assert isinstance(fault, KernelFault) and fault.kind == "race", fault
    # A barrier between the first stores and the second: ordered.
    ordered = f"y[i] = i;\n{BARRIER[dialect]}\ny[(i + 1) % 8] = 10 * i;"
    assert list(run(dialect, ordered, n=8, tg=8)) == [70, 0, 10, 20, 30, 40, 50, 60]


def test_a_simd_operation_orders_its_simdgroup_but_not_another(dialect):
    # Lane 0 stores, lane 5 of its simdgroup stores over it after the SIMD barrier.
    body = f"if (i == 0) y[0] = 9;\n{SIMD_BARRIER[dialect]}\nif (i == 5) y[0] = 7;"
    assert list(run(dialect, body, n=64, tg=64, out=2)) == [7, 0]
    # A lane of the other simdgroup of the group: the SIMD barrier orders
    # only its own simdgroup's lanes.
    across = body.replace("i == 5", "i == 40")
    fault = run(dialect, across, n=64, tg=64, out=2)
    assert_race(fault, 0, ("write", (0, 0, 0), (0, 0, 0)), ("write", (0, 0, 0), (40, 0, 0)))


def test_loads_racing_a_store_are_left_to_the_other_orders(dialect):
    # A tile's halo loaded whole, one colour of a checkerboard updated: every
    # thread loads its neighbours, those of the colour updated store. The
    # other colour's loads race the stores and go nowhere.
    body = """int l = y[(i + 7) % 8];
int r = y[(i + 1) % 8];
if (i % 2 == 0) y[i] = l + r + 1;"""
    assert list(run(dialect, body, n=8, tg=8)) == [1, 0, 1, 0, 1, 0, 1, 0]
    # A load whose value does reach an output is not named either: the
    # reversed order shows it (y[1] is 0 or 5 as thread 1 runs before or
    # after thread 3).
    body = "int v = y[0];\ny[i + 1] = v;\nif (i == 3) y[0] = 5;"
    assert list(run(dialect, body, n=8, tg=8, out=9)) == [5, 0, 0, 0, 0, 5, 5, 5, 5]
    reversed_order = run(dialect, body, n=8, tg=8, out=9, mode=RunMode(order="reversed"))
    assert list(reversed_order) == [5, 5, 5, 5, 0, 0, 0, 0, 0]


def test_lock_step_lanes_lose_the_updates_of_a_split_read_modify_write(dialect):
    """The lj mutant's shape: both halves atomic, so no data race, and in
    every order that runs a thread's two operations back to back the count
    is right; lanes taking turns at each access read the same count first."""
    body = SPLIT_ADD[dialect]
    right = [13, 13, 13, 13, 12]
    for order in (None, RunMode(order="reversed"), RunMode(order="shuffled", order_seed=5)):
        assert list(run(dialect, body, mode=order)[:5]) == right
    lost = run(dialect, body, mode=RunMode(order="lockstep"))
    # 32 lanes, bins i % 5: each simdgroup adds 1 to each bin it touches.
    assert list(lost[:5]) == [2, 2, 2, 2, 2]
    # One atomic operation per update loses nothing in lock-step.
    atomic = run(dialect, ATOMIC_ADD[dialect], mode=RunMode(order="lockstep"))
    assert list(atomic[:5]) == right


def test_lock_step_runs_the_race_detector_without_the_flag(dialect):
    # A kernel without atomics runs its lock-step run in its usual order (no
    # split atomic operation can lose an update there that the detector
    # would not name): thread 0 stores, thread 5 then loads.
    fault = run(dialect, "y[x[i]] = y[x[i]] + 1;", races=False, mode=RunMode(order="lockstep"))
    assert_race(fault, 0, ("write", (0, 0, 0), (0, 0, 0)), ("write", (0, 0, 0), (5, 0, 0)))
    # With an atomic operation in it, the lanes take turns: every lane of the
    # simdgroup loads its bin (0) before any stores back, so their stores all
    # write 1, the same value (no report), and the first store that changes
    # what another thread stored is the next group's: thread 0 of group 1
    # (bin 2) writes 2 over the 1 that lane 27, bin 2's last lane, stored.
    body = "y[x[i]] = y[x[i]] + 1;\n" + ATOMIC_ADD[dialect].replace("y[x[i]]", "y[7]")
    fault = run(dialect, body, races=False, mode=RunMode(order="lockstep"))
    assert_race(fault, 2, ("write", (0, 0, 0), (27, 0, 0)), ("write", (1, 0, 0), (0, 0, 0)))


def test_the_worker_plans_the_lock_step_run_only_where_asked():
    backend = SimBackend(dialect="metal")
    names = [name for name, _, _ in backend.other_orders([1], lockstep=True)]
    assert names == ["reversed", "shuffled", "lockstep"]
    assert [name for name, _, _ in backend.other_orders([1])] == ["reversed", "shuffled"]


def test_the_threads_are_named_in_a_partial_group_of_a_two_dimensional_grid():
    # Grid 10 x 3 in groups of 4 x 2: group (2, 1) holds 2 x 1 threads.
    body = """uint2 p = thread_position_in_grid.xy;
if (p.x == 0 && p.y == 0) y[0] = 3;
if (p.x == 9 && p.y == 2) y[0] = 5;"""
    backend = SimBackend(dialect="metal", launch_timeout_s=30.0)
    backend.check_device_races = True
    spec = KernelSpec("k", ("x",), ("y",), body, dialect="metal")
    with pytest.raises(KernelFault) as e:
        backend.kernel(spec)(
            inputs=[mx.array(BINS)],
            output_shapes=[(2,)],
            output_dtypes=[mx.int32],
            grid=(10, 3, 1),
            threadgroup=(4, 2, 1),
            init_value=0,
        )
    assert_race(e.value, 0, ("write", (0, 0, 0), (0, 0, 0)), ("write", (2, 1, 0), (1, 0, 0)))


def test_cuda_lanes_in_lock_step_read_their_own_thread_index():
    # threadIdx after device accesses: CUDA's glue keeps the running thread in
    # a pointer of its own, which the lanes' turns inside the hooks must move.
    body = """int v = x[i];
atomicAdd(&y[v], 1);
if (threadIdx.x == 0) atomicAdd(&y[7], (int)blockIdx.x + 1);"""
    forward = run("cuda", body)
    assert list(forward) == [13, 13, 13, 13, 12, 0, 0, 3]
    assert list(run("cuda", body, mode=RunMode(order="lockstep"))) == list(forward)
