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
- `forbid_threads`, before the first candidate library is loaded (the
  seal): no new thread either (the runtime, MLX and NumPy have made theirs by
  then; a candidate's helper thread would run work the simulator's timer does
  not see), and from then on an allow-list: only the calls kernels, Python
  and MLX make while running and writing results (AFTER_SEAL); any other
  answers EPERM, and a few kill (KILLED_AFTER_SEAL).

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


def _load(build, default: int | None = None) -> None:
    """Load the filter `build` fills: allow by default, or answer `default`
    (an errno) to every call it does not name."""
    sc = _library()
    filt = sc.SyscallFilter(sc.ALLOW if default is None else sc.ERRNO(default))
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


# After the seal, a candidate's code is in the process and may be any machine
# code (C++ is not memory-safe: a text rule cannot stop a kernel from calling
# an address it computed). So the second filter is an allow-list: what the
# runtime, Python, NumPy and MLX call while kernels run and results are
# written (read off strace of every seed in both dialects), everything else
# EPERM. Calls that reach other processes or the system are taken only in
# their harmless form (prlimit64 and friends on this process only; fcntl
# without signal ownership or leases).
AFTER_SEAL = (
    "read", "write", "pread64", "pwrite64", "readv", "writev", "lseek", "openat", "open",
    "close", "close_range", "fstat", "newfstatat", "statx", "stat", "lstat", "access",
    "faccessat", "faccessat2", "getdents64", "readlink", "readlinkat", "getcwd", "rename",
    "renameat", "renameat2", "unlink", "unlinkat", "rmdir", "ftruncate",
    "fsync", "fdatasync", "ioctl", "dup", "dup2", "dup3", "pipe", "pipe2", "mmap", "munmap",
    "mprotect", "mremap", "madvise", "mbind", "brk", "rt_sigaction", "rt_sigprocmask",
    "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait", "sigaltstack", "setitimer",
    "getitimer", "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep",
    "gettimeofday", "time", "futex", "set_robust_list", "get_robust_list", "rseq",
    "set_tid_address", "arch_prctl", "membarrier", "sched_yield", "sched_getaffinity",
    "sched_getparam", "sched_getscheduler", "getpriority", "getrandom", "uname", "sysinfo",
    "getpid", "gettid", "getppid", "getpgid", "getpgrp", "getsid", "getuid", "geteuid",
    "getgid", "getegid", "getgroups", "getresuid", "getresgid", "capget", "getrusage",
    "times", "exit", "exit_group", "select", "pselect6", "poll", "ppoll",
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "eventfd2",
)  # fmt: skip
# fcntl commands a worker uses: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, the
# record locks, the open-file-description locks, F_DUPFD_CLOEXEC.
FCNTL_COMMANDS = (0, 1, 2, 3, 4, 5, 6, 7, 36, 37, 38, 1030)
# Killed after the seal besides the escapes: watching or signalling others'
# files, planting links for the parent to follow, the machine's name and log.
KILLED_AFTER_SEAL = (
    "fanotify_init", "fanotify_mark", "inotify_init", "inotify_init1", "inotify_add_watch",
    "symlink", "symlinkat", "link", "linkat", "sethostname", "setdomainname", "syslog",
)  # fmt: skip
_LOW32 = 0xFFFFFFFF
PR_GET_PDEATHSIG, PR_GET_NAME = 2, 16


def forbid_threads() -> None:
    """The seal: no new thread, and only the calls in AFTER_SEAL."""
    import os

    pid = os.getpid()

    def build(sc, filt) -> None:
        for name in AFTER_SEAL:
            _rule(sc, filt, sc.ALLOW, name)
        for command in FCNTL_COMMANDS:
            _rule(sc, filt, sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, command))
        # prctl only to read (a process name, its death signal): setting them
        # would hide the worker or undo what ends it with its parent.
        for option in (PR_GET_PDEATHSIG, PR_GET_NAME):
            _rule(sc, filt, sc.ALLOW, "prctl", sc.Arg(0, sc.EQ, option))
        # Resource limits and signals: this process (and its group) only.
        _rule(sc, filt, sc.ALLOW, "prlimit64", sc.Arg(0, sc.EQ, 0))
        for target in (0, pid, -pid & _LOW32):
            _rule(sc, filt, sc.ALLOW, "kill", sc.Arg(0, sc.MASKED_EQ, _LOW32, target))
        _rule(sc, filt, sc.ALLOW, "tgkill", sc.Arg(0, sc.MASKED_EQ, _LOW32, pid))
        for name in KILLED_AFTER_SEAL:
            _rule(sc, filt, sc.KILL_PROCESS, name)
        _rule(sc, filt, sc.KILL_PROCESS, "clone")
        _rule(sc, filt, sc.ERRNO(errno.ENOSYS), "clone3")

    _load(build, default=errno.EPERM)


def _rule(sc, filt, action: int, name: str, *args) -> None:
    """Add a rule; a call this architecture does not have (fork on aarch64)
    needs none."""
    try:
        filt.add_rule(action, name, *args)
    except (OSError, ValueError, RuntimeError) as exc:
        if "resolve" in str(exc).lower() or isinstance(exc, ValueError):
            return
        raise
