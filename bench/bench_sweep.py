"""One small sweep with the local executor and with Ray, timed (issue 13).

    python bench/bench_sweep.py [--tasks saxpy,heat2d] [--repeats 2] [--iterations 2]
                                [--keep DIR]

Runs the same sweep (autotune on the simulator; by default 2 tasks x 1 model
x 2 repeats, 2 iterations) twice, each into a fresh output folder:
`python -m mlxsci.sweep --executor local`, then `--executor ray` (a Ray
instance started on this machine by the sweep and stopped after; its start
is part of the time, as a user sees it). Prints each command's wall time,
the report table each sweep gives (`python -m mlxsci.report`), and the time
a Ray instance takes to start and stop with nothing to run. The two
tables need not agree: autotune's choices are the same, but the simulator's
timings differ from run to run, and runs in parallel share the CPUs.

Needs Ray (pip install 'mlxsci[ray]'). --keep DIR keeps both sweep folders
under DIR (default: a temporary folder, removed after).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_sweep(executor: str, out: Path, args) -> float:
    """Wall seconds of one sweep command; exits when it fails."""
    cmd = [
        sys.executable,
        "-m",
        "mlxsci.sweep",
        "--tasks",
        args.tasks,
        "--models",
        "autotune",
        "--iterations",
        str(args.iterations),
        "--repeats",
        str(args.repeats),
        "--backend",
        "sim",
        "--executor",
        executor,
        "--out",
        str(out),
        "--quiet",
    ]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"the {executor} sweep failed (exit {proc.returncode}):\n{proc.stderr}")
    return wall


def ray_start_stop() -> float:
    """Wall seconds to start a local Ray instance and stop it, alone: the part of
    the Ray sweep's time that is not running searches."""
    code = "import ray; ray.init(include_dashboard=False, logging_level='warning'); ray.shutdown()"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    return time.perf_counter() - started


def report(out: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mlxsci.report", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="saxpy,heat2d")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the sweep folders under this folder"
    )
    args = parser.parse_args()
    if importlib.util.find_spec("ray") is None:
        sys.exit("needs Ray: pip install 'mlxsci[ray]'")
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        base = args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        results = {}
        for executor in ("local", "ray"):
            out = base / f"sweep_{executor}"
            if out.exists():
                sys.exit(f"{out} exists: give --keep a folder without sweep_local/sweep_ray")
            results[executor] = (timed_sweep(executor, out, args), report(out))
        start_stop = ray_start_stop()
    print(
        f"sweep: {args.tasks} x autotune x {args.repeats} repeats, {args.iterations} "
        f"iterations, backend sim, {os.cpu_count()} CPUs"
    )
    for executor, (wall, table) in results.items():
        print(f"\n--executor {executor}: {wall:.1f} s wall\n")
        print(table, end="")
    print(
        f"\nRay start and stop alone (python -c 'ray.init(); ray.shutdown()'): {start_stop:.1f} s"
    )


if __name__ == "__main__":
    main()
