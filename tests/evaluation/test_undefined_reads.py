"""The parent's side of the simulator's undefined reads (issue 27): the
worker's record (result["undefined_reads"], mlxsci.protocol.undefined_reads)
is named in a failed size's verdict and flagged on a correct one, and a
hostile record (the worker ran the candidate's code) is dropped: never an
exception, never quoted. No kernel runs here: crafted results, as in
test_checks.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import size_job

from mlxsci.evaluation.checks import check_size
from mlxsci.evaluation.references import get_reference
from mlxsci.protocol import undefined_reads
from mlxsci.protocol.exchange import open_folder, read_result
from mlxsci.protocol.results import SizeRun
from mlxsci.roofline.store import Roofline
from mlxsci.task import load_task

TASK = load_task("saxpy")
SIZE = TASK.size_set("smoke")[0]
LEAD = "the kernel read values the language leaves undefined: "


def record(**first):
    base = {
        "op": "simd_shuffle",
        "reason": "diverged",
        "lane": 21,
        "aux": 0,
        "group": [2, 0, 0],
        "thread": [5, 0, 0],
    }
    base.update(first)
    return {"count": 3, "first": base}


def result_of(tmp_path, wrong: bool, undefined) -> dict:
    ref = get_reference(TASK, SIZE.params)
    outputs = {k: np.array(v) for k, v in ref.outputs.items()}
    if wrong:
        outputs["y"] = outputs["y"].copy()
        outputs["y"][7] = np.nan
    np.savez(tmp_path / "verified.npz", **outputs)
    result = {
        "seconds": [0.02, 0.01, 0.03],
        "input_checksums_before": dict(ref.input_checksums),
        "input_checksums_after": dict(ref.input_checksums),
        "unwritten": {"y": 0},
        "last_equals_verified": True,
        "timings": {},
    }
    if undefined is not None:
        result["undefined_reads"] = undefined
    return result


def check(tmp_path, wrong: bool, undefined):
    roof = Roofline("sim", {"name": "test"}, [[1024, 10.0], [2**30, 10.0]], 100.0, "now")
    run = SizeRun.from_wire(result_of(tmp_path, wrong, undefined))
    return check_size(TASK, SIZE, run, tmp_path, roof, "sim", "t")


def test_a_failed_size_names_the_read(tmp_path):
    res = check(tmp_path, True, record())
    assert not res.correct
    assert res.fail_reason.startswith(f"correctness failed at size {SIZE.label}: max_abs=")
    assert (
        f"; {LEAD}simd_shuffle by thread (5, 0, 0) of threadgroup (2, 0, 0) read lane 21, "
        "which was not active at that call"
    ) in res.fail_reason
    assert "Metal leaves such a read undefined" in res.fail_reason
    assert "3 such reads in that run" in res.fail_reason
    assert "undefined_read" in res.flags


def test_the_words_follow_the_dialect_and_the_reason(tmp_path):
    res = check(tmp_path, True, record(op="__shfl_xor_sync", reason="outside_mask", aux=0xFFFF))
    assert "__shfl_xor_sync by thread (5, 0, 0) of block (2, 0, 0) read lane 21" in res.fail_reason
    assert "its mask 0x0000ffff does not name" in res.fail_reason
    assert "CUDA leaves such a read undefined" in res.fail_reason
    res = check(tmp_path, True, record(reason="absent", aux=8))
    assert "that simdgroup has only 8 thread(s)" in res.fail_reason
    res = check(tmp_path, True, record(op="quad_broadcast", reason="invalid_lane", lane=6, aux=4))
    assert "lane 6, which is not a valid lane id (the operation has lanes 0..3)" in res.fail_reason


def test_a_correct_size_is_flagged_not_failed(tmp_path):
    res = check(tmp_path, False, record())
    assert res.correct and res.fail_reason is None
    assert res.flags == ["undefined_read"]


def test_without_a_record_nothing_changes(tmp_path):
    res = check(tmp_path, True, None)
    assert LEAD not in res.fail_reason and "undefined_read" not in res.flags
    assert check(tmp_path, False, None).flags == []


ESC = "\x1b[2J\x1b]0;pwned\x07"
HOSTILE = [
    "simd_shuffle",
    [record()],
    {"count": 3},
    {"count": 3, "first": "simd_shuffle"},
    {"count": -1, "first": record()["first"]},
    {"count": 0, "first": record()["first"]},
    {"count": True, "first": record()["first"]},
    {"count": 3.0, "first": record()["first"]},
    {"count": 10**40, "first": record()["first"]},
    record(op="simd_shuffle" + ESC),
    record(op=ESC),
    record(op="x" * 100_000),
    record(op="simd shuffle"),
    record(op=""),
    record(op=7),
    record(reason="because" + ESC),
    record(reason=None),
    record(lane="21"),
    record(lane=2**70),
    record(lane=float("nan")),
    record(aux=[1]),
    record(group=[2, 0]),
    record(group=[2, 0, 0, 0]),
    record(group=[2, 0, -5]),
    record(group=[2**40, 0, 0]),
    record(thread="(5, 0, 0)"),
    record(thread=[5, 0, True]),
]


@pytest.mark.parametrize("bad", HOSTILE, ids=range(len(HOSTILE)))
def test_a_malformed_record_is_dropped(tmp_path, bad):
    assert undefined_reads.clean(bad) is None
    res = check(tmp_path, True, bad)  # never an exception
    assert not res.correct and LEAD not in res.fail_reason
    assert "\x1b" not in res.fail_reason and "pwned" not in res.fail_reason
    assert "undefined_read" not in res.flags
    assert check(tmp_path, False, bad).flags == []


def test_the_cleaned_record_is_a_copy_of_plain_values():
    raw = record()
    clean = undefined_reads.clean(raw)
    assert clean == raw
    raw["first"]["group"].append(9)
    assert clean["first"]["group"] == [2, 0, 0]


def test_read_result_drops_a_malformed_record_and_keeps_a_good_one(tmp_path):
    good = {"seconds": [0.01], "undefined_reads": record()}
    (tmp_path / "result.json").write_text(json.dumps(good))
    fd = open_folder(tmp_path)
    try:
        assert read_result(fd, size_job()).undefined_reads == record()
        for bad in (record(op=ESC), {"count": 3, "first": {"deep": [[[[[]]]]] * 1000}}):
            (tmp_path / "result.json").write_text(
                json.dumps({"seconds": [0.01], "undefined_reads": bad})
            )
            got = read_result(fd, size_job())
            assert isinstance(got, SizeRun) and got.undefined_reads is None
    finally:
        os.close(fd)


# ---- threadgroup memory read before it was written
def test_threadgroup_memory_read_before_written_is_named_in_the_dialects_words(tmp_path):
    result = result_of(tmp_path, True, None)
    result["unwritten_threadgroup"] = {"outputs_change": True}
    roof = Roofline("sim", {"name": "test"}, [[1024, 10.0], [2**30, 10.0]], 100.0, "now")
    for dialect, memory in (("metal", "threadgroup"), ("cuda", "__shared__")):
        job = size_job("saxpy", dialect=dialect, filename=f"seed.{dialect}")
        res = check_size(TASK, SIZE, SizeRun.from_wire(result), tmp_path, roof, "sim", "t", job=job)
        assert f"; the result depends on {memory} memory read before it was written" in (
            res.fail_reason
        )
        assert res.flags == ["threadgroup_read_before_write"]


@pytest.mark.parametrize(
    "bad", [{"outputs_change": False}, {"outputs_change": 1}, {"outputs_change": "True"}, True, []]
)
def test_a_threadgroup_record_other_than_exactly_true_says_nothing(tmp_path, bad):
    result = result_of(tmp_path, True, None)
    result["unwritten_threadgroup"] = bad
    roof = Roofline("sim", {"name": "test"}, [[1024, 10.0], [2**30, 10.0]], 100.0, "now")
    res = check_size(TASK, SIZE, SizeRun.from_wire(result), tmp_path, roof, "sim", "t")
    assert not res.correct and "memory read before it was written" not in res.fail_reason
    assert res.flags == []
