"""Secrets kept away from candidates, models and records (issue 21, outcome 4).

A candidate is hostile code and a model is a third party, so no API key may
reach either, nor any file a run keeps. Three guards, each an allowlist or a
scan of what goes out, never a list of what to forbid:

- `minimal_worker_env`: the environment a worker process starts with. Only
  what Python, MLX and the backend need, by name: no API key, no user
  variable. This is the guard that matters: a worker that never held a
  secret cannot print it.
- `worker_text`: what a worker printed (its stderr, its "last words"),
  decoded, stripped of terminal escapes and control characters, redacted and
  bounded, before the parent quotes it in a verdict.
- `redact` / `redact_json`: every prompt (search/prompts/compose.py, and the request
  an LLM proposer sends in search/proposers/llm.py), every file of a run
  directory (search/rundir.py) and an evaluation's JSON and table
  (mlxsci/evaluation/results.py) are scanned for secret values, which become
  `[redacted:NAME]`. Defence in depth: it catches a value that got out some
  way nobody foresaw, written plainly, JSON- or URL-escaped, split by
  whitespace, or as hex or base64.

Which values are secrets (`secret_values`): the API keys a search uses (the
proposers' key reads in search/proposers/keys.py call `remember_secret`, so a key
named by --api-key-env counts whatever its variable's name) and every
environment variable whose name says key, token, secret, password or
credential. Values that cannot be credentials are left alone, since
replacing them would maim the records: short ones, numbers, and paths of
files that exist.

It imports nothing of mlxsci's at module level (mlxsci/evaluation/results.py, which
`import mlxsci` loads, imports it).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import site
import sys
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

# A variable named like this holds a secret (AUTHOR is a name, not an auth).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|AUTH(?!OR)", re.IGNORECASE)
# Shorter values are left alone: no credential is that short, and a short
# value ("none", "1", "false") would be replaced all over every record.
MIN_SECRET_CHARS = 8
# Settings, not secrets, that are long enough to count otherwise.
_SETTING_WORDS = frozenset({"disabled", "enabled", "required", "optional", "unlimited", "insecure"})
_EXTRA_NAME = "api-key"  # the marker's name for a value given without one

# value -> variable name: the keys the proposers read (search/proposers/keys.py).
_remembered: dict[str, str] = {}


def remember_secret(name: str, value: str) -> None:
    """Count `value` (read from variable `name`) as a secret from now on in
    this process, whatever the variable is called and whatever the
    environment holds later."""
    value = value.strip()
    if plausible_secret(value):
        _remembered.setdefault(value, name)


def plausible_secret(value: str) -> bool:
    """Whether a value could be a credential. Not: shorter than
    MIN_SECRET_CHARS; only digits (ports, ids, counts, timeouts: numbers
    every record is full of); a settings word; the path of a file or folder
    that exists (where a key is, not the key, and paths fill the records)."""
    value = value.strip()
    if len(value) < MIN_SECRET_CHARS or value.isdigit():
        return False
    if value.lower() in _SETTING_WORDS:
        return False
    return not (os.path.isabs(value) and os.path.exists(value))


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _in_use(extra: Iterable[str] | Mapping[str, str] = ()) -> dict[str, str]:
    """{secret value: the name its marker shows}, longest value first: the
    remembered keys, `extra` (values, or a mapping of name to value: the
    keys a caller uses) and the environment's secret-named variables."""
    found: dict[str, str] = dict(_remembered)
    pairs = extra.items() if isinstance(extra, Mapping) else ((_EXTRA_NAME, v) for v in extra)
    for name, value in pairs:
        if plausible_secret(value):
            found.setdefault(value.strip(), name)
    for name, value in os.environ.items():
        if is_secret_name(name) and plausible_secret(value):
            found.setdefault(value.strip(), name)
    return dict(sorted(found.items(), key=lambda kv: (-len(kv[0]), kv[0])))


def secret_values(extra: Iterable[str] | Mapping[str, str] = ()) -> list[str]:
    """The values `redact` replaces, longest first (see _in_use)."""
    return list(_in_use(extra))


# -- redaction --------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _pattern(value: str) -> re.Pattern[str]:
    """Every way a value is likely to be written out: plainly (also split by
    whitespace, as a wrapped line splits it), escaped for JSON, a Python repr
    or a URL, and as hex or base64 of its bytes (from its start: whatever
    follows changes only the last characters)."""
    data = value.encode()
    forms = {
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        repr(value)[1:-1],
        urllib.parse.quote(value, safe=""),
    }
    whole = data[: len(data) // 3 * 3]
    if len(whole) >= 6:
        forms |= {base64.b64encode(whole).decode(), base64.urlsafe_b64encode(whole).decode()}
    forms.discard(value)
    alternatives = [r"\s*".join(map(re.escape, value))]
    alternatives += [re.escape(f) for f in sorted(forms, key=len, reverse=True)]
    alternatives.append(f"(?i:{data.hex()})")
    return re.compile("|".join(alternatives))


def _table(secrets: Iterable[str] | Mapping[str, str] | None) -> dict[str, str]:
    """{value: name}, longest first, from redact's `secrets` argument: None
    (_in_use()), a mapping of name to value, or values (named after
    the variable that holds them, where one does)."""
    if secrets is None:
        return _in_use()
    if isinstance(secrets, Mapping):
        pairs = {v.strip(): k for k, v in secrets.items() if v.strip()}
    else:
        known = _in_use()
        pairs = {v.strip(): known.get(v.strip(), _EXTRA_NAME) for v in secrets if v.strip()}
    return dict(sorted(pairs.items(), key=lambda kv: (-len(kv[0]), kv[0])))


def _redact_with(text: str, table: dict[str, str]) -> str:
    for value, name in table.items():
        # A plain replacement, never a template: a name may hold a backslash.
        text = _pattern(value).sub(functools.partial(_marker, name), text)
    return text


def _marker(name: str, _match: re.Match[str]) -> str:
    return f"[redacted:{name}]"


def redact(text: str, secrets: Iterable[str] | Mapping[str, str] | None = None) -> str:
    """`text` with every occurrence of each secret value (longest first)
    replaced by `[redacted:NAME]`. secrets: None for the secrets in use
    (_in_use), a mapping of name to value, or values."""
    return _redact_with(text, _table(secrets))


def redact_json(obj: Any, secrets: Iterable[str] | Mapping[str, str] | None = None) -> Any:
    """A JSON-able object with every string in it (keys included) redacted,
    a copy (the object itself when no secret is in use); numbers and the
    structure stay as they are, so the JSON stays valid whatever a secret
    looks like."""
    table = _table(secrets)

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _redact_with(value, table)
        if isinstance(value, Mapping):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, tuple):
            return tuple(walk(v) for v in value)
        return value

    return walk(obj) if table else obj


# -- what a worker printed ---------------------------------------------------------

# Terminal escape sequences: CSI (colours, cursor moves), OSC (titles,
# hyperlinks, clipboard writes), DCS/SOS/PM/APC strings, and two-byte escapes.
_ESCAPES = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|[PX^_][^\x1b]*(?:\x1b\\)?|[ -/]*[0-~])"
)
CUT_MARK = "\u2026"  # starts a text worker_text cut short


# The most of a worker's text worker_text reads, from its end: far more than
# any caller keeps (mlxsci.protocol.exchange keeps 64 KiB of a stream), so only a
# flood handed over whole is cut here; decoding and cleaning all of one had
# cost 750 MB for 100 MB of it (issue 23).
WORKER_TEXT_BYTES = 256 << 10
# The most characters one character of a secret takes in any form redact
# knows (JSON's \ud83d\ude00 for one astral character, a URL's %F0%9F%98%80).
_FORM_CHARS = 12


def worker_text(
    raw: bytes, limit: int, secrets: Iterable[str] | Mapping[str, str] | None = None
) -> str:
    """Bytes a worker printed, made safe to quote in a verdict, a prompt or
    a record: decoded (undecodable bytes replaced), terminal escapes and
    control characters but newline and tab removed (a carriage return
    becomes a newline), redacted, and bounded to `limit` characters by
    keeping the end, where a dying worker's last words are; a text cut short
    starts with CUT_MARK. Redacted before it is cut, so the cut cannot leave
    part of a secret behind. Only the last WORKER_TEXT_BYTES are read; where
    that cut something, the text's first characters, as many as the longest
    secret takes in any form, are dropped too, since that cut may have split
    one (a secret spread wider than that by whitespace is not caught there)."""
    if limit <= 0:
        return ""
    table = _table(secrets)
    text = _ESCAPES.sub("", raw[-WORKER_TEXT_BYTES:].decode("utf-8", errors="replace"))
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(c for c in text if c in "\n\t" or c.isprintable())
    if len(raw) > WORKER_TEXT_BYTES:
        text = CUT_MARK + text[_FORM_CHARS * max(map(len, table), default=0) :]
    text = _redact_with(text, table)
    if len(text) > limit:
        text = CUT_MARK + text[len(text) - limit + 1 :] if limit > 1 else text[-1:]
    return text


# -- a worker's environment ----------------------------------------------------------

# Passed on from the parent on every backend, when set. Not secrets: where
# programs and libraries are, where temporary files go, how many threads
# NumPy's BLAS starts. HOME: the user site-packages and the CUDA driver's
# kernel cache live under it. LD_LIBRARY_PATH: an interpreter built with a
# shared libpython may need it to start at all.
EVERY_BACKEND = (
    "PATH",
    "HOME",
    "TMPDIR",
    "PYTHONPATH",  # the worker imports the same mlxsci as its parent
    "PYTHONHOME",
    "LD_LIBRARY_PATH",
    "MLXSCI_TEST_MARK",  # the tests find their workers' processes by it
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
)
# MLX's own settings (MLX_ENABLE_TF32, ...) change what a kernel computes, so
# the worker runs under the parent's; a name among them that looks like a
# secret's is dropped all the same.
PASSED_PREFIXES = ("MLX_",)
# Set whatever the parent has: UTF-8 text and the C locale's number format
# (no decimal comma in anything the worker prints), output unbuffered so last
# words are not lost, no .pyc written where the worker may not write.
FIXED = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONUTF8": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def _user_site_in_use() -> bool:
    """Whether this interpreter imports from the user's site-packages (a
    `pip install --user`), which the worker then needs as well."""
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    return bool(user_site) and user_site in sys.path


def minimal_worker_env(backend: str) -> dict[str, str]:
    """The environment a worker for `backend` starts with: the variables of
    EVERY_BACKEND, PASSED_PREFIXES and the backend's own (BackendInfo.environment) that the
    parent has, FIXED, MLXSCI_CACHE_DIR set to the parent's cache (so both
    agree without the worker reading anything else), and PYTHONNOUSERSITE
    unless the parent itself imports from the user's site-packages. A
    passed variable named like a secret, or holding a secret value, is
    dropped: an allowlist with a check behind it."""
    from mlxsci.backends import BACKENDS  # lazily, as cache_dir
    from mlxsci.storage.cache import cache_dir  # lazily: see the module docstring

    own = BACKENDS[backend].environment if backend in BACKENDS else ()
    wanted = set(EVERY_BACKEND) | set(own)
    secrets = secret_values()
    env = {
        name: value
        for name, value in os.environ.items()
        if (name in wanted or name.startswith(PASSED_PREFIXES))
        and not is_secret_name(name)
        and not any(s in value for s in secrets)
    }
    env.update(FIXED)
    env["MLXSCI_CACHE_DIR"] = str(cache_dir())
    if not _user_site_in_use():
        env["PYTHONNOUSERSITE"] = "1"
    return env
