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
literals inside a template argument or parameter list. Integer literals in
any base C++ spells (decimal, hex, octal, binary, digit separators) with or
without u/U/l/L suffixes count; floating literals do not. 0 and 1 are
ignored: every kernel compares with them. Not found: a value computed from
other literals (`2 * 384`), one held in a named constant compared later,
or one in a `//!` launch expression (a comment to the lexer).
"""

from __future__ import annotations

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
    `0400`), None for anything else (a floating literal, a user-defined one)."""
    m = _INTEGER.match(text.replace("'", ""))
    if m is None:
        return None
    if m.group("hex"):
        return int(m.group("hex"), 16)
    if m.group("bin"):
        return int(m.group("bin"), 2)
    if m.group("dec"):
        return int(m.group("dec"))
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
    """The finding of a comparison at toks[k] with a listed value directly
    on either side (through parentheses)."""
    right = k + 1
    while right < len(toks) and toks[right].text == "(":
        right += 1
    left = k - 1
    while left >= 0 and toks[left].text == ")":
        left -= 1
    found = []
    for side in (left, right):
        if 0 <= side < len(toks) and toks[side].kind == "num":
            what = f"comparison `{show(operand(toks, k, -1) + [toks[k]] + operand(toks, k, 1))}`"
            finding = make_finding("comparison", what, toks[side], values)
            if finding:
                found.append(finding)
    return found


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


def make_finding(kind: str, what: str, tok: Tok, values: dict) -> Finding | None:
    """A Finding for the literal `tok` when it is an integer literal whose
    value a listed size has (0 and 1 never count); else None."""
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
