"""Reward hacks that need no escape, each offered as a real candidate and
judged (issue 22): a kernel that knows the public inputs, one timed below
what the machine allows, and a search offered such a candidate."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import mlxsci
from mlxsci.evaluation import evaluator as evaluation
from mlxsci.evaluation.references import get_reference
from mlxsci.evaluation.results import format_evaluation
from mlxsci.roofline.ceilings import Roofline
from mlxsci.search import loop
from mlxsci.search.proposers.base import Proposal, Proposer
from mlxsci.task import load_task

HEAT = load_task("heat2d")
SMOKE = HEAT.size_set("smoke")[0]


def answer_table(dialect: str) -> str:
    """A header holding heat2d's smoke answer for the public (fixed-seed)
    inputs, as a kernel that predicts its input would carry it."""
    answer = get_reference(HEAT, SMOKE.params).outputs["u"].ravel()
    values = ",".join(format(float(v), ".9e") + "f" for v in answer)
    qualifier = "__constant__ float" if dialect == "cuda" else "constant float"
    return f"//! header\n{qualifier} ANSWER[{answer.size}] = {{{values}}};\n"


PREDICTING = {
    "metal": """//! kernel heat_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Every step writes the final answer for the public inputs: no stencil at all.
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
if (i >= NX || j >= NY) {
    return;
}
u_out[j * NX + i] = ANSWER[j * NX + i];
""",
    "cuda": """//! kernel heat_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Every step writes the final answer for the public inputs: no stencil at all.
uint32_t nx = NX[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
if (i >= nx || j >= NY[0]) {
    return;
}
u_out[j * nx + i] = ANSWER[j * nx + i];
""",
}


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_kernel_that_predicts_the_inputs_fails(dialect):
    """Before inputs came from a secret seed, this copy of the public answer
    passed every check (the fixed inputs were the task's own); now the data
    it sees is another, and its answer is wrong."""
    source = answer_table(dialect) + PREDICTING[dialect]
    ev = mlxsci.evaluate("heat2d", source, backend="sim", size_set="smoke", dialect=dialect)
    assert ev.compile_ok, ev.fail_reason
    assert not ev.correct and "max_abs" in ev.fail_reason
    assert ev.input_seed is not None


@pytest.mark.slow
def test_each_evaluation_draws_its_own_inputs_and_records_the_seed():
    first = mlxsci.evaluate("saxpy", backend="sim", size_set="smoke")
    second = mlxsci.evaluate("saxpy", backend="sim", size_set="smoke")
    assert first.correct and second.correct
    assert first.input_seed != second.input_seed
    given = mlxsci.evaluate("saxpy", backend="sim", size_set="smoke", input_seed=12345)
    assert given.correct and given.input_seed == 12345
    assert given.to_json()["input_seed"] == 12345


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_task_without_a_seed_runs_its_fixed_inputs(tmp_path):
    """A task folder whose make_inputs takes no seed still evaluates (on its
    fixed data) and says so: no input seed recorded."""
    folder = tmp_path / "conv1d"
    shutil.copytree(Path(mlxsci.__file__).parent.parent / "examples" / "conv1d", folder)
    task_py = folder / "task.py"
    text = task_py.read_text().replace("def make_inputs(p, seed=None):", "def make_inputs(p):")
    task_py.write_text(text.replace("input_rng(seed, 0xC0FFEE)", "input_rng(None, 0xC0FFEE)"))
    assert not load_task(str(folder)).takes_seed
    ev = mlxsci.evaluate(str(folder), backend="sim", size_set="smoke")
    assert ev.correct, ev.fail_reason
    assert ev.input_seed is None


class Offering(Proposer):
    """Offers one answer, then nothing."""

    name = "offering"

    def __init__(self, text: str):
        self.texts = [text]

    def propose(self, ctx):
        return Proposal(text=self.texts.pop(0) if self.texts else None, model="offering")


def slow_roofline(factor: float):
    """The machine's roofline with every ceiling divided by `factor`: a seed's
    honest time then lies below what that machine could do."""
    real = evaluation.machine_roofline

    def prepare(be, timer_name, announce, detail):
        roof = real(be, timer_name, announce, detail)
        return Roofline(
            roof.backend,
            roof.device,
            [[ws, gbps / factor] for ws, gbps in roof.bandwidth],
            roof.peak_gflops / factor,
            roof.measured_at,
            roof.timer,
        )

    return prepare


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_time_below_the_physics_floor_is_implausible_and_not_scored(monkeypatch):
    monkeypatch.setattr(evaluation, "machine_roofline", slow_roofline(1e4))
    ev = mlxsci.evaluate("saxpy", backend="sim", size_set="smoke")
    assert ev.correct and ev.implausible
    assert ev.score == 0.0 and ev.phi is None
    size = ev.sizes[0]
    assert "implausible" in size.flags and size.fraction > 100
    text = format_evaluation(ev)
    assert "IMPLAUSIBLE" in text and "not counted" in text
    kept = mlxsci.evaluate("saxpy", backend="sim", size_set="smoke", keep_implausible=True)
    assert kept.implausible and kept.implausible_kept
    assert kept.score == pytest.approx(kept.sizes[0].fraction)


@pytest.mark.slow
def test_a_search_never_keeps_an_implausible_candidate(monkeypatch, tmp_path):
    """A proposer offers a candidate whose evaluation is timed below the
    machine's floor: the progress line says IMPLAUS, the search keeps the
    seed, the summary counts it, and its prompt history says why."""
    real_evaluate = loop.evaluate
    marker = "// fast beyond belief"

    def evaluate(task, source=None, **kw):
        if source and marker in source:
            with monkeypatch.context() as m:
                m.setattr(evaluation, "machine_roofline", slow_roofline(1e4))
                return real_evaluate(task, source, **kw)
        return real_evaluate(task, source, **kw)

    monkeypatch.setattr(loop, "evaluate", evaluate)
    seed = HEAT.seed("metal")
    proposer = Offering(f"```metal\n{seed}{marker}\n```")
    lines: list = []
    summary = loop.run(
        "heat2d",
        iterations=1,
        backend="sim",
        out=tmp_path / "run",
        proposer=proposer,
        quiet=False,
        echo=lines.append,
    )
    assert summary["best_iteration"] == 0  # the seed stayed the best
    assert summary["implausible_iterations"] == 1
    record = summary["history"][1]
    assert record["correct"] and record["implausible"] and not record["is_new_best"]
    assert any("IMPLAUS" in line for line in lines)
    result = json.loads((tmp_path / "run" / "01_result.json").read_text())
    assert result["candidate"]["score"] == 0.0


@pytest.mark.slow
def test_the_input_seed_never_reaches_a_prompt(tmp_path):
    summary = loop.run("saxpy", "autotune", iterations=2, backend="sim", out=tmp_path / "run")
    seeds = set()
    for path in (tmp_path / "run").glob("*result.json"):
        seeds.add(json.loads(path.read_text())["input_seed"])
    assert seeds and None not in seeds and summary["seed_score"]
    prompts = "".join(p.read_text() for p in (tmp_path / "run").glob("*prompt*.md"))
    assert prompts and not any(str(s) in prompts for s in seeds)
    assert np.all([str(s) not in json.dumps(summary) for s in seeds])


# Counts its launches in an uninitialised local on its (fiber) stack and does
# the work only in launches it believes are checked: launch 0 and from 16 on.
LAUNCH_COUNTER = """//! kernel saxpy
//! grid = (1024, 1, 1)
//! threadgroup = (32, 1, 1)
volatile uint slot[2];
uint c = slot[0];
slot[0] = c + 1u;
threadgroup_barrier(mem_flags::mem_none);
if (thread_position_in_threadgroup.x != 0) {
    return;
}
uint launch = c / threadgroups_per_grid.x;
bool cheap = launch >= 1u && launch <= 15u;
uint chunk = (N + 31u) / 32u;
uint lo = threadgroup_position_in_grid.x * chunk;
uint hi = min(N, lo + chunk);
for (uint i = lo; i < hi; ++i) {
    y_out[i] = cheap ? 7.0f : a * x[i] + y[i];
}
"""


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_local_cannot_count_launches():
    """A reused fiber stack had kept an uninitialised local from launch to
    launch: this kernel then knew which runs were timed (it wrote 7s there)
    and failed only on the last timed run of each input set. Locals now
    start as a fill pattern, so it counts nothing and always does the work."""
    ev = mlxsci.evaluate("saxpy", LAUNCH_COUNTER, backend="sim", size_set="smoke")
    assert ev.correct, ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_results_that_only_feed_a_chain_come_back_whole():
    """wave3d's run returns u and u_prev (which only feeds a chained run); the
    bound on what the parent reads back once counted only u, so at 64^3 the
    seed's own outputs were left out and it failed (every in-dist size)."""
    size = load_task("wave3d").custom_size({"NX": 64, "NY": 64, "NZ": 64, "n_steps": 2})
    ev = mlxsci.evaluate("wave3d", backend="sim", sizes=[size])
    assert ev.correct, ev.fail_reason
