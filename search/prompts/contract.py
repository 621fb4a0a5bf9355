"""The task's contract as the system prompt states it: kernel signatures and
the contract text, in each dialect.

`contract_text(task, dialect)` lists, kernel by kernel, the default launch, the
inputs and outputs with their shapes, how the kernel body sees them and where
each input comes from, and the exact function MLX generates around a body
(`metal_signature`, `cuda_signature`: the text `mlxsci.kernel.signature` produces for
the dtypes and shapes of search/prompts/pipeline.py's dry run).

It is separate from search/prompts/compose.py because it is the part of the prompt
computed from the pipeline analysis, per dialect; the rest of the prompt is
fixed wording around it. What differs between dialects is one `_ContractWords`
entry per dialect name in `_WORDS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mlxsci.kernel import dialects
from mlxsci.kernel.signature import (
    CUDA_TYPES,
    METAL_TYPES,
    ArgInfo,
    cuda_source,
    dtype_name,
    metal_source,
)
from mlxsci.search.prompts.pipeline import pipeline_info
from mlxsci.task import KernelContract, Task

__all__ = ["contract_text", "metal_signature", "cuda_signature"]


def metal_signature(task: Task, kernel: str) -> str:
    """The signature MLX generates for `kernel` (no params, no thread attributes),
    from `[[kernel]]` through `) {`, at the first smoke size."""
    info = pipeline_info(task).kernels[kernel]
    c = info.contract
    out_dtypes = [info.out_shapes[n][1] for n in c.outputs]
    src = metal_source(
        c.name,
        list(c.inputs),
        list(c.outputs),
        "",
        "",
        info.infos,
        out_dtypes,
        atomic_outputs=c.atomic_outputs,
    )
    return src.text.split("\n}\n", 1)[0].rstrip("\n")


def cuda_signature(task: Task, kernel: str) -> str:
    """The signature mx.fast.cuda_kernel generates for `kernel` (no params),
    from `__global__` through `) {`, at the first smoke size."""
    info = pipeline_info(task).kernels[kernel]
    c = info.contract
    out_dtypes = [info.out_shapes[n][1] for n in c.outputs]
    text = cuda_source(c.name, list(c.inputs), list(c.outputs), "", "", info.infos, out_dtypes).text
    start = text.index("__global__")
    return text[start : text.index(") {", start) + 3]


# --- how a kernel body sees its buffers, per dialect ---------------------------


def _metal_input_decl(name: str, arg: ArgInfo) -> str:
    """The parameter type MLX generates for an input (its address space depends
    on the input's size, so it is read off a generated signature)."""
    t = metal_source("k", ["v"], ["o"], "", "", [arg], ["float32"]).text
    m = re.search(r"^  (.*?) v \[\[buffer", t, re.M)
    return m.group(1) if m else ""


def _cuda_input_decl(name: str, arg: ArgInfo) -> str:
    """Every CUDA input is a pointer; a scalar is its element 0."""
    return f"const {CUDA_TYPES[arg.dtype]}*" + (f" (read `{name}[0]`)" if arg.ndim == 0 else "")


def _metal_output_decl(contract: KernelContract, dtype: str) -> str:
    t = METAL_TYPES[dtype_name(dtype)]
    return f"device atomic<{t}>*" if contract.atomic_outputs else f"device {t}*"


def _cuda_output_decl(contract: KernelContract, dtype: str) -> str:
    # MLX's CUDA kernels have no atomic outputs: a body declares its atomics itself.
    return f"{CUDA_TYPES[dtype_name(dtype)]}*"


@dataclass(frozen=True)
class _ContractWords:
    """What the contract text says differently in one dialect."""

    input_decl: Callable  # (input name, ArgInfo) -> how a body sees the input
    output_decl: Callable  # (KernelContract, dtype) -> how a body sees an output
    signature_intro: str  # the sentence before the generated function
    signature: Callable  # (task, kernel) -> the function MLX generates around a body


_WORDS = {
    "metal": _ContractWords(
        _metal_input_decl,
        _metal_output_decl,
        "The function MLX generates around your body (shown with no `//! param` "
        "and no thread attribute in use):",
        metal_signature,
    ),
    "cuda": _ContractWords(
        _cuda_input_decl,
        _cuda_output_decl,
        "The function mx.fast.cuda_kernel generates around your body:",
        cuda_signature,
    ),
}


def contract_text(task: Task, dialect: str = "metal") -> str:
    """The task's contract, kernel by kernel, as the prompt states it."""
    fence = dialects.get(dialect).fence  # ValueError naming the dialects for any other name
    words = _WORDS[dialect]
    pipe = pipeline_info(task)
    sizes = ", ".join(sorted(task.launch_names(task.defaults)))
    lines = [
        f"Task `{task.name}`: {len(task.kernels)} kernel(s). The host runs one period of "
        f"launches, in this order: "
        + " -> ".join(f"`{k}`" for k in pipe.order)
        + f"; the period repeats {pipe.repeat}.",
        f"Integer size parameters usable in launch expressions: {sizes}.",
        "",
    ]
    for name in task.kernel_names:
        info = pipe.kernels.get(name)
        if info is None:
            lines.append(f"### Kernel `{name}` (not launched at the test size)")
            continue
        c = info.contract
        lines.append(f"### Kernel `{name}` (launched {info.launches_per_run})")
        lines.append(f"Default launch: grid = {c.grid}, threadgroup = {c.threadgroup}")
        lines.append("Inputs (read-only):")
        for n, arg in zip(c.inputs, info.infos):
            kind = (
                f"{arg.dtype} scalar"
                if arg.ndim == 0
                else f"{arg.dtype} array, shape {info.shapes[n]}"
            )
            decl = words.input_decl(n, arg)
            lines.append(f"  - `{n}`: {kind}; seen as `{decl}`; {info.feeds.get(n, '')}")
        if c.atomic_outputs or c.init_value is not None:
            start = (
                f"start filled with {c.init_value:g} (init_value)"
                if c.init_value is not None
                else "are fresh buffers"
            )
            lines.append(
                f"Outputs ({'atomic, ' if c.atomic_outputs else ''}{start}; "
                "this kernel must leave them holding the task's result):"
            )
        else:
            lines.append(
                "Outputs (fresh buffers at every launch, filled with poison values "
                "before verification runs: write every element):"
            )
        for n in c.outputs:
            shp, dt = info.out_shapes[n]
            decl = words.output_decl(c, dt)
            lines.append(f"  - `{n}`: {dt} array, shape {info.shapes[n]}; seen as `{decl}`")
        lines.append(words.signature_intro)
        lines += [
            f"```{fence}",
            words.signature(task, name),
            "    // ... your body ...",
            "}",
            "```",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"
