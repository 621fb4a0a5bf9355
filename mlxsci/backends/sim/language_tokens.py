"""The small tokenizer and violation reporting that the simulator's language
rules (metal_rules.py, cuda_rules.py) share.

Tokens are just enough C++ for the rules: identifiers, numbers, the
multi-character operators the rules look at, and single characters; the
text is first masked (comments, strings and preprocessor lines blanked) so
offsets stay those of the kernel text. Metal's rules read a `CodeView`
instead: the same lines, those that preprocessing changes replaced by what
the compiler reads there (language_rules.expanded). A rule reports a `Violation` (an
offset and a message); `first_error` turns the earliest one into a CompileError
in clang's format at the candidate's own file and line, through the same
parser as the simulator's compile errors (build.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlxsci.backends.sim import build
from mlxsci.backends.sim.source_scan import mask_comments_and_strings
from mlxsci.kernel.spec import CompileError


# ------------------------------------------------------------------ tokens
class Token:
    """A token: its text and offset in the kernel text; `index` is its place
    in the text's token list and `table` that list's bracket partners, so
    that a rule finds a closing bracket in one step (issue 23: a scan per
    bracket made a text of many brackets take time quadratic in its size)."""

    __slots__ = ("text", "pos", "index", "table")

    def __init__(self, text: str, pos: int, index: int = -1, table: _Partners | None = None):
        self.text = text
        self.pos = pos
        self.index = index
        self.table = table

    @property
    def is_ident(self) -> bool:
        return self.text[:1].isalpha() or self.text[:1] == "_"

    def __repr__(self) -> str:
        return f"Token({self.text!r}, {self.pos})"


# `>>` stays two tokens so that nested template argument lists close; `<<` is
# one token so that a shift never opens one.
_TOKEN = re.compile(
    r"[A-Za-z_]\w*|\.?\d[\w.]*(?:[eE][+-]\d+\w*)?|::|->|<<=?|\+\+|--|&&|\|\||"
    r"[-+*/%&|^!=<>]=|\S"
)
_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#.*?(?<!\\)$", re.M | re.S)
_PAIRS = {"(": ")", "[": "]", "{": "}"}
_ANGLE_STOPS = frozenset({";", "{", "}", "&&", "||"})


def code_only(text: str) -> str:
    """Comments, strings and preprocessor lines (with their continuations)
    replaced by spaces; offsets and newlines unchanged. Built from pieces
    in one pass: blanking each line in a copy of the whole text took time
    quadratic in the number of directive lines."""
    masked = mask_comments_and_strings(text)
    pieces: list[str] = []
    last = 0
    for m in _PREPROCESSOR_LINE.finditer(masked):
        pieces.append(masked[last : m.start()])
        pieces.append(re.sub(r"[^\n]", " ", m.group()))
        last = m.end()
    pieces.append(masked[last:])
    return "".join(pieces)


class _Partners:
    """For each token of one list: where the bracket it opens closes
    (`close`) and where the template argument list a `<` opens closes
    (`angle`), as `close_bracket` and `close_angle` define them, worked out for
    every token in one pass each. -1: no closing token."""

    def __init__(self, toks: list[Token]):
        n = len(toks)
        texts = [t.text for t in toks]
        close = [n] * n
        stack: list[int] = []
        for j, t in enumerate(texts):
            if t in _PAIRS:
                stack.append(j)
            elif stack and t == _PAIRS[texts[stack[-1]]]:
                close[stack.pop()] = j
            # another closing bracket: the scan from any open bracket skips it
        # after[j]: where the scan of a template argument list that has
        # reached token j (wanting its `>`) ends; computed back to front,
        # since it depends only on what follows j.
        after = [-1] * (n + 2)
        for j in range(n - 1, -1, -1):
            t = texts[j]
            if t == ">":
                after[j] = j
            elif t == "<":
                inner = after[j + 1]
                after[j] = -1 if inner < 0 else after[inner + 1]
            elif t in ("(", "["):
                after[j] = after[close[j] + 1] if close[j] < n else -1
            elif t in _ANGLE_STOPS:
                after[j] = -1
            else:
                after[j] = after[j + 1]
        self.toks = toks
        self.close = close
        self.angle = after


def tokenize(code: str) -> list[Token]:
    toks = [Token(m.group(), m.start(), k) for k, m in enumerate(_TOKEN.finditer(code))]
    table = _Partners(toks)
    for t in toks:
        t.table = table
    return toks


def _in_table(toks: list[Token], i: int) -> _Partners | None:
    """The partners of the list `toks` is a slice of (as every rule's list
    is), or None where it is not one contiguous slice of a tokenized text."""
    table = toks[i].table
    if table is None or toks[-1].index - toks[i].index != len(toks) - 1 - i:
        return None
    return table


def close_bracket(toks: list[Token], i: int) -> int:
    """Index of the bracket closing toks[i] ((, [, {), or len(toks)."""
    table = _in_table(toks, i)
    if table is None:
        return _scan_close(toks, i)
    at = i + table.close[toks[i].index] - toks[i].index
    return min(at, len(toks))


def close_angle(toks: list[Token], i: int) -> int | None:
    """Index of the `>` closing the template argument list opened at toks[i],
    or None where toks[i] is a less-than (a `;` or `{` comes first)."""
    table = _in_table(toks, i) if toks[i].text == "<" else None
    if table is None:
        return _scan_close_angle(toks, i)
    end = table.angle[toks[i].index + 1]
    if end < 0:
        return None
    at = i + end - toks[i].index
    return at if at < len(toks) else None


def _scan_close(toks: list[Token], i: int) -> int:
    """`close_bracket` by scanning: for a list of tokens that no table covers."""
    stack = [_PAIRS[toks[i].text]]
    for j in range(i + 1, len(toks)):
        t = toks[j].text
        if t in _PAIRS:
            stack.append(_PAIRS[t])
        elif stack and t == stack[-1]:
            stack.pop()
            if not stack:
                return j
    return len(toks)


def _scan_close_angle(toks: list[Token], i: int) -> int | None:
    """`close_angle` by scanning: for a list of tokens that no table covers."""
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
            j = _scan_close(toks, j)
        elif t in _ANGLE_STOPS:
            return None
        j += 1
    return None


# ------------------------------------------------------------------ violations
@dataclass(frozen=True)
class Violation:
    pos: int
    message: str


@dataclass(frozen=True)
class CodeView:
    """The kernel text as a dialect's rules read it when they judge what the
    compiler compiles: `code` has the kernel text's lines (comments, strings
    and directives blanked, as `code_only` makes them) except the candidate's
    *changed* lines, replaced by what preprocessing puts there
    (mlxsci/kernel/source/expansion.py). `changed`: those lines of the text;
    `moved`: text line -> (start, end, candidate line) spans of its code
    whose tokens a macro call spread over lines brought from another line."""

    code: str
    changed: frozenset[int] = frozenset()
    moved: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)


def _to_compile_error(
    v: Violation, text: str, regions, source_file: str, view: CodeView | None = None
) -> CompileError:
    """A CompileError from clang-style log text at the candidate's file and
    line, built by the same parser as the simulator's own compile errors.
    `v.pos` is an offset of `view.code` where a view was read, else of `text`
    (the two have the same lines)."""
    code = view.code if view is not None else text
    line = code.count("\n", 0, v.pos) + 1
    col = v.pos - (code.rfind("\n", 0, v.pos) + 1) + 1
    at = line  # the text line the candidate wrote the token on
    file, file_line, region = "<mlx-signature>", line, None
    for r in regions:
        if r.first <= line <= r.last:
            file, file_line, region = r.file, r.start_line + (line - r.first), r
            break
    for start, end, origin in view.moved.get(line, ()) if view is not None else ():
        if start <= col - 1 < end and region is not None:
            file_line, at = origin, region.first + (origin - region.start_line)
    src_line = text.split("\n")[at - 1]
    name = build.line_directive_name(file)
    where = f"{name}:{file_line}"
    if view is None or line not in view.changed:
        log = f"{where}:{col}: error: {v.message}\n{src_line}\n{' ' * (col - 1)}^\n"
        return build.parse_compile_error(log, source_file)
    # A line a macro changed: clang points into the macro's definition and
    # notes the expansion; here the line as written comes first (its first
    # column: where on it the macro stands is not kept), then the line as
    # the rules read it, with the caret on the token.
    written = len(src_line) - len(src_line.lstrip()) + 1 if src_line.strip() else 1
    read = code.split("\n")[line - 1]
    # the line the token stands on after expansion (a later one than the
    # token's own where a macro call is spread over lines)
    stands = region.start_line + (line - region.first) if region is not None else line
    log = (
        f"{where}:{written}: error: {v.message}\n{src_line}\n{' ' * (written - 1)}^\n"
        f"{name}:{stands}:{col}: note: after macro expansion the line reads:\n"
        f"{read}\n{' ' * (col - 1)}^\n"
    )
    return build.parse_compile_error(log, source_file)


def first_error(
    violations: list[Violation], text: str, regions, source_file: str, view: CodeView | None = None
) -> CompileError | None:
    if not violations:
        return None
    first = min(violations, key=lambda v: v.pos)
    return _to_compile_error(first, text, regions, source_file, view)
