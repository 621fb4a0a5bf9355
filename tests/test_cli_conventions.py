"""Command-line conventions: the `mlxsci` command and `python -m mlxsci`, one
subcommand per verb, --version, -h everywhere, no runpy warning, CSV one table
per file, README examples that write only to ignored paths, S and Phi explained."""

import csv
import importlib
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlxsci import cli
from mlxsci.evaluation.results import S_AND_PHI, Evaluation, format_evaluation
from mlxsci.report import build as report

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RUNS = ROOT / "bench" / "results" / "runs"
VERB_MODULES = {
    "eval": "mlxsci.eval",
    "search": "mlxsci.search.__main__",
    "report": "mlxsci.report",
    "sweep": "mlxsci.sweep",
    "roofline": "mlxsci.roofline",
    "transfer": "mlxsci.transfer.__main__",
    "import-metal-sci": "mlxsci.import_metal_sci.__main__",
}


def python(*args, timeout=120):
    return subprocess.run(
        [sys.executable, *args], text=True, capture_output=True, timeout=timeout, cwd=ROOT
    )


def test_each_subcommand_is_the_verb_modules_own_command():
    assert list(cli.VERBS) == list(VERB_MODULES)
    ctx = cli.main.make_context("mlxsci", ["-h"], resilient_parsing=True)
    for name, module in VERB_MODULES.items():
        assert cli.main.get_command(ctx, name) is importlib.import_module(module).main
    assert cli.main.get_command(ctx, "nosuchverb") is None


def test_the_console_script_is_declared_and_installed():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"mlxsci": "mlxsci.cli:main"}
    from importlib.metadata import entry_points

    installed = [ep.value for ep in entry_points(group="console_scripts", name="mlxsci")]
    if not installed:
        pytest.skip("installed before the console script existed: pip install -e . again")
    assert installed == ["mlxsci.cli:main"]


def test_version_is_the_installed_packages():
    out = CliRunner().invoke(cli.main, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"mlxsci {version('mlxsci')}"


def test_python_dash_m_mlxsci_lists_the_verbs_without_warnings():
    proc = python("-m", "mlxsci", "-h")
    assert proc.returncode == 0, proc.stderr
    for name in VERB_MODULES:
        assert re.search(rf"^\s+{name}\s", proc.stdout, re.M), proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("name", list(VERB_MODULES))
def test_help_flags_on_every_command_both_ways(name, flag):
    through_group = CliRunner().invoke(cli.main, [name, flag])
    assert through_group.exit_code == 0, through_group.output
    assert through_group.output.startswith(f"Usage: mlxsci {name} ")
    direct = CliRunner().invoke(importlib.import_module(VERB_MODULES[name]).main, [flag])
    assert direct.exit_code == 0 and "Usage:" in direct.output, direct.output


def test_a_subcommand_takes_the_verbs_arguments():
    # the same usage error, word for word, both ways
    group = CliRunner().invoke(cli.main, ["eval", "nosuchtask"])
    direct = CliRunner().invoke(importlib.import_module("mlxsci.eval").main, ["nosuchtask"])
    assert group.exit_code == direct.exit_code == 2
    assert group.output.splitlines()[-1] == direct.output.splitlines()[-1]
    assert "neither a built-in task" in group.output


def test_importing_the_package_imports_no_verb_module():
    """runpy warns ("found in sys.modules ... prior to execution") when a module
    run with -m was already imported by its package: the package must not."""
    verbs = [
        "mlxsci.eval",
        "mlxsci.report",
        "mlxsci.sweep",
        "mlxsci.roofline",
        "mlxsci.cli",
        "mlxsci.__main__",
        "mlxsci.search.__main__",
    ]
    proc = python("-c", f"import sys, mlxsci; print([m for m in {verbs!r} if m in sys.modules])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_python_dash_m_roofline_prints_no_runtime_warning():
    proc = python("-W", "error::RuntimeWarning", "-m", "mlxsci.roofline", "-h")
    assert proc.returncode == 0, proc.stderr
    assert "RuntimeWarning" not in proc.stderr and "Usage:" in proc.stdout


# -- CSV: one table per file --------------------------------------------------------


def test_csv_with_details_to_stdout_is_refused():
    out = CliRunner().invoke(report.main, [str(SAMPLE_RUNS), "--details", "--format", "csv"])
    assert out.exit_code == 2
    assert "CSV holds one table per file" in out.output and "Traceback" not in out.output


def _one_csv_table(path: Path) -> list[dict]:
    """The rows of a CSV file that holds exactly one table (every line has the
    header's number of fields, no blank line)."""
    lines = path.read_text().splitlines()
    assert lines and all(line.strip() for line in lines), path.read_text()
    rows = list(csv.reader(lines))
    assert all(len(r) == len(rows[0]) for r in rows), path.read_text()
    return list(csv.DictReader(lines))


def test_csv_with_details_writes_two_files(tmp_path):
    target = tmp_path / "out" / "table.csv"
    out = CliRunner().invoke(
        report.main, [str(SAMPLE_RUNS), "--details", "--format", "csv", "--out", str(target)]
    )
    assert out.exit_code == 0, out.output
    main_rows = _one_csv_table(target)
    details = _one_csv_table(tmp_path / "out" / "table_details.csv")
    assert [r["task"] for r in main_rows] == ["heat2d", "saxpy"]
    assert len(details) == 2 and "iterations" in details[0]
    assert sorted(p.name for p in target.parent.iterdir()) == ["table.csv", "table_details.csv"]


def test_report_text_refuses_csv_with_details():
    runs = report.load_runs([SAMPLE_RUNS])
    with pytest.raises(ValueError, match="one table per file"):
        report.report_text(runs, "csv", details=True)


# -- the README writes only to ignored paths ----------------------------------------


DOCUMENTED = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _readme_commands() -> list[str]:
    text = "\n".join(doc.read_text() for doc in DOCUMENTED)
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    return [line.split("#")[0] for block in blocks for line in block.splitlines()]


def _written_paths() -> list[str]:
    """Every path a command or Python example of the README or docs/ writes:
    --out and --plots values, and `out=` in the Python examples."""
    paths = []
    for command in _readme_commands():
        paths += re.findall(r"--(?:out|plots)[ =](\S+)", command)
    for doc in DOCUMENTED:
        paths += re.findall(r"""\bout=["']([^"']+)["']""", doc.read_text())
    return paths


def test_readme_examples_write_only_to_ignored_paths():
    paths = _written_paths()
    assert "results/sweep" in paths and "results/conv1d" in paths, paths
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in paths + [".venv/bin/python", "results/saxpy_autotune_20260101_000000/run.json"]:
        proc = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert proc.returncode == 0, f"{path} (written by a documented example) is not ignored"
    # and the committed samples stay tracked: no example rewrites them
    proc = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", "bench/results/runs/index.json"], cwd=ROOT
    )
    assert proc.returncode == 1


# -- S and Phi in one line ---------------------------------------------------------


def test_eval_output_explains_s_and_phi():
    text = format_evaluation(
        Evaluation(task="saxpy", backend="sim", device="cpu", score=0.5, phi=0.4)
    )
    assert S_AND_PHI in text.splitlines()
    assert "S = geometric mean" in S_AND_PHI and "Phi = " in S_AND_PHI
