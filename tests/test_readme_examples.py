"""The README and the guides under docs/ stay true to the code.

- Every ```python block of docs/getting-started.md's "Use it from Python"
  section runs, in order and in one namespace (later blocks may use names
  from earlier ones), in a temporary directory holding a copy of examples/.
- Every command in a ```bash block names a verb, a module or a script that
  exists, with options that verb takes.
- Every relative link resolves, to a file and, with a #fragment, to a heading
  of it; every repository path the prose names exists (CONTRIBUTING.md
  included); every dotted `mlxsci.` name imports.
"""

import importlib
import importlib.util
import re
import shlex
import shutil
from pathlib import Path

import click
import pytest

from mlxsci.cli import main as mlxsci_cli

ROOT = Path(__file__).resolve().parent.parent
PYTHON_GUIDE = ROOT / "docs" / "getting-started.md"
SECTION = "## Use it from Python"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
USER_DOCS = [d for d in DOCS if d.name != "architecture.md"]  # the lead's map has its own test


def python_blocks() -> list[str]:
    text = PYTHON_GUIDE.read_text()
    start = text.index(SECTION)
    following = text.find("\n## ", start + len(SECTION))
    section = text[start : following if following != -1 else len(text)]
    return re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)


def test_the_section_has_examples_and_they_use_the_simulator():
    blocks = python_blocks()
    assert len(blocks) >= 4
    for block in blocks:  # every backend choice in them names the simulator
        assert all(b == '"sim"' for b in re.findall(r"backend=([^,)\s]+)", block)), block


@pytest.mark.slow
def test_python_examples_run(tmp_path, monkeypatch, capsys):
    shutil.copytree(
        ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(python_blocks()):
        try:
            exec(compile(block, f"{PYTHON_GUIDE.name} (python block {i + 1})", "exec"), namespace)
        except Exception as exc:  # say which block, keep the traceback
            pytest.fail(f"python block {i + 1} failed: {type(exc).__name__}: {exc}\n{block}")
    assert (tmp_path / "results" / "conv1d" / "summary.json").is_file()
    errors = re.findall(r"max error vs reference: (\S+)", capsys.readouterr().out)
    assert errors and float(errors[0]) <= 1e-4


# -- commands ------------------------------------------------------------------------


def commands(doc: Path) -> list[list[str]]:
    """The command lines of a document's ```bash blocks, comments cut, split
    into words, the `&&`-joined ones apart."""
    lines = []
    for block in re.findall(r"^```bash\n(.*?)^```", doc.read_text(), re.S | re.M):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                if part.strip():
                    lines.append(shlex.split(part))
    return lines


def verb_command(words: list[str]) -> tuple[str, click.Command, list[str]] | None:
    """The verb, the click command a `python -m mlxsci.VERB ...` or `mlxsci
    VERB ...` line runs, and its arguments; None for any other line."""
    if words[:2] == ["python", "-m"] and words[2].startswith("mlxsci."):
        verb, args = words[2].removeprefix("mlxsci."), words[3:]
    elif words[0] == "mlxsci" and len(words) > 1 and not words[1].startswith("-"):
        verb, args = words[1], words[2:]
    else:
        return None
    command = mlxsci_cli.get_command(click.Context(mlxsci_cli), verb)
    return (verb, command, args) if command is not None else None


@pytest.mark.parametrize("doc", DOCS + [ROOT / "CONTRIBUTING.md"], ids=lambda d: d.name)
def test_every_command_runs_something_that_exists(doc):
    for words in commands(doc):
        if words[:2] == ["python", "-m"]:
            assert importlib.util.find_spec(words[2]) is not None, f"{doc.name}: {words}"
        if words[0] == "python" and words[1].endswith(".py"):
            assert (ROOT / words[1]).is_file(), f"{doc.name}: {words}"
        found = verb_command(words)
        if found is None:
            continue
        _, command, args = found
        known = {opt for p in command.params for opt in p.opts + p.secondary_opts}
        known |= {"-h", "--help"}
        used = {a.split("=")[0] for a in args if a.startswith("-")}
        assert used <= known, f"{doc.name}: {' '.join(words)}: unknown {used - known}"


def test_every_verb_is_shown_in_the_readme():
    found = [verb_command(words) for words in commands(ROOT / "README.md")]
    shown = {f[0] for f in found if f is not None}
    assert {"eval", "search", "sweep", "report"} <= shown, shown


# -- links, paths, names ---------------------------------------------------------------


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors of a document's headings."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
    slugs = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


@pytest.mark.parametrize("doc", USER_DOCS + [ROOT / "CONTRIBUTING.md"], ids=lambda d: d.name)
def test_every_relative_link_resolves(doc):
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, fragment = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name}: link to {target}: no such file"
        if fragment:
            assert fragment in anchors(file), f"{doc.name}: link to {target}: no such heading"


PATH = re.compile(
    r"(?<![\w/.~-])((?:mlxsci|search|tasks|reference|bench|tests|examples|docs|\.ci)"
    r"/[\w./<>{},*-]*[\w/>}*])"
)


def expand(path: str) -> list[str]:
    """A named path as glob patterns: `<task>` and `*` stand for any name,
    `{h,cpp}` for each of its alternatives."""
    pattern = re.sub(r"<[^>]*>", "*", path)
    braces = re.search(r"\{([^}]*)\}", pattern)
    if not braces:
        return [pattern]
    head, tail = pattern[: braces.start()], pattern[braces.end() :]
    return [p for alt in braces.group(1).split(",") for p in expand(head + alt + tail)]


@pytest.mark.parametrize("doc", USER_DOCS + [ROOT / "CONTRIBUTING.md"], ids=lambda d: d.name)
def test_every_path_named_exists(doc):
    text = doc.read_text().replace("**", "")  # Markdown's bold, not a glob
    for path in set(PATH.findall(text)):
        for pattern in expand(path.rstrip(".,")):
            assert any(ROOT.glob(pattern.rstrip("/"))), f"{doc.name} names {path}: no such file"


def resolve(dotted: str) -> bool:
    """Whether a dotted name is a module, or an attribute of one."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("doc", USER_DOCS + [ROOT / "CONTRIBUTING.md"], ids=lambda d: d.name)
def test_every_dotted_name_imports(doc):
    for name in set(re.findall(r"`(mlxsci(?:\.\w+)+)", doc.read_text())):
        assert resolve(name), f"{doc.name} names {name}, which does not import"
