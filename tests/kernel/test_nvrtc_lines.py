"""NVRTC's line numbers mapped back to the candidate file (issue 10, outcome 6).

No GPU runs here. The logs below are written by hand in the format NVRTC
prints (`FILE(LINE): error: MESSAGE`, warnings as `warning #177-D: ...`, the
echoed source line and a caret, `N error detected in the compilation of
"FILE".`), wrapped as MLX 0.32.4 raises them ("Failed to compile kernel:
<log>."), with the line numbers of the text MLX 0.32.4 really compiles:
its CUDA `default_header` is 5 lines (read in libmlx.so of the
mlx-cuda-12==0.32.4 wheel), so the header starts on line 6. The numbers are
pinned by hand here, not computed by the code under test.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.mlx_gpu import CudaBackend, MLXKernel, probe_line_shift
from mlxsci.backends.sim import SimBackend
from mlxsci.kernel.candidate import parse, to_kernel_spec
from mlxsci.kernel.compile_logs import first_error, parse_nvrtc_log
from mlxsci.kernel.signature import ArgInfo, cuda_source
from mlxsci.kernel.spec import CompileError, KernelSpec

SAXPY_INPUTS = ("x", "y", "a", "N")
SAXPY_OUTPUTS = ("y_out",)
PROGRAM = "custom_kernel_saxpy_9c41e07d2b6a3f58.cu"  # <kernel name>_<hash of the text>.cu

# A candidate with a header (line 2, which draws a warning) and a body from line 6.
WITH_HEADER = """//! header
__device__ inline float scaled(float v, float s) { float spare = v; return s * v; }
//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
uint32_t i = blockIdx.x * blockDim.x + threadIdx.xx;
if (i >= N[0]) {
    return;
}
y_out[i] = scaled(x[i], a[0]) + y[i];
"""

# What MLX 0.32.4 hands to nvrtcCreateProgram for WITH_HEADER (x, y of 1000
# floats, 0-d a and N): the header is line 6, the body starts on line 17.
MLX_0324_TEXT_WITH_HEADER = (
    "\n"
    '#include "mlx/backend/cuda/device/utils.cuh"\n'
    "\n"
    "#include <cooperative_groups.h>\n"
    "\n"
    "__device__ inline float scaled(float v, float s) { float spare = v; return s * v; }\n"
    "namespace mlx::core::cu {\n"
    "\n"
    "namespace cg = cooperative_groups;\n"
    "\n"
    "__global__ void custom_kernel_saxpy(\n"
    "    const float* x,\n"
    "    const float* y,\n"
    "    const float* a,\n"
    "    const uint32_t* N,\n"
    "    float* y_out) {\n"
    "uint32_t i = blockIdx.x * blockDim.x + threadIdx.xx;\n"
    "if (i >= N[0]) {\n"
    "    return;\n"
    "}\n"
    "y_out[i] = scaled(x[i], a[0]) + y[i];\n"
    "\n"
    "}\n"
    "\n"
    "} // namespace mlx::core::cu\n"
)


def mlx_error(log: str) -> RuntimeError:
    """The exception MLX 0.32.4 raises for an NVRTC failure (jit_module.cpp)."""
    return RuntimeError(f"Failed to compile kernel: {log}.")


# The warning on line 6 (the header) comes first, the error on line 17 (the
# body's first line, the candidate's line 6) second.
LOG_ERROR_ON_LINE_6 = """@PROGRAM@(6): warning #177-D: variable "spare" was declared but never referenced
  __device__ inline float scaled(float v, float s) { float spare = v; return s * v; }
                                                           ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

@PROGRAM@(17): error: class "uint3" has no member "xx"
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.xx;
                                                   ^

1 error detected in the compilation of "@PROGRAM@".
""".replace("@PROGRAM@", PROGRAM)

PROBE_PROGRAM = "custom_kernel_mlxsci_line_probe_2d7f00a91c3e6b45.cu"


def probe_log(line: int) -> str:
    """MLX's text for the line probe (`#error mlxsci_line_probe` as the header's
    first line) when NVRTC puts that line at `line`."""
    return str(
        mlx_error(f"""{PROBE_PROGRAM}({line}): error: #error directive: mlxsci_line_probe
  #error mlxsci_line_probe
   ^

1 error detected in the compilation of "{PROBE_PROGRAM}".
""")
    )


def saxpy_inputs():
    return [
        np.zeros(1000, np.float32),
        np.zeros(1000, np.float32),
        np.zeros((), np.float32),
        np.zeros((), np.uint32),
    ]


def cuda_backend_after(source: str, monkeypatch, probe_line: int = 6):
    """A CudaBackend whose last kernel call was saxpy built from `source`, with
    the line probe answering as NVRTC would with the header on `probe_line`."""
    monkeypatch.setattr(CudaBackend, "_line_shift", None)
    monkeypatch.setattr(CudaBackend, "_probe_log", staticmethod(lambda: probe_log(probe_line)))
    be = CudaBackend()
    spec = to_kernel_spec(
        parse(source, dialect="cuda", filename="cand.cu"), "saxpy", SAXPY_INPUTS, SAXPY_OUTPUTS
    )
    kernel = MLXKernel(be, spec, kernel=None)
    kernel._last_call = (saxpy_inputs(), [mx.float32], None)
    be._last_kernel = kernel
    return be


def log_with_lines(error_line: int, warning_line: int) -> str:
    return LOG_ERROR_ON_LINE_6.replace(f"{PROGRAM}(17)", f"{PROGRAM}({error_line})").replace(
        f"{PROGRAM}(6)", f"{PROGRAM}({warning_line})"
    )


# ------------------------------------------------------------ the text itself
def test_mirror_is_the_text_mlx_0324_compiles():
    spec = to_kernel_spec(parse(WITH_HEADER, dialect="cuda"), "saxpy", SAXPY_INPUTS, SAXPY_OUTPUTS)
    src = cuda_source(
        "saxpy",
        list(SAXPY_INPUTS),
        list(SAXPY_OUTPUTS),
        spec.source,
        spec.header,
        [ArgInfo.of(a) for a in saxpy_inputs()],
        ["float32"],
    )
    assert src.text == MLX_0324_TEXT_WITH_HEADER
    assert (src.header_first_line, src.body_first_line) == (6, 17)
    assert "#define inf" not in src.text  # 0.32.4 defines no `inf`


# ------------------------------------------------------------- the log parser
def test_parser_reads_errors_and_warnings_in_nvrtc_format():
    diags = parse_nvrtc_log(str(mlx_error(LOG_ERROR_ON_LINE_6)))
    assert [(d.file, d.line, d.severity) for d in diags] == [
        (PROGRAM, 6, "warning"),
        (PROGRAM, 17, "error"),
    ]
    assert diags[0].message == 'variable "spare" was declared but never referenced'
    assert first_error(diags).line == 17 and first_error(diags).in_program


def test_error_in_an_included_header_is_not_a_candidate_line():
    log = (
        'mlx/backend/cuda/device/utils.cuh(40): error: identifier "bogus" is undefined\n\n'
        f'{PROGRAM}(17): error: class "uint3" has no member "xx"\n\n'
        f'2 errors detected in the compilation of "{PROGRAM}".\n'
    )
    diags = parse_nvrtc_log(log)
    assert not diags[0].in_program and diags[1].in_program
    assert first_error(diags).line == 17  # the program's own error first
    only_header = parse_nvrtc_log(log.split("\n\n")[0])
    assert first_error(only_header).file == "mlx/backend/cuda/device/utils.cuh"


# ------------------------------------------------------- mapping to the file
def test_recorded_error_on_line_6_maps_to_line_6(monkeypatch):
    be = cuda_backend_after(WITH_HEADER, monkeypatch)
    err = be.classify_error(mlx_error(LOG_ERROR_ON_LINE_6))
    assert isinstance(err, CompileError)
    assert err.line == 6 and err.message == 'class "uint3" has no member "xx"'
    assert "error detected" in err.log


def test_recorded_error_on_line_10_maps_to_line_10(monkeypatch):
    source = WITH_HEADER.replace("threadIdx.xx", "threadIdx.x").replace("+ y[i]", "+ yy[i]")
    old_error = f'{PROGRAM}(17): error: class "uint3" has no member "xx"'
    log = LOG_ERROR_ON_LINE_6.replace(
        old_error, f'{PROGRAM}(21): error: identifier "yy" is undefined'
    ).replace("threadIdx.xx;", "threadIdx.x;")
    err = cuda_backend_after(source, monkeypatch).classify_error(mlx_error(log))
    assert err.line == 10 and err.message == 'identifier "yy" is undefined'


def test_recorded_error_in_the_header_maps_to_line_2(monkeypatch):
    log = (
        f'{PROGRAM}(6): error: identifier "spare2" is undefined\n\n'
        f'1 error detected in the compilation of "{PROGRAM}".\n'
    )
    err = cuda_backend_after(WITH_HEADER, monkeypatch).classify_error(mlx_error(log))
    assert err.line == 2


def test_seed_shaped_candidate_error_on_line_6(monkeypatch):
    # The case measured on an H100: the saxpy seed (no header, body from line 4)
    # broken on line 6. Without a header the body starts on line 16, so NVRTC
    # says line 18; the mirror with the 2 extra lines read this as line 4.
    from mlxsci.task import load_task

    seed = load_task("saxpy").seed("cuda")
    lines = seed.splitlines()
    assert lines[5].startswith("uint32_t i = ")
    lines[5] = lines[5].replace("threadIdx.x;", "threadIdx.xx;")
    log = (
        f'{PROGRAM}(18): error: class "uint3" has no member "xx"\n'
        f'  {lines[5]}\n\n1 error detected in the compilation of "{PROGRAM}".\n'
    )
    err = cuda_backend_after("\n".join(lines) + "\n", monkeypatch).classify_error(mlx_error(log))
    assert err.line == 6


# ---------------------------------------------------------- the line probe
def test_probe_measures_the_offset_of_the_text_mlx_compiles():
    assert probe_line_shift(probe_log(6)) == 0  # MLX 0.32.4: the mirror is exact
    assert probe_line_shift(probe_log(8)) == 2  # a build whose prefix has 2 more lines
    assert probe_line_shift("[cuda_kernel] No CUDA back-end.") == 0


def test_a_longer_mlx_prefix_still_maps_to_line_6(monkeypatch):
    # An MLX whose default_header carries `#define inf ...` and a blank line
    # (as other trees of ml-explore/mlx do) numbers everything 2 lines later.
    be = cuda_backend_after(WITH_HEADER, monkeypatch, probe_line=8)
    err = be.classify_error(mlx_error(log_with_lines(error_line=19, warning_line=8)))
    assert err.line == 6
    # ... and the same log read against 0.32.4's numbering would be wrong by 2:
    be = cuda_backend_after(WITH_HEADER, monkeypatch, probe_line=6)
    assert be.classify_error(mlx_error(log_with_lines(error_line=19, warning_line=8))).line == 8


# --------------------------------------- the simulator: no `inf` in 0.32.4
@pytest.fixture(scope="module")
def sim():
    return SimBackend(dialect="cuda", launch_timeout_s=30.0)


def run_one(sim, body: str, body_line: int = 20):
    spec = KernelSpec(
        "inf_use", ("x",), ("o",), body, dialect="cuda", source_file="cand.cu", body_line=body_line
    )
    (o,) = sim.kernel(spec)(
        inputs=[mx.ones((4,))],
        output_shapes=[(4,)],
        output_dtypes=[mx.float32],
        grid=(4, 1, 1),
        threadgroup=(4, 1, 1),
    )
    return np.asarray(o)


def test_inf_is_undefined_as_on_mlx_0324(sim):
    with pytest.raises(CompileError) as e:
        run_one(sim, "int i = threadIdx.x;\no[i] = x[i] < inf ? 1.0f : 0.0f;")
    assert e.value.line == 21 and "inf" in e.value.message


@pytest.mark.slow
def test_numeric_limits_infinity_compiles(sim):
    out = run_one(
        sim,
        "int i = threadIdx.x;\n"
        "o[i] = x[i] < cuda::std::numeric_limits<float>::infinity() ? 1.0f : 0.0f;",
    )
    np.testing.assert_array_equal(out, np.ones(4, np.float32))
