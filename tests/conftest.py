"""Where mlxsci's caches live during a test session.

References, roofline probes and simulator builds are cached by what they are
made from: a reference by its task, sizes and reference sources
(reference_store._key), a roofline by device, dialect, timer and probe digest
(roofline.cache_path, probe_digest), a kernel by its whole translation unit
and the runtime's digest (backends/sim/build.py). An entry one session wrote
is therefore right for the next, so sessions share one per-user directory
instead of each paying the roofline probes (~9.5 s on 2 cores) and every
kernel compile again. The simulator's roofline depends on the runtime's speed,
which its probe digest does not cover, so the directory is named by the
runtime's digest: a changed runtime starts from an empty one.

- MLXSCI_CACHE_DIR, when set, is used as it is.
- MLXSCI_TEST_FRESH_CACHE=1 gives the session a fresh temporary directory
  (what a fresh clone sees; the caches never change what a test asserts).
- A test that needs an empty cache points MLXSCI_CACHE_DIR at its tmp_path with
  monkeypatch (tests/backends/sim/test_sim_runtime.py, tests/roofline/test_roofline.py do).

Helpers the tests share are plain functions in tests/helpers.py (smoke_eval,
replace_once), imported by name like tests/fake_llm_server.py: a module, not
fixtures, so a test calls them like any function.
"""

import os
import sys
import tempfile
from pathlib import Path

import pytest

# Bytecode is written even where PYTHONDONTWRITEBYTECODE=1 is set: without
# it every pytest process (each xdist worker) compiles mlxsci and rewrites the
# asserts of every test module again (~10 s of CPU a process on 2 cores), and
# every worker and CLI subprocess a test starts compiles the mlxsci modules it
# imports. Python reads a __pycache__ entry whatever that setting says and
# checks it against its source's mtime and size, so a stale one is never used;
# __pycache__ is in .gitignore, as in any checkout where Python writes them.
sys.dont_write_bytecode = False


def _runtime_digest() -> str:
    """The simulator runtime's digest (sources, flags, zig version), or
    "no-sim" where the simulator cannot build here."""
    try:
        from mlxsci.backends.sim.toolchain import runtime_digest

        return runtime_digest()[:16]
    except Exception:  # noqa: BLE001 - zig or mlx missing: only the other caches matter
        return "no-sim"


def _shared_cache_dir() -> str:
    """$XDG_CACHE_HOME/mlxsci-tests/<runtime digest> (default ~/.cache/...):
    the user's own directory, apart from the cache real runs use, so a roofline
    measured under a test session's load never scores a real search."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return str(Path(base, "mlxsci-tests", _runtime_digest()))


def _session_cache_dir() -> str:
    if os.environ.get("MLXSCI_TEST_FRESH_CACHE", "") not in ("", "0"):
        return tempfile.mkdtemp(prefix="mlxsci-test-cache-")
    return _shared_cache_dir()


if not os.environ.get("MLXSCI_CACHE_DIR"):
    os.environ["MLXSCI_CACHE_DIR"] = _session_cache_dir()


# The fake LLM server of tests/search/test_proposers.py and tests/search/test_search_llm_faults.py:
# one per test module, reset before each test, with test keys in the environment.
@pytest.fixture(scope="module")
def server():
    from fake_llm_server import FakeLLMServer

    with FakeLLMServer() as s:
        yield s


@pytest.fixture
def fake(server, monkeypatch):
    server.reset()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-anthropic-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-openai-key")
    return server
