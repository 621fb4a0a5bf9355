"""Landlock, Linux's unprivileged access-control layer, through its three system calls.

A process that restricts itself with a Landlock ruleset keeps, for ever and
for every thread and process it starts afterwards, only the file access the
ruleset grants beneath the listed folders; from ABI 4 on it can be denied TCP
bind/connect, and from ABI 6 on it can neither signal nor reach (through
abstract Unix sockets) a process outside its domain. No privilege is needed:
an ordinary user on a stock distribution can do it.

Why our own ctypes code rather than the `landlock` package from PyPI: that
package is a pre-release (1.0.0.dev5) whose ruleset knows only file access,
so it cannot deny networking (ABI 4) or scope signals (ABI 6); the three
calls, their structures and the access bits below are all it would give us.
The constants are the kernel's (include/uapi/linux/landlock.h).
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass

# System call numbers: the same on every architecture that has Landlock
# (it came after the generic table was unified).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# File access rights, by the ABI that introduced them.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
# Rights that apply to a file itself (a rule on a file may grant only these).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

# Network rights (ABI 4) and scopes (ABI 6).
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
# Writing beneath a folder: files, not folders (a worker writes its result and
# outputs only; a tree thousands of folders deep was a way to make its parent's
# clean-up recurse past Python's limit). Removing stays, for the lifeline's
# clean-up of a dead parent's folders.
WRITE = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_REG | MAKE_SYM | MAKE_FIFO | REFER | TRUNCATE


class LandlockUnavailable(OSError):
    """This kernel (or this machine's configuration) offers no Landlock."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The Landlock ABI this kernel offers; 0 where it offers none (not
    Linux, too old, or Landlock left out of the boot's LSM list)."""
    if platform.system() != "Linux":
        return 0
    libc = _libc()
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(0, int(version))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass
class Applied:
    """What a restriction put in place, for the worker to report."""

    abi: int
    network: bool  # TCP bind/connect denied (ABI 4)
    scoped: bool  # signals and abstract sockets kept inside (ABI 6)
    skipped: list[str]  # paths asked for that do not exist here


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]


def restrict(read: list[str], write: list[str]) -> Applied:
    """Restrict this thread, and everything it starts from now on, to reading
    (and mapping, executing) beneath `read` and reading and writing beneath
    `write`; with ABI 4, no TCP; with ABI 6, no signals or abstract-socket
    connections to processes outside. Call it while the process has a single
    thread: threads that exist already keep their access. Sets no_new_privs,
    which Landlock requires of an unprivileged caller."""
    abi = abi_version()
    if abi < 1:
        raise LandlockUnavailable("Landlock is not available on this kernel")
    libc = _libc()
    fs = _fs_rights(abi)
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0, 0)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        err = ctypes.get_errno()
        raise LandlockUnavailable(err, f"landlock_create_ruleset: {os.strerror(err)}")
    skipped: list[str] = []
    try:
        for paths, rights in ((read, READ), (write, READ | WRITE | IOCTL_DEV)):
            for path in paths:
                if not _add_path(libc, fd, path, rights & fs):
                    skipped.append(path)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if libc.syscall(_RESTRICT_SELF, fd, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(fd)
    return Applied(abi, abi >= 4, abi >= 6, skipped)


def _add_path(libc, ruleset_fd: int, path: str, rights: int) -> bool:
    """Grant `rights` beneath `path` (only its file rights when it is a file);
    False when the path does not exist."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        if libc.syscall(_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(fd)
    return True
