"""The code's shape, as docs/architecture.md draws it: packages by layer, each
importing only from the layers below it; the worker (which runs a candidate's
code) loading nothing of the trusted side; no private name used across
modules; dialect and backend facts asked of their tables; and a map that names
every package and module."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Folders that ship as mlxsci.<folder> (setup.py maps them); mlxsci/ is the root.
MAPPED = {"search": "mlxsci.search", "tasks": "mlxsci.tasks", "reference": "mlxsci.reference"}
SOURCE_DIRS = ("mlxsci", *MAPPED)

# Low to high: a module may import from its own layer and the layers below.
LAYERS = (
    ("storage",),
    ("kernel", "protocol"),
    ("task", "held_out", "tasks", "reference"),
    ("backends", "sandbox"),
    ("timing",),
    ("worker",),
    ("roofline",),
    ("evaluation",),
    ("fast",),
    ("transfer",),
    ("search",),
    ("report", "sweep", "import_metal_sci"),
    ("api", "eval", "cli", "__init__", "__main__"),
)
RANK = {package: rank for rank, names in enumerate(LAYERS) for package in names}
# What the sandboxed worker must never load: the side that judges it.
TRUSTED = ("evaluation", "roofline", "search", "report", "sweep")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] in MAPPED:
        parts = MAPPED[parts[0]].split(".") + parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


SOURCES = sorted(
    p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py") if "runtime" not in p.parts
)
MODULES = {module_name(p): p for p in SOURCES}


def top_package(module: str) -> str:
    """mlxsci.kernel.source.lexer -> kernel; mlxsci -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path, top_level: bool = False) -> list[tuple[int, str, str | None]]:
    """(line, module, name) for each mlxsci import in `path`: `from M import
    n` gives (M, n) or, when M.n is a module, (M.n, None); `import M` gives
    (M, None). Relative imports are resolved against the file's package.
    top_level: only the imports that run when the module is imported."""
    found = []
    tree = ast.parse(path.read_text())
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name, None) for a in node.names if a.name.startswith("mlxsci")
            ]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                me = module_name(path).split(".")
                package = me if path.name == "__init__.py" else me[:-1]
                up = package[: len(package) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if not base.startswith("mlxsci"):
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                found.append(
                    (node.lineno, full, None) if full in MODULES else (node.lineno, base, a.name)
                )
    return found


def private_imports(path: Path) -> list[str]:
    """`from M import _x` where _x is not a module, and `mod._x` where `mod`
    is an mlxsci module this file imported."""
    text = path.read_text()
    found, aliases = [], {}
    for line, module, name in imports_of(path):
        if name and name.startswith("_") and not name.startswith("__"):
            found.append(f"{rel(path)}:{line}: {name} from {module}")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mlxsci"):
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name.startswith("mlxsci"):
                    aliases[a.asname] = a.name
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{rel(path)}:{node.lineno}: {node.attr} of {aliases[node.value.id]}")
    return found


TESTS_AND_BENCH = sorted(p for d in ("tests", "bench") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES + TESTS_AND_BENCH, ids=rel)
def test_no_private_name_is_used_across_modules(path):
    found = private_imports(path)
    assert not found, "make it public or keep it in its module:\n" + "\n".join(found)


def test_every_package_has_a_layer():
    packages = {top_package(m) for m in MODULES}
    assert packages <= set(RANK), f"place these in LAYERS: {sorted(packages - set(RANK))}"


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_imports_point_down_the_layers():
    upward = [
        f"{rel(path)}:{line}: {module_name(path)} imports {module}"
        for path in SOURCES
        for line, module, _ in imports_of(path)
        if RANK[top_package(module)] > RANK[top_package(module_name(path))]
    ]
    assert not upward, "an import against the layers (docs/architecture.md):\n" + "\n".join(upward)


def static_closure(start: str) -> set[str]:
    """Every mlxsci module `start` imports, directly or not, at any depth:
    imports inside functions included (the worker may call them), but of a
    package that is only passed through (importing a.b.c runs a/__init__ and
    a/b/__init__ first), only what its __init__ imports when it runs: the
    root package's API is imported lazily, on first use of one of its names,
    which the worker never makes."""
    seen, todo = set(), [(start, False)]
    while todo:
        module, passed_through = todo.pop()
        if (module, passed_through) in seen or module not in MODULES:
            continue
        seen.add((module, passed_through))
        parts = module.split(".")
        todo += [(".".join(parts[:i]), True) for i in range(1, len(parts))]
        todo += [(m, False) for _, m, _ in imports_of(MODULES[module], top_level=passed_through)]
    return {module for module, _ in seen}


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_the_worker_imports_nothing_of_the_trusted_side():
    reached = static_closure("mlxsci.worker.serve") | static_closure("mlxsci.worker.__main__")
    trusted = sorted(m for m in reached if top_package(m) in TRUSTED)
    assert not trusted, f"the worker would load the side that judges it: {trusted}"


def test_the_worker_process_loads_nothing_of_the_trusted_side():
    code = (
        "import sys, mlxsci.worker.serve\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith('mlxsci')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "mlxsci.worker.serve" in loaded
    assert not [m for m in loaded if top_package(m) in TRUSTED], loaded


def test_the_core_imports_nothing_of_the_search():
    above = {"search", "report", "sweep"}
    core = [m for m in MODULES if RANK[top_package(m)] < RANK["search"]]
    found = [
        f"{m} imports {i}"
        for m in core
        for _, i, _ in imports_of(MODULES[m])
        if top_package(i) in above
    ]
    assert not found, found


# What the rest of mlxsci may import of mlxsci/backends/: the registry (each
# backend's facts, its class by name) and the interface. A backend's own
# modules are its internals.
BACKEND_INTERFACE = ("mlxsci.backends", "mlxsci.backends.base")
# The modules outside mlxsci/backends/ that are one backend's binding, not a
# generic layer, and why each may import that backend's internals.
BACKEND_BINDINGS = {
    # mlxsci.fast's simulator binding: MLX's kernel API run by the simulator
    # (its schedules, buffers and profiled variants) is what that module is.
    "mlxsci.fast.simulator": "sim",
    # isolated calls run one kernel's launches in the simulator's sandboxed
    # worker, building what it asks for with the simulator's build service.
    "mlxsci.fast.isolated": "sim",
}


def backend_internals(module: str, path: Path | None = None) -> list[str]:
    """The imports of `module` (at `path`, else its own file) that reach
    into a backend's own modules."""
    path = path or MODULES[module]
    found = []
    for line, imported, _ in imports_of(path):
        parts = imported.split(".")
        if parts[:2] != ["mlxsci", "backends"] or imported in BACKEND_INTERFACE:
            continue
        if BACKEND_BINDINGS.get(module) == parts[2]:
            continue
        found.append(f"{rel(path)}:{line}: {imported}")
    return found


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_no_generic_layer_imports_a_backends_internals():
    """Only mlxsci/backends/ knows a backend's modules; everything else asks
    the registry (mlxsci.backends: BACKENDS, backend_class, sim_gpu_names) or
    the interface (mlxsci.backends.base.Backend)."""
    outside = [m for m in MODULES if top_package(m) != "backends"]
    found = [f for m in outside for f in backend_internals(m)]
    assert not found, "ask mlxsci.backends instead:\n" + "\n".join(found)


def test_the_internals_check_catches_what_it_should(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from mlxsci.backends import backend_class\n"
        "from mlxsci.backends.base import Backend\n"
        "from mlxsci.backends.sim import variants\n"
        "import mlxsci.backends.sim.buffers\n"
        "from mlxsci.backends.sim.abi import FORWARD_SCHEDULE\n"
    )
    found = backend_internals("mlxsci.evaluation.runner", planted)
    assert [f.split(": ")[1] for f in found] == [
        "mlxsci.backends.sim.variants",
        "mlxsci.backends.sim.buffers",
        "mlxsci.backends.sim.abi",
    ]
    assert len(backend_internals("mlxsci.fast.simulator", planted)) == 0  # a named binding


def test_the_checks_catch_what_they_should(tmp_path):
    # Each check above would pass vacuously if its parser saw nothing.
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from mlxsci.storage.cache import _seal, atomic_write_json\n"
        "from mlxsci.storage import cache\n"
        "import mlxsci.evaluation.checks as checks\n"
        "cache._key, checks._size, cache.cache_dir\n"
    )
    assert imports_of(planted) == [
        (1, "mlxsci.storage.cache", "_seal"),
        (1, "mlxsci.storage.cache", "atomic_write_json"),
        (2, "mlxsci.storage.cache", None),
        (3, "mlxsci.evaluation.checks", None),
    ]
    assert len(private_imports(planted)) == 3
    assert "mlxsci.evaluation.checks" in static_closure("mlxsci.evaluation")
    assert RANK[top_package("mlxsci.evaluation.checks")] > RANK[top_package("mlxsci.worker.serve")]


# A comparison of a dialect or backend variable with a GPU's name: what
# mlxsci/kernel/dialects.py and mlxsci/backends/__init__.py answer instead.
# ("sim" is not in it: simulator or GPU is the protocol's own distinction.)
NAME_BRANCH = re.compile(r"\b(\w*dialect|\w*backend\w*|name)\s*[!=]=\s*[\"'](metal|cuda)[\"']")
TABLES = {ROOT / "mlxsci" / "kernel" / "dialects.py", ROOT / "mlxsci" / "backends" / "__init__.py"}


def test_no_branch_on_a_dialect_or_backend_name():
    assert all(t.exists() for t in TABLES)
    found = [
        f"{rel(p)}:{i}: {line.strip()}"
        for p in SOURCES
        if p not in TABLES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if NAME_BRANCH.search(line)
    ]
    assert not found, "ask mlxsci.kernel.dialects / mlxsci.backends instead:\n" + "\n".join(found)


def test_name_branch_pattern_catches_what_it_should():
    assert NAME_BRANCH.search('if dialect == "metal":')
    assert NAME_BRANCH.search("if backend_name != 'cuda':")
    assert not NAME_BRANCH.search('if t == "metal" and toks[k + 1].text == "::":')


def test_architecture_map_names_every_package_and_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = sorted(
        rel(p.parent) + "/" for p in SOURCES if p.name == "__init__.py" and "tasks" not in p.parts
    )
    missing = [p for p in packages if p not in text]
    assert not missing, f"docs/architecture.md does not name the packages {missing}"
    modules = [p for p in SOURCES if p.parts[len(ROOT.parts)] in ("mlxsci", "search")]
    unnamed = [rel(p) for p in modules if p.name != "__init__.py" and p.name not in text]
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    files = [
        p.as_posix()
        for d in (*SOURCE_DIRS, "tests", "examples", "bench")
        for p in (ROOT / d).rglob("*.py")
    ]
    gone = [n for n in named if not any(f.endswith("/" + n) for f in files)]
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
