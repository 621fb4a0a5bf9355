"""gradshaf: Grad-Shafranov equilibrium by Picard-Jacobi iteration (Metal-Sci task 9).

Two kernels per outer (Picard) step: `gradshaf_axis_reduce` finds psi_axis,
the max of psi over the interior, with a single threadgroup; `gradshaf_step`
then does one Jacobi sweep of the Grad-Shafranov operator with the
nonlinear source J(psi / psi_axis) (omega = 1, so plain Jacobi).

Differences from Metal-Sci's pipeline:
- Metal-Sci's reduce reads `psi` and writes the one-element `psi_axis`
  buffer that is reused by every step; here `psi_axis` is a fresh (1,)
  float32 output of each reduce, fed to the step as an input. Because it
  has fewer than 8 elements MLX binds it to the step as
  `const constant float* psi_axis` (read `psi_axis[0]`).
- psi ping-pongs through fresh outputs (psi_in -> psi_out) instead of two
  fixed buffers A/B; the result is the last step's output.
- Metal-Sci picks the reduce width as the largest power of two <= min(256,
  pipeline max); MLX gives no pipeline max before launch, so the default
  launch is 256 x 1 x 1 for both grid and threadgroup (what Metal-Sci gets
  on every Apple GPU for the seed).
The byte model is Metal-Sci's: 12 B per cell per step (4 B reduce read,
8 B stencil read + write; neighbours assumed cached).
"""

from pathlib import Path

import numpy as np

from mlxsci.task import KernelContract, Size, Task, input_rng, perturbed

R_MIN = 1.0
P_AXIS = 200.0
MU0 = 1.0
OMEGA = 1.0


def make_inputs(p, seed=None):
    nr, nz = p["NR"], p["NZ"]
    u = np.linspace(0.0, 1.0, nr, dtype=np.float32)
    v = np.linspace(0.0, 1.0, nz, dtype=np.float32)
    pi = np.float32(np.pi)
    psi0 = (np.sin(pi * v)[:, None] * np.sin(pi * u)[None, :]).astype(np.float32)
    psi0 = perturbed(psi0, seed, 0x65)
    psi0[0, :] = 0.0
    psi0[-1, :] = 0.0
    psi0[:, 0] = 0.0
    psi0[:, -1] = 0.0

    def f32(x):
        return np.array(x, dtype=np.float32)

    return {
        "psi_in": psi0,
        "NR": np.array(nr, dtype=np.uint32),
        "NZ": np.array(nz, dtype=np.uint32),
        "Rmin": f32(R_MIN),
        "dR": f32(1.0 / (nr - 1)),
        "dZ": f32(1.0 / (nz - 1)),
        "p_axis": f32(P_AXIS),
        "mu0": f32(MU0),
        "omega": f32(OMEGA),
    }


def _with_psi(p, seed, psi):
    """make_inputs' inputs with psi_in the field `psi` (float32, edges zeroed)."""
    psi = psi.astype(np.float32)
    psi[[0, -1], :] = 0.0
    psi[:, [0, -1]] = 0.0
    return dict(make_inputs(p, seed), psi_in=psi)


def shifted_inputs(p, seed=None):
    """A peaked start whose magnetic axis sits off centre (outward in R, as a
    Shafranov shift moves it, and up or down in Z): the current J(psin)
    starts concentrated in a narrow off-centre core."""
    rng = input_rng(seed, 0x6501)
    u = np.linspace(0.0, 1.0, p["NR"])[None, :]
    v = np.linspace(0.0, 1.0, p["NZ"])[:, None]
    u0, v0 = rng.uniform(0.55, 0.75), rng.uniform(0.35, 0.65)
    wu, wv = rng.uniform(0.1, 0.2), rng.uniform(0.12, 0.25)
    peak = np.exp(-((u - u0) ** 2) / (2 * wu * wu) - (v - v0) ** 2 / (2 * wv * wv))
    return _with_psi(p, seed, peak * np.sin(np.pi * u) * np.sin(np.pi * v))


def doublet_inputs(p, seed=None):
    """Two lobes of opposite sign in R (sin(2 pi u) sin(pi v), unequal
    heights): psi_axis is the positive lobe's peak and the negative lobe
    carries no current (J = 0 where psin <= 0)."""
    rng = input_rng(seed, 0x6502)
    u = np.linspace(0.0, 1.0, p["NR"])[None, :]
    v = np.linspace(0.0, 1.0, p["NZ"])[:, None]
    lobes = np.sin(2 * np.pi * u) * np.sin(np.pi * v)
    scale = np.where(lobes > 0, 1.0, rng.uniform(0.3, 1.5))
    return _with_psi(p, seed, scale * lobes)


DISTRIBUTIONS = {"shifted": shifted_inputs, "doublet": doublet_inputs}


def draw_held_out(rng):
    """A grid near the listed held-out's 129x129 (not square in general) with
    25 to 50 outer steps (it has 35), off the listed values and the
    power-of-two grid, on one of the other initial fields."""
    return {
        "NR": int(rng.integers(100, 170)),
        "NZ": int(rng.integers(100, 170)),
        "n_steps": int(rng.integers(25, 51)),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # Per outer step: reduce over the current psi, then one Jacobi sweep that
    # reads psi_axis; psi ping-pongs step to step.
    psi = inp["psi_in"]
    shape = (p["NZ"], p["NR"])
    for _ in range(p["n_steps"]):
        axis = launch(
            "gradshaf_axis_reduce", dict(inp, psi=psi), outputs={"psi_axis": ((1,), "float32")}
        )["psi_axis"]
        psi = launch(
            "gradshaf_step",
            dict(inp, psi_in=psi, psi_axis=axis),
            outputs={"psi_out": (shape, "float32")},
        )["psi_out"]
    return {"psi": psi}


def validate_size(p):
    if p["NR"] < 3 or p["NZ"] < 3 or p["NR"] * p["NZ"] >= 2**31:
        raise ValueError("NR and NZ must be >= 3 (a non-empty interior) with NR*NZ < 2^31")
    if p["n_steps"] < 1:
        raise ValueError("n_steps must be >= 1")


def _size(nr, nz, steps):
    return Size(f"{nr}x{nz}x{steps}", {"NR": nr, "NZ": nz, "n_steps": steps})


TASK = Task(
    name="gradshaf",
    description=(
        "Grad-Shafranov equilibrium by Picard-Jacobi iteration on an NZ x NR fp32 grid "
        "(row-major, idx = j*NR + i, i = R = fast axis), R in [1, 2], Z in [-0.5, 0.5], "
        "dR = 1/(NR-1), dZ = 1/(NZ-1), p_axis = 200, mu0 = 1, omega = 1. Each outer step "
        "runs two kernels: gradshaf_axis_reduce writes psi_axis[0] = max of psi over the "
        "interior (1 <= i <= NR-2, 1 <= j <= NZ-2), launched as a single threadgroup; then "
        "gradshaf_step, for each interior cell: R = Rmin + i*dR, psin = psi/psi_axis, "
        "J = R*p_axis*4*psin*(1-psin) if 0 < psin < 1 else 0, rhs = -mu0*R*J, "
        "aW = 1/dR^2 + 1/(2R dR), aE = 1/dR^2 - 1/(2R dR), aN = aS = 1/dZ^2, "
        "aC = -2/dR^2 - 2/dZ^2, lap = aW psi[j,i-1] + aE psi[j,i+1] + aN psi[j+1,i] + "
        "aS psi[j-1,i] + aC psi[j,i], psi_out = psi + omega*(rhs - lap)/aC; boundary cells "
        "copy through. psi_axis has 1 element, so MLX binds it to gradshaf_step as "
        "`const constant float*`. The host runs n_steps outer steps, psi ping-ponging. "
        "Memory bound: 12 bytes per cell per step (4 B reduce read, 8 B stencil read+write)."
    ),
    kernels=(
        KernelContract(
            name="gradshaf_axis_reduce",
            inputs=("psi", "NR", "NZ"),
            outputs=("psi_axis",),
            grid="(256, 1, 1)",
            threadgroup="(256, 1, 1)",
        ),
        KernelContract(
            name="gradshaf_step",
            inputs=("psi_in", "psi_axis", "NR", "NZ", "Rmin", "dR", "dZ", "p_axis", "mu0", "omega"),
            outputs=("psi_out",),
            grid="(ceil_div(NR, 16) * 16, ceil_div(NZ, 16) * 16, 1)",
            threadgroup="(16, 16, 1)",
        ),
    ),
    sizes={
        "smoke": (_size(37, 29, 6),),
        "in-dist": (_size(65, 65, 30), _size(257, 257, 40), _size(513, 513, 30)),
        "held-out": (_size(129, 129, 35),),
    },
    defaults={"NR": 65, "NZ": 65, "n_steps": 30},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=lambda p: 12.0 * p["NR"] * p["NZ"] * p["n_steps"],
    # ~1 compare per cell in the reduce, ~30 FLOPs per cell in the step.
    flops=lambda p: 31.0 * p["NR"] * p["NZ"] * p["n_steps"],
    working_set=lambda p: 8.0 * p["NR"] * p["NZ"],
    bound="bandwidth",
    validate_size=validate_size,
    chain={"psi_in": "psi"},
    regime="R5 multi-kernel (reduce + stencil, Picard)",
    check="max abs of psi",
    tolerance="1e-4 + 1e-5 * max|ref|",
    model="12 NR NZ n_steps bytes",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
