"""The modelled GPU's time of one launch, from what the kernel did (docs/simulator-time.md).

The runtime counts a profiled launch (sim_profile.inc): SIMD instructions by
class, device-memory requests and the sectors they move, threadgroup-memory
wavefronts, barriers, each group's distinct sectors and the launch's. Here
those counts meet a GPU's parameters (gpus/*.json):

- **a core's throughput**: each group keeps its core's busiest unit busy
  for `throughput` cycles (instruction issue, special functions, threadgroup
  memory, L1 sectors, atomics: the runtime takes the largest per group);
- **latency**: a group cannot finish before its slowest simdgroup's path
  (its instructions one after another, each device access's latency over the
  memory-level parallelism a simdgroup keeps in flight, its barriers);
  a core holds `resident` groups at once, so latency is hidden only as far
  as occupancy allows;
- **the cores**: groups spread over `cores`, none split;
- **memory**: the launch's distinct sectors move through DRAM, or through the
  last-level cache when the launch's buffers fit in it (a warm cache, as in
  Metal-Sci's timing after its warm-up runs); every group's distinct sectors
  move between the last-level cache and the cores;
- **the dispatch**: a fixed cost per launch in a stream of launches.

The launch takes the largest of the core-side, DRAM-side and cache-side
times, plus the dispatch. Every input is a count or a published parameter,
so the same kernel at the same size on the same GPU gets the same time on
any host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlxsci.backends.sim.gpus import GpuModel

# Device accesses a simdgroup keeps in flight before it waits (memory-level
# parallelism): independent loads issued back to back overlap their latency.
MEMORY_PARALLELISM = 4.0
# Latency of a threadgroup-memory access, in core cycles.
TG_LATENCY_CYCLES = 24.0
NAME = "counts on a modelled GPU"


# A launch of more threads than this analyses the accesses of a sample of its
# groups, about this many threads' worth, drawn at random (sample_fraction);
# every group is still run and counted (instructions, requests, barriers),
# and the sample's distinct sectors are scaled to the launch (scaled).
SAMPLE_THREADS = 65536
# Counts of the analysed sample only: each group's distinct sectors (scaled
# by `scaled`); the launch's distinct sectors are kept for every group.
_SAMPLED = ("group_sectors",)


def sample_fraction(groups: int, threads_per_group: int) -> float:
    """The share of a launch's groups whose accesses are analysed in full:
    all of them up to SAMPLE_THREADS threads, else enough groups for about
    that many threads (at least 64 groups)."""
    threads = groups * threads_per_group
    if threads <= SAMPLE_THREADS or groups <= 64:
        return 1.0
    return max(SAMPLE_THREADS / threads, 64 / groups)


def scaled(counts: dict) -> dict:
    """The counts with the sample's per-group distinct sectors scaled to the
    whole launch (every other count is of every group); `sampled` says which
    share was analysed."""
    analysed, total = counts.get("analysed_groups", 0), counts.get("groups", 0)
    out = dict(counts)
    if analysed <= 0 or total <= analysed:
        out["sampled"] = 1.0
        return out
    factor = total / analysed
    for name in _SAMPLED:
        out[name] = counts[name] * factor
    out["sampled"] = analysed / total
    return out


def costs(gpu: GpuModel) -> dict:
    """What the runtime charges, in core cycles (sim_runtime.h: __SimProfile's c_*)."""
    return {
        "c_issue": 1.0 / gpu.issue_per_clock,
        "c_sfu": gpu.simd_width / gpu.sfu_lanes,
        "c_fp64": 2.0 / gpu.issue_per_clock,
        "c_tg": 1.0,
        "c_sector": gpu.sector_bytes / gpu.l1_bytes_per_clock,
        "c_atomic": gpu.atomic_cycles / gpu.simd_width,
        "c_barrier": gpu.barrier_cycles,
        "c_dev_latency": gpu.dram_latency_cycles / MEMORY_PARALLELISM,
        "c_tg_latency": TG_LATENCY_CYCLES / MEMORY_PARALLELISM,
    }


@dataclass(frozen=True)
class LaunchShape:
    """What occupancy depends on besides the counts."""

    threads_per_group: int
    tg_bytes: int  # threadgroup memory a group declares
    buffer_bytes: int  # the launch's buffers together (its working set)


@dataclass(frozen=True)
class LaunchTime:
    seconds: float
    parts: dict  # each bound, in seconds, and what set it


def resident_groups(gpu: GpuModel, shape: LaunchShape) -> int:
    """Groups one core holds at once."""
    width = gpu.simd_width
    threads = max(1, -(-shape.threads_per_group // width) * width)
    fit = [gpu.max_groups_per_core, gpu.max_threads_per_core // threads]
    if shape.tg_bytes > 0:
        fit.append(gpu.tg_bytes_per_core // shape.tg_bytes)
    return max(1, min(fit))


def l2_sectors(counts: dict, gpu: GpuModel, shape: LaunchShape) -> float:
    """Sectors the cores fetch from the last-level cache: each group's
    distinct sectors, plus its re-reads that its core's L1 does not keep.
    The L1 is shared by the groups a core holds at once; while their
    footprints fit it, every re-read hits, and beyond it the hit share falls
    as the footprint grows (a first-order capacity model, not an LRU)."""
    groups = max(1, counts["groups"])
    distinct = counts["group_sectors"]
    rereads = max(0.0, counts["dev_sectors"] - distinct)
    footprint = distinct / groups * gpu.sector_bytes * resident_groups(gpu, shape)
    hit = 1.0 if footprint <= gpu.l1_bytes else gpu.l1_bytes / footprint
    return distinct + rereads * (1.0 - hit)


def latency_cycles(counts: dict, gpu: GpuModel, shape: LaunchShape) -> float:
    """Cycles the launch's simdgroups need when each waits on its own chain
    (its instructions one after another, each device access's latency over
    the accesses it keeps in flight, each threadgroup access's, its
    barriers) and a core interleaves only the simdgroups it holds at once
    (Little's law over the launch's sums); never below the slowest
    simdgroup's own chain."""
    warps_per_group = max(1, -(-shape.threads_per_group // gpu.simd_width))
    resident_warps = resident_groups(gpu, shape) * warps_per_group
    latency = (
        gpu.dram_latency_cycles if shape.buffer_bytes > gpu.llc_bytes else gpu.llc_latency_cycles
    )
    chain = (
        counts["issue"]
        + counts["sfu"]
        + counts["simd_ops"]
        + counts["dev_requests"] * latency / MEMORY_PARALLELISM
        # A request's sectors pass its core's L1 one after another.
        + counts["dev_sectors"] * gpu.sector_bytes / gpu.l1_bytes_per_clock
        + counts["tg_wavefronts"] * TG_LATENCY_CYCLES / MEMORY_PARALLELISM
        + counts["barriers"] * gpu.barrier_cycles
    )
    return max(chain / (gpu.cores * resident_warps), counts["path_cycles_max"])


def launch_time(counts: dict, gpu: GpuModel, shape: LaunchShape) -> LaunchTime:
    """The modelled seconds of one launch from its counts (SimProfile's out fields)."""
    hz = gpu.sustained_clock_ghz * 1e9
    resident = resident_groups(gpu, shape)
    throughput = max(counts["throughput_cycles_sum"] / gpu.cores, counts["throughput_cycles_max"])
    latency = latency_cycles(counts, gpu, shape)
    core_s = max(throughput, latency) / hz
    sector = gpu.sector_bytes
    dram_bytes = (counts["dram_read_sectors"] + counts["dram_write_sectors"]) * sector
    warm = shape.buffer_bytes <= gpu.llc_bytes
    memory_s = dram_bytes / ((gpu.llc_gbs if warm else gpu.dram_gbs) * 1e9)
    cache_s = l2_sectors(counts, gpu, shape) * sector / (gpu.l2_gbs * 1e9)
    dispatch_s = gpu.dispatch_us * 1e-6
    body = max(core_s, memory_s, cache_s)
    bound = (
        "memory"
        if body == memory_s
        else "cache"
        if body == cache_s
        else "latency"
        if latency > throughput
        else "throughput"
    )
    seconds = body + dispatch_s
    if not math.isfinite(seconds) or seconds <= 0:
        seconds = dispatch_s
    return LaunchTime(
        seconds,
        {
            "seconds": seconds,
            "bound": bound,
            "throughput_s": throughput / hz,
            "latency_s": latency / hz,
            "memory_s": memory_s,
            "cache_s": cache_s,
            "dispatch_s": dispatch_s,
            "resident_groups": resident,
        },
    )
