"""The bounds-checked build (mlxsci/backends/sim/bounds.py): an index past a
thread-private or constant array, which no guard page surrounds, is a fault
naming the array, the index, the bound, the candidate's line and the thread;
and a candidate cannot take the check's handler for its own.

lbm's CUDA seed with `k <= 9` in its collision loop reads f[9], CX[9], CY[9],
W[9]: clang -O2 drops that iteration as undefined, so its plain build
computes the seed's answer; the worker's bounds run fails it.
"""

from __future__ import annotations

import uuid

import mlx.core as mx
import pytest
from helpers import kernel_rules_off, replace_once, smoke_eval

from mlxsci.backends.base import RunMode
from mlxsci.backends.sim import SimBackend, kernel_symbols
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.spec import CompileError, KernelFault, KernelSpec
from mlxsci.task import load_task

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

CHECK_OBJECT = kernel_symbols.object_violation

# Line 3 indexes t[4] with N % 5 == 4 for N = 4.
PRIVATE_OOB = {
    "metal": "uint i = thread_position_in_grid.x;\nfloat t[4] = {1.0f, 2.0f, 3.0f, x[0]};\n"
    "y_out[i] = t[N % 5u] + x[i];\n",
    "cuda": "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "float t[4] = {1.0f, 2.0f, 3.0f, x[0]};\ny_out[i] = t[N[0] % 5u] + x[i];\n",
}


def launch(dialect: str, body: str, header: str = "", bounded: bool = True):
    backend = SimBackend(dialect=dialect)
    spec = KernelSpec(
        "k", ("x", "N"), ("y_out",), body, f"// {uuid.uuid4().hex}\n" + header, dialect=dialect
    )
    return backend.kernel(spec)(
        inputs=[mx.ones(64), 4],
        output_shapes=[(64,)],
        output_dtypes=[mx.float32],
        grid=(64, 1, 1),
        threadgroup=(32, 1, 1),
        mode=RunMode(check_bounds=bounded),
    )


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_a_private_array_read_past_its_end_is_named(dialect):
    with pytest.raises(KernelFault) as e:
        launch(dialect, PRIVATE_OOB[dialect])
    fault = e.value
    assert fault.kind == "out_of_bounds"
    assert "index 4 into 't'" in fault.message and "float[4]" in fault.message
    assert "valid indices 0..3" in fault.message and "at line 3, column" in fault.message
    group = "threadgroup" if dialect == "metal" else "block"
    assert f"by thread (0, 0, 0) of {group} (0, 0, 0)" in fault.message
    assert fault.details["element"] == 4 and fault.details["bound"] == 4
    assert fault.details["line"] == 3 and fault.details["buffer"] == "t"


def test_the_plain_build_does_not_check():
    # The same launch without the check runs to its end (what the timed and
    # verified runs build): the check costs them nothing.
    (out,) = launch("metal", PRIVATE_OOB["metal"], bounded=False)
    assert out.shape == (64,)


def test_an_index_inside_the_bound_passes_the_check():
    body = PRIVATE_OOB["metal"].replace("N % 5u", "N % 4u")
    (out,) = launch("metal", body)
    assert float(out[0]) == 2.0  # t[0] + x[0]


# A private 2-D array filled and read flat through its first row, as GPU
# kernels do: undefined in C++, the element it names on a GPU (and in the
# plain build: sum of x[0] + k over k < 16 is 120 at x = 0).
FLAT_2D = """//! kernel saxpy
//! grid = (N, 1, 1)
//! threadgroup = (64, 1, 1)
uint i = thread_position_in_grid.x;
if (i >= N) return;
float t[4][4];
for (uint k = 0; k < 16; ++k) t[0][k] = float(k);
float s = 0.0f;
for (uint k = 0; k < 16; ++k) s += t[k / 4][k % 4];
y_out[i] = a * x[i] + y[i] + (s - 120.0f);
"""


def test_an_inner_subscript_indexed_flat_is_marked_and_passes_the_bounds_run():
    with pytest.raises(KernelFault) as e:
        launch("metal", FLAT_2D.split("\n", 3)[3].replace("a * x[i] + y[i]", "x[i]"))
    assert e.value.details["inner_subscript"] is True and e.value.details["buffer"] == "t"
    ev = smoke_eval("saxpy", FLAT_2D, dialect="metal")
    assert ev.correct, ev.fail_reason
    # A one-dimensional array past its end stays a failed size (the test above).


def test_a_threadgroup_array_is_left_to_its_guard_pages():
    # The check sees threadgroup arrays too; their guard pages name them, as
    # in every build, so the fault is the usual threadgroup one.
    body = (
        "threadgroup float s[32];\nuint l = thread_position_in_threadgroup.x;\n"
        "s[l] = x[l];\nthreadgroup_barrier(mem_flags::mem_threadgroup);\n"
        "y_out[thread_position_in_grid.x] = s[l + 1024u * N];\n"
    )
    with pytest.raises(KernelFault) as e:
        launch("metal", body)
    assert e.value.kind == "out_of_bounds"
    assert "threadgroup array 's'" in e.value.message, e.value.message


@pytest.mark.slow
def test_lbm_cuda_loop_past_its_tables_is_killed():
    source = replace_once(
        load_task("lbm").seed("cuda"),
        "for (int k = 0; k < 9; ++k) {\n    float cu",
        "for (int k = 0; k <= 9; ++k) {\n    float cu",
    )
    ev = smoke_eval("lbm", source, dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert "out_of_bounds" in ev.fail_reason and "index 9 into 'CX'" in ev.fail_reason
    assert "int[9]" in ev.fail_reason and "at line 43, column 22" in ev.fail_reason


# ------------------------------------------------------------ taking the handler's place
HANDLER = "__ubsan_handle_out_of_bounds"


def handler_definition(linkage: str) -> str:
    """A header defining the check's handler so that it returns quietly: with
    C linkage, or as a `static` function under its assembler name (within its
    object the check's calls would bind to it before the runtime's)."""
    if linkage == "extern":
        return f'extern "C" void {HANDLER}(void* d, unsigned long i) {{}}\n'
    return (
        f'static void h(void* d, unsigned long i) __asm__("{HANDLER}") __attribute__((used));\n'
        "static void h(void* d, unsigned long i) {}\n"
    )


def candidate(linkage: str) -> str:
    return (
        f"//! header\n// {uuid.uuid4().hex}\n{handler_definition(linkage)}//! kernel k\n"
        "//! grid = (ceil_div(N, 256) * 256, 1, 1)\n//! threadgroup = (256, 1, 1)\n"
        "uint i = thread_position_in_grid.x;\nif (i >= N) return;\n"
        "float t[4] = {1.0f, 2.0f, 3.0f, 4.0f};\ny_out[i] = a * x[i] + y[i] + 0.0f * t[i % 5u];\n"
    )


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    return tmp_path / "sim"


def bounded_libraries(cache) -> list:
    return sorted(cache.glob("b-*.so")) if cache.is_dir() else []


@pytest.mark.parametrize("linkage", ["extern", "static"])
def test_a_candidate_defining_the_handler_is_refused(fresh_cache, linkage):
    ev = evaluate(
        "saxpy",
        candidate(linkage),
        backend="sim",
        size_set="smoke",
        n_warmup=1,
        n_measure=1,
    )
    assert not ev.compile_ok and not ev.correct
    # The source policy's words: the name is the runtime's; `__asm__` is refused first.
    why = HANDLER if linkage == "extern" else "`__asm__`"
    assert ev.fail_reason.startswith("compile error") and why in ev.fail_reason
    assert "internal name of the simulator" in ev.fail_reason or linkage == "static"
    assert bounded_libraries(fresh_cache) == []


@pytest.mark.parametrize("linkage", ["extern", "static"])
def test_the_symbol_check_refuses_a_kernel_defining_the_handler(fresh_cache, monkeypatch, linkage):
    # Behind the source policy: its text rules off, the symbol check alone.
    kernel_rules_off(monkeypatch)
    monkeypatch.setattr(kernel_symbols, "object_violation", CHECK_OBJECT)
    with pytest.raises(CompileError) as e:
        launch("metal", PRIVATE_OOB["metal"], header=handler_definition(linkage))
    assert f"the kernel defines {HANDLER}" in e.value.message
    # The side effect it was after, an index past t that returns quietly,
    # never runs: no bounds-checked library exists for it.
    assert bounded_libraries(fresh_cache) == []


def test_only_the_bounded_build_may_call_the_handler():
    assert not kernel_symbols.allowed_call(HANDLER)
    assert not kernel_symbols.allowed_call(HANDLER, profiled=True)
    assert kernel_symbols.allowed_call(HANDLER, bounded=True)
