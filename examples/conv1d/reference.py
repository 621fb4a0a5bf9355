"""NumPy reference for the conv1d example task. Imports nothing from mlxsci."""

import numpy as np


def solve(inputs, params):
    x = inputs["x"].astype(np.float64)
    w = inputs["w"].astype(np.float64)
    # np.correlate(x, w, "same")[i] = sum_k w[k] * x[i + k - R] for odd len(w) = 2R + 1,
    # zero padded at both ends; computed in float64, compared in float32.
    return {"out": np.correlate(x, w, mode="same").astype(np.float32)}


def tolerance(ref, params):
    return 1e-5 * max(1.0, float(np.max(np.abs(ref["out"]))))
