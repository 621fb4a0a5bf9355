"""What the modelled GPU's clock costs: every seed at every in-distribution size.

For each task's seed (`--dialect`, default metal) at each in-distribution
size, in this process on the simulator: the wall seconds of one plain run of
the task's pipeline (the plain variants, nobody timing), and of the sim
timer's first timed run, which builds the profiled variants and profiles the
first launch of each kind (issue 36: docs/simulator-time.md). The total of
the timed runs is what modelling every seed at every size costs; the plain
runs are what running them costs anyway. Compiles are warmed first (a plain
run before anything is measured), except the profiled variants' own builds,
which the timed run pays, as an evaluation's does.

    python bench/bench_modelled_clock.py [--tasks a,b] [--dialect cuda] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import mlx.core as mx  # noqa: E402

from mlxsci.backends.sim import SimBackend  # noqa: E402
from mlxsci.kernel.candidate import parse  # noqa: E402
from mlxsci.task import load_task, task_names  # noqa: E402
from mlxsci.timing.timers import SimTimer  # noqa: E402
from mlxsci.worker.launch import Launcher  # noqa: E402
from mlxsci.worker.serve import pipeline_work  # noqa: E402


def measure(task_name: str, dialect: str) -> list[dict]:
    """One row per in-distribution size of the task's seed."""
    task = load_task(task_name)
    rows = []
    for size in task.size_set("in-dist"):
        params = size.params
        backend = SimBackend(dialect=dialect)
        cand = parse(task.seed(dialect), dialect=dialect)
        launcher = Launcher(backend, task, cand, params)
        inputs = {k: mx.array(v) for k, v in task.make_inputs(params).items()}
        work = pipeline_work(task, launcher, inputs, params, backend)
        work.wait(work.enqueue(inputs))  # the plain variants' compiles
        started = time.perf_counter()
        work.wait(work.enqueue(inputs))
        plain = time.perf_counter() - started
        timer = SimTimer(backend, task.kernel_names)
        started = time.perf_counter()
        timing = timer.time(work)
        timed = time.perf_counter() - started
        bounds = {k: v["bound"] for k, v in timer.info().get("launches", {}).items()}
        rows.append(
            {
                "task": task_name,
                "size": size.label,
                "plain_s": plain,
                "timed_s": timed,
                "modelled_s": timing.seconds,
                "bounds": bounds,
            }
        )
        print(
            f"{task_name} {size.label}: plain run {plain:.2f} s, first timed run {timed:.2f} s, "
            f"modelled {timing.seconds * 1e3:.4g} ms",
            file=sys.stderr,
            flush=True,
        )
    return rows


def table(rows: list[dict], dialect: str, wall: float) -> str:
    gpu = SimBackend(dialect=dialect).gpu.name
    lines = [
        f"# What the modelled GPU's clock costs: every {dialect} seed at every in-distribution size",
        "",
        f"- {datetime.date.today().isoformat()}, {platform.machine()} host, "
        f"{_cores()} CPUs, MLX {version('mlx')}, modelled GPU {gpu}",
        "- plain run: the task's pipeline once on the plain variants (compiled beforehand);",
        "  first timed run: the sim timer's first run of the size, which builds the profiled",
        "  variants and profiles the first launch of each kind",
        f"- this script's wall time: {wall:.0f} s",
        "",
        "| task | size | plain run | first timed run | modelled | bound |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        bound = ", ".join(f"{k}: {b}" for k, b in r["bounds"].items())
        lines.append(
            f"| {r['task']} | {r['size']} | {r['plain_s']:.2f} s | {r['timed_s']:.2f} s "
            f"| {r['modelled_s'] * 1e3:.4g} ms | {bound} |"
        )
    plain = sum(r["plain_s"] for r in rows)
    timed = sum(r["timed_s"] for r in rows)
    lines += [
        f"| **all {len(rows)}** | | **{plain:.1f} s** | **{timed:.1f} s** | | |",
        "",
    ]
    return "\n".join(lines)


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(task_names()))
    parser.add_argument("--dialect", default="metal", choices=("metal", "cuda"))
    parser.add_argument("--out", default=None, help="the markdown table (default: stdout)")
    args = parser.parse_args(argv)
    names = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in names if t not in task_names()]
    if unknown:
        print(f"unknown task(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    rows = [row for name in names for row in measure(name, args.dialect)]
    text = table(rows, args.dialect, time.perf_counter() - started)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
