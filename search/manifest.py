"""A finished run's record of its own files: manifest.json, and its check.

The search writes manifest.json last, after summary.json (search/summary.py
`write_record`): the sha256 of every file in the run directory but the
manifest itself, summary.json included, so a summary edited after the run
finished (an outcome turned from "flat" into "improved"), a file removed (the
attack's candidate) or a file added shows. The file map is also signed with
the cache directory's key (mlxsci/storage/cache.py `sign`), named by `key_id`: whoever
rewrites the files and recomputes their hashes cannot sign the new map
without that key. The report (mlxsci/report/runs.py) checks a run with
`check` and sets aside a tampered one.

A resumed finished run is unfinished again: its manifest is removed when it
resumes (`remove`) and written anew when it finishes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mlxsci.storage.cache import (
    atomic_write_json,
    existing_key,
    integrity_key,
    key_id,
    sign,
    signature_matches,
)
from mlxsci.storage.locks import LOCK_NAME

MANIFEST = "manifest.json"
VERSION = 1
_LABEL = "run-manifest"

# What check() finds, one word each (the report's `integrity` column).
SEALED = "sealed"  # every digest matches and this machine's key signed them
DIGESTS_MATCH = "digests match"  # every digest matches; signed by another machine's key
UNSEALED = "unsealed"  # no manifest: finished before manifests existed, or resumed since
TAMPERED = "tampered"  # a file changed, removed or added, or the manifest is forged


@dataclass
class Integrity:
    status: str
    problems: list[str] = field(default_factory=list)  # what differs, for the warning

    @property
    def tampered(self) -> bool:
        return self.status == TAMPERED


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def file_digests(run_dir: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under run_dir but the manifest
    and the lock file (mlxsci/storage/locks.py: no record of the run; whoever takes
    the lock later stamps it; a read-only copy may lack it),
    links not followed (a link's digest is its target's name)."""
    run_dir = Path(run_dir)
    digests = {}
    for root, dirs, files in os.walk(run_dir):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root, name)
            rel = path.relative_to(run_dir).as_posix()
            if rel in (MANIFEST, LOCK_NAME):
                continue
            if path.is_symlink():
                digests[rel] = "link:" + os.readlink(path)
            elif path.is_file():
                digests[rel] = _sha256(path)
    return dict(sorted(digests.items()))


def _signed_bytes(files: dict) -> bytes:
    return json.dumps({"version": VERSION, "files": files}, sort_keys=True).encode()


def write(run_dir: Path) -> dict:
    """Write run_dir's manifest (after everything else) and return it."""
    files = file_digests(run_dir)
    key = integrity_key()
    manifest = {
        "version": VERSION,
        "files": files,
        "key_id": key_id(key),
        "hmac": sign(_LABEL, _signed_bytes(files), key),
    }
    atomic_write_json(Path(run_dir) / MANIFEST, manifest)
    return manifest


def remove(run_dir: Path) -> None:
    """A finished run resumed: unfinished again until it writes a new manifest."""
    try:
        (Path(run_dir) / MANIFEST).unlink()
    except FileNotFoundError:
        pass


def _differences(recorded: dict, now: dict) -> list[str]:
    changed = [f"{n} changed" for n in recorded if n in now and now[n] != recorded[n]]
    removed = [f"{n} removed" for n in recorded if n not in now]
    added = [f"{n} added" for n in now if n not in recorded]
    return changed + removed + added


def check(run_dir: Path) -> Integrity:
    """Whether run_dir's files are those its manifest recorded (module docstring)."""
    path = Path(run_dir) / MANIFEST
    if not path.exists() and not path.is_symlink():
        return Integrity(UNSEALED)
    try:
        manifest = json.loads(path.read_bytes())
        files = manifest["files"]
        if manifest.get("version") != VERSION or not isinstance(files, dict):
            raise ValueError("not a manifest this version writes")
    except (OSError, ValueError, TypeError, KeyError) as exc:
        return Integrity(TAMPERED, [f"{MANIFEST} unreadable ({type(exc).__name__})"])
    problems = _differences(files, file_digests(run_dir))
    key = existing_key()
    ours = key is not None and manifest.get("key_id") == key_id(key)
    if (
        key is not None
        and ours
        and not signature_matches(_LABEL, _signed_bytes(files), str(manifest.get("hmac")), key)
    ):
        problems.insert(0, f"{MANIFEST} not signed by this machine's key (rewritten)")
    if problems:
        return Integrity(TAMPERED, problems)
    return Integrity(SEALED if ours else DIGESTS_MATCH)
