"""Assemble, compile, cache and load the simulator's kernel libraries.

A kernel library is one C++ translation unit (TU):

    #include "sim_runtime.h"         runtime ABI, fast path, threadgroup storage
    #include "sim_metal.h"           SIMD-group functions, barrier entry points
    #include "metal_prelude.h"       Metal language (types, math, atomics, ...)
    #include "sim_metal_post.h"      barrier macros, attribute helpers
    (the includes are the dialect's: sim_preludes in mlxsci/kernel/dialects.py)
    #line <header_line> "<file>"     the candidate's header ...
    #line 1 "<mlx-signature>"        ... MLX's generated signature ...
    #line <body_line> "<file>"       ... the candidate's body ...
    #line 1 "<sim-glue>"             ... and the glue calling the kernel

The kernel text is MLX's exact generated source (mlxsci.kernel.signature), passed
through the line-preserving Metal -> C++ rewrite, so every diagnostic inside
the header or body carries the candidate file's own line number.

It is compiled to an object file, then linked with the runtime object
(sim_runtime.cpp, compiled once) into a shared library cached under
$MLXSCI_CACHE_DIR/sim/ by the sha256 of the TU, the runtime sources, the flags
and the compiler version, and sealed (mlxsci.storage.cache.install_verified): a cached entry
is used only while its seal matches (a damaged one is named on stderr and
rebuilt). The TU itself, `k-<key>.cpp`, is the compiler's input, rewritten by
every build of it and never read back. The compiler, its flags and the runtime object are
toolchain.py's; the precompiled header every compile of a dialect loads is
pch.py's.
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlxsci.backends.sim import kernel_symbols
from mlxsci.backends.sim.pch import compile_with_pch
from mlxsci.backends.sim.toolchain import (
    OUTPUT_STOPPED,
    STATS,
    build_lock,
    cache_dir,
    compile_and_link,
    library_key,
    runtime_object,
    zig_cache_dir,
)
from mlxsci.kernel.spec import CompileError
from mlxsci.storage.cache import install_verified, read_verified, verify_file, write_verified
from mlxsci.storage.faults import ROOM_FIX, SPARE_BYTES, EnvironmentFault, room_problem

_loaded: dict[str, ctypes.CDLL] = {}


def line_directive_name(name: str) -> str:
    return name.replace("\\", "/").replace('"', "'").replace("\n", " ")


@dataclass
class Region:
    """Lines [first, last] (1-based, inclusive) of the kernel text that come
    from one place: a candidate-file line or a generated name."""

    first: int
    last: int
    file: str
    start_line: int


# What the TU's #line directives call the candidate's file: the compiled
# library depends on the candidate's text, not on where the file lives, so
# the cache key must not hold its path (build_library puts the real name back
# into compiler logs).
CANDIDATE_FILE = "<candidate-file>"


def assemble(
    text: str,
    regions: list[Region],
    glue: str,
    includes: list[Path],
    candidate_file: str | None = None,
    prologue: str = "",
) -> str:
    """The full TU: `includes` (runtime headers, prelude, post headers, in
    order), the `prologue` (what an instrumented kernel text calls:
    coverage.PROLOGUE), then the (rewritten) kernel text with a #line
    directive at the start of every region, then the glue. Regions of
    `candidate_file` are named CANDIDATE_FILE."""
    lines = text.split("\n")
    out = [f'#include "{p}"' for p in includes]
    if prologue:
        out += ['#line 1 "<sim-coverage>"', prologue]
    for r in regions:
        chunk = lines[r.first - 1 : r.last]
        if not chunk:
            continue
        name = CANDIDATE_FILE if candidate_file is not None and r.file == candidate_file else r.file
        out.append(f'#line {r.start_line} "{line_directive_name(name)}"')
        out.extend(chunk)
    out.append('#line 1 "<sim-glue>"')
    out.append(glue)
    return "\n".join(out) + "\n"


_DIAG = re.compile(r"^(.*?):(\d+):(?:(\d+):)? (fatal error|error|warning|note): (.*)$")


def parse_compile_error(log: str, source_file: str) -> CompileError:
    """CompileError for the first `error:` in clang's log, mapped to the
    candidate file when the error (or one of its notes) points there."""
    cand = line_directive_name(source_file)
    first = None
    first_line = None
    for raw in log.splitlines():
        m = _DIAG.match(raw)
        if not m:
            if first is None and "error:" in raw:
                first = raw.split("error:", 1)[1].strip()
            continue
        file, line, _col, kind, msg = m.groups()
        if kind in ("error", "fatal error"):
            if first is not None:
                break
            first = msg
            if file == cand:
                first_line = int(line)
                break
        elif kind == "note" and first is not None and first_line is None and file == cand:
            first_line = int(line)
            break
    if first is None:
        first = log.strip().splitlines()[-1] if log.strip() else "compilation failed"
    return CompileError(first, first_line, log)


_GENERATED_FILES = ("<mlx-signature>", "<sim-glue>")


def _error_in_kernel_text(log: str, source_file: str) -> bool:
    """Whether the first error sits in the candidate or MLX's generated text
    (a deterministic compile error worth caching)."""
    if parse_compile_error(log, source_file).line is not None:
        return True
    for raw in log.splitlines():
        m = _DIAG.match(raw)
        if m and m.group(4) in ("error", "fatal error"):
            return m.group(1) in _GENERATED_FILES
    return "undefined symbol" in log


_LINK_UNDEFINED = re.compile(r"ld\.lld: error: undefined symbol: (\S+)")


def _toolchain_lacks(log: str) -> list[str]:
    """The helpers a link did not find that the toolchain owes every kernel
    (compiler-rt's, the math library's), when the toolchain itself is
    damaged (an emptied libcompiler_rt.a in zig's cache): then their absence
    is the machine's fault, never the candidate's compile error. A name the
    intact toolchain never had (zig's compiler-rt has no __truncdfbf2: a
    double converted to bf16) is the candidate's, so the toolchain is asked
    first (_toolchain_intact)."""
    names = sorted(set(_LINK_UNDEFINED.findall(log)))
    owed = [
        n
        for n in names
        if n in kernel_symbols.ALLOWED_CALLS or kernel_symbols.COMPILER_RT_HELPERS.fullmatch(n)
    ]
    return owed if owed and not _toolchain_intact() else []


# A library needing a compiler-rt helper every half-converting kernel needs
# and a math function: it links where the toolchain is whole. Exported, or
# the link drops the unused function and, with it, what it needs.
_PROBE = (
    'extern "C" __attribute__((visibility("default"))) '
    "void mlxsci_probe(const float* x, _Float16* h, float* y) "
    "{ *h = (_Float16)*x; *y = __builtin_sinf(*x); }\n"
)


def _toolchain_intact() -> bool:
    """Whether zig's cache still provides the helpers every kernel links
    with: a probe library is linked (once per failed link that names such
    a helper, so only on failures)."""
    with tempfile.TemporaryDirectory(prefix="mlxsci-probe-") as folder:
        cpp = Path(folder, "probe.cpp")
        cpp.write_text(_PROBE)
        return compile_and_link(cpp, Path(folder, "probe.so"), ()).returncode == 0


def build_library(
    tu: str, source_file: str = "<candidate>", extra_defines: tuple[str, ...] = ()
) -> Path:
    """Compile `tu` into a cached shared library, returning its path.
    Raises CompileError with the candidate line of the first error; the log
    names `source_file` where the TU says CANDIDATE_FILE."""

    def named(log: str) -> str:
        return log.replace(f"{CANDIDATE_FILE}:", f"{line_directive_name(source_file)}:")

    with build_lock:
        key = library_key(tu, extra_defines)
        d = cache_dir()
        so = d / f"k-{key}.so"
        err = d / f"k-{key}.err"
        # An entry counts only when its seal (mlxsci.storage.cache) vouches for it: a
        # library or compile log planted or altered in the cache is rebuilt.
        if verify_file(so):
            STATS["cache_hits"] += 1
            return so
        cached_err = read_verified(err)
        if cached_err is not None and _toolchain_lacks(cached_err.decode(errors="replace")):
            cached_err = None  # cached before a damaged toolchain was told apart: build again
        if cached_err is not None:
            STATS["cache_hits"] += 1
            raise parse_compile_error(named(cached_err.decode(errors="replace")), source_file)
        rt = runtime_object(extra_defines)
        cpp = d / f"k-{key}.cpp"
        fd, tmp_cpp = tempfile.mkstemp(prefix=f"k-{key}.", suffix=".cpp.tmp", dir=d)
        with os.fdopen(fd, "w") as f:
            f.write(tu)
        os.replace(tmp_cpp, cpp)
        fd, tmp_so = tempfile.mkstemp(prefix=f"k-{key}.", suffix=".so.tmp", dir=d)
        os.close(fd)
        for _attempt in range(2):
            res = compile_with_pch(cpp, Path(tmp_so), tu, extra_defines, rt)
            if res.returncode == 0:
                break
            raw = res.stderr + res.stdout  # cached as is: it names CANDIDATE_FILE
            log = named(raw)
            # A compiler stopped for the flood of its diagnostics would flood
            # again: the candidate's text decides it, as a compile error does.
            deterministic = _error_in_kernel_text(log, source_file) or OUTPUT_STOPPED in log
            if deterministic:
                break
            # The first error is outside the kernel text (system headers, the
            # compiler's own cache): possibly transient, so try once more and
            # never cache it.
        if res.returncode != 0:
            Path(tmp_so).unlink(missing_ok=True)  # the compiler may have removed it
            # A build that failed for want of room is the machine's fault, and
            # its log must not be cached as the candidate's compile error.
            no_room = room_problem(d, SPARE_BYTES)
            if no_room:
                raise EnvironmentFault(f"a kernel build failed, and {no_room}", fix=ROOM_FIX)
            missing = _toolchain_lacks(log)
            if missing:
                raise EnvironmentFault(
                    f"the simulator's compiler runtime lacks {', '.join(missing)}, which "
                    "every link gets from zig's cache: that cache is damaged",
                    zig_cache_dir(),
                    fix="remove that folder and run again (it is rebuilt, about a minute)",
                )
            if deterministic:
                write_verified(err, raw.encode())
            raise parse_compile_error(log, source_file)
        install_verified(Path(tmp_so), so)  # sealed before it is in place
        return so


def load_library(path: Path) -> ctypes.CDLL:
    """Each library is loaded once per process."""
    key = str(path)
    with build_lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = ctypes.CDLL(key)
            STATS["loads"] += 1
            _loaded[key] = lib
        return lib
