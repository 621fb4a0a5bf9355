"""Every threadgroup (Metal) / __shared__ (CUDA) array is guarded, whatever
sizes it (issue 27): a bound that is an expression (`*`, `<<`, `&`, `==`,
`?:`, sizeof, casts), a template parameter or a macro, and a declaration
made by a macro (`#define SHARED(n, R, C) __shared__ float n[R * C];`, an
alias `#define TG threadgroup`, a body continued over lines). An overflow
of each is a fault naming the array, the index, the bound and the thread;
its twin without the overflow passes with the right output. Before this
change these arrays were plain statics: an overflow went on silently into
the memory next to them (a wrong result or a fault in a neighbouring
array), or killed the worker ("fatal signal 11").

The rewrite of these declarations (rewrite.py) is also checked on its own:
its output, the lines it keeps, and its time on long pathological input."""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.backends.sim.rewrite import rewrite_cuda, rewrite_metal
from mlxsci.kernel.spec import KernelFault, KernelSpec

N, TG = 64, 32

needs_sim = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")


@pytest.fixture(scope="module", params=["metal", "cuda"])
def backend(request):
    return SimBackend(dialect=request.param, launch_timeout_s=20.0)


# Per dialect: the group-shared qualifier, the thread's index in its group
# and in the grid, and a barrier.
WORDS = {
    "metal": dict(
        q="threadgroup",
        l="uint l = thread_position_in_threadgroup.x;",
        i="uint i = thread_position_in_grid.x;",
        sync="threadgroup_barrier(mem_flags::mem_threadgroup);",
        group="threadgroup",
        array="threadgroup array",
    ),
    "cuda": dict(
        q="__shared__",
        l="int l = threadIdx.x;",
        i="int i = blockIdx.x * blockDim.x + threadIdx.x;",
        sync="__syncthreads();",
        group="block",
        array="__shared__ array",
    ),
}

# Each form: (header, the declaration of `t`, template arguments). Every
# array holds 32 floats, the threadgroup's size: thread l writes slot
# l + OFF, so OFF=1 makes thread 31 write index 32, one past the end.
FORMS = {
    "product": ("", "Q float t[(H + 2) * (W + 2)];", None),
    "shift_and": ("", "Q float t[(64 >> 1) & 0xFF];", None),
    "ternary_eq": ("", "Q float t[sizeof(float) == 4 ? 32 : 16];", None),
    "sizeof_cast": ("", "Q float t[(int)(sizeof(int) * 8)];", None),
    "two_dims": ("", "Q float t[H * 2][W + 2];", None),
    "template": ("", "Q float t[NT * 2];", [("NT", 16)]),
    "macro_bound": ("#define TILE 4\n#define ROWS (TILE * 2)\n", "Q float t[ROWS * TILE];", None),
    "macro_decl": (
        "#define DECL_TILE Q float t[TILE * TILE * 2];\n#define TILE 4\n",
        "DECL_TILE",
        None,
    ),
    "macro_params": ("#define SHARED(n, R, C) Q float n[R * C];\n", "SHARED(t, 4, 8)", None),
    # a body continued over lines, the declaration last and without its `;`
    "macro_continued": (
        "#define SHARED(n, R, C) \\\n    int pad_##n = 0; \\\n    Q float n[R * \\\n C]\n",
        "SHARED(t, 4, 8); (void)pad_t;",
        None,
    ),
    "alias": ("#define TGM Q\n", "TGM float t[H * 16];", None),
    "alias_typed": ("#define TGF Q float\n", "TGF t[H * 16];", None),
    "alias_chain": ("#define TGM Q\n#define TGM2 TGM\n", "TGM2 float t[H * 16];", None),
    # a pasted name: the array is `s_t`
    "macro_pasted": ("#define SHARED(n, R, C) Q float n##_t[R * C];\n", "SHARED(s, 4, 8)", None),
    "trailing_attribute": ("", "Q float t[(H + 2) * (W + 2)] __attribute__((aligned(16)));", None),
}
NAMES = {"macro_pasted": "s_t"}  # the array's name where it is not `t`
# constants of the bounds: (H + 2) * (W + 2) == 32
CONSTANTS = "const int H = 2, W = 6;"


def kernel_source(dialect: str, form: str, offset: int) -> tuple[str, str]:
    """(header, body) of the kernel of `form`: each thread writes its slot
    (offset by `offset`), then, after a barrier, the next thread's."""
    w = WORDS[dialect]
    header, decl, _ = FORMS[form]
    # the neighbour's slot is read, so an array private to each thread fails
    if form == "two_dims":  # 4 rows of 8: thread 31 writes t[3][8], flat index 32
        slot, other = f"t[l / 8][l % 8 + {offset}]", "t[(l + 1) % 32 / 8][(l + 1) % 8]"
    else:
        slot, other = f"t[l + {offset}]", "t[(l + 1) % 32]"
    t = NAMES.get(form, "t")
    slot, other = t + slot[1:], t + other[1:]
    body = "\n".join(
        [
            CONSTANTS,
            decl.replace("Q", w["q"]),
            w["l"],
            w["i"],
            f"{slot} = float(i) + 1.0f;",
            w["sync"],
            f"out[i] = {other} + float(H + W - 8);",
        ]
    )
    return header.replace("Q", w["q"]), body


def launch(backend, form: str, offset: int):
    """The fault of the kernel, or its output."""
    header, body = kernel_source(backend.dialect, form, offset)
    spec = KernelSpec(
        f"tg_{form}_{offset}", (), ("out",), body, header=header, dialect=backend.dialect
    )
    k = backend.kernel(spec)
    try:
        (out,) = k(
            inputs=[],
            output_shapes=[(N,)],
            output_dtypes=[mx.float32],
            grid=(N, 1, 1),
            threadgroup=(TG, 1, 1),
            template=FORMS[form][2],
            init_value=0,
        )
    except KernelFault as e:
        return e
    return np.asarray(out)


@pytest.mark.slow
@needs_sim
@pytest.mark.parametrize("form", sorted(FORMS))
def test_overflow_of_every_declaration_form_is_named(backend, form):
    e = launch(backend, form, 1)
    assert isinstance(e, KernelFault), f"no fault: {e!r}"
    w = WORDS[backend.dialect]
    assert e.kind == "out_of_bounds", e.message
    t = NAMES.get(form, "t")
    assert f"write of {w['array']} '{t}' (float[" in e.message, e.message
    assert "at index 32 (bound 32)" in e.message, e.message
    assert f"by thread (31, 0, 0) of {w['group']} (0, 0, 0)" in e.message, e.message
    assert (e.details["buffer"], e.details["element"]) == (t, 32)
    assert e.details["thread"] == (31, 0, 0)


@pytest.mark.slow
@needs_sim
@pytest.mark.parametrize("form", sorted(FORMS))
def test_twin_within_bounds_passes(backend, form):
    out = launch(backend, form, 0)
    assert isinstance(out, np.ndarray), out
    i = np.arange(N)
    want = i - i % TG + (i + 1) % TG + 1  # thread i + 1's value, within i's group
    np.testing.assert_array_equal(out, want.astype(np.float32))


@pytest.mark.slow
@needs_sim
def test_a_macro_declared_array_shows_the_arguments(backend):
    e = launch(backend, "macro_params", 1)
    assert isinstance(e, KernelFault)
    assert "'t' (float[4 * 8]) at index 32 (bound 32)" in e.message, e.message


@pytest.mark.slow
@needs_sim
@pytest.mark.parametrize("offset", [40, 100_000, 10_000_000])
def test_far_overflow_of_an_expression_sized_array_is_named(backend, offset):
    """Before issue 27 an overflow of 40 killed the process with SIGSEGV and
    no message; one of 10 million was a stray pointer near the output."""
    e = launch(backend, "product", offset)
    assert isinstance(e, KernelFault) and e.kind == "out_of_bounds", e
    assert f"'t' (float[(H + 2) * (W + 2)]) at index {offset} (bound 32) by thread (0, 0, 0)" in (
        e.message
    )


# ------------------------------------------------------------------ the rewrite
METAL_REWRITES = {
    "threadgroup float t[(A + 2) * (B + 2)];": (
        'typedef float __sim_tgt_t[(A + 2) * (B + 2)]; __SIM_TG_BIND(t, "float[(A + 2) * (B + 2)]");'
    ),
    "threadgroup uint a[N << 1 & M], b[X == 2 ? 3 : 4];": (
        'typedef uint __sim_tgt_a[N << 1 & M]; __SIM_TG_BIND(a, "uint[N << 1 & M]"); '
        'typedef uint __sim_tgt_b[X == 2 ? 3 : 4]; __SIM_TG_BIND(b, "uint[X == 2 ? 3 : 4]");'
    ),
    # whitespace kept where it separates words
    "threadgroup float t[sizeof  x * (unsigned  int)N];": (
        "typedef float __sim_tgt_t[sizeof x * (unsigned int)N]; "
        '__SIM_TG_BIND(t, "float[sizeof x * (unsigned int)N]");'
    ),
    "threadgroup float t[idx[0]];": 'typedef float __sim_tgt_t[idx[0]]; __SIM_TG_BIND(t, "float[idx[0]]");',
    # a type with a product in its template arguments is not a pointer
    "threadgroup array<float, A * B> s;": (
        'typedef array<float, A * B> __sim_tgt_s; __SIM_TG_BIND(s, "array<float, A * B>");'
    ),
    # a literal in a bound is copied as written (the view blanks literals)
    "threadgroup float t['A'];": "typedef float __sim_tgt_t['A']; __SIM_TG_BIND(t, \"float['A']\");",
    # pointers, references and parameters keep the keyword (defined away)
    "threadgroup float* p = t;": "threadgroup float* p = t;",
    "threadgroup float& r = t[0];": "threadgroup float& r = t[0];",
    "void f(threadgroup float* t, threadgroup float (&r)[4 * N]);": (
        "void f(threadgroup float* t, threadgroup float (&r)[4 * N]);"
    ),
    # an initialiser (not legal Metal): a plain static, as before
    "threadgroup float z[2 * N] = {0};": "__SIM_THREADGROUP float z[2 * N] = {0};",
    # a macro body: __SIM_TGT pastes the name after a parameter is substituted
    "#define DECL threadgroup float t[TILE * TILE];": (
        '#define DECL typedef float __SIM_TGT(t)[TILE * TILE]; __SIM_TG_BIND(t, "float[TILE * TILE]");'
    ),
    "#define S(n, N) threadgroup float n[N * N];": (
        '#define S(n, N) typedef float __SIM_TGT(n)[N * N]; __SIM_TG_BIND(n, "float[" #N " * " #N "]");'
    ),
    # a declaration ending the body without its `;`, over spliced lines
    "#define S(n) \\\n  threadgroup float n[2 * \\\n  N]\nS(t);": (
        "#define S(n) \\\n"
        '  typedef float __SIM_TGT(n)[2 * N]; __SIM_TG_BIND(n, "float[2 * N]") \\\n\nS(t);'
    ),
    # an alias: its uses are declarations, its definition and pointers untouched
    "#define TG threadgroup\n{ TG float t[2 * N]; TG float* p = t; }": (
        "#define TG threadgroup\n"
        '{ typedef float __sim_tgt_t[2 * N]; __SIM_TG_BIND(t, "float[2 * N]"); TG float* p = t; }'
    ),
    # a pasted name: pasted before __SIM_TGT and __SIM_TG_BIND see it
    "#define S(n) threadgroup float n##_t[4 * N];": (
        '#define S(n) typedef float __SIM_TGT(n##_t)[4 * N]; __SIM_TG_BIND(n##_t, "float[4 * N]");'
    ),
    # an alias holding a type, and an alias of an alias
    "#define TGF threadgroup float\n{TGF t[2 * N]; TGF* p;}": (
        "#define TGF threadgroup float\n"
        '{typedef float __sim_tgt_t[2 * N]; __SIM_TG_BIND(t, "float[2 * N]"); TGF* p;}'
    ),
    "#define A threadgroup\n#define B A\n{B int c[N];}": (
        '#define A threadgroup\n#define B A\n{typedef int __sim_tgt_c[N]; __SIM_TG_BIND(c, "int[N]");}'
    ),
    # a trailing alignment goes on the typedef (the runtime maps to alignof)
    "threadgroup float t[4 * N] __attribute__((aligned(16)));": (
        "typedef float __sim_tgt_t[4 * N] __attribute__((aligned(16))); "
        '__SIM_TG_BIND(t, "float[4 * N]");'
    ),
    # still a plain static: an initialiser (refused by Metal) and a declarator
    # followed by something not an attribute
    "threadgroup float u[4] = {};": "__SIM_THREADGROUP float u[4] = {};",
    "#define TGF threadgroup float\n{TGF x = 0;}": (
        "#define TGF threadgroup float\n{__SIM_THREADGROUP float x = 0;}"
    ),
}

CUDA_REWRITES = {
    "__shared__ float t[(A + 2) * (B + 2)];": (
        'typedef float __sim_tgt_t[(A + 2) * (B + 2)]; __SIM_TG_BIND(t, "float[(A + 2) * (B + 2)]");'
    ),
    "__shared__ __align__(16) float t[4 * N];": (
        'typedef __align__(16) float __sim_tgt_t[4 * N]; __SIM_TG_BIND(t, "__align__(16) float[4 * N]");'
    ),
    "static __shared__ volatile int c[N * 2];": (
        'typedef volatile int __sim_tgt_c[N * 2]; __SIM_TG_BIND(c, "volatile int[N * 2]");'
    ),
    # a pointer that lives in shared memory: a plain static, as before
    "__shared__ float* p;": "__SIM_THREADGROUP float* p;",
    "#define SHARED(n, R, C) __shared__ float n[R * C];": (
        "#define SHARED(n, R, C) typedef float __SIM_TGT(n)[R * C]; "
        '__SIM_TG_BIND(n, "float[" #R " * " #C "]");'
    ),
    "#define SMEM __shared__\nSMEM float t[N * 2];": (
        '#define SMEM __shared__\ntypedef float __sim_tgt_t[N * 2]; __SIM_TG_BIND(t, "float[N * 2]");'
    ),
    "extern __shared__ float smem[];": "float* const smem = (decltype(smem))(__sim_dyn_smem);",
    "__shared__ float t[N] __align__(16);": (
        'typedef float __sim_tgt_t[N] __align__(16); __SIM_TG_BIND(t, "float[N]");'
    ),
    "#define S(n) __shared__ float n##_t[4 * N];": (
        '#define S(n) typedef float __SIM_TGT(n##_t)[4 * N]; __SIM_TG_BIND(n##_t, "float[4 * N]");'
    ),
}


@pytest.mark.parametrize("src", sorted(METAL_REWRITES))
def test_metal_rewrite_of_declarations(src):
    assert rewrite_metal(src) == METAL_REWRITES[src]


@pytest.mark.parametrize("src", sorted(CUDA_REWRITES))
def test_cuda_rewrite_of_declarations(src):
    # in a function, where the binding is re-read at every entry
    body = "void f() {\n%s\n}"
    assert rewrite_cuda(body % src) == body % CUDA_REWRITES[src]


def test_cuda_rewrite_of_a_file_scope_declaration():
    # at namespace scope the binding is a global set at load, in the section
    # the kernel-symbol check knows as the runtime's (sim_runtime.h)
    src = "namespace a::b {\n__shared__ float t[2 * N];\n}"
    assert rewrite_cuda(src) == (
        "namespace a::b {\ntypedef float __sim_tgt_t[2 * N]; "
        '__SIM_TG_BIND_GLOBAL(t, "float[2 * N]");\n}'
    )
    # a block inside a function is no namespace
    inner = "namespace a { void f() { if (x) {\n__shared__ float t[4];\n} } }"
    assert "__SIM_TG_BIND(t," in rewrite_cuda(inner)


def test_declarations_in_comments_and_strings_stay():
    text = (
        "// threadgroup float t[A * B];\n"
        "/* #define S threadgroup float u[2 * N]; */\n"
        'const char* s = "__shared__ float v[2 * N];";\n'
    )
    assert rewrite_metal(text) == text
    assert rewrite_cuda(text.replace("threadgroup", "__shared__")) == text.replace(
        "threadgroup", "__shared__"
    )


# Long pathological inputs for the declaration rewrite's scans: each is read
# a bounded number of times, so 200 kB take about half a second on 2 cores;
# a scan from each keyword, bracket or alias to the end would take hours.
PATHOLOGICAL = {
    "closing_brackets": lambda n: "threadgroup float t" + "]" * n + ";",
    "bound_groups": lambda n: "threadgroup float t" + "[1]" * (n // 3) + ";",
    "declarator_run": lambda n: "threadgroup float " + "a[1]" * (n // 4) + ";",
    "long_bound": lambda n: "{threadgroup float t[" + "1 * " * (n // 4) + "1];}",
    "statements": lambda n: "{threadgroup float t[N * N];" * (n // 28),
    "unterminated": lambda n: "{threadgroup float t[N * " * (n // 24),
    "spliced_define": lambda n: "#define D " + "threadgroup float t[1 * 2] \\\n" * (n // 30) + "\n",
    "defines": lambda n: "#define D(n) threadgroup float n[N * N]\n" * (n // 40),
    "open_defines": lambda n: "#define F(" * (n // 10),
    "many_params": lambda n: "#define S(" + "a, " * (n // 3) + "b) threadgroup float n[a * b];\n",
    "aliases": lambda n: "".join(f"#define A{k} threadgroup\n" for k in range(n // 24)),
    "alias_uses": lambda n: "#define TG threadgroup\n" + "{TG float t[2 * N];" * (n // 20),
    "alias_chain": lambda n: (
        "#define A0 threadgroup\n"
        + "".join(f"#define A{k + 1} A{k} float\n" for k in range(n // 30))
    ),
    "pasted_names": lambda n: "#define S(n) threadgroup float n" + " ## n" * (n // 5) + "[4];\n",
    "attributes": lambda n: "threadgroup float t" + " __attribute__((x))" * (n // 19) + ";",
}


@pytest.mark.parametrize("shape", sorted(PATHOLOGICAL))
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_declaration_rewrite_is_linear(shape):
    # aliases: a regex of 25,000 alternatives took 12 s on 600 kB (1.3 s on
    # 200 kB); alias_chain: a type grown along the chain took 2.5 s on 200 kB
    size = 600_000 if shape in ("aliases", "alias_chain") else 200_000
    for rewrite, text in (
        (rewrite_metal, PATHOLOGICAL[shape](size)),
        (rewrite_cuda, PATHOLOGICAL[shape](size).replace("threadgroup", "__shared__")),
    ):
        t0 = time.perf_counter()
        out = rewrite(text)
        assert time.perf_counter() - t0 < 5.0, (shape, rewrite.__name__)
        assert out.count("\n") == text.count("\n")


HELPER = """#define OFF {offset}
template <int R>
__device__ float stage(float v) {{
    __shared__ float buf[R * 8];
    int l = threadIdx.x;
    buf[l + OFF] = v;
    __syncthreads();
    return buf[(l + 1) % 32];
}}
"""


@needs_sim
@pytest.mark.slow
def test_shared_array_of_a_template_helper_in_the_header_is_guarded():
    """CUDA only: Metal declares threadgroup memory in the kernel itself."""
    backend = SimBackend(dialect="cuda", launch_timeout_s=20.0)
    body = "int i = blockIdx.x * blockDim.x + threadIdx.x;\nout[i] = stage<4>(float(i) + 1.0f);"
    results = []
    for offset in (1, 0):
        spec = KernelSpec(
            f"helper_{offset}",
            (),
            ("out",),
            body,
            header=HELPER.format(offset=offset),
            dialect="cuda",
        )
        try:
            (out,) = backend.kernel(spec)(
                inputs=[],
                output_shapes=[(N,)],
                output_dtypes=[mx.float32],
                grid=(N, 1, 1),
                threadgroup=(TG, 1, 1),
                init_value=0,
            )
            results.append(np.asarray(out))
        except KernelFault as e:
            results.append(e)
    e, out = results
    assert isinstance(e, KernelFault), e
    assert "__shared__ array 'buf' (float[R * 8]) at index 32 (bound 32) by thread (31, 0, 0)" in (
        e.message
    )
    i = np.arange(N)
    np.testing.assert_array_equal(out, (i - i % TG + (i + 1) % TG + 1).astype(np.float32))


@needs_sim
@pytest.mark.slow
def test_a_file_scope_shared_array_keeps_its_place():
    """CUDA only: a `__shared__` array at file scope binds once, when the
    library loads, so it must not follow the placement that the arrays of
    functions alternate between groups (and launches). Each group reads it
    before writing it: poison (NaN) in every group of both launches, not the
    previous group's values."""
    backend = SimBackend(dialect="cuda", launch_timeout_s=20.0)
    body = (
        "int l = threadIdx.x;\nint i = blockIdx.x * blockDim.x + l;\n"
        "float v = g[l];\n__syncthreads();\ng[l] = float(i) + 1.0f;\nout[i] = v;"
    )
    spec = KernelSpec(
        "file_scope", (), ("out",), body, header="__shared__ float g[32];\n", dialect="cuda"
    )
    k = backend.kernel(spec)
    for _ in range(2):
        (out,) = k(
            inputs=[],
            output_shapes=[(N,)],
            output_dtypes=[mx.float32],
            grid=(N, 1, 1),
            threadgroup=(TG, 1, 1),
            init_value=0,
        )
        assert np.isnan(np.asarray(out)).all(), np.asarray(out)


@needs_sim
@pytest.mark.slow
@pytest.mark.parametrize("off", [0, 1, 40])
def test_an_overflow_of_a_file_scope_shared_array_is_named(off):
    """CUDA only: a header's `__shared__` array follows MLX's blank line after
    its #include lines, and went unguarded there (a plain static: g[32]
    wrote past it silently, g[40] killed the worker unnamed). Its twin
    (off=0) shares the array across the block: each thread reads its
    neighbour's slot."""
    backend = SimBackend(dialect="cuda", launch_timeout_s=20.0)
    body = (
        "int l = threadIdx.x;\ng[l + OFF] = float(l);\n__syncthreads();\n"
        "out[blockIdx.x * blockDim.x + l] = g[(l + 1) % 32];"
    ).replace("OFF", str(off))
    spec = KernelSpec(
        f"file_scope_{off}", (), ("out",), body, header="__shared__ float g[32];\n", dialect="cuda"
    )
    try:
        (out,) = backend.kernel(spec)(
            inputs=[], output_shapes=[(N,)], output_dtypes=[mx.float32],
            grid=(N, 1, 1), threadgroup=(TG, 1, 1), init_value=0,
        )  # fmt: skip
    except KernelFault as e:
        assert off > 0, e.message
        want = f"__shared__ array 'g' (float[32]) at index {off if off > 1 else 32} (bound 32)"
        assert want in e.message and "by thread (" in e.message, e.message
        return
    assert off == 0, "no fault"
    i = np.arange(N)
    np.testing.assert_array_equal(out, ((i % TG + 1) % TG).astype(np.float32))
