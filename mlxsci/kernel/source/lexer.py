"""Preprocessing tokens of a candidate's text, as a C++ compiler's first
phases see them: the lexer under the source policy (mlxsci/kernel/source/policy.py).

Translation phases 1-3 (C++ [lex.phases]): backslash-newlines are spliced
(also with spaces between the backslash and the newline, as clang and GCC
accept), comments become whitespace (a block comment's newlines do not end a
directive, exactly as in a compiler), and the text is cut into pp-tokens
grouped in logical lines. Every token keeps the candidate-file line it
starts on.

Whatever could make this lexer and a compiler's disagree about where code
is, is refused instead of interpreted (`Refused`, with the line):
  trigraphs (`??/` splices a line where trigraphs are on, C++14 and Metal),
  control characters (a lone carriage return ends a line for clang),
  raw string literals (their delimiters are another grammar), unterminated
  comments, strings and character literals, digraphs (`%:include`, `%:%:`,
  `<:<:` are `#include`, `##` and `[[`), a backslash outside a literal
  (universal character names), and non-ASCII characters outside comments
  and literals (compilers differ on which are identifier characters).
The alternative operator spellings (`and`, `bitand`, ...) are C++ operators
everywhere, so they are turned into the operators they spell.
"""

from __future__ import annotations

import re
from bisect import bisect_right

__all__ = ["Refused", "Tok", "Line", "lex_part", "lex_pasted"]


class Refused(Exception):
    """Something the source policy refuses: a message at a candidate line."""

    def __init__(self, line: int | None, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


class Tok:
    """A preprocessing token. kind: id, num, str, chr, punct or other;
    `space`: whitespace came before it; `hide`: the macro names that may not
    expand it again (the expansion's hide set); `depth`: how many macro
    expansions made it; `expanded`: it came through a macro argument that was
    macro-expanded before substitution (where a compiler's own macros could
    have expanded it too)."""

    __slots__ = ("kind", "text", "line", "space", "hide", "depth", "expanded")

    def __init__(self, kind, text, line, space=False, hide=frozenset(), depth=0, expanded=False):
        self.kind = kind
        self.text = text
        self.line = line
        self.space = space
        self.hide = hide
        self.depth = depth
        self.expanded = expanded

    def copy(self, line=None, space=None) -> Tok:
        return Tok(
            self.kind,
            self.text,
            self.line if line is None else line,
            self.space if space is None else space,
            self.hide,
            self.depth,
            self.expanded,
        )

    def __repr__(self) -> str:
        return f"Tok({self.kind}, {self.text!r}, line {self.line})"


class Line:
    """A logical line: its tokens and whether it is a directive (`#` first)."""

    __slots__ = ("toks", "line", "directive")

    def __init__(self, toks: list[Tok], line: int):
        self.toks = toks
        self.line = line
        self.directive = bool(toks) and toks[0].kind == "punct" and toks[0].text == "#"


_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
# A lone carriage return ends a line for clang (and a `//` comment with it),
# NUL and the other control characters are skipped or mislexed: none is text.
_CONTROL = re.compile(r"\r(?!\n)|[\x00-\x08\x0e-\x1f\x7f]")
_SPLICE = re.compile(r"\\[ \t\f\v\r]*\n")
_TOKEN = re.compile(
    r"""
     (?P<ws>[ \t\f\v\r]+)
    |(?P<nl>\n)
    |(?P<lc>//[^\n]*)
    |(?P<bc>/\*.*?\*/)
    |(?P<ubc>/\*)
    |(?P<raw>(?:u8|u|U|L)?R")
    |(?P<str>(?:u8|u|U|L)?"(?:[^"\\\n]|\\[^\n])*")
    |(?P<chr>(?:u8|u|U|L)?'(?:[^'\\\n]|\\[^\n])*')
    |(?P<ustr>(?:u8|u|U|L)?["'])
    |(?P<num>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*)
    |(?P<id>[A-Za-z_$][0-9A-Za-z_$]*)
    |(?P<dig><:(?!:(?:[^:>]|\Z))|:>|<%|%>|%:)
    |(?P<punct>\.\.\.|<=>|<<=|>>=|->\*|\#\#|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\|
               |[-+*/%&|^]=|\.\*|[-+*/%&|^~!=<>?:;,.()\[\]{}\#])
    |(?P<other>.)
    """,
    re.X | re.S,
)
# C++ [lex.digraph]: the operator names are the operators they spell.
ALTERNATIVE = {
    "and": "&&",
    "and_eq": "&=",
    "bitand": "&",
    "bitor": "|",
    "compl": "~",
    "not": "!",
    "not_eq": "!=",
    "or": "||",
    "or_eq": "|=",
    "xor": "^",
    "xor_eq": "^=",
}


def _splice(text: str, first_line: int) -> tuple[str, list[int], list[int]]:
    """The text with its line splices removed, and a map from offsets of
    that text to candidate lines (`offsets[k]` on starts line `lines[k]`)."""
    parts: list[str] = []
    offsets, lines = [0], [first_line]
    line, n, pos = first_line, 0, 0
    for m in [*_SPLICE.finditer(text), None]:
        end = m.start() if m else len(text)
        piece = text[pos:end]
        k = piece.find("\n")
        while k >= 0:
            line += 1
            offsets.append(n + k + 1)
            lines.append(line)
            k = piece.find("\n", k + 1)
        parts.append(piece)
        n += len(piece)
        if m is None:
            break
        line += 1
        offsets.append(n)
        lines.append(line)
        pos = m.end()
    return "".join(parts), offsets, lines


def _refusal(kind: str, text: str, line: int) -> Refused:
    what = {
        "ubc": "an unterminated /* comment",
        "ustr": "an unterminated string or character literal",
        "raw": 'a raw string literal (R"..."); write an ordinary literal',
        "dig": f"the digraph `{text}`; write the character it stands for",
    }.get(kind)
    if what is None:
        if text == "\\":
            what = "a backslash outside a literal (universal character names are not allowed)"
        else:
            what = f"the non-ASCII character {text!r} outside a comment or literal"
    return Refused(line, f"the candidate has {what}")


def lex_part(text: str, first_line: int) -> list[Line]:
    """The logical lines of one part of a candidate (its header or a kernel
    body) whose first line is `first_line` of the candidate file."""
    m = _TRIGRAPH.search(text)
    if m:
        line = first_line + text.count("\n", 0, m.start())
        raise Refused(line, f"the candidate has the trigraph `{m.group()}`; write the character")
    m = _CONTROL.search(text)
    if m:
        line = first_line + text.count("\n", 0, m.start())
        raise Refused(line, f"the candidate has the control character {m.group()!r}")
    spliced, offsets, lines = _splice(text, first_line)
    out: list[Line] = []
    toks: list[Tok] = []
    space = False
    offsets.append(len(spliced) + 1)  # a sentinel: no line starts there
    k, line, next_line_at = 0, lines[0], offsets[1]
    skip = ("ws", "lc", "bc")
    for m in _TOKEN.finditer(spliced):
        kind = m.lastgroup
        if kind in skip:
            space = True
            continue
        start = m.start()
        if start >= next_line_at:  # the line only changes where a line starts
            k = bisect_right(offsets, start) - 1
            line, next_line_at = lines[k], offsets[k + 1]
        if kind == "nl":
            out.append(Line(toks, toks[0].line if toks else line))
            toks, space = [], False
            continue
        word = m.group()
        if kind in ("ubc", "ustr", "raw", "dig") or (
            kind == "other" and (word == "\\" or not word.isascii())
        ):
            raise _refusal(kind, word, line)
        if kind == "id" and word in ALTERNATIVE:
            kind, word = "punct", ALTERNATIVE[word]
        toks.append(Tok(kind, word, line, space))
        space = False
    if toks:
        out.append(Line(toks, toks[0].line))
    return out


def lex_pasted(text: str) -> Tok | None:
    """The one token that `text` (two tokens' spellings pasted by `##`) is,
    or None where it is no single valid token."""
    m = _TOKEN.fullmatch(text)
    if m is None or m.lastgroup not in ("num", "id", "str", "chr", "punct"):
        return None
    kind, word = m.lastgroup, m.group()
    if kind == "id" and word in ALTERNATIVE:
        kind, word = "punct", ALTERNATIVE[word]
    return Tok(kind, word, 0)
