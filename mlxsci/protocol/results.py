"""What a worker hands back for one job, typed and checked once at the process edge.

The worker's process ran a candidate's code, so its result.json is hostile
input. mlxsci.protocol.exchange.read_result reads it within bounds and turns
it into one of the frozen types here, field by field, or refuses it with the
field that is wrong (`MalformedResult`); past that edge no layer reads a
result as a dict or guards against its types again.

- `SizeRun`: one size of an evaluation (mlxsci.worker.serve.run_job): the
  raw seconds and the timer's record, the worker's word on its runs (input
  checksums, unwritten counts, which orders gave the verified bits, the
  digests of every run), the simulator's records of undefined reads, and
  records kept only to be shown (per-kernel times, the warm-up, phases).
- `ComparedRuns`: two candidates timed against each other (run_compare).
- `WorkerError`: the error either reports instead.
- a launch job's answer (mlxsci.fast's isolated kernels) stays a record:
  `launch_answer` checks its shape, mlxsci.fast.isolated reads the rest.

Which of these a verdict may believe is the checks' business
(mlxsci.evaluation.checks): on the simulator the parent works out the
unwritten counts and the orders' equality itself (`SizeRun.but`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from mlxsci.protocol import undefined_reads


class MalformedResult(ValueError):
    """A result whose shape is not a result's: which field, and why."""


def _text(value, where: str) -> str:
    if not isinstance(value, str):
        raise MalformedResult(f"{where} is not a text")
    return value


def _count(value, where: str) -> int:
    if type(value) is not int or value < 0:
        raise MalformedResult(f"{where} is not a count")
    return value


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _seconds(value, where: str) -> tuple[float, ...]:
    """A non-empty series of finite, positive seconds: a NaN, an infinity, a
    zero or a negative time is no run's time, whatever the statistic would
    make of it (a zero would divide the roofline's time by nothing)."""
    if not isinstance(value, list) or not value:
        raise MalformedResult(f"{where} is not a list of seconds")
    for x in value:
        if not _number(x):
            raise MalformedResult(f"{where} holds something other than a number")
        if not (math.isfinite(x) and x > 0):
            raise MalformedResult(f"{where} holds {x!r}, not a time a run can take")
    return tuple(float(x) for x in value)


def _mapping(value, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedResult(f"{where} is not a mapping")
    return value


def _checksums(value, where: str) -> dict[str, str] | None:
    """An input's checksums by name, or None when the worker sent none (the
    checks then find them differing from the reference's)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise MalformedResult(f"{where} is not checksums by input name")
    return dict(value)


def _checksum_sets(value, where: str) -> tuple[dict[str, str] | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise MalformedResult(f"{where} is not a list of checksums")
    return tuple(_checksums(one, f"{where}[{k}]") for k, one in enumerate(value))


@dataclass(frozen=True)
class WorkerError:
    """The error a worker reported instead of a result: its kind (compile,
    format, launch, runtime, a kernel fault's kind, a sanitizer tool's), its
    message (cut: mlxsci.protocol.exchange.cut_texts) and, for compile and
    format errors, the candidate's line."""

    kind: str
    message: str
    line: int | None = None

    @property
    def ends_evaluation(self) -> bool:
        """A compile or format error: no size of the candidate can run."""
        return self.kind in ("compile", "format")

    @classmethod
    def from_wire(cls, raw) -> WorkerError:
        if not isinstance(raw, dict):
            raise MalformedResult("error is not a record")
        line = raw.get("line")
        if line is not None and type(line) is not int:
            raise MalformedResult("error.line is not a line number")
        return cls(_text(raw.get("kind"), "error.kind"), _text(raw.get("message"), "error.message"),
                   line)  # fmt: skip


@dataclass(frozen=True)
class OrderRun:
    """One verification run in another thread order (the simulator's): the
    order and its seed as the worker named them (kept only if they are a
    text and an int; a message names them from these alone), and whether its
    outputs equalled the verified ones (None: not said)."""

    order: str | None
    seed: int | None
    equals_verified: bool | None

    @classmethod
    def from_wire(cls, raw) -> OrderRun:
        if not isinstance(raw, dict):
            return cls(None, None, None)
        order, seed, same = raw.get("order"), raw.get("seed"), raw.get("equals_verified")
        return cls(
            order if isinstance(order, str) else None,
            seed if type(seed) is int else None,
            same if isinstance(same, bool) else None,
        )


def _orders(value) -> tuple[OrderRun, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise MalformedResult("schedules is not a list")
    return tuple(OrderRun.from_wire(run) for run in value)


def _digests(value) -> tuple[tuple[str, ...], ...] | None:
    """Per input set, the digest of each of its warm-up and timed runs."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(one, list) and all(isinstance(d, str) for d in one) for one in value
    ):
        raise MalformedResult("run_digests is not lists of digests")
    return tuple(tuple(one) for one in value)


def _timer(value) -> tuple[str | None, str | None, dict]:
    """The timer's name, its statistic and the rest of its record (shown
    with the size, never used to judge it)."""
    info = dict(_mapping(value, "timer"))
    name, statistic = info.pop("timer", None), info.get("statistic")
    if name is not None and not isinstance(name, str):
        raise MalformedResult("timer.timer is not a name")
    if statistic is not None and not isinstance(statistic, str):
        raise MalformedResult("timer.statistic is not a name")
    return name, statistic, info


def _timings(value) -> dict[str, float]:
    """Where the worker's own time went, per phase: finite seconds by name."""
    timings = _mapping(value, "timings")
    for k, v in timings.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise MalformedResult(f"timings[{k!r}] is not a number of seconds")
    return dict(timings)


@dataclass(frozen=True)
class SizeRun:
    """A worker's answer for one size. Either `error` is set (and nothing
    else is read), or `seconds` holds the timed runs' raw seconds."""

    error: WorkerError | None = None
    seconds: tuple[float, ...] = ()
    timer: str | None = None
    statistic: str | None = None
    timer_info: dict = field(default_factory=dict)  # the timer's record beyond its name
    kernels: dict = field(default_factory=dict)  # name -> {launches, seconds}: shown only
    warmup: dict = field(default_factory=dict)  # runs, settled: shown only
    timings: dict[str, float] = field(default_factory=dict)
    input_checksums_before: dict[str, str] | None = None
    input_checksums_after: dict[str, str] | None = None
    rotation_checksums_before: tuple[dict[str, str] | None, ...] | None = None
    rotation_checksums_after: tuple[dict[str, str] | None, ...] | None = None
    unwritten: dict[str, int] = field(default_factory=dict)
    last_equals_verified: bool = False
    verified_order: str | None = None
    schedules: tuple[OrderRun, ...] | None = None
    run_digests: tuple[tuple[str, ...], ...] | None = None
    undefined_reads: dict | None = None  # mlxsci.protocol.undefined_reads.clean's shape
    threadgroup_outputs_change: bool = False
    coverage: Any = None  # read by mlxsci.protocol.exchange.coverage_counts alone

    def but(self, **changes) -> SizeRun:
        """This answer with what the parent found out itself in place of
        the worker's word (mlxsci.evaluation.checks.own_findings)."""
        return replace(self, **changes)

    @classmethod
    def failed(cls, error: WorkerError) -> SizeRun:
        return cls(error=error)

    @classmethod
    def from_wire(cls, raw) -> SizeRun:
        """The answer in a result.json's JSON, or MalformedResult naming the
        field whose shape is wrong. Records kept only to be shown are
        checked to be mappings; what a verdict reads is checked whole."""
        if not isinstance(raw, dict):
            raise MalformedResult("the result is not a record")
        if raw.get("error") is not None:
            return cls.failed(WorkerError.from_wire(raw["error"]))
        timer, statistic, timer_info = _timer(raw.get("timer"))
        unwritten = _mapping(raw.get("unwritten"), "unwritten")
        for k, n in unwritten.items():
            _count(n, f"unwritten[{k!r}]")
        last_same = raw.get("last_equals_verified", False)
        order = raw.get("verified_order")
        return cls(
            seconds=_seconds(raw.get("seconds"), "seconds"),
            timer=timer,
            statistic=statistic,
            timer_info=timer_info,
            kernels=dict(_mapping(raw.get("kernels"), "kernels")),
            warmup=dict(_mapping(raw.get("warmup"), "warmup")),
            timings=_timings(raw.get("timings")),
            input_checksums_before=_checksums(
                raw.get("input_checksums_before"), "input_checksums_before"
            ),
            input_checksums_after=_checksums(
                raw.get("input_checksums_after"), "input_checksums_after"
            ),
            rotation_checksums_before=_checksum_sets(
                raw.get("rotation_checksums_before"), "rotation_checksums_before"
            ),
            rotation_checksums_after=_checksum_sets(
                raw.get("rotation_checksums_after"), "rotation_checksums_after"
            ),
            unwritten=dict(unwritten),
            last_equals_verified=last_same is True,
            verified_order=order if isinstance(order, str) else None,
            schedules=_orders(raw.get("schedules")),
            run_digests=_digests(raw.get("run_digests")),
            # Quoted in verdicts: kept only in the exact shape the simulator's
            # record has (mlxsci.protocol.undefined_reads.clean), else left out.
            undefined_reads=undefined_reads.clean(raw.get("undefined_reads")),
            threadgroup_outputs_change=undefined_reads.threadgroup_outputs_change(
                raw.get("unwritten_threadgroup")
            ),
            coverage=raw.get("coverage"),
        )


@dataclass(frozen=True)
class ComparedRuns:
    """A worker's answer to a compare job: the incumbent's and the
    candidate's raw seconds, timed in interleaved rounds, and the timer's
    statistic; or the error that stopped it."""

    error: WorkerError | None = None
    seconds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    statistic: str | None = None

    @classmethod
    def from_wire(cls, raw) -> ComparedRuns:
        if not isinstance(raw, dict):
            raise MalformedResult("the result is not a record")
        if raw.get("error") is not None:
            return cls(error=WorkerError.from_wire(raw["error"]))
        pair = raw.get("seconds")
        if not isinstance(pair, list) or len(pair) != 2:
            raise MalformedResult("seconds is not two lists of seconds")
        _, statistic, _ = _timer(raw.get("timer"))
        return cls(
            seconds=(_seconds(pair[0], "seconds[0]"), _seconds(pair[1], "seconds[1]")),
            statistic=statistic,
        )


def launch_answer(raw) -> dict:
    """A launch job's answer (mlxsci.backends.sim.launch_job.run_launch): a
    record with the launch's seconds, or its error. Only its shape is checked
    here; mlxsci.fast.isolated reads the rest field by field against the
    launch it asked for (the outputs it expects, a fault's details), and
    turns it into the exception or arrays a kernel call gives."""
    if not isinstance(raw, dict):
        raise MalformedResult("the result is not a record")
    if raw.get("error") is not None:
        WorkerError.from_wire(raw["error"])
        return raw
    seconds = raw.get("seconds")  # the launch's own wall time: shown, never scored
    if not isinstance(seconds, list) or not seconds or not all(map(_number, seconds)):
        raise MalformedResult("seconds is not a list of seconds")
    return raw


# What read_result hands its caller, by the job's kind: size, compare, launch.
WorkerResult = SizeRun | ComparedRuns | dict
