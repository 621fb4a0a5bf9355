"""Safe evaluation of launch expressions (`//! grid = ...`, `//! threadgroup = ...`).

A launch expression is integer arithmetic over named integers (the size's
integer scalars and the candidate's params):

    integer literals, names, unary + and -, binary + - * // %, parentheses,
    min(a, b, ...), max(a, b, ...), ceil_div(a, b),
    and at the top level only a tuple such as (gx, gy, gz).

The text is parsed with `ast.parse` and walked node by node; nothing is ever
passed to eval/exec or compiled to code. Anything outside the grammar above
raises `LaunchExprError` naming the offending construct.

`//` and `%` follow Python's floor semantics (so `-7 // 2 == -4`);
`ceil_div(a, b)` is `-((-a) // b)`. Intermediate values are bounded by
2**63 - 1 in magnitude; `launch_dims` further requires every dimension to be
in 1 .. 2**31 - 1.
"""

from __future__ import annotations

import ast
import functools
import operator
import warnings
from typing import cast

__all__ = [
    "LaunchExprError",
    "evaluate",
    "check",
    "names_used",
    "launch_dims",
    "FUNCTIONS",
    "MAX_DIM",
    "MAX_EXPR_LEN",
]

MAX_EXPR_LEN = 1000  # characters
MAX_INT = 2**63 - 1  # bound on every intermediate value
MAX_DIM = 2**31 - 1  # bound on each launch dimension
FUNCTIONS = {"min": (2, None), "max": (2, None), "ceil_div": (2, 2)}  # name -> (min, max) arity


class LaunchExprError(ValueError):
    """A launch expression is malformed, uses a forbidden construct or name,
    or cannot be evaluated (division by zero, overflow, wrong shape)."""


# --- descriptions of forbidden constructs -----------------------------------

_BINOP_TEXT = {
    ast.Div: "true division '/' (use '//' or ceil_div)",
    ast.Pow: "power '**'",
    ast.LShift: "shift '<<'",
    ast.RShift: "shift '>>'",
    ast.BitOr: "bitwise '|'",
    ast.BitXor: "bitwise '^'",
    ast.BitAnd: "bitwise '&'",
    ast.MatMult: "matrix product '@'",
}
_UNARYOP_TEXT = {ast.Not: "'not'", ast.Invert: "bitwise '~'"}
_NODE_TEXT = {
    "Attribute": "attribute access",
    "Subscript": "subscript",
    "Slice": "slice",
    "Lambda": "lambda",
    "ListComp": "list comprehension",
    "SetComp": "set comprehension",
    "DictComp": "dict comprehension",
    "GeneratorExp": "generator expression",
    "List": "list",
    "Set": "set",
    "Dict": "dict",
    "Compare": "comparison",
    "BoolOp": "boolean operator",
    "IfExp": "conditional expression",
    "JoinedStr": "f-string",
    "FormattedValue": "f-string",
    "NamedExpr": "assignment expression ':='",
    "Starred": "starred expression",
    "Await": "await",
    "Yield": "yield",
    "YieldFrom": "yield from",
}

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _segment(expr: str, node: ast.AST) -> str:
    try:
        seg = ast.get_source_segment(expr, node)
    except Exception:  # pragma: no cover - defensive
        seg = None
    return seg if seg is not None else type(node).__name__


def _forbidden(expr: str, node: ast.AST, what: str) -> LaunchExprError:
    return LaunchExprError(
        f"{what} is not allowed in a launch expression: {_segment(expr, node)!r} in {expr!r}"
    )


def _constant_text(value) -> str:
    if isinstance(value, bool):
        return "boolean literal"
    if isinstance(value, float):
        return "float literal"
    if isinstance(value, complex):
        return "complex literal"
    if isinstance(value, str):
        return "string literal"
    if isinstance(value, bytes):
        return "bytes literal"
    if value is None:
        return "None"
    if value is Ellipsis:
        return "Ellipsis"
    return f"{type(value).__name__} literal"


# --- structural validation --------------------------------------------------


def _validate(expr: str, node: ast.AST, names: set[str], top: bool) -> None:
    """Check that `node` is in the grammar; collect the variable names into `names`."""
    if isinstance(node, ast.Tuple):
        if not top:
            raise _forbidden(expr, node, "a tuple (only allowed as the whole expression)")
        if not node.elts:
            raise LaunchExprError(f"empty tuple in launch expression {expr!r}")
        for elt in node.elts:
            _validate(expr, elt, names, False)
        return
    if isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise _forbidden(expr, node, _constant_text(node.value))
        return
    if isinstance(node, ast.Name):
        names.add(node.id)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            raise _forbidden(expr, node, _UNARYOP_TEXT.get(type(node.op), "unary operator"))
        _validate(expr, node.operand, names, False)
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _forbidden(expr, node, _BINOP_TEXT.get(type(node.op), "binary operator"))
        _validate(expr, node.left, names, False)
        _validate(expr, node.right, names, False)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            raise _forbidden(expr, node, f"call of {_segment(expr, node.func)!r}")
        fname = node.func.id
        if fname not in FUNCTIONS:
            raise _forbidden(
                expr, node, f"call to {fname!r} (only min, max and ceil_div may be called)"
            )
        if node.keywords:
            raise _forbidden(expr, node, f"keyword argument in call to {fname}")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise _forbidden(expr, arg, "starred expression")
        lo, hi = FUNCTIONS[fname]
        n = len(node.args)
        if n < lo or (hi is not None and n > hi):
            want = f"exactly {lo}" if hi == lo else f"at least {lo}"
            raise LaunchExprError(
                f"{fname}() takes {want} arguments, got {n}: {_segment(expr, node)!r} in {expr!r}"
            )
        for arg in node.args:
            _validate(expr, arg, names, False)
        return
    raise _forbidden(expr, node, _NODE_TEXT.get(type(node).__name__, type(node).__name__))


@functools.lru_cache(maxsize=4096)
def _parse(expr: str) -> tuple[ast.expr, frozenset[str]]:
    """Parse and validate `expr`; return its tree and the variable names it uses."""
    if not isinstance(expr, str):
        raise LaunchExprError(f"a launch expression must be a string, got {type(expr).__name__}")
    text = expr.strip()
    if not text:
        raise LaunchExprError("empty launch expression")
    if len(text) > MAX_EXPR_LEN:
        raise LaunchExprError(f"launch expression longer than {MAX_EXPR_LEN} characters")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise LaunchExprError(f"malformed launch expression {text!r}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise LaunchExprError(f"malformed launch expression {text!r}: {exc}") from None
    names: set[str] = set()
    try:
        _validate(text, tree.body, names, True)
    except RecursionError:
        raise LaunchExprError(f"launch expression nested too deeply: {text!r}") from None
    return tree.body, frozenset(names)


# --- evaluation -------------------------------------------------------------


def _bounded(value: int, expr: str, node: ast.AST) -> int:
    if -MAX_INT <= value <= MAX_INT:
        return value
    raise LaunchExprError(f"value of {_segment(expr, node)!r} is too large in {expr!r}")


def _eval(expr: str, node: ast.AST, env: dict[str, int]):
    if isinstance(node, ast.Tuple):
        return tuple(_eval(expr, elt, env) for elt in node.elts)
    if isinstance(node, ast.Constant):  # an int: _check admitted no other constant
        return _bounded(cast(int, node.value), expr, node)
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        v = _eval(expr, node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a = _eval(expr, node.left, env)
        b = _eval(expr, node.right, env)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
            raise LaunchExprError(f"division by zero in {_segment(expr, node)!r} in {expr!r}")
        return _bounded(_BINOPS[type(node.op)](a, b), expr, node)
    if isinstance(node, ast.Call):
        args = [_eval(expr, arg, env) for arg in node.args]
        fname = cast(ast.Name, node.func).id  # _validate admitted only calls by name
        if fname == "min":
            return min(args)
        if fname == "max":
            return max(args)
        a, b = args
        if b == 0:
            raise LaunchExprError(f"division by zero in {_segment(expr, node)!r} in {expr!r}")
        return _bounded(-((-a) // b), expr, node)
    raise AssertionError(f"unvalidated node {type(node).__name__}")  # pragma: no cover


def _as_int(name: str, value) -> int:
    if isinstance(value, bool):
        raise LaunchExprError(f"name {name!r} is bound to a bool, not an int")
    try:
        return operator.index(value)
    except TypeError:
        raise LaunchExprError(
            f"name {name!r} is bound to a {type(value).__name__}, not an int"
        ) from None


# --- public API -------------------------------------------------------------


def names_used(expr: str) -> set[str]:
    """The variable names `expr` uses (function names excluded).
    Raises LaunchExprError when `expr` is not a valid launch expression."""
    return set(_parse(expr)[1])


def check(expr: str, allowed_names, dims: int | None = None) -> None:
    """Validate `expr` without values: grammar, and every name in `allowed_names`.
    With `dims`, also require a top-level tuple of exactly that many elements."""
    tree, used = _parse(expr)
    unknown = sorted(set(used) - set(allowed_names))
    if unknown:
        raise LaunchExprError(
            f"unknown name{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"in launch expression {expr.strip()!r}"
        )
    if dims is not None:
        if not isinstance(tree, ast.Tuple) or len(tree.elts) != dims:
            raise LaunchExprError(f"launch expression {expr.strip()!r} must be a {dims}-tuple")


def evaluate(expr: str, names: dict[str, int]) -> int | tuple[int, ...]:
    """Evaluate `expr` with variables from `names`; an int, or a tuple of ints
    when the expression is a tuple."""
    tree, used = _parse(expr)
    text = expr.strip()
    env = {}
    for name in used:
        if name not in names:
            raise LaunchExprError(f"unknown name {name!r} in launch expression {text!r}")
        env[name] = _as_int(name, names[name])
    return _eval(text, tree, env)


def launch_dims(
    expr: str, names: dict[str, int], what: str = "launch expression"
) -> tuple[int, int, int]:
    """Evaluate `expr` to a grid or threadgroup: a 3-tuple of ints in 1 .. 2**31 - 1."""
    value = evaluate(expr, names)
    text = expr.strip()
    if not isinstance(value, tuple) or len(value) != 3:
        raise LaunchExprError(f"{what} {text!r} must be a 3-tuple (x, y, z), got {value!r}")
    for axis, v in zip("xyz", value):
        if v < 1:
            raise LaunchExprError(f"{what} {text!r}: {axis} = {v} is not positive")
        if v > MAX_DIM:
            raise LaunchExprError(f"{what} {text!r}: {axis} = {v} exceeds 2**31 - 1")
    return value
