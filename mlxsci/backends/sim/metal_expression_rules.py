"""The Metal checker's shared state and its expression-level rules (the rules
themselves are listed in metal_rules.py's docstring).

`MetalNames` is what the walk over one kernel text knows and every part of
the checker shares: the type names seen so far, the open scopes with what
each name holds, and the violations found. `ExpressionRules` checks single
expressions against it: pointer casts and pointer initializers that name no
address space or move a pointer to another one, and lambda expressions. The
declaration rules (metal_declaration_rules.py) and the statement walk
(metal_rules.py) hold one of each; neither part here calls into them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlxsci.backends.sim.language_tokens import (
    Token,
    Violation,
    close_angle,
    close_bracket,
)

ADDRESS_SPACES = frozenset(
    {
        "device",
        "constant",
        "thread",
        "threadgroup",
        "threadgroup_imageblock",
        "ray_data",
        "object_data",
    }
)

_SCALAR_TYPES = frozenset(
    {
        "bool",
        "char",
        "uchar",
        "short",
        "ushort",
        "int",
        "uint",
        "long",
        "ulong",
        "half",
        "float",
        "double",
        "bfloat",
        "size_t",
        "ptrdiff_t",
        "void",
        "int8_t",
        "int16_t",
        "int32_t",
        "int64_t",
        "uint8_t",
        "uint16_t",
        "uint32_t",
        "uint64_t",
        "float16_t",
        "bfloat16_t",
        "complex64_t",
        "vec",
        "packed_vec",
        "atomic",
        "atomic_int",
        "atomic_uint",
        "atomic_float",
        "atomic_bool",
        "sampler",
        "array",
        "matrix",
        "simdgroup_matrix",
        "signed",
        "unsigned",
    }
)
_TYPE_WORD = re.compile(
    r"(?:packed_)?(?:bool|char|uchar|short|ushort|int|uint|long|ulong|half|float|"
    r"bfloat)[234]|(?:half|float|bfloat)[234]x[234]|simdgroup_\w+8x8|texture\w+|"
    r"depth\w+"
)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_CASTS = frozenset({"static_cast", "reinterpret_cast", "const_cast"})
# Keywords after which an expression (a cast, a lambda) can start.
_EXPRESSION_KEYWORDS = frozenset(
    {"return", "case", "else", "do", "throw", "new", "delete", "co_return", "co_yield", "co_await"}
)


@dataclass
class Var:
    """What a name holds, for address-space checks: `kind` is "pointer"
    (space = its pointee's address space), "array", "value" or "reference"
    (space = where the object lives); `type` is for messages."""

    kind: str
    space: str | None
    type: str


@dataclass
class _Scope:
    kind: str  # "program", "type", "enum", "function"
    names: dict = field(default_factory=dict)


class MetalNames:
    """What a walk over one kernel text knows: the type names seen, the open
    scopes with what each name holds, and the violations found so far."""

    def __init__(self) -> None:
        self.types = set(_SCALAR_TYPES)
        self.scopes = [_Scope("program")]
        # name -> what it holds in each open scope that declares it, innermost
        # last: a lookup in one step however deep the scopes nest
        self.visible: dict[str, list[Var]] = {}
        self.out: list[Violation] = []

    @property
    def scope(self) -> str:
        """The kind of the innermost open scope."""
        return self.scopes[-1].kind

    def is_type(self, word: str) -> bool:
        return word in self.types or bool(_TYPE_WORD.fullmatch(word))

    def lookup(self, name: str) -> Var | None:
        held = self.visible.get(name)
        return held[-1] if held else None

    def bind(self, name: str, var: Var) -> None:
        """Records that `name` holds `var` in the innermost scope."""
        scope = self.scopes[-1]
        if name in scope.names:
            self.visible[name][-1] = var
        else:
            self.visible.setdefault(name, []).append(var)
        scope.names[name] = var

    def push_scope(self, kind: str) -> None:
        self.scopes.append(_Scope(kind))

    def pop_scope(self) -> None:
        """Closes the innermost scope; the program scope is never closed."""
        if len(self.scopes) > 1:
            for name in self.scopes.pop().names:
                self.visible[name].pop()

    def flag(self, tok: Token, message: str) -> None:
        self.out.append(Violation(tok.pos, message))


class ExpressionRules:
    """The checks of single expressions: `check_casts` (every pointer cast
    of a statement), `check_initializer` (a pointer declarator's `= ...`) and
    `check_lambdas` (all tokens of the text), reported through `names`."""

    def __init__(self, names: MetalNames):
        self.names = names

    # -- address spaces of expressions -------------------------------------
    def check_initializer(self, name: Token, var: Var, rest: list[Token]) -> None:
        if not rest or rest[0].text != "=":
            return
        got = self._operand_space(rest, 1, whole=True)
        if got is not None and got[0] != var.space:
            self.names.flag(
                rest[1],
                f"cannot initialize a variable of type '{var.type}' with an lvalue "
                f"of type '{got[1]}': the pointer would change address space from "
                f"{got[0]} to {var.space} (MSL 4)",
            )

    def _operand_space(
        self, toks: list[Token], k: int, whole: bool = False
    ) -> tuple[str, str] | None:
        """(address space, type text) of the pointer the expression at toks[k]
        evaluates to, where it is a name, `name + offset`, `&name`,
        `&name[i]` or a cast; None where it cannot be told. With `whole`, the
        expression must span the rest of toks (an initializer). Parentheses
        are looked into as the window toks[lo:hi], never copied (a copy per
        level made nested parentheses quadratic)."""
        lo, hi = 0, len(toks)
        while k < hi and toks[k].text == "(":
            cast = self._cast_at(toks, k, lo, hi)
            if cast is not None:
                return (cast[1], cast[2]) if cast[1] else None
            close = min(close_bracket(toks, k), hi)
            if whole and close != hi - 1:
                return None
            lo, hi, k = k + 1, close, k + 1
        if k < hi and toks[k].text in _CASTS:
            cast = self._cast_at(toks, k, lo, hi)
            return (cast[1], cast[2]) if cast and cast[1] else None
        address_of = k < hi and toks[k].text == "&"
        if address_of:
            k += 1
        if k >= hi or not toks[k].is_ident:
            return None
        var = self.names.lookup(toks[k].text)
        nxt = toks[k + 1].text if k + 1 < hi else ""
        if var is None or var.space is None:
            return None
        if whole and nxt not in ("", "+", "-", "["):
            return None
        if address_of:
            if nxt == "[" and var.kind in ("pointer", "array"):
                return var.space, f"{var.type.rstrip(' *')} *"
            if nxt in ("", ")", ";", ",") and var.kind in ("value", "array", "reference"):
                return var.space, f"{var.type.removesuffix(' &')} *"
            return None
        if nxt == "[" or nxt == "(" or nxt in (".", "->"):
            return None
        if var.kind == "pointer":
            return var.space, var.type
        if var.kind == "array":
            return var.space, f"{var.type} *"
        return None

    def _cast_at(self, toks: list[Token], k: int, lo: int = 0, hi: int | None = None):
        """(end index, target address space or None, target type text, the
        cast's name, the `*` token) of a pointer cast at toks[k], or None.
        Only the window toks[lo:hi] is looked at (default: all of toks)."""
        hi = len(toks) if hi is None else hi
        t = toks[k].text
        if t in _CASTS:
            if k + 1 >= hi or toks[k + 1].text != "<":
                return None
            end = close_angle(toks, k + 1)
            if end is None or end >= hi or toks[end - 1].text not in ("*", "&"):
                return None
            inner = toks[k + 2 : end]
            if end + 1 >= hi or toks[end + 1].text != "(":
                return None
            return self._cast_parts(inner, end, t)
        if t != "(":
            return None
        if k > lo and (
            toks[k - 1].text in (")", "]")
            or toks[k - 1].is_ident
            and toks[k - 1].text not in _EXPRESSION_KEYWORDS
        ):
            return None  # a call, a declarator's parameters, sizeof(T*)
        close = min(close_bracket(toks, k), hi)
        if close >= hi or close - k < 3 or toks[close - 1].text not in ("*",):
            return None
        # looked at in place, stopping at the first token no type has: a
        # copy of every parenthesised group ending in `*` was quadratic
        for j in range(k + 1, close):
            x = toks[j]
            if not (x.is_ident or x.text in ("*", "::", "<", ">", ",") or x.text[:1].isdigit()):
                return None
        inner = toks[k + 1 : close]
        if not any(
            x.is_ident and (self.names.is_type(x.text) or x.text in self.names.types) for x in inner
        ):
            return None
        after = toks[close + 1].text if close + 1 < hi else ""
        if after in ("", ")", ";", ",", "]", "}", "=", "{"):
            return None  # not followed by an operand
        return self._cast_parts(inner, close, "C-style cast")

    def _cast_parts(self, inner, end, how):
        star = next(x for x in inner if x.text in ("*", "&"))
        space = next((x.text for x in inner if x.text in ADDRESS_SPACES), None)
        return end, space, " ".join(x.text for x in inner), how, star

    def check_casts(self, stmt: list[Token]) -> None:
        for k in range(len(stmt)):
            if stmt[k].text not in ("(",) and stmt[k].text not in _CASTS:
                continue
            if stmt[k].text == "(" and k > 0 and stmt[k - 1].text in _CASTS | {">"}:
                continue
            cast = self._cast_at(stmt, k)
            if cast is None:
                continue
            end, space, target, how, star = cast
            if space is None:
                self.names.flag(
                    star,
                    f"pointer type must have explicit address space qualifier: "
                    f"{how} to '{target}' (MSL 4: write device, constant, threadgroup "
                    f"or thread in the cast's type)",
                )
                continue
            operand = end + 1 if how == "C-style cast" else end + 2
            got = self._operand_space(stmt, operand)
            if got is not None and got[0] != space:
                self.names.flag(
                    stmt[k],
                    f"{how} from '{got[1]}' to '{target}' converts between "
                    f"mismatching address spaces ({got[0]} to {space}); Metal "
                    f"cannot move a pointer between address spaces (MSL 4)",
                )

    # -- lambdas ---------------------------------------------------------
    def check_lambdas(self, toks: list[Token]) -> None:
        for k, tok in enumerate(toks):
            if tok.text != "[" or (k + 1 < len(toks) and toks[k + 1].text == "["):
                continue
            if k > 0 and (
                toks[k - 1].text == "["
                or (toks[k - 1].is_ident and toks[k - 1].text not in _EXPRESSION_KEYWORDS)
                or toks[k - 1].text in (")", "]", ">")
                or toks[k - 1].text[:1].isdigit()
            ):
                continue  # a subscript, an array bound or an attribute
            close = close_bracket(toks, k)
            # a capture list holds only these; looked at in place up to the
            # first other token (copying every bracket's inside was quadratic)
            if not all(
                toks[j].text in ("&", "=", ",", "this", "*") or _IDENT.fullmatch(toks[j].text)
                for j in range(k + 1, close)
            ):
                continue
            after = toks[close + 1].text if close + 1 < len(toks) else ""
            if after in ("(", "{", "mutable", "->", "<"):
                self.names.flag(
                    tok,
                    "lambda expressions are not supported in Metal (MSL 1.4.4: C++ "
                    "features not supported); write a helper function in the header "
                    "instead",
                )
