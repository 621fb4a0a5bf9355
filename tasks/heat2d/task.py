"""heat2d: 2-D explicit heat equation, 5-point stencil, Dirichlet edges (Metal-Sci task 2)."""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng

ALPHA = 0.20


def make_inputs(p, seed=None):
    u0 = input_rng(seed, 0xC0DE).uniform(0.0, 1.0, size=(p["NY"], p["NX"]))
    u0 = u0.astype(np.float32)
    u0[0, :] = 0.0
    u0[-1, :] = 0.0
    u0[:, 0] = 0.0
    u0[:, -1] = 0.0
    return {
        "u_in": u0,
        "NX": np.array(p["NX"], dtype=np.uint32),
        "NY": np.array(p["NY"], dtype=np.uint32),
        "alpha": np.array(ALPHA, dtype=np.float32),
    }


def smooth_inputs(p, seed=None):
    """A smooth field instead of white noise: a few random sine modes, all
    non-negative, with the same zero edges (the diffusion's slow regime)."""
    inputs = make_inputs(p, seed)
    rng = input_rng(seed, 0x5E00)
    y = np.linspace(0.0, np.pi, p["NY"])[:, None]
    x = np.linspace(0.0, np.pi, p["NX"])[None, :]
    field = np.zeros((p["NY"], p["NX"]))
    for _ in range(4):
        ky, kx = rng.integers(1, 6, size=2)
        field += rng.uniform(0.2, 1.0) * np.sin(ky * y) * np.sin(kx * x)
    field = np.abs(field) / max(float(np.abs(field).max()), 1e-12)
    field[0, :] = field[-1, :] = field[:, 0] = field[:, -1] = 0.0
    inputs["u_in"] = field.astype(np.float32)
    return inputs


def hot_spots_inputs(p, seed=None):
    """A cold plate with a few hot Gaussian spots: mostly zeros, sharp peaks."""
    inputs = make_inputs(p, seed)
    rng = input_rng(seed, 0x5E01)
    j, i = np.mgrid[0 : p["NY"], 0 : p["NX"]]
    field = np.zeros((p["NY"], p["NX"]))
    for _ in range(3):
        cj, ci = rng.uniform(0.2, 0.8) * p["NY"], rng.uniform(0.2, 0.8) * p["NX"]
        width = rng.uniform(0.02, 0.08) * min(p["NX"], p["NY"]) + 1.0
        field += np.exp(-((j - cj) ** 2 + (i - ci) ** 2) / (2.0 * width**2))
    field[0, :] = field[-1, :] = field[:, 0] = field[:, -1] = 0.0
    inputs["u_in"] = field.astype(np.float32)
    return inputs


DISTRIBUTIONS = {"smooth": smooth_inputs, "hot-spots": hot_spots_inputs}


def draw_held_out(rng):
    """A grid near the listed held-out's (768x768x75), off its grid, not square
    in general, on one of the other initial fields."""
    return {
        "NX": int(rng.integers(560, 1000)),
        "NY": int(rng.integers(560, 1000)),
        "n_steps": int(rng.integers(40, 90)),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # n_steps dispatches; each step's output feeds the next (Metal-Sci's A/B ping-pong).
    u = inp["u_in"]
    shape = (p["NY"], p["NX"])
    for _ in range(p["n_steps"]):
        step_inputs = dict(inp, u_in=u)
        u = launch("heat_step", step_inputs, outputs={"u_out": (shape, "float32")})["u_out"]
    return {"u": u}


def validate_size(p):
    if p["NX"] < 1 or p["NY"] < 1 or p["NX"] * p["NY"] >= 2**31:
        raise ValueError("NX and NY must be >= 1 with NX*NY < 2^31")
    if p["n_steps"] < 1:
        raise ValueError("n_steps must be >= 1")


TASK = Task(
    name="heat2d",
    description=(
        "Advance the 2-D heat equation with an explicit 5-point stencil on an NY x NX "
        "fp32 grid (row-major, i = column = fast axis = x, j = row = y), alpha = 0.20: "
        "u_out = u + alpha * (u[j,i-1] + u[j,i+1] + u[j-1,i] + u[j+1,i] - 4 u[j,i]) for "
        "interior cells; boundary cells (i or j on an edge) copy u_in to u_out. The host "
        "runs n_steps dispatches, each reading the previous step's output. Memory bound: "
        "8 bytes per cell per step (one read, one write; neighbours assumed cached)."
    ),
    kernels=(
        KernelContract(
            name="heat_step",
            inputs=("u_in", "NX", "NY", "alpha"),
            outputs=("u_out",),
            grid="(ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)",
            threadgroup="(16, 16, 1)",
        ),
    ),
    sizes={
        "smoke": (Size("67x45x5", {"NX": 67, "NY": 45, "n_steps": 5}),),
        "in-dist": (
            Size("256x256x50", {"NX": 256, "NY": 256, "n_steps": 50}),
            Size("512x512x100", {"NX": 512, "NY": 512, "n_steps": 100}),
            Size("1024x1024x50", {"NX": 1024, "NY": 1024, "n_steps": 50}),
        ),
        "held-out": (Size("768x768x75", {"NX": 768, "NY": 768, "n_steps": 75}),),
    },
    defaults={"NX": 256, "NY": 256, "n_steps": 50},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=lambda p: 8.0 * p["NX"] * p["NY"] * p["n_steps"],
    flops=lambda p: 7.0 * p["NX"] * p["NY"] * p["n_steps"],
    working_set=lambda p: 8.0 * p["NX"] * p["NY"],
    bound="bandwidth",
    validate_size=validate_size,
    chain={"u_in": "u"},
    regime="R1 stencil (2-D, ping-pong)",
    check="max abs of the field",
    tolerance="1e-4 + 1e-5 * max|ref|",
    model="8 NX NY n_steps bytes",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
