"""A run's outputs as both sides of the worker protocol see them.

The worker (mlxsci/worker/serve.py) poisons the outputs of its two verification
runs with two sentinels and writes outputs back as .npz files; the parent's
checks (mlxsci/evaluation/checks.py) count unwritten elements, compare bits and
digests of what it reads back. The same definitions serve both, so a check
the parent makes itself gives what the worker's own would.
"""

from __future__ import annotations

import hashlib

import numpy as np

# Two poison values for outputs. An element equal to sentinel A in the first
# verification run and to sentinel B in the second was never written.
SENTINEL_A = float("nan")
SENTINEL_B = -1.25e30
INT_SENTINEL_A = 0x5A
INT_SENTINEL_B = 0x25


def sentinels_for(dtype: np.dtype) -> tuple[float, float]:
    if np.issubdtype(dtype, np.floating):
        return SENTINEL_A, SENTINEL_B
    return INT_SENTINEL_A, INT_SENTINEL_B


def unwritten_count(a: np.ndarray, b: np.ndarray) -> int:
    """Elements holding sentinel A in `a` (the first verification run) and
    sentinel B in `b` (the second): never written."""
    sa, sb = sentinels_for(a.dtype)
    hit_b = b == np.array(sb).astype(b.dtype)
    hit_a = np.isnan(a) if np.isnan(sa) else a == np.array(sa).astype(a.dtype)
    return int(np.count_nonzero(hit_a & hit_b))


def to_numpy(outputs: dict) -> dict:
    return {k: np.array(v) for k, v in outputs.items()}


def same_bits(a: dict, b: dict) -> bool:
    """Whether two runs' outputs are the same names, dtypes, shapes and bits."""
    if set(a) != set(b):
        return False
    return all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
        for k in a
    )


def outputs_digest(outputs: dict) -> str:
    """A digest of a run's outputs (names, dtypes, shapes and bits)."""
    h = hashlib.sha256()
    for name in sorted(outputs):
        a = np.ascontiguousarray(np.asarray(outputs[name]))
        h.update(f"{name}:{a.dtype.str}{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:32]


def array_checksum(a) -> str:
    a = np.ascontiguousarray(np.asarray(a))
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()[:32]


def input_checksums(inputs: dict) -> dict:
    return {name: array_checksum(a) for name, a in inputs.items()}
