"""The declaration half of Metal's language rules (see metal_rules.py's
docstring for the rules themselves): decl-specifiers, declarators, parameter
lists, and the checks a declaration is subject to (program-scope variables
in `constant`, explicit address spaces on pointers and references, Metal's
keywords as names).

`DeclarationRules` is held by the statement walk (metal_rules.py), which
hands it each declaration; it records the names a declaration declares in
the shared `MetalNames` and has a pointer's initializer checked by the
`ExpressionRules` (metal_expression_rules.py). Separate from the walk because
parsing a declaration is a job of its own that needs nothing of the scopes'
bookkeeping beyond recording the names it declares.
"""

from __future__ import annotations

from mlxsci.backends.sim.language_tokens import Token, close_angle, close_bracket
from mlxsci.backends.sim.metal_expression_rules import (
    ADDRESS_SPACES,
    ExpressionRules,
    MetalNames,
    Var,
)

_FUNCTION_QUALIFIERS = frozenset({"kernel", "vertex", "fragment"})
# Words of Metal's language that can never name anything (metal_rules.py's "keyword").
_METAL_KEYWORDS = {"half": "a Metal scalar type keyword (MSL 2.1)"}
_METAL_KEYWORDS.update({w: "a Metal address-space keyword (MSL 4)" for w in ADDRESS_SPACES})
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
    | ADDRESS_SPACES
)
_INTEGER_WORDS = frozenset({"int", "char", "short", "long"})


class DeclarationRules:
    """Declarations: their specifiers, declarators and parameters, checked
    and recorded in the current scope of `names`. The walk calls
    `declaration` (program or type scope), `local_declaration` (function
    scope) and `check_name` (a name the walk itself meets: a type's)."""

    def __init__(self, names: MetalNames, expressions: ExpressionRules):
        self.names = names
        self.expressions = expressions

    # -- declarations ----------------------------------------------------
    def _specifiers(
        self, toks: list[Token], k: int = 0
    ) -> tuple[int, list[Token], str | None] | None:
        """Parses decl-specifiers from toks[k]: (index after them, the
        specifier tokens, the type word), or None where no type is named."""
        start = k
        type_word = None
        while k < len(toks):
            t = toks[k].text
            if t in _SPECIFIERS:
                # an address-space keyword right before a declarator end is a
                # name, not a specifier; the end of the tokens is one too (a
                # parameter `float device` comes without its `,` or `)`)
                if (
                    type_word is not None
                    and t in _METAL_KEYWORDS
                    and (
                        k + 1 == len(toks)
                        or toks[k + 1].text in ("=", ";", ",", "[", ")", "(", "{", ":")
                    )
                ):
                    break
                k += 1
                continue
            if t == "metal" and k + 1 < len(toks) and toks[k + 1].text == "::":
                k += 2
                continue
            if type_word is None and toks[k].is_ident and self.names.is_type(t):
                type_word = t
                k += 1
                if t in ("unsigned", "signed", "long", "short"):
                    while k < len(toks) and toks[k].text in _INTEGER_WORDS:
                        k += 1
                if k < len(toks) and toks[k].text == "<":
                    end = close_angle(toks, k)
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

    def _declarators(
        self, toks: list[Token], k: int
    ) -> list[tuple[list[Token], Token | None, list[Token]]]:
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
                    k = close_bracket(toks, k)
                elif toks[k].text == "<":
                    end = close_angle(toks, k)
                    k = end if end is not None else k
                k += 1
            out.append((marks, name, toks[rest_start:k]))
            k += 1
        return out

    def local_declaration(self, body: list[Token]) -> None:
        spec = self._specifiers(body)
        if spec is None:
            return
        k, specs, type_word = spec
        if k >= len(body) or not (body[k].is_ident or body[k].text in ("*", "&")):
            return  # `float(x);`, `half2 = ...` and other expressions
        words = {t.text for t in specs}
        if "static" in words and "constant" not in words:
            self.names.flag(
                body[0],
                "function-scope static variables are not supported in Metal: a "
                "static variable must be at program scope in the constant address "
                "space (MSL 4.2); move it out of the function as `constant ...`",
            )
        self._declare(specs, type_word, body, k, default_space="thread")

    def declaration(self, body: list[Token], scope: str, opens: bool) -> list[tuple[str, Var]]:
        """A declaration at program or type scope: a function, a variable or a
        member. Returns the parameters (names, what they hold) of a function
        whose body it opens, to be bound in that body's scope; else []."""
        paren = self._function_paren(body)
        if paren is not None:
            name_tok = body[paren - 1]
            self.check_name(name_tok, what="function")
            close = close_bracket(body, paren)
            if opens or self._looks_like_parameters(body[paren + 1 : close]):
                return self._parameters(body[paren + 1 : close]) if opens else []
        spec = self._specifiers(body)
        if spec is None:
            return []
        k, specs, type_word = spec
        words = {t.text for t in specs}
        for _marks, name, _rest in self._declare(
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
            self.names.flag(
                name,
                f"program scope variable must reside in constant address space: "
                f"'{name.text}' is declared outside any function without `constant` "
                f"(MSL 4.2; `constexpr` alone is not enough); write `constant "
                f"{' '.join(t.text for t in specs if t.text != 'static')} ...`",
            )
        return []

    def _function_paren(self, body: list[Token]) -> int | None:
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
                k = close_bracket(body, k)
            elif t == "<":
                end = close_angle(body, k)
                k = end if end is not None else k
            k += 1
        return None

    def _looks_like_parameters(self, inner: list[Token]) -> bool:
        """`T name(args);` declares a function when args are parameter
        declarations, a variable when they are values (`uint3 M(1, 2, 3);`)."""
        if not inner:
            return True
        return inner[0].text in _SPECIFIERS or (
            inner[0].is_ident
            and self.names.is_type(inner[0].text)
            and inner[0].text != "half"
            or inner[0].text == "void"
        )

    def _parameters(self, inner: list[Token]) -> list[tuple[str, Var]]:
        """Checks a parameter list; returns the parameters' names and what they hold."""
        out = []
        k = 0
        while k < len(inner):
            end = k
            while end < len(inner) and inner[end].text != ",":
                if inner[end].text in ("(", "["):
                    end = close_bracket(inner, end)
                elif inner[end].text == "<":
                    close = close_angle(inner, end)
                    end = close if close is not None else end
                end += 1
            param = inner[k:end]
            spec = self._specifiers(param)
            if spec is not None:
                pk, specs, type_word = spec
                for marks, name, rest in self._declare(
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
                            (name.text, self._var_of(specs, type_word, marks, rest, "thread"))
                        )
            k = end + 1
        return out

    def _declare(
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
        decls = self._declarators(toks, k)
        for marks, name, rest in decls:
            if name is not None:
                self.check_name(name, what=what)
            self._check_pointer_marks(specs, type_word, marks)
            var = self._var_of(specs, type_word, marks, rest, default_space)
            if check_init and name is not None and var.kind == "pointer" and var.space is not None:
                self.expressions.check_initializer(name, var, rest)
            if check_init and name is not None and var.kind in ("value", "array"):
                self._check_threadgroup_initializer(specs, name, rest)
            if record and name is not None:
                self.names.bind(name.text, var)
        return decls

    def _check_threadgroup_initializer(self, specs, name: Token, rest: list[Token]) -> None:
        """A threadgroup variable (not a pointer or reference to one) with an
        initializer. Threadgroup memory is allocated for each threadgroup
        and holds nothing defined when the group starts (MSL 4.4), so
        Apple's compiler refuses `threadgroup float t[32] = {0};`; clang-
        as-C++ would accept it and initialise the array once per launch."""
        if not any(t.text == "threadgroup" for t in specs):
            return
        k = 0
        while k < len(rest) and rest[k].text == "[":  # the bounds (or [[attributes]])
            k = close_bracket(rest, k) + 1
        if k < len(rest) and rest[k].text in ("=", "{", "("):
            self.names.flag(
                rest[k],
                f"threadgroup variables cannot be initialized: '{name.text}' has an "
                f"initializer (MSL 4.4: threadgroup memory is allocated per threadgroup "
                f"and undefined when it starts); declare it without one, have the "
                f"threads write it, then threadgroup_barrier(mem_flags::mem_threadgroup)",
            )

    def _var_of(self, specs, type_word, marks, rest, default_space) -> Var:
        space = next((t.text for t in specs if t.text in ADDRESS_SPACES), None)
        if space is None:
            space = next((t.text for t in marks if t.text in ADDRESS_SPACES), None)
        type_text = " ".join(t.text for t in specs)
        ptr = [t.text for t in marks if t.text in ("*", "&", "&&")]
        if type_word == "auto":
            return Var("value", None, type_text)
        if ptr and ptr[0] == "*":
            return Var("pointer", space, f"{type_text} *")
        if ptr:
            return Var("reference", space, f"{type_text} &")
        if len(rest) > 1 and rest[0].text == "[" and rest[1].text != "[":  # not [[attribute]]
            return Var("array", space or default_space, type_text)
        return Var("value", space or default_space, type_text)

    def _check_pointer_marks(self, specs, type_word, marks) -> None:
        if type_word == "auto" or not marks:
            return
        first = marks[0]
        if first.text == "&&":
            return  # forwarding references deduce their address space
        has_space = any(t.text in ADDRESS_SPACES for t in specs) or any(
            t.text in ADDRESS_SPACES for t in marks
        )
        if not has_space:
            kind = "pointer" if first.text == "*" else "reference"
            self.names.flag(
                first,
                f"{kind} type must have explicit address space qualifier: "
                f"'{' '.join(t.text for t in specs)} {first.text}' (MSL 4: write "
                f"device, constant, threadgroup or thread before the type)",
            )

    def check_name(self, tok: Token, what: str) -> None:
        why = _METAL_KEYWORDS.get(tok.text)
        if why is not None:
            self.names.flag(
                tok,
                f"'{tok.text}' is {why} and cannot name a {what}; rename it (e.g. '{tok.text}_')",
            )
