"""A faulty kernel gets an exception that names the kernel, the buffer or
array, the element and the thread, instead of garbage; checks=False (or
MLXSCI_FAST_CHECKS=0) skips the extra runs."""

import mlx.core as mx
import numpy as np
import pytest

from mlxsci import fast
from mlxsci.fast import simulator


def launch(k, x, out_shape=None, grid=None, tg=(4, 1, 1), **kw):
    out_shape = out_shape or x.shape
    return k(
        inputs=[x],
        grid=grid or (x.size, 1, 1),
        threadgroup=tg,
        output_shapes=[out_shape],
        output_dtypes=[mx.float32],
        **kw,
    )


X = mx.arange(8, dtype=mx.float32)


def test_out_of_bounds_read_names_kernel_buffer_element_and_thread():
    k = fast.metal_kernel(
        "shift", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = x[i + 1];"
    )
    with pytest.raises(fast.OutOfBoundsError) as exc:
        launch(k, X)
    e = exc.value
    assert isinstance(e, RuntimeError) and e.kernel == "shift"
    assert (e.buffer, e.element, e.thread, e.group) == ("x", 8, (3, 0, 0), (1, 0, 0))
    assert "kernel 'shift'" in str(e) and "input 'x' at element 8" in str(e)


def test_out_of_bounds_write_in_cuda_names_the_output():
    k = fast.cuda_kernel(
        "nocheck", ["x"], ["y"], "auto i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[0];"
    )
    x = mx.arange(6, dtype=mx.float32)  # 6 threads asked, 8 run: no bounds check
    with pytest.raises(fast.OutOfBoundsError) as exc:
        launch(k, x)
    assert exc.value.buffer == "y" and exc.value.element in (6, 7)
    assert exc.value.details["access"] == "write"


TG_UNINIT = """
threadgroup float buf[4];
uint t = thread_position_in_threadgroup.x;
uint i = thread_position_in_grid.x;
if (t > 0) buf[t] = x[i];
threadgroup_barrier(mem_flags::mem_threadgroup);
y[i] = buf[(t + 1) % 4];
"""


def test_threadgroup_read_before_any_write_raises():
    k = fast.metal_kernel("tg", ["x"], ["y"], TG_UNINIT)
    with pytest.raises(fast.UninitializedReadError) as exc:
        launch(k, X)
    e = exc.value
    assert e.kernel == "tg" and "before any thread" in str(e)
    # thread 3 reads slot 0, which no thread of its group writes (the checked
    # run goes in reverse order: group 1 first)
    assert (e.buffer, e.element, e.thread, e.group) == ("buf", 0, (3, 0, 0), (1, 0, 0))
    # writing every slot first: no error, the right answer
    ok = fast.metal_kernel("tg", ["x"], ["y"], TG_UNINIT.replace("if (t > 0) ", ""))
    (y,) = launch(ok, X)
    np.testing.assert_array_equal(np.array(y), [1, 2, 3, 0, 5, 6, 7, 4])


RACE = """
threadgroup float buf[4];
uint t = thread_position_in_threadgroup.x;
uint i = thread_position_in_grid.x;
buf[t] = x[i];
y[i] = buf[3 - t];
"""


def test_a_missing_barrier_raises_and_the_barrier_fixes_it():
    # In order, thread 0 reads slot 3 before thread 3 wrote it: the read of
    # threadgroup memory nobody wrote is what a missing barrier shows here.
    k = fast.metal_kernel("nobarrier", ["x"], ["y"], RACE)
    with pytest.raises(fast.UninitializedReadError) as exc:
        launch(k, X)
    e = exc.value
    # in reverse order thread 3 runs first and reads slot 0 before thread 0 wrote it
    assert (e.buffer, e.element, e.thread) == ("buf", 0, (3, 0, 0))
    assert "missing barrier" in str(e)
    fixed = RACE.replace("y[i] =", "threadgroup_barrier(mem_flags::mem_threadgroup);\ny[i] =")
    (y,) = launch(fast.metal_kernel("barrier", ["x"], ["y"], fixed), X)
    np.testing.assert_array_equal(np.array(y), [3, 2, 1, 0, 7, 6, 5, 4])


def test_checks_off_returns_the_in_order_result_without_the_extra_runs(monkeypatch):
    k = fast.metal_kernel("nobarrier", ["x"], ["y"], RACE)
    launch(k, X, checks=False)  # no error: the race is not looked for
    monkeypatch.setenv("MLXSCI_FAST_CHECKS", "0")
    launch(fast.metal_kernel("nobarrier", ["x"], ["y"], RACE), X)
    with pytest.raises(fast.UninitializedReadError):  # a per-call True wins over the variable
        launch(fast.metal_kernel("nobarrier", ["x"], ["y"], RACE), X, checks=True)


def test_two_threads_writing_one_element_is_a_race_naming_the_writers():
    k = fast.cuda_kernel("last", ["x"], ["y"], "y[0] = x[blockIdx.x * blockDim.x + threadIdx.x];")
    with pytest.raises(fast.RaceError, match="element \\(0,\\)") as exc:
        launch(k, X, out_shape=(1,))
    writers = exc.value.details["writers"]
    assert len(writers) == 8 and "8 stores write it" in str(exc.value)
    assert [tuple(w["group"]) for w in writers[:2]] == [(0, 0, 0), (0, 0, 0)]
    assert exc.value.thread == (0, 0, 0)  # the first writer in order


def test_a_value_read_from_another_threads_output_is_a_race_naming_the_one_writer():
    src = """
    uint i = thread_position_in_grid.x;
    y[i] = x[i];
    z[i] = y[i ^ 1u] + 100.0f;   // no barrier can order this across threads
    """
    k = fast.metal_kernel("neighbour", ["x"], ["y", "z"], src)
    with pytest.raises(fast.RaceError) as exc:
        k(
            inputs=[X],
            grid=(8, 1, 1),
            threadgroup=(4, 1, 1),
            output_shapes=[(8,), (8,)],
            output_dtypes=[mx.float32, mx.float32],
        )
    e = exc.value
    assert e.buffer == "z" and len(e.details["writers"]) == 1
    assert "one thread writes it" in str(e) and e.thread == tuple(e.details["writers"][0]["thread"])


def test_float_atomics_in_another_order_are_a_warning_not_a_race():
    src = "atomic_fetch_add_explicit(&y[0], x[thread_position_in_grid.x], memory_order_relaxed);"
    k = fast.metal_kernel("sum", ["x"], ["y"], src, atomic_outputs=True)
    x = mx.array(np.random.default_rng(1).standard_normal(4096).astype(np.float32))
    with pytest.warns(fast.OrderDependenceWarning, match="round differently"):
        (y,) = launch(k, x, out_shape=(1,), tg=(256, 1, 1), init_value=0.0)
    assert abs(float(y[0]) - float(np.array(x, dtype=np.float64).sum())) < 1e-2


def test_unwritten_output_elements_raise_unless_init_value_is_given():
    k = fast.metal_kernel(
        "half", ["x"], ["y"], "uint i = thread_position_in_grid.x; if (i < 5) y[i] = x[i];"
    )
    with pytest.raises(fast.UnwrittenOutputError) as exc:
        launch(k, X)
    assert exc.value.buffer == "y" and exc.value.element == 5 and exc.value.details["count"] == 3
    (y,) = launch(k, X, init_value=-1.0)
    np.testing.assert_array_equal(np.array(y), [0, 1, 2, 3, 4, -1, -1, -1])


def test_a_launch_over_the_gpu_limits_is_a_value_error():
    k = fast.metal_kernel("big", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(fast.LaunchError) as exc:
        launch(k, X, grid=(2048, 1, 1), tg=(2048, 1, 1))
    assert isinstance(exc.value, ValueError) and "1024" in str(exc.value)
    ck = fast.cuda_kernel("big", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(ValueError, match="65535"):
        launch(ck, X, grid=(1, 70000, 1), tg=(1, 1, 1))


def test_barrier_divergence_names_the_group():
    src = """
    uint t = thread_position_in_threadgroup.x;
    if (t < 2) threadgroup_barrier(mem_flags::mem_threadgroup);
    y[thread_position_in_grid.x] = x[thread_position_in_grid.x];
    """
    k = fast.metal_kernel("diverge", ["x"], ["y"], src)
    with pytest.raises(fast.BarrierError) as exc:
        launch(k, X)
    assert exc.value.group is not None and "diverge" in str(exc.value)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_an_endless_kernel_times_out(monkeypatch):
    backend = simulator.backend_for("metal")
    monkeypatch.setattr(backend, "launch_timeout_s", 0.5)
    k = fast.metal_kernel("spin", ["x"], ["y"], "while (x[0] < 1) { }\ny[0] = 1;")
    with pytest.raises(fast.KernelTimeoutError, match="did not finish"):
        launch(k, mx.zeros(1), out_shape=(1,), grid=(1, 1, 1), tg=(1, 1, 1))


def test_a_compile_error_names_the_line_of_the_source_or_header():
    k = fast.metal_kernel(
        "typo", ["x"], ["y"], "uint i = thread_position_in_grid.x;\ny[i] = x[i] +;", header="\n"
    )
    with pytest.raises(fast.CompileError) as exc:
        launch(k, X)
    assert isinstance(exc.value, RuntimeError) and "source line 2" in str(exc.value)
    h = fast.metal_kernel(
        "htypo", ["x"], ["y"], "y[0] = f(x[0]);", header="float f(float v) { return v +; }\n"
    )
    with pytest.raises(fast.CompileError, match="header line 1"):
        launch(h, X)


def test_a_write_to_an_input_is_named_and_the_callers_array_is_untouched():
    src = "auto i = blockIdx.x * blockDim.x + threadIdx.x; if (i < 8) { y[i] = x[i]; ((float*)x)[i] = 0; }"
    k = fast.cuda_kernel("clobber", ["x"], ["y"], src)
    x = mx.arange(1, 9, dtype=mx.float32)
    with pytest.raises(fast.InputWriteError) as exc:
        launch(k, x, checks=False)  # cheap: found after every launch
    assert (exc.value.buffer, exc.value.element) == ("x", 0)
    np.testing.assert_array_equal(np.array(x), np.arange(1, 9))


def test_a_read_of_an_output_before_any_write_is_not_called_a_race():
    k = fast.metal_kernel(
        "maxin", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = max(y[i], x[i]);"
    )
    with pytest.raises(fast.UninitializedReadError) as exc:
        launch(k, X)
    assert exc.value.buffer == "y" and "init_value" in str(exc.value)
    (y,) = launch(k, X, init_value=-1.0)  # what the kernel meant
    np.testing.assert_array_equal(np.array(y), np.arange(8))
    # a value multiplied by zero still shows: the checked run's garbage is NaN
    zero = fast.metal_kernel(
        "times0", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = y[i] * 0 + x[i];"
    )
    with pytest.raises(fast.UninitializedReadError):
        launch(zero, X)


def test_order_dependence_of_an_atomic_kernel_is_a_warning_not_an_error():
    src = """
    auto i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 8) out[atomicAdd(&count[0], 1u)] = x[i];
    """
    k = fast.cuda_kernel("compact", ["x"], ["out", "count"], src)
    with pytest.warns(fast.OrderDependenceWarning, match="compaction"):
        out, count = k(
            inputs=[X],
            grid=(8, 1, 1),
            threadgroup=(4, 1, 1),
            output_shapes=[(8,), (1,)],
            output_dtypes=[mx.float32, mx.uint32],
            init_value=0,
        )
    assert sorted(np.array(out).tolist()) == list(range(8)) and int(count[0]) == 8


def test_the_word_atomic_in_a_comment_does_not_excuse_a_race():
    k = fast.cuda_kernel(
        "last",
        ["x"],
        ["y"],
        "// TODO: make this atomic\ny[0] = x[blockIdx.x * blockDim.x + threadIdx.x];",
    )
    with pytest.raises(fast.RaceError):
        launch(k, X, out_shape=(1,))


def test_a_neighbours_unwritten_element_folded_into_an_output_is_not_called_unwritten():
    # 1.5e16 + small keeps the first run's garbage bits, NaN + x the second's:
    # every element looks untouched, yet each was stored (twice, by its thread).
    src = "uint i = thread_position_in_grid.x; y[i] = x[i]; y[i] += y[(i + 1) % 8];"
    k = fast.metal_kernel("smooth", ["x"], ["y"], src)
    with pytest.raises(fast.UninitializedReadError, match="another thread's"):
        launch(k, X)
    with pytest.raises(fast.RaceError, match=r"one thread writes it \(2 times\)"):
        launch(k, X, init_value=0.0)


def test_an_own_output_read_points_at_init_value_not_at_a_barrier():
    k = fast.metal_kernel(
        "rbw", ["x"], ["y"], "uint i = thread_position_in_grid.x; y[i] = y[i] + x[i];"
    )
    with pytest.raises(fast.UninitializedReadError) as exc:
        launch(k, X)
    assert "init_value" in str(exc.value) and "barrier" not in str(exc.value)


# A histogram of 64 threads into 5 bins (thread i into bin i % 5).
BIN_OF = mx.array(np.arange(64, dtype=np.int32) % 5)


def histogram(k, **kw):
    return k(
        inputs=[BIN_OF],
        grid=(64, 1, 1),
        threadgroup=(32, 1, 1),
        output_shapes=[(8,)],
        output_dtypes=[mx.int32],
        init_value=0,
        **kw,
    )


@pytest.mark.skipif(not simulator.profile_supported(), reason="the detector's profiled build")
def test_a_histogram_without_atomics_is_a_race_naming_the_element_and_both_threads():
    # Every run of it counts right on the simulator, which runs threads one
    # after another; the race detector names what a GPU would lose.
    k = fast.cuda_kernel(
        "hist", ["b"], ["h"], "int i = threadIdx.x + blockIdx.x * blockDim.x; h[b[i]] += 1;"
    )
    with pytest.raises(fast.RaceError) as exc:
        histogram(k)
    e = exc.value
    assert (e.buffer, e.element) == ("h", 0)
    assert e.details["first"] == {"thread": [0, 0, 0], "group": [0, 0, 0], "access": "write"}
    assert e.details["second"] == {"thread": [5, 0, 0], "group": [0, 0, 0], "access": "write"}
    assert "neither access atomic and no __syncthreads between them" in str(e)
    twin = fast.cuda_kernel(
        "hist",
        ["b"],
        ["h"],
        "int i = threadIdx.x + blockIdx.x * blockDim.x; atomicAdd(&h[b[i]], 1);",
    )
    assert np.asarray(histogram(twin)[0]).tolist() == [13, 13, 13, 13, 12, 0, 0, 0]


@pytest.mark.skipif(not simulator.profile_supported(), reason="lock-step needs the profiled build")
def test_a_read_modify_write_split_into_two_atomics_loses_updates_in_lock_step():
    src = """uint i = thread_position_in_grid.x;
    device atomic_int* c = (device atomic_int*)&h[b[i]];
    int s = atomic_load_explicit(c, memory_order_relaxed);
    atomic_store_explicit(c, s + 1, memory_order_relaxed);"""
    k = fast.metal_kernel("hist", ["b"], ["h"], src)
    with pytest.raises(fast.RaceError, match="loses updates when a simdgroup's lanes run") as exc:
        histogram(k)
    assert exc.value.details["schedule"] == "lockstep"
    assert "is 13 with the threads one after another and 2 with the lanes" in str(exc.value)
    # Without checks, the simulator's one order: the right count, which no GPU promises.
    assert np.asarray(histogram(k, checks=False)[0]).tolist()[:5] == [13, 13, 13, 13, 12]
