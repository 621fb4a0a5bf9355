"""NumPy reference for ising: a vectorised mirror of the checkerboard Metropolis
update, bit-exact (integer hash, fp32 comparison of exact 24-bit uniforms).
Imports nothing from the kernel side.

Neighbours come from np.roll on the spins before the sub-pass, so the
reference is the same whether a kernel updates in place (Metal-Sci) or writes
a fresh array (MLX-native): on an even periodic lattice no site of one colour
neighbours another site of the same colour.
"""

import numpy as np

from mlxsci.reference.prng import mix32, uniform

ERROR_KIND = "spin_disagreements"
GOLDEN = 0x9E3779B9
MASK32 = 0xFFFFFFFF
BETA = 0.42


def ising_bits(seed: int, step_idx: int, site_idx):
    """ising scheme: x = seed + step * golden; x = mix32(x); x = mix32(x ^ site)."""
    x = mix32(np.uint32((seed + step_idx * GOLDEN) & MASK32))
    return mix32(x ^ np.asarray(site_idx, dtype=np.uint32))


def acceptance_table(beta: float = BETA) -> np.ndarray:
    """p_accept[(s*h + 4) / 2] = min(1, exp(-2 beta s h)), computed in fp64, stored fp32."""
    return np.array([1.0, 1.0, 1.0, np.exp(-4.0 * beta), np.exp(-8.0 * beta)]).astype(np.float32)


class Lattice:
    """Flat site indices of each colour and of their four periodic neighbours."""

    def __init__(self, ny: int, nx: int):
        self.shape = (ny, nx)
        jj, ii = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
        self.sites, self.neighbours = [], []
        for colour in (0, 1):
            sel = ((jj + ii) & 1) == colour
            j, i = jj[sel], ii[sel]
            self.sites.append((j * nx + i).astype(np.uint32))
            self.neighbours.append(
                [
                    (j * nx + (i - 1) % nx),
                    (j * nx + (i + 1) % nx),
                    (((j - 1) % ny) * nx + i),
                    (((j + 1) % ny) * nx + i),
                ]
            )


def sub_pass(s, step_idx: int, seed: int, p_accept, lattice: Lattice | None = None):
    """One dispatch: update the sites of colour step_idx & 1 ((i + j) parity 0 or 1);
    every neighbour value is read from s as it was before the sub-pass."""
    lattice = lattice or Lattice(*s.shape)
    colour = step_idx & 1
    flat = s.reshape(-1)
    site = lattice.sites[colour]
    west, east, south, north = lattice.neighbours[colour]
    h = flat[west].astype(np.int32) + flat[east] + flat[south] + flat[north]
    spin = flat[site]
    pa = np.asarray(p_accept, dtype=np.float32)[(spin * h + 4) // 2]
    flip = uniform(ising_bits(seed, step_idx, site)) < pa
    out = flat.copy()
    out[site[flip]] = -spin[flip]
    return out.reshape(s.shape)


def solve(inputs, params):
    s = np.array(inputs["spins"], dtype=np.int8)
    seed = int(inputs["seed"])
    lattice = Lattice(*s.shape)
    for step in range(2 * params["n_sweeps"]):
        s = sub_pass(s, step, seed, inputs["p_accept"], lattice)
    return {"spins": s}


def tolerance(ref, params):
    return 0.0


def error(outputs, ref_outputs, params):
    """Number of sites whose final spin differs from the reference (byte-exact check)."""
    out = np.asarray(outputs.get("spins"))
    ref = ref_outputs["spins"]
    if out.shape != ref.shape:
        return float(ref.size)
    return float(np.count_nonzero(out.astype(np.int8) != ref))
