"""The Metal backend's code path, exercised without a Mac.

The task pipeline runs through Launcher -> MetalBackend -> mx.fast.metal_kernel
under mx.export_function, where MLX prints the exact Metal source it would
compile; that must equal the text the simulator generates and compiles.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlxsci.backends.mlx_gpu import MetalBackend, MLXKernel, map_generated_line
from mlxsci.backends.sim import SimBackend
from mlxsci.kernel.candidate import parse, template_args, to_kernel_spec
from mlxsci.kernel.signature import ArgInfo, metal_source
from mlxsci.kernel.spec import CompileError, KernelFault, KernelSpec
from mlxsci.task import load_task

HELPER = Path(__file__).resolve().parents[2] / "metal_export_pipeline.py"


def mlx_sources(task_name: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(HELPER), task_name, "smoke"],
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    blocks = proc.stdout.split("```\n")[1::2]
    return [b[:-1] for b in blocks]  # MLX adds one newline before the closing fence


def sim_source(task_name: str, kernel_name: str) -> str:
    task = load_task(task_name)
    size = task.size_set("smoke")[0]
    cand = parse(task.seed("metal"), dialect="metal")
    contract = task.kernel(kernel_name)
    spec = to_kernel_spec(cand, kernel_name, contract.inputs, contract.outputs)
    inputs = task.make_inputs(size.params)
    infos = [ArgInfo.of(np.asarray(inputs[n])) for n in contract.inputs]
    # The text the simulator generates and compiles for this call (seeds have no
    # template, so not even the explicit-instantiation line is blanked).
    generated = SimBackend().sim_dialect.generate(
        spec, infos, ["float32"] * len(contract.outputs), template_args(cand) or None
    )
    return generated.text


@pytest.mark.parametrize(
    "task_name,kernel,launches", [("saxpy", "saxpy", 1), ("heat2d", "heat_step", 5)]
)
def test_seed_metal_source_equals_simulator_source(task_name, kernel, launches):
    sources = mlx_sources(task_name)
    assert len(sources) == launches  # one kernel call per pipeline step
    expected = sim_source(task_name, kernel)
    for text in sources:
        assert text == expected
    assert f"custom_kernel_{kernel}_" in expected


def test_generated_lines_map_back_to_the_candidate_file():
    text = (
        "//! header\ninline float f(float v) { return v; }\n//! kernel k\nfloat q = 1;\no[0] = q;\n"
    )
    cand = parse(text, dialect="metal")
    spec = to_kernel_spec(cand, "k", ("a",), ("o",))
    src = metal_source(
        "k", ["a"], ["o"], spec.source, spec.header, [ArgInfo("float32", (16,))], ["float32"]
    )
    lines = src.text.splitlines()
    for i, line in enumerate(lines, start=1):
        mapped = map_generated_line(src, spec, i)
        if line == "o[0] = q;":
            assert mapped == 5
        elif line.startswith("inline float f"):
            assert mapped == 2
        elif "[[kernel]]" in line or "[[buffer" in line:
            assert mapped is None


def test_metal_errors_are_classified():
    be = MetalBackend()
    MetalBackend._preamble_lines = 0  # no Metal here to calibrate against
    spec = KernelSpec("k", ("a",), ("o",), "o[0] = nope;\n", body_line=7)
    kernel = MLXKernel(be, spec, kernel=None)
    kernel._last_call = ([np.zeros(16, np.float32)], ["float32"], None)
    be._last_kernel = kernel
    src = metal_source("k", ["a"], ["o"], spec.source, "", [ArgInfo("float32", (16,))], ["float32"])
    msg = (
        "[metal::Device] Unable to build metal library from source\n"
        f"program_source:{src.body_first_line}:8: error: use of undeclared identifier 'nope'"
    )
    err = be.classify_error(RuntimeError(msg))
    assert isinstance(err, CompileError) and err.line == 7 and "nope" in err.message
    fault = be.classify_error(
        ValueError(
            "Thread group size (2048) is greater than  the maximum "
            "allowed threads per threadgroup (1024)."
        )
    )
    assert isinstance(fault, KernelFault) and fault.kind == "launch"
    gpu = be.classify_error(
        RuntimeError("[METAL] Command buffer execution failed: Caused GPU Timeout Error")
    )
    assert isinstance(gpu, KernelFault) and gpu.kind == "gpu_fault"
    assert be.classify_error(RuntimeError("something unrelated")) is None


@pytest.mark.parametrize(
    "task_name", __import__("mlxsci.task", fromlist=["task_names"]).task_names()
)
@pytest.mark.slow
def test_one_metal_variant_per_kernel(task_name):
    """Per-step scalars are 0-d inputs, never source or template changes: the
    whole pipeline of every task compiles exactly one variant per kernel."""
    sources = mlx_sources(task_name)
    task = load_task(task_name)
    names = {s.split("[[kernel]] void ", 1)[1].split("(", 1)[0] for s in sources}
    assert len(set(sources)) == len(task.kernels) == len(names)


def test_cuda_compile_errors_map_to_candidate_lines():
    from mlxsci.backends.mlx_gpu import CudaBackend
    from mlxsci.kernel.signature import cuda_source

    be = CudaBackend()
    spec = KernelSpec(
        "k", ("a",), ("o",), "o[0] = a[0];\no[1] = nope;\n", dialect="cuda", body_line=20
    )
    kernel = MLXKernel(be, spec, kernel=None)
    kernel._last_call = ([np.zeros(16, np.float32)], ["float32"], None)
    be._last_kernel = kernel
    src = cuda_source("k", ["a"], ["o"], spec.source, "", [ArgInfo("float32", (16,))], ["float32"])
    msg = (
        "Failed to compile kernel: custom_kernel_k_1a2b.cu("
        f'{src.body_first_line + 1}): error: identifier "nope" is undefined.'
    )
    err = be.classify_error(RuntimeError(msg))
    assert isinstance(err, CompileError) and err.line == 21 and "nope" in err.message
