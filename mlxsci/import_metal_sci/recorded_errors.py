"""Where a recorded Metal compile error lies: in a kernel's signature, or not.

mlxsci writes every kernel's signature itself (MLX's `metal_kernel` does),
so a candidate whose only Metal error is in its own signature (a
`restrict` in a parameter, a `[[max_total_threads_per_threadgroup]]` after
the parameter list, a thread attribute of a type Metal refuses) compiles
here whatever mlxsci thinks of its body: its recorded compile error is one
mlxsci cannot reproduce, and the audit counts it apart.

`signature_error(source, fail_reason)` reads Metal's log as a recorded fail
reason quotes it (`program_source:LINE:COL: error: MESSAGE`, lines of the
source as recorded) and answers the first error when every error is either
on a line of a kernel's declaration (from `kernel` to the body's `{`) or
the use of an undeclared name that such a declaration's parameter list
declares (what a broken parameter list leaves the body with), or another
error on a line with such a use; else None.
The source is hostile text: it is only searched, with bounded patterns.
"""

from __future__ import annotations

import re

# One error of Metal's log: its line and message, up to the caret line or
# the next diagnostic.
_ERROR = re.compile(
    r"program_source:(\d{1,7}):\d{1,7}: error: ([^^\n]{0,300}?)(?= \^|\^|program_source:|$)", re.M
)
_UNDECLARED = re.compile(r"use of undeclared identifier '(\w{1,200})'")
# A kernel's declaration: `kernel void NAME(` or `[[kernel]] void NAME(`.
_KERNEL = re.compile(r"(?:\bkernel\b|\[\[\s*kernel\s*\]\])[^;{}]{0,200}?\bvoid\b[^;{}(]{0,200}\(")
# A parameter's name: the identifier before its attribute, `x [[buffer(0)]]`.
_PARAM_NAME = re.compile(r"(\w{1,200})\s*\[\[")
MESSAGE_CHARS = 160
# The most of a recorded fail reason read (Metal's logs are kilobytes).
LOG_CHARS = 1 << 16


def _declarations(source: str) -> list[tuple[int, int, set[str]]]:
    """(first line, last line, parameter names) of each kernel declaration:
    from `kernel` to the `{` that opens its body."""
    found = []
    for m in _KERNEL.finditer(source):
        brace = source.find("{", m.end())
        if brace < 0:
            continue
        first = source.count("\n", 0, m.start()) + 1
        last = first + source.count("\n", m.start(), brace)
        found.append((first, last, set(_PARAM_NAME.findall(source[m.end() : brace]))))
    return found


def signature_error(source: str | None, fail_reason: str | None) -> str | None:
    """The first error of a recorded compile failure whose every error lies in
    a kernel's signature (module docstring); None otherwise."""
    if not source or not fail_reason:
        return None
    log = fail_reason[:LOG_CHARS]
    errors = [(int(line), message.strip()) for line, message in _ERROR.findall(log)]
    if not errors:
        return None
    declarations = _declarations(source)
    in_signature = [
        (line, message, names)
        for line, message in errors
        for first, last, names in declarations
        if first <= line <= last
    ]
    if not in_signature:
        return None
    declared = set().union(*(names for _, _, names in in_signature))
    # Each error's line and the undeclared name it reports (None: another error).
    named = [
        (line, m.group(1) if (m := _UNDECLARED.search(message)) else None)
        for line, message in errors
    ]
    # Lines where a parameter the broken list lost is used: any other error
    # there follows from it (Metal takes `f_in` for `fmin`, then refuses the
    # subscript of a function).
    lost_on = {line for line, name in named if name in declared}
    for line, name in named:
        if name in declared or any(first <= line <= last for first, last, _ in declarations):
            continue
        if name is not None or line not in lost_on:
            return None  # an error of the body's own (a name nothing declares)
    return in_signature[0][1][:MESSAGE_CHARS]
