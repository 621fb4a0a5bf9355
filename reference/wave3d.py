"""NumPy fp32 reference for wave3d. Imports nothing from the kernel side."""

import numpy as np


def step(prev, curr, alpha):
    nxt = curr.copy()  # Dirichlet faces: u_next = u_curr
    c = curr[1:-1, 1:-1, 1:-1]
    # Neighbour order as Metal-Sci's reference: x-, x+, y-, y+, z-, z+, then -6c.
    s = curr[1:-1, 1:-1, :-2] + curr[1:-1, 1:-1, 2:]
    s = s + curr[1:-1, :-2, 1:-1]
    s = s + curr[1:-1, 2:, 1:-1]
    s = s + curr[:-2, 1:-1, 1:-1]
    s = s + curr[2:, 1:-1, 1:-1]
    lap = s - np.float32(6.0) * c
    nxt[1:-1, 1:-1, 1:-1] = np.float32(2.0) * c - prev[1:-1, 1:-1, 1:-1] + alpha * lap
    return nxt


def solve(inputs, params):
    prev = inputs["u_prev"].astype(np.float32)
    curr = inputs["u_curr"].astype(np.float32)
    alpha = np.float32(inputs["alpha"])
    for _ in range(params["n_steps"]):
        prev, curr = curr, step(prev, curr, alpha)
    return {"u": curr}


def tolerance(ref, params):
    return 1e-4 + 1e-5 * float(np.max(np.abs(ref["u"])))
