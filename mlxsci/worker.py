"""The worker: runs one candidate at one size in its own process.

`python -m mlxsci.worker JOBDIR` reads JOBDIR/job.json and writes
JOBDIR/result.json plus the outputs of the verified run (verified.npz) and,
only when it differs bitwise, of the last timed run (last.npz). The parent
(mlxsci.evaluate) holds the reference and does every check against it; the
worker only measures, so a crash, a hang or a GPU fault here costs the
parent nothing but a verdict.

Protocol per size: inputs -> first run (compiles) -> warm-up runs -> timed
runs (wall clock around run + mx.eval + synchronize, so lazy work cannot
escape the timer) -> two verification runs whose outputs are poisoned with
two different sentinels -> input checksums again.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlxsci.backends import get_backend
from mlxsci.backends.base import CompileError, KernelFault
from mlxsci.cache import atomic_write_json
from mlxsci.candidate import CandidateError, parse
from mlxsci.launch import Launcher
from mlxsci.launch_expr import LaunchExprError
from mlxsci.reference_store import input_checksums
from mlxsci.task import load_task

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
    sa, sb = sentinels_for(a.dtype)
    hit_b = b == np.array(sb).astype(b.dtype)
    hit_a = np.isnan(a) if np.isnan(sa) else a == np.array(sa).astype(a.dtype)
    return int(np.count_nonzero(hit_a & hit_b))


def to_numpy(outputs: dict) -> dict:
    return {k: np.array(v) for k, v in outputs.items()}


def same_bits(a: dict, b: dict) -> bool:
    return all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
               and a[k].tobytes() == b[k].tobytes() for k in a)


def error_record(exc: BaseException, backend) -> dict:
    err = backend.classify_error(exc) if backend is not None else None
    if isinstance(err, CompileError):
        return {"kind": "compile", "message": err.message, "line": err.line, "log": err.log}
    if isinstance(err, KernelFault):
        return {"kind": err.kind, "message": err.message, "details": err.details}
    if isinstance(exc, CandidateError):
        return {"kind": "format", "message": str(exc), "line": getattr(exc, "line", None)}
    if isinstance(exc, LaunchExprError):
        return {"kind": "launch", "message": f"launch expression: {exc}"}
    return {"kind": "runtime", "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=8)}


def run_job(job: dict, outdir: Path) -> dict:
    timings: dict = {}
    result: dict = {"phase": "setup", "timings": timings}
    backend = None
    try:
        task = load_task(job["task"])
        params = job["params"]
        backend = get_backend(job["backend"], **job.get("backend_options", {}))
        candidate = parse(job["source"], dialect=backend.dialect, filename=job["filename"])

        result["phase"] = "inputs"
        t = time.perf_counter()
        host = task.make_inputs(params)
        result["input_checksums_before"] = input_checksums(host)
        inputs = {k: backend.to_device(v) for k, v in host.items()}
        mx.eval(list(inputs.values()))
        del host
        timings["inputs"] = time.perf_counter() - t

        launcher = Launcher(backend, task, candidate, params, job["filename"],
                            job.get("param_overrides"))

        def one_run() -> dict:
            outs = task.run(launcher, inputs, params)
            mx.eval(list(outs.values()))
            backend.synchronize()
            return outs

        result["phase"] = "compile"
        t = time.perf_counter()
        one_run()
        timings["first_run"] = time.perf_counter() - t
        timings["compile"] = launcher.compile_seconds()

        result["phase"] = "warmup"
        t = time.perf_counter()
        for _ in range(max(0, job["n_warmup"] - 1)):  # the first run was one
            one_run()
        timings["warmup"] = time.perf_counter() - t

        result["phase"] = "timed"
        seconds = []
        outs = None
        for _ in range(job["n_measure"]):
            backend.synchronize()
            t0 = time.perf_counter()
            outs = one_run()
            seconds.append(time.perf_counter() - t0)
        result["seconds"] = seconds
        timings["timed"] = float(sum(seconds))
        last = to_numpy(outs)
        del outs

        result["phase"] = "verify"
        t = time.perf_counter()
        launcher.init_value = SENTINEL_A
        verified = to_numpy(one_run())
        launcher.init_value = SENTINEL_B
        second = to_numpy(one_run())
        launcher.init_value = None
        result["unwritten"] = {k: unwritten_count(verified[k], second[k]) for k in verified}
        result["input_checksums_after"] = input_checksums({k: np.array(v) for k, v in inputs.items()})
        timings["verify"] = time.perf_counter() - t

        np.savez(outdir / "verified.npz", **verified)
        result["last_equals_verified"] = same_bits(last, verified)
        if not result["last_equals_verified"]:
            np.savez(outdir / "last.npz", **last)
        result["phase"] = "done"
    except Exception as exc:  # every failure of the candidate becomes a verdict
        result["error"] = error_record(exc, backend)
    return result


def main(argv: list[str]) -> int:
    outdir = Path(argv[0])
    job = json.loads((outdir / "job.json").read_text())
    result = run_job(job, outdir)
    atomic_write_json(outdir / "result.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
