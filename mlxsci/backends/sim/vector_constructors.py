"""The Metal vector-constructor rewrite: the part of `rewrite_metal` (rewrite.py)
that turns MSL vector constructors, which C++ cannot parse as calls on a
vector type, into calls of the prelude's `__mlxsci_make<T, N>`:

    float4(a.xy, b, c)        -> __mlxsci_make<float,4>(a.xy, b, c)
    metal::half2(x)           -> __mlxsci_make<half,2>(x)
    vec<float, 4>(x)          -> __mlxsci_make<float,4>(x)
    float4{a, b}              -> __mlxsci_make<float,4>(a, b)
    static_cast<float4>(i4)   -> __mlxsci_make<float,4>(i4)
    (float4)i4                -> __mlxsci_make<float,4>(i4)     (MSL converts
                                 values; clang would reinterpret the bits)
    float4 v(a, b);           -> float4 v = __mlxsci_make<float,4>(a, b);
    float4 v{a, b};           -> float4 v = __mlxsci_make<float,4>(a, b);
    float4 v = {a.xy, b, c};  -> float4 v = __mlxsci_make<float,4>(a.xy, b, c);
                                 (two or more items; {s} keeps its C++ meaning)
Scalar functional casts such as float(x) and uint(x) are valid C++ and are
left alone; so are packed_float3(...) (a class with constructors).

Separate from rewrite.py because telling a constructor from a function
declaration or a cast from a call (`_looks_like_parameters`,
`_parse_cast_operand`) is most of the rewrite's code; the rest of the
rewrite is short and line-local.
"""

from __future__ import annotations

import re

from mlxsci.backends.sim.source_scan import (
    Edits,
    mask_comments_and_strings,
    match_bracket,
    next_same_level,
    prev_nonspace,
    skip_ws,
    word_before,
)

__all__ = ["VECTOR_ELEMENT_TYPES"]


# MSL vector element type names (the NAME in NAMEn).
VECTOR_ELEMENT_TYPES = (
    "bool",
    "char",
    "uchar",
    "short",
    "ushort",
    "int",
    "uint",
    "long",
    "ulong",
    "half",
    "bfloat",
    "float",
)
_ELEM = "|".join(sorted(VECTOR_ELEMENT_TYPES, key=len, reverse=True))
_VTYPE = rf"(?:metal\s*::\s*)?(?P<elem>{_ELEM})(?P<n>[234])"
# vec<T, N> (T may be qualified, N may be a template parameter or a number)
_VECTPL = (
    r"(?:metal\s*::\s*)?vec\s*<\s*(?P<telem>[A-Za-z_][\w:]*)\s*,\s*(?P<tn>[A-Za-z_0-9]\w*)\s*>"
)

# Identifiers after which "(float4)x" cannot be a call argument list.
_KEYWORDS_BEFORE_EXPR = {"return", "case", "else", "do", "throw", "co_return", "co_yield"}

# First words that make "(...)" after "float4 name" a parameter list.
_DECL_WORDS = set(VECTOR_ELEMENT_TYPES) | {
    "const",
    "volatile",
    "device",
    "constant",
    "thread",
    "threadgroup",
    "unsigned",
    "signed",
    "struct",
    "class",
    "typename",
    "auto",
    "void",
    "double",
    "size_t",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "float16_t",
    "bfloat16_t",
    "complex64_t",
    "atomic",
    "atomic_int",
    "atomic_uint",
    "atomic_float",
    "vec",
    "metal",
    "ptrdiff_t",
}
_VECTOR_TYPE_WORD = re.compile(rf"(?:packed_)?(?:{_ELEM})[234]")


_IDENT = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[A-Za-z0-9_]*")
_TEMPLATE_CALL = re.compile(r"<[\w\s,:<>]*>\s*\(")
_NONSPACE = re.compile(r"\S")


def _parse_cast_operand(s: str, i: int, limit: int | None = None) -> int | None:
    """End (exclusive) of the unary expression starting at i, or None. The
    text is read as if a `)` stood at `limit` (default: its end): the `)`
    that closes the operand of an enclosing cast rewritten before."""
    n = len(s) if limit is None else limit
    i = _after_prefix_operators(s, i, n)
    if i >= n:
        return None
    end = _primary_end(s, i, n)
    return None if end is None else _postfix_end(s, end, n)


def _ws(s: str, k: int, n: int) -> int:
    """skip_ws, stopping at the limit n."""
    return min(skip_ws(s, k), n)


def _closed(k: int | None, n: int) -> int | None:
    """k, where a group closes at k before the limit n; else None."""
    return k if k is not None and k < n else None


def _after_prefix_operators(s: str, i: int, n: int) -> int:
    """Index of the first character after the prefix operators (++ -- - + ! ~ * &) at i."""
    i = _ws(s, i, n)
    while i < n:
        if s.startswith("++", i, n) or s.startswith("--", i, n):
            i = _ws(s, i + 2, n)
        elif s[i] in "-+!~*&":
            i = _ws(s, i + 1, n)
        else:
            break
    return i


def _primary_end(s: str, i: int, n: int) -> int | None:
    """End of the primary expression at s[i] (i < n): a parenthesised
    group, a number or a (qualified, possibly template-called) name."""
    if s[i] == "(":
        j = _closed(match_bracket(s, i), n)
        return None if j is None else j + 1
    if s[i].isdigit() or (s[i] == "." and i + 1 < n and s[i + 1].isdigit()):
        m = _NUMBER.match(s, i, n)
        assert m is not None  # a digit, or a dot before one, starts a number
        return m.end()
    if s[i].isalpha() or s[i] == "_":
        return _name_end(s, i, n)
    return None


def _name_end(s: str, i: int, n: int) -> int | None:
    """End of the name at s[i]: an identifier, `::` qualifications, and
    template arguments directly followed by a call (as_type<uint>(x))."""
    m = _IDENT.match(s, i, n)
    if m is None:  # a letter outside A-Z: no identifier of C's
        return None
    i = m.end()
    while True:
        j = _ws(s, i, n)
        if s.startswith("::", j, n):
            m = _IDENT.match(s, _ws(s, j + 2, n), n)
            if not m:
                return None
            i = m.end()
            continue
        if j < n and s[j] == "<":
            # matched in place (a copy of the rest of the text per
            # operand was quadratic in the number of casts)
            m = _TEMPLATE_CALL.match(s, j, n)
            if m:
                i = m.end() - 1
                k = _closed(match_bracket(s, i), n)
                if k is None:
                    return None
                i = k + 1
        return i


def _postfix_end(s: str, i: int, n: int) -> int | None:
    """End of the postfix operators (calls, subscripts, members, ++ --) after s[:i]."""
    while True:
        j = _ws(s, i, n)
        if j < n and s[j] in "([":
            k = _closed(match_bracket(s, j), n)
            if k is None:
                return None
            i = k + 1
        elif j < n and s[j] == "." and not (j + 1 < n and s[j + 1].isdigit()):
            m = _IDENT.match(s, _ws(s, j + 1, n), n)
            if not m:
                return None
            i = m.end()
        elif s.startswith("->", j, n):
            m = _IDENT.match(s, _ws(s, j + 2, n), n)
            if not m:
                return None
            i = m.end()
        elif s.startswith("++", j, n) or s.startswith("--", j, n):
            i = j + 2
        else:
            return i


def _make(elem: str, n: str) -> str:
    return f"__mlxsci_make<{elem},{n}>"


_CTOR_CALL = re.compile(rf"(?<![\w.:])(?:{_VTYPE}|{_VECTPL})(?P<ws>\s*)(?P<open>[({{])")
_STATIC_CAST = re.compile(rf"\bstatic_cast\s*<\s*(?:{_VTYPE}|{_VECTPL})\s*>(?P<ws>\s*)\(")
_C_CAST = re.compile(rf"\(\s*(?:{_VTYPE}|{_VECTPL})\s*\)")
_COPY_LIST_INIT = re.compile(
    rf"(?<![\w.:])(?:{_VTYPE}|{_VECTPL})\s+(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<open>\{{)"
)
_DIRECT_INIT = re.compile(
    rf"(?<![\w.:])(?:{_VTYPE}|{_VECTPL})(?P<ws1>\s+)(?P<name>[A-Za-z_]\w*)(?P<ws2>\s*)(?P<open>[({{])"
)


def _elem_n(m: re.Match) -> tuple[str, str]:
    if m.group("elem"):
        return m.group("elem"), m.group("n")
    return m.group("telem"), m.group("tn")


# `T (name)`: a parenthesised declarator, which C++ (and so MSL) reads as a
# parameter wherever it can: `float4 v(float(i));` declares a function.
_PAREN_DECLARATOR = re.compile(r"\s*[A-Za-z_]\w*\s*\(\s*[A-Za-z_]\w*\s*\)\s*$")
_TYPE_THEN_NAME = re.compile(r"\s*[A-Za-z_][\w:]*\s+[A-Za-z_]\w*\s*(?:$|[=\[])")
_BARE_NAME = re.compile(r"\s*[A-Za-z_][\w:]*\s*$")


def _item_kind(s: str, a: int, b: int) -> str:
    """What one comma-separated item s[a:b] of `float4 name(...)` is:
    "param" (it declares a parameter: `float a`, `device float* p`, `uint`,
    `float (x)`), "value" (`uint(4)`, `float2(a, b)`, `int(a) * 2`, `1.0f`,
    `-x`) or "either" (a bare name: a variable, or the type of an unnamed
    parameter). Read in place, never copied: items hold nested
    constructors, and a copy per level was quadratic in the nesting."""

    def ws(k: int) -> int:
        return min(skip_ws(s, k), b)

    m = _IDENT.match(s, ws(a), b)
    if not m:  # no identifier first
        return "value"
    after = ws(m.end())
    if m.group(0) == "metal" and s.startswith("::", after, b):
        # metal::float4 (a type) or metal::max(a, b) (a value): judge the name
        m = _IDENT.search(s, after + 2, b) or m
    first = m.group(0)
    if not (first in _DECL_WORDS or _VECTOR_TYPE_WORD.fullmatch(first)):
        if _TYPE_THEN_NAME.match(s, a, b):
            return "param"
        return "either" if _BARE_NAME.match(s, a, b) else "value"
    rest = ws(m.end())
    if s.startswith("{", rest, b):
        return "value"
    if s.startswith("(", rest, b):
        inside = ws(rest + 1)
        declarator = _PAREN_DECLARATOR.match(s, a, b) or (inside < b and s[inside] in "*&^")
        return "param" if declarator else "value"
    return "param"


def _top_items(masked: str, start: int, end: int) -> list[tuple[int, int]]:
    """`split_top_level` of a span whose brackets all close inside it (the inside
    of a matched bracket), stepping over each nested group at once."""
    parts, angle, i0, i = [], 0, start, start
    while i < end:
        c = masked[i]
        if c == "<":
            angle += 1
        elif c == ">":
            angle -= 1
        elif angle == 0 and c == ",":
            parts.append((i0, i))
            i0 = i + 1
        i = next_same_level(masked, i, end)
    parts.append((i0, end))
    return parts


def _looks_like_parameters(masked: str, open_i: int, close_i: int) -> bool:
    """Whether the parenthesised text after `float4 name` declares a function:
    as in C++, when every item can declare a parameter. So
    `constexpr uint3 M(uint(4), 2, 3)` and `float4 v(float(i), 0.0f, 0.0f, 1.0f)`
    are vector constants, `float4 v(a, b)` is one too, and
    `float4 f(float a, uint2 b)` is a function."""
    after = masked[skip_ws(masked, close_i + 1) : skip_ws(masked, close_i + 1) + 6]
    if after.startswith("{") or after.startswith("->") or after.startswith("const"):
        return True
    if not _NONSPACE.search(masked, open_i + 1, close_i):
        return True  # float4 f(); is a function declaration in C++ too
    kinds = {_item_kind(masked, a, b) for a, b in _top_items(masked, open_i + 1, close_i)}
    return "value" not in kinds and "param" in kinds


def rewrite_constructors(text: str) -> str:
    """Every vector constructor of `text` as a call of `__mlxsci_make<T, N>`
    (the forms in this module's docstring), lines kept."""
    # Iterate: each pass handles non-overlapping matches; nested constructors
    # (float4(float2(a, b), c, d)) are all found on the first pass because
    # only the type name and the opening bracket are replaced.
    masked = mask_comments_and_strings(text)
    ed = Edits()
    done: set[int] = set()  # where a rewritten construct's bracket (or cast) starts
    _static_casts(masked, ed, done)
    _direct_inits(masked, ed, done)
    _copy_list_inits(masked, ed, done)
    _constructor_calls(masked, ed, done)
    text = ed.apply(text)

    return _rewrite_c_casts(text)


def _static_casts(masked: str, ed: Edits, done: set[int]) -> None:
    """static_cast<float4>(x) -> __mlxsci_make<float,4>(x)."""
    for m in _STATIC_CAST.finditer(masked):
        elem, n = _elem_n(m)
        ed.add(m.start(), m.end(), _make(elem, n) + m.group("ws") + "(", m.group(0))
        done.add(m.start())


def _direct_inits(masked: str, ed: Edits, done: set[int]) -> None:
    """float4 v(args) / float4 v{args} (direct initialisation) -> float4 v =
    __mlxsci_make<float,4>(args), where (args) are values, not parameters."""
    for m in _DIRECT_INIT.finditer(masked):
        name = m.group("name")
        if name in ("operator",) or name in _KEYWORDS_BEFORE_EXPR:
            continue
        open_i = m.start("open")
        close_i = match_bracket(masked, open_i)
        if close_i is None:
            continue
        if masked[open_i] == "(" and _looks_like_parameters(masked, open_i, close_i):
            continue
        if masked[open_i] == "{":
            # float4 v{...}: only where it ends a declarator (; , ) )
            at = skip_ws(masked, close_i + 1)
            nxt = masked[at : at + 1]
            if nxt not in (";", ","):
                continue
        elem, n = _elem_n(m)
        # keep the type and the name; insert "= make" and turn {} into ()
        ed.add(open_i, open_i + 1, " = " + _make(elem, n) + "(", "")
        if masked[open_i] == "{":
            ed.add(close_i, close_i + 1, ")", "")
        done.add(open_i)


def _copy_list_inits(masked: str, ed: Edits, done: set[int]) -> None:
    """float4 v = {a.xy, b, c}: clang takes only scalars in a vector's braces.
    Rewritten when there are two or more items; {s} keeps C++ meaning."""
    for m in _COPY_LIST_INIT.finditer(masked):
        open_i = m.start("open")
        close_i = match_bracket(masked, open_i)
        if close_i is None or open_i in done:
            continue
        # the top-level commas, stepping over nested groups (a walk over
        # every character inside was quadratic in the nesting)
        items, i = 1, open_i + 1
        while i < close_i:
            items += masked[i] == ","
            i = next_same_level(masked, i, close_i)
        last = prev_nonspace(masked, close_i)
        if items < 2 or (last > open_i and masked[last] == ","):
            continue
        ed.add(open_i, open_i + 1, _make(*_elem_n(m)) + "(", "")
        ed.add(close_i, close_i + 1, ")", "")
        done.add(open_i)


def _constructor_calls(masked: str, ed: Edits, done: set[int]) -> None:
    """float4(args) and float4{args} (a functional cast or a temporary) ->
    __mlxsci_make<float,4>(args), except where no constructor is meant
    (`operator float4()`, `struct X : float4 {`, `-> float4 {`)."""
    for m in _CTOR_CALL.finditer(masked):
        open_i = m.start("open")
        if open_i in done:
            continue
        before = prev_nonspace(masked, m.start())
        if before >= 0 and word_before(masked, before) == "operator":
            continue  # operator float4() is a conversion function
        if masked[open_i] == "{":
            close_i = match_bracket(masked, open_i)
            if close_i is None:
                continue
            # "struct X : float4 {" or "-> float4 {" are not constructors
            if before >= 0 and (
                masked[before] == ":" and not masked[max(0, before - 1) : before + 1] == "::"
            ):
                continue
            if masked[max(0, before - 1) : before + 1] == "->":
                continue
            if before >= 0 and masked[before] == ")":
                continue  # float4 f() const -> no; "(...) float4 {" is not valid anyway
            ed.add(
                m.start(),
                open_i + 1,
                _make(*_elem_n(m)) + m.group("ws") + "(",
                masked[m.start() : open_i + 1],
            )
            ed.add(close_i, close_i + 1, ")", "")
        else:
            ed.add(
                m.start(),
                open_i + 1,
                _make(*_elem_n(m)) + m.group("ws") + "(",
                masked[m.start() : open_i + 1],
            )


def _rewrite_c_casts(text: str) -> str:
    """(float4)expr: a C-style conversion, on a pass of its own because it
    wraps an operand that may itself contain rewritten constructors.

    Each cast is judged on the text as the casts before it left it, as a
    rewrite of one cast per pass (a pass per cast, each over the whole text,
    was quadratic in the number of casts) would: a cast rewritten before
    turned its `(T)` into `make(`, so a cast right after it follows a `(`;
    and it closed its operand with a `)`, where the operand of a cast inside
    it must end (`_parse_cast_operand`'s limit)."""
    masked = mask_comments_and_strings(text)
    ed = Edits()
    opened: set[int] = set()  # where a rewritten cast's `(T)` ended: a `(` now
    enclosing: list[int] = []  # ends of the rewritten operands around here
    for m in _C_CAST.finditer(masked):
        while enclosing and enclosing[-1] <= m.start():
            enclosing.pop()
        before = prev_nonspace(masked, m.start())
        if before >= 0 and before not in opened:
            ch = masked[before]
            if ch.isalnum() or ch == "_":
                if word_before(masked, before) not in _KEYWORDS_BEFORE_EXPR:
                    continue  # sizeof(float4), f(float4): not a cast
            elif ch in ")]":
                continue
        end = _parse_cast_operand(masked, m.end(), enclosing[-1] if enclosing else None)
        if end is None:
            continue
        elem, n = _elem_n(m)
        ed.add(m.start(), m.end(), _make(elem, n) + "(", masked[m.start() : m.end()])
        ed.add(end, end, ")", "")
        opened.add(m.end() - 1)
        enclosing.append(end)
    return ed.apply(text)
