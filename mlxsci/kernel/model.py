"""The candidate's data model: `Candidate`, `Param`, `KernelBlock`, `CandidateError`.

What a parsed candidate is: its params, header and kernels (body, launch
expressions, the lines they came from), and the error a bad text raises.
mlxsci/kernel/candidate.py parses the `//!` format into these and renders them back;
the model sits apart from that grammar because every later step (validation,
launches, KernelSpecs, the search's proposers) works on these objects and
never on the text. mlxsci.kernel.candidate re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlxsci.kernel import dialects

__all__ = ["Param", "KernelBlock", "Candidate", "CandidateError", "DIALECTS"]

DIALECTS = dialects.NAMES


class CandidateError(ValueError):
    """The candidate text cannot be parsed. `line` is a 1-based line (or None)."""

    def __init__(self, message: str, line: int | None = None, filename: str = "<candidate>"):
        self.message = message
        self.line = line
        self.filename = filename
        where = f"{filename}:{line}" if line is not None else filename
        super().__init__(f"{where}: {message}")


def ensure_newline(text: str) -> str:
    """`text` ending with a newline (an empty text stays empty)."""
    return text if not text or text.endswith("\n") else text + "\n"


@dataclass
class Param:
    name: str
    default: int
    choices: tuple[int, ...] | None = None
    line: int = field(default=0, compare=False)

    def __post_init__(self):
        if self.choices is not None:
            self.choices = tuple(self.choices)


@dataclass
class KernelBlock:
    name: str
    body: str
    grid: str | None = None
    threadgroup: str | None = None
    line: int = field(default=0, compare=False)  # the `//! kernel` line
    body_line: int = field(default=0, compare=False)  # first line of the body text
    grid_line: int | None = field(default=None, compare=False)
    threadgroup_line: int | None = field(default=None, compare=False)
    # `//! inplace OUT = IN` lines: (output, input) pairs whose output starts
    # as a copy of the input, so that the body reads and writes one buffer as
    # a Metal-Sci kernel does (mlxsci/kernel/in_place.py); the task's
    # contract lists the pairs it allows.
    in_place: tuple[tuple[str, str], ...] = ()
    in_place_line: int | None = field(default=None, compare=False)

    def __post_init__(self):
        self.body = ensure_newline(self.body)
        self.in_place = tuple((str(o), str(i)) for o, i in self.in_place)


@dataclass
class Candidate:
    dialect: str
    params: list[Param] = field(default_factory=list)
    header: str = ""
    header_line: int = field(default=0, compare=False)  # 0 when there is no header
    kernels: list[KernelBlock] = field(default_factory=list)
    source_file: str = field(default="<candidate>", compare=False)

    def __post_init__(self):
        if self.dialect not in DIALECTS:
            raise ValueError(f"dialect must be one of {DIALECTS}, got {self.dialect!r}")
        self.header = ensure_newline(self.header)

    def kernel(self, name: str) -> KernelBlock:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(
            f"candidate has no kernel {name!r} "
            f"(has: {', '.join(k.name for k in self.kernels) or 'none'})"
        )

    def param_values(self, overrides: dict[str, int] | None = None) -> dict[str, int]:
        """Param name -> value: the defaults, with `overrides` applied. An override
        must name a declared param and, when the param lists choices, be one."""
        values = {p.name: p.default for p in self.params}
        by_name = {p.name: p for p in self.params}
        for name, value in (overrides or {}).items():
            if name not in by_name:
                raise KeyError(f"no param {name!r} (declared: {', '.join(values) or 'none'})")
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"param {name!r} must be an int, got {value!r}")
            choices = by_name[name].choices
            if choices is not None and value not in choices:
                raise ValueError(f"param {name!r} = {value} is not one of {list(choices)}")
            values[name] = value
        return values
