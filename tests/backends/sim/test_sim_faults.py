"""Every fault named (the simulator, both dialects): a threadgroup / __shared__
array indexed past its bound names the array, the index and the bound; a
misaligned vector access names the buffer, the byte offset and the
alignment; an out-of-bounds device access at any distance names the buffer
and the element. Each faulty kernel has a correct twin that must pass."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.evaluation.runner import death_reason
from mlxsci.kernel.spec import KernelFault, KernelSpec

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

N, TG = 64, 32


@pytest.fixture(scope="module", params=["metal", "cuda"])
def backend(request):
    return SimBackend(dialect=request.param, launch_timeout_s=20.0)


# Per dialect: the thread's index in its group and in the grid, a barrier,
# a group-shared array declaration and a vector pointer cast of `out + OFF`.
WORDS = {
    "metal": dict(
        l="uint l = thread_position_in_threadgroup.x;",
        i="uint i = thread_position_in_grid.x;",
        sync="threadgroup_barrier(mem_flags::mem_threadgroup);",
        shared="threadgroup float t[32];",
        vec="device float4* p = (device float4*)(out + OFF);",
        one4="float4(1.0f)",
        group="threadgroup",
    ),
    "cuda": dict(
        l="int l = threadIdx.x;",
        i="int i = blockIdx.x * blockDim.x + threadIdx.x;",
        sync="__syncthreads();",
        shared="__shared__ float t[32];",
        vec="float4* p = reinterpret_cast<float4*>(out + OFF);",
        one4="make_float4(1.0f, 1.0f, 1.0f, 1.0f)",
        group="block",
    ),
}


def run(backend, name, source, n=N):
    """The first fault in two launches (guarded buffers alternate placement),
    or the output; `n` threads, groups of TG."""
    k = backend.kernel(KernelSpec(name, (), ("out",), source, dialect=backend.dialect))
    out = None
    for _ in range(2):
        try:
            (out,) = k(
                inputs=[],
                output_shapes=[(n,)],
                output_dtypes=[mx.float32],
                grid=(n, 1, 1),
                threadgroup=(TG, 1, 1),
                init_value=0,
            )
            out = np.asarray(out)
        except KernelFault as e:
            return e
    return out


def shared_overflow(backend, offset):
    w = WORDS[backend.dialect]
    return "\n".join(
        [w["shared"], w["l"], w["i"], f"t[l + {offset}] = 1.0f;", w["sync"], "out[i] = t[l];"]
    )


@pytest.mark.parametrize("offset, index", [(1, 32), (40, 40), (100000, 100000)])
@pytest.mark.slow
def test_shared_array_overflow_names_array_index_and_bound(backend, offset, index):
    e = run(backend, f"tg_oob_{offset}", shared_overflow(backend, offset))
    assert isinstance(e, KernelFault) and e.kind == "out_of_bounds"
    word = "threadgroup" if backend.dialect == "metal" else "__shared__"
    assert f"write of {word} array 't' (float[32]) at index {index} (bound 32)" in e.message
    assert e.details["buffer"] == "t" and e.details["element"] == index
    assert f"of {WORDS[backend.dialect]['group']} (" in e.message  # which thread did it


@pytest.mark.slow
def test_shared_array_within_bound_passes(backend):
    out = run(backend, "tg_ok", shared_overflow(backend, 0))
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, np.ones(N, np.float32))


def misaligned(backend, offset):
    w = WORDS[backend.dialect]
    return "\n".join(
        [w["i"], w["vec"].replace("OFF", str(offset)), f"if (i < {N // 4 - 1}) p[i] = {w['one4']};"]
    )


@pytest.mark.slow
def test_misaligned_vector_access_names_buffer_offset_alignment(backend):
    e = run(backend, "misaligned", misaligned(backend, 1))
    assert isinstance(e, KernelFault) and e.kind == "misaligned"
    assert "float4" in e.message and "output 'out' at byte offset 4" in e.message
    assert "16-byte alignment" in e.message
    assert (e.details["buffer"], e.details["byte_offset"], e.details["alignment"]) == ("out", 4, 16)


@pytest.mark.slow
def test_aligned_vector_access_passes(backend):
    out = run(backend, "aligned", misaligned(backend, 4))
    assert isinstance(out, np.ndarray)
    want = np.zeros(N, np.float32)
    want[4:N] = 1.0
    np.testing.assert_array_equal(out, want)


def far_write(backend, offset):
    w = WORDS[backend.dialect]
    return "\n".join([w["i"], f"if (i < {N}) out[i + {offset}] = 1.0f;"])


@pytest.mark.parametrize("offset", [N, 4096, 10_000_000])
@pytest.mark.slow
def test_out_of_bounds_at_any_distance_names_buffer_and_element(backend, offset):
    e = run(backend, f"far_{offset}", far_write(backend, offset))
    assert isinstance(e, KernelFault) and e.kind == "out_of_bounds"
    assert e.details["buffer"] == "out" and e.details["element"] == offset
    assert f"output 'out' at element {offset}" in e.message


@pytest.mark.slow
def test_in_bounds_write_passes(backend):
    out = run(backend, "near_ok", far_write(backend, 0))
    np.testing.assert_array_equal(out, np.ones(N, np.float32))


# ------------------------------------------------------------ a worker's death
def test_a_dead_worker_is_explained():
    tail = "noise\nmlxsci-sim: fatal signal 11 while handling a fault of kernel 'k' (thread (1, 0, 0) ...\n"
    assert death_reason(-11, tail).startswith(
        "mlxsci-sim: fatal signal 11 while handling a fault of kernel 'k'"
    )
    reason = death_reason(-11, "Traceback ...\n")
    assert "SIGSEGV" in reason and "outside any kernel" in reason and "Traceback" in reason
    reason = death_reason(-9, "")
    assert "SIGKILL" in reason and "memory" in reason
    reason = death_reason(3, "RuntimeError: boom\n")
    assert "exit code 3" in reason and "RuntimeError: boom" in reason


# ------------------------------------------------------------ an index never written
INDEX_FROM_UNWRITTEN = {
    # An index kept in group-shared memory, read before any thread wrote it:
    # it reads as poison (0xFFFFFFFF), an access 16 GiB past the output's end.
    "metal": (
        "threadgroup uint slot[1];\n"
        "uint l = thread_position_in_threadgroup.x;\n"
        "if (l == WRITER) slot[0] = thread_position_in_grid.x;\n"
        "threadgroup_barrier(mem_flags::mem_threadgroup);\n"
        "out[slot[0] + l] = 1.0f;"
    ),
    "cuda": (
        "__shared__ unsigned slot[1];\n"
        "if (threadIdx.x == WRITER) slot[0] = blockIdx.x * blockDim.x;\n"
        "__syncthreads();\n"
        "out[slot[0] + threadIdx.x] = 1.0f;"
    ),
}


@pytest.mark.slow
def test_index_read_from_unwritten_shared_memory_is_named(backend):
    src = INDEX_FROM_UNWRITTEN[backend.dialect]
    e = run(backend, "idx_unwritten", src.replace("WRITER", "100000"))
    assert isinstance(e, KernelFault) and e.kind == "out_of_bounds"
    assert e.details["buffer"] == "out" and e.details["element"] >= 0xFFFFFFFF
    out = run(backend, "idx_written", src.replace("WRITER", "0"))
    np.testing.assert_array_equal(out, np.ones(N, np.float32))


# ------------------------------------------------------------ faults with no buffer to name
# What the runtime cannot tie to a buffer or array says so plainly, and
# names the thread; a write beside an array found only after the launch
# names the array, the element and its side, and says the thread is unknown.
NO_BUFFER = {
    "metal": dict(
        null="device float* p = (device float*)(ulong)(i * 0);\np[4] = 1.0f;",
        wild="device float* p = (device float*)(0x100000000ul * 7000 + 64);\np[i] = 1.0f;",
        trap="if (i == 3) __builtin_trap();",
    ),
    "cuda": dict(
        null="float* p = (float*)(size_t)(i * 0);\np[4] = 1.0f;",
        wild="float* p = (float*)(0x100000000ul * 7000 + 64);\np[i] = 1.0f;",
        trap="if (i == 3) __trap();",
    ),
}


@pytest.mark.parametrize(
    "case, needles",
    [
        (
            "null",
            [
                "SIGSEGV in thread (0, 0, 0) of",
                "write through a null pointer (address 0x10)",
                "no buffer or array",
            ],
        ),
        (
            "wild",
            [
                "SIGSEGV in thread (0, 0, 0) of",
                "which no buffer or threadgroup array holds",
                "stray pointer",
            ],
        ),
        ("trap", ["SIGILL in thread (3, 0, 0) of", "a trap instruction"]),
    ],
)
@pytest.mark.slow
def test_a_fault_in_no_buffer_says_so_and_names_the_thread(backend, case, needles):
    w = WORDS[backend.dialect]
    src = "\n".join([w["i"], NO_BUFFER[backend.dialect][case], f"if (i < {N}) out[i] = 1.0f;"])
    e = run(backend, f"nobuf_{case}", src)
    assert isinstance(e, KernelFault) and e.kind == "crash", e
    for needle in needles:
        assert needle in e.message, (needle, e.message)
    if case != "trap":
        assert e.details["buffer"] is None


def before_start(backend, access):
    """Thread 0 of each group writes or reads t[-1]: the slack before the
    array where it is end-aligned, the guard page where it is start-aligned
    (placements alternate from group to group, and a launch's first group
    from launch to launch)."""
    w = WORDS[backend.dialect]
    use = "t[int(l) - 1] = 1.0f;" if access == "write" else "out[i] = t[int(l) - 1];"
    return "\n".join(
        [w["shared"], w["l"], w["i"], "t[l] = 1.0f;", w["sync"], "out[i] = t[l];", use]
    )


@pytest.mark.slow
@pytest.mark.parametrize("access", ["write", "read"])
def test_an_access_just_before_an_array_faults_live_and_names_the_thread(backend, access):
    # Before: the read returned the slack's garbage, the write was found only
    # after the launch, with no thread named.
    e = run(backend, f"tg_before_start_{access}", before_start(backend, access))
    assert isinstance(e, KernelFault) and e.kind == "out_of_bounds", e
    word = "threadgroup" if backend.dialect == "metal" else "__shared__"
    group = WORDS[backend.dialect]["group"]
    assert (
        f"{access} of {word} array 't' (float[32]) at index -1 (bound 32) "
        f"by thread (0, 0, 0) of {group} (1, 0, 0)"
    ) in e.message, e.message
    assert e.details["element"] == -1 and e.details["thread"] == (0, 0, 0)


@pytest.mark.slow
def test_an_access_just_before_the_array_of_a_one_group_launch_faults_in_the_next(backend):
    # One group a launch: the placement alternates between launches instead.
    e = run(backend, "tg_before_start_one_group", before_start(backend, "read"), n=TG)
    assert isinstance(e, KernelFault) and e.kind == "out_of_bounds", e
    group = WORDS[backend.dialect]["group"]
    assert f"at index -1 (bound 32) by thread (0, 0, 0) of {group} (0, 0, 0)" in e.message


@pytest.mark.slow
def test_an_array_accessed_within_its_bounds_by_every_group_passes(backend):
    w = WORDS[backend.dialect]
    src = "\n".join(
        [w["shared"], w["l"], w["i"], "t[l] = float(i);", w["sync"], "out[i] = t[31 - l];"]
    )
    for n in (N, TG):  # both placements in one launch, and one per launch
        out = run(backend, f"tg_within_{n}", src, n=n)
        assert isinstance(out, np.ndarray), out
        i = np.arange(n)
        np.testing.assert_array_equal(out, (i - i % TG + 31 - i % TG).astype(np.float32))


@pytest.mark.slow
def test_a_write_in_the_alignment_slack_is_found_after_the_launch(backend):
    # float[30] is 120 bytes; end-aligned to 16 it leaves 8 bytes past its end
    # before the guard page, where t[30] lands: found after the launch, named
    # without a thread (the one case of a write beside an array still so).
    w = WORDS[backend.dialect]
    decl = w["shared"].replace("[32]", "[30]")
    src = "\n".join(
        [decl, w["l"], w["i"], "if (l < 30) t[l + 1] = 1.0f;", w["sync"], "out[i] = 0.0f;"]
    )
    e = run(backend, "tg_alignment_slack", src)
    assert isinstance(e, KernelFault) and e.kind == "out_of_bounds", e
    word = "threadgroup" if backend.dialect == "metal" else "__shared__"
    assert f"write of {word} array 't' (float[30]) at index 30 (bound 30), past its end" in (
        e.message
    )
    assert "which thread wrote it is not known" in e.message
    assert e.details["element"] == 30 and "thread" not in e.details
