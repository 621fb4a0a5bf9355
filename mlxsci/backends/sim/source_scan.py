"""Scanning C-family source text without parsing it: the helpers that the
simulator's source rewrites (rewrite.py, vector_constructors.py) and its
language rules (language_tokens.py, cuda_rules.py) share.

- `mask_comments_and_strings`: comments and literals blanked, offsets kept,
  so a regex or a bracket matcher never matches inside them;
- bracket matching, whitespace and identifier skipping on masked text;
- `split_top_level`: a bracketed list cut at its top-level commas;
- `Edits`: replacements collected on one pass and applied back to front,
  keeping every newline so that lines do not move.

Kept apart from the rewrites so that the rules checker can mask text
without importing the rewrites, and so each rewrite module holds only its
own constructs.
"""

from __future__ import annotations

import re

__all__ = ["mask_comments_and_strings"]


def mask_comments_and_strings(text: str) -> str:
    """The text with comments and string/char literals replaced by spaces
    (newlines kept), so positions line up with the original."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            if j < 0:
                j = n
            # a backslash-newline continues a // comment
            while j < n and j > 0 and text[j - 1] == "\\":
                k = text.find("\n", j + 1)
                j = n if k < 0 else k
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c == '"' or c == "'":
            # a ' right after a digit is a C++14 digit separator: 1'000'000
            if c == "'" and i > 0 and text[i - 1].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            for k in range(i + 1, j - 1):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        else:
            i += 1
    return "".join(out)


_CLOSE = {"(": ")", "[": "]", "{": "}"}
_BRACKET = re.compile(r"[()\[\]{}]")
# The partners of the last text asked about: the rewrites ask about one
# masked text many times.
_LAST_PARTNERS: tuple[str, dict[int, int]] = ("", {})


def _partners(masked: str) -> dict[int, int]:
    """Every opening bracket of `masked` that `match_bracket` closes -> where. One
    pass with a stack: a closing bracket of the wrong kind ends the scan of
    every bracket still open (each would have met it), so none of them
    closes."""
    global _LAST_PARTNERS
    if _LAST_PARTNERS[0] is masked:
        return _LAST_PARTNERS[1]
    partners: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACKET.finditer(masked):
        c, j = m.group(), m.start()
        if c in _CLOSE:
            stack.append(j)
        elif stack:
            if _CLOSE[masked[stack[-1]]] == c:
                partners[stack.pop()] = j
            else:
                stack.clear()
    _LAST_PARTNERS = (masked, partners)
    return partners


def match_bracket(masked: str, i: int) -> int | None:
    """Index of the bracket closing the one at masked[i], or None (never
    closed, or a closing bracket of another kind comes first). Looked up in
    a table made once per text: scanning per bracket took time quadratic in
    the nesting (issue 23)."""
    return _partners(masked).get(i)


def next_same_level(masked: str, i: int, end: int) -> int:
    """The index after masked[i] at the same bracket level: past the group
    that masked[i] opens where it closes before `end`, else i + 1."""
    close = _partners(masked).get(i) if masked[i] in _CLOSE else None
    return close + 1 if close is not None and close < end else i + 1


def skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i].isspace():
        i += 1
    return i


def prev_nonspace(s: str, i: int) -> int:
    """Index of the last non-space character before i, or -1."""
    i -= 1
    while i >= 0 and s[i].isspace():
        i -= 1
    return i


def word_before(s: str, i: int) -> str:
    """The identifier that ends at index i (inclusive), or ''."""
    j = i
    while j >= 0 and (s[j].isalnum() or s[j] == "_"):
        j -= 1
    return s[j + 1 : i + 1]


def split_top_level(masked: str, start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) cut at the commas outside brackets and template arguments."""
    parts, depth, angle, i0 = [], 0, 0, start
    for i in range(start, end):
        c = masked[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and c == "<":
            angle += 1
        elif depth == 0 and c == ">":
            angle -= 1
        elif depth == 0 and angle == 0 and c == ",":
            parts.append((i0, i))
            i0 = i + 1
    parts.append((i0, end))
    return parts


class Edits:
    """Replacements collected on one pass, applied back to front."""

    def __init__(self) -> None:
        self.items: list[tuple[int, int, str]] = []

    def add(self, start: int, end: int, new: str, old: str) -> None:
        # keep every newline of the replaced span so lines do not move
        self.items.append((start, end, new + "\n" * old.count("\n")))

    def apply(self, text: str) -> str:
        """The text with the edits made. An edit overlapping one after it is
        skipped (the next pass redoes it). Joined from pieces once: a copy
        of the whole text per edit was quadratic in the number of edits."""
        last = len(text) + 1
        kept = []
        for start, end, new in sorted(self.items, key=lambda t: t[0], reverse=True):
            if end > last:
                continue
            kept.append((start, end, new))
            last = start
        pieces, at = [], 0
        for start, end, new in reversed(kept):
            pieces.append(text[at:start])
            pieces.append(new)
            at = end
        pieces.append(text[at:])
        return "".join(pieces)
