"""The simulator's clock charges GPU cost, not host cost (issues 22 and 36;
docs/simulator-time.md): a kernel that runs the grid in one thread, or puts
all the work in one threadgroup, must not beat one spread over the grid.

The asserts are rankings and ratios the modelled GPU guarantees by orders of
magnitude (one thread's chain of instructions and accesses cannot be spread
over the lanes and cores that a grid's simdgroups fill), never absolute
times."""

from __future__ import annotations

import re

import mlx.core as mx
import pytest
from helpers import smoke_eval

from mlxsci.backends.sim import SimBackend
from mlxsci.backends.sim.toolchain import RUNTIME_DIR
from mlxsci.kernel.candidate import parse
from mlxsci.task import load_task
from mlxsci.timing.timers import SimTimer
from mlxsci.worker.launch import Launcher
from mlxsci.worker.serve import pipeline_work

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

HEAT = load_task("heat2d")

# heat2d's step, every cell by one thread: grid (1, 1, 1).
SERIAL = {
    "metal": """//! kernel heat_step
//! grid = (1, 1, 1)
//! threadgroup = (1, 1, 1)
for (uint j = 0; j < NY; ++j) {
    for (uint i = 0; i < NX; ++i) {
        uint idx = j * NX + i;
        float c = u_in[idx];
        if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
            u_out[idx] = c;
        } else {
            u_out[idx] = c + alpha * (u_in[idx - 1] + u_in[idx + 1] + u_in[idx - NX]
                                      + u_in[idx + NX] - 4.0f * c);
        }
    }
}
""",
    "cuda": """//! kernel heat_step
//! grid = (1, 1, 1)
//! threadgroup = (1, 1, 1)
uint32_t nx = NX[0];
uint32_t ny = NY[0];
float a = alpha[0];
for (uint32_t j = 0; j < ny; ++j) {
    for (uint32_t i = 0; i < nx; ++i) {
        uint32_t idx = j * nx + i;
        float c = u_in[idx];
        if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) {
            u_out[idx] = c;
        } else {
            u_out[idx] = c + a * (u_in[idx - 1] + u_in[idx + 1] + u_in[idx - nx]
                                  + u_in[idx + nx] - 4.0f * c);
        }
    }
}
""",
}

# The seed's launch (many 16x16 groups), but group (0, 0) alone does every
# cell, its 256 threads striding over them; the other groups return at once.
ONE_GROUP = """//! kernel heat_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
if (threadgroup_position_in_grid.x != 0 || threadgroup_position_in_grid.y != 0) {
    return;
}
for (uint idx = thread_index_in_threadgroup; idx < NX * NY; idx += 256) {
    uint i = idx % NX;
    uint j = idx / NX;
    float c = u_in[idx];
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
        u_out[idx] = c;
    } else {
        u_out[idx] = c + alpha * (u_in[idx - 1] + u_in[idx + 1] + u_in[idx - NX]
                                  + u_in[idx + NX] - 4.0f * c);
    }
}
"""

# A size large enough for many groups and for a group's time to dwarf the
# counter reads around it; small enough for a serial run to take milliseconds.
PARAMS = {"NX": 192, "NY": 160, "n_steps": 2}


def timed(source: str | None, dialect: str = "metal", runs: int = 3):
    """(modeled seconds, host CPU seconds) of the fastest of `runs` timed runs
    of heat2d at PARAMS, in this process; outputs checked against the seed's."""
    backend = SimBackend(dialect=dialect)
    cand = parse(source or HEAT.seed(dialect), dialect=dialect)
    launcher = Launcher(backend, HEAT, cand, PARAMS)
    inputs = {k: mx.array(v) for k, v in HEAT.make_inputs(PARAMS).items()}
    work = pipeline_work(HEAT, launcher, inputs, PARAMS, backend)
    work.wait(work.enqueue(inputs))  # compiles outside the timer
    timer = SimTimer(backend, HEAT.kernel_names)
    timings = [timer.time(work) for _ in range(runs)]
    info = timer.info()
    return min(t.seconds for t in timings), info["host_seconds"], timings[0].results


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_serial_grid_loses_to_the_seed_by_far(dialect):
    seed, _seed_host, seed_out = timed(None, dialect)
    serial, _serial_host, serial_out = timed(SERIAL[dialect], dialect)
    assert mx.allclose(seed_out["u"], serial_out["u"], atol=1e-5)
    # One lane of one core against 120 groups of 256 threads on every core.
    assert seed * 20 < serial


def test_one_group_doing_all_the_work_is_charged_as_that_group():
    seed, _seed_host, seed_out = timed(None)
    one, _one_host, one_out = timed(ONE_GROUP)
    assert mx.allclose(seed_out["u"], one_out["u"], atol=1e-5)
    # Its 256 threads fill 8 simdgroups of one core; no other core takes any of it.
    assert seed * 4 < one


def test_timer_records_the_model_and_the_host_time():
    info = SimTimer(SimBackend()).info()
    assert "host_seconds" not in info  # nothing timed yet
    assert info["timer"] == "sim" and info["statistic"] == "min"
    modeled, host, _ = timed(None, runs=1)
    assert modeled > 0 and host > 0


def test_timer_reports_each_kernels_counts_and_bound():
    backend = SimBackend()
    cand = parse(HEAT.seed("metal"), dialect="metal")
    launcher = Launcher(backend, HEAT, cand, PARAMS)
    inputs = {k: mx.array(v) for k, v in HEAT.make_inputs(PARAMS).items()}
    work = pipeline_work(HEAT, launcher, inputs, PARAMS, backend)
    timer = SimTimer(backend, HEAT.kernel_names)
    timer.time(work)
    info = timer.info()
    assert info["model"].startswith("counts on the modelled GPU")
    parts = info["launches"]["heat_step"]
    # 192 x 160 cells in 16 x 16 groups: 120 groups of 8 simdgroups.
    assert parts["groups"] == 120 and parts["simdgroups"] == 960
    assert parts["bound"] in ("throughput", "latency", "memory", "cache")
    # Every cell is read (once from DRAM) and written once: 2 x 192 x 160 x 4 bytes.
    sectors = parts["dram_read_sectors"] + parts["dram_write_sectors"]
    assert sectors * 32 >= 2 * 192 * 160 * 4


def test_python_constants_match_the_runtime():
    header = (RUNTIME_DIR / "sim_runtime.h").read_text()
    lanes = re.search(r"#define __SIM_LANES (\d+)", header)
    cores = re.search(r"#define __SIM_CORES (\d+)", header)
    assert lanes and cores
    assert (int(lanes.group(1)), int(cores.group(1))) == (SimTimer.LANES, SimTimer.CORES)


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_serial_heat2d_scores_below_the_seed(dialect):
    seed = smoke_eval("heat2d", dialect=dialect)
    serial = smoke_eval("heat2d", SERIAL[dialect], dialect=dialect)
    assert seed.correct and serial.correct
    (s,), (x,) = seed.sizes, serial.sizes
    assert 0 < x.fraction and s.fraction <= 1.0
    assert s.fraction > 4 * x.fraction


@pytest.mark.slow
def test_one_working_group_scores_below_the_seed():
    seed = smoke_eval("heat2d")
    one = smoke_eval("heat2d", ONE_GROUP)
    assert one.correct
    assert seed.sizes[0].fraction > 2 * one.sizes[0].fraction
