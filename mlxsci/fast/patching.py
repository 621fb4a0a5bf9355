"""`simulate()`: while it is active, `mx.fast.metal_kernel` and
`mx.fast.cuda_kernel` are mlxsci.fast's, so code that calls them (a
project's own modules, unchanged) runs its kernels on the simulator.

It replaces the attributes of the `mlx.core.fast` module. Code that looks
them up when it makes a kernel (`mx.fast.metal_kernel(...)`) gets the
simulator's; a name bound before (`from mlx.core.fast import metal_kernel`
at import time, or a kernel object made before simulate() began) keeps
MLX's. mx.compile is disabled for the duration (mx.disable_compile), since
a simulated kernel needs its inputs' values and a compile trace has none;
it is enabled again on exit unless it was disabled before.
"""

from __future__ import annotations

import contextlib
import functools
import os

import mlx.core as mx

from mlxsci.fast import kernels

_depth = 0
_options: list[dict] = []  # each active simulate()'s kernel options, innermost last
_compile_was_disabled = False  # mx.compile's state when the outermost began


def compile_enabled() -> bool:
    """Whether mx.compile compiles now. MLX has no getter (the switch is
    $MLX_DISABLE_COMPILE or mx.disable_compile()), so ask it: a compiled
    function runs its Python body once while tracing when compile is on,
    at every call when it is off."""
    if os.environ.get("MLX_DISABLE_COMPILE", "") not in ("", "0"):
        return False
    calls = []

    def probe(x):
        calls.append(1)
        return x + 1

    compiled = mx.compile(probe)
    x = mx.zeros((1,))
    mx.eval(compiled(x), compiled(x))
    return len(calls) == 1


def simulating() -> bool:
    """Whether simulate() (or the pytest plugin) is active."""
    return _depth > 0


def can_run(dialect: str = "metal") -> bool:
    """Whether a kernel of `dialect` ("metal" or "cuda") made through
    mx.fast runs here: MLX has its GPU backend, or simulate() (or the
    pytest plugin) routes it to the simulator. The gate for tests that
    today say `mx.metal.is_available()`."""
    if dialect not in ("metal", "cuda"):
        raise ValueError(f"[mlxsci.fast] dialect {dialect!r}: use 'metal' or 'cuda'")
    return simulating() or kernels.mlx_has(dialect)


def _replacement(make, mlx_make):
    options = _options[-1]

    @functools.wraps(mlx_make)
    def construct(*args, **kwargs):
        return make(*args, **kwargs, **options)

    return construct


def start(backend: str | None = None, checks: bool | None = None) -> None:
    """Begin simulating (what simulate() does on entry; the pytest plugin
    calls it for the whole session)."""
    global _depth, _compile_was_disabled
    kernels.chosen_backend(backend)  # a bad name fails here, not at the first kernel
    _options.append({"backend": backend, "checks": checks})
    if _depth == 0:
        _compile_was_disabled = not compile_enabled()
    _depth += 1
    mx.fast.metal_kernel = _replacement(kernels.metal_kernel, kernels.MLX_CONSTRUCTORS["metal"])
    mx.fast.cuda_kernel = _replacement(kernels.cuda_kernel, kernels.MLX_CONSTRUCTORS["cuda"])
    mx.disable_compile()


def stop() -> None:
    """End the innermost simulate(); the outermost puts MLX's own back."""
    global _depth
    if _depth == 0:
        return
    _options.pop()
    _depth -= 1
    if _depth:
        mx.fast.metal_kernel = _replacement(kernels.metal_kernel, kernels.MLX_CONSTRUCTORS["metal"])
        mx.fast.cuda_kernel = _replacement(kernels.cuda_kernel, kernels.MLX_CONSTRUCTORS["cuda"])
        return
    mx.fast.metal_kernel = kernels.MLX_CONSTRUCTORS["metal"]
    mx.fast.cuda_kernel = kernels.MLX_CONSTRUCTORS["cuda"]
    if not _compile_was_disabled:
        mx.enable_compile()


@contextlib.contextmanager
def simulate(backend: str | None = None, checks: bool | None = None):
    """Route mx.fast.metal_kernel / cuda_kernel to mlxsci.fast for the block.
    backend: "sim" (default: $MLXSCI_FAST_BACKEND, else the simulator),
    "auto" (MLX's own kernel where this machine has the GPU backend) or
    "mlx"; checks: as for mlxsci.fast kernels."""
    start(backend, checks)
    try:
        yield
    finally:
        stop()
