"""The typed jobs and the candidate's plan: what the parent builds is what
the worker reads back, and nothing past the parent parses a candidate."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers import size_job

from mlxsci.kernel.candidate import parse
from mlxsci.kernel.plan import CandidatePlan, plan_candidate
from mlxsci.protocol.jobs import CompareJob, LaunchJob, RunCap, SizeJob, job_from_wire
from mlxsci.task import load_task, task_names

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("task", task_names())
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_every_seeds_plan_survives_the_wire(task, dialect):
    t = load_task(task)
    if dialect not in t.seed_dialects():
        pytest.skip(f"{task} has no {dialect} seed")
    plan = plan_candidate(parse(t.seed(dialect), dialect=dialect), t.kernels, f"seed.{dialect}")
    back = CandidatePlan.from_wire(json.loads(json.dumps(plan.to_wire())))
    assert back == plan
    assert [k.name for k in back.kernels] == [k.name for k in t.kernels]


def test_a_size_job_survives_the_wire_with_every_field_set():
    job = size_job(
        "saxpy",
        params={"N": 1000},
        timer="sim",
        settle=RunCap(50, 10.0),
        extra_runs=RunCap(15, 0.5),
        input_seeds=(1, 2, 3),
        schedule_seeds=(7, 8),
        every_output=True,
        output_bytes=4000,
        coverage_within_s=12.5,
    )
    back = job_from_wire(json.loads(json.dumps(job.to_wire())))
    assert isinstance(back, SizeJob) and back == job
    assert back.wants_coverage and back.filename == "seed.metal" and back.dialect == "metal"


def test_a_compare_job_and_a_launch_job_survive_the_wire():
    first = size_job("saxpy").plan
    compare = CompareJob("saxpy", "sim", {}, (first, first), {"N": 10}, 1, 5, "sim", (4, 5))
    assert job_from_wire(json.loads(json.dumps(compare.to_wire()))) == compare
    launch = LaunchJob({"kernel": "k"}, 64)
    assert job_from_wire(json.loads(json.dumps(launch.to_wire()))) == launch


def test_a_job_of_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown kind"):
        job_from_wire({"kind": "rm -rf", "task": "saxpy"})


def test_param_overrides_apply_in_the_plan():
    source = (
        load_task("saxpy")
        .seed("metal")
        .replace("//! kernel saxpy", "//! param VEC = 2 {1, 2, 4}\n//! kernel saxpy")
    )
    plan = plan_candidate(parse(source), load_task("saxpy").kernels, "c.metal", {"VEC": 4})
    assert plan.template == (("VEC", 4),) and dict(plan.param_values) == {"VEC": 4}
    with pytest.raises(ValueError, match="not one of"):
        plan_candidate(parse(source), load_task("saxpy").kernels, "c.metal", {"VEC": 3})


def calls_of(path: Path, name: str) -> list[int]:
    """Lines of `path` that call a function named `name` (plain or attribute)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            if called == name:
                found.append(node.lineno)
    return found


def test_the_worker_and_the_build_service_never_parse_a_candidate():
    """The parent parses once and hands over the plan: neither the worker
    package nor the simulator's build service calls the parser."""
    places = [*sorted((ROOT / "mlxsci" / "worker").glob("*.py"))]
    places.append(ROOT / "mlxsci" / "backends" / "sim" / "variants.py")
    parsing = {str(p.relative_to(ROOT)): calls_of(p, "parse") for p in places}
    assert not {p: lines for p, lines in parsing.items() if lines}


def test_the_parse_check_finds_a_call(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from x import parse\nparse('t')\nimport y\ny.parse('t')\n")
    assert calls_of(sample, "parse") == [2, 4]
