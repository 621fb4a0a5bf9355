"""Branch coverage on the simulator: how often each arm of a candidate's branches ran.

Held-out grading asks whether a size the search never scored took a path the
search never ran (`if (NX == 67u) { fast } else { other }`, a `case`, an
explicit specialisation of a template helper). The simulator answers by
instrumenting the candidate's text, never the generated text around it: the
header and each kernel body are instrumented on their own
(`instrument_spec`), always the same way, so the parent and the worker agree
on the counters of a kernel without exchanging anything but counts.

What is counted, each arm at its line and column in the candidate's text:

- `if (c)`: the condition becomes `__sim_cov_br(K, (c))`, which counts the
  true outcome in counter K and the false one in K + 1 (unbraced arms
  included). Arms: "if" (or "else-if" after an `else`) for true; for false
  "else" at the `else` that follows, or "not-taken" at the `if` where no
  plain `else` follows (none is written, or the scanner could not pair it);
  after an `else if` the false outcome is the next condition's test, not an
  arm of its own.
- `if constexpr (c) {...} else {...}`: a `__sim_cov_hit(K);` at the start of
  each braced arm ("if"/"else"); a constant condition cannot be wrapped.
- `case X:` / `default:`: a hit right after the label, so fallthrough from
  the label above counts too (the code after the label ran).
- `c ? a : b`: the condition wrapped as for `if`: "ternary-true" and
  "ternary-false" at the `?`.
- in the header, every function body ("function"): a specialisation or
  helper that never runs shows as 0.

Not instrumented, and listed with the reason (`Skipped`): arms inside
preprocessor directives (a macro's), an `if` with an init-statement or a
declaration as its condition, unbraced arms of `if constexpr`, a label or
ternary the scanner cannot delimit (a ternary inside template arguments).

The counters live in a buffer the launching process owns; the kernel finds
it through one more buffer pointer (after its own, `glue`), and the helpers
(`PROLOGUE`) skip counting during constant evaluation, so instrumented
`constexpr` helpers and program-scope constants still compile. Counting is
plain increments: the simulator runs a launch's threads on one OS thread.
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field

from mlxsci.backends.sim.source_scan import (
    mask_comments_and_strings,
    match_bracket,
    prev_nonspace,
    skip_ws,
    word_before,
)
from mlxsci.kernel.spec import KernelSpec

# Counters one kernel may have: a candidate with more arms than this has them
# listed as not instrumented past the limit (the parent reads no more).
MAX_COUNTERS = 1 << 14

# What the instrumented text calls, defined before the kernel text (build.assemble).
PROLOGUE = """\
static unsigned long long* __sim_cov_counts;
template <class __SimT>
static constexpr inline bool __sim_cov_br(unsigned long long __k, const __SimT& __c) {
    const bool __b = static_cast<bool>(__c);
    if (!__builtin_is_constant_evaluated()) __sim_cov_counts[__b ? __k : __k + 1] += 1;
    return __b;
}
static constexpr inline void __sim_cov_hit(unsigned long long __k) {
    if (!__builtin_is_constant_evaluated()) __sim_cov_counts[__k] += 1;
}"""

_GLUE_HEAD = "static void __sim_thread(void* const* __b, const __SimThread* __t) {\n"


@dataclass(frozen=True)
class Arm:
    """One counted arm: where it is in the text instrumented (1-based line
    and column), its kind, and its counter."""

    line: int
    column: int
    kind: str
    counter: int


@dataclass(frozen=True)
class Skipped:
    """An arm left uncounted, and why."""

    line: int
    column: int
    kind: str
    reason: str


@dataclass
class Instrumented:
    """A text with its arms counted: the text, its arms, what was left out,
    and the first counter after its own."""

    text: str
    arms: list[Arm] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    end: int = 0


_TOKENS = re.compile(r"(?<![\w$])(?:if|case|default)(?![\w$])|\?")
_WORD = re.compile(r"[A-Za-z_]\w*")
_STOP = re.compile(r"[()\[\]{};]")
# `T name = ...` / `const T* name = ...` / `auto name = ...` as an if's condition.
_DECLARATION = re.compile(
    r"\s*(?:(?:const|volatile|constexpr)\s+)*[A-Za-z_][\w:]*\s*(?:<[^()]*>)?\s*[*&\s]*"
    r"\b[A-Za-z_]\w*\s*(?:=(?!=)|\{)"
)
_DIRECTIVE_LINE = re.compile(r"^[ \t]*#.*?(?:\\\n.*?)*$", re.M)
# Words that end an expression to their left: a ternary's condition starts after them.
_LEFT_KEYWORDS = frozenset({"return", "else", "do", "case", "throw", "co_return", "co_yield"})
_CONTROL = frozenset({"if", "while", "for", "switch"})
_AFTER_PARAMETERS = frozenset({"const", "noexcept", "override", "final", "volatile"})
_SKIP_DEPTH = 200  # nested unbraced statements the pairing follows
_ANGLE_MARKS = re.compile(r"[<>;{}]")
_CASE_MARKS = re.compile(r"[:?;{}()\[\]]")


class _Scan:
    """One text being instrumented: its masked form (comments, literals and
    preprocessor lines blanked), where lines start, the insertions and arms
    collected so far."""

    def __init__(self, text: str, first: int):
        self.text = text
        masked = mask_comments_and_strings(text)
        # A macro's arms would count at its definition, once per expansion
        # site mixed together, and `#if` is no branch of the program's: the
        # scan sees no directive; what they hold is listed as left out.
        self.directives = [m.span() for m in _DIRECTIVE_LINE.finditer(masked)]
        self.directive_text = masked
        if self.directives:
            masked = _DIRECTIVE_LINE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), masked)
        self.scan = masked
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.inserts: list[tuple[int, int, str]] = []  # (position, order, text)
        self.result = Instrumented(text, end=first)
        self.skipped_statements: dict[int, int | None] = {}
        self._angles: tuple[list[int], list[int]] | None = None
        self._openers: dict[int, int] | None = None

    def where(self, pos: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def counters(self, n: int) -> int | None:
        """The first of `n` new counters, or None past MAX_COUNTERS."""
        first = self.result.end
        if first + n > MAX_COUNTERS:
            return None
        self.result.end += n
        return first

    def arm(self, pos: int, kind: str, counter: int) -> None:
        self.result.arms.append(Arm(*self.where(pos), kind, counter))

    def skip(self, pos: int, kind: str, reason: str) -> None:
        self.result.skipped.append(Skipped(*self.where(pos), kind, reason))

    def insert(self, pos: int, order: int, new: str) -> None:
        self.inserts.append((pos, order, new))

    def word_at(self, i: int) -> str:
        m = _WORD.match(self.scan, i)
        return (
            m.group()
            if m and (i == 0 or not (self.scan[i - 1].isalnum() or self.scan[i - 1] in "_$"))
            else ""
        )

    def finish(self) -> Instrumented:
        pieces, at = [], 0
        for pos, _order, new in sorted(self.inserts, key=lambda t: (t[0], t[1])):
            pieces.append(self.text[at:pos])
            pieces.append(new)
            at = pos
        pieces.append(self.text[at:])
        self.result.text = "".join(pieces)
        return self.result

    # -- statements --------------------------------------------------------
    def skip_statement(self, i: int, depth: int = 0) -> int | None:
        """The index after the statement starting at or after `i` (a block,
        a control statement with its body, or up to its `;`), or None where
        the scanner cannot tell (a label, a directive, unbalanced brackets)."""
        if depth > _SKIP_DEPTH:
            return None
        if i in self.skipped_statements:
            return self.skipped_statements[i]
        end = self._statement_end(i, depth)
        self.skipped_statements[i] = end
        return end

    def _after_parens(self, i: int) -> int | None:
        """The index after the parenthesised group starting at or after `i`."""
        i = skip_ws(self.scan, i)
        if i >= len(self.scan) or self.scan[i] != "(":
            return None
        close = match_bracket(self.scan, i)
        return None if close is None else close + 1

    def _statement_end(self, i: int, depth: int) -> int | None:
        s = self.scan
        i = skip_ws(s, i)
        if i >= len(s):
            return None
        if s[i] == "{":
            close = match_bracket(s, i)
            return None if close is None else close + 1
        word = self.word_at(i)
        if word == "if":
            j = skip_ws(s, i + 2)
            if self.word_at(j) == "constexpr":
                j += len("constexpr")
            body = self._after_parens(j)
            end = None if body is None else self.skip_statement(body, depth + 1)
            if end is None:
                return None
            k = skip_ws(s, end)
            return self.skip_statement(k + 4, depth + 1) if self.word_at(k) == "else" else end
        if word in ("for", "while", "switch"):
            body = self._after_parens(i + len(word))
            return None if body is None else self.skip_statement(body, depth + 1)
        if word == "do":
            end = self.skip_statement(i + 2, depth + 1)
            k = skip_ws(s, end) if end is not None else -1
            cond = self._after_parens(k + 5) if k >= 0 and self.word_at(k) == "while" else None
            k = skip_ws(s, cond) if cond is not None else -1
            return k + 1 if 0 <= k < len(s) and s[k] == ";" else None
        if word in ("case", "default", "else"):
            return None
        while (m := _STOP.search(s, i)) is not None:
            c, j = m.group(), m.start()
            if c == ";":
                return j + 1
            if c in ")]}":
                return None
            close = match_bracket(s, j)
            if close is None:
                return None
            i = close + 1
        return None

    # -- arms ---------------------------------------------------------------
    def if_arms(self, pos: int) -> None:
        """An `if` at `pos`: its condition wrapped (or, `if constexpr`, its
        braced arms bumped), its false outcome paired with an `else`."""
        s = self.scan
        before = prev_nonspace(s, pos)
        kind = "else-if" if before >= 0 and word_before(s, before) == "else" else "if"
        j = skip_ws(s, pos + 2)
        constexpr = self.word_at(j) == "constexpr"
        if constexpr:
            j = skip_ws(s, j + len("constexpr"))
        close = match_bracket(s, j) if j < len(s) and s[j] == "(" else None
        if close is None:
            self.skip(pos, kind, "no condition in parentheses the scanner can find")
            return
        if constexpr:
            self.constexpr_arms(pos, kind, close)
            return
        condition = s[j + 1 : close]
        if ";" in condition:
            self.skip(pos, kind, "an init-statement in the condition")
            return
        if _DECLARATION.match(condition):
            self.skip(pos, kind, "a declaration as the condition")
            return
        k = self.counters(2)
        if k is None:
            self.skip(pos, kind, f"more than {MAX_COUNTERS} counters in one kernel")
            return
        self.insert(j + 1, 0, f"__sim_cov_br({k}, (")
        self.insert(close, 0, "))")
        self.arm(pos, kind, k)
        end = self.skip_statement(close + 1)
        other = skip_ws(s, end) if end is not None else -1
        if other >= 0 and self.word_at(other) == "else":
            if self.word_at(skip_ws(s, other + 4)) != "if":
                self.arm(other, "else", k + 1)
            return  # an `else if`: the next condition's test, counted there
        self.arm(pos, "not-taken", k + 1)

    def constexpr_arms(self, pos: int, kind: str, close: int) -> None:
        """`if constexpr`: a hit at the start of each braced arm."""
        s = self.scan
        self.bump_block(pos, kind, skip_ws(s, close + 1), "an unbraced arm of if constexpr")
        end = self.skip_statement(close + 1)
        other = skip_ws(s, end) if end is not None else -1
        if other >= 0 and self.word_at(other) == "else":
            arm = skip_ws(s, other + 4)
            if self.word_at(arm) != "if":
                self.bump_block(other, "else", arm, "an unbraced arm of if constexpr")

    def bump_block(self, pos: int, kind: str, brace: int, unbraced: str) -> None:
        """A hit right inside the block opening at `brace`, the arm at `pos`."""
        if brace >= len(self.scan) or self.scan[brace] != "{":
            self.skip(pos, kind, unbraced)
            return
        k = self.counters(1)
        if k is None:
            self.skip(pos, kind, f"more than {MAX_COUNTERS} counters in one kernel")
            return
        self.insert(brace + 1, -1, f" __sim_cov_hit({k});")
        self.arm(pos, kind, k)

    def label_arm(self, pos: int, word: str) -> None:
        """`case X:` or `default:`: a hit after the label's colon."""
        s = self.scan
        if word == "default":
            colon: int | None = skip_ws(s, pos + len(word))
            if colon is None or colon >= len(s) or s[colon] != ":" or s.startswith("::", colon):
                return  # `= default`: no label
        else:
            colon = self.case_colon(pos + len(word))
            if colon is None:
                self.skip(pos, "case", "the label's end could not be found")
                return
        k = self.counters(1)
        if k is None:
            self.skip(pos, word, f"more than {MAX_COUNTERS} counters in one kernel")
            return
        self.insert(colon + 1, -1, f" __sim_cov_hit({k});")
        self.arm(pos, word, k)

    def case_colon(self, i: int) -> int | None:
        """The colon ending a `case` label's expression from `i`: outside
        brackets, not `::`, not a ternary's."""
        s, pending = self.scan, 0
        while (m := _CASE_MARKS.search(s, i)) is not None:
            c, j = m.group(), m.start()
            if c in "([":
                close = match_bracket(s, j)
                if close is None:
                    return None
                i = close + 1
                continue
            if c in ";{})]":
                return None
            if c == "?":
                pending += 1
            elif s.startswith("::", j):
                i = j + 2
                continue
            elif pending:
                pending -= 1
            else:
                return j
            i = j + 1
        return None

    def ternary_arms(self, pos: int) -> None:
        """`c ? a : b`: the condition, from where the expression it ends
        starts, wrapped."""
        start = self.condition_start(pos)
        if start is None:
            self.skip(pos, "ternary", "its condition's start could not be found")
            return
        start = skip_ws(self.scan, start)
        if start >= pos:
            self.skip(pos, "ternary", "its condition's start could not be found")
            return
        k = self.counters(2)
        if k is None:
            self.skip(pos, "ternary", f"more than {MAX_COUNTERS} counters in one kernel")
            return
        self.insert(start, 1, f"__sim_cov_br({k}, (")
        self.insert(pos, 0, "))")
        self.arm(pos, "ternary-true", k)
        self.arm(pos, "ternary-false", k + 1)

    def condition_start(self, pos: int) -> int | None:
        """Where the condition of the ternary whose `?` is at `pos` starts:
        after the nearest operator of lower precedence (assignment, comma,
        `?`, `:`), open bracket, statement boundary or keyword such as
        `return`; None where that may be inside template arguments."""
        s = self.scan
        i = pos - 1
        while i >= 0:
            c = s[i]
            if c in ")]":
                open_at = self.opening(i)
                if open_at is None:
                    return None
                word = word_before(s, prev_nonspace(s, open_at))
                if c == ")" and word in _CONTROL:
                    return i + 1  # `if (x) c ? a : b;`: the statement starts after
                i = open_at - 1
                continue
            if c == "}" and self.braced_value(i):
                i = self.opening(i) - 1  # type: ignore[operator]  # braced_value found it
                continue
            if c in "([{};?" or (c == "," and not self.in_angles(i)):
                return i + 1
            if c == ",":
                return None
            if c == ":":
                if i > 0 and s[i - 1] == ":":
                    i -= 2
                    continue
                return i + 1
            if c == "=" and self.assignment_at(i):
                return i + 1
            if c.isalnum() or c == "_":
                word = word_before(s, i)
                if word in _LEFT_KEYWORDS:
                    return i + 1
                i -= len(word)
                continue
            i -= 1
        return 0

    def braced_value(self, close: int) -> bool:
        """Whether the `}` at `close` ends a braced value (`float2{a, b}`,
        `T<N>{}`) rather than a block: a type's name stands before its `{`."""
        s = self.scan
        opener = self.opening(close)
        if opener is None:
            return False
        before = prev_nonspace(s, opener)
        if before < 0:
            return False
        if s[before] == ">":
            return True
        word = word_before(s, before)
        return bool(word) and word not in _LEFT_KEYWORDS | {"try"}

    def assignment_at(self, i: int) -> bool:
        """Whether the `=` at `i` ends an assignment operator (not ==, !=, <=, >=)."""
        s = self.scan
        before = s[i - 1] if i > 0 else ""
        if before == "=" or (i + 1 < len(s) and s[i + 1] == "=") or before == "!":
            return False
        if before in "<>":
            return i > 1 and s[i - 2] == before  # <<= and >>= assign
        return True

    def in_angles(self, i: int) -> bool:
        """Whether more `<` than `>` stand between the statement's start and
        `i`: a comma that may separate template arguments. The running count
        is made once per text (asked per comma, a scan back to the
        statement's start was quadratic in a long initialiser)."""
        if self._angles is None:
            s, depth = self.scan, 0
            self._angles = ([], [])
            for m in _ANGLE_MARKS.finditer(s):
                c, j = m.group(), m.start()
                if c in ";{}":
                    depth = 0
                elif c == "<" and not (j > 0 and s[j - 1] == "<") and s[j + 1 : j + 2] not in "<=":
                    depth += 1
                elif (
                    c == ">" and not (j > 0 and s[j - 1] in "->=") and s[j + 1 : j + 2] not in ">="
                ):
                    depth -= 1
                self._angles[0].append(j)
                self._angles[1].append(depth)
        k = bisect.bisect_left(self._angles[0], i) - 1  # the last mark before i
        return k >= 0 and self._angles[1][k] > 0

    def opening(self, close: int) -> int | None:
        """The bracket that the one at `close` closes."""
        if self._openers is None:
            self._openers = {}
            for m in re.finditer(r"[(\[{]", self.scan):
                partner = match_bracket(self.scan, m.start())
                if partner is not None:
                    self._openers[partner] = m.start()
        return self._openers.get(close)

    def function_arms(self) -> None:
        """A hit at the start of every function body of the text (a header:
        helpers, specialisations, member functions), not of blocks inside one."""
        s = self.scan
        inside_until = -1  # the end of the function body being inside
        for m in re.finditer(r"\{", s):
            at = m.start()
            if at < inside_until:
                continue
            before = prev_nonspace(s, at)
            word = word_before(s, before) if before >= 0 else ""
            if word in _AFTER_PARAMETERS:
                before = prev_nonspace(s, before - len(word) + 1)
            if before < 0 or s[before] != ")":
                continue
            opener = self.opening(before)
            if opener is None or word_before(s, prev_nonspace(s, opener)) in (
                "__attribute__", "alignas", *_CONTROL,
            ):  # fmt: skip
                continue
            close = match_bracket(s, at)
            if close is None:
                continue
            inside_until = close
            self.bump_block(at, "function", at, "")

    def directive_arms(self) -> None:
        """What the directives hold that looks like an arm: left out."""
        for start, end in self.directives:
            text = self.directive_text[start:end]
            name = re.match(r"\s*#\s*\w*", text)
            skip_from = name.end() if name else 0
            for m in _TOKENS.finditer(text, skip_from):
                kind = "ternary" if m.group() == "?" else m.group()
                self.skip(start + m.start(), kind, "inside a preprocessor directive (a macro)")


def instrument(text: str, first: int = 0, functions: bool = False) -> Instrumented:
    """`text` (a candidate's header or kernel body) with its arms counted
    from counter `first` on; `functions`: count function bodies too (a
    header's; a body is one function already). Lines never move."""
    scan = _Scan(text, first)
    if functions:
        scan.function_arms()
    for m in _TOKENS.finditer(scan.scan):
        word = m.group()
        if word == "if":
            scan.if_arms(m.start())
        elif word == "?":
            scan.ternary_arms(m.start())
        else:
            scan.label_arm(m.start(), word)
    scan.directive_arms()
    out = scan.finish()
    assert out.text.count("\n") == text.count("\n"), "instrumentation changed the line count"
    return out


@functools.lru_cache(maxsize=32)
def instrument_spec(spec: KernelSpec) -> tuple[Instrumented | None, Instrumented]:
    """A kernel's header (its function bodies counted too) and body,
    instrumented with counters numbered header first: what the worker
    launches and what the parent reads its counts by. Kept for the specs
    asked last (the build, the map and the counts all ask); not to be
    changed by callers."""
    header = instrument(spec.header, 0, functions=True) if spec.header else None
    body = instrument(spec.source, header.end if header else 0)
    return header, body


def counters_of(spec: KernelSpec) -> int:
    """How many counters the kernel's instrumented variant bumps."""
    return instrument_spec(spec)[1].end


def arms_of(spec: KernelSpec) -> tuple[list[dict], list[dict]]:
    """The kernel's counted arms ({"line", "column", "kind", "counter"}) and
    those left out ({"line", "column", "kind", "reason"}), at lines of the
    candidate file (the lines a compile error names)."""
    header, body = instrument_spec(spec)
    arms, skipped = [], []
    for part, first_line in ((header, spec.header_line), (body, spec.body_line)):
        if part is None:
            continue
        for a in part.arms:
            arms.append(
                {
                    "line": first_line + a.line - 1,
                    "column": a.column,
                    "kind": a.kind,
                    "counter": a.counter,
                }
            )
        for k in part.skipped:
            skipped.append(
                {
                    "line": first_line + k.line - 1,
                    "column": k.column,
                    "kind": k.kind,
                    "reason": k.reason,
                }
            )
    return arms, skipped


class NotInstrumentable(Exception):
    """The generated text does not hold the candidate's text where its
    regions say (no arm can be placed)."""


def instrument_generated(text: str, regions: list, spec: KernelSpec) -> str:
    """The generated text of one call signature with the candidate's header
    and body replaced by their instrumented forms (instrument_spec), found
    where the regions of the candidate's file say they start."""
    header, body = instrument_spec(spec)
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    places = []
    for part, original, first_line in (
        (header, spec.header, spec.header_line),
        (body, spec.source, spec.body_line),
    ):
        if part is None:
            continue
        found = [r for r in regions if r.file == spec.source_file and r.start_line == first_line]
        if not found or not 0 < found[0].first <= len(starts):
            raise NotInstrumentable(f"no region of the candidate starts at line {first_line}")
        at = starts[found[0].first - 1]
        if not text.startswith(original, at):
            raise NotInstrumentable(f"the candidate's text is not where line {first_line} is")
        places.append((at, at + len(original), part.text))
    for start, end, new in sorted(places, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def buffer_count(params) -> int:
    """The buffer pointers a variant's glue binds (every parameter but the
    Metal attributes): the counters' pointer follows them."""
    return sum(1 for _name, role in params if not role.startswith("attr:"))


def glue(text: str, params) -> str:
    """The variant's glue, each thread first finding the counters after the
    kernel's own buffers (kernel.SimKernel passes them there)."""
    if not text.startswith(_GLUE_HEAD):
        raise NotInstrumentable("the glue does not start as the simulator's does")
    slot = buffer_count(params)
    line = f"  __sim_cov_counts = (unsigned long long*)__b[{slot}];\n"
    return _GLUE_HEAD + line + text[len(_GLUE_HEAD) :]
