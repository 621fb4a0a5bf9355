"""Advisory locks that die with their holder: one process at a time per run
directory, per sweep run, per roofline measurement.

A lock is `flock(LOCK_EX)` on a lock file. The kernel drops it when the
holder's descriptor closes, however the holder ends (kill -9 included), so
a stale lock never needs clearing by hand; the file itself stays and is
harmless. The holder writes its pid and what it is doing into the file, so a
process refused the lock can name who holds it. The pid is only a message:
whether the lock is held is the kernel's answer, never the file's text.

Why flock and not a pid file alone: a pid file outlives a killed holder and
its pid may be reused, so deciding staleness from it is a guess; flock is not.
On a file system without flock (some network mounts) `flock` fails with an
OSError the caller reports; mlxsci does not fall back to guessing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".lock"  # in a run directory


class LockHeld(Exception):
    """Another live process holds the lock. `pid` is what the holder wrote
    (None when it had not written yet), `doing` its description."""

    def __init__(self, path: Path, pid: int | None, doing: str):
        self.path = Path(path)
        self.pid = pid
        self.doing = doing
        who = f"process {pid}" if pid is not None else "another process"
        what = f" ({doing})" if doing else ""
        super().__init__(f"{self.path.parent} is in use by {who}{what}; lock file {self.path}")


# A lock file is opened without following a link (a run directory received
# from elsewhere may hold `.lock -> ~/.bashrc`, which stamping the pid would
# overwrite) and without blocking (a FIFO would hold the open forever); one
# that is not a regular file is refused (NotALockFile), never used.
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotALockFile(OSError):
    """What sits where a lock file belongs is a link, a FIFO, a folder: the
    user removes it (mlxsci never removes what it did not make)."""

    def __init__(self, path: Path):
        super().__init__(
            errno.EINVAL,
            "is not a regular file (a link, a FIFO or a folder where a lock file belongs): "
            "remove it and run again",
            str(path),
        )


def _open_existing(path: Path, flags: int) -> int:
    """A descriptor of the regular file at `path` (created when O_CREAT is
    in `flags`); NotALockFile when something else is there."""
    try:
        fd = os.open(path, flags | _FLAGS, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise NotALockFile(Path(path)) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotALockFile(Path(path))
    return fd


def holder(path: Path) -> tuple[int | None, str]:
    """(pid, description) written by the lock's last holder; (None, "") when
    unreadable. Only for messages: the file may be stale."""
    try:
        fd = _open_existing(Path(path), os.O_RDONLY)
    except OSError:
        return None, ""
    try:
        text = os.pread(fd, 4096, 0).decode(errors="replace")
    except OSError:
        return None, ""
    finally:
        os.close(fd)
    first, _, rest = text.partition("\n")
    try:
        pid = int(first.strip())
    except ValueError:
        return None, ""
    return pid, rest.strip()


class Lock:
    """A held lock; `release()` (or leaving the `hold` block) lets it go."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None


def _open(path: Path) -> int:
    return _open_existing(path, os.O_RDWR | os.O_CREAT)


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _stamp(fd: int, doing: str) -> None:
    """Write who holds the lock. Best effort: a full disk must not stop a run
    that could otherwise go on, and the lock itself is already held."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{doing}\n".encode(), 0)
    except OSError:
        pass


def acquire(path: Path, doing: str = "", wait: float = 0.0) -> Lock:
    """Take the lock at `path`, waiting up to `wait` seconds (0: not at all).
    LockHeld when another process still holds it then; OSError when the lock
    file cannot be made (a read-only folder: the caller says what to do)."""
    path = Path(path)
    fd = _open(path)
    try:
        deadline = time.monotonic() + wait
        while not _try(fd):
            if time.monotonic() >= deadline:
                pid, what = holder(path)
                raise LockHeld(path, pid, what)
            time.sleep(0.05)
    except BaseException:
        os.close(fd)
        raise
    _stamp(fd, doing)
    return Lock(path, fd)


def acquire_blocking(path: Path, doing: str = "") -> Lock:
    """Take the lock at `path`, waiting as long as its holder works (a
    roofline measured by another process: wait for it, then use its result)."""
    path = Path(path)
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    _stamp(fd, doing)
    return Lock(path, fd)


def is_held(path: Path) -> bool:
    """Whether a live process holds the lock at `path` now (a missing file:
    no). Racy by nature: for reports and skipping, never for exclusion."""
    try:
        fd = _open_existing(Path(path), os.O_RDONLY)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        return False
    finally:
        os.close(fd)


@contextmanager
def hold(path: Path, doing: str = "", wait: float = 0.0):
    lock = acquire(path, doing, wait)
    try:
        yield lock
    finally:
        lock.release()


# ------------------------------------------------------------------ building a cache entry once
# How long a builder waits for another process's build of the same entry
# before it builds for itself and keeps nothing: a holder stopped with
# Ctrl-Z or SIGSTOP must not hang every evaluation on the machine.
PATIENCE_SECONDS = 600.0
# A file system without flock (some network mounts): build without the lock.
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL}


def _stderr_line(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a closed stderr must not stop a build
        pass


def entry_lock_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".lock")


@contextmanager
def building(path: Path, doing: str, waiting=None, patience: float = PATIENCE_SECONDS):
    """Hold the lock beside the cache entry at `path` (`<entry>.lock`) while
    building it: one process builds, the others wait, then read what it
    wrote; so the caller reads the entry again once it holds the lock. Yields
    whether this process holds it: False when another has held it for
    `patience` seconds (stopped, or hung), and the caller then builds for
    itself and keeps nothing. `waiting` (a callable taking a line; default
    stderr) hears whom it waits for. Where the file system has no flock, it
    builds without (a duplicate build costs time; the seal guards what is read)."""
    where = entry_lock_path(path)
    say = waiting or _stderr_line
    lock = None
    held = True
    try:
        try:
            lock = acquire(where, doing)
        except LockHeld as first:
            who = f"process {first.pid}" if first.pid is not None else "another process"
            say(f"waiting for {who}, {first.doing or 'building ' + where.stem}...")
            try:
                lock = acquire(where, doing, wait=patience)
            except LockHeld:
                say(
                    f"{who} has held {where} for {patience:g} s: going on without it "
                    "(this build is kept by no one)"
                )
                held = False
    except OSError as exc:
        if exc.errno not in _NO_FLOCK:
            raise
    try:
        yield held
    finally:
        if lock is not None:
            lock.release()
