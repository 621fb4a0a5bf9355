"""Re-scoring imported Metal-Sci runs on the simulator (--rescore): every
imported candidate's verdict beside the recorded one in rescore.json, a
candidate that passed Metal-Sci's harness and fails mlxsci's named with its
reason, the recorded best at the held-out and graded for transfer, and a
killed re-score continued where it stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import usage_error
from metal_sci_runs import Iteration, heat2d_run, metal_sci_source, result, write_run

from mlxsci.import_metal_sci import records
from mlxsci.import_metal_sci import rescore as rescore_module
from mlxsci.import_metal_sci.__main__ import main

QUICK = ("--backend", "sim", "--held-out", "none", "--no-transfer", "--jobs", "1")


@pytest.fixture
def quick_evaluations(monkeypatch):
    """Evaluations with one warm-up and one measured run (the verdicts are
    what these tests read), counted."""
    calls = []
    real = rescore_module.evaluate

    def quick(*args, **kwargs):
        calls.append(kwargs.get("filename"))
        return real(*args, **{**kwargs, "n_warmup": 1, "n_measure": 1})

    monkeypatch.setattr(rescore_module, "evaluate", quick)
    return calls


def invoke(*args):
    out = CliRunner().invoke(main, [str(a) for a in args])
    assert out.exit_code == 0, (out.output, out.exception)
    return out


def by_iteration(out_dir) -> dict:
    found = json.loads((out_dir / "rescore.json").read_text())
    assert isinstance(found, list)
    return {r["iteration"]: r for r in found}


@pytest.mark.slow
def test_each_candidate_gets_both_verdicts_and_the_cheat_is_named(tmp_path, quick_evaluations):
    src = heat2d_run(tmp_path / "results", edge_cheat=True)
    out = tmp_path / "imported"
    shown = invoke(src, "--out", out, "--rescore", *QUICK)
    recs = by_iteration(out)
    assert sorted(recs) == [0, 1, 3, 4, 5, 6]  # iteration 2 was skipped: no candidate
    for rec in recs.values():
        assert set(rec) >= {"run", "iteration", "recorded", "mlxsci", "reason"}
        assert rec["run"] == src.name and rec["backend"] == "sim" and rec["sizes"] == "metal-sci"
        assert rec["recorded"] in records.VERDICTS
        assert rec["mlxsci"] in (*records.VERDICTS, None)
    pairs = {it: (r["recorded"], r["mlxsci"]) for it, r in recs.items()}
    assert pairs == {
        0: ("correct", "correct"),
        1: ("correct", "correct"),
        3: ("incorrect", "incorrect"),
        4: ("compile_error", "compile_error"),
        5: ("correct", None),  # its file was missing: nothing to evaluate
        6: ("correct", "incorrect"),  # edges left unwritten: poisoned outputs show it
    }
    assert "missing" in recs[5]["reason"]
    assert "correctness failed" in recs[6]["reason"]
    assert recs[6]["recorded_best"] is True and recs[6]["recorded_score"] == 0.8
    assert recs[1]["mlxsci_score"] is not None and recs[6]["mlxsci_score"] is None
    assert "[6/6]" in shown.output and "DIFFER" in shown.output
    assert "5 evaluated, 4 agree with the recorded verdict, 1 differ, 0 not judged" in shown.output


@pytest.mark.slow
def test_candidates_evaluated_at_once_give_the_same_records_in_import_order(
    tmp_path, quick_evaluations
):
    src = heat2d_run(tmp_path / "results", edge_cheat=True)
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    invoke(src, "--out", serial, "--rescore", *QUICK)
    shown = invoke(src, "--out", parallel, "--rescore", *QUICK[:-1], "3")
    assert "3 candidates at a time" in shown.output
    one = json.loads((serial / "rescore.json").read_text())
    three = json.loads((parallel / "rescore.json").read_text())
    assert [r["iteration"] for r in three] == [r["iteration"] for r in one] == [0, 1, 3, 4, 5, 6]
    assert [(r["recorded"], r["mlxsci"]) for r in three] == [
        (r["recorded"], r["mlxsci"]) for r in one
    ]
    assert all(records.record_trust(r) == records.SIGNED for r in three)


def test_more_than_one_at_once_on_a_gpu_is_refused(tmp_path):
    from mlxsci.import_metal_sci.__main__ import jobs_for

    assert jobs_for("sim", None) >= 1 and jobs_for("sim", 3) == 3
    assert jobs_for("metal", None) == 1
    with pytest.raises(Exception, match="timed against each other"):
        jobs_for("metal", 2)


@pytest.mark.slow
def test_a_killed_rescore_continues_where_it_stopped(tmp_path, quick_evaluations, monkeypatch):
    src = heat2d_run(tmp_path / "results")
    out = tmp_path / "imported"
    invoke(src, "--out", out)
    real = rescore_module.Rescorer.record
    done = []

    def dies_on_the_third(self, item):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(item.entry["iteration"])
        return real(self, item)

    monkeypatch.setattr(rescore_module.Rescorer, "record", dies_on_the_third)
    killed = CliRunner().invoke(main, ["--out", str(out), "--rescore", *QUICK])
    assert killed.exit_code != 0
    assert sorted(by_iteration(out)) == done == [0, 1]
    monkeypatch.setattr(rescore_module.Rescorer, "record", real)
    quick_evaluations.clear()
    again = invoke("--out", out, "--rescore", *QUICK)
    assert "resuming, 2 of 5 already re-scored" in again.output
    recs = json.loads((out / "rescore.json").read_text())
    assert sorted(r["iteration"] for r in recs) == [0, 1, 3, 4, 5]  # none twice
    assert len(quick_evaluations) == 2  # iterations 3 and 4; 5 has no file to evaluate
    invoke("--out", out, "--rescore", *QUICK)
    assert len(json.loads((out / "rescore.json").read_text())) == 5


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_rescore_file_that_is_not_records_is_set_aside(tmp_path, quick_evaluations):
    src = write_run(tmp_path / "results", "heat2d", metal_sci_source("heat2d"), [])
    out = tmp_path / "imported"
    invoke(src, "--out", out)
    (out / "rescore.json").write_text('{"forged": true}')
    shown = invoke("--out", out, "--rescore", *QUICK)
    assert "it was not a list of records: moved to rescore.json.untrusted-" in shown.output
    (aside,) = out.glob("rescore.json.untrusted-*")
    assert aside.read_text() == '{"forged": true}'
    assert sorted(by_iteration(out)) == [0]


@pytest.mark.slow
def test_an_edited_record_is_made_again(tmp_path, quick_evaluations):
    """A cheat's record edited from incorrect to correct after the re-score:
    its signature no longer matches, so the next re-score sets the file aside
    and evaluates the cheat again instead of resuming past it."""
    src = heat2d_run(tmp_path / "results", edge_cheat=True)
    out = tmp_path / "imported"
    invoke(src, "--out", out, "--rescore", *QUICK)
    recs = json.loads((out / "rescore.json").read_text())
    assert all(records.record_trust(r) == records.SIGNED for r in recs)
    cheat = next(r for r in recs if r["iteration"] == 6)
    cheat["mlxsci"] = "correct"
    assert records.record_trust(cheat) == records.FORGED
    (out / "rescore.json").write_text(json.dumps(recs))
    quick_evaluations.clear()
    shown = invoke("--out", out, "--rescore", *QUICK)
    assert "1 of its 6 record(s) were not signed by this machine" in shown.output
    assert [Path(f).name for f in quick_evaluations] == ["06_candidate.metal"]
    assert by_iteration(out)[6]["mlxsci"] == "incorrect"


@pytest.mark.slow
def test_an_in_place_run_rescores_correct(tmp_path, quick_evaluations):
    seed = metal_sci_source("ising")
    src = write_run(tmp_path / "results", "ising", seed, [Iteration(seed, result(score=0.1))])
    out = tmp_path / "imported"
    invoke(src, "--out", out, "--rescore", *QUICK)
    recs = by_iteration(out)
    assert recs[0]["mlxsci"] == recs[1]["mlxsci"] == "correct", recs


@pytest.mark.slow
def test_the_recorded_best_is_taken_to_the_held_out_and_graded(tmp_path, quick_evaluations):
    seed = metal_sci_source("saxpy")
    renamed = seed.replace("kernel void saxpy", "kernel void saxpy")  # same kernel, own copy
    src = write_run(tmp_path / "results", "saxpy", seed, [Iteration(renamed, result(score=0.9))])
    out = tmp_path / "imported"
    invoke(src, "--out", out, "--rescore", "--backend", "sim", "--held-out", "metal-sci",
           "--no-in-dist")  # fmt: skip
    best = by_iteration(out)[1]
    assert best["recorded_best"] is True and best["mlxsci"] == "correct"
    assert best["held_out"]["mlxsci"] == "correct" and best["held_out"]["label"]
    assert_beside_seed(best["held_out"], "phi")
    assert "in_dist" not in best
    assert best["transfer"]["grade"] == "no-win"  # the seed against itself wins nothing


def assert_beside_seed(block: dict, figure: str) -> None:
    """The recorded best's block beside its seed's: the same kernel, so
    about no speedup."""
    assert block["mlxsci"] == "correct" and block[figure] > 0 and block[f"seed_{figure}"] > 0
    assert block["speedup"] == pytest.approx(block[figure] / block[f"seed_{figure}"])
    assert 0.8 < block["speedup"] < 1.25


@pytest.mark.slow
def test_the_recorded_best_and_its_seed_at_the_in_distribution_sizes(tmp_path, quick_evaluations):
    """Where Metal-Sci recorded its speedup: the best and the seed at the
    task's in-distribution sizes (gradshaf: seconds on the simulator); the
    seed's evaluations are made once however many places ask."""
    seed = metal_sci_source("gradshaf")
    src = write_run(tmp_path / "results", "gradshaf", seed, [Iteration(seed, result(score=0.9))])
    out = tmp_path / "imported"
    invoke(src, "--out", out, "--rescore", "--backend", "sim", "--held-out", "metal-sci",
           "--no-transfer")  # fmt: skip
    best = by_iteration(out)[1]
    assert_beside_seed(best["in_dist"], "score")
    assert_beside_seed(best["held_out"], "phi")
    seed_file = str(out / src.name / "00_seed.metal")
    # the seed: smoke (its own record), in-dist and held-out once each
    assert quick_evaluations.count(seed_file) == 3


def test_a_folder_without_imports_is_a_usage_error(tmp_path):
    (tmp_path / "empty").mkdir()
    usage_error(main, ["--out", tmp_path / "empty", "--rescore", *QUICK], "holds no imported run")


def test_a_backend_that_runs_no_metal_is_a_usage_error(tmp_path, monkeypatch):
    from mlxsci.import_metal_sci import __main__ as command

    src = write_run(tmp_path / "results", "heat2d", metal_sci_source("heat2d"), [])
    invoke(src, "--out", tmp_path / "imported")
    monkeypatch.setattr(command, "check_backend", lambda name: "cuda")  # as on an NVIDIA machine
    usage_error(
        main, ["--out", tmp_path / "imported", "--rescore", "--backend", "cuda"], "Metal sources"
    )
    assert not (tmp_path / "imported" / "rescore.json").exists()


def test_metal_sci_sizes_are_the_first_in_dist_and_a_recorded_failures_own():
    from mlxsci.import_metal_sci.rescore import METAL_SCI_SIZES, recorded_size, verdict_sizes
    from mlxsci.task import load_task

    fft3d, hmc, lj = load_task("fft3d"), load_task("hmc"), load_task("lj")
    first = [s.label for s in verdict_sizes(fft3d, METAL_SCI_SIZES)]
    assert first == [fft3d.size_set("in-dist")[0].label]
    # Metal-Sci's labels name its sizes by their numbers, in its own words
    failed = "correctness failed at size 64cube: max_abs=nan"
    assert [s.params["N"] for s in verdict_sizes(fft3d, METAL_SCI_SIZES, failed)] == [32, 64]
    at_last = verdict_sizes(hmc, METAL_SCI_SIZES, "correctness failed at size d32_K1024: x")
    assert [(s.params["d"], s.params["K"]) for s in at_last] == [(8, 16384), (32, 1024)]
    lj_first = verdict_sizes(lj, METAL_SCI_SIZES, "failed at size N1728_M5_steps20: y")
    assert len(lj_first) == 1  # the first size already
    # a size no in-dist size fits, or one several fit, names none
    in_dist = list(fft3d.size_set("in-dist"))
    assert recorded_size(in_dist, "failed at size 48cube: z") is None
    assert recorded_size(in_dist, "failed at size big: z") is None
    assert recorded_size(in_dist, None) is None
    # other size sets are the task's own
    assert verdict_sizes(fft3d, "smoke", failed) == list(fft3d.size_set("smoke"))


def test_a_bests_extras_take_one_timed_run_and_its_verdict_the_full_protocol(tmp_path, monkeypatch):
    """On the simulator a recorded best and its seed beyond the verdict's sizes
    (in-dist, held-out) are timed once (--extra-timed-runs, default 1 there);
    the verdict's own evaluation keeps the backend's protocol."""
    from mlxsci.import_metal_sci.rescore import (
        Rescorer,
        Settings,
        default_extra_timed_runs,
        plan,
    )

    src = heat2d_run(tmp_path / "results")
    out = tmp_path / "imported"
    invoke(src, "--out", out)
    calls = []

    class Judged:
        correct = compile_ok = True
        score, fail_reason, not_judged = 0.5, None, None

        def to_json(self):
            return {"candidate": {"compile_ok": True, "correct": True, "fail_reason": None,
                                  "not_judged": None, "score": 0.5, "phi": 0.5}}  # fmt: skip

    def fake(task, source, **kw):
        calls.append(([s.label for s in kw["sizes"]], kw["n_measure"]))
        return Judged()

    monkeypatch.setattr(rescore_module, "evaluate", fake)
    assert default_extra_timed_runs("sim") == 1
    settings = Settings("sim", "metal-sci", "metal-sci", False, sim_gpu="apple-m1-pro",
                        extra_timed_runs=default_extra_timed_runs("sim"))  # fmt: skip
    best = next(i for i in plan(out) if i.recorded_best)
    rec = Rescorer(settings).record(best)
    assert rec["in_dist"]["speedup"] == 1.0 and rec["extra_timed_runs"] == 1
    first, *extras = calls
    assert first == (["256x256x50"], None)  # the verdict, at Metal-Sci's first size
    in_dist = ["256x256x50", "512x512x100", "1024x1024x50"]
    assert (in_dist, 1) in extras and (["768x768x75"], 1) in extras
    assert all(n == 1 for _, n in extras) and len(extras) == 4  # best and seed, two places


def test_recorded_bests_start_first_when_candidates_run_at_once():
    from mlxsci.import_metal_sci.rescore import Item, longest_first

    items = [Item("r", Path("."), "heat2d", {"iteration": k}, k in (2, 5), None) for k in range(7)]
    assert [i.entry["iteration"] for i in longest_first(items)] == [2, 5, 0, 1, 3, 4, 6]
