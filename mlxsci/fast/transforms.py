"""A simulated kernel under MLX's transformations: it works, or it says why
not; never a silent wrong value.

The simulator runs a kernel when it is called, on its inputs' values, and
returns new arrays. Left at that, mx.grad would see outputs that do not
depend on the inputs and return zeros. So every call goes through an
mx.custom_function whose VJP, JVP and vmap raise TransformError (MLX's own
custom kernels have none of them either), and a trace that has no values
(mx.compile, mx.vmap) gets a TransformError that says what to do. A kernel
wrapped in the user's own mx.custom_function with a kernel-based VJP (MLX's
documented pattern) works: the outer function's VJP is the one MLX calls.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from mlxsci.fast.errors import TransformError

# MLX's message when an array without a value is read during a trace.
_TRACE_MESSAGE = "during function transformations"

TRACED = (
    "cannot run while mx.compile or mx.vmap traces it: the simulator runs a kernel "
    "when it is called, on its inputs' values, and a trace has none. Under mx.compile, "
    "call mx.disable_compile() in your tests (mlxsci.fast.simulate() and the pytest "
    "plugin do it for you) or call the kernel outside the compiled function. Under "
    "mx.vmap: MLX's custom kernels have no vmap rule on a GPU either; loop over the "
    "batch or give the kernel the batch dimension."
)


def _no(what: str, kernel: str) -> TransformError:
    return TransformError(
        kernel,
        f"has no {what}: MLX's custom kernels define none (on a GPU, MLX raises too). "
        "Wrap the call in an mx.custom_function and give it a .vjp (and .jvp) computed "
        "with kernels or MLX ops, as MLX's custom-kernel guide shows.",
    )


def with_transforms(kernel: str, run: Callable[[tuple], list], inputs: tuple) -> list:
    """run(inputs) through an mx.custom_function that refuses the
    transformations it cannot honour (see the module's docstring)."""

    @mx.custom_function
    def forward(*arrays):
        try:
            return run(arrays)
        except ValueError as exc:
            if _TRACE_MESSAGE in str(exc) and not isinstance(exc, TransformError):
                raise TransformError(kernel, TRACED) from None
            raise

    @forward.vjp
    def _vjp(primals, cotangents, outputs):
        raise _no("VJP (mx.grad, mx.vjp, mx.value_and_grad)", kernel)

    @forward.jvp
    def _jvp(primals, tangents):
        raise _no("JVP (mx.jvp)", kernel)

    @forward.vmap
    def _vmap(arrays, axes):
        raise TransformError(kernel, TRACED)

    return list(forward(*inputs))  # type: ignore[call-overload]
