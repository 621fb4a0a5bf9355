"""Every ```python block of docs/mlx-kernels-anywhere.md runs, in order and in
one namespace (later blocks use names from earlier ones), so the guide stays
true to the code."""

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "mlx-kernels-anywhere.md"


def test_the_guides_examples_run(capsys):
    blocks = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), re.S | re.M)
    assert len(blocks) >= 5
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), namespace)  # noqa: S102 - our own guide
    printed = capsys.readouterr().out
    assert "out-of-bounds read of input 'x' at element 8" in printed
