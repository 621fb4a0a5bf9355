"""SciPy reference for fft3d. Imports nothing from the kernel side.

Like Metal-Sci's numpy fftn reference, the transform is computed in complex128
and cast to complex64; results are (N, N, N, 2) float32 (re, im) arrays.
"""

import numpy as np
import scipy.fft


def solve(inputs, params):
    d = inputs["in_data"].astype(np.float64)
    x = d[..., 0] + 1j * d[..., 1]  # axes (k, j, i) = (z, y, x)
    y = scipy.fft.fftn(x).astype(np.complex64)
    out = np.stack([y.real, y.imag], axis=-1).astype(np.float32)
    return {"data": out}


def tolerance(ref, params):
    # max|ref| over the re and im components, as Metal-Sci compares them.
    return 1e-3 + 1e-3 * float(np.max(np.abs(ref["data"])))
