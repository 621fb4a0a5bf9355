"""convert_source: a Metal-Sci source (a full Metal file) as an mlxsci candidate.

The fixtures in metal_sci_sources/ are Metal-Sci-style seeds of the 12 tasks,
written from the spec's interfaces (in place where Metal-Sci is in place).
Each converts and is correct on the simulator at its smoke sizes; renamed, aliased, in-place and
collision cases convert and evaluate correct; sources that cannot be
converted give a one-line reason, never an exception."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import replace_once, smoke_eval

from mlxsci.import_metal_sci import interfaces
from mlxsci.import_metal_sci.convert import Conversion, convert_source, normal_type
from mlxsci.import_metal_sci.metal_source import (
    MetalSourceError,
    parse_metal_source,
    scan,
)
from mlxsci.kernel.candidate import parse, validate
from mlxsci.task import load_task, task_names

SOURCES = Path(__file__).parent / "metal_sci_sources"
TASKS = sorted(p.stem for p in SOURCES.glob("*.metal"))


def seed(task: str) -> str:
    return (SOURCES / f"{task}.metal").read_text()


def converted(task: str, source: str) -> Conversion:
    """The conversion, which must succeed and give a candidate that parses
    and fits the task."""
    c = convert_source(task, source)
    assert c.reason is None and c.text is not None, c.reason
    t = load_task(task)
    cand = parse(c.text, dialect="metal")
    names = t.launch_names(t.size_set("smoke")[0].params)
    assert validate(cand, t.kernel_names, names) == []
    for k in cand.kernels:
        assert k.grid and k.threadgroup, k.name
    return c


def refused(task, source, *needles) -> str:
    c = convert_source(task, source)
    assert c.text is None and c.reason, c
    assert "\n" not in c.reason
    for needle in needles:
        assert needle in c.reason, c.reason
    return c.reason


def body_of(text: str, kernel: str) -> str:
    cand = parse(text, dialect="metal")
    return next(k.body for k in cand.kernels if k.name == kernel)


# ------------------------------------------------------------ the interfaces


def test_fixtures_cover_the_twelve_tasks():
    assert TASKS == sorted(task_names()) == sorted(interfaces.INTERFACES)


@pytest.mark.parametrize("task", TASKS)
def test_interface_names_are_mlxsci_contract_names(task):
    """Every kernel mlxsci runs is in the table with buffers whose mlxsci
    names are exactly the contract's inputs and outputs."""
    t = load_task(task)
    iface = interfaces.interface(task)
    assert [k.name for k in iface.kernels if k.runs] == t.kernel_names
    for ki in iface.kernels:
        assert [b.index for b in ki.buffers] == list(range(len(ki.buffers)))
        assert all(b.kind in interfaces.BUFFER_KINDS for b in ki.buffers)
        if not ki.runs:
            assert ki.why_not_run
            continue
        contract = t.kernel(ki.name)
        reads = {b.read_name for b in ki.buffers if b.read_name}
        writes = {b.write_name for b in ki.buffers if b.write_name}
        assert reads == set(contract.inputs), ki.name
        assert writes == set(contract.outputs), ki.name


def test_in_place_buffers_and_dropped_kernels():
    inout = {
        (task, k.name, b.name)
        for task, iface in interfaces.INTERFACES.items()
        for k in iface.kernels
        for b in k.buffers
        if b.kind == "inout"
    }
    assert inout == {
        ("saxpy", "saxpy", "y"),
        ("ising", "ising_step", "spins"),
        ("hmc", "hmc_step", "accept_cnt"),
    }
    dropped = [
        k.name for iface in interfaces.INTERFACES.values() for k in iface.kernels if not k.runs
    ]
    assert dropped == ["lj_clear_cells"]


@pytest.mark.parametrize("task", TASKS)
def test_default_launch_is_the_mlxsci_default_except_fft3d(task):
    """Metal-Sci's host launch without an attribute; mlxsci's contracts use
    the same shapes, but for fft3d (mlxsci's kernels decode a (N, N, N) grid)."""
    t = load_task(task)
    for ki in interfaces.interface(task).kernels:
        if not ki.runs:
            continue
        grid, tg = interfaces.launch_shape(ki.launch)
        contract = t.kernel(ki.name)
        if task == "fft3d":
            assert (grid, tg) == ("(N, N * N, 1)", "(N, 1, 1)")
        else:
            assert (grid, tg) == (contract.grid, contract.threadgroup), ki.name


@pytest.mark.parametrize(
    "launch,cap,expected",
    [
        (
            interfaces.Launch("line", ("N",), 256),
            128,
            ("(ceil_div(N, 128) * 128, 1, 1)", "(128, 1, 1)"),
        ),
        (
            interfaces.Launch("line", ("N",), 256),
            1024,
            ("(ceil_div(N, 256) * 256, 1, 1)", "(256, 1, 1)"),
        ),
        (interfaces.Launch("line", ("K",), 64), 32, ("(ceil_div(K, 32) * 32, 1, 1)", "(32, 1, 1)")),
        (
            interfaces.Launch("plane", ("NX", "NY")),
            64,
            ("(ceil_div(NX, 16) * 16, ceil_div(NY, 4) * 4, 1)", "(16, 4, 1)"),
        ),
        (
            interfaces.Launch("plane", ("NX", "NY")),
            16,
            ("(ceil_div(NX, 16) * 16, NY, 1)", "(16, 1, 1)"),
        ),
        (
            interfaces.Launch("box", ("NX", "NY", "NZ")),
            128,
            ("(ceil_div(NX, 8) * 8, ceil_div(NY, 8) * 8, ceil_div(NZ, 2) * 2)", "(8, 8, 2)"),
        ),
        (
            interfaces.Launch("box", ("NX", "NY", "NZ")),
            32,
            ("(ceil_div(NX, 8) * 8, ceil_div(NY, 4) * 4, NZ)", "(8, 4, 1)"),
        ),
        (interfaces.Launch("reduce", width=256), 128, ("(128, 1, 1)", "(128, 1, 1)")),
        (interfaces.Launch("reduce", width=256), 200, ("(128, 1, 1)", "(128, 1, 1)")),
        (interfaces.Launch("reduce", width=256), 1024, ("(256, 1, 1)", "(256, 1, 1)")),
    ],
)
def test_shrink_rules(launch, cap, expected):
    assert interfaces.launch_shape(launch, cap) == expected


def test_shrink_rules_the_host_refuses():
    with pytest.raises(interfaces.LaunchRuleError):
        interfaces.launch_shape(interfaces.Launch("plane", ("NX", "NY")), 8)
    adi = interfaces.interface("adi3d").kernels[0].launch
    with pytest.raises(interfaces.LaunchRuleError):
        interfaces.launch_shape(adi, 16)
    assert interfaces.launch_shape(adi, 32) == ("(NY, NZ, 1)", "(32, 1, 1)")


def test_type_synonyms():
    assert normal_type("uint") == normal_type("uint32_t") == normal_type("unsigned int")
    assert normal_type("metal::atomic<uint>") == normal_type("atomic_uint")
    assert normal_type("int") == "int32_t"
    # char is not signed char (int8_t) in C++: a pointer to one is no pointer to the other
    assert normal_type("char") != normal_type("int8_t")


# ------------------------------------------------------------- the parser


def test_parser_splits_header_and_kernels():
    src = seed("gradshaf")
    parsed = parse_metal_source(src)
    assert [k.name for k in parsed.kernels] == ["gradshaf_axis_reduce", "gradshaf_step"]
    reduce = parsed.kernels[0]
    assert reduce.attributes == ("max_total_threads_per_threadgroup(256)",)
    assert [(p.name, p.attribute) for p in reduce.params] == [
        ("psi", "buffer(0)"),
        ("psi_axis", "buffer(1)"),
        ("NR", "buffer(2)"),
        ("NZ", "buffer(3)"),
        ("tid", "thread_position_in_threadgroup"),
        ("tgsize", "threads_per_threadgroup"),
    ]
    psi = reduce.params[0]
    assert (psi.address_space, psi.const, psi.base, psi.declarator) == (
        "device",
        True,
        "float",
        "*",
    )
    assert "#include <metal_stdlib>" in parsed.header and "kernel" not in parsed.header.replace(
        "kernel's", ""
    )
    assert "threadgroup float partial[256];" in reduce.body


def test_parser_respects_comments_strings_and_directives():
    src = """#include <metal_stdlib>
#define OPEN {
// kernel void fake(   a comment
constant char MSG[] = "} kernel void also_fake() {";
inline int helper(int v) { return v /* } */ + '}'; }
kernel void saxpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& a [[buffer(2)]], constant uint& N [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) [[max_total_threads_per_threadgroup(64)]]
{
    if (i < N) { y[i] = a * x[i] + y[i]; } // }
}
"""
    parsed = parse_metal_source(src)
    (k,) = parsed.kernels
    assert k.name == "saxpy" and k.attributes == ("max_total_threads_per_threadgroup(64)",)
    assert k.body.strip().endswith("// }")
    assert 'constant char MSG[] = "} kernel void also_fake() {";' in parsed.header
    assert parsed.header.index("#define OPEN") < parsed.header.index("inline int helper")


def test_scanner_marks_directive_lines():
    toks = scan("#define A \\\n  {\nint b;")
    assert [t.pp for t in toks] == [True, True, True, True, False, False, False]


@pytest.mark.parametrize(
    "src,needle",
    [
        ("kernel void f() { /* }", "unterminated /* comment"),
        ('kernel void f() { "abc }', "unterminated string"),
        ("kernel void f() { {", "unclosed"),
        ("kernel void f(device float* x [[buffer(0)]]);", "without a body"),
        ("template <typename T> kernel void f() {}", "template"),
    ],
)
def test_parser_errors_are_one_line(src, needle):
    with pytest.raises(MetalSourceError) as info:
        parse_metal_source(src)
    assert needle in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------- every seed converts


@pytest.mark.parametrize("task", TASKS)
def test_seed_converts(task):
    c = converted(task, seed(task))
    assert c.text.startswith("//! header\n#include <metal_stdlib>\nusing namespace metal;\n")


@pytest.mark.parametrize("task", TASKS)
def test_seed_is_correct_on_the_simulator(task):
    """All 12 take about 10 s together on 2 cores (0.3-1.5 s each): the
    fast tier keeps them."""
    c = converted(task, seed(task))
    result = smoke_eval(task, c.text, dialect="metal")
    assert result.correct, (result.fail_reason, c.text)


def test_seed_notes():
    lj = converted("lj", seed("lj"))
    assert any(n.startswith("kernel lj_clear_cells dropped: mlxsci starts") for n in lj.notes)
    assert "kernel void lj_clear_cells" not in lj.text
    assert [k.name for k in parse(lj.text).kernels] == ["lj_build_cells", "lj_step"]
    # Metal-Sci's `device uint* cell_list` over MLX's atomic output: an alias cast
    assert "device uint* ms_cell_list = (device uint*)cell_list;" in lj.text
    fft = converted("fft3d", seed("fft3d"))
    assert fft.text.count("//! grid = (N, N * N, 1)") == 3
    assert any("launch set from Metal-Sci's host" in n for n in fft.notes)
    assert "const device float2* ms_in_data = (const device float2*)in_data;" in fft.text
    saxpy = converted("saxpy", seed("saxpy"))
    assert "y_out[i] = a * x[i] + y[i];" in saxpy.text
    assert any("in-place buffer 'y' split" in n for n in saxpy.notes)


# --------------------------------------------------- renames and aliases

HEAT_RENAMED = """#include <metal_stdlib>
using namespace metal;
//! a comment that reads like a directive
#define AT(i, j) src[(j) * w + (i)]

kernel void heat_step(device const float* src [[buffer(0)]],
                      device float* dst [[buffer(1)]],
                      constant uint& w [[buffer(2)]],
                      constant uint& h [[buffer(3)]],
                      constant float& a [[buffer(4)]],
                      ushort2 thread_position_in_grid [[thread_position_in_grid]])
{
    uint i = thread_position_in_grid.x, j = thread_position_in_grid.y;
    if (i >= w || j >= h) return;
    float u_in = AT(i, j);   // a local named like mlxsci's input
    uint grid_size = w * h;  // a local named like an MLX attribute
    if (i == 0 || j == 0 || i == w - 1 || j == h - 1 || grid_size == 0) {
        dst[j * w + i] = u_in;
        return;
    }
    dst[j * w + i] = u_in + a * (AT(i - 1, j) + AT(i + 1, j) + AT(i, j - 1) + AT(i, j + 1)
                                 - 4.0f * u_in);
}
"""


def test_renamed_parameters_convert_and_are_correct():
    c = converted("heat2d", HEAT_RENAMED)
    notes = " | ".join(c.notes)
    assert "src -> u_in, dst -> u_out, w -> NX, h -> NY, a -> alpha" in notes
    assert "u_in -> ms_u_in" in notes and "grid_size -> ms_grid_size" in notes
    assert "#define AT(i, j) u_in[(j) * NX + (i)]" in c.text  # the header's macro alike
    assert "// ! a comment" in c.text
    body = body_of(c.text, "heat_step")
    assert "ushort2 ms_thread_position_in_grid = ushort2(thread_position_in_grid.xy);" in body
    assert smoke_eval("heat2d", c.text).correct


def test_header_names_like_mlx_parameters_are_renamed():
    """A header constant named like mlxsci's scalar would be shadowed by
    MLX's parameter in a body that does not declare it, and a macro named
    like one would expand inside MLX's signature: both are renamed
    everywhere; a kernel's own parameter of that name still wins."""
    src = seed("heat2d").replace(
        "using namespace metal;",
        "using namespace metal;\nconstant float alpha = 0.2f;\n#define NY_TILE 16\n"
        "inline float relax(float c, float s) { return c + alpha * (s - 4.0f * c); }",
    )
    src = replace_once(src, "                      constant float&     alpha [[buffer(4)]],\n", "")
    src = replace_once(
        src,
        "u_out[idx] = c + alpha * (l + r + d + u - 4.0f * c);",
        "u_out[idx] = relax(c, l + r + d + u) + 0.0f * alpha;",
    )
    c = converted("heat2d", src)
    assert "constant float ms_alpha = 0.2f;" in c.text
    assert "return c + ms_alpha * (s - 4.0f * c);" in c.text
    assert "+ 0.0f * ms_alpha;" in c.text
    assert any("buffer(s) 4 alpha not declared" in n for n in c.notes)
    assert smoke_eval("heat2d", c.text).correct
    hmc = seed("hmc").replace("using namespace metal;", "using namespace metal;\n#define L 10u")
    hmc = replace_once(
        hmc, "                     constant uint&      L            [[buffer(6)]],\n", ""
    )
    c = converted("hmc", hmc)
    assert "#define ms_L 10u" in c.text and "l < ms_L;" in c.text
    shadowed = seed("heat2d").replace(
        "using namespace metal;", "using namespace metal;\nconstant float alpha = 0.7f;"
    )
    c = converted("heat2d", shadowed)
    assert "constant float ms_alpha = 0.7f;" in c.text
    assert "c + alpha * (l + r + d + u - 4.0f * c)" in c.text


NBODY_FLOATS = """#include <metal_stdlib>
using namespace metal;
kernel void nbody_step(device const float* p [[buffer(0)]], device float* po [[buffer(1)]],
                       device const float* v [[buffer(2)]], device float* vo [[buffer(3)]],
                       device const float* m [[buffer(4)]], constant uint& n [[buffer(5)]],
                       constant float& dt [[buffer(6)]], constant float& eps [[buffer(7)]],
                       constant float& G [[buffer(8)]], uint i [[thread_position_in_grid]]) {
    if (i >= n) return;
    float3 ri = float3(p[4 * i], p[4 * i + 1], p[4 * i + 2]);
    float3 acc = 0.0f;
    for (uint j = 0; j < n; ++j) {
        float3 d = float3(p[4 * j], p[4 * j + 1], p[4 * j + 2]) - ri;
        float r2 = dot(d, d) + eps * eps;
        acc += m[j] * rsqrt(r2 * r2 * r2) * d;
    }
    float3 vi = float3(v[4 * i], v[4 * i + 1], v[4 * i + 2]) + G * acc * dt;
    float3 r = ri + vi * dt;
    for (uint c = 0; c < 3; ++c) { po[4 * i + c] = r[c]; vo[4 * i + c] = vi[c]; }
    po[4 * i + 3] = 0.0f;
    vo[4 * i + 3] = 0.0f;
}
"""


def test_nbody_float4_and_float_forms_are_correct():
    """The seed declares float4 (aliased over MLX's float array), this one
    float (renamed): both correct."""
    float4 = converted("nbody", seed("nbody"))
    assert "const device float4* ms_pos_in = (const device float4*)pos_in;" in float4.text
    floats = converted("nbody", NBODY_FLOATS)
    assert "ms_" not in body_of(floats.text, "nbody_step")
    for c in (float4, floats):
        assert smoke_eval("nbody", c.text).correct


# --------------------------------------------------------- in-place buffers


def _carry(task: str) -> str:
    from mlxsci.import_metal_sci.convert import indent_text

    (ki,) = [k for k in interfaces.interface(task).kernels if k.carry]
    return indent_text(ki.carry, "    ")


def test_ising_carry_is_what_makes_the_seed_correct():
    """The seed's wrong-colour threads return and its active ones store only
    a flipped spin: without the carry, mlxsci's poisoned output keeps NaN
    bytes where no thread wrote."""
    c = converted("ising", seed("ising"))
    carry = _carry("ising")
    assert c.text.count(carry) == 1
    body = body_of(c.text, "ising_step")
    assert body.index(carry) < body.index("if (i >= NX || j >= NY) return;")
    assert "ms_spins_out[site] = char(-s);" in body
    assert smoke_eval("ising", c.text).correct
    without = replace_once(c.text, carry, "")
    assert not smoke_eval("ising", without).correct


def test_hmc_accept_count_in_place_is_correct():
    c = converted("hmc", seed("hmc"))
    body = body_of(c.text, "hmc_step")
    assert "(accept_cnt_out[chain_idx] = accept_cnt[chain_idx] + (1));" in body
    assert _carry("hmc") in c.text
    assert smoke_eval("hmc", c.text).correct


@pytest.mark.parametrize(
    "statement,rewritten",
    [
        ("accept_cnt[chain_idx]++;", "(accept_cnt_out[chain_idx] = accept_cnt[chain_idx] + 1);"),
        ("++accept_cnt[chain_idx];", "(accept_cnt_out[chain_idx] = accept_cnt[chain_idx] + 1);"),
        (
            "uint was = accept_cnt[chain_idx]++; (void)was;",
            "uint was = (accept_cnt_out[chain_idx] = accept_cnt[chain_idx] + 1, "
            "accept_cnt[chain_idx]);",
        ),
        (
            "accept_cnt[chain_idx] = accept_cnt[chain_idx] + 1u;",
            "accept_cnt_out[chain_idx] = accept_cnt[chain_idx] + 1u;",
        ),
    ],
)
def test_in_place_write_forms(statement, rewritten):
    src = replace_once(seed("hmc"), "accept_cnt[chain_idx] += 1;", statement)
    c = converted("hmc", src)
    assert rewritten in c.text


def test_in_place_write_forms_are_correct():
    src = replace_once(seed("hmc"), "accept_cnt[chain_idx] += 1;", "accept_cnt[chain_idx]++;")
    assert smoke_eval("hmc", converted("hmc", src).text).correct
    src = replace_once(seed("saxpy"), "y[i] = a * x[i] + y[i];", "y[i] += a * x[i];")
    c = converted("saxpy", src)
    assert "(y_out[i] = y[i] + (a * x[i]));" in c.text
    assert smoke_eval("saxpy", c.text).correct


def test_reads_through_a_pointer_to_const_keep_reading_the_input():
    src = replace_once(
        seed("ising"),
        "    int s = spins[site];",
        "    device const char* row = spins + j * NX;\n    int s = row[i];",
    )
    c = converted("ising", src)
    assert "device const char* row = ms_spins + j * NX;" in c.text
    cast = replace_once(
        seed("ising"), "int s = spins[site];", "int s = ((device const char*)spins)[site];"
    )
    assert "((device const char*)ms_spins)[site]" in converted("ising", cast).text


SAXPY_FLOAT4 = """#include <metal_stdlib>
using namespace metal;
kernel void saxpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& a [[buffer(2)]], constant uint& N [[buffer(3)]],
                  uint i [[thread_position_in_grid]])
{
    device const float4* x4 = (device const float4*)x;
    device float4* y4 = (device float4*)y;
    const uint n4 = N / 4;
    if (i < n4) {
        y4[i] = a * x4[i] + y4[i];
    } else if (i - n4 < N % 4) {
        const uint t = 4 * n4 + (i - n4);
        y[t] = a * x[t] + y[t];
    }
}
"""


def test_a_writable_pointer_into_an_in_place_buffer_is_split_into_two_views():
    """The usual vectorised saxpy: `y4` points into y_out (its writes), a
    fresh `ms_y4_in` at the same place in y (its reads), declared on the
    same line; its subscripts are rewritten as y's are."""
    c = converted("saxpy", SAXPY_FLOAT4)
    body = body_of(c.text, "saxpy")
    assert (
        "device float4* y4 = (device float4*)y_out; "
        "const device float4* ms_y4_in = (const device float4*)y;" in body
    )
    assert "y4[i] = a * x4[i] + ms_y4_in[i];" in body
    assert "y_out[t] = a * x[t] + y[t];" in body
    assert smoke_eval("saxpy", c.text).correct
    # the compound and increment forms, reinterpret_cast, an offset and &y[k]
    src = replace_once(SAXPY_FLOAT4, "y4[i] = a * x4[i] + y4[i];", "y4[i] += a * x4[i];")
    src = replace_once(src, "(device float4*)y;", "reinterpret_cast<device float4*>(y + 0);")
    src = replace_once(
        src,
        "y[t] = a * x[t] + y[t];",
        "device float* tail = &y[4 * n4];\n        tail[t - 4 * n4] += a * x[t];",
    )
    c = converted("saxpy", src)
    body = body_of(c.text, "saxpy")
    assert "const device float4* ms_y4_in = reinterpret_cast<const device float4*>(y + 0);" in body
    assert "(y4[i] = ms_y4_in[i] + (a * x4[i]));" in body
    assert (
        "device float* tail = &y_out[4 * n4]; const device float* ms_tail_in = &y[4 * n4];" in body
    )
    assert "(tail[t - 4 * n4] = ms_tail_in[t - 4 * n4] + (a * x[t]));" in body
    assert smoke_eval("saxpy", c.text).correct
    # a pointer to const from y reads it, its initializer run once (a call
    # is fine); an element of y read in a pointer's initializer is a read
    src = replace_once(
        SAXPY_FLOAT4,
        "    const uint n4 = N / 4;",
        "    const uint n4 = N / 4;\n"
        "    device const float* yr = reinterpret_cast<device float*>(y + min(i, 0u));\n"
        "    device const float* xs = x + uint(y[0] * 0.0f);",
    )
    src = replace_once(src, "y[t] = a * x[t] + y[t];", "y[t] = a * xs[t] + yr[t];")
    body = body_of(converted("saxpy", src).text, "saxpy")
    assert "yr = reinterpret_cast<const device float*>(y + min(i, 0u));" in body
    assert "xs = x + uint(y[0] * 0.0f);" in body and "y_out[t] = a * xs[t] + yr[t];" in body


def test_a_row_pointer_into_the_spins_reads_and_writes_through_its_views():
    """`device char* row = spins + j * NX;` read for the site and its left
    and right neighbours, written for the flip; `auto` and a pointer to
    const from `&spins[k]` beside it."""
    src = replace_once(
        seed("ising"),
        "    int s = spins[site];\n    int h = spins[j * NX + il] + spins[j * NX + ir]",
        "    device char* row = spins + j * NX;\n"
        "    auto up = spins + ju * NX;\n"
        "    device const char* down = &spins[jd * NX];\n"
        "    int s = row[i];\n    int h = row[il] + row[ir] + up[i] + down[i] + 0 * spins[0]",
    )
    src = replace_once(src, "spins[jd * NX + i] + spins[ju * NX + i];", "0;")
    src = replace_once(src, "spins[site] = char(-s);", "row[i] = char(-s);")
    c = converted("ising", src)
    body = body_of(c.text, "ising_step")
    assert (
        "device char* row = ms_spins_out + j * NX; const device char* ms_row_in = ms_spins + j * NX;"
        in body
    )
    assert "auto up = ms_spins_out + ju * NX; auto ms_up_in = ms_spins + ju * NX;" in body
    assert "device const char* down = &ms_spins[jd * NX];" in body
    assert "int s = ms_row_in[i];" in body and "row[i] = char(-s);" in body
    assert smoke_eval("ising", c.text).correct


VIEW_REFUSED = {
    "escapes into a call": (
        "device float4* y4 = (device float4*)y;",
        "y4[i] = a * x4[i] + y4[i];",
        "store4(y4, i, a * x4[i]);",
        "pointer 'y4' into in-place buffer 'y' is used other than by a subscript",
    ),
    "reassigned": (
        "device float4* y4 = (device float4*)y;",
        "y4[i] = a * x4[i] + y4[i];",
        "y4 = y4 + 0; y4[i] = a * x4[i] + y4[i];",
        "pointer 'y4' into in-place buffer 'y' is used other than by a subscript",
    ),
    "incremented": (
        "device float4* y4 = (device float4*)y;",
        "y4[i] = a * x4[i] + y4[i];",
        "y4 += i; y4[0] = a * x4[i] + y4[0];",
        "pointer 'y4' into in-place buffer 'y' is used other than by a subscript",
    ),
    "copied": (
        "device float4* y4 = (device float4*)y;",
        "y4[i] = a * x4[i] + y4[i];",
        "device float4* z4 = y4; z4[i] = a * x4[i];",
        "pointer 'y4' into in-place buffer 'y' is used other than by a subscript",
    ),
    "dereferenced": (
        "device float4* y4 = (device float4*)y;",
        "y4[i] = a * x4[i] + y4[i];",
        "*(y4 + i) = a * x4[i];",
        "pointer 'y4' into in-place buffer 'y' is used other than by a subscript",
    ),
    "its element's address taken": (
        "device float4* y4 = (device float4*)y;",
        "y4[i] = a * x4[i] + y4[i];",
        "device float4* e = &y4[i]; e[0] = a * x4[i];",
        "the address of an element of pointer 'y4' into in-place buffer 'y'",
    ),
    "a part of its element written": (
        "device float4* y4 = (device float4*)y;",
        "y4[i] = a * x4[i] + y4[i];",
        "y4[i].x = 1.0f;",
        "a write to part of an element of pointer 'y4'",
    ),
    "an initializer naming y twice": (
        "device float4* y4 = (device float4*)y;",
        "device float4* y4 = (device float4*)y;",
        "device float4* y4 = (device float4*)(N > 0 ? y : y);",
        "its initializer also names 'y'",
    ),
    "an initializer with a call": (
        "device float4* y4 = (device float4*)y;",
        "device float4* y4 = (device float4*)y;",
        "device float4* y4 = (device float4*)(y + pick(N));",
        "its initializer calls 'pick'",
    ),
    "two declarators": (
        "device float4* y4 = (device float4*)y;",
        "device float4* y4 = (device float4*)y;",
        "device float4 *y4 = (device float4*)y, *w4 = y4;",
        "cannot split",
    ),
    "a name used before": (
        "device const float4* x4 = (device const float4*)x;",
        "device const float4* x4 = (device const float4*)x;",
        "device const float4* x4 = (device const float4*)x; { float y4 = 0.0f; (void)y4; }",
        "declared more than once or used before",
    ),
    "a name reused after its block": (
        "    if (i < n4) {\n        y4[i] = a * x4[i] + y4[i];\n    }",
        "    if (i < n4) {\n        y4[i] = a * x4[i] + y4[i];\n    }",
        "    if (i < n4) {\n        device float4* v = (device float4*)y;\n"
        "        v[i] = a * x4[i] + v[i];\n    }\n    float v[1] = {0.0f}; (void)v;",
        "the name is used again after it",
    ),
    "a writable reference to an element": (
        "device float4* y4 = (device float4*)y;",
        "y[0] = y[0];",
        "device float& e = y[i]; e += a * x[i];",
        "a writable reference 'e' is bound to in-place buffer 'y'",
    ),
}


@pytest.mark.parametrize("case", VIEW_REFUSED)
def test_a_pointer_into_an_in_place_buffer_used_otherwise_is_not_converted(case):
    first, old, new, needle = VIEW_REFUSED[case]
    src = SAXPY_FLOAT4.replace(
        "kernel void saxpy",
        "inline void store4(device float4* p, uint k, float4 v) { p[k] = v; }\n"
        "inline uint pick(uint n) { return n - n; }\nkernel void saxpy",
    )
    if old == "y[0] = y[0];":
        src = replace_once(src, first, first + " " + new)
    else:
        assert first in src
        src = replace_once(src, old, new)
    refused("saxpy", src, needle)


def test_a_pointer_into_an_in_place_buffer_named_in_a_macro_is_not_converted():
    src = replace_once(SAXPY_FLOAT4, "kernel void saxpy", "#define Y4(k) y4[k]\nkernel void saxpy")
    src = replace_once(src, "y4[i] = a * x4[i] + y4[i];", "Y4(i) = a * x4[i] + Y4(i);")
    refused("saxpy", src, "a macro of the header names it")


READ_HELPER = """static inline int nsum(device const char* s, uint a, uint b) {
    return int(s[a]) + int(s[b]);
}
"""


def _ising_with_helper(header: str, call: str = "nsum(spins, j * NX + il, j * NX + ir)") -> str:
    src = replace_once(seed("ising"), "kernel void ising_step", header + "\nkernel void ising_step")
    return replace_once(
        src,
        "int h = spins[j * NX + il] + spins[j * NX + ir] + spins[jd * NX + i] + spins[ju * NX + i];",
        f"int h = {call} + spins[jd * NX + i] + spins[ju * NX + i];",
    )


def test_an_in_place_buffer_passed_to_a_read_only_helper_reads_the_input():
    """Every declaration of the helper takes a pointer to const there, so it
    only reads: the call passes mlxsci's input (here its char alias)."""
    c = converted("ising", _ising_with_helper(READ_HELPER))
    assert "nsum(ms_spins, j * NX + il, j * NX + ir)" in c.text
    assert smoke_eval("ising", c.text).correct
    # an overload of the same arity taking a pointer to const too: still a read
    both = READ_HELPER + READ_HELPER.replace("uint a, uint b", "int a, int b")
    assert "nsum(ms_spins," in converted("ising", _ising_with_helper(both)).text


@pytest.mark.parametrize(
    "header,call",
    [
        # the helper writes through its parameter
        (READ_HELPER.replace("device const char* s", "device char* s"), None),
        # one overload of that arity may write
        (
            READ_HELPER
            + READ_HELPER.replace("device const char* s, uint a", "device char* s, int a"),
            None,
        ),
        # the pointer itself const, its chars not
        (READ_HELPER.replace("device const char* s", "device char* const s"), None),
        # a function-like macro named like the helper hides it
        (READ_HELPER + "#define nsum(s, a, b) (int(s[a]) + int(s[b]))\n", None),
        # an overload a macro declares is one the converter cannot see
        (
            READ_HELPER + "#define DECL(f) static inline int f(device char* s, int a, int b) "
            "{ return int(s[a]) + int(s[b]); }\nDECL(nsum);\n",
            None,
        ),
        # a namespace's functions can be overloads brought in by `using`
        (
            READ_HELPER
            + "namespace lat {\n"
            + READ_HELPER.replace("device const char* s", "device char* s")
            + "}\nusing namespace lat;\n",
            None,
        ),
        # a template call, a member call, a helper the header does not declare
        (READ_HELPER, "nsum<char>(spins, j * NX + il, j * NX + ir)"),
        (READ_HELPER, "metal::nsum(spins, j * NX + il, j * NX + ir)"),
        (READ_HELPER, "other(spins, j * NX + il, j * NX + ir)"),
        # an argument that is more than the buffer
        (READ_HELPER, "nsum(spins + 0, j * NX + il, j * NX + ir)"),
    ],
)
def test_an_in_place_buffer_passed_to_a_helper_that_may_write_is_not_converted(header, call):
    src = _ising_with_helper(header, call) if call else _ising_with_helper(header)
    refused("ising", src, "in-place buffer 'spins' is used other than by a subscript")


def test_an_array_buffer_bound_to_a_reference_is_its_first_element():
    """Metal binds `constant float& u_in [[buffer(0)]]` to the buffer's first
    element, and so does the converted alias; subscripting a reference does
    not compile in either."""
    src = replace_once(seed("heat2d"), "device const float* u_in", "constant float& u_in")
    c = converted("heat2d", src)
    assert "const device float& ms_u_in = *(const device float*)u_in;" in c.text
    result = smoke_eval("heat2d", c.text)
    assert not result.correct and result.fail_reason.startswith("compile error")
    # read as the array it starts (`(&u_in)[i]`), it is the seed
    src = src.replace("u_in[", "(&u_in)[")
    assert smoke_eval("heat2d", converted("heat2d", src).text).correct


# ------------------------------------------------------------- the launch


def test_gradshaf_reduce_attribute_shrinks_its_launch():
    src = replace_once(
        seed("gradshaf"),
        "max_total_threads_per_threadgroup(256)",
        "max_total_threads_per_threadgroup(128)",
    )
    c = converted("gradshaf", src)
    cand = parse(c.text, dialect="metal")
    reduce = next(k for k in cand.kernels if k.name == "gradshaf_axis_reduce")
    assert (reduce.grid, reduce.threadgroup) == ("(128, 1, 1)", "(128, 1, 1)")
    assert "max_total_threads_per_threadgroup" not in c.text
    assert any(
        "[[max_total_threads_per_threadgroup(128)]] dropped" in n
        and "grid (128, 1, 1), threadgroup (128, 1, 1)" in n
        for n in c.notes
    )


def test_attribute_through_a_macro_and_after_the_parameters():
    src = seed("heat2d").replace(
        "using namespace metal;", "using namespace metal;\n#define TG (8 * 8)"
    )
    src = replace_once(
        src,
        "uint2 gid [[thread_position_in_grid]])",
        "uint2 gid [[thread_position_in_grid]]) [[max_total_threads_per_threadgroup(TG)]]",
    )
    cand = parse(converted("heat2d", src).text, dialect="metal")
    (k,) = cand.kernels
    assert (k.grid, k.threadgroup) == (
        "(ceil_div(NX, 16) * 16, ceil_div(NY, 4) * 4, 1)",
        "(16, 4, 1)",
    )


HEAT_TILED = """#include <metal_stdlib>
using namespace metal;

#define TILE 16
#define IDX(i, j) ((j) * NX + (i))

// Tiled: each threadgroup loads its tile and a halo into threadgroup memory.
[[max_total_threads_per_threadgroup(256)]]
kernel void heat_step(device const float* __restrict u_in [[ buffer(0) ]],
                      device float* __restrict u_out      [[ buffer(1) ]],
                      constant uint& NX                   [[ buffer(2) ]],
                      constant uint& NY                   [[ buffer(3) ]],
                      constant float& alpha               [[ buffer(4) ]],
                      uint2 gid  [[ thread_position_in_grid ]],
                      uint2 lid  [[ thread_position_in_threadgroup ]],
                      uint2 tgsz [[ threads_per_threadgroup ]])
{
    threadgroup float tile[TILE + 2][TILE + 2];
    const uint i = gid.x, j = gid.y;
    const uint li = lid.x + 1, lj = lid.y + 1;
    const bool inside = i < NX && j < NY;
    tile[lj][li] = inside ? u_in[IDX(i, j)] : 0.0f;
    if (lid.x == 0) tile[lj][0] = (inside && i > 0) ? u_in[IDX(i - 1, j)] : 0.0f;
    if (lid.x == tgsz.x - 1) tile[lj][li + 1] = (i + 1 < NX && j < NY) ? u_in[IDX(i + 1, j)] : 0.0f;
    if (lid.y == 0) tile[0][li] = (inside && j > 0) ? u_in[IDX(i, j - 1)] : 0.0f;
    if (lid.y == tgsz.y - 1) tile[lj + 1][li] = (i < NX && j + 1 < NY) ? u_in[IDX(i, j + 1)] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (!inside) return;
    float c = tile[lj][li];
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) { u_out[IDX(i, j)] = c; return; }
    u_out[IDX(i, j)] = c + alpha * (tile[lj][li - 1] + tile[lj][li + 1] + tile[lj - 1][li]
                                    + tile[lj + 1][li] - 4.0f * c);
}
"""


def test_a_tiled_kernel_with_several_thread_attributes_is_correct():
    c = converted("heat2d", HEAT_TILED)
    body = body_of(c.text, "heat_step")
    assert "uint2 lid = uint2(thread_position_in_threadgroup.xy);" in body
    assert "uint2 tgsz = uint2(threads_per_threadgroup.xy);" in body
    assert smoke_eval("heat2d", c.text).correct


def test_what_mlxsci_refuses_is_converted_with_a_note():
    """mlxsci's source policy refusing a candidate is mlxsci's verdict on
    it (a compile error), not a failure to convert it."""
    src = seed("saxpy").replace(
        "using namespace metal;", 'using namespace metal;\n#include "helpers.h"'
    )
    c = convert_source("saxpy", src)
    assert c.text is not None
    assert any(n.startswith("mlxsci's source policy refuses the candidate") for n in c.notes)
    result = smoke_eval("saxpy", c.text)
    assert not result.correct and result.fail_reason.startswith("compile error")


# ------------------------------------------------------ not converted


def _ising(old, new):
    return replace_once(seed("ising"), old, new)


NOT_CONVERTED = {
    "missing kernel": (
        "lj",
        seed("lj").replace("kernel void lj_clear_cells", "kernel void lj_clear_all"),
        "lacks kernel(s) lj_clear_cells",
    ),
    "buffer index outside the table": (
        "heat2d",
        replace_once(
            seed("heat2d"),
            "constant float&     alpha [[buffer(4)]],",
            "constant float& alpha [[buffer(4)]], constant uint& extra [[buffer(5)]],",
        ),
        "buffer(5) ('extra') is not in Metal-Sci's interface",
    ),
    "buffer index twice": (
        "heat2d",
        replace_once(seed("heat2d"), "[[buffer(3)]]", "[[buffer(2)]]"),
        "buffer(2) is declared twice",
    ),
    "in-place buffer as a reference": (
        "saxpy",
        replace_once(seed("saxpy"), "device float*       y", "device float& y"),
        "not a pointer",
    ),
    "in-place buffer copied into a pointer": (
        "ising",
        _ising(
            "    int s = spins[site];",
            "    device char* row;\n    row = spins;\n    int s = row[site];",
        ),
        "in-place buffer 'spins' is used other than by a subscript",
    ),
    "address of an in-place element": (
        "ising",
        _ising("spins[site] = char(-s);", "*(&spins[site]) = char(-s);"),
        "address of an element of in-place buffer 'spins'",
    ),
    "in-place buffer written through a cast": (
        "ising",
        _ising("spins[site] = char(-s);", "((device char*)spins)[site] = char(-s);"),
        "used other than by a subscript",
    ),
    "part of an in-place element written": (
        "saxpy",
        replace_once(seed("saxpy"), "y[i] = a * x[i] + y[i];", "y[i].x = 1.0f;"),
        "a write to part of an element",
    ),
    "in-place index with a side effect": (
        "saxpy",
        replace_once(seed("saxpy"), "y[i] = a * x[i] + y[i];", "uint k = i; y[k++] += a * x[i];"),
        "has a side effect",
    ),
    "in-place buffer in a macro": (
        "saxpy",
        replace_once(seed("saxpy"), "kernel void", "#define Y(k) y[k]\nkernel void"),
        "macro of the header names in-place buffer 'y'",
    ),
    "garbage": ("saxpy", "this is not { metal at all )))", "not a Metal source"),
    "empty": ("saxpy", "", "empty"),
    "only whitespace": ("saxpy", "  \n\t\n", "empty"),
    "binary": ("saxpy", "\x00\x01\xff", "NUL"),
    "a CUDA file": (
        "saxpy",
        "__global__ void saxpy(const float* x, float* y, float a, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = a * x[i] + y[i];\n}\n",
        "defines no kernel function",
    ),
    "template kernel": (
        "saxpy",
        seed("saxpy").replace(
            "kernel void saxpy(device const float*",
            "template <typename T>\nkernel void saxpy(device const T*",
        ),
        "template kernel",
    ),
    "explicit instantiation": (
        "saxpy",
        seed("saxpy")
        + 'template [[host_name("saxpy_f")]] kernel void saxpy<float>(device const float*);\n',
        "template",
    ),
    "kernel under #ifdef": (
        "saxpy",
        "#ifdef FAST\n" + seed("saxpy") + "#endif\n",
        "preprocessor conditional",
    ),
    "kernel defined twice": (
        "saxpy",
        seed("saxpy") + seed("saxpy").split("using namespace metal;")[1],
        "defined twice",
    ),
    "threadgroup memory parameter": (
        "saxpy",
        replace_once(
            seed("saxpy"),
            "uint i [[thread_position_in_grid]]",
            "threadgroup float* t [[threadgroup(0)]], uint i [[thread_position_in_grid]]",
        ),
        "[[threadgroup(0)]] has no mlxsci equivalent",
    ),
    "unknown kernel attribute": (
        "saxpy",
        replace_once(seed("saxpy"), "kernel void", "[[early_fragment_tests]] kernel void"),
        "[[early_fragment_tests]] has no mlxsci equivalent",
    ),
    "thread count the converter cannot evaluate": (
        "saxpy",
        replace_once(
            seed("saxpy"), "kernel void", "[[max_total_threads_per_threadgroup(WIDTH)]] kernel void"
        ),
        "cannot evaluate the thread count `WIDTH`",
    ),
    "threadgroup narrower than the host's": (
        "adi3d",
        replace_once(
            seed("adi3d"),
            "kernel void adi_y",
            "[[max_total_threads_per_threadgroup(16)]] kernel void adi_y",
        ),
        "needs threadgroups of 32 threads",
    ),
    "unterminated comment": ("saxpy", seed("saxpy") + "/* and then", "unterminated /* comment"),
    "unknown task": ("no_such_task", seed("saxpy"), "unknown task"),
}


@pytest.mark.parametrize("case", NOT_CONVERTED)
def test_not_converted_with_a_reason(case):
    task, source, needle = NOT_CONVERTED[case]
    refused(task, source, needle)


@pytest.mark.parametrize("source", [None, b"kernel void saxpy() {}", 42, "x" * (3 << 20)])
def test_not_text_or_too_long(source):
    c = convert_source("saxpy", source)
    assert c.text is None and c.reason


def test_never_raises_on_cut_or_shuffled_sources():
    """Every prefix (in steps) of every seed, and seeds with characters
    swapped at random: a Conversion each time, and a text only when it
    parses."""
    rng = random.Random(7)
    for task in TASKS:
        src = seed(task)
        variants = [src[:n] for n in range(0, len(src), max(1, len(src) // 25))]
        for _ in range(10):
            chars = list(src)
            for _ in range(5):
                a, b = rng.randrange(len(chars)), rng.randrange(len(chars))
                chars[a], chars[b] = chars[b], chars[a]
            variants.append("".join(chars))
        for v in variants:
            c = convert_source(task, v)
            assert isinstance(c, Conversion)
            assert (c.text is None) != (c.reason is None)
            assert not (c.reason or "").startswith("internal error"), c.reason
            if c.text is not None:
                parse(c.text, dialect="metal")


def test_a_task_object_works_like_its_name():
    t = load_task("heat2d")
    assert convert_source(t, seed("heat2d")) == convert_source("heat2d", seed("heat2d"))
