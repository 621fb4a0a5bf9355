"""bench/fit_time_model.py on made-up records: it refits only a calibration
record, and the grid point it picks puts made-up candidates, whose recorded
times are what a known point models, within 2x."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import fit_time_model as fit  # noqa: E402

from mlxsci.backends.sim import gpus  # noqa: E402

# One kernel's counts, as timer_info["launches"] holds them (a small
# latency-bound launch and a larger memory-bound one).
SMALL = {
    "groups": 16, "threads": 4096, "issue": 20000, "sfu": 0, "simd_ops": 0, "barriers": 0,
    "dev_requests": 512, "dev_sectors": 2048, "tg_wavefronts": 0, "group_sectors": 1600,
    "dram_read_sectors": 1024, "dram_write_sectors": 512, "throughput_cycles_sum": 80000.0,
    "throughput_cycles_max": 5000.0, "path_cycles_sum": 90000.0, "path_cycles_max": 6000.0,
}  # fmt: skip
LARGE = dict(
    SMALL, groups=4096, threads=1048576, issue=5e6, dev_requests=131072, dev_sectors=524288,
    group_sectors=400000, dram_read_sectors=262144, dram_write_sectors=131072,
    throughput_cycles_sum=2e7, path_cycles_sum=2.3e7,
)  # fmt: skip


def record(kind: str, truth: gpus.GpuModel) -> dict:
    rows = []
    for task, parts in (("small", SMALL), ("large", LARGE)):
        for launches in (10, 50):
            one = fit.modelled(truth, parts, 1)
            rows.append({
                "task": task, "recorded": fit.modelled(truth, parts, launches),
                "modelled": launches * one, "launches": {"k": dict(parts, seconds=one)},
            })  # fmt: skip
    return {"meta": {"set": kind}, "candidates": rows}


def test_only_a_calibration_record_is_fitted(tmp_path, capsys):
    truth = gpus.load("apple-m1-pro")
    path = tmp_path / "validation.json"
    path.write_text(json.dumps(record("validation", truth)))
    assert fit.main([str(path)]) == 2
    assert "never fitted on" in capsys.readouterr().err
    with pytest.raises(fit.NotCalibration):
        fit.usable_rows(record("validation", truth))


def test_the_picked_point_models_the_record_within_2x(tmp_path, capsys):
    base = gpus.load("apple-m1-pro")
    truth = dataclasses.replace(base, dispatch_us=7.0, sustained_clock_ghz=0.5)
    rows = fit.usable_rows(record("calibration", truth))
    assert len(rows) == 4
    point, (within, _median) = fit.fit(base, rows)
    assert within == 1.0
    # The point that made the record fits it exactly.
    exact = fit.score(fit.task_errors(truth, rows))
    assert exact[0] == 1.0 and exact[1] == pytest.approx(0.0, abs=1e-12)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record("calibration", truth)))
    assert fit.main([str(path)]) == 0
    assert "best grid point: within 2x 1.00" in capsys.readouterr().out


def test_a_record_without_counts_exits_2(tmp_path, capsys):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"meta": {"set": "calibration"}, "candidates": []}))
    assert fit.main([str(path)]) == 2
    assert "no single-kernel candidate" in capsys.readouterr().err
