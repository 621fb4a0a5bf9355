"""The worker: runs one candidate, size after size, in its own process.

A job is one size: JOBDIR/job.json in, JOBDIR/result.json out, plus the
outputs of the verified run (verified.npz) and, only when it differs bitwise,
of the last timed run (last.npz). Two ways to run jobs:
- `python -m mlxsci.worker JOBDIR`: one job, then exit (a comparison, or a
  size under compute-sanitizer);
- `python -m mlxsci.worker --serve FD`: the sizes of one candidate, in one
  process, so the imports and the backend's set-up are paid once per
  candidate, not once per size. The parent writes a job and its folder on
  stdin (one JSON line) only after it has checked the size before; the worker
  runs it, writes result.json, then "done" on file descriptor FD. End of stdin ends
  the worker. The parent times each size from the moment it sends its line,
  so a crash or a hang is that size's verdict and later sizes never run.
The parent (mlxsci.evaluation, through mlxsci.evaluation.runner and mlxsci.evaluation.checks) holds
the reference and does every check against it; the worker only measures, so a
crash, a hang or a GPU fault here costs the parent nothing but a verdict.

Protocol per size: inputs, all on the device (0-d scalars too), one set per
input seed the job names (mlxsci.worker.runs) -> first run (compiles) ->
warm-up runs until timings settle -> timed runs, the warm-up and timed runs
taking the input sets in turn (the last of each set's outputs go back:
last.npz, timed_K.npz), each timed by
the backend's timer (mlxsci.timing.timers: CUPTI kernel activity on CUDA, the
simulator's own clock, or chained wall clock; each waits for the run's
results, so lazy work cannot escape it) -> two verification runs whose
outputs are poisoned with two different sentinels (on the simulator, the
first's reads the language leaves undefined go in result["undefined_reads"]:
mlxsci.protocol.undefined_reads; where its outputs hold a NaN, it runs once
more with threadgroup memory zero-filled instead of poisoned:
unwritten_threadgroup_run) -> on the simulator, the
first verification run once more under each other schedule (run_schedules;
races show as a difference, judged by the parent, mlxsci.evaluation.checks):
  reversed       groups, simdgroups and threads last first (forward where
                 MLXSCI_SIM_SCHEDULE made reversed the simulator's own);
  shuffled (S)   one per seed S of the job's "schedule_seeds" (two fresh
                 random seeds when it names none): groups and threads in
                 orders drawn from S, simdgroups interleaved at random
                 around barriers and SIMD operations (runtime/sim_runtime.h);
  outputs that differ bitwise go back as schedule_K.npz (K from 1, in
  this order) -> input checksums again -> on the simulator, one run with
  kernels that check their indices into private and constant arrays
  (bounds_run) -> with job "coverage", one more run
  with kernels that count their branch arms (coverage_run; nothing the
  verdict or the score reads).
A job with "compare" instead times two candidates interleaved (run_compare);
one with "launch" is one launch of one kernel (its backend's run_launch, mlxsci.backends.sim.launch_job:
mlxsci.fast's isolated calls).

A worker never outlives its parent for long, however the parent ends (kill -9
included): it watches the lifeline its parent hands it (mlxsci.sandbox.lifeline).
"""

from __future__ import annotations

import gc
import json
import os
import secrets
import sys
import time
import traceback
from dataclasses import replace
from functools import partial
from pathlib import Path

import click
import mlx.core as mx
import numpy as np

from mlxsci import sandbox
from mlxsci.backends import backend_class, get_backend
from mlxsci.backends.base import RunMode
from mlxsci.kernel.candidate import CandidateError
from mlxsci.kernel.launch_expr import LaunchExprError
from mlxsci.kernel.spec import CompileError, KernelFault
from mlxsci.protocol.exchange import MAX_SCHEDULES, MESSAGE_CHARS, cut_texts, schedule_file
from mlxsci.protocol.jobs import CompareJob, LaunchJob, SizeJob, job_from_wire
from mlxsci.protocol.outputs import (
    SENTINEL_A,
    SENTINEL_B,
    input_checksums,
    same_bits,
    to_numpy,
    unwritten_count,
)
from mlxsci.sandbox.lifeline import Lifeline
from mlxsci.storage.cache import atomic_write_json
from mlxsci.task import load_task
from mlxsci.timing.measurement import interleaved, trials, warm_up
from mlxsci.timing.noise import run_noise
from mlxsci.timing.timers import Work, median_kernels
from mlxsci.worker.launch import Launcher
from mlxsci.worker.runs import Rotation, device_inputs, job_timer, pipeline_work

# How many shuffled orders a size's extra verification runs take when the
# job names no seeds (each is one more pipeline run at the size).
SHUFFLED_RUNS = 2


def other_orders(job: SizeJob, backend) -> list[tuple[str, int | None, RunMode]]:
    """The backend's other thread orders for this size (Backend.other_orders),
    shuffled by each seed of the job's schedule_seeds (else SHUFFLED_RUNS
    fresh ones), at most MAX_SCHEDULES."""
    seeds = job.schedule_seeds
    if seeds is None or not all(type(s) is int and 0 <= s < 1 << 64 for s in seeds):
        seeds = tuple(secrets.randbits(63) for _ in range(SHUFFLED_RUNS))
    return backend.other_orders(seeds, lockstep=job.lockstep)[:MAX_SCHEDULES]


def order_name(order: str, seed: int | None) -> str:
    """An order as messages name it: "reversed", "shuffled (seed 42)",
    "lock-step simdgroups"."""
    if order == "lockstep":
        return "lock-step simdgroups"
    return f"{order} (seed {seed})" if seed is not None else order


def run_schedules(job: SizeJob, work: Work, inputs: dict, launcher, backend, verified: dict):
    """The first verification run again (same poison) in each other order of
    the backend's (other_orders; each run's RunMode goes with its kernel
    calls): a GPU orders neither threadgroups nor simdgroups without a
    barrier, so a result that depends on the order is a race one order would
    hide. Returns, per order, its record for result.json and its outputs
    where they differ bitwise from `verified` (else None; all of them with
    job "every_output"). A fault only in another order says so."""
    records, differing = [], []
    for order, seed, mode in other_orders(job, backend):
        launcher.mode = replace(mode, init_value=SENTINEL_A)
        try:
            outputs = to_numpy(work.enqueue(inputs))
        except KernelFault as exc:
            name = order_name(order, seed)
            if exc.kind == "race":  # the race detector, which only this run has on
                why = f"found by the race detector in the verification run with {name}"
            else:
                why = (
                    f"only with the threads in another order, {name}: the kernel "
                    "depends on the order threads run in, a race"
                )
            raise KernelFault(
                exc.kind, f"{exc.message} ({why})", dict(exc.details, schedule=name)
            ) from exc
        finally:
            launcher.mode = RunMode()
        same = same_bits(outputs, verified)
        records.append({"order": order, "seed": seed, "equals_verified": same})
        # every one when the parent compares them itself (job "every_output")
        differing.append(None if same and not job.every_output else outputs)
    return records, differing


def _has_nan(outputs: dict) -> bool:
    return any(
        np.issubdtype(v.dtype, np.floating) and bool(np.isnan(v).any()) for v in outputs.values()
    )


def unwritten_threadgroup_run(work: Work, inputs: dict, launcher, backend, verified: dict):
    """Where the backend fills threadgroup memory with poison (the simulator:
    NaN, Backend.tg_fill) and the verified outputs hold a NaN, the first
    verification run once more with that memory zero-filled: outputs that
    change show that the kernel read threadgroup memory before writing it,
    which the parent names when the size fails (a NaN alone does not say
    where it came from). Its record {"outputs_change": bool}, or None when
    it did not run or did not complete (the verdict stands on the checked
    runs either way). One more run, and only for outputs with a NaN."""
    if not backend.poisons_threadgroup_memory or not _has_nan(verified):
        return None
    launcher.mode = RunMode(init_value=SENTINEL_A, tg_fill=0x00)
    try:
        outputs = to_numpy(work.enqueue(inputs))
    except Exception:  # noqa: BLE001 - a fault with zeros says nothing the verdict needs
        return None
    finally:
        launcher.mode = RunMode()
    return {"outputs_change": not same_bits(outputs, verified)}


def bounds_run(work: Work, inputs: dict, launcher, backend, timings: dict) -> None:
    """Where the backend can build kernels that check every index into an
    array of known bound (the simulator: thread-private arrays and constant
    tables, which no guard page surrounds; mlxsci/backends/sim/bounds.py),
    one more run of the pipeline on the first input set with those builds,
    after the verification runs, so that no timed or verified output comes
    from them. An index past such an array's bound raises the
    KernelFault("out_of_bounds") naming the array's type, the index, the
    line and the thread, and the size fails with it: the plain build may
    have dropped the code at that index (undefined behaviour) and computed
    an answer the kernel does not promise. Its outputs are not used."""
    if not backend.checks_array_bounds:
        return
    t = time.perf_counter()
    launcher.mode = RunMode(init_value=SENTINEL_A, check_bounds=True)
    try:
        to_numpy(work.enqueue(inputs))
    except KernelFault as exc:
        # An inner subscript past its row: a GPU indexes the array flat (faults.py).
        if not exc.details.get("inner_subscript"):
            raise
    finally:
        launcher.mode = RunMode()
        timings["bounds"] = time.perf_counter() - t


def coverage_run(
    job: SizeJob, work: Work, inputs: dict, launcher, backend, verified: dict, started: float
) -> dict:
    """One more run of the pipeline on the first input set with the kernels'
    counted variants (Backend.count_branches: they count how often each arm
    of the candidate's branches runs, mlxsci/backends/sim/coverage.py),
    after every run the verdict and the score rest on, so that neither
    depends on it. Its record: {"kernels": {name: counts}, "equals_verified":
    whether its outputs equal the verified run's bit for bit}, or {"error":
    why there are no counts} (a build or a fault of the counted variant, or
    too little of the size's time left: job["coverage"]["within_s"])."""
    within = job.coverage_within_s
    if isinstance(within, (int, float)) and time.monotonic() - started > within:
        return {"error": "too little of the size's time left for the counted run"}
    launcher.mode = RunMode(init_value=SENTINEL_A, count_branches=True)
    try:
        outputs = to_numpy(work.enqueue(inputs))
        return {"kernels": launcher.branch_hits(), "equals_verified": same_bits(outputs, verified)}
    except Exception as exc:  # noqa: BLE001 - no counts is the answer; the size stands
        text = error_fields(exc, backend).get("message") or type(exc).__name__
        return {"error": str(text)[:MESSAGE_CHARS]}
    finally:
        launcher.mode = RunMode()


def error_record(exc: BaseException, backend) -> dict:
    """The result's error for `exc`, each text in it cut (mlxsci.protocol.exchange.cut_texts):
    a compiler's log of a candidate's text can be of any size."""
    return cut_texts(error_fields(exc, backend))


def error_fields(exc: BaseException, backend) -> dict:
    err = backend.classify_error(exc) if backend is not None else None
    if isinstance(err, CompileError):
        return {"kind": "compile", "message": err.message, "line": err.line, "log": err.log}
    if isinstance(err, KernelFault):
        return {"kind": err.kind, "message": err.message, "details": err.details}
    if isinstance(exc, CandidateError):
        return {"kind": "format", "message": str(exc), "line": getattr(exc, "line", None)}
    if isinstance(exc, LaunchExprError):
        return {"kind": "launch", "message": f"launch expression: {exc}"}
    return {
        "kind": "runtime",
        "message": f"{type(exc).__name__}: {exc}",
        "traceback": traceback.format_exc(limit=8),
    }


def run_job(job: SizeJob, outdir: Path) -> dict:
    """One size of the protocol (this module's docstring), phase by phase
    (result["phase"] says which one a failure met), its result for
    result.json; the outputs the parent checks go to `outdir`."""
    started = time.monotonic()
    timings: dict = {}
    result: dict = {"phase": "setup", "timings": timings}
    backend = timer = None
    try:
        task = load_task(job.task)
        params = job.params
        backend = get_backend(job.backend, **job.backend_options)
        # What a modelled clock samples is drawn from the evaluation's secret
        # seed: unknown to the candidate, the same when the seed is replayed.
        backend.seed_timing(job.input_seeds[0] if job.input_seeds else None)
        timer = job_timer(job, backend, task)

        result["phase"] = "inputs"
        sets = input_sets(job, task, params, backend, result, timings)
        inputs = sets[0]  # the first set is also the verification runs' inputs
        launcher = Launcher(backend, task, job.plan, params)
        work = pipeline_work(task, launcher, inputs, params, backend)
        # every run's digest where the parent checks the outputs itself
        rotation = Rotation(work, sets, digests=job.every_output)

        result["phase"] = "compile"
        t = time.perf_counter()
        work.wait(work.enqueue(inputs))
        timings["first_run"] = time.perf_counter() - t
        timings["compile"] = launcher.compile_seconds()

        result["phase"] = "warmup"
        t = time.perf_counter()
        warm = warm_up(lambda: rotation.time(timer).seconds, job.n_warmup, job.settle)
        result["warmup"] = {"runs": warm["runs"], "settled": warm["settled"]}
        timings["warmup"] = time.perf_counter() - t

        result["phase"] = "timed"
        last, others = timed_runs(job, timer, rotation, result, timings)
        work.inputs = inputs

        result["phase"] = "verify"
        verified, second, other_orders = verification_runs(
            job, work, sets, launcher, backend, result, timings
        )
        result["phase"] = "bounds"
        bounds_run(work, inputs, launcher, backend, timings)
        if job.wants_coverage:
            result["phase"] = "coverage"
            result["coverage"] = coverage_run(
                job, work, inputs, launcher, backend, verified, started
            )
        runs = verified, second, last, others, other_orders
        write_outputs(outdir, result, *runs, digests=rotation.digests)
        result["phase"] = "done"
    except Exception as exc:  # every failure of the candidate becomes a verdict
        result["error"] = error_record(exc, backend)
    finally:
        if timer is not None:
            timer.close()
    return result


def input_sets(
    job: SizeJob | CompareJob, task, params: dict, backend, result: dict, timings: dict
) -> list:
    """One input set per seed the job names (else the task's fixed inputs),
    on the device; their checksums go in the result."""
    t = time.perf_counter()
    sets, checksums = [], []
    for seed in job.input_seeds or (None,):
        one, sums = device_inputs(task, params, backend, seed)
        sets.append(one)
        checksums.append(sums)
    result["input_checksums_before"] = checksums[0]
    result["rotation_checksums_before"] = checksums[1:]
    timings["inputs"] = time.perf_counter() - t
    return sets


def timed_runs(job: SizeJob, timer, rotation: Rotation, result: dict, timings: dict) -> tuple:
    """The timed runs (n_measure, then more of the cheap ones within the job's
    extra_runs budget): their seconds, the timer's record, the noise and the
    per-kernel breakdown go in the result. Returns the outputs of the last
    timed run on the first input set and on each other (None for a set no
    timed run took), on the host."""
    t = time.perf_counter()
    timed = trials(
        lambda: rotation.time(timer), job.n_measure, job.extra_runs, timer.more_runs_help
    )
    timings["timed"] = time.perf_counter() - t
    result["seconds"] = [x.seconds for x in timed]
    result["timer"] = timer.info()
    result["noise"] = run_noise(result["seconds"], timer.statistic)
    # The breakdown of the run the size's time comes from: the fastest one
    # where the statistic is the minimum, else the per-kernel medians.
    result["kernels"] = median_kernels(
        [min(timed, key=lambda x: x.seconds)] if timer.statistic == "min" else timed
    )
    last = to_numpy(rotation.last[0])
    others = [to_numpy(r) if r is not None else None for r in rotation.last[1:]]
    del timed
    rotation.last = []
    return last, others


def verification_runs(
    job: SizeJob, work: Work, sets: list, launcher, backend, result: dict, timings: dict
) -> tuple:
    """The two verification runs on the first input set, outputs poisoned
    with two different sentinels (the unwritten counts go in the result);
    where the backend reorders threads, the first again in each other order
    (run_schedules); then the input checksums again. Returns the verified
    outputs, the second run's, and each other order's where the parent gets
    them back."""
    inputs = sets[0]
    t = time.perf_counter()
    # What the simulator saw of reads the language leaves undefined, in the
    # verified run alone (mlxsci.protocol.undefined_reads): the parent names
    # them where the size fails, and flags them where it passes.
    backend.take_undefined_reads()
    launcher.mode = RunMode(init_value=SENTINEL_A)
    verified = to_numpy(work.enqueue(inputs))
    seen = backend.take_undefined_reads()
    if seen:
        result["undefined_reads"] = seen
    launcher.mode = RunMode(init_value=SENTINEL_B)
    second = to_numpy(work.enqueue(inputs))
    launcher.mode = RunMode()
    result["unwritten"] = {k: unwritten_count(verified[k], second[k]) for k in verified}
    threadgroup = unwritten_threadgroup_run(work, inputs, launcher, backend, verified)
    if threadgroup is not None:
        result["unwritten_threadgroup"] = threadgroup
    timings["verify"] = time.perf_counter() - t
    result["phase"], t, other_orders = "schedules", time.perf_counter(), []
    if backend.reorders_threads:  # the simulator; GPUs have their own orders
        result["verified_order"] = backend.own_order or "?"
        result["schedules"], other_orders = run_schedules(
            job, work, inputs, launcher, backend, verified
        )
    timings["schedules"] = time.perf_counter() - t
    t = time.perf_counter()
    result["input_checksums_after"] = input_checksums({k: np.array(v) for k, v in inputs.items()})
    result["rotation_checksums_after"] = [
        input_checksums({k: np.array(v) for k, v in one.items()}) for one in sets[1:]
    ]
    timings["verify"] += time.perf_counter() - t
    return verified, second, other_orders


def write_outputs(
    outdir: Path,
    result: dict,
    verified: dict,
    second: dict,
    last: dict,
    others: list,
    other_orders: list,
    digests: list | None,
) -> None:
    """The outputs the parent checks, into `outdir`: the verified run's; the
    last timed run's where it differs bitwise; where the parent works out
    what it can itself (job "every_output": the runs' `digests` were kept),
    the last timed run's always, the second verification run's and the
    digests; the last timed run on each other input set; each other order's
    run that came back."""
    np.savez(outdir / "verified.npz", **verified)
    result["last_equals_verified"] = same_bits(last, verified)
    every_output = digests is not None
    if every_output or not result["last_equals_verified"]:
        np.savez(outdir / "last.npz", **last)
    if every_output:
        np.savez(outdir / "second.npz", **second)
        result["run_digests"] = digests
    # The last timed run of every other input set, checked by the parent
    # against that set's reference (a set no timed run took has none).
    result["rotation_timed"] = [r is not None for r in others]
    for k, outputs in enumerate(others, start=1):
        if outputs is not None:
            np.savez(outdir / f"timed_{k}.npz", **outputs)
    for k, outputs in enumerate(other_orders, start=1):  # the parent reads these back
        if outputs is not None:
            np.savez(outdir / schedule_file(k), **outputs)


def run_compare(job: CompareJob, outdir: Path) -> dict:
    """Time two correct candidates at one size, interleaved in this one process
    (same inputs, same device state, same clocks): warm both, then rounds of
    A B / B A so drift in either direction hits both alike. Correctness is
    not checked here; both were verified by their own evaluations."""
    result: dict = {"phase": "setup"}
    backend = timer = None
    try:
        task = load_task(job.task)
        params = job.params
        backend = get_backend(job.backend, **job.backend_options)
        timer = job_timer(job, backend, task)
        result["phase"] = "inputs"
        sets = [device_inputs(task, params, backend, s)[0] for s in job.input_seeds or (None,)]
        works = []
        for plan in job.plans:
            launcher = Launcher(backend, task, plan, params)
            works.append(pipeline_work(task, launcher, sets[0], params, backend))
        result["phase"] = "warmup"
        for work in works:
            work.wait(work.enqueue(sets[0]))
        # Both take the same input sets in the same turn (Rotation).
        rotations = [Rotation(work, sets) for work in works]
        result["phase"] = "timed"  # the warm-up rounds first (mlxsci.timing.measurement)
        result["seconds"] = interleaved(
            [partial(rotation_seconds, r, timer) for r in rotations], job.n_warmup, job.n_measure
        )
        result["timer"] = timer.info()
        result["phase"] = "done"
    except Exception as exc:
        result["error"] = error_record(exc, backend)
    finally:
        if timer is not None:
            timer.close()
    return result


def rotation_seconds(rotation: Rotation, timer) -> float:
    """One timed run of `rotation`'s next input set: its seconds."""
    return rotation.time(timer).seconds


def run_one(outdir: Path, wire: dict | None = None, builds=None) -> None:
    """The job on the wire `wire` (else the one in outdir/job.json), its
    result written to outdir/result.json; `builds` (in the sandbox) asks the
    parent for kernel builds, through the job's backend."""
    if wire is None:
        wire = json.loads((outdir / "job.json").read_text())
    job = job_from_wire(wire)
    backend_class(job.backend).use_parent_builds(builds)
    if isinstance(job, LaunchJob):  # one launch of an isolated mlxsci.fast kernel
        result = backend_class(job.backend).run_launch(job, outdir)
    elif isinstance(job, CompareJob):
        result = run_compare(job, outdir)
    else:
        result = run_job(job, outdir)
    atomic_write_json(outdir / "result.json", result)


def release_memory() -> None:
    """Give the last size's buffers back between sizes, so each size starts
    with as little held as a fresh process had (MLX keeps freed buffers in
    a cache for reuse; outputs are poisoned, so reuse could not pass a stale
    answer either way)."""
    gc.collect()
    mx.clear_cache()


def start_threads() -> None:
    """Make MLX start the threads it starts on its first computation (its CPU
    stream's), now: once a candidate's library is loaded, the sandbox lets
    no thread start (mlxsci.sandbox.seal)."""
    mx.eval(mx.array(1.0, dtype=mx.float32) + 1)


class ParentBuilds:
    """How a sandboxed worker gets its kernel libraries (Backend.use_parent_builds):
    it may start no compiler and write no cache, so it writes the build
    request into the size's job folder, says "build NAME" on the status pipe,
    and reads the parent's answer (a reply the backend reads: a library path
    or an error) from stdin."""

    def __init__(self, status):
        self.status = status
        self.jobdir: Path | None = None  # the size being run
        self.count = 0

    def __call__(self, request: dict) -> dict:
        assert self.jobdir is not None  # set by serve() before each job
        self.count += 1
        name = f"build-{self.count}.json"
        (self.jobdir / name).write_text(json.dumps(request))
        self.status.write(f"build {name}\n")
        answer = sys.stdin.readline()
        if not answer:
            raise CompileError("the evaluation ended before it built the kernel", None, "")
        return json.loads(answer)


def serve(status_fd: int, lifeline: Lifeline | None = None) -> int:
    """Run the jobs whose folders arrive one per line on stdin, in order,
    saying "done" on `status_fd` after each result is written. In the
    sandbox, kernel builds are asked of the parent over the same two pipes."""
    # Only this process may hold the pipe: the parent reads its end closing as
    # this process's death, which a child holding a copy would hide.
    os.set_inheritable(status_fd, False)
    with os.fdopen(status_fd, "w", buffering=1) as status:
        builds = ParentBuilds(status) if sandbox.ACTIVE else None
        if sandbox.ACTIVE:
            start_threads()
        # Set up, no candidate code loaded yet: a death before this line is
        # the machine's fault, after it may be the candidate's (mlxsci.evaluation.runner).
        status.write("ready\n")
        for line in sys.stdin:
            if not line.strip():
                continue
            handed = json.loads(line)  # {"dir": the size's folder, "job": the job}
            outdir = Path(handed["dir"])
            if builds is not None:
                builds.jobdir = outdir
            run_one(outdir, handed["job"], builds)
            if handed["job"].get("kind") != "launch":  # a size, not one launch (~10 ms)
                release_memory()
            status.write("done\n")
    # End of stdin: the parent said goodbye on the lifeline first, or it is
    # gone and the lifeline's watcher ends this process after cleaning up.
    if lifeline is not None:
        lifeline.settle()
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("jobdir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--serve",
    "status_fd",
    type=click.IntRange(min=0),
    metavar="FD",
    help="Run the job folders that arrive one per line on stdin, saying "
    '"done" on file descriptor FD after each.',
)
def main(jobdir: Path | None, status_fd: int | None) -> int:
    """Run one job (JOBDIR/job.json -> JOBDIR/result.json), or with --serve FD
    the jobs of one candidate. Started by the evaluation (mlxsci.evaluation.runner),
    not by hand."""
    if (jobdir is None) == (status_fd is None):
        raise click.UsageError("give one JOBDIR or --serve FD, not both or neither")
    lifeline = Lifeline.from_environment()
    if status_fd is not None:
        return serve(status_fd, lifeline)
    assert jobdir is not None  # exactly one of the two was given
    run_one(jobdir)
    # A parent that died while this job ran: its folder is cleaned up before
    # this process exits (nothing is written to the lifeline in this mode).
    if lifeline is not None and lifeline.parent_gone_now():
        lifeline.settle()
    return 0


if __name__ == "__main__":
    sys.exit(main())
