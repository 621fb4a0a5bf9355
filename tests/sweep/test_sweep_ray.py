"""The Ray executor (issue 13) on a real local Ray instance with 2 CPUs,
started once for the module (its start takes a few seconds), with small
simulator sweeps. Skipped only where Ray is not installed (`pip install
'mlxsci[ray]'`; the `test` extra has it).

The runs happen in Ray worker processes, so nothing in them can be stubbed:
the evaluations are real, and the cost test's calls go through the real
OpenAI SDK to the local scripted server (tests/fake_llm_server.py), priced so
that every call costs exactly its worst case, $4.00 (see
tests/sweep/test_sweep_repeats.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from fake_llm_server import SAXPY_ANSWER, FakeLLMServer, ok
from helpers import LISTED_HELD_OUT

from mlxsci.report.build import load_runs, main_table
from mlxsci.sweep import sweeper as sweep

ray = pytest.importorskip("ray")

PRICES = {"sweep-coder": [0, 125.0]}  # 32000 output tokens: $4.00 a call


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield ray
    ray.shutdown()


def ray_executor(**kw):
    from mlxsci.sweep.ray_executor import RayExecutor

    return RayExecutor(backend="sim", **kw)


def index_of(out: Path) -> dict:
    return {e["path"]: e for e in json.loads((out / "index.json").read_text())["runs"]}


def history(run_dir: Path) -> list[int]:
    return [
        json.loads(line)["iteration"]
        for line in (run_dir / "history.jsonl").read_text().splitlines()
    ]


def test_resource_requests_fit_the_backend():
    from mlxsci.sweep.ray_executor import resources_for

    assert resources_for("cuda") == ({"num_cpus": 1, "num_gpus": 1}, "GPU")
    assert resources_for("metal") == ({"num_cpus": 1, "resources": {"apple_gpu": 1}}, "apple_gpu")
    assert resources_for("sim") == ({"num_cpus": 1}, "CPU")


@pytest.mark.slow
def test_ray_sweep_with_repeats_then_resumed(cluster, tmp_path):
    """2 tasks x autotune x 2 repeats as Ray tasks, then the same sweep again.
    (nbody: its held-out costs a run ~2 s on the simulator, heat2d's ~20 s.)"""
    out = tmp_path / "sw"
    executor = ray_executor()
    assert executor.capacity() == 2 and not executor.started_here
    lines = []
    entries = sweep.sweep(
        ["saxpy", "nbody"],
        ["autotune"],
        1,
        repeats=2,
        backend="sim",
        held_out=LISTED_HELD_OUT,
        out=out,
        echo=lines.append,
        executor=executor,
    )
    assert [(e["path"], e["status"], e["action"]) for e in entries] == [
        ("saxpy_autotune", "finished", "ran"),
        ("nbody_autotune", "finished", "ran"),
        ("saxpy_autotune_r2", "finished", "ran"),
        ("nbody_autotune_r2", "finished", "ran"),
    ]
    assert index_of(out)["nbody_autotune_r2"]["seed"] == 1
    for e in entries:
        opts = json.loads((out / e["path"] / "run.json").read_text())
        assert opts["seed"] == e["seed"] and history(out / e["path"]) == [0, 1]
    # two ran at once: the second started before the first ended
    starts = [i for i, line in enumerate(lines) if ": starting" in line]
    first_end = next(i for i, line in enumerate(lines) if ": finished, $0.0000" in line)
    assert len(starts) == 4 and starts[1] < first_end
    # each run's line says what it came to: its outcome and its best's transfer grade
    assert re.search(r": finished, \$0\.0000, outcome \w+, transfer [\w-]+$", lines[first_end])
    assert ray.is_initialized()  # the module's Ray, left running
    rows = main_table(load_runs([out]))
    assert [r["autotune runs"] for r in rows] == [2, 2]
    again = sweep.sweep(
        ["saxpy", "nbody"],
        ["autotune"],
        1,
        repeats=2,
        backend="sim",
        held_out=LISTED_HELD_OUT,
        out=out,
        echo=lines.append,
        executor=ray_executor(),
    )
    assert {e["action"] for e in again} == {"skipped"}


def kill_worker_once(name: str, ready, done: threading.Event, killed: list) -> None:
    """SIGKILL the Ray worker running task `name` once ready() holds."""
    title = f"ray::mlxsci-sweep {name}".encode()
    while not done.is_set() and not killed:
        if ready():
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmdline.startswith(title):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
                    return
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker through /proc")
def test_a_lost_worker_is_retried_and_resumes_the_run(cluster, tmp_path):
    out = tmp_path / "sw"
    run_dir = out / "saxpy_autotune"
    done, killed = threading.Event(), []
    after_first = lambda: (run_dir / "history.jsonl").exists() and len(history(run_dir)) >= 2  # noqa: E731
    killer = threading.Thread(
        target=kill_worker_once, args=("saxpy_autotune", after_first, done, killed)
    )
    killer.start()
    try:
        entries = sweep.sweep(
            ["saxpy"],
            ["autotune"],
            3,
            backend="sim",
            held_out=LISTED_HELD_OUT,
            out=out,
            echo=lambda m: None,
            executor=ray_executor(),
        )
    finally:
        done.set()
        killer.join()
    assert killed, "the worker was not found"
    # Ray ran the task again; it found the run the lost worker began and resumed it
    assert [(e["status"], e["action"]) for e in entries] == [("finished", "resumed")]
    assert history(run_dir) == [0, 1, 2, 3]


@pytest.mark.slow
def test_ray_sweep_cost_cap(cluster, tmp_path):
    """$8 for 4 runs, 2 at a time: the first two get $4 each (one call), then
    nothing is left and the other two never start."""
    out = tmp_path / "sw"
    with FakeLLMServer() as server:
        server.default = ok(SAXPY_ANSWER, input_tokens=100, output_tokens=32000, times=None)
        entries = sweep.sweep(
            ["saxpy", "nbody"],
            ["sweep-coder"],
            2,
            repeats=2,
            backend="sim",
            held_out=LISTED_HELD_OUT,
            out=out,
            echo=lambda m: None,
            executor=ray_executor(),
            max_cost=8.0,
            prices=PRICES,
            base_url=server.openai_url,
        )
        calls = len(server.requests)
    by_name = {e["path"]: e for e in entries}
    first = ["saxpy_sweep-coder", "nbody_sweep-coder"]
    assert [by_name[n]["max_cost"] for n in first] == [4.0, 4.0]
    assert [by_name[n]["status"] for n in first] == ["stopped", "stopped"]
    assert [by_name[n]["cost_usd"] for n in first] == [4.0, 4.0]
    assert [by_name[n]["action"] for n in ("saxpy_sweep-coder_r2", "nbody_sweep-coder_r2")] == [
        "not started",
        "not started",
    ]
    assert calls == 2 and sum(e["cost_usd"] for e in entries) == 8.0
    assert index_of(out) == by_name


@pytest.mark.slow
def test_shipped_results_land_in_the_sweep_folder_and_resume(cluster, tmp_path):
    out = tmp_path / "sw"
    entries = sweep.sweep(
        ["saxpy"],
        ["autotune"],
        1,
        backend="sim",
        held_out=LISTED_HELD_OUT,
        out=out,
        echo=lambda m: None,
        executor=ray_executor(ship_results=True),
    )
    run_dir = out / "saxpy_autotune"
    assert entries[0]["status"] == "finished"
    assert {"run.json", "summary.json", "history.jsonl", "00_seed.metal", "01_candidate.metal"} <= {
        p.name for p in run_dir.iterdir()
    }
    # extended: the run so far travels to the worker, which resumes it
    entries = sweep.sweep(
        ["saxpy"],
        ["autotune"],
        2,
        backend="sim",
        held_out=LISTED_HELD_OUT,
        out=out,
        echo=lambda m: None,
        executor=ray_executor(ship_results=True),
    )
    assert (entries[0]["status"], entries[0]["action"]) == ("finished", "resumed")
    assert history(run_dir) == [0, 1, 2]
