"""What `metal_kernel(...)` and `cuda_kernel(...)` take, checked as MLX
checks it at construction: KernelDefinition, and the KernelSpec the
simulator builds from it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mlxsci.kernel import dialects
from mlxsci.kernel.spec import KernelSpec

MATH_MODES = ("safe", "relaxed", "fast")


def construct_tag(dialect: str) -> str:
    """How MLX's constructor errors begin for `dialect`."""
    return dialects.get(dialect).construct_tag


@dataclass(frozen=True)
class KernelDefinition:
    """One kernel as its constructor took it (MLX 0.32's arguments)."""

    dialect: str  # "metal" or "cuda"
    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    source: str
    header: str = ""
    ensure_row_contiguous: bool = True
    atomic_outputs: bool = False  # Metal only
    math_mode: str = "safe"  # Metal's compile_options["math_mode"]
    shared_memory: int = 0  # CUDA only: dynamic shared memory bytes

    def spec(self) -> KernelSpec:
        """The simulator's KernelSpec. Diagnostics count lines in one text,
        the header followed by the source (body_line: the source's first)."""
        header_lines = self.header.count("\n") + (
            1 if self.header and not self.header.endswith("\n") else 0
        )
        return KernelSpec(
            name=self.name,
            input_names=self.input_names,
            output_names=self.output_names,
            source=self.source,
            header=self.header,
            atomic_outputs=self.atomic_outputs,
            dialect=self.dialect,
            source_file=f"<kernel {self.name}>",
            header_line=1,
            body_line=header_lines + 1,
            shared_memory=self.shared_memory,
            math_mode=self.math_mode,
            ensure_row_contiguous=self.ensure_row_contiguous,
        )

    def where(self, line: int | None) -> str:
        """'source line 3' or 'header line 2' for a line of spec()'s text."""
        if line is None:
            return ""
        first = self.spec().body_line
        if line >= first:
            return f"source line {line - first + 1}"
        return f"header line {line}"


def _names(what: str, dialect: str, value) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            f"{construct_tag(dialect)} `{what}` must be a sequence of str, "
            f"got {type(value).__name__}"
        )
    names = tuple(value)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(
                f"{construct_tag(dialect)} `{what}` must hold str, got {type(n).__name__}"
            )
        if not n.isidentifier() or not n.isascii():
            # MLX pastes the name into C++ as a parameter: anything else does
            # not compile there; here it is said at once.
            raise ValueError(
                f"{construct_tag(dialect)} {what[:-1].replace('_', ' ')} {n!r} is not a C++ identifier"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"{construct_tag(dialect)} `{what}` names a parameter twice")
    return names


def _text(what: str, dialect: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(
            f"{construct_tag(dialect)} `{what}` must be a str, got {type(value).__name__}"
        )
    return value


def _flag(what: str, dialect: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{construct_tag(dialect)} `{what}` must be a bool, got {type(value).__name__}"
        )
    return value


def math_mode_of(compile_options) -> str:
    """MLX's parse of compile_options: None, or a dict whose one key is
    "math_mode" with a value of MATH_MODES."""
    if compile_options is None:
        return "safe"
    if not isinstance(compile_options, dict):
        raise ValueError("[metal_kernel] Expected `compile_options` to be a dict.")
    mode = "safe"
    for key, value in compile_options.items():
        if key != "math_mode":
            raise ValueError(f"[metal_kernel] Unknown compile option `{key}`.")
        if value not in MATH_MODES or not isinstance(value, str):
            raise ValueError(
                "[metal_kernel] Expected math_mode to be 'safe', 'relaxed', or 'fast'."
            )
        mode = value
    return mode


def define(
    dialect: str,
    name,
    input_names,
    output_names,
    source,
    header="",
    ensure_row_contiguous=True,
    atomic_outputs=False,
    compile_options=None,
    shared_memory=0,
) -> KernelDefinition:
    """The checked KernelDefinition (TypeError/ValueError as MLX raises them)."""
    name = _text("name", dialect, name)
    if not re.fullmatch(r"[A-Za-z0-9_]*", name):
        # MLX pastes it after "custom_kernel_": anything else is no identifier there
        raise ValueError(
            f"{construct_tag(dialect)} name {name!r} has characters other than letters, "
            "digits and _ (MLX pastes it into the kernel's C++ name)"
        )
    ins = _names("input_names", dialect, input_names)
    outs = _names("output_names", dialect, output_names)
    if not outs:
        raise ValueError(f"{construct_tag(dialect)} Must specify at least one output.")
    clash = set(ins) & set(outs)
    if clash:
        raise ValueError(
            f"{construct_tag(dialect)} {sorted(clash)[0]!r} is both an input and an output name"
        )
    if isinstance(shared_memory, bool) or not isinstance(shared_memory, int):
        raise TypeError(
            f"{construct_tag(dialect)} `shared_memory` must be an int, "
            f"got {type(shared_memory).__name__}"
        )
    if shared_memory < 0:
        raise ValueError(f"{construct_tag(dialect)} `shared_memory` must not be negative")
    return KernelDefinition(
        dialect=dialect,
        name=name,
        input_names=ins,
        output_names=outs,
        source=_text("source", dialect, source),
        header=_text("header", dialect, header),
        ensure_row_contiguous=_flag("ensure_row_contiguous", dialect, ensure_row_contiguous),
        atomic_outputs=_flag("atomic_outputs", dialect, atomic_outputs),
        math_mode=math_mode_of(compile_options),
        shared_memory=shared_memory,
    )
