"""Reads the language leaves undefined carry their own verdict text (issue 27,
outcome 3).

A shuffle or broadcast from a lane that is not executing the call (it took
the other arm of a `?:`, returned, lies past the end of a partial
simdgroup/warp, or, in CUDA, is not in the mask) reads poison on the
simulator (test_sim_poison.py). A GPU returns some value there, and such a
candidate passed on an M1; on the simulator it failed as a bare
"max_abs=inf". Now the runtime counts those reads and names the first (the
operation, the reading thread, the source lane and why it is undefined), the
worker reports the verified run's, and the parent appends them to the
verdict of a failed size, or flags a correct one. Each failing kernel has a
twin that reads only defined lanes and passes with no flag.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.spec import KernelSpec
from mlxsci.task import Size

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

# 1000 elements: the last threadgroup of 256 holds 232 threads, whose last
# simdgroup/warp has 8 (1000 % 32) when the grid is exact, or whose threads
# past 999 return early when it is rounded up.
SMALL = Size("1000", {"N": 1000})
LEAD = "the kernel read values the language leaves undefined: "


def judge(source: str, dialect: str):
    ev = evaluate(
        "saxpy",
        source,
        backend="sim",
        dialect=dialect,
        sizes=[SMALL],
        n_warmup=1,
        n_measure=1,
    )
    assert ev.compile_ok, ev.fail_reason
    (size,) = ev.sizes
    return ev, size


HEAD = {
    "metal": """//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
uint i = thread_position_in_grid.x;
uint lane = thread_index_in_simdgroup;
if (i >= N) return;
""",
    "cuda": """//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t lane = threadIdx.x % 32;
if (i >= N[0]) return;
""",
}
TAIL = {
    "metal": "y_out[i] = a * xv + y[i];\n",
    "cuda": "y_out[i] = a[0] * xv + y[i];\n",
}

# The M1's candidate in miniature: each lane loads its neighbour's x, and
# odd lanes get their own back from the neighbour by a shuffle in one arm of
# a `?:`; even lanes take the other arm, so the odd lanes read lanes that are
# not executing the call.
IN_ONE_ARM = {
    "metal": "float xv = (lane & 1) ? simd_shuffle(x[i ^ 1], ushort(lane ^ 1)) : x[i];\n",
    "cuda": "float xv = (lane & 1) ? __shfl_sync(0xffffffffu, x[i ^ 1], lane ^ 1) : x[i];\n",
}
# Its twin: every lane shuffles, then each picks.
HOISTED = {
    "metal": "float s = simd_shuffle(x[i ^ 1], ushort(lane ^ 1));\n"
    "float xv = (lane & 1) ? s : x[i];\n",
    "cuda": "float s = __shfl_sync(0xffffffffu, x[i ^ 1], lane ^ 1);\n"
    "float xv = (lane & 1) ? s : x[i];\n",
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_shuffle_in_one_arm_of_a_ternary_is_named(dialect):
    ev, size = judge(HEAD[dialect] + IN_ONE_ARM[dialect] + TAIL[dialect], dialect)
    assert not ev.correct
    reason = ev.fail_reason
    assert reason.startswith("correctness failed at size 1000: max_abs=inf")
    op, group = ("simd_shuffle", "threadgroup") if dialect == "metal" else ("__shfl_sync", "block")
    language = "Metal" if dialect == "metal" else "CUDA"
    # the first poisoned read: lane 1 of the first simdgroup reads lane 0
    assert (
        f"; {LEAD}{op} by thread (1, 0, 0) of {group} (0, 0, 0) read lane 0, which was not "
        "active at that call" in reason
    ), reason
    assert f"{language} leaves such a read undefined" in reason
    assert "pass on one GPU and fail on another" in reason
    assert "the simulator returns NaN" in reason
    assert "500 such reads in that run" in reason  # every odd lane of 1000
    assert "before the branch" in reason  # what to do about it
    assert "undefined_read" in size.flags
    # the NaN is the shuffle's: zero-filled threadgroup memory changes nothing
    assert "memory read before it was written" not in reason
    assert "threadgroup_read_before_write" not in size.flags


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_its_twin_with_the_shuffle_before_the_branch_passes_unflagged(dialect):
    ev, size = judge(HEAD[dialect] + HOISTED[dialect] + TAIL[dialect], dialect)
    assert ev.correct, ev.fail_reason
    assert "undefined_read" not in size.flags


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_partial_simdgroup_reading_a_lane_that_does_not_exist_is_named():
    # An exact grid: the last simdgroup holds 8 threads, and a swap by xor 16
    # (undone by a second) makes its lanes 0..7 read lanes 16..23.
    src = """//! kernel saxpy
//! grid = (N, 1, 1)
//! threadgroup = (256, 1, 1)
uint i = thread_position_in_grid.x;
float xv = simd_shuffle_xor(simd_shuffle_xor(x[i], ushort(16)), ushort(16));
y_out[i] = a * xv + y[i];
"""
    ev, _ = judge(src, "metal")
    assert not ev.correct
    assert (
        f"{LEAD}simd_shuffle_xor by thread (224, 0, 0) of threadgroup (3, 0, 0) read lane 16, "
        "which no thread has: that simdgroup has only 8 thread(s) (a partial simdgroup"
    ) in ev.fail_reason, ev.fail_reason


def test_a_cuda_shuffle_from_a_lane_outside_its_mask_is_named():
    # Lanes 0..15 shuffle among themselves (mask 0x0000ffff) but read 16..31.
    src = (
        HEAD["cuda"]
        + "float xv = x[i];\n"
        + "if (lane < 16) xv = __shfl_sync(0x0000ffffu, x[i ^ 16], lane + 16);\n"
        + TAIL["cuda"]
    )
    ev, _ = judge(src, "cuda")
    assert not ev.correct
    assert (
        f"{LEAD}__shfl_sync by thread (0, 0, 0) of block (0, 0, 0) read lane 16, which its "
        "mask 0x0000ffff does not name"
    ) in ev.fail_reason, ev.fail_reason
    assert "CUDA leaves such a read undefined" in ev.fail_reason


def test_its_cuda_twin_reading_inside_the_mask_passes_unflagged():
    src = (
        HEAD["cuda"]
        + "float xv = x[i];\n"
        + "if (lane < 16) xv = __shfl_sync(0x0000ffffu, x[i ^ 1], lane ^ 1);\n"
        + TAIL["cuda"]
    )
    ev, size = judge(src, "cuda")
    assert ev.correct, ev.fail_reason
    assert "undefined_read" not in size.flags


def test_an_undefined_read_whose_value_is_never_used_passes_with_a_flag():
    # The lanes below 16 read lanes 16..31, which took the other arm: NaN, thrown away.
    src = (
        HEAD["metal"]
        + "float junk = lane < 16 ? simd_shuffle(x[i], ushort(lane + 16)) : 0.0f;\n"
        + "(void)junk;\nfloat xv = x[i];\n"
        + TAIL["metal"]
    )
    ev, size = judge(src, "metal")
    assert ev.correct, ev.fail_reason
    assert size.flags == ["undefined_read"]


def test_a_fault_at_a_poisoned_index_names_the_read_before_it():
    # The lane index read from an inactive lane is all ones: element 4294967295.
    src = (
        HEAD["metal"]
        + "uint j = (lane & 1) ? simd_shuffle(i, ushort(lane ^ 1)) : i;\n"
        + "float xv = x[j];\n"
        + TAIL["metal"]
    )
    ev, _ = judge(src, "metal")
    assert not ev.correct
    assert "out-of-bounds read" in ev.fail_reason, ev.fail_reason
    assert "; before it, " + LEAD + "simd_shuffle by thread (1, 0, 0)" in ev.fail_reason


# ------------------------------------------- threadgroup memory read before it is written
# An accumulator in threadgroup memory never set to zero: right where the
# memory happens to hold zeros, NaN on the simulator (poison).
ACCUMULATE = {
    "metal": "threadgroup float acc[256];\nuint l = thread_position_in_threadgroup.x;\n"
    "{init}acc[l] += x[i];\nfloat xv = acc[l];\n",
    "cuda": "__shared__ float acc[256];\nuint32_t l = threadIdx.x;\n"
    "{init}acc[l] += x[i];\nfloat xv = acc[l];\n",
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_threadgroup_memory_read_before_it_is_written_is_named(dialect):
    body = ACCUMULATE[dialect].replace("{init}", "")
    ev, size = judge(HEAD[dialect] + body + TAIL[dialect], dialect)
    assert not ev.correct
    memory, language = ("threadgroup", "Metal") if dialect == "metal" else ("__shared__", "CUDA")
    assert ev.fail_reason.startswith("correctness failed at size 1000: max_abs=inf")
    assert (
        f"; the result depends on {memory} memory read before it was written in the launch "
        "(with that memory zero-filled instead of NaN the outputs changed); "
        f"{language} leaves such memory undefined"
    ) in ev.fail_reason, ev.fail_reason
    assert size.flags == ["threadgroup_read_before_write"]


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_its_twin_that_zeroes_the_accumulator_passes_unflagged(dialect):
    body = ACCUMULATE[dialect].replace("{init}", "acc[l] = 0.0f;\n")
    ev, size = judge(HEAD[dialect] + body + TAIL[dialect], dialect)
    assert ev.correct, ev.fail_reason
    assert size.flags == []


# ---------------------------------------------------------------- the runtime's record
@pytest.fixture(scope="module")
def metal():
    return SimBackend(launch_timeout_s=30.0)


def launch(backend, name, src, n=64, tg=64):
    k = backend.kernel(KernelSpec(name, ("x",), ("out",), src, dialect=backend.dialect))
    (o,) = k(
        inputs=[mx.array(np.arange(n, dtype=np.float32))],
        output_shapes=[(n,)],
        output_dtypes=[mx.float32],
        grid=(n, 1, 1),
        threadgroup=(tg, 1, 1),
    )
    return np.asarray(o)


def test_an_invalid_lane_id_and_the_count_of_every_launch(metal):
    src = """
        uint g = thread_position_in_grid.x;
        out[g] = simd_broadcast(x[g], ushort(40));
    """
    metal.take_undefined_reads()
    assert np.isnan(launch(metal, "ub_invalid_lane", src)).all()
    launch(metal, "ub_invalid_lane", src)
    seen = metal.take_undefined_reads()
    assert seen == {
        "count": 128,  # 64 lanes, two launches: summed
        "first": {
            "op": "simd_broadcast",
            "reason": "invalid_lane",
            "lane": 40,
            "aux": 32,
            "group": [0, 0, 0],
            "thread": [0, 0, 0],
        },
    }
    assert metal.take_undefined_reads() is None  # taken: counting starts afresh


def test_a_waiting_lane_is_diverged_and_defined_reads_are_not_counted(metal):
    # Lanes 16..31 wait at another shuffle when lanes 0..15 read them (two
    # calls of one function in the two arms may be merged into one call by
    # the compiler, as a GPU's may: two functions cannot be); their own reads
    # stay among themselves, defined.
    src = """
        uint g = thread_position_in_grid.x;
        uint lane = thread_index_in_simdgroup;
        float r;
        if (lane < 16) r = simd_shuffle(x[g], ushort(lane + 16));
        else r = simd_shuffle_xor(x[g], ushort(1));
        float d = simd_shuffle_down(x[g], ushort(16));  // upper lanes keep their own: defined
        out[g] = r + d;
    """
    metal.take_undefined_reads()
    launch(metal, "ub_diverged", src, n=32, tg=32)
    seen = metal.take_undefined_reads()
    assert seen["count"] == 16
    assert seen["first"]["op"] == "simd_shuffle"
    assert seen["first"]["reason"] == "diverged" and seen["first"]["lane"] == 16


def test_the_result_structure_matches_its_ctypes_mirror(tmp_path):
    """abi.SimResult and abi.SimLaunch lie over the runtime's structures: a
    field added on one side only would shift every field after it. The
    compiler checks each offset and the size against ctypes'."""
    import ctypes
    from pathlib import Path

    from mlxsci.backends.sim import abi, toolchain

    runtime = Path(abi.__file__).parent / "runtime"
    lines = ['#include "sim_runtime.h"', "#include <stddef.h>"]
    for mirror, name in ((abi.SimResult, "__SimResult"), (abi.SimLaunch, "__SimLaunch")):
        for field, _type in mirror._fields_:
            offset = getattr(mirror, field).offset
            lines.append(f'static_assert(offsetof({name}, {field}) == {offset}, "{field}");')
        lines.append(f'static_assert(sizeof({name}) == {ctypes.sizeof(mirror)}, "size");')
    src = tmp_path / "abi.cpp"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "abi.o"
    res = toolchain.run_compiler(
        ["c++", "-std=c++17", "-I", str(runtime), "-c", str(src), "-o", str(out)]
    )
    assert res.returncode == 0, res.stderr
