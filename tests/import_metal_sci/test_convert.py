"""convert_source: a Metal-Sci source (a full Metal file) as an mlxsci candidate.

The fixtures in metal_sci_sources/ are Metal-Sci-style seeds of the 12 tasks,
written from the spec's interfaces (in place where Metal-Sci is in place).
Each converts and is correct on the simulator at its smoke sizes; renamed, aliased, in-place and
collision cases convert and evaluate correct; sources that cannot be
converted give a one-line reason, never an exception."""

from __future__ import annotations

import random
import re
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
    assert validate(cand, t.kernel_names, names, {k.name: k.in_place for k in t.kernels}) == []
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
                  uint i [[thread_position_in_grid]])
    __attribute__((max_total_threads_per_threadgroup(64)))
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
        (
            "kernel void f(device float* x [[buffer(0)]]) [[max_total_threads_per_threadgroup(64)]] {}",
            "kernel 'f': [[max_total_threads_per_threadgroup(64)]] after the parameter list, where "
            'Metal\'s compiler refuses it ("cannot be applied to types")',
        ),
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
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
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
    assert "y_out[i] = a * x[i] + y_out[i];" in saxpy.text
    assert in_place_note("saxpy", "y") in saxpy.notes
    assert not any("split" in n or "carry" in n for n in saxpy.notes), saxpy.notes


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


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
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
    c = converted_in_place("hmc", hmc)
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


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
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

# task -> (its kernel that reads and writes one buffer, that buffer)
IN_PLACE = {
    "saxpy": ("saxpy", "y"),
    "ising": ("ising_step", "spins"),
    "hmc": ("hmc_step", "accept_cnt"),
}


def in_place_note(kernel: str, x: str) -> str:
    return (
        f"kernel {kernel}: in-place buffer '{x}' is mlxsci's output '{x}_out', which starts "
        f"as a copy of '{x}' (`//! inplace {x}_out = {x}`: the copy is not timed)"
    )


def converted_in_place(task: str, source: str) -> Conversion:
    """The conversion of a source whose kernel reads and writes its in-place
    buffer X: X is mlxsci's output X_out, which the `//! inplace X_out = X`
    line right after the kernel's `//! threadgroup` starts as a copy of X; the
    body names X_out only (nothing reads the input X any more), and a note
    says so."""
    kernel, x = IN_PLACE[task]
    c = converted(task, source)
    k = next(k for k in parse(c.text, dialect="metal").kernels if k.name == kernel)
    assert k.in_place == ((f"{x}_out", x),)
    assert c.text.count("//! inplace") == 1
    assert f"//! threadgroup = {k.threadgroup}\n//! inplace {x}_out = {x}\n" in c.text
    assert in_place_note(kernel, x) in c.notes, c.notes
    assert not re.search(rf"\b{x}\b", k.body), k.body
    assert f"ms_{x}_in" not in c.text and f"ms_{x}_out" not in c.text
    return c


def correct_in_place(task: str, source: str) -> Conversion:
    """converted_in_place, and the candidate is correct on the simulator."""
    c = converted_in_place(task, source)
    result = smoke_eval(task, c.text, dialect="metal")
    assert result.correct, (result.fail_reason, c.text)
    return c


@pytest.mark.parametrize("task", sorted(IN_PLACE))
def test_seed_in_place_buffer_is_the_output_started_as_the_input(task):
    c = converted_in_place(task, seed(task))
    body = body_of(c.text, IN_PLACE[task][0])
    expected = {
        "saxpy": "y_out[i] = a * x[i] + y_out[i];",
        # char is not MLX's int8_t: a writable alias of the output
        "ising": "device char* ms_spins = (device char*)spins_out;",
        "hmc": "accept_cnt_out[chain_idx] += 1;",
    }[task]
    assert expected in body
    if task == "ising":
        assert "ms_spins[site] = char(-s);" in body
        assert "int s = ms_spins[site];" in body


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_kernel_that_writes_some_elements_keeps_the_others():
    """The ising seed's other-colour threads return before any write and
    its active ones store only a flipped spin: correct, since the output
    starts as the input. Without the `//! inplace` line the output is
    mlxsci's fresh (poisoned) array and the same body is wrong."""
    c = correct_in_place("ising", seed("ising"))
    without = replace_once(c.text, "//! inplace spins_out = spins\n", "")
    assert parse(without, dialect="metal").kernels[0].in_place == ()
    assert not smoke_eval("ising", without, dialect="metal").correct


SAXPY_FLOAT4 = """#include <metal_stdlib>
using namespace metal;
inline void store4(device float4* p, uint k, float4 v) { p[k] = v; }
inline uint pick(uint n) { return n - n; }
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

_SAXPY_LINE = "y[i] = a * x[i] + y[i];"
_Y4_LINE = "y4[i] = a * x4[i] + y4[i];"
_Y4_DECL = "device float4* y4 = (device float4*)y;"
_ISING_READ = (
    "    int s = spins[site];\n"
    "    int h = spins[j * NX + il] + spins[j * NX + ir] + spins[jd * NX + i] + spins[ju * NX + i];"
)
_ISING_FLIP = "spins[site] = char(-s);"
_HMC_COUNT = "accept_cnt[chain_idx] += 1;"

# The forms the converter refused while it split an in-place buffer into
# reads of the input and writes of the output, each written to give the
# right answer: (task, base source, [(old, new), ...], what the converted
# body holds).
IN_PLACE_FORMS = {
    "saxpy: a pointer to the element, compound through it": (
        "saxpy",
        "seed",
        [(_SAXPY_LINE, "device float* p = y + i; *p += a * x[i];")],
        "device float* p = y_out + i; *p += a * x[i];",
    ),
    "saxpy: a pointer walked in a loop": (
        "saxpy",
        "seed",
        [
            (
                _SAXPY_LINE,
                "for (device float* p = y + i; p < y + N; p += N) { *p = fma(a, x[p - y], *p); }",
            )
        ],
        "for (device float* p = y_out + i; p < y_out + N; p += N) "
        "{ *p = fma(a, x[p - y_out], *p); }",
    ),
    "saxpy: a pointer reassigned and incremented": (
        "saxpy",
        "seed",
        [
            (
                _SAXPY_LINE,
                "device float* p = y; device const float* q = x;\n"
                "    p += i - i % 4; q = q + (i - i % 4);\n"
                "    for (uint k = 0; k < i % 4; ++k) { ++p; q++; }\n"
                "    p = p + 1; p--; *p += a * *q;",
            )
        ],
        "device float* p = y_out; device const float* q = x;",
    ),
    "saxpy: compound assignment": (
        "saxpy",
        "seed",
        [(_SAXPY_LINE, "y[i] += a * x[i];")],
        "y_out[i] += a * x[i];",
    ),
    "saxpy: an index with a side effect": (
        "saxpy",
        "seed",
        [(_SAXPY_LINE, "uint k = i; y[k++] += a * x[i]; (void)k;")],
        "y_out[k++] += a * x[i];",
    ),
    "saxpy: a writable reference to an element": (
        "saxpy",
        "seed",
        [(_SAXPY_LINE, "device float& e = y[i]; e += a * x[i];")],
        "device float& e = y_out[i]; e += a * x[i];",
    ),
    "saxpy: written through a cast, an element's address read": (
        "saxpy",
        "seed",
        [(_SAXPY_LINE, "((device float*)y)[i] = a * x[i] + *(&y[i]);")],
        "((device float*)y_out)[i] = a * x[i] + *(&y_out[i]);",
    ),
    "saxpy: the buffer declared as a reference, used as the array it starts": (
        "saxpy",
        "seed",
        [
            ("device float*       y", "device float& y"),
            (_SAXPY_LINE, "(&y)[i] = a * x[i] + (&y)[i];"),
        ],
        "device float& ms_y = *(device float*)y_out;",
    ),
    "saxpy: a float4 view": (
        "saxpy",
        "float4",
        [],
        "device float4* y4 = (device float4*)y_out;",
    ),
    "saxpy: a view passed to a helper that writes": (
        "saxpy",
        "float4",
        [(_Y4_LINE, "store4(y4, i, a * x4[i] + y4[i]);")],
        "store4(y4, i, a * x4[i] + y4[i]);",
    ),
    "saxpy: a view reassigned and incremented": (
        "saxpy",
        "float4",
        [(_Y4_LINE, "y4 = y4 + 0; y4 += i; y4[0] = a * x4[i] + *y4;")],
        "y4 = y4 + 0; y4 += i; y4[0] = a * x4[i] + *y4;",
    ),
    "saxpy: a view copied, an element's address taken": (
        "saxpy",
        "float4",
        [(_Y4_LINE, "device float4* z4 = y4; device float4* e = &z4[i]; *e = a * x4[i] + e[0];")],
        "device float4* z4 = y4; device float4* e = &z4[i];",
    ),
    "saxpy: parts of an element written": (
        "saxpy",
        "float4",
        [
            (
                _Y4_LINE,
                "y4[i].xy = a * x4[i].xy + y4[i].xy; y4[i].z += a * x4[i].z; "
                "y4[i].w += a * x4[i].w;",
            )
        ],
        "y4[i].z += a * x4[i].z;",
    ),
    "saxpy: a view whose initializer names y twice and calls": (
        "saxpy",
        "float4",
        [(_Y4_DECL, "device float4* y4 = (device float4*)(N > 0 ? y + pick(N) : y);")],
        "device float4* y4 = (device float4*)(N > 0 ? y_out + pick(N) : y_out);",
    ),
    "saxpy: two declarators": (
        "saxpy",
        "float4",
        [
            (_Y4_DECL, "device float4 *y4 = (device float4*)y, *w4 = y4;"),
            (_Y4_LINE, "w4[i] = a * x4[i] + y4[i];"),
        ],
        "device float4 *y4 = (device float4*)y_out, *w4 = y4;",
    ),
    "ising: a kept row pointer, read and flipped": (
        "ising",
        "seed",
        [
            (
                _ISING_READ,
                "    device char* row = spins + j * NX;\n"
                "    auto up = spins + ju * NX;\n"
                "    device const char* down = &spins[jd * NX];\n"
                "    int s = row[i];\n"
                "    int h = row[il] + row[ir] + up[i] + down[i];",
            ),
            (_ISING_FLIP, "row[i] = char(-s);"),
        ],
        "device char* row = ms_spins + j * NX;",
    ),
    "ising: the buffer copied into a pointer": (
        "ising",
        "seed",
        [("    int s = spins[site];", "    device char* p;\n    p = spins;\n    int s = p[site];")],
        "p = ms_spins;",
    ),
    "ising: an element's address written through": (
        "ising",
        "seed",
        [(_ISING_FLIP, "*(&spins[site]) = char(-s);")],
        "*(&ms_spins[site]) = char(-s);",
    ),
    "ising: written through a cast": (
        "ising",
        "seed",
        [(_ISING_FLIP, "((device char*)spins)[site] = char(-s);")],
        "((device char*)ms_spins)[site] = char(-s);",
    ),
    "hmc: a writable reference to the counter": (
        "hmc",
        "seed",
        [
            (
                "    if (accept) {\n        " + _HMC_COUNT + "\n    }",
                "    device uint& c = accept_cnt[chain_idx];\n    c += accept;",
            )
        ],
        "device uint& c = accept_cnt_out[chain_idx];\n    c += accept;",
    ),
    "hmc: an increment whose value is used": (
        "hmc",
        "seed",
        [(_HMC_COUNT, "uint was = accept_cnt[chain_idx]++; (void)was;")],
        "uint was = accept_cnt_out[chain_idx]++;",
    ),
    "hmc: an atomic through a cast": (
        "hmc",
        "seed",
        [
            (
                _HMC_COUNT,
                "atomic_fetch_add_explicit((device atomic_uint*)&accept_cnt[chain_idx], 1u, "
                "memory_order_relaxed);",
            )
        ],
        "(device atomic_uint*)&accept_cnt_out[chain_idx], 1u,",
    ),
}


@pytest.mark.parametrize("case", IN_PLACE_FORMS)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_every_access_form_of_an_in_place_buffer_converts_and_is_correct(case):
    """Each form is kept as written, only the buffer renamed (or its alias
    named), and is correct on the simulator: nothing is split into read and
    write views, and nothing is copied per thread."""
    task, base, edits, holds = IN_PLACE_FORMS[case]
    src = SAXPY_FLOAT4 if base == "float4" else seed(task)
    for old, new in edits:
        src = replace_once(src, old, new)
    c = correct_in_place(task, src)
    assert holds in body_of(c.text, IN_PLACE[task][0])


@pytest.mark.parametrize(
    "statement",
    [
        "accept_cnt[chain_idx]++;",
        "++accept_cnt[chain_idx];",
        "accept_cnt[chain_idx] = accept_cnt[chain_idx] + 1u;",
    ],
)
def test_in_place_write_forms_are_kept_as_written(statement):
    """No rewrite into separate reads and writes: the statement, renamed."""
    src = replace_once(seed("hmc"), "accept_cnt[chain_idx] += 1;", statement)
    c = converted_in_place("hmc", src)
    assert statement.replace("accept_cnt", "accept_cnt_out") in body_of(c.text, "hmc_step")


def test_reads_through_a_pointer_to_const_read_the_copy():
    """A pointer to const into the buffer reads mlxsci's output, which holds
    the input's values until the kernel writes them."""
    src = replace_once(
        seed("ising"),
        "    int s = spins[site];",
        "    device const char* row = spins + j * NX;\n    int s = row[i];",
    )
    c = correct_in_place("ising", src)
    assert "device const char* row = ms_spins + j * NX;" in c.text
    cast = replace_once(
        seed("ising"), "int s = spins[site];", "int s = ((device const char*)spins)[site];"
    )
    assert "((device const char*)ms_spins)[site]" in converted_in_place("ising", cast).text


def _ising_with_helper(header: str, call: str = "nsum(spins, j * NX + il, j * NX + ir)") -> str:
    src = replace_once(seed("ising"), "kernel void ising_step", header + "\nkernel void ising_step")
    return replace_once(
        src,
        "int h = spins[j * NX + il] + spins[j * NX + ir] + spins[jd * NX + i] + spins[ju * NX + i];",
        f"int h = {call} + spins[jd * NX + i] + spins[ju * NX + i];",
    )


NSUM = """static inline int nsum(device char* s, uint a, uint b) {
    return int(s[a]) + int(s[b]);
}
"""


_NSUM_CALL = "nsum(spins, j * NX + il, j * NX + ir)"


@pytest.mark.parametrize(
    "header,call",
    [
        pytest.param(NSUM, _NSUM_CALL, id="takes device char*"),
        pytest.param(
            NSUM.replace("device char* s", "device char* const s"),
            "nsum(spins + 0, j * NX + il, j * NX + ir)",
            id="takes device char* const, passed an offset",
        ),
        pytest.param(
            NSUM.replace("device char* s", "device const char* s"),
            _NSUM_CALL,
            id="takes device const char*",
        ),
        pytest.param(
            "namespace lat {\n" + NSUM + "}\nusing namespace lat;\n",
            _NSUM_CALL,
            id="declared in a namespace brought in by using",
        ),
        pytest.param(
            "#define nsum(s, a, b) (int(s[a]) + int(s[b]))\n",
            _NSUM_CALL,
            id="a function-like macro",
        ),
    ],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_an_in_place_buffer_passed_to_a_helper_that_reads(header, call):
    """The helper is handed mlxsci's output (its char alias) whatever it
    declares it may do with it: the neighbour sum reads it."""
    c = correct_in_place("ising", _ising_with_helper(header, call))
    assert call.replace("spins", "ms_spins") in body_of(c.text, "ising_step")


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_an_in_place_buffer_passed_to_a_helper_that_writes():
    """The flip happens in a helper of the header handed the whole buffer."""
    src = replace_once(
        seed("ising"),
        "kernel void ising_step",
        "static inline void flip(device char* s, uint k) { s[k] = char(-s[k]); }\n\n"
        "kernel void ising_step",
    )
    src = replace_once(src, _ISING_FLIP, "flip(spins, site);")
    c = correct_in_place("ising", src)
    assert "static inline void flip(device char* s, uint k) { s[k] = char(-s[k]); }" in c.text
    assert "flip(ms_spins, site);" in body_of(c.text, "ising_step")


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_macro_of_the_header_that_names_the_in_place_buffer():
    """The macro is renamed as the buffer is: to mlxsci's output (saxpy),
    to the body's writable alias of it (ising's char)."""
    src = replace_once(seed("saxpy"), "kernel void", "#define Y(k) y[k]\nkernel void")
    src = replace_once(src, _SAXPY_LINE, "Y(i) = a * x[i] + Y(i);")
    c = correct_in_place("saxpy", src)
    assert "#define Y(k) y_out[k]" in c.text
    assert "Y(i) = a * x[i] + Y(i);" in body_of(c.text, "saxpy")
    src = replace_once(seed("ising"), "kernel void", "#define SPIN(k) spins[k]\nkernel void")
    src = replace_once(src, "int s = spins[site];", "int s = SPIN(site);")
    src = replace_once(src, _ISING_FLIP, "SPIN(site) = char(-s);")
    c = correct_in_place("ising", src)
    assert "#define SPIN(k) ms_spins[k]" in c.text
    assert "SPIN(site) = char(-s);" in body_of(c.text, "ising_step")


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
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
        "max_total_threads_per_threadgroup(128) dropped" in n
        and "grid (128, 1, 1), threadgroup (128, 1, 1)" in n
        for n in c.notes
    )


def test_attribute_through_a_macro_and_after_the_parameters():
    """GNU's spelling after the parameter list (Metal's compiler takes it
    there), its count a macro of the header."""
    src = seed("heat2d").replace(
        "using namespace metal;", "using namespace metal;\n#define TG (8 * 8)"
    )
    src = replace_once(
        src,
        "uint2 gid [[thread_position_in_grid]])",
        "uint2 gid [[thread_position_in_grid]])\n"
        "    __attribute__((max_total_threads_per_threadgroup(TG)))",
    )
    c = converted("heat2d", src)
    cand = parse(c.text, dialect="metal")
    (k,) = cand.kernels
    assert (k.grid, k.threadgroup) == (
        "(ceil_div(NX, 16) * 16, ceil_div(NY, 4) * 4, 1)",
        "(16, 4, 1)",
    )
    assert "__attribute__" not in c.text and "max_total_threads" not in c.text


# Where a kernel's `max_total_threads_per_threadgroup` may stand, as (old, new)
# edits of the saxpy seed.
_SAXPY_PARAMS_END = "uint i [[thread_position_in_grid]])"
ATTRIBUTE_PLACES = {
    "[[...]] before kernel": (
        "kernel void saxpy",
        "[[max_total_threads_per_threadgroup(64)]] kernel void saxpy",
    ),
    "[[...]] between kernel and void": (
        "kernel void saxpy",
        "kernel [[max_total_threads_per_threadgroup(64)]] void saxpy",
    ),
    "[[...]] between void and the name": (
        "kernel void saxpy",
        "kernel void [[max_total_threads_per_threadgroup(64)]] saxpy",
    ),
    "__attribute__ between void and the name": (
        "kernel void saxpy",
        "kernel void __attribute__((max_total_threads_per_threadgroup(64))) saxpy",
    ),
    "__attribute__ after the parameter list": (
        _SAXPY_PARAMS_END,
        _SAXPY_PARAMS_END + "\n    __attribute__((max_total_threads_per_threadgroup(64)))",
    ),
}


def _launch_lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.startswith(("//! grid", "//! threadgroup"))]


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_every_attribute_place_shrinks_the_launch_alike():
    """GNU's `__attribute__((...))` after the parameter list shrinks the
    launch exactly as `[[...]]` before `kernel` does, and so does every other
    place Metal's compiler takes it."""
    before = converted(
        "saxpy", replace_once(seed("saxpy"), *ATTRIBUTE_PLACES["[[...]] before kernel"])
    )
    assert _launch_lines(before.text) == [
        "//! grid = (ceil_div(N, 64) * 64, 1, 1)",
        "//! threadgroup = (64, 1, 1)",
    ]
    for place, (old, new) in ATTRIBUTE_PLACES.items():
        c = converted("saxpy", replace_once(seed("saxpy"), old, new))
        assert _launch_lines(c.text) == _launch_lines(before.text), place
        assert c.notes == before.notes, place
        assert "max_total_threads" not in c.text and "__attribute__" not in c.text, place
        assert "//! threadgroup = (64, 1, 1)\n//! inplace y_out = y\n" in c.text, place
    assert any(
        "max_total_threads_per_threadgroup(64) dropped" in n
        and "grid (ceil_div(N, 64) * 64, 1, 1), threadgroup (64, 1, 1)" in n
        for n in before.notes
    ), before.notes
    gnu = replace_once(seed("saxpy"), *ATTRIBUTE_PLACES["__attribute__ after the parameter list"])
    assert smoke_eval("saxpy", converted("saxpy", gnu).text).correct


def test_a_bracket_attribute_after_the_parameter_list_is_refused():
    """Metal's compiler refuses `[[...]]` there (every such kernel of the
    published corpus was a compile error): so does the converter, with the
    reason, whatever the attribute's count."""
    for count in ("64", "256"):
        src = replace_once(
            seed("saxpy"),
            _SAXPY_PARAMS_END,
            _SAXPY_PARAMS_END + f" [[max_total_threads_per_threadgroup({count})]]",
        )
        refused(
            "saxpy",
            src,
            "not a Metal source mlxsci can read",
            f"kernel 'saxpy': [[max_total_threads_per_threadgroup({count})]] after the "
            'parameter list, where Metal\'s compiler refuses it ("cannot be applied to types")',
        )
        with pytest.raises(MetalSourceError, match="after the parameter list"):
            parse_metal_source(src)


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


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
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


# ------------------------------------------------ #undef lines that end it


def _saxpy_with_macros() -> str:
    """The saxpy seed computing through two macros of its header."""
    src = replace_once(
        seed("saxpy"),
        "using namespace metal;",
        "using namespace metal;\n#define AXPY(s, u, v) fma(s, u, v)\n#define ZERO 0.0f",
    )
    return replace_once(src, "y[i] = a * x[i] + y[i];", "y[i] = AXPY(a, x[i], y[i]) + ZERO;")


def test_undef_lines_that_end_the_source_are_dropped():
    """After the kernel nothing reads the macros: the #undef lines (with
    blank lines and comments between them) are dropped with a note, and the
    kernel compiles to what it did."""
    src = _saxpy_with_macros() + "\n#undef AXPY\n\n// done with the helpers\n  #  undef ZERO  \n"
    c = converted_in_place("saxpy", src)
    notes = [n for n in c.notes if n.startswith("the #undef lines that end the source (")]
    assert len(notes) == 1 and notes[0].startswith(
        "the #undef lines that end the source (AXPY, ZERO)"
    ), c.notes
    assert "#undef" not in c.text and "undef" not in c.text
    assert "#define AXPY(s, u, v) fma(s, u, v)" in c.text
    assert "y_out[i] = AXPY(a, x[i], y_out[i]) + ZERO;" in body_of(c.text, "saxpy")
    assert smoke_eval("saxpy", c.text).correct
    # no #undef at the end: no such note
    plain = converted("saxpy", _saxpy_with_macros())
    assert not any("#undef" in n for n in plain.notes)


@pytest.mark.parametrize(
    "tail",
    [
        "\n#undef AXPY\ninline float unused(float v) { return v; }\n",
        "\n#undef AXPY\n#define AXPY(s, u, v) (s)\n",
        "\n#undef AXPY\n/* a block comment */\n",
    ],
)
def test_undef_lines_followed_by_more_are_refused(tail):
    """Only #undef lines, blank lines and `//` comments may end the source:
    with anything else after them the #undef is header text after the
    kernel, as before."""
    reason = refused(
        "saxpy",
        _saxpy_with_macros() + tail,
        "header text after kernel 'saxpy' declares AXPY, which the kernel uses",
    )
    assert "#undef lines that end the source" not in reason


# ------------------------------------------------------ not converted


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


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
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
