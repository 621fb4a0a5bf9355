"""GPU backends through MLX's custom-kernel API: Metal and CUDA.

Both wrap `mx.fast.metal_kernel` / `mx.fast.cuda_kernel` objects unchanged:
the call signature is MLX's, outputs are lazy mx.arrays. What this module
adds is a check of the launch limits before MLX is called
(mlxsci.kernel.launch_limits), error classification (compile error vs launch error
vs GPU fault) and mapping compiler line numbers back to the candidate file.
Each dialect's MLX constructor, signature generator and compiler-log parser
come from mlxsci.kernel.dialects.
"""

from __future__ import annotations

import hashlib
from typing import Any

import mlx.core as mx

from mlxsci.backends.base import Backend, Kernel
from mlxsci.kernel import dialects
from mlxsci.kernel.compile_logs import COMPILE_FAILED, first_error, parse_nvrtc_log
from mlxsci.kernel.launch_limits import check_launch
from mlxsci.kernel.signature import ArgInfo, cuda_source
from mlxsci.kernel.spec import CompileError, KernelFault, KernelSpec


class MLXKernel(Kernel):
    def __init__(self, backend: MLXGPUBackend, spec: KernelSpec, kernel):
        self.backend = backend
        self.spec = spec
        self._kernel = kernel
        # what the generated text depends on, for line mapping
        self._last_call: tuple | None = None

    def __call__(
        self,
        *,
        inputs,
        output_shapes,
        output_dtypes,
        grid,
        threadgroup,
        template=None,
        init_value=None,
        mode=None,  # RunMode: a GPU runs its launches its own way (init_value comes apart)
    ):
        # Before MLX: over a limit, CUDA says only "invalid argument" and names no kernel.
        # Shared memory is known only after compiling, so it is not checked here.
        check_launch(self.spec.dialect, self.spec.name, grid, threadgroup)
        self._last_call = (inputs, output_dtypes, template)
        self.backend._last_kernel = self
        try:
            return self._kernel(
                inputs=inputs,
                output_shapes=output_shapes,
                output_dtypes=output_dtypes,
                grid=grid,
                threadgroup=threadgroup,
                template=template,
                init_value=init_value,
                verbose=self.backend.verbose,
            )
        except (ValueError, RuntimeError) as exc:
            classified = self.backend.classify_error(exc)
            if classified is None or classified is exc:
                raise
            raise classified from exc

    def candidate_line(self, generated_line: int) -> int | None:
        """Map a line of MLX's generated text (without MLX's Metal preamble) to the
        candidate file, by regenerating the text the last call produced."""
        if self._last_call is None:
            return None
        inputs, output_dtypes, template = self._last_call
        infos = [ArgInfo.of(a if hasattr(a, "dtype") else mx.array(a)) for a in inputs]
        src = dialects.get(self.spec.dialect).source(self.spec, infos, output_dtypes, template)
        return map_generated_line(src, self.spec, generated_line)


def map_generated_line(src, spec: KernelSpec, line: int) -> int | None:
    """Generated-text line -> candidate-file line (None inside the generated signature)."""
    # A header without a final newline still has its last line (fused with
    # the line MLX writes after it).
    header_lines = spec.header.count("\n") + (
        1 if spec.header and not spec.header.endswith("\n") else 0
    )
    if src.header_first_line <= line < src.header_first_line + header_lines:
        return spec.header_line + (line - src.header_first_line)
    body_lines = spec.source.count("\n") + 1
    if src.body_first_line <= line < src.body_first_line + body_lines:
        return spec.body_line + (line - src.body_first_line)
    return None


# The CUDA line probe: a kernel whose header's first line is an error, so the
# line NVRTC gives it is where MLX puts the header in the text it compiles.
LINE_PROBE = "mlxsci_line_probe"
_PROBE_SOURCE = "o[0] = a[0];"
_PROBE_HEADER = f"#error {LINE_PROBE}\n"


def probe_line_shift(probe_log: str) -> int:
    """NVRTC's line of the probe's header minus the line signature.cuda_source
    gives it: 0 while the mirror is exact, the number of lines a later MLX adds
    before the header otherwise. 0 when the log holds no probe error."""
    expected = cuda_source(
        LINE_PROBE,
        ["a"],
        ["o"],
        _PROBE_SOURCE,
        _PROBE_HEADER,
        [ArgInfo("float32", (8,))],
        ["float32"],
    ).header_first_line
    for d in parse_nvrtc_log(probe_log):
        if d.is_error and d.in_program and LINE_PROBE in d.message:
            return d.line - expected
    return 0


class MLXGPUBackend(Backend):
    _last_kernel: MLXKernel | None = None

    def __init__(self, verbose: bool = False):
        # verbose: MLX prints each generated kernel source (from C++, to fd 1).
        self.verbose = verbose

    def device_info(self) -> dict:
        info = mx.device_info(mx.gpu)
        name = str(info.get("device_name", "unknown GPU"))
        arch = str(info.get("architecture", ""))
        version = getattr(mx, "__version__", "")  # not in MLX's type stubs
        fingerprint = hashlib.sha256(f"{self.name}|{name}|{arch}|{version}".encode())
        return {
            "name": name,
            "architecture": arch,
            "mlx": version,
            "fingerprint": f"{self.name}-{fingerprint.hexdigest()[:16]}",
        }

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
        return MLXKernel(self, spec, dialects.METAL.mlx_kernel(spec))

    def to_device(self, array):
        return mx.array(array)  # unified memory: nothing to move

    def preamble_lines(self) -> int:
        """Lines MLX puts before the generated text (its utils.h), measured once by
        compiling a kernel whose header's first line is an error."""
        if MetalBackend._preamble_lines is None:
            probe: Any = mx.fast.metal_kernel(
                name="mlxsci_line_probe",
                input_names=["a"],
                output_names=["o"],
                source="o[0] = a[0];",
                header="#error mlxsci_line_probe\n",
            )
            try:
                mx.eval(
                    probe(
                        inputs=[mx.zeros((8,))],
                        output_shapes=[(8,)],
                        output_dtypes=[mx.float32],
                        grid=(1, 1, 1),
                        threadgroup=(1, 1, 1),
                    )
                )
                MetalBackend._preamble_lines = 0
            except RuntimeError as exc:
                lines = [
                    d.line
                    for d in dialects.METAL.parse_log(str(exc))
                    if "mlxsci_line_probe" in d.message
                ]
                MetalBackend._preamble_lines = lines[0] - 1 if lines else 0
        return MetalBackend._preamble_lines

    def classify_error(self, exc):
        if isinstance(exc, (CompileError, KernelFault)):
            return exc
        text = str(exc)
        if "Unable to build metal library" in text:
            err = first_error(dialects.METAL.parse_log(text))
            if err is None:
                return CompileError(text.splitlines()[-1], None, text)
            line = None
            if self._last_kernel is not None:
                line = self._last_kernel.candidate_line(err.line - self.preamble_lines())
            return CompileError(err.message, line, text)
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
    _line_shift: int | None = None

    @classmethod
    def available(cls) -> bool:
        cuda = getattr(mx, "cuda", None)
        return bool(cuda is not None and cuda.is_available())

    def kernel(self, spec: KernelSpec) -> MLXKernel:
        return MLXKernel(self, spec, dialects.CUDA.mlx_kernel(spec))

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
        if COMPILE_FAILED.strip() in text:
            return self.compile_error(text)
        if "failed:" in text and "cuda" in text.lower():
            return KernelFault("gpu_fault", text.strip())
        return None

    def compile_error(self, text: str) -> CompileError:
        """MLX's "Failed to compile kernel" text -> the first error, at its
        line of the candidate file (None for a header MLX or CUDA includes)."""
        err = first_error(dialects.CUDA.parse_log(text))
        if err is None:
            return CompileError(text.strip().splitlines()[0], None, text)
        if not err.in_program:
            return CompileError(f"{err.message} (in {err.file}, line {err.line})", None, text)
        line = None
        if self._last_kernel is not None:
            line = self._last_kernel.candidate_line(err.line - self.line_shift())
        return CompileError(err.message, line, text)

    def line_shift(self) -> int:
        """Lines MLX puts before the header beyond those signature.cuda_source
        writes (0 on MLX 0.32.4), measured once per process, when the first
        compile error needs it, by compiling the line probe."""
        if CudaBackend._line_shift is None:
            CudaBackend._line_shift = probe_line_shift(self._probe_log())
        return CudaBackend._line_shift

    @staticmethod
    def _probe_log() -> str:
        """MLX's error text for the line probe: "" where it cannot run (no CUDA
        build of MLX), so the mirror's own numbering stands."""
        try:
            probe: Any = mx.fast.cuda_kernel(
                name=LINE_PROBE,
                input_names=["a"],
                output_names=["o"],
                source=_PROBE_SOURCE,
                header=_PROBE_HEADER,
            )
            mx.eval(
                probe(
                    inputs=[mx.zeros((8,))],
                    output_shapes=[(8,)],
                    output_dtypes=[mx.float32],
                    grid=(1, 1, 1),
                    threadgroup=(1, 1, 1),
                )
            )
        except RuntimeError as exc:
            return str(exc)
        return ""
