"""lbm: D2Q9 lattice Boltzmann, BGK collision, fused pull-stream + collide (Metal-Sci task 6).

Per cell and step: pull f_k from the neighbour (i - CX_k, j - CY_k) with
periodic wrap in both axes, form rho, u, v, then relax towards the
equilibrium with 1/tau (tau = 0.8). The distributions are SoA fp32,
f[k*NX*NY + j*NX + i] (shape (9, NY, NX)), mandatory for f_in / f_out; a
kernel may use any layout internally. Initial state: a Gaussian density bump
at rest, f_k = W_k * rho.

Where the MLX-native pipeline differs from Metal-Sci: nothing of substance.
Metal-Sci ping-pongs two buffers A/B; here each step's fresh output `f_out`
is the next step's input `f_in`, and the checked result is the last f_out
(all 9 fields). The byte model is Metal-Sci's: 72 bytes per cell per step
(9 float reads + 9 float writes).
"""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng, perturbed

TAU = 0.8
W = (
    4.0 / 9.0,
    1.0 / 9.0,
    1.0 / 9.0,
    1.0 / 9.0,
    1.0 / 9.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
    1.0 / 36.0,
)


CX = (0, 1, 0, -1, 0, 1, -1, -1, 1)
CY = (0, 0, 1, 0, -1, 1, 1, -1, -1)


def make_inputs(p, seed=None):
    nx, ny = p["NX"], p["NY"]
    # Density bump computed in fp64, cast to fp32; zero velocity, so f_k = W_k rho.
    cx, cy = (nx - 1) / 2.0, (ny - 1) / 2.0
    sigma = 0.15 * min(nx, ny)
    x = np.arange(nx, dtype=np.float64)[None, :]
    y = np.arange(ny, dtype=np.float64)[:, None]
    rho = 1.0 + 0.05 * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2.0 * sigma**2))
    rho = perturbed(rho, seed, 0x1B3, amplitude=0.01).astype(np.float32)
    w = np.array(W, dtype=np.float32)
    f = (w[:, None, None] * rho[None, :, :]).astype(np.float32)
    return {
        "f_in": f,
        "NX": np.array(nx, dtype=np.uint32),
        "NY": np.array(ny, dtype=np.uint32),
        "tau": np.array(TAU, dtype=np.float32),
    }


def _equilibrium(p, seed, rho, u, v):
    """make_inputs' inputs with f_in the BGK equilibrium of the fields rho,
    u, v (computed in fp64, stored fp32): a fluid in motion."""
    usq = u * u + v * v
    f = np.empty((9, p["NY"], p["NX"]))
    for k in range(9):
        cu = CX[k] * u + CY[k] * v
        f[k] = W[k] * rho * (1.0 + 3.0 * cu + 4.5 * cu * cu - 1.5 * usq)
    return dict(make_inputs(p, seed), f_in=f.astype(np.float32))


def shear_layer_inputs(p, seed=None):
    """A doubly periodic shear layer (two tanh jets in x, speed 0.03 to 0.06)
    with a small sinusoidal v kick that rolls it up into vortices, instead
    of a density bump at rest."""
    rng = input_rng(seed, 0x1B01)
    nx, ny = p["NX"], p["NY"]
    x = np.arange(nx)[None, :] / nx
    y = np.arange(ny)[:, None] / ny
    speed, width = rng.uniform(0.03, 0.06), rng.uniform(0.03, 0.08)
    u = speed * np.where(y <= 0.5, np.tanh((y - 0.25) / width), np.tanh((0.75 - y) / width))
    phase = rng.uniform(0.0, 2.0 * np.pi)
    v = 0.05 * speed * np.sin(2.0 * np.pi * x + phase) * np.ones_like(y)
    return _equilibrium(p, seed, np.ones((ny, nx)), u, v)


def vortices_inputs(p, seed=None):
    """A Taylor-Green vortex array (m x n cells, m, n in 1..4, peak speed
    0.02 to 0.05) with its pressure as a density dip at the vortex centres."""
    rng = input_rng(seed, 0x1B02)
    nx, ny = p["NX"], p["NY"]
    kx = 2.0 * np.pi * rng.integers(1, 5) * np.arange(nx)[None, :] / nx
    ky = 2.0 * np.pi * rng.integers(1, 5) * np.arange(ny)[:, None] / ny
    speed = rng.uniform(0.02, 0.05)
    u = speed * np.cos(kx) * np.sin(ky)
    v = -speed * np.sin(kx) * np.cos(ky)
    rho = 1.0 - 0.75 * speed * speed * (np.cos(2.0 * kx) + np.cos(2.0 * ky))
    return _equilibrium(p, seed, rho, u, v)


DISTRIBUTIONS = {"shear-layer": shear_layer_inputs, "vortices": vortices_inputs}


def draw_held_out(rng):
    """A grid near the listed held-out's 192x192 (not square in general) with
    50 to 100 steps (it has 75), off the listed values and the power-of-two
    grid, on one of the flows in motion."""
    return {
        "NX": int(rng.integers(140, 250)),
        "NY": int(rng.integers(140, 250)),
        "n_steps": int(rng.integers(50, 101)),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # n_steps dispatches; each step's f_out feeds the next (Metal-Sci's A/B ping-pong).
    f = inp["f_in"]
    shape = (9, p["NY"], p["NX"])
    for _ in range(p["n_steps"]):
        f = launch("lbm_step", dict(inp, f_in=f), outputs={"f_out": (shape, "float32")})["f_out"]
    return {"f": f}


def validate_size(p):
    if p["NX"] < 1 or p["NY"] < 1 or 9 * p["NX"] * p["NY"] >= 2**31:
        raise ValueError("NX and NY must be >= 1 with 9*NX*NY < 2^31")
    if p["n_steps"] < 1:
        raise ValueError("n_steps must be >= 1")


def _square(n, steps):
    return Size(f"{n}x{n}x{steps}", {"NX": n, "NY": n, "n_steps": steps})


TASK = Task(
    name="lbm",
    description=(
        "Advance a D2Q9 lattice Boltzmann fluid (BGK, tau = 0.8, periodic in both axes) on "
        "an NY x NX grid, one fused pull-stream + collide step per dispatch. Directions "
        "k = 0..8: CX = {0,1,0,-1,0,1,-1,-1,1}, CY = {0,0,1,0,-1,1,1,-1,-1}, "
        "W = {4/9, 1/9 x4, 1/36 x4}. Per cell: f_k = f_in[k, (j-CY_k) mod NY, (i-CX_k) mod NX]; "
        "rho = sum f_k, u = sum CX_k f_k / rho, v = sum CY_k f_k / rho; cu = CX_k u + CY_k v; "
        "f_eq = W_k rho (1 + 3 cu + 4.5 cu^2 - 1.5 (u^2 + v^2)); "
        "f_out[k] = f_k - (1/tau)(f_k - f_eq). f_in and f_out are SoA fp32, "
        "f[k*NX*NY + j*NX + i] (i = x = fast axis); the internal layout is free. The host "
        "runs n_steps dispatches, each reading the previous f_out. Memory bound: 72 bytes "
        "per cell per step (9 float reads + 9 float writes)."
    ),
    kernels=(
        KernelContract(
            name="lbm_step",
            inputs=("f_in", "NX", "NY", "tau"),
            outputs=("f_out",),
            grid="(ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)",
            threadgroup="(16, 16, 1)",
        ),
    ),
    sizes={
        "smoke": (Size("37x23x7", {"NX": 37, "NY": 23, "n_steps": 7}),),
        "in-dist": (_square(64, 50), _square(128, 100), _square(256, 100)),
        "held-out": (_square(192, 75),),
    },
    defaults={"NX": 64, "NY": 64, "n_steps": 50},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=lambda p: 72.0 * p["NX"] * p["NY"] * p["n_steps"],
    # Rough count per cell: moments 27, equilibrium and relaxation ~13 per direction.
    flops=lambda p: 150.0 * p["NX"] * p["NY"] * p["n_steps"],
    working_set=lambda p: 72.0 * p["NX"] * p["NY"],
    bound="bandwidth",
    validate_size=validate_size,
    chain={"f_in": "f"},
    regime="R3 multi-field (D2Q9, SoA, ping-pong)",
    check="max abs over all 9 fields",
    tolerance="5e-4 + 1e-4 * max|ref|",
    model="72 NX NY n_steps bytes",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
