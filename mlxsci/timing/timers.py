"""Timers: how long one pipeline run keeps the device busy.

The score is a fraction of a roofline, so the time it divides must be the
kernels' time, not the host's. Plain wall clock around `mx.eval` +
synchronize measured 1.5-39x the kernels' GPU time on an H100 (launch and
enqueue overhead, a ~0.12 ms floor per eval). Each backend has a timer that
sees the device:

- `cupti` (CUDA, default whenever cupti-python imports): CUPTI kernel
  activity records of the run's kernels, span = first kernel start to last
  kernel end (Metal-Sci's GPUEndTime - GPUStartTime of one command buffer),
  plus the GPU time per kernel. Records are bracketed per run: the device is
  idle and the record buffer drained before the run is enqueued, and drained
  again after it finishes, so only this run's kernels count.
- `sim` (the simulator): the time of a modelled GPU (--sim-gpu), from what
  each launch's kernel did as a profiled variant counts it: SIMD
  instructions, coalesced memory traffic, bank conflicts, barriers,
  occupancy and dispatch (docs/simulator-time.md), summed over the run's
  launches. Host time does not enter it.
- `wall` (Metal, which exposes no GPU timestamps, and any backend with
  `--timer wall`): R runs chained output -> input (Task.chain) in one eval,
  R chosen so one eval lasts >= 20 ms, time / R. The runs serialize (each
  needs the last one's results), and only work that has already been queued
  is timed, so this is an upper bound on the device time of a run; the
  floor of an empty eval is measured and reported beside it.

A timer times a `Work`: how to enqueue one run, its inputs, which results
feed which inputs for a next run, and how to wait for results. The worker
builds one per size (mlxsci.worker); the roofline probes build theirs
(mlxsci.roofline.probes), so kernels and ceilings share a timer.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import math
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mlxsci.backends import BACKENDS
from mlxsci.kernel import in_place
from mlxsci.timing.noise import relative_spread

TIMER_NAMES = ("cupti", "sim", "wall")


IN_PLACE_COPIES = {
    True: f"left out of the time ({in_place.COPY_KERNEL}, listed apart per kernel)",
    False: f"in the time ({in_place.COPY_KERNEL}: the wall clock cannot leave them out)",
}


class TimerError(RuntimeError):
    """A timer cannot run here (cupti missing) or recorded nothing usable."""


@dataclass
class Work:
    """One unit of timed work.

    enqueue(inputs) -> results: queue one run (lazy on a GPU; the simulator
    runs it at once). wait(results): evaluate and synchronize (results may be
    None: just drain the device). chain: input name -> result name that feeds
    it in a next run (see Task.chain).
    """

    enqueue: Callable[[dict], dict]
    inputs: dict
    wait: Callable[[dict | None], None]
    chain: dict = field(default_factory=dict)
    eager: bool = False

    def next_inputs(self, results: dict) -> dict:
        return dict(self.inputs, **{i: results[r] for i, r in self.chain.items()})


@dataclass
class Timing:
    """One timed run: its device time, the time per kernel name as
    {name: [launches, seconds]} (empty where the timer cannot tell), and the
    results of the run (for the wall timer: of the first run of the chain,
    which started from the real inputs)."""

    seconds: float
    kernels: dict
    results: dict | None = None


class Timer:
    name = ""
    # True when the timer measures device time directly (cupti, sim), False when
    # what it gives is an upper bound (wall).
    exact = True
    # How a size's timed runs become its time: the median, or the minimum
    # where every run does the same work and anything above the least is
    # interference (see SimTimer).
    statistic = "median"
    # Whether runs past the size's timed ones steady its time (the job's
    # extra_runs): not for a modelled clock, which the host does not move.
    more_runs_help = True
    # Whether the time leaves out the copy dispatches that start `//! inplace`
    # outputs (mlxsci/kernel/in_place.py: no part of the candidate); the
    # breakdown per kernel lists them either way.
    leaves_out_copies = True

    @classmethod
    def for_run(cls, backend, kernel_names=()) -> Timer:
        """The timer of a run on `backend` of a task's `kernel_names`
        (make_timer): what a timer needs of them, it takes."""
        return cls()

    def time(self, work: Work) -> Timing:
        raise NotImplementedError

    def info(self) -> dict:
        """What a result should record about how it was timed."""
        return {
            "timer": self.name,
            "statistic": self.statistic,
            "in_place_copies": IN_PLACE_COPIES[self.leaves_out_copies],
        }

    def close(self) -> None:
        """Release what the timer holds (CUPTI activity collection)."""


# ------------------------------------------------------------------ helpers
def kernel_label(raw: str, names=()) -> str:
    """A kernel's name as the task calls it. MLX names a custom kernel
    `custom_kernel_<name>` plus type suffixes (inside a C++ namespace on CUDA);
    the longest task kernel name it starts with wins. Other kernels (MLX's own
    copies and fills) keep their raw name, shortened."""
    m = re.search(r"custom_kernel_(\w+)", raw)
    if m:
        rest = m.group(1)
        for name in sorted(names, key=len, reverse=True):
            if rest == name or rest.startswith(name + "_"):
                return name
        return rest
    return raw if len(raw) <= 80 else raw[:77] + "..."


def by_kernel(records) -> dict:
    """[(name, seconds), ...] -> {name: [launches, seconds]}, in first-seen order."""
    out: dict = {}
    for name, seconds in records:
        entry = out.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds
    return out


def median_kernels(timings: list) -> dict:
    """Per-kernel breakdown of a set of runs: the median seconds per kernel
    name (launch counts are the same in every run of one pipeline)."""
    names: dict = {}
    for t in timings:
        for name, (launches, seconds) in t.kernels.items():
            names.setdefault(name, ([], []))
            names[name][0].append(launches)
            names[name][1].append(seconds)
    return {
        name: {"launches": int(statistics.median(l)), "seconds": statistics.median(s)}
        for name, (l, s) in names.items()
    }


def settle(
    measure: Callable[[], float],
    min_runs: int,
    max_runs: int,
    max_seconds: float,
    tolerance: float = 0.05,
    window: int = 3,
) -> dict:
    """Warm up until timings settle: run `measure` (one timed run, returning
    seconds) at least `min_runs` times, then until the last `window` runs lie
    within `tolerance` of each other ((max - min) / median), at most `max_runs`
    runs or `max_seconds` of wall time. GPU clocks ramp up under load, so the
    first runs of a size are slower than the rest."""
    times: list = []
    started = time.perf_counter()
    settled = False
    while len(times) < max(min_runs, 1) or not settled:
        if len(times) >= max_runs or (
            time.perf_counter() - started > max_seconds and len(times) >= min_runs
        ):
            break
        times.append(measure())
        settled = len(times) >= window and relative_spread(times[-window:]) <= tolerance
    return {"runs": len(times), "settled": settled, "seconds": times}


# ------------------------------------------------------------------ sim
class SimTimer(Timer):
    """The simulator's own clock: the modelled GPU's time of the kernels.

    While it times a size, the backend runs each kind of launch's first
    launch (and a few later ones, drawn at random) as a profiled variant
    whose counts become a modelled time on the backend's GPU
    (mlxsci.backends.sim.time_model); the other launches of a kind are
    charged its mean. `info()["launches"]` holds each kernel's counts and
    what bound its time. Where the host cannot build a profiled variant (not
    x86-64), the earlier host-time model stands in: a group's host cycles
    over min(32 lanes, its threads), the launch's makespan over 32 cores.

    Its statistic is the minimum: the modelled time does not depend on the
    host, and where the kernel's work depends on its data the fastest of the
    runs is taken, as before."""

    name = "sim"
    statistic = "min"
    # The simulated GPU (sim_runtime.h: __SIM_CORES, __SIM_LANES).
    CORES = 32
    LANES = 32

    @classmethod
    def for_run(cls, backend, kernel_names=()) -> Timer:
        return cls(backend, kernel_names)

    def __init__(self, backend, kernel_names=()):
        if not backend.records_launch_time:
            raise TimerError(f"the sim timer needs the simulator backend, not {backend.name}")
        self.backend = backend
        self.kernel_names = tuple(kernel_names)
        # (modeled, host) seconds of the fastest modeled run so far.
        self.fastest: tuple[float, float] | None = None
        self.launch_models: dict = {}
        self.model_parts: dict = {}
        self.more_runs_help = bool(backend.host_clock)

    def time(self, work: Work) -> Timing:
        self.backend.activity = []
        # The modelled GPU's launch times by kind, kept over this size's runs:
        # the first run profiles each kind of launch, later ones a random few.
        self.backend.launch_models = self.launch_models
        self.backend.model_parts = self.model_parts
        try:
            results = work.enqueue(work.inputs)
            work.wait(results)
            records = self.backend.activity
        finally:
            self.backend.activity = None
            self.backend.launch_models = None
            self.backend.model_parts = None
        own = [r for r in records if not in_place.is_copy(r[0])]  # the candidate's launches
        seconds = sum(r[1] for r in own)
        host = sum(r[2] for r in own)
        if self.fastest is None or seconds < self.fastest[0]:
            self.fastest = (seconds, host)
        return Timing(seconds, by_kernel((r[0], r[1]) for r in records), results)

    def info(self) -> dict:
        """The model, and the host's CPU seconds of the fastest run so far."""
        out = super().info()
        if self.model_parts:
            out["model"] = "counts on the modelled GPU (docs/simulator-time.md)"
            # Per kernel: its last profiled launch's counts and what bound its time.
            out["launches"] = {name: dict(parts) for name, parts in self.model_parts.items()}
        else:
            out["model"] = f"threadgroups on {self.CORES} cores x {self.LANES} lanes (host time)"
        if self.fastest is not None:
            out["host_seconds"] = self.fastest[1]
        return out


def _span_without_copies(labelled) -> int:
    """First kernel start to last kernel end of the candidate's own kernels,
    less the in-place copies that ran in between (ns); [(label, record)]."""
    own = [r for label, r in labelled if not in_place.is_copy(label)]
    if not own:
        return 0
    start, end = min(r.start for r in own), max(r.end for r in own)
    inside = sum(
        min(r.end, end) - max(r.start, start)
        for label, r in labelled
        if in_place.is_copy(label) and r.end > start and r.start < end
    )
    return end - start - inside


# ------------------------------------------------------------------ cupti
@dataclass
class KernelRecord:
    """One kernel execution as an activity source reports it (ns timestamps)."""

    name: str
    start: int
    end: int


class CuptiSource:
    """Kernel activity records from CUPTI (cupti-python). drain() flushes
    CUPTI's buffers and returns every kernel completed since the last drain.

    CUPTI's activity buffers and callbacks belong to the process, so there is
    one source per process (`CuptiSource.shared()`), enabled on first use and
    kept: timers come and go (one per size, one for the probes), the source
    stays, and a timer's close() only drains it."""

    _shared: CuptiSource | None = None

    @classmethod
    def shared(cls) -> CuptiSource:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self):
        try:
            from cupti import cupti
        except Exception as exc:  # ImportError, or a missing libcupti
            raise TimerError(
                f"the cupti timer needs cupti-python ({exc}); "
                f"install mlxsci[cuda] or use --timer wall"
            ) from exc
        self._cupti = cupti
        self._lock = threading.Lock()
        self._records: list = []
        kind = cupti.ActivityKind.CONCURRENT_KERNEL

        def requested():
            return 8 * 1024 * 1024, 0  # buffer bytes; 0 = as many records as fit

        def completed(activities):
            with self._lock:
                for a in activities:
                    if a.kind == kind:
                        self._records.append(KernelRecord(str(a.name), int(a.start), int(a.end)))

        self._requested, self._completed = requested, completed  # keep the callbacks alive
        cupti.activity_register_callbacks(requested, completed)
        cupti.activity_enable(kind)
        self._kind = kind

    def drain(self) -> list:
        self._cupti.activity_flush_all(1)  # 1: CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
        with self._lock:
            records, self._records = self._records, []
        return records

    def close(self) -> None:
        """Forget what is buffered; collection stays on for the next timer."""
        try:
            self.drain()
        except Exception:
            pass


class CuptiTimer(Timer):
    """GPU time of one run from kernel activity records: first kernel start to
    last kernel end. `source` is a CuptiSource, or any object with drain()
    (tests feed recorded activity through a fake one)."""

    name = "cupti"

    @classmethod
    def for_run(cls, backend, kernel_names=()) -> Timer:
        return cls(kernel_names=kernel_names)

    def __init__(self, source=None, kernel_names=()):
        self.source = source if source is not None else CuptiSource.shared()
        self.kernel_names = tuple(kernel_names)

    def time(self, work: Work) -> Timing:
        work.wait(None)  # nothing of earlier work still running...
        self.source.drain()  # ...and none of its records left to count
        results = work.enqueue(work.inputs)
        work.wait(results)
        records = self.source.drain()
        if not records:
            raise TimerError(
                "CUPTI recorded no kernel for this run (is another profiler "
                "attached?); use --timer wall"
            )
        labelled = [(kernel_label(r.name, self.kernel_names), r) for r in records]
        kernels = by_kernel(
            (label, (r.end - r.start) * 1e-9)
            for label, r in sorted(labelled, key=lambda x: x[1].start)
        )
        return Timing(_span_without_copies(labelled) * 1e-9, kernels, results)

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close:
            close()


# ------------------------------------------------------------------ wall
class WallTimer(Timer):
    """Wall clock over R chained runs in one eval, divided by R: an upper bound
    on a run's device time. R is calibrated on the first call so one eval lasts
    at least `target_seconds`; `floor_seconds` is the wall time of an eval with
    nothing to do (the host's round trip), reported beside the timings."""

    name = "wall"
    exact = False
    leaves_out_copies = False

    def __init__(
        self,
        target_seconds: float = 0.02,
        max_repeats: int = 4096,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.target_seconds = target_seconds
        self.max_repeats = max_repeats
        self.clock = clock
        self.repeats: int | None = None
        self.floor_seconds: float | None = None

    def _chained(self, work: Work, repeats: int) -> tuple[float, dict]:
        """Wall seconds of `repeats` chained runs, and the first run's results."""
        if not work.eager:
            # Lazy backends: build the whole chain first; the device starts at wait().
            first = results = work.enqueue(work.inputs)
            for _ in range(repeats - 1):
                results = work.enqueue(work.next_inputs(results))
            work.wait(None)
            t0 = self.clock()
            work.wait({"_first": first, "_last": results} if repeats > 1 else results)
            return self.clock() - t0, first
        work.wait(None)
        t0 = self.clock()  # eager backends run each kernel as it is called
        first = results = work.enqueue(work.inputs)
        for _ in range(repeats - 1):
            results = work.enqueue(work.next_inputs(results))
        work.wait(results)
        return self.clock() - t0, first

    def calibrate(self, work: Work) -> None:
        floors = []
        for _ in range(5):
            t0 = self.clock()
            work.wait(None)
            floors.append(self.clock() - t0)
        self.floor_seconds = min(floors)
        repeats = 1
        while True:
            elapsed, _ = self._chained(work, repeats)
            if elapsed >= self.target_seconds or repeats >= self.max_repeats:
                break
            grow = math.ceil(repeats * self.target_seconds / max(elapsed, 1e-9) * 1.2)
            repeats = min(self.max_repeats, max(2 * repeats, grow))
        self.repeats = repeats

    def time(self, work: Work) -> Timing:
        if self.repeats is None:
            self.calibrate(work)
        repeats = self.repeats
        assert repeats is not None  # calibrate() set it
        elapsed, first = self._chained(work, repeats)
        return Timing(elapsed / repeats, {}, first)

    def info(self) -> dict:
        return dict(super().info(), repeats=self.repeats, floor_seconds=self.floor_seconds)


# ------------------------------------------------------------------ choice
def cupti_available() -> bool:
    try:
        importlib.import_module("cupti.cupti")
    except Exception:
        return False
    return True


def default_timer_name(backend_name: str) -> str:
    """The backend's own timer (mlxsci.backends.BACKENDS): cupti on CUDA when
    cupti-python imports (else wall), sim on the simulator, wall on Metal."""
    own = _own_timer(backend_name)
    if own == "cupti" and not cupti_available():
        return "wall"
    return own


def _own_timer(backend_name: str) -> str:
    info = BACKENDS.get(backend_name)
    return info.timer if info else "wall"


def check_timer(timer_name: str | None, backend_name: str) -> str:
    """The timer to use (validated): `timer_name`, or the backend's default."""
    name = timer_name or default_timer_name(backend_name)
    if name not in TIMER_NAMES:
        raise ValueError(f"unknown timer {name!r}; choose from {', '.join(TIMER_NAMES)}")
    if name == "sim" and _own_timer(backend_name) != "sim":
        raise ValueError(f"the sim timer only times the simulator, not the {backend_name} backend")
    if name == "cupti" and _own_timer(backend_name) != "cupti":
        raise ValueError(f"the cupti timer only times the cuda backend, not {backend_name}")
    if name == "cupti" and not cupti_available():
        raise ValueError(
            "the cupti timer needs cupti-python (pip install mlxsci[cuda]); use --timer wall"
        )
    return name


TIMER_CLASSES: dict[str, type[Timer]] = {"sim": SimTimer, "cupti": CuptiTimer, "wall": WallTimer}


@functools.cache  # the code of a process does not change under it
def timer_version(name: str) -> str:
    """The version of timer `name`: a digest of its code (its class, the
    base class and the warm-up's `settle`), so that what was measured with
    a timer that has since changed (a roofline entry: mlxsci.roofline.probes.
    probe_digest) is measured again rather than compared across two ways of
    timing."""
    if name not in TIMER_CLASSES:
        raise ValueError(f"unknown timer {name!r}; choose from {', '.join(TIMER_NAMES)}")
    h = hashlib.sha256()
    for part in (Timer, TIMER_CLASSES[name], settle, Work, Timing):
        h.update(inspect.getsource(part).encode())
    return h.hexdigest()[:16]


def make_timer(name: str, backend, kernel_names=()) -> Timer:
    if name not in TIMER_CLASSES:
        raise ValueError(f"unknown timer {name!r}; choose from {', '.join(TIMER_NAMES)}")
    return TIMER_CLASSES[name].for_run(backend, kernel_names)
