"""The Metal rules judge what Apple's compiler compiles: the candidate's
text after its macros are expanded (issue 41, point 4).

Every construct the Metal rules refuse (mlxsci/backends/sim/metal_rules.py
and the declaration and expression rules) is written plainly and then hidden
in a `#define`: an object-like macro, a function-like one, a macro spread
over continued lines, a macro call spread over lines, nested macros and a
pasted name. Each form must be refused with the rule's message at the line
of the candidate that uses the macro (marked `//!` below). Apple's compiler
refuses them all; before the rules read the expanded text, every hidden
form passed.

What the compiler does not compile is not judged: a construct in an `#if`
group not taken, in a macro never used or in a stringized argument passes.
A candidate whose preprocessing fails gets a compile error at its line,
never a traceback, and no expansion reads a file.

Only the text generation and the rules run here (no compiler): these are
checks of the verdict's text, cheap enough for every run of the suite.
"""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from mlxsci.backends.sim import language_rules  # noqa: E402
from mlxsci.backends.sim.dialects import DIALECTS  # noqa: E402
from mlxsci.kernel.signature import ArgInfo  # noqa: E402
from mlxsci.kernel.spec import CompileError, KernelSpec  # noqa: E402

HEADER_LINE = 3  # the header starts on line 3 of the candidate file
BODY_LINE = 20  # the body starts on line 20
MARK = "//!"  # ends the line where the refusal must point
TID = "uint i = thread_position_in_grid.x;\n"
# x: 64 floats (a device pointer); w: 4 floats, which MLX passes as a
# `const constant float*` (fewer than 8 elements).
INPUTS = {"x": 64, "w": 4}


def generated(body: str, header: str = ""):
    spec = KernelSpec(
        "rules",
        tuple(INPUTS),
        ("out",),
        body,
        header,
        dialect="metal",
        source_file="cand.metal",
        header_line=HEADER_LINE,
        body_line=BODY_LINE,
    )
    infos = [ArgInfo("float32", (n,)) for n in INPUTS.values()]
    return DIALECTS["metal"]().generate(spec, infos, ["float32"], None)


def verdict(body: str, header: str = "", fast_math: bool = False) -> CompileError | None:
    gen = generated(body, header)
    return language_rules.check("metal", gen.text, gen.regions, "cand.metal", fast_math)


def marked_line(body: str, header: str) -> int:
    """The candidate-file line that holds MARK."""
    for first, text in ((HEADER_LINE, header), (BODY_LINE, body)):
        for k, line in enumerate(text.split("\n")):
            if MARK in line:
                return first + k
    raise AssertionError("no marked line")


# (construct, what the message says, [(form, header, body)]): the first form
# is the plain one, the others hide the construct in macros.
CONSTRUCTS = [
    (
        "lambda",
        "lambda expressions are not supported",
        [
            (
                "plain",
                "",
                TID + "auto sq = [](float v) { return v * v; }; //!\nout[i] = sq(x[i]);\n",
            ),
            (
                "object-like",
                "",
                "#define MK auto sq = [](float v) { return v * v; };\n"
                + TID
                + "MK //!\nout[i] = sq(x[i]);\n",
            ),
            (
                "function-like",
                "#define LAMBDA(e) [](float v) { return e; }\n",
                TID + "auto sq = LAMBDA(v * v); //!\nout[i] = sq(x[i]);\n",
            ),
            (
                "continued-lines",
                "#define MK \\\n  auto sq = [](float v) { \\\n    return v * v; };\n",
                TID + "MK //!\nout[i] = sq(x[i]);\n",
            ),
            (
                "nested",
                "#define CAPTURE []\n#define MK auto sq = CAPTURE(float v) { return v * v; };\n",
                TID + "MK //!\nout[i] = sq(x[i]);\n",
            ),
        ],
    ),
    (
        "program-scope-variable",
        "program scope variable must reside in constant address space",
        [
            ("plain", "float SCALE = 3.0f; //!\n", TID + "out[i] = x[i] * SCALE;\n"),
            (
                "object-like",
                "#define DECL float SCALE = 3.0f;\nDECL //!\n",
                TID + "out[i] = x[i] * SCALE;\n",
            ),
            (
                "function-like",
                "#define GLOBAL(T, n, v) T n = v;\nGLOBAL(float, SCALE, 3.0f) //!\n",
                TID + "out[i] = x[i] * SCALE;\n",
            ),
        ],
    ),
    (
        "function-scope-static",
        "function-scope static variables are not supported",
        [
            ("plain", "", TID + "static float w2 = 2.0f; //!\nout[i] = x[i] * w2;\n"),
            (
                "object-like",
                "#define KEEP static\n",
                TID + "KEEP float w2 = 2.0f; //!\nout[i] = x[i] * w2;\n",
            ),
            (
                "function-like",
                "#define KEPT(n, v) static float n = v;\n",
                TID + "KEPT(w2, 2.0f) //!\nout[i] = x[i] * w2;\n",
            ),
        ],
    ),
    (
        "pointer-without-address-space",
        "pointer type must have explicit address space qualifier",
        [
            ("plain", "", TID + "float* o = out; //!\no[i] = x[i];\n"),
            ("object-like", "#define P float*\n", TID + "P o = out; //!\no[i] = x[i];\n"),
            (
                "function-like",
                "#define PTR(T) T*\n",
                TID + "PTR(float) o = out; //!\no[i] = x[i];\n",
            ),
            (
                "call-over-lines",
                "#define PTR(T) T*\n",
                TID + "PTR( //!\n  float) o = out;\no[i] = x[i];\n",
            ),
            (
                "nested",
                "#define STAR *\n#define P float STAR\n",
                TID + "P o = out; //!\no[i] = x[i];\n",
            ),
        ],
    ),
    (
        "reference-without-address-space",
        "reference type must have explicit address space qualifier",
        [
            (
                "plain",
                "inline void bump(float& v) { v += 1.0f; } //!\n",
                TID + "float v = x[i];\nbump(v);\nout[i] = v;\n",
            ),
            (
                "function-like",
                "#define REF(T) T&\ninline void bump(REF(float) v) { v += 1.0f; } //!\n",
                TID + "float v = x[i];\nbump(v);\nout[i] = v;\n",
            ),
        ],
    ),
    (
        "c-style-cast-without-address-space",
        "pointer type must have explicit address space qualifier: C-style cast",
        [
            ("plain", "", TID + "if (i < 16) ((float4*)out)[i] = float4(x[i]); //!\n"),
            (
                "function-like",
                "#define AS_F4(p) ((float4*)p)\n",
                TID + "if (i < 16) AS_F4(out)[i] = float4(x[i]); //!\n",
            ),
        ],
    ),
    (
        "named-cast-without-address-space",
        "pointer type must have explicit address space qualifier: reinterpret_cast",
        [
            ("plain", "", TID + "reinterpret_cast<float*>(out)[i] = x[i]; //!\n"),
            (
                "function-like",
                "#define RC(T, p) reinterpret_cast<T>(p)\n",
                TID + "RC(float*, out)[i] = x[i]; //!\n",
            ),
        ],
    ),
    (
        "cast-between-address-spaces",
        "converts between mismatching address spaces (device to constant)",
        [
            ("plain", "", TID + "constant float* c = (constant float*)x; //!\nout[i] = c[i];\n"),
            (
                "function-like",
                "#define TO_CONSTANT(p) (constant float*)p\n",
                TID + "constant float* c = TO_CONSTANT(x); //!\nout[i] = c[i];\n",
            ),
        ],
    ),
    (
        "initializer-between-address-spaces",
        "cannot initialize a variable of type 'const device float *'",
        [
            ("plain", "", TID + "const device float* wp = w; //!\nout[i] = x[i] * wp[i % 4];\n"),
            (
                "object-like",
                "#define DEVICE_PTR const device float*\n",
                TID + "DEVICE_PTR wp = w; //!\nout[i] = x[i] * wp[i % 4];\n",
            ),
        ],
    ),
    (
        "keyword-as-variable",
        "'half' is a Metal scalar type keyword (MSL 2.1) and cannot name a variable",
        [
            ("plain", "", TID + "uint half = i; //!\nout[i] = x[i] + half;\n"),
            ("object-like", "#define N half\n", TID + "uint N = i; //!\nout[i] = x[i] + N;\n"),
            (
                "pasted",
                "#define CAT(a, b) a##b\n",
                TID + "uint CAT(ha, lf) = i; //!\nout[i] = x[i] + i;\n",
            ),
        ],
    ),
    (
        "keyword-as-parameter",
        "'device' is a Metal address-space keyword (MSL 4) and cannot name a parameter",
        [
            (
                "plain",
                "inline float twice(float device) { return 2.0f * device; } //!\n",
                TID + "out[i] = twice(x[i]);\n",
            ),
            (
                "function-like",
                "#define ARG(n) float n\ninline float twice(ARG(device)) { return 2.0f; } //!\n",
                TID + "out[i] = twice(x[i]);\n",
            ),
        ],
    ),
    (
        "threadgroup-initializer",
        "threadgroup variables cannot be initialized",
        [
            ("plain", "", TID + "threadgroup float acc[1] = {0.0f}; //!\nout[i] = acc[0];\n"),
            (
                "object-like",
                "#define TG threadgroup\n",
                TID + "TG float acc[1] = {0.0f}; //!\nout[i] = acc[0];\n",
            ),
            (
                "function-like",
                "#define SHARED(T, n) threadgroup T n[1] = {0};\n",
                TID + "SHARED(float, acc) //!\nout[i] = acc[0];\n",
            ),
        ],
    ),
]

CASES = [
    pytest.param(message, header, body, id=f"{construct}-{form}")
    for construct, message, forms in CONSTRUCTS
    for form, header, body in forms
]
# Refused by the source policy's storage rule as well (on its expanded
# tokens, so their twins were refused before too): the policy's refusal
# leaves no expansion for the rules to read.
POLICY_REFUSES = ("program-scope-variable", "function-scope-static")
EXPANDED_CASES = [
    pytest.param(message, header, body, id=f"{construct}-{form}")
    for construct, message, forms in CONSTRUCTS
    if construct not in POLICY_REFUSES
    for form, header, body in forms
]


@pytest.mark.parametrize("message, header, body", CASES)
def test_each_construct_is_refused_however_it_is_spelled(message, header, body):
    err = verdict(body, header)
    assert err is not None, "passed"
    assert message in err.message, err.message
    assert err.line == marked_line(body, header), (err.line, err.log)
    assert err.log.startswith(f"cand.metal:{err.line}:"), err.log


def test_every_construct_has_a_plain_form_and_a_macro_twin():
    for construct, _message, forms in CONSTRUCTS:
        names = [form for form, _h, _b in forms]
        assert names[0] == "plain" and len(names) > 1, construct


def test_a_refusal_in_a_macro_shows_the_line_as_expanded():
    body = "#define MK auto sq = [](float v) { return v * v; };\n" + TID + "MK //!\n"
    err = verdict(body)
    assert err is not None
    # the line as written, then what the rules read there
    assert "\nMK //!\n" in err.log, err.log
    assert "after macro expansion" in err.log and "auto sq = [ ]" in err.log, err.log


# ------------------------------------------------------------------ not compiled, not judged
def test_a_construct_in_an_if_group_not_taken_passes():
    body = (
        TID + "#define USE_LAMBDA 0\n#if USE_LAMBDA\n"
        "auto sq = [](float v) { return v * v; };\nout[i] = sq(x[i]);\n"
        "#else\nout[i] = x[i] * x[i];\n#endif\n"
    )
    assert verdict(body) is None
    taken = body.replace("USE_LAMBDA 0", "USE_LAMBDA 1")
    err = verdict(taken)
    assert err is not None and "lambda expressions" in err.message, err
    assert err.line == BODY_LINE + 3, err


def test_fast_math_decides_the_group_as_the_build_does():
    body = (
        TID + "#ifdef __FAST_MATH__\nauto sq = [](float v) { return v * v; };\n"
        "out[i] = sq(x[i]);\n#else\nout[i] = x[i] * x[i];\n#endif\n"
    )
    assert verdict(body) is None
    err = verdict(body, fast_math=True)
    assert err is not None and "lambda expressions" in err.message and err.line == BODY_LINE + 2


@pytest.mark.parametrize(
    "header, body",
    [
        ("#define MK auto sq = [](float v) { return v * v; };\n", TID + "out[i] = x[i];\n"),
        (
            "#define STR(a) #a\n",
            TID + "constant char* s = STR([](float v) { return v; });\nout[i] = x[i] + s[0];\n",
        ),
    ],
    ids=["macro-never-used", "stringized"],
)
def test_text_the_compiler_does_not_compile_as_code_passes(header, body):
    assert verdict(body, header) is None


def test_a_plain_candidate_keeps_its_column():
    err = verdict(TID + "float half = 0.5f;\nout[i] = x[i] * half;\n")
    assert err is not None and err.log.startswith(f"cand.metal:{BODY_LINE + 1}:7: error: 'half'")


# ------------------------------------------------------------------ bad preprocessing
# Ten to the eighth tokens from eight lines: the expansion the rules read is
# bounded, so this is refused at once rather than expanded.
BOMB = "".join(
    f"#define A{k} " + " ".join([f"A{k - 1}" if k else "x"] * 10) + "\n" for k in range(8)
)


@pytest.mark.parametrize(
    "header, body, line, words",
    [
        ("#define F(a) a\n", TID + "out[i] = F(x[i];\n", BODY_LINE + 1, "does not end"),
        ('#include "/etc/hostname"\n', TID + "out[i] = x[i];\n", HEADER_LINE, "#include"),
        ("#define F(a, b) a\n", TID + "out[i] = F(x[i]);\n", BODY_LINE + 1, "takes 2 arguments"),
        ("#if 1\n", TID + "out[i] = x[i];\n", HEADER_LINE, "#endif"),
        (BOMB, TID + "float y = A7;\nout[i] = y;\n", BODY_LINE + 1, "too much text"),
    ],
    ids=["unended-call", "include-of-a-file", "argument-count", "unclosed-if", "macro-bomb"],
)
def test_preprocessing_that_fails_is_a_compile_error_at_its_line(header, body, line, words):
    err = verdict(body, header)
    assert err is not None and err.line == line and words in err.message, err


# ------------------------------------------------------------------ the compiler agrees
def _tokens(text: str) -> list[str]:
    text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)
    return re.findall(r"\w+|\S", text)


@pytest.mark.parametrize("message, header, body", EXPANDED_CASES)
def test_the_expansion_read_is_clangs(message, header, body):
    """What the rules read of a twin's body is what clang's own
    preprocessor (the simulator's toolchain) makes of the candidate's text:
    the hand-written expansion the rules share with the source policy is
    checked against the compiler's."""
    from mlxsci.backends.sim import toolchain

    gen = generated(body, header)
    view, refused = language_rules.expanded("metal", gen.text, gen.regions, "cand.metal")
    assert view is not None and refused is None, refused
    code = view.code.split("\n")
    ours = [
        tok
        for r in gen.regions
        if r.file == "cand.metal"
        for tok in _tokens("\n".join(code[r.first - 1 : r.last]))
    ]
    done = subprocess.run(
        [
            str(toolchain.zig_executable()),
            "c++",
            "-E",
            "-P",
            "-undef",
            "-nostdinc",
            "-x",
            "c++",
            "-",
        ],
        input=(header + body).encode(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert ours == _tokens(done.stdout.decode()), (ours, done.stdout.decode())


def test_the_cases_cover_every_message_kind_of_the_rules():
    """Every kind of refusal the Metal rules can give appears above (a new
    rule needs its twins here)."""
    kinds = {
        "lambda expressions",
        "program scope variable",
        "function-scope static",
        "pointer type must have explicit",
        "reference type must have explicit",
        "converts between mismatching",
        "cannot initialize a variable",
        "cannot name a",
        "threadgroup variables cannot be initialized",
    }
    messages = " ".join(message for _c, message, _f in CONSTRUCTS)
    assert all(kind in messages for kind in kinds)
    assert np.unique([c for c, _m, _f in CONSTRUCTS]).size == len(CONSTRUCTS)
