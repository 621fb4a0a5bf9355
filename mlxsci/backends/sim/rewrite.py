"""Source-to-source rewrites that let clang (C++17) compile Metal and CUDA
kernel text.

`rewrite_metal(text)` returns text with the same number of lines, every
construct left on the line it was on, so compiler diagnostics map back to the
candidate's lines. Comments, string and character literals are never touched.
What it rewrites (everything else is handled by runtime/metal_prelude.h):

- vector constructors, which C++ cannot parse as calls on a vector type
  (float4(a.xy, b, c), (float4)i4, float4 v = {a.xy, b, c}, ...): see
  vector_constructors.py, which holds that rewrite.
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
  defines away. A bound may be any expression (macros, template parameters,
  sizeof, `?:`): the typedef leaves it to clang. A declaration in a #define
  body is rewritten in place, its type named `__SIM_TGT(name)` so that a
  macro parameter is substituted before the name is pasted; a macro that
  stands for the keyword alone (`#define TG threadgroup`) declares as the
  keyword does.

`rewrite_cuda(text)` gives CUDA's `__shared__` declarations the same
guarded form (see its docstring); both dialects' rewrites live here because
they share that declaration rewrite.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import NamedTuple

from mlxsci.backends.sim.source_scan import (
    Edits,
    mask_comments_and_strings,
    prev_nonspace,
    split_top_level,
    word_before,
)
from mlxsci.backends.sim.vector_constructors import rewrite_constructors

__all__ = ["rewrite_metal", "rewrite_cuda", "uses_dynamic_shared"]


_HALF_LIT = re.compile(r"(?<![\w.])(?P<num>\d+\.\d*|\.\d+|\d+)(?P<exp>[eE][+-]?\d+)?[hH](?![\w.])")


def _rewrite_half_literals(text: str) -> str:
    masked = mask_comments_and_strings(text)
    ed = Edits()
    for m in _HALF_LIT.finditer(masked):
        num = m.group("num")
        if "." not in num and not m.group("exp"):
            num += ".0"
        ed.add(m.start(), m.end(), num + (m.group("exp") or "") + "f16", m.group(0))
    return ed.apply(text)


_TG = re.compile(r"\bthreadgroup\b")
_SPLICE = re.compile(r"\\[ \t\r]*(?=\n)")
# `#define NAME` or `#define NAME(params)` (params on the directive's line)
_DEFINE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)(?P<params>\([^()\n]*\))?", re.M
)


class _Define(NamedTuple):
    """One #define directive: its body is [body, end) (end: the newline that
    ends the logical line, or the text's end)."""

    start: int
    body: int
    end: int
    params: frozenset[str]  # a function-like macro's named parameters


class _Source:
    """One text as the declaration rewrite reads it.

    `view` is the text with comments and literals blanked and the backslash
    of every line splice blanked too (offsets kept), so a declaration
    continued over lines, as in a #define, reads as one; `defines` are the
    #define directives in order; `aliases` maps the names of object-like
    macros that stand for the keyword and maybe a type (`#define TG
    threadgroup`, `#define TGF threadgroup float`, `#define TG2 TG`) to that
    type: their uses are declarations as the keyword's are (a Metal
    `threadgroup` left in a macro body is defined away: the array would be
    private to each thread).
    """

    def __init__(self, text: str, keyword: str):
        self.masked = mask_comments_and_strings(text)
        splices = set()

        def blank(m: re.Match) -> str:
            splices.add(m.end())
            return " " * len(m.group())

        self.view = _SPLICE.sub(blank, self.masked)
        # the text itself with the same splices blanked: a declaration's
        # literals (`t['A']`) are copied from it, not from the blanked view
        chars = list(text)
        for m in _SPLICE.finditer(self.masked):
            chars[m.start() : m.end()] = " " * (m.end() - m.start())
        self.spliced = "".join(chars)
        self.defines: list[_Define] = []
        self.aliases: dict[str, str] = {}
        self.alias_defines: set[int] = set()  # their starts
        for m in _DEFINE.finditer(self.view):
            if self.defines and m.start() < self.defines[-1].end:
                continue  # a `#define` on a continuation line of another
            end = m.end()
            while True:  # the logical line: through every spliced newline
                end = self.view.find("\n", end)
                if end < 0:
                    end = len(self.view)
                    break
                if end not in splices:
                    break
                end += 1
            params = frozenset(p.strip() for p in (m.group("params") or "()")[1:-1].split(","))
            self.defines.append(_Define(m.start(), m.end(), end, params - {"", "..."}))
            body = self.view[m.end() : end].strip()
            first = _WORD.match(body)
            if m.group("params") or not first:
                continue
            rest = body[first.end() :]
            # a type is added once along a chain (`#define B A float` of an A
            # holding a type is none), so no alias holds more than one body
            # (types grown along a chain were quadratic in its length)
            base = self.aliases.get(first.group(), "" if first.group() == keyword else None)
            if base is not None and (not rest.strip() or (not base and _plain_type(rest))):
                self.aliases[m.group("name")] = _squeeze(base + " " + rest)
                self.alias_defines.add(m.start())
        self._starts = [d.start for d in self.defines]
        self._scopes = _namespace_scopes(self.view)
        self._keyword = re.compile(r"\b" + re.escape(keyword) + r"\b")
        self._words = {keyword, *self.aliases}

    def keywords(self) -> Iterator[re.Match]:
        """The keyword's and its aliases' occurrences in the view, in order.
        With aliases, every identifier is looked up in a set: a regex of
        the alternatives would try each one at every position (a text
        defining thousands of aliases took time quadratic in its length)."""
        if not self.aliases:
            return self._keyword.finditer(self.view)
        return (m for m in _WORD.finditer(self.view) if m.group() in self._words)

    def at_namespace_scope(self, pos: int) -> bool:
        """Whether `pos` lies outside every function, class and block: at
        file scope or in namespaces only (a CUDA header's file-scope
        __shared__ array: MLX's text puts the header in `namespace
        mlx::core::cu`)."""
        positions, outside = self._scopes
        k = bisect.bisect_right(positions, pos) - 1
        return outside[k] if k >= 0 else True

    def define_at(self, pos: int) -> _Define | None:
        """The #define whose logical line holds `pos`, or None."""
        k = bisect.bisect_right(self._starts, pos) - 1
        if k >= 0 and pos < self.defines[k].end:
            return self.defines[k]
        return None


_BRACE = re.compile(r"[{}]")
_OPENS_NAMESPACE = re.compile(r"(?:\bnamespace\b[\w\s:]*|\bextern\s*\"C\"\s*)$")


def _namespace_scopes(view: str) -> tuple[list[int], list[bool]]:
    """At each brace of `view`, in order: its position and whether the text
    after it is at namespace scope (every brace still open is a namespace's
    or an `extern "C"` block's). One pass; each brace looks back a bounded
    stretch for the `namespace` that opens it."""
    positions: list[int] = []
    outside: list[bool] = []
    stack: list[bool] = []  # per open brace: whether it opens a namespace
    others = 0  # open braces that do not
    for m in _BRACE.finditer(view):
        if m.group() == "{":
            ns = bool(_OPENS_NAMESPACE.search(view, max(0, m.start() - 200), m.start()))
            stack.append(ns)
            others += not ns
        elif stack:
            others -= not stack.pop()
        positions.append(m.start())
        outside.append(others == 0)
    return positions, outside


class _Ahead:
    """The first position at or after a given one holding a character of a
    set, for positions asked in increasing order: each stretch of text is
    searched once (a search per declaration from its keyword to the next
    `;` was quadratic in the keywords sharing that `;`)."""

    def __init__(self, masked: str, chars: str):
        self.masked = masked
        self.pattern = re.compile("[" + re.escape(chars) + "]")
        self.asked, self.found = -1, -1

    def at(self, pos: int) -> int:
        """Where the next such character is, or -1."""
        if not (self.asked <= pos and (pos <= self.found or self.found < 0 <= self.asked)):
            m = self.pattern.search(self.masked, pos)
            self.found = m.start() if m else -1
        self.asked = pos
        return self.found


class _Declarations:
    """The declaration rewrite's lookups on one text. Keywords are asked
    about in increasing order."""

    def __init__(self, src: _Source):
        self.src = src
        # what ends a declaration (`;`) or cannot stand in one: a brace, a
        # `#` (a directive line inside it, which the guarded form would cut;
        # in a macro body a `#`/`##` operator)
        self.end = _Ahead(src.view, ";{}#")

    def extent(self, kw_end: int, define: _Define | None) -> tuple[int, int] | None:
        """(end of the declarators, end of the text replaced) of the
        declaration whose keyword ends at kw_end, or None. In a macro body a
        declaration may end with the body (`#define DECL threadgroup float
        t[N]` used as `DECL;`)."""
        limit = define.end if define else len(self.src.view)
        stop = self.end.at(kw_end)
        while define and 0 <= stop < limit and self.src.view.startswith("##", stop):
            stop = self.end.at(stop + 2)  # a pasted name: `n##_tile`
        if 0 <= stop < limit:
            return (stop, stop + 1) if self.src.view[stop] == ";" else None
        return (limit, limit) if define else None


def _last_nonspace(view: str, j: int, lo: int) -> int:
    """Index of the last non-space character in [lo, j), or lo - 1."""
    j -= 1
    while j >= lo and view[j].isspace():
        j -= 1
    return j


_ATTRIBUTE_WORDS = ("__attribute__", "__align__")


def _match_back(view: str, j: int, a: int, open_: str, close: str) -> int:
    """Index of the `open_` matching the `close` at view[j], not before a,
    or a - 1."""
    depth = 0
    while j >= a:
        if view[j] == close:
            depth += 1
        elif view[j] == open_:
            depth -= 1
            if depth == 0:
                return j
        j -= 1
    return a - 1


class _Declarator(NamedTuple):
    start: int  # where its name starts
    name: str  # `t`, or in a macro body a pasted `n##_t`
    dims: list[tuple[int, int]]  # each bound's span, in order
    attrs: list[tuple[int, int]]  # trailing `__attribute__((...))` / `__align__(n)` spans


def _declarator(view: str, a: int, b: int, paste: bool) -> _Declarator | None:
    """The declarator `name[d1][d2]... attributes` ending view[a:b], or None.
    Read from the end, so each bound may be any expression (brackets inside
    it matched). `paste`: in a macro body, where the name may be pasted."""
    dims: list[tuple[int, int]] = []
    attrs: list[tuple[int, int]] = []
    j = _last_nonspace(view, b, a)
    while j >= a and view[j] == ")" and not dims:
        k = _match_back(view, j, a, "(", ")")
        w = _last_nonspace(view, k, a)
        word = word_before(view, w) if w >= a else ""
        if k < a or word not in _ATTRIBUTE_WORDS:
            return None
        attrs.append((w - len(word) + 1, j + 1))
        j = _last_nonspace(view, w - len(word) + 1, a)
    while j >= a and view[j] == "]":
        k = _match_back(view, j, a, "[", "]")
        if k < a or not view[k + 1 : j].strip():
            return None  # unmatched, or `[]`: no size to guard
        dims.append((k + 1, j))
        j = _last_nonspace(view, k, a)
    if j < a:
        return None
    name = word_before(view, j)[-(j - a + 1) :]
    if not name or name[0].isdigit():
        return None
    start = j - len(name) + 1
    while paste:
        k = _last_nonspace(view, start, a)
        if k - 1 < a or view[k - 1 : k + 1] != "##":
            break
        w = _last_nonspace(view, k - 1, a)
        word = word_before(view, w)[-(w - a + 1) :] if w >= a else ""
        if not word:
            return None
        start = w - len(word) + 1
        name = word + "##" + name
    return _Declarator(start, name, dims[::-1], attrs[::-1])


def _plain_type(typ: str) -> bool:
    """Whether `typ` (what precedes the first declarator) is a type alone:
    not empty, and no pointer or reference mark, initialiser, bracket or
    brace outside its parentheses (`__align__(16)`) and template arguments
    (`array<float, A * B>`)."""
    paren = angle = 0
    for c in typ:
        if c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        elif paren == 0 and c == "<":
            angle += 1
        elif paren == 0 and c == ">":
            angle -= 1
        elif paren == 0 and angle == 0 and c in "*&=[]{};#":
            return False
    return bool(typ.strip())


def _squeeze(s: str) -> str:
    """Whitespace runs as one blank (never none: `sizeof x`, `(unsigned int)N`)."""
    return " ".join(s.split())


def _one_line(s: str) -> str:
    return s.replace("\r", " ").replace("\n", " ").strip()


_WORD = re.compile(r"\b[A-Za-z_]\w*")


def _shown(decl: str, params: frozenset[str]) -> str:
    """The string literal of an array's type for messages. A macro's
    parameter in it is stringized (`"float[" #R " * " #C "]"`), so a fault
    shows the arguments (float[4 * 8]), not the parameters' names."""

    def literal(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    pieces, at = [], 0
    for m in _WORD.finditer(decl):
        if m.group() in params:
            pieces += [literal(decl[at : m.start()]), "#" + m.group()]
            at = m.end()
    pieces.append(literal(decl[at:]))
    return " ".join(p for p in pieces if p != '""') or '""'


def _guarded_decl(
    ahead: _Declarations,
    kw_end: int,
    define: _Define | None,
    prefix: str = "",
    file_scope: bool = False,
) -> tuple[int, str] | None:
    """The guarded form of the declaration whose keyword (`threadgroup`,
    `__shared__` or an alias) ends at kw_end: (end of the text it replaces,
    the replacement), or None when it is not `T name[dims], name2[dims];`.
    The dims may hold any expression: the typedef gives clang the bound to
    evaluate (macros, template parameters, sizeof, casts). In a macro body
    the array type's name is `__SIM_TGT(name)`, pasted after the macro's own
    parameters are substituted (`#define SHARED(n, N) __shared__ float n[N];`).
    `prefix`: the type an alias of the keyword holds (`#define TGF
    threadgroup float`). A trailing `__attribute__((aligned(16)))` or
    `__align__(16)` goes on the typedef, which the runtime's mapping honours.
    """
    view = ahead.src.view
    ext = ahead.extent(kw_end, define)
    if ext is None:
        return None
    decl_end, end = ext
    # what the declaration's text is copied from: the view has comments
    # blanked, but literals too, so one holding a literal is copied from the
    # text (one with a literal and a comment is left alone)
    copy, norm = view, _squeeze
    if "'" in view[kw_end:decl_end] or '"' in view[kw_end:decl_end]:
        copy, norm = ahead.src.spliced, _one_line  # blanks inside a literal count
        if "//" in copy[kw_end:decl_end] or "/*" in copy[kw_end:decl_end]:
            return None
    parts = split_top_level(view, kw_end, decl_end)
    decls = []
    typ = ""
    for k, (a, b) in enumerate(parts):
        d = _declarator(view, a, b, define is not None)
        if d is None:
            return None
        if k == 0:
            if not _plain_type(prefix + " " + view[a : d.start]):
                return None
            typ = norm(prefix + " " + copy[a : d.start])
        elif view[a : d.start].strip():
            return None  # `, *p` or the like
        bounds = "".join("[" + norm(copy[i:j]) + "]" for i, j in d.dims)
        attrs = "".join(" " + norm(copy[i:j]) for i, j in d.attrs)
        decls.append((d.name, bounds, attrs))
    # `file_scope` (CUDA; Metal has no program-scope threadgroup variables):
    # at namespace scope the binding is a global set once at load
    # (sim_runtime.h: __SIM_TG_BIND_GLOBAL). A macro's use may be anywhere:
    # a file-scope array from a macro keeps the function-scope form.
    bind = "__SIM_TG_BIND"
    if file_scope and define is None and ahead.src.at_namespace_scope(kw_end):
        bind = "__SIM_TG_BIND_GLOBAL"
    out = []
    for name, bounds, attrs in decls:
        tname = f"__SIM_TGT({name})" if define else f"__sim_tgt_{name}"
        shown = _shown(typ + bounds, define.params if define else frozenset())
        out.append(f"typedef {typ} {tname}{bounds}{attrs}; {bind}({name}, {shown})")
    return end, "; ".join(out) + (";" if end > decl_end else "")


def _replace(ed: Edits, text: str, start: int, end: int, new: str, in_macro: bool) -> None:
    """Replaces text[start:end] by `new`, keeping its lines: in a macro body
    each newline stays a line splice (`\\` then newline), so the body goes on."""
    old = text[start:end]
    if in_macro:
        ed.add(start, end, new + " \\\n" * old.count("\n"), "")
    else:
        ed.add(start, end, new, old)


def _starts_statement(view: str, i: int, define: _Define | None = None) -> bool:
    """Whether view[i] begins a statement (or follows a preprocessor line,
    or begins the body of the #define `define` that holds it)."""
    before = prev_nonspace(view, i)
    if define is not None:
        return before < define.body or view[before] in ";{}"
    if before < 0 or view[before] in ";{}":
        return True
    # allow a preceding preprocessor line ("#pragma ...\n threadgroup"), blank
    # lines between included (MLX's CUDA source puts one between its last
    # #include and the header, whose file-scope __shared__ arrays went
    # unguarded): only blanks between `before` and i, so the keyword begins
    # its line, and the line searched back is the one ending at `before`,
    # which no other keyword's search crosses (a search back to the line's
    # start from anywhere was quadratic on a long line)
    if view.rfind("\n", before + 1, i) < 0:
        return False
    before_line = view.rfind("\n", 0, before) + 1
    return view[before_line : before + 1].lstrip().startswith("#")


_TYPE_END = re.compile(r"[<>;=\[({,*&}#]")


def _is_pointer(view: str, kw_end: int, limit: int) -> bool:
    """Whether the Metal declaration after a keyword declares a pointer or a
    reference (`threadgroup float* p`): a `*` or `&` before its first
    declarator, outside template arguments (`array<float, A * B>` is a
    type). The scan ends at a `;`, brace or `#` line too, so that no scan
    runs past the statement (scans from each keyword over one run of `<`
    without a `;` were quadratic)."""
    depth = 0
    for t in _TYPE_END.finditer(view, kw_end, limit):
        c = t.group()
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c in "*&":
            if depth <= 0:
                return True
        elif c in ";{}#" or (depth <= 0 and c in "=[(,"):
            return False
    return False


def _keyword_site(src: _Source, kw_start: int, start: int) -> tuple[bool, _Define | None]:
    """(whether the keyword at kw_start is a declaration's, the #define
    holding it). `start` is where its statement would begin (before CUDA's
    `static`/`volatile`). A keyword in a directive's head, or the body of an
    alias (`#define TG threadgroup`), declares nothing itself."""
    define = src.define_at(kw_start)
    if define is not None and (kw_start < define.body or define.start in src.alias_defines):
        return False, define
    return _starts_statement(src.view, start, define), define


def _rewrite_threadgroup_decls(text: str) -> str:
    src = _Source(text, "threadgroup")
    view = src.view
    ed = Edits()
    ahead = _Declarations(src)
    for m in src.keywords():
        declares, define = _keyword_site(src, m.start(), m.start())
        if not declares:
            continue
        limit = define.end if define else len(view)
        if _is_pointer(view, m.end(), limit):
            continue
        prefix = src.aliases.get(m.group(), "")
        guarded = _guarded_decl(ahead, m.end(), define, prefix)
        if guarded:
            end, new = guarded
            _replace(ed, text, m.start(), end, new, define is not None)
        elif define is None:  # an alias's type stays
            ed.add(m.start(), m.end(), _squeeze("__SIM_THREADGROUP " + prefix), "")
        # else: left as the macro wrote it (an initialiser, say, which Metal
        # refuses anyway)
    return ed.apply(text)


def rewrite_metal(text: str) -> str:
    """Rewrite Metal kernel text so clang compiles it as C++ (line-preserving)."""
    out = _rewrite_half_literals(text)
    out = rewrite_constructors(out)
    out = _rewrite_threadgroup_decls(out)
    assert out.count("\n") == text.count("\n"), "rewrite_metal changed the line count"
    return out


# ---------------------------------------------------------------------- CUDA
# `extern __shared__ T name[];` (dynamic shared memory; the type may carry
# __align__(n) or template arguments), one statement on one line.
_EXTERN_SHARED = re.compile(
    r"\bextern\s+__shared__\s+(?P<type>[^;\[\]\n]*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_STATIC_SHARED = re.compile(r"\bstatic(?P<ws>\s+)(?=__shared__\b)")
_SHARED = re.compile(r"\b__shared__\b")


# reinterpret_cast to a pointer to a CUDA vector type aligned beyond its element.
_VECTOR_CAST = re.compile(
    r"\breinterpret_cast(?=\s*<\s*(?:(?:const|volatile)\s+)*"
    r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[24]"
    r"\s*(?:const\s*|volatile\s*)*\*\s*>)"
)


_EXTERN_SHARED_WORDS = re.compile(r"\bextern\s+__shared__\s+")
_TYPE_STOP = re.compile(r"[;\[\]\n]")


def _extern_shared(masked: str):
    """The matches of `_EXTERN_SHARED` in `masked`, as its finditer gives
    them, without trying it again from every `extern __shared__` before the
    same `[`: the type it allows runs to the first `;`, bracket or newline,
    and the declaration matches from the first of the keywords before that
    character or from none of them (retrying each made a line of them
    quadratic)."""
    end, failed = 0, set()
    stops = _Ahead(masked, ";[]\n")
    for words in _EXTERN_SHARED_WORDS.finditer(masked):
        if words.start() < end:
            continue
        stop = stops.at(words.end())
        if stop in failed:
            continue
        m = _EXTERN_SHARED.match(masked, words.start())
        if m is None:
            failed.add(stop)
            continue
        end = m.end()
        yield m


def uses_dynamic_shared(text: str) -> bool:
    """Whether the CUDA text declares `extern __shared__` memory (outside comments)."""
    return next(_extern_shared(mask_comments_and_strings(text)), None) is not None


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
    src = _Source(text, "__shared__")
    masked, view = src.masked, src.view
    ed = Edits()
    ahead = _Declarations(src)
    # the spans rewritten whole, marked position by position (a search of
    # every span per keyword was quadratic)
    taken = bytearray(len(masked) + 1)

    def take(a: int, b: int) -> None:
        taken[a:b] = b"\x01" * (b - a)

    for m in _extern_shared(masked):
        typ = text[m.start("type") : m.end("type")].strip()
        name = m.group("name")
        ed.add(m.start(), m.end(), f"{typ}* const {name} = (decltype({name}))(__sim_dyn_smem);", "")
        take(m.start(), m.end())
    for m in src.keywords():
        if taken[m.start()]:
            continue
        # `static` and `volatile` may come first: static goes, volatile joins the type
        start, qual = m.start(), ""
        while True:
            before = prev_nonspace(view, start)
            word = word_before(view, before) if before >= 0 else ""
            if word not in ("static", "volatile"):
                break
            start = before - len(word) + 1
            qual = "volatile " if word == "volatile" else qual
        declares, define = _keyword_site(src, m.start(), start)
        if define is not None and not declares:
            continue  # the prelude makes a `__shared__` left here a plain static
        prefix = src.aliases.get(m.group(), "")
        guarded = _guarded_decl(ahead, m.end(), define, prefix, True) if declares else None
        if guarded:
            end, new = guarded
            new = new.replace("typedef ", "typedef " + qual) if qual else new
            _replace(ed, text, start, end, new, define is not None)
            take(start, end)
        elif m.group() == "__shared__":
            ed.add(m.start(), m.end(), "__SIM_THREADGROUP", "")
    for m in _STATIC_SHARED.finditer(masked):
        if not taken[m.start()]:
            ed.add(m.start(), m.end(), "", m.group(0))
    # checked, so a misaligned vector access fails as on a GPU (cuda_prelude.h)
    for m in _VECTOR_CAST.finditer(masked):
        ed.add(m.start(), m.end(), "__sim_cu_aligned", "")
    out = ed.apply(text)
    assert out.count("\n") == text.count("\n"), "rewrite_cuda changed the line count"
    return out
