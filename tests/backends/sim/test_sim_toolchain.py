"""The simulator's toolchain: kernel libraries linked without the C++ runtime
(libc++, libc++abi, libunwind), which zig would otherwise build on a machine's
first link, and the progress lines of the once-per-machine work."""

from __future__ import annotations

import shutil
import subprocess

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend, build, toolchain
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.spec import CompileError, KernelSpec
from mlxsci.roofline import store as roofline

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

# Symbols only the C++ runtime libraries define: operator new/delete (_Znw*,
# _Zna*, _Zdl*, _Zda*), the Itanium C++ ABI's __cxa_* and __gxx_personality_*
# (libc++abi), and the unwinder's _Unwind_* (libunwind).
CXX_RUNTIME_PREFIXES = ("_Znw", "_Zna", "_Zdl", "_Zda", "__cxa_", "__gxx_personality", "_Unwind_")
# __cxa_finalize is glibc's (it runs a shared object's destructors at dlclose).
LIBC_CXA = {"__cxa_finalize", "__cxa_atexit", "__cxa_thread_atexit_impl"}

# Half-precision conversions (compiler_rt on CPUs without F16C at -mcpu=baseline)
# and <cmath> functions: what the C++ headers and zig's runtime give a kernel.
METAL_SRC = """
    uint i = thread_position_in_grid.x;
    if (i >= n) return;
    half h = half(x[i]);
    out[i] = float(h) + metal::sqrt(x[i]) + metal::exp(-x[i]);
"""
CUDA_SRC = """
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n[0]) return;
    __half h = __float2half(x[i]);
    out[i] = __half2float(h) + sqrtf(x[i]) + expf(-x[i]);
"""


def _build_and_run(dialect: str, tmp_path, monkeypatch):
    """Build and run one kernel in an empty mlxsci cache; returns its library."""
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    backend = SimBackend(dialect=dialect, launch_timeout_s=30.0)
    src = METAL_SRC if dialect == "metal" else CUDA_SRC
    k = backend.kernel(KernelSpec("no_cxx_runtime", ("x", "n"), ("out",), src, "", dialect=dialect))
    x = np.linspace(0.0, 4.0, 100, dtype=np.float32)
    n = 100 if dialect == "metal" else mx.array(100, dtype=mx.uint32)
    (o,) = k(
        inputs=[mx.array(x), n],
        output_shapes=[(100,)],
        output_dtypes=[mx.float32],
        grid=(128, 1, 1),
        threadgroup=(32, 1, 1),
    )
    want = x.astype(np.float16).astype(np.float32) + np.sqrt(x) + np.exp(-x)
    np.testing.assert_allclose(np.asarray(o), want, rtol=1e-6)
    (lib,) = tmp_path.joinpath("sim").glob("k-*.so")
    return lib


def _undefined_symbols(lib) -> set[str]:
    out = subprocess.run(["nm", "-u", "-D", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()}


def _needed(lib) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True)
    return [
        line.split("[")[1].rstrip("]") for line in out.stdout.splitlines() if "(NEEDED)" in line
    ]


@pytest.mark.skipif(
    shutil.which("nm") is None or shutil.which("readelf") is None,
    reason="binutils (nm, readelf) not installed",
)
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_kernel_library_needs_no_cxx_runtime(dialect, tmp_path, monkeypatch):
    lib = _build_and_run(dialect, tmp_path, monkeypatch)
    cxx = sorted(
        s
        for s in _undefined_symbols(lib)
        if s.startswith(CXX_RUNTIME_PREFIXES) and s not in LIBC_CXA
    )
    assert cxx == [], f"{lib.name} needs C++ runtime symbols {cxx}"
    libs = _needed(lib)
    assert not [n for n in libs if "c++" in n or "stdc++" in n or "unwind" in n], libs


def test_kernel_that_needs_the_cxx_runtime_fails_to_link(tmp_path, monkeypatch):
    """The twin of the test above: operator new lives in libc++abi, which the
    link leaves out, so a library calling it is a build error naming it (-z
    defs), not a library that fails at dlopen."""
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    # The pointer escapes, so -O2 cannot elide the allocation.
    tu = (
        'extern "C" __attribute__((visibility("default"))) int *uses_new(int v) '
        "{ return new int(v); }\n"
    )
    with pytest.raises(CompileError) as exc:
        build.build_library(tu)
    assert "operator new" in exc.value.log or "_Znwm" in exc.value.log


def test_link_leaves_out_the_cxx_runtime():
    """The link step names -nostdlib++ and an optimization level (with none,
    zig builds a debug compiler_rt and the UBSan runtime on a first link)."""
    assert "-nostdlib++" in toolchain.LINK_FLAGS
    assert "-O2" in toolchain.LINK_FLAGS
    assert "-fno-exceptions" in toolchain.CXX_FLAGS and "-fno-rtti" in toolchain.CXX_FLAGS


def test_zig_cache_is_per_version(tmp_path, monkeypatch):
    monkeypatch.setenv("ZIG_GLOBAL_CACHE_DIR", str(tmp_path))
    assert toolchain.zig_cache_dir() == tmp_path / f"mlxsci-{toolchain.zig_version()}"


def test_prepare_toolchain_announces_only_when_it_builds(tmp_path, monkeypatch):
    # A stub path of our own: the work is a link in the (warm) zig cache.
    stub = tmp_path / "toolchain.so"
    monkeypatch.setattr(toolchain, "toolchain_stub_path", lambda: stub)
    lines: list[str] = []
    assert toolchain.prepare_toolchain(lines.append) is True
    assert lines == [toolchain.PREPARING_TOOLCHAIN] and stub.exists()
    assert toolchain.prepare_toolchain(lines.append) is False
    assert lines == [toolchain.PREPARING_TOOLCHAIN]


def test_roofline_announced_only_when_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MLXSCI_SIM_CLOCK", "host")  # its roofline is measured, as a GPU's
    backend = SimBackend()
    measured: list[int] = []

    def fake_measure(be, progress=None, timer=None):
        measured.append(1)
        plan = roofline.plan_for(be)
        return roofline.Roofline(
            be.name,
            be.device_info(),
            [[1, 1.0]],
            1.0,
            "now",
            timer="sim",
            plan=plan,
            probe_digest=roofline.probe_digest(be, plan),
        )

    monkeypatch.setattr(roofline, "measure", fake_measure)
    lines: list[str] = []
    roofline.load_or_measure(backend, progress=lines.append, timer="sim")
    assert lines == [roofline.MEASURING] and measured == [1]
    roofline.load_or_measure(backend, progress=lines.append, timer="sim")
    assert lines == [roofline.MEASURING] and measured == [1]


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_evaluate_announces_nothing_on_warm_caches():
    """A search hears only `announce` lines: none once the compiler is built
    and the roofline measured (the first call here does whatever is missing)."""
    evaluate("saxpy", backend="sim", size_set="smoke")
    announced: list[str] = []
    progress: list[str] = []
    ev = evaluate(
        "saxpy",
        backend="sim",
        size_set="smoke",
        progress=progress.append,
        announce=announced.append,
    )
    assert ev.correct and progress and announced == []


def _run_scaled(backend, scale: float) -> np.ndarray:
    """A kernel whose text differs by `scale` (a new compile each), run."""
    src = f"""
    uint i = thread_position_in_grid.x;
    if (i >= n) return;
    out[i] = x[i] * {scale:.1f}f + metal::sqrt(x[i]);
"""
    k = backend.kernel(
        KernelSpec(f"pch_{int(scale)}", ("x", "n"), ("out",), src, "", dialect="metal")
    )
    x = np.linspace(0.0, 4.0, 50, dtype=np.float32)
    (o,) = k(
        inputs=[mx.array(x), 50],
        output_shapes=[(50,)],
        output_dtypes=[mx.float32],
        grid=(64, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_allclose(np.asarray(o), x * scale + np.sqrt(x), rtol=1e-6)
    return np.asarray(o)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_kernels_share_one_precompiled_header_per_dialect(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(build.STATS, "pch_builds", 0)
    backend = SimBackend(dialect="metal", launch_timeout_s=30.0)
    for scale in (2.0, 3.0, 4.0):
        _run_scaled(backend, scale)
    assert build.STATS["pch_builds"] == 1
    assert len(list(tmp_path.joinpath("sim").glob("pch-*.pch"))) == 1


@pytest.mark.slow
def test_a_refused_precompiled_header_is_dropped_and_the_kernel_still_builds(tmp_path, monkeypatch):
    """A PCH clang will not load (here: garbage; in life, a header whose mtime
    changed) costs a second compile without it, never a failed kernel."""
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    backend = SimBackend(dialect="metal", launch_timeout_s=30.0)
    _run_scaled(backend, 2.0)
    (pch,) = tmp_path.joinpath("sim").glob("pch-*.pch")
    pch.write_bytes(b"not a precompiled header")
    _run_scaled(backend, 5.0)
    assert not pch.exists() or pch.read_bytes() != b"not a precompiled header"
    _run_scaled(backend, 6.0)  # and the next one builds it again
    assert pch.exists() and pch.read_bytes()[:4] == b"CPCH"


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_compile_error_reads_the_same_with_the_precompiled_header(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    backend = SimBackend(dialect="metal", launch_timeout_s=30.0)
    _run_scaled(backend, 2.0)  # the PCH exists from here on
    bad = KernelSpec(
        "pch_bad", ("x", "n"), ("out",), "\n    out[0] = undefined_name;\n", "", dialect="metal"
    )
    with pytest.raises(CompileError) as exc:
        backend.kernel(bad)(
            inputs=[mx.array(np.ones(4, np.float32)), 4],
            output_shapes=[(4,)],
            output_dtypes=[mx.float32],
            grid=(4, 1, 1),
            threadgroup=(4, 1, 1),
        )
    assert "undefined_name" in str(exc.value)
