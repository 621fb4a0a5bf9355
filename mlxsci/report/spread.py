"""The spread of a report cell holding several runs (sweeps with --repeats).

A cell's figure is the MEDIAN of its runs (one lucky or unlucky run moves it
least). Its spread:
- fewer than BOOTSTRAP_MIN_RUNS runs: the min and max of the runs (a
  confidence interval from 2 to 4 values would claim more than they hold);
- from BOOTSTRAP_MIN_RUNS runs on: a 95 % percentile bootstrap confidence
  interval of the median, BOOTSTRAP_RESAMPLES resamples drawn with a fixed
  seed, so the same runs always give the same interval.
"""

from __future__ import annotations

import numpy as np

BOOTSTRAP_MIN_RUNS = 5
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_LEVEL = 0.95
BOOTSTRAP_SEED = 0
MIN_MAX = "min-max"
BOOTSTRAP = f"bootstrap {BOOTSTRAP_LEVEL:.0%} CI"
SPREAD_NOTE = (
    f"median of the runs; spread [lo, hi]: {MIN_MAX} of the runs when a cell has "
    f"fewer than {BOOTSTRAP_MIN_RUNS}, else a {BOOTSTRAP_LEVEL:.0%} percentile "
    f"bootstrap CI of the median ({BOOTSTRAP_RESAMPLES} resamples, seed "
    f"{BOOTSTRAP_SEED})"
)


def spread_kind(n: int) -> str | None:
    """How a cell of n runs (with a number) gives its spread; None below 2."""
    if n < 2:
        return None
    return MIN_MAX if n < BOOTSTRAP_MIN_RUNS else BOOTSTRAP


def median_and_spread(values) -> tuple[float | None, float | None, float | None]:
    """(median, lo, hi) of the numbers in `values` (None entries left out);
    lo and hi are None with fewer than 2 numbers."""
    xs = np.array([v for v in values if v is not None], dtype=float)
    if xs.size == 0:
        return None, None, None
    median = float(np.median(xs))
    kind = spread_kind(xs.size)
    if kind is None:
        return median, None, None
    if kind == MIN_MAX:
        return median, float(xs.min()), float(xs.max())
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, xs.size, size=(BOOTSTRAP_RESAMPLES, xs.size))
    medians = np.median(xs[picks], axis=1)
    tail = (1.0 - BOOTSTRAP_LEVEL) / 2 * 100
    lo, hi = np.percentile(medians, [tail, 100 - tail])
    return median, float(lo), float(hi)
