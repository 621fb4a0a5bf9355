"""The simulator's opt-in device-buffer checks, made by the profiled variant's
hooks (mlxsci/backends/sim/profile.py, Checks; runtime/sim_check.inc).

SimBackend.check_device_bounds: every input and output lies in a guarded
mapping, but between its data and the guard pages there are up to 15 bytes
of alignment slack (end-aligned placement) or the page padding before it
(also end-aligned) and after it (start-aligned): an access there faults
nowhere, and a write of the slack's own byte goes unnoticed. With the check
on, the first load or store touching a byte outside the data raises the
KernelFault("out_of_bounds") the guard pages give, naming the buffer, the
element, the access and the thread.

SimBackend.check_output_reads: in a call without init_value, the first load
of output bytes no thread stored earlier in the launch raises
KernelFault("uninitialized_read") naming the output, the element and the
thread.

Each faulty kernel has a correct twin that gives the output it has with the
checks off.
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

GARBAGE_FLOAT = np.frombuffer(b"\x5a" * 4, np.float32)[0]  # 1.5e16: the slack's bytes


@pytest.fixture(params=["metal", "cuda"])
def backend(request):
    return SimBackend(dialect=request.param, launch_timeout_s=30.0)


# The thread's flat index in either dialect (CUDA runs whole blocks: the
# bodies guard on the grid size themselves).
INDEX = {
    "metal": "int i = int(thread_position_in_grid.x);",
    "cuda": "int i = blockIdx.x * blockDim.x + threadIdx.x;",
}


def make(backend, name, body, inputs=("x",), outputs=("y",), **spec):
    """A kernel whose body starts with `i`, the thread's flat index."""
    source = INDEX[backend.dialect] + "\n" + body
    return backend.kernel(
        KernelSpec(name, tuple(inputs), tuple(outputs), source, dialect=backend.dialect, **spec)
    )


def call(kernel, inputs, n, *, grid=None, threadgroup=(8, 1, 1), dtype=mx.float32, **kw):
    """The outputs (numpy) of one call, or the KernelFault it raised."""
    outputs = kw.pop("outputs", 1)
    try:
        outs = kernel(
            inputs=inputs,
            output_shapes=[(n,)] * outputs,
            output_dtypes=[dtype] * outputs,
            grid=grid or (n, 1, 1),
            threadgroup=threadgroup,
            **kw,
        )
    except KernelFault as fault:
        return fault
    return [np.asarray(o) for o in outs]


def assert_oob(fault, buffer, role, element, access, thread, group=(0, 0, 0)):
    assert isinstance(fault, KernelFault), fault
    assert fault.kind == "out_of_bounds", fault
    d = fault.details
    assert (d["buffer"], d["role"], d["element"], d["access"]) == (
        buffer,
        role,
        element,
        access,
    ), d
    assert tuple(d["thread"]) == thread and tuple(d["group"]) == group, d
    side = "before the start" if element < 0 else "past the end"
    assert f"out-of-bounds {access} of {role} '{buffer}' at element {element} ({side}" in str(fault)


# ---------------------------------------------------------------- device bounds
SHIFT = "if (i < 6) y[i] = x[i + 1];"


def test_read_one_past_an_input_in_the_alignment_slack_is_out_of_bounds(backend):
    # 6 float32 = 24 bytes: the end-aligned placement leaves 8 bytes of slack
    # after them, so x[6] is no guard page's; thread 5 reads it.
    backend.check_device_bounds = True
    k = make(backend, "shift", SHIFT)
    x = mx.arange(6, dtype=mx.float32)
    for _placement in range(2):
        fault = call(k, [x], 6)
        assert_oob(fault, "x", "input", 6, "read", (5, 0, 0))
        assert "valid elements 0..5" in str(fault)


def test_with_the_check_off_the_read_returns_the_slack_bytes(backend):
    # The gap the check closes: at both placements the read faults nowhere.
    k = make(backend, "shift", SHIFT)
    x = mx.arange(6, dtype=mx.float32)
    for _placement in range(2):
        (y,) = call(k, [x], 6)
        np.testing.assert_array_equal(y[:5], np.arange(1, 6))
        assert y[5] == GARBAGE_FLOAT


INT8_PAST = "if (i < 3) y[i + 1] = x[i];"


def test_an_int8_write_of_the_slack_byte_one_past_the_end_is_caught(backend):
    # The last thread writes y[3] = 90 = 0x5A, the slack's own byte: the
    # comparison of the slack after the launch cannot see it.
    x = mx.array([1, 2, 90], dtype=mx.int8)
    k = make(backend, "past8", INT8_PAST)
    (y,) = call(k, [x], 3, dtype=mx.int8, init_value=0)
    assert y.tolist() == [0, 1, 2]  # unchecked: nothing noticed
    backend.check_device_bounds = True
    fault = call(k, [x], 3, dtype=mx.int8, init_value=0)
    assert_oob(fault, "y", "output", 3, "write", (2, 0, 0))


def test_a_read_before_the_start_is_caught_at_both_placements(backend):
    # x[-1]: in the page padding before the data at the end-aligned
    # placement (no fault today), in the guard page at the start-aligned one.
    backend.check_device_bounds = True
    k = make(backend, "before", "if (i < 6) y[i] = x[i - 1];")
    x = mx.arange(6, dtype=mx.float32)
    first, second = call(k, [x], 6), call(k, [x], 6)
    for fault in (first, second):
        assert_oob(fault, "x", "input", -1, "read", (0, 0, 0))
    assert k.launches == 2  # one launch each, one at each placement


def test_a_float4_load_partly_past_the_end_is_caught(backend):
    vec = {"metal": "((const device float4*)x)", "cuda": "((const float4*)x)"}[backend.dialect]
    body = f"if (i < 3) {{ float4 v = {vec}[i]; y[i] = v.x + v.y + v.z + v.w; }}"
    k = make(backend, "vec4", body)
    backend.check_device_bounds = True
    # thread 2 loads elements 8..11 of 10: the first outside is element 10
    for _placement in range(2):
        fault = call(k, [mx.arange(10, dtype=mx.float32)], 3)
        assert_oob(fault, "x", "input", 10, "read", (2, 0, 0))
    (y,) = call(k, [mx.arange(12, dtype=mx.float32)], 3)
    np.testing.assert_array_equal(y, [6, 22, 38])


def test_an_atomic_one_past_the_end_is_caught(backend):
    if backend.dialect == "metal":
        body = "atomic_fetch_add_explicit(&y[i + 1], 1, memory_order_relaxed);"
    else:
        body = "if (i < 6) atomicAdd(&y[i + 1], 1);"
    k = make(backend, "atomic_past", body, inputs=(), atomic_outputs=True)
    backend.check_device_bounds = True
    fault = call(k, [], 6, dtype=mx.int32, init_value=0)
    assert_oob(fault, "y", "output", 6, "read", (5, 0, 0))


def test_a_zero_size_input_is_all_outside(backend):
    backend.check_device_bounds = True
    unread = make(backend, "unread", "if (i < 4) y[i] = 1.0f;")
    empty = mx.zeros((0,), dtype=mx.float32)
    (y,) = call(unread, [empty], 4)
    np.testing.assert_array_equal(y, [1, 1, 1, 1])
    read = make(backend, "read0", "if (i < 4) y[i] = x[0];")
    for _placement in range(2):
        assert_oob(call(read, [empty], 4), "x", "input", 0, "read", (0, 0, 0))


AXPY = "if (i < {n}) {{ y[i] = 2.0f * x[i] + z[i]; w[i] = y[i] - x[i]; }}"


def test_a_correct_kernel_gives_the_same_outputs_with_the_checks_on(backend):
    n = 37
    k = make(backend, "axpy", AXPY.format(n=n), inputs=("x", "z"), outputs=("y", "w"))
    x = mx.arange(n, dtype=mx.float32)
    z = mx.ones((n,), dtype=mx.float32)
    off = call(k, [x, z], n, outputs=2, threadgroup=(16, 1, 1))
    backend.check_device_bounds = backend.check_output_reads = True
    backend.check_threadgroup_reads = True
    on = call(k, [x, z], n, outputs=2, threadgroup=(16, 1, 1))
    for a, b in zip(off, on):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(on[0], 2 * np.arange(n) + 1)


def test_a_strided_input_passed_as_stored_read_whole_is_in_bounds(backend):
    # Reversed: the kernel's pointer is the span's last element; every
    # element it reaches through its strides lies in the span.
    if backend.dialect == "metal":
        body = "if (i < 16) y[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)];"
    else:
        body = "if (i < 16) y[i] = x[elem_to_loc(i, x_shape.data(), x_strides.data(), x_ndim)];"
    k = make(backend, "strided", body)
    backend.check_device_bounds = True
    base = mx.arange(16, dtype=mx.float32)
    for a in (base[::-1], base.reshape(4, 4)[::-1, ::-1], base.reshape(4, 4).T):
        for _placement in range(2):
            (y,) = call(k, [a], 16, as_stored=True)
            np.testing.assert_array_equal(y, np.array(a).reshape(-1))


def test_both_checks_on_at_once(backend):
    # The threadgroup-read check and the bounds check in one launch: the
    # out-of-bounds read comes first in run order.
    if backend.dialect == "metal":
        body = """
        threadgroup float t[8];
        t[thread_position_in_threadgroup.x] = float(i);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (i < 6) y[i] = t[(i + 1) % 8] + x[i + 1];
        """
    else:
        body = """
        __shared__ float t[8];
        t[threadIdx.x] = float(i);
        __syncthreads();
        if (i < 6) y[i] = t[(i + 1) % 8] + x[i + 1];
        """
    k = make(backend, "both", body)
    backend.check_threadgroup_reads = backend.check_device_bounds = True
    x = mx.arange(6, dtype=mx.float32)
    assert_oob(
        call(k, [x], 6, threadgroup=(8, 1, 1), grid=(8, 1, 1)), "x", "input", 6, "read", (5, 0, 0)
    )


# ---------------------------------------------------------------- output reads
def assert_uninit(fault, buffer, element, thread, group=(0, 0, 0), kernel=None):
    assert isinstance(fault, KernelFault), fault
    assert fault.kind == "uninitialized_read", fault
    d = fault.details
    assert (d["buffer"], d["role"], d["element"], d["access"]) == (
        buffer,
        "output",
        element,
        "read",
    ), d
    assert tuple(d["thread"]) == thread and tuple(d["group"]) == group, d
    assert f"read of output '{buffer}' element {element} before any thread wrote it" in str(fault)
    assert "pass init_value" in str(fault)
    if kernel:
        assert f"in kernel '{kernel}'" in str(fault)


MAX_IN_PLACE = "if (i < 6) y[i] = max(y[i], x[i]);"


def test_an_output_read_before_any_write_without_init_value(backend):
    backend.check_output_reads = True
    k = make(backend, "maxin", MAX_IN_PLACE)
    x = mx.arange(6, dtype=mx.float32)
    fault = call(k, [x], 6)
    assert_uninit(fault, "y", 0, (0, 0, 0), kernel="maxin")
    backend.schedule = 1  # reversed: the last thread reads first
    assert_uninit(call(k, [x], 6), "y", 5, (5, 0, 0))


def test_the_same_read_with_init_value_is_fine(backend):
    backend.check_output_reads = True
    k = make(backend, "maxin", MAX_IN_PLACE)
    x = mx.arange(6, dtype=mx.float32) - 2
    (y,) = call(k, [x], 6, init_value=0)
    np.testing.assert_array_equal(y, [0, 0, 0, 1, 2, 3])


def test_a_thread_reading_back_its_own_store_is_fine(backend):
    backend.check_output_reads = True
    k = make(backend, "readback", "if (i < 6) { y[i] = x[i]; y[i] = y[i] * 2.0f; }")
    (y,) = call(k, [mx.arange(6, dtype=mx.float32)], 6)
    np.testing.assert_array_equal(y, 2 * np.arange(6))


def test_a_read_of_what_an_earlier_thread_stored_is_no_uninitialized_read(backend):
    # Thread i reads y[i - 1], stored before it in run order by thread i - 1
    # (a race on a GPU, which the schedules find; not this check's business).
    backend.check_output_reads = True
    body = "if (i < 6) { y[i] = x[i]; z[i] = i > 0 ? y[i - 1] : -1.0f; }"
    k = make(backend, "neighbour", body, outputs=("y", "z"))
    y, z = call(k, [mx.arange(6, dtype=mx.float32) + 10], 6, outputs=2)
    np.testing.assert_array_equal(y, np.arange(6) + 10)
    np.testing.assert_array_equal(z, [-1, 10, 11, 12, 13, 14])


@pytest.mark.parametrize("schedule", [0, 1, 2])
def test_a_read_of_what_another_thread_stores_later_is_a_race_not_this_checks(backend, schedule):
    # Thread i reads y[i ^ 1], which its neighbour stores before or after it
    # depending on the order: a race (the schedules find it), not a read of
    # memory nobody writes. The read is judged when the launch has run.
    backend.check_output_reads = True
    backend.schedule, backend.schedule_seed = schedule, 7
    body = "if (i < 8) { y[i] = x[i]; z[i] = y[i ^ 1]; }"
    k = make(backend, "pair", body, outputs=("y", "z"))
    out = call(k, [mx.arange(8, dtype=mx.float32)], 8, outputs=2)
    assert not isinstance(out, KernelFault), out


def test_an_output_element_no_thread_writes_read_by_another(backend):
    backend.check_output_reads = True
    body = "if (i < 6) { if (i != 2) y[i] = x[i]; z[i] = i > 0 ? y[i - 1] : -1.0f; }"
    k = make(backend, "gap", body, outputs=("y", "z"))
    # thread 3 reads y[2], which no thread writes
    assert_uninit(call(k, [mx.arange(6, dtype=mx.float32)], 6, outputs=2), "y", 2, (3, 0, 0))


BARRIER = {"metal": "threadgroup_barrier(mem_flags::mem_device);", "cuda": "__syncthreads();"}


@pytest.mark.parametrize("schedule", [0, 1, 2])
def test_reads_across_a_barrier_on_the_fiber_path(backend, schedule):
    # One fiber per thread: each reads its neighbour's element after the
    # barrier; with element 5 never written, its reader (thread 4) is named
    # whatever the order the threads ran in.
    backend.check_output_reads = True
    backend.schedule, backend.schedule_seed = schedule, 11
    body = "if (i != {skip}) y[i] = x[i];\n{barrier}\nz[i] = y[(i + 1) % 8];"
    x = mx.arange(8, dtype=mx.float32)
    full = make(
        backend, "full", body.format(skip=-1, barrier=BARRIER[backend.dialect]), outputs=("y", "z")
    )
    y, z = call(full, [x], 8, outputs=2)
    np.testing.assert_array_equal(z, (np.arange(8) + 1) % 8)
    gap = make(
        backend, "gap5", body.format(skip=5, barrier=BARRIER[backend.dialect]), outputs=("y", "z")
    )
    assert_uninit(call(gap, [x], 8, outputs=2), "y", 5, (4, 0, 0))


def test_a_zero_size_output_is_not_a_problem(backend):
    backend.check_output_reads = backend.check_device_bounds = True
    k = make(backend, "empty_out", "if (i < 4) y[i] = x[i];", outputs=("y", "e"))
    x = mx.arange(4, dtype=mx.float32)
    out = k(
        inputs=[x],
        output_shapes=[(4,), (0,)],
        output_dtypes=[mx.float32, mx.float32],
        grid=(4, 1, 1),
        threadgroup=(4, 1, 1),
    )
    np.testing.assert_array_equal(np.asarray(out[0]), np.arange(4))
    assert out[1].size == 0


def test_a_store_of_the_garbage_byte_the_hooks_may_not_see_is_no_false_positive(backend):
    # Thread 0 fills y with 0x5A5A5A5A in a loop the compiler may turn into
    # a memset of the garbage byte: a store the hooks do not see that leaves
    # the bytes as they were. The run with another garbage byte tells.
    fill = (
        "as_type<float>(0x5A5A5A5Au)"
        if backend.dialect == "metal"
        else "__int_as_float(0x5A5A5A5A)"
    )
    body = f"""
    if (i == 0) for (int j = 0; j < 64; ++j) y[j] = {fill};
    if (i < 64 && i > 0) z[i] = y[i];
    if (i == 0) z[0] = 0.0f;
    """
    k = make(backend, "memset_garbage", body, inputs=(), outputs=("y", "z"))
    off = call(k, [], 64, outputs=2, threadgroup=(64, 1, 1))
    backend.check_output_reads = True
    on = call(k, [], 64, outputs=2, threadgroup=(64, 1, 1))
    assert not isinstance(on, KernelFault), on
    for a, b in zip(off, on):
        np.testing.assert_array_equal(a, b)
    assert (on[1][1:] == GARBAGE_FLOAT).all()


def test_checks_off_by_default():
    backend = SimBackend(dialect="metal")
    assert backend.check_device_bounds is False
    assert backend.check_output_reads is False
    assert profile.checks_of(backend, 0) is None
    backend.check_output_reads = True
    assert profile.checks_of(backend, 0, init_value=0) is None  # nothing to check
    assert profile.checks_of(backend, 0) is not None
    backend.check_output_reads, backend.check_device_bounds = False, True
    assert profile.checks_of(backend, 0, init_value=0) is not None
