"""The static half of a transfer check: where a candidate's code keys on a
value of the task's listed sizes.

A kernel tuned for the sizes it was measured on shows it in its text: a
comparison with a size's value (`NX == 256u`), a `case 768:` label, a
template instantiated for one (`tile<1024>`). Such a literal is no proof of
gaming (a 256-thread group is a fine choice anywhere), but it is where a
reader should look, and a literal that only the published held-out size
has (never a size the search scored) is the enumeration of a disclosed
configuration: grade C (mlxsci/transfer/grading.py).

The text is read with the source policy's own lexer
(mlxsci.kernel.source.lexer), so comments and string literals are never
mistaken for code and every token keeps its line of the candidate file.
What is found: comparisons (==, !=, <, <=, >, >=) with an integer literal
directly on one side (parentheses allowed), `case N:` labels, and integer
literals inside a template argument or parameter list. A comparison also
counts with the value it really tests: a side of literals alone folded
(`NX == 767u + 1u`, `NX == (2 * 384)`), the integer boundary of a strict
one (`NX > 767u` is `NX >= 768u`), and a size moved by a literal against a
constant (`768u - NX == 0u`, `NX + 1u == 769u`, `(NX ^ 768u) == 0u`).
Integer literals in any base C++ spells (decimal, hex, octal, binary, digit
separators) with or without u/U/l/L suffixes count; floating literals do
not, nor does one too long for 64 bits. 0 and 1 are ignored: every kernel
compares with them. Not found: one held in a named constant compared later,
arithmetic beyond those shapes, or one in a `//!` launch expression (a
comment to the lexer).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from mlxsci.kernel.candidate import CandidateError, parse
from mlxsci.kernel.source.lexer import Refused, Tok, lex_part
from mlxsci.task import SIZE_SETS, Task

COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
IGNORED_VALUES = frozenset({0, 1})
# Bounds on what one candidate can make the scan do or say: a text is at
# most 2 MiB (mlxsci.kernel.candidate.MAX_CANDIDATE_BYTES), but its findings
# end up in summaries and tables, and a template list is short.
MAX_FINDINGS = 200
MAX_TEMPLATE_TOKENS = 64
MAX_OPERAND_TOKENS = 6
MAX_SHOWN_CHARS = 60
# Where a template argument list cannot continue: these end the search for
# its closing `>`, and the `<` is then a comparison.
NOT_IN_TEMPLATE = frozenset({";", "{", "}", "&&", "||"})
# What ends an operand when walking away from a comparison operator.
OPERAND_ENDS = frozenset(
    {"(", ")", ",", ";", "{", "}", "&&", "||", "?", ":", "=", "!", "return"} | COMPARISONS
)
# No size needs more than 64 bits: a longer literal (which Python would not
# even convert past 4300 decimal digits) or a folded value beyond it is none.
MAX_VALUE_BITS = 64
MAX_LITERAL_CHARS = 2 + MAX_VALUE_BITS + 3  # `0b`, 64 binary digits, a suffix
# The operators a side of literals alone is folded through (C's integer ones).
FOLDED = frozenset({"+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "~", "(", ")"})
# A size moved by a literal (`NX - 768u`): the operators solved for the size.
MOVED = frozenset({"+", "-", "^"})
_INTEGER = re.compile(
    r"(?:0[xX](?P<hex>[0-9a-fA-F]+)|0[bB](?P<bin>[01]+)|(?P<dec>[1-9][0-9]*)|(?P<oct>0[0-7]*))"
    r"(?:[uU](?:ll|LL|l|L)?|(?:ll|LL|l|L)[uU]?)?\Z"
)


class ScanError(ValueError):
    """The candidate cannot be read: its format, or text the lexer refuses."""


@dataclass(frozen=True)
class Finding:
    """One literal the scan found. kind: comparison, case or template; what:
    the construct as written (e.g. "comparison `NX == 256u`"); line: its
    line in the candidate file; params and sets: which size parameters and
    which size sets (smoke, in-dist, held-out, default) have the value."""

    kind: str
    what: str
    line: int
    value: int
    params: tuple[str, ...]
    sets: tuple[str, ...]

    @property
    def held_out_only(self) -> bool:
        """The value is in the listed held-out size and in no size a search
        scores (smoke or in-dist): only a disclosed held-out gives it."""
        return "held-out" in self.sets and not {"smoke", "in-dist"} & set(self.sets)

    def to_evidence(self) -> dict:
        only = " (held-out only)" if self.held_out_only else ""
        return {
            "what": f"{self.what}: {', '.join(self.params)} = {self.value} in "
            f"{', '.join(self.sets)}{only}",
            "where": f"line {self.line}",
            "numbers": {
                "value": self.value,
                "params": list(self.params),
                "sets": list(self.sets),
                "held_out_only": self.held_out_only,
            },
        }


def integer_value(text: str) -> int | None:
    """The value of an integer literal token (`256`, `0x100u`, `1'024UL`,
    `0400`), None for anything else (a floating literal, a user-defined one,
    one too long for MAX_VALUE_BITS)."""
    text = text.replace("'", "")
    if len(text) > MAX_LITERAL_CHARS:
        return None
    m = _INTEGER.match(text)
    if m is None:
        return None
    if m.group("hex"):
        return int(m.group("hex"), 16)
    if m.group("bin"):
        return int(m.group("bin"), 2)
    if m.group("dec"):
        value = int(m.group("dec"))
        return value if value.bit_length() <= MAX_VALUE_BITS else None
    return int(m.group("oct"), 8)


def size_values(task: Task) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each integer value of a size parameter in the task's listed sizes
    (and defaults) -> (the parameters that take it, the sets that have it)."""
    found: dict[int, tuple[set, list]] = {}

    def note(value, name: str, which: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            return
        params, sets = found.setdefault(value, (set(), []))
        params.add(name)
        if which not in sets:
            sets.append(which)

    for which in SIZE_SETS:
        for size in task.sizes.get(which, ()):
            for name, value in size.params.items():
                note(value, name, which)
    for name, value in task.defaults.items():
        note(value, name, "default")
    return {v: (tuple(sorted(p)), tuple(s)) for v, (p, s) in found.items()}


def scan(task: Task, source: str, dialect: str = "metal", filename: str = "<candidate>"):
    """The findings (list[Finding], in order of line) in the candidate
    `source`: every comparison, case label and template argument whose
    integer literal is a value of a size parameter of the task's listed
    sizes (0 and 1 aside). ScanError when the text cannot be read."""
    try:
        cand = parse(source, dialect=dialect, filename=filename)
        parts = [(cand.header, cand.header_line)] if cand.header else []
        parts += [(k.body, k.body_line) for k in cand.kernels]
        token_lists = [
            [t for ln in lex_part(text, first) for t in ln.toks] for text, first in parts
        ]
    except CandidateError as exc:
        raise ScanError(str(exc)) from None
    except Refused as exc:
        where = f"{filename}:{exc.line}: " if exc.line else f"{filename}: "
        raise ScanError(where + exc.message) from None
    values = size_values(task)
    findings: list[Finding] = []
    for toks in token_lists:
        findings += scan_tokens(toks, values)
    findings.sort(key=lambda f: f.line)
    return findings[:MAX_FINDINGS]


def scan_tokens(toks: list[Tok], values: dict) -> list[Finding]:
    """The findings in one part's tokens: template lists first, so that
    their `<` and `>` are not read as comparisons."""
    found: list[Finding] = []
    taken: set[int] = set()
    for k, tok in enumerate(toks):
        if tok.text == "<" and k > 0 and toks[k - 1].kind == "id":
            close = template_close(toks, k)
            if close is not None:
                taken.update((k, close))
                found += template_findings(toks, k, close, values)
    for k, tok in enumerate(toks):
        if tok.kind == "punct" and tok.text in COMPARISONS and k not in taken:
            found += comparison_findings(toks, k, values)
        elif tok.kind == "id" and tok.text == "case":
            found += case_findings(toks, k, values)
    return found


def template_close(toks: list[Tok], start: int) -> int | None:
    """The index of the `>` closing the template list opened at `start`,
    or None when the `<` opens none (a comparison): a token no template
    argument holds, an unbalanced bracket, or no `>` within
    MAX_TEMPLATE_TOKENS. A `>>` closes two lists; its index is returned
    when it closes this one."""
    angle, brackets = 1, 0
    for k in range(start + 1, min(len(toks), start + 1 + MAX_TEMPLATE_TOKENS)):
        text = toks[k].text
        if toks[k].kind != "punct":
            continue
        if text in NOT_IN_TEMPLATE:
            return None
        if text in ("(", "["):
            brackets += 1
        elif text in (")", "]"):
            brackets -= 1
            if brackets < 0:
                return None
        elif brackets == 0 and text == "<":
            angle += 1
        elif brackets == 0 and text in (">", ">>"):
            angle -= 1 if text == ">" else 2
            if angle <= 0:
                return k
    return None


def template_findings(toks: list[Tok], start: int, close: int, values: dict) -> list[Finding]:
    """A finding per listed value among the integer literals of the template
    list toks[start..close] (`name<...>`; after `template`, a parameter list
    whose defaults these are)."""
    name = toks[start - 1].text
    kind_word = "template parameter" if name == "template" else "template argument"
    shown = show(toks[start - 1 : close + 1])
    found = []
    for tok in toks[start + 1 : close]:
        finding = make_finding("template", f"{kind_word} `{shown}`", tok, values)
        if finding:
            found.append(finding)
    return found


def comparison_findings(toks: list[Tok], k: int, values: dict) -> list[Finding]:
    """The findings of a comparison at toks[k]: a listed value directly on
    either side (through parentheses), or one the comparison tests
    (compared_values): one finding per value."""
    right = k + 1
    while right < len(toks) and toks[right].text == "(":
        right += 1
    left = k - 1
    while left >= 0 and toks[left].text == ")":
        left -= 1
    sides = (operand(toks, k, -1), operand(toks, k, 1))
    what = f"comparison `{show(sides[0] + [toks[k]] + sides[1])}`"
    found: list[Finding] = []
    seen: set[int] = set()

    def note(tok: Tok, value: int | None = None) -> None:
        finding = make_finding("comparison", what, tok, values, value)
        if finding and finding.value not in seen:
            seen.add(finding.value)
            found.append(finding)

    for side in (left, right):
        if 0 <= side < len(toks) and toks[side].kind == "num":
            note(toks[side])
    for value in compared_values(sides[0], toks[k].text, sides[1]):
        note(toks[k], value)
    return found


def compared_values(left: list[Tok], op: str, right: list[Tok]) -> list[int]:
    """The values a comparison `left op right` tests a size against, beyond
    a literal written beside the operator: a side of literals alone, folded;
    for a strict comparison, the boundary it means (`x > 767` is `x >= 768`);
    and against a constant, a size moved by a literal, solved (`768 - x ==
    0`, `x + 1 == 769`, `(x ^ 768) == 0`: x is 768)."""
    consts = [fold(left), fold(right)]
    found: list[int | None] = [c for c in consts if c is not None]
    # The boundary: as if the constant were on the right of the operator.
    for c, flipped in ((consts[1], False), (consts[0], True)):
        if c is not None and op in ("<", ">"):
            found.append(c + 1 if (op == ">") != flipped else c - 1)
    for side, other in ((left, consts[1]), (right, consts[0])):
        moved = moved_size(side)
        if other is not None and moved is not None and op == "==":
            found.append(solve(moved, other))
    return [v for v in found if v is not None and 0 <= v < 1 << MAX_VALUE_BITS]


def fold(toks: list[Tok]) -> int | None:
    """The value of an operand of integer literals and C's integer
    operators alone (`767u + 1u`, `(2 * 384)`), None for anything else."""
    if not toks or not any(t.kind == "num" for t in toks):
        return None
    words = []
    for t in toks:
        if t.kind == "num":
            value = integer_value(t.text)
            if value is None:
                return None
            words.append(str(value))
        elif t.kind == "punct" and t.text in FOLDED:
            words.append("//" if t.text == "/" else t.text)
        else:
            return None
    try:
        return folded(ast.parse(" ".join(words), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
        return None


def folded(node) -> int | None:
    """The value of a parsed integer expression, kept within MAX_VALUE_BITS."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        inner = folded(node.operand)
        if inner is None:
            return None
        value = {ast.USub: -inner, ast.UAdd: inner, ast.Invert: ~inner}[type(node.op)]
    elif isinstance(node, ast.BinOp):
        a, b = folded(node.left), folded(node.right)
        if a is None or b is None:
            return None
        if isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= b < MAX_VALUE_BITS:
            return None
        ops = {
            ast.Add: lambda: a + b,
            ast.Sub: lambda: a - b,
            ast.Mult: lambda: a * b,
            ast.FloorDiv: lambda: a // b,
            ast.Mod: lambda: a % b,
            ast.LShift: lambda: a << b,
            ast.RShift: lambda: a >> b,
            ast.BitAnd: lambda: a & b,
            ast.BitOr: lambda: a | b,
            ast.BitXor: lambda: a ^ b,
        }
        if type(node.op) not in ops:
            return None
        value = ops[type(node.op)]()
    else:
        return None
    return value if abs(value).bit_length() <= MAX_VALUE_BITS else None


def moved_size(toks: list[Tok]) -> tuple[str, int, bool] | None:
    """(operator, literal, literal first) when the operand is a name moved
    by one literal: `x - 768u`, `768u - x`, `(x ^ 768u)`; else None."""
    core = [t for t in toks if t.text not in ("(", ")")]
    if len(core) != 3 or core[1].kind != "punct" or core[1].text not in MOVED:
        return None
    kinds = (core[0].kind, core[2].kind)
    if kinds not in (("id", "num"), ("num", "id")):
        return None
    literal = integer_value(core[2].text if kinds[1] == "num" else core[0].text)
    return None if literal is None else (core[1].text, literal, kinds[0] == "num")


def solve(moved: tuple[str, int, bool], c: int) -> int | None:
    """The x for which the moved size (moved_size) equals `c`."""
    op, literal, first = moved
    if op == "+":
        return c - literal
    if op == "^":
        return c ^ literal
    return literal - c if first else c + literal


def operand(toks: list[Tok], k: int, step: int) -> list[Tok]:
    """The tokens of the operand on one side of toks[k] (step -1: left, 1:
    right), as far as a token that ends an operand at bracket depth 0 and at
    most MAX_OPERAND_TOKENS; in the order written."""
    taken: list[Tok] = []
    depth = 0
    j = k + step
    opens, closes = ("(", "[") if step > 0 else (")", "]"), (")", "]") if step > 0 else ("(", "[")
    while 0 <= j < len(toks) and len(taken) < MAX_OPERAND_TOKENS:
        text = toks[j].text
        if text in opens:
            depth += 1
        elif text in closes:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and text in OPERAND_ENDS:
            break
        taken.append(toks[j])
        j += step
    return taken if step > 0 else taken[::-1]


def case_findings(toks: list[Tok], k: int, values: dict) -> list[Finding]:
    """The finding of a `case N:` label (N in parentheses or not)."""
    j = k + 1
    while j < len(toks) and toks[j].text == "(":
        j += 1
    if j >= len(toks) or toks[j].kind != "num":
        return []
    finding = make_finding("case", f"case label `case {toks[j].text}:`", toks[j], values)
    return [finding] if finding else []


def make_finding(
    kind: str, what: str, tok: Tok, values: dict, value: int | None = None
) -> Finding | None:
    """A Finding for the literal `tok` when it is an integer literal whose
    value a listed size has (0 and 1 never count), or, given `value`, for
    that value, at `tok`'s line; else None."""
    if value is None:
        if tok.kind != "num":
            return None
        value = integer_value(tok.text)
    if value is None or value in IGNORED_VALUES or value not in values:
        return None
    params, sets = values[value]
    return Finding(kind, what, tok.line, value, params, sets)


def show(toks: list[Tok]) -> str:
    """The tokens as written (their spacing kept), at most MAX_SHOWN_CHARS."""
    text = "".join((" " if t.space and i else "") + t.text for i, t in enumerate(toks))
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."
