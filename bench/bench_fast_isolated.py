"""What isolated=True costs an mlxsci.fast call: in process vs in the sandboxed worker.

An elementwise kernel (out = a * x + y, float32) over N elements, for each N
of --n (default 1024 and 1M), called in process and with isolated=True
(mlxsci/fast/isolated.py: every launch a round trip to the kernel's
sandboxed worker, inputs and outputs through a pipe and a file), checks off
(one launch) and on (two), interleaved, `--repeats` times each after a
warm-up (the variant compiled and cached, the worker started). Then the
first isolated call with the worker not yet started (the variant in the
kernel cache already): the worker's start, its sandbox, its first load.

    python bench/bench_fast_isolated.py [--n 1024 1048576] [--repeats 20] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import mlx.core as mx  # noqa: E402

from mlxsci import fast  # noqa: E402
from mlxsci.fast import isolated  # noqa: E402

SOURCE = "uint i = thread_position_in_grid.x; out[i] = a * x[i] + y[i];"
WAYS = (
    ("in process, checks off", False, False),
    ("in process, checks on", False, True),
    ("isolated, checks off", True, False),
    ("isolated, checks on", True, True),
)


def median_ms(xs: list[float]) -> str:
    return f"{1e3 * statistics.median(xs):.2f} ({1e3 * min(xs):.2f}-{1e3 * max(xs):.2f})"


def measure(n: int, repeats: int) -> dict[str, list[float]]:
    k = fast.metal_kernel("axpy", ["a", "x", "y"], ["out"], SOURCE)
    x, y = mx.random.normal((n,)), mx.random.normal((n,))
    mx.eval(x, y)
    args = dict(
        inputs=[mx.array(2.0), x, y], grid=(n, 1, 1), threadgroup=(256, 1, 1),
        output_shapes=[(n,)], output_dtypes=[mx.float32],
    )  # fmt: skip
    for _, iso, checks in WAYS:  # compile, start the worker, fill the pools
        mx.eval(k(**args, isolated=iso, checks=checks))
    times: dict[str, list[float]] = {label: [] for label, _, _ in WAYS}
    for _ in range(repeats):
        for label, iso, checks in WAYS:
            t = time.perf_counter()
            mx.eval(k(**args, isolated=iso, checks=checks))
            times[label].append(time.perf_counter() - t)
    first = []
    for _ in range(max(3, repeats // 4)):
        isolated.close_all()
        t = time.perf_counter()
        mx.eval(k(**args, isolated=True, checks=False))
        first.append(time.perf_counter() - t)
    times["isolated, first call (worker started)"] = first
    isolated.close_all()
    return times


def report(sizes: list[int], repeats: int) -> str:
    lines = [
        f"# mlxsci.fast isolated call cost, {datetime.date.today()}",
        "",
        f"`python bench/bench_fast_isolated.py --n {' '.join(map(str, sizes))} --repeats "
        f"{repeats}` on {platform.machine()} ({os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, MLX {version('mlx')}); out = a * x + y over N float32, "
        "threadgroup 256; the warm calls interleaved, after a warm-up; the first call "
        "after close_all() (the variant already in the kernel cache). Wall time of the "
        "call and mx.eval, milliseconds: median (min-max).",
        "",
        "| N | " + " | ".join(label for label, _, _ in WAYS) + " | isolated, first call |",
        "|---|" + "---|" * (len(WAYS) + 1),
    ]
    for n in sizes:
        t = measure(n, repeats)
        cells = [median_ms(t[label]) for label, _, _ in WAYS]
        cells.append(median_ms(t["isolated, first call (worker started)"]))
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[1024, 1 << 20])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    text = report(a.n, a.repeats)
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
