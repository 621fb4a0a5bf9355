"""The jobs the parent hands a worker: typed, frozen, and plain JSON on the wire.

`SizeJob` is one size of one candidate's evaluation (mlxsci.worker.serve.run_job);
`CompareJob` is two candidates timed against each other at one size
(run_compare). The parent builds them (mlxsci.evaluation.evaluator,
mlxsci.evaluation.comparison), the runner sends `to_wire()` as one JSON line
(or job.json for a process per size), and the worker reads it back once with
`job_from_wire`. A job is the parent's word, so reading it checks its shape
only; what comes back from a worker is hostile and read by
mlxsci.protocol.exchange.

Each candidate travels as its plan (mlxsci.kernel.plan.CandidatePlan), parsed
once by the parent: the worker and the simulator's build service never parse
the candidate's text again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mlxsci.kernel.plan import CandidatePlan


@dataclass(frozen=True)
class RunCap:
    """How far runs past a minimum may go: at most `max_runs` runs or
    `max_seconds` seconds (the warm-up's settling, the simulator's extra
    timed runs)."""

    max_runs: int
    max_seconds: float

    @classmethod
    def from_wire(cls, data: dict | None) -> RunCap | None:
        if data is None:
            return None
        return cls(int(data["max_runs"]), float(data["max_seconds"]))


@dataclass(frozen=True)
class TimingBudget:
    """The runs and seconds a size gets on a backend unless asked for others
    (each backend states its own: mlxsci.backends.BackendInfo.budget)."""

    n_warmup: int
    n_measure: int
    seconds_per_size: float
    # warm-up past n_warmup until timings settle (GPU clocks ramp up under load)
    settle: RunCap
    # timed runs past n_measure where more runs steady the time (cheap ones)
    extra_runs: RunCap | None = None


def _cap_wire(cap: RunCap | None) -> dict | None:
    return None if cap is None else {"max_runs": cap.max_runs, "max_seconds": cap.max_seconds}


def _run_wire(job: SizeJob | CompareJob) -> dict:
    """What every job that runs candidates says on the wire beside its plans."""
    return {
        "kind": job.kind,
        "task": job.task,
        "backend": job.backend,
        "backend_options": dict(job.backend_options),
        "params": dict(job.params),
        "n_warmup": job.n_warmup,
        "n_measure": job.n_measure,
        "timer": job.timer,
        "input_seeds": list(job.input_seeds),
    }


def _run_fields(data: dict) -> dict:
    """_run_wire read back: the fields of the job's class."""
    return {
        "task": data["task"],
        "backend": data["backend"],
        "backend_options": dict(data.get("backend_options") or {}),
        "params": dict(data["params"]),
        "n_warmup": int(data["n_warmup"]),
        "n_measure": int(data["n_measure"]),
        "timer": data.get("timer"),
        "input_seeds": tuple(int(s) for s in data.get("input_seeds") or ()),
    }


@dataclass(frozen=True)
class SizeJob:
    """One size of a candidate: where it runs, what it runs, how many runs,
    and what the parent wants back."""

    task: str  # the task's ref (mlxsci.task.load_task takes it)
    backend: str
    backend_options: dict
    plan: CandidatePlan
    params: dict  # the size
    n_warmup: int
    n_measure: int
    timer: str | None = None  # None: the backend's own
    settle: RunCap | None = None  # warm-up past n_warmup until timings settle
    extra_runs: RunCap | None = None  # timed runs past n_measure where they help
    input_seeds: tuple[int, ...] = ()  # one input set per seed; () the task's fixed inputs
    schedule_seeds: tuple[int, ...] | None = None  # the race check's shuffled orders
    # The race check's lock-step run too (the simulator's race detector, its
    # lanes taking turns at every device access: Backend.other_orders).
    lockstep: bool = False
    every_output: bool = False  # every run's outputs back: the parent checks them itself
    output_bytes: int = 0  # the most a run's outputs can take, to bound what is read back
    coverage_within_s: float | None = None  # the counted run, unless this much time is gone
    kind: str = field(default="size", init=False)

    @property
    def filename(self) -> str:
        return self.plan.filename

    @property
    def dialect(self) -> str:
        return self.plan.dialect

    @property
    def wants_coverage(self) -> bool:
        return self.coverage_within_s is not None

    @property
    def plans(self) -> tuple[CandidatePlan, ...]:
        return (self.plan,)

    def but(self, **changes) -> SizeJob:
        """This job with `changes` (dataclasses.replace)."""
        return replace(self, **changes)

    def to_wire(self) -> dict:
        return {
            **_run_wire(self),
            "plan": self.plan.to_wire(),
            "settle": _cap_wire(self.settle),
            "extra_runs": _cap_wire(self.extra_runs),
            "schedule_seeds": None if self.schedule_seeds is None else list(self.schedule_seeds),
            "lockstep": self.lockstep,
            "every_output": self.every_output,
            "output_bytes": self.output_bytes,
            "coverage_within_s": self.coverage_within_s,
        }

    @classmethod
    def from_wire(cls, data: dict) -> SizeJob:
        seeds = data.get("schedule_seeds")
        return cls(
            **_run_fields(data),
            plan=CandidatePlan.from_wire(data["plan"]),
            settle=RunCap.from_wire(data.get("settle")),
            extra_runs=RunCap.from_wire(data.get("extra_runs")),
            schedule_seeds=None if seeds is None else tuple(int(s) for s in seeds),
            lockstep=bool(data.get("lockstep")),
            every_output=bool(data.get("every_output")),
            output_bytes=int(data.get("output_bytes") or 0),
            coverage_within_s=data.get("coverage_within_s"),
        )


@dataclass(frozen=True)
class CompareJob:
    """Two candidates timed interleaved at one size, on the same input sets."""

    task: str
    backend: str
    backend_options: dict
    plans: tuple[CandidatePlan, CandidatePlan]
    params: dict
    n_warmup: int
    n_measure: int
    timer: str | None = None
    input_seeds: tuple[int, ...] = ()
    kind: str = field(default="compare", init=False)

    # What the exchange asks of any job: a comparison sends no outputs back.
    every_output = False
    output_bytes = 0
    wants_coverage = False

    @property
    def dialect(self) -> str:
        return self.plans[0].dialect

    def to_wire(self) -> dict:
        return {**_run_wire(self), "plans": [p.to_wire() for p in self.plans]}

    @classmethod
    def from_wire(cls, data: dict) -> CompareJob:
        first, second = (CandidatePlan.from_wire(p) for p in data["plans"])
        return cls(**_run_fields(data), plans=(first, second))


@dataclass(frozen=True)
class LaunchJob:
    """One launch of one kernel of mlxsci.fast's isolated calls
    (mlxsci.backends.sim.launch_job): `launch` is its description in
    mlxsci.protocol.launch_wire's form, its inputs wait in the job folder."""

    launch: dict
    output_bytes: int
    backend: str = "sim"  # the backend whose worker runs it (Backend.run_launch)
    kind: str = field(default="launch", init=False)

    input_seeds = ()
    every_output = False
    wants_coverage = False

    def to_wire(self) -> dict:
        return {
            "kind": self.kind,
            "launch": self.launch,
            "output_bytes": self.output_bytes,
            "backend": self.backend,
        }

    @classmethod
    def from_wire(cls, data: dict) -> LaunchJob:
        return cls(data["launch"], int(data["output_bytes"]), data.get("backend", "sim"))


Job = SizeJob | CompareJob | LaunchJob
# The jobs that run whole candidates (their plans), as the build service reads them.
CandidateJob = SizeJob | CompareJob
JOB_KINDS: dict[str, Any] = {"size": SizeJob, "compare": CompareJob, "launch": LaunchJob}


def job_from_wire(data: dict) -> Job:
    """The job a parent wrote, typed; ValueError for a kind this side does not know."""
    kind = data.get("kind")
    if kind not in JOB_KINDS:
        raise ValueError(f"a job of unknown kind {kind!r}")
    return JOB_KINDS[kind].from_wire(data)
