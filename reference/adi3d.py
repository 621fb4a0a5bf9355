"""SciPy reference for adi3d (LOD-ADI, one tridiagonal solve per line and axis).
Imports nothing from the kernel side.

Every solved line of a sweep has the same matrix (interior size n-2,
diagonal 1 + 2 mu, off-diagonals -mu), so one banded solve takes all the
sweep's lines as right-hand-side columns; the Dirichlet endpoints enter the
first and last right-hand side as + mu r_0 and + mu r_{n-1}. Solved in
float64, stored as float32 after each sweep (the field is fp32 between
kernels).
"""

import numpy as np
from scipy.linalg import solve_banded


def sweep(u, axis, mu):
    v = np.moveaxis(u, axis, 0)  # (n, A, B): lines along axis 0
    out = v.copy()
    n = v.shape[0]
    # Face rule: only lines with both off-axis indices strictly interior.
    lines = v[:, 1:-1, 1:-1].astype(np.float64)
    m = n - 2
    if m > 0 and lines[0].size > 0:
        rhs = lines[1:-1].copy()
        rhs[0] += mu * lines[0]
        rhs[-1] += mu * lines[-1]
        ab = np.zeros((3, m))
        ab[0, 1:] = -mu
        ab[1, :] = 1.0 + 2.0 * mu
        ab[2, :-1] = -mu
        x = solve_banded((1, 1), ab, rhs.reshape(m, -1), check_finite=False)
        out[1:-1, 1:-1, 1:-1] = x.reshape(rhs.shape).astype(np.float32)
    return np.ascontiguousarray(np.moveaxis(out, 0, axis))


def solve(inputs, params):
    u = inputs["u_in"].astype(np.float32)
    mu = float(np.float32(inputs["mu"]))
    for _ in range(params["n_steps"]):
        for axis in (2, 1, 0):  # x (fast), y, z
            u = sweep(u, axis, mu)
    return {"u": u}


def tolerance(ref, params):
    return 1e-3 + 1e-3 * float(np.max(np.abs(ref["u"])))
