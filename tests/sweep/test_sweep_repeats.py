"""Sweeps with repeats, the sweep-wide cost cap and their report (issue 13),
with the local executor (tests/sweep/test_sweep_ray.py runs the same on Ray).

Cost tests drive a real OpenAI SDK against the local scripted server
(tests/fake_llm_server.py) with a price entry whose worst-case call is exact:
$125 per million output tokens and 32000 output tokens per call (the
proposer's allowance) make every call $4.00, its worst case included; the
evaluator is stubbed there (the evaluation is tested elsewhere), so they
take about a second.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_llm_server import SAXPY_ANSWER, FakeLLMServer, ok
from helpers import LISTED_HELD_OUT

from mlxsci.report import build as report
from mlxsci.report.build import load_runs, main_table, render
from mlxsci.report.spread import BOOTSTRAP, MIN_MAX, median_and_spread
from mlxsci.search import loop
from mlxsci.sweep import sweeper as sweep
from mlxsci.sweep.budget import CostBudget, spent_by_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "bench" / "results" / "runs" / "saxpy_autotune"
CALL_USD = 4.0
PRICES = {"sweep-coder": [0, 125.0]}  # 32000 output tokens: $4.00


def index_of(out: Path) -> dict:
    return {e["path"]: e for e in json.loads((out / "index.json").read_text())["runs"]}


# -- plan, names, seeds -------------------------------------------------------------


def test_repeats_have_their_own_directories_and_seeds():
    jobs = sweep.plan(["saxpy", "heat2d"], ["autotune", "gpt-5.5"], repeats=2)
    assert len(jobs) == 8 and len({j.name for j in jobs}) == 8
    # repeat 1 keeps the name a sweep without --repeats gives; every cell's
    # first run comes before any cell's second
    assert [j.name for j in jobs[:4]] == [
        "saxpy_autotune",
        "saxpy_gpt-5.5",
        "heat2d_autotune",
        "heat2d_gpt-5.5",
    ]
    assert [j.name for j in jobs[4:6]] == ["saxpy_autotune_r2", "saxpy_gpt-5.5_r2"]
    assert [j.seed for j in jobs] == [0] * 4 + [1] * 4
    assert sweep.plan(["saxpy"], ["autotune"]) == [sweep.Job("saxpy", "autotune", 1)]
    assert sweep.run_name("saxpy", "openai/gpt 5", 3) == "saxpy_openai-gpt-5_r3"


# -- the budget ---------------------------------------------------------------------------


def test_budget_shares_what_is_left_and_takes_back_what_is_not_spent():
    b = CostBudget(10.0, spent=2.0)
    # two runs start at once: $4 each of the $8 left, on top of what each had spent
    assert b.allot([("a", 0.0), ("b", 1.0)]) == [pytest.approx(4.0), pytest.approx(5.0)]
    assert b.exhausted() and b.allot([("late", 0.0)]) == [0.0]
    b.settle("late", 0.0, 0.0)
    b.settle("a", 0.0, 1.5)  # 2.5 of its 4 come back
    assert b.left() == pytest.approx(2.5) and not b.exhausted()
    b.settle("b", 1.0, None)  # lost with its files: all 4 counted spent
    assert b.spent == pytest.approx(2.0 + 1.5 + 4.0) and b.left() == pytest.approx(2.5)
    per_run = CostBudget(10.0, per_run=3.0)
    assert per_run.allot([("c", 1.0)]) == [pytest.approx(3.0)]  # 2 more, not 10
    assert CostBudget(None, per_run=3.0).allot([("d", 0.0)]) == [3.0]
    assert CostBudget(None).allot([("e", 0.0)]) == [None] and not CostBudget(None).exhausted()


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_budget_is_never_overshot(slots):
    """Runs that spend in calls of up to $4, each only when its worst case fits
    in its cap (as a search does), started `slots` at a time: the sweep never
    spends more than its cap, whatever the order runs end in."""
    import random

    rng = random.Random(slots)
    budget, total = CostBudget(25.0, spent=3.0), 3.0
    waiting, running, n = list(range(12)), {}, 0
    while waiting or running:
        free = slots - len(running)
        if free and waiting and not budget.exhausted():
            starting = waiting[:free]
            waiting = waiting[free:]
            caps = budget.allot([(str(name), 0.0) for name in starting])
            running.update(zip(starting, caps))
        elif not running:
            break
        name = rng.choice(list(running))
        cap, spent = running.pop(name), 0.0
        while rng.random() < 0.8:
            worst = 4.0
            if spent + worst > cap:
                break
            spent += rng.uniform(0.5, worst)
        budget.settle(str(name), 0.0, spent)
        total += spent
        n += 1
        assert total <= 25.0 + 1e-9 and budget.spent == pytest.approx(total)
    assert n >= 3


def test_spent_by_run_counts_history_and_a_saved_call_without_a_record(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    lines = [
        {"iteration": 0, "role": "seed", "cost_usd": 0.0},
        {"iteration": 1, "role": "candidate", "cost_usd": 1.25},
    ]
    (run / "history.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines) + '{"iteration": 2, "ro'
    )  # torn by a kill
    (run / "01_proposal.json").write_text(json.dumps({"cost_usd": 1.25}))  # recorded: once
    (run / "02_proposal.json").write_text(json.dumps({"cost_usd": 0.5}))  # not yet recorded
    assert spent_by_run(run) == pytest.approx(1.75)
    assert spent_by_run(tmp_path / "none") == 0.0


# -- the spread -------------------------------------------------------------------------


def test_median_and_spread():
    assert median_and_spread([]) == (None, None, None)
    assert median_and_spread([1.5, None]) == (1.5, None, None)
    assert median_and_spread([1.0, 3.0, 2.0]) == (2.0, 1.0, 3.0)  # min-max under 5
    values = [1.0, 1.1, 1.2, 1.3, 5.0, 1.15]
    mid, lo, hi = median_and_spread(values)
    assert mid == pytest.approx(1.175) and 1.0 <= lo < mid < hi <= 5.0
    assert hi < 5.0  # a CI of the median, not the range
    assert median_and_spread(values) == (mid, lo, hi)  # a fixed seed: the same interval


# -- the report of repeated runs ------------------------------------------------------------


def repeat_copy(dst: Path, seed: int, **changes) -> Path:
    """The committed saxpy run copied as a repeat with proposer seed `seed`."""
    shutil.copytree(SAMPLE, dst)
    opts = json.loads((dst / "run.json").read_text())
    (dst / "run.json").write_text(json.dumps(dict(opts, seed=seed)))
    summary = json.loads((dst / "summary.json").read_text())
    (dst / "summary.json").write_text(json.dumps(dict(summary, **changes)))
    return dst


NOISY = dict(
    seed_noise=0.01,
    best_noise=0.01,
    held_out_seed_noise=0.01,
    held_out_best_noise=0.01,
    seed_score=0.3,
    held_out_seed=0.5,
)


@pytest.fixture(scope="module")
def repeats(tmp_path_factory):
    """Three repeats of one cell (speedups 1.0x, 1.2x, 1.5x) and a second copy
    of repeat 2 with fewer iterations (the same seed: one run, picked)."""
    base = tmp_path_factory.mktemp("repeats")
    for seed, best, ratio in ((0, 0.30, 1.0), (1, 0.36, 0.98), (2, 0.45, 1.2)):
        repeat_copy(
            base / f"r{seed}",
            seed,
            best_score=best,
            held_out_best=0.5 * ratio,
            held_out_ratio=ratio,
            **NOISY,
        )
    repeat_copy(base / "r1_short", 1, best_score=0.9, iterations=1, **NOISY)
    return base


def test_main_table_gives_median_spread_and_count(repeats):
    rows = main_table(load_runs([repeats]))
    assert len(rows) == 1
    row = rows[0]
    assert row["autotune runs"] == 3  # r1_short shares seed 1 with r1
    assert row["autotune speedup"] == pytest.approx(1.2)
    assert (row["autotune speedup lo"], row["autotune speedup hi"]) == (
        pytest.approx(1.0),
        pytest.approx(1.5),
    )
    assert row["autotune spread"] == MIN_MAX
    assert row["autotune held-out ratio"] == pytest.approx(1.0)
    assert (row["autotune held-out ratio lo"], row["autotune held-out ratio hi"]) == (0.98, 1.2)
    assert row["autotune improved"] is True  # 2 of 3 runs improved beyond the noise
    # the 1.2x run's Phi fell 2 %: its gain does not carry to the held-out
    assert row["autotune outcome"] == "flat 1/3, not_transferred 1/3, improved 1/3"


def test_every_format_shows_the_spread_and_the_count(repeats):
    rows = main_table(load_runs([repeats]))
    md = render(rows, "md")
    assert "autotune speedup [spread]" in md and "**1.20x [1.00x, 1.50x]**" in md
    assert [c.strip() for c in md.splitlines()[2].split("|")][2] == "3"  # the runs column
    assert "Per cell: median of the runs" in md and "min-max" in md and "bootstrap" in md
    tex = render(rows, "latex")
    assert r"\textbf{1.20$\times$ [1.00$\times$, 1.50$\times$]}" in tex
    assert r"95\% percentile bootstrap" in tex
    csv_text = render(rows, "csv")
    header = csv_text.splitlines()[0].split(",")
    for column in (
        "autotune runs",
        "autotune speedup lo",
        "autotune speedup hi",
        "autotune spread",
    ):
        assert column in header
    assert json.loads(render(rows, "json"))[0]["autotune spread"] == MIN_MAX
    out = CliRunner().invoke(report.main, [str(repeats), "--format", "json", "--details"])
    data = json.loads(out.stdout)
    assert data["main"][0]["autotune runs"] == 3 and len(data["details"]) == 4


def test_five_runs_give_a_bootstrap_interval(repeats, tmp_path):
    for seed in (3, 4):
        repeat_copy(tmp_path / f"r{seed}", seed, best_score=0.33, **NOISY)
    row = main_table(load_runs([repeats, tmp_path]))[0]
    assert row["autotune runs"] == 5 and row["autotune spread"] == BOOTSTRAP
    assert (
        1.0
        <= row["autotune speedup lo"]
        <= row["autotune speedup"]
        <= row["autotune speedup hi"]
        <= 1.5
    )


def test_one_run_per_cell_keeps_the_table_as_it_was():
    rows = main_table(load_runs([ROOT / "bench" / "results" / "runs"]))
    assert not any(k.endswith((" runs", " lo", " hi", " spread")) for k in rows[0])
    assert "Per cell" not in render(rows, "md")


@pytest.mark.slow
def test_speedup_plot_has_error_bars(repeats, tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    captured = {}
    real_savefig = Figure.savefig

    def keep(fig, path, *args, **kwargs):  # every figure the report saves, by file stem
        captured[Path(path).stem] = fig
        return real_savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    paths = report.write_plots(load_runs([repeats]), tmp_path)
    assert {p.name for p in paths} >= {"speedups.png", "speedups.svg"}
    ax = captured["speedups"].axes[0]
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert bars, "no error bar"
    ((lo, hi),) = [sorted(seg[:, 1]) for seg in bars[0].get_segments()]
    assert (lo, hi) == (pytest.approx(1.0), pytest.approx(1.5))


# -- local sweeps ------------------------------------------------------------------------------


@pytest.mark.slow
def test_local_sweep_with_repeats_then_resumed(tmp_path):
    """2 tasks x autotune x 2 repeats on the simulator: four runs, distinct
    seeds; the report counts 2 runs per cell; run again, all are skipped.
    nbody, not heat2d: each run ends with the seed at a held-out size,
    ~2 s on the simulator for nbody and ~20 s for heat2d."""
    out = tmp_path / "sw"
    lines = []

    def run_sweep() -> list[dict]:
        return sweep.sweep(
            ["saxpy", "nbody"],
            ["autotune"],
            1,
            repeats=2,
            backend="sim",
            held_out=LISTED_HELD_OUT,
            out=out,
            echo=lines.append,
        )

    entries = run_sweep()
    assert [(e["path"], e["status"]) for e in entries] == [
        ("saxpy_autotune", "finished"),
        ("nbody_autotune", "finished"),
        ("saxpy_autotune_r2", "finished"),
        ("nbody_autotune_r2", "finished"),
    ]
    seeds = {
        e["path"]: json.loads((out / e["path"] / "run.json").read_text())["seed"] for e in entries
    }
    assert seeds == {
        "saxpy_autotune": 0,
        "nbody_autotune": 0,
        "saxpy_autotune_r2": 1,
        "nbody_autotune_r2": 1,
    }
    rows = main_table(load_runs([out]))
    assert [r["autotune runs"] for r in rows] == [2, 2]
    again = run_sweep()
    assert {e["action"] for e in again} == {"skipped"}


@pytest.mark.slow
def test_killed_local_sweep_resumes_and_skips_what_finished(tmp_path):
    """SIGKILL the sweep while its second run is under way: the first stays
    finished and is skipped, the second resumes (no iteration twice)."""
    out = tmp_path / "sw"
    cmd = [
        sys.executable,
        "-m",
        "mlxsci.sweep",
        "--tasks",
        "saxpy",
        "--models",
        "autotune",
        "--iterations",
        "3",
        "--repeats",
        "2",
        "--backend",
        "sim",
        "--out",
        str(out),
        "--quiet",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    second = out / "saxpy_autotune_r2"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (second / "history.jsonl").exists():  # its seed is recorded
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / "saxpy_autotune" / "summary.json").exists()
    assert not (second / "summary.json").exists()
    finished_at = (out / "saxpy_autotune" / "summary.json").stat().st_mtime_ns
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "saxpy_autotune: finished, skipped" in done.stderr
    assert (out / "saxpy_autotune" / "summary.json").stat().st_mtime_ns == finished_at
    history = [json.loads(line) for line in (second / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in history] == [0, 1, 2, 3]
    assert {e["status"] for e in index_of(out).values()} == {"finished"}


# -- the sweep-wide cost cap, local -----------------------------------------------------------


def stub_evaluate(task, source, *, size_set=None, sizes=None, timer=None, **kw):
    """Stands in for mlxsci.evaluation.evaluator.evaluate: every candidate correct, S 0.3,
    Phi 0.5 (at the listed held-out or a secret draw's)."""
    held = size_set == "held-out" or any(s.held_out for s in sizes or ())
    sizes = [
        {
            "label": "n",
            "held_out": held,
            "correct": True,
            "fraction": 0.5 if held else 0.3,
            "noise": 0.01,
            "timer": "sim",
            "seconds": 1e-3,
            "kernels": {},
        }
    ]
    cand = {
        "compile_ok": True,
        "correct": True,
        "score": None if held else 0.3,
        "phi": 0.5 if held else None,
        "noise": 0.01,
        "fail_reason": None,
    }
    result = {
        "task": task,
        "backend": "sim",
        "device": "stub",
        "dialect": "metal",
        "timer": timer or "sim",
        "candidate": cand,
        "sizes": sizes,
    }
    return types.SimpleNamespace(to_json=lambda: result)


@pytest.fixture
def priced(tmp_path, monkeypatch):
    """The scripted server answering every call with 32000 output tokens ($4),
    the price file, and the evaluator stubbed."""
    monkeypatch.setattr(loop, "evaluate", stub_evaluate)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    with FakeLLMServer() as server:
        server.default = ok(SAXPY_ANSWER, input_tokens=100, output_tokens=32000, times=None)
        yield server, prices


def cli_sweep(out, server, prices, *extra):
    args = [
        "--tasks",
        "saxpy,heat2d",
        "--models",
        "sweep-coder",
        "--iterations",
        "2",
        "--repeats",
        "2",
        "--backend",
        "sim",
        "--out",
        str(out),
        "--base-url",
        server.openai_url,
        "--prices",
        str(prices),
        *extra,
    ]
    return CliRunner().invoke(sweep.main, [str(a) for a in args])


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_sweep_cost_cap_is_kept_across_runs_and_sessions(priced, tmp_path):
    server, prices = priced
    out = tmp_path / "sw"
    first = cli_sweep(out, server, prices, "--max-cost", "8")
    assert first.exit_code == 1, first.output
    index = index_of(out)
    # The first run gets the whole $8 (one run at a time) and spends it in its
    # two calls; nothing is left, so no other run starts.
    assert index["saxpy_sweep-coder"]["status"] == "finished"
    assert index["saxpy_sweep-coder"]["cost_usd"] == pytest.approx(2 * CALL_USD)
    assert [
        index[n]["action"]
        for n in ("heat2d_sweep-coder", "saxpy_sweep-coder_r2", "heat2d_sweep-coder_r2")
    ] == ["not started"] * 3
    assert not (out / "heat2d_sweep-coder").exists()
    assert len(server.requests) == 2
    assert "not started: --max-cost reached" in first.output
    # Again with $16: the $8 already spent counts; the next run gets the rest.
    second = cli_sweep(out, server, prices, "--max-cost", "16")
    index = index_of(out)
    assert index["saxpy_sweep-coder"]["action"] == "skipped"
    assert index["heat2d_sweep-coder"]["status"] == "finished"
    assert sum(e["cost_usd"] or 0 for e in index.values()) == pytest.approx(16.0)
    assert len(server.requests) == 4 and second.exit_code == 1
    assert "cost: $16.0000 of $16.0000 spent" in second.output


def test_per_run_cap_with_the_sweep_cap(priced, tmp_path):
    server, prices = priced
    out = tmp_path / "sw"
    result = cli_sweep(out, server, prices, "--max-cost", "12", "--max-cost-per-run", "4")
    index = index_of(out)
    # $4 a run: one call each (the second would not fit), three runs, then nothing left.
    runs = ["saxpy_sweep-coder", "heat2d_sweep-coder", "saxpy_sweep-coder_r2"]
    assert [index[n]["status"] for n in runs] == ["stopped"] * 3
    assert [index[n]["cost_usd"] for n in runs] == [CALL_USD] * 3
    assert index["heat2d_sweep-coder_r2"]["action"] == "not started"
    assert len(server.requests) == 3 and result.exit_code == 1
    stopped = json.loads((out / runs[0] / "summary.json").read_text())["stopped"]
    assert stopped.startswith("max_cost")


def test_free_runs_start_when_the_cap_is_spent(priced, tmp_path):
    server, prices = priced
    out = tmp_path / "sw"
    args = [
        "--tasks",
        "saxpy,heat2d",
        "--models",
        "autotune,sweep-coder",
        "--iterations",
        "1",
        "--backend",
        "sim",
        "--out",
        out,
        "--base-url",
        server.openai_url,
        "--prices",
        prices,
        "--max-cost",
        "4",
    ]
    result = CliRunner().invoke(sweep.main, [str(a) for a in args])
    index = index_of(out)
    assert index["saxpy_sweep-coder"]["cost_usd"] == CALL_USD  # all of the cap
    assert "max_cost" not in index["saxpy_autotune"]  # takes no share
    assert index["heat2d_autotune"]["status"] == "finished"  # started after all
    assert index["heat2d_sweep-coder"]["action"] == "not started"
    assert len(server.requests) == 1 and result.exit_code == 1


# -- bad inputs ------------------------------------------------------------------------------


def usage_error(args, *needles):
    out = CliRunner().invoke(sweep.main, [str(a) for a in args])
    assert out.exit_code == 2, (out.exit_code, out.output, out.exception)
    assert "Traceback" not in out.output
    for needle in needles:
        assert needle in out.output, out.output
    return out.output


BASE = ["--tasks", "saxpy", "--models", "autotune", "--iterations", "1", "--backend", "sim"]


@pytest.mark.parametrize(
    "extra,needles",
    [
        (["--repeats", "0"], ["--repeats"]),
        (["--repeats", "two"], ["--repeats"]),
        (["--address", "auto"], ["--address is for --executor ray"]),
        (["--ship-results"], ["--ship-results is for --executor ray"]),
        (["--executor", "dask"], ["--executor"]),
        (["--max-cost-per-run", "-1"], ["--max-cost-per-run"]),
    ],
)
def test_sweep_refuses_bad_options(tmp_path, monkeypatch, extra, needles):
    import mlxsci.search

    monkeypatch.setattr(mlxsci.search, "run", lambda *a, **kw: pytest.fail("a search ran"))
    usage_error(BASE + ["--out", tmp_path / "sw"] + extra, *needles)
    assert not (tmp_path / "sw").exists()


def test_a_cap_needs_every_model_priced_and_a_good_price_file(tmp_path, monkeypatch):
    import mlxsci.search

    monkeypatch.setattr(mlxsci.search, "run", lambda *a, **kw: pytest.fail("a search ran"))
    args = [
        "--tasks",
        "saxpy",
        "--models",
        "autotune,my-local-model",
        "--iterations",
        "1",
        "--backend",
        "sim",
        "--out",
        tmp_path / "sw",
    ]
    usage_error(
        args + ["--max-cost", "5"], "--max-cost needs a price for my-local-model", "--prices"
    )
    bad = tmp_path / "prices.json"
    bad.write_text("{not json")
    usage_error(args + ["--prices", bad], "--prices", "not valid JSON")
    assert not (tmp_path / "sw").exists()


def test_executor_ray_without_ray_is_a_usage_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    out = usage_error(
        BASE + ["--out", tmp_path / "sw", "--executor", "ray"],
        "--executor ray needs Ray",
        "pip install 'mlxsci[ray]'",
    )
    assert out.rstrip().splitlines()[-1].startswith("Error: ")
    assert not (tmp_path / "sw").exists()


def test_sweep_folder_that_cannot_be_made(tmp_path):
    (tmp_path / "afile").write_text("")
    usage_error(BASE + ["--out", tmp_path / "afile" / "sw"], "cannot make the sweep folder")


def test_cluster_needs_a_named_backend(tmp_path):
    usage_error(
        [
            "--tasks",
            "saxpy",
            "--models",
            "autotune",
            "--iterations",
            "1",
            "--out",
            tmp_path / "sw",
            "--executor",
            "ray",
            "--address",
            "auto",
        ],
        "--backend",
        "cuda, metal or sim",
    )
