"""Where mlxsci keeps what it can recompute: references, roofline probes, sim builds.

`MLXSCI_CACHE_DIR` overrides the default `~/.cache/mlxsci`. Every write is a
temp file plus rename, so concurrent processes and killed runs never leave a
half-written entry behind.

Verified entries (issue 21, "the trusted side is out of reach"). A cache
entry the trusted parent reads back (a reference with its tolerance, a
roofline, a kernel library) is data a hostile candidate would like to plant:
a reference with tolerance 1e30 passes a kernel that writes zeros. So the
parent keeps a digest of its own beside each such entry, a sidecar
`<entry>.hmac` holding HMAC-SHA256 over the entry's name (its path relative to
the cache directory, so an entry and its sidecar copied onto another key do
not validate) and its bytes. The HMAC's key is a random 32-byte secret,
`<cache dir>/.integrity-key`, created by the parent with mode 0600 the first
time one is needed. An entry that is missing, has no sidecar (one written
before sidecars existed), is damaged or does not match its sidecar reads as
absent, and the caller rebuilds it: never trusted, never a traceback.

Why a keyed digest and not a plain hash: whoever can write an entry can write
its plain hash too. The worker that runs a candidate is sandboxed with read
access only to what it needs (never the cache directory's root, where the key
lives), so it can neither read the key nor forge a sidecar. Under
`--unsandboxed` the worker runs as the user and could read the key: there this
layer still stops blind corruption and planting by code that does not look for
the key (the attacks issue 21 lists), not an attack aimed at it.

What stays the caller's concern: `verify_file` checks a file as it is now; a
writer that replaces it between the check and its use (loading a library)
wins, which only the sandbox prevents.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from pathlib import Path

KEY_NAME = ".integrity-key"
KEY_BYTES = 32
SIDECAR_SUFFIX = ".hmac"
_SIDECAR_PREFIX = "hmac-sha256 "
_DOMAIN = b"mlxsci-integrity-v1\0"
_CHUNK = 1 << 20


def cache_dir(*parts: str) -> Path:
    base = os.environ.get("MLXSCI_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mlxsci"
    )
    path = Path(base, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_bytes(obj) -> bytes:
    """The one JSON text mlxsci writes (indented, keys sorted, a final newline)."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, json_bytes(obj))


# ------------------------------------------------------------------ the key
def key_path() -> Path:
    return cache_dir() / KEY_NAME


def _read_key(path: Path) -> bytes | None:
    """The key in `path`; None when there is none; b"" when the file is not a
    usable key (a link, another user's, the wrong size). One that others may
    read is made private again, not replaced: on a file system that keeps no
    modes a new key would fare no better, and every entry would be rebuilt."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return b""
        if st.st_mode & 0o077:
            try:
                os.fchmod(fd, 0o600)
            except OSError:
                pass
        data = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    return data if len(data) == KEY_BYTES else b""


def _install_key(path: Path, replace: bool) -> None:
    """Write a fresh key to `path`, complete before anyone can open it: a 0600
    temp file hard-linked into place (fails if another process got there first,
    whose key then wins), or moved over an unusable one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=KEY_NAME + ".")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: last writer wins
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def integrity_key() -> bytes:
    """This cache directory's key, created on first use. Read each time, not
    kept in the process: a key replaced by another process is then used at
    once (entries signed with the old one are rebuilt, nothing worse)."""
    path = key_path()
    for _ in range(5):
        key = _read_key(path)
        if key:
            return key
        _install_key(path, replace=key == b"")
    raise OSError(f"cannot set up the cache's integrity key {path}: remove it and retry")


def existing_key() -> bytes | None:
    """The key if this cache directory has a usable one; never creates one
    (a report only checks what a search sealed)."""
    return _read_key(key_path()) or None


def key_id(key: bytes) -> str:
    """A public name of a key (which machine's cache sealed something), from
    which the key cannot be recovered."""
    return hashlib.sha256(b"mlxsci-key-id\0" + key).hexdigest()[:16]


def _mac(key: bytes, label: str, chunks) -> str:
    h = hmac.new(key, _DOMAIN + label.encode() + b"\0", hashlib.sha256)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def sign(label: str, data: bytes, key: bytes | None = None) -> str:
    """HMAC-SHA256 (hex) of `data` under `label` with the cache's key (a run's
    manifest is signed this way: label "run-manifest")."""
    return _mac(key if key is not None else integrity_key(), label, [data])


def signature_matches(label: str, data: bytes, mac: str, key: bytes) -> bool:
    return hmac.compare_digest(_mac(key, label, [data]), str(mac))


# ------------------------------------------------------------------ verified entries
def sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def entry_name(path: Path) -> str:
    """What an entry's digest binds it to: its path relative to the cache
    directory (so the whole directory may move), else its absolute path."""
    real = Path(os.path.realpath(path))
    try:
        return real.relative_to(os.path.realpath(cache_dir())).as_posix()
    except ValueError:
        return real.as_posix()


def _read_sidecar(path: Path) -> str | None:
    try:
        text = sidecar(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None
    return text.strip()[len(_SIDECAR_PREFIX) :] if text.startswith(_SIDECAR_PREFIX) else None


def _write_sidecar(path: Path, mac: str) -> None:
    atomic_write_bytes(sidecar(path), f"{_SIDECAR_PREFIX}{mac}\n".encode())


def _file_chunks(path: Path):
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk


def write_verified(path: Path, data: bytes) -> None:
    """Write an entry atomically, then its sidecar. A reader between the two
    sees a mismatch and rebuilds: wasted work, never a wrong entry."""
    path = Path(path)
    atomic_write_bytes(path, data)
    _write_sidecar(path, _mac(integrity_key(), entry_name(path), [data]))


def write_verified_json(path: Path, obj) -> None:
    write_verified(path, json_bytes(obj))


def read_verified(path: Path) -> bytes | None:
    """The entry's bytes if its sidecar vouches for them; None when it is
    missing, unsealed, damaged or planted (the caller rebuilds it). The bytes
    returned are the ones checked: parse them, do not read the file again."""
    path = Path(path)
    expected = _read_sidecar(path)
    if expected is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    actual = _mac(integrity_key(), entry_name(path), [data])
    return data if hmac.compare_digest(actual, expected) else None


def seal_file(path: Path) -> None:
    """Write the sidecar of a file already in place (written atomically by the
    caller, e.g. a compiled library), reading it once in chunks."""
    path = Path(path)
    _write_sidecar(path, _mac(integrity_key(), entry_name(path), _file_chunks(path)))


def verify_file(path: Path) -> bool:
    """Whether a file in place matches its sidecar (read once, in chunks; a
    missing file or sidecar is False). See the module docstring for what a
    check before use cannot promise."""
    path = Path(path)
    expected = _read_sidecar(path)
    if expected is None:
        return False
    try:
        actual = _mac(integrity_key(), entry_name(path), _file_chunks(path))
    except OSError:
        return False
    return hmac.compare_digest(actual, expected)
