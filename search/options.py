"""A run's options (what run.json holds): those of a new run, built and checked
before anything is made; those of a resumed run, read back from its run.json
with what a resume may give anew; and the checks around them (the start file,
the run directory, a model's price under a cost cap).

Apart from the loop (search/loop.py) because all of it comes before the first
evaluation: a bad option is a clear error, never a half-made run directory.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from mlxsci.backends import backend_class, get_backend, resolve_backend_name
from mlxsci.evaluation.evaluator import misfit
from mlxsci.evaluation.sanitizer import check_sanitize
from mlxsci.kernel.candidate import CandidateError, parse, read_candidate_file
from mlxsci.kernel.dialects import backend_options, name_of_file
from mlxsci.search.proposers.llm import DEFAULT_LLM_RETRIES, DEFAULT_LLM_TIMEOUT_S
from mlxsci.search.proposers.prices import load_prices
from mlxsci.search.proposers.registry import make_proposer
from mlxsci.search.rundir import RunDir
from mlxsci.search.strategies import check_accept_rule, make_strategy
from mlxsci.storage import locks
from mlxsci.storage.names import safe_name
from mlxsci.task import Task, check_task, load_task
from mlxsci.timing.timers import check_timer


def default_run_dir(task: str, model: str) -> Path:
    """Where a run without --out goes: results/<task>_<model>_<timestamp>."""
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    return Path("results") / f"{task}_{safe_name(model, 'model')}_{stamp}"


def search_dialect(opts: dict) -> str:
    """The dialect candidates are written in: --dialect, else the backend's own."""
    return get_backend(
        opts["backend"], **backend_options(opts["backend"], opts.get("dialect"))
    ).dialect


def read_start(path: str | Path, dialect: str, task: Task) -> str:
    """The text of a start file, or ValueError unless it is a candidate of
    `task` in `dialect`: readable text (mlxsci.kernel.candidate.read_candidate_file: not
    binary, not empty) that parses, with one `//! kernel` section per kernel
    of the task (a file of comments only has none)."""
    try:
        text = read_candidate_file(path)
        candidate = parse(text, dialect=dialect, filename=str(path))
    except (ValueError, CandidateError) as exc:
        raise ValueError(f"start file: {exc}") from None
    kernels = ", ".join(task.kernel_names)
    if not candidate.kernels:
        raise ValueError(
            f"start file {path} has no kernels: a {task.name} candidate holds a "
            f"'//! kernel NAME' section for each of {kernels} (or leave out "
            "--start to start from the task's seed)"
        )
    why = misfit(candidate, task, "line ")
    if why:
        raise ValueError(f"start file {path} does not fit {task.name} (kernels {kernels}): {why}")
    return text


def make_run_dir(path: Path) -> None:
    """Make a new run directory, or ValueError/FileExistsError saying why not."""
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"{path} is a file, not a folder: give --out the path of a new run directory"
        )
    # The lock file alone is no run: a search that took it ended before writing.
    if path.exists() and any(p.name != locks.LOCK_NAME for p in path.iterdir()):
        raise FileExistsError(f"{path} is not empty; use --resume {path} to continue it")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot make the run directory {path}: {exc.strerror or exc}") from None


def proposer_for(opts: dict, prices: str | dict | None):
    """The proposer the options name; `prices`: a price table, the path of a
    JSON one, or None (the built-in table)."""
    return make_proposer(
        opts["model"],
        api=opts["api"],
        base_url=opts["base_url"],
        seed=opts["seed"],
        prices=prices if isinstance(prices, dict) else load_prices(prices),
        timeout_s=opts["llm_timeout"],
        max_retries=opts["llm_retries"],
        api_key_env=opts["api_key_env"],
    )


def check_priced(proposer, max_cost: float | None, echo) -> None:
    """Refuse a model without a price under a cost cap (ValueError: the cap could
    never trigger); without a cap, warn once that its calls count as $0."""
    model = getattr(proposer, "unpriced_model", None)
    if model is None:
        return
    if max_cost is not None:
        raise ValueError(
            f"--max-cost needs a price for model {model!r}, which the price table lacks: pass "
            f'--prices FILE.json holding {{"{model}": [USD per million input tokens, USD per '
            "million output tokens]} ([0, 0] for a free local model)"
        )
    echo(f"warning: cost counted as $0: no price for {model} (give it one with --prices FILE.json)")


def new_options(
    task: str,
    model: str,
    *,
    iterations,
    strategy,
    backend,
    sizes,
    seed,
    max_cost,
    base_url,
    api,
    timeout,
    dialect,
    api_key_env,
    llm_timeout,
    llm_retries,
    accept,
    timer,
    sanitize,
    start,
    keep_implausible=False,
) -> tuple[dict, Task]:
    """The options of a new run (run.json) and its task, every one checked
    (ValueError) before anything is made."""
    backend = resolve_backend_name(backend)
    if sizes is None:
        sizes = "smoke" if backend == "sim" else "in-dist"
    if sizes in ("held-out", "all"):
        raise ValueError("a search never scores on held-out sizes; use smoke or in-dist")
    # Fails early on an unknown task. A task folder of your own is recorded by its
    # absolute path (task.ref), so a resume from another directory finds it.
    task_def = load_task(task)
    # A start file written in another dialect than the backend's own says so by its name.
    dialect = dialect or name_of_file(start)
    opts = {
        "task": task_def.ref,
        "model": model,
        "iterations": 10 if iterations is None else iterations,
        "strategy": strategy,
        "backend": backend,
        "sizes": sizes,
        "seed": seed,
        "max_cost": max_cost,
        "base_url": base_url,
        "api": api,
        "timeout": timeout,
        "dialect": dialect,
        # The NAME of the variable holding a --base-url server's key, never the key.
        "api_key_env": api_key_env,
        "llm_timeout": DEFAULT_LLM_TIMEOUT_S if llm_timeout is None else llm_timeout,
        "llm_retries": DEFAULT_LLM_RETRIES if llm_retries is None else llm_retries,
        "accept": check_accept_rule(accept),  # fails early on an unknown rule
        # The timer this backend uses, recorded by name so a resume times alike;
        # fails early on one that cannot time this backend.
        "timer": check_timer(timer, backend),
        "sanitize": sanitize,
        # Count candidates timed below what the machine allows (for study).
        "keep_implausible": bool(keep_implausible),
        "start_source": None,
    }
    make_strategy(strategy)  # fails early on an unknown strategy
    backend_options(backend, dialect)  # fails early on a dialect the backend cannot run
    check_sanitize(sanitize, backend)  # fails early where compute-sanitizer cannot run
    written_in = search_dialect(opts)
    # The whole task folder, before any run directory: its reference, sizes, and
    # the seed of this dialect unless a start file stands in for it.
    check_task(task_def, None if start else written_in)
    if start:
        opts["start_source"] = read_start(start, written_in, task_def)
    return opts, task_def


def resumed_options(rd_path: Path, **given) -> dict:
    """The options of the run in `rd_path` (run.json), with those a resume may
    give anew (iterations, max_cost, api_key_env, llm_timeout, llm_retries)
    replaced where given. ValueError when the folder holds no run."""
    opts = RunDir(rd_path).options()
    # A task folder moved away or broken since: ValueError, before anything runs.
    check_task(load_task(opts["task"]))
    backend = opts["backend"]
    if not backend_class(backend).available():  # (an unknown name: ValueError too)
        raise ValueError(
            f"this run ran on the {backend} backend, which is not available on "
            f"this machine: resume it where {backend} runs"
        )
    for name, value in given.items():
        if value is not None:
            opts[name] = value  # a resumed run may be extended, re-capped, ...
    # Run directories from before these options: the behaviour they ran with.
    for name, value in (
        ("accept", "strict"),
        ("timer", None),
        ("sanitize", None),
        ("keep_implausible", False),
        ("api_key_env", None),
        ("llm_timeout", DEFAULT_LLM_TIMEOUT_S),
        ("llm_retries", DEFAULT_LLM_RETRIES),
        ("seed", 0),
        ("max_cost", None),
        ("base_url", None),
        ("api", "auto"),
        ("timeout", None),
        ("dialect", None),
        ("start_source", None),
    ):
        opts.setdefault(name, value)
    return opts


def check_extension(history: list[dict], iterations: int | None) -> None:
    """A resume's --iterations must not be fewer than the iterations already done."""
    done = max((r["iteration"] for r in history), default=0)
    if iterations is not None and iterations < done:
        raise ValueError(
            f"this run has done {done} iterations; --iterations {iterations} "
            f"cannot shorten it (give at least {done} to extend it, or leave "
            "--iterations out to finish it as planned)"
        )
