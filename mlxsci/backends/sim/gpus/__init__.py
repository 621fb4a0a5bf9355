"""The GPUs the simulator's clock models (docs/simulator-time.md).

Each GPU is one JSON file in this folder, `<name>.json`: its published
parameters, each with the source it comes from, and the few free parameters
fitted on a calibration set, each saying so. Adding a GPU is adding a file.

    {"name": "apple-m1-pro", "title": "...", "dialect": "metal",
     "parameters": {"cores": {"value": 16, "source": "..."}, ...}}

`load(name)` reads and checks one (every field of `GpuModel` present, a
positive finite number with a non-empty source), `names()` lists them,
`default_for(dialect)` is the one a dialect is modelled on when nobody names
one: Metal-Sci's Apple M1 Pro for Metal, an H100 for CUDA.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent

DEFAULTS = {"metal": "apple-m1-pro", "cuda": "nvidia-h100"}


@dataclass(frozen=True)
class GpuModel:
    """A modelled GPU. Rates are per core (an Apple GPU core, an NVIDIA SM)
    per clock unless the name says otherwise."""

    name: str
    title: str
    dialect: str
    # The machine
    cores: int  # GPU cores (Apple) / streaming multiprocessors (NVIDIA)
    simd_width: int  # lanes of a simdgroup / warp
    clock_ghz: float  # the published shader clock (the FP32 peak's)
    sustained_clock_ghz: float  # the clock kernels are timed at (cycles become seconds)
    # Issue: SIMD instructions a core starts per clock, by class
    issue_per_clock: float  # any instruction (schedulers x dispatch)
    fp32_lanes: int  # FP32 FMA lanes per core (2 FLOP each a clock)
    int_lanes: int  # 32-bit integer ALU lanes per core
    sfu_lanes: int  # special-function (rsqrt, sin, exp, divide) lanes per core
    # Memory
    dram_gbs: float  # DRAM bandwidth, GB/s
    llc_bytes: int  # last-level cache (Apple SLC / NVIDIA L2)
    llc_gbs: float  # its bandwidth for a warm working set, GB/s
    l2_gbs: float  # the cores' L1 misses served by the GPU's L2, GB/s (NVIDIA: its LLC)
    l1_bytes: int  # per-core L1 data cache
    l1_bytes_per_clock: float  # per core
    sector_bytes: int  # the smallest device-memory transaction
    line_bytes: int  # a cache line
    tg_bytes_per_group: int  # threadgroup / shared memory a group may declare
    tg_bytes_per_core: int  # threadgroup / shared memory of one core
    tg_banks: int  # banks of threadgroup memory
    tg_bank_bytes: int  # bytes of one bank word
    # Occupancy
    max_threads_per_group: int
    max_threads_per_core: int  # resident threads
    max_groups_per_core: int  # resident threadgroups
    # Latencies and fixed costs
    llc_latency_cycles: float  # a load served by the last-level cache
    dram_latency_cycles: float  # a load served by DRAM
    barrier_cycles: float  # a threadgroup barrier, per simdgroup
    atomic_cycles: float  # one atomic read-modify-write at the cache, per lane
    dispatch_us: float  # fixed cost of one dispatch in a stream of dispatches
    sources: dict

    @property
    def flops_per_second(self) -> float:
        """Peak FP32: an FMA (2 FLOP) per lane per clock on every core."""
        return 2.0 * self.fp32_lanes * self.cores * self.clock_ghz * 1e9

    @property
    def bytes_per_second(self) -> float:
        return self.dram_gbs * 1e9

    def parameters(self) -> dict:
        """The numeric parameters, as the runtime reads them."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("name", "title", "dialect", "sources")
        }


class UnknownGpu(ValueError):
    """No such modelled GPU, or its file is damaged."""


def names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.json"))


def default_for(dialect: str) -> str:
    return DEFAULTS.get(dialect, DEFAULTS["metal"])


_NUMERIC = [f for f in fields(GpuModel) if f.name not in ("name", "title", "dialect", "sources")]


@cache
def load(name: str) -> GpuModel:
    """The GPU `name` (a file of this folder), checked."""
    if name not in names():
        raise UnknownGpu(f"unknown GPU {name!r} for --sim-gpu; choose from {', '.join(names())}")
    path = HERE / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UnknownGpu(f"the GPU file {path} cannot be read: {exc}") from exc
    return from_dict(data, str(path))


def from_dict(data: dict, where: str = "<dict>") -> GpuModel:
    if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict):
        raise UnknownGpu(f"{where}: not a GPU description (no 'parameters' object)")
    params = data["parameters"]
    values: dict = {}
    sources: dict = {}
    for f in _NUMERIC:
        entry = params.get(f.name)
        if not isinstance(entry, dict) or "value" not in entry:
            raise UnknownGpu(f"{where}: parameter {f.name!r} is missing")
        value = entry["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnknownGpu(f"{where}: parameter {f.name!r} is not a number")
        if not math.isfinite(value) or value < 0 or (value == 0 and f.name != "atomic_cycles"):
            raise UnknownGpu(f"{where}: parameter {f.name!r} must be a positive number")
        source = entry.get("source")
        if not isinstance(source, str) or not source.strip():
            raise UnknownGpu(f"{where}: parameter {f.name!r} names no source")
        values[f.name] = int(value) if f.type == "int" else float(value)
        sources[f.name] = source
    unknown = sorted(set(params) - {f.name for f in _NUMERIC})
    if unknown:
        raise UnknownGpu(f"{where}: unknown parameters {', '.join(unknown)}")
    for key in ("name", "title", "dialect"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise UnknownGpu(f"{where}: {key!r} is missing")
    return GpuModel(
        name=data["name"], title=data["title"], dialect=data["dialect"], sources=sources, **values
    )
