"""A worker's lifeline: a worker process never outlives its parent for long.

However the parent ends (an exception, SIGTERM, kill -9), the worker it
started must not run on for minutes with no one to answer to, nor leave its
folders behind. The parent (mlxsci.evaluation.runner) opens a pipe, keeps the write
end, and hands the read end to the worker (open_lifeline). Nothing is ever
written on it but GOODBYE; its read end sees end-of-file once every copy of
the write end is closed, which the parent does only after the worker has
ended, and which the system does when the parent dies, however it died. So
end-of-file on the lifeline means the parent is gone: the worker's watcher
thread (Lifeline) then removes the folders its parent made for it and kills
the worker's process group (the worker and every compiler or tool it
started). The watcher needs no cooperation from the job: a kernel runs in
native code without Python's lock, so the watcher runs beside it.

A --serve worker also ends when its stdin closes; its parent writes GOODBYE on
the lifeline first, so that only an end of stdin without it is the parent's
death.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import stat
import threading
from pathlib import Path

# The environment a parent (mlxsci.evaluation.runner) starts a worker with: the file
# descriptor of its lifeline's read end, and the folders it made for the
# worker (os.pathsep between them).
LIFELINE_ENV = "MLXSCI_WORKER_LIFELINE"
LEFTOVERS_ENV = "MLXSCI_WORKER_LEFTOVERS"
# Set by a sandboxed worker's boot for itself: a pidfd of its parent.
PARENT_PIDFD_ENV = "MLXSCI_PARENT_PIDFD"
# What a parent writes on the lifeline when it ends a --serve worker itself
# (before closing its stdin), so that end of stdin is not taken for its death.
GOODBYE = b"."


def open_lifeline(leftovers: list[Path]) -> tuple[int, int, dict]:
    """For the parent: (read end, to pass to the worker only, through
    pass_fds, and close here once it started; write end, to keep open until
    the worker has ended; the environment that tells the worker both the
    read end and the folders to remove should its parent die)."""
    read_end, write_end = os.pipe()
    env = {LIFELINE_ENV: str(read_end), LEFTOVERS_ENV: os.pathsep.join(map(str, leftovers))}
    return read_end, write_end, env


class Lifeline:
    """For the worker: the read end of its lifeline, watched by a thread that
    removes the parent's folders for this worker and kills this process's
    group once the parent is gone."""

    def __init__(self, fd: int, leftovers: list[str], parent_pidfd: int | None = None):
        self.fd = fd
        self.leftovers = leftovers
        # A sandboxed worker's own watch on its parent (mlxsci.sandbox's boot
        # opens it): readable once the parent has exited, however it ended,
        # and whatever the worker's code did to the pipe (arbitrary code
        # could reopen the pipe's write end through /proc/self/fd and so keep
        # end-of-file from ever coming).
        self.parent_pidfd = parent_pidfd
        self.watcher = threading.Thread(target=self.watch, name="lifeline", daemon=True)

    @classmethod
    def from_environment(cls) -> Lifeline | None:
        """The lifeline the parent handed over, watched from now on; None when
        there is none (a worker started by hand)."""
        # Popped: the processes this one starts are not workers.
        value = os.environ.pop(LIFELINE_ENV, "")
        leftovers = [p for p in os.environ.pop(LEFTOVERS_ENV, "").split(os.pathsep) if p]
        try:
            fd = int(value)
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return None
        except (ValueError, OSError):
            return None
        os.set_inheritable(fd, False)  # the compilers and tools this one starts need none
        pidfd = os.environ.pop(PARENT_PIDFD_ENV, "")
        lifeline = cls(fd, leftovers, int(pidfd) if pidfd.isdigit() else None)
        lifeline.watcher.start()
        return lifeline

    def watch(self) -> None:
        watched = [self.fd] + ([self.parent_pidfd] if self.parent_pidfd is not None else [])
        try:
            ready = select.select(watched, [], [])[0]
            if self.parent_pidfd in ready:  # the parent has exited
                said = b""
            else:
                said = os.read(self.fd, 1)
        except (OSError, ValueError):  # a descriptor closed under us: no parent to trust
            said = b""
        if not said:  # end-of-file: the parent is gone; GOODBYE: it ends us itself
            self.parent_gone()

    def parent_gone(self) -> None:
        for folder in self.leftovers:
            if Path(folder).name.startswith("mlxsci-"):  # only what a parent made
                shutil.rmtree(folder, ignore_errors=True)
        # The parent starts every worker in a session of its own (the worker, or
        # compute-sanitizer around it, leads it): that group is ours to kill.
        if os.getpgrp() == os.getsid(0):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(1)

    def parent_gone_now(self) -> bool:
        """Whether the lifeline has ended already (without waiting)."""
        return bool(select.select([self.fd], [], [], 0)[0])

    def settle(self) -> None:
        """Before this process exits: let the watcher finish what it started
        (its job ends this process when the parent is gone)."""
        self.watcher.join()
