"""Candidate file format v1: parse, render, load, to an MLX KernelSpec.

The data model (`Candidate`, `Param`, `KernelBlock`, `CandidateError`:
mlxsci/kernel/model.py), extraction from LLM answers
(mlxsci/kernel/extract.py) and validation against a task
(mlxsci/kernel/validate.py) live in modules of their own; their names in
`__all__` are importable from here as well.

A candidate is one plain-text file in one dialect (metal or cuda) holding
every kernel of a task. Directive lines start with `//!` (leading whitespace
allowed); every such line is a directive, and an unknown one is an error
(use `//` for ordinary comments):

    //! param VEC = 4 {1, 2, 4}
    //! header
    inline float twice(float v) { return 2.0f * v; }
    //! kernel saxpy
    //! grid = (ceil_div(N, VEC), 1, 1)
    //! threadgroup = (256, 1, 1)
    uint base = thread_position_in_grid.x * VEC;
    ...

Rules (docs/architecture.md "The candidate format" summarises them):
- Before the first `//! header` / `//! kernel` (the preamble) only `//! param`
  lines, blank lines and comments (`//`, `/* ... */`) may appear; the
  comments are dropped. Any other text is an error ("code before ...").
- `//! param NAME = INT {c1, c2, ...}` only in the preamble. NAME is an
  identifier, not a Python keyword nor min/max/ceil_div; choices are
  optional, distinct, and contain the default.
- `//! header` at most once, before the first kernel; its text is every line
  up to the first `//! kernel` (kept verbatim; an empty header is dropped).
- `//! kernel NAME` starts a kernel; names are identifiers and unique.
- `//! grid = EXPR` / `//! threadgroup = EXPR`, each at most once, belong to
  the current kernel and must come after its `//! kernel` line before any
  non-blank body line. Blank lines between the kernel line and a launch
  directive are dropped; the body starts on the line after the last launch
  directive (or after the kernel line when there is none). Expressions are
  checked for grammar here; their names are checked by `validate`.
- A body is every line up to the next `//! kernel` or end of file, verbatim.
  Header and body texts always end with a newline (one is added to a last
  body that lacks it), so `render` needs no separators.
- Canonical text is what `render` writes: `//! param NAME = D {a, b}` lines,
  `//! header` + header, then per kernel `//! kernel NAME`, `//! grid = E`,
  `//! threadgroup = E`, body. `render(parse(t)) == t` for canonical t.
- Line numbers are 1-based lines of the parsed text and take no part in `==`.
"""

from __future__ import annotations

import keyword
import os
import re
from pathlib import Path

from mlxsci.kernel import dialects, in_place, launch_expr
from mlxsci.kernel.extract import extract_from_response
from mlxsci.kernel.model import (
    DIALECTS,
    Candidate,
    CandidateError,
    KernelBlock,
    Param,
    ensure_newline,
)
from mlxsci.kernel.spec import KernelSpec
from mlxsci.kernel.validate import LAUNCH_KEYS, CandidateFailure, validate

__all__ = [
    "Param",
    "KernelBlock",
    "Candidate",
    "CandidateError",
    "CandidateFailure",
    "parse",
    "load",
    "read_candidate_file",
    "render",
    "extract_from_response",
    "validate",
    "to_kernel_spec",
    "template_args",
    "DIALECTS",
]

_RESERVED = set(launch_expr.FUNCTIONS)
# The largest candidate taken, in UTF-8 bytes: kernel sources are kilobytes;
# every checker before a compiler runs in time linear in the text (issue 23),
# but a text past this is no kernel, and the simulator's build request of
# one kernel (header + body, as JSON: mlxsci.backends.sim.variants) must
# stay under its own 4 MiB bound.
MAX_CANDIDATE_BYTES = 2 << 20
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT = r"[+-]?\d+"
_PARAM = re.compile(r"(?P<name>\S+?)\s*=\s*(?P<default>\S+?)\s*(?:\{(?P<choices>[^{}]*)\})?\s*\Z")
_DIRECTIVE = re.compile(r"[ \t]*//!(.*)\Z", re.S)
_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(.*)\Z", re.S)
_DIRECTIVE_NAMES = "param, header, kernel, grid, threadgroup or inplace"
_IN_PLACE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([A-Za-z_][A-Za-z0-9_]*)\Z")


# --- parsing ----------------------------------------------------------------


def _split_lines(text: str) -> list[str]:
    """Lines with their '\\n' kept, so that ''.join(lines) == text."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _blank_or_comment(line: str, in_block: bool) -> tuple[bool, bool]:
    """Is `line` only whitespace and comments? Returns (answer, still in /* */).
    Walks the line by index: a copy of the rest per comment was quadratic in
    a line of many comments."""
    i, n = 0, len(line)
    while True:
        if in_block:
            end = line.find("*/", i)
            if end < 0:
                return True, True
            i, in_block = end + 2, False
            continue
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            return True, False
        if line.startswith("//", i):
            return True, False
        if line.startswith("/*", i):
            i, in_block = i + 2, True
            continue
        return False, False


def _parse_int(text: str, what: str, err) -> int:
    if not re.fullmatch(_INT, text):
        raise err(f"{what} must be an integer, got {text!r}")
    return int(text)


def _parse_param(rest: str, err) -> Param:
    m = _PARAM.match(rest.strip())
    if not m:
        raise err(
            "bad param: expected `//! param NAME = INT` or `//! param NAME = INT {c1, c2, ...}`"
        )
    name = m.group("name")
    if not _IDENT.match(name) or keyword.iskeyword(name):
        raise err(f"bad param name {name!r}: must be an identifier")
    if name in _RESERVED:
        raise err(f"bad param name {name!r}: reserved for launch expressions")
    default = _parse_int(m.group("default"), f"default of param {name}", err)
    choices = None
    if m.group("choices") is not None:
        items = [s.strip() for s in m.group("choices").split(",")]
        if items and items[-1] == "" and len(items) > 1:
            items.pop()  # tolerate a trailing comma
        if not items or items == [""]:
            raise err(f"param {name}: empty choice list")
        choices = tuple(_parse_int(s, f"choice of param {name}", err) for s in items)
        if len(set(choices)) != len(choices):
            raise err(f"param {name}: duplicate choices in {list(choices)}")
        if default not in choices:
            raise err(f"param {name}: default {default} is not one of the choices {list(choices)}")
    return Param(name, default, choices)


def parse(text: str, dialect: str = "metal", filename: str = "<candidate>") -> Candidate:
    """Parse candidate text; raises CandidateError naming the line on bad input."""
    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {DIALECTS}, got {dialect!r}")
    _check_size(len(text.encode("utf-8", "surrogatepass")), filename)
    lines = _split_lines(text)
    reader = _Reader(filename)
    for idx, raw in enumerate(lines):
        reader.read_line(idx, raw.rstrip("\n").rstrip("\r"))
    return reader.candidate(lines, dialect)


class _Reader:
    """The state of one parse, line after line: the params so far, where the
    header starts and ends, the kernels so far (each a dict: name, line,
    body_start, body_end, grid, threadgroup, their lines, launch_zone)."""

    def __init__(self, filename: str):
        self.filename = filename
        self.lineno = 0  # 1-based, of the line being read
        self.params: list[Param] = []
        self.header_start: int | None = None  # 0-based index of the header's first line
        self.header_directive: int | None = None
        self.header_end: int | None = None
        self.kernels: list[dict] = []
        # by name, for the duplicate checks (a search of the list per directive
        # was quadratic in the number of params or kernels)
        self.params_by_name: dict[str, Param] = {}
        self.kernels_by_name: dict[str, dict] = {}
        self.in_comment = False

    def err(self, message: str) -> CandidateError:
        return CandidateError(message, self.lineno, self.filename)

    def close_header(self, end: int) -> None:
        if self.header_start is not None and self.header_end is None:
            self.header_end = end

    def read_line(self, idx: int, content: str) -> None:
        self.lineno = idx + 1
        m = _DIRECTIVE.match(content)
        if m is None:
            self.text_line(content)
            return
        rest = m.group(1).strip()
        km = _KEYWORD.match(rest)
        if not rest or km is None:
            raise self.err(f"bad directive {content.strip()!r} (expected {_DIRECTIVE_NAMES})")
        key, arg = km.group(1), km.group(2)
        if arg and not arg[0].isspace() and not (key in LAUNCH_KEYS and arg.startswith("=")):
            raise self.err(
                f"unknown directive `//! {rest.split()[0]}` (expected {_DIRECTIVE_NAMES})"
            )
        arg = arg.strip()
        if key == "param":
            self.param(arg)
        elif key == "header":
            self.header(idx, arg)
        elif key == "kernel":
            self.kernel(idx, arg)
        elif key in LAUNCH_KEYS:
            self.launch(idx, key, arg)
        elif key == "inplace":
            self.in_place(idx, arg)
        else:
            raise self.err(
                f"unknown directive `//! {key}` (expected {_DIRECTIVE_NAMES}; "
                "use `//` for ordinary comments)"
            )

    def text_line(self, content: str) -> None:
        """A line that is no directive: it ends a kernel's launch directives,
        and in the preamble only blank lines and comments may appear."""
        if self.kernels:
            k = self.kernels[-1]
            if k["launch_zone"] and content.strip():
                k["launch_zone"] = False
        elif self.header_start is None:
            ok, self.in_comment = _blank_or_comment(content, self.in_comment)
            if not ok:
                raise self.err(
                    "code before the first `//! header` or `//! kernel` "
                    "(put shared code under `//! header`)"
                )

    def param(self, arg: str) -> None:
        if self.header_start is not None or self.kernels:
            raise self.err("`//! param` must come before `//! header` and the first `//! kernel`")
        p = _parse_param(arg, lambda message: self.err(message))
        p.line = self.lineno
        first = self.params_by_name.get(p.name)
        if first is not None:
            raise self.err(f"duplicate param {p.name!r} (first declared on line {first.line})")
        self.params.append(p)
        self.params_by_name[p.name] = p

    def header(self, idx: int, arg: str) -> None:
        if arg:
            raise self.err(f"unexpected text after `//! header`: {arg!r}")
        if self.header_start is not None:
            raise self.err(f"duplicate `//! header` (first on line {self.header_directive})")
        if self.kernels:
            raise self.err("`//! header` must come before the first `//! kernel`")
        if self.in_comment:
            raise self.err("unterminated /* comment before `//! header`")
        self.header_directive = self.lineno
        self.header_start = idx + 1

    def kernel(self, idx: int, name: str) -> None:
        if not name:
            raise self.err("`//! kernel` needs a name")
        if not _IDENT.match(name):
            raise self.err(f"bad kernel name {name!r}: must be an identifier")
        if name in self.kernels_by_name:
            first = self.kernels_by_name[name]["line"]
            raise self.err(f"duplicate kernel {name!r} (first on line {first})")
        if self.header_start is None and not self.kernels and self.in_comment:
            raise self.err("unterminated /* comment before the first `//! kernel`")
        self.close_header(idx)
        if self.kernels:
            self.kernels[-1]["body_end"] = idx
        self.kernels_by_name[name] = dict(
            name=name,
            line=self.lineno,
            body_start=idx + 1,
            body_end=None,
            grid=None,
            threadgroup=None,
            grid_line=None,
            threadgroup_line=None,
            in_place=[],
            in_place_line=None,
            launch_zone=True,
        )
        self.kernels.append(self.kernels_by_name[name])

    def launch(self, idx: int, key: str, arg: str) -> None:
        """`//! grid = ...` or `//! threadgroup = ...` of the current kernel."""
        if not self.kernels:
            raise self.err(f"`//! {key}` outside a kernel (it must follow `//! kernel NAME`)")
        k = self.kernels[-1]
        if not arg.startswith("="):
            raise self.err(f"bad `//! {key}`: expected `//! {key} = (x, y, z)`")
        expr = arg[1:].strip()
        if k[key] is not None:
            raise self.err(
                f"duplicate `//! {key}` for kernel {k['name']!r} (first on line {k[key + '_line']})"
            )
        if not k["launch_zone"]:
            raise self.err(
                f"`//! {key}` must come directly after `//! kernel {k['name']}` "
                f"(line {k['line']}), before the body"
            )
        try:
            launch_expr.names_used(expr)
        except launch_expr.LaunchExprError as exc:
            raise self.err(f"bad `//! {key}` expression: {exc}") from None
        k[key] = expr
        k[key + "_line"] = self.lineno
        k["body_start"] = idx + 1

    def in_place(self, idx: int, arg: str) -> None:
        """`//! inplace OUT = IN` of the current kernel: its output OUT starts
        as a copy of its input IN (mlxsci/kernel/in_place.py)."""
        if not self.kernels:
            raise self.err("`//! inplace` outside a kernel (it must follow `//! kernel NAME`)")
        k = self.kernels[-1]
        m = _IN_PLACE.match(arg)
        if m is None:
            raise self.err("bad `//! inplace`: expected `//! inplace OUTPUT = INPUT`")
        if not k["launch_zone"]:
            raise self.err(
                f"`//! inplace` must come directly after `//! kernel {k['name']}` "
                f"(line {k['line']}), before the body"
            )
        out, inp = m.group(1), m.group(2)
        for o, i in k["in_place"]:
            if o == out or i == inp:
                raise self.err(f"kernel {k['name']!r}: `//! inplace` names {o} or {i} twice")
        k["in_place"].append((out, inp))
        if k["in_place_line"] is None:
            k["in_place_line"] = self.lineno
        k["body_start"] = idx + 1

    def candidate(self, lines: list[str], dialect: str) -> Candidate:
        """The Candidate the lines read make, once the last is read."""
        n = len(lines)
        if self.header_start is None and not self.kernels and self.in_comment:
            raise CandidateError("unterminated /* comment", n or 1, self.filename)
        self.close_header(n)
        if self.kernels:
            self.kernels[-1]["body_end"] = n
        start = self.header_start
        header = "".join(lines[start : self.header_end]) if start is not None else ""
        blocks = [
            KernelBlock(
                name=k["name"],
                body="".join(lines[k["body_start"] : k["body_end"]]),
                grid=k["grid"],
                threadgroup=k["threadgroup"],
                line=k["line"],
                body_line=k["body_start"] + 1,
                grid_line=k["grid_line"],
                threadgroup_line=k["threadgroup_line"],
                in_place=tuple(k["in_place"]),
                in_place_line=k["in_place_line"],
            )
            for k in self.kernels
        ]
        return Candidate(
            dialect=dialect,
            params=self.params,
            header=header,
            header_line=(start + 1) if start is not None and header else 0,
            kernels=blocks,
            source_file=self.filename,
        )


def _check_size(size: int, filename) -> None:
    if size > MAX_CANDIDATE_BYTES:
        raise CandidateError(
            f"the candidate is {size} bytes; at most {MAX_CANDIDATE_BYTES} bytes "
            f"({MAX_CANDIDATE_BYTES >> 20} MiB) are taken: a kernel source is far smaller",
            None,
            str(filename),
        )


def load(path, dialect: str | None = None) -> Candidate:
    """Parse a candidate file; the dialect defaults from the suffix (.cu -> cuda)."""
    path = Path(path)
    if dialect is None:
        dialect = (dialects.of_file(path) or dialects.DEFAULT).name
    return parse(path.read_text(), dialect=dialect, filename=str(path))


def read_candidate_file(path: str | os.PathLike) -> str:
    """The text of a candidate file (universal newlines, as Path.read_text).
    A file that cannot be a kernel source (a directory, unreadable, binary,
    not UTF-8, empty) raises ValueError naming the file and what it is."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory, not a candidate file (.metal or .cu)")
    try:
        with open(path, "rb") as f:  # no more than the limit read, however large the file
            data = f.read(MAX_CANDIDATE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_CANDIDATE_BYTES:
        raise ValueError(
            f"{path} is larger than {MAX_CANDIDATE_BYTES} bytes ({MAX_CANDIDATE_BYTES >> 20} "
            "MiB), the most a candidate may be: a kernel source is far smaller"
        )
    if b"\0" in data:  # a NUL byte: no kernel source has one
        raise ValueError(f"{path} is a binary file, not a kernel source (.metal or .cu text)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path} is not UTF-8 text (byte {data[exc.start]:#04x} at offset "
            f"{exc.start}): a candidate is a .metal or .cu text file"
        ) from None
    if not text.strip():
        raise ValueError(
            f"{path} is empty: a candidate holds at least one '//! kernel NAME' section"
        )
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --- rendering --------------------------------------------------------------


def _check_no_directives(text: str, what: str) -> None:
    for line in text.split("\n"):
        if _DIRECTIVE.match(line):
            raise ValueError(f"{what} contains a `//!` directive line: {line.strip()!r}")


def render(c: Candidate) -> str:
    """The canonical text of `c`."""
    out: list[str] = []
    for p in c.params:
        line = f"//! param {p.name} = {p.default}"
        if p.choices is not None:
            line += " {" + ", ".join(str(v) for v in p.choices) + "}"
        out.append(line + "\n")
    if c.header:
        _check_no_directives(c.header, "header")
        out.append("//! header\n")
        out.append(ensure_newline(c.header))
    for k in c.kernels:
        _check_no_directives(k.body, f"body of kernel {k.name!r}")
        out.append(f"//! kernel {k.name}\n")
        if k.grid is not None:
            out.append(f"//! grid = {k.grid.strip()}\n")
        if k.threadgroup is not None:
            out.append(f"//! threadgroup = {k.threadgroup.strip()}\n")
        out.extend(f"//! inplace {o} = {i}\n" for o, i in k.in_place)
        out.append(ensure_newline(k.body))
    return "".join(out)


# --- to MLX -----------------------------------------------------------------


def to_kernel_spec(
    c: Candidate,
    kernel_name: str,
    input_names,
    output_names,
    atomic_outputs: bool = False,
    filename: str | None = None,
) -> KernelSpec:
    """The KernelSpec of one kernel of `c` (body, shared header, line mapping),
    its `//! inplace` outputs bound to their hidden inputs (mlxsci/kernel/in_place.py)."""
    k = c.kernel(kernel_name)
    spec = KernelSpec(
        name=k.name,
        input_names=tuple(input_names),
        output_names=tuple(output_names),
        source=k.body,
        header=ensure_newline(c.header),
        atomic_outputs=atomic_outputs,
        dialect=c.dialect,
        source_file=filename if filename is not None else c.source_file,
        header_line=c.header_line if c.header else 1,
        body_line=k.body_line or 1,
    )
    return in_place.bind(spec, k.in_place)


def template_args(c: Candidate, overrides: dict[str, int] | None = None) -> list[tuple[str, int]]:
    """The params as MLX template ints, in declaration order."""
    values = c.param_values(overrides)
    return [(p.name, values[p.name]) for p in c.params]
