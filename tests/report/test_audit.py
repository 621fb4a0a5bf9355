"""The audit tables of imported runs (mlxsci/report/audit.py) on constructed
re-score records: pass/fail agreement with signature-only Metal errors
apart, a one-line cause per disagreement, Metal-Sci's table beside the
modelled one with a note beyond the model's stated uncertainty, the plot."""

import pytest

from mlxsci.report.audit import (
    MODEL_FACTOR,
    agreement_table,
    cause,
    metal_sci_table,
    write_audit_plot,
)


def rec(recorded, mlxsci, task="heat2d", reason="", **extra):
    run = {"task": task, "model": "m", "recorded": extra.pop("run_recorded", {})}
    return {"run": f"{task}_m_1", "iteration": 1, "recorded": recorded, "mlxsci": mlxsci,
            "reason": reason, "sizes": "smoke", "_run": run, **extra}  # fmt: skip


def test_agreement_is_pass_or_fail_with_signature_errors_apart():
    records = [
        rec("correct", "correct"),
        rec("incorrect", "runtime_error"),  # both fail: agree
        rec("correct", "incorrect"),
        rec("compile_error", "correct", recorded_signature_error="expected ')'"),
        rec("correct", "not_judged"),  # the machine stopped it: not judged by both
        rec("correct", None),  # not evaluated
        rec("correct", "correct", task="saxpy"),
    ]
    rows = {r["task"]: r for r in agreement_table(records)}
    heat = rows["heat2d"]
    assert (heat["judged by both"], heat["signature error (apart)"], heat["compared"]) == (4, 1, 3)
    assert (heat["agree"], heat["disagree"]) == (2, 1)
    assert rows["all tasks"]["agreement"] == pytest.approx(3 / 4)


@pytest.mark.parametrize(
    "record, expected",
    [
        (
            rec("compile_error", "correct", recorded_signature_error="expected ')'"),
            "Metal's only error lies in the kernel's signature, which MLX writes: expected ')'",
        ),
        (
            rec("correct", "incorrect", task="adi3d",
                reason="correctness failed at size 21x13x10x3: unwritten output: 676 element(s)"),
            "leaves output elements unwritten (Metal-Sci's host buffers held them",
        ),
        (
            rec("correct", "runtime_error", task="adi3d",
                reason="runtime error at size 21x13x10x3: misaligned: float4 read"),
            "at mlxsci's smoke size 21x13x10x3, which Metal-Sci never ran",
        ),
        (
            rec("correct", "incorrect", task="adi3d",
                reason="correctness failed at size 64x64x64x20: max_abs=0.3"),
            "at 64x64x64x20, one of Metal-Sci's sizes",
        ),
        (
            rec("incorrect", "correct", task="fft3d",
                reason="mlxsci: correct; recorded: correctness failed at size 64cube: nan"),
            "Metal-Sci failed at its size 64cube; mlxsci ran its smoke sizes",
        ),
        (
            rec("incorrect", "correct", task="fft3d", sizes="metal-sci",
                reason="mlxsci: correct; recorded: correctness failed at size 64cube: nan"),
            "mlxsci ran Metal-Sci's failing size 64cube (64) and found the kernel correct",
        ),
        (
            rec("correct", "incorrect", task="adi3d", sizes="metal-sci",
                reason="correctness failed at size 64x64x64x20: unwritten output: 676 element(s)"),
            "unwritten (Metal-Sci's host buffers held them; mlxsci's start poisoned), at "
            "64x64x64x20, one of Metal-Sci's sizes",
        ),
        (
            rec("correct", "incorrect", task="gradshaf", sizes="metal-sci",
                reason="correctness failed at size 65x65x30: max_abs=inf; the kernel read values "
                "the language leaves undefined: simd_shuffle_down read lane 1, not active"),
            "reads what Metal leaves undefined (the M1 happened to give a usable value), at "
            "65x65x30",
        ),
        (
            rec("compile_error", "correct", task="ising",
                reason="recorded: compile error: program_source:63:29: error: C-style cast from "
                "'const device float *' to 'const constant float *' converts between mismatching "
                "address spaces"),
            "MLX's signature sets (an input of fewer than 8 elements is constant)",
        ),
        (
            rec("compile_error", "correct",
                reason="recorded: compile error: program_source:3:1: error: lambda expressions "
                "are not supported in Metal"),
            "Metal's compiler refused what mlxsci's accepts: lambda expressions are not",
        ),
    ],
)  # fmt: skip
def test_each_disagreement_has_a_cause(record, expected):
    said = cause(record)
    assert expected in said and "\n" not in said


def best(speedup_in, speedup_held, recorded_in, recorded_held, verdict="correct"):
    return rec(
        "correct", "correct", recorded_best=True,
        in_dist={"mlxsci": verdict, "speedup": speedup_in, "reason": "max_abs=3"},
        held_out={"mlxsci": "correct", "speedup": speedup_held},
        transfer={"grade": "transfers"},
        run_recorded={"improvement": recorded_in, "held_out": {"ratio": recorded_held}},
    )  # fmt: skip


def test_the_table_notes_only_what_lies_beyond_the_models_uncertainty():
    close = best(1.5, 1.2, 1.3, 1.1)
    far = best(1.0, 1.0, 2.95 * MODEL_FACTOR, 0.23)
    wrong = best(None, 1.0, 2.0, 1.0, verdict="incorrect")
    rows = metal_sci_table([close, far, wrong])
    assert [r["note"] is None for r in rows] == [True, False, False]
    assert "in-dist: modelled 1x against recorded 5.9x" in rows[1]["note"]
    assert "held-out: modelled 1x against recorded 0.23x" in rows[1]["note"]
    assert "mlxsci judged the best incorrect" in rows[2]["note"]
    assert rows[0]["recorded in-dist x"] == pytest.approx(1.3)
    assert rows[0]["modelled held-out x"] == pytest.approx(1.2)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_the_plot_sets_recorded_beside_modelled(tmp_path):
    rows = metal_sci_table([best(1.5, 1.2, 1.3, 1.1), best(3.0, 1.0, 2.0, 1.0)])
    paths = write_audit_plot(rows, tmp_path / "plots")
    assert [p.name for p in paths] == ["audit_speedups.png", "audit_speedups.svg"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert write_audit_plot([], tmp_path / "none") == []
