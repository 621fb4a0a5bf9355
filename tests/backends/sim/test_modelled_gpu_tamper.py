"""The modelled GPU's clock, attacked (issue 36, point 7): a candidate lowers
its modelled time only by doing less modelled work.

Each attack is checked for its effect, not only its verdict:
- a candidate that defines a profiling hook's or a counter's name, to take
  its place in the profiled build, or calls a counter itself: refused as a
  compile error, and no profiled library is ever built for it (its cache
  directory holds no `p-*.so`; profile.profiled_library is never called);
- a kernel that does heavy work only in the threadgroups it guesses are not
  sampled: every group's instructions are counted, and only the analysis of
  a large launch's accesses is sampled, so its modelled time carries that
  work, spread over many groups or concentrated in one;
- a kernel that counts its launches to do heavy work only in those it
  guesses are not profiled: it cannot keep a count, writable state is
  refused, and nothing of it is built;
- a kernel that asks the preprocessor whether it is the profiled build:
  refused, so the profiled build runs the text the checked one ran.

The text rules (source policy, language rules) refuse most of these first;
where a test is about the symbol check (mlxsci/backends/sim/kernel_symbols.py)
behind them, they are switched off in this process, where kernels are built.
"""

from __future__ import annotations

import uuid

import mlx.core as mx
import numpy as np
import pytest
from helpers import kernel_object, kernel_rules_off

from mlxsci.backends.sim import SimBackend, kernel_symbols, profile
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.spec import CompileError, KernelSpec

pytestmark = [
    pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available"),
    pytest.mark.skipif(not profile.supported(), reason="the profiled build reads x86-64 assembly"),
]

DIALECTS = ("metal", "cuda")
CHECK_OBJECT = kernel_symbols.object_violation

BODY = {
    "metal": "uint i = thread_position_in_grid.x;\n{call}\nif (i >= N) return;\n"
    "y_out[i] = a * x[i] + y[i];\n",
    "cuda": "uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;\n{call}\n"
    "if (i >= N[0]) return;\ny_out[i] = a[0] * x[i] + y[i];\n",
}

# Each hook's and counter's name with the parameters its callers pass.
HOOKS = {
    "__sanitizer_cov_load4": "unsigned int* addr",
    "__sanitizer_cov_trace_pc_guard": "unsigned int* guard",
    "__sim_prof_access": "const void* addr, unsigned int info",
    "__sim_prof_block": "unsigned int block",
    # The preludes' atomic markers: a kernel's own would hide its plain
    # accesses from the race detector as atomic ones (runtime/sim_race.inc).
    "__sim_prof_atomic_begin": "const void* addr",
    "__sim_prof_atomic_end": "void",
}


def hook_definition(name: str, linkage: str) -> str:
    """A header defining `name`: with C linkage, or as a `static` function under
    that assembler name, kept and left uninstrumented. The `static` one is the
    dangerous one: within its object the profiled build's calls to that name
    bind to it before the runtime's (tried with the check switched off: the
    saxpy launch counted no instruction and no access and was charged the
    dispatch alone)."""
    params = HOOKS[name]
    if linkage == "extern":
        return f'extern "C" void {name}({params}) {{}}\n'
    return (
        f'static void hook({params}) __asm__("{name}")\n'
        '    __attribute__((used, no_sanitize("coverage")));\n'
        f"static void hook({params}) {{}}\n"
    )


@pytest.fixture(scope="module")
def refusals_cache(tmp_path_factory):
    """A kernel cache only refused candidates use: no library may appear in it
    (its compiler's precompiled header, built once, is shared)."""
    return tmp_path_factory.mktemp("refusals")


@pytest.fixture
def fresh_cache(refusals_cache, monkeypatch):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(refusals_cache))
    return refusals_cache / "sim"


@pytest.fixture
def profiled_builds(monkeypatch) -> list:
    """The translation units profile.profiled_library is asked to build."""
    asked: list = []
    real = profile.profiled_library

    def spy(tu, *args, **kwargs):
        asked.append(tu)
        return real(tu, *args, **kwargs)

    monkeypatch.setattr(profile, "profiled_library", spy)
    return asked


@pytest.fixture
def symbols_only(monkeypatch):
    kernel_rules_off(monkeypatch)
    monkeypatch.setattr(kernel_symbols, "object_violation", CHECK_OBJECT)  # this one stays


def libraries(cache) -> dict:
    """The kernel libraries in a cache directory: plain (k-*) and profiled (p-*)."""
    return {
        "plain": sorted(cache.glob("k-*.so")) if cache.is_dir() else [],
        "profiled": sorted(cache.glob("p-*.so")) if cache.is_dir() else [],
    }


def saxpy_timed(dialect: str, header: str, call: str = ""):
    """A saxpy kernel with `header` and `call`, launched as the sim timer's
    first launch of its kind (which runs the profiled variant)."""
    backend = SimBackend(dialect=dialect)
    body = BODY[dialect].format(call=call)
    spec = KernelSpec(
        "saxpy", ("x", "y", "a", "N"), ("y_out",), body, f"// {uuid.uuid4().hex}\n" + header,
        dialect=dialect,
    )  # fmt: skip
    n = 1000
    backend.activity, backend.launch_models, backend.model_parts = [], {}, {}
    try:
        return backend.kernel(spec)(
            inputs=[mx.arange(n, dtype=mx.float32), mx.ones(n), 2.0, n],
            output_shapes=[(n,)],
            output_dtypes=[mx.float32],
            grid=(1024, 1, 1),
            threadgroup=(256, 1, 1),
        )
    finally:
        backend.activity = backend.launch_models = backend.model_parts = None


def candidate(dialect: str, header: str, call: str = "") -> str:
    return (
        f"//! header\n// {uuid.uuid4().hex}\n{header}//! kernel saxpy\n"
        "//! grid = (ceil_div(N, 256) * 256, 1, 1)\n//! threadgroup = (256, 1, 1)\n"
        + BODY[dialect].format(call=call)
    )


def evaluated(dialect: str, source: str):
    return evaluate(
        "saxpy", source, backend="sim", dialect=dialect, size_set="smoke", n_warmup=1, n_measure=1
    )


@pytest.mark.slow
def test_the_honest_kernel_builds_its_profiled_library(tmp_path, monkeypatch, profiled_builds):
    # The twin of the attacks below: without them the same launch builds both.
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    (out,) = saxpy_timed("metal", "")
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(1000) + 1)
    assert len(profiled_builds) == 1
    built = libraries(tmp_path / "sim")
    assert len(built["plain"]) == 1 and len(built["profiled"]) == 1


# ------------------------------------------------------------ taking a hook's place
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(HOOKS))
@pytest.mark.parametrize("linkage", ["extern", "static"])
def test_a_candidate_defining_a_hook_is_a_compile_error(fresh_cache, dialect, name, linkage):
    ev = evaluated(dialect, candidate(dialect, hook_definition(name, linkage)))
    assert not ev.compile_ok and not ev.correct
    assert ev.fail_reason.startswith("compile error")
    assert libraries(fresh_cache)["profiled"] == []


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(HOOKS))
@pytest.mark.parametrize("linkage", ["extern", "static"])
def test_the_symbol_check_refuses_a_kernel_defining_a_hook(
    symbols_only, fresh_cache, profiled_builds, dialect, name, linkage
):
    with pytest.raises(CompileError) as e:
        saxpy_timed(dialect, hook_definition(name, linkage))
    assert f"the kernel defines {name}" in e.value.message
    assert profiled_builds == []
    assert libraries(fresh_cache) == {"plain": [], "profiled": []}


# ------------------------------------------------------------ calling the counters
COUNTER_CALLS = {
    # Blocks the profiled build does not have, entered many times.
    "__sim_prof_block": "for (uint k = 0; k < 1000; ++k) __sim_prof_block(k);",
    # An access at site 0 that is no access: a store of 16 bytes at x.
    "__sim_prof_access": "__sim_prof_access(x, (0u << 8) | (1u << 7) | 4u);",
    # A plain store the race detector would take for an atomic one.
    "__sim_prof_atomic_begin": "__sim_prof_atomic_begin(x);",
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(COUNTER_CALLS))
def test_a_candidate_calling_a_counter_is_a_compile_error(fresh_cache, dialect, name):
    call = COUNTER_CALLS[name].replace("uint ", "unsigned int ")
    ev = evaluated(dialect, candidate(dialect, "", call))
    assert not ev.compile_ok and not ev.correct
    assert name in ev.fail_reason
    assert libraries(fresh_cache)["profiled"] == []


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(COUNTER_CALLS))
def test_the_symbol_check_refuses_a_kernel_calling_a_counter(
    symbols_only, fresh_cache, profiled_builds, dialect, name
):
    # Declared as the runtime's header declares it (the TU already does).
    header = f'extern "C" void {name}({HOOKS[name]});\n'
    call = COUNTER_CALLS[name].replace("uint ", "unsigned int ")
    with pytest.raises(CompileError) as e:
        saxpy_timed(dialect, header, call)
    assert f"undefined symbol: {name}" in e.value.message
    assert "counters" in e.value.message
    assert profiled_builds == []
    assert libraries(fresh_cache) == {"plain": [], "profiled": []}


def test_only_the_profiled_build_may_call_the_counters(tmp_path):
    obj = kernel_object(
        tmp_path,
        'extern "C" void __sim_prof_block(unsigned int);\n'
        'extern "C" void __sim_prof_access(const void*, unsigned int);\n'
        '__attribute__((visibility("hidden"))) void k(float* p) {\n'
        "  __sim_prof_block(3); __sim_prof_access(p, 2); p[0] = 1.0f;\n}\n",
    )
    plain = kernel_symbols.object_violation(obj)
    assert plain is not None and "undefined symbol: __sim_prof_access, __sim_prof_block" in plain
    assert kernel_symbols.object_violation(obj, profiled=True) is None


@pytest.mark.parametrize("name", list(HOOKS))
def test_no_build_may_define_a_hook_even_a_static_one(tmp_path, name):
    obj = kernel_object(
        tmp_path,
        hook_definition(name, "static")
        + '__attribute__((visibility("hidden"))) void k(float* p) { p[0] = 1.0f; }\n',
    )
    for profiled in (False, True):
        why = kernel_symbols.object_violation(obj, profiled=profiled)
        assert why is not None and f"the kernel defines {name}" in why


# ------------------------------------------------------------ work where it is not sampled
# Every thread does a little; the threads of group g also run a loop of
# heavy[g] steps. The same compiled kernel, the same instructions to decide,
# whichever groups do the work. A launch of up to SAMPLE_THREADS threads
# counts every group; a larger one counts a sample of them, drawn per launch
# by a key the kernel cannot see (time_model.sample_fraction).
UNSAMPLED = {
    "metal": """
        uint i = thread_position_in_grid.x;
        float v = x[i];
        for (int k = 0; k < heavy[threadgroup_position_in_grid.x]; ++k) v = v * 1.0001f + 0.5f;
        out[i] = v;
    """,
    "cuda": """
        uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
        float v = x[i];
        for (int k = 0; k < heavy[blockIdx.x]; ++k) v = v * 1.0001f + 0.5f;
        out[i] = v;
    """,
}


def group_choices(groups: int, steps: int) -> dict:
    """Which groups loop `steps` times: none, those of odd index, the last, all."""
    g = np.arange(groups)
    return {
        "none": np.zeros(groups, np.int32),
        "odd": np.where(g % 2 == 1, steps, 0).astype(np.int32),
        "last": np.where(g == groups - 1, steps, 0).astype(np.int32),
        "every": np.full(groups, steps, np.int32),
    }


def heavy_launches(dialect: str, groups: int, group_threads: int, choices: dict, repeat=1):
    """Choice -> [(modelled seconds, counts)] of `repeat` profiled launches."""
    backend = SimBackend(dialect=dialect)
    spec = KernelSpec("unsampled", ("x", "heavy"), ("out",), UNSAMPLED[dialect], dialect=dialect)
    kernel = backend.kernel(spec)
    n = groups * group_threads
    x = mx.random.normal((n,), key=mx.random.key(8))
    runs: dict = {}
    for choice, heavy in choices.items():
        for _ in range(repeat):
            parts: dict = {}
            backend.activity, backend.launch_models, backend.model_parts = [], {}, parts
            try:
                kernel(
                    inputs=[x, mx.array(heavy)],
                    output_shapes=[(n,)],
                    output_dtypes=[mx.float32],
                    grid=(n, 1, 1),
                    threadgroup=(group_threads, 1, 1),
                )
                (record,) = backend.activity
            finally:
                backend.activity = backend.launch_models = backend.model_parts = None
            runs.setdefault(choice, []).append((record[1], parts["unsampled"]))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_work_in_the_groups_guessed_unsampled_is_counted(dialect):
    groups, threads = 64, 128  # 8192 threads: every group counted
    runs = heavy_launches(dialect, groups, threads, group_choices(groups, 256))
    none, odd, last, every = (runs[c][0] for c in ("none", "odd", "last", "every"))
    assert all(r[0][1]["groups"] == groups for r in runs.values())
    # The loop's work, counted exactly as done: half the groups do half of
    # it, the last group one 64th.
    loop = every[1]["thread_ops"] - none[1]["thread_ops"]
    assert loop > 100 * groups * threads
    assert odd[1]["thread_ops"] - none[1]["thread_ops"] == loop // 2
    assert last[1]["thread_ops"] - none[1]["thread_ops"] == loop // groups
    # And timed: slower than doing it nowhere, no faster than doing it in
    # every group (one group's loop is the launch's longest path either way,
    # and where the GPU holds all 64 groups at once, as the H100 does, that
    # path is the launch's time).
    assert none[0] < last[0] <= every[0]
    assert none[0] < odd[0] <= every[0]
    busy = [c["throughput_cycles_sum"] for _s, c in (none, last, odd, every)]
    assert busy == sorted(set(busy))


@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_work_in_half_the_groups_of_a_sampled_launch_is_charged(dialect):
    groups, threads = 4096, 64  # 262144 threads: about a quarter of the groups counted
    choices = group_choices(groups, 256)
    runs = heavy_launches(
        dialect, groups, threads, {c: choices[c] for c in ("none", "odd", "every")}
    )
    (none,), (odd,), (every,) = runs["none"], runs["odd"], runs["every"]
    assert odd[1]["sampled"] < 0.5  # the sample is what this test is about
    # The estimate of the loop's work: half of it, within the sample's error
    # (about 3% at one standard deviation for 1024 groups of 4096).
    loop = every[1]["thread_ops"] - none[1]["thread_ops"]
    assert odd[1]["thread_ops"] - none[1]["thread_ops"] == pytest.approx(loop / 2, rel=0.2)
    assert none[0] < odd[0] < every[0]


# Every group's blocks are counted whatever the sample (sim_profile.inc:
# prof_group_begin), so work put in one group is charged in every launch.
@pytest.mark.slow
@pytest.mark.parametrize("dialect", DIALECTS)
def test_one_group_doing_long_work_in_a_sampled_launch_is_always_charged(dialect):
    groups, threads = 4096, 64
    choices = group_choices(groups, 20000)
    runs = heavy_launches(dialect, groups, threads, {c: choices[c] for c in ("none", "last")}, 8)
    (none,) = {s for s, _c in runs["none"]}  # no work outside the sample: one time
    # On a GPU the launch lasts at least that group's loop, tens of microseconds,
    # whichever launch it is (beyond the dispatch both pay).
    dispatch = runs["none"][0][1]["dispatch_s"]
    assert all(seconds - dispatch > 2 * (none - dispatch) for seconds, _c in runs["last"])


# ------------------------------------------------------------ counting launches
# Heavy work only in the launches it guesses the clock does not profile (the
# first of each kind, then 1 in 8): that needs a count that outlives a launch.
COUNTERS = {
    "metal": {
        "static local": (
            "inline uint next_launch() { static uint launches = 0; return launches++; }\n",
            "if (i == 0 && next_launch() % 8 != 0) { float s = 0; "
            "for (uint k = 0; k < 100000; ++k) s += k; if (s < 0) return; }",
            "launches",
        ),
        "program-scope variable": (
            "uint launches;\n",
            "if (i == 0) launches += 1;",
            "launches",
        ),
    },
    "cuda": {
        "__device__ global": (
            "__device__ unsigned int launches;\n",
            "if (i == 0) atomicAdd(&launches, 1u);",
            "launches",
        ),
        "static global": (
            "static int launches;\n",
            "if (i == 0 && ++launches % 8 != 1) return;",
            "launches",
        ),
    },
}
COUNTER_CASES = [(d, name) for d, cases in COUNTERS.items() for name in cases]


@pytest.mark.parametrize("dialect, name", COUNTER_CASES)
def test_a_launch_counter_is_a_compile_error(fresh_cache, dialect, name):
    header, call, _symbol = COUNTERS[dialect][name]
    ev = evaluated(dialect, candidate(dialect, header, call))
    assert not ev.compile_ok and not ev.correct
    assert ev.fail_reason.startswith("compile error")
    assert libraries(fresh_cache) == {"plain": [], "profiled": []}


@pytest.mark.slow
@pytest.mark.parametrize("dialect, name", COUNTER_CASES)
def test_the_symbol_check_refuses_a_launch_counter(
    symbols_only, fresh_cache, profiled_builds, dialect, name
):
    header, call, symbol = COUNTERS[dialect][name]
    with pytest.raises(CompileError) as e:
        saxpy_timed(dialect, header, call)
    assert "writable data that outlives a launch" in e.value.message
    assert symbol in e.value.message
    assert profiled_builds == []
    assert libraries(fresh_cache) == {"plain": [], "profiled": []}


# ------------------------------------------------------------ telling the builds apart
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "probe", ["__has_feature(coverage_sanitizer)", "defined(__SANITIZE_COVERAGE__)"]
)
def test_a_kernel_cannot_ask_whether_it_is_the_profiled_build(fresh_cache, dialect, probe):
    header = f"#if {probe}\n#define PROFILED 1\n#else\n#define PROFILED 0\n#endif\n"
    ev = evaluated(dialect, candidate(dialect, header, "if (PROFILED) return;"))
    assert not ev.compile_ok and not ev.correct
    assert ev.fail_reason.startswith("compile error")
    assert libraries(fresh_cache) == {"plain": [], "profiled": []}
