"""The report's transfer columns and table (issue 25): per run the transfer
grade, the held-out mode, whether the secret draw verifies and the strongest
evidence; per model and task the sequel's transfer table, in every format.

The runs are copies of the committed sample runs (bench/results/runs, real
autotune searches on the simulator) whose summary.json gains the `transfer`,
`held_out` and `held_out_verified` records a search now writes, then sealed
with a manifest as a finished search leaves them, so the report reads them as
genuine finished runs. Copies left without those records stand for runs
written before grading.
"""

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlxsci import held_out
from mlxsci.report import build as report
from mlxsci.report import tables
from mlxsci.report.build import details_table, load_runs, main_table, render, transfer_table
from mlxsci.report.runs import EVIDENCE_CHARS
from mlxsci.search import manifest as run_manifest
from mlxsci.search.outcomes import OUTCOMES
from mlxsci.task import load_task

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RUNS = ROOT / "bench" / "results" / "runs"
NONCE = "0123456789abcdef0123456789abcdef"
SECRET = "fedcba9876543210fedcba9876543210"
MISMATCH = "the revealed secret does not match the commitment made at the start"

# What each grade's strongest evidence says (the first item; a weaker one follows).
EVIDENCE = {
    "transfers": ("Phi rose 1.31x at the held-out, beyond its 5 % band", None),
    "A": ("branch on N == 1048576 beside a scalar fallback", "line 12"),
    "B": ("the else arm writes out of bounds; never run in-distribution", "line 30"),
    "C": ("the disclosed held-out N = 16777216 appears as a constant", "line 7"),
    "D": ("Phi fell 0.6x on the second input distribution (hot-spot)", None),
    "no-win": ("S did not improve beyond its band", None),
    "not-judged": ("held-out: the candidate was not judged: the time limit ran out", None),
}


def secret_record(task: str, *, secret: str = SECRET, committed_to: str = SECRET) -> dict:
    """A revealed secret draw (params: what the secret draws, as the report
    checks); committed_to != secret forges a mismatch."""
    return {
        "mode": "secret",
        "task": task,
        "nonce": NONCE,
        "commitment": held_out.commitment(task, NONCE, committed_to),
        "secret": secret,
        "params": held_out.draw(load_task(task), int(secret, 16)).params,
    }


def graded(grade: str | None) -> dict:
    """summary.json's `transfer` for `grade` (None: the search could not grade it)."""
    if grade is None:
        return {"grade": None, "reason": "no held-out result to grade", "evidence": []}
    what, where = EVIDENCE[grade]
    return {
        "grade": grade,
        "reason": f"graded {grade}",
        "evidence": [
            {"what": what, "where": where, "numbers": {"phi_ratio": 1.0}},
            {"what": "a weaker item", "where": "line 99", "numbers": {}},
        ],
        "numbers": {"in_dist": {"S": 0.6}, "held_out": {"phi": 0.5}, "second_distribution": {}},
    }


def make_run(
    base: Path, name: str, task: str = "saxpy", model: str = "m", seed: int = 0, **records
):
    """A finished run directory: the sample run of `task`, its summary given
    `model` and the `records` (transfer, held_out, held_out_verified; none:
    an old run), its run.json the proposer `seed`, sealed by a manifest."""
    run = base / name
    shutil.copytree(SAMPLE_RUNS / f"{task}_autotune", run)
    summary = json.loads((run / "summary.json").read_text())
    summary.update(model=model, **records)
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    spec = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(spec, model=model, seed=seed), indent=2))
    run_manifest.write(run)
    return run


def new_run(base: Path, name: str, grade, task: str = "saxpy", **kw):
    """A run as a search now writes it: graded, its secret draw verified."""
    return make_run(
        base,
        name,
        task,
        transfer=graded(grade),
        held_out=secret_record(task),
        held_out_verified=[],
        **kw,
    )


# -- per run -------------------------------------------------------------------


@pytest.mark.parametrize("grade", [*EVIDENCE, None])
def test_each_grade_shown_per_run_with_its_strongest_evidence(tmp_path, grade):
    run = new_run(tmp_path, "run", grade)
    (row,) = details_table(load_runs([run]))
    assert row["transfer grade"] == grade
    assert row["held-out mode"] == "secret"
    assert row["held-out verified"] == "yes"
    assert row["integrity"] == run_manifest.SEALED
    if grade is None:
        assert row["evidence"] is None
        return
    what, where = EVIDENCE[grade]
    assert row["evidence"] == (f"{what} ({where})" if where else what)  # the first item only
    md = render([row], "md")
    assert what in md and "weaker" not in md


def test_a_run_written_before_grading_shows_dashes(tmp_path, capsys):
    run = make_run(tmp_path, "old")
    (row,) = details_table(load_runs([run]))
    assert [row[k] for k in ("transfer grade", "held-out mode", "held-out verified")] == [None] * 3
    assert row["evidence"] is None
    line = render([row], "md").splitlines()[2]
    assert line.count("| -") >= 4  # each shown as "-"
    assert "UNVERIFIED" not in capsys.readouterr().err


def test_long_evidence_is_cut_to_one_line_keeping_where_it_points(tmp_path):
    text = "the kernel tests N against a table of\n" + "sizes 1 || 2 || 4 " * 20
    record = dict(graded("C"), evidence=[{"what": text, "where": "line 123", "numbers": {}}])
    run = make_run(tmp_path, "long", transfer=record, held_out=secret_record("saxpy"))
    (row,) = details_table(load_runs([run]))
    assert len(row["evidence"]) <= EVIDENCE_CHARS and "\n" not in row["evidence"]
    assert row["evidence"].endswith("... (line 123)")
    # the || of quoted code must not end the Markdown cell
    md_row = render([row], "md").splitlines()[2]
    assert r"1 \|\| 2" in md_row
    assert md_row.count(" | ") == render([row], "md").splitlines()[0].count(" | ")


def test_metal_sci_mode_needs_no_verification(tmp_path, capsys):
    record = {"mode": "metal-sci", "task": "saxpy", "nonce": "", "commitment": ""}
    run = make_run(tmp_path, "listed", transfer=graded("C"), held_out=record, held_out_verified=[])
    runs = load_runs([run])
    (row,) = details_table(runs)
    assert (row["held-out mode"], row["held-out verified"]) == ("metal-sci", "n/a")
    assert "UNVERIFIED" not in capsys.readouterr().err
    assert transfer_table(runs)[0]["C"] == 1


# -- a draw that does not verify ---------------------------------------------------


def test_a_draw_the_search_found_unverified_is_flagged_loudly(tmp_path, capsys):
    bad = make_run(
        tmp_path,
        "bad",
        transfer=graded("transfers"),
        held_out=secret_record("saxpy", committed_to="0" * 32),
        held_out_verified=[MISMATCH],
    )
    good = new_run(tmp_path, "good", "A", seed=1)
    runs = load_runs([bad, good])
    err = capsys.readouterr().err
    assert "UNVERIFIED held-out draw" in err and str(bad) in err and MISMATCH in err
    assert str(good) not in err
    rows = {Path(r["run"]).name: r for r in details_table(runs)}
    assert rows["bad"]["held-out verified"] == f"NO: {MISMATCH}"
    assert rows["good"]["held-out verified"] == "yes"
    assert rows["bad"]["transfer grade"] == "transfers"  # shown, but not counted
    (main,) = main_table(runs)
    assert main["m unverified"] == 1 and main["m runs"] == 2
    (row,) = transfer_table(runs)
    assert (row["runs"], row["unverified"], row["wins"], row["transferred"], row["A"]) == (
        2,
        1,
        1,
        0,
        1,
    )
    md = report.report_text(runs, "md", details=True)
    assert "m unverified" in md and "does not verify against the commitment" in md
    assert "NO: the revealed secret" in md


def test_the_report_checks_the_commitment_itself(tmp_path, capsys):
    """A run whose record says it verified, but whose revealed secret is not
    the one committed to: the report's own hash check flags it."""
    run = make_run(
        tmp_path,
        "forged",
        transfer=graded("transfers"),
        held_out=secret_record("saxpy", secret="1" * 32),
        held_out_verified=[],
    )
    runs = load_runs([run])
    assert MISMATCH in capsys.readouterr().err
    assert details_table(runs)[0]["held-out verified"].startswith("NO: ")
    assert transfer_table(runs)[0]["unverified"] == 1
    unrevealed = dict(secret_record("saxpy"), secret=None, params=None)
    hidden = make_run(tmp_path, "unrevealed", transfer=graded("A"), held_out=unrevealed)
    assert "not revealed" in details_table(load_runs([hidden]))[0]["held-out verified"]
    # The secret and commitment left alone, the configuration swapped for the
    # published one: the report draws it again from the secret and says so.
    listed = dict(secret_record("saxpy"), params={"N": 4194304})
    swapped = make_run(tmp_path, "swapped", transfer=graded("transfers"), held_out=listed)
    verified = details_table(load_runs([swapped]))[0]["held-out verified"]
    assert verified.startswith("NO: ") and "not what the secret draws" in verified


# -- the transfer table --------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Runs of a mix of grades, ungraded ones among them: model m1 on saxpy
    (transfers twice, A, no-win) and heat2d (B, C, D, not gradable, and one
    written before grading), model m2 on saxpy (one old run), and a rerun of
    m1's first saxpy seed with fewer iterations, which the cell leaves out."""
    base = tmp_path_factory.mktemp("mixed")
    for seed, grade in enumerate(["transfers", "transfers", "A", "no-win"]):
        new_run(base, f"saxpy_m1_r{seed}", grade, model="m1", seed=seed)
    for seed, grade in enumerate(["B", "C", "D", None]):
        new_run(base, f"heat2d_m1_r{seed}", grade, task="heat2d", model="m1", seed=seed)
    make_run(base, "heat2d_m1_r4", task="heat2d", model="m1", seed=4)
    make_run(base, "saxpy_m2", model="m2")
    shorter = new_run(base, "saxpy_m1_rerun", "D", model="m1", seed=0)
    summary = json.loads((shorter / "summary.json").read_text())
    summary.update(iterations=1)
    (shorter / "summary.json").write_text(json.dumps(summary))
    run_manifest.write(shorter)
    return load_runs([base])


COLUMNS = [
    "model",
    "task",
    "runs",
    "ungraded",
    "no win",
    "not judged",
    "wins",
    "transferred",
    "A",
    "B",
    "C",
    "D",
    "transfer rate",
]


def test_the_table_counts_a_mix_of_grades(mixed):
    rows = transfer_table(mixed)
    assert [list(r) for r in rows] == [COLUMNS] * len(rows)
    counts = {(r["model"], r["task"]): [r[c] for c in COLUMNS[2:]] for r in rows}
    #                              runs ungr nowin nj wins trans A  B  C  D  rate
    assert counts == {
        ("m1", "heat2d"): [5, 2, 0, 0, 3, 0, 0, 1, 1, 1, 0.0],
        ("m1", "saxpy"): [4, 0, 1, 0, 3, 2, 1, 0, 0, 0, pytest.approx(2 / 3)],
        ("m1", "all tasks"): [9, 2, 1, 0, 6, 2, 1, 1, 1, 1, pytest.approx(1 / 3)],
        ("m2", "saxpy"): [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, None],  # one task: no total row
    }
    assert [(r["model"], r["task"]) for r in rows][:3] == [
        ("m1", "heat2d"),
        ("m1", "saxpy"),
        ("m1", "all tasks"),
    ]


def test_a_run_the_machine_stopped_is_not_judged_and_no_win_nor_failure(tmp_path):
    """A held-out the machine could not finish is counted apart: not a
    win, not a B, not ungraded."""
    for seed, grade in enumerate(["not-judged", "B"]):
        new_run(tmp_path, f"saxpy_m1_r{seed}", grade, model="m1", seed=seed)
    (row,) = transfer_table(load_runs([tmp_path]))
    assert (row["not judged"], row["wins"], row["B"], row["ungraded"]) == (1, 1, 1, 0)


def test_every_format_holds_the_table(mixed, tmp_path):
    rows = transfer_table(mixed)
    md = report.report_text(mixed, "md")
    assert "| model" in md and "transfer rate" in md and "all tasks" in md
    assert "67%" in md and "Transfer grades (Gaming Without an Attacker)" in md
    tex = report.report_text(mixed, "latex")
    assert "transfer rate" in tex and r"67\%" in tex and tex.count(r"\begin{tabular}") == 2
    doc = json.loads(report.report_text(mixed, "json"))
    assert list(doc) == ["main", "transfer"] and doc["transfer"] == json.loads(json.dumps(rows))
    doc = json.loads(report.report_text(mixed, "json", details=True))
    assert list(doc) == ["main", "transfer", "details"]
    assert {d["transfer grade"] for d in doc["details"]} == {
        "transfers",
        "A",
        "B",
        "C",
        "D",
        "no-win",
        None,
    }
    out = tmp_path / "t" / "table.csv"
    files = report.report_files(mixed, "csv", True, out)
    assert sorted(p.name for p in files) == ["table.csv", "table_details.csv", "table_transfer.csv"]
    parsed = list(csv.DictReader(io.StringIO(files[out.with_name("table_transfer.csv")])))
    assert list(parsed[0]) == COLUMNS
    assert [(r["model"], r["task"], r["wins"], r["transferred"]) for r in parsed] == [
        (r["model"], r["task"], str(r["wins"]), str(r["transferred"])) for r in rows
    ]


def test_the_command_writes_the_table_in_each_format(mixed, tmp_path):
    folder = str(Path(mixed[0]["run_dir"]).parent)
    runner = CliRunner()
    for fmt in ("md", "latex", "json"):
        out = runner.invoke(report.main, [folder, "--format", fmt])
        assert out.exit_code == 0, out.output
        assert "transfer rate" in out.stdout
    # to stdout CSV holds one table: the main one, and stderr says where the other goes
    out = runner.invoke(report.main, [folder, "--format", "csv"])
    assert out.exit_code == 0 and "transfer rate" not in out.stdout
    assert "FILE_transfer.csv" in out.stderr
    target = tmp_path / "csv" / "table.csv"
    out = runner.invoke(report.main, [folder, "--format", "csv", "--out", str(target)])
    assert out.exit_code == 0, out.output
    assert "transfer rate" in (tmp_path / "csv" / "table_transfer.csv").read_text()


def test_old_runs_alone_get_no_transfer_table(tmp_path):
    """Runs written before grading: the report is what it was (README's table
    included), their details show no grade."""
    runs = load_runs([make_run(tmp_path, "a"), make_run(tmp_path, "b", task="heat2d")])
    assert "transfer rate" not in report.report_text(runs, "md")
    assert isinstance(json.loads(report.report_text(runs, "json")), list)
    assert list(report.report_files(runs, "csv", False, tmp_path / "t.csv")) == [tmp_path / "t.csv"]
    assert transfer_table(runs)[0]["ungraded"] == 1  # asked for, it counts them


def test_tampered_runs_are_left_out_of_the_table_unless_asked(tmp_path, capsys):
    good = new_run(tmp_path, "good", "transfers")
    bad = new_run(tmp_path, "bad", "A", seed=1)
    (bad / "best.metal").write_text("changed after the run finished")
    runs = load_runs([good, bad])
    assert "TAMPERED" in capsys.readouterr().err
    (row,) = transfer_table(runs)
    assert (row["runs"], row["tampered"], row["wins"], row["A"]) == (1, 1, 1, 0)
    (row,) = transfer_table(runs, include_tampered=True)
    assert (row["runs"], row["tampered"], row["wins"], row["A"]) == (2, 1, 2, 1)
    assert "Tampered: runs whose files changed" in render(transfer_table(runs), "md")


# -- the outcomes --------------------------------------------------------------


def test_every_outcome_name_is_shown(monkeypatch):
    """Whatever names OUTCOMES holds (not_transferred among them) reach the
    table, and a label it lacks is listed rather than a crash."""
    names = [*OUTCOMES, "an_outcome_yet_to_come"]
    labels = iter(names * 2)
    monkeypatch.setattr(tables, "outcome_label", lambda run: next(labels))
    runs = [
        dict(task="t", model="m", run_dir=f"r{i}", _seed=i, seed_score=0.3, best_score=0.4)
        for i in range(len(names))
    ]
    (row,) = main_table(runs)
    for name in names:
        assert f"{name} 1/{len(names)}" in row["m outcome"]
    assert "not_transferred" in OUTCOMES
