from pathlib import Path

from click.testing import CliRunner

from mlxsci.report.suite_table import END, START, TARGET, main, markdown_table, readme_block
from mlxsci.task import load_task, task_names


def test_the_task_table_is_in_sync_with_the_task_definitions():
    guide = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"
    assert TARGET == guide
    text = guide.read_text()
    start, end = text.index(START), text.index(END) + len(END)
    assert text[start:end] == readme_block(), (
        "docs/tasks.md's task table is stale: run python -m mlxsci.report.suite_table --write"
    )


def test_every_task_has_the_same_shape():
    for name in task_names():
        t = load_task(name)
        assert t.name == name and t.seed_path("metal").exists() and t.seed_path("cuda").exists()
        assert t.regime and t.check and t.tolerance and t.model
        assert len(t.sizes["in-dist"]) == 3 and len(t.sizes["held-out"]) == 1
        assert t.sizes["smoke"]
        assert t.bound in ("bandwidth", "compute")


def test_the_command_prints_the_table_and_refuses_unknown_options():
    out = CliRunner().invoke(main, [])
    assert out.exit_code == 0 and out.output == markdown_table() + "\n"
    bad = CliRunner().invoke(main, ["--wirte"])
    assert bad.exit_code == 2 and "No such option" in bad.output
