"""Metal's language rules (Metal Shading Language Specification, "MSL" below,
3.x) that Apple's compiler enforces and clang-as-C++ does not:

  lambda      no lambda expressions (MSL 1.4.4/1.5.4, C++ features not supported;
              MSL 4.0 on macOS 26 relaxes this, the recorded M1 verdicts do not)
  program     program-scope variables must be declared in the `constant`
              address space (MSL 4.2); `constexpr` alone is not enough: Apple's
              compiler reports "program scope variable must reside in constant
              address space" for a namespace-scope `constexpr` (AdaptiveCpp#864,
              AliceO2#15802); `constexpr sampler` is the documented exception
              (MSL 2.10). Function-scope `static` variables are not supported.
  addrspace   every pointer or reference type names its address space (MSL 4:
              "pointer type must have explicit address space qualifier"), and no
              cast or initialization moves a pointer to another address space
              (clang: "converts between mismatching address spaces")
  keyword     `half` (a type keyword, MSL 2.1), the address spaces (MSL 4) and
              the function qualifiers kernel/vertex/fragment (MSL 5.1) are
              keywords and cannot name a variable, parameter, member or function.
              Vector and scalar typedef names (float2, uint, ...) are not
              keywords: C++ lets a declaration shadow them, so they are allowed.

The rules judge what Apple's compiler compiles: language_rules.check hands
`check_metal` the kernel text with the candidate's lines as preprocessing
leaves them (macros expanded, `#if` groups not taken left out), so a
construct hidden in a `#define` is refused at the line that uses the macro
(docs/simulator.md, "Metal's rules read what Apple's compiler compiles").

`check_metal` runs `_MetalChecker`: one pass over the tokens that tracks
scopes and statements (this module). It holds three parts that share one
`MetalNames` (the type names, the scopes with what each name holds, the
violations): the walk itself, `DeclarationRules` (metal_declaration_rules.py),
to which it hands each declaration, and `ExpressionRules`
(metal_expression_rules.py), which checks the casts of every statement and
the text's lambdas.
"""

from __future__ import annotations

from mlxsci.backends.sim.language_tokens import (
    CodeView,
    Token,
    Violation,
    close_angle,
    close_bracket,
    code_only,
    first_error,
    tokenize,
)
from mlxsci.backends.sim.metal_declaration_rules import DeclarationRules
from mlxsci.backends.sim.metal_expression_rules import ExpressionRules, MetalNames, Var
from mlxsci.kernel.spec import CompileError

__all__ = ["check_metal"]


class _Words:
    """The token texts of a statement from its start, gathered as the walk
    goes (recomputed per `{` they made a statement of many braces quadratic)."""

    def __init__(self, toks: list[Token], start: int):
        self.toks = toks
        self.end = start
        self.seen: set[str] = set()

    def upto(self, j: int) -> set[str]:
        """The texts of the statement's tokens before j."""
        self.seen.update(t.text for t in self.toks[self.end : j])
        self.end = max(self.end, j)
        return self.seen


class _MetalChecker:
    """One pass over the tokens: scopes and statements, each statement's
    casts checked by `expressions`, its declarations by `declarations`."""

    def __init__(self, code: str):
        self.toks = tokenize(code)
        self.names = MetalNames()
        self.expressions = ExpressionRules(self.names)
        self.declarations = DeclarationRules(self.names, self.expressions)
        self.params: list[tuple[str, Var]] = []  # of the function whose body opens next
        self.openings: dict[int, int] | None = None  # `)` -> its `(`, see paren_opening

    # -- the walk --------------------------------------------------------
    def run(self) -> list[Violation]:
        self.expressions.check_lambdas(self.toks)
        toks = self.toks
        names = self.names
        i = 0
        while i < len(toks):
            t = toks[i].text
            if t == "}":
                names.pop_scope()
                i += 1
                continue
            if t == ";":
                i += 1
                continue
            end, opens = self.statement_end(i)
            kind = self.statement(toks[i:end], opens)
            if opens:
                names.push_scope(kind)
                if kind == "function":
                    for name, var in self.params:
                        names.bind(name, var)
            self.params = []
            # a `}` that ends a statement (`enum E { A, B }`) still closes its scope
            i = end if end < len(toks) and toks[end].text == "}" else end + 1
        return names.out

    def statement_end(self, i: int) -> tuple[int, bool]:
        """(index of the `;` or block-opening `{` that ends the statement
        starting at i, whether it opens a block). Braces of initializers,
        brace-init and lambda bodies belong to the statement."""
        toks = self.toks
        j = i
        words = _Words(toks, i)
        while j < len(toks):
            t = toks[j].text
            if t in ("(", "["):
                j = close_bracket(toks, j) + 1
                continue
            if t == ";" or t == "}":
                return j, False
            if t == "{":
                if self.opens_block(i, j, words.upto(j)):
                    return j, True
                j = close_bracket(toks, j) + 1
                continue
            j += 1
        return len(toks), False

    def opens_block(self, start: int, j: int, words: set[str]) -> bool:
        """Whether the `{` at j (in the statement from `start`, whose token
        texts up to j are `words`) opens a body or block rather than an
        initializer or a lambda body."""
        toks = self.toks
        if j == start:
            return True
        prev = toks[j - 1].text
        if (
            words & {"struct", "class", "union", "enum", "namespace"}
            and "=" not in words
            and "(" not in words
        ):
            return True
        if prev == ")":
            # a lambda's parameter list follows its capture list: `](...) {`
            k = self.paren_opening(j - 1)
            k = k if k > start else start
            return not (k > start and toks[k - 1].text == "]")
        if prev in ("else", "do", "try", ":", '"', "const", "noexcept", "override", "final"):
            return True
        if prev == "]" and j >= 2 and toks[j - 2].text == "]":  # after [[attributes]]
            return True
        return False

    def paren_opening(self, close: int) -> int:
        """Index of the `(` that the `)` at `close` closes, counting
        parentheses only, or -1 where none does. Worked out for every `)` on
        the first call (a backward scan per `{` was quadratic)."""
        if self.openings is None:
            self.openings = {}
            stack: list[int] = []
            for k, t in enumerate(self.toks):
                if t.text == "(":
                    stack.append(k)
                elif t.text == ")" and stack:
                    self.openings[k] = stack.pop()
        return self.openings.get(close, -1)

    # -- statements ------------------------------------------------------
    def statement(self, stmt: list[Token], opens: bool) -> str:
        """Checks one statement; returns the kind of scope its `{` opens."""
        scope = self.names.scope
        self.expressions.check_casts(stmt)
        if not stmt:
            return scope
        body = self.strip_template(stmt)
        head = [t.text for t in body]
        if head[:1] == ["namespace"] or head[:1] == ["extern"]:
            return "program"
        if (
            head[:1]
            and head[0] in ("struct", "class", "union", "enum")
            or (
                head[:1] == ["typedef"]
                and len(head) > 1
                and head[1] in ("struct", "class", "union", "enum")
            )
        ):
            k = 1 if head[0] != "typedef" else 2
            if k < len(head) and head[k] == "class" and head[k - 1] == "enum":
                k += 1
            if k < len(body) and body[k].is_ident:
                self.names.types.add(body[k].text)
                self.declarations.check_name(body[k], what="type")
            if head[0] == "typedef" and not opens and body[-1].is_ident:
                self.names.types.add(body[-1].text)
            return "enum" if "enum" in head[:3] else "type"
        if head[:1] == ["typedef"]:
            if body and body[-1].is_ident:
                self.names.types.add(body[-1].text)
            return scope
        if head[:1] == ["using"]:
            if len(head) > 2 and head[2] == "=" and body[1].is_ident:
                self.names.types.add(body[1].text)
            return scope
        if scope == "enum":
            return scope
        if scope == "function":
            self.function_statement(body, opens)
            return "function"
        # program or type scope: a function or a variable
        self.params = self.declarations.declaration(body, scope, opens)
        return "function" if opens else scope

    def strip_template(self, stmt: list[Token]) -> list[Token]:
        """The statement without leading `template <...>` headers (whose type
        parameters become type names) and [[attributes]]."""
        k = 0
        while k < len(stmt):
            if stmt[k].text == "template" and k + 1 < len(stmt) and stmt[k + 1].text == "<":
                end = close_angle(stmt, k + 1)
                if end is None:
                    break
                inner = stmt[k + 2 : end]
                for a, b in zip(inner, inner[1:]):
                    if a.text in ("typename", "class") and b.is_ident:
                        self.names.types.add(b.text)
                k = end + 1
            elif stmt[k].text == "[" and k + 1 < len(stmt) and stmt[k + 1].text == "[":
                k = close_bracket(stmt, k) + 1
            else:
                break
        return stmt[k:]

    def function_statement(self, body: list[Token], opens: bool) -> None:
        head = [t.text for t in body]
        if head[:1] == ["for"] and len(body) > 2 and head[1] == "(":
            inner = body[2 : close_bracket(body, 1)]
            semi = next((k for k, t in enumerate(inner) if t.text == ";"), len(inner))
            self.declarations.local_declaration(inner[:semi])
            return
        if head[:1] and head[0] in (
            "if",
            "while",
            "switch",
            "return",
            "else",
            "do",
            "case",
            "default",
            "break",
            "continue",
            "goto",
        ):
            return
        self.declarations.local_declaration(body)


def check_metal(
    text: str, regions, source_file: str = "<candidate>", view: CodeView | None = None
) -> CompileError | None:
    """The first Metal language rule the kernel text breaks, as a CompileError
    at the candidate's line; None where it breaks none. `view`: the text as
    Apple's compiler compiles it, macros expanded and `#if` groups not taken
    left out (language_rules.expanded); without one, the text as written."""
    code = view.code if view is not None else code_only(text)
    return first_error(_MetalChecker(code).run(), text, regions, source_file, view)
