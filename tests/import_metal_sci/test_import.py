"""Importing Metal-Sci run directories (mlxsci.import_metal_sci): every
iteration kept with what became of it, the recorded figures kept apart from
mlxsci's, the imported run sealed, bad folders refused with one line, and a
published run read as hostile input (links not followed, sizes capped, JSON
checked)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from helpers import usage_error
from metal_sci_runs import (
    HEAT_RENAMED,
    HEAT_SEED,
    Iteration,
    heat2d_run,
    metal_sci_source,
    result,
    write_run,
)

from mlxsci.cli import main as cli_main
from mlxsci.import_metal_sci import metal_run
from mlxsci.import_metal_sci.__main__ import main
from mlxsci.search import manifest


def run_import(*args) -> CliRunner:
    out = CliRunner().invoke(main, [str(a) for a in args])
    assert out.exit_code == 0, (out.output, out.exception)
    assert "Traceback" not in out.output
    return out


def imported(out_dir, source_run):
    folder = out_dir / source_run.name
    doc = json.loads((folder / "import.json").read_text())
    return folder, doc, {e["iteration"]: e for e in doc["iterations"]}


def test_every_iteration_is_imported_with_what_became_of_it(tmp_path):
    src = heat2d_run(tmp_path / "results")
    out = tmp_path / "imported"
    run_import(src, "--out", out)
    folder, doc, by_it = imported(out, src)
    assert doc["task"] == "heat2d" and doc["model"] == "test-model"
    assert doc["chip"] == "Apple M1 Pro" and doc["recorded_best_iteration"] == 1
    assert sorted(by_it) == [0, 1, 2, 3, 4, 5]
    # the seed and the candidates: the original beside the converted candidate
    assert (folder / "00_original.metal").read_text() == HEAT_SEED
    assert by_it[0]["candidate"] == "00_seed.metal" and (folder / "00_seed.metal").exists()
    assert (folder / "01_original.metal").read_text() == HEAT_RENAMED
    assert by_it[1]["candidate"] == "01_candidate.metal"
    assert "//! kernel heat_step" in (folder / "01_candidate.metal").read_text()
    # a skipped iteration and a missing file are imported with their reasons
    assert by_it[2]["role"] == "skipped" and by_it[2]["candidate"] is None
    assert "skipped" in by_it[2]["reason"]
    assert by_it[5]["candidate"] is None and by_it[5]["original"] is None
    assert "05_candidate.metal is missing" in by_it[5]["reason"]
    # what the run recorded, kept as recorded
    assert by_it[3]["recorded"]["verdict"] == "incorrect"
    assert by_it[4]["recorded"]["verdict"] == "compile_error"
    assert by_it[1]["recorded"]["verdict"] == "correct" and by_it[1]["recorded"]["score"] == 0.7
    assert json.loads((folder / "03_recorded_result.json").read_text())["correct"] is False
    assert (folder / "01_prompt.md").read_text() == (src / "01_prompt.md").read_text()
    assert (folder / "01_response.md").read_text() == (src / "01_response.md").read_text()
    assert (folder / "recorded_history.json").read_text() == (src / "history.json").read_text()


def test_recorded_figures_never_stand_as_mlxsci_figures(tmp_path):
    src = heat2d_run(tmp_path / "results")
    run_import(src, "--out", tmp_path / "imported")
    folder = tmp_path / "imported" / src.name
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["seed_score"] is None and summary["best_score"] is None
    assert summary["recorded"]["seed_score"] == 0.5 and summary["recorded"]["best_score"] == 0.7
    assert summary["recorded"]["chip"] == "Apple M1 Pro"
    assert summary["imported"]["candidates"] == 4  # the seed and three candidates have sources
    assert all(h["recorded"] is True for h in summary["history"])
    assert json.loads((folder / "run.json").read_text())["imported"] is True
    assert manifest.check(folder).status == manifest.SEALED


def test_importing_again_finds_the_run_done_and_force_redoes_it(tmp_path):
    src = heat2d_run(tmp_path / "results")
    out = tmp_path / "imported"
    run_import(src, "--out", out)
    again = run_import(src, "--out", out)
    assert "already imported" in again.output
    assert sorted(p.name for p in out.iterdir()) == [src.name]
    forced = run_import(src, "--out", out, "--force")
    assert "imported to" in forced.output
    assert manifest.check(out / src.name).status == manifest.SEALED


def test_a_folder_of_runs_imports_each_and_passes_over_the_rest(tmp_path):
    results = tmp_path / "results"
    a = heat2d_run(results)
    b = write_run(results, "heat2d", HEAT_SEED, [], model="other", stamp="20260502_000000")
    (results / "_run_logs").mkdir()
    out = run_import(results, "--out", tmp_path / "imported")
    assert "_run_logs: not a Metal-Sci run, passed over" in out.output
    assert "[2/2]" in out.output
    assert {p.name for p in (tmp_path / "imported").iterdir()} == {a.name, b.name}


@pytest.mark.parametrize("kind", ["empty folder", "file", "unknown task"])
def test_what_is_not_a_metal_sci_run_gets_one_line(tmp_path, kind):
    target = tmp_path / "thing"
    if kind == "file":
        target.write_text("x")
        out = CliRunner().invoke(main, [str(target), "--out", str(tmp_path / "o")])
        assert out.exit_code == 2 and "Traceback" not in out.output
        return
    target.mkdir()
    needle = "is not a Metal-Sci run directory"
    if kind == "unknown task":
        (target / "summary.json").write_text(json.dumps({"task": "matmul", "model": "m"}))
        needle = "not one of the 12 Metal-Sci tasks"
    usage_error(main, [target, "--out", tmp_path / "o"], needle)


def test_the_verb_is_under_mlxsci_too(tmp_path):
    src = heat2d_run(tmp_path / "results")
    out = CliRunner().invoke(cli_main, ["import-metal-sci", str(src), "--out", str(tmp_path / "i")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "i" / src.name / "import.json").exists()


def test_nothing_to_do_is_a_usage_error(tmp_path):
    usage_error(main, ["--out", tmp_path / "o"], "give RUN_DIR")


def test_a_linked_file_is_not_followed(tmp_path):
    """A published run whose response links to a secret on the importing
    machine: the secret is read by nobody and lands in no imported file."""
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = SECRET-1234567890")
    src = heat2d_run(tmp_path / "results")
    (src / "01_response.md").unlink()
    os.symlink(secret, src / "01_response.md")
    os.symlink(secret, src / "03_candidate.metal.tmp")  # an unrelated link: ignored
    (src / "04_candidate.metal").unlink()
    os.symlink(secret, src / "04_candidate.metal")
    run_import(src, "--out", tmp_path / "imported")
    folder, doc, by_it = imported(tmp_path / "imported", src)
    for path in folder.rglob("*"):
        if path.is_file():
            assert b"SECRET-1234567890" not in path.read_bytes(), path
    assert "symbolic link" in by_it[4]["reason"]
    assert by_it[4]["candidate"] is None
    assert not (folder / "01_response.md").exists()


def test_oversized_and_malformed_files_are_recorded_not_raised(tmp_path, monkeypatch):
    src = heat2d_run(tmp_path / "results")
    (src / "history.json").write_text("{not json")
    (src / "03_result.json").write_text(json.dumps(["a", "list"]))
    monkeypatch.setattr(metal_run, "MAX_SOURCE_BYTES", len(HEAT_RENAMED) - 1)
    run_import(src, "--out", tmp_path / "imported")
    folder, doc, by_it = imported(tmp_path / "imported", src)
    assert any("history.json is not JSON" in p for p in doc["problems"])
    assert "over the" in by_it[1]["reason"]  # the renamed candidate is over the cap
    assert by_it[3]["recorded"]["verdict"] is None  # its result was not a result
    # summary.json's own history stood in for the broken history.json
    assert by_it[1]["recorded"]["is_new_best"] is True


def test_an_in_place_task_imports(tmp_path):
    seed = metal_sci_source("ising")
    src = write_run(tmp_path / "results", "ising", seed, [Iteration(seed, result(score=0.1))])
    run_import(src, "--out", tmp_path / "imported")
    folder, doc, by_it = imported(tmp_path / "imported", src)
    text = (folder / "01_candidate.metal").read_text()
    assert "spins_out" in text and "//! kernel ising_step" in text
