"""Measuring a machine's roofline: the probe kernels, their plans and timing.

Probe kernels (mlxsci/roofline/kernels/, in the candidate format, one file per dialect)
measure streaming bandwidth over working-set sizes from cache-resident to far
beyond the last-level cache, and FP32 multiply-add throughput. They are timed
by the same timer as the kernels they are compared with (mlxsci.timing.timers:
CUPTI kernel spans on CUDA, the simulator's own clock, or chained wall
clock), so a cache-resident working set shows cache bandwidth, not launch
overhead. `measure` returns a mlxsci.roofline.ceilings.Roofline; caching it, the
report and the CLI are mlxsci.roofline's, which this module does not import.

Bandwidth probes, per working set ws:
- copy: src -> dst, two arrays of ws / 2; triad: dst = 0.5 src + src2, three
  arrays of ws / 3. One float4 per thread per pass; a launch sweeps the
  working set `passes` times so that it moves at least `bytes_per_launch`.
- read: a read-only sweep with more threads (`read_threads`) than float4
  elements, for working sets where the copy has fewer elements than that
  thread count and so cannot fill a GPU with one element per thread.
bw(ws) = max(copy, triad), and max(copy, triad, read) where read applies.

On GPU backends MLX's own elementwise negation (one read, one write) at the
largest working set is timed too: the figure the DRAM plateau is compared
with.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import statistics
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlxsci.backends import backend_info
from mlxsci.backends.base import Backend
from mlxsci.kernel.candidate import parse, to_kernel_spec
from mlxsci.roofline.ceilings import Roofline
from mlxsci.timing import timers

PROBES = {
    "metal": Path(__file__).with_name("kernels") / "probes.metal",
    "cuda": Path(__file__).with_name("kernels") / "probes.cu",
}

# Each probe kernel's inputs and outputs, in the order the kernel takes them.
PROBE_IO = {
    "stream_copy": (("src", "passes", "n4"), ("dst",)),
    "stream_triad": (("src", "src2", "passes", "n4"), ("dst",)),
    "stream_read": (("src", "passes", "n4", "bound"), ("out",)),
    "fma_peak": (("seed", "iters", "n"), ("out",)),
}

# Streaming probes: (kernel, arrays of the working set). Each array is read or
# written once per element and pass: copy reads src and writes dst, triad
# reads src and src2 and writes dst.
STREAMS = {"copy": ("stream_copy", 2), "triad": ("stream_triad", 3)}
FLOAT4_BYTES = 16
FMA_FLOPS_PER_ITER = 64  # 32 multiply-adds per thread and iteration (both dialects)


def plan_for(backend: Backend, info: dict | None = None) -> dict:
    """The backend's plan (mlxsci.backends.BackendInfo.probe_plan). Where the SM count is known, the FMA launch is 8
    full waves of 2048 threads per SM (16 or 32 waves at lower occupancy), so
    no partly filled last wave dilutes the peak."""
    plan = json.loads(json.dumps(backend_info(backend.name).probe_plan))
    props = (info if info is not None else backend.device_info()).get("properties") or {}
    if props.get("sm_count"):
        plan["fma_threads"] = int(props["sm_count"]) * 2048 * 8
    return plan


def probe_digest(backend: Backend, plan: dict, timer: str | None = None) -> str:
    """What an entry's ceilings depend on beside the device: the probe
    kernels, the plan, and the version of the timer that timed them
    (timers.timer_version; default: the backend's own timer)."""
    h = hashlib.sha256(PROBES[backend.dialect].read_bytes())
    h.update(json.dumps(plan, sort_keys=True).encode())
    h.update(timers.timer_version(timer or timers.default_timer_name(backend.name)).encode())
    return h.hexdigest()[:16]


def probe_kernels(backend: Backend) -> dict:
    path = PROBES[backend.dialect]
    cand = parse(path.read_text(), dialect=backend.dialect, filename=str(path))
    return {
        name: backend.kernel(to_kernel_spec(cand, name, ins, outs, filename=str(path)))
        for name, (ins, outs) in PROBE_IO.items()
    }


# ------------------------------------------------------------------ sizes
def elements(working_set: int, arrays: int, threadgroup: int) -> int:
    """float4 elements per array when `arrays` arrays share the working set: a
    whole number of threadgroups, so rotating by one threadgroup per pass
    hands each group's data to exactly one other group."""
    return max(threadgroup, working_set // (FLOAT4_BYTES * arrays) // threadgroup * threadgroup)


def passes_for(bytes_per_pass: int, plan: dict) -> int:
    return max(1, -(-plan["bytes_per_launch"] // bytes_per_pass))


def read_applies(working_set: float, plan: dict) -> bool:
    """The read probe counts where the copy (the stream probe with the most
    elements) has fewer elements than the read probe has threads."""
    return elements(int(working_set), 2, plan["threadgroup"]) < plan["read_threads"]


def combine(probes: dict, plan: dict) -> list:
    """bw(ws): the best probe at each working set, the read probe only where
    it applies (elsewhere copy and triad fill the GPU by themselves, and a
    read-only sweep is no model of a kernel that also writes)."""
    sizes = sorted({ws for curve in probes.values() for ws, _ in curve})
    out = []
    for ws in sizes:
        rates = [
            r
            for name, curve in probes.items()
            for s, r in curve
            if s == ws and (name != "read" or read_applies(ws, plan))
        ]
        if rates:
            out.append([ws, max(rates)])
    return out


# ------------------------------------------------------------------ timing
def _wait(backend: Backend):
    def wait(results) -> None:
        if results is not None:
            mx.eval(results)
        backend.synchronize()

    return wait


def _probe_work(
    backend: Backend,
    kernel,
    names,
    inputs: dict,
    out_shape: tuple,
    threads: int,
    threadgroup: int,
    chain: dict,
) -> timers.Work:
    """One probe launch as the timers take it; its result is {"dst": output}."""

    def enqueue(inp: dict) -> dict:
        (out,) = kernel(
            inputs=[inp[k] for k in names],
            output_shapes=[out_shape],
            output_dtypes=[mx.float32],
            grid=(threads, 1, 1),
            threadgroup=(threadgroup, 1, 1),
        )
        return {"dst": out}

    return timers.Work(enqueue, inputs, _wait(backend), chain, eager=backend.eager)


def _device(backend: Backend, arrays: dict) -> dict:
    """Every input on the device before anything is timed."""
    out = {k: backend.to_device(v) for k, v in arrays.items()}
    mx.eval(list(out.values()))
    return out


def time_work(timer: timers.Timer, work: timers.Work, plan: dict) -> float:
    """Seconds of one run: a first (compiling) run, warm-up until timings
    settle, then the timer's own statistic of the timed runs (median on a GPU,
    minimum on the simulator), the statistic the kernels compared with this
    ceiling are scored by, so a kernel as fast as a probe scores 1."""
    work.wait(work.enqueue(work.inputs))
    timers.settle(lambda: timer.time(work).seconds, **plan["settle"])
    runs = [timer.time(work).seconds for _ in range(plan["timed_runs"])]
    return min(runs) if timer.statistic == "min" else statistics.median(runs)


# ------------------------------------------------------------------ probes
def stream_gbps(
    backend: Backend, kernel, names, arrays: int, ws: int, plan: dict, seconds
) -> tuple[float, int]:
    """GB/s of a copy or triad probe at a working set, and its passes."""
    tg = plan["threadgroup"]
    n4 = elements(ws, arrays, tg)
    passes = passes_for(arrays * FLOAT4_BYTES * n4, plan)
    host = {"passes": np.array(passes, np.uint32), "n4": np.array(n4, np.uint32)}
    host.update({k: np.ones(4 * n4, np.float32) for k in names if k not in host})
    inputs = _device(backend, host)
    work = _probe_work(backend, kernel, names, inputs, (4 * n4,), n4, tg, {"src": "dst"})
    return arrays * FLOAT4_BYTES * n4 * passes / seconds(work) / 1e9, passes


def read_gbps(backend: Backend, kernel, names, ws: int, plan: dict, seconds) -> tuple[float, int]:
    """GB/s of the read probe: read_threads threads each load `passes`
    float4 of a ws-sized array (positive data, so nothing of it is written)."""
    tg, threads = plan["threadgroup"], plan["read_threads"]
    n4 = elements(ws, 1, tg)
    passes = passes_for(threads * FLOAT4_BYTES, plan)
    inputs = _device(
        backend,
        {
            "src": np.ones(4 * n4, np.float32),
            "passes": np.array(passes, np.uint32),
            "n4": np.array(n4, np.uint32),
            "bound": np.zeros(1, np.float32),
        },
    )
    work = _probe_work(backend, kernel, names, inputs, (1,), threads, tg, {"bound": "dst"})
    return threads * passes * FLOAT4_BYTES / seconds(work) / 1e9, passes


def fma_gflops(backend: Backend, kernel, names, plan: dict, seconds) -> float:
    threads, iters = plan["fma_threads"], plan["fma_iters"]
    inputs = _device(
        backend,
        {
            "seed": np.full(threads, 0.9999, np.float32),
            "iters": np.array(iters, np.uint32),
            "n": np.array(threads, np.uint32),
        },
    )
    work = _probe_work(
        backend, kernel, names, inputs, (threads,), threads, plan["threadgroup"], {"seed": "dst"}
    )
    return threads * iters * FMA_FLOPS_PER_ITER / seconds(work) / 1e9


def reference_copy_gbps(backend: Backend, ws: int, seconds) -> float:
    """GB/s of MLX's own elementwise negation over ws / 2 read and ws / 2
    written: what a plain device-to-device copy reaches on this machine."""
    n = ws // 8
    inputs = _device(backend, {"src": np.ones(n, np.float32)})
    work = timers.Work(
        lambda inp: {"dst": -inp["src"]},
        inputs,
        _wait(backend),
        {"src": "dst"},
        eager=backend.eager,
    )
    return 2 * 4 * n / seconds(work) / 1e9


def measure(backend: Backend, progress=None, timer: str | None = None) -> Roofline:
    name = timer or timers.default_timer_name(backend.name)
    info = backend.device_info()
    plan = plan_for(backend, info)
    kernels = probe_kernels(backend)
    say = progress or (lambda _msg: None)
    shared = timers.make_timer(name, backend, tuple(PROBE_IO))

    def seconds(work: timers.Work) -> float:
        # A wall timer fixes its repeat count on the first work it times;
        # probes differ in length, so each gets a timer of its own.
        own = isinstance(shared, timers.WallTimer)
        return time_work(timers.make_timer(name, backend) if own else shared, work, plan)

    try:
        probes: dict = {"copy": [], "triad": [], "read": []}
        for ws in plan["sizes"]:
            for probe, (kname, arrays) in STREAMS.items():
                gbps, passes = stream_gbps(
                    backend, kernels[kname], PROBE_IO[kname][0], arrays, ws, plan, seconds
                )
                probes[probe].append([ws, gbps])
                say(f"{probe:5s} {ws / 2**20:10.3f} MiB: {gbps:9.2f} GB/s ({passes} passes)")
            if read_applies(ws, plan):
                gbps, passes = read_gbps(
                    backend, kernels["stream_read"], PROBE_IO["stream_read"][0], ws, plan, seconds
                )
                probes["read"].append([ws, gbps])
                say(f"read  {ws / 2**20:10.3f} MiB: {gbps:9.2f} GB/s ({passes} passes)")
        peak = fma_gflops(backend, kernels["fma_peak"], PROBE_IO["fma_peak"][0], plan, seconds)
        say(f"FP32 multiply-add: {peak:.2f} GFLOPS")
        # MLX's own ops do not run on the simulator, and its timer cannot see them.
        reference = None
        if backend.runs_mlx_ops:
            reference = reference_copy_gbps(backend, plan["sizes"][-1], seconds)
            say(f"MLX reference copy: {reference:.2f} GB/s")
    finally:
        shared.close()
    return Roofline(
        backend.name,
        info,
        combine(probes, plan),
        peak,
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        timer=name,
        probes=probes,
        theoretical=dict(info.get("properties") or {}),
        reference_copy_gbps=reference,
        plan=plan,
        probe_digest=probe_digest(backend, plan, name),
    )
