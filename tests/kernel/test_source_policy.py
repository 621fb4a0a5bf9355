"""Only kernel code compiles (issue 21, outcome 1; mlxsci/kernel/source/policy.py).

Each hostile candidate, in both dialects, is refused before any compiler sees
it: by the policy itself, by the evaluation in the parent (a compile error
at the candidate's line, no worker started) and by the simulator's own
compile path (the language rules), and no refusal carries a byte of the
files it tried to read. Every seed, example, bench candidate and roofline
probe passes, and so does what kernels legitimately write.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from mlxsci.evaluation import evaluator as evaluation
from mlxsci.kernel.candidate import load, parse, validate
from mlxsci.kernel.source import policy as source_policy
from mlxsci.kernel.source.lexer import lex_part

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(
    [
        *ROOT.glob("tasks/*/seed.*"),
        *ROOT.glob("examples/*/seed.*"),
        *ROOT.glob("bench/candidates/*.*"),
        *ROOT.glob("bench/results/runs/*/*.metal"),
        *ROOT.glob("bench/results/runs/*/*.cu"),
        *ROOT.glob("mlxsci/roofline/kernels/probes.*"),
    ]
)
DIALECTS = ("metal", "cuda")
FIRST = {
    "metal": "uint i = thread_position_in_grid.x;\n",
    "cuda": "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n",
}
LAST = {"metal": "y_out[i] = a * x[i] + y[i];\n", "cuda": "y_out[i] = a[0] * x[i] + y[i];\n"}
PASTE = "#define CAT(a, b) a##b\n#define JOIN(a, b) CAT(a, b)\n"
SECRET = "planted-secret-4f1c9e"


def saxpy(dialect: str, header: str = "", body: str = "") -> str:
    """A saxpy candidate with `header` and `body` spliced in (the body
    between the seed's first and last line)."""
    head = f"//! header\n{header}" if header else ""
    launch = "//! grid = (N, 1, 1)\n//! threadgroup = (32, 1, 1)\n"
    return f"{head}//! kernel saxpy\n{launch}{FIRST[dialect]}{body}{LAST[dialect]}"


def line_of(text: str, snippet: str) -> int:
    return next(k for k, line in enumerate(text.split("\n"), 1) if snippet in line)


@pytest.fixture(scope="module")
def secret_file():
    # Not under pytest's tmp_path: with pytest-xdist that lies below
    # `popen-gw0/`, and `popen` in an #include's path is refused as a host
    # name, a message of its own. Every word of this path is plain.
    folder = Path(tempfile.gettempdir()) / f"mlxsci-secret-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    path = folder / "secret.h"
    path.write_text(f'"{SECRET}"\n')
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def hostname() -> str:
    p = Path("/etc/hostname")
    return p.read_text().strip() if p.exists() else ""


# (header, body, the text on the line the refusal names, words the message has)
ATTACKS = {
    "include a planted file": ('#include "{secret}"\n', "", "#include", "own headers"),
    "include /etc/hostname": ('#include "/etc/hostname"\n', "", "#include", "own headers"),
    "include by path in <>": ("#include </etc/hostname>\n", "", "#include", "own headers"),
    "include a macro": ('#define H "{secret}"\n#include H\n', "", "#include H", "own headers"),
    "include_next": ("#include_next <stdio.h>\n", "", "#include_next", "#include_next"),
    "import": ('#import "{secret}"\n', "", "#import", "#import"),
    "embed": ('const char d[] = {{\n#embed "{secret}"\n}};\n', "", "#embed", "#embed"),
    "has_include": (
        '#if __has_include("/etc/hostname")\n#endif\n',
        "",
        "__has_include",
        "probes files",
    ),
    "has_embed": ('#define P __has_embed("{secret}")\n', "", "__has_embed", "probes files"),
    "pasted has_include": (
        PASTE + '#if JOIN(__has_, include)("/etc/hostname")\n#endif\n',
        "",
        "#if JOIN",
        "probes files",
    ),
    "line directive": ('#line 1 "{secret}"\n', "", "#line", "#line"),
    "line marker": ('# 1 "{secret}"\n', "", "# 1", "line marker"),
    "other pragma": ('#pragma GCC dependency "{secret}"\n', "", "#pragma", "pragma"),
    "_Pragma in a macro": ("#define P(x) _Pragma(#x)\n", "", "_Pragma", "_Pragma"),
    "pasted _Pragma": (
        PASTE + "#define P JOIN(_Prag, ma)\n",
        'P("GCC dependency \\"{secret}\\"")\n',
        'P("GCC',
        "_Pragma",
    ),
    "asm hidden by a define": ("#define DO asm\n", 'DO("nop");\n', "#define DO", "assembly"),
    "token-pasted asm": ("", 'JOIN(a, sm)("nop");\n', "JOIN(a, sm)", "assembly"),
    "asm pasted in a define": ("#define AS a##sm\n", "", "#define AS", "assembly"),
    "volatile __asm__": ("", '__asm__ volatile("nop");\n', "__asm__", "assembly"),
    "asm split by a splice": ("", 'a\\\nsm("nop");\n', "a\\", "assembly"),
    "extern C prototype": (
        'extern "C" int unlink(const char*);\n',
        "",
        "extern",
        "not part of the",
    ),
    "extern C linkage": ('extern "C" int helper(int);\n', "", "extern", "extern"),
    "constructor attribute": (
        "__attribute__((constructor)) static void at_load() {{}}\n",
        "",
        "__attribute__",
        "constructor",
    ),
    "gnu::constructor": (
        "[[gnu::constructor]] static void at_load() {{}}\n",
        "",
        "[[gnu",
        "namespaced",
    ),
    "visibility attribute": (
        '__attribute__((visibility("default"))) int exported;\n',
        "",
        "visibility",
        "visibility",
    ),
    "alias and weak": ('__attribute__((weak, alias("x"))) void f();\n', "", "weak", "weak"),
    "frame address builtin": (
        "",
        "void* p = __builtin_frame_address(0);\n",
        "__builtin_frame",
        "builtins",
    ),
    "int to function pointer (C++ cast)": (
        "",
        "reinterpret_cast<void (*)()>(0x1234)();\n",
        "reinterpret_cast",
        "function pointer",
    ),
    "int to function pointer (C cast)": (
        "",
        "((void (*)())0x1234)();\n",
        "0x1234",
        "function pointer",
    ),
    "function type alias": (
        "typedef void Fn();\n",
        "((Fn*)0x1234)();\n",
        "typedef",
        "function type",
    ),
    "system": ("", 'if (i == 0) system("touch /tmp/x");\n', "system", "host function"),
    "pasted getenv": ("", 'JOIN(get, env)("OPENAI_API_KEY");\n', "JOIN(get", "host function"),
    "pasted LFS twin of fopen": (
        "",
        'CAT(fop, en64)("/tmp/x", "w");\n',
        "CAT(fop",
        "host function",
    ),
    "paste of a compiler's macro": (
        "",
        'JOIN(fop, JOIN(en, __LINE__))("/tmp/x", "w");\n',
        "JOIN(fop",
        "reaches `##`",
    ),
    "printf": ("", 'printf("%d", i);\n', "printf", "host call"),
    "computed goto": ("", "goto *(void*)0x1234;\n", "goto", "goto"),
    "predefined macro in #if": (
        "#ifdef __CUDA_ARCH__\n#define FAST 1\n#endif\n",
        "",
        "#ifdef",
        "has not #define'd",
    ),
    "lone carriage return": (
        '#define X 1\r#include "{secret}"\n',
        "",
        "#define X 1",
        "control character",
    ),
    "digraph include": ("%:include </etc/hostname>\n", "", "%:include", "digraph"),
    "trigraph": ("??=define X 1\n", "", "??=", "trigraph"),
    "include split by a splice": ('#inc\\\nlude "{secret}"\n', "", "#inc\\", "own headers"),
    "macro call across a directive": (
        PASTE,
        "float v = CAT(v,\n#if 1\n1\n#endif\n);\n",
        "CAT(v,",
        "directive",
    ),
    "keyword redefined": ("#define extern\n", "", "#define extern", "may not #define"),
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(ATTACKS))
def test_hostile_text_is_refused_at_its_line_without_host_bytes(name, dialect, secret_file):
    header, body, where, words = ATTACKS[name]
    if "JOIN" in body or "CAT" in body:
        header = header if header.startswith(PASTE) else PASTE + header
    text = saxpy(dialect, header.format(secret=secret_file), body.format(secret=secret_file))
    err = source_policy.check_candidate(parse(text, dialect=dialect, filename="cand.x"))
    assert err is not None, name
    assert err.line == line_of(text, where), (err, text)
    assert words in err.message, err
    for leaked in (SECRET, hostname() if len(hostname()) >= 4 else SECRET):
        assert leaked not in err.message and leaked not in err.log


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "probe",
    [
        '#include "{f}"\n',
        "#include <{f}>\n",
        '#embed "{f}"\n',
        '#if __has_include("{f}")\n#endif\n',
    ],
)
def test_a_refusal_does_not_depend_on_the_file_it_names(dialect, probe, secret_file):
    # The same message whether the file is /etc/hostname, a planted secret or
    # missing: nothing was read.
    def refusal(path) -> str:
        text = saxpy(dialect, probe.format(f=path))
        err = source_policy.check_candidate(parse(text, dialect=dialect))
        assert err is not None
        return f"{err.line}: {err.message}".replace(str(path), "PATH")

    assert refusal("/etc/hostname") == refusal(secret_file) == refusal("/no/such/file")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_evaluation_reports_a_compile_error_before_any_worker(
    dialect, secret_file, monkeypatch
):
    def never(*args, **kwargs):
        raise AssertionError("the evaluation went past the policy")

    monkeypatch.setattr(evaluation, "machine_roofline", never)
    monkeypatch.setattr(evaluation, "candidate_worker", never)
    text = saxpy(dialect, f'#include "{secret_file}"\n')
    ev = evaluation.evaluate("saxpy", text, backend="sim", dialect=dialect, filename="cand.x")
    assert not ev.compile_ok and not ev.correct and ev.score == 0.0
    assert ev.fail_reason.startswith("compile error: cand.x:2: "), ev.fail_reason
    assert SECRET not in ev.fail_reason


@pytest.mark.parametrize("dialect", DIALECTS)
def test_validate_reports_the_refusal_for_the_api_and_the_search(dialect):
    text = saxpy(dialect, body='system("x");\n')
    failures = validate(parse(text, dialect=dialect), ["saxpy"], ["N"])
    assert [(f.kind, f.line) for f in failures] == [("refused", line_of(text, "system"))]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_simulator_refuses_before_compiling(dialect, secret_file, monkeypatch):
    mx = pytest.importorskip("mlx.core")
    sim = pytest.importorskip("mlxsci.backends.sim")
    from mlxsci.backends.sim import build
    from mlxsci.kernel.spec import CompileError, KernelSpec

    def never(*args, **kwargs):
        raise AssertionError("the compiler was reached")

    monkeypatch.setattr(build, "build_library", never)
    spec = KernelSpec(
        "k",
        ("x",),
        ("out",),
        "out[0] = x[0];\n",
        f'#define H "{secret_file}"\n#include H\n',
        dialect=dialect,
        source_file="cand.x",
        header_line=7,
        body_line=12,
    )
    kernel = sim.SimBackend(dialect=dialect).kernel(spec)
    with pytest.raises(CompileError) as e:
        kernel(
            inputs=[mx.zeros((4,))],
            output_shapes=[(4,)],
            output_dtypes=[mx.float32],
            grid=(4, 1, 1),
            threadgroup=(4, 1, 1),
        )
    assert e.value.line == 8 and "own headers" in e.value.message, e.value
    assert SECRET not in str(e.value) and SECRET not in e.value.log


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_seed_example_bench_candidate_and_probe_passes(path):
    assert source_policy.check_candidate(load(path)) is None


# What kernels legitimately write: (dialects, header, body).
ALLOWED = {
    "loop pragmas": (
        DIALECTS,
        "",
        "#pragma unroll\nfor (int j = 0; j < 4; ++j) {}\n#pragma unroll 4\n"
        "for (int j = 0; j < 4; ++j) {}\n#pragma nounroll\nfor (int j = 0; j < 4; ++j) {}\n"
        "#pragma clang loop unroll(enable) vectorize(disable)\nfor (int j = 0; j < 4; ++j) {}\n",
    ),
    "pasting that builds names": (
        DIALECTS,
        PASTE + "#define LOAD(n) float v##n = x[i + n];\n",
        "LOAD(0) LOAD(1)\nfloat JOIN(v, 2) = v0 + v1;\n",
    ),
    "conditions on the candidate's macros": (
        DIALECTS,
        "#define TILE 16\n#if TILE > 8 && defined(TILE) || (1u << 3) == 8\n#define BIG 1\n"
        "#elif TILE\n#define BIG 2\n#else\n#define BIG 0\n#endif\n#undef W\n#ifndef W\n"
        "#define W 4\n#endif\n",
        "float t = BIG * W;\n",
    ),
    "builtins and attributes": (
        DIALECTS,
        "__attribute__((always_inline)) inline float twice(float v) { return 2.0f * v; }\n",
        "[[maybe_unused]] int unused = __builtin_popcount(i);\n"
        "if (__builtin_expect(i > 1000000u, 0)) __builtin_trap();\n"
        "float f = __builtin_fmaf(1.0f, 2.0f, 3.0f);\n",
    ),
    "casts and dereferences": (
        DIALECTS,
        "",
        "float v = (*x);\nconst float* p = (const float*)(x);\nfloat* const* q = nullptr;\n"
        "uint u = (uint)(v);\n",
    ),
    "own headers": (("metal",), "#include <metal_stdlib>\n#include <metal_simdgroup>\n", ""),
    "cuda headers and dynamic shared memory": (
        ("cuda",),
        "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n",
        "extern __shared__ float smem[];\nextern __shared__ __align__(16) unsigned char raw[];\n",
    ),
    "reinterpret_cast to vectors": (
        ("cuda",),
        "",
        "const float4* x4 = reinterpret_cast<const float4*>(x);\n",
    ),
}


@pytest.mark.parametrize("name", list(ALLOWED))
def test_what_kernels_write_passes(name):
    dialects, header, body = ALLOWED[name]
    for dialect in dialects:
        text = saxpy(dialect, header, body)
        assert source_policy.check_candidate(parse(text, dialect=dialect)) is None, dialect


@pytest.mark.parametrize(
    "header, body, words",
    [
        ("", "extern __shared__ float smem[];\n", "`extern` is not part of a Metal"),
        ("#include <cuda_fp16.h>\n", "", "own headers"),
        ("#define kernel\n", "", "may not #define"),
    ],
)
def test_metal_refuses_what_only_cuda_has(header, body, words):
    err = source_policy.check_candidate(parse(saxpy("metal", header, body), dialect="metal"))
    assert err is not None and words in err.message, err


def test_header_macros_reach_every_body_and_lines_map_per_kernel():
    text = (
        "//! header\n" + PASTE + "//! kernel a\nfloat ok = 1.0f;\n"
        '//! kernel b\nfloat fine = 2.0f;\nJOIN(sys, tem)("x");\n'
    )
    err = source_policy.check_candidate(parse(text, dialect="cuda"))
    assert err is not None and err.line == line_of(text, "JOIN(sys") and "system" in err.message


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "#define A0 x x\n"
            + "".join(f"#define A{k} A{k - 1} A{k - 1}\n" for k in range(1, 40))
            + "A39\n",
            "too much",
        ),
        ("#define F(x) x\n" + "F(" * 3000 + "1" + ")" * 3000 + "\n", "nested too deeply"),
        (
            "".join(f"#define B{k} B{k - 1}\n" for k in range(1, 3000)) + "B2999\n",
            "nested too deeply",
        ),
        ("#define A 1\n#if " + "(" * 100 + "A" + ")" * 100 + "\n#endif\n", "nested too deeply"),
        ("#if 1\n" * 10, "no #endif"),
        ("(*" * 100_000 + "[[" + "extern " * 1000, "`[[`"),
        ("#define C(a, b) a##b\n" + "C(x, y) " * 40_000 + "C(/, /)\n", "valid token"),
    ],
    ids=["doubling", "deep calls", "long chain", "deep #if", "open #if", "junk", "pastes"],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_pathological_text_ends_in_a_verdict(text, words):
    err = source_policy.check_parts("cuda", [(text, 1)])
    assert err is not None and words in err.message, err


def test_the_lexer_keeps_candidate_lines_across_splices_and_comments():
    lines = lex_part("a\\\nb /* x\n y */ c\n\n d\n#define q \\\n  r\n", 5)
    got = [[(t.text, t.line) for t in ln.toks] for ln in lines]
    assert got == [
        [("ab", 5), ("c", 7)],
        [],
        [("d", 9)],
        [("#", 10), ("define", 10), ("q", 10), ("r", 11)],
    ]


# ---------------------------------------------------------------- state between launches
# (mlxsci/kernel/source/storage.py) Each text keeps, or does not keep, writable state
# from launch to launch: (header, body, refused?, words of the refusal).
STORAGE = {
    "metal": [
        ("device int counter;\n", "", True, "program scope variable must reside in constant"),
        ("static int n;\n", "", True, "'n' is declared outside any function without `constant`"),
        ("constexpr int M = 4;\n", "", True, "without `constant`"),
        ("int flag(0);\n", "", True, "'flag'"),
        ("namespace d { int hits; }\n", "", True, "'hits'"),
        ("template <typename T> T v = T(1);\n", "", True, "'v'"),
        ("struct P { float x; } p;\n", "", True, "'p'"),
        ("struct S { static int count; };\n", "", True, "non-const `static` member"),
        ("struct M { mutable int k; };\n", "", True, "`mutable`"),
        ("", "static int n = 0;\nn += 1;\n", True, "function-scope static variables"),
        ("", "if (i == 0) { static bool seen; seen = true; }\n", True, "'seen'"),
        ("inline float f(float v) { static float s; return s += v; }\n", "", True, "'s'"),
        ("constant int N = 4;\nconstant float K[2] = {1, 2};\n", "float k = K[N - 4];\n", False, ""),
        ("inline float f(float v) { constant static float t[1] = {2}; return t[0] * v; }\n"
         "template <typename T> T twice(T v) { return v + v; }\nfloat helper(float);\n"
         "struct Q { static constexpr int N = 2; float x; };\nusing F = float;\n",
         "threadgroup float tile[32];\ntile[0] = twice(1.0f);\n", False, ""),
    ],
    "cuda": [
        ("__device__ int memo[64];\n", "", True, "'memo' is a mutable __device__ variable"),
        ("__managed__ int m;\n", "", True, "mutable __managed__ variable"),
        ("int g;\n", "", True, "mutable namespace-scope variable"),
        ("__device__ const float* p = nullptr;\n", "", True, "`T* const`"),
        ("", "static int n;\nn += 1;\n", True, "'n' is a non-const `static` local"),
        ("__device__ float g(float v) { static int c; return v + c++; }\n", "", True, "'c'"),
        ("", "auto f = [](float v) { static int c; return v + c++; };\n", True, "'c'"),
        ("__constant__ float K[2] = {1, 2};\nconstexpr int N = 4;\n"
         "static const float T[2] = {1, 2};\n__device__ float* const q = nullptr;\n"
         "__shared__ float top[32];\n",
         "extern __shared__ float dyn[];\n__shared__ float t[32];\nstatic __shared__ float u[8];\n"
         "static constexpr int M = 2;\nt[0] = K[0] + T[M - 2];\n", False, ""),
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    "dialect, case", [(d, k) for d, cases in STORAGE.items() for k in range(len(cases))]
)
def test_state_that_outlives_a_launch_is_refused_at_its_line(dialect, case):
    header, body, refused, words = STORAGE[dialect][case]
    text = saxpy(dialect, header, body)
    err = source_policy.check_candidate(parse(text, dialect=dialect))
    if not refused:
        assert err is None, err
        return
    assert err is not None and words in err.message, err
    assert "from launch to launch" in err.message or "`mutable`" in err.message
    snippet = (header or body).split("\n")[0].strip()
    assert err.line == line_of(text, snippet), (err.line, text)
