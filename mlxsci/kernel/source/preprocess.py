"""The preprocessing a candidate goes through in every compiler, emulated for
the source policy (mlxsci/kernel/source/policy.py): which directives it may hold,
which groups of `#if` every compiler compiles, and the token stream that
comes out.

Directives: `#define`, `#undef`, `#if`, `#ifdef`, `#ifndef`, `#elif`,
`#elifdef`, `#elifndef`, `#else`, `#endif`, the null directive `#`,
`#include <name>` for the names the dialect allows (its own headers, never a
quoted or computed name), and the loop pragmas (`#pragma unroll [N]`,
`#pragma nounroll`, `#pragma clang loop hint(...)...`, `#pragma GCC unroll
N`). Anything else is refused, in taken and skipped groups alike.

Conditions: compilers predefine different macros (the simulator's prelude,
Metal's and NVRTC's headers, `__CUDA_ARCH__`, ...), so a condition that
tested one could send each compiler down a different branch, and the check
would vouch for a branch that is not compiled. A condition may therefore test
only names whose state the candidate itself has set above it (a `#define` or
`#undef` of that name); every such condition has the same value in every
compiler, and the policy follows exactly the groups every compiler compiles.
A macro call may not span a directive (compilers differ there), and every
part (the header, each body) closes the `#if` groups it opens, since MLX
puts its own text between the header and a body.
"""

from __future__ import annotations

from collections.abc import Callable

from mlxsci.kernel.source import conditions as source_conditions
from mlxsci.kernel.source.lexer import Line, Refused, Tok, lex_pasted
from mlxsci.kernel.source.macros import VA, Expander, Macro

__all__ = ["Preprocessor", "LOOP_HINTS"]

_CONDITIONALS = ("if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif")
# clang's `#pragma clang loop` hints (Clang Language Extensions, "Extensions
# for loop hint optimizations").
LOOP_HINTS = frozenset(
    "unroll unroll_count vectorize vectorize_width vectorize_predicate interleave "
    "interleave_count distribute pipeline pipeline_initiation_interval".split()
)
_PRAGMAS = (
    "`#pragma unroll [N]`, `#pragma nounroll`, `#pragma clang loop HINT(...)` "
    "and `#pragma GCC unroll N`"
)


class _Group:
    __slots__ = ("parent_active", "taken", "else_seen", "line")

    def __init__(self, parent_active: bool, line: int):
        self.parent_active = parent_active
        self.taken = not parent_active  # in a skipped group no branch is taken
        self.else_seen = False
        self.line = line


class Preprocessor:
    """One translation unit's macros, carried from the header into a body.

    `may_define(name, line)` refuses a name a candidate may not define;
    `check_tokens(toks)` refuses tokens the policy forbids (it sees every
    token a paste forms and every expanded condition and pragma);
    `check_macro(macro)` checks a replacement list as a fragment of code."""

    def __init__(
        self,
        headers: frozenset,
        may_define: Callable[[str, int], None],
        check_tokens: Callable[[list[Tok]], None],
        check_macro: Callable[[Macro], None],
        budget: int,
    ):
        self.headers = headers
        self.may_define = may_define
        self.check_tokens = check_tokens
        self.check_macro = check_macro
        self.macros: dict[str, Macro] = {}
        self.known: set[str] = set()  # names the candidate has #define'd or #undef'd
        # Names a condition may test though the candidate did not set them: the
        # simulator sets each exactly as the GPU's compiler does (policy.FAST_MATH).
        self.predefined: set[str] = set()
        self.expander = Expander(self.macros, self.known, lambda t: check_tokens([t]), budget)

    def fork(self) -> Preprocessor:
        """A copy to continue from here (the header's state, for each body)."""
        other = Preprocessor(self.headers, self.may_define, self.check_tokens, self.check_macro, 0)
        other.macros.update(self.macros)
        other.known.update(self.known)
        other.predefined.update(self.predefined)
        other.expander.budget = self.expander.budget
        return other

    # ------------------------------------------------------------ the walk
    def run(self, lines: list[Line]) -> list[Tok]:
        """The tokens every compiler sees from `lines` (one part), expanded."""
        out: list[Tok] = []
        block: list[Tok] = []
        groups: list[_Group] = []
        active = True
        unfinished: Tok | None = None
        for ln in lines:
            if not ln.directive:
                if active and ln.toks:
                    if not block:
                        if unfinished is not None and ln.toks[0].text == "(":
                            raise Refused(
                                unfinished.line,
                                f"the call of macro `{unfinished.text}` is split by a directive",
                            )
                        unfinished = None
                    block.extend(ln.toks)
                continue
            if block:
                out.extend(self.expander.expand(block))
                unfinished, block = self.expander.unfinished, []
            self.check_form(ln)
            active = self.directive(ln, groups, active)
        if block:
            out.extend(self.expander.expand(block))
        if groups:
            raise Refused(
                groups[-1].line,
                "this #if has no #endif in the same part: the header and each kernel body "
                "must close the #if groups they open",
            )
        return out

    def directive(self, ln: Line, groups: list[_Group], active: bool) -> bool:
        """Applies directive `ln`; returns whether the lines after it are taken."""
        toks, line = ln.toks, ln.line
        name = toks[1].text if len(toks) > 1 else ""
        if name in ("if", "ifdef", "ifndef"):
            group = _Group(active, line)
            groups.append(group)
            if active:
                group.taken = self.condition(name, toks[2:], line)
            return active and group.taken
        if name in ("elif", "elifdef", "elifndef", "else", "endif"):
            if not groups:
                raise Refused(line, f"#{name} without #if")
            group = groups[-1]
            if name == "endif":
                groups.pop()
                return group.parent_active
            if group.else_seen:
                raise Refused(line, f"#{name} after #else")
            if name == "else":
                group.else_seen = True
                taken, group.taken = not group.taken, True
                return taken
            if group.taken:
                return False
            group.taken = self.condition(name[2:] or "if", toks[2:], line)
            return group.taken
        if active and name == "define":
            self.define(toks[2:], line)
        elif active and name == "undef":
            if len(toks) != 3 or toks[2].kind != "id":
                raise Refused(line, "`#undef` takes one macro name")
            self.may_define(toks[2].text, line)
            self.macros.pop(toks[2].text, None)
            self.known.add(toks[2].text)
        elif active and name == "include" and self.known:
            raise Refused(
                line,
                "`#include` must come before the candidate's first #define or #undef "
                "(a header may change macros the check would then not know)",
            )
        elif active and name == "pragma":
            self.check_tokens(self.expander.expand(toks[2:]))
        return active

    def define(self, toks: list[Tok], line: int) -> None:
        macro = Macro.parse(toks, line)
        self.may_define(macro.name, line)
        self.check_macro(macro)
        params = macro.params or ()
        body = macro.body
        for k, t in enumerate(body):  # pastes of two written tokens: their product now
            if t.text != "##" or body[k - 1].text in params or body[k + 1].text in params:
                continue
            if k >= 2 and body[k - 2].text == "#" and macro.params is not None:
                continue
            made = lex_pasted(body[k - 1].text + body[k + 1].text)
            if made is None:
                raise Refused(line, f"`{body[k - 1].text} ## {body[k + 1].text}` is no valid token")
            self.check_tokens([made.copy(line=line)])
        self.macros[macro.name] = macro
        self.known.add(macro.name)

    # ------------------------------------------------------------ conditions
    def require_known(self, name: str, line: int) -> None:
        if name not in self.known and name not in self.predefined:
            raise Refused(
                line,
                f"`{name}` is tested here, but the candidate has not #define'd or #undef'd it "
                "above: each compiler predefines different names, so its branches could differ "
                "from what was checked. Test only macros the candidate sets itself (for a "
                f"default, write `#define {name} VALUE`)",
            )

    def condition(self, kind: str, toks: list[Tok], line: int) -> bool:
        if kind in ("ifdef", "ifndef", "def", "ndef"):
            if not toks or toks[0].kind != "id":
                raise Refused(line, f"`#{kind}` takes a macro name")
            self.require_known(toks[0].text, line)
            return (toks[0].text in self.macros) == (kind in ("ifdef", "def"))
        resolved: list[Tok] = []
        k = 0
        while k < len(toks):
            t = toks[k]
            if t.kind == "id" and t.text == "defined":
                paren = k + 1 < len(toks) and toks[k + 1].text == "("
                j = k + (2 if paren else 1)
                if (
                    j >= len(toks)
                    or toks[j].kind != "id"
                    or (paren and (j + 1 >= len(toks) or toks[j + 1].text != ")"))
                ):
                    raise Refused(line, "`defined` takes a macro name")
                self.require_known(toks[j].text, line)
                resolved.append(Tok("num", "1" if toks[j].text in self.macros else "0", line))
                k = j + (2 if paren else 1)
                continue
            resolved.append(t)
            k += 1
        expanded = self.expander.expand(resolved)
        self.check_tokens(expanded)
        values = []
        for t in expanded:
            if t.kind == "id":
                if t.text == "defined":
                    raise Refused(line, "`defined` made by a macro (write it in the #if itself)")
                if t.text not in ("true", "false"):
                    self.require_known(t.text, line)
                t = Tok("num", "1" if t.text == "true" else "0", t.line)
            values.append(t)
        return source_conditions.evaluate(values, line)

    # ------------------------------------------------------------ forms
    def check_form(self, ln: Line) -> None:
        """Refuses a directive the policy does not allow, taken or skipped."""
        toks, line = ln.toks, ln.line
        if len(toks) == 1:
            return  # the null directive
        head = toks[1]
        if head.kind != "id":
            raise Refused(line, f"`# {head.text}` (a line marker) is not allowed in a candidate")
        name = head.text
        if name in _CONDITIONALS or name in ("define", "undef"):
            return
        if name == "include":
            header = _header_name(toks[2:])
            if header not in self.headers:
                raise Refused(
                    line,
                    "a candidate may include only its dialect's own headers, written "
                    f"`#include <name>` ({', '.join(sorted(self.headers))})",
                )
            return
        if name == "pragma" and _loop_pragma(toks[2:]):
            return
        what = "this #pragma" if name == "pragma" else f"`#{name}`"
        raise Refused(
            line,
            f"{what} is not allowed in a kernel candidate: the directives allowed are "
            f"#define, #undef, #if/#ifdef/#ifndef/#elif/#else/#endif, #include of the "
            f"dialect's own headers and the loop pragmas {_PRAGMAS}",
        )


def _header_name(toks: list[Tok]) -> str | None:
    if len(toks) < 3 or toks[0].text != "<" or toks[-1].text != ">":
        return None
    inner = toks[1:-1]
    if any(t.space for t in inner[1:]) or toks[-1].space or inner[0].space:
        return None
    return "".join(t.text for t in inner)


def _plain(toks: list[Tok]) -> bool:
    return all(t.kind in ("id", "num", "punct") and t.text not in ("#", "##", VA) for t in toks)


def _loop_pragma(toks: list[Tok]) -> bool:
    words = [t.text for t in toks]
    if words[:1] == ["unroll"] or words[:2] == ["GCC", "unroll"]:
        return _plain(toks)
    if words == ["nounroll"]:
        return True
    if words[:2] != ["clang", "loop"] or len(words) < 3:
        return False
    k = 2
    while k < len(toks):  # HINT ( args ) ...
        if words[k] not in LOOP_HINTS or k + 1 >= len(toks) or words[k + 1] != "(":
            return False
        try:
            close = words.index(")", k + 1)
        except ValueError:
            return False
        if not _plain(toks[k + 2 : close]):
            return False
        k = close + 1
    return True
