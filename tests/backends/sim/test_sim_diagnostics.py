"""Diagnostics of the CPU simulator: faults come back as structured errors and
the calling process lives on."""

from __future__ import annotations

import platform
import sys

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.kernel.spec import CompileError, KernelFault, KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

# Where the platform reports the faulting access kind (x86-64 page-fault error code).
EXACT_ACCESS = sys.platform == "linux" and platform.machine() == "x86_64"


@pytest.fixture(scope="module")
def backend():
    return SimBackend(launch_timeout_s=20.0)


def call(k, inputs=(), n=64, tg=32, dtype=mx.float32, **kw):
    return k(
        inputs=list(inputs),
        output_shapes=[(n,)],
        output_dtypes=[dtype],
        grid=(n, 1, 1),
        threadgroup=(tg, 1, 1),
        **kw,
    )


def first_fault(k, launches=2, **kw):
    """The first KernelFault within `launches` launches (placement alternates)."""
    for _ in range(launches):
        try:
            call(k, **kw)
        except KernelFault as e:
            return e
    return None


def test_write_one_past_the_end_of_an_output(backend):
    k = backend.kernel(
        KernelSpec("oob_w", (), ("out",), "uint i = thread_position_in_grid.x; out[i + 1] = 1.0f;")
    )
    e = first_fault(k)
    assert e is not None and e.kind == "out_of_bounds"
    assert e.details["buffer"] == "out" and e.details["element"] == 64
    assert (
        e.details["access"] == "write"
        if EXACT_ACCESS
        else e.details["access"] in ("write", "access")
    )
    assert "'out'" in e.message and "64" in e.message


def test_read_before_the_start_of_an_input(backend):
    k = backend.kernel(
        KernelSpec(
            "oob_r", ("x",), ("out",), "int i = int(thread_position_in_grid.x); out[i] = x[i - 1];"
        )
    )
    x = mx.arange(64, dtype=mx.float32)
    e = first_fault(k, inputs=[x])
    assert e is not None and e.kind == "out_of_bounds"
    assert e.details["buffer"] == "x" and e.details["element"] == -1
    assert (
        e.details["access"] == "read" if EXACT_ACCESS else e.details["access"] in ("read", "access")
    )
    assert "input 'x'" in e.message


def test_odd_sized_buffer_overflow_into_slack_is_caught(backend):
    # 5 floats: the end-aligned buffer starts 16-byte aligned, so one element
    # past the end lands in slack before the guard page; the slack check sees it.
    k = backend.kernel(
        KernelSpec(
            "oob_slack", (), ("out",), "uint i = thread_position_in_grid.x; out[i + 1] = 2.0f;"
        )
    )
    e = first_fault(k, n=5, tg=5)
    assert e is not None and e.kind == "out_of_bounds" and e.details["element"] == 5


def test_barrier_divergence_early_return(backend):
    src = (
        "uint l = thread_position_in_threadgroup.x;\n"
        "if (l == 5) return;\n"
        "threadgroup_barrier(mem_flags::mem_threadgroup);\n"
        "out[thread_position_in_grid.x] = 1.0f;\n"
    )
    k = backend.kernel(KernelSpec("div", (), ("out",), src, body_line=20))
    with pytest.raises(KernelFault) as e:
        call(k)
    assert e.value.kind == "barrier_divergence"
    assert e.value.details["lines"] == [22]
    assert "line 22" in e.value.message


def test_barrier_divergence_different_call_sites(backend):
    src = (
        "uint l = thread_position_in_threadgroup.x;\n"
        "if (l < 4) { threadgroup_barrier(mem_flags::mem_threadgroup); }\n"
        "else { threadgroup_barrier(mem_flags::mem_threadgroup); }\n"
        "out[thread_position_in_grid.x] = 1.0f;\n"
    )
    k = backend.kernel(KernelSpec("div2", (), ("out",), src, body_line=5))
    with pytest.raises(KernelFault) as e:
        call(k)
    assert e.value.kind == "barrier_divergence"
    assert sorted(e.value.details["lines"]) == [6, 7]


@pytest.mark.slow
def test_infinite_loop_times_out_and_process_survives():
    be = SimBackend(launch_timeout_s=0.5)
    k = be.kernel(
        KernelSpec(
            "spin",
            (),
            ("out",),
            "uint i = thread_position_in_grid.x; while (true) { out[i] += 1.0f; }",
        )
    )
    with pytest.raises(KernelFault) as e:
        call(k)
    assert e.value.kind == "timeout"
    # with fibers too
    k2 = be.kernel(
        KernelSpec(
            "spin2",
            (),
            ("out",),
            "threadgroup_barrier(mem_flags::mem_none);\n"
            "uint i = thread_position_in_grid.x; while (true) { out[i] += 1.0f; }",
        )
    )
    with pytest.raises(KernelFault) as e:
        call(k2)
    assert e.value.kind == "timeout"


def test_compile_error_maps_to_candidate_line(backend):
    src = "uint i = thread_position_in_grid.x;\nout[i] = 1.0f;\nfloat y = undefined_thing;\n"
    k = backend.kernel(
        KernelSpec("cerr", (), ("out",), src, source_file="cand.metal", body_line=10)
    )
    with pytest.raises(CompileError) as e:
        call(k)
    assert e.value.line == 12
    assert "undefined_thing" in e.value.message
    assert "cand.metal:12" in e.value.log


def test_compile_error_in_header_maps_to_header_line(backend):
    header = "// helpers\ninline float twice(float v) {\n  return v * 2.0f +;\n}\n"
    k = backend.kernel(
        KernelSpec(
            "herr",
            (),
            ("out",),
            "out[0] = twice(1.0f);",
            header=header,
            source_file="cand.metal",
            header_line=3,
            body_line=9,
        )
    )
    with pytest.raises(CompileError) as e:
        call(k)
    assert e.value.line == 5


def test_input_writes_reach_the_callers_array(backend):
    src = """
        uint i = thread_position_in_grid.x;
        device float* w = const_cast<device float*>(x);
        out[i] = x[i];
        w[i] = x[i] + 100.0f;
    """
    k = backend.kernel(KernelSpec("inw", ("x",), ("out",), src))
    x = mx.arange(64, dtype=mx.float32)
    (o,) = call(k, inputs=[x])
    np.testing.assert_array_equal(np.asarray(o), np.arange(64))
    np.testing.assert_array_equal(np.asarray(x), np.arange(64) + 100)


@pytest.mark.slow
def test_crashes_are_reported_and_the_next_launch_works(backend):
    # null dereference through a pointer the compiler cannot see
    k = backend.kernel(
        KernelSpec(
            "nullp",
            ("z",),
            ("out",),
            "device float* p = (device float*)(uintptr_t)z;\nout[thread_position_in_grid.x] = *p;",
        )
    )
    with pytest.raises(KernelFault) as e:
        call(k, inputs=[0])
    assert e.value.kind == "crash" and "SIGSEGV" in e.value.message

    header = "inline int deep(int n) { volatile int pad[64]; pad[0] = n; return n ? deep(n - 1) + pad[0] : 0; }\n"
    for pre in ("", "threadgroup_barrier(mem_flags::mem_none);\n"):
        k = backend.kernel(
            KernelSpec(
                "deep",
                ("n",),
                ("out",),
                pre + "out[thread_position_in_grid.x] = float(deep(n));",
                header=header,
            )
        )
        with pytest.raises(KernelFault) as e:
            call(k, inputs=[10_000_000])
        assert e.value.kind == "crash" and "stack overflow" in e.value.message
        (o,) = call(k, inputs=[3], n=8, tg=8)  # the same kernel, now sane
        np.testing.assert_array_equal(np.asarray(o), np.full(8, 3 + 2 + 1, np.float32))


def test_too_much_threadgroup_memory(backend):
    k = backend.kernel(
        KernelSpec(
            "bigtg",
            (),
            ("out",),
            "threadgroup float t[9000];\n uint l = thread_position_in_threadgroup.x;\n"
            "t[l * 200] = 1; out[l] = t[8999 - l];",
        )
    )
    with pytest.raises(KernelFault) as e:
        call(k)
    assert e.value.kind == "launch"
    assert e.value.message == (
        "kernel bigtg: threadgroup memory = 36000 bytes exceeds Metal's limit of 32768 bytes"
    )


def test_diagnostics_are_deterministic(backend):
    k = backend.kernel(
        KernelSpec(
            "oob_det", (), ("out",), "uint i = thread_position_in_grid.x; out[i * 3] = 1.0f;"
        )
    )
    msgs = []
    for _ in range(2):
        k2 = backend.kernel(k.spec)
        e = first_fault(k2)
        msgs.append(str(e))
    assert msgs[0] == msgs[1] and "out_of_bounds" in msgs[0]


@pytest.mark.slow
def test_host_signal_handlers_are_restored():
    import signal
    import time

    hits = []
    old = signal.signal(signal.SIGALRM, lambda *a: hits.append(1))
    try:
        be = SimBackend(launch_timeout_s=0.3)
        k = be.kernel(
            KernelSpec(
                "spin3",
                (),
                ("out",),
                "uint i = thread_position_in_grid.x; while (true) { out[i] += 1.0f; }",
            )
        )
        with pytest.raises(KernelFault):
            call(k)
        # the Python handler is back in place and still receives SIGALRM
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        t = time.time()
        while not hits and time.time() - t < 2:
            time.sleep(0.01)
        assert hits
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
