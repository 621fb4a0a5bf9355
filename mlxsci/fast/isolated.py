"""`isolated=True`: a kernel's calls run in mlxsci's sandboxed worker.

Without it an mlxsci.fast kernel runs in the caller's process as the
caller's own code: it is compiled C++ and can do whatever the process can.
The source policy and the link's symbol check refuse the obvious (a call to
`open` does not compile), but a kernel can still call a function whose
address it computes at run time (tests/fast/test_isolated.py has one find
`creat` in the C library that way and make a file). With isolated=True every
launch of the call runs in a worker process inside the OS sandbox
model-written candidates get (mlxsci.sandbox: no network, no new process or
thread, no writes outside the worker's own folder, ...; docs/threat-model.md),
with the same semantics as in the caller's process:

- the same outputs and the same checks: the call goes through the same
  mlxsci.fast.simulator.SimRunner, whose every launch (the first run and,
  with checks, the runs that change its conditions) is sent to the worker,
  which runs it on its own simulator with the settings SimRunner chose for
  it (`Settings`); the checks compare the launches' outputs here, so their
  verdicts and messages are the in-process ones;
- the same exceptions: a fault in the worker comes back as the simulator's
  KernelFault (kind, message, details with their tuples) and becomes the
  same mlxsci.fast.errors class here; a compile error is the one this
  process's own build raised (mlxsci.fast.errors.CompileError); a
  ValueError or TypeError the simulator raised is raised again;
- inputs travel as their bytes, in a file of the launch's job folder; one
  bound as laid out (ensure_row_contiguous=False) as the storage its
  strides reach, with its strides and offset, and the worker hands the
  kernel the same strided view (mlxsci.protocol.launch_wire); a kernel's
  write to an input fares as in process (refused, or, where the simulator
  copies such writes back, copied into the caller's contiguous array).

The worker compiles nothing: its simulator asks this process for each
variant (mlxsci.backends.sim.variants.REMOTE), and only the variant of the
launch in flight, of this kernel's own definition, is built (`serve_build`):
the same rules, the same cache. Everything the worker sends back is read
as hostile (mlxsci.protocol.exchange, mlxsci.protocol.launch_wire): outputs
of any other dtype, shape or size are refused, texts are bounded. A worker
that dies becomes a KernelCrashError, one that gives no answer within
TIMEOUT_S seconds a KernelTimeoutError, one that answers garbage a
KernelCrashError; each is killed, with all it started, and the caller goes
on. Where the sandbox cannot be set up (macOS, an old kernel) the call
raises mlxsci.sandbox.SandboxUnavailable; MLXSCI_UNSANDBOXED=1 runs the
worker without it (a separate process, no longer a sandbox).

Workers: one per kernel definition (two kernels never share a process),
kept for that kernel's later calls, the KEEP_WORKERS used last; a worker
is replaced after any call that did not end cleanly or with a compile
error. Isolated calls run one at a time per process.

Cost (bench/bench_fast_isolated.py; bench/results/sim/
fast_isolated_cost_2026-11-29.md, 2 CPUs): starting a worker (Python, MLX,
the sandbox) once per kernel, about 0.3 s; then a round trip per launch
(the job on a pipe, the inputs and outputs through files, the inputs
written again for each launch; a checked call has two launches or more):
a warm call of a 1K-element float32 axpy took 2.9 ms with checks off (0.4
ms in process), a 1M-element one 39 ms (4.2 ms in process).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import re
import threading
import time

import mlx.core as mx
import numpy as np

from mlxsci.backends.sim import SimBackend, toolchain, variants
from mlxsci.backends.sim.buffers import host_bytes, stored_span
from mlxsci.backends.sim.dialects import DIALECTS
from mlxsci.evaluation.runner import UNSANDBOXED_ENV, CandidateWorker
from mlxsci.fast import simulator
from mlxsci.fast.arguments import Call
from mlxsci.fast.definition import KernelDefinition
from mlxsci.kernel.signature import ArgInfo, dtype_name
from mlxsci.kernel.spec import CompileError, KernelFault
from mlxsci.protocol import launch_wire
from mlxsci.protocol.exchange import MESSAGE_CHARS, read_worker_file, remove_tree
from mlxsci.protocol.jobs import Job, LaunchJob
from mlxsci.storage.faults import EnvironmentFault, fault_of

# Seconds one launch may take in the worker, its start, compile and the
# simulator's own limit on a launch (60 s) included; $MLXSCI_FAST_ISOLATED_TIMEOUT
# overrides it.
TIMEOUT_S = 300.0
TIMEOUT_ENV = "MLXSCI_FAST_ISOLATED_TIMEOUT"
# Workers kept for later calls (one per kernel definition).
KEEP_WORKERS = 4
# Exceptions the worker may report by type that are raised again as such.
RAISED_AGAIN = {"ValueError": ValueError, "TypeError": TypeError}
_FAULT_KIND = re.compile(r"[a-z_]{1,32}")


def timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else TIMEOUT_S
    except ValueError:
        raise ValueError(f"[mlxsci.fast] ${TIMEOUT_ENV} is {text!r}: a number of seconds") from None
    return value if value > 0 else TIMEOUT_S


def mx_dtype(name: str):
    return mx.bool_ if name == "bool" else getattr(mx, name)


def template_data(template) -> list:
    """Template arguments as a launch line and a build request carry them:
    [name, value] pairs, a dtype as {"dtype": name}."""
    return [
        [n, {"dtype": dtype_name(v)} if isinstance(v, mx.Dtype) else v] for n, v in template or ()
    ]


class LaunchWorker(CandidateWorker):
    """The worker process of one kernel: CandidateWorker's process and
    protocol, with builds limited to the variant of the launch in flight."""

    def __init__(self, definition: KernelDefinition, sandboxed: bool):
        super().__init__("sim", SimBackend.sandbox_reads() if sandboxed else None)
        self.definition = definition
        # What the launch in flight may have built: (infos, output dtype
        # names, template), set before each launch.
        self.signature: tuple | None = None
        self.compile_error: CompileError | None = None  # this launch's build's, if it failed
        self.compile_seconds = 0.0
        self.inputs: list = []  # the bytes of the launch's inputs' file

    def hand_over(self, jobdir, dir_fd: int, job: Job, timeout: float) -> tuple:
        """The launch's inputs into its job folder's INPUTS_FILE (through the
        folder's descriptor: launch_wire.write_new_file), then the job."""
        try:
            launch_wire.write_new_file(dir_fd, launch_wire.INPUTS_FILE, self.inputs)
        except OSError as exc:
            self.kill_if_running()
            return None, f"the inputs could not be handed over: {exc}"
        finally:
            self.inputs = []
        return super().hand_over(jobdir, dir_fd, job, timeout)

    def kill_if_running(self) -> None:
        if self.proc is not None:
            self.kill()
            self.forget()

    def answer_build(self, dir_fd: int, name: str, deadline: float, job: Job) -> None:
        """A build the worker asks for (variants.REMOTE): only the variant of
        the launch in flight, built here (serve_build)."""
        data = None
        if self.sandbox_read is not None and re.fullmatch(r"build-\d{1,6}\.json", name):
            data = read_worker_file(dir_fd, name, variants.MAX_REQUEST_BYTES)
        if data is None or self.signature is None:
            reply: dict = {"error": {"kind": "compile", "message": "unexpected build request"}}
        else:
            started = time.perf_counter()
            reply = self.serve_build(data, deadline)
            self.compile_seconds += time.perf_counter() - started
        self.tell(json.dumps(reply) + "\n", deadline)

    def serve_build(self, data: bytes, deadline: float) -> dict:
        """{"library": path} for a request that names exactly this launch's
        variant of this kernel (variants.request's form, dtype template
        arguments as {"dtype": name}), built from this process's own
        definition and call; else {"error": ...}, a compile error's remembered
        (self.compile_error) for the caller to raise as in process."""
        d = self.definition
        infos, out_names, template = self.signature  # type: ignore[misc]
        try:
            req = json.loads(data)
            if not isinstance(req, dict):
                raise variants.BadRequest("a build request that is no object")
            defines = tuple(req.get("extra_defines") or ())
            if defines not in variants.ALLOWED_DEFINES:
                raise variants.BadRequest("a build request with other defines")
            # Its plain variant, or its profiled one (the runtime's checks run
            # in that one's hooks); never a counted one (a job's coverage run).
            profiled = req.get("profiled") is True
            spec = d.spec()
            want = variants.request(
                d.dialect, spec, infos, out_names, template_data(template), defines, False, profiled
            )
            if req != json.loads(json.dumps(want)):
                raise variants.BadRequest("the build request names no variant of this call")
            dialect = DIALECTS[d.dialect]()
            gen = dialect.generate(spec, infos, out_names, template)
            with toolchain.time_limit(deadline):
                library = variants.variant_library(dialect, spec, gen, defines, False, profiled)
                return {"library": str(library)}
        except CompileError as exc:
            self.compile_error = exc
            return {
                "error": {
                    "kind": "compile",
                    "message": exc.message,
                    "line": exc.line,
                    "log": exc.log,
                }
            }
        except Exception as exc:  # noqa: BLE001 - a worker's request never ends its parent
            fault = fault_of(exc)  # but the machine's own faults do
            if fault is not None:
                raise fault from exc
            return {"error": {"kind": "compile", "message": f"build request refused: {exc}"[:500]}}


class Settings:
    """The backend SimRunner sees: a SimBackend of this process that runs
    nothing. SimRunner changes its settings around each launch (the order
    threads run in, the bytes outputs start with, buffer placement, the
    runtime's checks, ...); every setting it has set travels with the launch
    (`sent`) and is set on the worker's own backend, and what a launch
    leaves there for SimRunner to read (RESULTS: the stores to a watched
    element) comes back with its answer (`take_results`): the worker's
    backend is set as this process's would be."""

    RESULTS = ("watched_writes", "watched_write_count")

    def __init__(self, dialect: str):
        object.__setattr__(self, "backend", SimBackend(dialect=dialect))
        object.__setattr__(self, "names", set())

    def __getattr__(self, name: str):
        return getattr(self.backend, name)

    def __setattr__(self, name: str, value) -> None:
        if name in self.RESULTS:
            raise AttributeError(f"{name} is the worker's to report")
        setattr(self.backend, name, value)
        self.names.add(name)

    def sent(self) -> dict:
        """The settings SimRunner has set, as they are now, as JSON data."""
        out = {}
        for name in sorted(self.names):
            value = getattr(self.backend, name)
            items = value if isinstance(value, (tuple, list)) else (value,)
            if not all(v is None or isinstance(v, (bool, int, float, str)) for v in items):
                raise TypeError(f"the simulator setting {name}={value!r} cannot go to a worker")
            out[name] = list(value) if isinstance(value, (tuple, list)) else value
        return out

    def take_results(self, result: dict) -> None:
        """What the launch left on the worker's backend (RESULTS), checked."""
        rows, count = watched_writes(
            result.get("watched_writes"), result.get("watched_write_count")
        )
        self.backend.watched_writes, self.backend.watched_write_count = rows, count


class WorkerKernel:
    """A SimKernel's stand-in for SimRunner: each call is one launch in the
    kernel's worker. Holds the worker (started at the first launch, replaced
    after a launch that did not end cleanly)."""

    def __init__(self, definition: KernelDefinition, sandboxed: bool):
        self.definition = definition
        self.sandboxed = sandboxed
        self.spec = definition.spec()
        self.dialect = DIALECTS[definition.dialect]()  # print_source generates text here
        self.backend = Settings(definition.dialect)
        self.compile_seconds = 0.0
        self.group_memory = 0
        self.worker: LaunchWorker | None = None

    def group_memory_bytes(self) -> int:
        return self.group_memory

    def close(self) -> None:
        if self.worker is not None:
            worker, self.worker = self.worker, None
            worker.close()

    def __call__(
        self,
        *,
        inputs,
        output_shapes,
        output_dtypes,
        grid,
        threadgroup,
        template=None,
        init_value=None,
        as_stored: bool = False,
    ) -> list:
        infos = [ArgInfo.of(a) for a in inputs]
        out_names = [dtype_name(t) for t in output_dtypes]
        hosts = [host_bytes(a) for a in inputs]
        packed = launch_wire.Inputs()
        for info, host in zip(infos, hosts):
            if as_stored and not host.flags.c_contiguous:
                span, first, strides = stored_span(host)
                packed.add_span(info.dtype, host.shape, span, first // host.itemsize, strides)
            else:
                packed.add(info.dtype, host)
        launch = {
            "spec": dict(
                self.spec.__dict__,
                input_names=list(self.spec.input_names),
                output_names=list(self.spec.output_names),
            ),
            "inputs": packed.entries,
            "output_shapes": [list(s) for s in output_shapes],
            "output_dtypes": out_names,
            "grid": list(grid),
            "threadgroup": list(threadgroup),
            "template": template_data(template) if template is not None else None,
            "init_value": init_value,
            "as_stored": bool(as_stored),
            "settings": self.backend.sent(),
        }
        expected = {
            f"out_{k}": (launch_wire.host_dtype(name), tuple(int(n) for n in shape))
            for k, (name, shape) in enumerate(zip(out_names, output_shapes))
        }
        for k, (entry, host) in enumerate(zip(packed.entries, hosts)):
            if entry["layout"] == "contiguous":  # a write to it comes back
                expected[f"in_{k}"] = (host.dtype, host.shape)
        job = LaunchJob(launch, sum(d.itemsize * int(np.prod(s)) for d, s in expected.values()))
        if self.worker is None:
            self.worker = LaunchWorker(self.definition, self.sandboxed)
        worker = self.worker
        worker.signature = (infos, out_names, list(template) if template is not None else None)
        worker.compile_error = None
        worker.inputs = packed.chunks
        compiled_before = worker.compile_seconds
        try:
            result, folder, tail = worker.run(job, timeout_s())
        except BaseException:  # the machine's fault, or an interrupt: the worker is gone
            self.close()
            raise
        finally:
            self.compile_seconds += worker.compile_seconds - compiled_before
        try:
            return self._answer(
                worker, result, tail, folder / "verified.npz", expected, out_names, hosts
            )
        except BaseException as exc:
            if not isinstance(exc, CompileError):  # a kernel that ran badly: a fresh worker next
                self.close()
            raise
        finally:
            remove_tree(folder)

    def _answer(
        self, worker: LaunchWorker, result, tail: str, path, expected, out_names, hosts
    ) -> list:
        """The launch's outputs from the worker's answer, or the exception
        it stands for."""
        if result is None:  # dead, silent past its time, or talking nonsense: killed already
            if (worker.ended or "").startswith("timeout"):
                raise KernelFault(
                    "timeout",
                    f"the sandboxed worker gave no answer within {timeout_s():g} s and was "
                    f"stopped (mlxsci.fast.isolated.TIMEOUT_S, ${TIMEOUT_ENV})",
                    {"isolated": "timeout"},
                )
            raise KernelFault(
                "crash",
                "the sandboxed worker ended without an answer: "
                + launch_wire.clean_text(tail or worker.ended or "no answer", MESSAGE_CHARS),
                {"isolated": "worker ended"},
            )
        error = result.get("error")
        if error is not None:
            raise self._raised(worker, error)
        try:
            written = result.get("inputs_written", [])
            memory = result.get("group_memory_bytes")
            if not (isinstance(written, list) and all(type(k) is int for k in written)):
                raise launch_wire.BadAnswer("inputs_written is not a list of ints")
            if len(set(written)) != len(written):
                raise launch_wire.BadAnswer("an input written twice")
            if type(memory) is not int or not 0 <= memory < 1 << 31:
                raise launch_wire.BadAnswer("group_memory_bytes")
            wanted = {name: expected[name] for name in expected if name.startswith("out_")}
            for k in written:
                if f"in_{k}" not in expected:
                    raise launch_wire.BadAnswer(f"input {k} cannot have been written back")
                wanted[f"in_{k}"] = expected[f"in_{k}"]
            arrays = launch_wire.read_arrays(path, wanted, set(wanted))
            self.backend.take_results(result)
        except launch_wire.BadAnswer as exc:
            raise KernelFault(
                "crash",
                f"the sandboxed worker's answer is unusable: {exc}",
                {"isolated": "bad answer"},
            ) from None
        self.group_memory = max(self.group_memory, memory)
        for k in written:  # what the simulator does in process (kernel._copy_back_inputs)
            if hosts[k].flags.c_contiguous and hosts[k].flags.writeable:
                np.copyto(hosts[k], arrays[f"in_{k}"])
        results = []
        for k, name in enumerate(out_names):  # as the simulator makes them (kernel._read_outputs)
            data = arrays[f"out_{k}"]
            if name == "bfloat16":
                results.append(mx.array(data).view(mx.bfloat16))
            else:
                results.append(mx.array(data, dtype=mx_dtype(name)))
        return results

    def _raised(self, worker: LaunchWorker, error: dict) -> BaseException:
        """The exception a worker's result["error"] stands for."""
        kind = error.get("kind")
        message = launch_wire.clean_text(error.get("message"), MESSAGE_CHARS)
        if kind == "compile":
            if worker.compile_error is not None:  # this process built it: its own error
                return worker.compile_error
            line = error.get("line")
            log = launch_wire.clean_text(error.get("log", ""), MESSAGE_CHARS)
            return CompileError(message, line if type(line) is int else None, log)
        if kind == "fault":
            fault = error.get("fault")
            try:
                details = launch_wire.decode_value(error.get("details"))
                if not isinstance(details, dict) or not _FAULT_KIND.fullmatch(str(fault)):
                    raise launch_wire.BadAnswer("a fault without a kind or details")
            except launch_wire.BadAnswer as exc:
                return KernelFault("crash", f"the sandboxed worker's answer is unusable: {exc}", {})
            return KernelFault(str(fault), message, fault_details(details))
        if kind == "environment":
            return EnvironmentFault(message)
        if kind == "exception" and error.get("type") in RAISED_AGAIN:
            return RAISED_AGAIN[error["type"]](message)
        what = launch_wire.clean_text(str(error.get("type", kind)), 80)
        return KernelFault(
            "crash", f"the sandboxed worker failed: {what}: {message}", {"isolated": "error"}
        )


# The facts of a fault's details the exceptions read (mlxsci.fast.errors) and
# what each must be: a worker's other details pass as they came.
_COORDS = ("thread", "group", "index")
_INTS = ("element", "count")
_NAMES = ("buffer", "array", "role", "access")


def fault_details(details: dict) -> dict:
    """A worker's fault details with each fact the exceptions read of the
    type it has in process (else left out): a lying worker cannot make
    `err.thread` raise."""
    kept = {}
    for key, value in details.items():
        if key in _COORDS:
            ok = isinstance(value, (tuple, list)) and len(value) <= 16
            ok = ok and all(type(v) is int for v in value)
        elif key in _INTS:
            ok = type(value) is int
        elif key in _NAMES:
            ok = isinstance(value, str) and len(value) <= 256
        else:
            ok = True
        if ok:
            kept[key] = value
    return kept


def watched_writes(rows, count) -> tuple[list, int]:
    """A watched launch's stores as the worker reports them: at most
    WATCH_CAP of {"group": [x, y, z], "thread": [x, y, z]}, and their count."""
    from mlxsci.backends.sim.profile import WATCH_CAP

    def coords(v) -> bool:
        return isinstance(v, list) and len(v) == 3 and all(type(c) is int for c in v)

    if not isinstance(rows, list) or len(rows) > WATCH_CAP or type(count) is not int:
        raise launch_wire.BadAnswer("the watched stores")
    for row in rows:
        if not (isinstance(row, dict) and set(row) == {"group", "thread"}):
            raise launch_wire.BadAnswer("a watched store")
        if not (coords(row["group"]) and coords(row["thread"])):
            raise launch_wire.BadAnswer("a watched store's thread or group")
    if count < len(rows):
        raise launch_wire.BadAnswer("fewer watched stores counted than listed")
    return [dict(row) for row in rows], count


class IsolatedRunner(simulator.SimRunner):
    """SimRunner whose launches go to the kernel's worker (WorkerKernel)."""

    def __init__(self, definition: KernelDefinition, sandboxed: bool):
        super().__init__(definition)
        self.kernel = WorkerKernel(definition, sandboxed)

    def _sim_kernel(self):
        return self.kernel


# The runners of this process, the one used last at the end; who made them.
_RUNNERS: collections.OrderedDict = collections.OrderedDict()
_LOCK = threading.Lock()
_OWNER = os.getpid()


def _runner_for(definition: KernelDefinition) -> IsolatedRunner:
    global _OWNER
    if os.getpid() != _OWNER:  # a forked child: its parent's workers are not its own
        _RUNNERS.clear()
        _OWNER = os.getpid()
    sandboxed = os.environ.get(UNSANDBOXED_ENV, "") != "1"
    # A worker reads the kernel cache it was started with: another is another worker's.
    key = (definition, sandboxed, str(toolchain.cache_dir()))
    runner = _RUNNERS.get(key)
    if runner is None:
        runner = _RUNNERS[key] = IsolatedRunner(definition, sandboxed)
    _RUNNERS.move_to_end(key)
    while len(_RUNNERS) > KEEP_WORKERS:
        _, oldest = _RUNNERS.popitem(last=False)
        oldest.kernel.close()
    return runner


def run(definition: KernelDefinition, call: Call, checks: bool) -> list:
    """`call` of the kernel `definition`, every launch in its worker: the
    outputs (mx.arrays), or the exception the call raises in process."""
    with _LOCK:
        return _runner_for(definition).run(call, checks)


def close_all() -> None:
    """End every worker of this process (at exit, and for tests)."""
    with _LOCK:
        if os.getpid() != _OWNER:
            _RUNNERS.clear()
            return
        while _RUNNERS:
            _, runner = _RUNNERS.popitem()
            runner.kernel.close()


atexit.register(close_all)
