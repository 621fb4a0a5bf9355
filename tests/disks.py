"""Small disks for the tests of full disks: a tmpfs mounted for a block, filled to a given free space."""

import shutil
import subprocess
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest


# ------------------------------------------------------------------ disks
def mount_tmpfs(where: Path, megabytes: int, read_only: bool = False) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    opts = f"size={megabytes}m" + (",ro" if read_only else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True
    )
    return done.returncode == 0


def unmount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


@contextmanager
def tmpfs(where: Path, megabytes: int, read_only: bool = False):
    """A tmpfs mounted at `where` for the block; the test is skipped where
    none can be mounted."""
    if not mount_tmpfs(where, megabytes, read_only):
        pytest.skip("needs a tmpfs (mount)")
    try:
        yield where
    finally:
        unmount(where)


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` but for about `leave` bytes."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        left = max(0, free - leave)
        while left > 0:
            f.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
    return filler


ENOSPC_WORKER = textwrap.dedent("""
    import os, sys
    status = os.fdopen(int(sys.argv[-1]), "w", buffering=1)
    status.write("ready\\n")
    sys.stdin.readline()
    sys.stderr.write("OSError: [Errno 28] No space left on device\\n")
    os._exit(1)
""")
