"""What a call of an mlxsci.fast kernel costs beyond the kernel's own work.

An elementwise kernel (out = a * x + y, float32) over N elements (default
4096 and 1M), called through `mlxsci.fast.metal_kernel` and, for the same variant,
straight through the simulator's SimKernel. Interleaved, `--repeats` times
each after a warm-up (the variant compiled and cached):

- kernel: the launch's own CPU time as the runtime measures it (the
  simulated threads' work, what any way of running the kernel pays);
- fast, checks off: the wall time of the whole call, mx.eval included;
- fast, checks on: the same with the second run and the comparisons;
- SimKernel: the wall time of the simulator's own call (no argument
  checks, no mx.custom_function).

"Overhead" is a call's median minus the kernel's median, in one run.
Then the first call of a fresh process: with an empty cache (the compile)
and with the cache warm (another process compiled it), each in its own
subprocess.

    python bench/bench_fast_call.py [--n 4096,1048576] [--repeats 20] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import mlx.core as mx  # noqa: E402

from mlxsci import fast  # noqa: E402
from mlxsci.fast import simulator  # noqa: E402

SOURCE = "uint i = thread_position_in_grid.x; out[i] = a * x[i] + y[i];"

FIRST_CALL = """
import time, mlx.core as mx
t = time.perf_counter()
from mlxsci import fast
k = fast.metal_kernel("axpy", ["a", "x", "y"], ["out"], {source!r})
x = mx.ones(({n},)); y = mx.ones(({n},))
mx.eval(k(inputs=[2.0, x, y], grid=({n}, 1, 1), threadgroup=(256, 1, 1),
          output_shapes=[({n},)], output_dtypes=[mx.float32], checks=False))
print(time.perf_counter() - t)
"""


def _stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def warm_calls(n: int, repeats: int) -> dict[str, dict]:
    k = fast.metal_kernel("axpy", ["a", "x", "y"], ["out"], SOURCE)
    x = mx.random.normal((n,))
    y = mx.random.normal((n,))
    mx.eval(x, y)
    args = dict(
        grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)], output_dtypes=[mx.float32]
    )
    a = mx.array(2.0, dtype=mx.float32)
    sim_kernel = k._sim._sim_kernel()
    backend = sim_kernel.backend

    def fast_call(checks: bool):
        mx.eval(k(inputs=[a, x, y], checks=checks, **args))

    def sim_call():
        mx.eval(sim_kernel(inputs=[a, x, y], **args))

    for _ in range(2):  # compile, fill the buffer pool
        fast_call(True)
        sim_call()
    times: dict[str, list[float]] = {"kernel": [], "fast_off": [], "fast_on": [], "simkernel": []}
    for _ in range(repeats):
        for name, fn in (
            ("fast_off", lambda: fast_call(False)),
            ("fast_on", lambda: fast_call(True)),
            ("simkernel", sim_call),
        ):
            backend.activity = []  # the runtime's CPU time per launch
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
            if name == "simkernel":
                times["kernel"].append(backend.activity[0][2])
            backend.activity = None
    return {name: _stats(v) for name, v in times.items()}


def first_call(n: int, cache: str | None) -> float:
    env = dict(os.environ)
    if cache is not None:
        env["MLXSCI_CACHE_DIR"] = cache
    proc = subprocess.run(
        [sys.executable, "-c", FIRST_CALL.format(source=SOURCE, n=n)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return float(proc.stdout.strip().splitlines()[-1])


def _table(n: int, repeats: int) -> list[str]:
    warm = warm_calls(n, repeats)
    kernel = warm["kernel"]["median"]
    rows = [
        ("the kernel's own launch (runtime CPU time)", "kernel"),
        ("mlxsci.fast call, checks off", "fast_off"),
        ("mlxsci.fast call, checks on", "fast_on"),
        ("SimKernel call (no API layer)", "simkernel"),
    ]
    lines = [
        f"### {n} elements",
        "",
        "| what | median | min | max | median beyond the kernel |",
        "|---|---|---|---|---|",
    ]
    for label, key in rows:
        st = warm[key]
        beyond = "" if key == "kernel" else f"{1e3 * (st['median'] - kernel):.2f}"
        lines.append(
            f"| {label} | {1e3 * st['median']:.2f} | {1e3 * st['min']:.2f} | "
            f"{1e3 * st['max']:.2f} | {beyond} |"
        )
    return lines + [""]


def report(sizes: list[int], repeats: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cold = first_call(sizes[-1], tmp)  # empty cache: the compile
        warm_cache = first_call(sizes[-1], tmp)  # the same cache, now holding the variant
    shown = ",".join(str(n) for n in sizes)
    lines = [
        f"# mlxsci.fast call cost, {datetime.date.today()}",
        "",
        f"`python bench/bench_fast_call.py --n {shown} --repeats {repeats}` on "
        f"{platform.machine()} ({os.cpu_count()} CPUs, {platform.python_version()}, MLX "
        f"{version('mlx')}); out = a * x + y over N float32, threadgroup 256; interleaved, "
        f"{repeats} repeats after a warm-up. Milliseconds. Checks on: the checked second "
        "run (reverse order, the profiled variant's exact checks) and the comparisons.",
        "",
    ]
    for n in sizes:
        lines += _table(n, repeats)
    lines += [
        f"First call in a fresh process (import, kernel made, one call over {sizes[-1]}, "
        "checks off, mx.eval):",
        "",
        f"- empty mlxsci cache (precompiled header and the variant compiled; zig's own cache "
        f"kept): {cold:.2f} s",
        f"- cache warm from another process: {warm_cache:.2f} s",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="4096,1048576", help="element counts, comma-separated")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    text = report([int(v) for v in a.n.split(",")], a.repeats)
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    simulator.backend_for("metal")
    main()
