"""The value of a candidate's `#if` expression, as C++ [cpp.cond] defines it,
for the source policy (mlxsci/kernel/source/preprocess.py decides which groups of a
candidate every compiler compiles).

The tokens come macro-expanded, with `defined` and every identifier already
replaced by a number. Arithmetic is in intmax_t / uintmax_t (64 bits) with
the usual arithmetic conversions. Wherever compilers may differ or fail
(signed overflow, division by zero, shifts out of range or of negative
values, multi-character or escaped character literals beyond the simple
ones, floating literals, commas, nesting past `MAX_NESTING`) the expression
is refused instead of given a value, so that the policy never follows a
branch a compiler does not.
"""

from __future__ import annotations

import re

from mlxsci.kernel.source.lexer import Refused, Tok

__all__ = ["evaluate", "MAX_NESTING"]

MAX_NESTING = 40  # parentheses and unary operators nested in one another
_M = 1 << 64
_MIN, _MAX = -(1 << 63), (1 << 63) - 1
_BINARY = {
    "*": 10,
    "/": 10,
    "%": 10,
    "+": 9,
    "-": 9,
    "<<": 8,
    ">>": 8,
    "<": 7,
    ">": 7,
    "<=": 7,
    ">=": 7,
    "==": 6,
    "!=": 6,
    "&": 5,
    "^": 4,
    "|": 3,
    "&&": 2,
    "||": 1,
}
_INT = re.compile(
    r"(?P<digits>0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)"
    r"(?P<suffix>(?:[uU](?:ll|LL|[lLzZ])?|(?:ll|LL|[lLzZ])[uU]?)?)\Z"
)
_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, "'": 39, '"': 34, "a": 7, "b": 8}
_ESCAPES.update({"f": 12, "v": 11, "?": 63})


class _Value:
    __slots__ = ("v", "unsigned")

    def __init__(self, v: int, unsigned: bool = False):
        self.v = v % _M if unsigned else v
        self.unsigned = unsigned


def evaluate(toks: list[Tok], line: int) -> bool:
    """Whether the expression `toks` is true (non-zero)."""
    p = _Parser(toks, line)
    if not toks:
        raise Refused(line, "`#if` needs an expression")
    value = p.ternary()
    if p.i != len(toks):
        raise p.refuse(f"unexpected `{toks[p.i].text}` in the #if expression")
    return value.v != 0


class _Parser:
    def __init__(self, toks: list[Tok], line: int):
        self.toks = toks
        self.i = 0
        self.line = line
        self.nesting = 0

    def refuse(self, why: str) -> Refused:
        return Refused(self.line, why)

    def peek(self) -> str | None:
        return self.toks[self.i].text if self.i < len(self.toks) else None

    def take(self) -> Tok:
        if self.i >= len(self.toks):
            raise self.refuse("the #if expression ends too soon")
        self.i += 1
        return self.toks[self.i - 1]

    def expect(self, text: str) -> None:
        if self.take().text != text:
            raise self.refuse(f"`{text}` expected in the #if expression")

    def ternary(self) -> _Value:
        cond = self.binary(1)
        if self.peek() != "?":
            return cond
        self.take()
        a = self.ternary()
        self.expect(":")
        b = self.ternary()
        unsigned = a.unsigned or b.unsigned
        return _Value((a if cond.v else b).v, unsigned)

    def binary(self, min_prec: int) -> _Value:
        left = self.unary()
        while True:
            op = self.peek()
            prec = _BINARY.get(op or "")
            if prec is None or prec < min_prec or self.toks[self.i].kind != "punct":
                return left
            self.take()
            right = self.binary(prec + 1)
            left = self.apply(op or "", left, right)

    def unary(self) -> _Value:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.refuse("the #if expression is nested too deeply")
        t = self.take()
        if t.kind == "punct" and t.text in ("+", "-", "~", "!"):
            v = self.unary()
            result = self.apply_unary(t.text, v)
        elif t.kind == "punct" and t.text == "(":
            result = self.ternary()
            self.expect(")")
        elif t.kind == "num":
            result = self.integer(t.text)
        elif t.kind == "chr":
            result = self.character(t.text)
        else:
            raise self.refuse(f"`{t.text}` cannot appear in a #if expression")
        self.nesting -= 1
        return result

    def integer(self, text: str) -> _Value:
        m = _INT.match(text.replace("'", ""))
        if m is None:
            raise self.refuse(f"`{text}` is not an integer literal a #if can evaluate")
        digits = m.group("digits")
        if digits[:2] in ("0x", "0X", "0b", "0B"):
            v = int(digits[2:], 16 if digits[1] in "xX" else 2)
        else:
            v = int(digits, 8 if len(digits) > 1 and digits[0] == "0" else 10)
        if v >= _M:
            raise self.refuse(f"`{text}` is too large for a #if")
        return _Value(v, "u" in m.group("suffix").lower() or v > _MAX)

    def character(self, text: str) -> _Value:
        body = text[text.index("'") + 1 : -1]
        if len(body) == 1 and body != "\\" and body.isascii():
            return _Value(ord(body))
        if len(body) == 2 and body[0] == "\\" and body[1] in _ESCAPES:
            return _Value(_ESCAPES[body[1]])
        raise self.refuse(
            f"the character literal {text} is not one a #if evaluates the same way everywhere"
        )

    def checked(self, v: int, unsigned: bool) -> _Value:
        if not unsigned and not _MIN <= v <= _MAX:
            raise self.refuse("signed overflow in the #if expression")
        return _Value(v, unsigned)

    def apply_unary(self, op: str, a: _Value) -> _Value:
        if op == "!":
            return _Value(int(a.v == 0))
        if op == "-":
            return self.checked(-a.v, a.unsigned)
        if op == "~":
            return _Value(~a.v, a.unsigned)
        return a

    def apply(self, op: str, a: _Value, b: _Value) -> _Value:
        if op in ("&&", "||"):
            return _Value(int((a.v != 0 and b.v != 0) if op == "&&" else (a.v != 0 or b.v != 0)))
        if op in ("<<", ">>"):
            return self.shift(op, a, b)
        unsigned = a.unsigned or b.unsigned
        x, y = (a.v % _M, b.v % _M) if unsigned else (a.v, b.v)
        if op in ("<", ">", "<=", ">=", "==", "!="):
            result = {"<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y, "==": x == y}
            return _Value(int(result[op] if op in result else x != y))
        if op in ("/", "%"):
            if y == 0:
                raise self.refuse("division by zero in the #if expression")
            q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
            return self.checked(q if op == "/" else x - y * q, unsigned)
        ops = {"*": x * y, "+": x + y, "-": x - y, "&": x & y, "^": x ^ y, "|": x | y}
        return self.checked(ops[op], unsigned)

    def shift(self, op: str, a: _Value, b: _Value) -> _Value:
        n = b.v % _M if b.unsigned else b.v
        if not 0 <= n < 64 or (not a.unsigned and a.v < 0):
            raise self.refuse("a shift out of range or of a negative value in the #if expression")
        if op == ">>":
            return _Value(a.v >> n, a.unsigned)
        return self.checked(a.v << n, a.unsigned)
