"""What timing decides, in one place: the warm-up, the timed trials, the
statistic and the noise, and the one measurement type the rest reads.

The worker times a size with `warm_up` and `trials` (and two candidates with
`interleaved`); the parent reduces the raw seconds it got back, never the
worker's own figure, with `Measurement.of`, which the checks (a size's time
and noise), the comparison (each candidate's time) and through them the
search read. A timer (mlxsci.timing.timers) says which statistic of its runs
is the time: the median on a GPU, the minimum on the simulator, whose
modelled clock only ever adds to a run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mlxsci.protocol.jobs import RunCap
from mlxsci.timing.noise import run_noise
from mlxsci.timing.timers import Timing, settle

STATISTICS = ("median", "min")


@dataclass(frozen=True)
class Measurement:
    """Timed runs of one thing: the time by the timer's statistic, the
    fastest and slowest run, and the noise under that statistic."""

    seconds: tuple[float, ...]
    statistic: str = "median"

    @classmethod
    def of(cls, seconds, statistic: str | None = "median") -> Measurement:
        """`seconds` (raw, any order) under `statistic` (an unknown one is the median)."""
        return cls(tuple(sorted(float(s) for s in seconds)), statistic or "median")

    @property
    def value(self) -> float:
        if self.statistic == "min":
            return self.seconds[0]
        return float(np.median(self.seconds))

    @property
    def low(self) -> float:
        return self.seconds[0]

    @property
    def high(self) -> float:
        return self.seconds[-1]

    @property
    def noise(self) -> float:
        return run_noise(self.seconds, self.statistic)


def warm_up(time_one: Callable[[], float], n_warmup: int, cap: RunCap | None) -> dict:
    """Warm-up runs after the first (compiling) one: at least n_warmup - 1,
    then on until timings settle (GPU clocks ramp up under load), within
    `cap`. {"runs", "settled", ...} as timers.settle says."""
    extra = max(0, n_warmup - 1)
    cap = cap or RunCap(max_runs=extra, max_seconds=0.0)
    return settle(
        time_one,
        min_runs=extra,
        max_runs=max(extra, cap.max_runs),
        max_seconds=cap.max_seconds,
    )


def trials(
    time_one: Callable[[], Timing], n_measure: int, extra: RunCap | None, more_help: bool
) -> list[Timing]:
    """The timed runs: n_measure, then, where more runs steady the time
    (`more_help`: the timer's statistic is the minimum of cheap runs), more
    within `extra`'s runs and seconds."""
    started = time.perf_counter()
    timed = [time_one() for _ in range(n_measure)]
    cap = extra if more_help else None
    while (
        cap is not None
        and len(timed) < cap.max_runs
        and time.perf_counter() - started < cap.max_seconds
    ):
        timed.append(time_one())
    return timed


def interleaved(times: list[Callable[[], float]], n_warmup: int, n_measure: int) -> list[list]:
    """Two (or more) things timed in turn: each warmed up, then rounds in
    alternating order (A B, then B A) so that drift either way hits them
    alike. Returns each one's seconds."""
    for _ in range(max(1, n_warmup - 1)):
        for time_one in times:
            time_one()
    seconds: list[list] = [[] for _ in times]
    for k in range(n_measure):
        order = range(len(times)) if k % 2 == 0 else reversed(range(len(times)))
        for i in order:
            seconds[i].append(times[i]())
    return seconds
