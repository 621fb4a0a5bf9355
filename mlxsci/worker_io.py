"""What crosses between a worker and its parent, bounded and scrubbed.

A worker runs a candidate's code, so everything it hands back is hostile
input: its stderr (drained by a thread and kept only at its end, so a
candidate printing without end costs the parent neither memory nor disk),
the files it writes (read only up to a size), and what it can read of its
parent's environment (an allowlist: no API key, no user variable).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

# The only variables a worker inherits: what Python, MLX and the backend need
# (no API key, no user variable). mlxsci.redaction will own this list.
WORKER_ENV = (
    "PATH",
    "PYTHONPATH",  # the worker imports the same mlxsci as its parent
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "MLXSCI_CACHE_DIR",
    "MLXSCI_TEST_MARK",  # no secret: the tests find their workers' processes by it
    "MLXSCI_SIM_FIBERS",
    "MLXSCI_SIM_SCHEDULE",
    "MLXSCI_SIM_UCONTEXT",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
)


def minimal_worker_env(backend: str) -> dict[str, str]:
    """The environment a worker starts with (on every backend)."""
    env = {k: os.environ[k] for k in WORKER_ENV if k in os.environ}
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def worker_text(raw: bytes, limit: int) -> str:
    """Bytes a worker printed, made safe to quote: decoded, control characters
    but newline and tab dropped, at most `limit` characters (the end)."""
    text = raw.decode(errors="replace")
    text = "".join(c for c in text if c in "\n\t" or c.isprintable())
    return text[-limit:]


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
