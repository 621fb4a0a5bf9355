"""The simulator's precompiled headers: one per dialect's include prefix.

Parsing the TU's leading #include lines (the runtime headers, the prelude and
the C++ headers they pull in) is most of a kernel's compile: 0.25 of 0.35 s in
Metal, 0.4 of 0.55 s in CUDA on a 2-core machine. Those lines are the same for
every kernel of a dialect, so they are compiled once into a PCH that every
later compile loads (-include-pch); the headers' include guards then skip
their #include lines in the TU. The object code is the same as without it
(checked with objdump on seed kernels). A PCH that cannot be built or loaded
costs nothing but the speed: the compile runs without it.

Cache entries: `pch-<key>.pch` and the header it is built from, `pch-<key>.h`,
both sealed (mlxsci/storage/cache.py) and both checked before use, built by one
process at a time (`pch-<key>.pch.lock`). A damaged one, or a PCH the
compiler refuses, is named on stderr and built again.

Separate from build.py (the TU, the library cache) and toolchain.py (the
compiler itself) because it is a speed-up with its own cache entries and
failure handling, which neither of them needs to know about.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

from mlxsci.backends.sim.toolchain import (
    CXX_FLAGS,
    INCLUDE_DIR,
    STATS,
    cache_dir,
    compile_and_link,
    current_deadline,
    run_compiler,
    runtime_digest,
    zig_executable,
)
from mlxsci.storage.cache import discard, install_verified, report_damaged, verify_file
from mlxsci.storage.locks import building

_PCH_FAILED: set = set()


def _include_prefix(tu: str) -> str:
    """The TU's leading `#include "..."` lines: the dialect's runtime headers."""
    lines = []
    for line in tu.split("\n"):
        if not line.startswith('#include "'):
            break
        lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def _pch_path(prefix: str, extra_defines: tuple[str, ...]) -> Path:
    # zig's path too: the PCH names the C++ headers of the zig that built it.
    key = hashlib.sha256(
        "\0".join((runtime_digest(), zig_executable(), prefix, *extra_defines)).encode()
    )
    return cache_dir() / f"pch-{key.hexdigest()[:32]}.pch"


def _usable(pch: Path, header: Path) -> bool:
    """Whether the PCH and the header it was built from are both as sealed
    (each checked, so each damaged one is named)."""
    header_ok = verify_file(header)
    return verify_file(pch) and header_ok


def _precompiled_header(tu: str, extra_defines: tuple[str, ...]) -> Path | None:
    """The PCH of `tu`'s include prefix, built on first use; None where there
    is no prefix or building it failed in this process."""
    prefix = _include_prefix(tu)
    if not prefix:
        return None
    pch = _pch_path(prefix, extra_defines)
    header = pch.with_suffix(".h")
    if _usable(pch, header):  # sealed by this cache's key, not planted or damaged
        return pch
    if pch in _PCH_FAILED:
        return None
    # One builder at a time: a PCH's bytes differ from build to build, and it
    # records its header's size and mtime, so a second builder rewriting the
    # header would make the compiler refuse the first one's PCH.
    with building(pch, "building a precompiled header", patience=_patience()) as held:
        if _usable(pch, header):
            return pch
        if not held:  # its builder is stopped or slow: compile without it (slower, as right)
            return None
        if not verify_file(header):
            fd, tmp_h = tempfile.mkstemp(prefix=pch.stem + ".", suffix=".h.tmp", dir=pch.parent)
            with os.fdopen(fd, "w") as f:
                f.write(prefix)
            install_verified(Path(tmp_h), header)
        fd, tmp = tempfile.mkstemp(prefix=pch.stem + ".", suffix=".pch.tmp", dir=pch.parent)
        os.close(fd)
        res = run_compiler(
            [
                "c++",
                *CXX_FLAGS,
                *extra_defines,
                "-I",
                str(INCLUDE_DIR),
                "-x",
                "c++-header",
                str(header),
                "-o",
                tmp,
            ]
        )
        STATS["pch_builds"] += 1
        if res.returncode != 0:
            Path(tmp).unlink(missing_ok=True)
            _PCH_FAILED.add(pch)
            return None
        install_verified(Path(tmp), pch)  # sealed before it is in place
    return pch


def _patience() -> float:
    """Seconds to wait for another process's build of a PCH: at most a
    minute, and never past the compile's deadline (the size's, when a worker
    asked for the kernel), less time for the compile itself."""
    at = current_deadline()
    left = 60.0 if at is None else (at - time.monotonic()) / 2
    return max(0.0, min(60.0, left))


def _pch_refused(log: str, pch: Path) -> bool:
    """Whether clang refused the PCH itself: a header's mtime changed since it
    was built (a reinstall with the same contents), or another process removed
    it for that reason."""
    return any(w in log for w in ("precompiled header", "precompiled file", "PCH file", str(pch)))


def compile_with_pch(
    cpp: Path, so: Path, tu: str, extra_defines: tuple[str, ...], rt: Path
) -> subprocess.CompletedProcess:
    """compile_and_link with the TU's precompiled header where there is one.
    A PCH clang refuses (its header's mtime changed, or unreadable) is named,
    removed and built again at once, so this compile and the later ones keep
    the speed-up; refused again, this TU is compiled without it."""
    pch = _precompiled_header(tu, extra_defines)
    for attempt in range(2):
        res = compile_and_link(cpp, so, extra_defines, rt, pch=pch, kernel=True)
        STATS["compiles"] += 1
        if res.returncode == 0 or pch is None or not _pch_refused(res.stderr + res.stdout, pch):
            return res
        report_damaged(pch, "refused by the compiler (its header changed since it was built)")
        discard(pch)
        pch = _precompiled_header(tu, extra_defines) if attempt == 0 else None
    res = compile_and_link(cpp, so, extra_defines, rt, kernel=True)
    STATS["compiles"] += 1
    return res
