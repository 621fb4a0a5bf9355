"""Faults of the machine, not of the candidate: no space, a read-only path, a
missing toolchain, a worker that could not start.

Such a fault is never a verdict. A candidate whose worker died because the
temporary folder was full did nothing wrong, and recording it as a crash
wastes the proposal that made it and blames the model. So an evaluation that
meets one raises `EnvironmentFault`; a search stops with exit status
`EXIT_CODE` and the command that resumes it, without recording the
iteration; a sweep leaves the run unfinished.

Who decides. A worker runs hostile code, and what it says about its own
death is its to invent, so the parent never takes a worker's word for an
environment fault. It decides from what it can check itself:
- its own operations: an OSError the parent meets while writing its folders,
  caches or run directory (`fault_of`, `parent_writes`);
- the machine after a failed size (`check_machine`): once the size's job
  folder is gone (so a worker that filled the disk itself is still blamed),
  whether the temporary folder and the cache still have room and can be
  written. A failure on a machine that cannot write is no verdict: the
  candidate is evaluated again once the machine is fixed;
- a worker that ended before it said it was ready: no candidate code had
  run in it yet (mlxsci/evaluation/runner.py's handshake).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

# The exit status of a run stopped by the machine: not 1 (the run finished
# and found nothing) nor 2 (the command line was wrong).
EXIT_CODE = 3

# Errors that say the machine cannot do what was asked, whatever the code asked.
_ALWAYS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EMFILE: "too many open files in this process",
    errno.ENFILE: "too many open files on this machine",
}
# Errors that say so only of a path (not, e.g., of a signal to a process).
_OF_A_PATH = {
    errno.EACCES: "permission denied",
    errno.EPERM: "the operation is not permitted",
}

# Room the parent wants in the temporary folder beyond a size's outputs (the
# job's folders, result.json, the parent's copies), and in the cache (a kernel
# library, a reference).
SPARE_BYTES = 16 << 20
_PROBE_BYTES = 64 << 10
ROOM_FIX = "free some space (or point TMPDIR / MLXSCI_CACHE_DIR elsewhere) and resume"


class EnvironmentFault(Exception):
    """The machine stopped the work. `what` says what failed, `path` where
    (None when it is not a path), `fix` what the user can do."""

    def __init__(self, what: str, path: str | os.PathLike | None = None, fix: str = ""):
        self.what = what
        self.path = None if path is None else str(path)
        self.fix = fix
        where = f" ({self.path})" if self.path else ""
        tail = f"; {fix}" if fix else ""
        super().__init__(f"{what}{where}{tail}")


def fault_of(exc: BaseException) -> EnvironmentFault | None:
    """The environment fault an exception is, or None when it is something
    else (a bug, a verdict). Only OSErrors qualify, by errno."""
    if isinstance(exc, EnvironmentFault):
        return exc
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    why = _ALWAYS.get(exc.errno)
    if why is None and exc.filename is not None:
        why = _OF_A_PATH.get(exc.errno)
    if why is None:
        return None
    fix = {
        errno.ENOSPC: ROOM_FIX,
        errno.EDQUOT: "free some space within your quota",
        errno.EROFS: "use a folder you can write",
        errno.EACCES: "use a folder you can write",
        errno.EPERM: "use a folder you can write",
    }.get(exc.errno, "")
    return EnvironmentFault(why, exc.filename, fix)


@contextmanager
def parent_writes():
    """Turn an environment OSError met inside the block into EnvironmentFault
    (the cause kept), letting every other exception through unchanged."""
    try:
        yield
    except OSError as exc:
        fault = fault_of(exc)
        if fault is None or fault is exc:
            raise
        raise fault from exc


def faults_raised(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` with its environment OSErrors raised as EnvironmentFault (for the
    parent's entry points: evaluate, compare)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with parent_writes():
            return fn(*args, **kwargs)

    return wrapper


def room_problem(folder: str | os.PathLike, need: int) -> str | None:
    """Why `folder` cannot take `need` more bytes now, or None when it can:
    too little free space (statvfs, as the user sees it in `df`), or a small
    file cannot be written and removed there (read-only, quota, permissions)."""
    folder = Path(folder)
    try:
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        return f"cannot inspect {folder}: {exc.strerror or exc}"
    if free < need:
        return (
            f"{folder} has {free / 2**20:.1f} MiB free, less than the {need / 2**20:.1f} MiB needed"
        )
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mlxsci-room-") as probe:
            probe.write(b"\0" * _PROBE_BYTES)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return f"{folder} cannot be written: {exc.strerror or exc}"
    return None


def check_machine(
    temp_bytes: int, folders: list[str | os.PathLike], temp: bool = True, failure: str = ""
) -> None:
    """After a size failed without a verdict of the parent's own (the worker
    died, or reported an error; `failure` says how): raise EnvironmentFault
    when the temporary folder cannot take `temp_bytes` more (unless `temp`
    is False) or one of `folders` (caches) cannot take SPARE_BYTES. Call it
    once the size's job folder has been removed, so the room a worker took
    for itself is not counted against the machine."""
    wanted = [(folder, SPARE_BYTES) for folder in folders]
    if temp:
        wanted.insert(0, (tempfile.gettempdir(), temp_bytes + SPARE_BYTES))
    for folder, need in wanted:
        why = room_problem(folder, need)
        if why:
            raise EnvironmentFault(
                f"{failure or 'a size failed'}, and the machine cannot run the evaluation: {why}",
                fix=ROOM_FIX,
            )


def check_after_failure(
    compiled: bool, temp_bytes: int, folders: list[str | os.PathLike], failure: str
) -> None:
    """check_machine for a size whose worker gave no result or an error: a
    compile or format error (`compiled`: it ended before any run) needs only
    the caches (`folders`), a run also `temp_bytes` of the temporary folder."""
    check_machine(0 if compiled else temp_bytes, folders, temp=not compiled, failure=failure)
