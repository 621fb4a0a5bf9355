"""System calls a worker that runs a candidate may not make (seccomp filters).

Two filters, both loaded with no_new_privs (no privilege needed), both for
good: seccomp filters can be added, never removed.

- `forbid_escapes`, when the worker starts: no new process (fork, vfork,
  clone without CLONE_THREAD), no exec, no sockets of any family, no
  ptrace or cross-process memory access, no namespaces, mounts, BPF, perf,
  io_uring (whose operations would bypass this filter), user-fault handles,
  kernel keyrings, modules or reboots. A forbidden call kills the whole
  worker (SIGSYS): the parent reports "the sandbox stopped ..." instead of
  a candidate carrying on past a refused call as if it had not tried.
- `forbid_threads`, before the first candidate library is loaded: no new
  thread either. The runtime, MLX and NumPy have made theirs by then; a
  candidate's helper thread would run work the simulator's timer does not
  see.

clone3 answers ENOSYS instead (its flags sit in a structure a filter cannot
read), so the C library falls back to clone, which the filters can judge.
libseccomp (through `pyseccomp`, its ctypes binding) builds the BPF program:
it knows each architecture's system call numbers and kills calls made
through another architecture's ABI (x86's int 0x80 from a 64-bit process).
"""

from __future__ import annotations

import errno

CLONE_THREAD = 0x00010000

# Killed on sight: each creates a process, runs a program, reaches the network
# or another process, or changes what the sandbox itself is.
ESCAPES = (
    "fork",
    "vfork",
    "execve",
    "execveat",
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_open",
    "pidfd_getfd",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "bpf",
    "perf_event_open",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "open_by_handle_at",
    "name_to_handle_at",
    "mknod",
    "mknodat",
)


class SeccompUnavailable(OSError):
    """libseccomp (or seccomp itself) is not available here."""


def _library():
    try:
        import pyseccomp
    except (ImportError, RuntimeError) as exc:  # RuntimeError: libseccomp.so not found
        raise SeccompUnavailable(f"libseccomp could not be loaded: {exc}") from exc
    return pyseccomp


def load_library() -> None:
    """Load libseccomp now (finding it runs ldconfig, a process: do it
    before any filter forbids that)."""
    _library()


def _load(build) -> None:
    sc = _library()
    filt = sc.SyscallFilter(sc.ALLOW)
    filt.set_attr(sc.Attr.CTL_TSYNC, 1)  # every thread of the process, not only this one
    build(sc, filt)
    try:
        filt.load()
    except OSError as exc:
        raise SeccompUnavailable(f"loading a seccomp filter failed: {exc}") from exc


def forbid_escapes() -> None:
    def build(sc, filt) -> None:
        for name in ESCAPES:
            _rule(sc, filt, sc.KILL_PROCESS, name)
        _rule(sc, filt, sc.KILL_PROCESS, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
        _rule(sc, filt, sc.ERRNO(errno.ENOSYS), "clone3")

    _load(build)


def forbid_threads() -> None:
    def build(sc, filt) -> None:
        _rule(sc, filt, sc.KILL_PROCESS, "clone")
        _rule(sc, filt, sc.ERRNO(errno.ENOSYS), "clone3")

    _load(build)


def _rule(sc, filt, action: int, name: str, *args) -> None:
    """Add a rule; a call this architecture does not have (fork on aarch64)
    needs none."""
    try:
        filt.add_rule(action, name, *args)
    except (OSError, ValueError, RuntimeError) as exc:
        if "resolve" in str(exc).lower() or isinstance(exc, ValueError):
            return
        raise
