"""One launch of one kernel, as the caller describes it: the worker's side of
mlxsci.fast's isolated calls (mlxsci/fast/isolated.py is the caller's).

A job with "launch" (mlxsci/worker/serve.py hands it here) names a kernel
(its KernelSpec's fields), its inputs (their places in the job folder's
inputs file: mlxsci/protocol/launch_wire.py), the call's output shapes and
dtypes, launch dimensions, template arguments and init_value, whether
inputs are bound as laid out, and the simulator settings the caller's
SimRunner chose for this launch (thread order, the bytes outputs start
with, buffer placement, the runtime's checks, ...). The worker sets them on
its own backend, runs the launch once and writes the outputs (and the
inputs the kernel wrote, where the simulator copies such writes back) to
verified.npz; a fault or compile error goes in result["error"]. The checks
(other orders, unwritten outputs, memory read before it was written) are
the caller's: it compares the outputs of the launches it asks for, as it
does in its own process.

In the sandbox the worker compiles nothing: its SimKernel asks the parent
for each variant (variants.REMOTE). The request must be plain data, so a
template argument that is a dtype travels as {"dtype": name}.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlxsci.backends.base import Backend
from mlxsci.backends.sim import variants
from mlxsci.backends.sim.buffers import host_bytes
from mlxsci.kernel.signature import dtype_name
from mlxsci.kernel.spec import CompileError, KernelFault, KernelSpec
from mlxsci.protocol import launch_wire
from mlxsci.protocol.exchange import MESSAGE_CHARS
from mlxsci.protocol.jobs import LaunchJob
from mlxsci.storage.faults import EnvironmentFault

# One backend per dialect, one SimKernel per spec: a kernel's variants are
# compiled (asked of the parent) once per worker, as once per process in
# the caller's.
BACKENDS: dict[str, Backend] = {}
KERNELS: dict[KernelSpec, object] = {}


def mx_dtype(name: str):
    launch_wire.host_dtype(name)  # a known dtype, or BadAnswer
    return mx.bool_ if name == "bool" else getattr(mx, name)


def template_value(value):
    """A template argument of the launch line as the kernel takes it."""
    if isinstance(value, dict) and set(value) == {"dtype"}:
        return mx_dtype(value["dtype"])
    if isinstance(value, (bool, int)):
        return value
    raise launch_wire.BadAnswer(f"template argument {value!r}")


def template_data(value):
    """A template argument as a build request carries it: plain data."""
    return {"dtype": dtype_name(value)} if isinstance(value, mx.Dtype) else value


@contextlib.contextmanager
def requests_as_data():
    """While a launch runs: build requests to the parent carry dtype
    template arguments as data (the request travels as JSON)."""
    remote = variants.REMOTE
    if remote is None:
        yield
        return

    def ask(request: dict):
        pairs = [[name, template_data(v)] for name, v in request.get("template") or ()]
        return remote(dict(request, template=pairs))

    variants.REMOTE = ask
    try:
        yield
    finally:
        variants.REMOTE = remote


def array_of(packed: launch_wire.Packed):
    """The mx.array the kernel gets for an input: the same elements, laid
    out as in the caller's process (row-contiguous; as stored; or, for an
    input the caller holds in another layout, a view that is not
    contiguous, so that the simulator copies no write back, as there)."""
    data = packed.data
    if packed.layout == "copied":  # every other element of a buffer twice the size
        spread = np.zeros(2 * data.size, data.dtype)
        spread[::2] = data
        data = spread
    if packed.layout == "contiguous":
        data = data.reshape(packed.shape)
    if packed.dtype == "bfloat16":  # its uint16 bits
        base = mx.array(data).view(mx.bfloat16)
    else:  # the dtype said (mx.array would make float64 float32)
        base = mx.array(data, dtype=mx_dtype(packed.dtype))
    if packed.layout == "contiguous":
        return base
    if packed.layout == "stored":
        view = mx.as_strided(base, packed.shape, packed.strides, packed.offset)
    else:
        strides = [2 * s for s in launch_wire.row_strides(packed.shape)]
        view = mx.as_strided(base, packed.shape, strides, 0)
    mx.eval(view)
    return view


def kernel_for(spec: KernelSpec):
    kernel = KERNELS.get(spec)
    if kernel is None:
        backend = BACKENDS.get(spec.dialect)
        if backend is None:
            from mlxsci.backends.sim import SimBackend  # the package imports this module

            backend = BACKENDS[spec.dialect] = SimBackend(dialect=spec.dialect)
        kernel = KERNELS[spec] = backend.kernel(spec)
    return kernel


def run_launch(job: LaunchJob, outdir: Path) -> dict:
    """The launch of job.launch: its result for result.json, its outputs
    in outdir/verified.npz."""
    started = time.perf_counter()
    try:
        launch = job.launch
        fields = dict(launch["spec"])
        fields["input_names"] = tuple(fields["input_names"])
        fields["output_names"] = tuple(fields["output_names"])
        spec = KernelSpec(**fields)
        blob = (outdir / launch_wire.INPUTS_FILE).read_bytes()
        packed = [launch_wire.unpack_array(e, blob) for e in launch["inputs"]]
        arrays = [array_of(p) for p in packed]
        template = launch.get("template")
        if template is not None:
            template = [(name, template_value(v)) for name, v in template]
        kernel = kernel_for(spec)
        backend = kernel.backend
        # The caller's SimRunner's settings for this launch (mlxsci.fast.isolated.Settings).
        settings = {
            name: tuple(v) if isinstance(v, list) else v for name, v in launch["settings"].items()
        }
        own = {name: getattr(backend, name, None) for name in settings}
        for name, value in settings.items():
            setattr(backend, name, value)
        try:
            with requests_as_data():
                outputs = kernel(
                    inputs=arrays,
                    output_shapes=[tuple(s) for s in launch["output_shapes"]],
                    output_dtypes=[mx_dtype(d) for d in launch["output_dtypes"]],
                    grid=tuple(launch["grid"]),
                    threadgroup=tuple(launch["threadgroup"]),
                    template=template,
                    init_value=launch.get("init_value"),
                    as_stored=bool(launch.get("as_stored")),
                )
        finally:
            for name, value in own.items():
                setattr(backend, name, value)
        files: dict = {
            f"out_{k}": np.ascontiguousarray(host_bytes(o)) for k, o in enumerate(outputs)
        }
        written = []
        for k, (p, a) in enumerate(zip(packed, arrays)):
            if p.layout != "contiguous":
                continue
            now = np.ascontiguousarray(host_bytes(a))
            if now.tobytes() != p.data.tobytes():  # the kernel wrote its input
                files[f"in_{k}"] = now
                written.append(k)
        np.savez(outdir / "verified.npz", **files)
        result = {
            "seconds": [time.perf_counter() - started],
            "group_memory_bytes": int(kernel.group_memory_bytes()),
            "inputs_written": written,
        }
        # What the launch left on the backend for the caller's checks to read.
        result["watched_writes"] = [
            {"group": [int(c) for c in w["group"]], "thread": [int(c) for c in w["thread"]]}
            for w in getattr(backend, "watched_writes", [])
        ]
        result["watched_write_count"] = int(getattr(backend, "watched_write_count", 0))
        return result
    except Exception as exc:  # the launch's failure is the caller's to raise
        return {"seconds": [time.perf_counter() - started], "error": error_of(exc)}


def error_of(exc: BaseException) -> dict:
    """result["error"] for a launch that raised `exc`: a compile error and a
    fault as the simulator gave them (a fault's details tagged:
    launch_wire.encode_value), a machine's fault, or the exception's type
    and text."""
    if isinstance(exc, CompileError):
        return {"kind": "compile", "message": exc.message, "line": exc.line, "log": exc.log}
    if isinstance(exc, KernelFault):
        details = launch_wire.encode_value(exc.details)
        return {"kind": "fault", "fault": exc.kind, "message": exc.message, "details": details}
    if isinstance(exc, EnvironmentFault):
        return {"kind": "environment", "message": str(exc)}
    return {
        "kind": "exception",
        "type": type(exc).__name__,
        "message": str(exc)[:MESSAGE_CHARS],
        "traceback": traceback.format_exc(limit=8),
    }
