"""One worker process per size: the runs under NVIDIA's compute-sanitizer.

The sanitizer writes one log per process and its records say nothing of which
size was running, so under it each size gets a process of its own
(`ProcessPerSize`, `run_worker`: `python -m mlxsci.worker JOBDIR`), and a
fault it reports is that size's verdict (`sanitizer_finding`). These runs are
on a GPU, whose candidate code runs on the device: no OS sandbox, the
allowlisted environment and the bounded reading of the worker's answer as
everywhere (mlxsci.evaluation.runner holds the default, one worker per candidate), and
of its output: both streams drained from one pipe with only their end kept,
the sanitizer's log read at its head and tail (issue 23: a process that
printed 300 MB on each stream had cost the parent 1.1 GB).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from mlxsci.evaluation import sanitizer
from mlxsci.evaluation.redaction import minimal_worker_env, worker_text
from mlxsci.evaluation.runner import kill_group
from mlxsci.protocol.bounded import read_head_and_tail
from mlxsci.protocol.exchange import (
    STDERR_TAIL_CHARS,
    StderrTail,
    death_reason,
    open_folder,
    read_result,
)
from mlxsci.protocol.jobs import Job, SizeJob
from mlxsci.protocol.results import SizeRun, WorkerError, WorkerResult
from mlxsci.sandbox.lifeline import open_lifeline


def new_job_dir(job: Job, parent: Path | None = None) -> Path:
    """A fresh folder holding job.json, for a worker to run (in `parent`, else
    the system's temporary folder)."""
    jobdir = Path(tempfile.mkdtemp(prefix="mlxsci-job-", dir=parent))
    (jobdir / "job.json").write_text(json.dumps(job.to_wire()))
    return jobdir


def run_worker(
    job: SizeJob, timeout: float, sanitize: tuple[str, str] | None = None
) -> tuple[WorkerResult | None, Path, str]:
    """Run one size in a fresh process. Returns (result or None, job dir, stderr tail).

    sanitize: (tool, compute-sanitizer executable) to run the worker under
    NVIDIA's compute-sanitizer (mlxsci.evaluation.sanitizer); a kernel fault it reports
    is returned as the result's error, whatever the worker itself wrote.
    Interrupted (Ctrl-C, SIGTERM made an exception), it kills the worker and
    removes the job folder before the exception goes on."""
    jobdir = new_job_dir(job)
    env = minimal_worker_env(job.backend)
    argv = [sys.executable, "-m", "mlxsci.worker", str(jobdir)]
    passed: tuple[int, ...] = ()
    keep = None  # the lifeline's write end
    if sanitize:
        # No lifeline through compute-sanitizer: which descriptors it hands on
        # to the worker is not ours to know.
        argv = sanitizer.sanitizer_command(sanitize[1], sanitize[0], jobdir / "sanitizer.log", argv)
    else:
        read_end, keep, more = open_lifeline([jobdir])
        env.update(more)
        passed = (read_end,)
    # Both its streams go to one pipe the parent drains, keeping the end
    # (StderrTail): a worker printing without end costs neither memory nor disk.
    out_read, out_write = os.pipe()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out_write,
            stderr=out_write,
            env=env,
            start_new_session=True,
            pass_fds=passed,
        )
    except BaseException:
        shutil.rmtree(jobdir, ignore_errors=True)
        if keep is not None:
            os.close(keep)
        os.close(out_read)
        raise
    finally:
        for fd in (*passed, out_write):
            os.close(fd)
    output = StderrTail(out_read)
    try:
        return finish_worker(proc, output, jobdir, timeout, sanitize, job)
    except BaseException:
        kill_group(proc)
        shutil.rmtree(jobdir, ignore_errors=True)
        raise
    finally:
        if keep is not None:
            os.close(keep)  # the worker has ended: its lifeline may go


def finish_worker(
    proc: subprocess.Popen,
    output: StderrTail,
    jobdir: Path,
    timeout: float,
    sanitize: tuple[str, str] | None,
    job: SizeJob,
) -> tuple[WorkerResult | None, Path, str]:
    """run_worker's answer, once its process has ended or been killed for its
    time; `output` drains what it printed."""
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    # The worker and anything it started: what it left running would hold
    # its output pipe open. Its group outlives the worker's reaping only
    # while such a process is in it, so the id is still the group's.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    output.finish()
    if timed_out:
        found = sanitizer_finding(jobdir, sanitize)
        return found or None, jobdir, f"timeout: no verdict within {timeout:g} s"
    tail = worker_text(output.since(0), STDERR_TAIL_CHARS)
    found = sanitizer_finding(jobdir, sanitize)
    if found:
        return found, jobdir, tail
    dir_fd = open_folder(jobdir)
    try:
        result = read_result(dir_fd, job)
    finally:
        os.close(dir_fd)
    if isinstance(result, str):
        return None, jobdir, death_reason(proc.returncode, tail + sanitizer_context(jobdir))
    return result, jobdir, tail


class ProcessPerSize:
    """A fresh worker process for every size (run_worker), for sizes under
    compute-sanitizer: the sanitizer writes one log per process and its
    records say nothing of which size was running, so one process holds one
    size and every fault it reports is that size's. The imports a process per
    size repeats (~0.4 s) are small beside a sanitized run."""

    def __init__(self, sanitize: tuple[str, str] | None):
        self.sanitize = sanitize  # (tool, executable); None: unsanitized, as bench/ compares

    def __enter__(self) -> ProcessPerSize:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def prestart(self) -> None:
        """Nothing to start ahead: each size starts its own process."""

    def run(self, job: SizeJob, timeout: float) -> tuple[WorkerResult | None, Path, str]:
        return run_worker(job, timeout, self.sanitize)

    def end(self) -> None:
        """Nothing to end: a size's process has ended when run() returns, and
        its folder is the one run() returned (the caller removes it)."""


def sanitizer_finding(jobdir: Path, sanitize: tuple[str, str] | None) -> SizeRun | None:
    """The worker's result when compute-sanitizer reported a kernel fault: an
    error of the tool's kind (memcheck, racecheck) naming what, where and who."""
    log = jobdir / "sanitizer.log"
    if not sanitize or not log.exists():
        return None
    text = read_sanitizer_log(log)
    faults = sanitizer.kernel_faults(sanitizer.parse_sanitizer_log(text, sanitize[0]))
    if not faults:
        return None
    return SizeRun.failed(WorkerError(sanitize[0], sanitizer.verdict(faults, text)))


def sanitizer_context(jobdir: Path) -> str:
    """What compute-sanitizer said about itself, for a worker that died under it."""
    log = jobdir / "sanitizer.log"
    if not log.exists():
        return ""
    said = sanitizer.tool_problems(read_sanitizer_log(log))
    return ("\ncompute-sanitizer: " + "; ".join(said)) if said else ""


# The most of a sanitizer's log the parent reads: its records come first (it
# prints sanitizer.PRINT_LIMIT of them), its summary last; whatever grew the
# log in between (a flood of API errors) is left out.
SANITIZER_LOG_HEAD = 256 << 10
SANITIZER_LOG_TAIL = 16 << 10


def read_sanitizer_log(log: Path) -> str:
    return read_head_and_tail(log, SANITIZER_LOG_HEAD, SANITIZER_LOG_TAIL)
