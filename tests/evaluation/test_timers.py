"""Timers (mlxsci.timing.timers): the logic of each, without a GPU.

The CUPTI timer is fed activity records shaped as CUPTI's kernel records
(name, start and end in ns) through a fake source: records of earlier work
left in the buffer, MLX's own kernels beside the candidate's, overlapping
kernels. The wall timer runs on a fake clock. The sim timer runs the real
simulator.
"""

import sys
import types

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.kernel.candidate import parse
from mlxsci.task import load_task
from mlxsci.timing.noise import combined_noise, relative_spread, run_noise
from mlxsci.timing.timers import (
    CuptiSource,
    CuptiTimer,
    KernelRecord,
    SimTimer,
    TimerError,
    WallTimer,
    Work,
    check_timer,
    kernel_label,
    median_kernels,
    settle,
)
from mlxsci.worker.launch import Launcher
from mlxsci.worker.runs import pipeline_work

HEAT = (
    "void mlx::core::cu::custom_kernel_heat_step_float_uint32_ts_uint32_ts_floats_float"
    "(const float*, const uint32_t*, const uint32_t*, const float*, float*)"
)
COPY = "void mlx::core::cu::copy_v<float, float, int, 4>(const float*, float*, int)"


class FakeSource:
    """Stands in for CuptiSource: `pending` is what CUPTI's buffers hold;
    drain() hands it over, as a forced flush does."""

    def __init__(self, stale=()):
        self.pending = list(stale)
        self.drains = 0

    def drain(self):
        self.drains += 1
        out, self.pending = self.pending, []
        return out


def fake_gpu_work(source, records):
    """A Work whose run 'executes' `records` on the fake GPU."""
    state = {"waits": 0}

    def enqueue(inputs):
        return {"out": inputs["x"]}

    def wait(results):
        state["waits"] += 1
        if results is not None:  # the run's kernels complete while we wait
            source.pending.extend(records)

    return Work(enqueue, {"x": 1}, wait), state


def test_cupti_span_is_first_start_to_last_end_of_this_runs_kernels():
    stale = [KernelRecord(HEAT, 0, 5_000_000)]  # an earlier run, still in the buffer
    run = [
        KernelRecord(HEAT, 10_000_000, 10_010_000),  # 50 launches of 10 us...
        *[KernelRecord(HEAT, 10_012_000 + 12_000 * k, 10_022_000 + 12_000 * k) for k in range(49)],
        KernelRecord(COPY, 10_600_000, 10_603_000),
    ]  # ...and one MLX copy
    source = FakeSource(stale)
    work, _ = fake_gpu_work(source, run)
    timing = CuptiTimer(source, kernel_names=["heat_step"]).time(work)
    # from the first heat_step's start to the copy's end (it finishes last);
    # the stale record of earlier work does not count
    assert timing.seconds == pytest.approx((10_603_000 - 10_000_000) * 1e-9)
    assert timing.kernels["heat_step"] == [50, pytest.approx(50 * 10e-6)]
    assert timing.kernels[COPY] == [1, pytest.approx(3e-6)]  # MLX's own kernels keep their name
    assert timing.results == {"out": 1}


def test_cupti_counts_overlapping_kernels_once_in_the_span():
    run = [
        KernelRecord("custom_kernel_a_float", 100, 1100),
        KernelRecord("custom_kernel_b_float", 200, 900),
    ]  # ran concurrently with a
    source = FakeSource()
    work, _ = fake_gpu_work(source, run)
    timing = CuptiTimer(source, kernel_names=["a", "b"]).time(work)
    assert timing.seconds == pytest.approx(1000e-9)
    assert timing.kernels == {"a": [1, pytest.approx(1000e-9)], "b": [1, pytest.approx(700e-9)]}


def test_cupti_without_records_is_an_error_not_a_zero_time():
    source = FakeSource()
    work, _ = fake_gpu_work(source, [])
    with pytest.raises(TimerError, match="no kernel"):
        CuptiTimer(source).time(work)


def test_cupti_source_without_cupti_python_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)
    with pytest.raises(TimerError, match="cupti-python"):
        CuptiSource.shared()


@pytest.mark.parametrize(
    "raw,label",
    [
        (HEAT, "heat_step"),
        ("custom_kernel_gradshaf_step_float", "gradshaf_step"),
        ("custom_kernel_gradshaf_axis_reduce_float", "gradshaf_axis_reduce"),
        ("custom_kernel_fft3d_x__256_float", "fft3d_x"),  # with a template part
        ("custom_kernel_other_thing", "other_thing"),  # not one of the task's kernels
    ],
)
def test_kernel_labels(raw, label):
    names = ["heat_step", "gradshaf_step", "gradshaf_axis_reduce", "fft3d_x"]
    assert kernel_label(raw, names) == label


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_wall_timer_chains_runs_and_divides_by_their_number():
    clock = FakeClock()
    seen = []

    def enqueue(inputs):  # lazy: nothing runs before wait
        seen.append(inputs["u"])
        return {"u_next": inputs["u"] + 1}

    def wait(results):
        if results is None:
            clock.now += 0.0001  # the empty-eval floor: 0.1 ms
        else:
            clock.now += 0.001 * (len(seen))  # 1 ms of device time per queued run
            seen.clear()

    work = Work(enqueue, {"u": 0, "c": 7}, wait, chain={"u": "u_next"})
    timer = WallTimer(target_seconds=0.02, clock=clock)
    timing = timer.time(work)
    assert timer.repeats >= 20  # one eval lasts >= 20 ms
    assert timing.seconds == pytest.approx(0.001)
    assert timer.floor_seconds == pytest.approx(0.0001)
    assert timing.results == {"u_next": 1}  # the first run, from the real inputs
    info = timer.info()
    assert info["timer"] == "wall" and info["repeats"] == timer.repeats
    # each run starts from the previous one's results
    work2 = Work(enqueue, {"u": 0}, lambda r: None, chain={"u": "u_next"})
    timer._chained(work2, 4)
    assert seen == [0, 1, 2, 3]


def test_settle_runs_until_the_last_window_agrees_within_a_cap():
    times = iter([5.0, 3.0, 2.0, 1.5, 1.01, 1.0, 1.0, 1.0, 1.0])
    out = settle(lambda: next(times), min_runs=2, max_runs=20, max_seconds=60)
    assert out["settled"] and out["runs"] == 7  # 1.01, 1.0, 1.0 within 5 %
    assert settle(lambda: 1.0, min_runs=0, max_runs=0, max_seconds=0)["runs"] == 0
    ramp = iter(range(100, 0, -10))
    capped = settle(lambda: float(next(ramp)), min_runs=1, max_runs=5, max_seconds=60)
    assert capped == {"runs": 5, "settled": False, "seconds": [100.0, 90.0, 80.0, 70.0, 60.0]}


def test_noise_figures():
    assert relative_spread([1.0, 1.1, 0.9]) == pytest.approx(0.2)
    assert relative_spread([2.0]) == 0.0
    assert combined_noise([0.0, 0.0]) == 0.0
    assert combined_noise([0.1, 0.1]) == pytest.approx(0.1)
    assert combined_noise([0.21, 0.0]) == pytest.approx(0.1)  # sqrt(1.21) - 1
    runs = [type("T", (), {"kernels": {"k": [3, s]}})() for s in (1.0, 3.0, 2.0)]
    assert median_kernels(runs) == {"k": {"launches": 3, "seconds": 2.0}}


def test_timer_choice_is_checked():
    assert check_timer(None, "sim") == "sim"
    assert check_timer(None, "metal") == "wall"
    assert check_timer("wall", "sim") == "wall"
    with pytest.raises(ValueError, match="only times the simulator"):
        check_timer("sim", "cuda")
    with pytest.raises(ValueError, match="unknown timer"):
        check_timer("stopwatch", "sim")
    with pytest.raises(ValueError, match="cupti"):
        check_timer("cupti", "sim")


def test_sim_timer_reports_native_kernel_time_per_kernel():
    task = load_task("heat2d")
    size = task.size_set("smoke")[0]
    backend = SimBackend()
    launcher = Launcher(backend, task, parse(task.seed()), size.params)
    inputs = {k: mx.array(v) for k, v in task.make_inputs(size.params).items()}
    work = pipeline_work(task, launcher, inputs, size.params, backend)
    work.wait(work.enqueue(inputs))  # compile outside the timer
    timer = SimTimer(backend, task.kernel_names)
    timing = timer.time(work)
    launches, seconds = timing.kernels["heat_step"]
    assert launches == size.params["n_steps"]
    assert 0 < seconds == pytest.approx(timing.seconds)
    assert backend.activity is None  # nothing recorded outside a timed run
    np.testing.assert_array_equal(
        np.array(timing.results["u"]), np.array(task.run(launcher, inputs, size.params)["u"])
    )


def test_noise_of_a_minimum_ignores_slow_outliers():
    runs = [1.00, 1.01, 1.02, 1.5, 1.6, 2.0]  # two fastest of six agree to 1 %
    assert run_noise(runs, "min") == pytest.approx(0.01)
    assert run_noise(runs, "median") == pytest.approx(1.0 / 1.26)
    assert run_noise([3.0, 1.0, 1.1], "min") == pytest.approx(0.1)  # at least two runs


def fake_cupti_module():
    """A stand-in for cupti-python's `cupti.cupti`: records the calls CuptiSource
    makes and, on a flush, hands the 'completed' callback what the fake GPU ran."""
    mod = types.SimpleNamespace(calls=[], pending=[])
    mod.ActivityKind = types.SimpleNamespace(CONCURRENT_KERNEL=10, MEMCPY=1)

    def register(requested, completed):
        mod.calls.append("register")
        mod.requested, mod.completed = requested, completed

    def flush_all(flag):
        mod.calls.append(f"flush({flag})")
        if mod.pending:
            batch, mod.pending = mod.pending, []
            mod.completed(batch)

    mod.activity_register_callbacks = register
    mod.activity_enable = lambda kind: mod.calls.append(f"enable({kind})")
    mod.activity_flush_all = flush_all
    return mod


def test_cupti_source_registers_once_and_keeps_only_kernel_records(monkeypatch):
    mod = fake_cupti_module()
    monkeypatch.setitem(sys.modules, "cupti", types.SimpleNamespace(cupti=mod))
    monkeypatch.setitem(sys.modules, "cupti.cupti", mod)
    monkeypatch.setattr(CuptiSource, "_shared", None)

    def record(kind, name, start, end):
        return types.SimpleNamespace(kind=kind, name=name, start=start, end=end)

    source = CuptiSource.shared()
    assert CuptiSource.shared() is source and mod.calls == ["register", "enable(10)"]
    assert mod.requested()[0] >= 1 << 20  # a buffer of some MiB, records unlimited
    mod.pending = [
        record(10, HEAT, 100, 200),
        record(1, "memcpy", 50, 60),
        record(10, COPY, 210, 260),
    ]
    assert source.drain() == [KernelRecord(HEAT, 100, 200), KernelRecord(COPY, 210, 260)]
    assert source.drain() == [] and mod.calls[-1] == "flush(1)"  # forced flush each time
    timer = CuptiTimer(kernel_names=["heat_step"])
    assert timer.source is source

    def wait(results):  # the run's kernel completes while the timer waits for it
        if results is not None:
            mod.pending.append(record(10, HEAT, 1000, 1500))

    mod.pending.append(record(10, HEAT, 1, 2))  # left over from earlier work: discarded
    timing = timer.time(Work(lambda inputs: {"out": 1}, {}, wait))
    assert timing.seconds == pytest.approx(500e-9) and timing.kernels == {
        "heat_step": [1, pytest.approx(500e-9)]
    }
    timer.close()
    assert CuptiSource.shared() is source  # closing a timer keeps the source
