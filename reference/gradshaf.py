"""NumPy fp32 reference for gradshaf (Picard-Jacobi Grad-Shafranov). Imports
nothing from the kernel side."""

import numpy as np

F = np.float32


def step(psi, rmin, dr, dz, p_axis, mu0, omega):
    nz, nr = psi.shape
    psi_axis = psi[1:-1, 1:-1].max()
    c = psi[1:-1, 1:-1]
    R = (rmin + np.arange(1, nr - 1, dtype=F) * dr)[None, :]
    psin = c / psi_axis
    inside = (psin > 0) & (psin < 1)
    J = np.where(inside, R * p_axis * F(4) * psin * (F(1) - psin), F(0)).astype(F)
    rhs = -mu0 * R * J
    idr2 = F(1) / (dr * dr)
    idz2 = F(1) / (dz * dz)
    half_r = F(1) / (F(2) * R * dr)
    a_w = idr2 + half_r
    a_e = idr2 - half_r
    a_c = F(-2) * idr2 - F(2) * idz2
    # Metal-Sci's reference order: W, E, then S (j-1) before N (j+1), then C.
    lap = a_w * psi[1:-1, :-2] + a_e * psi[1:-1, 2:]
    lap = lap + idz2 * psi[:-2, 1:-1]
    lap = lap + idz2 * psi[2:, 1:-1]
    lap = lap + a_c * c
    out = psi.copy()  # boundary copies through
    out[1:-1, 1:-1] = c + omega * (rhs - lap) / a_c
    return out


def solve(inputs, params):
    psi = inputs["psi_in"].astype(F)
    args = [F(inputs[k]) for k in ("Rmin", "dR", "dZ", "p_axis", "mu0", "omega")]
    for _ in range(params["n_steps"]):
        psi = step(psi, *args)
    return {"psi": psi}


def tolerance(ref, params):
    return 1e-4 + 1e-5 * float(np.max(np.abs(ref["psi"])))
