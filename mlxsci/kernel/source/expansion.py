"""What a compiler compiles from one part of a candidate, line by line: the
source policy's preprocessed tokens (mlxsci/kernel/source/preprocess.py) laid
back onto the candidate's lines, for checkers that read text rather than
tokens (the simulator's Metal rules, mlxsci/backends/sim/metal_rules.py).

Most lines come out of preprocessing as they went in; only those are kept
as the candidate wrote them (so a checker's columns stay the candidate's).
A line is *changed* where what the compiler sees there differs from what is
written: a macro is expanded on it, it lies in an `#if` group not taken, a
token of a macro call spread over lines moved off it, or it continues or is
continued by a backslash-newline (a token may straddle the two). A changed
line is replaced by the tokens preprocessing put there, in the order the
compiler reads them; a directive line is left for the checker to blank, as
it blanks every directive.

Every token a macro expansion makes carries the line of the macro's use
(the outermost one: the policy's expander gives the replacement the line of
the name it replaces), and an argument's tokens keep their own line. A token
that the compiler reads after a token of a later line (`#define F(a, b) b a`
called over two lines) stands on that later line, so that the text stays in
the compiler's order, and `moved` says which line it came from.

String and character literals are written as empty ones (`""`, `''`): a
checker of code never looks inside them, and an empty literal cannot open a
comment or close a line.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mlxsci.kernel.source.lexer import Line, Tok

__all__ = ["PartExpansion", "part_expansion"]


@dataclass(frozen=True)
class PartExpansion:
    """One part's changed lines. `lines`: candidate line -> the tokens the
    compiler reads there (an empty string for a line it reads nothing of);
    `moved`: candidate line -> (start, end, line) spans of that line's text
    whose tokens come from another candidate line."""

    lines: dict[int, str]
    moved: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)


def _spelling(t: Tok) -> str:
    if t.kind == "str":
        return '""'
    if t.kind == "chr":
        return "''"
    return t.text


def part_expansion(text: str, first_line: int, raw: list[Line], toks: list[Tok]) -> PartExpansion:
    """The changed lines of the part `text` (first candidate line
    `first_line`), lexed as `raw` and preprocessed to `toks`. Linear in the
    sizes of the three."""
    last_line = first_line + text.count("\n")
    changed: set[int] = set()
    # a backslash-newline: a token of the first line may end on the second
    at = first_line
    for physical in text.split("\n"):
        if physical.rstrip(" \t\f\v\r").endswith("\\"):
            changed.update((at, at + 1))
        at += 1
    written = Counter(t.line for ln in raw if not ln.directive for t in ln.toks)
    read: Counter[int] = Counter()
    # where each token stands: its line, or a later one it is read after
    stands: list[int] = []
    top = first_line
    for t in toks:
        read[t.line] += 1
        if t.depth:
            changed.add(t.line)
        top = max(top, t.line)
        stands.append(top)
        if top != t.line:
            changed.add(top)
    changed.update(line for line in written.keys() | read.keys() if written[line] != read[line])
    changed = {line for line in changed if first_line <= line <= last_line}
    pieces: dict[int, list[str]] = {line: [] for line in changed}
    lengths: dict[int, int] = dict.fromkeys(changed, 0)
    moved: dict[int, list[tuple[int, int, int]]] = {}
    for t, line in zip(toks, stands):
        held = pieces.get(line)
        if held is None:
            continue  # an unchanged line: the checker reads it as written
        word = _spelling(t)
        start = lengths[line] + (1 if held else 0)
        held.append(word)
        lengths[line] = start + len(word)
        if line != t.line:
            moved.setdefault(line, []).append((start, start + len(word), t.line))
    return PartExpansion({line: " ".join(words) for line, words in pieces.items()}, moved)
