"""A candidate out of an LLM's answer: the fenced code block that holds it.

An answer carries the candidate file in one fenced block (```metal,
```cuda, or a bare fence); `extract_from_response` picks it among the
answer's blocks. Apart from the format (mlxsci/kernel/candidate.py, which
re-exports `extract_from_response`) because it reads Markdown, not the
`//!` format: it only finds the text the parser then reads.
"""

from __future__ import annotations

import re

from mlxsci.kernel import dialects
from mlxsci.kernel.model import ensure_newline

# The info string is stripped after the match: a lazy group before `[ \t]*$`
# retried the trailing blanks from every position, quadratic in a long run
# of blanks on a fence line (issue 23).
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^\n`]*)$")
_KERNEL_DIRECTIVE = re.compile(r"^[ \t]*//![ \t]*kernel\b", re.M)


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, content) of each fenced code block; an unclosed block runs to the end."""
    blocks = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i].rstrip("\r"))
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip(" \t")
        body = []
        i += 1
        while i < len(lines):
            s = lines[i].rstrip("\r")
            close = re.match(r"^ {0,3}(`{3,}|~{3,})[ \t]*$", s)
            if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
                break
            body.append(lines[i])
            i += 1
        i += 1
        blocks.append((info, "\n".join(body)))
    return blocks


def extract_from_response(text: str, dialect: str = "metal") -> str | None:
    """The candidate file in an LLM answer: among fenced blocks whose info string
    fits the dialect (or is empty), those with a `//! kernel` line are preferred,
    and the longest wins. None when there is no such block."""
    langs = dialects.get(dialect).answer_fences
    fitting = []
    for info, content in _fenced_blocks(text):
        lang = info.split()[0].lower() if info.split() else ""
        if lang in langs and content.strip():
            fitting.append(content)
    if not fitting:
        return None
    preferred = [b for b in fitting if _KERNEL_DIRECTIVE.search(b)]
    best = max(preferred or fitting, key=len)
    return ensure_newline(best)
