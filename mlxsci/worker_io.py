"""What crosses between a worker and its parent, bounded and scrubbed.

A worker runs a candidate's code, so everything it hands back is hostile
input: its stderr (drained by a thread and kept only at its end, so a
candidate printing without end costs the parent neither memory nor disk),
the files it writes (read only up to a size). What it may print is cleaned
by mlxsci.redaction.worker_text, its environment made by
mlxsci.redaction.minimal_worker_env.
"""

from __future__ import annotations

import os
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
