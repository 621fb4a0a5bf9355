"""Timing a pipeline run on a device (timers) and the noise of repeated runs.

What other layers use, importable from here: a timer chosen and checked for
a backend (`check_timer`, `default_timer_name`, `make_timer`, `TIMER_NAMES`,
`TimerError`), the work it times and what it answers (`Work`, `Timing`),
warm-up until timings settle and the per-kernel breakdown (`settle`,
`median_kernels`: timers.py), and the noise of a size's runs and of a
score (`run_noise`, `combined_noise`: noise.py).
"""

from mlxsci.timing.noise import combined_noise, run_noise
from mlxsci.timing.timers import (
    TIMER_NAMES,
    TimerError,
    Timing,
    Work,
    check_timer,
    default_timer_name,
    make_timer,
    median_kernels,
    settle,
)

__all__ = [
    "TIMER_NAMES",
    "TimerError",
    "Timing",
    "Work",
    "check_timer",
    "combined_noise",
    "default_timer_name",
    "make_timer",
    "median_kernels",
    "run_noise",
    "settle",
]
