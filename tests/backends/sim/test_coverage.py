"""Branch coverage on the simulator (issue 25): evaluate(coverage=True) says
how often each arm of a candidate's branches ran, at the candidate file's
lines, summed over every thread and size, so that a held-out failure can be
traced to an arm the scored sizes never ran. The counts come from a worker
that ran the candidate's native code, so the parent reads them as hostile:
a forged or malformed record makes the coverage unavailable, never a crash
or another verdict."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from helpers import kernel_rules_off, replace_once, size_job

from mlxsci.backends import backend_class
from mlxsci.backends.base import BranchMap
from mlxsci.backends.sim import SimBackend, coverage
from mlxsci.evaluation.evaluator import CoverageTally, evaluate
from mlxsci.kernel.candidate import parse, to_kernel_spec
from mlxsci.protocol.exchange import coverage_counts
from mlxsci.protocol.results import SizeRun, WorkerError
from mlxsci.task import Size, load_task, task_names

pytestmark = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

HEAT_SMOKE = Size("67x45x5", {"NX": 67, "NY": 45, "n_steps": 5})
HEAT_OTHER = Size("40x20x2", {"NX": 40, "NY": 20, "n_steps": 2})
SAXPY_SMOKE = Size("100003", {"N": 100003})
SAXPY_OTHER = Size("1000", {"N": 1000})


def heat_candidate(dialect: str) -> str:
    """heat2d's seed with its stencil sum taken by one of two arms keyed on
    NX (both right): the smoke size's NX takes the first only."""
    seed = load_task("heat2d").seed(dialect)
    old = "float left = u_in[idx - 1];"
    sum_line = seed[seed.index("u_out[idx] = c +") :].split("\n")[0]
    nx = "NX" if dialect == "metal" else "nx"  # the cuda seed reads NX[0] into nx
    arms = (
        "float s;\n"
        f"if ({nx} == 67u) {{\n"
        "    s = u_in[idx - 1] + u_in[idx + 1];\n"
        "} else {\n"
        "    s = u_in[idx + 1] + u_in[idx - 1];\n"
        "}\n"
    )
    source = replace_once(seed, old, arms + old)
    return replace_once(source, sum_line, sum_line.replace("left + right", "s"))


def line_of(source: str, text: str) -> int:
    """The 1-based line of the candidate holding `text` (once)."""
    lines = [i for i, ln in enumerate(source.split("\n"), 1) if text in ln]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def arm(record: dict, line: int, kind: str) -> dict:
    found = [a for a in record["arms"] if a["line"] == line and a["kind"] == kind]
    assert len(found) == 1, (line, kind, record["arms"])
    return found[0]


# -- the instrumentation itself (no compiler) ----------------------------------
def test_arms_are_found_at_their_lines_and_lines_never_move():
    text = (
        "if (n == 3u) {\n"  # 1
        "    a = 1;\n"
        "} else if (n > 4u) a = 2;\n"  # 3
        "else {\n"  # 4
        "    a = x > 0 ? 3 : 4;\n"  # 5
        "}\n"
        "switch (k) { case 1: case B::C: a = 1; break; default: break; }\n"  # 7
        "if constexpr (D == 2) { a = 5; } else { a = 6; }\n"  # 8
        "if (int q = f(n)) { a = q; }\n"  # 9
        "#define PICK(c) ((c) ? 1 : 2)\n"  # 10
        "if (n) if (m) a = 1; else a = 2; else a = 3;\n"  # 11
        "if (n == 1u) { a = 7; }\n"  # 12
    )
    out = coverage.instrument(text)
    assert out.text.count("\n") == text.count("\n")
    kinds = {(a.line, a.kind) for a in out.arms}
    assert {
        (1, "if"),
        (3, "else-if"),
        (4, "else"),
        (5, "ternary-true"),
        (5, "ternary-false"),
    } <= kinds
    assert {(7, "case"), (7, "default"), (8, "if"), (8, "else")} <= kinds
    assert {(11, "if"), (11, "else"), (12, "if"), (12, "not-taken")} <= kinds
    assert sum(1 for a in out.arms if a.line == 7 and a.kind == "case") == 2
    # the outer if of line 11 pairs with the last else, the inner with the first
    line11 = sorted((a.column, a.kind) for a in out.arms if a.line == 11)
    assert [k for _, k in line11] == ["if", "if", "else", "else"]
    # an else-if's false outcome is the next test's, not an arm of its own
    assert (1, "not-taken") not in kinds and (1, "else") not in kinds
    skipped = {(s.line, s.reason.split(" ")[0]) for s in out.skipped}
    assert (9, "a") in skipped and (10, "inside") in skipped
    assert len({a.counter for a in out.arms}) == len(out.arms)
    assert max(a.counter for a in out.arms) < out.end


def test_a_header_counts_its_function_bodies_and_constant_expressions_still_compile():
    header = (
        "template <uint D> inline float f(float x) { return D * x; }\n"
        "template <> inline float f<3>(float x) { return x > 0 ? x : -x; }\n"
        "constant constexpr uint W = 4u > 2u ? 4u : 2u;\n"
    )
    out = coverage.instrument(header, 5, functions=True)
    functions = [a for a in out.arms if a.kind == "function"]
    assert [a.line for a in functions] == [1, 2] and out.arms[0].counter == 5
    assert {a.line for a in out.arms if a.kind.startswith("ternary")} == {2, 3}


def counted_kernel(source: str, dialect: str = "metal"):
    c = parse(source, dialect=dialect, filename="cand")
    spec = to_kernel_spec(c, "saxpy", ("x", "y", "a", "N"), ("y_out",), filename="cand")
    backend = SimBackend(dialect)
    backend.count_branches = True
    return backend, spec, backend.kernel(spec)


def run_saxpy(kernel, n: int) -> np.ndarray:
    x = mx.array(np.arange(n, dtype=np.float32))
    out = kernel(
        inputs=[x, mx.ones(n), mx.array(2.0), mx.array(n, dtype=mx.uint32)],
        output_shapes=[(n,)],
        output_dtypes=[mx.float32],
        grid=(256, 1, 1),
        threadgroup=(64, 1, 1),
    )
    return np.array(out[0])


def test_a_counted_kernel_counts_every_thread_and_constexpr_helpers_compile():
    source = (
        "//! header\n"
        "template <uint D> inline float g(float v) { if constexpr (D == 3) { return v; } "
        "else { return -v; } }\n"
        "constant constexpr uint W = 4u > 2u ? 4u : 2u;\n"
        "//! kernel saxpy\n"
        "uint i = thread_position_in_grid.x;\n"
        "if (i >= N) {\n"
        "    return;\n"
        "}\n"
        "y_out[i] = W == 4u ? a * x[i] + y[i] : g<3>(0.0f);\n"
    )
    backend, spec, kernel = counted_kernel(source)
    out = run_saxpy(kernel, 200)
    assert np.allclose(out, 2.0 * np.arange(200) + 1.0)
    hits = kernel.branch_hits()
    arms = {(a["line"], a["kind"]): hits[a["counter"]] for a in backend.branch_map(spec).arms}
    assert arms[(6, "if")] == 56 and arms[(6, "not-taken")] == 200
    assert arms[(9, "ternary-true")] == 200 and arms[(9, "ternary-false")] == 0
    assert arms[(2, "function")] == 0  # g<3> is never called: W == 4u


# -- evaluations ----------------------------------------------------------------
def check_two_arms(dialect: str, task: str, source: str, smoke: Size, other: Size, key: str):
    """The arm keyed on a size: at the smoke size only the first runs and the
    other reports 0 at its line; with a size that takes the other, both."""
    kw = dict(backend="sim", dialect=dialect, n_warmup=1, n_measure=1, coverage=True)
    first = evaluate(task, source, sizes=[smoke], **kw)
    assert first.correct and first.score is not None, first.fail_reason
    cov = first.coverage
    assert cov is not None and cov["measured"], cov
    assert cov["sizes"] == [smoke.label] and cov["not_instrumented"] == []
    if_line, else_line = line_of(source, f"if ({key}"), line_of(source, "} else {")
    assert arm(cov, if_line, "if")["hits"] > 0
    assert arm(cov, else_line, "else")["hits"] == 0
    both = evaluate(task, source, sizes=[smoke, other], **kw)
    assert both.correct, both.fail_reason
    assert arm(both.coverage, if_line, "if")["hits"] == arm(cov, if_line, "if")["hits"]
    assert arm(both.coverage, else_line, "else")["hits"] > 0
    assert both.to_json()["coverage"] == both.coverage
    return cov


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_heat2d_arm_keyed_on_the_size_and_the_seeds_boundary_arms(dialect):
    source = heat_candidate(dialect)
    key = "NX == 67u" if dialect == "metal" else "nx == 67u"
    cov = check_two_arms(dialect, "heat2d", source, HEAT_SMOKE, HEAT_OTHER, key)
    # the seed's own arms: the bounds check and the edge cells, both outcomes
    edge = [
        a
        for a in cov["arms"]
        if a["kind"] in ("if", "not-taken") and a["line"] < line_of(source, f"if ({key}")
    ]
    assert len(edge) >= 4 and all(a["hits"] > 0 for a in edge), edge


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_saxpy_arm_keyed_on_the_size(dialect):
    seed = load_task("saxpy").seed(dialect)
    n = "N" if dialect == "metal" else "N[0]"
    body = seed[seed.index("y_out[i] =") :].rstrip("\n")
    arms = f"if ({n} == 100003u) {{\n    {body}\n}} else {{\n    {body}\n}}"
    source = replace_once(seed, body, arms)
    cov = check_two_arms(dialect, "saxpy", source, SAXPY_SMOKE, SAXPY_OTHER, f"{n} == 100003u")
    bounds = line_of(source, "if (i >=")
    assert arm(cov, bounds, "if")["hits"] > 0 and arm(cov, bounds, "not-taken")["hits"] == 100003


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_without_coverage_there_is_none_and_gpus_do_not_measure_it():
    ev = evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
    assert ev.correct and ev.coverage is None and "coverage" not in ev.to_json()
    assert SimBackend.measures_coverage
    for name in ("metal", "cuda"):
        assert backend_class(name).measures_coverage is False


# -- hostile records ---------------------------------------------------------------
EXPECTED = {"k": 3}


@pytest.mark.parametrize(
    "record",
    [
        None,
        [],
        "counts",
        {"error": 12},
        {"error": "x" * 100000},
        {"kernels": {"k": [1, 2, 3]}},  # no equals_verified
        {"kernels": {"k": [1, 2, 3]}, "equals_verified": False},
        {"kernels": {"k": [1, 2]}, "equals_verified": True},
        {"kernels": {"k": [1, 2, 3, 4]}, "equals_verified": True},
        {"kernels": {"k": [1, -2, 3]}, "equals_verified": True},
        {"kernels": {"k": [1, 2**64 - 1, 3]}, "equals_verified": True},
        {"kernels": {"k": [1, True, 3]}, "equals_verified": True},
        {"kernels": {"k": [1, 2.0, 3]}, "equals_verified": True},
        {"kernels": {"k": [1, "2", 3]}, "equals_verified": True},
        {"kernels": {"k": {"0": 1}}, "equals_verified": True},
        {"kernels": {"k": [1, 2, 3], "other": [1]}, "equals_verified": True},
        {"kernels": {}, "equals_verified": True},
        {"kernels": [[1, 2, 3]], "equals_verified": True},
        {"kernels": {"k": [1, 2, 3]}, "equals_verified": "yes"},
    ],
)
def test_a_malformed_record_is_refused_with_a_reason(record):
    why = coverage_counts(record, EXPECTED)
    assert isinstance(why, str) and len(why) < 500


def test_a_well_formed_record_is_read():
    ok = {"kernels": {"k": [0, 5, 2**63 - 1]}, "equals_verified": True}
    assert coverage_counts(ok, EXPECTED) == {"k": [0, 5, 2**63 - 1]}


def tally() -> CoverageTally:
    arms = [{"line": 4, "column": 1, "kind": "if", "counter": 0}]
    return CoverageTally("cand", {"k": BranchMap(arms, [], 1)})


def test_a_forged_size_makes_the_whole_coverage_unavailable_and_never_raises():
    t = tally()
    t.add("a", counted({"kernels": {"k": [4]}, "equals_verified": True}))
    assert t.record()["measured"] and t.record()["arms"][0]["hits"] == 4
    t.add("b", counted({"kernels": {"k": [-1]}, "equals_verified": True}))
    t.add("c", counted({"kernels": {"k": [9]}, "equals_verified": True}))
    rec = t.record()
    assert not rec["measured"] and rec["reason"].startswith("size b: ")
    assert rec["arms"] == [{"line": 4, "column": 1, "kind": "if", "hits": None}]
    crashed = SizeRun.failed(WorkerError("crash", "gone"))
    for junk in (None, crashed, counted(7), counted([]), counted({"kernels": object()})):
        tally().add("x", junk)  # no exception, whatever the worker left


def counted(record) -> SizeRun:
    """A size's answer (as the parent reads result.json) with this coverage record."""
    return SizeRun.from_wire({"seconds": [1.0], "coverage": record})


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_counters_the_candidate_overwrote_are_refused_and_the_verdict_stands(monkeypatch):
    """The candidate's native code can write its own counters (here named
    outright, with the rules that forbid the name switched off): the parent
    refuses counts no run can reach, and the verdict and score are the
    uninstrumented kernel's."""
    kernel_rules_off(monkeypatch)
    monkeypatch.setattr(coverage, "PROLOGUE", coverage.PROLOGUE + "\n#define FORGE 1")
    seed = load_task("saxpy").seed("metal")
    source = replace_once(
        seed,
        "y_out[i] = a * x[i] + y[i];",
        "y_out[i] = a * x[i] + y[i];\n#ifdef FORGE\n__sim_cov_counts[1] = 1ull << 63;\n#endif",
    )
    # in this process too: the counters the worker would send
    _backend, _spec, kernel = counted_kernel(source)
    run_saxpy(kernel, 200)
    assert kernel.branch_hits()[1] >= 2**63  # later threads count on from the forged value
    assert "out of range" in coverage_counts(
        {"kernels": {"saxpy": kernel.branch_hits()}, "equals_verified": True}, {"saxpy": 2}
    )
    ev = evaluate(
        "saxpy", source, backend="sim", size_set="smoke", n_warmup=1, n_measure=1, coverage=True
    )
    assert ev.correct and ev.score is not None and ev.score > 0, ev.fail_reason
    assert not ev.coverage["measured"] and "out of range" in ev.coverage["reason"]
    assert all(a["hits"] is None for a in ev.coverage["arms"])


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_counted_run_that_cannot_build_leaves_the_verdict_and_says_why(monkeypatch):
    """A counted variant that does not compile (here a prologue broken on
    purpose) costs the coverage, not the candidate."""
    monkeypatch.setattr(coverage, "PROLOGUE", coverage.PROLOGUE + "\nthis is not C++;")
    ev = evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1, coverage=True)
    assert ev.correct and ev.score is not None, ev.fail_reason
    assert not ev.coverage["measured"]
    assert "counted run did not complete" in ev.coverage["reason"], ev.coverage["reason"]


def test_a_kernel_never_launched_counted_has_zeros():
    """Counts exist for every kernel of the candidate, launched counted or not."""
    _backend, spec, kernel = counted_kernel(load_task("saxpy").seed("metal"))
    assert (
        kernel.branch_hits() == [0] * coverage.counters_of(spec) and len(kernel.branch_hits()) == 2
    )


@pytest.mark.slow
@pytest.mark.parametrize("task", task_names())
def test_the_counted_run_changes_no_seeds_verdict(task):
    """Every seed at its smoke sizes (metal): the verdict with coverage is the
    one without (the seeds are correct), its counts are measured (the counted
    variant compiled and gave the verified run's outputs bit for bit)."""
    ev = evaluate(task, backend="sim", size_set="smoke", n_warmup=1, n_measure=1, coverage=True)
    assert ev.correct and ev.score is not None, ev.fail_reason
    assert ev.coverage["measured"], ev.coverage["reason"]
    assert ev.coverage["sizes"] == [s.label for s in ev.sizes]


def saxpy_build(counted, job_coverage) -> dict:
    """The parent's answer to a worker asking for saxpy's seed, counted or not."""
    import json

    from mlxsci.backends.sim import variants
    from mlxsci.kernel.signature import ArgInfo

    seed = load_task("saxpy").seed("metal")
    job = size_job("saxpy", coverage_within_s=100.0 if job_coverage else None)
    k = load_task("saxpy").kernel("saxpy")
    spec = to_kernel_spec(parse(seed, dialect="metal"), "saxpy", k.inputs, k.outputs,
                          filename="seed.metal")  # fmt: skip
    infos = [ArgInfo("float32", (8,)), ArgInfo("float32", (8,)), ArgInfo("float32", ()),
             ArgInfo("uint32", ())]  # fmt: skip
    req = variants.request("metal", spec, infos, ["float32"], [], (), counted=True)
    req["counted"] = counted
    return variants.serve_request(json.dumps(req).encode(), job)


def test_the_parent_builds_a_counted_variant_only_for_a_job_that_asks():
    assert "library" in saxpy_build(True, job_coverage=True)
    assert "library" in saxpy_build(False, job_coverage=False)
    refused = saxpy_build(True, job_coverage=False)
    assert "does not ask for" in refused["error"]["message"]
    assert "counted" in saxpy_build(1, job_coverage=True)["error"]["message"]


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_instrumenting_a_hostile_text_stays_linear():
    """A candidate is hostile text up to 2 MiB: the scanner answers in about
    linear time (a ternary per comma of one long initialiser, and a run of
    `<` before them, were quadratic in a first version), and stops counting
    at MAX_COUNTERS with the rest listed as left out."""
    import time

    texts = [
        "float v[] = {" + ", ".join("a ? 1 : 2" for _ in range(20000)) + "};\n",
        "x = " + "<" * 20000 + "a ? b : c, " * 5000 + ";\n",
        "if (a) { x = 1; } else { x = 2; }\n" * 12000,
        "if (a) " * 5000 + "x = 1;\n",
    ]
    for text in texts:
        started = time.perf_counter()
        out = coverage.instrument(text, functions=True)
        assert time.perf_counter() - started < 10.0
        assert out.text.count("\n") == text.count("\n") and out.end <= coverage.MAX_COUNTERS
    many = coverage.instrument("if (a) { x = 1; }\n" * (coverage.MAX_COUNTERS // 2 + 10))
    assert many.end == coverage.MAX_COUNTERS
    assert sum(s.reason.startswith("more than") for s in many.skipped) == 10
