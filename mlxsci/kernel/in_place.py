"""In-place buffers: an output that starts as a copy of an input.

MLX kernels read const inputs and write fresh outputs, while some Metal-Sci
kernels read and write one buffer (saxpy's `y`, ising's `spins`, hmc's
`accept_cnt`). A kernel block's `//! inplace OUT = IN` line (allowed where the
task's contract lists the pair) gives such a kernel what Metal gave it: the
body sees OUT as a writable buffer that already holds IN's values, so every
form of access (subscripts, pointer walks, a row pointer kept and reused,
atomics) works unchanged, and elements the dispatch leaves alone keep IN's
values.

How, on every backend alike (MLX has no in-place custom kernels):
1. a copy dispatch, the kernel `mlxsci_inplace_copy`, copies IN into a fresh
   array;
2. the candidate's kernel gets that array as a hidden input,
   `mlxsci_inplace_OUT`, and its body starts with a line that binds OUT to
   it, writable: MLX declares inputs const, and the buffer is the kernel's
   own, made for it in step 1;
3. the array is the kernel's result OUT, made to depend on the kernel's
   outputs (mx.depends), so nothing reads it before the kernel ran. A kernel
   whose every output is bound this way gets one more output of one element,
   `mlxsci_inplace_done`, since MLX wants at least one.
The copy is no part of the candidate: the cupti and sim timers leave
`mlxsci_inplace_copy` out of a run's time (`is_copy`) and list it apart per
kernel; the wall timer cannot, and says so (mlxsci.timing.timers.IN_PLACE_COPIES).
The task's input IN itself is never written.
"""

from __future__ import annotations

from dataclasses import replace

from mlxsci.kernel import dialects
from mlxsci.kernel.spec import KernelSpec

COPY_KERNEL = "mlxsci_inplace_copy"
DONE_OUTPUT = "mlxsci_inplace_done"
_PREFIX = "mlxsci_inplace_"

COPY_GROUP = 256  # threads per group of the copy dispatch


def hidden_input(output: str) -> str:
    """The hidden input that holds OUT's copy."""
    return _PREFIX + output


def type_param(output: str) -> str:
    """The template parameter that carries OUT's element type."""
    return _PREFIX + output + "_t"


def binding_line(dialect: str, pairs) -> str:
    """The line before the body that binds each bound output's name to its
    hidden input, writable."""
    form = dialects.get(dialect).writable_binding
    parts = [
        form.format(type=type_param(out), name=out, source=hidden_input(out)) for out, _ in pairs
    ]
    return " ".join(parts) + "\n"


def bind(spec: KernelSpec, pairs) -> KernelSpec:
    """`spec` with its bound outputs turned into hidden inputs and the body
    starting with their binding. The binding takes the line before the body
    (the `//! inplace` directive's), so the body's lines keep their numbers."""
    if not pairs:
        return spec
    bound = {out for out, _ in pairs}
    outputs = tuple(n for n in spec.output_names if n not in bound) or (DONE_OUTPUT,)
    return replace(
        spec,
        input_names=spec.input_names + tuple(hidden_input(out) for out, _ in pairs),
        output_names=outputs,
        source=binding_line(spec.dialect, pairs) + spec.source,
        body_line=max(1, spec.body_line - 1),
    )


def copy_spec(dialect: str) -> KernelSpec:
    """The copy dispatch of step 1, in `dialect`."""
    return KernelSpec(
        name=COPY_KERNEL,
        input_names=("src",),
        output_names=("dst",),
        source=dialects.get(dialect).copy_body,
        dialect=dialect,
        source_file="<mlxsci in-place copy>",
    )


def is_copy(kernel_label: str) -> bool:
    """Whether a kernel name a timer recorded is the in-place copy."""
    return kernel_label.startswith(COPY_KERNEL)
