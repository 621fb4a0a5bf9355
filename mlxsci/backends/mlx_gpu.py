"""GPU backends through MLX's custom-kernel API: Metal and CUDA.

Both wrap `mx.fast.metal_kernel` / `mx.fast.cuda_kernel` objects unchanged:
the call signature is MLX's, outputs are lazy mx.arrays. What this module
adds is a check of the launch limits before MLX is called
(mlxsci.launch_limits), error classification (compile error vs launch error
vs GPU fault) and mapping compiler line numbers back to the candidate file.
"""
from __future__ import annotations

import hashlib
import re

import mlx.core as mx

from mlxsci.backends.base import Backend, CompileError, Kernel, KernelFault, KernelSpec
from mlxsci.launch_limits import check_launch
from mlxsci.signature import ArgInfo, cuda_source, metal_source


class MLXKernel(Kernel):
    def __init__(self, backend: "MLXGPUBackend", spec: KernelSpec, kernel):
        self.backend = backend
        self.spec = spec
        self._kernel = kernel
        self._last_call = None   # what the generated text depends on, for line mapping

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup,
                 template=None, init_value=None):
        # Before MLX: over a limit, CUDA says only "invalid argument" and names no kernel.
        # Shared memory is known only after compiling, so it is not checked here.
        check_launch(self.spec.dialect, self.spec.name, grid, threadgroup)
        self._last_call = (inputs, output_dtypes, template)
        self.backend._last_kernel = self
        try:
            return self._kernel(inputs=inputs, output_shapes=output_shapes,
                                output_dtypes=output_dtypes, grid=grid, threadgroup=threadgroup,
                                template=template, init_value=init_value,
                                verbose=self.backend.verbose)
        except (ValueError, RuntimeError) as exc:
            raise self.backend.classify_error(exc) or exc

    def candidate_line(self, generated_line: int) -> int | None:
        """Map a line of MLX's generated text (without MLX's Metal preamble) to the
        candidate file, by regenerating the text the last call produced."""
        if self._last_call is None:
            return None
        inputs, output_dtypes, template = self._last_call
        infos = [ArgInfo.of(a if hasattr(a, "dtype") else mx.array(a)) for a in inputs]
        spec = self.spec
        if spec.dialect == "metal":
            src = metal_source(spec.name, list(spec.input_names), list(spec.output_names),
                               spec.source, spec.header, infos, list(output_dtypes), template,
                               spec.atomic_outputs)
        else:
            src = cuda_source(spec.name, list(spec.input_names), list(spec.output_names),
                              spec.source, spec.header, infos, list(output_dtypes), template)
        return map_generated_line(src, spec, generated_line)


def map_generated_line(src, spec: KernelSpec, line: int) -> int | None:
    """Generated-text line -> candidate-file line (None inside the generated signature)."""
    header_lines = spec.header.count("\n")
    if src.header_first_line <= line < src.header_first_line + header_lines:
        return spec.header_line + (line - src.header_first_line)
    body_lines = spec.source.count("\n") + 1
    if src.body_first_line <= line < src.body_first_line + body_lines:
        return spec.body_line + (line - src.body_first_line)
    return None


class MLXGPUBackend(Backend):
    _last_kernel: MLXKernel | None = None

    def __init__(self, verbose: bool = False):
        # verbose: MLX prints each generated kernel source (from C++, to fd 1).
        self.verbose = verbose

    def device_info(self) -> dict:
        info = mx.device_info(mx.gpu)
        name = str(info.get("device_name", "unknown GPU"))
        arch = str(info.get("architecture", ""))
        fingerprint = hashlib.sha256(f"{self.name}|{name}|{arch}|{mx.__version__}".encode())
        return {"name": name, "architecture": arch, "mlx": mx.__version__,
                "fingerprint": f"{self.name}-{fingerprint.hexdigest()[:16]}"}

    def synchronize(self) -> None:
        mx.synchronize()


class MetalBackend(MLXGPUBackend):
    name = "metal"
    dialect = "metal"
    _preamble_lines: int | None = None

    @classmethod
    def available(cls) -> bool:
        return bool(mx.metal.is_available())

    def kernel(self, spec: KernelSpec) -> MLXKernel:
        k = mx.fast.metal_kernel(name=spec.name, input_names=list(spec.input_names),
                                 output_names=list(spec.output_names), source=spec.source,
                                 header=spec.header, atomic_outputs=spec.atomic_outputs)
        return MLXKernel(self, spec, k)

    def to_device(self, array):
        return mx.array(array)   # unified memory: nothing to move

    def preamble_lines(self) -> int:
        """Lines MLX puts before the generated text (its utils.h), measured once by
        compiling a kernel whose header's first line is an error."""
        if MetalBackend._preamble_lines is None:
            probe = mx.fast.metal_kernel(name="mlxsci_line_probe", input_names=["a"],
                                         output_names=["o"], source="o[0] = a[0];",
                                         header="#error mlxsci_line_probe\n")
            try:
                mx.eval(probe(inputs=[mx.zeros((8,))], output_shapes=[(8,)],
                              output_dtypes=[mx.float32], grid=(1, 1, 1), threadgroup=(1, 1, 1)))
                MetalBackend._preamble_lines = 0
            except RuntimeError as exc:
                m = re.search(r"program_source:(\d+):\d+: error: .*mlxsci_line_probe", str(exc))
                MetalBackend._preamble_lines = int(m.group(1)) - 1 if m else 0
        return MetalBackend._preamble_lines

    def classify_error(self, exc):
        if isinstance(exc, (CompileError, KernelFault)):
            return exc
        text = str(exc)
        if "Unable to build metal library" in text:
            m = re.search(r"program_source:(\d+):\d+: error: (.*)", text)
            line = None
            message = m.group(2).strip() if m else text.splitlines()[-1]
            if m and self._last_kernel is not None:
                line = self._last_kernel.candidate_line(int(m.group(1)) - self.preamble_lines())
            return CompileError(message, line, text)
        if "Unable to load kernel" in text or "Unable to load function" in text:
            return CompileError("pipeline error: " + text.strip().splitlines()[0], None, text)
        if "Thread group size" in text:
            return KernelFault("launch", text.strip())
        if "Command buffer execution failed" in text:
            return KernelFault("gpu_fault", text.strip())
        return None


class CudaBackend(MLXGPUBackend):
    name = "cuda"
    dialect = "cuda"

    @classmethod
    def available(cls) -> bool:
        cuda = getattr(mx, "cuda", None)
        return bool(cuda is not None and cuda.is_available())

    def kernel(self, spec: KernelSpec) -> MLXKernel:
        k = mx.fast.cuda_kernel(name=spec.name, input_names=list(spec.input_names),
                                output_names=list(spec.output_names), source=spec.source,
                                header=spec.header)
        return MLXKernel(self, spec, k)

    def device_info(self) -> dict:
        info = super().device_info()
        from mlxsci.backends.cuda_info import device_properties
        props = device_properties()
        if props is not None:
            info["properties"] = props
        return info

    def to_device(self, array):
        # Host-created arrays live in managed memory on MLX's CUDA build, and so
        # does every allocation of <= 8 bytes (0-d scalars, counters): a small
        # pool of managed pages. A page the host last wrote migrates to the GPU on
        # the kernel's first access, and back whenever the host writes any array
        # on it. A copy made by a GPU op is written on the device (device memory,
        # or for scalars a pool page the GPU now holds), so kernels read it
        # without faults, provided nothing is created or read on the host while
        # timed runs go on (the worker makes every input and counter first).
        a = mx.array(array)
        b = mx.logical_not(mx.logical_not(a)) if a.dtype == mx.bool_ else (a * 1).astype(a.dtype)
        mx.eval(b)
        return b

    def classify_error(self, exc):
        if isinstance(exc, (CompileError, KernelFault)):
            return exc
        text = str(exc)
        if "Failed to compile kernel" in text:
            # NVRTC numbers lines of the generated text exactly as verbose=True prints it.
            m = re.search(r"\.cu\((\d+)\): error: (.*)", text)
            message = m.group(2).strip() if m else text.strip().splitlines()[0]
            line = None
            if m and self._last_kernel is not None:
                line = self._last_kernel.candidate_line(int(m.group(1)))
            return CompileError(message, line, text)
        if "failed:" in text and "cuda" in text.lower():
            return KernelFault("gpu_fault", text.strip())
        return None
