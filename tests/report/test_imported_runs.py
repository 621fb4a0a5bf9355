"""The report on imported Metal-Sci runs and their re-score.

An imported run (python -m mlxsci.import_metal_sci) holds figures another
harness recorded on another chip: the report shows them in `recorded`
columns labelled with the chip, never in mlxsci's own columns, and leaves
them out of the transfer table and the plots. rescore.json beside the runs
(what --rescore writes) gives the re-score section: counts, the recorded x
mlxsci verdict matrix, the disagreements and each run's recorded best.

The imported runs here are written by hand as mlxsci/import_metal_sci/
records.py lays them out, then sealed with a manifest as the importer seals
them; the native runs are copies of the committed sample runs
(bench/results/runs), sealed the same way.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlxsci.import_metal_sci import records
from mlxsci.report import build as report
from mlxsci.report.build import details_table, load_runs, main_table, render, write_plots
from mlxsci.report.rescore_section import load_rescore, rescore_tables
from mlxsci.search import manifest as run_manifest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RUNS = ROOT / "bench" / "results" / "runs"
CHIP = "Apple M1 Pro"
LABEL = "Apple M1 Pro (Metal-Sci)"
OPUS = "claude-opus-4-7"
C, I, CE, RE = records.CORRECT, records.INCORRECT, records.COMPILE_ERROR, records.RUNTIME_ERROR
# mlxsci's columns of a main-table cell (single runs)
MLXSCI_CELL = ("speedup", "improved", "held-out phi", "held-out ratio", "outcome")


def history(verdicts: list[str | None], best: int) -> list[dict]:
    """A recorded history: the seed and one record per candidate's verdict."""
    out = []
    for it, v in enumerate(verdicts):
        out.append(
            {
                "iteration": it,
                "role": "seed" if it == 0 else "candidate",
                "compile_ok": v != CE,
                "correct": v == C,
                "score": 0.61 + 0.05 * it if v == C else None,
                "fail_reason": None if v == C else f"{v} at size 1",
                "source_path": "00_seed.metal" if it == 0 else f"{it:02d}_candidate.metal",
                "is_new_best": it in (0, best),
                "recorded": True,
            }
        )
    return out


def imported_run(
    base: Path,
    name: str,
    task: str = "heat2d",
    model: str = OPUS,
    *,
    chip: str = CHIP,
    seed_score: float = 0.61,
    best_score: float = 0.74,
    improvement: float | None = 1.21,
    verdicts: tuple = (C, C, C, CE),
    best: int = 2,
    source: str | None = None,
) -> Path:
    """An imported run directory as records.py lays it out, sealed."""
    run = base / name
    run.mkdir(parents=True)
    source = source or f"/data/results/{name}"
    n = len(verdicts) - 1
    (run / "run.json").write_text(
        json.dumps(
            {
                "task": task,
                "model": model,
                "imported": True,
                "source_format": records.SOURCE_FORMAT,
                "source": source,
                "chip": chip,
            }
        )
    )
    iterations: list[dict] = []
    for it, v in enumerate(verdicts):
        (run / f"{it:02d}_original.metal").write_text(f"// recorded source {it}\n")
        converted = v != CE
        cand = "00_seed.metal" if it == 0 else f"{it:02d}_candidate.metal"
        if converted:
            (run / cand).write_text(f"// converted {it}\n")
        iterations.append(
            {
                "iteration": it,
                "role": "seed" if it == 0 else "candidate",
                "original": f"{it:02d}_original.metal",
                "candidate": cand if converted else None,
                "reason": None if converted else "not converted: simdgroup_matrix",
                "notes": [],
                "recorded": {
                    "verdict": v,
                    "score": 0.6 if v == C else None,
                    "fail_reason": None,
                    "is_new_best": it == best,
                    "sizes": [],
                },
            }
        )
    (run / records.IMPORT_FILE).write_text(
        json.dumps(
            {
                "version": records.IMPORT_VERSION,
                "source_format": records.SOURCE_FORMAT,
                "source": source,
                "task": task,
                "model": model,
                "chip": chip,
                "recorded_best_iteration": best,
                "iterations": iterations,
            }
        )
    )
    not_converted = sum(1 for v in verdicts if v == CE)
    summary = {
        "task": task,
        "model": model,
        "iterations": n,
        "imported": {
            "format": records.SOURCE_FORMAT,
            "source": source,
            "chip": chip,
            "candidates": len(verdicts),
            "converted": len(verdicts) - not_converted,
            "not_converted": not_converted,
        },
        "recorded": {
            "chip": chip,
            "seed_score": seed_score,
            "best_score": best_score,
            "improvement": improvement,
            "best_iteration": best,
        },
        "seed_score": None,
        "best_score": None,
        "best_iteration": None,
        "history": history(list(verdicts), best),
    }
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    run_manifest.write(run)
    return run


def native_run(base: Path, name: str, task: str = "heat2d", model: str = OPUS) -> Path:
    """A copy of the committed sample run of `task` under `model`, sealed."""
    run = base / name
    shutil.copytree(SAMPLE_RUNS / f"{task}_autotune", run)
    for file in ("summary.json", "run.json"):
        data = json.loads((run / file).read_text())
        (run / file).write_text(json.dumps(dict(data, model=model), indent=2))
    run_manifest.write(run)
    return run


def rec(run: str, iteration: int, recorded, mlxsci, **kw) -> dict:
    """One rescore.json record (records.py): sim, smoke, unless given."""
    out = {
        "run": run,
        "iteration": iteration,
        "recorded": recorded,
        "mlxsci": mlxsci,
        "reason": kw.pop("reason", "same verdict" if recorded == mlxsci else f"{mlxsci} here"),
        "recorded_score": 0.6 if recorded == C else None,
        "mlxsci_score": 0.3 if mlxsci == C else None,
        "backend": "sim",
        "sizes": "smoke",
        "recorded_best": False,
        "held_out": None,
        "transfer": None,
    }
    out.update(kw)
    return records.sign_record(out)  # as the re-score signs every record it makes


BEST_HELD_OUT = {
    "label": "NX=67,NY=45,n_steps=4",
    "mode": "secret",
    "mlxsci": C,
    "phi": 0.21,
    "reason": None,
}
BEST_TRANSFER = {"grade": "transfers", "reason": "Phi rose at the held-out"}


def rescore_records(a: str, b: str) -> list[dict]:
    """Run a (seed + 3 candidates) and b (seed + 2): 4 agree, 2 disagree, 1
    not evaluated; each run's best is iteration 2."""
    return [
        rec(a, 0, C, C),
        rec(a, 1, C, I, reason="max abs error 3.1e-2 over tolerance 1e-4 at 64x64"),
        rec(
            a,
            2,
            C,
            C,
            recorded_score=0.74,
            mlxsci_score=0.33,
            recorded_best=True,
            held_out=BEST_HELD_OUT,
            transfer=BEST_TRANSFER,
        ),
        rec(a, 3, CE, None, reason="not converted: simdgroup_matrix"),
        rec(b, 0, C, C),
        rec(b, 1, I, I),
        rec(
            b,
            2,
            C,
            RE,
            reason="runtime error: threadgroup memory 40000 > 32768",
            recorded_best=True,
        ),
    ]


@pytest.fixture
def out(tmp_path):
    """An import folder: two imported runs (heat2d opus, saxpy gpt), a native
    heat2d opus run in the same cell as the imported one, a native saxpy
    autotune run, and rescore.json."""
    folder = tmp_path / "imported"
    imported_run(folder, "heat2d_claude-opus-4-7_20260501_101010")
    imported_run(
        folder,
        "saxpy_gpt-5.5_20260502_090000",
        task="saxpy",
        model="gpt-5.5",
        seed_score=0.5,
        best_score=0.55,
        improvement=None,  # computed from the recorded scores: 1.10x
        verdicts=(C, I, C),
    )
    native_run(folder, "heat2d_native_opus")
    native_run(folder, "saxpy_autotune", task="saxpy", model="autotune")
    (folder / records.RESCORE_FILE).write_text(
        json.dumps(
            rescore_records(
                "heat2d_claude-opus-4-7_20260501_101010", "saxpy_gpt-5.5_20260502_090000"
            )
        )
    )
    return folder


def invoke(*args: str):
    result = CliRunner().invoke(report.main, [str(a) for a in args])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "Traceback" not in result.output + result.stderr
    return result


def by_task(rows: list[dict]) -> dict:
    return {r["task"]: r for r in rows}


# -- imported runs in the tables -------------------------------------------------


def test_main_table_shows_recorded_figures_labelled_and_keeps_mlxsci_columns_native(out):
    runs = load_runs([out])
    assert len(runs) == 4
    rows = by_task(main_table(runs))
    heat, saxpy = rows["heat2d"], rows["saxpy"]
    # the heat2d opus cell: mlxsci's columns are the native run's, the recorded ones the import's
    native = json.loads((out / "heat2d_native_opus" / "summary.json").read_text())
    assert heat[f"{OPUS} speedup"] == pytest.approx(native["best_score"] / native["seed_score"])
    assert heat[f"{OPUS} outcome"] == report.outcome_label(native)
    assert heat[f"{OPUS} held-out phi"] == native["held_out_best"]
    assert heat[f"{OPUS} recorded speedup"] == pytest.approx(1.21)
    assert heat[f"{OPUS} recorded on"] == LABEL
    # a cell with only an imported run: mlxsci's columns are empty
    for col in MLXSCI_CELL:
        assert saxpy[f"gpt-5.5 {col}"] is None, col
    assert saxpy["gpt-5.5 recorded speedup"] == pytest.approx(0.55 / 0.5)
    assert saxpy["gpt-5.5 recorded on"] == LABEL
    # the native autotune run keeps its figures and has no recorded ones
    assert saxpy["autotune speedup"] is not None and saxpy["autotune outcome"] is not None
    assert not any(k.startswith("autotune recorded") for k in saxpy)


def test_every_format_labels_the_recorded_figures(out, tmp_path):
    md = invoke(out).stdout
    header = md.splitlines()[0]
    assert f"{OPUS} recorded speedup" in header and f"{OPUS} recorded on" in header
    assert LABEL in md and "1.21x" in md and "1.10x" in md
    assert "not measured by mlxsci" in md  # the note under the table
    saxpy_line = next(line for line in md.splitlines() if line.startswith("| saxpy"))
    cells = [c.strip() for c in saxpy_line.strip("|").split("|")]
    heads = [c.strip() for c in header.strip("|").split("|")]
    shown = dict(zip(heads, cells))
    assert shown["gpt-5.5 speedup"] == "-" and shown["gpt-5.5 outcome"] == "-"
    assert shown["gpt-5.5 recorded speedup"] == "1.10x"
    tex = invoke(out, "--format", "latex").stdout
    assert LABEL in tex and r"1.21$\times$" in tex and "recorded on" in tex
    doc = json.loads(invoke(out, "--format", "json").stdout)
    saxpy = by_task(doc["main"])["saxpy"]
    assert saxpy["gpt-5.5 speedup"] is None and saxpy["gpt-5.5 recorded on"] == LABEL
    target = tmp_path / "csv" / "table.csv"
    invoke(out, "--format", "csv", "--out", target)
    parsed = by_task(list(csv.DictReader(target.open())))
    assert parsed["saxpy"]["gpt-5.5 speedup"] == ""
    assert float(parsed["heat2d"][f"{OPUS} recorded speedup"]) == pytest.approx(1.21)
    assert parsed["heat2d"][f"{OPUS} recorded on"] == LABEL


def test_details_table_empties_mlxsci_columns_of_an_imported_run(out):
    rows = {row["run"]: row for row in details_table(load_runs([out]))}
    imp = rows["heat2d_claude-opus-4-7_20260501_101010"]
    for col in ("seed S", "best S", "S band", "compile failures", "search outcome", "wall s"):
        assert imp[col] is None, col
    assert imp["recorded on"] == LABEL
    assert (imp["recorded seed S"], imp["recorded best S"]) == (0.61, 0.74)
    assert imp["recorded speedup"] == pytest.approx(1.21)
    assert imp["recorded best iteration"] == 2 and imp["recorded compile failures"] == 1
    assert imp["converted"] == "3/4"
    assert imp["integrity"] == run_manifest.SEALED
    assert imp["held-out verified"] is None and imp["transfer grade"] is None
    nat = rows["heat2d_native_opus"]
    assert nat["seed S"] is not None and nat["S band"] is not None
    assert nat["recorded on"] is None and nat["recorded speedup"] is None
    doc = json.loads(invoke(out, "--format", "json", "--details").stdout)
    assert {d["run"]: d for d in doc["details"]}["saxpy_gpt-5.5_20260502_090000"][
        "recorded on"
    ] == LABEL


def test_only_imported_runs(tmp_path):
    imported_run(tmp_path, "heat2d_claude-opus-4-7_20260501_101010")
    runs = load_runs([tmp_path])
    (row,) = main_table(runs)
    assert all(row[f"{OPUS} {col}"] is None for col in MLXSCI_CELL)
    assert row[f"{OPUS} recorded on"] == LABEL
    for fmt in ("md", "latex", "json"):
        assert LABEL in invoke(tmp_path, "--format", fmt, "--details").stdout, fmt
    assert LABEL in invoke(tmp_path, "--format", "csv").stdout
    result = invoke(tmp_path, "--plots", tmp_path / "plots")
    assert "no plots: every run is imported" in result.stderr
    assert not any((tmp_path / "plots").glob("*.png"))


def test_imported_runs_are_not_checked_for_a_held_out_draw(out):
    result = invoke(out, "--details")
    assert "UNVERIFIED" not in result.stderr and "TAMPERED" not in result.stderr
    assert "unverified" not in result.stdout.splitlines()[0]


def test_plots_leave_imported_runs_out(out, tmp_path, capsys):
    runs = load_runs([out / "heat2d_claude-opus-4-7_20260501_101010"])
    capsys.readouterr()
    assert write_plots(runs, tmp_path / "plots") == []
    err = capsys.readouterr().err
    assert "1 imported run(s) left out of the plots" in err and LABEL in err


def test_two_imports_of_a_cell_give_a_median_and_spread(tmp_path):
    imported_run(tmp_path, "heat2d_a", improvement=1.2)
    imported_run(tmp_path, "heat2d_b", improvement=1.4)
    (row,) = main_table(load_runs([tmp_path]))
    assert row[f"{OPUS} recorded runs"] == 2
    assert row[f"{OPUS} recorded speedup"] == pytest.approx(1.3)
    assert (row[f"{OPUS} recorded speedup lo"], row[f"{OPUS} recorded speedup hi"]) == (1.2, 1.4)
    md = render(main_table(load_runs([tmp_path])), "md")
    assert "1.30x [1.20x, 1.40x]" in md


def test_hostile_recorded_block_gives_empty_figures(tmp_path):
    run = imported_run(tmp_path, "heat2d_x")
    summary = json.loads((run / "summary.json").read_text())
    summary["recorded"] = {
        "chip": ["x"],
        "seed_score": "0.6",
        "best_score": True,
        "improvement": None,
    }
    summary["imported"] = {"format": 3, "chip": None, "candidates": "4"}
    summary["history"] = [None, {"iteration": "1"}, 7]
    (run / "summary.json").write_text(json.dumps(summary))
    run_manifest.write(run)
    runs = load_runs([tmp_path])
    (row,) = main_table(runs)
    assert row[f"{OPUS} recorded speedup"] is None
    assert row[f"{OPUS} recorded on"] == LABEL  # run.json names the chip and the format
    (details,) = details_table(runs)
    assert details["recorded seed S"] is None and details["converted"] is None
    assert details["recorded compile failures"] == 0
    for fmt in ("md", "latex", "csv", "json"):
        assert render(main_table(runs), fmt)
        assert render(details_table(runs), fmt)


def test_an_imported_run_edited_after_import_is_tampered(out):
    run = out / "heat2d_claude-opus-4-7_20260501_101010"
    summary = json.loads((run / "summary.json").read_text())
    summary["recorded"]["improvement"] = 9.99
    (run / "summary.json").write_text(json.dumps(summary))
    result = invoke(out, "--format", "json", "--details")
    assert f"TAMPERED run {run}" in result.stderr and "summary.json changed" in result.stderr
    doc = json.loads(result.stdout)
    heat = by_task(doc["main"])["heat2d"]
    assert heat[f"{OPUS} tampered"] == 1
    assert heat[f"{OPUS} recorded speedup"] is None  # left out of the cells
    assert heat[f"{OPUS} speedup"] is not None  # the native run beside it still counts
    rows = {d["run"]: d for d in doc["details"]}
    assert rows[run.name]["integrity"] == run_manifest.TAMPERED
    # its re-score records are left out too, the other run's kept
    assert {b["run"] for b in doc["rescore"]["best"]} == {"saxpy_gpt-5.5_20260502_090000"}
    kept = json.loads(invoke(out, "--format", "json", "--include-tampered").stdout)
    assert by_task(kept["main"])["heat2d"][f"{OPUS} recorded speedup"] == pytest.approx(9.99)
    assert len(kept["rescore"]["best"]) == 2


def test_transfer_table_leaves_imported_runs_out(out):
    from mlxsci.report.build import transfer_table

    rows = transfer_table(load_runs([out]))
    assert {r["model"] for r in rows} <= {OPUS, "autotune"}
    assert sum(r["runs"] for r in rows if r["task"] != "all tasks") == 2


# -- the re-score section ---------------------------------------------------------------


def test_rescore_counts_matrix_disagreements_and_best(out):
    tables = rescore_tables(load_rescore(load_runs([out]), [out]))
    assert tables is not None
    (counts,) = tables["counts"]
    assert counts["recorded on"] == LABEL and (counts["backend"], counts["sizes"]) == (
        "sim",
        "smoke",
    )
    assert (counts["records"], counts["agree"], counts["disagree"]) == (7, 4, 2)
    assert (counts["not evaluated"], counts["not recorded"]) == (1, 0)
    matrix = {r["recorded"]: r for r in tables["matrix"]}
    assert list(matrix) == list(records.VERDICTS)
    assert matrix[C]["mlxsci correct"] == 3 and matrix[C]["mlxsci incorrect"] == 1
    assert matrix[C]["mlxsci runtime_error"] == 1 and matrix[C]["total"] == 5
    assert matrix[I]["mlxsci incorrect"] == 1
    assert matrix[CE]["mlxsci not evaluated"] == 1 and matrix[RE]["total"] == 0
    assert [
        (d["run"], d["iteration"], d["recorded"], d["mlxsci"]) for d in tables["disagreements"]
    ] == [
        ("heat2d_claude-opus-4-7_20260501_101010", 1, C, I),
        ("saxpy_gpt-5.5_20260502_090000", 2, C, RE),
    ]
    assert tables["disagreements"][0]["reason"].startswith("max abs error 3.1e-2")
    best = {b["run"]: b for b in tables["best"]}
    heat = best["heat2d_claude-opus-4-7_20260501_101010"]
    assert (heat["task"], heat["model"], heat["iteration"]) == ("heat2d", OPUS, 2)
    assert (heat["recorded on"], heat["recorded"], heat["recorded S"]) == (LABEL, C, 0.74)
    assert (heat["mlxsci"], heat["mlxsci S"], heat["sizes"]) == (C, 0.33, "smoke")
    assert (heat["held-out"], heat["held-out mlxsci"], heat["held-out phi"]) == (
        BEST_HELD_OUT["label"],
        C,
        0.21,
    )
    assert heat["transfer grade"] == "transfers"
    sax = best["saxpy_gpt-5.5_20260502_090000"]
    assert (sax["recorded"], sax["mlxsci"], sax["held-out"], sax["transfer grade"]) == (
        C,
        RE,
        None,
        None,
    )


def _md_row(text: str, *first: str) -> list[str]:
    """The cells of the Markdown table row whose first cells are `first`."""
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ")
    ]
    return next(r for r in rows if r[: len(first)] == list(first))


def test_rescore_section_in_markdown_and_latex(out):
    md = invoke(out).stdout
    assert "**Re-score of imported candidates" in md
    assert "Recorded verdict (rows) x mlxsci verdict (columns)" in md
    assert _md_row(md, LABEL, "sim", "smoke", "7") == [
        LABEL,
        "sim",
        "smoke",
        "7",
        "4",
        "2",
        "0",
        "1",
        "0",
    ]
    disagreement = _md_row(md, "heat2d_claude-opus-4-7_20260501_101010", "1")
    assert disagreement[:4] == ["heat2d_claude-opus-4-7_20260501_101010", "1", C, I]
    assert "max abs error 3.1e-2" in disagreement[4]
    best = _md_row(md, "heat2d_claude-opus-4-7_20260501_101010", "heat2d")
    assert best[:11] == [
        "heat2d_claude-opus-4-7_20260501_101010",
        "heat2d",
        OPUS,
        "2",
        LABEL,
        C,
        "0.740",
        "sim",
        "smoke",
        C,
        "0.330",
    ]
    assert best[11:] == [BEST_HELD_OUT["label"], "secret", C, "0.210", "transfers"]
    tex = invoke(out, "--format", "latex").stdout
    assert r"\textbf{Re-score of imported candidates" in tex
    assert r"heat2d\_claude-opus-4-7\_20260501\_101010 & 1 & correct & incorrect" in tex
    assert r"compile\_error" in tex and tex.count(r"\begin{tabular}") == 7
    unevaluated = _md_row(md, "heat2d_claude-opus-4-7_20260501_101010", "3")
    assert unevaluated[:4] == [
        "heat2d_claude-opus-4-7_20260501_101010",
        "3",
        CE,
        "not converted: simdgroup_matrix",
    ]


def test_rescore_section_in_json_and_csv(out, tmp_path):
    doc = json.loads(invoke(out, "--format", "json").stdout)
    assert set(doc) == {"main", "rescore"}
    assert set(doc["rescore"]) == {
        "counts",
        "agreement",
        "metal_sci",
        "matrix",
        "disagreements",
        "not_evaluated",
        "best",
    }
    # pass/fail agreement per task and over all; each disagreement with a cause
    agreement = {r["task"]: r for r in doc["rescore"]["agreement"]}
    assert set(agreement) == {"heat2d", "saxpy", "all tasks"}
    total = agreement["all tasks"]
    assert (total["judged by both"], total["compared"], total["agree"]) == (6, 6, 4)
    assert total["agreement"] == pytest.approx(4 / 6)
    causes = [d["cause"] for d in doc["rescore"]["disagreements"]]
    assert all(c.startswith("fails mlxsci's checks, at mlxsci's smoke sizes") for c in causes)
    assert [r["iteration"] for r in doc["rescore"]["not_evaluated"]] == [3]
    assert doc["rescore"]["counts"][0]["disagree"] == 2
    assert len(doc["rescore"]["disagreements"]) == 2
    target = tmp_path / "t" / "table.csv"
    result = invoke(out, "--format", "csv", "--out", target)
    files = {p.name: list(csv.DictReader(p.open())) for p in target.parent.iterdir()}
    assert set(files) == {
        "table.csv",
        "table_rescore.csv",
        "table_rescore_agreement.csv",
        "table_rescore_metal_sci.csv",
        "table_rescore_matrix.csv",
        "table_rescore_disagreements.csv",
        "table_rescore_not_evaluated.csv",
        "table_rescore_best.csv",
    }
    assert files["table_rescore.csv"][0]["agree"] == "4"
    assert [r["mlxsci"] for r in files["table_rescore_disagreements.csv"]] == [I, RE]
    assert {r["recorded on"] for r in files["table_rescore_best.csv"]} == {LABEL}
    assert "wrote" in result.stderr
    stdout = invoke(out, "--format", "csv")
    assert "re-score tables are not printed" in stdout.stderr
    assert list(csv.DictReader(io.StringIO(stdout.stdout)))[0]["task"] == "heat2d"


def test_rescore_found_beside_a_single_run_dir_keeps_only_its_records(out):
    doc = json.loads(invoke(out / "saxpy_gpt-5.5_20260502_090000", "--format", "json").stdout)
    assert doc["rescore"]["counts"][0]["records"] == 3
    assert [b["run"] for b in doc["rescore"]["best"]] == ["saxpy_gpt-5.5_20260502_090000"]


def test_no_rescore_json_no_section(tmp_path):
    imported_run(tmp_path, "heat2d_x")
    assert isinstance(json.loads(invoke(tmp_path, "--format", "json").stdout), list)
    assert "Re-score" not in invoke(tmp_path).stdout


def test_no_disagreements_is_one_line(tmp_path):
    imported_run(tmp_path, "heat2d_x")
    (tmp_path / records.RESCORE_FILE).write_text(json.dumps([rec("heat2d_x", 0, C, C)]))
    md = invoke(tmp_path).stdout
    assert "No disagreements." in md and "No run's recorded best is among" in md
    target = tmp_path / "o" / "t.csv"
    invoke(tmp_path, "--format", "csv", "--out", target)
    assert (target.parent / "t_rescore_disagreements.csv").read_text().startswith("run,iteration")


GOOD = rec("heat2d_x", 0, C, C)
MALFORMED_FILES = {
    "not json": b"{not json",
    "not utf-8": b"\xff\xfe[",
    "an object": json.dumps({"records": [GOOD]}).encode(),
    "a number": b"3",
}
BAD_RECORDS = {
    "not an object": "nope",
    "missing keys": {"run": "heat2d_x", "iteration": 1},
    "iteration a string": {**GOOD, "iteration": "1"},
    "iteration a bool": {**GOOD, "iteration": True},
    "verdict outside the vocabulary": {**GOOD, "mlxsci": "great"},
    "recorded verdict a number": {**GOOD, "recorded": 1},
    "score a string": {**GOOD, "mlxsci_score": "0.3"},
    "held_out a list": {**GOOD, "held_out": [1]},
    "held_out bad verdict": {**GOOD, "held_out": {**BEST_HELD_OUT, "mlxsci": "fine"}},
    "held_out phi a string": {**GOOD, "held_out": {**BEST_HELD_OUT, "phi": "0.2"}},
    "transfer grade a number": {**GOOD, "transfer": {"grade": 3, "reason": "x"}},
    "recorded_best a string": {**GOOD, "recorded_best": "yes"},
    "run a path": {**GOOD, "run": "../heat2d_x"},
    "run not here": {**GOOD, "run": "no_such_run"},
    "backend a list": {**GOOD, "backend": ["sim"]},
}


@pytest.mark.parametrize("name", list(MALFORMED_FILES))
def test_a_malformed_rescore_file_is_one_warning(tmp_path, name):
    imported_run(tmp_path, "heat2d_x")
    (tmp_path / records.RESCORE_FILE).write_bytes(MALFORMED_FILES[name])
    for fmt in ("md", "json"):
        result = invoke(tmp_path, "--format", fmt)
        lines = [line for line in result.stderr.splitlines() if "rescore.json" in line]
        assert len(lines) == 1, result.stderr
        assert "Re-score" not in result.stdout and '"rescore"' not in result.stdout


@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_bad_records_are_skipped_with_one_warning(tmp_path, name):
    imported_run(tmp_path, "heat2d_x")
    bad = BAD_RECORDS[name]
    data = [GOOD, bad, bad, rec("heat2d_x", 1, C, I)]
    (tmp_path / records.RESCORE_FILE).write_text(json.dumps(data))
    result = invoke(tmp_path, "--format", "json")
    lines = [line for line in result.stderr.splitlines() if "rescore.json" in line]
    assert len(lines) == 1 and "skipped 2 of 4 re-score record(s)" in lines[0], result.stderr
    counts = json.loads(result.stdout)["rescore"]["counts"][0]
    assert (counts["records"], counts["agree"], counts["disagree"]) == (2, 1, 1)


def test_rescore_json_a_folder_is_one_warning(tmp_path):
    imported_run(tmp_path, "heat2d_x")
    (tmp_path / records.RESCORE_FILE).mkdir()
    result = invoke(tmp_path)
    assert len([x for x in result.stderr.splitlines() if "rescore.json" in x]) == 1


def test_every_record_bad_gives_no_section(tmp_path):
    imported_run(tmp_path, "heat2d_x")
    (tmp_path / records.RESCORE_FILE).write_text(json.dumps([{"run": 1}] * 5))
    result = invoke(tmp_path, "--format", "latex", "--details")
    assert "skipped 5 of 5" in result.stderr and "Re-score" not in result.stdout


def test_not_recorded_row_appears_only_when_needed(tmp_path):
    imported_run(tmp_path, "heat2d_x")
    data = [GOOD, rec("heat2d_x", 1, None, C)]
    (tmp_path / records.RESCORE_FILE).write_text(json.dumps(data))
    tables = rescore_tables(load_rescore(load_runs([tmp_path])))
    assert tables is not None
    assert [r["recorded"] for r in tables["matrix"]][-1] == "not recorded"
    assert tables["counts"][0]["not recorded"] == 1


@pytest.mark.slow
def test_plots_of_native_and_imported_runs_draw_the_native_ones(out, tmp_path, capsys):
    runs = load_runs([out])
    capsys.readouterr()
    paths = write_plots(runs, tmp_path / "plots")
    assert len(paths) == 8 and all(p.stat().st_size > 1000 for p in paths)
    assert "2 imported run(s) left out of the plots" in capsys.readouterr().err


def test_nan_scores_show_as_no_number(tmp_path):
    """Python's json writes a nan phi as NaN, which it reads back: no number, not a bad record."""
    imported_run(tmp_path, "heat2d_x")
    held = {**BEST_HELD_OUT, "phi": float("nan")}
    data = [rec("heat2d_x", 2, C, C, mlxsci_score=float("inf"), recorded_best=True, held_out=held)]
    (tmp_path / records.RESCORE_FILE).write_text(json.dumps(data))
    result = invoke(tmp_path, "--format", "json")
    assert "rescore.json" not in result.stderr
    (best,) = json.loads(result.stdout)["rescore"]["best"]
    assert best["held-out phi"] is None and best["mlxsci S"] is None


def test_records_mlxsci_did_not_sign_are_left_out(tmp_path):
    """A rescore.json that came with a download, or was edited: verdicts
    mlxsci never gave are not shown as mlxsci's."""
    imported_run(tmp_path, "heat2d_x")
    made = rec("heat2d_x", 0, C, I)
    edited = {**rec("heat2d_x", 1, C, I), "mlxsci": C}  # an incorrect verdict turned correct
    unsigned = {k: v for k, v in rec("heat2d_x", 2, C, C).items() if k != "signature"}
    elsewhere = {**rec("heat2d_x", 3, C, CE), "signature": {"key_id": "0" * 16, "mac": "00"}}
    path = tmp_path / records.RESCORE_FILE
    path.write_text(json.dumps([made, edited, unsigned, elsewhere]))
    result = invoke(tmp_path, "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["rescore"]["counts"][0]["records"] == 2  # the one made here, the one made elsewhere
    assert [r["iteration"] for r in doc["rescore"]["disagreements"]] == [0, 3]
    assert "left out 2 re-score record(s) with no signature" in result.stderr
    assert "1 re-score record(s) were signed by another machine's key" in result.stderr


def test_a_recorded_integer_past_a_float_is_no_figure(tmp_path):
    """json reads 4000 digits as an int, on which math.isfinite raises
    OverflowError: the report took it for a number and crashed."""
    run = imported_run(tmp_path, "heat2d_x")
    summary = json.loads((run / "summary.json").read_text())
    summary["recorded"]["seed_score"] = 10**4000
    (run / "summary.json").write_text(json.dumps(summary))
    run_manifest.write(run)
    runs = load_runs([tmp_path])
    (details,) = details_table(runs)
    assert details["recorded seed S"] is None
    (row,) = main_table(runs)
    assert row[f"{OPUS} recorded speedup"] is not None  # the recorded improvement stands
