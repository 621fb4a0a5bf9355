"""wave3d: 3-D acoustic wave equation, leapfrog in time, 7-point Laplacian (Metal-Sci task 3).

u_next = 2 u_curr - u_prev + alpha * (sum of the six face neighbours of u_curr
- 6 u_curr) on an (NZ, NY, NX) fp32 grid, alpha = (c dt / dx)^2 = 0.18; every
face cell (i, j or k at 0 or N-1) sets u_next = u_curr. The initial state is a
Gaussian bump with zero velocity (u_prev = u_curr = u0).

Where the MLX-native pipeline differs from Metal-Sci: Metal-Sci rotates three
buffers (prev, curr, next) = buf[s mod 3], buf[(s+1) mod 3], buf[(s+2) mod 3]
and writes `next` in place. Here `wave_step` reads the inputs `u_prev`,
`u_curr` and writes a fresh output `u_next`; the host passes (u_curr, u_next)
as the next step's (u_prev, u_curr). The data each step reads and writes is
the same, so the byte model (12 bytes per cell per step: read u_prev, read
u_curr, write u_next) is Metal-Sci's unchanged. The checked result is the
final u_curr (Metal-Sci's buf[(n+1) mod 3]); run also returns the final u_prev
(unchecked), which a chained run needs with it.
"""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng, perturbed

ALPHA = 0.18


def gaussian_bump(nx, ny, nz):
    # Computed in fp32: centre (N_a - 1)/2 per axis, sigma = 0.1 * min(NX, NY, NZ).
    f = np.float32
    sigma = f(0.1) * f(min(nx, ny, nz))
    x = np.arange(nx, dtype=f) - f((nx - 1) / 2)
    y = np.arange(ny, dtype=f) - f((ny - 1) / 2)
    z = np.arange(nz, dtype=f) - f((nz - 1) / 2)
    r2 = z[:, None, None] ** 2 + y[None, :, None] ** 2 + x[None, None, :] ** 2
    u = np.exp(-r2 / (f(2.0) * sigma * sigma)).astype(f)
    u[0, :, :] = 0.0
    u[-1, :, :] = 0.0
    u[:, 0, :] = 0.0
    u[:, -1, :] = 0.0
    u[:, :, 0] = 0.0
    u[:, :, -1] = 0.0
    return u


def make_inputs(p, seed=None):
    u0 = perturbed(gaussian_bump(p["NX"], p["NY"], p["NZ"]), seed, 0x3A7E)
    if seed is not None:
        # The bump is ~1e-13 next to the faces, where a wrong update would hide
        # under the tolerance: a secret seed also adds 0.05 U(0, 1) everywhere
        # inside the zero faces.
        rest = input_rng(seed, 0x3A7F).uniform(0.0, 0.05, size=u0.shape).astype(np.float32)
        rest[[0, -1], :, :] = 0.0
        rest[:, [0, -1], :] = 0.0
        rest[:, :, [0, -1]] = 0.0
        u0 = (u0 + rest).astype(np.float32)
    return {
        "u_prev": u0,
        "u_curr": u0.copy(),  # zero initial velocity
        "NX": np.array(p["NX"], dtype=np.uint32),
        "NY": np.array(p["NY"], dtype=np.uint32),
        "NZ": np.array(p["NZ"], dtype=np.uint32),
        "alpha": np.array(ALPHA, dtype=np.float32),
    }


def _at_rest(p, seed, u):
    """make_inputs' inputs with the field `u` (faces zeroed) at rest."""
    u = u.astype(np.float32)
    u[[0, -1], :, :] = 0.0
    u[:, [0, -1], :] = 0.0
    u[:, :, [0, -1]] = 0.0
    return dict(make_inputs(p, seed), u_prev=u, u_curr=u.copy())


def modes_inputs(p, seed=None):
    """Three standing modes sin(a pi x) sin(b pi y) sin(c pi z) (a, b, c in
    1..6) instead of a bump: the whole box oscillates, faces to centre."""
    rng = input_rng(seed, 0x3A01)
    nx, ny, nz = p["NX"], p["NY"], p["NZ"]
    x = np.linspace(0.0, np.pi, nx)[None, None, :]
    y = np.linspace(0.0, np.pi, ny)[None, :, None]
    z = np.linspace(0.0, np.pi, nz)[:, None, None]
    u = np.zeros((nz, ny, nx))
    for _ in range(3):
        a, b, c = rng.integers(1, 7, size=3)
        u = u + rng.uniform(-1.0, 1.0) * np.sin(a * x) * np.sin(b * y) * np.sin(c * z)
    return _at_rest(p, seed, u)


def pulses_inputs(p, seed=None):
    """Six narrow Gaussian pulses of either sign at random places over a
    0.05 U(0, 1) background (so no cell near a face is ~0, where a wrong
    update would hide): wavefronts that cross and reflect off the faces."""
    rng = input_rng(seed, 0x3A02)
    nx, ny, nz = p["NX"], p["NY"], p["NZ"]
    k, j, i = np.ogrid[0:nz, 0:ny, 0:nx]
    u = rng.uniform(0.0, 0.05, size=(nz, ny, nx))
    for _ in range(6):
        cx, cy, cz = rng.uniform(0.15, 0.85, size=3) * (nx, ny, nz)
        width = rng.uniform(0.03, 0.08) * min(nx, ny, nz) + 0.7
        r2 = (i - cx) ** 2 + (j - cy) ** 2 + (k - cz) ** 2
        u = u + rng.choice(np.array([-1.0, 1.0])) * np.exp(-r2 / (2.0 * width * width))
    return _at_rest(p, seed, u)


DISTRIBUTIONS = {"modes": modes_inputs, "pulses": pulses_inputs}


def draw_held_out(rng):
    """A box near the listed held-out's 128^3 (not a cube in general) with 12
    to 28 steps (it has 20), off the listed values and the power-of-two grid."""
    return {
        "NX": int(rng.integers(96, 170)),
        "NY": int(rng.integers(96, 170)),
        "NZ": int(rng.integers(96, 170)),
        "n_steps": int(rng.integers(12, 29)),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # Metal-Sci's three-buffer rotation: the step's (curr, next) become the next
    # step's (prev, curr). The answer is the last u_curr; u_prev, the field one
    # step before it, completes the state a chained run starts from.
    prev, curr = inp["u_prev"], inp["u_curr"]
    shape = (p["NZ"], p["NY"], p["NX"])
    for _ in range(p["n_steps"]):
        step_inputs = dict(inp, u_prev=prev, u_curr=curr)
        nxt = launch("wave_step", step_inputs, outputs={"u_next": (shape, "float32")})["u_next"]
        prev, curr = curr, nxt
    return {"u": curr, "u_prev": prev}


def validate_size(p):
    if min(p["NX"], p["NY"], p["NZ"]) < 1 or p["NX"] * p["NY"] * p["NZ"] >= 2**31:
        raise ValueError("NX, NY and NZ must be >= 1 with NX*NY*NZ < 2^31")
    if p["n_steps"] < 1:
        raise ValueError("n_steps must be >= 1")


def _cube(n, steps):
    return Size(f"{n}x{n}x{n}x{steps}", {"NX": n, "NY": n, "NZ": n, "n_steps": steps})


TASK = Task(
    name="wave3d",
    description=(
        "Advance the 3-D acoustic wave equation (leapfrog in time) on an NZ x NY x NX fp32 "
        "grid, row-major, idx = (k*NY + j)*NX + i, i = x = fast axis, alpha = 0.18: "
        "u_next = 2 u_curr - u_prev + alpha * (u_curr[i-1] + u_curr[i+1] + u_curr[j-1] + "
        "u_curr[j+1] + u_curr[k-1] + u_curr[k+1] - 6 u_curr) for interior cells; every face "
        "cell (i, j or k equal to 0 or N-1) sets u_next = u_curr. The host runs n_steps "
        "dispatches; each step's (u_curr, u_next) become the next step's (u_prev, u_curr). "
        "Memory bound: 12 bytes per cell per step (read u_prev, read u_curr, write u_next; "
        "neighbours assumed cached). 2.5-D blocking (an XY tile in threadgroup memory "
        "marching in z with a register window) is the canonical optimisation."
    ),
    kernels=(
        KernelContract(
            name="wave_step",
            inputs=("u_prev", "u_curr", "NX", "NY", "NZ", "alpha"),
            outputs=("u_next",),
            grid="(ceil_div(NX, 8) * 8, ceil_div(NY, 8) * 8, ceil_div(NZ, 4) * 4)",
            threadgroup="(8, 8, 4)",
        ),
    ),
    sizes={
        "smoke": (Size("23x17x13x5", {"NX": 23, "NY": 17, "NZ": 13, "n_steps": 5}),),
        "in-dist": (_cube(64, 30), _cube(160, 20), _cube(192, 15)),
        "held-out": (_cube(128, 20),),
    },
    defaults={"NX": 64, "NY": 64, "NZ": 64, "n_steps": 30},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=lambda p: 12.0 * p["NX"] * p["NY"] * p["NZ"] * p["n_steps"],
    flops=lambda p: 10.0 * p["NX"] * p["NY"] * p["NZ"] * p["n_steps"],
    working_set=lambda p: 12.0 * p["NX"] * p["NY"] * p["NZ"],
    bound="bandwidth",
    validate_size=validate_size,
    chain={"u_prev": "u_prev", "u_curr": "u"},
    regime="R1 stencil (3-D, leapfrog, 3 buffers)",
    check="max abs of the final u_curr",
    tolerance="1e-4 + 1e-5 * max|ref|",
    model="12 NX NY NZ n_steps bytes",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
