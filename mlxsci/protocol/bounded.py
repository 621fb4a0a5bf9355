"""A child process's output, drained to its end and kept only in part.

What a process that runs a candidate's code or reads its text prints (a
worker, a worker under compute-sanitizer, the simulator's compiler quoting
the candidate in its diagnostics) is hostile input of any size: a candidate
once made its parent hold 842 MB of a worker's stderr. `Drain` reads such a
pipe in a thread of its own, so the child never blocks on a full pipe,
counts every byte and keeps only the first `head` and the last `tail` of
them: what the parent holds is bounded whatever the child prints, and no
file grows with it. `read_head_and_tail` reads a log file the same way.
Nothing here imports the rest of mlxsci.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

# What stands where the middle of a text was left out.
CUT_NOTE = "\n[... {} bytes left out ...]\n"

# Bytes asked of a pipe at once: a pipe's whole buffer on Linux.
READ_BYTES = 64 * 1024


class Drain:
    """A pipe's reading end (`fd`, closed at its end), drained by a thread:
    the first `head` and the last `tail` bytes kept, and the count of all.
    `limit`: once more than this many bytes came, `on_limit` is called once
    (from the thread), to stop a child that will not stop by itself; the
    thread reads on to the end either way, then sets `ended` and calls
    `on_end`."""

    def __init__(
        self,
        fd: int,
        head: int = 0,
        tail: int = 64 * 1024,
        limit: int | None = None,
        on_limit: Callable[[], None] | None = None,
        on_end: Callable[[], None] | None = None,
        name: str = "output-drain",
    ):
        self.fd = fd
        self.head_bytes, self.tail_bytes = head, tail
        self.limit, self.on_limit, self.on_end = limit, on_limit, on_end
        self.total = 0
        self.head = bytearray()
        self.tail = bytearray()
        self.passed_limit = False
        self.ended = threading.Event()
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self.drain, name=name, daemon=True)
        self.reader.start()

    def drain(self) -> None:
        try:
            while chunk := os.read(self.fd, READ_BYTES):
                with self.lock:
                    self.keep(chunk)
                    over = self.limit is not None and self.total > self.limit
                    tell = over and not self.passed_limit
                    self.passed_limit = over
                if tell and self.on_limit is not None:
                    self.on_limit()
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.ended.set()
            if self.on_end is not None:
                self.on_end()

    def keep(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_bytes - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_bytes > 0:
            self.tail += chunk
            if len(self.tail) > self.tail_bytes:
                del self.tail[: len(self.tail) - self.tail_bytes]

    def since(self, start: int) -> bytes:
        """What of the tail arrived after byte `start` of the stream (the
        part of one size's output that is kept)."""
        with self.lock:
            n = min(len(self.tail), max(0, self.total - start))
            return bytes(self.tail[len(self.tail) - n :]) if n else b""

    def kept(self) -> bytes:
        """The head and the tail, with a note of what was left out between them."""
        with self.lock:
            left_out = self.total - len(self.head) - len(self.tail)
            if left_out <= 0:
                return bytes(self.head + self.tail)
            return bytes(self.head) + CUT_NOTE.format(left_out).encode() + bytes(self.tail)

    def finish(self, wait: float = 2.0) -> None:
        """Wait (briefly) for the rest of a child that has ended: a process it
        left behind could hold the pipe open for ever."""
        self.reader.join(wait)


def read_head_and_tail(path: Path, head: int, tail: int) -> str:
    """A log file's first `head` and last `tail` bytes, decoded, with a note
    of what was left out between them ("" when it cannot be read)."""
    try:
        with open(path, "rb") as log:
            size = os.fstat(log.fileno()).st_size
            if size <= head + tail:
                data = log.read(head + tail)
            else:
                first = log.read(head)
                log.seek(size - tail)
                data = first + CUT_NOTE.format(size - head - tail).encode() + log.read(tail)
    except OSError:
        return ""
    return data.decode(errors="replace")
