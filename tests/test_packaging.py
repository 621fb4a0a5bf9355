"""Every data file the package reads at run time must ship in the wheel."""

import ast
import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ROOTS = {
    "mlxsci": "mlxsci",
    "tasks": "mlxsci.tasks",
    "reference": "mlxsci.reference",
    "search": "mlxsci.search",
}


def package_data():
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "package_data":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no package_data")


def owning_package(path: Path):
    """(package name, path relative to it) of the nearest folder with __init__.py."""
    rel = path.relative_to(ROOT)
    parts = rel.parts
    for i in range(len(parts) - 1, 0, -1):
        if (ROOT.joinpath(*parts[:i]) / "__init__.py").exists():
            pkg = SOURCE_ROOTS[parts[0]] + "".join("." + p for p in parts[1:i])
            return pkg, "/".join(parts[i:])
    raise AssertionError(f"{rel} is in no package")


def test_data_files_are_declared():
    data = package_data()
    missing = []
    for root in SOURCE_ROOTS:
        for path in (ROOT / root).rglob("*"):
            if (
                not path.is_file()
                or path.suffix in (".py", ".pyc")
                or "__pycache__" in path.parts
                or path.name.startswith(".")
            ):
                continue
            pkg, rel = owning_package(path)
            patterns = data.get("", []) + data.get(pkg, [])
            if not any(
                fnmatch.fnmatch(rel, p) and rel.count("/") == p.count("/") for p in patterns
            ):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not in setup.py package_data: {missing}"
