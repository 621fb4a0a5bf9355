"""Reports and sweeps from real offline searches (autotune on the simulator).

The real runs are the committed samples in bench/results/runs (saxpy, heat2d:
what `python -m mlxsci.sweep` wrote), copied once per module so no test can
change them; the outcome labels are exercised on copies of the real saxpy run
whose summary.json numbers are edited, so every other file in those
directories is what a search wrote. One slow test makes a fresh run, so a
change to what a search writes cannot hide behind the committed samples.
"""

import csv
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlxsci.evaluation.verdicts import NOISE_FLOOR
from mlxsci.report import build as report
from mlxsci.report import plots as report_plots
from mlxsci.report.build import (
    details_table,
    load_runs,
    main_table,
    outcome_label,
    render,
    write_plots,
)
from mlxsci.sweep import sweeper as sweep

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_RUNS = ROOT / "bench" / "results" / "runs"
# The committed sample runs' length (each was asked for this many iterations).
ITERATIONS = json.loads((SAMPLE_RUNS / "saxpy_autotune" / "run.json").read_text())["iterations"]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """{task: run dir} of real autotune searches on the simulator: copies of
    the committed sample runs (a sweep's folder, index.json included)."""
    base = tmp_path_factory.mktemp("real")
    shutil.copytree(SAMPLE_RUNS, base / "runs")
    return {task: base / "runs" / f"{task}_autotune" for task in ("saxpy", "heat2d")}


def edit_copy(src: Path, dst: Path, **changes) -> Path:
    """Copy a real run directory and change numbers in its summary.json."""
    shutil.copytree(src, dst)
    path = dst / "summary.json"
    summary = json.loads(path.read_text())
    summary.update(changes)
    path.write_text(json.dumps(summary, indent=2))
    return dst


# Summary numbers (and noises) that give each label (held_out_ratio = best / seed).
NOISES = dict(seed_noise=0.02, best_noise=0.03, held_out_seed_noise=0.02, held_out_best_noise=0.04)
CRAFTED = {
    "improved": dict(
        seed_score=0.30,
        best_score=0.60,
        held_out_seed=0.50,
        held_out_best=0.60,
        held_out_ratio=1.2,
        **NOISES,
    ),
    # S doubled, Phi 2 % up: inside its band, so the gain does not transfer
    "not_transferred": dict(
        seed_score=0.30,
        best_score=0.60,
        held_out_seed=0.50,
        held_out_best=0.51,
        held_out_ratio=1.02,
        **NOISES,
    ),
    "held_out_regression": dict(
        seed_score=0.30,
        best_score=0.60,
        held_out_seed=0.50,
        held_out_best=0.40,
        held_out_ratio=0.8,
        **NOISES,
    ),
    "held_out_failure": dict(
        seed_score=0.30,
        best_score=0.60,
        held_out_seed=0.50,
        held_out_best=None,
        held_out_ratio=None,
        held_out_best_fail_reason="correctness failed at size 4M",
        **NOISES,
    ),
    # 1.12x, as the H100 autotune "gain", against a measured S noise of 15 %; Phi
    # 4 % down, inside its band (a drop beyond it would be held_out_regression)
    "within_noise": dict(
        seed_score=0.30,
        best_score=0.336,
        held_out_seed=0.50,
        held_out_best=0.48,
        held_out_ratio=0.96,
        **dict(NOISES, best_noise=0.15),
    ),
    "saturated": dict(
        seed_score=0.85,
        best_score=0.85,
        held_out_seed=0.90,
        held_out_best=0.90,
        held_out_ratio=1.0,
        **NOISES,
    ),
    "flat": dict(
        seed_score=0.30,
        best_score=0.30,
        held_out_seed=0.50,
        held_out_best=0.50,
        held_out_ratio=1.0,
        **NOISES,
    ),
}


@pytest.fixture(scope="module")
def crafted(real, tmp_path_factory):
    """{label: run dir}: copies of the real saxpy run, one model name per label."""
    base = tmp_path_factory.mktemp("crafted")
    out = {}
    for label, numbers in CRAFTED.items():
        model = "m-" + label.replace(" ", "-")
        numbers = dict(
            numbers, model=model, improvement=numbers["best_score"] / numbers["seed_score"]
        )
        out[label] = edit_copy(real["saxpy"], base / model, **numbers)
    return out


def test_outcome_label_rules():
    base = dict(
        seed_score=0.5,
        held_out_seed=0.5,
        held_out_best=0.5,
        seed_noise=0.01,
        best_noise=0.01,
        held_out_seed_noise=0.01,
        held_out_best_noise=0.01,
    )
    s = lambda **kw: {**base, **kw}  # noqa: E731
    up = 0.5 * (1 + NOISE_FLOOR)  # exactly on the band: within noise
    assert outcome_label(s(best_score=up)) == "within_noise"
    # S beyond the band: a win only when Phi rises beyond its own band too
    assert outcome_label(s(best_score=up * 1.001)) == "not_transferred"
    assert outcome_label(s(best_score=up * 1.001, held_out_best=0.6)) == "improved"
    edge = 0.5 * (1 + NOISE_FLOOR)  # Phi exactly on the band: not beyond it
    assert outcome_label(s(best_score=0.6, held_out_best=edge)) == "not_transferred"
    assert outcome_label(s(best_score=0.6, held_out_best=edge * 1.001)) == "improved"
    # Phi exactly on the lower boundary is within noise; just below it regressed.
    low_edge = 0.5 / (1 + NOISE_FLOOR)
    assert outcome_label(s(best_score=0.6, held_out_best=low_edge)) == "not_transferred"
    assert (
        outcome_label(s(best_score=0.6, held_out_best=0.5 / (1 + NOISE_FLOOR) * 0.999))
        == "held_out_regression"
    )
    assert outcome_label(s(best_score=0.6, held_out_best=None)) == "held_out_failure"
    assert outcome_label(s(best_score=0.5)) == "flat"
    # an S gain inside the noise with Phi down beyond it: the regression is the finding
    assert outcome_label(s(best_score=0.51, held_out_best=0.2)) == "held_out_regression"
    assert outcome_label(s(best_score=0.51, held_out_best=0.49)) == "within_noise"
    assert outcome_label(s(seed_score=0.8, best_score=0.8)) == "saturated"
    assert outcome_label(s(seed_score=0.8, best_score=0.81)) == "within_noise"
    assert outcome_label(s(seed_score=0.8, best_score=0.9)) == "not_transferred"
    assert outcome_label(s(seed_score=0.8, best_score=0.9, held_out_best=0.6)) == "improved"
    # the seed has no Phi to compare with: nothing to regress from
    assert outcome_label(s(best_score=0.6, held_out_seed=None)) == "improved"


def test_labels_judge_against_the_measured_noise():
    base = dict(seed_score=0.30, held_out_seed=0.50, held_out_best=0.60)
    s = lambda **kw: {**base, **kw}  # noqa: E731
    # 1.12x: an improvement against a 5 % noise, not against a 15 % one (either side's).
    assert outcome_label(s(best_score=0.336, seed_noise=0.02, best_noise=0.02)) == "improved"
    assert outcome_label(s(best_score=0.336, seed_noise=0.15, best_noise=0.02)) == "within_noise"
    assert outcome_label(s(best_score=0.336, best_noise=0.15)) == "within_noise"
    # Phi 20 % down: a regression against 5 %, within the 30 % noise of the held-out size
    # (where the S gain, not carried to the held-out, does not transfer).
    low = dict(best_score=0.6, held_out_best=0.40)
    assert outcome_label(s(**low, held_out_best_noise=0.02)) == "held_out_regression"
    assert outcome_label(s(**low, held_out_seed_noise=0.30)) == "not_transferred"
    # Phi 20 % up: a win against 5 %, not against the 30 % noise.
    assert outcome_label(s(best_score=0.6, held_out_seed_noise=0.30)) == "not_transferred"
    # A within-noise speedup is neither bold nor `improved`.
    runs = [
        dict(s(best_score=0.336, best_noise=0.15), task="t", model="m", run_dir="a"),
        dict(s(best_score=0.336, best_noise=0.01), task="u", model="m", run_dir="b"),
    ]
    rows = main_table(runs)
    assert [r["m improved"] for r in rows] == [False, True]
    assert [r["m outcome"] for r in rows] == ["within_noise", "improved"]
    md = render(rows, "md")
    assert "**1.12x**" in md and md.count("**") == 2


def test_runs_without_noise_fields_get_the_floor(tmp_path):
    """Summaries written before noise was measured: no noise keys, noise 0, the floor."""
    old_runs = tmp_path / "runs"
    shutil.copytree(ROOT / "bench" / "results" / "runs", old_runs)
    for path in old_runs.glob("*/summary.json"):  # as written before noise was measured
        summary = json.loads(path.read_text())
        for key in [k for k in summary if "noise" in k or "band" in k or "verdict" in k]:
            del summary[key]
        path.write_text(json.dumps(summary))
    runs = load_runs([old_runs])
    assert runs and all("seed_noise" not in r for r in runs)
    for row in details_table(runs):
        assert row["S band"] == NOISE_FLOOR
    old = dict(seed_score=0.30, best_score=0.33, held_out_seed=0.5, held_out_best=0.55)
    assert outcome_label(old) == "improved"  # 1.1x > 1.05, at the held-out too
    assert outcome_label(dict(old, held_out_best=0.52)) == "not_transferred"  # 1.04x
    assert outcome_label(dict(old, best_score=0.31)) == "within_noise"


@pytest.mark.parametrize("label", list(CRAFTED))
def test_every_label_in_main_table(crafted, label):
    rows = main_table(load_runs([crafted[label]]))
    model = "m-" + label.replace(" ", "-")
    assert len(rows) == 1 and rows[0]["task"] == "saxpy"
    assert rows[0][f"{model} outcome"] == label
    assert rows[0][f"{model} improved"] == (
        label in ("improved", "not_transferred", "held_out_regression", "held_out_failure")
    )


@pytest.mark.slow
def test_a_fresh_run_reads_like_the_samples(real, tmp_path):
    """The other tests read the committed samples; a search run now must write
    everything they read, or the samples no longer stand for one."""
    from mlxsci.search import run

    run("saxpy", "autotune", iterations=1, backend="sim", out=tmp_path / "fresh")
    sample = json.loads((real["saxpy"] / "summary.json").read_text())
    fresh = json.loads((tmp_path / "fresh" / "summary.json").read_text())
    assert set(sample) <= set(fresh), sorted(set(sample) - set(fresh))
    assert set(sample["history"][1]) <= set(fresh["history"][1])
    for table in (main_table, details_table):
        (from_sample,), (from_fresh,) = (
            table(load_runs([d])) for d in (real["saxpy"], tmp_path / "fresh")
        )
        assert list(from_sample) == list(from_fresh)


def test_real_runs_main_table(real):
    runs = load_runs([real["saxpy"].parent])
    assert [r["task"] for r in runs] == ["heat2d", "saxpy"]
    rows = main_table(runs)
    assert [r["task"] for r in rows] == ["heat2d", "saxpy"]
    for row, run in zip(rows, runs):
        assert row["autotune speedup"] == pytest.approx(run["best_score"] / run["seed_score"])
        assert row["autotune held-out phi"] == run["held_out_best"]
        assert row["autotune held-out ratio"] == run["held_out_ratio"]
        assert row["autotune outcome"] == outcome_label(run)


def test_column_groups_and_pick(crafted, real, tmp_path):
    # Several models: one column group each, one row for the one task.
    rows = main_table(load_runs(list(crafted.values())))
    assert len(rows) == 1
    assert {k for k in rows[0] if k.endswith(" outcome")} == {
        f"m-{label.replace(' ', '-')} outcome" for label in CRAFTED
    }
    # Two runs of one task/model: the one with more iterations wins.
    longer = edit_copy(
        crafted["flat"], tmp_path / "longer", iterations=ITERATIONS + 5, **CRAFTED["improved"]
    )
    rows = main_table(load_runs([crafted["flat"], longer]))
    assert rows[0]["m-flat outcome"] == "improved"


def test_formats(crafted, real):
    runs = load_runs([real["saxpy"].parent] + list(crafted.values()))
    rows = main_table(runs)
    md = render(rows, "md")
    lines = md.strip().splitlines()
    assert lines[0].startswith("| task") and "autotune speedup" in lines[0]
    assert set(lines[1]) <= set("|-: ")
    assert len(lines) == 2 + len({r["task"] for r in runs})
    assert "**" in md  # meaningful improvements are bold
    tex = render(rows, "latex")
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\textbf{" in tex and r"m-held\_out\_regression" in tex
    parsed = list(csv.DictReader(io.StringIO(render(rows, "csv"))))
    assert [r["task"] for r in parsed] == [r["task"] for r in rows]
    assert parsed[-1]["m-flat outcome"] == "flat" and parsed[-1]["m-flat improved"] == "False"
    loaded = json.loads(render(rows, "json"))
    assert loaded == json.loads(json.dumps(rows))
    assert loaded[-1]["m-improved improved"] is True
    with pytest.raises(ValueError):
        render(rows, "html")


@pytest.mark.slow
def test_details_table(real, crafted, tmp_path):
    # Mark iterations of a copied run as a compile failure and a wrong result,
    # and add a skipped one, as the search would have recorded them.
    d = edit_copy(crafted["flat"], tmp_path / "details")
    summary = json.loads((d / "summary.json").read_text())
    hist = summary["history"][:3]  # the seed and two iterations
    hist[1].update(compile_ok=False, correct=False, score=None, is_new_best=False)
    hist[2].update(compile_ok=True, correct=False, score=None, is_new_best=False)
    hist.append({**hist[2], "iteration": 3, "role": "skipped", "source_path": None})
    summary.update(
        history=hist,
        iterations=3,
        best_iteration=0,
        tokens={"input": 1234, "output": 56},
        cost_usd=0.0123,
    )
    (d / "summary.json").write_text(json.dumps(summary))
    rows = details_table(load_runs([d]))
    assert len(rows) == 1
    row = rows[0]
    assert (row["compile failures"], row["incorrect"], row["skipped"]) == (1, 1, 1)
    assert (row["iterations"], row["best iteration"]) == (3, 0)
    assert (row["tokens in"], row["tokens out"], row["cost usd"]) == (1234, 56, 0.0123)
    assert row["backend"] == "sim" and row["wall s"] > 0
    real_rows = details_table(load_runs([real["saxpy"].parent]))
    assert [r["iterations"] for r in real_rows] == [ITERATIONS, ITERATIONS]
    for fmt in ("md", "latex", "csv"):
        assert "compile failures" in render(real_rows, fmt)
    write_plots(load_runs([d]), tmp_path / "details_plots")  # failures plot on the baseline
    assert (tmp_path / "details_plots" / "convergence.png").stat().st_size > 0


def test_unfinished_runs_are_skipped(real, tmp_path, capsys):
    shutil.copytree(real["heat2d"], tmp_path / "killed")
    (tmp_path / "killed" / "summary.json").unlink()
    shutil.copytree(real["saxpy"], tmp_path / "done")
    runs = load_runs([tmp_path])
    assert [r["task"] for r in runs] == ["saxpy"]
    assert "killed" in capsys.readouterr().err


def test_cli_formats(real):
    runner = CliRunner()
    folder = str(real["saxpy"].parent)
    out = runner.invoke(report.main, [folder])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("| task")
    out = runner.invoke(report.main, [folder, "--format", "json", "--details"])
    data = json.loads(out.stdout)
    assert len(data["main"]) == 2 and len(data["details"]) == 2
    out = runner.invoke(report.main, [folder, "--format", "latex"])
    assert r"\toprule" in out.stdout


def test_cli_out_file(real, tmp_path):
    target = tmp_path / "t" / "table.csv"
    out = CliRunner().invoke(
        report.main, [str(real["saxpy"].parent), "--format", "csv", "--out", str(target)]
    )
    assert out.exit_code == 0, out.output
    assert len(list(csv.DictReader(target.open()))) == 2


def _plots_ok(folder: Path) -> list[str]:
    names = sorted(p.name for p in folder.iterdir())
    for stem in ("convergence", "fractions", "speedups"):
        assert f"{stem}.png" in names and f"{stem}.svg" in names
    assert any(n.startswith("roofline_") and n.endswith(".png") for n in names)
    assert any(n.startswith("roofline_") and n.endswith(".svg") for n in names)
    for p in folder.iterdir():
        assert p.stat().st_size > 1000, p
    return names


@pytest.mark.slow
def test_plots(real, crafted, tmp_path):
    runs = load_runs([real["saxpy"].parent, crafted["held_out_failure"]])
    paths = write_plots(runs, tmp_path / "plots")
    assert len(paths) == 8
    _plots_ok(tmp_path / "plots")


@pytest.mark.slow
def test_plots_without_cached_roofline(real, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report_plots, "_cached_roofline", lambda backend, device: (None, None))
    write_plots(load_runs([real["saxpy"].parent]), tmp_path / "plots")
    _plots_ok(tmp_path / "plots")
    assert "no cached roofline" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_plots(real, tmp_path):
    out = CliRunner().invoke(
        report.main, [str(real["saxpy"].parent), "--plots", str(tmp_path / "p")]
    )
    assert out.exit_code == 0, out.output
    _plots_ok(tmp_path / "p")


@pytest.mark.slow
def test_sweep_skips_finished_and_resumes_unfinished(real, tmp_path):
    out = tmp_path / "sweep"
    done = out / sweep.run_name("saxpy", "autotune")
    killed = out / sweep.run_name("heat2d", "autotune")
    shutil.copytree(real["saxpy"], done)
    shutil.copytree(real["heat2d"], killed)
    (killed / "summary.json").unlink()
    before = (done / "summary.json").stat().st_mtime_ns
    messages = []
    entries = sweep.sweep(
        ["saxpy", "heat2d"], ["autotune"], ITERATIONS, backend="sim", out=out, echo=messages.append
    )
    assert [(e["task"], e["action"], e["status"]) for e in entries] == [
        ("saxpy", "skipped", "finished"),
        ("heat2d", "resumed", "finished"),
    ]
    assert (done / "summary.json").stat().st_mtime_ns == before
    resumed = json.loads((killed / "summary.json").read_text())
    assert resumed["iterations"] == ITERATIONS and resumed["task"] == "heat2d"
    index = json.loads((out / "index.json").read_text())
    assert [(e["task"], e["model"], e["path"], e["status"]) for e in index["runs"]] == [
        ("saxpy", "autotune", "saxpy_autotune", "finished"),
        ("heat2d", "autotune", "heat2d_autotune", "finished"),
    ]
    # report reads the sweep through its index; a stray run beside it is ignored
    shutil.copytree(real["saxpy"], out / "stray")
    runs = load_runs([out])
    assert sorted(Path(r["run_dir"]).name for r in runs) == ["heat2d_autotune", "saxpy_autotune"]
    # a second sweep finds both finished
    again = sweep.sweep(
        ["saxpy", "heat2d"], ["autotune"], ITERATIONS, backend="sim", out=out, echo=messages.append
    )
    assert [e["action"] for e in again] == ["skipped", "skipped"]


def test_sweep_cli_rejects_unknown_task(tmp_path):
    out = CliRunner().invoke(
        sweep.main,
        ["--tasks", "nosuch", "--models", "autotune", "--iterations", "1", "--out", str(tmp_path)],
    )
    assert out.exit_code != 0 and "nosuch" in out.output


def test_sweep_cli_passes_accept_and_timer(tmp_path, monkeypatch):
    import mlxsci.search

    seen = []
    monkeypatch.setattr(mlxsci.search, "run", lambda *a, **kw: seen.append(kw))
    out = CliRunner().invoke(
        sweep.main,
        [
            "--tasks",
            "saxpy",
            "--models",
            "autotune",
            "--iterations",
            "1",
            "--backend",
            "sim",
            "--accept",
            "noise-aware",
            "--timer",
            "wall",
            "--out",
            str(tmp_path),
        ],
    )
    assert len(seen) == 1 and (seen[0]["accept"], seen[0]["timer"]) == ("noise-aware", "wall")
    bad = CliRunner().invoke(
        sweep.main,
        [
            "--tasks",
            "saxpy",
            "--models",
            "autotune",
            "--iterations",
            "1",
            "--backend",
            "sim",
            "--timer",
            "cupti",
            "--out",
            str(tmp_path / "bad"),
        ],
    )
    assert bad.exit_code == 2 and "cupti" in bad.output and bad.exception.__class__ is SystemExit
    assert out.exit_code == 1  # the stand-in wrote no summary: unfinished


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("<!-- report-table:start")
    start = text.index("\n", start) + 1
    return text[start : text.index("<!-- report-table:end -->")]


def test_readme_report_table_in_sync():
    runs = load_runs([ROOT / "bench" / "results" / "runs"])
    assert {r["task"] for r in runs} == {"saxpy", "heat2d"}
    assert readme_block().strip() == report.report_text(runs, "md").strip()


@pytest.mark.slow
def test_module_entry_points():
    import subprocess
    import sys

    for mod in ("mlxsci.report", "mlxsci.sweep"):
        res = subprocess.run(
            [sys.executable, "-m", mod, "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=os.environ,
        )
        assert res.returncode == 0 and "Usage" in res.stdout
