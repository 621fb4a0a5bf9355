"""The code's shape, which docs/architecture.md and CONTRIBUTING.md promise:
small modules, dialect and backend facts asked of their tables, and a map
(docs/architecture.md, "What is where") that names every module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("mlxsci", "search", "tasks", "reference")
MAX_LINES = 450

MODULES = sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))

# A comparison of a dialect or backend variable with a GPU's name: what
# mlxsci/kernel/dialects.py and mlxsci/backends/__init__.py answer instead. ("sim"
# is not in it: simulator or GPU is the protocol's own distinction.)
NAME_BRANCH = re.compile(r"\b(\w*dialect|\w*backend\w*|name)\s*[!=]=\s*[\"'](metal|cuda)[\"']")
TABLES = {ROOT / "mlxsci" / "dialects.py", ROOT / "mlxsci" / "backends" / "__init__.py"}


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", MODULES, ids=rel)
def test_module_is_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{rel(path)} has {n} lines; split it along a seam (CONTRIBUTING.md)"


def test_no_branch_on_a_dialect_or_backend_name():
    found = [
        f"{rel(p)}:{i}: {line.strip()}"
        for p in MODULES
        if p not in TABLES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if NAME_BRANCH.search(line)
    ]
    assert not found, "ask mlxsci.kernel.dialects / mlxsci.backends instead:\n" + "\n".join(found)


def test_name_branch_pattern_catches_what_it_should():
    # The check above would pass vacuously if the pattern matched nothing.
    assert NAME_BRANCH.search('if dialect == "metal":')
    assert NAME_BRANCH.search("if backend_name != 'cuda':")
    assert not NAME_BRANCH.search('if t == "metal" and toks[k + 1].text == "::":')


def test_architecture_map_names_every_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    package_modules = [
        p
        for p in MODULES
        if p.parts[len(ROOT.parts)] in ("mlxsci", "search") and "tasks" not in p.parts
    ]
    missing = [rel(p) for p in package_modules if p.name not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    dirs = (*PACKAGE_DIRS, "tests", "examples", "bench")
    files = [p.as_posix() for d in dirs for p in (ROOT / d).rglob("*.py")]
    gone = [n for n in named if not any(f.endswith("/" + n) for f in files)]
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
