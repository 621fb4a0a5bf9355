"""saxpy: y <- a*x + y, elementwise fp32 (Metal-Sci task 1; DRAM saturation)."""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng

A = 2.5


def make_inputs(p, seed=None):
    rng = input_rng(seed, 0xBEEF)
    x = rng.standard_normal(p["N"]).astype(np.float32)
    y = rng.standard_normal(p["N"]).astype(np.float32)  # drawn after x, same generator
    return {
        "x": x,
        "y": y,
        "a": np.array(A, dtype=np.float32),
        "N": np.array(p["N"], dtype=np.uint32),
    }


def log_normal_inputs(p, seed=None):
    """x and y with magnitudes spread over decades (log-normal, sigma 1.5) and
    random signs, instead of unit normals: large and tiny terms side by side."""
    inputs = make_inputs(p, seed)
    rng = input_rng(seed, 0x5A01)
    for name in ("x", "y"):
        magnitude = np.exp(rng.normal(0.0, 1.5, size=p["N"]))
        sign = rng.choice(np.array([-1.0, 1.0]), size=p["N"])
        inputs[name] = (sign * magnitude).astype(np.float32)
    return inputs


def cancelling_inputs(p, seed=None):
    """y within 0.1 % of -a x: y_out is the small difference of two nearly
    equal terms (cancellation), about 1e-3 of either."""
    inputs = make_inputs(p, seed)
    rng = input_rng(seed, 0x5A02)
    x = rng.standard_normal(p["N"])
    y = -A * x * (1.0 + rng.normal(0.0, 1e-3, size=p["N"]))
    inputs["x"] = x.astype(np.float32)
    inputs["y"] = y.astype(np.float32)
    return inputs


DISTRIBUTIONS = {"log-normal": log_normal_inputs, "cancelling": cancelling_inputs}


def draw_held_out(rng):
    """N near the listed held-out's 4M (2^22), off the power-of-two grid."""
    return {
        "N": int(rng.integers(2_500_000, 7_500_000)),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # One dispatch; y is an input and y_out a fresh output, so every run starts from y0
    # (a chained run, TASK.chain, from the previous run's y).
    out = launch("saxpy", inp, outputs={"y_out": ((p["N"],), "float32")})
    return {"y": out["y_out"]}


def validate_size(p):
    if not 1 <= p["N"] < 2**31:
        raise ValueError("N must be in [1, 2^31)")


TASK = Task(
    name="saxpy",
    description=(
        "Compute y_out = a * x + y elementwise in fp32 for N elements (a = 2.5). "
        "One dispatch per run. The kernel is memory bound: 12 bytes move per element "
        "(read x, read y, write y_out); the score is achieved bandwidth over the "
        "machine's measured bandwidth."
    ),
    kernels=(
        KernelContract(
            name="saxpy",
            inputs=("x", "y", "a", "N"),
            outputs=("y_out",),
            grid="(ceil_div(N, 256) * 256, 1, 1)",
            threadgroup="(256, 1, 1)",
            in_place=(("y_out", "y"),),
        ),
    ),
    sizes={
        "smoke": (Size("100003", {"N": 100003}),),
        "in-dist": (
            Size("1M", {"N": 1 << 20}),
            Size("16M", {"N": 1 << 24}),
            Size("64M", {"N": 1 << 26}),
        ),
        "held-out": (Size("4M", {"N": 1 << 22}),),
    },
    defaults={"N": 1 << 20},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=lambda p: 12.0 * p["N"],
    flops=lambda p: 2.0 * p["N"],
    working_set=lambda p: 12.0 * p["N"],
    bound="bandwidth",
    validate_size=validate_size,
    chain={"y": "y"},
    regime="R0 streaming (DRAM saturation)",
    check="max abs of y",
    tolerance="1e-5 * max(1, max|ref|)",
    model="12 N bytes",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
