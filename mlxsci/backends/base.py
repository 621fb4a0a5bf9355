"""The one interface every backend implements (metal, cuda, sim).

A backend turns a `KernelSpec` (what `mx.fast.metal_kernel` / `cuda_kernel`
take at construction) into a callable with MLX's call signature. Host
pipelines in tasks/ only ever talk to this interface, so the same pipeline
runs on an Apple GPU, an NVIDIA GPU and the CPU simulator.
"""

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
    "timeout", "crash", "gpu_fault" or "launch" (bad grid/threadgroup).
    """

    kind: str
    message: str
    details: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class Kernel:
    """A built kernel. Call it exactly like an MLX custom kernel object."""

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
    ):
        """Returns a list of mx.array outputs (lazy on GPU backends)."""
        raise NotImplementedError


class Backend:
    """A place kernels run. Subclasses set `name` and `dialect`; `eager` says
    whether a kernel call runs the kernel at once (the simulator) rather than
    queueing lazy work that runs at mx.eval (MLX on a GPU)."""

    name: str = ""
    dialect: str = "metal"
    eager: bool = False

    @classmethod
    def available(cls) -> bool:
        raise NotImplementedError

    def device_info(self) -> dict:
        """At least {"name": str, "fingerprint": str}; the fingerprint keys the
        roofline cache, so it must change when the hardware or runtime does."""
        raise NotImplementedError

    def kernel(self, spec: KernelSpec) -> Kernel:
        raise NotImplementedError

    def to_device(self, array):
        """A numpy array -> an mx.array ready for timed use on this backend."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all queued work (a no-op where calls are eager)."""

    def classify_error(self, exc: BaseException) -> BackendError | None:
        """Map an exception raised while evaluating kernel outputs to a
        CompileError or KernelFault, or None when it is not the kernel's fault."""
        if isinstance(exc, BackendError):
            return exc
        return None
