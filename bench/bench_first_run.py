"""A first evaluation on this machine, cold and warm: `python bench/bench_first_run.py`.

Cold: `python -m mlxsci.eval TASK --backend sim` with an empty zig cache
(ZIG_GLOBAL_CACHE_DIR, ZIG_LOCAL_CACHE_DIR) and an empty mlxsci cache
(MLXSCI_CACHE_DIR), so it builds the simulator's compiler runtime, measures
the roofline and compiles the kernel, as on a fresh machine. Warm: the same
command again on the caches the cold run filled. Prints wall and CPU seconds
(user + system of the command and its children: the machine may be shared,
so CPU time is the steadier figure) and the zig cache's size.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_eval(task: str, env: dict) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one evaluation in a child process."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "mlxsci.eval", task, "--backend", "sim"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if res.returncode != 0:
        raise SystemExit(f"mlxsci.eval {task} failed:\n{res.stderr[-3000:]}")
    return wall, cpu, res.stderr


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def one_round(task: str) -> dict:
    """A cold then a warm evaluation in fresh temporary caches."""
    with tempfile.TemporaryDirectory(prefix="mlxsci-first-run-") as tmp:
        zig, mlxsci = Path(tmp, "zig"), Path(tmp, "mlxsci")
        env = dict(
            os.environ,
            ZIG_GLOBAL_CACHE_DIR=str(zig),
            ZIG_LOCAL_CACHE_DIR=str(zig),
            MLXSCI_CACHE_DIR=str(mlxsci),
        )
        cold_wall, cold_cpu, log = timed_eval(task, env)
        warm_wall, warm_cpu, _ = timed_eval(task, env)
        return {
            "cold_wall": cold_wall,
            "cold_cpu": cold_cpu,
            "warm_wall": warm_wall,
            "warm_cpu": warm_cpu,
            "zig_mib": dir_bytes(zig) / 2**20,
            "progress": [line for line in log.splitlines() if line.endswith("...")],
        }


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f}  ({min(values):.2f} - {max(values):.2f})"


@click.command()
@click.option("--task", default="saxpy", show_default=True)
@click.option("--repeat", default=3, show_default=True, help="Cold + warm rounds.")
def main(task: str, repeat: int) -> None:
    if shutil.which("nproc"):
        cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
        print(f"{cores} cores; load average {os.getloadavg()[0]:.2f}")
    rounds = []
    for i in range(repeat):
        r = one_round(task)
        rounds.append(r)
        print(
            f"round {i + 1}: cold {r['cold_wall']:.2f} s wall, {r['cold_cpu']:.2f} s CPU; "
            f"warm {r['warm_wall']:.2f} s wall, {r['warm_cpu']:.2f} s CPU; "
            f"zig cache {r['zig_mib']:.1f} MiB",
            flush=True,
        )
    print(f"progress lines of a cold run: {rounds[0]['progress']}")
    print(f"\nmlxsci.eval {task} --backend sim, median (min - max) of {repeat}:")
    for key, label in (
        ("cold_wall", "cold wall s"),
        ("cold_cpu", "cold CPU s"),
        ("warm_wall", "warm wall s"),
        ("warm_cpu", "warm CPU s"),
        ("zig_mib", "zig cache MiB"),
    ):
        print(f"  {label:14s} {_spread([r[key] for r in rounds])}")


if __name__ == "__main__":
    main()
