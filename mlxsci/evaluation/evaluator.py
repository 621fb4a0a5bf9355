"""The evaluation: a candidate, a task, sizes -> a verdict and a score.

`evaluate()` is the library function (`mlxsci.evaluate` is this function);
its command line, `mlxsci eval TASK` or `python -m mlxsci.eval TASK`, is
mlxsci/eval.py. Two candidates timed against each other (the search's
noise-aware acceptance) is mlxsci/evaluation/comparison.py.

The trusted side's protocol. It parses and validates the candidate
(mlxsci.evaluation.checks.misfit, mlxsci.kernel.source.policy), holds the cached NumPy reference, runs the sizes of a
candidate in one worker subprocess (mlxsci.worker, started and watched by
mlxsci/evaluation/runner.py: CandidateWorker), each size under its own timeout and
checked (mlxsci/evaluation/checks.py: check_size, whose docstring lists the checks)
before the next is handed over, and scores what passed (mlxsci/evaluation/results.py
holds the records). The runs and seconds each size gets, and what a
compute-sanitizer run changes, are in mlxsci/evaluation/budget.py.
Score S = geometric mean of the fractions of the in-distribution sizes (of the
other non-held-out sizes when none of those ran), 0 if any size fails; evaluation stops at the first failing size (as Metal-Sci).
Phi = the fraction at a held-out size, reported apart from S.

The machine's faults are not verdicts (mlxsci/storage/faults.py): an
evaluation that meets one (no space, a read-only folder, a worker that
could not start) raises EnvironmentFault instead of failing the candidate.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass

from mlxsci.backends import backend_info, backend_options, get_backend, resolve_backend_name
from mlxsci.backends.base import Backend
from mlxsci.evaluation import sanitizer
from mlxsci.evaluation.budget import (
    SANITIZER_SLOWDOWN,
    input_seeds,
    mark_sanitized,
    sanitized_job,
    schedule_seeds,
)
from mlxsci.evaluation.checks import check_size, failed_size, misfit
from mlxsci.evaluation.per_size_runner import ProcessPerSize
from mlxsci.evaluation.references import get_reference
from mlxsci.evaluation.results import Evaluation, SizeResult, geometric_mean
from mlxsci.evaluation.runner import candidate_worker
from mlxsci.kernel import dialects
from mlxsci.kernel.candidate import Candidate, CandidateError, parse
from mlxsci.kernel.plan import CandidatePlan, plan_candidate
from mlxsci.kernel.source import policy as source_policy
from mlxsci.protocol.exchange import ARCHIVE_SLACK, OUTPUT_FILES, coverage_counts
from mlxsci.protocol.jobs import SizeJob
from mlxsci.protocol.results import SizeRun, WorkerError
from mlxsci.roofline.ceilings import Roofline
from mlxsci.roofline.store import load_or_measure
from mlxsci.storage.cache import cache_dir
from mlxsci.storage.faults import check_after_failure, faults_raised
from mlxsci.task import Size, Task, load_task
from mlxsci.timing.noise import combined_noise
from mlxsci.timing.timers import check_timer


def machine_roofline(be: Backend, timer_name: str, announce, detail) -> Roofline:
    """What evaluations on this machine build or measure once (the backend's
    set-up, such as the simulator's compiler; the roofline); `announce` hears
    a line as each piece of that work starts (nothing on warm caches),
    `detail` the roofline probes' results."""
    be.prepare_machine(announce)
    return load_or_measure(be, progress=detail, timer=timer_name, announce=announce)


@dataclass
class Plan:
    """What one evaluation settles before any size runs (its arguments
    checked, the backend built for the dialect, the seed read when no source
    was given): what every size's job holds besides the size, the budget
    (mlxsci/evaluation/budget.py) of the backend's profile, and the worker."""

    task: Task
    backend_name: str
    backend: Backend
    device: dict
    options: dict
    source: str
    filename: str
    timer: str
    sanitize: str | None
    sanitizer_exe: str | None
    n_warmup: int | None
    n_measure: int | None
    timeout: float | None
    param_overrides: dict | None
    # Set where evaluate(coverage=True) runs on a backend that measures it.
    coverage: CoverageTally | None = None
    # The candidate parsed once (read_candidate): every size's job carries it.
    candidate: CandidatePlan | None = None
    # Why the candidate's param overrides cannot apply: the first size fails so.
    override_error: str | None = None

    def job(self, size: Size) -> SizeJob:
        """The size's job for the worker (mlxsci/worker/serve.py): the runs
        the protocol gives it on this backend unless asked for others; under
        compute-sanitizer as few as it allows (budget.sanitized_job)."""
        assert self.candidate is not None  # read_candidate made it before any size
        budget = backend_info(self.backend_name).budget
        job = SizeJob(
            task=self.task.ref,
            backend=self.backend_name,
            backend_options=self.options,
            plan=self.candidate,
            params=size.params,
            n_warmup=self.n_warmup if self.n_warmup is not None else budget.n_warmup,
            n_measure=self.n_measure if self.n_measure is not None else budget.n_measure,
            timer=self.timer,
            settle=budget.settle,
            extra_runs=budget.extra_runs if self.n_measure is None else None,
            # The counted run comes last; a size that used half its time
            # already skips it rather than risk its verdict on a timeout.
            coverage_within_s=(
                COVERAGE_TIME_SHARE * self.size_timeout() if self.coverage is not None else None
            ),
        )
        return sanitized_job(job, self.n_warmup, self.n_measure) if self.sanitize else job

    def size_timeout(self) -> float:
        """Seconds a size may take: as asked, else the budget's (longer under
        compute-sanitizer)."""
        per_size = backend_info(self.backend_name).budget.seconds_per_size
        if self.sanitize:
            return self.timeout or per_size * SANITIZER_SLOWDOWN
        return self.timeout or per_size

    def worker(self, unsandboxed: bool):
        """One process runs all sizes of the candidate (CandidateWorker), one
        size at a time, each checked before the next is handed over; under
        compute-sanitizer one process per size (ProcessPerSize)."""
        # (check_sanitize gave an executable for any tool asked for, or raised)
        if self.sanitize and self.sanitizer_exe:
            return ProcessPerSize((self.sanitize, self.sanitizer_exe))
        return candidate_worker(self.task, self.backend_name, unsandboxed)


def plan_evaluation(
    task_name: str | Task,
    source: str | None,
    backend: str,
    dialect: str | None,
    filename: str | None,
    timer: str | None,
    sanitize: str | None,
    sim_gpu: str | None = None,
    **budget,
) -> Plan:
    """The Plan of an evaluation: the task, the backend (its options for the
    dialect asked for, else the file's, and for the GPU `sim_gpu` it models),
    the timer and sanitizer checked, the task's seed when no source is given.
    `budget`: n_warmup, n_measure, timeout, param_overrides, as evaluate()
    takes them."""
    task = load_task(task_name)
    backend_name = resolve_backend_name(backend)
    if dialect is None and filename is None and source is None:
        # The seed is the candidate: a task with seeds in one dialect only
        # (task_from_kernel's) is evaluated in it.
        only = task.seed_dialects()
        dialect = only[0] if len(only) == 1 else None
    options = backend_options(backend_name, dialect or dialects.name_of_file(filename), sim_gpu)
    timer_name = check_timer(timer, backend_name)
    sanitizer_exe = sanitizer.check_sanitize(sanitize, backend_name)
    be = get_backend(backend_name, **options)
    if source is None:
        source = task.seed(be.dialect)
        filename = filename or str(task.seed_path(be.dialect))
    filename = filename or "<candidate>"
    device = be.device_info()
    return Plan(
        task, backend_name, be, device, options, source, filename, timer_name,
        sanitize, sanitizer_exe, **budget,
    )  # fmt: skip


def candidate_refusal(task: Task, source: str, dialect: str, filename: str) -> str | None:
    """Why the candidate cannot run at all, before any worker starts: a
    format error, the source policy's refusal (which ranks first), or a
    misfit with the task; None when it may run."""
    return read_candidate(task, source, dialect, filename)[1]


def read_candidate(
    task: Task, source: str, dialect: str, filename: str
) -> tuple[Candidate | None, str | None]:
    """The candidate parsed, the one time an evaluation parses it, and why
    it cannot run at all (candidate_refusal), None when it may."""
    try:
        cand = parse(source, dialect=dialect, filename=filename)
    except CandidateError as exc:
        return None, f"format error: {exc}"
    why = misfit(cand, task, f"{filename}:")  # the source policy's refusal ranks first
    refusal = source_policy.refusal(cand, f"{filename}:") or (why and f"format error: {why}")
    return cand, refusal


def plan_of(plan: Plan, cand: Candidate) -> None:
    """The candidate's plan (mlxsci.kernel.plan) for `plan`'s sizes, or why
    its param overrides cannot apply: as a worker reported it, a runtime
    failure of the first size."""
    try:
        plan.candidate = plan_candidate(
            cand, plan.task.kernels, plan.filename, plan.param_overrides
        )
    except (KeyError, TypeError, ValueError) as exc:
        plan.override_error = f"runtime: {type(exc).__name__}: {exc}"


def size_references(task, size: Size, job: SizeJob, secret: int) -> tuple:
    """(the job with its input seeds, the first set's reference, [the other
    sets']): one set per turn its runs reach (mlxsci.evaluation.budget.input_seeds).
    A task whose make_inputs takes no seed has its one fixed set (cached on disk)."""
    if not task.takes_seed:
        return job, get_reference(task, size.params), []
    job = job.but(input_seeds=tuple(input_seeds(secret, job.n_warmup, job.n_measure)))
    refs = [get_reference(task, size.params, seed=s) for s in job.input_seeds]
    return job, refs[0], refs[1:]


def run_size(
    worker, plan: Plan, size: Size, index: int, secret: int, roof: Roofline, say
) -> SizeResult | str:
    """One size of the protocol: its job; the references its checks need,
    computed before the worker takes the size (their cost is not the
    candidate's); the worker's run; the verdict on its answer (check_size).
    Returns the size's result, or the compile or format error (a str) that
    ends the evaluation."""
    task, be = plan.task, plan.backend
    if plan.override_error is not None:
        message = f"runtime error at size {size.label}: {plan.override_error}"
        return failed_size(size, task, message, "runtime")
    say(f"{task.name} {size.label}: reference")
    job, ref, rotation_refs = size_references(task, size, plan.job(size), secret)
    job = job.but(
        # the race check's other orders, drawn from the secret seed
        schedule_seeds=tuple(schedule_seeds(secret, index)) if be.reorders_threads else None,
        # and its lock-step run with the race detector, where the backend has one
        lockstep=be.has_lockstep_order(),
        # The candidate's native code runs in the worker: the parent
        # finds out what it can from outputs (checks.own_findings).
        every_output=be.runs_candidate_natively,
        output_bytes=ref.result_bytes(task),  # read no more than a run returns
    )
    under = f" under compute-sanitizer {plan.sanitize}" if plan.sanitize else ""
    say(f"{task.name} {size.label}: running on {plan.backend_name}{under}")
    result, jobdir, tail = worker.run(job, plan.size_timeout())
    if plan.coverage is not None:
        plan.coverage.add(size.label, result)
    try:
        if result is None or result.error is not None:  # no size follows a failure
            worker.end()  # first, with all it wrote: its room is not the machine's
            shutil.rmtree(jobdir, ignore_errors=True)
            error = None if result is None else result.error
            said = tail if error is None else error.message
            blame_machine_first(error, job, f"size {size.label} failed ({said[-300:]})")
            if error is not None:
                return worker_error(error, plan.filename, size, task)
            flag = "timeout" if tail.startswith("timeout") else "crash"
            failed = failed_size(size, task, f"runtime error at size {size.label}: {tail}", flag)
            failed.not_judged = machine_stop(flag, tail, plan.size_timeout())
            return failed
        if not isinstance(result, SizeRun):  # a compare job's answer: no worker sends one here
            raise TypeError(f"a size job got {type(result).__name__} back")
        return check_size(
            task,
            size,
            result,
            jobdir,
            roof,
            plan.backend_name,
            plan.device["name"],
            ref,
            rotation_refs,
            job=job,
        )
    finally:
        shutil.rmtree(jobdir, ignore_errors=True)


def worker_error(err: WorkerError, filename: str, size: Size, task: Task) -> SizeResult | str:
    """The verdict on an error the worker reported: a compile or format
    error (a str, naming the candidate's line) ends the evaluation; any
    other fails the size."""
    if err.ends_evaluation:
        line = f"{filename}:{err.line}: " if err.line else ""
        return f"{err.kind} error: {line}{err.message}"
    failed = failed_size(
        size, task, f"runtime error at size {size.label}: {err.kind}: {err.message}", err.kind
    )
    failed.not_judged = machine_stop(err.kind, err.message, None)
    return failed


def machine_stop(kind: str, said: str, limit: float | None) -> str | None:
    """Why a size that ended without a verdict was stopped by a limit of the
    machine that judges rather than by the kernel, or None when it was the
    kernel's doing. A time limit (the size's, or the simulator's per launch)
    and a worker killed from outside (SIGKILL: most often the system out of
    memory) say nothing about the kernel: a GPU might have finished it, and
    how long the simulator takes is not how long a GPU takes."""
    if kind == "timeout":
        limit_said = f" of {limit:g} s" if limit else ""
        return f"the machine's time limit{limit_said} ran out before a verdict ({said[:200]})"
    if "died of SIGKILL" in said:
        return f"the worker was killed from outside, most often out of memory ({said[:200]})"
    return None


def score_sizes(ev: Evaluation, task: Task, sizes: list[Size]) -> None:
    """S, its noise and Phi of a finished evaluation. S is Metal-Sci's score
    over the in-distribution sizes whenever they ran; otherwise (smoke or
    user-given sizes) over whatever non-held-out sizes ran."""
    in_dist = [s for s, size in zip(ev.sizes, sizes) if task.is_in_dist(size)]
    scored = in_dist or [s for s in ev.sizes if not s.held_out]
    if not ev.correct:
        ev.score = 0.0
    else:  # None when only held-out sizes ran: S is defined over the others
        ev.score = geometric_mean([s.fraction for s in scored]) if scored else None
    ev.noise = combined_noise([s.noise for s in scored]) if scored and ev.correct else None
    held = [s.fraction for s in ev.sizes if s.held_out and s.correct]
    ev.phi = held[0] if held and ev.correct else None


def judge_plausibility(ev: Evaluation, keep: bool) -> None:
    """The verdict on a correct evaluation with a size faster than the
    machine allows: `implausible`, with that size's numbers, and S 0 (Phi
    none), so no search keeps it; with `keep`, the verdict stands and the
    fractions count as measured."""
    reasons = [s.implausible for s in ev.sizes if s.implausible]
    if not reasons or not ev.correct:
        return
    ev.implausible = reasons[0]
    ev.implausible_kept = keep
    if not keep:
        ev.score, ev.phi, ev.noise = 0.0, None, None


def blame_machine_first(error: WorkerError | None, job: SizeJob, failure: str) -> None:
    """A size that failed without a verdict of the parent's (the worker died,
    or reported an error) is the machine's fault, not the candidate's, when the
    machine cannot write what an evaluation writes: EnvironmentFault then
    (mlxsci/storage/faults.py). A run needs room in the temporary folder
    for every output file a worker may write at this size and the parent's
    copy of each."""
    files = len(OUTPUT_FILES) + max(0, len(job.input_seeds) - 1)
    need = 2 * files * (job.output_bytes + ARCHIVE_SLACK)
    compiled = error is not None and error.ends_evaluation
    check_after_failure(compiled, need, [cache_dir()], failure)


@faults_raised
def evaluate(
    task_name: str | Task,
    source: str | None = None,
    *,
    backend: str = "auto",
    size_set: str = "in-dist",
    sizes: list[Size] | None = None,
    filename: str | None = None,
    n_warmup: int | None = None,
    n_measure: int | None = None,
    timeout: float | None = None,
    param_overrides: dict | None = None,
    dialect: str | None = None,
    timer: str | None = None,
    sanitize: str | None = None,
    progress=None,
    announce=None,
    unsandboxed: bool = False,
    input_seed: int | None = None,
    keep_implausible: bool = False,
    coverage: bool = False,
    sim_gpu: str | None = None,
) -> Evaluation:
    """Evaluate a candidate (the task's seed when `source` is None).

    task_name: a built-in task's name, a task folder's path, or a Task
    (load_task's, or mlxsci.task_from_kernel's).

    progress: a callable taking each progress line. announce: one taking only
    the lines that say once-per-machine work starts (building the simulator's
    compiler, measuring the roofline: minutes on a first run), default
    `progress`; a search passes it alone.

    dialect: "metal" or "cuda"; default: the file's extension when given, else
    the backend's own (the simulator's default is metal). sim_gpu: the GPU
    the simulator models (a name of mlxsci.backends.sim.gpus.names(); default
    the dialect's: apple-m1-pro for metal, nvidia-h100 for cuda), recorded in
    the result (Evaluation.sim_gpu); ValueError with another backend or an
    unknown name. timer: "cupti",
    "sim" or "wall" (mlxsci.timing.timers); default: the backend's own.
    sanitize: "memcheck" or "racecheck" (cuda backend only): each size's worker
    runs under NVIDIA's compute-sanitizer, and a fault it reports (out-of-bounds
    or misaligned access, shared-memory hazard) fails the size. Timing under
    the sanitizer is meaningless, so the result records `sanitized` and has no
    score (None) and no phi; correctness is checked as usual.
    unsandboxed: on the simulator, run the candidate without the OS sandbox
    (mlxsci.sandbox; where it cannot be set up, SandboxUnavailable): unsafe.
    input_seed: the secret seed the sizes' input data are drawn from (each
    timed run takes one of a few sets in turn, mlxsci.evaluation.budget.input_seeds);
    default a fresh one per evaluation, recorded in the result afterwards
    (Evaluation.input_seed) and never shown to a proposer.
    keep_implausible: count the fraction of a size whose time is below what
    the machine allows (mlxsci.evaluation.checks.implausibility) instead of scoring the
    candidate 0: for studying such kernels. The verdict says implausible
    either way.
    coverage: on a backend that measures it (Backend.measures_coverage: the
    simulator), count how often each arm of the candidate's branches runs,
    summed over every thread and every size: Evaluation.coverage (its shape:
    CoverageTally.record); None when not asked or where not measured. Each
    size's worker makes one more pipeline run for it, with kernels built to
    count (mlxsci.worker.serve.coverage_run), after the timed and the
    verification runs: the verdict and the score rest on the uninstrumented
    kernels alone, so the score stays comparable with any other. Coverage is
    evidence only: a count the parent cannot trust makes it unavailable,
    never changes a verdict."""
    plan = plan_evaluation(
        task_name, source, backend, dialect, filename, timer, sanitize, sim_gpu,
        n_warmup=n_warmup, n_measure=n_measure, timeout=timeout, param_overrides=param_overrides,
    )  # fmt: skip
    task, be, device = plan.task, plan.backend, plan.device
    ev = Evaluation(task.name, plan.backend_name, device["name"], be.dialect, plan.timer)
    ev.sim_gpu = device.get("sim_gpu")  # the GPU the simulator modelled (None on a GPU)
    secret = input_seed if input_seed is not None else secrets.randbits(62)
    say = progress or (lambda msg: None)
    cand, why = read_candidate(task, plan.source, be.dialect, plan.filename)
    if cand is not None and not why:
        plan_of(plan, cand)
    if coverage and be.measures_coverage:
        plan.coverage = CoverageTally.of(plan, refused=why)
    if why:  # it never reaches a worker
        ev.compile_ok, ev.fail_reason = False, why
        ev.coverage = plan.coverage.record() if plan.coverage else None
        return ev
    sizes = list(sizes) if sizes is not None else list(task.size_set(size_set))
    say(f"{task.name}: roofline for {device['name']}")
    roof = machine_roofline(be, plan.timer, announce or say, say)
    ev.roofline = dict(roof.source)  # which ceilings this result is scored against
    compiled = run_sizes(plan, ev, sizes, secret, roof, say, unsandboxed)
    ev.coverage = plan.coverage.record() if plan.coverage else None
    if not compiled:
        return ev
    ev.correct = ev.fail_reason is None and bool(ev.sizes)
    ev.input_seed = secret if task.takes_seed else None
    score_sizes(ev, task, sizes)
    if ev.not_judged:  # no verdict, so no score either
        ev.score = None
    judge_plausibility(ev, keep_implausible)
    if sanitize:
        mark_sanitized(ev, sanitize)
    return ev


def run_sizes(
    plan: Plan, ev: Evaluation, sizes: list[Size], secret: int, roof: Roofline, say, unsandboxed
) -> bool:
    """The sizes in order, in one worker, each result appended to `ev.sizes`
    until the first that fails (its reason in ev.fail_reason). False where
    the candidate did not compile (ev says so: no score)."""
    with plan.worker(unsandboxed) as worker:
        worker.prestart()  # its start-up overlaps the first size's references
        for index, size in enumerate(sizes):
            res = run_size(worker, plan, size, index, secret, roof, say)
            if isinstance(res, str):  # it did not compile: no score
                ev.compile_ok, ev.correct, ev.score, ev.fail_reason = False, False, 0.0, res
                return False
            ev.sizes.append(res)
            if not res.correct:  # evaluation stops at the first failing size
                ev.fail_reason = res.fail_reason
                ev.not_judged = res.not_judged
                break
    return True


# The share of a size's time limit after which its worker skips the counted
# run (evaluate(coverage=True)): it comes after everything the verdict needs.
COVERAGE_TIME_SHARE = 0.5


class CoverageTally:
    """The branch coverage an evaluation collects (evaluate(coverage=True)).
    The arms are the parent's own: Backend.branch_map of its own spec of each
    of the candidate's kernels. Each size's worker sends only counts
    (mlxsci.worker.serve.coverage_run), read as hostile: the candidate's
    code ran in that process and could write them. A record that is not
    exactly what the parent expects (mlxsci.protocol.exchange.coverage_counts)
    makes the whole coverage unavailable, with the reason; it never touches
    a verdict."""

    def __init__(self, filename: str, maps: dict, unavailable: str | None = None):
        self.filename = filename
        self.maps = maps  # kernel name -> BranchMap
        self.hits = {name: [0] * m.counters for name, m in maps.items()}
        self.sizes: list[str] = []  # sizes whose counts are summed
        self.uncounted: list[dict] = []  # sizes whose worker failed: no counts
        self.unavailable = unavailable

    @classmethod
    def of(cls, plan: Plan, refused: str | None = None) -> CoverageTally:
        """The tally of `plan`'s candidate; unavailable, saying why, where
        its kernels cannot be mapped (a candidate refused before any run)."""
        if refused:
            return cls(plan.filename, {}, f"the candidate never ran: {refused[:300]}")
        try:
            if plan.candidate is None:  # its overrides did not apply: nothing runs
                raise ValueError(plan.override_error)
            maps = {k.name: plan.backend.branch_map(k.spec) for k in plan.candidate.kernels}
        except Exception as exc:  # noqa: BLE001 - coverage is evidence only
            return cls(plan.filename, {}, f"the kernels' arms could not be mapped: {exc}"[:300])
        if any(m is None for m in maps.values()):
            return cls(plan.filename, {}, "the backend mapped no arms")
        return cls(plan.filename, maps)

    def add(self, label: str, result: SizeRun | None) -> None:
        """A size's worker result: its coverage record's counts summed in, a
        failed size noted, a record refused making the coverage unavailable."""
        if self.unavailable is not None:
            return
        if not isinstance(result, SizeRun) or result.error is not None:
            why = "no result" if result is None else "the size failed"
            self.uncounted.append({"size": label, "reason": why})
            return
        try:
            expected = {name: m.counters for name, m in self.maps.items()}
            counts = coverage_counts(result.coverage, expected)
        except Exception as exc:  # noqa: BLE001 - whatever a worker wrote, the parent lives on
            counts = f"unreadable coverage record ({type(exc).__name__})"
        if isinstance(counts, str):
            self.unavailable = f"size {label}: {counts}"
            return
        for name, values in counts.items():
            self.hits[name] = [a + b for a, b in zip(self.hits[name], values)]
        self.sizes.append(label)

    def record(self) -> dict:
        """Evaluation.coverage: {"measured", "reason", "file", "sizes",
        "uncounted", "arms": [{"line", "column", "kind", "hits"}],
        "not_instrumented": [{"line", "column", "kind", "reason"}]}: arms at
        lines of the candidate file, a header's arms summed over the kernels
        that include it; hits None when not measured."""
        measured = self.unavailable is None and bool(self.sizes)
        reason = self.unavailable or (None if measured else "no size completed its counted run")
        arms: dict[tuple, int] = {}
        left_out: dict[tuple, dict] = {}
        for name, m in self.maps.items():
            for arm in m.arms:
                key = (arm["line"], arm["column"], arm["kind"])
                arms[key] = arms.get(key, 0) + self.hits[name][arm["counter"]]
            for k in m.not_instrumented:
                left_out[(k["line"], k["column"], k["kind"])] = dict(k)
        return {
            "measured": measured,
            "reason": reason,
            "file": self.filename,
            "sizes": list(self.sizes),
            "uncounted": list(self.uncounted),
            "arms": [
                {"line": line, "column": col, "kind": kind, "hits": hits if measured else None}
                for (line, col, kind), hits in sorted(arms.items())
            ],
            "not_instrumented": [left_out[k] for k in sorted(left_out)],
        }
