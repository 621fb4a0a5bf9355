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

Damage is said (issue 23): an entry that is there but empty, unsealed,
unreadable or not what its sidecar vouches for is named in one line on
stderr, once per entry per process, as it is rebuilt (`report_damaged`); a
missing entry (a first run) is rebuilt without a word. A sidecar is written
before its entry is renamed into place (`install_verified`), so a reader never
sees a new entry without its seal; one that reads an old entry against a new
seal (a rebuild in flight) reads both again before calling it damaged.
Entries whose bytes differ from build to build (a reference's zip, a
roofline, a precompiled header) are built by one process at a time under
`locks.building` (mlxsci/storage/locks.py), so two builders cannot leave one's seal
over the other's bytes; a builder held up past its patience (a holder stopped
with Ctrl-Z) builds for itself and keeps nothing.

Everything under the cache directory, and what guards it:

| file | written | checked when read |
|---|---|---|
| `.integrity-key` | 0600 temp file, fsynced, linked into place | size and owner; a damaged key is replaced (one line) and what it sealed is rebuilt |
| `reference/<task>/<key>.npz` (+ `.hmac`, `.lock`) | `write_verified` under `locks.building` | `read_verified` (mlxsci/evaluation/references.py) |
| `roofline/<device>-<dialect>-<timer>.json` (+ `.hmac`, `.lock`) | `write_verified_json` under `locks.building` | `read_verified` (mlxsci/roofline/store.py) |
| `sim/k-<key>.so` (+ `.hmac`) | `install_verified` of the linked temp file | `verify_file` before loading (mlxsci/backends/sim/build.py) |
| `sim/k-<key>.err` (+ `.hmac`): a cached compile error | `write_verified` | `read_verified` |
| `sim/rt-<key>.o` (+ `.hmac`): the runtime object | `install_verified` | `verify_file` before linking (backends/sim/toolchain.py) |
| `sim/pch-<key>.pch` and `.h` (+ `.hmac`, `.pch.lock`) | `install_verified`, the header first, under `locks.building` | `verify_file` of both before use (backends/sim/pch.py); a PCH the compiler refuses is removed and named |
| `sim/k-<key>.cpp`: a kernel's translation unit | temp file plus rename, before every compile of it | never read back: the compiler's input, rewritten by each build |
| `*.lock` | by mlxsci/storage/locks.py | never trusted: the kernel's flock decides, the text only names the holder |
| `.<name>.*`, `*.tmp` | temp files of a write in flight | never read; a killed writer's stay behind, harmless |

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
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

KEY_NAME = ".integrity-key"
KEY_BYTES = 32
SIDECAR_SUFFIX = ".hmac"
_SIDECAR_PREFIX = "hmac-sha256 "
_DOMAIN = b"mlxsci-integrity-v1\0"
_CHUNK = 1 << 20
REBUILDING = "rebuilding it"
# How long a reader waits before reading an entry that did not match its seal
# a second time: a rebuild in flight renames the entry just after its seal.
_SETTLE_SECONDS = 0.05

# Entries named on stderr by this process (each once), and whether this process
# replaced a damaged key (then every entry is rebuilt, and that line said so).
_REPORTED: set[str] = set()
_KEY_REPLACED: list[bool] = []


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
        if key == b"" or _sealed_entries(path.parent):  # damaged, or lost under its entries
            _say_key_replaced(path)
        _install_key(path, replace=key == b"")
    raise OSError(f"cannot set up the cache's integrity key {path}: remove it and retry")


def _sealed_entries(root: Path) -> bool:
    """Whether the cache holds sealed entries (a key gone from under them)."""
    return any(next(root.glob(p), None) for p in ("*/*" + SIDECAR_SUFFIX, "*/*/*" + SIDECAR_SUFFIX))


def _say_key_replaced(path: Path) -> None:
    """One line for a damaged or lost key: every entry it sealed reads as
    damaged now and is rebuilt, which this line says for all of them."""
    if _KEY_REPLACED:
        return
    _KEY_REPLACED.append(True)
    try:
        what = f"not a usable key ({os.lstat(path).st_size} bytes, not a private file of "
        what += f"{KEY_BYTES} bytes)"
    except FileNotFoundError:
        what = "missing"
    except OSError as exc:
        what = f"unreadable ({exc.strerror})"
    _say(
        f"mlxsci: the cache's integrity key {path} is {what}; making a new one and "
        "rebuilding every entry the old one sealed"
    )


def existing_key() -> bytes | None:
    """The key if this cache directory has a usable one; never creates one
    (a report only checks what a search sealed)."""
    return _read_key(key_path()) or None


def key_id(key: bytes) -> str:
    """A public name of a key (which machine's cache sealed something), from
    which the key cannot be recovered."""
    return hashlib.sha256(b"mlxsci-key-id\0" + key).hexdigest()[:16]


def keyed_digest(key: bytes, label: str, chunks) -> str:
    h = hmac.new(key, _DOMAIN + label.encode() + b"\0", hashlib.sha256)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def sign(label: str, data: bytes, key: bytes | None = None) -> str:
    """HMAC-SHA256 (hex) of `data` under `label` with the cache's key (a run's
    manifest is signed this way: label "run-manifest")."""
    return keyed_digest(key if key is not None else integrity_key(), label, [data])


def signature_matches(label: str, data: bytes, mac: str, key: bytes) -> bool:
    return hmac.compare_digest(keyed_digest(key, label, [data]), str(mac))


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


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a closed or full stderr must not stop a rebuild
        pass


def report_damaged(path: Path, why: str) -> None:
    """Say on stderr, in one line, that the entry at `path` is damaged (`why`)
    and is being rebuilt: once per entry per process, so a search's hundred
    evaluations do not repeat it; nothing after this process replaced a
    damaged key (its own line covers every entry)."""
    name = entry_name(path)
    if name in _REPORTED or _KEY_REPLACED:
        return
    _REPORTED.add(name)
    _say(f"mlxsci: cache entry {path} is {why}; {REBUILDING}")


# Entries larger than this are checked in chunks before they are read whole.
_READ_AFTER_CHECK_BYTES = 64 << 20


def _examine(path: Path, whole: bool) -> tuple[bytes | None, str | None]:
    """(its bytes, or b"" unless `whole`; None) when the entry matches its seal;
    (None, None) when there is no entry (a first run); (None, why) when it is
    damaged."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return None, "not a regular file"
    expected = _read_sidecar(path)
    if expected is None:  # nothing vouches for it: no need to read it
        if st.st_size == 0:
            return None, "empty"
        return None, f"unsealed (its {SIDECAR_SUFFIX} sidecar is missing or unreadable)"
    try:
        if whole and st.st_size > _READ_AFTER_CHECK_BYTES:
            # A large file is checked in chunks before it is read whole: a
            # planted 10 GB "entry" must cost a hash, not the parent's memory.
            if not hmac.compare_digest(
                keyed_digest(integrity_key(), entry_name(path), _file_chunks(path)), expected
            ):
                return None, "not what its seal vouches for (cut short, altered or planted)"
        data = path.read_bytes() if whole else b""  # the bytes returned are the ones checked
        chunks = [data] if whole else _file_chunks(path)
        actual = keyed_digest(integrity_key(), entry_name(path), chunks)
    except FileNotFoundError:  # removed since the stat: missing, not damaged
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    if hmac.compare_digest(actual, expected):
        return data, None
    if st.st_size == 0:
        return None, "empty"
    return None, "not what its seal vouches for (cut short, altered or planted)"


def _verified(path: Path, whole: bool) -> bytes | None:
    data, why = _examine(path, whole)
    if why is not None:
        # Read seal and entry again once: a reader between a rebuild's new
        # seal and its rename sees the old entry against the new seal.
        time.sleep(_SETTLE_SECONDS)
        data, why = _examine(path, whole)
    if why is not None:
        report_damaged(path, why)
    return data


def install_verified(tmp: Path, path: Path) -> None:
    """Make the finished file `tmp` (in `path`'s folder) the entry `path`:
    its sidecar first, then the rename, so a reader never finds the new entry
    unsealed; one between the two sees a mismatch, reads again, and at worst
    rebuilds (wasted work, never a wrong entry)."""
    path = Path(path)
    _write_sidecar(path, keyed_digest(integrity_key(), entry_name(path), _file_chunks(Path(tmp))))
    try:
        os.replace(tmp, path)
    except IsADirectoryError:
        # A folder where the entry belongs (_examine: "not a regular file"):
        # it is no entry of ours, and it is in the way of the rebuilt one.
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)


def write_verified(path: Path, data: bytes) -> None:
    """Write an entry atomically with its sidecar (install_verified)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        install_verified(Path(tmp), path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_verified_json(path: Path, obj) -> None:
    write_verified(path, json_bytes(obj))


def read_verified(path: Path) -> bytes | None:
    """The entry's bytes if its sidecar vouches for them; None when it is
    missing, unsealed, damaged or planted (the caller rebuilds it; damage is
    named on stderr, report_damaged). The bytes returned are the ones checked:
    parse them, do not read the file again."""
    return _verified(Path(path), whole=True)


def seal_file(path: Path) -> None:
    """Write the sidecar of a file already in place (written atomically by the
    caller), reading it once in chunks. A new entry is better installed with
    install_verified, which seals it before it is in place."""
    path = Path(path)
    _write_sidecar(path, keyed_digest(integrity_key(), entry_name(path), _file_chunks(path)))


def verify_file(path: Path) -> bool:
    """Whether a file in place matches its sidecar (read once, in chunks; a
    missing file is False without a word, a damaged one is named on stderr).
    See the module docstring for what a check before use cannot promise."""
    return _verified(Path(path), whole=False) is not None


def discard(path: Path) -> None:
    """Remove an entry and its sidecar (one found unusable after its check)."""
    for p in (Path(path), sidecar(Path(path))):
        p.unlink(missing_ok=True)
