"""The simulator's compiler: zig's clang, its flags, the runtime object and
the once-per-machine preparation of what every link needs.

Split from build.py (which assembles a kernel's translation unit, caches and
loads its library) because this is what every compile shares whatever it
compiles: the flags and compiler version that key every cache entry
(runtime_digest), zig's own cache, and the runtime object a kernel is linked
with.

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

import contextlib
import hashlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from mlxsci.backends.sim import kernel_symbols
from mlxsci.protocol.bounded import Drain
from mlxsci.storage.cache import install_verified, verify_file
from mlxsci.storage.faults import EnvironmentFault

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
INCLUDE_DIR = RUNTIME_DIR / "include"
RUNTIME_SRC = RUNTIME_DIR / "sim_runtime.cpp"

# -mcpu=baseline and -ffp-contract=off: zig targets the host CPU by default and
# clang then fuses a*b+c where the CPU has FMA, so results would depend on the
# machine; the simulator must give the same bits everywhere.
# -g0: nothing reads the kernels' debug info (faults are located by the
# runtime's own records), and writing it was a tenth of a compile.
# -ftrivial-auto-var-init=pattern: a local without an initialiser starts as a
# fill pattern, never as what the thread that used the same stack before left
# there (fiber stacks are reused launch after launch: an uninitialised local
# had counted launches, to tell timed runs from checked ones), and undefined
# values are poison, as the simulator's other undefined memory is.
CXX_FLAGS = (
    "-O2",
    "-g0",
    "-ftrivial-auto-var-init=pattern",
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

build_lock = threading.RLock()
_zig_version: str | None = None


def zig_executable() -> str:
    """The compiler the simulator builds kernels with (the ziglang wheel's).
    Missing, it is the machine's fault, not a candidate's (EnvironmentFault)."""
    fix = "install it: pip install 'mlxsci[cpu]' (or pip install ziglang)"
    try:
        import ziglang
    except ImportError as exc:
        raise EnvironmentFault(
            "the simulator's compiler (ziglang) is not installed", fix=fix
        ) from exc
    exe = Path(ziglang.__file__).resolve().parent / ("zig.exe" if os.name == "nt" else "zig")
    if not exe.exists():
        raise EnvironmentFault("the simulator's compiler is missing", exe, fix)
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
    from mlxsci.storage.cache import cache_dir as _mlxsci_cache_dir

    return _mlxsci_cache_dir("sim")


def _runtime_files() -> list[Path]:
    files = [
        p
        for p in sorted(RUNTIME_DIR.rglob("*"))
        if p.is_file()
        and p.suffix in (".h", ".hpp", ".cuh", ".cpp", ".inc", "")
        and "__pycache__" not in p.parts
    ]
    return files


def runtime_digest() -> str:
    """Hash of every runtime/prelude source, flags, compiler version and the
    kernel symbol check."""
    h = hashlib.sha256()
    for p in _runtime_files():
        h.update(str(p.relative_to(RUNTIME_DIR)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    h.update(" ".join(CXX_FLAGS + LINK_FLAGS).encode())
    h.update(zig_version().encode())
    # The symbol check decides which builds fail, and failures are cached too.
    h.update(Path(kernel_symbols.__file__).read_bytes())
    return h.hexdigest()


def library_key(tu: str, defines_and_flags: tuple[str, ...], kind: str = "") -> str:
    """The cache key of a kernel library built from `tu` with these -D
    defines and flags: its build `kind` (the plain build has none), the TU,
    the runtime it links and the command line's own words, so that a change
    to any of them builds anew."""
    digest = hashlib.sha256()
    if kind:
        digest.update(kind.encode() + b"\0")
    digest.update(tu.encode())
    digest.update(b"\0")
    digest.update(runtime_digest().encode())
    digest.update(" ".join(defines_and_flags).encode())
    return digest.hexdigest()[:40]


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


# A compile reads candidate text, which can make it take without end
# (templates instantiated exponentially): every compile has a time limit (the
# size's deadline when a worker asked for it, time_limit) and a memory limit.
COMPILE_SECONDS = 600.0
COMPILE_MEMORY = 8 << 30
# The largest file a compile may write (an object, a library, a precompiled
# header): a candidate's constant array of 512 MB had left an object of that
# size in zig's cache for each such candidate; the largest the toolchain
# writes itself is a precompiled header's object, ~9 MB.
COMPILE_FILE_BYTES = 64 << 20
_deadline = threading.local()


@contextlib.contextmanager
def time_limit(deadline: float | None):
    """Compiles in this thread stop at `deadline` (time.monotonic()) within."""
    before = getattr(_deadline, "at", None)
    _deadline.at = deadline
    try:
        yield
    finally:
        _deadline.at = before


def current_deadline() -> float | None:
    """The deadline (time.monotonic()) `time_limit` set for compiles in this
    thread, or None where none was set."""
    return getattr(_deadline, "at", None)


def _limit_compiler(seconds: float) -> None:  # in the compiler's process, before exec
    # Inherited by the clang zig starts: memory, and CPU past the deadline (a
    # backstop for the process group kill below).
    resource.setrlimit(resource.RLIMIT_DATA, (COMPILE_MEMORY, COMPILE_MEMORY))
    resource.setrlimit(resource.RLIMIT_FSIZE, (COMPILE_FILE_BYTES, COMPILE_FILE_BYTES))
    cpu = int(seconds) + 30
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))


# A compiler's diagnostics quote the candidate's text, and a short text can
# make them huge (a template warning at each of its instantiations: 2 KB of
# candidate gave 17.7 MB in 17 s, and the parent that read it all held 1.4 GB
# for 300 MB). The parent keeps the head of each stream (where the first
# error is) and its tail, and stops a compiler once a stream passes
# COMPILER_OUTPUT_BYTES: no kernel worth building says that much.
COMPILER_OUTPUT_BYTES = 16 << 20
COMPILER_HEAD_BYTES = 48 << 10
COMPILER_TAIL_BYTES = 16 << 10


# How a compile stopped for its output's size says so (build.py caches it).
OUTPUT_STOPPED = "the compiler's output passed"


def run_compiler(args: list[str]) -> subprocess.CompletedProcess:
    """`zig args...` under the compile's limits (time: the deadline of
    `time_limit` or COMPILE_SECONDS; memory, file size; output:
    COMPILER_OUTPUT_BYTES a stream). A compiler stopped for any of them, or
    killed by a signal, fails with a line saying why."""
    env = dict(os.environ)
    env["ZIG_GLOBAL_CACHE_DIR"] = env["ZIG_LOCAL_CACHE_DIR"] = str(zig_cache_dir())
    seconds = COMPILE_SECONDS
    at = current_deadline()
    if at is not None:
        seconds = max(0.1, min(seconds, at - time.monotonic()))
    cmd = [zig_executable(), *args]
    proc, streams, wake = _start_compiler(cmd, env, seconds)
    stopped = _wait_for_compiler(proc, streams, wake, seconds)
    return _compiler_result(cmd, proc, streams, stopped, seconds)


def _start_compiler(
    cmd: list[str], env: dict, seconds: float
) -> tuple[subprocess.Popen, list[Drain], threading.Event]:
    """The compiler started in a session of its own with its limits set,
    and a Drain reading each of its output streams, which sets `wake` when
    the stream ends or passes its limit."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    # A session of its own: zig runs clang as its child, and a time limit
    # must end both (killing zig alone left clang running).
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out_write,
            stderr=err_write,
            env=env,
            start_new_session=True,
            preexec_fn=(lambda: _limit_compiler(seconds)) if os.name == "posix" else None,
        )
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    wake = threading.Event()  # a stream ended or passed its limit
    streams = [
        Drain(
            fd,
            COMPILER_HEAD_BYTES,
            COMPILER_TAIL_BYTES,
            limit=COMPILER_OUTPUT_BYTES,
            on_limit=wake.set,
            on_end=wake.set,
            name="compiler-output",
        )
        for fd in (out_read, err_read)
    ]
    return proc, streams, wake


def _wait_for_compiler(
    proc: subprocess.Popen, streams: list[Drain], wake: threading.Event, seconds: float
) -> bool:
    """Waits up to `seconds` for the compiler to close its output and end;
    returns whether it had to be stopped (time, a flood of output, Ctrl-C:
    then zig and its clang are killed)."""
    deadline = time.monotonic() + seconds
    try:
        while not all(s.ended.is_set() for s in streams) and not any(
            s.passed_limit for s in streams
        ):
            if not wake.wait(deadline - time.monotonic()):
                break
            wake.clear()
        if all(s.ended.is_set() for s in streams):  # it closed its output: it is ending
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    finally:
        # Stopped early (time, a flood, Ctrl-C): zig and its clang go. Only
        # this thread reaps it, so until then its id still names its group.
        stopped = proc.poll() is None
        if stopped:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        for s in streams:
            s.finish()
    return stopped


def _compiler_result(
    cmd: list[str], proc: subprocess.Popen, streams: list[Drain], stopped: bool, seconds: float
) -> subprocess.CompletedProcess:
    """The compiler's result as it ran, or a failure saying why it stopped:
    its output passed COMPILER_OUTPUT_BYTES, its time ran out, or a signal
    ended it (a limit it passed)."""
    out, err = (s.kept().decode(errors="replace") for s in streams)
    if any(s.passed_limit for s in streams):
        why = (
            f"error: {OUTPUT_STOPPED} {COMPILER_OUTPUT_BYTES / (1 << 20):g} MiB "
            "(its diagnostics of the candidate's text), so it was stopped"
        )
        return subprocess.CompletedProcess(cmd, 1, out, f"{err}\n{why}\n")
    if stopped:
        why = f"error: the compiler did not finish within the time left ({seconds:.1f} s)"
        return subprocess.CompletedProcess(cmd, 1, "", why)
    if proc.returncode < 0:  # zig dies of its clang's death without a word
        why = (
            f"error: the compiler ended on {_signal_name(-proc.returncode)} (a compile may "
            f"write files of up to {COMPILE_FILE_BYTES >> 20} MiB and use "
            f"{COMPILE_MEMORY >> 30} GiB of memory)"
        )
        err = f"{err}\n{why}\n" if err else why + "\n"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def runtime_object(extra_defines: tuple[str, ...] = ()) -> Path:
    key = hashlib.sha256(
        (runtime_digest() + "|rt|" + " ".join(extra_defines)).encode()
    ).hexdigest()[:32]
    obj = cache_dir() / f"rt-{key}.o"
    if verify_file(obj):  # sealed by this cache's key, not planted (damage is named)
        return obj
    fd, tmp = tempfile.mkstemp(prefix=f"rt-{key}.", suffix=".o.tmp", dir=cache_dir())
    os.close(fd)
    res = run_compiler(
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
    install_verified(Path(tmp), obj)  # sealed before it is in place
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
    with build_lock:
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
            res = compile_and_link(Path(tmp_cpp), tmp_so, ())
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


def kernel_compile_args(
    cpp: Path,
    out: Path,
    extra_defines: tuple[str, ...],
    *,
    pch: Path | None = None,
    flags: tuple[str, ...] = (),
    output: str = "-c",
) -> list[str]:
    """zig's arguments to compile a kernel TU `cpp` into `out`: an object
    (`-c`) or assembly (`-S`), with the project's flags, `flags` after them
    and the precompiled header `pch` loaded first where given."""
    return [
        "c++",
        *CXX_FLAGS,
        *flags,
        *extra_defines,
        "-I",
        str(INCLUDE_DIR),
        *(["-include-pch", str(pch)] if pch else []),
        "-x",
        "c++",
        output,
        str(cpp),
        "-o",
        str(out),
    ]


def compile_and_link(
    cpp: Path,
    so: Path,
    extra_defines: tuple[str, ...],
    *objects: Path,
    pch: Path | None = None,
    kernel: bool = False,
) -> subprocess.CompletedProcess:
    """Compile the TU to an object (with the C++ headers; with `pch` loaded
    first when given), then link it with `objects` (the runtime object)
    without the C++ runtime libraries (see the module's doc). A `kernel`'s
    object and library must pass mlxsci.backends.sim.kernel_symbols (what
    it may call, define and export) or fail like a compile. Returns the
    failing step's result, else the link's."""
    obj = so.with_name(so.name + ".o")  # zig tells inputs apart by extension
    try:
        res = run_compiler(kernel_compile_args(cpp, obj, extra_defines, pch=pch))
        if res.returncode != 0:
            return res
        if kernel and (why := kernel_symbols.object_violation(obj, *objects[:1])):
            return subprocess.CompletedProcess(res.args, 1, "", why)
        res = run_compiler(["c++", *LINK_FLAGS, str(obj), *map(str, objects), "-o", str(so)])
        if kernel and res.returncode == 0 and (why := kernel_symbols.library_violation(so)):
            return subprocess.CompletedProcess(res.args, 1, "", why)
        return res
    finally:
        obj.unlink(missing_ok=True)
