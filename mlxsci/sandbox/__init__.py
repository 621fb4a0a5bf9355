"""The OS sandbox around a worker that runs candidate code natively (the simulator).

On a GPU a candidate's code runs on the device and cannot reach the host; on
the simulator it is compiled to native code and loaded into the worker, so the
worker is fenced in before any of it is loaded. Layers, each needing no
privilege (an ordinary user on a stock distribution gets them all):

| layer | what it stops | where |
|---|---|---|
| scrubbed environment | reading API keys and the user's variables | mlxsci.evaluation.runner (parent) |
| network namespace (bonus: root, or where unprivileged user namespaces are allowed) | any network at all, loopback included | `_own_network` |
| no capabilities | what root could do beyond an ordinary user (fanotify, the kernel log, the host name, ...) | `_drop_capabilities` |
| Landlock | reading outside Python, MLX, mlxsci, the task and the kernel cache; writing outside the worker's own folder; TCP (ABI 4); signals to and abstract sockets of processes outside (ABI 6) | mlxsci.sandbox.landlock |
| resource limits | memory past 3/4 of the machine's, CPU time, file size, open files, core dumps | `_limit_resources` |
| seccomp, at start | new processes, exec, sockets, ptrace, cross-process memory, namespaces, io_uring, BPF, ... (killed: SIGSYS) | mlxsci.sandbox.seccomp |
| seccomp, before the first candidate library | new threads | `seal` |

The parent describes the policy (`worker_policy`) and starts the worker through
`python -m mlxsci.sandbox.boot`, which applies the layers while the process
still has one thread (Landlock binds only the calling thread and those it
starts later) and then runs `mlxsci.worker`. Landlock and seccomp are
required: where either cannot be set up (an older kernel, macOS), the boot
exits with UNAVAILABLE_EXIT and says which, and the evaluation refuses to run
model-written candidates unless the user passed --unsandboxed.

This package imports nothing but the standard library (and libseccomp's
binding when a filter is loaded), so the boot can import it before MLX and
NumPy start threads.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import sys
from dataclasses import dataclass, field

# The environment variable that carries the policy from parent to boot.
POLICY_ENV = "MLXSCI_SANDBOX"
# The exit status of a boot that could not set up a required layer.
UNAVAILABLE_EXIT = 86
# What the boot prints before that exit (the parent quotes the line).
UNAVAILABLE_PREFIX = "mlxsci-sandbox: "

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000

GiB = 1 << 30


@dataclass
class Policy:
    """What a sandboxed worker may touch, set by the parent."""

    read: list[str]
    write: list[str]
    data_bytes: int = 0  # writable private memory (RLIMIT_DATA); 0: no limit
    cpu_seconds: int = 0  # 0: no limit
    file_size: int = 0  # bytes per file written; 0: no limit
    open_files: int = 1024

    def to_env(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_env(cls, text: str) -> Policy:
        return cls(**json.loads(text))


@dataclass
class Layers:
    """The layers a boot put in place, and why any optional one is missing."""

    landlock_abi: int = 0
    network_namespace: bool = False
    seccomp: bool = False
    limits: bool = False
    missing: dict[str, str] = field(default_factory=dict)


class SandboxUnavailable(RuntimeError):
    """A required layer could not be set up on this machine."""


# Whether this process runs inside the sandbox (set by the boot), and whether
# `seal` has run.
ACTIVE = False
_SEALED = False


def _own_network() -> str | None:
    """Move this process into a network namespace of its own (no interfaces
    but a down loopback). As root directly; otherwise inside a new user
    namespace, which only a single-threaded process may enter. None when
    done, else why not."""
    if platform.system() != "Linux":
        return "not Linux"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) == 0:
        return None
    first = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return f"{first}; with a user namespace: {os.strerror(ctypes.get_errno())}"
    # Map our own ids, so files keep their owners as seen from inside.
    try:
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    except OSError:
        pass  # unmapped ids read as nobody; access checks still use the real ones
    return None


_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPSET = {"x86_64": 126, "aarch64": 91}
_CAP_VERSION_3 = 0x20080522


def _drop_capabilities() -> str | None:
    """Give up every capability (a worker started by root would otherwise
    keep CAP_SYS_ADMIN and friends: fanotify, the kernel log, the host name):
    the bounding set, the ambient set, then effective, permitted and
    inheritable. Nothing to do for an ordinary user. None when done, else why
    not."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last: ignored
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    number = _CAPSET.get(platform.machine())
    if number is None:
        return f"capset's number on {platform.machine()} is not known here"
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two 32-bit halves of effective, permitted, inheritable
    if libc.syscall(number, header, data) != 0:
        return os.strerror(ctypes.get_errno())
    return None


def _limit_resources(policy: Policy) -> None:
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, policy.open_files),
        (resource.RLIMIT_DATA, policy.data_bytes),
        (resource.RLIMIT_CPU, policy.cpu_seconds),
        (resource.RLIMIT_FSIZE, policy.file_size),
    ]
    for which, value in limits:
        if value <= 0 and which != resource.RLIMIT_CORE:
            continue
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def apply(policy: Policy) -> Layers:
    """Put every layer in place for this process, for good. Raises
    SandboxUnavailable when Landlock or seccomp cannot be set up."""
    from mlxsci.sandbox import landlock, seccomp

    layers = Layers()
    try:  # first: finding the library runs a process, and a new namespace may hide it
        seccomp.load_library()
    except seccomp.SeccompUnavailable as exc:
        raise SandboxUnavailable(f"seccomp: {exc}") from exc
    why = _own_network()
    layers.network_namespace = why is None
    if why is not None:
        layers.missing["network namespace"] = why + " (seccomp still stops sockets)"
    why = _drop_capabilities()  # after the namespace, whose making may need them
    if why is not None:
        raise SandboxUnavailable(f"dropping capabilities: {why}")
    try:
        applied = landlock.restrict(policy.read, policy.write)
    except OSError as exc:
        raise SandboxUnavailable(f"Landlock: {exc}") from exc
    layers.landlock_abi = applied.abi
    if not applied.network:
        layers.missing["Landlock network rules"] = f"ABI {applied.abi} < 4"
    if not applied.scoped:
        layers.missing["Landlock signal scope"] = f"ABI {applied.abi} < 6"
    _limit_resources(policy)
    layers.limits = True
    try:
        seccomp.forbid_escapes()
    except seccomp.SeccompUnavailable as exc:
        raise SandboxUnavailable(f"seccomp: {exc}") from exc
    layers.seccomp = True
    return layers


def seal() -> None:
    """Before the first candidate library is loaded into a sandboxed worker:
    no thread can be started from now on. Does nothing outside the sandbox,
    and nothing the second time."""
    global _SEALED
    if not ACTIVE or _SEALED:
        return
    from mlxsci.sandbox import seccomp

    seccomp.forbid_threads()
    _SEALED = True


def package_dirs(*names: str) -> list[str]:
    """The folders the named packages are imported from (an editable install
    maps them into the source tree, wherever it is)."""
    import importlib.util

    found: list[str] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found.extend(str(p) for p in spec.submodule_search_locations)
    return found


# What any Python process with MLX needs to read besides its own installation.
SYSTEM_READ = (
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/lib",
    "/lib64",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
    "/proc/self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
)


# Limits of a worker that runs candidate code. Memory: RLIMIT_DATA (private
# writable memory), not the address space, which the runtime's guard-page
# reservations make hundreds of GiB of PROT_NONE (VmPeak 450-1150 GiB measured
# for seeds whose VmData peaked at 0.1-0.7 GiB); three quarters of the
# machine's memory, so a candidate cannot take the machine's last quarter
# from its parent. CPU: a backstop for the whole worker (each size has its own
# timeout, enforced by the parent). Files: one output archive is at most a few
# hundred MB at the largest built-in sizes.
MEMORY_SHARE = 0.75
CPU_SECONDS = 6 * 3600
FILE_BYTES = 4 * GiB


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _importable_folder(path: str) -> bool:
    """Whether a sys.path entry may be read by the worker: a folder, but not
    the current one (`python -m` puts it first; a user in their home would
    open the home to it) nor any folder holding the home (a PYTHONPATH of
    ~ or /). The packages the worker imports are granted by their own
    folders (package_dirs) wherever they are."""
    if not path or not os.path.isdir(path):
        return False
    real = os.path.realpath(path)
    home = os.path.realpath(os.path.expanduser("~"))
    inside_home_or_above = home == real or home.startswith(real.rstrip("/") + "/")
    return real != os.path.realpath(os.getcwd()) and not inside_home_or_above


def worker_policy(extra_read: list[str], write: list[str]) -> Policy:
    """The policy of a worker that runs candidate code: read the Python
    installation, MLX, mlxsci's packages, `extra_read` (the task's folder,
    the kernel cache) and the system's libraries; write `write` only; the
    limits above."""
    read = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    read.update(p for p in sys.path if _importable_folder(p))
    read.update(package_dirs("mlxsci", "mlxsci.tasks", "mlxsci.reference", "mlx"))
    read.update(SYSTEM_READ)
    read.update(extra_read)
    return Policy(
        read=sorted(read),
        write=sorted(set(write) | {"/dev/null"}),
        data_bytes=int(MEMORY_SHARE * physical_memory()),
        cpu_seconds=CPU_SECONDS,
        file_size=FILE_BYTES,
    )


def _watch_parent(parent: int) -> bool:
    """Give the worker's lifeline (mlxsci.sandbox.lifeline) a pidfd of the parent,
    readable once it exits: the pipe alone can be held open by a worker
    running arbitrary code, which reopens its write end through
    /proc/self/fd. Opened here, before the filters forbid pidfd_open. False
    when the parent is gone already."""
    from mlxsci.sandbox.lifeline import PARENT_PIDFD_ENV

    try:
        pidfd = os.pidfd_open(parent)
    except (AttributeError, OSError):  # no pidfds here: the pipe alone
        return os.getppid() == parent
    os.environ[PARENT_PIDFD_ENV] = str(pidfd)
    return os.getppid() == parent


def main_of_boot(argv: list[str]) -> int:
    """`python -m mlxsci.sandbox.boot WORKER_ARGS...`: apply the policy in
    $MLXSCI_SANDBOX, then run mlxsci.worker with WORKER_ARGS."""
    global ACTIVE
    parent = os.getppid()
    text = os.environ.pop(POLICY_ENV, "")
    if not text:
        print(UNAVAILABLE_PREFIX + f"no policy in ${POLICY_ENV}", file=sys.stderr)
        return UNAVAILABLE_EXIT
    if not _watch_parent(parent):  # before the filters, which forbid pidfd_open
        return UNAVAILABLE_EXIT - 1  # the parent is gone already: nothing to run for
    try:
        layers = apply(Policy.from_env(text))
    except SandboxUnavailable as exc:
        print(UNAVAILABLE_PREFIX + str(exc), file=sys.stderr, flush=True)
        return UNAVAILABLE_EXIT
    ACTIVE = True
    os.environ["MLXSCI_SANDBOX_LAYERS"] = json.dumps(layers.__dict__)
    import runpy

    sys.argv = ["mlxsci.worker", *argv]
    runpy.run_module("mlxsci.worker", run_name="__main__", alter_sys=True)
    return 0
