"""`python -m mlxsci.eval` as a user runs it."""

import json
import subprocess
import sys

import pytest


def run(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "mlxsci.eval", *args],
        text=True,
        capture_output=True,
        timeout=timeout,
    )


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_json_output_for_a_user_given_size():
    proc = run(
        "heat2d", "--backend", "sim", "--size", "NX=67,NY=45,n_steps=4", "--json", "--measure", "1"
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["task"] == "heat2d" and data["backend"] == "sim"
    assert data["candidate"]["correct"] is True
    (size,) = data["sizes"]
    assert size["label"] == "NX=67,NY=45,n_steps=4" and size["correct"]


@pytest.mark.slow
def test_human_table_and_failing_candidate_still_exit_zero(tmp_path):
    bad = tmp_path / "bad.metal"
    bad.write_text(
        "//! kernel saxpy\nuint i = thread_position_in_grid.x;\nif (i < N) y_out[i] = 0.0f;\n"
    )
    proc = run("saxpy", "--backend", "sim", "--source", str(bad), "--measure", "1")
    assert proc.returncode == 0, proc.stderr
    assert "FAIL" in proc.stdout and "fail_reason: correctness failed" in proc.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["heat2d", "--size", "NX=0"], "NX and NY must be >= 1"),
        (["heat2d", "--size", "NZ=4"], "unknown size parameter"),
        (["heat2d", "--size", "NX=abc"], "must be int"),
        (["heat2d", "--size", "NX"], "expected KEY=VALUE"),
        (["saxpy", "--param", "VEC=4"], "no param 'VEC'"),
        (["nosuchtask"], "neither a built-in task"),
        (["saxpy", "--source", "/nonexistent.metal"], "does not exist"),
        (["saxpy", "--backend", "metal"], "not available"),
    ],
)
def test_usage_errors_exit_2(args, needle):
    if "--backend" in args:
        from mlxsci.backends import backend_class

        if backend_class(args[args.index("--backend") + 1]).available():
            pytest.skip("this machine has that backend")
    proc = run(*args, timeout=60)
    assert proc.returncode == 2
    assert needle in proc.stderr
