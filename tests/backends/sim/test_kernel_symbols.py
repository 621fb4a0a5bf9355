"""The simulator's link-time fence (mlxsci/backends/sim/kernel_symbols.py), attacked.

A kernel's object may call only the runtime, math functions and compiler
helpers, may define no C-linkage symbol that would replace the C library's for
the runtime, and its library may export only the entry points. The text rules
(language rules, source policy) refuse these candidates first; here they are
switched off in this process, where kernels are built, so that the symbol
check is what answers.
"""

from __future__ import annotations

import sys
import uuid

import pytest
from helpers import kernel_object, kernel_rules_off

from mlxsci.backends.sim import kernel_symbols, toolchain
from mlxsci.evaluation.evaluator import evaluate

CHECK_OBJECT = kernel_symbols.object_violation

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="ELF objects")

BODY = {
    "metal": "uint i = thread_position_in_grid.x;\n{call}\nif (i >= N) return;\n"
    "y_out[i] = a * x[i] + y[i];\n",
    "cuda": "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n{call}\n"
    "if (i >= N[0]) return;\ny_out[i] = a[0] * x[i] + y[i];\n",
}


@pytest.fixture
def symbols_only(monkeypatch):
    kernel_rules_off(monkeypatch)
    monkeypatch.setattr(kernel_symbols, "object_violation", CHECK_OBJECT)  # this one stays


def run(dialect: str, header: str, call: str):
    source = (
        f"//! header\n// {uuid.uuid4().hex}\n{header}//! kernel saxpy\n"
        "//! grid = (ceil_div(N, 256) * 256, 1, 1)\n//! threadgroup = (256, 1, 1)\n"
        + BODY[dialect].format(call=call)
    )
    return evaluate(
        "saxpy", source, backend="sim", dialect=dialect, size_set="smoke", n_warmup=1, n_measure=1
    )


CALLS = {
    "open": ('extern "C" int host_open(const char*, int) __asm__("open");\n', 'host_open("x", 0);'),
    "socket": ('extern "C" int host_socket(int, int, int) __asm__("socket");\n',
               "host_socket(2, 1, 0);"),
    "system": ('extern "C" int host_system(const char*) __asm__("system");\n',
               'host_system("true");'),
    "getenv": ('extern "C" char* host_getenv(const char*) __asm__("getenv");\n',
               'host_getenv("HOME");'),
    "syscall": ('extern "C" long host_syscall(long, ...) __asm__("syscall");\n',
                "host_syscall(39);"),
    "dlsym": ('extern "C" void* host_dlsym(void*, const char*) __asm__("dlsym");\n',
              'host_dlsym(nullptr, "system");'),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize("name", list(CALLS))
def test_a_call_outside_the_runtime_is_a_compile_error_naming_it(symbols_only, dialect, name):
    header, call = CALLS[name]
    ev = run(dialect, header, f"if (i == 0) {call}")
    assert not ev.compile_ok and not ev.correct
    assert f"undefined symbol: {name}" in ev.fail_reason


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_a_kernel_cannot_replace_the_runtimes_clock(symbols_only, dialect):
    # (Named through an assembler label: the CUDA prelude declares the real one.)
    header = (
        'extern "C" int fake_clock(int clock, void* ts) __asm__("clock_gettime");\n'
        'extern "C" int fake_clock(int clock, void* ts) {\n'
        "    long* t = (long*)ts; t[0] = 0; t[1] = 0; return 0;\n}\n"
    )
    ev = run(dialect, header, "")
    assert not ev.compile_ok
    assert "defines the C-linkage symbol clock_gettime" in ev.fail_reason


def test_math_compiler_helpers_and_the_runtime_pass(tmp_path):
    obj = kernel_object(
        tmp_path,
        'extern "C" void __sim_tg_barrier_wait(long);\n'
        "#include <math.h>\n#include <string.h>\n"
        '__attribute__((visibility("hidden"))) void k(float* p, _Float16* h, int n) {\n'
        "  p[0] = expf(p[1]) + sinf(p[2]) + powf(p[3], 2.5f) + (float)h[0];\n"
        "  h[1] = (_Float16)p[0]; memcpy(p + 4, p, n); __sim_tg_barrier_wait(3);\n}\n",
    )
    assert kernel_symbols.object_violation(obj) is None


def test_a_library_exporting_more_than_its_entry_points_is_refused(tmp_path):
    obj = kernel_object(tmp_path, 'extern "C" int __sim_entry() { return 0; }\n'
                                 'extern "C" __attribute__((visibility("default"))) int helper() '
                                 '{ return 1; }\n')  # fmt: skip
    so = tmp_path / "t.so"
    res = toolchain.run_compiler(["c++", *toolchain.LINK_FLAGS, str(obj), "-o", str(so)])
    assert res.returncode == 0, res.stderr
    assert "exports helper" in kernel_symbols.library_violation(so)


def test_a_file_that_is_not_elf_is_not_read(tmp_path):
    other = tmp_path / "not-elf"
    other.write_bytes(b"\xcf\xfa\xed\xfe" + bytes(60))  # a Mach-O magic
    assert kernel_symbols.symbols(other) is None


# ---------------------------------------------------------------- state between launches
# Each keeps writable data a kernel could carry from launch to launch (count
# its launches, memoise, tell the check's order from the timed one's): the
# text rules refuse them first (mlxsci/kernel/source/storage.py); here the symbol
# check alone sees the objects the compiler made.
STATE = {
    "metal": {
        "static local": (
            "inline uint next_call() { static uint calls = 0; return calls++; }\n",
            "if (next_call() == 4000000000u) return;",
            "calls",
        ),
        "run-time initialised const local": (
            "",
            "static const float first = a; if (first > 1e30f) return;",
            "first",
        ),
        "program-scope variable": ("uint calls;\n", "calls += 1;", "calls"),
    },
    "cuda": {
        "__device__ global": (
            "__device__ unsigned int calls;\n",
            "if (calls++ == 4000000000u) return;",
            "calls",
        ),
        "static member": (
            "struct Memo { static float last; };\nfloat Memo::last;\n",
            "Memo::last = x[0];",
            "last",
        ),
        "static global": ("static int seen;\n", "if (++seen == 123456789) return;", "seen"),
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("dialect, name", [(d, n) for d, cases in STATE.items() for n in cases])
def test_writable_state_is_a_compile_error_naming_it(symbols_only, dialect, name):
    header, call, symbol = STATE[dialect][name]
    ev = run(dialect, header, call)
    assert not ev.compile_ok and not ev.correct
    assert "writable data that outlives a launch" in ev.fail_reason, ev.fail_reason
    assert symbol in ev.fail_reason


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow
def test_constant_tables_and_group_memory_pass(symbols_only, dialect):
    table = "constant float T[2]" if dialect == "metal" else "__constant__ float T[2]"
    group = "threadgroup float s[256];" if dialect == "metal" else "__shared__ float s[256];"
    ev = run(dialect, f"{table} = {{1.0f, 2.0f}};\n", f"{group} s[0] = T[0]; (void)s[0];")
    assert ev.compile_ok and ev.correct, ev.fail_reason


def test_writable_state_of_an_object_is_listed(tmp_path):
    obj = kernel_object(
        tmp_path,
        "static int hits;\nint total;\n"
        '__attribute__((visibility("hidden"))) int k(int v) {\n'
        "  static int last; last += v; hits += 1; total += v; return last + hits;\n}\n",
    )
    table = kernel_symbols.symbols(obj)
    names = kernel_symbols.writable_state(table)
    assert {"total"} <= set(names) and any("hits" in n for n in names)
    assert any("last" in n for n in names)
    assert "writable data that outlives a launch" in kernel_symbols.object_violation(obj)
