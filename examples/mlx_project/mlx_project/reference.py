"""NumPy references for the package's kernels, and the inputs the tests draw.

`make_inputs(size, seed)` and `reference(inputs, size)` are the two functions
`mlxsci.task_from_kernel` takes (task_example.py); they are plain NumPy and
serve the tests as well.
"""

from __future__ import annotations

import numpy as np


def softmax_reference(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64, returned as float32."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def random_logits(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Logits of a few units' spread, some rows shifted far from zero (a
    softmax that skips subtracting the maximum overflows on them)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 3.0, size=(rows, cols))
    x[::3] += 80.0
    return x.astype(np.float32)


def make_inputs(size: dict, seed: int) -> dict:
    """The kernel's inputs at a size {"rows": R, "cols": C}."""
    return {"x": random_logits(size["rows"], size["cols"], seed)}


def reference(inputs: dict, size: dict) -> dict:
    """Softmax over each row of x (rows x cols, float32)."""
    return {"y": softmax_reference(inputs["x"])}
