"""conv1d: a custom task, defined outside the suite (examples/conv1d/).

out[i] = sum_{k=0}^{2R} w[k] * x[i + k - R] for i in [0, N), fp32, R = 3
(seven taps), with zero padding: taps that fall outside [0, N) contribute
nothing. One dispatch per run.

This folder has the same shape as a built-in task (tasks/<name>/): task.py
with TASK = Task(...), reference.py with solve() and tolerance() (imports
nothing from mlxsci), seed.metal and seed.cu. Load it by its path:
`load_task("examples/conv1d")`, `python -m mlxsci.eval examples/conv1d`.
"""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng

R = 3  # filter radius: 2R + 1 = 7 taps
TAPS = 2 * R + 1


def make_inputs(p, seed=None):
    rng = input_rng(seed, 0xC0FFEE)
    x = rng.standard_normal(p["N"]).astype(np.float32)
    w = rng.uniform(-1.0, 1.0, TAPS).astype(np.float32)  # drawn after x, same generator
    return {"x": x, "w": w, "N": np.array(p["N"], dtype=np.uint32)}


def run(launch, inp, p):
    # One dispatch; out is a fresh output every run.
    out = launch("conv1d", inp, outputs={"out": ((p["N"],), "float32")})
    return {"out": out["out"]}


def validate_size(p):
    if not 1 <= p["N"] < 2**31:
        raise ValueError("N must be in [1, 2^31)")


TASK = Task(
    name="conv1d",
    description=(
        f"Compute out[i] = sum_{{k=0}}^{{{TAPS - 1}}} w[k] * x[i + k - {R}] for i in [0, N), "
        f"fp32, a {TAPS}-tap 1-D convolution (correlation form) with zero padding: taps "
        "outside [0, N) contribute 0. x and out have N elements, w has 7. One dispatch per "
        "run. Memory bound: 8 bytes per element (read x once, write out; the neighbours "
        "and w are assumed cached)."
    ),
    kernels=(
        KernelContract(
            name="conv1d",
            inputs=("x", "w", "N"),
            outputs=("out",),
            grid="(ceil_div(N, 256) * 256, 1, 1)",
            threadgroup="(256, 1, 1)",
        ),
    ),
    sizes={
        # Small enough for the simulator, so a search and its held-out gate run anywhere.
        "smoke": (Size("10007", {"N": 10007}),),
        "in-dist": (
            Size("64K", {"N": 1 << 16}),
            Size("256K", {"N": 1 << 18}),
            Size("1M", {"N": 1 << 20}),
        ),
        "held-out": (Size("384K", {"N": 3 << 17}),),
    },
    defaults={"N": 1 << 18},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=lambda p: 8.0 * p["N"] + 4.0 * TAPS,
    flops=lambda p: 2.0 * TAPS * p["N"],
    working_set=lambda p: 8.0 * p["N"],
    bound="bandwidth",
    validate_size=validate_size,
    # One dispatch with no state: chained runs filter the previous output again.
    chain={"x": "out"},
    regime="R1 stencil (1-D, 7 taps, zero padding)",
    check="max abs of out",
    tolerance="1e-5 * max(1, max|ref|)",
    model="8 N bytes",
    folder=Path(__file__).parent,
)
