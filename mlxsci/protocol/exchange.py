"""What crosses between a worker and its parent, bounded and scrubbed.

A worker runs a candidate's code, so everything it hands back is hostile
input: its stderr (drained by a thread and kept only at its end, so a
candidate printing without end costs the parent neither memory nor disk:
mlxsci.protocol.bounded), the files it writes (read only up to a size), the
messages in its answer (cut to MESSAGE_CHARS). What it may print is cleaned
by mlxsci.evaluation.redaction.worker_text, its environment made by
mlxsci.evaluation.redaction.minimal_worker_env.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path

from mlxsci.protocol.bounded import CUT_NOTE, Drain
from mlxsci.protocol.jobs import Job
from mlxsci.protocol.results import (
    ComparedRuns,
    MalformedResult,
    SizeRun,
    WorkerResult,
    launch_answer,
)

# How much of a worker's stderr a verdict may quote, and how much the parent
# keeps of it at all: a candidate printing without end costs neither memory
# nor disk.
STDERR_TAIL_CHARS = 2000
STDERR_KEEP_BYTES = 64 * 1024


def open_folder(path: Path) -> int:
    """A descriptor of a folder the parent made, not following a link in its
    place: through it, files are opened where the parent made them, whatever
    the worker renames or links afterwards."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def read_worker_file(dir_fd: int, name: str, limit: int) -> bytes | None:
    """A file a worker wrote into its job folder (held by `dir_fd`, the
    descriptor of the folder the parent made), or None: missing, a link of
    any kind (it is not followed), not a regular file (a FIFO or a device
    would block or never end), or larger than `limit` bytes."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
        return None if size > limit else b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


class StderrTail(Drain):
    """A worker's stderr, drained by a thread so the worker never blocks on a
    full pipe, keeping only its last STDERR_KEEP_BYTES and the count of all
    (mlxsci.protocol.bounded.Drain)."""

    def __init__(self, fd: int):
        super().__init__(fd, head=0, tail=STDERR_KEEP_BYTES, name="worker-stderr")


def death_reason(returncode: int, stderr_tail: str) -> str:
    """Why a worker ended without a result, never a bare "worker died": the
    simulator's own last words when it left any (a fault it could not turn
    into a verdict), else the signal or exit code by name with the end of
    the worker's stderr."""
    last_words = [ln for ln in stderr_tail.splitlines() if ln.startswith("mlxsci-sim:")]
    if last_words:
        return last_words[-1].strip()
    tail = stderr_tail.strip()[-600:]
    if returncode >= 0:
        return f"the worker exited with exit code {returncode} without a result: {tail or '(no output)'}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    if name == "SIGSYS":
        return (
            "the sandbox stopped the worker: the candidate's code made a system call the "
            "sandbox forbids (a new process or thread, exec, a socket, ptrace, ...)"
        )
    if name == "SIGKILL":
        why = "killed from outside, most often by the system running out of memory"
    else:
        why = "a fault outside any kernel (in the harness or MLX)"
    return f"the worker process died of {name}, {why}: {tail or '(no output)'}"


# The most of a result.json the parent reads (a verdict is a few KB; the
# outputs travel in .npz files), and of one status line.
RESULT_BYTES = 16 << 20
STATUS_LINE_BYTES = 4096


def read_result(dir_fd: int, job: Job) -> WorkerResult | str:
    """A worker's result.json as its job's result type
    (mlxsci.protocol.results: SizeRun, ComparedRuns, a launch's record), or why not, as a
    str: missing, larger than RESULT_BYTES, not JSON, or a field not of its
    shape (named). The size then fails; the parent lives on."""
    data = read_worker_file(dir_fd, "result.json", RESULT_BYTES)
    if not data:
        return "the worker's result.json is missing or larger than the parent reads"
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        return "the worker's result.json is not JSON"
    if isinstance(raw, dict) and isinstance(raw.get("error"), dict):
        raw["error"] = cut_texts(raw["error"])
    try:
        if job.kind == "compare":
            return ComparedRuns.from_wire(raw)
        if job.kind == "launch":
            return launch_answer(raw)
        return SizeRun.from_wire(raw)
    except MalformedResult as exc:
        return f"the worker's result.json is malformed: {exc}"[:300]


# The most of any text of a worker's error the parent keeps: its message is
# quoted in verdicts, prompts and run records, its compile log and traceback
# are read for their first lines.
MESSAGE_CHARS = 8000


def cut_texts(error: dict) -> dict:
    """A worker's error with each text in it cut to MESSAGE_CHARS (its start
    kept: where a message or a compiler's first error is), and no text left
    in its details past them (a sanitizer's log, a schedule's name)."""
    cut = {}
    for key, value in error.items():
        if isinstance(value, str) and len(value) > MESSAGE_CHARS:
            value = value[:MESSAGE_CHARS] + CUT_NOTE.format(len(value) - MESSAGE_CHARS).rstrip()
        elif isinstance(value, (dict, list)) and len(json.dumps(value)) > MESSAGE_CHARS:
            value = {"cut": f"{len(json.dumps(value))} characters of details left out"}
        cut[key] = value
    return cut


# The most verification runs under other schedules a size has on the
# simulator (mlxsci.worker.serve.schedule_plan), and the file of the k-th's outputs
# (k from 1), left only when they differ bitwise from the verified ones.
MAX_SCHEDULES = 8


def schedule_file(k: int) -> str:
    return f"schedule_{k}.npz"


# The files of outputs a worker leaves beside its result (mlxsci.worker).
OUTPUT_FILES = ("verified.npz", "second.npz", "last.npz") + tuple(
    schedule_file(k) for k in range(1, MAX_SCHEDULES + 1)
)
# An output file's bytes beyond the outputs' own: the archive's headers.
ARCHIVE_SLACK = 1 << 20


def copy_outputs(dir_fd: int, result: WorkerResult | None, job: Job) -> Path:
    """A folder of the parent's own (not writable by the worker) holding a
    copy of each output file the worker left, read through `dir_fd` and no
    larger than the task's outputs at this size (job.output_bytes, which
    the parent computed from the reference) plus archive headers; a file
    that is not so is left out, and the checks fail the size for it."""
    folder = Path(tempfile.mkdtemp(prefix="mlxsci-checked-"))
    if result is None or job.kind == "compare":
        return folder
    if (result.get("error") if isinstance(result, dict) else result.error) is not None:
        return folder
    limit = job.output_bytes + ARCHIVE_SLACK
    # and the last timed run of each input set after the first (mlxsci.worker.runs.Rotation)
    rotated = [f"timed_{k}.npz" for k in range(1, len(job.input_seeds))]
    for name in (*OUTPUT_FILES, *rotated):
        data = read_worker_file(dir_fd, name, limit)
        if data is not None:
            (folder / name).write_bytes(data)
    return folder


def remove_tree(folder: Path) -> None:
    """Remove a folder a worker could write, whatever it holds: a tree made
    to break the removal (too deep, links, files in use) leaves what cannot
    go, never an exception for the parent."""
    try:
        shutil.rmtree(folder, ignore_errors=True)
    except Exception:  # noqa: BLE001 - RecursionError and the like: the size is judged already
        pass


# A count of a coverage record: non-negative and below 2^63 (what no run
# reaches); the words of a worker's reason for having none kept in a record.
COUNT_LIMIT = 1 << 63
COVERAGE_REASON_CHARS = 300


def coverage_counts(record, expected: dict[str, int]) -> dict[str, list[int]] | str:
    """The counts of a worker's coverage record (mlxsci.worker.serve.coverage_run)
    when it has the shape the parent expects: exactly the kernels of
    `expected`, each a list of exactly its number of counters (the parent's
    own: mlxsci.backends.base.BranchMap), each count an int in
    [0, COUNT_LIMIT), and outputs equal to the verified run's. Otherwise why
    not, as a str; never an exception, whatever the record holds (the
    candidate's code ran in the worker, and could write its counters)."""
    if not isinstance(record, dict):
        return "the worker sent no coverage record"
    if "error" in record:
        said = record["error"] if isinstance(record["error"], str) else "(not a text)"
        said = "".join(c if c.isprintable() else " " for c in said[:COVERAGE_REASON_CHARS])
        return f"the counted run did not complete: {said}"
    kernels = record.get("kernels")
    if not isinstance(kernels, dict) or set(kernels) != set(expected):
        return "malformed coverage record: not one list of counts per kernel"
    for name, n in expected.items():
        counts = kernels[name]
        if not isinstance(counts, list) or len(counts) != n:
            return f"malformed coverage record: kernel {name!r} has not {n} counts"
        if not all(type(x) is int and 0 <= x < COUNT_LIMIT for x in counts):
            return f"malformed coverage record: a count of kernel {name!r} is out of range"
    if record.get("equals_verified") is not True:
        return "the counted run's outputs differ from the verified run's"
    return {name: list(kernels[name]) for name in expected}
