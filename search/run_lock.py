"""One process per run directory, and a run directory that cannot be written.

A search holds its run directory's lock (mlxsci/storage/locks.py: `<run dir>/.lock`,
a flock the kernel drops when the holder ends, kill -9 included) from before
it writes anything there, run.json included, until its manifest is written.
A second search, resume or sweep on the same folder is refused with LockHeld,
naming the holder's pid, and writes nothing: two processes appending to one
history.jsonl recorded iterations twice ([0, 1, 2, 3, 3, 4, 4, ...]) and left a
summary that disagreed with the per-iteration files.

A new run looks before it takes anything: a folder that holds an earlier run
is refused (LockHeld while that run goes on, FileExistsError otherwise)
without a lock file being made in it. A resume checks that the folder is a
run directory first, for the same reason.

A run directory that cannot be written (a read-only mount, another user's
folder) cannot be locked either. Its resume then reads what is recorded: a
finished run with nothing left to do gives its summary, as the run gave it;
with work left it is RunDirUnwritable (exit code 2 on the command line), a
fault of the machine (mlxsci/storage/faults.py) for a sweep.

The lock file is no record of the run: search/manifest.py leaves it out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlxsci.search.options import SearchOptions, check_extension, make_run_dir, resumed_options
from mlxsci.search.rundir import RunDir
from mlxsci.storage import locks
from mlxsci.storage.faults import EnvironmentFault

LOCK_NAME = locks.LOCK_NAME


class RunDirUnwritable(EnvironmentFault):
    """The run directory cannot be written, so it cannot be locked or resumed."""


def lock_path(run_dir: Path) -> Path:
    return Path(run_dir) / LOCK_NAME


def take(run_dir: Path, doing: str) -> locks.Lock:
    """Run_dir's lock, now: LockHeld while another process holds it,
    RunDirUnwritable when the lock file cannot be made or locked, ValueError
    when what is there is no lock file (a link, a FIFO: locks.NotALockFile)."""
    fix = "copy it to a folder you can write and resume the copy"
    try:
        lock = locks.acquire(lock_path(run_dir), doing)
    except locks.NotALockFile as exc:  # not the folder's fault: a usage error
        raise ValueError(f"{exc.filename} {exc.strerror}") from None
    except OSError as exc:
        raise RunDirUnwritable(
            f"{run_dir} cannot be written ({exc.strerror or exc}), so it cannot be locked",
            fix=fix,
        ) from None
    # A lock file left writable in a folder that is not (chmod a-w, as its
    # owner) opens and locks: the folder itself must take new files too.
    if not os.access(run_dir, os.W_OK | os.X_OK):
        lock.release()
        raise RunDirUnwritable(f"{run_dir} cannot be written (permission denied)", fix=fix)
    return lock


def refuse_if_held(run_dir: Path) -> None:
    """LockHeld, naming the holder, when a live process holds run_dir's lock.
    Only looks: never makes the lock file."""
    path = lock_path(run_dir)
    if locks.is_held(path):
        pid, doing = locks.holder(path)
        raise locks.LockHeld(path, pid, doing)


@contextmanager
def starting(run_dir: Path) -> Iterator[locks.Lock]:
    """Hold the lock of a new run in run_dir, made here (search/options.py
    make_run_dir says why not when it holds an earlier run)."""
    refuse_if_held(run_dir)
    make_run_dir(run_dir)
    lock = take(run_dir, "a search")
    try:
        make_run_dir(run_dir)  # again, under the lock: no run began there meanwhile
        yield lock
    finally:
        lock.release()


@contextmanager
def resuming(run_dir: Path, given: dict, lock: locks.Lock | None = None) -> Iterator[SearchOptions]:
    """Hold the lock of the run in run_dir (unless the caller does: `lock`)
    and give its options (search/options.py resumed_options, with `given`),
    read under the lock. Every check of the options comes first, so a folder
    that holds no run that could resume gets no lock file."""
    resumed_options(run_dir, **given)
    if lock is None:
        refuse_if_held(run_dir)  # before the lock file is opened: a read-only folder too
        lock = held = take(run_dir, "a search (resumed)")
    else:
        held = None
    try:
        yield resumed_options(run_dir, **given)  # as they are now: a holder may have changed them
    finally:
        if held is not None:
            held.release()


def work_left(opts: SearchOptions, history: list[dict]) -> str | None:
    """What a resume of this run would still do, in words; None when nothing
    (the same tests search/loop.py's run_search makes before each iteration)."""
    if not history:
        return "its seed is not evaluated yet"
    done = max(r["iteration"] for r in history)
    if history[-1].get("exhausted") or done >= opts.iterations:
        return None
    cost = sum(r.get("cost_usd", 0.0) for r in history)
    if opts.max_cost is not None and cost >= opts.max_cost:
        return None
    return f"{opts.iterations - done} of its {opts.iterations} iterations are left"


def recorded_result(run_dir: Path, unwritable: RunDirUnwritable, **given) -> dict:
    """The summary of the finished run in run_dir, which cannot be written,
    when a resume with `given` (iterations, max_cost, ...) has nothing left to
    do; RunDirUnwritable saying what is left otherwise."""
    opts = resumed_options(run_dir, **given)
    rd = RunDir(run_dir)
    history = rd.history()
    check_extension(history, given.get("iterations"))
    left = work_left(opts, history)
    summary = None
    try:
        summary = json.loads(rd.file("summary.json").read_bytes())
    except (OSError, ValueError):
        pass
    done = max((r["iteration"] for r in history), default=None)
    if left is None and not (isinstance(summary, dict) and summary.get("iterations") == done):
        left = "its summary is not written yet"  # the held-out evaluation, at least
    if left is not None:
        raise RunDirUnwritable(
            f"{unwritable.what}: {left}", unwritable.path, unwritable.fix
        ) from None
    assert isinstance(summary, dict)
    summary["run_dir"] = str(run_dir)
    return summary
