"""The parent-side checks of one size, fed with crafted worker results, so each
rule is shown to bite on its own (no kernel needed)."""

import numpy as np
import pytest
from helpers import size_job

from mlxsci.evaluation.budget import input_seeds
from mlxsci.evaluation.checks import check_size, plausible_limit
from mlxsci.evaluation.references import get_reference, max_abs_error, verdict
from mlxsci.evaluation.results import geometric_mean
from mlxsci.protocol.outputs import outputs_digest
from mlxsci.protocol.results import SizeRun
from mlxsci.roofline.store import Roofline, metal_sci_ceiling
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
    """check_size on a worker's result.json as the parent reads it (SizeRun.from_wire)."""
    run = SizeRun.from_wire(result)
    return check_size(TASK, SIZE, run, tmp_path, roof or roofline(), "sim", "test")


def test_clean_result_passes_and_scores(tmp_path):
    res = check(good_result(tmp_path), tmp_path)
    assert res.correct and res.fail_reason is None
    assert res.seconds == pytest.approx(0.02)  # median, not mean or min
    assert res.achieved == pytest.approx(12 * 100003 / 0.02 / 1e9)
    assert res.fraction == pytest.approx(res.achieved / 10.0)
    assert res.flags == []


def test_fraction_a_little_above_one_is_only_suspicious(tmp_path):
    # saxpy 100003 moves 1.2 MB: 0.02 s at 0.06 GB/s is 1.0x; 0.05 GB/s: 1.2x
    res = check(good_result(tmp_path), tmp_path, roofline(gbps=0.05))
    assert res.correct and 1 < res.fraction < plausible_limit(res.noise)
    assert res.flags == ["suspicious"] and res.implausible is None


def test_time_below_the_physics_floor_is_implausible(tmp_path):
    res = check(good_result(tmp_path), tmp_path, roofline(gbps=0.01))
    assert res.correct and res.fraction == pytest.approx(6.0, rel=1e-3)
    assert "implausible" in res.flags
    # the numbers: the fraction, the ceiling and the least time the machine allows
    assert "6x the roofline" in res.implausible and "0.01 GB/s" in res.implausible
    assert "no less than" in res.implausible


def test_a_slow_run_cannot_widen_the_physics_floor(tmp_path):
    """The spread of the runs widens the allowance by at most a quarter: a kernel
    that makes one run 100x slow on purpose is still implausible."""
    result = good_result(tmp_path)
    result["seconds"] = [0.02, 0.02, 2.0]
    result["noise"] = 1000.0  # the worker's own figure is not read
    res = check(result, tmp_path, roofline(gbps=0.03))  # 2x the roofline
    assert res.noise == pytest.approx(99.0)
    assert plausible_limit(res.noise) == pytest.approx(1.5 * 1.25)
    assert res.implausible and "implausible" in res.flags


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


def rotated_result(tmp_path, refs, outputs=None):
    """A clean result of a job whose runs took the input sets of `refs` in turn."""
    np.savez(tmp_path / "verified.npz", **refs[0].outputs)
    for k, ref in enumerate(refs[1:], start=1):
        np.savez(tmp_path / f"timed_{k}.npz", **(outputs or {}).get(k, ref.outputs))
    sums = [dict(r.input_checksums) for r in refs]
    return {
        "seconds": [0.02, 0.01, 0.03],
        "input_checksums_before": sums[0],
        "input_checksums_after": sums[0],
        "rotation_checksums_before": sums[1:],
        "rotation_checksums_after": sums[1:],
        "unwritten": {"y": 0},
        "last_equals_verified": True,
    }


def seeded_refs(n=3):
    return [get_reference(TASK, SIZE.params, seed=s) for s in input_seeds(7, 1, n)]


def check_rotated(result, tmp_path, refs):
    run = SizeRun.from_wire(result)
    return check_size(TASK, SIZE, run, tmp_path, roofline(), "sim", "test", refs[0], refs[1:])


def test_seeded_inputs_differ_from_the_fixed_ones_and_from_each_other():
    refs = seeded_refs()
    fixed = get_reference(TASK, SIZE.params)
    sums = [r.input_checksums["x"] for r in refs] + [fixed.input_checksums["x"]]
    assert len(set(sums)) == 4
    assert input_seeds(7, 1, 1) == [7] and len(input_seeds(7, 3, 10)) == 3


def test_timed_runs_on_every_input_set_are_checked(tmp_path):
    refs = seeded_refs()
    assert check_rotated(rotated_result(tmp_path, refs), tmp_path, refs).correct
    # The last timed run on the third set gave the first set's answer (a kernel
    # that replays what it computed once): wrong against that set's reference.
    result = rotated_result(tmp_path, refs, outputs={2: refs[0].outputs})
    res = check_rotated(result, tmp_path, refs)
    assert not res.correct and "timed_output_wrong" in res.flags
    assert "input set 3" in res.fail_reason


def test_a_missing_timed_output_fails_the_size(tmp_path):
    """The parent gave the job three sets, so three were reached: a worker that
    leaves out a set's timed output (to skip its check) fails."""
    refs = seeded_refs()
    result = rotated_result(tmp_path, refs)
    (tmp_path / "timed_2.npz").unlink()
    res = check_rotated(result, tmp_path, refs)
    assert not res.correct and "could not be read" in res.fail_reason


def test_inputs_of_other_sets_are_checked(tmp_path):
    refs = seeded_refs()
    result = rotated_result(tmp_path, refs)
    result["rotation_checksums_after"] = [dict(refs[1].input_checksums, x="0" * 32), {}]
    res = check_rotated(result, tmp_path, refs)
    assert not res.correct and "input_mutated" in res.flags
    result = rotated_result(tmp_path, refs)
    result["rotation_checksums_before"] = [refs[2].input_checksums, refs[1].input_checksums]
    res = check_rotated(result, tmp_path, refs)
    assert not res.correct and "differ from the reference inputs" in res.fail_reason


def worker_says_all_is_well(tmp_path, refs, verified, second, last, schedules):
    """A simulator job's result whose worker claims everything matched, beside
    the outputs it really sent back (job "every_output")."""
    result = rotated_result(tmp_path, refs)
    np.savez(tmp_path / "verified.npz", **verified)
    np.savez(tmp_path / "second.npz", **second)
    np.savez(tmp_path / "last.npz", **last)
    for k, outputs in enumerate(schedules, start=1):
        np.savez(tmp_path / f"schedule_{k}.npz", **outputs)
    digests = [outputs_digest(last)] + [outputs_digest(r.outputs) for r in refs[1:]]
    result.update(
        unwritten={"y": 0},
        last_equals_verified=True,
        schedules=[{"order": "reversed", "seed": None, "equals_verified": True}]
        + [{"order": "shuffled", "seed": 5, "equals_verified": True}],
        run_digests=[[d, d] for d in digests],
    )
    return result


SIM_JOB = size_job("saxpy", every_output=True, schedule_seeds=(5,))


def check_sim(result, tmp_path, refs):
    return check_size(
        TASK,
        SIZE,
        SizeRun.from_wire(result),
        tmp_path,
        roofline(),
        "sim",
        "test",
        refs[0],
        refs[1:],
        job=SIM_JOB,
    )


def test_on_the_simulator_the_parent_reads_the_outputs_not_the_workers_word(tmp_path):
    refs = seeded_refs()
    good = refs[0].outputs
    clean = worker_says_all_is_well(tmp_path, refs, good, good, good, [good, good])
    assert check_sim(clean, tmp_path, refs).correct
    # unwritten: sentinel A then B at element 3, whatever the worker counted
    a, b = dict(y=good["y"].copy()), dict(y=good["y"].copy())
    a["y"][3], b["y"][3] = np.nan, -1.25e30
    res = check_sim(worker_says_all_is_well(tmp_path, refs, a, b, a, [a, a]), tmp_path, refs)
    assert "unwritten" in res.flags
    # a last timed run that is wrong, though the worker said it equalled the verified one
    wrong = dict(y=good["y"] + 1.0)
    result = worker_says_all_is_well(tmp_path, refs, good, good, wrong, [good, good])
    res = check_sim(result, tmp_path, refs)
    assert not res.correct and "nondeterministic" in res.flags
    # another order's run differs: a race, whatever equals_verified said
    raced = dict(y=good["y"].copy())
    raced["y"][7] = 1e6
    res = check_sim(worker_says_all_is_well(tmp_path, refs, good, good, good, [good, raced]),
                    tmp_path, refs)  # fmt: skip
    assert not res.correct and "race" in res.flags


def test_every_run_must_give_its_sets_checked_bits(tmp_path):
    refs = seeded_refs()
    good = refs[0].outputs
    result = worker_says_all_is_well(tmp_path, refs, good, good, good, [good, good])
    result["run_digests"][1][0] = "0" * 32  # one timed run on set 2 gave other outputs
    res = check_sim(result, tmp_path, refs)
    assert not res.correct and "unchecked_run_differs" in res.flags
    del result["run_digests"]
    res = check_sim(result, tmp_path, refs)
    assert not res.correct and "could not be read" in res.fail_reason
