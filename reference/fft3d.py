"""SciPy reference for fft3d. Imports nothing from the kernel side.

Like Metal-Sci's numpy fftn reference, the transform is computed in complex128
and cast to complex64; results are (N, N, N, 2) float32 (re, im) arrays.

Metal-Sci's check, max abs error <= 1e-3 + 1e-3 max|ref|, is ~1000 times the
rounding of a correct fp32 FFT: the input is white noise, so a typical
coefficient is ~4x smaller than the largest, and a transform carried out at
half precision (half twiddles: ~1e-3 relative error per coefficient) passes
it. `error` therefore also bounds the relative RMS error over all
coefficients, ||out - ref||_2 / ||ref||_2 <= RMS_TOL = 5e-5. In a NumPy
emulation of the seed's radix-2 (fp32 data and twiddles) correct transforms
reach ~4e-7 at N <= 128 and ~9e-6 with twiddles 2e-6 off (16 ulp, sloppier
than fast-math sin/cos); half-precision twiddles reach 2.4e-4 to 3.1e-4 while
their max abs error stays at 0.26 to 0.45 of Metal-Sci's tolerance.
"""

import numpy as np
import scipy.fft

ERROR_KIND = "max_abs"
RMS_TOL = 5e-5


def solve(inputs, params):
    d = inputs["in_data"].astype(np.float64)
    x = d[..., 0] + 1j * d[..., 1]  # axes (k, j, i) = (z, y, x)
    y = scipy.fft.fftn(x).astype(np.complex64)
    out = np.stack([y.real, y.imag], axis=-1).astype(np.float32)
    return {"data": out}


def tolerance(ref, params):
    # max|ref| over the re and im components, as Metal-Sci compares them.
    return 1e-3 + 1e-3 * float(np.max(np.abs(ref["data"])))


def relative_rms(out, ref) -> float:
    diff = np.asarray(out, dtype=np.float64) - np.asarray(ref, dtype=np.float64)
    norm = float(np.sqrt(np.sum(np.square(np.asarray(ref, dtype=np.float64)))))
    err = float(np.sqrt(np.sum(np.square(diff))))
    if norm == 0.0:
        return 0.0 if err == 0.0 else float("inf")
    rel = err / norm
    return rel if np.isfinite(rel) else float("inf")


def error(outputs, ref_outputs, params):
    """(max abs error, passed, kind): passed iff the max abs error is within
    Metal-Sci's tolerance and the relative RMS error within RMS_TOL."""
    ref = ref_outputs["data"]
    out = outputs.get("data")
    if out is None or np.asarray(out).shape != ref.shape:
        return float("inf"), False, "missing or misshapen output data"
    diff = np.abs(np.asarray(out).astype(np.float64) - ref.astype(np.float64))
    err = float(np.max(diff)) if diff.size else 0.0
    if not np.isfinite(err):
        return float("inf"), False, ERROR_KIND
    tol = tolerance(ref_outputs, params)
    if err > tol:
        return err, False, ERROR_KIND
    rms = relative_rms(out, ref)
    if rms > RMS_TOL:
        return err, False, f"fft_rms[relative_rms={rms:.3g} (<= {RMS_TOL:g})]"
    return err, True, ERROR_KIND
