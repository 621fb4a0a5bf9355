"""Pathological candidate texts and the front end they go through before any
compiler (issue 23, outcome 5): shared by tests/kernel/test_linear_rules.py and
bench/bench_rules.py.

Each shape is a function of a size in bytes returning a run of text about
that long: malformed or merely huge code that a model could write. It is put
either in the header or in a kernel body of a saxpy candidate of either
dialect (`candidate_text`), so that the candidate parses and reaches every
checker: the parse, the validation against the task, the source policy, the
simulator's language rules and its source rewrite (`front_end`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mlxsci.backends.sim import language_rules
from mlxsci.backends.sim.dialects import DIALECTS as SIM_DIALECTS
from mlxsci.evaluation import checks
from mlxsci.kernel.candidate import CandidateError, parse, template_args, to_kernel_spec
from mlxsci.kernel.signature import ArgInfo
from mlxsci.kernel.source import policy as source_policy
from mlxsci.task import load_task


def _repeat(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


def _deep_macros(size: int) -> str:
    # each macro names the one before: expanding the last walks the chain
    count = max(1, size // 30)
    lines = ["#define M0 1"] + [f"#define M{k} (M{k - 1} + 1)" for k in range(1, count)]
    return "\n".join(lines) + f"\nint deep = M{count - 1};\n"


def _deep_calls(size: int) -> str:
    count = max(1, size // 3)
    return "#define F(x) x\nint calls = " + "F(" * count + "1" + ")" * count + ";\n"


def _nested_ifs(size: int) -> str:
    count = max(1, size // 14)
    return "#if 1\n" * count + "#endif\n" * count


def _many_defines(size: int) -> str:
    return "".join(f"#define D{k} {k}\n" for k in range(max(1, size // 16)))


def _many_directive_lines(size: int) -> str:
    return _repeat("#\n", size)


# name -> size -> text; every one is about `size` bytes
SHAPES: dict[str, Callable[[int], str]] = {
    "unterminated_comment": lambda n: "/*" + _repeat("a ", n),
    "unterminated_string": lambda n: 'float s = "' + _repeat("a", n),
    "unterminated_char": lambda n: "float c = '" + _repeat("a", n),
    "open_parens": lambda n: _repeat("(", n),
    "close_parens": lambda n: _repeat(")", n),
    "open_braces": lambda n: _repeat("{", n),
    "close_braces": lambda n: _repeat("}", n),
    "open_brackets": lambda n: _repeat("[", n),
    "open_angles": lambda n: _repeat("<", n),
    "close_angles": lambda n: _repeat(">", n),
    "template_angles": lambda n: _repeat("a<", n),
    "mixed_brackets": lambda n: _repeat("({[<", n),
    "attribute_opens": lambda n: _repeat("[[", n),
    "huge_line": lambda n: _repeat("x = x + 1; ", n),
    "tiny_lines": lambda n: _repeat(";\n", n),
    "blank_lines": lambda n: _repeat("\n", n),
    "long_identifier": lambda n: "int " + _repeat("a", n) + ";\n",
    "identifier_run": lambda n: _repeat("a ", n),
    "number_run": lambda n: _repeat("1e", n),
    "line_continuations": lambda n: _repeat("\\\n", n),
    "continued_directive": lambda n: "#define C 1 " + _repeat("\\\n", n) + "\n",
    "comment_run": lambda n: _repeat("/**/", n),
    "line_comments": lambda n: _repeat("//\n", n),
    "string_run": lambda n: _repeat('"a"', n),
    "char_run": lambda n: _repeat("'a'", n),
    "scope_chain": lambda n: "int " + _repeat("a::", n) + "b;\n",
    "arrow_chain": lambda n: "a" + _repeat("->b", n) + ";\n",
    "casts": lambda n: "x = " + _repeat("(float)", n) + "1;\n",
    "pointer_declarators": lambda n: _repeat("(*", n),
    "static_words": lambda n: _repeat("static ", n),
    "const_words": lambda n: _repeat("const ", n),
    "storage_decls": lambda n: _repeat("static int s; ", n),
    "extern_words": lambda n: _repeat("extern ", n),
    "lambdas": lambda n: _repeat("[](){}; ", n),
    "declarations": lambda n: _repeat("float4 v = float4(1); ", n),
    "vector_constructors": lambda n: "float4 v = " + _repeat("float4(", n) + ";\n",
    "kernel_words": lambda n: _repeat("kernel void f(", n),
    "device_pointers": lambda n: _repeat("device float* p; ", n),
    "threadgroup_decls": lambda n: _repeat("threadgroup float t[4]; ", n),
    "shared_decls": lambda n: _repeat("__shared__ float t[4]; ", n),
    "deep_macros": _deep_macros,
    "deep_macro_calls": _deep_calls,
    "nested_ifs": _nested_ifs,
    "many_defines": _many_defines,
    "directive_lines": _many_directive_lines,
    "hash_run": lambda n: "#define P(a) " + _repeat("# a ", n) + "\n",
    "paste_run": lambda n: "#define Q(a) a" + _repeat(" ## a", n) + "\n",
    "ifdef_run": lambda n: "#define K 1\n" + _repeat("#ifdef K\n#endif\n", n),
    "host_run": lambda n: _repeat("__host__ ", n),
    "typedef_run": lambda n: _repeat("typedef a ", n) + "{",
    "vector_casts": lambda n: _repeat("x = (float4)y; ", n),
    "nested_vector_casts": lambda n: (
        "x = " + _repeat("(float4)(", n // 2) + "y" + ")" * (n // 18) + ";\n"
    ),
    "nested_direct_init": lambda n: _repeat("float4 a(", n // 2) + "1" + ")" * (n // 18) + ";\n",
    "copy_list_init": lambda n: "float4 v = {" + _repeat("{a, b}, ", n) + "c};\n",
    "threadgroup_statements": lambda n: _repeat("{threadgroup float a<", n) + ";\n",
    "shared_statements": lambda n: _repeat("{__shared__ float a ", n) + ";\n",
    "shared_line": lambda n: _repeat("x __shared__ ", n) + ";\n",
    "extern_shared_line": lambda n: _repeat("extern __shared__ float ", n) + "a[;\n",
    "deep_scopes": lambda n: "{" * (n // 2) + _repeat("device float* p = q; ", n // 2),
    "declarator_dims": lambda n: "threadgroup float t" + _repeat("[2]", n) + " x;\n",
    "nested_initializers": lambda n: "int x[] = " + _repeat("{1, ", n) + "};\n",
    "static_const_run": lambda n: _repeat("static const int a = 1, ", n) + "b;\n",
    "template_calls": lambda n: _repeat("(float4)as_type<uint>(x) ", n) + ";\n",
}
# Shapes of the whole candidate file (before any header or kernel): `place`
# is "preamble" for these.
PREAMBLE_SHAPES: dict[str, Callable[[int], str]] = {
    "many_params": lambda n: "".join(f"//! param P{k} = 1\n" for k in range(max(1, n // 20))),
    "preamble_comments": lambda n: _repeat("/**/", n) + "\n",
    "many_kernels": lambda n: "".join(f"//! kernel k{k}\nx;\n" for k in range(max(1, n // 18))),
}

PLACES = ("header", "body")


def cases() -> list[tuple[str, str, str]]:
    """(shape, place, dialect) of every case: each shape in the header and
    in a body, each preamble shape before the seed, in both dialects."""
    out = [(s, p, d) for s in SHAPES for p in PLACES for d in DIALECTS]
    return out + [(s, "preamble", d) for s in PREAMBLE_SHAPES for d in DIALECTS]


DIALECTS = ("metal", "cuda")
_EXT = {"metal": "metal", "cuda": "cu"}


def candidate_text(shape: str, size: int, place: str, dialect: str) -> str:
    """A saxpy candidate of `dialect` holding `shape` of `size` bytes in its
    header or in its kernel's body (after the seed's own code)."""
    task = load_task("saxpy")
    seed = task.seed(dialect)
    if place == "preamble":
        return PREAMBLE_SHAPES[shape](size) + seed
    bad = SHAPES[shape](size)
    if not bad.endswith("\n"):
        bad += "\n"
    if place == "header":
        return "//! header\n" + bad + seed
    return seed + bad


def _infos(dialect: str) -> tuple[list[ArgInfo], list[str]]:
    scalar = "uint32"
    return (
        [ArgInfo("float32", (1024,)), ArgInfo("float32", (1024,))]
        + [ArgInfo("float32", ()), ArgInfo(scalar, ())],
        ["float32"],
    )


def front_end(text: str, dialect: str) -> dict[str, float | str]:
    """Seconds each stage of the front end takes on `text`, as the
    evaluation and the simulator run them, and the verdict: the parse, the
    validation with the source policy (`checks.misfit`, `source_policy.
    refusal`: before any worker), the simulator's text generation, its
    language rules with the policy on the candidate's parts
    (`language_rules.check`, in the parent serving a build request) and,
    where those pass, its source rewrite. "verdict" is "ok" or the first
    refusal; a stage never reached has no time."""
    times: dict[str, float | str] = {}
    task = load_task("saxpy")
    filename = f"cand.{_EXT[dialect]}"

    def timed(stage: str, run):
        t0 = time.perf_counter()
        try:
            return run()
        finally:
            times[stage] = time.perf_counter() - t0

    try:
        cand = timed("parse", lambda: parse(text, dialect=dialect, filename=filename))
    except CandidateError as exc:
        times["verdict"] = f"format error: {exc}"
        return times
    why = timed("validate", lambda: checks.misfit(cand, task, f"{filename}:"))
    refusal = source_policy.refusal(cand, f"{filename}:")
    if refusal or why:
        times["verdict"] = refusal or f"format error: {why}"
        return times
    contract = task.kernels[0]
    spec = to_kernel_spec(cand, contract.name, contract.inputs, contract.outputs)
    infos, outs = _infos(dialect)
    sim_dialect = SIM_DIALECTS[dialect]()
    gen = timed("generate", lambda: sim_dialect.generate(spec, infos, outs, template_args(cand)))
    violation = timed(
        "rules", lambda: language_rules.check(dialect, gen.text, gen.regions, filename)
    )
    if violation is not None:
        times["verdict"] = f"compile error: {violation.message}"
        return times
    timed("rewrite", lambda: sim_dialect.rewrite(gen.text))
    times["verdict"] = "ok"
    return times


def each_checker(text: str, dialect: str) -> dict[str, float]:
    """Seconds each checker and rewrite takes on `text` whatever the stages
    before it said (the dialect's rules and the rewrite are run on the
    generated text even where the policy refused it): for the scaling
    measurements of bench/bench_rules.py."""
    times: dict[str, float] = {}
    task = load_task("saxpy")
    t0 = time.perf_counter()
    try:
        cand = parse(text, dialect=dialect, filename="cand")
    except CandidateError:
        times["parse"] = time.perf_counter() - t0
        return times
    times["parse"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    checks.misfit(cand, task, "cand:")
    times["validate"] = time.perf_counter() - t0
    contract = task.kernels[0]
    spec = to_kernel_spec(cand, contract.name, contract.inputs, contract.outputs)
    infos, outs = _infos(dialect)
    sim_dialect = SIM_DIALECTS[dialect]()
    t0 = time.perf_counter()
    gen = sim_dialect.generate(spec, infos, outs, template_args(cand))
    times["generate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    language_rules.CHECKS[dialect](gen.text, gen.regions, "cand")
    times["rules"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    source_policy.check_parts(dialect, language_rules.candidate_parts(gen.text, gen.regions))
    times["policy"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim_dialect.rewrite(gen.text)
    times["rewrite"] = time.perf_counter() - t0
    return times
