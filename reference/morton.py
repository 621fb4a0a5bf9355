"""NumPy fp32 row-major reference for morton. Imports nothing from the kernel side.

The inputs and the checked output are in Morton order; this module has its
own Morton code: it gathers the input to row-major, runs the stencil there,
and `error` gathers the candidate's Morton-ordered output to row-major before
comparing (Metal-Sci compares in row-major too).
"""

import numpy as np

ERROR_KIND = "max_abs"


def morton_of_row_major(n):
    """Morton index of every row-major cell (z, y, x), built by spreading bits with masks."""
    idx = np.arange(n, dtype=np.uint64)

    def spread(v):  # bit b -> bit 3b, for up to 10 bits
        v = (v | (v << 16)) & 0x030000FF
        v = (v | (v << 8)) & 0x0300F00F
        v = (v | (v << 4)) & 0x030C30C3
        v = (v | (v << 2)) & 0x09249249
        return v

    s = spread(idx)
    m = s[None, None, :] | (s[None, :, None] << 1) | (s[:, None, None] << 2)
    return m.astype(np.int64)


def step(u, alpha):
    out = u.copy()  # Dirichlet faces copy through
    c = u[1:-1, 1:-1, 1:-1]
    # Neighbour order as Metal-Sci's reference: x-, x+, y-, y+, z-, z+, then -6c.
    s = u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:]
    s = s + u[1:-1, :-2, 1:-1]
    s = s + u[1:-1, 2:, 1:-1]
    s = s + u[:-2, 1:-1, 1:-1]
    s = s + u[2:, 1:-1, 1:-1]
    out[1:-1, 1:-1, 1:-1] = c + alpha * (s - np.float32(6.0) * c)
    return out


def solve(inputs, params):
    n = params["N"]
    u = np.asarray(inputs["u_in"], dtype=np.float32)[morton_of_row_major(n)]  # gather
    alpha = np.float32(inputs["alpha"])
    for _ in range(params["n_steps"]):
        u = step(u, alpha)
    return {"u": u}


def tolerance(ref, params):
    return 1e-4 + 1e-5 * float(np.max(np.abs(ref["u"])))


def error(outputs, ref_outputs, params):
    """Max abs difference after gathering the Morton-ordered output to row-major (NaN-safe)."""
    n = params["N"]
    ref = ref_outputs["u"]
    out = outputs.get("u")
    if out is None or np.asarray(out).size != n**3:
        return float("inf")
    got = np.asarray(out).reshape(-1)[morton_of_row_major(n)]
    err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    return err if np.isfinite(err) else float("inf")
