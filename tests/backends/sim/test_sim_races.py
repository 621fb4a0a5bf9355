"""Races the simulator's fixed schedule would hide (issue 10, outcome 4; issue
22, outcome 3: shuffled schedules).

A GPU orders nothing between simdgroups (warps) without a barrier, and nothing
between threadgroups (blocks) of one launch at all. The simulator runs one
order, so a kernel whose result depends on the order passes it by luck. Each
launch can therefore run under schedule 0 (groups, simdgroups and threads in
order) or schedule 1 (everything reversed, one simdgroup at a time up to the
next threadgroup barrier); the evaluation repeats the verification run under
schedule 1 and under schedule 2 (shuffled: group and thread orders drawn
from a seed, simdgroups interleaved at random around barriers) with a few
seeds, and calls any difference a race. Each racy kernel here has a twin
with the barrier (or without the cross-group dependency) that passes; some
races show only in a shuffled order, not in the reversed one.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.evaluation.checks import schedule_race
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.references import Reference
from mlxsci.kernel.spec import KernelFault, KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

N = 100  # two threadgroups of 64; Metal's second is partial (36 threads)
TG = 64
FORWARD, REVERSED, SHUFFLED = 0, 1, 2
SEEDS = (1, 2, 3)

# Simdgroup 1 stores its own result and that of its partner lane in simdgroup 0,
# read from threadgroup memory. Without the barrier that is a race: in order,
# simdgroup 0 happens to write first; reversed, simdgroup 1 reads first.
METAL_TG = """
threadgroup float tile[64];
uint i = thread_position_in_grid.x;
uint l = thread_position_in_threadgroup.x;
uint n = threads_per_threadgroup.x;
tile[l] = x[i] * 2.0f;
{sync}
if (l >= 32) {{
    out[i - 32] = tile[l - 32];
    out[i] = tile[l];
}} else if (l + 32 >= n) {{
    out[i] = tile[l];   // no partner in the partial group
}}
"""
CUDA_TG = """
__shared__ float tile[64];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t l = threadIdx.x;
uint32_t n = count[0];
tile[l] = i < n ? x[i] * 2.0f : 0.0f;
{sync}
if (l >= 32) {{
    if (i - 32 < n) out[i - 32] = tile[l - 32];
    if (i < n) out[i] = tile[l];
}}
"""
# A SIMD-group operation between the write and the read synchronises lanes of
# one simdgroup only: still a race between simdgroups.
METAL_SIMD_OP = "float lanes = simd_sum(1.0f); if (lanes < 1.0f) return;"
CUDA_WARP_OP = "float lanes = __shfl_sync(0xffffffffu, 1.0f, 0); if (lanes < 1.0f) return;"
BARRIER = {"metal": "threadgroup_barrier(mem_flags::mem_threadgroup);", "cuda": "__syncthreads();"}

# Each group but the first also finishes its predecessor's elements, which
# nothing orders before it: in order the predecessor ran already, reversed it
# runs afterwards and overwrites the finished values.
METAL_GLOBAL = """
uint i = thread_position_in_grid.x;
uint g = threadgroup_position_in_grid.x;
uint l = thread_position_in_threadgroup.x;
out[i] = x[i] * 2.0f;
if (g + 1 == threadgroups_per_grid.x) out[i] += 1.0f;
if (g > 0 && l == 0)
    for (uint k = 0; k < 64; ++k) out[i - 64 + k] += 1.0f;
"""
CUDA_GLOBAL = """
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t n = count[0];
if (i < n) out[i] = x[i] * 2.0f;
if (i < n && blockIdx.x + 1 == gridDim.x) out[i] += 1.0f;
if (blockIdx.x > 0 && threadIdx.x == 0)
    for (uint32_t k = 0; k < 64; ++k) out[i - 64 + k] += 1.0f;
"""
GLOBAL_TWIN = {
    "metal": "uint i = thread_position_in_grid.x;\nout[i] = x[i] * 2.0f;\nout[i] += 1.0f;",
    "cuda": "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "if (i < count[0]) { out[i] = x[i] * 2.0f; out[i] += 1.0f; }",
}


def run(
    dialect: str,
    source: str,
    schedule: int,
    name: str = "race",
    seed: int = 0,
    n: int = N,
    tg: int = TG,
) -> np.ndarray:
    backend = SimBackend(dialect=dialect, launch_timeout_s=30.0)
    backend.schedule, backend.schedule_seed = schedule, seed
    k = backend.kernel(KernelSpec(name, ("x", "count"), ("out",), source, dialect=dialect))
    x = mx.arange(n, dtype=mx.float32) + 1.0
    (o,) = k(
        inputs=[x, mx.array(n, dtype=mx.uint32)],
        output_shapes=[(n,)],
        output_dtypes=[mx.float32],
        grid=(n, 1, 1),
        threadgroup=(tg, 1, 1),
    )
    return np.asarray(o)


def tg_source(dialect: str, sync: str) -> str:
    return (METAL_TG if dialect == "metal" else CUDA_TG).format(sync=sync)


WANT_TG = (np.arange(N) + 1.0) * 2.0
WANT_GLOBAL = WANT_TG + 1.0


# ---------------------------------------------------------------- the runtime's schedules
def test_schedule_defaults_to_forward():
    assert SimBackend().schedule == 0


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_threadgroup_race_between_simdgroups_shows_when_reversed(dialect):
    src = tg_source(dialect, "")  # no fiber words: the fiber-free fast path
    np.testing.assert_array_equal(run(dialect, src, FORWARD), WANT_TG)
    assert not np.array_equal(run(dialect, src, REVERSED), WANT_TG)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_threadgroup_race_across_a_simd_sync_shows_when_reversed(dialect):
    # The fiber path: a SIMD operation between write and read; reversed, each
    # simdgroup runs up to the next threadgroup barrier before the one below it.
    op = METAL_SIMD_OP if dialect == "metal" else CUDA_WARP_OP
    src = tg_source(dialect, op)
    np.testing.assert_array_equal(run(dialect, src, FORWARD, "race_simd"), WANT_TG)
    assert not np.array_equal(run(dialect, src, REVERSED, "race_simd"), WANT_TG)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize("with_simd_op", [False, True])
def test_twin_with_the_barrier_is_the_same_under_both_schedules(dialect, with_simd_op):
    op = (METAL_SIMD_OP if dialect == "metal" else CUDA_WARP_OP) if with_simd_op else ""
    src = tg_source(dialect, op + "\n" + BARRIER[dialect])
    for schedule in (FORWARD, REVERSED):
        np.testing.assert_array_equal(run(dialect, src, schedule, "twin"), WANT_TG)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow
def test_race_between_groups_through_a_device_buffer_shows_when_reversed(dialect):
    src = METAL_GLOBAL if dialect == "metal" else CUDA_GLOBAL
    np.testing.assert_array_equal(run(dialect, src, FORWARD, "race_global"), WANT_GLOBAL)
    assert not np.array_equal(run(dialect, src, REVERSED, "race_global"), WANT_GLOBAL)
    for schedule in (FORWARD, REVERSED):
        np.testing.assert_array_equal(
            run(dialect, GLOBAL_TWIN[dialect], schedule, "twin_global"), WANT_GLOBAL
        )


def test_reversed_schedule_keeps_simd_results_and_barrier_diagnostics():
    # A race-free reduction through SIMD sums and barriers: bitwise the same.
    src = """
        threadgroup float part[2];
        uint i = thread_position_in_grid.x;
        uint l = thread_position_in_threadgroup.x;
        float s = simd_sum(x[i]);
        if (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = s;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float total = part[0] + (threads_per_threadgroup.x > 32 ? part[1] : 0.0f);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = total + simd_prefix_exclusive_sum(x[i]);
    """
    got = [run("metal", src, s, "reduce") for s in (FORWARD, REVERSED)]
    np.testing.assert_array_equal(got[0], got[1])
    # Barrier divergence is still found, and named the same way.
    div = """
        uint i = thread_position_in_grid.x;
        if (thread_position_in_threadgroup.x < 40) threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = x[i];
    """
    for schedule in (FORWARD, REVERSED):
        with pytest.raises(KernelFault) as e:
            run("metal", div, schedule, "diverge")
        assert e.value.kind == "barrier_divergence"


def test_cuda_sync_mask_waits_for_its_lanes_under_both_schedules():
    # A __shfl_sync whose mask names lanes that arrive later (after their own
    # detour): the rendezvous must wait for them in either order.
    src = """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        uint32_t lane = threadIdx.x % 32;
        float v = i < count[0] ? x[i] : 0.0f;
        if (lane >= 16) v += __shfl_xor_sync(0xffff0000u, v, 1);
        float w = __shfl_sync(0xffffffffu, v, (lane + 16) % 32);
        if (i < count[0]) out[i] = w;
    """
    got = [run("cuda", src, s, "mask") for s in (FORWARD, REVERSED)]
    np.testing.assert_array_equal(got[0], got[1])


# ---------------------------------------------------------------- the comparison rule
def _ref(outputs: dict, tol: float) -> Reference:
    return Reference(outputs, tol, {})


def test_integer_outputs_must_be_bitwise_equal():
    a = {"spins": np.array([1, -1, 1, 1], np.int8)}
    b = {"spins": np.array([1, -1, -1, 1], np.int8)}
    ref = _ref({"spins": a["spins"]}, 0.0)
    msg = schedule_race(a, b, ref, lambda outs: (0.0, True))
    assert msg == (
        "result depends on thread scheduling: a race (output 'spins' differs "
        "between schedules at element 2: 1 vs -1)"
    )
    assert schedule_race(a, dict(a), ref, lambda outs: (0.0, True)) is None


def test_float_outputs_may_differ_within_the_tolerance():
    # Atomics that add in another order change the last bits: not a race.
    a = {"pos": np.array([1.0, 2.0, 3.0], np.float32)}
    b = {"pos": np.array([1.0, 2.0000002, 3.0], np.float32)}
    ref = _ref({"pos": a["pos"]}, 1e-4)
    assert schedule_race(a, b, ref, lambda outs: (0.0, True)) is None
    # Beyond the tolerance, or NaN on one side only, it is.
    c = {"pos": np.array([1.0, 2.0, np.nan], np.float32)}
    msg = schedule_race(a, c, ref, lambda outs: (0.0, True))
    assert "output 'pos' differs between schedules at element 2: 3 vs nan" in msg
    # NaN in the same place under both schedules is no difference.
    assert schedule_race(c, dict(c), ref, lambda outs: (0.0, True)) is None


def test_float_difference_that_flips_the_tasks_verdict_is_a_race():
    # The task's own metric (here: a statistic with a loose tolerance) passes
    # the first schedule's outputs and fails the second's.
    a = {"q": np.array([0.0, 0.5], np.float32)}
    b = {"q": np.array([0.0, 0.7], np.float32)}
    ref = _ref({"q": a["q"]}, 1.0)
    judge = lambda outs: (0.0, True) if outs["q"][1] < 0.6 else (2.0, False)  # noqa: E731
    msg = schedule_race(a, b, ref, judge)
    assert "output 'q' differs between schedules at element 1" in msg


def test_outputs_the_reference_does_not_check_are_ignored():
    a = {"y": np.zeros(3, np.float32), "state": np.array([1, 2, 3], np.uint32)}
    b = {"y": np.zeros(3, np.float32), "state": np.array([3, 2, 1], np.uint32)}
    assert schedule_race(a, b, _ref({"y": a["y"]}, 0.0), lambda outs: (0.0, True)) is None


# ---------------------------------------------------------------- through evaluate()
SAXPY_TG = {
    "metal": """//! kernel saxpy
//! grid = (N, 1, 1)
//! threadgroup = (64, 1, 1)
threadgroup float tile[64];
uint i = thread_position_in_grid.x;
uint l = thread_position_in_threadgroup.x;
uint n = threads_per_threadgroup.x;
tile[l] = a * x[i] + y[i];
{sync}
if (l >= 32) {{
    y_out[i - 32] = tile[l - 32];
    y_out[i] = tile[l];
}} else if (l + 32 >= n) {{
    y_out[i] = tile[l];
}}
""",
    "cuda": """//! kernel saxpy
//! grid = (ceil_div(N, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
__shared__ float tile[64];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t l = threadIdx.x;
uint32_t n = N[0];
tile[l] = i < n ? a[0] * x[i] + y[i] : 0.0f;
{sync}
if (l >= 32) {{
    if (i - 32 < n) y_out[i - 32] = tile[l - 32];
    if (i < n) y_out[i] = tile[l];
}}
""",
}
SAXPY_GLOBAL = {
    "metal": """//! kernel saxpy
//! grid = (N, 1, 1)
//! threadgroup = (64, 1, 1)
uint i = thread_position_in_grid.x;
uint g = threadgroup_position_in_grid.x;
y_out[i] = a * x[i];
if (g + 1 == threadgroups_per_grid.x) y_out[i] += y[i];
if (g > 0 && thread_position_in_threadgroup.x == 0)
    for (uint k = i - 64; k < i; ++k) y_out[k] += y[k];
""",
    "cuda": """//! kernel saxpy
//! grid = (ceil_div(N, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < N[0]) y_out[i] = a[0] * x[i];
if (i < N[0] && blockIdx.x + 1 == gridDim.x) y_out[i] += y[i];
if (blockIdx.x > 0 && threadIdx.x == 0)
    for (uint32_t k = i - 64; k < i; ++k) y_out[k] += y[k];
""",
}
RACE_VERDICT = "result depends on thread scheduling: a race (output 'y' differs between schedules"


def evaluate_smoke(source: str, dialect: str):
    return evaluate(
        "saxpy", source, backend="sim", size_set="smoke", n_measure=1, n_warmup=1, dialect=dialect
    )


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_threadgroup_race_is_a_failed_size_with_the_race_verdict(dialect):
    ev = evaluate_smoke(SAXPY_TG[dialect].format(sync=""), dialect)
    assert ev.compile_ok and not ev.correct and ev.score == 0.0
    (size,) = ev.sizes
    assert "race" in size.flags
    assert RACE_VERDICT in size.fail_reason and RACE_VERDICT in ev.fail_reason
    assert RACE_VERDICT in ev.to_json()["candidate"]["fail_reason"]
    twin = evaluate_smoke(SAXPY_TG[dialect].format(sync=BARRIER[dialect]), dialect)
    assert twin.correct, twin.fail_reason


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_race_between_groups_is_a_failed_size_with_the_race_verdict(dialect, monkeypatch):
    # The race detector of the lock-step run names it (both threads, the element)...
    ev = evaluate_smoke(SAXPY_GLOBAL[dialect], dialect)
    assert not ev.correct
    assert "race" in ev.sizes[0].flags
    assert "data race on output 'y_out' element 0 in kernel 'saxpy'" in ev.fail_reason
    assert "found by the race detector in the verification run with lock-step" in ev.fail_reason
    # ...and the other orders' difference fails the size where there is no such run.
    monkeypatch.setattr(SimBackend, "has_lockstep_order", classmethod(lambda cls: False))
    ev = evaluate_smoke(SAXPY_GLOBAL[dialect], dialect)
    assert "race" in ev.sizes[0].flags
    assert RACE_VERDICT + " at element 0:" in ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_fault_only_under_the_reversed_schedule_says_so():
    # Simdgroup 1 takes an index from simdgroup 0 without a barrier: reversed,
    # it reads the poison of unwritten threadgroup memory and indexes far out
    # of bounds. The fault is the verdict, marked as the race it comes from.
    src = """//! kernel saxpy
//! grid = (N, 1, 1)
//! threadgroup = (64, 1, 1)
threadgroup uint index[64];
uint i = thread_position_in_grid.x;
uint l = thread_position_in_threadgroup.x;
index[l] = i;
if (l >= 32) {
    uint j = index[l - 32];
    y_out[j] = a * x[j] + y[j];
}
if (l >= 32 || l + 32 >= threads_per_threadgroup.x) y_out[i] = a * x[i] + y[i];
"""
    ev = evaluate_smoke(src, "metal")
    assert not ev.correct
    assert ev.sizes[0].flags == ["out_of_bounds"]
    assert "only with the threads in another order, reversed" in ev.fail_reason
    assert "a race" in ev.fail_reason


# ---------------------------------------------------------------- shuffled schedules
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize("fibers", [False, True])
def test_shuffled_schedules_show_the_race_between_simdgroups(dialect, fibers):
    # The fiber path: a SIMD operation between write and read.
    op = (METAL_SIMD_OP if dialect == "metal" else CUDA_WARP_OP) if fibers else ""
    src, name = tg_source(dialect, op), "race_simd" if fibers else "race"
    got = [run(dialect, src, SHUFFLED, name, seed) for seed in SEEDS]
    assert any(not np.array_equal(g, WANT_TG) for g in got)
    # One seed, one order: the same outputs again.
    np.testing.assert_array_equal(run(dialect, src, SHUFFLED, name, SEEDS[0]), got[0])
    twin = tg_source(dialect, op + "\n" + BARRIER[dialect])
    for seed in SEEDS:
        np.testing.assert_array_equal(run(dialect, twin, SHUFFLED, "twin", seed), WANT_TG)


# Each group but the first and the last counts which of those two ran before
# it (reading an element each writes) and adds the count less one. In order,
# and reversed, exactly one of them ran first: the right answer, twice. In a
# random order of 8 groups, every middle group sees exactly one only when the
# first and the last group run first (2 orders in 56).
ORDER_RACE = {
    "metal": """
uint i = thread_position_in_grid.x;
uint g = threadgroup_position_in_grid.x;
uint e = threadgroups_per_grid.x * threads_per_threadgroup.x - 1;
float c = 1.0f;
if (g > 0 && g + 1 < threadgroups_per_grid.x)
    c = (out[0] == x[0] * 2.0f ? 1.0f : 0.0f) + (out[e] == x[e] * 2.0f ? 1.0f : 0.0f);
out[i] = x[i] * 2.0f + (c - 1.0f);
""",
    "cuda": """
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t e = count[0] - 1;
float c = 1.0f;
if (blockIdx.x > 0 && blockIdx.x + 1 < gridDim.x)
    c = (out[0] == x[0] * 2.0f ? 1.0f : 0.0f) + (out[e] == x[e] * 2.0f ? 1.0f : 0.0f);
if (i < count[0]) out[i] = x[i] * 2.0f + (c - 1.0f);
""",
}
# Simdgroup 1 of 3 counts which of its neighbours' tile entries are written
# after the barrier: in order simdgroup 0's, reversed simdgroup 2's, one
# either way; shuffled around the barrier, often none or both.
BARRIER_RACE = {
    "metal": """
threadgroup float tile[96];
uint i = thread_position_in_grid.x;
uint l = thread_position_in_threadgroup.x;
threadgroup_barrier(mem_flags::mem_threadgroup);
tile[l] = x[i];
float c = 1.0f;
if (l >= 32 && l < 64)
    c = (tile[l - 32] == x[i - 32] ? 1.0f : 0.0f) + (tile[l + 32] == x[i + 32] ? 1.0f : 0.0f);
out[i] = x[i] * 2.0f + (c - 1.0f);
""",
    "cuda": """
__shared__ float tile[96];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t l = threadIdx.x;
__syncthreads();
tile[l] = x[i];
float c = 1.0f;
if (l >= 32 && l < 64)
    c = (tile[l - 32] == x[i - 32] ? 1.0f : 0.0f) + (tile[l + 32] == x[i + 32] ? 1.0f : 0.0f);
out[i] = x[i] * 2.0f + (c - 1.0f);
""",
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize(
    "races, name, n, tg", [(ORDER_RACE, "order", 512, 64), (BARRIER_RACE, "barrier", 384, 96)]
)
def test_race_that_only_a_shuffled_order_shows(dialect, races, name, n, tg):
    want = (np.arange(n) + 1.0) * 2.0
    for schedule in (FORWARD, REVERSED):
        np.testing.assert_array_equal(run(dialect, races[dialect], schedule, name, 0, n, tg), want)
    for seed in SEEDS:
        got = run(dialect, races[dialect], SHUFFLED, name, seed, n, tg)
        assert not np.array_equal(got, want), seed


SAXPY_ORDER = {
    "metal": """//! kernel saxpy
//! grid = (N, 1, 1)
//! threadgroup = (64, 1, 1)
uint i = thread_position_in_grid.x;
uint g = threadgroup_position_in_grid.x;
float c = 1.0f;
if (g > 0 && g + 1 < threadgroups_per_grid.x)
    c = (y_out[0] == a * x[0] + y[0] ? 1.0f : 0.0f)
        + (y_out[N - 1] == a * x[N - 1] + y[N - 1] ? 1.0f : 0.0f);
y_out[i] = a * x[i] + y[i] + (c - 1.0f);
""",
    "cuda": """//! kernel saxpy
//! grid = (ceil_div(N, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t n = N[0];
float c = 1.0f;
if (blockIdx.x > 0 && blockIdx.x + 1 < gridDim.x)
    c = (y_out[0] == a[0] * x[0] + y[0] ? 1.0f : 0.0f)
        + (y_out[n - 1] == a[0] * x[n - 1] + y[n - 1] ? 1.0f : 0.0f);
if (i < n) y_out[i] = a[0] * x[i] + y[i] + (c - 1.0f);
""",
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_race_only_in_a_shuffled_order_is_a_failed_size_naming_the_order(dialect, monkeypatch):
    # 1563 groups: the worker's two fresh seeds give orders that show it
    # (unless the first and the last group both run first, 1 in a million).
    # Without the lock-step run, whose race detector would name it first.
    monkeypatch.setattr(SimBackend, "has_lockstep_order", classmethod(lambda cls: False))
    ev = evaluate_smoke(SAXPY_ORDER[dialect], dialect)
    assert not ev.correct and "race" in ev.sizes[0].flags
    assert RACE_VERDICT in ev.fail_reason
    assert "(forward) vs " in ev.fail_reason and "(shuffled (seed " in ev.fail_reason


# A real race (thread i writes garbage to element i + 1, which thread i + 1
# overwrites only if it runs later) hidden by a kernel that counts its
# threads' calls across launches: thread i is the (launch * total + i)-th
# call only in index order, so the garbage is written only then, and every
# other order "agrees" with the verified one. The state it counts in is
# refused before anything runs.
SNIFFING = {
    "metal": """//! header
inline uint next_call() { static uint calls = 0; return calls++; }
//! kernel saxpy
//! grid = (N, 1, 1)
//! threadgroup = (64, 1, 1)
uint i = thread_position_in_grid.x;
bool in_order = next_call() % N == i;
y_out[i] = a * x[i] + y[i];
if (in_order && i + 1 < N) y_out[i + 1] = -1.0f;
""",
    "cuda": """//! header
__device__ unsigned int calls;
//! kernel saxpy
//! grid = (ceil_div(N, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t n = N[0];
bool in_order = calls++ % (gridDim.x * blockDim.x) == i;
if (i < n) y_out[i] = a[0] * x[i] + y[i];
if (in_order && i + 1 < n) y_out[i + 1] = -1.0f;
""",
}
SNIFFING_REFUSAL = {
    "metal": "function-scope static variables are not supported in Metal: 'calls'",
    "cuda": "'calls' is a mutable __device__ variable",
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_kernel_that_detects_the_order_through_kept_state_is_refused(dialect):
    ev = evaluate("saxpy", SNIFFING[dialect], backend="sim", dialect=dialect, filename="c.x")
    assert not ev.compile_ok and not ev.correct and ev.score == 0.0
    assert ev.fail_reason.startswith("compile error: c.x:2: "), ev.fail_reason
    assert SNIFFING_REFUSAL[dialect] in ev.fail_reason


def test_a_run_mode_travels_with_the_call_and_leaves_the_backend_as_it_was():
    """The worker's other orders and fills go to each kernel call (RunMode),
    not onto the backend: after a call in a shuffled order the backend's own
    settings are untouched, and the same seed gives the same launch seeds."""
    from mlxsci.backends.base import RunMode
    from mlxsci.backends.sim.kernel import LaunchMode

    backend = SimBackend(dialect="metal")
    own = (backend.schedule, backend.schedule_seed, backend.tg_fill, backend.count_branches)
    mode = RunMode(order="shuffled", order_seed=7, tg_fill=0, count_branches=True)
    first, second = (LaunchMode.of(backend, replace(mode, launch=k)) for k in (0, 1))
    assert first.seed == 7 and second.seed != first.seed and first.counted and first.tg_fill == 0
    assert (
        LaunchMode.of(backend, replace(mode, launch=1)) == second
    )  # the same seed, the same orders
    assert LaunchMode.of(backend, RunMode(order="reversed")).seed is None
    assert own == (backend.schedule, backend.schedule_seed, backend.tg_fill, backend.count_branches)
    names = [name for name, _, _ in backend.other_orders([1, 2])]
    assert names == ["reversed", "shuffled", "shuffled"] and backend.own_order == "forward"
