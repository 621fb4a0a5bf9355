"""Language rules of the real compilers, enforced by the simulator
(mlxsci/backends/sim/language_rules.py).

Every rule has a kernel the real compiler rejects, which must fail here with a
CompileError that names the rule and points at the candidate's own line, and
its correct twin, which must compile, run and give the right numbers. The
Metal rules follow the Metal Shading Language Specification; the CUDA rules
and their messages were checked against NVRTC 12.9 compiling MLX's generated
text with MLX's flags and device headers. Every task seed must pass the
checker at the sizes it runs at.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
sim = pytest.importorskip("mlxsci.backends.sim")

from mlxsci.backends.base import Backend  # noqa: E402
from mlxsci.backends.sim import language_rules  # noqa: E402
from mlxsci.backends.sim.dialects import DIALECTS  # noqa: E402
from mlxsci.kernel.candidate import load as load_candidate  # noqa: E402
from mlxsci.kernel.signature import ArgInfo, dtype_name  # noqa: E402
from mlxsci.kernel.spec import CompileError, KernelSpec  # noqa: E402
from mlxsci.task import load_task, task_names  # noqa: E402
from mlxsci.worker.launch import Launcher  # noqa: E402

SimBackend = sim.SimBackend
pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

HEADER_LINE = 3  # the header starts on line 3 of the candidate file
BODY_LINE = 20  # the body starts on line 20


@pytest.fixture(scope="module")
def metal():
    return SimBackend()


@pytest.fixture(scope="module")
def cuda():
    return SimBackend(dialect="cuda")


def run(backend, body, header="", *, inputs=None, n=64):
    """Runs `body` with inputs x (n floats, or `inputs`) and one output `out`
    of n floats; returns the output as numpy."""
    inputs = inputs if inputs is not None else {"x": np.arange(n, dtype=np.float32)}
    spec = KernelSpec(
        "rules",
        tuple(inputs),
        ("out",),
        body,
        header,
        dialect=backend.dialect,
        source_file=f"cand.{'metal' if backend.dialect == 'metal' else 'cu'}",
        header_line=HEADER_LINE,
        body_line=BODY_LINE,
    )
    k = backend.kernel(spec)
    (out,) = k(
        inputs=[mx.array(v) for v in inputs.values()],
        output_shapes=[(n,)],
        output_dtypes=[mx.float32],
        grid=(n, 1, 1),
        threadgroup=(32, 1, 1),
    )
    return np.array(out)


def rejected(backend, body, header="", **kw) -> CompileError:
    with pytest.raises(CompileError) as e:
        run(backend, body, header, **kw)
    return e.value


X = np.arange(64, dtype=np.float32)
TID = "uint i = thread_position_in_grid.x;\n"


# ================================================================== Metal
# -- no lambdas (MSL 1.4.4) --
def test_metal_lambda_is_rejected_and_a_helper_function_runs(metal):
    e = rejected(metal, TID + "auto sq = [](float v) { return v * v; };\nout[i] = sq(x[i]);\n")
    assert "lambda expressions are not supported" in e.message and e.line == BODY_LINE + 1, e
    out = run(metal, TID + "out[i] = sq(x[i]);\n", "inline float sq(float v) { return v * v; }\n")
    np.testing.assert_array_equal(out, X * X)


# -- program-scope variables live in `constant` (MSL 4.2) --
@pytest.mark.parametrize(
    "decl",
    [
        "float SCALE = 3.0f;",
        "const float SCALE = 3.0f;",
        "constexpr float SCALE = 3.0f;",
        "static float SCALE = 3.0f;",
    ],
)
def test_metal_program_scope_variable_outside_constant_is_rejected(metal, decl):
    e = rejected(metal, TID + "out[i] = x[i] * SCALE;\n", "// scale\n" + decl + "\n")
    assert "program scope variable must reside in constant address space" in e.message, e
    assert "'SCALE'" in e.message and e.line == HEADER_LINE + 1, e


@pytest.mark.parametrize(
    "decl",
    [
        "constant float SCALE = 3.0f;",
        "constant constexpr float SCALE = 3.0f;",
        "constexpr constant float SCALE(3.0f);",
    ],
)
def test_metal_program_scope_constant_runs(metal, decl):
    out = run(metal, TID + "out[i] = x[i] * SCALE;\n", "// scale\n" + decl + "\n")
    np.testing.assert_array_equal(out, X * 3)


@pytest.mark.slow
def test_metal_function_scope_static_is_rejected_and_a_constant_table_runs(metal):
    body = TID + "static const float W[2] = {1.0f, 2.0f};\nout[i] = x[i] * W[i % 2];\n"
    e = rejected(metal, body)
    assert "static variables are not supported" in e.message and e.line == BODY_LINE + 1, e
    out = run(metal, TID + "out[i] = x[i] * W[i % 2];\n", "constant float W[2] = {1.0f, 2.0f};\n")
    np.testing.assert_array_equal(out, X * np.tile([1, 2], 32))


# -- pointers and references name their address space (MSL 4) --
@pytest.mark.slow
def test_metal_pointer_without_address_space_is_rejected(metal):
    e = rejected(metal, TID + "float* o = out;\no[i] = x[i];\n")
    assert "pointer type must have explicit address space qualifier" in e.message, e
    assert e.line == BODY_LINE + 1, e
    np.testing.assert_array_equal(run(metal, TID + "device float* o = out;\no[i] = x[i];\n"), X)


def test_metal_reference_parameter_without_address_space_is_rejected(metal):
    body = TID + "float v = x[i];\nbump(v);\nout[i] = v;\n"
    e = rejected(metal, body, "inline void bump(float& v) { v += 1.0f; }\n")
    assert "reference type must have explicit address space qualifier" in e.message, e
    assert e.line == HEADER_LINE, e
    out = run(metal, body, "inline void bump(thread float& v) { v += 1.0f; }\n")
    np.testing.assert_array_equal(out, X + 1)


def test_metal_cast_without_address_space_is_rejected(metal):
    e = rejected(metal, TID + "if (i < 16) ((float4*)out)[i] = ((const device float4*)x)[i];\n")
    assert "pointer type must have explicit address space qualifier" in e.message, e
    assert "C-style cast" in e.message and e.line == BODY_LINE + 1, e
    out = run(metal, TID + "if (i < 16) ((device float4*)out)[i] = ((const device float4*)x)[i];\n")
    np.testing.assert_array_equal(out, X)


def test_metal_cast_from_device_to_constant_is_rejected(metal):
    e = rejected(metal, TID + "constant float* c = (constant float*)x;\nout[i] = c[i];\n")
    assert "converts between mismatching address spaces (device to constant)" in e.message, e
    assert e.line == BODY_LINE + 1, e
    out = run(metal, TID + "const device float* c = (const device float*)x;\nout[i] = c[i];\n")
    np.testing.assert_array_equal(out, X)


def test_metal_cast_from_threadgroup_to_device_is_rejected(metal):
    body = (
        "threadgroup float buf[32];\nuint l = thread_position_in_threadgroup.x;\n"
        "buf[l] = x[thread_position_in_grid.x];\nthreadgroup_barrier(mem_flags::mem_threadgroup);\n"
        "{} t = ({})buf;\nout[thread_position_in_grid.x] = t[31 - l];\n"
    )
    e = rejected(metal, body.format("device float*", "device float*"))
    assert "converts between mismatching address spaces (threadgroup to device)" in e.message, e
    assert e.line == BODY_LINE + 4, e
    out = run(metal, body.format("threadgroup float*", "threadgroup float*"))
    np.testing.assert_array_equal(out, X.reshape(2, 32)[:, ::-1].reshape(-1))


# -- threadgroup variables have no initializer (MSL 4.4) --
# One group's sum, written by lane 0 after it zeroed the accumulator: the
# initialised twin declares `= 0.0f` (or a brace) where the correct one writes.
TG_SUM = (
    "uint l = thread_position_in_threadgroup.x;\n"
    "threadgroup float acc[1]{init};\n"
    "{zero}threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "if (l == 0) for (uint k = 0; k < 32; ++k) acc[0] += x[thread_position_in_grid.x + k];\n"
    "threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "out[thread_position_in_grid.x] = acc[0];\n"
)
GROUP_SUMS = np.repeat(X.reshape(2, 32).sum(axis=1), 32)


@pytest.mark.parametrize("init", [" = {0.0f}", "{}"])
def test_metal_threadgroup_initializer_is_rejected_and_a_written_twin_runs(metal, init):
    e = rejected(metal, TG_SUM.format(init=init, zero=""))
    assert "threadgroup variables cannot be initialized" in e.message, e
    assert "'acc'" in e.message and e.line == BODY_LINE + 1, e
    out = run(metal, TG_SUM.format(init="", zero="if (l == 0) acc[0] = 0.0f;\n"))
    np.testing.assert_array_equal(out, GROUP_SUMS)


def test_metal_threadgroup_pointer_with_an_initializer_is_fine():
    # A pointer into threadgroup memory lives in the thread: it may be initialised.
    body = "threadgroup float t[4];\nthreadgroup float* p = &t[1];\nthreadgroup float& r = t[2];\n"
    code = "kernel void k() {\n" + body + "}\n"
    assert language_rules.check_metal(code, []) is None


def test_metal_small_input_is_a_constant_pointer(metal):
    # MLX passes an input of fewer than 8 elements as `const constant T*`: a
    # pointer to it declared `device` does not compile on a Mac.
    inputs = {"x": X, "w": np.array([1, 2, 3, 4], dtype=np.float32)}
    e = rejected(
        metal, TID + "const device float* wp = w;\nout[i] = x[i] * wp[i % 4];\n", inputs=inputs
    )
    assert "cannot initialize a variable of type 'const device float *'" in e.message, e
    assert "constant" in e.message and e.line == BODY_LINE + 1, e
    out = run(
        metal, TID + "const constant float* wp = w;\nout[i] = x[i] * wp[i % 4];\n", inputs=inputs
    )
    np.testing.assert_array_equal(out, X * np.tile([1, 2, 3, 4], 16))


# -- Metal keywords are not identifiers --
@pytest.mark.parametrize(
    "word", ["half", "thread", "device", "constant", "threadgroup", "kernel", "vertex"]
)
def test_metal_keyword_as_variable_name_is_rejected(metal, word):
    e = rejected(metal, TID + f"uint {word} = i;\nout[{word}] = x[{word}];\n")
    assert f"'{word}' is a Metal" in e.message and "cannot name a variable" in e.message, e
    assert e.line == BODY_LINE + 1, e


def test_metal_keyword_as_parameter_name_is_rejected_and_the_renamed_twin_runs(metal):
    e = rejected(
        metal,
        TID + "out[i] = twice(x[i]);\n",
        "// helper\ninline float twice(float half) { return 2.0f * half; }\n",
    )
    assert "'half'" in e.message and "cannot name a parameter" in e.message, e
    assert e.line == HEADER_LINE + 1, e
    out = run(
        metal,
        TID + "uint half_n = 32;\nout[i] = twice(x[i]) + float(i / half_n);\n",
        "// helper\ninline float twice(float h) { return 2.0f * h; }\n",
    )
    np.testing.assert_array_equal(out, 2 * X + (np.arange(64) // 32))


def test_metal_type_names_and_half_values_are_fine(metal):
    # `half` as a type and in conversions, and vector typedef names used as types.
    body = TID + "half h = half(x[i]);\nfloat2 v = float2(float(h), 1.0f);\nout[i] = v.x + v.y;\n"
    np.testing.assert_array_equal(run(metal, body), X + 1)


def test_metal_error_log_is_in_clang_format(metal):
    e = rejected(metal, TID + "float half = 0.5f;\nout[i] = x[i] * half;\n")
    assert e.log.startswith(f"cand.metal:{BODY_LINE + 1}:7: error: 'half'"), e.log
    assert str(e).startswith(f"line {BODY_LINE + 1}: "), str(e)


def _metal_text(body, header="", names=("x",), sizes=(64,)):
    spec = KernelSpec("k", names, ("out",), body, header)
    infos = [ArgInfo("float32", (s,) if s else ()) for s in sizes]
    gen = DIALECTS["metal"]().generate(spec, infos, ["float32"], None)
    return gen


def test_metal_checker_accepts_simdgroup_matrices_bool_vectors_and_vector_constants():
    # Features Metal accepts (the simulator's support for them lives elsewhere):
    # the rule checker must not reject them.
    header = "constant constexpr uint3 M(1, 2, 3);\n"
    body = (
        TID + "constexpr uint3 L(4, 5, 6);\n"
        "simdgroup_float8x8 a;\nsimdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.f);\n"
        "simdgroup_load(a, x, 8);\nsimdgroup_multiply_accumulate(acc, a, a, acc);\n"
        "simdgroup_store(acc, out, 8);\n"
        "float4 v = float4(x[i]);\nbool4 m = (v > 0.0f) && !(v > 10.0f) || bool4(M.x == L.x);\n"
        "out[i] = select(0.0f, 1.0f, all(m) || any(m));\n"
    )
    gen = _metal_text(body, header)
    assert language_rules.check_metal(gen.text, gen.regions) is None


# ================================================================== CUDA
CTID = "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"


@pytest.mark.parametrize(
    "header", ["#include <cmath>\n", "#include <vector>\n", "#include <algorithm>\n"]
)
def test_cuda_host_standard_header_is_rejected(cuda, header):
    e = rejected(cuda, CTID + "out[i] = sqrtf(x[i]);\n", "// helpers\n" + header)
    assert "cannot open source file" in e.message and e.line == HEADER_LINE + 1, e


@pytest.mark.slow
def test_cuda_device_headers_and_builtins_run(cuda):
    # cuda::std::numeric_limits comes with MLX's default utils.cuh include.
    header = "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n"
    body = (
        CTID
        + "out[i] = sqrtf(x[i]) + fminf(x[i], 1.0f) * cuda::std::numeric_limits<float>::digits;\n"
    )
    out = run(cuda, body, header)
    np.testing.assert_allclose(out, np.sqrt(X) + np.minimum(X, 1) * 24, rtol=1e-6)


@pytest.mark.parametrize("call", ["std::min(x[i], 1.0f)", "std::sqrt(x[i])", "std::abs(x[i])"])
def test_cuda_std_namespace_is_rejected(cuda, call):
    e = rejected(cuda, CTID + f"float v = x[i];\nout[i] = {call} + v;\n")
    assert 'namespace "std" has no member' in e.message and e.line == BODY_LINE + 2, e


@pytest.mark.slow
def test_cuda_device_math_twin_runs(cuda):
    out = run(
        cuda, CTID + "float v = x[i];\nout[i] = fminf(v, 1.0f) + sqrtf(v) + fabsf(v) + min(i, 3);\n"
    )
    np.testing.assert_allclose(
        out, np.minimum(X, 1) + np.sqrt(X) + X + np.minimum(np.arange(64), 3), rtol=1e-6
    )


@pytest.mark.slow
def test_cuda_host_only_function_is_rejected(cuda):
    body = CTID + "out[i] = twice(x[i]);\n"
    e = rejected(cuda, body, "__host__ float twice(float v) { return 2.0f * v; }\n")
    assert "__host__ function is not allowed in JIT mode" in e.message and e.line == HEADER_LINE, e
    for qual in ("__host__ __device__ ", "__device__ ", ""):
        out = run(cuda, body, qual + "float twice(float v) { return 2.0f * v; }\n")
        np.testing.assert_array_equal(out, 2 * X)


@pytest.mark.parametrize("use", ["out[i] = x[i] * (float)M_PI;", "uint j = i;\nout[j] = x[j];"])
def test_cuda_host_header_names_are_undefined(cuda, use):
    e = rejected(cuda, CTID + use + "\n")
    assert "is undefined" in e.message and e.line == BODY_LINE + 1, e


@pytest.mark.slow
def test_cuda_names_the_candidate_defines_run(cuda):
    header = "#define M_PI 3.14159265358979f\ntypedef unsigned int uint;\n"
    out = run(cuda, CTID + "uint j = i;\nout[j] = x[j] * M_PI;\n", header)
    np.testing.assert_allclose(out, X * np.float32(3.14159265358979), rtol=1e-6)


@pytest.mark.slow
def test_cuda_lambdas_are_allowed(cuda):
    out = run(cuda, CTID + "auto sq = [](float v) { return v * v; };\nout[i] = sq(x[i]);\n")
    np.testing.assert_array_equal(out, X * X)


# -- __shared__ variables have no initializer --
CTG_SUM = (
    "int l = threadIdx.x;\n"
    "__shared__ float acc[1]{init};\n"
    "{zero}__syncthreads();\n"
    "if (l == 0) for (int k = 0; k < 32; ++k) acc[0] += x[blockIdx.x * 32 + k];\n"
    "__syncthreads();\n"
    "out[blockIdx.x * 32 + l] = acc[0];\n"
)


@pytest.mark.parametrize("init", [" = {0.0f}", "{}"])
def test_cuda_shared_initializer_is_rejected_and_a_written_twin_runs(cuda, init):
    e = rejected(cuda, CTG_SUM.format(init=init, zero=""))
    assert "initializer not allowed for __shared__ variable" in e.message, e
    assert e.line == BODY_LINE + 1, e
    out = run(cuda, CTG_SUM.format(init="", zero="if (l == 0) acc[0] = 0.0f;\n"))
    np.testing.assert_array_equal(out, GROUP_SUMS)


# ================================================================== seeds
class _RecordingBackend(Backend):
    """Runs a task's host pipeline without compiling: each launch generates
    MLX's text, runs the rule checker on it and returns zeros."""

    name = "rules"

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.violations: list = []
        self.checked = 0

    def kernel(self, spec):
        gen_dialect = DIALECTS[self.dialect]()

        def call(
            *,
            inputs,
            output_shapes,
            output_dtypes,
            grid,
            threadgroup,
            template=None,
            init_value=None,
            mode=None,
        ):
            arrays = [a if isinstance(a, mx.array) else mx.array(a) for a in inputs]
            gen = gen_dialect.generate(
                spec,
                [ArgInfo.of(a) for a in arrays],
                [dtype_name(d) for d in output_dtypes],
                template,
            )
            err = language_rules.check(self.dialect, gen.text, gen.regions, spec.source_file)
            self.checked += 1
            if err is not None:
                self.violations.append(f"{spec.name}: {err} ({spec.source_file})")
            return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]

        return call

    def to_device(self, array):
        return mx.array(array)


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.parametrize(
    "task_ref",
    task_names() + [str(p) for p in sorted(EXAMPLES.glob("*")) if (p / "task.py").is_file()],
)
@pytest.mark.slow
def test_every_seed_passes_the_checker(task_ref, dialect):
    task = load_task(task_ref)
    cand = load_candidate(task.seed_path(dialect), dialect)
    backend = _RecordingBackend(dialect)
    for which in ("smoke", "in-dist"):
        for size in task.size_set(which):
            launcher = Launcher(
                backend, task, cand, size.params, filename=str(task.seed_path(dialect))
            )
            inputs = {k: mx.array(v) for k, v in task.make_inputs(size.params).items()}
            task.run(launcher, inputs, size.params)
    assert backend.checked > 0
    assert not backend.violations, "\n".join(backend.violations)
