"""Mutation operators over a task's seed text, for bench/mutation_score.py.

Each operator is a function (seed: SeedInfo) -> list of Change: the edits
(offsets into the seed text) that make one mutant, and a description. The
text is searched with comments and `//!` directives blanked out (so offsets
stay those of the original), split into statements at `;`, `{` and `}`
outside parentheses. `mutants()` picks at most `max_sites` changes per
operator, spread evenly over the seed (deterministic), and names each by
`{operator}/L{line}.{column}` of its first edit in the seed, so a mutant's id
is stable while the seed's text is.

The operators, each a way a real kernel goes wrong:
  off_by_one         a comparison flipped (< <=, > >=), `== X - 1` as `== X - 2`
  drop_boundary      a boundary test removed: one `== 0` / `== X - 1` term of a
                     condition, a whole boundary block, a periodic-wrap select
                     or fix-up (`if (s < 0) s += n;`)
  drop_barrier       a threadgroup_barrier / __syncthreads removed
  swap_index         thread coordinates exchanged (x for y), or two index
                     variables of a subscript or index expression swapped
  precision          a float local declared half (__half in CUDA), a literal
                     with many digits cut to three
  drop_term          one additive term of an assignment's right-hand side
  stale_buffer       a read of an input from the buffer being written instead
                     (its ping-pong partner), or from another input of its shape
  partial_write      an output store skipped where its index % 7 == 0, or the
                     grid one threadgroup short along x
  race               a second store of the value one element lower (two threads
                     write one element), an atomic add split into load + store
  input_passthrough  an output element stored from its input (write the input back)
  input_mutation     the kernel also writes its result into its input buffer
  constant_output    an output store of zero, or a kernel that returns at once
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

TYPE_WORDS = {
    "uint", "int", "float", "half", "char", "bool", "short", "ushort", "uchar", "void",
    "uint32_t", "int32_t", "int8_t", "uint8_t", "const", "device", "threadgroup", "constant",
    "float2", "float3", "float4", "uint2", "uint3", "uint4", "int2", "int3", "int4",
    "unsigned", "signed", "return", "if", "for", "while", "else", "auto", "inline",
}  # fmt: skip
METAL_TYPES = {"float32": "float", "int8": "char", "uint32": "uint", "int32": "int"}
CUDA_TYPES = {"float32": "float", "int8": "int8_t", "uint32": "uint32_t", "int32": "int32_t"}
THREAD_BUILTINS = re.compile(r"\b(thread_position_in_grid|threadIdx|blockIdx)\b")


@dataclass
class SeedInfo:
    """A seed and what the operators need to know of its task."""

    text: str
    dialect: str  # "metal" or "cuda"
    outputs: tuple[str, ...]  # output buffers, and helper-function aliases (dst)
    inputs: tuple[str, ...]  # array inputs (no 0-d scalars)
    scalars: tuple[str, ...]
    pairs: dict = field(default_factory=dict)  # output -> its input (ping-pong partner)
    shape_mates: dict = field(default_factory=dict)  # input -> another input of its shape
    dtypes: dict = field(default_factory=dict)  # buffer -> numpy dtype name
    masked: str = ""

    def __post_init__(self) -> None:
        self.masked = mask(self.text)


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    new: str


@dataclass(frozen=True)
class Change:
    edits: tuple[Edit, ...]
    what: str  # the kind of change, e.g. "flip `<` to `<=`"


@dataclass(frozen=True)
class Mutant:
    operator: str
    site: str  # "L12.5": line and column (1-based) of the first edit in the seed
    description: str
    text: str

    def ident(self, task: str, dialect: str) -> str:
        return f"{task}/{dialect}/{self.operator}/{self.site}"


# ---- the seed's text --------------------------------------------------------


def mask(text: str) -> str:
    """`text` with comments (and so `//!` directives) blanked, newlines kept."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j == -1 else j
            out[i:j] = " " * (j - i)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j == -1 else j + 2
            out[i:j] = [c if c == "\n" else " " for c in text[i:j]]
            i = j
        else:
            i += 1
    return "".join(out)


def statements(masked: str) -> list[tuple[int, int]]:
    """(start, end) of each statement: text between `;`, `{`, `}` outside
    parentheses, leading and trailing space trimmed; a preprocessor line is a
    statement of its own."""
    spans, start, depth, i = [], 0, 0, 0

    def close(end: int) -> None:
        s, e = start, end
        while s < e and masked[s].isspace():
            s += 1
        while e > s and masked[e - 1].isspace():
            e -= 1
        if e > s:
            spans.append((s, e))

    while i < len(masked):
        c = masked[i]
        line_start = masked.rfind("\n", 0, i) + 1
        if c == "#" and not masked[line_start:i].strip():
            close(i)
            j = masked.find("\n", i)
            j = len(masked) if j == -1 else j
            spans.append((i, j))
            start = i = j
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and c in ";{}":
            close(i)
            start = i + 1
        i += 1
    close(len(masked))
    return spans


def matching(masked: str, i: int) -> int:
    """Index of the bracket closing the one at i."""
    opening, closing = masked[i], {"(": ")", "[": "]", "{": "}"}[masked[i]]
    depth = 0
    for j in range(i, len(masked)):
        if masked[j] == opening:
            depth += 1
        elif masked[j] == closing:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unbalanced {opening} at {i}")


def line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def apply(text: str, edits: tuple[Edit, ...]) -> str:
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: e.start] + e.new + text[e.end :]
    return text


def _words(s: str) -> list[str]:
    return re.findall(r"\b[A-Za-z_]\w*\b", s)


def elem_type(seed: SeedInfo, name: str) -> str:
    """A buffer's element type: a helper's parameter declares it (`float2* dst`),
    else the task's dtype of the input."""
    param = r"[(,]\s*(?:const\s+)?(?:(?:device|threadgroup|constant)\s+)?(\w+)\s*\*\s*"
    declared = re.search(param + rf"{name}\b", seed.masked)
    if declared:
        return declared.group(1)
    table = METAL_TYPES if seed.dialect == "metal" else CUDA_TYPES
    return table.get(seed.dtypes.get(name, "float32"), "float")


def zero_of(seed: SeedInfo, ty: str) -> str:
    lanes = re.fullmatch(r"(float|u?int)([234])", ty)
    if not lanes:
        return "0"
    if seed.dialect == "metal":
        return f"{ty}(0)"
    return f"make_{ty}({', '.join(['0'] * int(lanes.group(2)))})"


# ---- output stores ----------------------------------------------------------


@dataclass(frozen=True)
class Store:
    start: int  # the statement
    end: int
    lhs: tuple[int, int]  # the element written, e.g. `u_out[idx]`
    rhs: tuple[int, int]  # the value
    index: tuple[int, int]  # inside the last [] of lhs
    buffer: str  # the output written


ASSIGN = re.compile(r"(?<![=!<>+\-*/%&|^])=(?!=)")
ATOMIC_STORE = re.compile(r"atomic_store_explicit\(\s*&")


def output_stores(seed: SeedInfo) -> list[Store]:
    m, found = seed.masked, []
    for s, e in statements(m):
        stmt = m[s:e]
        if ATOMIC_STORE.match(stmt):
            amp = s + stmt.index("&") + 1
            comma = _top_comma(m, amp, e)
            rhs_end = _top_comma(m, comma + 1, e)
            lhs, rhs = (amp, comma), (_skip_space(m, comma + 1), rhs_end)
        else:
            a = ASSIGN.search(stmt)
            lead = re.match(r"[A-Za-z_]\w*", stmt)
            if not a or (lead and lead.group() in TYPE_WORDS):
                continue  # a declaration (or a control statement)
            lhs = (s, s + len(stmt[: a.start()].rstrip()))
            rhs = (_skip_space(m, s + a.end()), e)
        outs = [w for w in _words(m[lhs[0] : lhs[1]]) if w in seed.outputs]
        if not outs or not m[lhs[0] : lhs[1]].endswith("]"):
            continue
        close = lhs[1] - 1
        open_ = _opening(m, close)
        found.append(Store(s, e, lhs, rhs, (open_ + 1, close), outs[0]))
    return found


def _skip_space(m: str, i: int) -> int:
    while m[i].isspace():
        i += 1
    return i


def _top_comma(m: str, i: int, end: int) -> int:
    depth = 0
    for j in range(i, end):
        if m[j] in "([":
            depth += 1
        elif m[j] in ")]":
            if depth == 0:
                return j
            depth -= 1
        elif m[j] == "," and depth == 0:
            return j
    return end


def _opening(m: str, close: int) -> int:
    depth = 0
    for j in range(close, -1, -1):
        if m[j] == "]":
            depth += 1
        elif m[j] == "[":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced ]")


def _stmt_end(seed: SeedInfo, st: Store) -> int:
    """Just past the `;` of a store (the closing `)` of an atomic store's call)."""
    return seed.masked.index(";", st.end) + 1


def _input_of(seed: SeedInfo, st: Store) -> str | None:
    """The input an output is paired with, unless the store already copies
    (its value a plain variable or read from that input)."""
    source = seed.pairs.get(st.buffer)
    value = seed.masked[st.rhs[0] : st.rhs[1]].strip()
    if source is None or re.fullmatch(rf"{source}\s*\[[^\]]*\]", value):
        return None
    if re.fullmatch(r"\w+", value) and re.search(rf"\b{value}\s*=\s*{source}\s*\[", seed.masked):
        return None
    return source


def _element_of(seed: SeedInfo, st: Store, buffer: str, const: bool) -> str:
    """The store's element expression with `buffer` instead of its output."""
    lhs = seed.text[st.lhs[0] : st.lhs[1]]
    swapped = re.sub(rf"\b{st.buffer}\b", buffer, lhs, count=1)
    if not const:
        swapped = swapped.replace("const ", "")
        if swapped.startswith(buffer):  # a plain element: cast the const away
            ty = elem_type(seed, buffer)
            ty = f"device {ty}*" if seed.dialect == "metal" else f"{ty}*"
            swapped = f"(({ty}){buffer})" + swapped[len(buffer) :]
        swapped = re.sub(r"reinterpret_cast<(\w+)\*>\((\w+)\)", r"((\1*)\2)", swapped)
        return swapped
    if "reinterpret_cast<" in swapped and "const " not in swapped:
        swapped = swapped.replace("reinterpret_cast<", "reinterpret_cast<const ", 1)
    elif "(device " in swapped:
        swapped = swapped.replace("(device ", "(const device ", 1)
    return swapped


# ---- the operators ----------------------------------------------------------


RELOP = re.compile(r"(?<![<>\-=!])(<=|>=|<|>)(?![<>=])")
TEMPLATE = re.compile(r"\b\w*_cast\s*<[^<>;]*>|\btemplate\s*<[^<>]*>")


def off_by_one(seed: SeedInfo) -> list[Change]:
    m = seed.masked
    skip = [(t.start(), t.end()) for t in TEMPLATE.finditer(m)]
    skip += [(s, e) for s, e in statements(m) if m[s] == "#"]
    flip = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
    changes = []
    for r in RELOP.finditer(m):
        if any(a <= r.start() < b for a, b in skip):
            continue
        op = r.group(1)
        changes.append(Change((Edit(r.start(), r.end(), flip[op]),), f"`{op}` -> `{flip[op]}`"))
    for r in re.finditer(r"==\s*\w+(?:\[0\])?\s*-\s*(1)\b(?![.\w])", m):
        changes.append(Change((Edit(r.start(1), r.end(1), "2"),), "`== X - 1` -> `== X - 2`"))
    return sorted(changes, key=lambda c: c.edits[0].start)


BOUNDARY_TERM = re.compile(r"^\s*[\w.]+(?:\[0\])?\s*==\s*(?:0|1|\w+(?:\[0\])?\s*-\s*[12])u?\s*$")


def _split_top(m: str, start: int, end: int, sep: str) -> list[tuple[int, int]]:
    parts, depth, s, i = [], 0, start, start
    while i < end:
        if m[i] in "([":
            depth += 1
        elif m[i] in ")]":
            depth -= 1
        elif depth == 0 and m.startswith(sep, i):
            parts.append((s, i))
            s = i = i + len(sep)
            continue
        i += 1
    parts.append((s, end))
    return parts


def drop_boundary(seed: SeedInfo) -> list[Change]:
    m, changes = seed.masked, []
    for r in re.finditer(r"\bif\s*\(", m):
        open_ = r.end() - 1
        close = matching(m, open_)
        terms = _split_top(m, open_ + 1, close, "||")
        boundary = [t for t in terms if BOUNDARY_TERM.match(m[t[0] : t[1]])]
        if not boundary:
            continue
        after = _skip_space(m, close + 1)
        if len(boundary) == len(terms) and m[after] == "{":
            end = matching(m, after) + 1
            what = f"boundary block `if ({m[open_ + 1 : close].strip()})` removed"
            changes.append(Change((Edit(r.start(), end, ""),), what))
        if len(terms) > 1:
            for a, b in boundary:
                i = terms.index((a, b))
                # the term and the `||` joining it to its neighbour
                cut = (terms[i][0], terms[i + 1][0]) if i + 1 < len(terms) else (terms[i - 1][1], b)
                what = f"boundary term `{m[a:b].strip()}` dropped"
                changes.append(Change((Edit(cut[0], cut[1], ""),), what))
    for r in re.finditer(r"\(([^()?;]*==[^()?;]*)\)\s*\?", m):
        if not BOUNDARY_TERM.match(r.group(1)):
            continue
        colon = _top_colon(m, r.end())
        if colon is None:
            continue
        what = f"periodic select on `{r.group(1).strip()}` dropped"
        changes.append(Change((Edit(r.start(), _skip_space(m, colon + 1), ""),), what))
    for r in re.finditer(r"\bif\s*\(\s*(\w+)\s*<\s*0\s*\)\s*\1\s*\+=\s*\w+\s*;", m):
        changes.append(
            Change((Edit(r.start(), r.end(), ""),), f"wrap fix-up of `{r.group(1)}` dropped")
        )
    return sorted(changes, key=lambda c: c.edits[0].start)


def _top_colon(m: str, i: int) -> int | None:
    depth = 0
    for j in range(i, len(m)):
        if m[j] in "([":
            depth += 1
        elif m[j] in ")]":
            depth -= 1
            if depth < 0:
                return None
        elif m[j] == ":" and depth == 0 and m[j + 1] != ":" and m[j - 1] != ":":
            return j
        elif m[j] == ";":
            return None
    return None


def drop_barrier(seed: SeedInfo) -> list[Change]:
    pattern = r"\b(threadgroup_barrier\s*\([^;]*\)|simdgroup_barrier\s*\([^;]*\)|__syncthreads\s*\(\s*\)|__syncwarp\s*\([^;]*\))\s*;"
    return [
        Change((Edit(r.start(), r.end(), ""),), f"`{r.group(1)}` removed")
        for r in re.finditer(pattern, seed.masked)
    ]


DECL = re.compile(r"^(?:const\s+)?(?:uint|int|uint32_t|int32_t)\s+(\w+)\s*=\s*(.+)$", re.S)


def swap_index(seed: SeedInfo) -> list[Change]:
    m, changes = seed.masked, []
    decls = []
    for s, e in statements(m):
        d = DECL.match(m[s:e])
        if d:
            decls.append((s, e, d))
    # thread coordinates: two consecutive declarations from the thread's position
    coords = [x for x in decls if THREAD_BUILTINS.search(x[2].group(2))]
    for (s1, e1, d1), (s2, e2, d2) in zip(coords, coords[1:]):
        if m[e1:s2].strip(" \n;"):
            continue  # not consecutive
        r1 = (s1 + d1.start(2), e1)
        r2 = (s2 + d2.start(2), e2)
        what = f"thread coordinates of `{d1.group(1)}` and `{d2.group(1)}` exchanged"
        changes.append(
            Change((Edit(*r1, seed.text[r2[0] : r2[1]]), Edit(*r2, seed.text[r1[0] : r1[1]])), what)
        )
    # two short index names of a subscript or of an index declaration swapped
    spans = [(r.start() + 1, matching(m, r.start())) for r in re.finditer(r"\[", m)]
    spans += [(s + d.start(2), e) for s, e, d in decls if "*" in d.group(2) and "+" in d.group(2)]
    # locals that copy a size scalar (CUDA's `uint32_t nx = NX[0];`) are sizes too
    sizes = set(seed.scalars) | {
        r.group(1)
        for r in re.finditer(r"\b(\w+)\s*=\s*(\w+)\[0\]\s*;", m)
        if r.group(2) in seed.scalars
    }
    for a, b in sorted(set(spans)):
        names: list[re.Match] = []
        for w in re.finditer(r"(?<![.\w])[a-z_]\w{0,2}\b", m[a:b]):
            following = m[a + w.end() : a + w.end() + 1]
            if w.group() in TYPE_WORDS or w.group() in sizes or following in "([":
                continue
            if w.group() not in [n.group() for n in names]:
                names.append(w)
        if len(names) < 2:
            continue
        x, y = names[-2], names[-1]
        edits = []
        for w in re.finditer(rf"\b({x.group()}|{y.group()})\b", m[a:b]):
            other = y.group() if w.group() == x.group() else x.group()
            edits.append(Edit(a + w.start(), a + w.end(), other))
        what = f"`{x.group()}` and `{y.group()}` swapped in `{m[a:b].strip()}`"
        changes.append(Change(tuple(edits), what))
    return sorted(changes, key=lambda c: c.edits[0].start)


def precision(seed: SeedInfo) -> list[Change]:
    m, changes = seed.masked, []
    if seed.dialect == "metal":
        decl, lower = re.compile(r"(?<![\w:])float([234]?)(\s+\w+\s*=)"), "half"
    else:
        decl, lower = re.compile(r"(?<![\w:])float()(\s+\w+\s*=)"), "__half"
    for r in decl.finditer(m):
        new = lower + r.group(1)
        what = f"`float{r.group(1)}{r.group(2)}` declared `{new}`"
        edits = [Edit(r.start(), r.start() + 5 + len(r.group(1)), new)]
        if r.group(1):  # Metal converts vectors explicitly only: half3 v = half3(...);
            at = _skip_space(m, r.end())
            end = m.index(";", at)
            edits += [Edit(at, at, f"{new}("), Edit(end, end, ")")]
        changes.append(Change(tuple(edits), what))
    for r in re.finditer(r"(?<![\w.])(\d+\.\d+)(f?)\b", m):
        digits = r.group(1).replace(".", "").lstrip("0")
        if len(digits.rstrip("0")) < 5:
            continue
        short = f"{float(r.group(1)):.3g}"
        short = short if "." in short or "e" in short else short + ".0"
        what = f"literal `{r.group()}` cut to `{short}{r.group(2)}`"
        changes.append(Change((Edit(r.start(1), r.end(1), short),), what))
    return sorted(changes, key=lambda c: c.edits[0].start)


def drop_term(seed: SeedInfo) -> list[Change]:
    m, changes = seed.masked, []
    for s, e in statements(m):
        stmt = m[s:e]
        a = re.search(r"(?<![=!<>])(\+=|-=|=)(?!=)", stmt)
        if not a or re.match(r"(for|if|while|#|(const\s+)?u?int(32_t)?\s)", stmt):
            continue  # control, or index arithmetic (other operators change that)
        rhs = s + a.end()
        for i in range(rhs, e):
            c = m[i]
            if c not in "+-" or m[i + 1] in "+-=" or m[i - 1] in "+-":
                continue
            before = m[rhs:i].rstrip()
            if (
                not before
                or before[-1] not in "])"
                and not before[-1].isalnum()
                and before[-1] != "."
            ):
                continue  # unary
            if re.search(r"\d\.?\d*[eE]$", before):
                continue  # an exponent
            if _bracket_depth(m, rhs, i) > 0:
                continue  # index arithmetic
            end = _term_end(m, i + 1, e)
            term = m[i + 1 : end].strip()
            if re.fullmatch(r"\d+u?", term):
                continue  # an index offset, not a term
            what = f"term `{c} {term}` dropped"
            changes.append(Change((Edit(i, end, ""),), what))
    return changes


def _bracket_depth(m: str, a: int, b: int) -> int:
    return m[a:b].count("[") - m[a:b].count("]")


def _term_end(m: str, i: int, end: int) -> int:
    depth = 0
    for j in range(i, end):
        c = m[j]
        if c in "([":
            depth += 1
        elif c in ")]":
            if depth == 0:
                return j
            depth -= 1
        elif depth == 0 and c in "+-,?:" and j > i and m[j - 1] not in "eE(":
            if c in "+-" and not m[i:j].strip():
                continue
            return j
    return end


def stale_buffer(seed: SeedInfo) -> list[Change]:
    m, changes = seed.masked, []
    partner = {v: k for k, v in seed.pairs.items()}
    for name in seed.inputs:
        other = partner.get(name) or seed.shape_mates.get(name)
        if not other:
            continue
        for r in re.finditer(rf"(?<![.\w]){name}\b", m):
            if re.search(r"\*\s*$", m[: r.start()]):
                continue  # a parameter's declaration
            what = f"`{name}` read from `{other}`"
            changes.append(Change((Edit(r.start(), r.end(), other),), what))
    return sorted(changes, key=lambda c: c.edits[0].start)


def _store_text(seed: SeedInfo, st: Store) -> str:
    return seed.text[st.start : _stmt_end(seed, st)]


def partial_write(seed: SeedInfo) -> list[Change]:
    changes = []
    for st in output_stores(seed):
        idx = seed.text[st.index[0] : st.index[1]]
        end = _stmt_end(seed, st)
        what = f"store to `{st.buffer}` skipped where `({idx}) % 7 == 0`"
        new = f"if ((({idx}) % 7u) != 0u) {_store_text(seed, st)}"
        changes.append(Change((Edit(st.start, end, new),), what))
    for r in re.finditer(r"^//! grid = \((.*)\)\s*$", seed.text, re.M):
        tg = re.match(r"//! threadgroup = \(([^,]*),", seed.text[r.end() + 1 :])
        first = _split_top(r.group(1), 0, len(r.group(1)), ",")[0]
        x = r.group(1)[first[0] : first[1]].strip()
        step = tg.group(1).strip() if tg else "1"
        new = f"max({x} - {step}, 1)"
        edit = Edit(r.start(1) + first[0], r.start(1) + first[1], new)
        changes.append(Change((edit,), f"grid x `{x}` -> `{new}`"))
    return sorted(changes, key=lambda c: c.edits[0].start)


def race(seed: SeedInfo) -> list[Change]:
    changes = []
    for st in output_stores(seed):
        idx = seed.text[st.index[0] : st.index[1]]
        if re.fullmatch(r"\s*\d+u?\s*", idx):
            continue  # one element: the second store would be the same
        lower = f"(({idx}) > 0u ? ({idx}) - 1u : 0u)"
        store = _store_text(seed, st)
        rel = (st.index[0] - st.start, st.index[1] - st.start)
        neighbour = store[: rel[0]] + lower + store[rel[1] :]
        what = f"`{st.buffer}` also written one element lower (two threads write it)"
        changes.append(
            Change((Edit(st.start, _stmt_end(seed, st), f"{{ {neighbour} {store} }}"),), what)
        )
    m = seed.masked
    metal = r"(\w+)\s+(\w+)\s*=\s*atomic_fetch_add_explicit\(\s*&([^,]+),\s*([^,]+),\s*(\w+)\)\s*;"
    for r in re.finditer(metal, m):
        ty, var, target, add, order = r.groups()
        new = (
            f"{ty} {var} = atomic_load_explicit(&{target}, {order}); "
            f"atomic_store_explicit(&{target}, {var} + {add}, {order});"
        )
        changes.append(
            Change((Edit(r.start(), r.end(), new),), "atomic add split into load + store")
        )
    for r in re.finditer(r"(\w+)\s+(\w+)\s*=\s*atomicAdd\(\s*&([^,]+),\s*([^)]+)\)\s*;", m):
        ty, var, target, add = r.groups()
        new = f"{ty} {var} = {target}; {target} = {var} + {add};"
        changes.append(
            Change((Edit(r.start(), r.end(), new),), "atomicAdd split into load + store")
        )
    return sorted(changes, key=lambda c: c.edits[0].start)


def input_passthrough(seed: SeedInfo) -> list[Change]:
    changes = []
    for st in output_stores(seed):
        source = _input_of(seed, st)
        if source is None or st.rhs[0] >= st.rhs[1]:
            continue
        element = _element_of(seed, st, source, const=True)
        what = f"`{st.buffer}` stored from its input `{source}`"
        changes.append(Change((Edit(st.rhs[0], st.rhs[1], element),), what))
    return changes


def input_mutation(seed: SeedInfo) -> list[Change]:
    changes = []
    for st in output_stores(seed):
        source = _input_of(seed, st)
        if source is None or ATOMIC_STORE.match(seed.masked[st.start : st.end]):
            continue
        target = _element_of(seed, st, source, const=False)
        element = seed.text[st.lhs[0] : st.lhs[1]]
        store = _store_text(seed, st)
        new = f"{{ {store} {target} = {element}; }}"
        what = f"result also written into the input `{source}`"
        changes.append(Change((Edit(st.start, _stmt_end(seed, st), new),), what))
    return changes


def constant_output(seed: SeedInfo) -> list[Change]:
    changes = []
    for st in output_stores(seed):
        lhs = seed.text[st.lhs[0] : st.lhs[1]]
        cast = re.search(r"(\w+)\*\s*>?\s*\)?\s*\(?\s*" + st.buffer + r"\b", lhs)
        zero = zero_of(seed, cast.group(1) if cast else elem_type(seed, st.buffer))
        what = f"`{st.buffer}` stored as `{zero}`"
        changes.append(Change((Edit(st.rhs[0], st.rhs[1], zero),), what))
    for r in re.finditer(r"^//! kernel (\w+)\s*\n(?://!.*\n)*", seed.text, re.M):
        what = f"kernel `{r.group(1)}` returns at once"
        changes.append(Change((Edit(r.end(), r.end(), "return;\n"),), what))
    return sorted(changes, key=lambda c: c.edits[0].start)


OPERATORS: dict[str, Callable[[SeedInfo], list[Change]]] = {
    "off_by_one": off_by_one,
    "drop_boundary": drop_boundary,
    "drop_barrier": drop_barrier,
    "swap_index": swap_index,
    "precision": precision,
    "drop_term": drop_term,
    "stale_buffer": stale_buffer,
    "partial_write": partial_write,
    "race": race,
    "input_passthrough": input_passthrough,
    "input_mutation": input_mutation,
    "constant_output": constant_output,
}


def spread(items: list, k: int) -> list:
    """At most k of items, evenly spaced, first and last included."""
    if len(items) <= k:
        return list(items)
    if k == 1:
        return [items[0]]
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def mutants(seed: SeedInfo, operators=None, max_sites: int = 3) -> list[Mutant]:
    """The mutants of a seed: up to max_sites per operator, each with a stable
    site name; a change that leaves the text as it was is dropped."""
    out = []
    for name in operators or OPERATORS:
        seen: dict[str, int] = {}
        for change in spread(OPERATORS[name](seed), max_sites):
            text = apply(seed.text, change.edits)
            if text == seed.text:
                continue
            line, col = line_col(seed.text, min(e.start for e in change.edits))
            site = f"L{line}.{col}"
            seen[site] = seen.get(site, 0) + 1
            if seen[site] > 1:
                site += f"-{seen[site]}"
            first = seed.text.splitlines()[line - 1].strip()
            out.append(Mutant(name, site, f"{change.what} (line {line}: `{first}`)", text))
    return out


def seed_info(task_name: str, dialect: str) -> SeedInfo:
    """The seed of a task in a dialect, with its buffers' roles from the task."""
    from mlxsci.task import load_task

    task = load_task(task_name)
    host = task.make_inputs(task.size_set("smoke")[0].params)
    scalars = {k for k, v in host.items() if v.ndim == 0}
    inputs = {n for k in task.kernels for n in k.inputs if n not in scalars}
    outputs = {n for k in task.kernels for n in k.outputs}
    pairs = {"dst": "src"}
    for k in task.kernels:
        arrays = [n for n in k.inputs if n not in scalars]
        for out in k.outputs:
            stem = re.sub(r"_out$|_next$", "", out).replace("out_", "in_")
            for cand in (f"{stem}_in", stem, f"{stem}_curr"):
                if cand in arrays and cand != out:
                    pairs[out] = cand
                    break
            else:
                if len(k.outputs) == 1 and len(arrays) == 1:
                    pairs[out] = arrays[0]
    mates: dict[str, str] = {}
    for a in inputs:
        for b in sorted(inputs):
            if a != b and a in host and b in host and host[a].shape == host[b].shape:
                mates.setdefault(a, b)
    dtypes = {k: str(v.dtype) for k, v in host.items()}
    return SeedInfo(
        text=task.seed(dialect),
        dialect=dialect,
        outputs=tuple(sorted(outputs | {"dst"})),
        inputs=tuple(sorted(inputs | {"src"})),
        scalars=tuple(sorted(scalars)),
        pairs=pairs,
        shape_mates=mates,
        dtypes=dtypes,
    )
