"""Candidate format v1: parse, render, extract, validate, to KernelSpec."""

import pytest

from mlxsci.kernel.candidate import (
    Candidate,
    CandidateError,
    CandidateFailure,
    KernelBlock,
    Param,
    extract_from_response,
    parse,
    render,
    template_args,
    to_kernel_spec,
    validate,
)
from mlxsci.kernel.spec import KernelSpec

SAXPY = """\
//! param VEC = 4 {1, 2, 4}
//! header
inline float twice(float v) { return 2.0f * v; }
//! kernel saxpy
//! grid = (ceil_div(N, VEC), 1, 1)
//! threadgroup = (256, 1, 1)
uint base = thread_position_in_grid.x * VEC;
for (uint k = 0; k < VEC; ++k) {
    uint i = base + k;
    if (i < N) y_out[i] = a * x[i] + y[i];
}
"""

TWO_KERNELS = """\
//! param TILE = 16 {8, 16, 32}
//! param UNROLL = 2
//! kernel step
//! grid = (W, H, 1)
//! threadgroup = (TILE, TILE, 1)
uint2 g = thread_position_in_grid.xy;

out[g.y * W + g.x] = inp[g.y * W + g.x];

//! kernel reduce
//! threadgroup = (256, 1, 1)
float acc = 0.0f;
out[0] = acc;
"""


def lines_of(text):
    return text.split("\n")


# --- parsing and round trip ---------------------------------------------------


def test_parse_example():
    c = parse(SAXPY)
    assert c.dialect == "metal"
    assert c.params == [Param("VEC", 4, (1, 2, 4))]
    assert c.params[0].line == 1
    assert c.header == "inline float twice(float v) { return 2.0f * v; }\n"
    assert c.header_line == 3
    k = c.kernel("saxpy")
    assert (k.line, k.grid_line, k.threadgroup_line, k.body_line) == (4, 5, 6, 7)
    assert k.grid == "(ceil_div(N, VEC), 1, 1)"
    assert k.threadgroup == "(256, 1, 1)"
    assert k.body.startswith("uint base = thread_position_in_grid.x * VEC;\n")
    assert k.body.endswith("}\n")
    # body_line maps the body's lines onto the file exactly
    assert lines_of(SAXPY)[k.body_line - 1] == k.body.split("\n")[0]
    assert lines_of(SAXPY)[c.header_line - 1] == c.header.split("\n")[0]


@pytest.mark.parametrize("text", [SAXPY, TWO_KERNELS])
def test_canonical_text_is_stable(text):
    c = parse(text)
    assert render(c) == text
    assert parse(render(c)) == c


def test_two_kernels_bodies_and_lines():
    c = parse(TWO_KERNELS)
    step, red = c.kernels
    assert step.body == (
        "uint2 g = thread_position_in_grid.xy;\n\nout[g.y * W + g.x] = inp[g.y * W + g.x];\n\n"
    )
    assert step.body_line == 6 and red.line == 10 and red.body_line == 12
    assert red.grid is None and red.threadgroup == "(256, 1, 1)"
    assert c.header == "" and c.header_line == 0
    assert c.params[1] == Param("UNROLL", 2, None)
    for k in c.kernels:
        assert (
            lines_of(TWO_KERNELS)[k.body_line - 1 : k.body_line - 1 + k.body.count("\n")]
            == k.body.split("\n")[:-1]
        )


def test_round_trip_from_objects_and_rendered_lines():
    c = Candidate(
        dialect="cuda",
        params=[Param("B", 128, (64, 128, 256)), Param("K", -2)],
        header="__device__ float sq(float v) { return v * v; }",  # no trailing newline
        kernels=[
            KernelBlock("a", "out[0] = 1.0f;", grid="(N, 1, 1)"),
            KernelBlock("b", "\n\nout[1] = 2.0f;\n", threadgroup="(B, 1, 1)"),
        ],
    )
    text = render(c)
    back = parse(text, dialect="cuda")
    assert back == c
    assert render(back) == text
    # line numbers are those of the rendered text
    rendered = lines_of(text)
    assert rendered[back.kernel("a").line - 1] == "//! kernel a"
    assert rendered[back.kernel("b").threadgroup_line - 1] == "//! threadgroup = (B, 1, 1)"
    assert back.kernel("b").body_line == back.kernel("b").threadgroup_line + 1
    assert rendered[back.header_line - 1].startswith("__device__ float sq")


def test_non_canonical_inputs_normalise():
    text = (
        "// a comment before anything\n"
        "/* a block\n   comment */\n"
        "\n"
        "//!param  N2 = 8 {8,16, }\n"
        "  //!  kernel   k\n"
        "\n"
        "//! threadgroup=(32,1,1)\n"
        "//! grid = (n2, 1, 1)\n"
        "o[0] = 1;"
    )  # no final newline
    c = parse(text)
    k = c.kernel("k")
    assert c.params == [Param("N2", 8, (8, 16))]
    assert k.grid == "(n2, 1, 1)" and k.threadgroup == "(32,1,1)"
    assert k.body == "o[0] = 1;\n" and k.body_line == 10
    canon = render(c)
    assert canon == (
        "//! param N2 = 8 {8, 16}\n//! kernel k\n//! grid = (n2, 1, 1)\n"
        "//! threadgroup = (32,1,1)\no[0] = 1;\n"
    )
    assert render(parse(canon)) == canon


def test_body_blank_lines_without_launch_directives_are_kept():
    text = "//! kernel k\n\n\nx = 1;\n"
    c = parse(text)
    assert c.kernel("k").body == "\n\nx = 1;\n" and c.kernel("k").body_line == 2
    assert render(c) == text


def test_empty_header_dropped_and_empty_file():
    c = parse("//! header\n//! kernel k\nx;\n")
    assert c.header == "" and render(c) == "//! kernel k\nx;\n"
    empty = parse("")
    assert empty.kernels == [] and empty.params == [] and render(empty) == ""


def test_render_refuses_directive_lines_in_bodies():
    c = Candidate("metal", kernels=[KernelBlock("k", "x;\n//! kernel sneaky\n")])
    with pytest.raises(ValueError, match="directive"):
        render(c)


def test_param_values_and_template_args():
    c = parse(TWO_KERNELS)
    assert c.param_values() == {"TILE": 16, "UNROLL": 2}
    assert template_args(c) == [("TILE", 16), ("UNROLL", 2)]
    assert template_args(c, {"TILE": 32, "UNROLL": 7}) == [("TILE", 32), ("UNROLL", 7)]
    with pytest.raises(ValueError, match="not one of"):
        c.param_values({"TILE": 12})
    with pytest.raises(KeyError):
        c.param_values({"NOPE": 1})
    with pytest.raises(KeyError):
        c.kernel("nope")


# --- parse errors name the line ------------------------------------------------


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("//! kernel k\n//! frobnicate\n", 2, "unknown directive"),
        ("//! kernel k\nx;\n//! Computes the force\n", 3, "unknown directive"),
        ("//! kernelk\n", 1, "unknown directive"),
        ("//!\n", 1, "bad directive"),
        ("//! param VEC 4\n", 1, "bad param"),
        ("//! param VEC = four\n", 1, "must be an integer"),
        ("//! param 3D = 4\n", 1, "bad param name"),
        ("//! param min = 4\n", 1, "reserved"),
        ("//! param VEC = 4 {1, x}\n", 1, "must be an integer"),
        ("//! param VEC = 4 {}\n", 1, "empty choice"),
        ("//! param VEC = 4 {1, 1, 4}\n", 1, "duplicate choices"),
        ("\n//! param VEC = 3 {1, 2, 4}\n", 2, "not one of the choices"),
        ("//! param A = 1\n//! param A = 2\n", 2, "duplicate param"),
        ("//! kernel k\n//! param A = 1\n", 2, "must come before"),
        ("//! kernel a\nx;\n//! kernel b\ny;\n//! kernel a\nz;\n", 5, "duplicate kernel"),
        ("//! kernel 2fast\n", 1, "bad kernel name"),
        ("//! kernel\n", 1, "needs a name"),
        ("//! kernel a b\n", 1, "bad kernel name"),
        ("//! grid = (1, 1, 1)\n//! kernel k\n", 1, "outside a kernel"),
        ("//! header\n//! grid = (1, 1, 1)\n//! kernel k\n", 2, "outside a kernel"),
        ("//! kernel k\nx = 1;\n//! grid = (1, 1, 1)\n", 3, "directly after"),
        ("//! kernel k\n//! grid = (1, 1, 1)\n//! grid = (2, 1, 1)\n", 3, "duplicate `//! grid`"),
        ("//! kernel k\n//! grid = (N +, 1, 1)\n", 2, "malformed"),
        ("//! kernel k\n//! threadgroup = (2**8, 1, 1)\n", 2, "power"),
        ("//! kernel k\n//! grid = (x.y, 1, 1)\n", 2, "attribute"),
        ("//! kernel k\n//! grid (1, 1, 1)\n", 2, "expected `//! grid = "),
        ("//! header\n//! header\n", 2, "duplicate `//! header`"),
        ("//! kernel k\n//! header\n", 2, "before the first `//! kernel`"),
        ("//! header extra\n", 1, "unexpected text"),
        ("// ok\n\nfloat helper();\n//! kernel k\n", 3, "code before the first"),
        ("/* never closed\n//! kernel k\n", 2, "unterminated"),
    ],
)
def test_parse_errors_name_the_line(text, line, what):
    with pytest.raises(CandidateError) as info:
        parse(text, filename="cand.metal")
    err = info.value
    assert err.line == line
    assert what in err.message
    assert str(err).startswith(f"cand.metal:{line}: ")


def test_bad_dialect():
    with pytest.raises(ValueError):
        parse(SAXPY, dialect="opencl")


# --- extraction from LLM answers ------------------------------------------------


def test_extract_single_block():
    answer = f"Here is my kernel:\n\n```metal\n{SAXPY}```\n\nIt vectorises by VEC."
    assert extract_from_response(answer, "metal") == SAXPY


def test_extract_prefers_kernel_blocks_then_longest():
    small = "//! kernel saxpy\ny_out[0] = 0;\n"
    answer = (
        "First a sketch:\n```cpp\n" + "// " + "x" * 500 + "\n```\n"
        "Python check:\n```python\n" + "//! kernel not_this_one\n" * 40 + "```\n"
        "The file:\n```MSL\n" + small + "```\n"
        "And the full version:\n```metal\n" + SAXPY + "```\n"
    )
    assert extract_from_response(answer, "metal") == SAXPY
    # without a directive anywhere, the longest fitting block wins
    answer2 = "```\nshort\n```\n```c\nmuch longer text here\n```\n"
    assert extract_from_response(answer2, "metal") == "much longer text here\n"


def test_extract_dialect_filters_info_strings():
    cu = "//! kernel saxpy\nint i = blockIdx.x;\n"
    mtl = "//! kernel saxpy\nuint i = thread_position_in_grid.x;\n"
    answer = f"```cuda\n{cu}```\n```metal\n{mtl}```\n"
    assert extract_from_response(answer, "cuda") == cu
    assert extract_from_response(answer, "metal") == mtl
    assert extract_from_response(f"```CU\n{cu}```", "cuda") == cu


def test_extract_none_and_unclosed():
    assert extract_from_response("No code, sorry.", "metal") is None
    assert extract_from_response("```python\nprint(1)\n```", "metal") is None
    assert extract_from_response("```metal\n\n```", "metal") is None
    # a truncated answer: the unclosed block runs to the end
    assert extract_from_response("ok\n```metal\n//! kernel k\nx;", "metal") == "//! kernel k\nx;\n"


def test_extract_longer_fence_contains_shorter():
    inner = "//! kernel k\n// ```not a fence end\n```\nx;\n"
    answer = "````metal\n" + inner + "````\n"
    assert extract_from_response(answer, "metal") == inner


# --- validation against a task --------------------------------------------------


def kinds(failures):
    return sorted(f.kind for f in failures)


def test_validate_ok():
    assert validate(parse(SAXPY), ["saxpy"], {"N"}) == []
    assert validate(parse(TWO_KERNELS), ["step", "reduce"], {"W", "H"}) == []


def test_validate_missing_and_unknown_kernel():
    c = parse("//! kernel saxpi\nx;\n")
    fails = validate(c, ["saxpy"], {"N"})
    assert kinds(fails) == ["missing_kernel", "unknown_kernel"]
    unknown = next(f for f in fails if f.kind == "unknown_kernel")
    assert unknown.line == 1 and "saxpi" in unknown.message
    missing = next(f for f in fails if f.kind == "missing_kernel")
    assert missing.line is None and "saxpy" in missing.message
    assert all(isinstance(f, CandidateFailure) for f in fails)


def test_validate_unknown_name():
    text = "//! param VEC = 4\n//! kernel saxpy\n//! grid = (ceil_div(N, VEC * K), 1, 1)\nx;\n"
    fails = validate(parse(text), ["saxpy"], {"N"})
    assert kinds(fails) == ["unknown_name"]
    assert fails[0].line == 3 and "'K'" in fails[0].message


def test_validate_bad_expression_and_others():
    c = Candidate(
        "metal",
        params=[Param("N", 4)],
        kernels=[
            KernelBlock("a", "x;\n", grid="(N, 1)", line=1, grid_line=2),
            KernelBlock("b", "x;\n", threadgroup="__import__('os')", line=5),
            KernelBlock("c", "  \n", line=9),
        ],
    )
    fails = validate(c, ["a", "b", "c"], {"N"})
    assert kinds(fails) == ["bad_expression", "bad_expression", "empty_kernel", "name_conflict"]
    by_kind = {}
    for f in fails:
        by_kind.setdefault(f.kind, []).append(f)
    assert [f.line for f in by_kind["bad_expression"]] == [2, 5]
    assert "3-tuple" in by_kind["bad_expression"][0].message
    assert by_kind["empty_kernel"][0].line == 9


# --- to MLX -----------------------------------------------------------------------


def test_to_kernel_spec():
    c = parse(SAXPY, filename="saxpy.metal")
    spec = to_kernel_spec(c, "saxpy", ["x", "y", "a", "N"], ["y_out"])
    assert isinstance(spec, KernelSpec)
    assert spec.name == "saxpy"
    assert spec.input_names == ("x", "y", "a", "N") and spec.output_names == ("y_out",)
    assert spec.source == c.kernel("saxpy").body
    assert spec.header == c.header and spec.header.endswith("\n")
    assert (spec.header_line, spec.body_line) == (3, 7)
    assert spec.dialect == "metal" and spec.source_file == "saxpy.metal"
    assert not spec.atomic_outputs
    spec2 = to_kernel_spec(
        parse(TWO_KERNELS, dialect="cuda"),
        "reduce",
        ["inp"],
        ["out"],
        atomic_outputs=True,
        filename="x.cu",
    )
    assert spec2.header == "" and spec2.dialect == "cuda" and spec2.atomic_outputs
    assert spec2.source_file == "x.cu" and spec2.body_line == 12
