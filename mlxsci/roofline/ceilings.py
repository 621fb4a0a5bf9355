"""The ceilings a kernel is scored against, apart from how they are measured.

`Roofline` is the record of one machine's measured roofline (the bandwidth
curve over working-set sizes and the FP32 peak) and turns a size's bytes,
FLOPs and working set into its roofline time; `metal_sci_ceiling` looks an
Apple GPU up in Metal-Sci's published chip table (a paper-comparable column).
They are separate from mlxsci.roofline (the verb: cache, report and CLI) and
mlxsci.roofline.probes (the measuring) so that what reads a roofline, such as
mlxsci.evaluation.checks, needs neither the probes nor the CLI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Metal-Sci's chip table: (peak FP32 GFLOPS, peak DRAM GB/s).
METAL_SCI_CHIPS = {
    "Apple M1": (2600, 68),
    "Apple M1 Pro": (4500, 200),
    "Apple M1 Max": (7800, 400),
    "Apple M1 Ultra": (21000, 800),
    "Apple M2": (3600, 100),
    "Apple M2 Pro": (6800, 200),
    "Apple M2 Max": (13600, 400),
    "Apple M2 Ultra": (27200, 800),
    "Apple M3": (4100, 100),
    "Apple M3 Pro": (7400, 150),
    "Apple M3 Max": (14200, 300),
    "Apple M4": (4600, 120),
    "Apple M4 Pro": (9200, 273),
    "Apple M4 Max": (18000, 546),
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
    bandwidth: list  # [[working-set bytes, GB/s], ...] sorted by size (the probes combined)
    peak_gflops: float
    measured_at: str
    timer: str = ""  # the mlxsci.timing.timers timer the probes were timed with
    probes: dict = field(default_factory=dict)  # {"copy"|"triad"|"read": [[ws, GB/s], ...]}
    theoretical: dict = field(default_factory=dict)  # the driver's figures (CUDA), else {}
    reference_copy_gbps: float | None = None  # MLX's own copy-like op (GPU backends)
    plan: dict = field(default_factory=dict)  # what was launched (BackendInfo.probe_plan)
    probe_digest: str = ""  # of the probe source and plan: a changed probe measures again
    # Which cache entry these ceilings were read from or written to: {"entry":
    # its name in the cache, "sha256": of its bytes, "measured_at"}, so results
    # can be checked to have used the same ones. Not stored in the entry itself
    # (mlxsci.roofline.store.STORED) and not part of equality.
    source: dict = field(default_factory=dict, compare=False)

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
