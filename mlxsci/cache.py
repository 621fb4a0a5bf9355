"""Where mlxsci keeps what it can recompute: references, roofline probes, sim builds.

`MLXSCI_CACHE_DIR` overrides the default `~/.cache/mlxsci`. Every write is a
temp file plus rename, so concurrent processes and killed runs never leave a
half-written entry behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


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


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())
