"""Run noise: how far a size's timed runs disagree, and what that makes of a score.

A size's noise is the spread of its timed runs under the timer's statistic
(`run_noise`: (max - min) / median for a median, the spread of the fastest
runs for a minimum); a score S, a geometric mean over sizes, has the
`combined_noise` of its sizes. These are pure functions of seconds, apart
from the timers that produce them (mlxsci.timing.timers, whose warm-up `settle`
uses `relative_spread`), so the checks, the evaluation and the worker read
them without the timers' CUPTI and wall-clock machinery.
"""

from __future__ import annotations

import math
import statistics


def relative_spread(seconds) -> float:
    """The noise of a set of timings: (max - min) / median. It grows with
    outliers on purpose: a difference smaller than it is not a difference."""
    values = [s for s in seconds if s is not None]
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.0


def fastest_spread(seconds) -> float:
    """The noise of a minimum: the relative spread of the fastest third of the
    runs (at least two), (max - min) / min among them. A minimum does not move
    with the slow outliers that (max - min) / median counts, only with how
    tightly the fastest runs agree."""
    values = sorted(s for s in seconds if s is not None)
    if len(values) < 2 or values[0] <= 0:
        return 0.0
    fastest = values[: max(2, -(-len(values) // 3))]
    return (fastest[-1] - fastest[0]) / fastest[0]


def run_noise(seconds, statistic: str = "median") -> float:
    """The noise of a size's time under the timer's statistic."""
    return fastest_spread(seconds) if statistic == "min" else relative_spread(seconds)


def combined_noise(noises) -> float:
    """The noise of a geometric mean of per-size figures with these noises:
    the geometric mean of (1 + noise), minus 1 (a score S is such a mean)."""
    values = [n for n in noises if n is not None]
    if not values:
        return 0.0
    return math.exp(sum(math.log1p(n) for n in values) / len(values)) - 1.0
