"""NumPy fp32 reference for lbm (D2Q9 BGK, np.roll pull). Imports nothing from the kernel side."""

import numpy as np

CX = (0, 1, 0, -1, 0, 1, -1, -1, 1)
CY = (0, 0, 1, 0, -1, 1, 1, -1, -1)
W = np.array([4 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 9, 1 / 36, 1 / 36, 1 / 36, 1 / 36], dtype=np.float32)
ERROR_KIND = "max_abs_f"


def step(f, omega):
    # Pull: f_k[j, i] = f[k, (j - CY_k) mod NY, (i - CX_k) mod NX].
    fk = [np.roll(f[k], shift=(CY[k], CX[k]), axis=(0, 1)) for k in range(9)]
    rho = fk[0].copy()
    mx = np.float32(CX[0]) * fk[0]
    my = np.float32(CY[0]) * fk[0]
    for k in range(1, 9):  # accumulate in k order 0..8
        rho = rho + fk[k]
        mx = mx + np.float32(CX[k]) * fk[k]
        my = my + np.float32(CY[k]) * fk[k]
    u = mx / rho
    v = my / rho
    usq = u * u + v * v
    out = np.empty_like(f)
    for k in range(9):
        cu = np.float32(CX[k]) * u + np.float32(CY[k]) * v
        feq = (
            W[k]
            * rho
            * (
                np.float32(1.0)
                + np.float32(3.0) * cu
                + np.float32(4.5) * cu * cu
                - np.float32(1.5) * usq
            )
        )
        out[k] = fk[k] - omega * (fk[k] - feq)
    return out


def solve(inputs, params):
    f = inputs["f_in"].astype(np.float32)
    omega = np.float32(1.0) / np.float32(inputs["tau"])
    for _ in range(params["n_steps"]):
        f = step(f, omega)
    return {"f": f}


def tolerance(ref, params):
    return 5e-4 + 1e-4 * float(np.max(np.abs(ref["f"])))
