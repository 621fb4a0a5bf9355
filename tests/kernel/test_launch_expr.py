"""The launch-expression evaluator: integer arithmetic only, never eval."""

import re

import numpy as np
import pytest

from mlxsci.kernel.launch_expr import (
    MAX_DIM,
    LaunchExprError,
    check,
    evaluate,
    launch_dims,
    names_used,
)

ENV = {"N": 1000, "M": 7, "VEC": 4, "Z": 0}


@pytest.mark.parametrize(
    "expr, want",
    [
        ("42", 42),
        ("-3", -3),
        ("+N", 1000),
        ("N + M", 1007),
        ("N - M * 2", 986),
        ("(N - M) * 2", 1986),
        ("N // M", 142),
        ("N % M", 6),
        ("-7 // 2", -4),  # Python floor semantics
        ("-7 % 2", 1),
        ("ceil_div(N, VEC)", 250),
        ("ceil_div(1001, 4)", 251),
        ("ceil_div(0, 4)", 0),
        ("ceil_div(N, M)", 143),
        ("min(N, 256)", 256),
        ("max(1, N // 4096)", 1),
        ("min(3, 1, 2)", 1),
        ("max(3, 9, 2, 5)", 9),
        ("min(max(N, 1), ceil_div(N, 3) + 1)", 335),
        ("(N)", 1000),
        ("(ceil_div(N, VEC), 1, 1)", (250, 1, 1)),
        ("(16, 16)", (16, 16)),
        ("1_000 + 0x10", 1016),
    ],
)
def test_arithmetic(expr, want):
    assert evaluate(expr, ENV) == want


def test_names_used_and_check():
    assert names_used("(ceil_div(N, VEC), min(M, 4), 1)") == {"N", "VEC", "M"}
    assert names_used("(256, 1, 1)") == set()
    check("(ceil_div(N, VEC), 1, 1)", {"N", "VEC"})
    check("(ceil_div(N, VEC), 1, 1)", {"N", "VEC"}, dims=3)
    with pytest.raises(LaunchExprError, match="unknown name 'VEC'"):
        check("(ceil_div(N, VEC), 1, 1)", {"N"})
    with pytest.raises(LaunchExprError, match="3-tuple"):
        check("(N, 1)", {"N"}, dims=3)
    # static check does not evaluate: a divisor that could be zero is fine
    check("N // (M - 7)", {"N", "M"})


@pytest.mark.parametrize(
    "expr, what",
    [
        ("__import__('os')", "__import__"),
        ("__import__('os').system('true')", "call of"),
        ("x.y", "attribute access"),
        ("a[0]", "subscript"),
        ("2**10", "power"),
        ("1/2", "true division"),
        ("1.5", "float literal"),
        ('"s"', "string literal"),
        ("lambda: 1", "lambda"),
        ("[i for i in x]", "list comprehension"),
        ("[1, 2, 3]", "list"),
        ("N if M else 1", "conditional"),
        ("N < M", "comparison"),
        ("N and M", "boolean operator"),
        ("~N", "bitwise '~'"),
        ("N << 2", "shift"),
        ("N | 1", "bitwise"),
        ("True", "boolean literal"),
        ("abs(N)", "call to 'abs'"),
        ("min(N)", "at least 2"),
        ("ceil_div(N, M, 1)", "exactly 2"),
        ("min(N, x=1)", "keyword"),
        ("(N := 3)", "assignment expression"),
        ("((1, 2), 3)", "tuple"),
        ("min((1, 2), 3)", "tuple"),
        ("f'{N}'", "f-string"),
        ("ceil_div(*N)", "starred"),
        ("N +", "malformed"),
        ("", "empty"),
        ("()", "empty tuple"),
        ("1; 2", "malformed"),
    ],
)
def test_rejected_constructs(expr, what):
    with pytest.raises(LaunchExprError, match="(?i)" + re.escape(what)):
        evaluate(expr, ENV | {"x": 1, "a": 1})
    with pytest.raises(LaunchExprError):
        names_used(expr)


def test_undefined_name():
    with pytest.raises(LaunchExprError, match="unknown name 'K'"):
        evaluate("N + K", ENV)
    with pytest.raises(LaunchExprError, match="unknown name 'min'"):
        evaluate("min + 1", ENV)


@pytest.mark.parametrize("expr", ["N // Z", "N % Z", "ceil_div(N, Z)", "1 // 0"])
def test_division_by_zero(expr):
    with pytest.raises(LaunchExprError, match="division by zero"):
        evaluate(expr, ENV)


def test_huge_values():
    with pytest.raises(LaunchExprError, match="too large"):
        evaluate("N * N * N * N * N * N * N * N", ENV)
    with pytest.raises(LaunchExprError, match="too large"):
        evaluate("99999999999999999999999", ENV)
    with pytest.raises(LaunchExprError, match="exceeds"):
        launch_dims("(N * N * N * N, 1, 1)", ENV)
    assert launch_dims(f"({MAX_DIM}, 1, 1)", ENV) == (MAX_DIM, 1, 1)


def test_very_long_or_deep_expressions():
    with pytest.raises(LaunchExprError):
        evaluate("1 + " * 2000 + "1", ENV)
    with pytest.raises(LaunchExprError):
        evaluate("(" * 300 + "1" + ")" * 300, ENV)


def test_launch_dims():
    assert launch_dims("(ceil_div(N, VEC), 1, 1)", ENV) == (250, 1, 1)
    with pytest.raises(LaunchExprError, match="3-tuple"):
        launch_dims("N", ENV)
    with pytest.raises(LaunchExprError, match="3-tuple"):
        launch_dims("(N, 1)", ENV)
    with pytest.raises(LaunchExprError, match="not positive"):
        launch_dims("(N, Z, 1)", ENV)
    with pytest.raises(LaunchExprError, match="not positive"):
        launch_dims("(-N, 1, 1)", ENV, what="grid")


def test_name_values_must_be_ints():
    assert evaluate("N + 1", {"N": np.uint32(5)}) == 6
    with pytest.raises(LaunchExprError, match="not an int"):
        evaluate("N + 1", {"N": 2.5})
    with pytest.raises(LaunchExprError, match="bool"):
        evaluate("N + 1", {"N": True})


def test_never_evaluates_python(monkeypatch):
    import ast
    import builtins

    real_compile = builtins.compile
    calls = []

    def boom(*a, **k):
        raise AssertionError("eval/exec must not be used")

    def ast_only_compile(source, filename, mode, flags=0, *a, **k):
        assert flags & ast.PyCF_ONLY_AST, "compile may only build an AST"
        calls.append(source)
        return real_compile(source, filename, mode, flags, *a, **k)

    monkeypatch.setattr(builtins, "eval", boom)
    monkeypatch.setattr(builtins, "exec", boom)
    monkeypatch.setattr(builtins, "compile", ast_only_compile)
    # an expression no other test uses, so it is not served from the parse cache
    assert evaluate("(ceil_div(N, 3) * 2 - 1, max(M, 2, 5), 1)", ENV) == (667, 7, 1)
    assert calls
