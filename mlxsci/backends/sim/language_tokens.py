"""The small tokenizer and violation reporting that the simulator's language
rules (metal_rules.py, cuda_rules.py) share.

Tokens are just enough C++ for the rules: identifiers, numbers, the
multi-character operators the rules look at, and single characters; the
text is first masked (comments, strings and preprocessor lines blanked) so
offsets stay those of the kernel text. A rule reports a `_Violation` (an
offset and a message); `_first` turns the earliest one into a CompileError
in clang's format at the candidate's own file and line, through the same
parser as the simulator's compile errors (build.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlxsci.backends.base import CompileError
from mlxsci.backends.sim import build
from mlxsci.backends.sim.source_scan import mask_comments_and_strings


# ------------------------------------------------------------------ tokens
@dataclass(frozen=True)
class _Tok:
    text: str
    pos: int  # offset in the kernel text

    @property
    def is_ident(self) -> bool:
        return self.text[:1].isalpha() or self.text[:1] == "_"


# `>>` stays two tokens so that nested template argument lists close; `<<` is
# one token so that a shift never opens one.
_TOKEN = re.compile(
    r"[A-Za-z_]\w*|\.?\d[\w.]*(?:[eE][+-]\d+\w*)?|::|->|<<=?|\+\+|--|&&|\|\||"
    r"[-+*/%&|^!=<>]=|\S"
)
_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#.*?(?<!\\)$", re.M | re.S)


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + "".join(c if c == "\n" else " " for c in text[start:end]) + text[end:]


def _code_only(text: str) -> str:
    """Comments, strings and preprocessor lines (with their continuations)
    replaced by spaces; offsets and newlines unchanged."""
    masked = mask_comments_and_strings(text)
    for m in reversed(list(_PREPROCESSOR_LINE.finditer(masked))):
        masked = _blank(masked, m.start(), m.end())
    return masked


def _tokens(code: str) -> list[_Tok]:
    return [_Tok(m.group(), m.start()) for m in _TOKEN.finditer(code)]


def _close(toks: list[_Tok], i: int) -> int:
    """Index of the bracket closing toks[i] ((, [, {), or len(toks)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[toks[i].text]]
    for j in range(i + 1, len(toks)):
        t = toks[j].text
        if t in pairs:
            stack.append(pairs[t])
        elif stack and t == stack[-1]:
            stack.pop()
            if not stack:
                return j
    return len(toks)


def _close_angle(toks: list[_Tok], i: int) -> int | None:
    """Index of the `>` closing the template argument list opened at toks[i],
    or None where toks[i] is a less-than (a `;` or `{` comes first)."""
    depth = 0
    j = i
    while j < len(toks):
        t = toks[j].text
        if t == "<":
            depth += 1
        elif t == ">":
            depth -= 1
            if depth == 0:
                return j
        elif t in ("(", "["):
            j = _close(toks, j)
        elif t in (";", "{", "}", "&&", "||"):
            return None
        j += 1
    return None


# ------------------------------------------------------------------ violations
@dataclass(frozen=True)
class _Violation:
    pos: int
    message: str


def _to_compile_error(v: _Violation, text: str, regions, source_file: str) -> CompileError:
    """A CompileError from clang-style log text at the candidate's file and
    line, built by the same parser as the simulator's own compile errors."""
    line = text.count("\n", 0, v.pos) + 1
    col = v.pos - (text.rfind("\n", 0, v.pos) + 1) + 1
    file, file_line = "<mlx-signature>", line
    for r in regions:
        if r.first <= line <= r.last:
            file, file_line = r.file, r.start_line + (line - r.first)
            break
    src_line = text.split("\n")[line - 1]
    log = (
        f"{build._line_file(file)}:{file_line}:{col}: error: {v.message}\n"
        f"{src_line}\n{' ' * (col - 1)}^\n"
    )
    return build.parse_compile_error(log, source_file)


def _first(
    violations: list[_Violation], text: str, regions, source_file: str
) -> CompileError | None:
    if not violations:
        return None
    return _to_compile_error(min(violations, key=lambda v: v.pos), text, regions, source_file)
