"""lj: Lennard-Jones molecular dynamics with a cell list (Metal-Sci task 8).

N particles (sigma = epsilon = mass = 1) in a cubic periodic box of side L,
hard cutoff r_cut = 2.5, dt = 0.005, symplectic Euler (v' = v + F dt,
r' = r + v' dt; Metal-Sci calls it "leapfrog"). Positions are never wrapped
when written (unwrapped trajectories); they are wrapped into [0, L) only to
pick a cell. Each step first bins the particles into an M x M x M cell list
(cell size L/M >= r_cut, at most MAX_PER_CELL = 64 particles per cell, slots
taken by atomic fetch-add), then each particle sums the forces of the
occupants of its 27 neighbouring cells with minimum-image distances.

Where the MLX-native pipeline differs from Metal-Sci:
- Metal-Sci runs three kernels per step (lj_clear_cells zeroes cell_count,
  lj_build_cells scatters, lj_step integrates). MLX kernels cannot update a
  buffer in place, so here lj_build_cells is declared with
  `atomic_outputs=True` and `init_value=0` (KernelContract), and there is no
  clear kernel: MLX fills every output with the init value by an extra fill
  dispatch per output before the kernel (so cell_list, (M^3 * 64,) words, is
  zero-filled too, which Metal-Sci never does), and the simulator fills the
  buffers before the launch. Because MLX makes every output of an
  `atomic_outputs` kernel atomic, both cell_count (M^3,) and cell_list
  (M^3 * 64,) are `device atomic<uint32_t>*` in lj_build_cells: cell_list is
  written with atomic_store_explicit(..., memory_order_relaxed). lj_step
  reads both as plain `const device uint32_t*` inputs. The evaluator cannot
  poison the build kernel's outputs (their start value is part of the
  contract); lj_step's outputs are poisoned as usual.
- Slot order inside a cell is the atomic arrival order. The simulator runs all
  GPU threads on one OS thread with cooperative fibers, so its atomics are
  plain read-modify-writes and the slots fill in thread order; on a GPU the
  order varies between runs. That changes only the fp32 summation order of
  the forces (the checked positions can then differ between runs at the 1e-6
  level, which the evaluator flags as nondeterministic but passes when the
  last timed run is within tolerance too).
- Overflow: a particle whose slot is >= 64 is dropped by the kernel (as in
  Metal-Sci). The pipeline returns the last step's cell_count as a checked
  result; a maximum above 64 fails the size with error kind `cell_overflow`
  (Metal-Sci reads cell_count after the timed runs for the same rule).
- pos/vel are float32 arrays of shape (N, 4) (w = 0) cast to float4 in the
  bodies; the pairs (pos_in, vel_in) -> (pos_out, vel_out) ping-pong through
  fresh MLX outputs rather than Metal-Sci's A/B buffers. run also returns the
  full final pos/vel (pos_state, vel_state, unchecked) that a chained run
  starts from.

Roofline: the scored quantity is Metal-Sci's, 40 FLOPs per unordered pair
within r_cut of the INITIAL configuration per step (each pair visited from
both ends at 20 FLOPs; cell build not counted), against peak FP32. The pair
count is computed once per size from the inputs (fp64, minimum image) and
cached. Metal-Sci counts no bytes for lj; the byte model here is what the
MLX-native pipeline must move per step: build reads pos (16 N) and scatters
(8 N), lj_step reads pos/vel and writes them (64 N) plus the occupied slots
(4 N), and MLX's fills write cell_count and cell_list (260 M^3 bytes), i.e.
92 N + 264 M^3 bytes per step. At these sizes that byte count can exceed the
FLOP term in roofline time on a machine with < ~7 FLOP/byte, so the roofline
fraction can be above Metal-Sci's pure FLOP fraction.
- Unwrapped inputs: every seeded draw (what an evaluation runs, at every
  size and distribution) re-wraps the positions into a window [o, o + L)
  per axis whose face cuts through the particles (periodic_images): a
  quarter to three quarters of them lie below 0 or past L on each axis, in
  another periodic image of the box, where Metal-Sci's inputs (and the
  fixed data here, seed None) lie in [0, L). The system is the same (same pairs, forces and pair
  count): the inputs stand for a snapshot of a run whose particles have
  crossed the box's faces, as the task's unwrapped trajectories have. Why:
  a particle that crosses a face during one of these short runs goes at
  most ~0.04 past it (0.0136 at N10648; about 100 particles per in-dist run
  do), less than the margin L/M - r_cut (0.03 to 0.26) within which a
  particle clamped into the edge cell still neighbours every partner, so
  binning without the wrap r - L * floor(r / L) passed on Metal-Sci's
  inputs; with the window it fails at every size. Every pair's separation
  stays within L, as in Metal-Sci's inputs, so a minimum image by one
  conditional shift of L still passes.

Smoke sizes: N must be a perfect cube and L/M >= 2.5 with M >= 3. The first
smoke size adds a smoke-only parameter `spacing` (lattice spacing; the
in-distribution and held-out sizes use the spec's L / cbrt(N) and never carry
it): a 6^3 lattice at spacing 1.1 fills only the corner [0, 6.6)^3 of a
10.5^3 box with 4^3 cells, so 8 cells start empty and the others hold 1 to 13
particles; the perturbation wraps half of each x = 0 / y = 0 / z = 0 lattice
plane to just below L, so pairs interact across the periodic boundary and
unwrapped positions leave [0, L); the free surface lets particles drift
between cells. The second smoke size is a spec-style lattice (N = 343 in a
7.7 box, M = 3: two or three lattice planes per cell, 8 to 18 occupants).
Both have odd step counts (7 and 5).
"""

from functools import cache
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from mlxsci.task import KernelContract, Size, Task, input_rng

R_CUT = 2.5
DT = 0.005
MAX_PER_CELL = 64


def cube_root(n: int) -> int:
    k = round(n ** (1.0 / 3.0))
    return k if k**3 == n else -1


def initial_state(p, seed=None):
    """(pos, vel) as float32 (N, 3): perturbed cubic lattice, zero net momentum."""
    n, box = p["N"], p["L"]
    k = cube_root(n)
    spacing = p.get("spacing", box / k)
    rng = input_rng(seed, 0xCAFE)
    # Particle a*K^2 + b*K + c sits at (a, b, c) * spacing: x varies slowest.
    lattice = np.indices((k, k, k), dtype=np.float32).reshape(3, -1).T * np.float32(spacing)
    pos = lattice + rng.uniform(-0.05 * spacing, 0.05 * spacing, size=(n, 3))  # drawn first
    pos = pos - box * np.floor(pos / box)  # wrap into [0, L)
    vel = rng.uniform(-0.3, 0.3, size=(n, 3))  # drawn second
    vel = vel - vel.mean(axis=0)
    return pos.astype(np.float32), vel.astype(np.float32)


def make_inputs(p, seed=None):
    pos, vel = initial_state(p, seed)
    return _state_inputs(p, pos, vel, seed)


def periodic_images(pos, box, seed):
    """Each particle's periodic image per axis (integers) for positions `pos`
    in [0, L): the positions re-wrapped into a window [o, o + L) per axis
    instead of [0, L). The window's face cuts through the particles: o is the
    q-quantile of their coordinates on that axis, q ~ U(0.25, 0.75), less L
    with even odds, so a quarter to three quarters of the particles lie past
    L (or below 0) on each axis. All 0 for the fixed data (seed None:
    Metal-Sci's positions, all in [0, L)).

    Why: the positions are unwrapped trajectories, so the inputs stand for
    the same periodic system described from a box whose faces sit elsewhere
    (same pairs, same forces, same pair count). Only with such positions does
    a kernel that bins without the wrap r - L * floor(r / L) fail: particles
    that cross a face during the run itself go at most ~0.04 past it here,
    less than the margin L/M - r_cut that keeps a clamped edge cell a
    neighbour of every partner. One window keeps every pair's separation
    within L, as in Metal-Sci's inputs: a minimum image by one conditional
    shift of L, which kernels converted from Metal-Sci use, stays right."""
    if seed is None:
        return np.zeros(pos.shape, dtype=np.int64)
    rng = input_rng(seed, 0xCA03)
    x = pos.astype(np.float64)
    q = rng.uniform(0.25, 0.75, size=3)
    below = rng.integers(0, 2, size=3)  # 1: the window starts below 0
    origin = np.array([np.quantile(x[:, a], q[a]) for a in range(3)]) - box * below
    in_window = origin + np.mod(x - origin, box)  # x moved by whole periods into [o, o + L)
    return np.round((in_window - x) / box).astype(np.int64)


def _state_inputs(p, pos, vel, seed=None):
    """The inputs of the initial state (pos in [0, L), vel), each float32
    (N, 3); a seeded draw moves each particle to its periodic image
    (periodic_images), unwrapped in fp64 and then rounded to float32."""
    n = p["N"]
    pos4 = np.zeros((n, 4), dtype=np.float32)
    vel4 = np.zeros((n, 4), dtype=np.float32)
    box = float(np.float32(p["L"]))
    pos4[:, :3] = pos.astype(np.float64) + box * periodic_images(pos, box, seed)
    vel4[:, :3] = vel
    return {
        "pos_in": pos4,
        "vel_in": vel4,
        "N": np.array(n, dtype=np.uint32),
        "M": np.array(p["M"], dtype=np.uint32),
        "L": np.array(p["L"], dtype=np.float32),
        "rcut2": np.array(R_CUT * R_CUT, dtype=np.float32),
        "dt": np.array(DT, dtype=np.float32),
        "MAX_PER_CELL": np.array(MAX_PER_CELL, dtype=np.uint32),
    }


# The droplet's lattice spacing: denser than the spec's L / cbrt(N) = 1.15
# (its density 0.66), near the LJ pair minimum 2^(1/6) = 1.12.
DROPLET_SPACING = 1.05


def droplet_inputs(p, seed=None):
    """A dense droplet in vacuum: the K^3 lattice at spacing 1.05 (density
    0.86; or L / K where that is smaller), perturbed as make_inputs' and
    centred in the box, velocities as make_inputs'. Cells near the droplet
    hold more particles than the spec's, cells outside none."""
    n, box = p["N"], p["L"]
    k = cube_root(n)
    spacing = min(DROPLET_SPACING, box / k)
    rng = input_rng(seed, 0xCA01)
    lattice = np.indices((k, k, k), dtype=np.float64).reshape(3, -1).T * spacing
    pos = lattice + 0.5 * (box - k * spacing) + rng.uniform(-0.05, 0.05, (n, 3)) * spacing
    pos = pos - box * np.floor(pos / box)  # wrap into [0, L)
    vel = rng.uniform(-0.3, 0.3, size=(n, 3))
    vel = (vel - vel.mean(axis=0)).astype(np.float32)
    return _state_inputs(p, pos.astype(np.float32), vel, seed)


def hot_inputs(p, seed=None):
    """make_inputs' lattice with Maxwell velocities at temperature ~0.5
    (normal, sd 0.7 per axis) instead of U(-0.3, 0.3) (~0.03): pairs close
    in to r ~ 0.9 on the repulsive wall within a few steps."""
    pos, _ = initial_state(p, seed)
    vel = input_rng(seed, 0xCA02).normal(0.0, 0.7, size=(p["N"], 3))
    return _state_inputs(p, pos, (vel - vel.mean(axis=0)).astype(np.float32), seed)


DISTRIBUTIONS = {"droplet": droplet_inputs, "hot": hot_inputs}


def draw_held_out(rng):
    """A box of side 22.6 to 24.5 with M = 9 cells a side, 13^3 or 15^3
    particles and 6 to 14 steps. M is the one value that works: every M
    from 3 to 8 and 10 is listed or a power of two, and M >= 9 needs L >= 22.5
    (cells >= r_cut) with N <= ~4300 to keep the working set (260 M^3 + 64 N
    bytes) within twice the listed held-out's; so the mean density is
    0.15 to 0.29 (the spec's 0.66), a dilute lattice ("hot") or a dense
    droplet in a vacuum ("droplet")."""
    k = int(rng.choice(np.array([13, 15])))
    return {
        "N": k**3,
        "M": 9,
        "L": round(float(rng.uniform(22.6, 24.5)), 2),
        "n_steps": int(rng.integers(6, 15)),
        "distribution": str(rng.choice(sorted(DISTRIBUTIONS))),
    }


def run(launch, inp, p):
    # Per step (fixed order): bin pos_in into the cell list (outputs start at 0 through
    # the contract's init_value), then integrate; pos/vel ping-pong through the outputs.
    m3 = p["M"] ** 3
    n = p["N"]
    pos, vel = inp["pos_in"], inp["vel_in"]
    cells = None
    for _ in range(p["n_steps"]):
        cells = launch(
            "lj_build_cells",
            dict(inp, pos=pos),
            outputs={
                "cell_count": ((m3,), "uint32"),
                "cell_list": ((m3 * MAX_PER_CELL,), "uint32"),
            },
        )
        out = launch(
            "lj_step",
            dict(
                inp,
                pos_in=pos,
                vel_in=vel,
                cell_count=cells["cell_count"],
                cell_list=cells["cell_list"],
            ),
            outputs={"pos_out": ((n, 4), "float32"), "vel_out": ((n, 4), "float32")},
        )
        pos, vel = out["pos_out"], out["vel_out"]
    assert cells is not None  # validate_size admits n_steps >= 1 only
    # Final unwrapped positions (xyz) and the last step's occupancy (overflow check);
    # the full state feeds a chained run.
    return {
        "pos": pos[:, :3],
        "cell_count": cells["cell_count"],
        "pos_state": pos,
        "vel_state": vel,
    }


@cache
def _initial_pairs(key: tuple) -> int:
    p = dict(key)
    distribution = p.get("distribution")
    if distribution is None:
        pos, _ = initial_state(p)
    else:
        pos = DISTRIBUTIONS[distribution](p)["pos_in"][:, :3]
    box = float(p["L"])
    x = pos.astype(np.float64)
    wrapped = x - box * np.floor(x / box)
    wrapped[wrapped >= box] -= box  # rounding can land exactly on L
    candidates = cKDTree(wrapped, boxsize=box).query_pairs(R_CUT + 1e-6, output_type="ndarray")
    d = x[candidates[:, 1]] - x[candidates[:, 0]]
    d -= box * np.round(d / box)
    r2 = np.einsum("ij,ij->i", d, d)
    return int(np.count_nonzero((r2 < np.float32(R_CUT * R_CUT)) & (r2 > 1e-12)))


def initial_pair_count(p) -> int:
    """Unordered pairs within r_cut at the initial configuration of the size's
    input distribution (its fixed data, seed None; fp64, minimum image)."""
    keys = ("N", "M", "L", "spacing", "distribution")
    return _initial_pairs(tuple(sorted((k, p[k]) for k in keys if k in p)))


def validate_size(p):
    n, m, box = p["N"], p["M"], p["L"]
    k = cube_root(n) if n >= 1 else -1
    if k < 2:
        raise ValueError("N must be a perfect cube >= 8 (particles start on a K^3 lattice)")
    if m < 3:
        raise ValueError("M must be >= 3 (the 27 neighbour cells must be distinct)")
    if not box / m >= R_CUT:
        raise ValueError(f"cell size L/M = {box / m:.4g} must be >= r_cut = {R_CUT}")
    if m**3 * MAX_PER_CELL >= 2**31 or n >= 2**24:
        raise ValueError("M^3 * 64 and N must stay below 2^31 and 2^24")
    if "spacing" in p and not 0 < p["spacing"] * k <= box:
        raise ValueError("spacing * cbrt(N) must lie in (0, L]")
    if p["n_steps"] < 1:
        raise ValueError("n_steps must be >= 1")


def _size(n, m, box, steps, **extra):
    tag = "".join(f"-a{v:g}" for v in extra.values())
    return Size(
        f"N{n}-M{m}-L{box:g}{tag}x{steps}", {"N": n, "M": m, "L": box, "n_steps": steps, **extra}
    )


def _bytes(p):
    return float(p["n_steps"]) * (92.0 * p["N"] + 264.0 * p["M"] ** 3)


TASK = Task(
    name="lj",
    description=(
        "Lennard-Jones molecular dynamics (sigma = epsilon = mass = 1, hard cutoff "
        "r_cut = 2.5, rcut2 = 6.25, dt = 0.005) of N particles in a periodic cube of side L, "
        "with an M^3 cell list (cell size L/M >= r_cut, MAX_PER_CELL = 64). Each step: "
        "lj_build_cells wraps each particle's position into [0, L) (r - L*floor(r/L)), takes "
        "cell c_a = min(floor(r_w,a / (L/M)), M-1), index (cz*M + cy)*M + cx, and claims a "
        "slot with an atomic fetch-add on cell_count[cell] (relaxed), storing i in "
        "cell_list[cell*64 + slot] if slot < 64. Both outputs are atomic (MLX "
        "atomic_outputs) and start at 0 (init_value), so no clear kernel is needed. lj_step "
        "(cell_count, cell_list as plain inputs) sums, over the 27 neighbour cells (periodic) "
        "and their min(count, 64) occupants j != i, with d = r_j - r_i minimum-imaged "
        "(d -= L*round(d/L)) and r2 = d.d: if r2 < rcut2 and r2 > 1e-12, F += "
        "-24*(2/r2^6 - 1/r2^3)/r2 * d; then v' = v + F*dt, r' = r + v'*dt. Positions are "
        "never wrapped when written, and input positions are unwrapped too: a particle may "
        "start in any periodic image of the box, outside [0, L). pos/vel are float4 (w = 0) "
        "stored as float32 (N, 4) arrays and ping-pong each step. Checked: final positions "
        "(xyz, absolute 1e-4) and "
        "the last step's cell_count (max > 64 fails as cell_overflow). Scored: 40 FLOPs per "
        "initial pair within r_cut per step against peak FP32."
    ),
    kernels=(
        KernelContract(
            name="lj_build_cells",
            inputs=("pos", "N", "M", "L", "MAX_PER_CELL"),
            outputs=("cell_count", "cell_list"),
            grid="(ceil_div(N, 128) * 128, 1, 1)",
            threadgroup="(128, 1, 1)",
            atomic_outputs=True,
            init_value=0.0,
        ),
        KernelContract(
            name="lj_step",
            inputs=(
                "pos_in",
                "vel_in",
                "cell_count",
                "cell_list",
                "N",
                "M",
                "L",
                "rcut2",
                "dt",
                "MAX_PER_CELL",
            ),
            outputs=("pos_out", "vel_out"),
            grid="(ceil_div(N, 128) * 128, 1, 1)",
            threadgroup="(128, 1, 1)",
        ),
    ),
    sizes={
        "smoke": (_size(216, 4, 10.5, 7, spacing=1.1), _size(343, 3, 7.7, 5)),
        "in-dist": (_size(1728, 5, 13.8, 20), _size(4096, 7, 18.4, 15), _size(10648, 10, 25.3, 10)),
        "held-out": (_size(2744, 6, 16.1, 12),),
    },
    defaults={"N": 1728, "M": 5, "L": 13.8, "n_steps": 20},
    make_inputs=make_inputs,
    run=run,
    bytes_moved=_bytes,
    flops=lambda p: 40.0 * initial_pair_count(p) * p["n_steps"],
    working_set=lambda p: 64.0 * p["N"] + 260.0 * p["M"] ** 3,
    bound="compute",
    validate_size=validate_size,
    chain={"pos_in": "pos_state", "vel_in": "vel_state"},
    regime="R4 atomics (cell list, 2 kernels per step)",
    check="max abs of final positions (xyz); max cell_count <= 64",
    tolerance="1e-4 absolute",
    model="40 pairs0 n_steps FLOP",
    draw_held_out=draw_held_out,
    distributions=DISTRIBUTIONS,
    folder=Path(__file__).parent,
)
