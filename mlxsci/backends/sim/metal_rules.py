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

`check_metal` runs `_MetalChecker`: one pass over the tokens that tracks
scopes and declarations (this module) and checks expressions with the
rules it inherits (metal_expression_rules.py).
"""

from __future__ import annotations

from mlxsci.backends.base import CompileError
from mlxsci.backends.sim.language_tokens import (
    _close,
    _close_angle,
    _code_only,
    _first,
    _Tok,
    _Violation,
)
from mlxsci.backends.sim.metal_expression_rules import (
    _ADDRESS_SPACES,
    _MetalExpressionChecker,
    _Scope,
    _Var,
)

__all__ = ["check_metal"]


_FUNCTION_QUALIFIERS = frozenset({"kernel", "vertex", "fragment"})
# Words of Metal's language that can never name anything (see the module docstring).
_METAL_KEYWORDS = {"half": "a Metal scalar type keyword (MSL 2.1)"}
_METAL_KEYWORDS.update({w: "a Metal address-space keyword (MSL 4)" for w in _ADDRESS_SPACES})
_METAL_KEYWORDS.update(
    {w: "a Metal function qualifier keyword (MSL 5.1)" for w in _FUNCTION_QUALIFIERS}
)
# Words that may precede or follow the type in a declaration's specifiers.
_SPECIFIERS = (
    frozenset(
        {
            "const",
            "volatile",
            "constexpr",
            "static",
            "inline",
            "extern",
            "typename",
            "register",
            "mutable",
            "struct",
            "class",
            "enum",
            "union",
        }
    )
    | _ADDRESS_SPACES
)
_INTEGER_WORDS = frozenset({"int", "char", "short", "long"})


class _MetalChecker(_MetalExpressionChecker):
    """One pass over the tokens: scopes, declarations and casts."""

    # -- the walk --------------------------------------------------------
    def run(self) -> list[_Violation]:
        self.check_lambdas()
        toks = self.toks
        i = 0
        while i < len(toks):
            t = toks[i].text
            if t == "}":
                if len(self.scopes) > 1:
                    self.scopes.pop()
                i += 1
                continue
            if t == ";":
                i += 1
                continue
            end, opens = self.statement_end(i)
            kind = self.statement(toks[i:end], opens)
            if opens:
                scope = _Scope(kind)
                if kind == "function":
                    scope.names.update(self.params)
                self.scopes.append(scope)
            self.params = []
            # a `}` that ends a statement (`enum E { A, B }`) still closes its scope
            i = end if end < len(toks) and toks[end].text == "}" else end + 1
        return self.out

    def statement_end(self, i: int) -> tuple[int, bool]:
        """(index of the `;` or block-opening `{` that ends the statement
        starting at i, whether it opens a block). Braces of initializers,
        brace-init and lambda bodies belong to the statement."""
        toks = self.toks
        j = i
        while j < len(toks):
            t = toks[j].text
            if t in ("(", "["):
                j = _close(toks, j) + 1
                continue
            if t == ";" or t == "}":
                return j, False
            if t == "{":
                if self.opens_block(i, j):
                    return j, True
                j = _close(toks, j) + 1
                continue
            j += 1
        return len(toks), False

    def opens_block(self, start: int, j: int) -> bool:
        """Whether the `{` at j (in the statement from `start`) opens a body
        or block rather than an initializer or a lambda body."""
        toks = self.toks
        if j == start:
            return True
        prev = toks[j - 1].text
        words = {t.text for t in toks[start:j]}
        if (
            words & {"struct", "class", "union", "enum", "namespace"}
            and "=" not in words
            and "(" not in words
        ):
            return True
        if prev == ")":
            # a lambda's parameter list follows its capture list: `](...) {`
            k = j - 1
            depth = 0
            while k > start:
                if toks[k].text == ")":
                    depth += 1
                elif toks[k].text == "(":
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            return not (k > start and toks[k - 1].text == "]")
        if prev in ("else", "do", "try", ":", '"', "const", "noexcept", "override", "final"):
            return True
        if prev == "]" and j >= 2 and toks[j - 2].text == "]":  # after [[attributes]]
            return True
        return False

    # -- statements ------------------------------------------------------
    def statement(self, stmt: list[_Tok], opens: bool) -> str:
        """Checks one statement; returns the kind of scope its `{` opens."""
        scope = self.scopes[-1].kind
        self.check_casts(stmt)
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
                self.types.add(body[k].text)
                self.check_name(body[k], what="type")
            if head[0] == "typedef" and not opens and body[-1].is_ident:
                self.types.add(body[-1].text)
            return "enum" if "enum" in head[:3] else "type"
        if head[:1] == ["typedef"]:
            if body and body[-1].is_ident:
                self.types.add(body[-1].text)
            return scope
        if head[:1] == ["using"]:
            if len(head) > 2 and head[2] == "=" and body[1].is_ident:
                self.types.add(body[1].text)
            return scope
        if scope == "enum":
            return scope
        if scope == "function":
            self.function_statement(body, opens)
            return "function"
        # program or type scope: a function or a variable
        self.declaration(body, scope, opens)
        return "function" if opens else scope

    def strip_template(self, stmt: list[_Tok]) -> list[_Tok]:
        """The statement without leading `template <...>` headers (whose type
        parameters become type names) and [[attributes]]."""
        k = 0
        while k < len(stmt):
            if stmt[k].text == "template" and k + 1 < len(stmt) and stmt[k + 1].text == "<":
                end = _close_angle(stmt, k + 1)
                if end is None:
                    break
                inner = stmt[k + 2 : end]
                for a, b in zip(inner, inner[1:]):
                    if a.text in ("typename", "class") and b.is_ident:
                        self.types.add(b.text)
                k = end + 1
            elif stmt[k].text == "[" and k + 1 < len(stmt) and stmt[k + 1].text == "[":
                k = _close(stmt, k) + 1
            else:
                break
        return stmt[k:]

    def function_statement(self, body: list[_Tok], opens: bool) -> None:
        head = [t.text for t in body]
        if head[:1] == ["for"] and len(body) > 2 and head[1] == "(":
            inner = body[2 : _close(body, 1)]
            semi = next((k for k, t in enumerate(inner) if t.text == ";"), len(inner))
            self.local_declaration(inner[:semi])
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
        self.local_declaration(body)

    # -- declarations ----------------------------------------------------
    def specifiers(self, toks: list[_Tok], k: int = 0) -> tuple[int, list[_Tok], str | None] | None:
        """Parses decl-specifiers from toks[k]: (index after them, the
        specifier tokens, the type word), or None where no type is named."""
        start = k
        type_word = None
        while k < len(toks):
            t = toks[k].text
            if t in _SPECIFIERS:
                # an address-space keyword right before a declarator end is a name, not a specifier
                if (
                    type_word is not None
                    and t in _METAL_KEYWORDS
                    and k + 1 < len(toks)
                    and toks[k + 1].text in ("=", ";", ",", "[", ")", "(", "{", ":")
                ):
                    break
                k += 1
                continue
            if t == "metal" and k + 1 < len(toks) and toks[k + 1].text == "::":
                k += 2
                continue
            if type_word is None and toks[k].is_ident and self.is_type(t):
                type_word = t
                k += 1
                if t in ("unsigned", "signed", "long", "short"):
                    while k < len(toks) and toks[k].text in _INTEGER_WORDS:
                        k += 1
                if k < len(toks) and toks[k].text == "<":
                    end = _close_angle(toks, k)
                    if end is None:
                        return None
                    k = end + 1
                if k < len(toks) and toks[k].text == "::":  # T::member: not a plain type
                    return None
                continue
            break
        if type_word is None:
            return None
        return k, toks[start:k], type_word

    def declarators(
        self, toks: list[_Tok], k: int
    ) -> list[tuple[list[_Tok], _Tok | None, list[_Tok]]]:
        """Splits toks[k:] at top-level commas into (pointer/reference marks,
        name token, the rest: array bounds, attributes, initializer)."""
        out = []
        while k < len(toks):
            marks: list = []
            while k < len(toks) and (
                toks[k].text in ("*", "&", "&&") or (marks and toks[k].text in _SPECIFIERS)
            ):
                marks.append(toks[k])
                k += 1
            name = toks[k] if k < len(toks) and toks[k].is_ident else None
            if name is not None:
                k += 1
            rest_start = k
            while k < len(toks) and toks[k].text != ",":
                if toks[k].text in ("(", "[", "{"):
                    k = _close(toks, k)
                elif toks[k].text == "<":
                    end = _close_angle(toks, k)
                    k = end if end is not None else k
                k += 1
            out.append((marks, name, toks[rest_start:k]))
            k += 1
        return out

    def local_declaration(self, body: list[_Tok]) -> None:
        spec = self.specifiers(body)
        if spec is None:
            return
        k, specs, type_word = spec
        if k >= len(body) or not (body[k].is_ident or body[k].text in ("*", "&")):
            return  # `float(x);`, `half2 = ...` and other expressions
        words = {t.text for t in specs}
        if "static" in words and "constant" not in words:
            self.flag(
                body[0],
                "function-scope static variables are not supported in Metal: a "
                "static variable must be at program scope in the constant address "
                "space (MSL 4.2); move it out of the function as `constant ...`",
            )
        self.declare(specs, type_word, body, k, default_space="thread")

    def declaration(self, body: list[_Tok], scope: str, opens: bool) -> None:
        """A declaration at program or type scope: a function, a variable or a member."""
        paren = self.function_paren(body)
        if paren is not None:
            name_tok = body[paren - 1]
            self.check_name(name_tok, what="function")
            close = _close(body, paren)
            if opens or self.looks_like_parameters(body[paren + 1 : close]):
                self.params = self.parameters(body[paren + 1 : close]) if opens else []
                return
        spec = self.specifiers(body)
        if spec is None:
            return
        k, specs, type_word = spec
        words = {t.text for t in specs}
        for _marks, name, _rest in self.declare(
            specs,
            type_word,
            body,
            k,
            default_space=None,
            what="member" if scope == "type" else "variable",
        ):
            if name is None or scope != "program" or opens:
                continue
            if "constant" in words or type_word == "sampler" and "constexpr" in words:
                continue
            self.flag(
                name,
                f"program scope variable must reside in constant address space: "
                f"'{name.text}' is declared outside any function without `constant` "
                f"(MSL 4.2; `constexpr` alone is not enough); write `constant "
                f"{' '.join(t.text for t in specs if t.text != 'static')} ...`",
            )

    def function_paren(self, body: list[_Tok]) -> int | None:
        """Index of the `(` of a function declarator: the first top-level `(`
        right after an identifier (or an operator), before any `=`."""
        k = 0
        while k < len(body):
            t = body[k].text
            if t == "=":
                return None
            if t == "(":
                if k > 0 and (
                    body[k - 1].is_ident
                    and body[k - 1].text not in _SPECIFIERS
                    or "operator" in (x.text for x in body[max(0, k - 3) : k])
                ):
                    return k
                return None
            if t == "[":
                k = _close(body, k)
            elif t == "<":
                end = _close_angle(body, k)
                k = end if end is not None else k
            k += 1
        return None

    def looks_like_parameters(self, inner: list[_Tok]) -> bool:
        """`T name(args);` declares a function when args are parameter
        declarations, a variable when they are values (`uint3 M(1, 2, 3);`)."""
        if not inner:
            return True
        return inner[0].text in _SPECIFIERS or (
            inner[0].is_ident
            and self.is_type(inner[0].text)
            and inner[0].text != "half"
            or inner[0].text == "void"
        )

    def parameters(self, inner: list[_Tok]) -> list[tuple[str, _Var]]:
        """Checks a parameter list; returns the parameters' names and what they hold."""
        out = []
        k = 0
        while k < len(inner):
            end = k
            while end < len(inner) and inner[end].text != ",":
                if inner[end].text in ("(", "["):
                    end = _close(inner, end)
                elif inner[end].text == "<":
                    close = _close_angle(inner, end)
                    end = close if close is not None else end
                end += 1
            param = inner[k:end]
            spec = self.specifiers(param)
            if spec is not None:
                pk, specs, type_word = spec
                for marks, name, rest in self.declare(
                    specs,
                    type_word,
                    param,
                    pk,
                    default_space="thread",
                    record=False,
                    check_init=False,
                    what="parameter",
                ):
                    if name is not None:
                        out.append(
                            (name.text, self.var_of(specs, type_word, marks, rest, "thread"))
                        )
            k = end + 1
        return out

    def declare(
        self,
        specs,
        type_word,
        toks,
        k,
        default_space,
        record=True,
        check_init=True,
        what="variable",
    ):
        """Checks the declarators after `specs` (names, address spaces,
        initializers) and records them in the current scope."""
        decls = self.declarators(toks, k)
        for marks, name, rest in decls:
            if name is not None:
                self.check_name(name, what=what)
            self.check_pointer_marks(specs, type_word, marks)
            var = self.var_of(specs, type_word, marks, rest, default_space)
            if check_init and name is not None and var.kind == "pointer" and var.space is not None:
                self.check_initializer(name, var, rest)
            if record and name is not None:
                self.scopes[-1].names[name.text] = var
        return decls

    def var_of(self, specs, type_word, marks, rest, default_space) -> _Var:
        space = next((t.text for t in specs if t.text in _ADDRESS_SPACES), None)
        if space is None:
            space = next((t.text for t in marks if t.text in _ADDRESS_SPACES), None)
        type_text = " ".join(t.text for t in specs)
        ptr = [t.text for t in marks if t.text in ("*", "&", "&&")]
        if type_word == "auto":
            return _Var("value", None, type_text)
        if ptr and ptr[0] == "*":
            return _Var("pointer", space, f"{type_text} *")
        if ptr:
            return _Var("reference", space, f"{type_text} &")
        if len(rest) > 1 and rest[0].text == "[" and rest[1].text != "[":  # not [[attribute]]
            return _Var("array", space or default_space, type_text)
        return _Var("value", space or default_space, type_text)

    def check_pointer_marks(self, specs, type_word, marks) -> None:
        if type_word == "auto" or not marks:
            return
        first = marks[0]
        if first.text == "&&":
            return  # forwarding references deduce their address space
        has_space = any(t.text in _ADDRESS_SPACES for t in specs) or any(
            t.text in _ADDRESS_SPACES for t in marks
        )
        if not has_space:
            kind = "pointer" if first.text == "*" else "reference"
            self.flag(
                first,
                f"{kind} type must have explicit address space qualifier: "
                f"'{' '.join(t.text for t in specs)} {first.text}' (MSL 4: write "
                f"device, constant, threadgroup or thread before the type)",
            )

    def check_name(self, tok: _Tok, what: str) -> None:
        why = _METAL_KEYWORDS.get(tok.text)
        if why is not None:
            self.flag(
                tok,
                f"'{tok.text}' is {why} and cannot name a {what}; rename it (e.g. '{tok.text}_')",
            )


def check_metal(text: str, regions, source_file: str = "<candidate>") -> CompileError | None:
    """The first Metal language rule the kernel text breaks, as a CompileError
    at the candidate's line; None where it breaks none."""
    violations = _MetalChecker(_code_only(text)).run()
    return _first(violations, text, regions, source_file)
