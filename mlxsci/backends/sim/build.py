"""Assemble, compile, cache and load the simulator's kernel libraries.

A kernel library is one C++ translation unit (TU):

    #include "sim_runtime.h"         runtime ABI, fast path, threadgroup storage
    #include "sim_metal.h"           SIMD-group functions, barrier entry points
    #include "metal_prelude.h"       Metal language (types, math, atomics, ...)
    #include "sim_metal_post.h"      barrier macros, attribute helpers
    (the includes are the dialect's: sim_preludes in mlxsci/dialects.py)
    #line <header_line> "<file>"     the candidate's header ...
    #line 1 "<mlx-signature>"        ... MLX's generated signature ...
    #line <body_line> "<file>"       ... the candidate's body ...
    #line 1 "<sim-glue>"             ... and the glue calling the kernel

The kernel text is MLX's exact generated source (mlxsci.signature), passed
through the line-preserving Metal -> C++ rewrite, so every diagnostic inside
the header or body carries the candidate file's own line number.

It is compiled to an object file, then linked with the runtime object
(sim_runtime.cpp, compiled once) into a shared library cached under
$MLXSCI_CACHE_DIR/sim/ by the sha256 of the TU, the runtime sources, the flags
and the compiler version.

Only the link needs libraries, and the kernels need no C++ runtime: they are
built without exceptions and RTTI, allocate nothing with `new`, and use the C++
standard library for inline templates only (<cmath>, <type_traits>, ...). So
the link leaves out libc++, libc++abi and libunwind (`-nostdlib++`), which zig
would otherwise build from source on a machine's first link (about two minutes
of a 2-core machine); what it still builds once is compiler_rt (half-precision
conversions and other helpers the compiler calls: several seconds).
test_sim_toolchain.py checks that no C++ runtime symbol is left undefined.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from mlxsci.backends.base import CompileError

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
INCLUDE_DIR = RUNTIME_DIR / "include"
RUNTIME_SRC = RUNTIME_DIR / "sim_runtime.cpp"

# -mcpu=baseline and -ffp-contract=off: zig targets the host CPU by default and
# clang then fuses a*b+c where the CPU has FMA, so results would depend on the
# machine; the simulator must give the same bits everywhere.
# -g0: nothing reads the kernels' debug info (faults are located by the
# runtime's own records), and writing it was a tenth of a compile.
CXX_FLAGS = (
    "-O2",
    "-g0",
    "-std=c++17",
    "-mcpu=baseline",
    "-ffp-contract=off",
    "-fPIC",
    "-fvisibility=hidden",
    "-Wno-unknown-attributes",
    "-Wno-ignored-attributes",
    "-Wno-duplicate-decl-specifier",
    "-Wno-gnu-zero-variadic-macro-arguments",
    "-fno-strict-aliasing",
    "-fno-threadsafe-statics",
    "-fno-exceptions",
    "-fno-rtti",
    "-fno-omit-frame-pointer",
    "-fno-finite-loops",
    "-fstack-clash-protection",
    "-fsigned-char",
    "-flax-vector-conversions=none",
    "-Xclang",
    "-ffloat16-excess-precision=none",
    "-Xclang",
    "-fbfloat16-excess-precision=none",
)
# The link: objects only, so -nostdlib++ costs no headers (the compile step
# keeps the libc++ headers the prelude includes). -O2 and -mcpu=baseline
# because zig builds compiler_rt for the link's optimization mode and CPU: with
# no -O it builds a debug compiler_rt plus the UBSan runtime (over a minute).
# -z defs: an undefined function is a build error, not a dlopen failure later.
LINK_FLAGS = ("-O2", "-mcpu=baseline", "-nostdlib++", "-shared") + (
    () if sys.platform == "darwin" else ("-Wl,-z,defs",)
)

# Counters a test (or a curious user) can read.
STATS = {"compiles": 0, "runtime_compiles": 0, "pch_builds": 0, "cache_hits": 0, "loads": 0}

_lock = threading.RLock()
_loaded: dict[str, ctypes.CDLL] = {}
_zig_version: str | None = None


def zig_executable() -> str:
    import ziglang

    exe = Path(ziglang.__file__).resolve().parent / ("zig.exe" if os.name == "nt" else "zig")
    if not exe.exists():
        raise RuntimeError(f"zig binary not found at {exe}")
    return str(exe)


def zig_version() -> str:
    global _zig_version
    if _zig_version is None:
        out = subprocess.run(
            [zig_executable(), "version"], capture_output=True, text=True, check=True
        )
        _zig_version = out.stdout.strip()
    return _zig_version


def cache_dir() -> Path:
    """$MLXSCI_CACHE_DIR/sim (default ~/.cache/mlxsci/sim)."""
    from mlxsci.cache import cache_dir as _mlxsci_cache_dir

    return _mlxsci_cache_dir("sim")


def _runtime_files() -> list[Path]:
    files = [
        p
        for p in sorted(RUNTIME_DIR.rglob("*"))
        if p.is_file()
        and p.suffix in (".h", ".hpp", ".cuh", ".cpp", "")
        and "__pycache__" not in p.parts
    ]
    return files


def runtime_digest() -> str:
    """Hash of every runtime/prelude source, flags and compiler version."""
    h = hashlib.sha256()
    for p in _runtime_files():
        h.update(str(p.relative_to(RUNTIME_DIR)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    h.update(" ".join(CXX_FLAGS + LINK_FLAGS).encode())
    h.update(zig_version().encode())
    return h.hexdigest()


def _atomic_write_from(tmp: Path, final: Path) -> None:
    os.replace(tmp, final)


def zig_cache_dir() -> Path:
    """The zig cache the simulator's builds use: one per zig version, inside
    zig's own global cache ($ZIG_GLOBAL_CACHE_DIR, else $XDG_CACHE_HOME/zig or
    ~/.cache/zig, as zig picks it). With libc++ in the link, two zig installs
    sharing one cache were seen to rebuild it on alternate links; compiler_rt
    alone was not (two installs of zig 0.17.1, one cache: built once), so
    installs of one version share this directory."""
    base = os.environ.get("ZIG_GLOBAL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "zig"
    )
    path = Path(base, f"mlxsci-{zig_version()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run_compiler(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["ZIG_GLOBAL_CACHE_DIR"] = env["ZIG_LOCAL_CACHE_DIR"] = str(zig_cache_dir())
    return subprocess.run([zig_executable(), *args], capture_output=True, text=True, env=env)


def _runtime_object(extra_defines: tuple[str, ...] = ()) -> Path:
    key = hashlib.sha256(
        (runtime_digest() + "|rt|" + " ".join(extra_defines)).encode()
    ).hexdigest()[:32]
    obj = cache_dir() / f"rt-{key}.o"
    if obj.exists():
        return obj
    fd, tmp = tempfile.mkstemp(prefix=f"rt-{key}.", suffix=".o.tmp", dir=cache_dir())
    os.close(fd)
    res = _run_compiler(
        [
            "c++",
            *CXX_FLAGS,
            *extra_defines,
            "-I",
            str(RUNTIME_DIR),
            "-c",
            str(RUNTIME_SRC),
            "-o",
            tmp,
        ]
    )
    STATS["runtime_compiles"] += 1
    if res.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError("building the simulator runtime failed:\n" + res.stderr)
    _atomic_write_from(Path(tmp), obj)
    return obj


# What every link needs from zig's cache (compiler_rt) is built on a machine's
# first link; prepare_toolchain does that first link with this empty library,
# which then marks the zig cache as prepared.
_TOOLCHAIN_STUB = 'extern "C" int mlxsci_toolchain_stub(void) { return 0; }\n'
PREPARING_TOOLCHAIN = "preparing the simulator's compiler (once per machine)..."


def toolchain_stub_path() -> Path:
    key = hashlib.sha256(" ".join(CXX_FLAGS + LINK_FLAGS).encode()).hexdigest()[:16]
    return zig_cache_dir() / f"toolchain-{key}.so"


def prepare_toolchain(progress=None) -> bool:
    """Build what every kernel link needs, once per zig cache, telling
    `progress` (a callable taking a line) when that work starts. Returns whether
    there was work to do."""
    with _lock:
        stub = toolchain_stub_path()
        if stub.exists():
            return False
        if progress is not None:
            progress(PREPARING_TOOLCHAIN)
        fd, tmp_cpp = tempfile.mkstemp(prefix="toolchain.", suffix=".cpp", dir=stub.parent)
        with os.fdopen(fd, "w") as f:
            f.write(_TOOLCHAIN_STUB)
        tmp_so = Path(tmp_cpp).with_suffix(".so.tmp")
        try:
            res = _compile_and_link(Path(tmp_cpp), tmp_so, ())
            if res.returncode != 0:
                raise RuntimeError(
                    f"preparing the simulator's compiler ({zig_executable()}) "
                    "failed:\n" + res.stderr + res.stdout
                )
            os.replace(tmp_so, stub)
        finally:
            Path(tmp_cpp).unlink(missing_ok=True)
            tmp_so.unlink(missing_ok=True)
        return True


def _line_file(name: str) -> str:
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
) -> str:
    """The full TU: `includes` (runtime headers, prelude, post headers, in
    order), then the (rewritten) kernel text with a #line directive at the
    start of every region, then the glue. Regions of `candidate_file` are
    named CANDIDATE_FILE."""
    lines = text.split("\n")
    out = [f'#include "{p}"' for p in includes]
    for r in regions:
        chunk = lines[r.first - 1 : r.last]
        if not chunk:
            continue
        name = CANDIDATE_FILE if candidate_file is not None and r.file == candidate_file else r.file
        out.append(f'#line {r.start_line} "{_line_file(name)}"')
        out.extend(chunk)
    out.append('#line 1 "<sim-glue>"')
    out.append(glue)
    return "\n".join(out) + "\n"


_DIAG = re.compile(r"^(.*?):(\d+):(?:(\d+):)? (fatal error|error|warning|note): (.*)$")


def parse_compile_error(log: str, source_file: str) -> CompileError:
    """CompileError for the first `error:` in clang's log, mapped to the
    candidate file when the error (or one of its notes) points there."""
    cand = _line_file(source_file)
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


# Precompiled headers. Parsing the TU's leading #include lines (the runtime
# headers, the prelude and the C++ headers they pull in) is most of a kernel's
# compile: 0.25 of 0.35 s in Metal, 0.4 of 0.55 s in CUDA on a 2-core machine.
# Those lines are the same for every kernel of a dialect, so they are compiled
# once into a PCH that every later compile loads (-include-pch); the headers'
# include guards then skip their #include lines in the TU. The object code is
# the same as without it (checked with objdump on seed kernels). A PCH that
# cannot be built or loaded costs nothing but the speed: the compile runs
# without it.
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


def _precompiled_header(tu: str, extra_defines: tuple[str, ...]) -> Path | None:
    """The PCH of `tu`'s include prefix, built on first use; None where there
    is no prefix or building it failed in this process."""
    prefix = _include_prefix(tu)
    if not prefix:
        return None
    pch = _pch_path(prefix, extra_defines)
    if pch.exists():
        return pch
    if pch in _PCH_FAILED:
        return None
    header = pch.with_suffix(".h")
    fd, tmp_h = tempfile.mkstemp(prefix=pch.stem + ".", suffix=".h.tmp", dir=pch.parent)
    with os.fdopen(fd, "w") as f:
        f.write(prefix)
    os.replace(tmp_h, header)
    fd, tmp = tempfile.mkstemp(prefix=pch.stem + ".", suffix=".pch.tmp", dir=pch.parent)
    os.close(fd)
    res = _run_compiler(
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
        os.unlink(tmp)
        _PCH_FAILED.add(pch)
        return None
    os.replace(tmp, pch)
    return pch


def _pch_refused(log: str, pch: Path) -> bool:
    """Whether clang refused the PCH itself: a header's mtime changed since it
    was built (a reinstall with the same contents), or another process removed
    it for that reason."""
    return any(w in log for w in ("precompiled header", "precompiled file", "PCH file", str(pch)))


def _compile_and_link(
    cpp: Path, so: Path, extra_defines: tuple[str, ...], *objects: Path, pch: Path | None = None
) -> subprocess.CompletedProcess:
    """Compile the TU to an object (with the C++ headers; with `pch` loaded
    first when given), then link it with `objects` (the runtime object)
    without the C++ runtime libraries (see the module's doc). Returns the
    failing step's result, else the link's."""
    obj = so.with_name(so.name + ".o")  # zig tells inputs apart by extension
    try:
        res = _run_compiler(
            [
                "c++",
                *CXX_FLAGS,
                *extra_defines,
                "-I",
                str(INCLUDE_DIR),
                *(["-include-pch", str(pch)] if pch else []),
                "-x",
                "c++",
                "-c",
                str(cpp),
                "-o",
                str(obj),
            ]
        )
        if res.returncode != 0:
            return res
        return _run_compiler(["c++", *LINK_FLAGS, str(obj), *map(str, objects), "-o", str(so)])
    finally:
        obj.unlink(missing_ok=True)


def _compile_with_pch(
    cpp: Path, so: Path, tu: str, extra_defines: tuple[str, ...], rt: Path
) -> subprocess.CompletedProcess:
    """_compile_and_link with the TU's precompiled header where there is one.
    A PCH clang refuses (stale or unreadable) is removed, so the next kernel
    builds it anew, and this TU is compiled again without it."""
    pch = _precompiled_header(tu, extra_defines)
    res = _compile_and_link(cpp, so, extra_defines, rt, pch=pch)
    STATS["compiles"] += 1
    if res.returncode != 0 and pch is not None and _pch_refused(res.stderr + res.stdout, pch):
        pch.unlink(missing_ok=True)
        res = _compile_and_link(cpp, so, extra_defines, rt)
        STATS["compiles"] += 1
    return res


def build_library(
    tu: str, source_file: str = "<candidate>", extra_defines: tuple[str, ...] = ()
) -> Path:
    """Compile `tu` into a cached shared library, returning its path.
    Raises CompileError with the candidate line of the first error; the log
    names `source_file` where the TU says CANDIDATE_FILE."""

    def named(log: str) -> str:
        return log.replace(f"{CANDIDATE_FILE}:", f"{_line_file(source_file)}:")

    with _lock:
        digest = hashlib.sha256()
        digest.update(tu.encode())
        digest.update(b"\0")
        digest.update(runtime_digest().encode())
        digest.update(" ".join(extra_defines).encode())
        key = digest.hexdigest()[:40]
        d = cache_dir()
        so = d / f"k-{key}.so"
        err = d / f"k-{key}.err"
        if so.exists():
            STATS["cache_hits"] += 1
            return so
        if err.exists():
            STATS["cache_hits"] += 1
            raise parse_compile_error(named(err.read_text()), source_file)
        rt = _runtime_object(extra_defines)
        cpp = d / f"k-{key}.cpp"
        fd, tmp_cpp = tempfile.mkstemp(prefix=f"k-{key}.", suffix=".cpp.tmp", dir=d)
        with os.fdopen(fd, "w") as f:
            f.write(tu)
        os.replace(tmp_cpp, cpp)
        fd, tmp_so = tempfile.mkstemp(prefix=f"k-{key}.", suffix=".so.tmp", dir=d)
        os.close(fd)
        for _attempt in range(2):
            res = _compile_with_pch(cpp, Path(tmp_so), tu, extra_defines, rt)
            if res.returncode == 0:
                break
            raw = res.stderr + res.stdout  # cached as is: it names CANDIDATE_FILE
            log = named(raw)
            deterministic = _error_in_kernel_text(log, source_file)
            if deterministic:
                break
            # The first error is outside the kernel text (system headers, the
            # compiler's own cache): possibly transient, so try once more and
            # never cache it.
        if res.returncode != 0:
            os.unlink(tmp_so)
            if deterministic:
                fd, tmp_err = tempfile.mkstemp(prefix=f"k-{key}.", suffix=".err.tmp", dir=d)
                with os.fdopen(fd, "w") as f:
                    f.write(raw)
                os.replace(tmp_err, err)
            raise parse_compile_error(log, source_file)
        os.replace(tmp_so, so)
        return so


def load_library(path: Path) -> ctypes.CDLL:
    """Each library is loaded once per process."""
    key = str(path)
    with _lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = ctypes.CDLL(key)
            STATS["loads"] += 1
            _loaded[key] = lib
        return lib
