"""What a kernel is and how running one can fail: `KernelSpec` (what
`mx.fast.metal_kernel` / `cuda_kernel` take at construction), `CompileError`
and `KernelFault`. The kernel format (mlxsci.kernel.candidate) makes specs
and the source policy raises CompileError; every backend (mlxsci.backends)
takes specs and raises these errors."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of a candidate, as MLX's kernel constructors take it.

    `name` is the Metal-Sci kernel name (MLX prefixes `custom_kernel_`).
    `source_file`, `header_line` and `body_line` say where the header and the
    body start in the candidate file, so compile errors and diagnostics can
    point at the line a user or an LLM wrote.
    """

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    source: str
    header: str = ""
    atomic_outputs: bool = False
    dialect: str = "metal"  # "metal" or "cuda"
    source_file: str = "<candidate>"
    header_line: int = 1
    body_line: int = 1
    # CUDA's dynamic shared memory in bytes (cuda_kernel's `shared_memory`):
    # what an `extern __shared__` array gets.
    shared_memory: int = 0
    # Metal's compile_options["math_mode"]: "safe", "relaxed" or "fast"; the
    # kernel sees __FAST_MATH__ defined only with "fast".
    math_mode: str = "safe"
    # MLX's ensure_row_contiguous: False hands strided inputs as stored.
    ensure_row_contiguous: bool = True


class BackendError(Exception):
    """Base of the structured failures a kernel call can raise."""


@dataclass
class CompileError(BackendError):
    """The kernel text did not compile. `line` is a line of the candidate file
    (None when it could not be mapped); `log` is the compiler's own output."""

    message: str
    line: int | None = None
    log: str = ""

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.message}"


@dataclass
class KernelFault(BackendError):
    """The kernel compiled but its execution went wrong.

    kind: "out_of_bounds", "input_write", "barrier_divergence", "deadlock",
    "timeout", "crash", "gpu_fault", "launch" (bad grid/threadgroup) or
    "uninitialized_read" (the simulator's opt-in threadgroup- and output-read checks).
    """

    kind: str
    message: str
    details: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"
