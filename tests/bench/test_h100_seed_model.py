"""bench/h100_seed_model.py on made-up data only (the measured spans live
outside the repository, and no test may depend on them): which size a
measured label names, the two halves of the tasks, the rows planned and
passed over, the summary figures, the table, and a bad spans file refused
with exit status 2. Nothing here runs the simulator."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import h100_seed_model as bench  # noqa: E402

from mlxsci.task import Size, load_task  # noqa: E402

# A made-up task's size sets: the held-out size is labelled its own way.
SIZES = {
    "smoke": (Size("8x8x2", {"NX": 8, "NY": 8, "n_steps": 2}),),
    "in-dist": (
        Size("64x64x10", {"NX": 64, "NY": 64, "n_steps": 10}),
        Size("N128-M4-L9.5x20", {"N": 128, "M": 4, "L": 9.5, "n_steps": 20}),
    ),
    "held-out": (Size("d8_K100_T20", {"d": 8, "K": 100, "T": 20}),),
}


# --- which size a label names --------------------------------------------------------


@pytest.mark.parametrize(
    "label, size, size_set, how",
    [
        ("64x64x10", "64x64x10", "in-dist", "exact"),
        ("N128-M4-L9.5x20", "N128-M4-L9.5x20", "in-dist", "exact"),
        ("d8_K100_T20", "d8_K100_T20", "held-out", "exact"),
        ("D8-k100-t20", "d8_K100_T20", "held-out", "as d8_K100_T20"),
        ("64_64_10", "64x64x10", "in-dist", "as 64x64x10"),
        ("n128_m4_l9.5_20", "N128-M4-L9.5x20", "in-dist", "as N128-M4-L9.5x20"),
    ],
)
def test_a_label_names_its_size_exactly_or_written_differently(label, size, size_set, how):
    found, why = bench.match_size(SIZES, label)
    assert why == "" and found is not None
    assert (found["size"].label, found["set"], found["how"]) == (size, size_set, how)


@pytest.mark.parametrize("label", ["8x8x2", "64x64x11", "d8_K100", "", "64x64x10x1"])
def test_a_label_of_no_measured_size_matches_nothing(label):
    found, why = bench.match_size(SIZES, label)  # the smoke size is never measured
    assert found is None and "no in-distribution or held-out size" in why


def test_two_sizes_the_label_could_name_match_neither():
    sizes = {"in-dist": (Size("64x64", {"N": 64}),), "held-out": (Size("64_64", {"N": 65}),)}
    found, why = bench.match_size(sizes, "64-64")
    assert found is None and "ambiguous" in why
    assert bench.match_size(sizes, "64_64")[0]["set"] == "held-out"  # exact comes first


def test_every_listed_size_of_a_real_task_matches_its_own_label():
    task = load_task("lj")
    for name in bench.MEASURED_SETS:
        for size in task.size_set(name):
            found, _ = bench.match_size(task.sizes, size.label)
            assert found is not None and found["size"] == size and found["set"] == name


# --- the halves ----------------------------------------------------------------------


def test_the_halves_are_disjoint_and_cover_the_tasks():
    cal, val = (set(bench.SPLITS[h]) for h in ("calibration", "validation"))
    assert cal == {"adi3d", "fft3d", "gradshaf", "heat2d", "hmc", "ising"}
    assert val == {"lbm", "lj", "morton", "nbody", "saxpy", "wave3d"}
    assert bench.split_of("heat2d") == "calibration" and bench.split_of("saxpy") == "validation"
    assert bench.split_of("conv1d") == bench.NO_SPLIT


def test_a_split_chooses_its_own_tasks_only():
    known = ["heat2d", "saxpy", "conv1d", "ising"]
    assert bench.tasks_of("calibration", known) == ["heat2d", "ising"]
    assert bench.tasks_of("validation", known) == ["saxpy"]
    assert bench.tasks_of("all", known) == ["conv1d", "heat2d", "ising", "saxpy"]
    with pytest.raises(ValueError):
        bench.tasks_of("everything", known)


def test_a_task_outside_the_split_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        bench.arguments(["--split", "calibration", "--tasks", "heat2d,lbm"])
    assert stop.value.code == 2 and "lbm not in the calibration half" in capsys.readouterr().err
    assert bench.arguments(["--split", "validation", "--tasks", "lbm"]).tasks == ["lbm"]


# --- the plan ------------------------------------------------------------------------

ROWS = [
    {"task": "heat2d", "size": "64x64x10", "span_ms": 2.0, "spread_max_over_min": 1.1},
    {"task": "heat2d", "size": "d8-k100-t20", "span_ms": 4.0},
    {"task": "heat2d", "size": "99x99x9", "span_ms": 1.0},
    {"task": "saxpy", "size": "1M", "span_ms": 0.02},
    {"task": "nosuch", "size": "1M", "span_ms": 0.5},
]
SIZES_OF = {"heat2d": SIZES, "saxpy": {"in-dist": (Size("1M", {"N": 1 << 20}),)}}


def test_the_plan_matches_reports_and_passes_over():
    jobs, unmatched, unmeasured = bench.plan(ROWS, ["heat2d"], SIZES_OF, None)
    assert [(j["size"], j["size_set"], j["matched"]) for j in jobs] == [
        ("64x64x10", "in-dist", "exact"),
        ("d8-k100-t20", "held-out", "as d8_K100_T20"),
    ]
    assert jobs[0]["params"] is SIZES["in-dist"][0] and jobs[0]["span_ms"] == 2.0
    assert jobs[0]["spread"] == 1.1 and jobs[0]["split"] == "calibration"
    # 99x99x9 matches no size; a task mlxsci lacks is reported; saxpy was not chosen
    assert [(u["task"], u["size"]) for u in unmatched] == [("heat2d", "99x99x9"), ("nosuch", "1M")]
    assert "no task 'nosuch'" in unmatched[1]["why"]
    assert unmeasured == ["heat2d N128-M4-L9.5x20 (in-dist)"]


def test_the_plan_keeps_only_the_labels_asked_for():
    jobs, unmatched, unmeasured = bench.plan(ROWS, ["heat2d", "saxpy"], SIZES_OF, {"1M"})
    assert [(j["task"], j["size"], j["split"]) for j in jobs] == [("saxpy", "1M", "validation")]
    assert [u["task"] for u in unmatched] == ["nosuch"] and unmeasured == []


# --- the figures ---------------------------------------------------------------------


def row(task: str, size: str, span_ms: float, modelled: float | None, **kernels) -> dict:
    job = {"task": task, "size": size, "span_ms": span_ms, "split": bench.split_of(task),
           "size_set": "in-dist", "matched": "exact", "params": None, "timeout": None}  # fmt: skip
    result = {"verdict": "correct" if modelled else "incorrect", "modelled": modelled,
              "reason": None if modelled else "wrong answer", "device": "sim",
              "kernels": kernels, "wall_s": 1.0}  # fmt: skip
    return bench.finish(job, result)


def kernel(seconds: float, bound: str) -> dict:
    parts = dict.fromkeys(bench.LAUNCH_PARTS, 1e-6)
    return {"launches": 10, "seconds": seconds, "launch_s": seconds / 10, **parts, "bound": bound}


def test_a_row_has_its_ratio_its_verdict_within_2x_and_its_slowest_kernels_bound():
    r = row("heat2d", "a", 2.0, 1e-3, step=kernel(9e-4, "latency"), copy=kernel(1e-4, "memory"))
    assert r["measured"] == pytest.approx(2e-3) and r["ratio"] == pytest.approx(0.5)
    assert r["within_2x"] is True  # exactly 2x either way is within
    assert (r["slowest"], r["bound"]) == ("step", "latency")
    assert "params" not in r and "timeout" not in r
    assert row("heat2d", "a", 2.0, 4.0e-3)["within_2x"] is True
    assert row("heat2d", "a", 2.0, 4.1e-3)["within_2x"] is False
    assert row("heat2d", "a", 2.0, 0.99e-3)["within_2x"] is False
    failed = row("heat2d", "a", 2.0, None)
    assert failed["ratio"] is None and failed["within_2x"] is None and failed["bound"] is None


def test_the_slowest_kernel_is_by_seconds_per_run_then_per_launch():
    assert bench.slowest({}) is None
    kernels = {"a": {"seconds": 1e-3, "launch_s": 1e-5}, "b": {"seconds": 2e-3, "launch_s": 1e-6}}
    assert bench.slowest(kernels) == "b"
    assert bench.slowest({"a": {"seconds": None, "launch_s": 3e-6},
                          "b": {"seconds": None, "launch_s": 1e-6}}) == "a"  # fmt: skip


def test_kernel_parts_join_the_runs_counts_and_the_launches_parts():
    launches = {"k": {"seconds": 2e-6, "bound": "dispatch", "groups": 4, "dispatch_s": 2e-6,
                      "throughput_s": 1e-7, "latency_s": 1e-7, "memory_s": 0.0, "cache_s": 0.0,
                      "dram_read_sectors": 7}}  # fmt: skip
    parts = bench.kernel_parts({"k": {"launches": 5, "seconds": 1e-5}}, launches)
    assert parts["k"]["launches"] == 5 and parts["k"]["seconds"] == 1e-5
    assert parts["k"]["launch_s"] == 2e-6 and parts["k"]["bound"] == "dispatch"
    assert parts["k"]["groups"] == 4 and "dram_read_sectors" not in parts["k"]


def test_a_half_is_summarised_by_its_rows_within_2x_median_ratio_and_worst_rows():
    rows = [
        row("heat2d", "a", 1.0, 1.5e-3),  # 1.5
        row("heat2d", "b", 1.0, 0.1e-3),  # 0.1: 10x off
        row("ising", "c", 1.0, 5.0e-3),  # 5: 5x off
        row("ising", "d", 1.0, 0.8e-3),  # 0.8
        row("ising", "e", 1.0, None),  # failed
    ]
    s = bench.summarise(rows)
    assert (s["rows"], s["modelled"], s["failed"], s["within_2x"]) == (5, 4, 1, 2)
    assert s["median_ratio"] == pytest.approx((0.8 + 1.5) / 2)
    assert [(w["size"], round(w["ratio"], 6)) for w in s["worst"]] == [
        ("b", 0.1), ("c", 5.0), ("a", 1.5),
    ]  # fmt: skip
    line = bench.summary_line("calibration", s)
    assert "2 of 5 rows within 2x (1 failed on the simulator)" in line
    assert "median modelled / CUPTI 1.15" in line and "heat2d b (0.1)" in line
    empty = bench.summarise([row("ising", "e", 1.0, None)])
    assert empty["median_ratio"] is None and empty["worst"] == []
    assert "median modelled / CUPTI -" in bench.summary_line("x", empty)


def test_summaries_per_half_and_over_both():
    cal = [row("heat2d", "a", 1.0, 1e-3)]
    val = [row("saxpy", "b", 1.0, 3e-3)]
    assert list(bench.summaries(cal)) == ["calibration"]
    both = bench.summaries(cal + val)
    assert list(both) == ["calibration", "validation", "all"]
    assert both["all"]["rows"] == 2 and both["all"]["within_2x"] == 1


def test_the_table_shows_each_row_and_each_failure():
    ok = row("heat2d", "64x64x10", 2.0, 1e-3, step=kernel(1e-3, "latency"))
    bad = row("ising", "1x1x1", 1.0, None)
    meta = {"split": "calibration", "spans": {"device": "NVIDIA H100 80GB HBM3", "mlx": "0.0",
            "project_commit": "abc", "measured": "today", "note": "made up"},
            "spans_path": "spans.json", "mlxsci_commit": "def", "device": "sim", "dispatch_us": 2.0,
            "tasks": ["heat2d", "ising"], "sizes": None, "jobs": 1, "host": "h", "wall_s": 2.0,
            "summaries": bench.summaries([ok, bad])}  # fmt: skip
    text = bench.markdown(meta, [ok, bad], [{"task": "x", "size": "y", "why": "none"}], ["z"])
    assert "| heat2d | 64x64x10 | 2 ms | 1 ms | 0.5 | yes | step: latency |" in text
    assert "| ising | 1x1x1 | 1 ms | failed: incorrect | - | no | - |" in text
    assert "NVIDIA H100 80GB HBM3, MLX 0.0, project commit abc" in text and "made up" in text
    assert "## Failures on the simulator (1)" in text and "wrong answer" in text
    assert "- x y: none" in text and "## Sizes with no measured row" in text


# --- a bad spans file ----------------------------------------------------------------


def exit_status(argv: list[str]) -> int:
    try:
        return bench.main(argv)
    except SystemExit as stop:
        return int(stop.code or 0)


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "does not exist"),
        ("{not json", "is not JSON"),
        ("[1, 2]", "no list of rows"),
        ('{"rows": {}}', "no list of rows"),
        ('{"rows": []}', "has no rows"),
        ('{"rows": [3]}', "row 0 is not an object"),
        ('{"rows": [{"task": "saxpy", "span_ms": 1}]}', "has no size"),
        ('{"rows": [{"task": "saxpy", "size": "1M"}]}', "has no span_ms"),
        ('{"rows": [{"task": "saxpy", "size": "1M", "span_ms": "1"}]}', "has no span_ms"),
        ('{"rows": [{"task": "saxpy", "size": "1M", "span_ms": true}]}', "has no span_ms"),
        ('{"rows": [{"task": "saxpy", "size": "1M", "span_ms": -1}]}', "is not > 0"),
        ('{"rows": [{"task": "saxpy", "size": "1M", "span_ms": NaN}]}', "is not > 0"),
    ],
)
def test_a_missing_or_invalid_spans_file_exits_2(tmp_path, capsys, content, says):
    path = tmp_path / "spans.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out.md"
    assert exit_status([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and says in err and "Traceback" not in err
    assert not out.exists()


def test_a_folder_for_the_spans_file_exits_2(tmp_path, capsys):
    assert exit_status([str(tmp_path), "--out", str(tmp_path / "out.md")]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_spans_matching_no_chosen_size_exit_2(tmp_path, capsys):
    path = tmp_path / "spans.json"
    rows = [{"task": "saxpy", "size": "3M", "span_ms": 1.0}]
    path.write_text(json.dumps({"device": "made up", "rows": rows}))
    out = tmp_path / "out.md"
    assert exit_status([str(path), "--tasks", "saxpy", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unmatched: saxpy 3M" in err and "no row matching" in err and not out.exists()


def test_the_header_and_rows_of_a_good_file(tmp_path):
    path = tmp_path / "spans.json"
    doc = {"device": "H", "mlx": "1", "project_commit": 7, "rows": [
        {"task": "saxpy", "size": "1M", "span_ms": 0.02, "spread_max_over_min": 1.2}]}  # fmt: skip
    path.write_text(json.dumps(doc))
    header, rows = bench.read_spans(path)
    assert header == {"device": "H", "mlx": "1"}  # a field that is no string is left out
    assert rows == doc["rows"]


def test_bad_options_exit_2(tmp_path):
    assert exit_status([str(tmp_path / "x.json"), "--jobs", "0"]) == 2
    assert exit_status([str(tmp_path / "x.json"), "--tasks", "nosuchtask"]) == 2
    assert exit_status([str(tmp_path / "x.json"), "--timeout", "0"]) == 2
    assert exit_status([str(tmp_path / "x.json"), "--split", "everything"]) == 2
