"""The README's "Use it from Python" section stays runnable: every ```python
block of it runs, in order and in one namespace (later blocks may use names
from earlier ones), in a temporary directory holding a copy of examples/."""

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Use it from Python"


def python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
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
def test_readme_python_examples_run(tmp_path, monkeypatch, capsys):
    shutil.copytree(
        ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for i, block in enumerate(python_blocks()):
        try:
            exec(compile(block, f"README.md (python block {i + 1})", "exec"), namespace)
        except Exception as exc:  # say which block, keep the traceback
            pytest.fail(f"README python block {i + 1} failed: {type(exc).__name__}: {exc}\n{block}")
    assert (tmp_path / "results" / "conv1d" / "summary.json").is_file()
    errors = re.findall(r"max error vs reference: (\S+)", capsys.readouterr().out)
    assert errors and float(errors[0]) <= 1e-4
