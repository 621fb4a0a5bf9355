"""What a faulty kernel raises under `mlxsci.fast`.

On a GPU a kernel that reads out of bounds, reads memory nobody wrote or
races returns garbage, or at best a command-buffer error that names nothing.
Here each fault is an exception whose message names the kernel, the buffer
or array, the element and the thread, and whose attributes carry the same
facts for a test to assert on.

Every class derives from KernelError, a RuntimeError (what MLX raises for a
kernel that fails at run time), except LaunchError, which is also a
ValueError (what MLX raises for a threadgroup over the pipeline's limit), and
CompileError, a RuntimeError as MLX's own compile failures are.
"""

from __future__ import annotations

from mlxsci.kernel.spec import KernelFault

__all__ = [
    "KernelError",
    "CompileError",
    "LaunchError",
    "OutOfBoundsError",
    "UninitializedReadError",
    "UnwrittenOutputError",
    "InputWriteError",
    "OrderDependenceWarning",
    "RaceError",
    "BarrierError",
    "KernelTimeoutError",
    "KernelCrashError",
    "TransformError",
    "from_fault",
]


class KernelError(RuntimeError):
    """A kernel run by mlxsci.fast failed. `kernel` is the name given to
    metal_kernel/cuda_kernel; `kind` what went wrong; `details` the facts
    (buffer or array, element, thread, group) where they are known."""

    kind = "fault"

    def __init__(self, kernel: str, message: str, details: dict | None = None):
        self.kernel = kernel
        self.details = dict(details or {})
        super().__init__(f"[mlxsci.fast] kernel '{kernel}': {message}")

    # The facts most tests ask for, None where the fault does not have them.
    @property
    def buffer(self) -> str | None:
        return self.details.get("buffer") or self.details.get("array")

    @property
    def element(self) -> int | None:
        return self.details.get("element")

    @property
    def thread(self) -> tuple | None:
        t = self.details.get("thread")
        return tuple(t) if t is not None else None

    @property
    def group(self) -> tuple | None:
        g = self.details.get("group")
        return tuple(g) if g is not None else None


class CompileError(KernelError):
    """The kernel's text does not compile (the compiler's message, mapped
    to the line of your source or header)."""

    kind = "compile"


class LaunchError(KernelError, ValueError):
    """The launch is over the GPU's limits (threads per threadgroup, grid
    dimensions, threadgroup memory), or its shape is not a launch at all."""

    kind = "launch"


class OutOfBoundsError(KernelError):
    """A read or write outside an input, an output or a threadgroup array."""

    kind = "out_of_bounds"


class UninitializedReadError(KernelError):
    """Threadgroup (shared) memory read before any thread of the group wrote
    it: on a GPU, whatever the last group left there."""

    kind = "uninitialized_read"


class InputWriteError(KernelError):
    """A write to an input: on a GPU it changes the caller's array (MLX
    binds inputs in place and does not support in-place updates). Here the
    caller's array is left as it was."""

    kind = "input_write"


class UnwrittenOutputError(KernelError):
    """Output elements no thread wrote, with no init_value: on a GPU they
    hold whatever the allocator's recycled buffer held."""

    kind = "unwritten_output"


class RaceError(KernelError):
    """The outputs depend on the order the GPU runs threads in: run in
    another order, the same launch gives other values."""

    kind = "race"


class BarrierError(KernelError):
    """Threads of one group wait at different barriers, or none can run."""

    kind = "barrier"


class KernelTimeoutError(KernelError):
    """The launch did not finish in time (an endless loop, or a wait for a
    thread that never comes)."""

    kind = "timeout"


class KernelCrashError(KernelError):
    """The kernel crashed in a way the other classes do not name (a wild
    pointer, a misaligned vector access, a stack overflow)."""

    kind = "crash"


class OrderDependenceWarning(UserWarning):
    """The outputs of a kernel that uses atomics depend on the order threads
    run in. That may be intended (float atomic sums round differently,
    atomic compaction orders its output differently), so it is a warning;
    `warnings.simplefilter("error", OrderDependenceWarning)` makes it an
    error."""


class TransformError(KernelError, ValueError):
    """The kernel was used under a transformation it does not support
    (mx.compile tracing, mx.vmap, mx.grad/vjp/jvp without a custom VJP)."""

    kind = "transform"


_BY_FAULT_KIND = {
    "out_of_bounds": OutOfBoundsError,
    "input_write": InputWriteError,
    "uninitialized_read": UninitializedReadError,
    "barrier_divergence": BarrierError,
    "deadlock": BarrierError,
    "race": RaceError,  # the race detector (runtime/sim_race.inc)
    "timeout": KernelTimeoutError,
    "launch": LaunchError,
    "misaligned": KernelCrashError,
    "crash": KernelCrashError,
    "gpu_fault": KernelCrashError,
}


def from_fault(kernel: str, fault: KernelFault) -> KernelError:
    """The exception for a fault the simulator reported for `kernel`."""
    cls = _BY_FAULT_KIND.get(fault.kind, KernelCrashError)
    details = dict(fault.details, fault=fault.kind)
    message = fault.message
    if cls is UninitializedReadError and fault.details.get("role") != "output":
        # threadgroup memory: written by the group's other threads, if at all
        message += " (a missing barrier between the writes and this read?)"
    return cls(kernel, message, details)
