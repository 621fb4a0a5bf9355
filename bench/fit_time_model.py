"""Refit the modelled M1 Pro's free parameters on a calibration record.

Reads the JSON that `bench/time_model_validation.py --set calibration` wrote
(each candidate's recorded M1 time and, per kernel, the counts of its
profiled launch) and recomputes every single-kernel candidate's modelled
time for each point of a grid over the free parameters (`dispatch_us`,
`sustained_clock_ghz`, `llc_gbs`, `llc_latency_cycles`, with the DRAM's
latency held at 1.8 times the cache's), without running the simulator again.
It prints the point with the largest share of candidates within 2x,
averaged over tasks so that every task weighs alike, and then the smallest
mean of the tasks' median |log(modelled / recorded)|, with its per-task
figures. The counts were taken with the GPU file's costs in force, so a
point far from them is an estimate.

A record of any other set is refused: the validation set is never fitted on
(issue 36).

    python bench/fit_time_model.py bench/results/sim/time_model_calibration_<date>.json
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mlxsci.backends.sim import gpus, time_model  # noqa: E402

GRID = {
    "dispatch_us": [3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
    "sustained_clock_ghz": [0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.296],
    "llc_gbs": [100.0, 130.0, 160.0, 200.0, 250.0, 300.0, 410.0],
    "llc_latency_cycles": [150.0, 250.0, 400.0, 600.0],
}
DRAM_OVER_CACHE_LATENCY = 1.8


class NotCalibration(ValueError):
    """A record that is not of the calibration set, or not a record at all."""


def usable_rows(record: dict) -> list[tuple[str, float, dict, float]]:
    """(task, recorded seconds, the kernel's counts, launches per run) of each
    candidate with one kernel and a modelled time."""
    if not isinstance(record, dict) or record.get("meta", {}).get("set") != "calibration":
        raise NotCalibration("not a calibration record (the validation set is never fitted on)")
    rows = []
    for row in record.get("candidates", []):
        launches = row.get("launches") or {}
        if not row.get("modelled") or len(launches) != 1:
            continue
        ((_, parts),) = launches.items()
        if not parts.get("seconds"):
            continue
        rows.append(
            (row["task"], float(row["recorded"]), parts, row["modelled"] / parts["seconds"])
        )
    return rows


def with_point(base: gpus.GpuModel, point: dict) -> gpus.GpuModel:
    """`base` with the grid point's values (all float fields)."""
    return dataclasses.replace(base, **point)


def modelled(gpu: gpus.GpuModel, parts: dict, launches: float) -> float:
    """A run's modelled seconds for `gpu`, from one kernel's counts."""
    threads = max(1, round(parts["threads"] / max(1, parts["groups"])))
    working_set = (parts["dram_read_sectors"] + parts["dram_write_sectors"]) * gpu.sector_bytes
    shape = time_model.LaunchShape(threads, 0, int(working_set))
    return launches * time_model.launch_time(parts, gpu, shape).seconds


def task_errors(gpu: gpus.GpuModel, rows) -> dict[str, list[float]]:
    """Per task, |log(modelled / recorded)| of each candidate."""
    out: dict[str, list[float]] = {}
    for task, recorded, parts, launches in rows:
        out.setdefault(task, []).append(abs(math.log(modelled(gpu, parts, launches) / recorded)))
    return out


def score(errors: dict[str, list[float]]) -> tuple[float, float]:
    """(share within 2x, median |log ratio|), each the mean over tasks."""
    within = [sum(e < math.log(2) for e in v) / len(v) for v in errors.values()]
    medians = [sorted(v)[len(v) // 2] for v in errors.values()]
    return sum(within) / len(within), sum(medians) / len(medians)


def fit(base: gpus.GpuModel, rows) -> tuple[dict, tuple[float, float]]:
    best: tuple[tuple[float, float], dict] | None = None
    for values in itertools.product(*GRID.values()):
        point = dict(zip(GRID, values))
        point["dram_latency_cycles"] = point["llc_latency_cycles"] * DRAM_OVER_CACHE_LATENCY
        within, median = score(task_errors(with_point(base, point), rows))
        key = (-within, median)
        if best is None or key < best[0]:
            best = (key, point)
    assert best is not None
    (neg_within, median), point = best
    return point, (-neg_within, median)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("record", type=Path, help="a calibration record (JSON)")
    parser.add_argument("--gpu", default="apple-m1-pro")
    args = parser.parse_args(argv)
    try:
        rows = usable_rows(json.loads(args.record.read_text()))
        base = gpus.load(args.gpu)
    except (OSError, ValueError) as exc:
        print(f"fit_time_model: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(
            "fit_time_model: no single-kernel candidate with counts in the record", file=sys.stderr
        )
        return 2
    now = score(task_errors(base, rows))
    point, (within, median) = fit(base, rows)
    print(f"{len(rows)} single-kernel candidates of {len({r[0] for r in rows})} tasks")
    print(f"the GPU file's values: within 2x {now[0]:.2f}, median |log| {now[1]:.3f}")
    print(f"best grid point: within 2x {within:.2f}, median |log| {median:.3f}")
    for name, value in point.items():
        print(f"  {name} = {value:g}")
    for task, errs in sorted(task_errors(with_point(base, point), rows).items()):
        share = sum(e < math.log(2) for e in errs) / len(errs)
        print(f"  {task:10s} n={len(errs):3d} within 2x {share:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
