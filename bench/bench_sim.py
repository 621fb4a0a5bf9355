"""Where the time of one evaluation on the simulator goes, and how the
simulator compares with the NumPy reference at the same size.

    python bench/bench_sim.py [--tasks saxpy,heat2d] [--sizes smoke,in-dist:1]

For each task and size it prints the wall time of one full evaluation
(python -m mlxsci.eval's code path) split into compile / reference / inputs /
timed runs / verification / other (process start, imports, roofline lookup,
checks), then the ratio: median simulator time per pipeline run over the
NumPy reference's time for the same pipeline.

By default each evaluation starts with the simulator's build cache emptied,
so "compile" is a real compile (zig's own cache, filled once per machine, stays
warm); --warm keeps the cache and shows what a repeated evaluation costs.
"""

from __future__ import annotations

import argparse
import shutil
import time

from tabulate import tabulate

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.references import get_reference
from mlxsci.storage.cache import cache_dir
from mlxsci.task import load_reference, load_task


def pick_sizes(task, spec: str):
    out = []
    for item in spec.split(","):
        name, _, count = item.partition(":")
        sizes = task.size_set(name)
        out.extend(sizes[: int(count)] if count else sizes)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="saxpy,heat2d")
    ap.add_argument(
        "--sizes",
        default="smoke,in-dist:1",
        help="size sets, each optionally :N for the first N sizes",
    )
    ap.add_argument("--measure", type=int, default=3)
    ap.add_argument("--warm", action="store_true", help="keep the simulator's build cache")
    args = ap.parse_args()

    rows = []
    for name in args.tasks.split(","):
        task = load_task(name)
        for size in pick_sizes(task, args.sizes):
            t = time.perf_counter()
            get_reference(task, size.params, use_cache=False)
            t_reference = time.perf_counter() - t

            inputs = task.make_inputs(size.params)
            t = time.perf_counter()
            load_reference(name).solve(inputs, size.params)
            t_numpy = time.perf_counter() - t

            if not args.warm:
                shutil.rmtree(cache_dir("sim"), ignore_errors=True)
            t = time.perf_counter()
            ev = evaluate(name, backend="sim", sizes=[size], n_measure=args.measure)
            total = time.perf_counter() - t + t_reference
            if not ev.sizes or ev.sizes[0].seconds is None:
                rows.append([name, size.label, f"FAILED: {ev.fail_reason}"] + [""] * 9)
                continue
            s = ev.sizes[0]
            tm = s.timings
            compile_s = tm.get("compile") or 0.0
            parts = {
                "compile": compile_s,
                "reference": t_reference,
                "inputs": tm["inputs"],
                "first run": tm["first_run"] - compile_s,
                "warm-up": tm["warmup"],
                "timed": tm["timed"],
                "verify": tm["verify"],
            }
            other = total - sum(parts.values())
            rows.append(
                [name, size.label, "ok" if s.correct else "FAIL", f"{total:.2f}"]
                + [f"{v:.3f}" for v in parts.values()]
                + [f"{other:.2f}", f"{s.seconds / t_numpy:.1f}"]
            )
    print(
        tabulate(
            rows,
            headers=[
                "task",
                "size",
                "verdict",
                "total s",
                "compile",
                "reference",
                "inputs",
                "first run",
                "warm-up",
                "timed",
                "verify",
                "other",
                "sim/numpy",
            ],
        )
    )


if __name__ == "__main__":
    main()
