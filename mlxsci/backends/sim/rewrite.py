"""Source-to-source rewrite that lets clang (C++17) compile Metal kernel text.

`rewrite_metal(text)` returns text with the same number of lines, every
construct left on the line it was on, so compiler diagnostics map back to the
candidate's lines. Comments, string and character literals are never touched.
What it rewrites (everything else is handled by runtime/metal_prelude.h):

- vector constructors, which C++ cannot parse as calls on a vector type:
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
- half literals: 1.5h -> 1.5f16, 2h -> 2.0f16.
- threadgroup variable declarations at the start of a statement whose
  declarator is not a pointer or reference:
    threadgroup float tile[18][18];
      -> typedef float __sim_tgt_tile[18][18]; __SIM_TG_BIND(tile, "float[18][18]");
  `tile` becomes a reference to an array the runtime maps between guard
  pages, so an index past its bound is reported with the array's name
  (runtime/sim_runtime.h). A declaration that is not `T name[dims], ...;`
  (an initialiser, say) becomes a plain static: `__SIM_THREADGROUP T x = v;`.
  `threadgroup float* p` (and parameters) keep the keyword, which the prelude
  defines away.
"""
from __future__ import annotations

import re

__all__ = ["rewrite_metal", "rewrite_cuda", "uses_dynamic_shared", "mask_comments_and_strings",
           "VECTOR_ELEMENT_TYPES"]

# MSL vector element type names (the NAME in NAMEn).
VECTOR_ELEMENT_TYPES = ("bool", "char", "uchar", "short", "ushort", "int", "uint",
                        "long", "ulong", "half", "bfloat", "float")
_ELEM = "|".join(sorted(VECTOR_ELEMENT_TYPES, key=len, reverse=True))
_VTYPE = rf"(?:metal\s*::\s*)?(?P<elem>{_ELEM})(?P<n>[234])"
# vec<T, N> (T may be qualified, N may be a template parameter or a number)
_VECTPL = r"(?:metal\s*::\s*)?vec\s*<\s*(?P<telem>[A-Za-z_][\w:]*)\s*,\s*(?P<tn>[A-Za-z_0-9]\w*)\s*>"

# Identifiers after which "(float4)x" cannot be a call argument list.
_KEYWORDS_BEFORE_EXPR = {"return", "case", "else", "do", "throw", "co_return", "co_yield"}

# First words that make "(...)" after "float4 name" a parameter list.
_DECL_WORDS = set(VECTOR_ELEMENT_TYPES) | {
    "const", "volatile", "device", "constant", "thread", "threadgroup", "unsigned",
    "signed", "struct", "class", "typename", "auto", "void", "double", "size_t",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
    "uint64_t", "float16_t", "bfloat16_t", "complex64_t", "atomic", "atomic_int",
    "atomic_uint", "atomic_float", "vec", "metal", "ptrdiff_t",
}
_VECTOR_TYPE_WORD = re.compile(rf"(?:packed_)?(?:{_ELEM})[234]")


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


def _match(masked: str, i: int) -> int | None:
    """Index of the bracket closing the one at masked[i], or None."""
    stack = [masked[i]]
    j = i + 1
    n = len(masked)
    while j < n:
        c = masked[j]
        if c in _CLOSE:
            stack.append(c)
        elif c in ")]}":
            if _CLOSE[stack[-1]] != c:
                return None
            stack.pop()
            if not stack:
                return j
        j += 1
    return None


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i].isspace():
        i += 1
    return i


def _prev_nonspace(s: str, i: int) -> int:
    """Index of the last non-space character before i, or -1."""
    i -= 1
    while i >= 0 and s[i].isspace():
        i -= 1
    return i


def _word_before(s: str, i: int) -> str:
    """The identifier that ends at index i (inclusive), or ''."""
    j = i
    while j >= 0 and (s[j].isalnum() or s[j] == "_"):
        j -= 1
    return s[j + 1:i + 1]


_IDENT = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[A-Za-z0-9_]*")


def _parse_cast_operand(s: str, i: int) -> int | None:
    """End (exclusive) of the unary expression starting at i, or None."""
    n = len(s)
    i = _skip_ws(s, i)
    # prefix operators
    while i < n:
        if s.startswith("++", i) or s.startswith("--", i):
            i = _skip_ws(s, i + 2)
        elif s[i] in "-+!~*&":
            i = _skip_ws(s, i + 1)
        else:
            break
    if i >= n:
        return None
    # primary expression
    if s[i] == "(":
        j = _match(s, i)
        if j is None:
            return None
        i = j + 1
    elif s[i].isdigit() or (s[i] == "." and i + 1 < n and s[i + 1].isdigit()):
        m = _NUMBER.match(s, i)
        i = m.end()
    elif s[i].isalpha() or s[i] == "_":
        m = _IDENT.match(s, i)
        i = m.end()
        while True:
            j = _skip_ws(s, i)
            if s.startswith("::", j):
                m = _IDENT.match(s, _skip_ws(s, j + 2))
                if not m:
                    return None
                i = m.end()
                continue
            # template arguments directly followed by a call: as_type<uint>(x)
            if j < n and s[j] == "<":
                m = re.match(r"<[\w\s,:<>]*>\s*\(", s[j:])
                if m:
                    i = j + m.end() - 1
                    k = _match(s, i)
                    if k is None:
                        return None
                    i = k + 1
            break
    else:
        return None
    # postfix operators
    while True:
        j = _skip_ws(s, i)
        if j < n and s[j] in "([":
            k = _match(s, j)
            if k is None:
                return None
            i = k + 1
        elif j < n and s[j] == "." and not (j + 1 < n and s[j + 1].isdigit()):
            m = _IDENT.match(s, _skip_ws(s, j + 1))
            if not m:
                return None
            i = m.end()
        elif s.startswith("->", j):
            m = _IDENT.match(s, _skip_ws(s, j + 2))
            if not m:
                return None
            i = m.end()
        elif s.startswith("++", j) or s.startswith("--", j):
            i = j + 2
        else:
            return i


class _Edits:
    """Replacements collected on one pass, applied back to front."""

    def __init__(self) -> None:
        self.items: list[tuple[int, int, str]] = []

    def add(self, start: int, end: int, new: str, old: str) -> None:
        # keep every newline of the replaced span so lines do not move
        self.items.append((start, end, new + "\n" * old.count("\n")))

    def apply(self, text: str) -> str:
        last = len(text) + 1
        for start, end, new in sorted(self.items, key=lambda t: t[0], reverse=True):
            if end > last:  # overlapping edit: skip (the next pass redoes it)
                continue
            text = text[:start] + new + text[end:]
            last = start
        return text


def _make(elem: str, n: str) -> str:
    return f"__mlxsci_make<{elem},{n}>"


_HALF_LIT = re.compile(r"(?<![\w.])(?P<num>\d+\.\d*|\.\d+|\d+)(?P<exp>[eE][+-]?\d+)?[hH](?![\w.])")


def _rewrite_half_literals(text: str) -> str:
    masked = mask_comments_and_strings(text)
    ed = _Edits()
    for m in _HALF_LIT.finditer(masked):
        num = m.group("num")
        if "." not in num and not m.group("exp"):
            num += ".0"
        ed.add(m.start(), m.end(), num + (m.group("exp") or "") + "f16", m.group(0))
    return ed.apply(text)


_CTOR_CALL = re.compile(rf"(?<![\w.:])(?:{_VTYPE}|{_VECTPL})(?P<ws>\s*)(?P<open>[({{])")
_STATIC_CAST = re.compile(rf"\bstatic_cast\s*<\s*(?:{_VTYPE}|{_VECTPL})\s*>(?P<ws>\s*)\(")
_C_CAST = re.compile(rf"\(\s*(?:{_VTYPE}|{_VECTPL})\s*\)")
_COPY_LIST_INIT = re.compile(rf"(?<![\w.:])(?:{_VTYPE}|{_VECTPL})\s+(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<open>\{{)")
_DIRECT_INIT = re.compile(rf"(?<![\w.:])(?:{_VTYPE}|{_VECTPL})(?P<ws1>\s+)(?P<name>[A-Za-z_]\w*)(?P<ws2>\s*)(?P<open>[({{])")


def _elem_n(m: re.Match) -> tuple[str, str]:
    if m.group("elem"):
        return m.group("elem"), m.group("n")
    return m.group("telem"), m.group("tn")


# `T (name)`: a parenthesised declarator, which C++ (and so MSL) reads as a
# parameter wherever it can: `float4 v(float(i));` declares a function.
_PAREN_DECLARATOR = re.compile(r"\s*[A-Za-z_]\w*\s*\(\s*[A-Za-z_]\w*\s*\)\s*$")
_TYPE_THEN_NAME = re.compile(r"\s*[A-Za-z_][\w:]*\s+[A-Za-z_]\w*\s*(?:$|[=\[])")
_BARE_NAME = re.compile(r"\s*[A-Za-z_][\w:]*\s*$")


def _item_kind(item: str) -> str:
    """What one comma-separated item of `float4 name(...)` is: "param" (it
    declares a parameter: `float a`, `device float* p`, `uint`, `float (x)`),
    "value" (`uint(4)`, `float2(a, b)`, `int(a) * 2`, `1.0f`, `-x`) or
    "either" (a bare name: a variable, or the type of an unnamed parameter)."""
    m = _IDENT.search(item)
    if not m or item[:m.start()].strip():
        return "value"
    if m.group(0) == "metal" and item[m.end():].lstrip().startswith("::"):
        # metal::float4 (a type) or metal::max(a, b) (a value): judge the name
        m = _IDENT.search(item, item.index("::", m.end()) + 2) or m
    first = m.group(0)
    if not (first in _DECL_WORDS or _VECTOR_TYPE_WORD.fullmatch(first)):
        if _TYPE_THEN_NAME.match(item):
            return "param"
        return "either" if _BARE_NAME.match(item) else "value"
    rest = item[m.end():].lstrip()
    if rest.startswith("{"):
        return "value"
    if rest.startswith("("):
        declarator = _PAREN_DECLARATOR.match(item) or rest[1:].lstrip()[:1] in ("*", "&", "^")
        return "param" if declarator else "value"
    return "param"


def _looks_like_parameters(masked: str, open_i: int, close_i: int) -> bool:
    """Whether the parenthesised text after `float4 name` declares a function:
    as in C++, when every item can declare a parameter. So
    `constexpr uint3 M(uint(4), 2, 3)` and `float4 v(float(i), 0.0f, 0.0f, 1.0f)`
    are vector constants, `float4 v(a, b)` is one too, and
    `float4 f(float a, uint2 b)` is a function."""
    inner = masked[open_i + 1:close_i]
    after = masked[_skip_ws(masked, close_i + 1):_skip_ws(masked, close_i + 1) + 6]
    if after.startswith("{") or after.startswith("->") or after.startswith("const"):
        return True
    if not inner.strip():
        return True  # float4 f(); is a function declaration in C++ too
    kinds = {_item_kind(masked[a:b]) for a, b in _split_top(masked, open_i + 1, close_i)}
    return "value" not in kinds and "param" in kinds


def _rewrite_constructors(text: str) -> str:
    # Iterate: each pass handles non-overlapping matches; nested constructors
    # (float4(float2(a, b), c, d)) are all found on the first pass because
    # only the type name and the opening bracket are replaced.
    masked = mask_comments_and_strings(text)
    ed = _Edits()
    done: set[int] = set()

    # static_cast<float4>(x)
    for m in _STATIC_CAST.finditer(masked):
        elem, n = _elem_n(m)
        ed.add(m.start(), m.end(), _make(elem, n) + m.group("ws") + "(", m.group(0))
        done.add(m.start())

    # float4 v(args) / float4 v{args}: direct initialisation
    for m in _DIRECT_INIT.finditer(masked):
        name = m.group("name")
        if name in ("operator",) or name in _KEYWORDS_BEFORE_EXPR:
            continue
        open_i = m.start("open")
        close_i = _match(masked, open_i)
        if close_i is None:
            continue
        if masked[open_i] == "(" and _looks_like_parameters(masked, open_i, close_i):
            continue
        if masked[open_i] == "{":
            # float4 v{...}: only where it ends a declarator (; , ) )
            nxt = masked[_skip_ws(masked, close_i + 1):][:1]
            if nxt not in (";", ","):
                continue
        elem, n = _elem_n(m)
        # keep the type and the name; insert "= make" and turn {} into ()
        ed.add(open_i, open_i + 1, " = " + _make(elem, n) + "(", "")
        if masked[open_i] == "{":
            ed.add(close_i, close_i + 1, ")", "")
        done.add(open_i)

    # float4 v = {a.xy, b, c}: clang takes only scalars in a vector's braces.
    # Rewritten when there are two or more items; {s} keeps C++ meaning.
    for m in _COPY_LIST_INIT.finditer(masked):
        open_i = m.start("open")
        close_i = _match(masked, open_i)
        if close_i is None or open_i in done:
            continue
        inner = masked[open_i + 1:close_i]
        depth, items = 0, 1
        for ch in inner:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == 0:
                items += 1
        if items < 2 or inner.rstrip().endswith(","):
            continue
        ed.add(open_i, open_i + 1, _make(*_elem_n(m)) + "(", "")
        ed.add(close_i, close_i + 1, ")", "")
        done.add(open_i)

    # float4(args) and float4{args}
    for m in _CTOR_CALL.finditer(masked):
        open_i = m.start("open")
        if open_i in done:
            continue
        before = _prev_nonspace(masked, m.start())
        if before >= 0 and _word_before(masked, before) == "operator":
            continue  # operator float4() is a conversion function
        if masked[open_i] == "{":
            close_i = _match(masked, open_i)
            if close_i is None:
                continue
            # "struct X : float4 {" or "-> float4 {" are not constructors
            if before >= 0 and (masked[before] == ":" and not masked[max(0, before - 1):before + 1] == "::"):
                continue
            if masked[max(0, before - 1):before + 1] == "->":
                continue
            if before >= 0 and masked[before] == ")":
                continue  # float4 f() const -> no; "(...) float4 {" is not valid anyway
            ed.add(m.start(), open_i + 1, _make(*_elem_n(m)) + m.group("ws") + "(",
                   masked[m.start():open_i + 1])
            ed.add(close_i, close_i + 1, ")", "")
        else:
            ed.add(m.start(), open_i + 1, _make(*_elem_n(m)) + m.group("ws") + "(",
                   masked[m.start():open_i + 1])
    text = ed.apply(text)

    # (float4)expr: a C-style conversion. Done on a separate pass because it
    # wraps an operand that may itself contain rewritten constructors.
    while True:
        masked = mask_comments_and_strings(text)
        ed = _Edits()
        for m in _C_CAST.finditer(masked):
            before = _prev_nonspace(masked, m.start())
            if before >= 0:
                ch = masked[before]
                if ch.isalnum() or ch == "_":
                    if _word_before(masked, before) not in _KEYWORDS_BEFORE_EXPR:
                        continue  # sizeof(float4), f(float4): not a cast
                elif ch in ")]":
                    continue
            end = _parse_cast_operand(masked, m.end())
            if end is None:
                continue
            elem, n = _elem_n(m)
            ed.add(m.start(), m.end(), _make(elem, n) + "(", masked[m.start():m.end()])
            ed.add(end, end, ")", "")
            break  # one at a time: operands may contain further casts
        if not ed.items:
            break
        text = ed.apply(text)
    return text


_TG = re.compile(r"\bthreadgroup\b")
# `name[d1][d2]` ending a declaration part (dims may be absent).
_DECLARATOR = re.compile(r"\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]*\]\s*)*)$")
_NEXT_DECLARATOR = re.compile(r"\s*" + _DECLARATOR.pattern)


def _split_top(masked: str, start: int, end: int) -> list[tuple[int, int]]:
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


def _guarded_decl(masked: str, kw_start: int, kw_end: int) -> tuple[int, str] | None:
    """The guarded form of the declaration whose keyword (`threadgroup`,
    `__shared__`) spans [kw_start, kw_end): (end of the statement, its
    replacement), or None when it is not `T name[dims], name2[dims];`."""
    semi = masked.find(";", kw_end)
    if semi < 0:
        return None
    body = masked[kw_end:semi]
    if any(c in body for c in "={}*&"):
        return None
    parts = _split_top(masked, kw_end, semi)
    m0 = _DECLARATOR.search(masked, parts[0][0], parts[0][1])
    if not m0 or not masked[parts[0][0]:m0.start()].strip():
        return None
    typ = " ".join(masked[parts[0][0]:m0.start()].split())   # comments blanked
    decls = [m0]
    for a, b in parts[1:]:
        m = _NEXT_DECLARATOR.fullmatch(masked, a, b)
        if not m:
            return None
        decls.append(m)
    out = []
    for m in decls:
        name = m.group("name")
        dims = "".join(masked[m.start("dims"):m.end("dims")].split())
        if "[]" in dims:
            return None
        shown = (typ + dims).replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'typedef {typ} __sim_tgt_{name}{dims}; __SIM_TG_BIND({name}, "{shown}");')
    return semi + 1, " ".join(out)


def _starts_statement(masked: str, i: int) -> bool:
    """Whether masked[i] begins a statement (or follows a preprocessor line)."""
    before = _prev_nonspace(masked, i)
    if before < 0 or masked[before] in ";{}":
        return True
    # allow a preceding preprocessor line ("#pragma ...\n threadgroup")
    line_start = masked.rfind("\n", 0, i) + 1
    prev_line_start = masked.rfind("\n", 0, max(0, line_start - 1)) + 1
    return (masked[line_start:i].strip() == ""
            and masked[prev_line_start:line_start].lstrip().startswith("#"))


def _rewrite_threadgroup_decls(text: str) -> str:
    masked = mask_comments_and_strings(text)
    ed = _Edits()
    for m in _TG.finditer(masked):
        if not _starts_statement(masked, m.start()):
            continue
        # scan the type up to the declarator; template arguments may hold commas
        i = m.end()
        depth = 0
        pointer = False
        while i < len(masked):
            c = masked[i]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
            elif depth == 0 and c in ";=[({,":
                break
            elif c in "*&":
                pointer = True
                break
            i += 1
        if pointer:
            continue
        guarded = _guarded_decl(masked, m.start(), m.end())
        if guarded:
            end, new = guarded
            ed.add(m.start(), end, new, text[m.start():end])
        else:
            ed.add(m.start(), m.end(), "__SIM_THREADGROUP", "")
    return ed.apply(text)


def rewrite_metal(text: str) -> str:
    """Rewrite Metal kernel text so clang compiles it as C++ (line-preserving)."""
    out = _rewrite_half_literals(text)
    out = _rewrite_constructors(out)
    out = _rewrite_threadgroup_decls(out)
    assert out.count("\n") == text.count("\n"), "rewrite_metal changed the line count"
    return out


# ---------------------------------------------------------------------- CUDA
# `extern __shared__ T name[];` (dynamic shared memory; the type may carry
# __align__(n) or template arguments), one statement on one line.
_EXTERN_SHARED = re.compile(
    r"\bextern\s+__shared__\s+(?P<type>[^;\[\]\n]*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;")
_STATIC_SHARED = re.compile(r"\bstatic(?P<ws>\s+)(?=__shared__\b)")
_SHARED = re.compile(r"\b__shared__\b")


# reinterpret_cast to a pointer to a CUDA vector type aligned beyond its element.
_VECTOR_CAST = re.compile(r"\breinterpret_cast(?=\s*<\s*(?:(?:const|volatile)\s+)*"
                          r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[24]"
                          r"\s*(?:const\s*|volatile\s*)*\*\s*>)")


def uses_dynamic_shared(text: str) -> bool:
    """Whether the CUDA text declares `extern __shared__` memory (outside comments)."""
    return bool(_EXTERN_SHARED.search(mask_comments_and_strings(text)))


def rewrite_cuda(text: str) -> str:
    """Rewrite CUDA kernel text for the simulator (line-preserving):

        __shared__ float tile[16][17];   -> __SIM_THREADGROUP float tile[16][17];
        static __shared__ int n;         -> __SIM_THREADGROUP int n;
        extern __shared__ float smem[];  -> float* const smem = (decltype(smem))(__sim_dyn_smem);
        reinterpret_cast<float4*>(p)     -> __sim_cu_aligned<float4*>(p)

    __SIM_THREADGROUP is a static in the `sim_tgmem` section, shared by the
    block's threads and refilled with garbage before each block; the dynamic
    buffer `__sim_dyn_smem` (shared_memory bytes) is defined by the dialect.
    A `__shared__` declaration of the form `T name[dims], ...;` at the start
    of a statement gets guard pages instead, as Metal's threadgroup arrays do:
        __shared__ float tile[16][17];
          -> typedef float __sim_tgt_tile[16][17]; __SIM_TG_BIND(tile, "float[16][17]");
    Comments and string literals are never touched.
    """
    masked = mask_comments_and_strings(text)
    ed = _Edits()
    taken: list[tuple[int, int]] = []
    for m in _EXTERN_SHARED.finditer(masked):
        typ = text[m.start("type"):m.end("type")].strip()
        name = m.group("name")
        ed.add(m.start(), m.end(), f"{typ}* const {name} = (decltype({name}))(__sim_dyn_smem);", "")
        taken.append((m.start(), m.end()))
    for m in _SHARED.finditer(masked):
        if any(a <= m.start() < b for a, b in taken):
            continue
        # `static` and `volatile` may come first: static goes, volatile joins the type
        start, qual = m.start(), ""
        while True:
            before = _prev_nonspace(masked, start)
            word = _word_before(masked, before) if before >= 0 else ""
            if word not in ("static", "volatile"):
                break
            start = before - len(word) + 1
            qual = "volatile " if word == "volatile" else qual
        guarded = _guarded_decl(masked, m.start(), m.end()) if _starts_statement(masked, start) else None
        if guarded:
            end, new = guarded
            new = new.replace("typedef ", "typedef " + qual) if qual else new
            ed.add(start, end, new, text[start:end])
            taken.append((start, end))
        else:
            ed.add(m.start(), m.end(), "__SIM_THREADGROUP", "")
    for m in _STATIC_SHARED.finditer(masked):
        if not any(a <= m.start() < b for a, b in taken):
            ed.add(m.start(), m.end(), "", m.group(0))
    # checked, so a misaligned vector access fails as on a GPU (cuda_prelude.h)
    for m in _VECTOR_CAST.finditer(masked):
        ed.add(m.start(), m.end(), "__sim_cu_aligned", "")
    out = ed.apply(text)
    assert out.count("\n") == text.count("\n"), "rewrite_cuda changed the line count"
    return out
