"""Names made safe for file and folder names."""

from __future__ import annotations

import re

# Anything but letters, digits, dot, underscore and hyphen: runs of them become one hyphen.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, fallback: str) -> str:
    """`name` with each run of characters unsafe in a file name replaced by
    '-' and no leading or trailing '-' (e.g. 'openai/gpt-4o mini' ->
    'openai-gpt-4o-mini'); `fallback` when nothing is left."""
    return _UNSAFE.sub("-", name).strip("-") or fallback
