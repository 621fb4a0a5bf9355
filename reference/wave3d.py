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


# Metal-Sci's tolerance bounds the largest error; a Laplacian rounded to half
# precision stays under it (7e-5 against 1.05e-4) while it moves the whole
# field. The relative RMS error over the field must also stay within RMS_TOL:
# a float64 computation of the same steps is 1.6e-7 to 3.8e-7 from this
# fp32 reference at every size (50x inside), the half Laplacian 1.5e-4.
RMS_TOL = 2e-5
ERROR_KIND = "max_abs"


def error(outputs, ref_outputs, params):
    """(max abs error, passed, kind): within Metal-Sci's tolerance and the
    relative RMS error within RMS_TOL."""
    ref = np.asarray(ref_outputs["u"], dtype=np.float64)
    out = outputs.get("u")
    if out is None or np.shape(out) != ref.shape:
        return float("inf"), False, ERROR_KIND
    diff = np.asarray(out, dtype=np.float64) - ref
    err = float(np.max(np.abs(diff))) if diff.size else 0.0
    if not np.isfinite(err):
        return float("inf"), False, ERROR_KIND
    if err > tolerance(ref_outputs, params):
        return err, False, ERROR_KIND
    norm = float(np.linalg.norm(ref))
    rms = float(np.linalg.norm(diff)) / norm if norm > 0 else 0.0
    if rms > RMS_TOL:
        return err, False, f"wave_rms[relative_rms={rms:.3g} (<= {RMS_TOL:g})]"
    return err, True, ERROR_KIND
