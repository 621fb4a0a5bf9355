"""The roofline, measured on the machine: `python -m mlxsci.roofline`.

Probe kernels (mlxsci/probes/, in the candidate format, one file per dialect) measure streaming
bandwidth (the better of a copy and a STREAM triad) over working-set sizes
from cache-resident to DRAM, and FP32
multiply-add throughput. Results are cached per device fingerprint. A task's
roofline time at a size is max(bytes / bw(working set), flops / peak); the
fraction a candidate scores is roofline time / measured time.

Metal-Sci's static chip table is kept for a paper-comparable column on
Apple GPUs.
"""
from __future__ import annotations

import datetime
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import mlx.core as mx
import numpy as np
from tabulate import tabulate

from mlxsci.backends import get_backend
from mlxsci.backends.base import Backend
from mlxsci.cache import atomic_write_json, cache_dir
from mlxsci.candidate import parse, to_kernel_spec
from mlxsci.timers import default_timer_name

PROBES = {"metal": Path(__file__).with_name("probes") / "probes.metal",
          "cuda": Path(__file__).with_name("probes") / "probes.cu"}

# Metal-Sci's chip table: (peak FP32 GFLOPS, peak DRAM GB/s).
METAL_SCI_CHIPS = {
    "Apple M1": (2600, 68), "Apple M1 Pro": (4500, 200), "Apple M1 Max": (7800, 400),
    "Apple M1 Ultra": (21000, 800), "Apple M2": (3600, 100), "Apple M2 Pro": (6800, 200),
    "Apple M2 Max": (13600, 400), "Apple M2 Ultra": (27200, 800), "Apple M3": (4100, 100),
    "Apple M3 Pro": (7400, 150), "Apple M3 Max": (14200, 300), "Apple M4": (4600, 120),
    "Apple M4 Pro": (9200, 273), "Apple M4 Max": (18000, 546),
}
METAL_SCI_UNKNOWN = (2000, 80)


def metal_sci_ceiling(device_name: str) -> tuple[float, float]:
    """Metal-Sci's lookup: exact name, then a table key contained in the name.
    Unlike the original (first match in table order, so "Apple M1 Max (x)"
    would match "Apple M1"), the longest matching key wins."""
    if device_name in METAL_SCI_CHIPS:
        return METAL_SCI_CHIPS[device_name]
    matches = [k for k in METAL_SCI_CHIPS if k in device_name]
    return METAL_SCI_CHIPS[max(matches, key=len)] if matches else METAL_SCI_UNKNOWN


@dataclass
class Roofline:
    backend: str
    device: dict
    bandwidth: list          # [[working-set bytes, GB/s], ...] sorted by size
    peak_gflops: float
    measured_at: str

    def bw(self, working_set: float) -> float:
        """GB/s at a working set: log-linear between probe points, flat beyond them."""
        sizes = [s for s, _ in self.bandwidth]
        rates = [r for _, r in self.bandwidth]
        if working_set <= sizes[0]:
            return rates[0]
        if working_set >= sizes[-1]:
            return rates[-1]
        return float(np.interp(math.log(working_set), np.log(sizes), rates))

    def seconds(self, bytes_moved: float, flops: float, working_set: float) -> float:
        return max(bytes_moved / (self.bw(working_set) * 1e9), flops / (self.peak_gflops * 1e9))


# Probe plans per backend: working-set sizes (bytes) and FMA launch sizes.
# The simulator is about a thousand times slower than a GPU, so it probes less.
PLANS = {
    "sim": {"sizes": [2**k for k in range(16, 27, 2)], "fma_threads": 4096, "fma_iters": 256,
            "bytes_per_trial": 2**26},
    "gpu": {"sizes": [2**k for k in range(16, 31)], "fma_threads": 1 << 20, "fma_iters": 1024,
            "bytes_per_trial": 2**32},
}


def _probe_kernels(backend: Backend) -> dict:
    path = PROBES[backend.dialect]
    cand = parse(path.read_text(), dialect=backend.dialect, filename=str(path))
    io = {"stream_copy": (("src", "n4"), ("dst",)),
          "stream_triad": (("src", "src2", "n4"), ("dst",)),
          "fma_peak": (("seed", "iters", "n"), ("out",))}
    return {name: backend.kernel(to_kernel_spec(cand, name, ins, outs, filename=str(path)))
            for name, (ins, outs) in io.items()}


def _best_time(fn, trials: int = 3) -> float:
    best = float("inf")
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(backend: Backend, progress=None) -> Roofline:
    plan = PLANS["sim" if backend.name == "sim" else "gpu"]
    kernels = _probe_kernels(backend)
    bandwidth = []
    for ws in plan["sizes"]:
        best = 0.0
        # copy: src + dst; triad: src + src2 + dst; both sized to the working set
        for name, arrays in (("stream_copy", 2), ("stream_triad", 3)):
            n = ws // (4 * arrays) // 4 * 4
            ins = [backend.to_device(np.ones(n, dtype=np.float32)) for _ in range(arrays - 1)]
            ins.append(backend.to_device(np.array(n // 4, dtype=np.uint32)))
            reps = max(1, min(256, plan["bytes_per_trial"] // ws))

            def launches(kernel=kernels[name], ins=ins, n=n, reps=reps):
                outs = [kernel(inputs=ins, output_shapes=[(n,)], output_dtypes=[mx.float32],
                               grid=(n // 4, 1, 1), threadgroup=(256, 1, 1))[0]
                        for _ in range(reps)]
                mx.eval(outs)
                backend.synchronize()

            launches()  # compile and warm up
            best = max(best, arrays * 4 * n / (_best_time(launches) / reps) / 1e9)
        bandwidth.append([ws, best])
        if progress:
            progress(f"bandwidth {ws / 2**20:10.2f} MiB: {best:9.2f} GB/s")

    threads, iters = plan["fma_threads"], plan["fma_iters"]
    args = [backend.to_device(np.array(0.9999, dtype=np.float32)),
            backend.to_device(np.array(iters, dtype=np.uint32)),
            backend.to_device(np.array(threads, dtype=np.uint32))]

    def fmas():
        out = kernels["fma_peak"](inputs=args, output_shapes=[(threads,)],
                                  output_dtypes=[mx.float32], grid=(threads, 1, 1),
                                  threadgroup=(256, 1, 1))[0]
        mx.eval(out)
        backend.synchronize()

    fmas()
    seconds = _best_time(fmas)
    peak = threads * iters * 8 * 4 * 2 / seconds / 1e9
    if progress:
        progress(f"FP32 multiply-add: {peak:.2f} GFLOPS")
    return Roofline(backend.name, backend.device_info(), bandwidth, peak,
                    datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def cache_path(backend: Backend, timer: str | None = None) -> Path:
    """One cached roofline per device and timer: a wall-clock ceiling is not
    comparable with a CUPTI one."""
    timer = timer or default_timer_name(backend.name)
    return cache_dir("roofline") / f"{backend.device_info()['fingerprint']}-{timer}.json"


def load_or_measure(backend: Backend, refresh: bool = False, progress=None,
                    timer: str | None = None) -> Roofline:
    path = cache_path(backend, timer)
    if path.exists() and not refresh:
        try:
            return Roofline(**json.loads(path.read_text()))
        except (TypeError, ValueError):
            pass  # unreadable: measure again
    roof = measure(backend, progress)
    atomic_write_json(path, asdict(roof))
    return roof


def format_table(roof: Roofline) -> str:
    rows = [[f"{ws / 2**20:.2f}", f"{gbps:.2f}"] for ws, gbps in roof.bandwidth]
    lines = [f"device: {roof.device.get('name')} ({roof.backend}); measured {roof.measured_at}",
             tabulate(rows, headers=["working set (MiB)", "bandwidth (GB/s)"],
                      colalign=("right", "right")),
             f"FP32 peak: {roof.peak_gflops:.2f} GFLOPS"]
    if roof.backend == "metal":
        gflops, gbps = metal_sci_ceiling(roof.device.get("name", ""))
        lines.append(f"Metal-Sci chip table: {gflops} GFLOPS, {gbps} GB/s")
    return "\n".join(lines)


@click.command()
@click.option("--backend", default="auto", type=click.Choice(["auto", "metal", "cuda", "sim"]))
@click.option("--refresh", is_flag=True, help="Measure again even if a cached result exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the roofline as JSON.")
def main(backend, refresh, as_json):
    """Show (measuring if needed) the bandwidth and FP32 roofline of a backend."""
    be = get_backend(backend)
    roof = load_or_measure(be, refresh=refresh,
                           progress=lambda m: click.echo(m, err=True))
    click.echo(json.dumps(asdict(roof), indent=2) if as_json else format_table(roof))


if __name__ == "__main__":
    sys.exit(main())
