"""The one interface every backend implements (metal, cuda, sim).

A backend turns a `KernelSpec` (what `mx.fast.metal_kernel` / `cuda_kernel`
take at construction) into a callable with MLX's call signature. Host
pipelines in tasks/ only ever talk to this interface, so the same pipeline
runs on an Apple GPU, an NVIDIA GPU and the CPU simulator.
"""

from __future__ import annotations

from mlxsci.kernel.spec import BackendError, KernelSpec


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
