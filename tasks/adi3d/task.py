"""adi3d: 3-D heat equation by LOD-ADI, one tridiagonal sweep per axis (Metal-Sci task 11).

One timestep = three implicit 1-D solves in sequence, (I - mu Dxx) v1 = u,
(I - mu Dyy) v2 = v1, (I - mu Dzz) u' = v2 with mu = dt/h^2 = 0.5, each a
set of independent tridiagonal systems (one per line along the active axis,
Dirichlet endpoints copied). Face rule: a line is solved only if both of its
off-axis indices are strictly interior; other lines copy u_in to u_out, so
the six faces keep their initial zeros.

Differences from Metal-Sci's pipeline:
- each sweep writes a fresh output that the next sweep reads (Metal-Sci
  ping-pongs two buffers A/B with a sweep counter); the result is the last
  sweep's output.
- Metal-Sci's host raises if a pipeline's max threads per threadgroup is
  below 32; MLX reports no such limit before launch.
Launch (host-fixed in Metal-Sci, the default here): threadgroup (32, 1, 1),
grids NOT padded: adi_x (NY, NZ, 1) with gid = (j, k), adi_y (NX, NZ, 1)
with gid = (i, k), adi_z (NX, NY, 1) with gid = (i, j); the last
threadgroup of a row may be partial.
Byte model (Metal-Sci's): 24 B per cell per step (3 sweeps x 4 B read +
4 B write); the seed streams d' through u_out and so moves about twice that.
"""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng, perturbed

MU = 0.5
KERNELS = ("adi_x", "adi_y", "adi_z")


def make_inputs(p, seed=None):
    nx, ny, nz = p["NX"], p["NY"], p["NZ"]
    sigma = 0.15 * float(nx * ny * nz) ** (1.0 / 3.0)
    z = (np.arange(nz) - (nz - 1) / 2.0)[:, None, None]
    y = (np.arange(ny) - (ny - 1) / 2.0)[None, :, None]
    x = (np.arange(nx) - (nx - 1) / 2.0)[None, None, :]
    u = np.exp(-(x * x + y * y + z * z) / (2.0 * sigma * sigma)).astype(np.float32)
    u[0, :, :] = 0.0
    u[-1, :, :] = 0.0
    u[:, 0, :] = 0.0
    u[:, -1, :] = 0.0
    u[:, :, 0] = 0.0
    u[:, :, -1] = 0.0
    return {
        "u_in": perturbed(u, seed, 0xAD13D),
        "NX": np.array(nx, dtype=np.uint32),
        "NY": np.array(ny, dtype=np.uint32),
        "NZ": np.array(nz, dtype=np.uint32),
        "mu": np.array(MU, dtype=np.float32),
    }


def _with_field(p, seed, u):
    """make_inputs' inputs with u_in replaced by `u` (float32, faces zeroed)."""
    u = u.astype(np.float32)
    u[[0, -1], :, :] = 0.0
    u[:, [0, -1], :] = 0.0
    u[:, :, [0, -1]] = 0.0
    return dict(make_inputs(p, seed), u_in=u)


def bumps_inputs(p, seed=None):
    """Four Gaussian bumps of either sign, off centre and of different widths,
    instead of one centred bump: the field has negative parts and steep sides."""
    rng = input_rng(seed, 0xAD01)
    nx, ny, nz = p["NX"], p["NY"], p["NZ"]
    k, j, i = np.ogrid[0:nz, 0:ny, 0:nx]
    u = np.zeros((nz, ny, nx))
    for _ in range(4):
        cx, cy, cz = rng.uniform(0.2, 0.8, size=3) * (nx, ny, nz)
        width = rng.uniform(0.04, 0.12) * (nx + ny + nz) / 3.0 + 0.5
        sign = rng.choice(np.array([-1.0, 1.0]))
        r2 = (i - cx) ** 2 + (j - cy) ** 2 + (k - cz) ** 2
        u += sign * rng.uniform(0.5, 1.0) * np.exp(-r2 / (2.0 * width * width))
    return _with_field(p, seed, u)


def noise_inputs(p, seed=None):
    """White noise U(-1, 1) inside the zero faces: every wavelength down to the
    grid's, which the implicit sweeps damp hardest (the smooth bump has none)."""
    u = input_rng(seed, 0xAD02).uniform(-1.0, 1.0, size=(p["NZ"], p["NY"], p["NX"]))
    return _with_field(p, seed, u)


DISTRIBUTIONS = {"bumps": bumps_inputs, "noise": noise_inputs}


def draw_held_out(rng):
    """A prism near the listed held-out's 256x192x128 with 6 to 14 steps (it
    has 10), each side off the listed values and the power-of-two grid."""
    return {
        "NX": int(rng.integers(180, 320)),
        "NY": int(rng.integers(140, 240)),
        "NZ": int(rng.integers(90, 170)),
        "n_steps": int(rng.integers(6, 15)),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # Per timestep: x, y, z sweeps back to back, each reading the previous output.
    u = inp["u_in"]
    shape = (p["NZ"], p["NY"], p["NX"])
    for _ in range(p["n_steps"]):
        for name in KERNELS:
            u = launch(name, dict(inp, u_in=u), outputs={"u_out": (shape, "float32")})["u_out"]
    return {"u": u}


def validate_size(p):
    if min(p["NX"], p["NY"], p["NZ"]) < 3 or p["NX"] * p["NY"] * p["NZ"] >= 2**31:
        raise ValueError("NX, NY and NZ must each be >= 3 with NX*NY*NZ < 2^31")
    if p["n_steps"] < 1:
        raise ValueError("n_steps must be >= 1")


def _size(nx, ny, nz, steps):
    return Size(f"{nx}x{ny}x{nz}x{steps}", {"NX": nx, "NY": ny, "NZ": nz, "n_steps": steps})


_LAUNCH = {"adi_x": "(NY, NZ, 1)", "adi_y": "(NX, NZ, 1)", "adi_z": "(NX, NY, 1)"}

TASK = Task(
    name="adi3d",
    description=(
        "3-D heat equation by LOD-ADI on an NZ x NY x NX fp32 grid (idx = (k*NY + j)*NX + i, "
        "i = x fast), mu = 0.5. One timestep = three kernels run in order, each reading the "
        "previous output: adi_x, adi_y, adi_z solve (I - mu D2) x = r along lines of x, y, z. "
        "Per line of length n: x_0 = r_0, x_{n-1} = r_{n-1} (Dirichlet, copied); for "
        "1 <= i <= n-2: -mu x_{i-1} + (1 + 2 mu) x_i - mu x_{i+1} = r_i (Thomas: a = c = -mu, "
        "b = 1 + 2 mu). Face rule: a line is solved only if both off-axis indices are strictly "
        "interior; lines on a face copy u_in to u_out. Launch, one thread per line, "
        "threadgroup (32, 1, 1), grids not padded: adi_x (NY, NZ, 1) with gid = (j, k), adi_y "
        "(NX, NZ, 1) with gid = (i, k), adi_z (NX, NY, 1) with gid = (i, j). The host runs "
        "n_steps timesteps. Memory bound: 24 bytes per cell per step (3 sweeps x 4 B read + "
        "4 B write)."
    ),
    kernels=tuple(
        KernelContract(
            name=k,
            inputs=("u_in", "NX", "NY", "NZ", "mu"),
            outputs=("u_out",),
            grid=_LAUNCH[k],
            threadgroup="(32, 1, 1)",
        )
        for k in KERNELS
    ),
    sizes={
        "smoke": (_size(21, 13, 10, 3),),
        "in-dist": (_size(64, 64, 64, 20), _size(96, 96, 96, 15), _size(128, 128, 128, 10)),
        "held-out": (_size(256, 192, 128, 10),),
    },
    defaults={"NX": 64, "NY": 64, "NZ": 64, "n_steps": 20},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=lambda p: 24.0 * p["NX"] * p["NY"] * p["NZ"] * p["n_steps"],
    # Thomas with precomputed c': ~5 FLOPs per cell per sweep, 3 sweeps.
    flops=lambda p: 15.0 * p["NX"] * p["NY"] * p["NZ"] * p["n_steps"],
    working_set=lambda p: 8.0 * p["NX"] * p["NY"] * p["NZ"],
    bound="bandwidth",
    validate_size=validate_size,
    chain={"u_in": "u"},
    regime="R7 wavefront (tridiagonal lines per axis)",
    check="max abs of the field",
    tolerance="1e-3 + 1e-3 * max|ref|",
    model="24 NX NY NZ n_steps bytes",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
