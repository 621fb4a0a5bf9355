"""Worker processes: how the evaluation runs a candidate's sizes out of its own process.

The parent (mlxsci/evaluation/evaluator.py) hands a size to a worker (mlxsci/worker/serve.py):
the job travels as one JSON line on the worker's stdin, with the folder the
worker writes its result.json and outputs' .npz into; the parent gets back
(result or None, a folder of its own copies of those outputs, the end of the
worker's stderr). This module owns everything about the process in between:
starting it in a session of its own with a lifeline (mlxsci/sandbox/lifeline.py), so
it never outlives its parent, and in the OS sandbox on the simulator
(mlxsci.sandbox); each size's timeout; building kernels a sandboxed worker
asks for (its backend's build service, Backend.build_service); reading its answer as hostile input
(mlxsci.protocol.exchange); killing it and all it started.

`CandidateWorker` runs all sizes of one candidate (or one comparison) in one
process; mlxsci.evaluation.per_size_runner starts one per size under compute-sanitizer.
Nothing here reads a result's numbers: the checks are mlxsci/evaluation/checks.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mlxsci import sandbox
from mlxsci.backends import backend_class, backend_info
from mlxsci.evaluation.redaction import minimal_worker_env, worker_text
from mlxsci.protocol.exchange import (
    STATUS_LINE_BYTES,
    STDERR_TAIL_CHARS,
    StderrTail,
    copy_outputs,
    death_reason,
    open_folder,
    read_result,
    read_worker_file,
    remove_tree,
)
from mlxsci.protocol.jobs import CompareJob, Job, SizeJob
from mlxsci.protocol.results import WorkerResult
from mlxsci.sandbox.lifeline import GOODBYE, open_lifeline
from mlxsci.storage.faults import EnvironmentFault


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a worker started in a session of its own, and all it started, and
    reap it. Only while it is not yet reaped: until then its id, which names
    the group, cannot go to another process."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


class CandidateWorker:
    """One worker process (mlxsci.worker --serve) that runs the sizes of one
    candidate in order, so imports and set-up are paid once per candidate.

    Isolation is as with a process per size where it matters: no two
    candidates share a process; each size has its own time limit, counted
    from the moment the parent hands it over (the first size's includes the
    process's start, as before); a crash or hang ends the process and is that
    size's verdict, and the parent hands over no later size. The parent hands
    a size over only after it has checked the size before, so no check runs
    beside a timed run and nothing runs past a failing size. run() answers
    (result or None, the parent's folder of output copies, stderr tail), as
    mlxsci.evaluation.per_size_runner.run_worker does.
    """

    # The worker's command line, before "--serve FD" (tests put a stand-in here),
    # and the sandboxed worker's (mlxsci.sandbox.boot applies the layers first).
    command = (sys.executable, "-m", "mlxsci.worker")
    sandboxed_command = (sys.executable, "-m", "mlxsci.sandbox.boot")

    def __init__(self, backend: str = "sim", sandbox_read: list[str] | None = None):
        """backend: the backend the worker runs (its environment is that
        backend's, mlxsci.evaluation.redaction.minimal_worker_env). sandbox_read: run the
        worker in the OS sandbox (mlxsci.sandbox), reading only these folders
        beyond Python's and mlxsci's own; None: unsandboxed (GPU backends, or
        the user's explicit MLXSCI_UNSANDBOXED=1)."""
        self.backend = backend
        self.sandbox_read = sandbox_read
        # The worker's subprocess.Popen while one runs (Any: its pipes are
        # always there, which Popen's type cannot say).
        self.proc: Any = None
        self.status: Any = None  # the read end of the worker's "done" pipe
        self.lifeline: int | None = None  # the write end of its lifeline (mlxsci.sandbox.lifeline)
        # The worker's folder: its stderr, and the job folder of each size, so
        # that one folder is all a worker whose parent died must remove.
        self.logdir = Path(tempfile.mkdtemp(prefix="mlxsci-worker-"))
        self.stderr: StderrTail | None = None
        self.ended: str | None = None  # why the process can take no more sizes
        self.starting = False  # started, its "ready" not read yet
        self.environment: dict | None = None  # what it was started with (start)

    def __enter__(self) -> CandidateWorker:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None and self.proc is not None:
            self.kill()  # interrupted (Ctrl-C): the size it runs has no one to answer to
        self.close()

    def prestart(self) -> None:
        """Start the process now, without waiting for it: its start-up
        (Python, MLX, the sandbox) then overlaps what the parent does before
        the first size (the references), and the first hand-over waits for
        its "ready" as before."""
        if self.proc is None and not self.ended:
            self.start()

    def start(self) -> None:
        self.starting = True
        read_end, write_end = os.pipe()
        err_read, err_write = os.pipe()
        life_read, self.lifeline, life_env = open_lifeline([self.logdir])
        self.environment = minimal_worker_env(self.backend)
        env = dict(self.environment, **life_env)
        command = self.command
        if self.sandbox_read is not None:
            command = self.sandboxed_command
            policy = sandbox.worker_policy(self.sandbox_read, [str(self.logdir)])
            env[sandbox.POLICY_ENV] = policy.to_env()
        try:
            self.proc = subprocess.Popen(
                [*command, "--serve", str(write_end)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=err_write,
                env=env,
                pass_fds=(write_end, life_read),
                start_new_session=True,
            )
        except BaseException as exc:
            os.close(self.lifeline)
            os.close(err_read)
            self.lifeline = None
            if isinstance(exc, OSError):  # no process at all: fork or exec failed
                raise EnvironmentFault(f"the worker could not start: {exc}") from exc
            raise
        finally:
            os.close(write_end)
            os.close(life_read)
            os.close(err_write)
        self.stderr = StderrTail(err_read)
        self.status = os.fdopen(read_end, "rb", buffering=0)

    def run(self, job: Job, timeout: float) -> tuple[WorkerResult | None, Path, str]:
        """Run one size: (result or None, folder, stderr tail). The folder is
        the parent's own copy of what the worker wrote (its outputs, bounded):
        the worker's job folder, which it can write, is never read by name.
        Interrupted (Ctrl-C, SIGTERM made an exception), it kills the worker
        and removes the size's folders before the exception goes on."""
        jobdir = Path(tempfile.mkdtemp(prefix="mlxsci-job-", dir=self.logdir))
        # Held from its making (mlxsci.protocol.exchange.open_folder).
        try:
            dir_fd = open_folder(jobdir)
        except OSError:  # the worker removed it at once: a size it cannot run
            return None, Path(tempfile.mkdtemp(prefix="mlxsci-checked-")), "job folder removed"
        try:
            result, tail = self.hand_over(jobdir, dir_fd, job, timeout)
            return result, copy_outputs(dir_fd, result, job), tail
        except BaseException:
            if self.proc is not None:
                self.kill()  # first: a worker still writing could refill the folder
            raise
        finally:
            os.close(dir_fd)
            remove_tree(jobdir)

    def hand_over(
        self, jobdir: Path, dir_fd: int, job: Job, timeout: float
    ) -> tuple[WorkerResult | None, str]:
        if self.ended:
            return None, f"the worker ended at an earlier size: {self.ended}"
        if self.proc is None:
            self.start()
        assert self.stderr is not None  # start() made it
        stderr_from = self.stderr.total
        deadline = time.monotonic() + timeout
        if self.starting:
            self.await_ready(deadline, timeout)
            self.starting = False
        # The job itself travels on the pipe: nothing the parent writes goes
        # into a folder the worker can write.
        self.tell(json.dumps({"dir": str(jobdir), "job": job.to_wire()}) + "\n", deadline)
        said = self.wait_for_line(deadline)
        builds = 0
        service = backend_class(self.backend).build_service()
        most = service.max_builds_per_size if service is not None else 0
        while said is not None and said.startswith("build "):
            builds += 1
            name = said[len("build ") :] if builds <= most else ""
            self.answer_build(dir_fd, name, deadline, job)
            said = self.wait_for_line(deadline)
        tail = self.stderr_tail(stderr_from)
        if said is None:
            self.kill()
            self.ended = f"timeout: no verdict within {timeout:g} s"
            return None, self.ended
        if said not in ("done", ""):
            self.kill()
            self.ended = f"the worker broke its protocol (it said {said[:80]!r})"
            return None, self.ended
        if said == "done":
            result = read_result(dir_fd, job)
            if isinstance(result, str):
                self.kill()
                self.ended = result
                return None, self.ended
            return result, tail
        # The pipe closed without "done": the process ended during this size.
        returncode = self.reap(deadline)
        self.stderr.finish()
        tail = self.stderr_tail(stderr_from)
        result = read_result(dir_fd, job)
        if not isinstance(result, str):
            # It died after writing this size's verdict, which stands (as a
            # process per size had it); a next size gets a fresh process.
            self.forget()
            return result, tail
        self.ended = death_reason(returncode, tail)
        return None, self.ended

    def await_ready(self, deadline: float, timeout: float) -> None:
        """Wait for a new worker's "ready": it has set itself up (imports, the
        sandbox) and loaded no candidate code yet. A worker that ends or stalls
        before saying it failed on the machine, not on a candidate: an
        EnvironmentFault (SandboxUnavailable where the sandbox said why)."""
        said = self.wait_for_line(deadline)
        if said == "ready":
            return
        assert self.stderr is not None  # start() made it
        if said is None:
            self.kill()
            self.forget()
            raise EnvironmentFault(f"the worker did not start within {timeout:g} s")
        returncode = self.reap(deadline) if said == "" else None
        self.kill()
        self.stderr.finish()
        tail = self.stderr_tail(0)
        self.forget()
        if returncode == sandbox.UNAVAILABLE_EXIT and sandbox.UNAVAILABLE_PREFIX in tail:
            said_why = tail.split(sandbox.UNAVAILABLE_PREFIX, 1)[1].strip()
            raise sandbox.SandboxUnavailable(
                f"the simulator's sandbox could not be set up here: {said_why}. Model-written "
                "candidates run only inside it; set MLXSCI_UNSANDBOXED=1 to run them without it "
                "(unsafe: their code then runs as you, with your files and network)"
            )
        if returncode is None:
            raise EnvironmentFault(
                f"the worker broke its start-up protocol (it said {said[:80]!r})"
            )
        raise EnvironmentFault(f"the worker could not start: {death_reason(returncode, tail)}")

    def wait_for_line(self, deadline: float) -> str | None:
        """The worker's next line ("done"); "" when its end of the pipe closed
        (it died); None when the deadline passed first."""
        line = b""
        while not line.endswith(b"\n"):
            if len(line) > STATUS_LINE_BYTES:
                return line[:80].decode(errors="replace")  # no line of the protocol
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.status], [], [], left)[0]:
                return None
            chunk = self.status.read(1)
            if not chunk:
                return ""
            line += chunk
        return line.decode(errors="replace").strip()

    def tell(self, line: str, deadline: float) -> None:
        """Write a line to the worker's stdin (a job, a build's answer), giving
        up at `deadline`: a worker that stops reading cannot hold its parent."""
        data = line.encode()
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        while data:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                return  # the size's deadline ends it
            try:
                data = data[os.write(fd, data[:65536]) :]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):  # it died: answered by the caller
                return

    def answer_build(self, dir_fd: int, name: str, deadline: float, job: Job) -> None:
        """Build the kernel variant a sandboxed worker asks for (its request
        file in the size's job folder) and tell it the library's path. Only a
        sandboxed worker asks; any other gets a refusal. What it may ask for
        is a kernel of the job's own candidate: the parent derives the spec
        from the job it handed over (Backend.build_service)."""
        service = backend_class(self.backend).build_service()
        data = None
        if (
            service is not None
            and self.sandbox_read is not None
            and re.fullmatch(r"build-\d{1,6}\.json", name)
        ):
            data = read_worker_file(dir_fd, name, service.max_request_bytes)
        if service is None or data is None or not isinstance(job, (SizeJob, CompareJob)):
            reply: dict = {"error": {"kind": "compile", "message": "unexpected build request"}}
        else:
            reply = service.serve(data, job, deadline)
        self.tell(json.dumps(reply) + "\n", deadline)

    def stderr_tail(self, start: int) -> str:
        """What the worker wrote to stderr since `start` (this size), its end,
        made safe to show (mlxsci.evaluation.redaction.worker_text)."""
        assert self.stderr is not None
        return worker_text(self.stderr.since(start), STDERR_TAIL_CHARS)

    def reap(self, deadline: float) -> int:
        """The exit status of a worker whose pipe closed, killing it (and all
        it started) if it lingers past the size's deadline."""
        try:
            return self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def forget(self) -> None:
        """Drop a process that has ended, so that the next size starts one."""
        self.close_pipes()
        self.proc, self.status = None, None
        self.starting = False

    def close_pipes(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:  # BrokenPipeError: it had ended already
            pass
        self.status.close()
        if self.stderr is not None:
            self.stderr.finish()
        if self.lifeline is not None:  # after the worker ended: its lifeline may go
            os.close(self.lifeline)
            self.lifeline = None

    def kill(self) -> None:
        """End the worker and anything it started (its own process group)."""
        kill_group(self.proc)

    def end(self) -> None:
        """Kill the worker at once and remove everything it could write (its
        folder): before the parent judges the machine after a failed size, so
        room the worker took (files anywhere in its folder, files it holds
        open) is not counted as the machine's. No size follows."""
        if self.proc is not None:
            self.kill()
            self.forget()
        self.ended = self.ended or "ended by its parent"
        remove_tree(self.logdir)

    def close(self) -> None:
        """Tell the worker no size follows, wait a moment for it to exit, and
        kill what is left of it; then remove its folder (log and job folders)."""
        if self.proc is not None:
            try:
                # Goodbye first: the worker then takes the end of its stdin
                # for the end of its work, not for its parent's death.
                os.write(self.lifeline, GOODBYE)  # type: ignore[arg-type]  # set with proc
            except OSError:  # it had ended already
                pass
            try:
                self.proc.stdin.close()  # end of stdin: the worker exits
            except OSError:
                pass
            try:
                self.proc.wait(timeout=CLOSE_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()
            self.close_pipes()
        remove_tree(self.logdir)


# 1: the simulator runs candidates without the OS sandbox (unsafe: their code runs as you).
UNSANDBOXED_ENV = "MLXSCI_UNSANDBOXED"


class SpareWorkers:
    """Workers started ahead, one per kind (backend, sandbox reads), each
    taken by the next candidate of its kind (spare_workers()). A spare has
    run no candidate code: it said nothing yet, and its first size waits for
    its "ready" as a fresh process's does. So every candidate still gets a
    process of its own, and the start-up of the next one (Python, MLX, the
    sandbox: ~0.2 s) overlaps the evaluation of the one before. Only where
    the clock is modelled (the simulator). A spare
    started with another environment than a fresh one would get is closed,
    not used."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ready: dict[tuple, CandidateWorker] = {}

    def take(self, backend: str, reads: list[str] | None) -> CandidateWorker:
        """A spare of this kind if one waits (else a new worker), and a new
        spare started for the candidate after."""
        if not backend_info(backend).modelled:
            # On a GPU a process starting beside a timed run would disturb it.
            return CandidateWorker(backend, reads)
        key = (backend, None if reads is None else tuple(reads))
        with self.lock:
            spare = self.ready.pop(key, None)
        if spare is not None and (
            spare.proc is None
            or spare.proc.poll() is not None  # it ended while it waited
            or spare.environment != minimal_worker_env(backend)
        ):
            spare.close()
            spare = None
        worker = spare or CandidateWorker(backend, reads)
        ahead = CandidateWorker(backend, reads)
        ahead.prestart()
        with self.lock:
            extra, self.ready[key] = self.ready.get(key), ahead
        if extra is not None:  # another thread's spare of the same kind: one is enough
            extra.close()
        return worker

    def close(self) -> None:
        with self.lock:
            spares, self.ready = list(self.ready.values()), {}
        for spare in spares:
            spare.close()


# The spares of the run in progress (spare_workers), None outside one.
SPARES: SpareWorkers | None = None


@contextlib.contextmanager
def spare_workers():
    """While in it, each candidate's worker is started ahead, as the one
    before it is evaluated (SpareWorkers); for a run of many candidates in
    a row, such as a search. On leaving it the last spares are closed."""
    global SPARES
    outer, SPARES = SPARES, SpareWorkers()
    try:
        yield
    finally:
        SPARES.close()
        SPARES = outer


def candidate_worker(task, backend_name: str, unsandboxed: bool) -> CandidateWorker:
    """The worker process for a candidate's sizes: where the candidate's code
    runs natively (Backend.runs_candidate_natively: the simulator), inside the
    OS sandbox, reading only the task's folder and what the backend names
    (Backend.sandbox_reads: the simulator's kernel cache) beyond Python's and
    mlxsci's own, unless the user said MLXSCI_UNSANDBOXED=1 (or unsandboxed=True).
    With the task's folder go the places its task.py imports code from
    (Task.code_paths: the user's package, for mlxsci.task_from_kernel's tasks)."""
    unsandboxed = unsandboxed or os.environ.get(UNSANDBOXED_ENV, "") == "1"
    backend = backend_class(backend_name)
    reads = None
    if backend.runs_candidate_natively and not unsandboxed:
        reads = [str(task.folder), *task.code_paths, *backend.sandbox_reads()]
    if SPARES is not None:
        return SPARES.take(backend_name, reads)
    return CandidateWorker(backend_name, reads)


# Seconds a worker may take to exit once told that no size follows.
CLOSE_GRACE_SECONDS = 10.0
