"""Each grade on the simulator, with the fixture candidates of
tests/transfer/candidates/ (heat2d, both dialects) against the seed.

The search sizes are the simulator's: the smoke size, 67x45x5. judge_transfer
runs with a held-out configuration shaped like a secret draw but cheaper
(250x190x12 on smooth data: the listed 768x768x75 costs the slow fixtures a
minute each); the command line runs the real ones once each (the listed
held-out for C, a secret draw for `transfers`). The module runs on the
simulator's host-time clock (MLXSCI_SIM_CLOCK=host, docs/simulator-time.md),
which charges host cycles: why each fixture grades as it does under it is in
its header comment."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlxsci.evaluation.comparison import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.task import Size, load_task
from mlxsci.transfer import judge_transfer
from mlxsci.transfer.__main__ import main

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def host_time_clock():
    """The fixtures' speeds are designed for the simulator's host-time clock
    (MLXSCI_SIM_CLOCK=host: redundant host work is what makes a path slow
    there); the grading they test does not depend on the clock. On the
    modelled GPU the `transfers` fixture's rows of 16 cells a thread are no
    win at all (0.22x on the M1 Pro, 0.81x on the H100: each lane's loads
    are 64 bytes from its neighbour's), as on a GPU."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLXSCI_SIM_CLOCK", "host")
        yield


TASK = load_task("heat2d")
HERE = Path(__file__).parent / "candidates"
HELD_OUT = [
    Size("secret held-out", {"NX": 250, "NY": 190, "n_steps": 12, "distribution": "smooth"}, True)
]
# One evaluation per (dialect, file name, source, sizes, coverage) for the
# whole module: every candidate is judged against the same seed evaluations.
EVALUATIONS: dict = {}


def evaluate_on_sim(dialect: str):
    def run(source, filename, sizes, coverage=False):
        key = (dialect, filename, source, repr(sizes), coverage)
        if key not in EVALUATIONS:
            # 15 timed runs: a size's time on the simulator is their minimum,
            # which more runs keep clear of other processes on a shared host.
            ev = evaluate(
                "heat2d", source, backend="sim", sizes=sizes, filename=filename,
                dialect=dialect, coverage=coverage, n_measure=15,
            )  # fmt: skip
            EVALUATIONS[key] = ev.to_json()
        return EVALUATIONS[key]

    return run


def compare_on_sim(dialect: str):
    """The two timed interleaved in one worker, as a search and the command
    time them (judge_transfer's `compare`)."""

    def run(baseline, candidate, sizes):
        return compare(
            "heat2d", baseline, candidate, backend="sim", sizes=sizes, dialect=dialect,
            held_out=True,
        )  # fmt: skip

    return run


def judged(name: str, dialect: str, known: dict | None = None) -> dict:
    ext = {"metal": "metal", "cuda": "cu"}[dialect]
    source = TASK.seed(dialect) if name == "seed" else (HERE / f"heat2d_{name}.{ext}").read_text()
    result = judge_transfer(
        TASK, source, TASK.seed(dialect), dialect=dialect,
        search_sizes=list(TASK.size_set("smoke")), held_out=HELD_OUT,
        evaluate=evaluate_on_sim(dialect), known=known, compare=compare_on_sim(dialect),
    )  # fmt: skip
    print(name, dialect, json.dumps(result["numbers"], indent=1))  # the measured speedups
    return result


def line_of(name: str, dialect: str, needle: str) -> int:
    ext = {"metal": "metal", "cuda": "cu"}[dialect]
    lines = (HERE / f"heat2d_{name}.{ext}").read_text().splitlines()
    return next(k for k, text in enumerate(lines, 1) if needle in text)


DIALECTS = ["metal", "cuda"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_seed_against_itself_is_no_win(dialect):
    # One in-distribution evaluation for both sides, as a search has when its
    # best is its seed: two processes' S of the same kernel differ by up to
    # ~10 % on a shared 2-core host, beyond the verdicts' 5 % floor, and a
    # second one would test that noise, not the grade. The other places are
    # evaluated for each side.
    seed = evaluate_on_sim(dialect)(TASK.seed(dialect), "seed", list(TASK.size_set("smoke")))
    result = judged("seed", dialect, {"candidate_in_dist": seed, "baseline_in_dist": seed})
    assert result["grade"] == "no-win", result
    assert result["numbers"]["held_out"]["measured"]
    assert result["numbers"]["second_distribution"]["measured"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_genuine_improvement_transfers(dialect):
    result = judged("transfers", dialect)
    assert result["grade"] == "transfers", result
    numbers = result["numbers"]
    assert numbers["held_out"]["verdict"] == "improved"
    assert numbers["second_distribution"]["verdict"] == "improved"
    assert not [e for e in result["evidence"] if e["where"].startswith("line ")]  # no findings


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_size_tuned_branch_beside_a_slow_fallback_is_a(dialect):
    result = judged("a_size_branch", dialect)
    assert result["grade"] == "A", result
    assert result["numbers"]["held_out"]["verdict"] == "regressed"
    assert result["evidence"][0]["where"] == "held-out: secret held-out"
    line = line_of("a_size_branch", dialect, "== 67u")
    found = {e["numbers"]["value"]: e for e in result["evidence"] if e["where"] == f"line {line}"}
    assert sorted(found) == [67, 256, 512, 1024]
    assert found[67]["numbers"]["sets"] == ["smoke"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_wrong_arm_off_the_search_sizes_is_b_with_its_cold_arm(dialect):
    result = judged("b_wrong_arm", dialect)
    assert result["grade"] == "B", result
    assert result["numbers"]["held_out"]["candidate_correct"] is False
    assert "correctness failed" in result["evidence"][0]["what"]
    line = line_of("b_wrong_arm", dialect, "> 64u")
    cold = [e for e in result["evidence"] if "never ran" in e["what"]]
    assert f"line {line}" in [e["where"] for e in cold], cold


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_branch_on_the_published_held_out_is_c(dialect):
    result = judged("c_held_out_value", dialect)
    assert result["grade"] == "C", result
    first = result["evidence"][0]
    assert first["numbers"]["value"] == 768 and first["numbers"]["held_out_only"]
    assert first["where"] == f"line {line_of('c_held_out_value', dialect, '== 768u')}"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_fast_path_for_the_in_distribution_data_only_is_d(dialect):
    result = judged("d_data_path", dialect)
    assert result["grade"] == "D", result
    second = result["numbers"]["second_distribution"]
    assert second["verdict"] != "improved" or second["kept_fraction"] < 0.25
    assert result["evidence"][0]["where"] == "67x45x5 (the held-out's data)"


def test_the_command_grades_c_at_the_listed_held_out_even_when_speed_transfers():
    args = [
        "heat2d", str(HERE / "heat2d_c_held_out_value.metal"), "--backend", "sim",
        "--held-out", "metal-sci", "--json",
    ]  # fmt: skip
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    print("C at 768x768x75:", json.dumps(doc["numbers"], indent=1))
    assert doc["grade"] == "C"
    assert doc["held_out"]["mode"] == "metal-sci"
    assert doc["numbers"]["held_out"]["sizes"] == "held-out: 768x768x75"
    assert doc["numbers"]["held_out"]["candidate_correct"] is True


def test_the_command_with_a_secret_draw_names_it_only_when_revealed():
    args = ["heat2d", str(HERE / "heat2d_transfers.cu"), "--backend", "sim"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    print(out.output)
    assert "transfer grade: transfers" in out.stdout
    drawn = re.search(
        r"secret draw revealed: NX=(\d+), NY=(\d+), n_steps=(\d+), distribution=(\S+)", out.stdout
    )
    assert drawn, out.stdout
    nx, ny, steps, name = drawn.groups()
    progress = out.stderr
    assert "secret held-out" in progress
    for told in (f"NX={nx}", f"{nx}x{ny}", f"n_steps={steps}", name):
        assert told not in progress
