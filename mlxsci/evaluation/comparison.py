"""Two correct candidates timed against each other: `compare()`.

The search's noise-aware acceptance (search --accept noise-aware) re-times a
candidate against the incumbent before it replaces it: both run interleaved
in one worker per size (mlxsci.worker.serve.run_compare), on the same input sets
(drawn from a fresh secret seed, as an evaluation's are), so both see the
same machine state. Correctness is not checked here: both passed their own
evaluations (mlxsci.evaluation.evaluator.evaluate).
"""

from __future__ import annotations

import secrets
import shutil

from mlxsci.backends import backend_class, backend_info, backend_options, resolve_backend_name
from mlxsci.evaluation.budget import input_seeds
from mlxsci.evaluation.results import geometric_mean
from mlxsci.evaluation.runner import candidate_worker
from mlxsci.kernel.candidate import CandidateError, parse
from mlxsci.kernel.plan import plan_candidate
from mlxsci.protocol.jobs import CompareJob
from mlxsci.protocol.results import ComparedRuns, WorkerError
from mlxsci.storage.cache import cache_dir
from mlxsci.storage.faults import check_after_failure, faults_raised
from mlxsci.task import Size, load_task
from mlxsci.timing.measurement import Measurement
from mlxsci.timing.noise import combined_noise
from mlxsci.timing.timers import check_timer


@faults_raised
def compare(
    task_name: str,
    incumbent: str,
    candidate: str,
    *,
    backend: str = "auto",
    size_set: str = "in-dist",
    sizes: list[Size] | None = None,
    filenames: tuple[str, str] = ("incumbent", "candidate"),
    dialect: str | None = None,
    timer: str | None = None,
    n_warmup: int | None = None,
    n_measure: int | None = None,
    timeout: float | None = None,
    unsandboxed: bool = False,
    held_out: bool = False,
    sim_gpu: str | None = None,
) -> dict:
    """Time two correct candidates against each other, interleaved in one worker
    per size (mlxsci.worker.serve.run_compare), so both see the same machine state.

    Returns {"timer", "sizes": [{"label", "incumbent", "candidate" (seconds, by
    the timer's statistic as in an evaluation), "speedup" (incumbent / candidate), "noise"}], "speedup" (geometric
    mean over sizes), "noise" (combined_noise of the sizes' noise, each the
    larger of the two candidates' spreads)}, or {"error": ...} when a worker
    failed. Noise-aware acceptance (search --accept noise-aware) takes a
    candidate only when the speedup lies beyond the noise (mlxsci.evaluation.verdicts).
    held_out: held-out sizes may be timed (a transfer check, after a search's
    last proposal); else they are refused, as a search never times them.
    sim_gpu: the GPU the simulator models (as evaluate() takes it).
    """
    task = load_task(task_name)
    backend_name = resolve_backend_name(backend)
    options = backend_options(backend_name, dialect, sim_gpu)
    timer_name = check_timer(timer, backend_name)
    budget = backend_info(backend_name).budget
    warm, measure, per_size = budget.n_warmup, budget.n_measure, budget.seconds_per_size
    sizes = list(sizes) if sizes is not None else list(task.size_set(size_set))
    out: dict = {"timer": timer_name, "sizes": []}
    secret = secrets.randbits(62)
    be = backend_class(backend_name)
    dialect_name = options.get("dialect", be.dialect)
    try:  # both passed their own evaluations, so this fails only when called otherwise
        plans = tuple(
            plan_candidate(parse(text, dialect=dialect_name, filename=name), task.kernels, name)
            for text, name in zip((incumbent, candidate), filenames)
        )
    except (CandidateError, KeyError) as exc:
        return {"timer": timer_name, "error": f"comparison failed: format error: {exc}"}
    n_warmup = n_warmup if n_warmup is not None else warm
    # interleaved pairs: at least 5 of each, to see the spread
    n_measure = max(5, n_measure if n_measure is not None else measure)
    for size in sizes:
        if task.is_held_out(size) and not held_out:
            raise ValueError("a comparison never times held-out sizes")
        seeds = input_seeds(secret, n_warmup, n_measure) if task.takes_seed else ()
        job = CompareJob(
            task=task.ref,
            backend=backend_name,
            backend_options=options,
            plans=(plans[0], plans[1]),
            params=size.params,
            n_warmup=n_warmup,
            n_measure=n_measure,
            timer=timer_name,
            input_seeds=tuple(seeds),
        )
        with candidate_worker(task, backend_name, unsandboxed) as worker:
            result, jobdir, tail = worker.run(job, timeout or per_size)
        shutil.rmtree(jobdir, ignore_errors=True)
        if not isinstance(result, ComparedRuns) or result.error is not None:
            error = result.error if isinstance(result, ComparedRuns) else None
            return {"timer": timer_name, "error": comparison_failure(error, tail, size)}
        out["sizes"].append(timed_pair(result, size.label))
    out["speedup"] = geometric_mean([s["speedup"] for s in out["sizes"]])
    out["noise"] = combined_noise([s["noise"] for s in out["sizes"]])
    return out


def comparison_failure(error: WorkerError | None, tail: str, size: Size) -> str:
    """Why a size's comparison failed (the worker's error, else how it
    ended), once the machine is cleared of the blame (the worker and its
    folder are gone: EnvironmentFault if the machine is to blame)."""
    why = tail if error is None else f"{error.kind}: {error.message}"
    failed = f"comparison at size {size.label} failed"
    compiled = error is not None and error.ends_evaluation
    check_after_failure(compiled, 0, [cache_dir()], f"{failed} ({why[-300:]})")
    return f"{failed}: {why}"


def timed_pair(result: ComparedRuns, label: str) -> dict:
    """One size's comparison from the worker's two series of seconds, each
    reduced by the timer's statistic as in an evaluation."""
    a, b = (Measurement.of(s, result.statistic or "median") for s in result.seconds)
    return {
        "label": label,
        "incumbent": a.value,
        "candidate": b.value,
        "speedup": a.value / b.value if b.value > 0 else float("inf"),
        "noise": max(a.noise, b.noise),
    }
