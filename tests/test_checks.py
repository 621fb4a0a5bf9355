"""The parent-side checks of one size, fed with crafted worker results, so each
rule is shown to bite on its own (no kernel needed)."""

import numpy as np
import pytest

from mlxsci.checks import check_size
from mlxsci.reference_store import get_reference, max_abs_error, verdict
from mlxsci.results import geometric_mean
from mlxsci.roofline import Roofline, metal_sci_ceiling
from mlxsci.task import load_task

TASK = load_task("saxpy")
SIZE = TASK.size_set("smoke")[0]


def roofline(gbps=10.0):
    return Roofline("sim", {"name": "test"}, [[1024, gbps], [2**30, gbps]], 100.0, "now")


def good_result(tmp_path, outputs=None):
    ref = get_reference(TASK, SIZE.params)
    np.savez(tmp_path / "verified.npz", **(outputs or ref.outputs))
    return {
        "seconds": [0.02, 0.01, 0.03],
        "input_checksums_before": dict(ref.input_checksums),
        "input_checksums_after": dict(ref.input_checksums),
        "unwritten": {"y": 0},
        "last_equals_verified": True,
        "timings": {},
    }


def check(result, tmp_path, roof=None):
    return check_size(TASK, SIZE, result, tmp_path, roof or roofline(), "sim", "test")


def test_clean_result_passes_and_scores(tmp_path):
    res = check(good_result(tmp_path), tmp_path)
    assert res.correct and res.fail_reason is None
    assert res.seconds == pytest.approx(0.02)  # median, not mean or min
    assert res.achieved == pytest.approx(12 * 100003 / 0.02 / 1e9)
    assert res.fraction == pytest.approx(res.achieved / 10.0)
    assert res.flags == []


def test_fraction_above_one_is_suspicious(tmp_path):
    res = check(good_result(tmp_path), tmp_path, roofline(gbps=0.01))
    assert res.correct and res.fraction > 1 and "suspicious" in res.flags


def test_unwritten_elements_fail(tmp_path):
    result = good_result(tmp_path)
    result["unwritten"] = {"y": 3}
    res = check(result, tmp_path)
    assert not res.correct and "unwritten" in res.flags


def test_mutated_input_fails(tmp_path):
    result = good_result(tmp_path)
    result["input_checksums_after"]["x"] = "0" * 32
    res = check(result, tmp_path)
    assert not res.correct and "input mutated: x" in res.fail_reason


def test_wrong_inputs_fail(tmp_path):
    result = good_result(tmp_path)
    result["input_checksums_before"]["y"] = "f" * 32
    assert not check(result, tmp_path).correct


def test_last_timed_run_is_checked_when_it_differs(tmp_path):
    ref = get_reference(TASK, SIZE.params)
    result = good_result(tmp_path)
    result["last_equals_verified"] = False
    np.savez(tmp_path / "last.npz", y=np.zeros_like(ref.outputs["y"]))
    res = check(result, tmp_path)
    assert not res.correct and "last timed run" in res.fail_reason
    np.savez(tmp_path / "last.npz", y=ref.outputs["y"] + np.float32(1e-6))
    res = check(result, tmp_path)
    assert res.correct and "nondeterministic" in res.flags


def test_nan_anywhere_is_infinite_error():
    ref = np.ones(10, dtype=np.float32)
    out = ref.copy()
    out[3] = np.nan
    assert max_abs_error(out, ref) == float("inf")
    assert max_abs_error(ref[:5], ref) == float("inf")
    assert max_abs_error(ref + 0.5, ref) == pytest.approx(0.5)


def test_geometric_mean_and_chip_table():
    assert geometric_mean([0.25, 1.0]) == pytest.approx(0.5)
    assert metal_sci_ceiling("Apple M1 Pro") == (4500, 200)
    assert metal_sci_ceiling("Apple M2 Max (38-core GPU)") == (13600, 400)
    assert metal_sci_ceiling("Something else") == (2000, 80)


def test_reference_is_cached_on_disk(monkeypatch):
    from mlxsci.task import load_reference

    first = get_reference(TASK, SIZE.params)
    module = load_reference("saxpy")
    calls = []
    real = module.solve
    monkeypatch.setattr(module, "solve", lambda i, p: calls.append(p) or real(i, p))
    again = get_reference(TASK, SIZE.params)
    assert calls == []  # served from disk
    np.testing.assert_array_equal(again.outputs["y"], first.outputs["y"])
    get_reference(TASK, SIZE.params, use_cache=False)
    assert len(calls) == 1


def test_roofline_interpolates_bandwidth_in_log_working_set():
    roof = Roofline("sim", {"name": "t"}, [[1e3, 100.0], [1e6, 10.0]], 50.0, "now")
    assert roof.bw(10) == 100.0 and roof.bw(1e9) == 10.0  # flat beyond the probes
    assert roof.bw(10**4.5) == pytest.approx(55.0)  # halfway in log space
    # bandwidth-bound and compute-bound roofline times
    assert roof.seconds(1e6, 0, 1e6) == pytest.approx(1e6 / 10e9)
    assert roof.seconds(0, 5e9, 1e6) == pytest.approx(0.1)


def test_verdict_uses_a_reference_modules_own_error(monkeypatch):
    from mlxsci.task import load_reference

    ref = get_reference(TASK, SIZE.params)
    module = load_reference("saxpy")
    out = {"y": ref.outputs["y"]}
    assert verdict("saxpy", out, ref, SIZE.params) == (0.0, True, "max_abs")
    monkeypatch.setattr(module, "error", lambda o, r, p: (0.5, False, "stats"), raising=False)
    assert verdict("saxpy", out, ref, SIZE.params) == (0.5, False, "stats")
    monkeypatch.setattr(module, "error", lambda o, r, p: 3.0)
    monkeypatch.setattr(module, "ERROR_KIND", "spin_disagreements", raising=False)
    assert verdict("saxpy", out, ref, SIZE.params) == (3.0, False, "spin_disagreements")
    monkeypatch.setattr(module, "error", lambda o, r, p: (float("nan"), True))
    assert verdict("saxpy", out, ref, SIZE.params)[1] is False
