"""How far each way of timing a run is from the kernels' device time, and
how steady the score is, for every task and size, on a GPU.

    python bench/bench_gpu.py [--tasks all|saxpy,heat2d] [--sizes in-dist]
                              [--processes 5] [--backend cuda] [--out DIR]

For every task and size, in one process, with the seed's inputs made on the
device first:
- exact: the backend's device timer (cupti on CUDA: first kernel start to last
  kernel end of one run; sim on the simulator), median of the runs;
- wall: plain wall clock around one run (enqueue + mx.eval + synchronize),
  what the harness measured before device timers, median of the runs;
- amortized: the wall timer (R chained runs per eval, / R);
and the ratios wall / exact and amortized / exact, which are the errors of the
wall-clock timers. Then the seed's score S from `--processes` fresh
`python -m mlxsci.eval` processes (each its own evaluation with the default
timer and the cached roofline), its max / min, the per-size fractions of the
hand-tuned candidates in bench/candidates/ (saxpy: float4, grid-stride), and
the roofline's probe curves. Everything is printed and written to
bench/results/<device>/bench_gpu_<date>.{md,json} with the date, the device,
the driver (where known) and the MLX version.

On the simulator (`--backend sim --sizes smoke`) the same script checks
itself; its numbers are the simulator's, not a GPU's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import subprocess
import time
from pathlib import Path

import mlx.core as mx
from score_spread import fresh_scores  # bench/score_spread.py, beside this script
from tabulate import tabulate

from mlxsci.backends import get_backend, resolve_backend_name
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.candidate import parse
from mlxsci.roofline.store import load_or_measure
from mlxsci.task import load_task, task_names
from mlxsci.timing.timers import WallTimer, default_timer_name, make_timer
from mlxsci.worker.launch import Launcher
from mlxsci.worker.serve import device_inputs, pipeline_work

RESULTS = Path(__file__).parent / "results"
CANDIDATES = Path(__file__).parent / "candidates"


def time_size(task, size, backend, runs: int) -> dict:
    """Exact, plain wall and amortized wall time of one seed run at one size."""
    inputs, _ = device_inputs(task, size.params, backend)
    launcher = Launcher(
        backend, task, parse(task.seed(backend.dialect), dialect=backend.dialect), size.params
    )
    work = pipeline_work(task, launcher, inputs, size.params, backend)
    work.wait(work.enqueue(inputs))  # compile
    exact = make_timer(default_timer_name(backend.name), backend, task.kernel_names)
    try:
        for _ in range(3):
            exact.time(work)  # warm up, clocks ramp
        exact_s = [exact.time(work).seconds for _ in range(runs)]
    finally:
        exact.close()
    wall_s = []
    for _ in range(runs):
        backend.synchronize()
        t0 = time.perf_counter()
        work.wait(work.enqueue(inputs))
        wall_s.append(time.perf_counter() - t0)
    amortized = WallTimer()
    amortized_s = [amortized.time(work).seconds for _ in range(max(3, runs // 3))]
    med = statistics.median
    return {
        "task": task.name,
        "size": size.label,
        "timer": exact.name,
        "exact_ms": med(exact_s) * 1e3,
        "exact_noise": spread(exact_s),
        "wall_ms": med(wall_s) * 1e3,
        "amortized_ms": med(amortized_s) * 1e3,
        "repeats": amortized.repeats,
        "floor_ms": (amortized.floor_seconds or 0.0) * 1e3,
        "wall_ratio": med(wall_s) / med(exact_s),
        "amortized_ratio": med(amortized_s) / med(exact_s),
    }


def timer_table(rows: list[dict], processes: int | None = None) -> str:
    """The rows as a Markdown table: each timer's milliseconds and its ratio
    to the exact one, and S over fresh processes with their spread (none for
    a single process). processes None: rows of runs with different counts."""
    body = [
        [
            r["task"],
            r["size"],
            f"{r['exact_ms']:.4g}",
            f"{100 * r['exact_noise']:.1f}",
            f"{r['wall_ms']:.4g}",
            f"{r['amortized_ms']:.4g}",
            r["repeats"],
            f"{r['wall_ratio']:.2f}",
            f"{r['amortized_ratio']:.2f}",
            " ".join("-" if s is None else f"{s:.4f}" for s in r["scores"]),
            score_spread_text(r),
        ]
        for r in rows
    ]
    timer = rows[0]["timer"] if rows else "exact"
    headers = [
        "task",
        "size",
        f"{timer} ms",
        "noise %",
        "wall ms",
        "amortized ms",
        "R",
        f"wall/{timer}",
        f"amortized/{timer}",
        f"S over {processes} processes" if processes else "S of fresh processes",
        "S max/min",
    ]
    return tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)


def score_spread_text(row: dict) -> str:
    """max/min of S over fresh processes; a single process has no spread."""
    if len(row["scores"]) < 2 or row["score_max_over_min"] is None:
        return "-"
    return f"{row['score_max_over_min']:.3f}"


def spread(xs) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs)


def driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="all")
    ap.add_argument("--sizes", default=None, help="size set (default: in-dist; smoke on sim)")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per timer and size")
    ap.add_argument("--processes", type=int, default=5, help="fresh processes for S")
    ap.add_argument("--out", default=None, help="folder (default bench/results/<device>)")
    args = ap.parse_args()

    backend_name = resolve_backend_name(args.backend)
    backend = get_backend(backend_name)
    size_set = args.sizes or ("smoke" if backend_name == "sim" else "in-dist")
    tasks = task_names() if args.tasks == "all" else args.tasks.split(",")
    info = backend.device_info()
    stamp = datetime.date.today().isoformat()
    meta = {
        "date": stamp,
        "device": info["name"],
        "backend": backend_name,
        "mlx": getattr(mx, "__version__", ""),  # not in MLX's type stubs
        "driver": driver_version() if backend_name == "cuda" else None,
        "properties": info.get("properties"),
        "size_set": size_set,
    }
    print(json.dumps(meta), flush=True)

    rows = []
    for name in tasks:
        task = load_task(name)
        for size in task.size_set(size_set):
            row = time_size(task, size, backend, args.runs)
            given = ",".join(f"{k}={v}" for k, v in size.params.items())
            scores = [s for s, _ in fresh_scores(name, given, backend_name, args.processes)]
            ok = [s for s in scores if s]
            row["scores"] = scores
            row["score_max_over_min"] = max(ok) / min(ok) if len(ok) == len(scores) else None
            rows.append(row)
            print(json.dumps(row), flush=True)

    # The hand-tuned candidates (bench/candidates/): how close a good kernel gets
    # to the ceiling (a tuned saxpy at 64M should score >= 0.9 on an H100).
    tuned: list[dict] = []
    for path in sorted(CANDIDATES.glob(f"*{'.cu' if backend.dialect == 'cuda' else '.metal'}")):
        task_name = path.name.split("_")[0]
        if task_name not in tasks:
            continue
        ev = evaluate(
            task_name, path.read_text(), backend=backend_name, size_set=size_set, filename=str(path)
        )
        tuned.append(
            {
                "candidate": path.name,
                "correct": ev.correct,
                "score": ev.score,
                "fail_reason": ev.fail_reason,
                "fractions": {sz.label: sz.fraction for sz in ev.sizes},
            }
        )
        print(json.dumps(tuned[-1]), flush=True)

    roofs: dict[str, dict] = {}
    for timer in {default_timer_name(backend_name), "wall"}:
        roof = load_or_measure(backend, timer=timer)
        roofs[timer] = {
            "bandwidth": roof.bandwidth,
            "peak_gflops": roof.peak_gflops,
            "extra": {
                k: v
                for k, v in vars(roof).items()
                if k not in ("bandwidth", "peak_gflops", "device")
            },
        }

    table = timer_table(rows, args.processes)
    curves = []
    for timer, probed in roofs.items():
        curves.append(
            f"\nRoofline probes timed with `{timer}`: FP32 {probed['peak_gflops']:.1f} GFLOPS"
        )
        curves.append(
            tabulate(
                [[f"{ws / 2**20:.3f}", f"{gbps:.1f}"] for ws, gbps in probed["bandwidth"]],
                headers=["working set MiB", "GB/s"],
                tablefmt="github",
            )
        )
    for t in tuned:
        curves.append(
            f"\nTuned candidate {t['candidate']}: "
            + (
                ", ".join(f"{k} {v:.3f}" for k, v in t["fractions"].items())
                if t["correct"]
                else f"FAILED: {t['fail_reason']}"
            )
        )
    header = (
        f"# bench_gpu: {meta['device']} ({backend_name}), MLX {meta['mlx']}, "
        f"driver {meta['driver'] or '-'}, {stamp}\n"
    )
    text = header + "\n" + table + "\n" + "\n".join(curves) + "\n"
    print(text)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", info["name"]).strip("-")
    out_dir = Path(args.out) if args.out else RESULTS / slug
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"bench_gpu_{stamp}.md").write_text(text)
    (out_dir / f"bench_gpu_{stamp}.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "tuned": tuned, "roofline": roofs}, indent=2)
    )
    print(f"written to {out_dir}")


if __name__ == "__main__":
    main()
