"""NumPy fp32 reference for nbody. Imports nothing from the kernel side."""

import numpy as np

ERROR_KIND = "max_abs_pos"


def accelerations(pos, mass, G, eps):
    # d[i, j] = r_j - r_i; the j = i term is 0 (d = 0, r2 = eps^2 > 0).
    d = pos[None, :, :] - pos[:, None, :]
    r2 = np.einsum("ijk,ijk->ij", d, d) + eps * eps
    inv_r3 = r2 ** np.float32(-1.5)
    return G * np.einsum("ij,ijk->ik", inv_r3 * mass[None, :], d)


def solve(inputs, params):
    pos = inputs["pos_in"][:, :3].astype(np.float32)
    vel = inputs["vel_in"][:, :3].astype(np.float32)
    mass = inputs["mass"].astype(np.float32)
    G, eps, dt = (np.float32(inputs[k]) for k in ("G", "eps", "dt"))
    for _ in range(params["n_steps"]):
        vel = vel + accelerations(pos, mass, G, eps) * dt
        pos = pos + vel * dt
    return {"pos": pos}


def tolerance(ref, params):
    return 1e-3 + 1e-3 * float(np.max(np.abs(ref["pos"])))
