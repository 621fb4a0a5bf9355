"""Helpers shared instead of copied: safe names (mlxsci/storage/names.py) and the
candidate-fits-the-task check (mlxsci.evaluation.checks.misfit) that the evaluation, the
API and the search's --start use."""

import pytest

import mlxsci
from mlxsci.evaluation.checks import misfit
from mlxsci.kernel.candidate import CandidateError, parse
from mlxsci.search import options
from mlxsci.search.proposers.registry import make_proposer
from mlxsci.storage.names import safe_name
from mlxsci.sweep.runs import run_name
from mlxsci.task import load_task

TYPO = "//! kernel saxpy_typo\nuint i = 0;\n"


@pytest.mark.parametrize(
    "name,fallback,expected",
    [
        ("openai/gpt-4o mini", "model", "openai-gpt-4o-mini"),
        ("Apple M2 Pro", "device", "Apple-M2-Pro"),
        ("claude-sonnet-4.5_x", "model", "claude-sonnet-4.5_x"),  # nothing to change
        ("//??", "model", "model"),  # nothing left
        ("", "device", "device"),
    ],
)
def test_safe_name(name, fallback, expected):
    assert safe_name(name, fallback) == expected


def test_the_users_of_safe_name():
    assert run_name("saxpy", "openai/gpt-4o", 2) == "saxpy_openai-gpt-4o_r2"
    assert options.default_run_dir("saxpy", "a b").name.startswith("saxpy_a-b_")
    assert make_proposer("openai/gpt-4o", base_url="http://127.0.0.1:9").name == "openai-gpt-4o"


def test_misfit_names_each_failure_with_its_line():
    task = load_task("saxpy")
    assert misfit(parse(task.seed("metal"), dialect="metal"), task, "x:") is None
    why = misfit(parse(TYPO, dialect="metal", filename="c.metal"), task, "c.metal:")
    assert "kernel 'saxpy'" in why and "c.metal:1: kernel 'saxpy_typo'" in why
    assert "line 1: kernel 'saxpy_typo'" in misfit(parse(TYPO, dialect="metal"), task, "line ")


def test_evaluation_api_and_start_file_give_the_same_reason(tmp_path):
    task = load_task("saxpy")
    why = misfit(parse(TYPO, dialect="metal", filename="c.metal"), task, "c.metal:")
    ev = mlxsci.evaluate("saxpy", TYPO, backend="sim", filename="c.metal")
    assert not ev.compile_ok and ev.fail_reason == f"format error: {why}"
    with pytest.raises(CandidateError) as err:
        mlxsci.kernel_function("saxpy", TYPO, backend="sim")
    assert "kernel 'saxpy_typo'" in str(err.value)
    start = tmp_path / "start.metal"
    start.write_text(TYPO)
    with pytest.raises(ValueError, match="does not fit saxpy .*line 1: kernel 'saxpy_typo'"):
        options.read_start(start, "metal", task)
