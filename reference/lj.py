"""Reference for lj: forces in fp64 (minimum image, hard cutoff), integration in fp32.

Pairs within the cutoff come from a periodic cKDTree of the wrapped positions
(equivalent to Metal-Sci's chunked all-pairs scan, much faster); distances are
recomputed from the unwrapped positions with the minimum image, and forces
are summed in fp64, cast to fp32, then v' = v + F dt, r' = r + v' dt in fp32.
Imports nothing from the kernel side.
"""

import numpy as np
from scipy.spatial import cKDTree

ERROR_KIND = "max_abs_pos"
TOL = 1e-4  # absolute (Metal-Sci: no relative term)
MAX_PER_CELL = 64


def forces(pos32, box, rcut2):
    x = pos32.astype(np.float64)
    wrapped = np.mod(x, box)
    wrapped[wrapped >= box] = 0.0  # np.mod of a tiny negative can round to box
    tree = cKDTree(wrapped, boxsize=box)
    pairs = tree.query_pairs(np.sqrt(rcut2) * (1 + 1e-6), output_type="ndarray")
    f = np.zeros_like(x)
    if len(pairs) == 0:
        return f
    i, j = pairs[:, 0], pairs[:, 1]
    d = x[j] - x[i]  # i receives from j
    d -= box * np.round(d / box)
    r2 = np.einsum("ij,ij->i", d, d)
    keep = (r2 < rcut2) & (r2 > 1e-12)
    i, j, d, r2 = i[keep], j[keep], d[keep], r2[keep]
    inv_r2 = 1.0 / r2
    inv_r6 = inv_r2**3
    fij = (-24.0 * (2.0 * inv_r6 * inv_r6 - inv_r6) * inv_r2)[:, None] * d
    n = len(x)
    for a in range(3):
        f[:, a] += np.bincount(i, weights=fij[:, a], minlength=n)
        f[:, a] -= np.bincount(j, weights=fij[:, a], minlength=n)
    return f


def solve(inputs, params):
    pos = inputs["pos_in"][:, :3].astype(np.float32)
    vel = inputs["vel_in"][:, :3].astype(np.float32)
    box = float(np.float32(inputs["L"]))
    rcut2 = float(np.float32(inputs["rcut2"]))
    dt = np.float32(inputs["dt"])
    for _ in range(params["n_steps"]):
        acc = forces(pos, box, rcut2).astype(np.float32)  # mass 1
        vel = vel + acc * dt
        pos = pos + vel * dt
    return {"pos": pos}


def tolerance(ref, params):
    return TOL


def error(outputs, ref_outputs, params):
    """Cell overflow first (Metal-Sci's rule: max cell_count > 64 fails), then
    the cell counts' sum, then max abs of pos.

    Every particle takes one slot of its cell with an atomic fetch-add on
    cell_count, whether or not the slot is past the cell's capacity, so the
    last step's counts sum to N exactly, whatever order the particles came
    in. A sum below N is an update lost to a read-modify-write that was not
    atomic: on a GPU, lanes that bin into one cell at once."""
    if "pos" not in outputs or "cell_count" not in outputs:
        return float("inf"), False, "missing output"
    counts = np.asarray(outputs["cell_count"])
    if counts.size and int(counts.max()) > MAX_PER_CELL:
        return float("inf"), False, "cell_overflow"
    if "N" in params and int(counts.astype(np.int64).sum()) != int(params["N"]):
        return float("inf"), False, "cell_count_sum"
    out, ref = np.asarray(outputs["pos"]), ref_outputs["pos"]
    if out.shape != ref.shape:
        return float("inf"), False, ERROR_KIND
    err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
    if not np.isfinite(err):
        err = float("inf")
    return err, err <= TOL, ERROR_KIND
