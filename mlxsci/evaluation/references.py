"""References computed once per (task, size) and kept on disk.

An entry holds the reference outputs, the tolerance and a checksum of every
input, so an evaluation whose reference is cached needs neither the inputs
nor the NumPy solve in the trusted (parent) process. The key hashes the size,
the sources of the reference modules and the task module's source (which
makes the inputs), so editing any of them invalidates the entry.

Entries are verified (mlxsci/storage/cache.py `write_verified` / `read_verified`): an
entry the parent did not write itself (planted, copied from another key, a
tolerance edited to 1e30), cut short or empty is computed again, never used,
and named in one line on stderr. Only the fixed inputs' references are kept
(a task whose make_inputs takes no seed, or get_reference without one); one
process computes an entry at a time (locks.building).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlxsci.protocol.outputs import input_checksums
from mlxsci.storage.cache import cache_dir, read_verified, write_verified
from mlxsci.storage.locks import building
from mlxsci.task import Task, load_reference


@dataclass
class Reference:
    outputs: dict  # result name -> np.ndarray
    tolerance: float
    input_checksums: dict  # input name -> checksum
    input_bytes: dict = field(default_factory=dict)  # input name -> bytes

    def result_bytes(self, task: Task) -> int:
        """The bytes of every result a run returns: the outputs the reference
        checks, and the results that only feed chained inputs (Task.chain:
        each the shape and dtype of its input). What a worker may send back."""
        extra = sum(
            self.input_bytes.get(name, 0)
            for name, result in task.chain.items()
            if result not in self.outputs
        )
        return sum(v.nbytes for v in self.outputs.values()) + extra


def reference_key(task: Task, params: dict) -> str:
    """The name of a size's reference in the cache: the task, the size and
    the sources its reference depends on."""
    module = inspect.getmodule(task.make_inputs)
    h = hashlib.sha256()
    h.update(json.dumps({"task": task.name, "params": params}, sort_keys=True).encode())
    # Every reference module (they may share helpers such as reference/prng.py)
    # and the task module that makes the inputs.
    ref_dir = Path(inspect.getfile(load_reference(task.name))).parent
    for path in sorted(ref_dir.glob("*.py")):
        h.update(path.read_bytes())
    h.update(inspect.getsource(module).encode() if module else b"")
    return h.hexdigest()[:24]


# The old private name, for tests/evaluation/test_integrity_caches.py until it
# uses reference_key.


def _parse_entry(data: bytes) -> Reference | None:
    """The reference an entry's bytes hold, or None when they hold none (an
    entry of another version of this module)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["__meta__"]))
            outputs = {k: np.asarray(z[k]) for k in meta["outputs"]}
        return Reference(
            outputs,
            float(meta["tolerance"]),
            dict(meta["input_checksums"]),
            {k: int(v) for k, v in meta["input_bytes"].items()},
        )
    except (OSError, EOFError, KeyError, TypeError, ValueError, zipfile.BadZipFile):
        return None


def get_reference(
    task: Task, params: dict, use_cache: bool = True, seed: int | None = None
) -> Reference:
    """The reference of a size whose inputs come from `seed` (Task.inputs).
    Only the fixed inputs' (seed None) are kept on disk: an evaluation draws a
    fresh secret seed, whose reference no later evaluation asks for again."""
    if seed is not None and task.takes_seed:
        return _solve(task, params, task.inputs(params, seed))
    path = cache_dir("reference", task.name) / f"{reference_key(task, params)}.npz"
    ref = _cached(path) if use_cache else None
    if ref is not None:
        return ref
    # One process solves a size at a time; one that waited reads what the
    # first wrote (two writers would leave one's seal over the other's zip,
    # whose timestamps differ: a mismatch the next reader rebuilds).
    with building(path, f"computing the {task.name} reference") as held:
        ref = _cached(path) if use_cache else None
        if ref is None:
            ref = _solve(task, params, task.inputs(params))
            if held:  # else the holder writes it: two writers would tear the entry
                write_verified(path, _entry_bytes(ref))
    return ref


def _cached(path: Path) -> Reference | None:
    # None: missing, unsealed, damaged or planted (read_verified names damage).
    data = read_verified(path)
    return _parse_entry(data) if data is not None else None


def _entry_bytes(ref: Reference) -> bytes:
    meta = {
        "outputs": sorted(ref.outputs),
        "tolerance": ref.tolerance,
        "input_checksums": ref.input_checksums,
        "input_bytes": ref.input_bytes,
    }
    buf = io.BytesIO()
    arrays: dict[str, Any] = {"__meta__": np.array(json.dumps(meta)), **ref.outputs}
    np.savez(buf, **arrays)
    return buf.getvalue()


def _solve(task: Task, params: dict, inputs: dict) -> Reference:
    ref_module = load_reference(task.name)
    outputs = {k: np.asarray(v) for k, v in ref_module.solve(inputs, params).items()}
    return Reference(
        outputs,
        float(ref_module.tolerance(outputs, params)),
        input_checksums(inputs),
        {k: int(np.asarray(v).nbytes) for k, v in inputs.items()},
    )


def max_abs_error(out: np.ndarray, ref: np.ndarray) -> float:
    """NaN-safe: any NaN or inf in the output, or a shape mismatch, is an infinite error."""
    out = np.asarray(out)
    if out.shape != ref.shape:
        return float("inf")
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    if diff.size == 0:
        return 0.0
    err = float(np.max(diff))  # np.max propagates NaN
    return err if np.isfinite(err) else float("inf")


def verdict(task_name: str, outputs: dict, ref: Reference, params: dict) -> tuple[float, bool, str]:
    """(error, passed, error kind) of a run's results against the reference.

    By default the error is the max abs difference over every reference
    output, passed iff error <= tolerance (NaN-safe), kind "max_abs". A
    reference module may define ERROR_KIND and `error(outputs, ref_outputs,
    params)` returning an error value, or (error, passed), or (error, passed,
    kind) when passing is not simply error <= tolerance (hmc's statistics) or
    the kind depends on what failed (lj's cell overflow).
    """
    module = load_reference(task_name)
    kind = getattr(module, "ERROR_KIND", "max_abs")
    missing = set(ref.outputs) - set(outputs)
    if missing and not hasattr(module, "error"):
        return float("inf"), False, f"missing output {', '.join(sorted(missing))}"
    if hasattr(module, "error"):
        result = module.error(outputs, ref.outputs, params)
        if not isinstance(result, tuple):
            result = (result,)
        err = float(result[0])
        passed = bool(result[1]) if len(result) > 1 else err <= ref.tolerance
        kind = result[2] if len(result) > 2 else kind
        return err, passed and not math.isnan(err), kind
    err = max(max_abs_error(outputs[k], ref.outputs[k]) for k in ref.outputs)
    return err, err <= ref.tolerance, kind
