"""MLX's custom-kernel API on any machine.

    import mlx.core as mx
    from mlxsci import fast

    k = fast.metal_kernel(name="double", input_names=["x"], output_names=["y"],
                          source="uint i = thread_position_in_grid.x; y[i] = 2 * x[i];")
    (y,) = k(inputs=[mx.arange(8, dtype=mx.float32)], grid=(8, 1, 1), threadgroup=(8, 1, 1),
             output_shapes=[(8,)], output_dtypes=[mx.float32])

`metal_kernel` and `cuda_kernel` take MLX 0.32's arguments and are called
as MLX's kernels are; they run on mlxsci's simulator (any Linux or macOS
machine with the compiler mlxsci installs), where an out-of-bounds access,
a read of threadgroup memory nobody wrote, a race, an unwritten output or a
launch over the GPU's limits raises an exception naming the kernel, the
buffer, the element and the thread (mlxsci.fast.errors). `simulate()` and
the pytest plugin (`pytest -p mlxsci.fast.pytest_plugin`) route
`mx.fast.metal_kernel` / `mx.fast.cuda_kernel` here, so a project's tests
run its kernels unchanged. Guide: docs/mlx-kernels-anywhere.md.
"""

from __future__ import annotations

from mlxsci.fast.errors import (
    BarrierError,
    CompileError,
    InputWriteError,
    KernelCrashError,
    KernelError,
    KernelTimeoutError,
    LaunchError,
    OrderDependenceWarning,
    OutOfBoundsError,
    RaceError,
    TransformError,
    UninitializedReadError,
    UnwrittenOutputError,
)
from mlxsci.fast.kernels import FastKernel, cuda_kernel, metal_kernel
from mlxsci.fast.patching import can_run, simulate, simulating

__all__ = [
    "metal_kernel",
    "cuda_kernel",
    "FastKernel",
    "simulate",
    "simulating",
    "can_run",
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
]
