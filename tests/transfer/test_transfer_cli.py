"""`python -m mlxsci.transfer`'s bad input: one line, exit 2, no traceback,
before anything is evaluated."""

import pytest
from helpers import usage_error

from mlxsci.transfer.__main__ import main

CANDIDATES = "tests/transfer/candidates"


def test_an_unknown_task(tmp_path):
    usage_error(main, ["nosuchtask", f"{CANDIDATES}/heat2d_transfers.metal"], "nosuchtask")


def test_a_missing_candidate_file(tmp_path):
    usage_error(main, ["heat2d", tmp_path / "gone.metal", "--backend", "sim"], "gone.metal")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("u_out[0] = 0.0f;\n", "code before"),
        ("//! kernel not_heat_step\nu_out[0] = 0.0f;\n", "not_heat_step"),
        ("//! kernel heat_step\n/* never closed\n", "unterminated"),
        ("", "empty"),
    ],
)
def test_a_candidate_that_cannot_run(tmp_path, text, needle):
    path = tmp_path / "bad.metal"
    path.write_text(text)
    usage_error(main, ["heat2d", path, "--backend", "sim"], "CANDIDATE", needle)


def test_a_baseline_that_cannot_run(tmp_path):
    path = tmp_path / "base.cu"
    path.write_text("//! kernel heat_step\nint x = ;;\n??/\n")
    args = ["heat2d", f"{CANDIDATES}/heat2d_transfers.cu", "--baseline", path, "--backend", "sim"]
    usage_error(main, args, "--baseline", "trigraph")


def test_a_dialect_the_backend_cannot_run():
    args = [
        "heat2d",
        f"{CANDIDATES}/heat2d_transfers.metal",
        "--backend",
        "sim",
        "--timer",
        "cupti",
    ]
    usage_error(main, args, "--timer")
