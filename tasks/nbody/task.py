"""nbody: all-pairs softened gravity, semi-implicit Euler (Metal-Sci task 4).

Each of the N bodies sums the pull of every body (itself included: its term
is zero because d = 0 and eps > 0), a_i = G sum_j m_j d_ij / (|d_ij|^2 + eps^2)^1.5
with d_ij = r_j - r_i, then v' = v + a dt and r' = r + v' dt (Metal-Sci calls
it "leapfrog"; it is symplectic Euler with one force evaluation per step).
G = 1, eps = 0.05, dt = 1e-3, 10 steps.

Where the MLX-native pipeline differs from Metal-Sci: nothing of substance.
Positions and velocities are float32 arrays of shape (N, 4) (w = 0), which
MLX binds as `const device float*`; kernel bodies cast them to float4. The
pos/vel pairs ping-pong as in Metal-Sci (each step's outputs are the next
step's inputs), but MLX hands every step fresh output arrays instead of
Metal-Sci's two preallocated A/B buffers. Only the final positions' xyz are
checked; run also returns the full final pos/vel (pos_state, vel_state,
unchecked) that a chained run starts from. The scored model is Metal-Sci's:
20 FLOPs per ordered pair (self pairs included) per step against peak FP32;
the byte count (pos, vel in and out plus mass, once per step) only matters
for the working-set level.
"""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng

G = 1.0
EPS = 0.05
DT = 1e-3


def make_inputs(p, seed=None):
    n = p["N"]
    rng = input_rng(seed, 0xCAFE)
    # Draw order as Metal-Sci: positions, velocities, masses (float64, then fp32).
    pos = rng.uniform(-1.0, 1.0, size=(n, 3)).astype(np.float32)
    vel = rng.uniform(-0.01, 0.01, size=(n, 3)).astype(np.float32)
    mass = rng.uniform(0.5, 1.5, size=n).astype(np.float32)
    pos4 = np.zeros((n, 4), dtype=np.float32)
    vel4 = np.zeros((n, 4), dtype=np.float32)
    pos4[:, :3] = pos
    vel4[:, :3] = vel
    return {
        "pos_in": pos4,
        "vel_in": vel4,
        "mass": mass,
        "N": np.array(n, dtype=np.uint32),
        "dt": np.array(DT, dtype=np.float32),
        "eps": np.array(EPS, dtype=np.float32),
        "G": np.array(G, dtype=np.float32),
    }


def plummer_inputs(p, seed=None):
    """Bodies in a Plummer sphere (scale radius 0.3, the outer 1 % of its mass
    cut off at ~3.7) instead of a uniform cube: a dense core where forces are
    large and close pairs feel the softening, and a sparse halo. Masses and
    velocities as make_inputs'."""
    inputs = make_inputs(p, seed)
    rng = input_rng(seed, 0xCA01)
    n = p["N"]
    # Radius from the inverse of the enclosed mass fraction m = r^3 / (r^2 + a^2)^1.5.
    m = rng.uniform(0.0, 0.99, size=n)
    r = 0.3 / np.sqrt(np.maximum(m, 1e-12) ** (-2.0 / 3.0) - 1.0)
    direction = rng.standard_normal((n, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    inputs["pos_in"][:, :3] = (r[:, None] * direction).astype(np.float32)
    return inputs


def heavy_tailed_inputs(p, seed=None):
    """Pareto masses (index 1.5, minimum 0.5, capped at 20) in make_inputs'
    uniform cube: a few heavy bodies dominate the pull of many light ones."""
    inputs = make_inputs(p, seed)
    rng = input_rng(seed, 0xCA02)
    mass = 0.5 * (1.0 - rng.uniform(0.0, 1.0, size=p["N"])) ** (-1.0 / 1.5)
    inputs["mass"] = np.minimum(mass, 20.0).astype(np.float32)
    return inputs


DISTRIBUTIONS = {"plummer": plummer_inputs, "heavy-tailed": heavy_tailed_inputs}


def draw_held_out(rng):
    """N near the listed held-out's 512 and a step count near its 10, both off
    the listed values (the steps 9 and 10) and the power-of-two grid (8)."""
    return {
        "N": int(rng.integers(400, 630)),
        "n_steps": int(rng.choice(np.array([6, 7, 11, 12, 13]))),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # n_steps dispatches; pos and vel ping-pong together (step k's outputs feed step k+1).
    shape = (p["N"], 4)
    pos, vel = inp["pos_in"], inp["vel_in"]
    for _ in range(p["n_steps"]):
        out = launch(
            "nbody_step",
            dict(inp, pos_in=pos, vel_in=vel),
            outputs={"pos_out": (shape, "float32"), "vel_out": (shape, "float32")},
        )
        pos, vel = out["pos_out"], out["vel_out"]
    # Only xyz of the final positions are checked; the full state feeds a chained run.
    return {"pos": pos[:, :3], "pos_state": pos, "vel_state": vel}


def validate_size(p):
    # N >= 8 keeps `mass` a device buffer (MLX binds arrays of < 8 elements as constant).
    if not 8 <= p["N"] < 2**24:
        raise ValueError("N must be in [8, 2^24)")
    if p["n_steps"] < 1:
        raise ValueError("n_steps must be >= 1")


def _size(n, steps):
    return Size(f"N{n}x{steps}", {"N": n, "n_steps": steps})


TASK = Task(
    name="nbody",
    description=(
        "Advance N gravitating bodies by n_steps steps of all-pairs softened gravity "
        "(G = 1, eps = 0.05, dt = 1e-3): for each body i, a_i = G * sum over ALL j "
        "(j = i included; its term is 0) of m_j * d / (|d|^2 + eps^2)^1.5 with "
        "d = r_j - r_i; then v' = v + a*dt and r' = r + v'*dt (semi-implicit Euler). "
        "pos/vel are float4 per body (xyz, w = 0) stored as float32 (N, 4) arrays; the "
        "host ping-pongs (pos_in, vel_in) -> (pos_out, vel_out) for n_steps dispatches. "
        "Only the final positions' xyz are checked. Compute bound: 20 FLOPs per ordered "
        "pair per step (N^2 pairs)."
    ),
    kernels=(
        KernelContract(
            name="nbody_step",
            inputs=("pos_in", "vel_in", "mass", "N", "dt", "eps", "G"),
            outputs=("pos_out", "vel_out"),
            grid="(ceil_div(N, 128) * 128, 1, 1)",
            threadgroup="(128, 1, 1)",
        ),
    ),
    sizes={
        "smoke": (_size(397, 9),),
        "in-dist": (_size(256, 10), _size(1024, 10), _size(2048, 10)),
        "held-out": (_size(512, 10),),
    },
    defaults={"N": 256, "n_steps": 10},
    make_inputs=make_inputs,
    run=run,
    # Per step: read pos, vel (16 B each) and mass (4 B), write pos, vel (16 B each);
    # the O(N^2) re-reads of pos/mass are assumed cached.
    bytes_moved=lambda p: 68.0 * p["N"] * p["n_steps"],
    flops=lambda p: 20.0 * p["N"] * p["N"] * p["n_steps"],
    working_set=lambda p: 68.0 * p["N"],
    bound="compute",
    validate_size=validate_size,
    chain={"pos_in": "pos_state", "vel_in": "vel_state"},
    regime="R2 compute (all-pairs)",
    check="max abs of final positions (xyz)",
    tolerance="min(1e-3 + 1e-3 * max|ref|, 1e-3 * max force-driven displacement + 1e-5 * max|ref|)",
    model="20 N^2 n_steps FLOP",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
