"""`//! inplace OUT = IN`: an output that starts as a copy of an input, so a
body reads and writes one buffer as a Metal-Sci kernel does
(mlxsci/kernel/in_place.py). Parsed, rendered, checked against the task's
contract, and run: every form of pointer use works, unwritten elements keep
the input's values, the task's input is never written, and the copy is left
out of the time."""

from pathlib import Path

import pytest
from helpers import replace_once, smoke_eval

from mlxsci.evaluation.checks import misfit
from mlxsci.kernel import in_place
from mlxsci.kernel.candidate import CandidateError, parse, render, to_kernel_spec
from mlxsci.task import load_task

SEEDS = Path(__file__).resolve().parents[2] / "tasks"

# saxpy through a pointer kept and walked, written through `*p`: the forms
# the importer could not split into reads and writes.
SAXPY_POINTER_WALK = """\
//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
//! inplace y_out = y
uint i = thread_position_in_grid.x;
if (i >= N) return;
device float* p = y_out + i;
*p += a * x[i];
"""


def ising_kept_row() -> str:
    """The ising seed made in place: inactive sites are left alone (they keep
    the input's spin), and the active ones flip through a row pointer kept
    and reused for the neighbours and the write."""
    seed = (SEEDS / "ising" / "seed.metal").read_text()
    seed = replace_once(
        seed,
        "//! threadgroup = (16, 16, 1)\n",
        "//! threadgroup = (16, 16, 1)\n//! inplace spins_out = spins\n",
    )
    seed = replace_once(
        seed,
        "    spins_out[idx] = spins[idx];\n    return;",
        "    return;",
    )
    seed = replace_once(
        seed,
        "int h = spins[j * NX + im] + spins[j * NX + ip] + spins[jm * NX + i] + spins[jp * NX + i];",
        "device int8_t* row = spins_out + j * NX;\n"
        "int h = row[im] + row[ip] + spins_out[jm * NX + i] + spins_out[jp * NX + i];",
    )
    return replace_once(
        seed,
        "spins_out[idx] = (u < pa) ? (char)(-s) : (char)s;",
        "row[i] = (u < pa) ? (char)(-s) : (char)s;",
    )


def test_parse_and_render_round_trip():
    c = parse(SAXPY_POINTER_WALK)
    k = c.kernel("saxpy")
    assert k.in_place == (("y_out", "y"),)
    assert k.in_place_line == 4 and k.body_line == 5
    assert render(c) == SAXPY_POINTER_WALK


@pytest.mark.parametrize(
    "line, message",
    [
        ("//! inplace y_out", "expected `//! inplace OUTPUT = INPUT`"),
        ("//! inplace y_out = y[0]", "expected `//! inplace OUTPUT = INPUT`"),
    ],
)
def test_bad_directive_names_its_line(line, message):
    text = SAXPY_POINTER_WALK.replace("//! inplace y_out = y", line)
    with pytest.raises(CandidateError, match="bad `//! inplace`") as exc:
        parse(text)
    assert exc.value.line == 4 and message in str(exc.value)


def test_directive_after_the_body_starts_is_an_error():
    text = SAXPY_POINTER_WALK.replace("//! inplace y_out = y\n", "") + "//! inplace y_out = y\n"
    with pytest.raises(CandidateError, match="must come directly after"):
        parse(text)


def test_spec_binds_the_output_to_a_hidden_input_on_the_directive_line():
    task = load_task("saxpy")
    k = task.kernel("saxpy")
    spec = to_kernel_spec(parse(SAXPY_POINTER_WALK), "saxpy", k.inputs, k.outputs)
    assert spec.input_names == ("x", "y", "a", "N", in_place.hidden_input("y_out"))
    # saxpy's only output is bound: MLX wants one, so a one-element one stands in
    assert spec.output_names == (in_place.DONE_OUTPUT,)
    first = spec.source.splitlines()[0]
    assert "device mlxsci_inplace_y_out_t* y_out = " in first
    assert spec.body_line == 4  # the binding maps to the directive, the body keeps its lines


def test_a_pair_the_task_does_not_list_is_refused():
    """heat2d reads u_in and writes u_out: an output that started as the
    input would let a kernel skip the cells it leaves unchanged, which the
    task's own buffers never allowed."""
    heat = (SEEDS / "heat2d" / "seed.metal").read_text()
    kernel_line = heat.splitlines().index("//! kernel heat_step")
    lines = heat.splitlines(keepends=True)
    lines.insert(kernel_line + 1, "//! inplace u_out = u_in\n")
    why = misfit(parse("".join(lines)), load_task("heat2d"), "line ")
    assert why is not None and "`//! inplace u_out = u_in` is not one the task allows" in why


def test_pointer_walk_in_place_is_correct_and_the_copy_is_not_timed():
    result = smoke_eval("saxpy", SAXPY_POINTER_WALK)
    assert result.correct, result.fail_reason
    size = result.sizes[0]
    # the copy ran and is listed, but the size's time is the kernel's alone
    assert set(size.kernels) == {"saxpy", in_place.COPY_KERNEL}
    assert size.seconds == pytest.approx(size.kernels["saxpy"]["seconds"])
    assert "left out of the time" in size.timer_info["in_place_copies"]


def test_kept_row_pointer_and_untouched_sites_keep_their_spins():
    """Inactive sites are never written: they must hold the input's spin,
    which only an output that starts as the input gives."""
    result = smoke_eval("ising", ising_kept_row())
    assert result.correct, result.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_body_that_writes_nothing_leaves_the_input_values_and_fails_the_reference():
    """The output starts as y: a saxpy that skips its work returns y, which
    the reference refuses (and the task's own input y is unchanged)."""
    lazy = replace_once(SAXPY_POINTER_WALK, "*p += a * x[i];", "(void)p;")
    result = smoke_eval("saxpy", lazy)
    assert not result.correct
    assert result.fail_reason.startswith("correctness failed at size")


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_the_tasks_own_input_stays_untouched_and_a_write_to_it_is_caught():
    """The output is bound to a copy: the candidate's writes never reach the
    task's input y. A kernel that casts the const away and writes y itself
    (the cheat the copy must not make legal) is caught by the input checks."""
    honest = smoke_eval("saxpy", SAXPY_POINTER_WALK)
    assert honest.correct and "input_mutated" not in honest.sizes[0].flags
    cheat = replace_once(
        SAXPY_POINTER_WALK, "*p += a * x[i];", "*p += a * x[i];\n((device float*)y)[i] = 0.0f;"
    )
    result = smoke_eval("saxpy", cheat)
    assert not result.correct
    assert "input_mutated" in result.sizes[0].flags and "input mutated: y" in result.fail_reason
