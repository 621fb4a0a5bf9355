"""bench/time_model_validation.py's figures and set split, on made-up data
only (the bench itself needs a copy of Metal-Sci's repository, which no test
may depend on): Spearman with ties and where it is undefined, the pairs the
M1 separates by 15%, the share within 2x, which recorded size label is the
first in-distribution size, the calibration/validation split by run name,
and bad paths refused with exit status 2."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import time_model_stats as stats  # noqa: E402
import time_model_validation as bench  # noqa: E402

from mlxsci.task import load_task  # noqa: E402

# --- Spearman -----------------------------------------------------------------------


def test_spearman_of_the_same_and_the_reversed_order():
    assert stats.spearman([1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert stats.spearman([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)


def test_spearman_gives_ties_their_mean_rank():
    # modelled ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4): by hand,
    # sum dx*dy = 4.5, sum dx^2 = 5, sum dy^2 = 4.5 -> 4.5 / sqrt(22.5)
    rho = stats.spearman([1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 7.0, 9.0])
    assert rho == pytest.approx(4.5 / math.sqrt(22.5))


@pytest.mark.parametrize(
    "recorded, modelled",
    [([], []), ([1.0], [2.0]), ([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]), ([2.0, 2.0], [1.0, 3.0])],
    ids=["none", "one", "modelled all equal", "recorded all equal"],
)
def test_spearman_is_none_where_undefined(recorded, modelled):
    assert stats.spearman(recorded, modelled) is None


# --- pairwise agreement -------------------------------------------------------------


def test_pairs_at_15_percent_count_and_closer_ones_do_not():
    assert stats.separated(1.0, 1.15) and stats.separated(2.3, 2.0)
    assert stats.separated(1e-4, 1.15e-4)
    assert not stats.separated(1.0, 1.14) and not stats.separated(1.0, 1.0)
    # 1.0-1.14 is too close; 1.0-1.15 and 1.14-1.15*1.14 count
    assert stats.pairwise_agreement([1.0, 1.14], [1.0, 2.0]) == (0, 0)
    assert stats.pairwise_agreement([1.0, 1.15], [1.0, 2.0]) == (1, 1)
    assert stats.pairwise_agreement([1.0, 1.15], [2.0, 1.0]) == (0, 1)


def test_pairwise_agreement_counts_each_separated_pair_once():
    recorded = [1.0, 2.0, 4.0, 4.1]  # 4.0-4.1 is under 15 % apart: 5 pairs count
    modelled = [1.0, 3.0, 2.0, 0.5]  # in order: (1,2), (1,4.0); not (2,4.0), (1,4.1), (2,4.1)
    assert stats.pairwise_agreement(recorded, modelled) == (2, 5)


def test_a_modelled_tie_is_not_the_recorded_order():
    assert stats.pairwise_agreement([1.0, 2.0], [3.0, 3.0]) == (0, 1)


def test_fewer_than_two_pairs():
    assert stats.pairwise_agreement([], []) == (0, 0)
    assert stats.pairwise_agreement([1.0], [1.0]) == (0, 0)
    assert stats.share(0, 0) is None


# --- within 2x ----------------------------------------------------------------------


def test_within_2x_counts_both_ways_and_the_bounds():
    recorded = [1.0, 1.0, 1.0, 1.0, 1.0]
    modelled = [2.0, 0.5, 2.01, 0.49, 1.0]
    assert stats.within_factor(recorded, modelled) == pytest.approx(3 / 5)
    assert stats.within_factor([], []) is None


# --- a task's figures ---------------------------------------------------------------


def test_too_few_candidates_get_no_figures():
    f = stats.task_figures([1.0] * 7, [1.0] * 7)
    assert f["n"] == 7 and f["too_few"] and "spearman" not in f
    row = stats.table_row("saxpy", "1M", f, failed=2)
    assert "too few (< 8)" in row and row.count("|") == 11


def test_figures_and_the_targets_they_miss():
    recorded = [float(k) for k in range(1, 9)]
    perfect = stats.task_figures(recorded, [r * 1.5 for r in recorded])
    assert perfect["spearman"] == pytest.approx(1.0)
    assert perfect["pairwise"] == 1.0 and perfect["within_2x"] == 1.0
    assert perfect["missed"] == [] and perfect["median_ratio"] == pytest.approx(1.5)
    reversed_far = stats.task_figures(recorded, [10.0 / r for r in recorded])
    assert reversed_far["missed"] == ["spearman", "pairwise", "within_2x"]
    assert "spearman, pairwise, within_2x" in stats.table_row("t", "s", reversed_far, 0)


# --- recorded size labels -----------------------------------------------------------


@pytest.mark.parametrize(
    "task, label, first",
    [
        ("saxpy", "1M", True),
        ("saxpy", "16M", False),
        ("nbody", "256_10", True),
        ("nbody", "1024_10", False),
        ("heat2d", "256x256_50", True),
        ("heat2d", "512x512_100", False),
        ("fft3d", "32cube", True),
        ("hmc", "d8_K16384", True),
        ("lj", "N1728_M5_steps20", True),
        ("lj", "N4096_M7_steps15", False),
        ("saxpy", "big", False),
    ],
)
def test_a_recorded_label_is_the_first_in_dist_size_only_when_its_numbers_are(task, label, first):
    size = load_task(task).size_set("in-dist")[0]
    assert stats.same_size(label, size.params) is first


def test_label_numbers_scale_a_binary_suffix_only():
    assert stats.label_numbers("1M") == [1 << 20]
    assert stats.label_numbers("d8_K16384") == [8.0, 16384.0]
    assert stats.label_numbers("2Mcube") == [2.0]  # a letter follows: no suffix


# --- the calibration / validation split ---------------------------------------------

CALIBRATION = ["heat2d_claude-opus-4-7_20260101_000000", "lbm_claude-sonnet-4-6_20260101_000001"]
VALIDATION = [
    "heat2d_gemini-3.1-pro-preview_20260101_000002",
    "saxpy_gpt-5.5_20260101_000003",
]
NEITHER = ["hmc_lever1_manual_20260101_000004", "nbody_claude-x_gpt-5_20260101_000005"]


def fake_results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    for name in CALIBRATION + VALIDATION + NEITHER + ["_run_logs", "_smoke_gpt-5"]:
        (results / name).mkdir(parents=True)
    (results / "saxpy_claude-opus-4-7_20260101_000006").write_text("a file, no run")
    (results / "wave3d_claude-opus-4-7_20260101_000007").symlink_to(results / VALIDATION[0])
    return results


def test_runs_split_by_name_and_nothing_else(tmp_path):
    results = fake_results(tmp_path)
    cal, neither = stats.split_runs(results, "calibration")
    val, _ = stats.split_runs(results, "validation")
    assert [p.name for p in cal] == CALIBRATION
    assert [p.name for p in val] == VALIDATION
    assert neither == NEITHER  # a name of both sets is in neither
    assert not {p.name for p in cal} & {p.name for p in val}
    with pytest.raises(ValueError):
        stats.split_runs(results, "everything")


def test_a_run_name_gives_its_set_and_task():
    assert stats.set_of("saxpy_claude-opus-4-7_20260101_000000") == "calibration"
    assert stats.set_of("saxpy_gemini-2.5-flash_20260101_000000") == "validation"
    assert stats.set_of("saxpy_gpt55_20260101_000000") is None
    assert stats.task_of_run("lbm_claude-opus-4-7_20260101_000000") == "lbm"


# --- bad input ----------------------------------------------------------------------


def exit_status(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as stop:
        bench.main(argv)
    return stop.value.code


def test_a_path_that_is_not_a_metal_sci_checkout_exits_2(tmp_path, capsys):
    assert exit_status([str(tmp_path / "missing")]) == 2
    assert "is not a Metal-Sci checkout" in capsys.readouterr().err
    assert exit_status([str(tmp_path)]) == 2
    assert exit_status([str(tmp_path), "--tasks", "saxpy,nosuchtask"]) == 2
    assert exit_status([str(tmp_path), "--jobs", "0"]) == 2


def test_a_checkout_without_runs_of_the_set_exits_2(tmp_path, capsys):
    results = tmp_path / "results"
    (results / "saxpy_gpt-5.5_20260101_000000").mkdir(parents=True)
    out = tmp_path / "out.md"
    assert bench.main([str(tmp_path), "--imports", str(tmp_path / "i"), "--out", str(out)]) == 2
    assert "no run of the calibration set" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "i").exists()
