"""The evaluation protocol's budget per size: how many runs and seconds.

The warm-up and timed runs and the seconds allowed per size are each
backend's own (mlxsci.backends.BackendInfo.budget); here are the input sets
and the race check's orders those runs take, and how a run under NVIDIA's compute-sanitizer changes them
(`sanitized_job`, `SANITIZER_SLOWDOWN`) and its result (`mark_sanitized`:
such timings compare with nothing, so no score). Apart from
mlxsci/evaluation/evaluator.py so that the protocol's numbers sit in one place that
`evaluate()` and `compare()` both read, separate from how a size is run.
"""

from __future__ import annotations

import numpy as np

from mlxsci.evaluation.results import Evaluation
from mlxsci.protocol.jobs import RunCap, SizeJob

# Input sets a size's warm-up and timed runs take in turn (mlxsci.worker.runs.Rotation):
# other buffers and other data from run to run, each set's last timed run
# checked against its own reference (each costs one more reference solve).
INPUT_SETS = 3


def input_seeds(seed: int, n_warmup: int, n_measure: int) -> list[int]:
    """The seeds of a size's input sets: the evaluation's secret seed first
    (the verification runs' inputs too), then one more per set the runs reach
    ((n_warmup - 1) warm-up runs and n_measure timed runs take them in turn),
    at most INPUT_SETS."""
    turns = max(0, n_warmup - 1) + n_measure
    return [(seed + k) % 2**63 for k in range(max(1, min(INPUT_SETS, turns)))]


# Shuffled thread orders the simulator's race check runs per size beside the
# reversed one (mlxsci.worker.serve.schedule_plan).
SHUFFLED_SCHEDULES = 2


def schedule_seeds(seed: int, size_index: int) -> list[int]:
    """The seeds of a size's shuffled orders, drawn from the evaluation's
    secret seed (so --input-seed replays them too) and the size's place."""
    words = np.random.default_rng([seed, size_index, 0x5C4ED]).integers(
        0, 2**63, SHUFFLED_SCHEDULES
    )
    return [int(w) for w in words]


# A sanitized worker runs slower (every memory access is checked), so the
# default time allowed per size grows by this factor.
SANITIZER_SLOWDOWN = 4


def sanitized_job(job: SizeJob, n_warmup: int | None, n_measure: int | None) -> SizeJob:
    """A size's job for a run under compute-sanitizer: its timings mean
    nothing, so as few runs as the protocol allows (unless asked for more),
    timed by the wall clock, which needs no profiling interface beside the
    sanitizer's own (CUPTI under compute-sanitizer is untested here)."""
    return job.but(
        timer="wall",
        n_warmup=n_warmup if n_warmup is not None else 1,
        n_measure=n_measure if n_measure is not None else 1,
        settle=RunCap(max_runs=0, max_seconds=0.0),
        extra_runs=None,
    )


def mark_sanitized(ev: Evaluation, tool: str) -> None:
    """Record that the sizes ran under compute-sanitizer `tool`: their
    fractions are flagged, and a correct candidate gets no score or phi, since
    times measured under the sanitizer compare with nothing."""
    ev.sanitized = tool
    for s in ev.sizes:
        s.flags.append("sanitized")
    if ev.correct:
        ev.score, ev.phi, ev.noise = None, None, None
