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

import numpy as np

from mlxsci.backends import resolve_backend_name
from mlxsci.evaluation.budget import DEFAULTS, input_seeds
from mlxsci.evaluation.results import geometric_mean
from mlxsci.evaluation.runner import candidate_worker
from mlxsci.kernel.dialects import backend_options
from mlxsci.storage.cache import cache_dir
from mlxsci.storage.faults import check_after_failure, faults_raised
from mlxsci.task import Size, load_task
from mlxsci.timing.noise import combined_noise, run_noise
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
) -> dict:
    """Time two correct candidates against each other, interleaved in one worker
    per size (mlxsci.worker.serve.run_compare), so both see the same machine state.

    Returns {"timer", "sizes": [{"label", "incumbent", "candidate" (seconds, by
    the timer's statistic as in an evaluation), "speedup" (incumbent / candidate), "noise"}], "speedup" (geometric
    mean over sizes), "noise" (combined_noise of the sizes' noise, each the
    larger of the two candidates' spreads)}, or {"error": ...} when a worker
    failed. Noise-aware acceptance (search --accept noise-aware) takes a
    candidate only when the speedup lies beyond the noise (mlxsci.evaluation.verdicts).
    """
    task = load_task(task_name)
    backend_name = resolve_backend_name(backend)
    options = backend_options(backend_name, dialect)
    timer_name = check_timer(timer, backend_name)
    kind = "sim" if backend_name == "sim" else "gpu"
    warm, measure, per_size = DEFAULTS[kind]
    sizes = list(sizes) if sizes is not None else list(task.size_set(size_set))
    out: dict = {"timer": timer_name, "sizes": []}
    secret = secrets.randbits(62)
    for size in sizes:
        if task.is_held_out(size):
            raise ValueError("a comparison never times held-out sizes")
        runs = n_warmup if n_warmup is not None else warm
        # interleaved pairs: at least 5 of each, to see the spread
        pairs = max(5, n_measure if n_measure is not None else measure)
        job: dict = {
            "compare": True,
            "task": task.ref,
            "sources": [incumbent, candidate],
            "filenames": list(filenames),
            "backend": backend_name,
            "backend_options": options,
            "params": size.params,
            "timer": timer_name,
            "n_warmup": runs,
            "n_measure": pairs,
        }
        if task.takes_seed:
            job["input_seeds"] = input_seeds(secret, runs, pairs)
        with candidate_worker(task, backend_name, unsandboxed) as worker:
            result, jobdir, tail = worker.run(job, timeout or per_size)
        shutil.rmtree(jobdir, ignore_errors=True)
        if result is None or "error" in result:
            why = (
                tail
                if result is None
                else f"{result['error']['kind']}: {result['error']['message']}"
            )
            # The worker and its folder are gone: is the machine to blame?
            failed = f"comparison at size {size.label} failed"
            check_after_failure(result, 0, [cache_dir()], f"{failed} ({why[-300:]})")
            return {"timer": timer_name, "error": f"{failed}: {why}"}
        a, b = result["seconds"]
        statistic = result.get("timer", {}).get("statistic", "median")
        pick = min if statistic == "min" else np.median
        med_a, med_b = float(pick(a)), float(pick(b))
        out["sizes"].append(
            {
                "label": size.label,
                "incumbent": med_a,
                "candidate": med_b,
                "speedup": med_a / med_b if med_b > 0 else float("inf"),
                "noise": max(run_noise(a, statistic), run_noise(b, statistic)),
            }
        )
    out["speedup"] = geometric_mean([s["speedup"] for s in out["sizes"]])
    out["noise"] = combined_noise([s["noise"] for s in out["sizes"]])
    return out
