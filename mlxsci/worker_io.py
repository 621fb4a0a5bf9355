"""What crosses between a worker and its parent, bounded and scrubbed.

A worker runs a candidate's code, so everything it hands back is hostile
input: its stderr (drained by a thread and kept only at its end, so a
candidate printing without end costs the parent neither memory nor disk),
the files it writes (read only up to a size). What it may print is cleaned
by mlxsci.redaction.worker_text, its environment made by
mlxsci.redaction.minimal_worker_env.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

# How much of a worker's stderr a verdict may quote, and how much the parent
# keeps of it at all: a candidate printing without end costs neither memory
# nor disk.
STDERR_TAIL_CHARS = 2000
STDERR_KEEP_BYTES = 64 * 1024


def read_bounded(path: Path, limit: int) -> bytes:
    """A file a worker wrote, refused (empty) past `limit` bytes or when unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return b""
    return b"" if len(data) > limit else data


class StderrTail:
    """A worker's stderr, drained by a thread so the worker never blocks on a
    full pipe, keeping only its last STDERR_KEEP_BYTES and the count of all."""

    def __init__(self, fd: int):
        self.fd = fd
        self.total = 0
        self.kept = bytearray()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self.drain, name="worker-stderr", daemon=True)
        self.reader.start()

    def drain(self) -> None:
        try:
            while chunk := os.read(self.fd, 65536):
                with self.lock:
                    self.total += len(chunk)
                    self.kept += chunk
                    if len(self.kept) > STDERR_KEEP_BYTES:
                        del self.kept[: len(self.kept) - STDERR_KEEP_BYTES]
        except OSError:
            pass
        finally:
            os.close(self.fd)

    def since(self, start: int) -> bytes:
        """What arrived after byte `start` of the stream, as far as it is kept."""
        with self.lock:
            n = min(len(self.kept), max(0, self.total - start))
            return bytes(self.kept[len(self.kept) - n :]) if n else b""

    def finish(self, wait: float = 2.0) -> None:
        """Wait (briefly) for the rest of a worker that has ended."""
        self.reader.join(wait)


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


def read_result(path: Path) -> dict | None:
    """A worker's result.json, or None when it is missing, larger than
    RESULT_BYTES, not JSON or not an object (the size then fails, the parent
    lives on)."""
    data = read_bounded(path, RESULT_BYTES)
    try:
        result = json.loads(data) if data else None
    except ValueError:
        return None
    return result if isinstance(result, dict) else None
