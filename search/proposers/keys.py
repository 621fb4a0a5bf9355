"""Which API key goes to which endpoint, for the LLM proposers.

A provider's key (ANTHROPIC_API_KEY, OPENAI_API_KEY) goes only to that
provider's own endpoint (api.anthropic.com, api.openai.com), which is also the
endpoint used when no base URL is given, whatever the SDKs' *_BASE_URL
variables say. Any other base URL gets the key held by the environment
variable named with `api_key_env` (--api-key-env), or else the placeholder
"none" (local servers check no key). A key is never written to a run
directory, a log line or an error message: each key read here is remembered
by mlxsci/evaluation/redaction.py, which redacts it from every prompt and record.

It is separate from search/proposers/llm.py because it is the one place that
decides where a secret may go, apart from the calls and their retries.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from mlxsci.evaluation.redaction import remember_secret
from mlxsci.search.proposers.base import ProposerError

PLACEHOLDER_KEY = "none"  # sent where no key is given: the SDKs insist on one
# The providers' own endpoints: the only places their keys are sent to.
ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _require_key(var: str, model: str) -> str:
    key = os.environ.get(var, "").strip()
    if not key:
        raise ProposerError(
            f"model {model!r} needs an API key: set the environment variable {var} "
            "(or use --model autotune, which needs none)"
        )
    remember_secret(var, key)  # a key in use is redacted from prompts and records
    return key


def _key_from_named_variable(name: str) -> str:
    # The message never echoes a value that may be the key itself, pasted by mistake.
    if not _ENV_NAME.match(name):
        raise ProposerError(
            "--api-key-env takes the NAME of an environment variable that holds "
            "the key (letters, digits and _), not the key itself"
        )
    key = os.environ.get(name, "").strip()
    if not key:
        raise ProposerError(
            f"--api-key-env {name}: the environment variable {name} is not set "
            "or is empty; export it, or leave --api-key-env out for a server "
            "that needs no key"
        )
    remember_secret(name, key)  # whatever the variable is called
    return key


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"https": 443, "http": 80}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port or default


def endpoint_and_key(
    provider_var: str, official_url: str, base_url: str | None, api_key_env: str | None, model: str
) -> tuple[str, str]:
    """(the base URL to call, the key to send there): see the module docstring."""
    url = base_url or official_url
    if api_key_env:
        return url, _key_from_named_variable(api_key_env)
    if origin(url) == origin(official_url):
        return url, _require_key(provider_var, model)
    return url, PLACEHOLDER_KEY
