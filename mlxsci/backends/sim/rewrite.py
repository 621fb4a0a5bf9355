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
  defines away.

`rewrite_cuda(text)` gives CUDA's `__shared__` declarations the same
guarded form (see its docstring); both dialects' rewrites live here because
they share that declaration rewrite.
"""

from __future__ import annotations

import re

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
# `name[d1][d2]` ending a declaration part (dims may be absent).
_DECLARATOR = re.compile(r"\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\[\]]*\]\s*)*)$")
_NEXT_DECLARATOR = re.compile(r"\s*" + _DECLARATOR.pattern)


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
    """The lookups `_guarded_decl` makes on one masked text."""

    def __init__(self, masked: str):
        self.semicolon = _Ahead(masked, ";")
        # what cannot stand in `T name[dims], ...;` (a `#`: a directive line
        # inside the declaration, which the guarded form would cut)
        self.stop = _Ahead(masked, "={}*&#")


def _guarded_decl(
    masked: str, kw_start: int, kw_end: int, ahead: _Declarations
) -> tuple[int, str] | None:
    """The guarded form of the declaration whose keyword (`threadgroup`,
    `__shared__`) spans [kw_start, kw_end): (end of the statement, its
    replacement), or None when it is not `T name[dims], name2[dims];`.
    Keywords are asked about in increasing order (`ahead`)."""
    semi = ahead.semicolon.at(kw_end)
    if semi < 0:
        return None
    stop = ahead.stop.at(kw_end)
    if 0 <= stop < semi:
        return None
    parts = split_top_level(masked, kw_end, semi)
    m0 = _DECLARATOR.search(masked, parts[0][0], parts[0][1])
    if not m0 or not masked[parts[0][0] : m0.start()].strip():
        return None
    typ = " ".join(masked[parts[0][0] : m0.start()].split())  # comments blanked
    decls = [m0]
    for a, b in parts[1:]:
        m = _NEXT_DECLARATOR.fullmatch(masked, a, b)
        if not m:
            return None
        decls.append(m)
    out = []
    for m in decls:
        name = m.group("name")
        dims = "".join(masked[m.start("dims") : m.end("dims")].split())
        if "[]" in dims:
            return None
        shown = (typ + dims).replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'typedef {typ} __sim_tgt_{name}{dims}; __SIM_TG_BIND({name}, "{shown}");')
    return semi + 1, " ".join(out)


def _starts_statement(masked: str, i: int) -> bool:
    """Whether masked[i] begins a statement (or follows a preprocessor line)."""
    before = prev_nonspace(masked, i)
    if before < 0 or masked[before] in ";{}":
        return True
    # allow a preceding preprocessor line ("#pragma ...\n threadgroup"): only
    # blanks between the line's start and i, so its start is among them (a
    # search back to the line's start from anywhere was quadratic on a
    # long line)
    line_start = masked.rfind("\n", before + 1, i) + 1
    if line_start == 0:
        return False
    prev_line_start = masked.rfind("\n", 0, max(0, line_start - 1)) + 1
    return masked[prev_line_start:line_start].lstrip().startswith("#")


_TYPE_END = re.compile(r"[<>;=\[({,*&}#]")


def _rewrite_threadgroup_decls(text: str) -> str:
    masked = mask_comments_and_strings(text)
    ed = Edits()
    ahead = _Declarations(masked)
    for m in _TG.finditer(masked):
        if not _starts_statement(masked, m.start()):
            continue
        # scan the type up to the declarator; template arguments may hold
        # commas. It ends at a `;`, brace or `#` line inside them too, so
        # that no scan runs past the statement (scans from each keyword
        # over one run of `<` without a `;` were quadratic)
        depth = 0
        pointer = False
        for t in _TYPE_END.finditer(masked, m.end()):
            c = t.group()
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
            elif c in "*&":
                pointer = True
                break
            elif c in ";{}#" or (depth == 0 and c in "=[(,"):
                break
        if pointer:
            continue
        guarded = _guarded_decl(masked, m.start(), m.end(), ahead)
        if guarded:
            end, new = guarded
            ed.add(m.start(), end, new, text[m.start() : end])
        else:
            ed.add(m.start(), m.end(), "__SIM_THREADGROUP", "")
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
    masked = mask_comments_and_strings(text)
    ed = Edits()
    ahead = _Declarations(masked)
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
    for m in _SHARED.finditer(masked):
        if taken[m.start()]:
            continue
        # `static` and `volatile` may come first: static goes, volatile joins the type
        start, qual = m.start(), ""
        while True:
            before = prev_nonspace(masked, start)
            word = word_before(masked, before) if before >= 0 else ""
            if word not in ("static", "volatile"):
                break
            start = before - len(word) + 1
            qual = "volatile " if word == "volatile" else qual
        guarded = (
            _guarded_decl(masked, m.start(), m.end(), ahead)
            if _starts_statement(masked, start)
            else None
        )
        if guarded:
            end, new = guarded
            new = new.replace("typedef ", "typedef " + qual) if qual else new
            ed.add(start, end, new, text[start:end])
            take(start, end)
        else:
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
