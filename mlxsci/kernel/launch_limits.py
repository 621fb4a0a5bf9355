"""Launch limits of the two dialects, checked before any kernel runs.

A launch over a hardware limit fails on a GPU with a message that names
nothing (on an H100, MLX 0.32.4: `cuGraphAddKernelNode(...) failed: invalid
argument` for 65536 blocks in gridDim.y). Every backend checks here first,
the simulator included, so such a launch fails the same way everywhere, as
KernelFault("launch", ...) naming the kernel, the dimension, its value and
the limit.

CUDA (any NVIDIA GPU MLX supports): gridDim.x < 2^31, gridDim.y and
gridDim.z <= 65535 blocks, blockDim.x and .y <= 1024, blockDim.z <= 64,
1024 threads per block, 48 KiB of static shared memory per block (more only
with dynamic shared memory, which MLX opts in to, up to the H100's 227 KiB).
MLX launches block = min(threadgroup, grid) and ceil(grid / threadgroup)
blocks per dimension, so the limits apply to those, not to grid and
threadgroup as given.

Metal: 1024 threads per threadgroup (as given, before MLX clamps it to the
grid; a pipeline's own maximum can be lower, which only a Mac can tell, and
MLX reports that itself), 32 KiB of threadgroup memory.

Shared / threadgroup memory is known only once the kernel is compiled, so
only the simulator checks it (check_shared_memory); a GPU backend checks the
launch shape (check_launch) before it calls MLX.
"""

from __future__ import annotations

from mlxsci.kernel.spec import KernelFault

__all__ = [
    "CUDA_MAX_GRID_DIM",
    "CUDA_MAX_BLOCK_DIM",
    "CUDA_MAX_THREADS_PER_BLOCK",
    "CUDA_STATIC_SMEM_LIMIT",
    "CUDA_OPTIN_SMEM_LIMIT",
    "CUDA_OPTIN_THRESHOLD",
    "METAL_MAX_THREADS_PER_THREADGROUP",
    "METAL_MAX_TGMEM",
    "cuda_launch",
    "check_launch",
    "check_shared_memory",
]

CUDA_MAX_GRID_DIM = (2**31 - 1, 65535, 65535)  # blocks per dimension
CUDA_MAX_BLOCK_DIM = (1024, 1024, 64)  # threads per block dimension
CUDA_MAX_THREADS_PER_BLOCK = 1024
CUDA_STATIC_SMEM_LIMIT = 48 * 1024  # static __shared__ per block
CUDA_OPTIN_SMEM_LIMIT = 227 * 1024  # H100, after cuFuncSetAttribute
CUDA_OPTIN_THRESHOLD = 48000  # MLX opts in above this many dynamic bytes
METAL_MAX_THREADS_PER_THREADGROUP = 1024  # Apple GPUs; a pipeline may allow fewer
METAL_MAX_TGMEM = 32 * 1024


def _fault(kernel: str, problem: str) -> KernelFault:
    return KernelFault("launch", f"kernel {kernel}: {problem}")


def _shape(values) -> str:
    return "(" + ", ".join(str(v) for v in values) + ")"


def cuda_launch(grid, threadgroup) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(block, blocks) of MLX's CUDA launch: block = min(threadgroup, grid)
    and blocks = ceil(grid / threadgroup) per dimension."""
    block = tuple(min(t, g) for t, g in zip(threadgroup, grid))
    blocks = tuple(-(-g // t) for g, t in zip(grid, threadgroup))
    return block, blocks


def _shape_problem(grid, threadgroup) -> str | None:
    # Checked first: the limits below divide by the threadgroup.
    if len(grid) != 3 or len(threadgroup) != 3:
        return (
            f"grid {_shape(grid)} and threadgroup {_shape(threadgroup)} must have three dimensions"
        )
    for what, dims in (("grid", grid), ("threadgroup", threadgroup)):
        for axis, v in zip("xyz", dims):
            if v < 1:
                return f"{what}.{axis} = {v} is not positive"
    return None


def _cuda_problem(grid, threadgroup) -> str | None:
    block, blocks = cuda_launch(grid, threadgroup)
    given = f"min(threadgroup {_shape(threadgroup)}, grid {_shape(grid)})"
    for axis, b, limit in zip("xyz", block, CUDA_MAX_BLOCK_DIM):
        if b > limit:
            return f"blockDim.{axis} = {b} threads ({given}) exceeds CUDA's limit of {limit}"
    threads = block[0] * block[1] * block[2]
    if threads > CUDA_MAX_THREADS_PER_BLOCK:
        return (
            f"threads per block = {threads} (block {_shape(block)} = {given}) exceeds "
            f"CUDA's limit of {CUDA_MAX_THREADS_PER_BLOCK}"
        )
    for axis, n, limit in zip("xyz", blocks, CUDA_MAX_GRID_DIM):
        if n > limit:
            return (
                f"gridDim.{axis} = {n} blocks (grid {_shape(grid)} / threadgroup "
                f"{_shape(threadgroup)}, rounded up) exceeds CUDA's limit of {limit}"
            )
    return None


def _metal_problem(grid, threadgroup) -> str | None:
    # MLX checks the threadgroup as given, before clamping it to the grid.
    threads = threadgroup[0] * threadgroup[1] * threadgroup[2]
    if threads > METAL_MAX_THREADS_PER_THREADGROUP:
        return (
            f"threads per threadgroup = {threads} (threadgroup {_shape(threadgroup)}) "
            f"exceeds Metal's limit of {METAL_MAX_THREADS_PER_THREADGROUP}"
        )
    return None


_PROBLEMS = {"cuda": _cuda_problem, "metal": _metal_problem}


def check_launch(dialect: str, kernel: str, grid, threadgroup) -> None:
    """Raise KernelFault("launch", ...) when `dialect`'s GPU would refuse to
    launch `kernel` with this grid and threadgroup (MLX's arguments)."""
    if dialect not in _PROBLEMS:
        raise ValueError(f"unknown dialect {dialect!r}")
    grid = tuple(int(g) for g in grid)
    threadgroup = tuple(int(t) for t in threadgroup)
    problem = _shape_problem(grid, threadgroup) or _PROBLEMS[dialect](grid, threadgroup)
    if problem:
        raise _fault(kernel, problem)


def _cuda_memory_problem(nbytes: int, dynamic: int) -> str | None:
    if dynamic > CUDA_OPTIN_THRESHOLD:
        limit, kind = CUDA_OPTIN_SMEM_LIMIT, f"with {dynamic} dynamic bytes opted in"
    else:
        limit, kind = CUDA_STATIC_SMEM_LIMIT, "without opt-in"
    if nbytes > limit:
        return (
            f"shared memory per block = {nbytes} bytes (static and dynamic, {kind}) "
            f"exceeds CUDA's limit of {limit} bytes"
        )
    return None


def _metal_memory_problem(nbytes: int, dynamic: int) -> str | None:
    if nbytes > METAL_MAX_TGMEM:
        return (
            f"threadgroup memory = {nbytes} bytes exceeds Metal's limit of {METAL_MAX_TGMEM} bytes"
        )
    return None


_MEMORY_PROBLEMS = {"cuda": _cuda_memory_problem, "metal": _metal_memory_problem}


def check_shared_memory(dialect: str, kernel: str, nbytes: int, dynamic: int = 0) -> None:
    """Raise KernelFault("launch", ...) when `kernel` uses more shared (CUDA) or
    threadgroup (Metal) memory per block than a launch allows. `nbytes` counts
    static and dynamic bytes; `dynamic` is the dynamic part asked for at build
    time (CUDA's `shared_memory`), which decides whether MLX opted in."""
    if dialect not in _MEMORY_PROBLEMS:
        raise ValueError(f"unknown dialect {dialect!r}")
    problem = _MEMORY_PROBLEMS[dialect](nbytes, dynamic)
    if problem:
        raise _fault(kernel, problem)
