"""A search's options: one typed record, `SearchOptions`, declared once.

Each field of the record is an option of `python -m mlxsci.search` (its flag,
type, default and help ride on the field: `search_options` puts them on a
click command), a keyword of `mlxsci.search.run(...)` (given_options), and a
key of the run's run.json, which is the record itself (to_json, from_json).
A field says whether a resume may give it anew (`anew`: iterations, the cost
cap, the LLM's key variable, timeout and retries); the others are fixed by the
run, and what a run.json written before a field existed ran with (`old_runs`).
The one field that is no option is start_source: the text of --start's file.

Here too: the options of a new run, built and checked before anything is
made; those of a resumed run, read back from its run.json with what a resume
may give anew; and the checks around them (the start file, the run directory,
a model's price under a cost cap). Apart from the loop (search/loop.py)
because all of it comes before the first evaluation: a bad option is a clear
error, never a half-made run directory.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from mlxsci import held_out
from mlxsci.backends import (
    SIM_GPU_HELP,
    backend_class,
    backend_options,
    get_backend,
    modelled_gpu,
    resolve_backend_name,
    sim_gpu_names,
)
from mlxsci.evaluation.arguments import TaskArgument
from mlxsci.evaluation.evaluator import misfit
from mlxsci.evaluation.sanitizer import check_sanitize
from mlxsci.kernel.candidate import CandidateError, parse, read_candidate_file
from mlxsci.kernel.dialects import name_of_file
from mlxsci.search.proposers import (
    DEFAULT_LLM_RETRIES,
    DEFAULT_LLM_TIMEOUT_S,
    load_prices,
    make_proposer,
)
from mlxsci.search.rundir import RunDir
from mlxsci.search.strategies import (
    DEFAULT_ISLANDS,
    DEFAULT_MIGRATION_INTERVAL,
    STRATEGIES,
    check_accept_rule,
    make_strategy,
)
from mlxsci.storage import locks
from mlxsci.storage.names import safe_name
from mlxsci.task import Task, check_task, load_task
from mlxsci.timing.timers import check_timer

NEW_RUN_ITERATIONS = 10  # a new run's iterations when none are given


def option(*, old_runs: Any = dataclasses.MISSING, anew: bool = False, **click_kwargs) -> Any:
    """A field of SearchOptions. old_runs: its value in a run.json written
    before it existed (none: every run.json has it). anew: a resume may give
    it again. click_kwargs: its command-line option (type, default, help, ...);
    `default` is also what run() takes when it is left out."""
    metadata = {"anew": anew, "click": click_kwargs}
    return dataclasses.field(default=old_runs, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """The options of one run, as its run.json holds them (search/options.py
    says how each field is also a command-line option and a run() keyword)."""

    task: str = option(
        type=TaskArgument(),
        help="Task to optimise: a built-in task name or the path of a task folder "
        "of your own (task.py, reference.py, seed.metal; see examples/conv1d).",
    )
    model: str = option(
        default="autotune",
        show_default=True,
        help="claude-*, gpt-*/o*, any model served at --base-url, autotune (offline), "
        "or replay:RUN_DIR; several separated by commas (a bandit chooses which "
        "answers each request).",
    )
    iterations: int = option(
        anew=True,
        type=click.IntRange(min=0),
        default=None,
        help="Proposals after the seed (default 10; with --resume, extends the run).",
    )
    strategy: str = option(
        default="one-plus-one",
        show_default=True,
        type=click.Choice(list(STRATEGIES)),
        help="one-plus-one: Metal-Sci's (1+1), each proposal improves the best so far. "
        "best-of-n: each from the seed. islands: sub-populations, each its own (1+1), "
        "their bests migrating in a ring. map-elites: an archive of the best kernel of "
        "each kind; parents and inspirations drawn from it (docs/search.md).",
    )
    # Proposals asked for at once (a generation); fixed by the run, as its
    # iterations are numbered by generation and slot.
    population: int = option(
        old_runs=1,
        type=click.IntRange(min=1, max=64),
        default=1,
        show_default=True,
        metavar="K",
        help="Proposals per generation, requested from the model at once and evaluated "
        "as they arrive (on the simulator up to one per core; on a GPU one at a time).",
    )
    islands: int = option(
        old_runs=DEFAULT_ISLANDS,
        type=click.IntRange(min=1, max=64),
        default=DEFAULT_ISLANDS,
        show_default=True,
        help="The islands strategy's number of islands.",
    )
    migration_interval: int = option(
        old_runs=DEFAULT_MIGRATION_INTERVAL,
        type=click.IntRange(min=1),
        default=DEFAULT_MIGRATION_INTERVAL,
        show_default=True,
        metavar="M",
        help="The islands strategy: each island's best moves to the next every M generations.",
    )
    backend: str = option(
        default="auto",
        show_default=True,
        type=click.Choice(["auto", "metal", "cuda", "sim"]),
    )
    dialect: str | None = option(
        old_runs=None,
        type=click.Choice(["metal", "cuda"]),
        default=None,
        help="Kernel dialect (default: the backend's own; metal on the simulator).",
    )
    # The GPU the simulator models, recorded by name (the default resolved) so
    # a resume times on the same one; None on a GPU backend and in runs from
    # before the simulator modelled GPUs.
    sim_gpu: str | None = option(
        old_runs=None, type=click.Choice(sim_gpu_names()), default=None, help=SIM_GPU_HELP
    )
    sizes: str = option(
        type=click.Choice(["smoke", "in-dist"]),
        default=None,
        help="Sizes the search scores on. Default: in-dist on a GPU, smoke on the simulator.",
    )
    accept: str = option(
        old_runs="strict",
        type=click.Choice(["strict", "noise-aware"]),
        default="strict",
        show_default=True,
        help="strict: a strictly higher S replaces the incumbent (Metal-Sci's (1+1)). "
        "noise-aware: such a candidate is re-timed against the incumbent in one "
        "worker and kept only if the speedup lies beyond the measured noise.",
    )
    # The timer this backend uses, recorded by name so a resume times alike.
    timer: str | None = option(
        old_runs=None,
        type=click.Choice(["cupti", "sim", "wall"]),
        default=None,
        help="How a run is timed (default: cupti on CUDA when installed, else wall; "
        "sim on the simulator).",
    )
    sanitize: str | None = option(
        old_runs=None,
        type=click.Choice(["memcheck", "racecheck"]),
        default=None,
        help="CUDA only: before timing, run every candidate under NVIDIA's "
        "compute-sanitizer (memcheck or racecheck); one it reports an error for "
        "fails, with that error as its verdict.",
    )
    # Which held-out the gate evaluates at the end (mlxsci/held_out.py). Runs
    # from before secret draws evaluated the listed one.
    held_out: str = option(
        old_runs="metal-sci",
        type=click.Choice(held_out.MODES),
        default=held_out.DEFAULT_MODE,
        show_default=True,
        help="The held-out gate: secret draws a configuration for this run (committed "
        "in run.json, revealed at the end, in no prompt); metal-sci evaluates the "
        "task's published held-out size (comparable with Metal-Sci).",
    )
    # Count candidates timed below what the machine allows (for study).
    keep_implausible: bool = option(
        old_runs=False,
        is_flag=True,
        default=None,
        help="Count a candidate timed below what the machine's measured ceilings "
        "allow (verdict implausible) as measured, so it may become the best: for "
        "studying such kernels. Default: its S is 0 and it is never kept.",
    )
    seed: int = option(
        old_runs=0, type=int, default=0, show_default=True, help="Seed of autotune's order."
    )
    max_cost: float | None = option(
        old_runs=None,
        anew=True,
        type=click.FloatRange(min=0),
        help="Spend at most this many USD: a call is made only when its worst case "
        "(prompt + max output tokens) fits in what is left. A model without a price "
        "needs --prices.",
    )
    base_url: str | None = option(
        old_runs=None,
        help="OpenAI-compatible endpoint (mlx_lm.server, Ollama, vLLM, ...). "
        "It gets no API key unless --api-key-env names one.",
    )
    # The NAME of the variable holding a --base-url server's key, never the key.
    api_key_env: str | None = option(
        old_runs=None,
        anew=True,
        metavar="NAME",
        help="Name of the environment variable holding the key for --base-url (e.g. "
        "GEMINI_API_KEY). OPENAI_API_KEY / ANTHROPIC_API_KEY go only to "
        "api.openai.com / api.anthropic.com.",
    )
    llm_timeout: float = option(
        old_runs=DEFAULT_LLM_TIMEOUT_S,
        anew=True,
        type=click.FloatRange(min=0, min_open=True),
        metavar="SECONDS",
        help="Seconds one LLM call may wait for its answer before it is retried [default: 300].",
    )
    llm_retries: int = option(
        old_runs=DEFAULT_LLM_RETRIES,
        anew=True,
        type=click.IntRange(min=0),
        metavar="N",
        help="Retries of a failed LLM call (HTTP 429/5xx, timeout, lost connection, "
        "malformed answer), each announced [default: 4].",
    )
    api: str = option(
        old_runs="auto",
        default="auto",
        show_default=True,
        type=click.Choice(["auto", "anthropic", "openai", "openai-chat"]),
    )
    timeout: float | None = option(
        old_runs=None, type=click.FloatRange(min=1), help="Seconds allowed per size evaluation."
    )
    # The text of the --start file, which stands in for the task's seed; no option itself.
    start_source: str | None = dataclasses.field(default=None, metadata={"click": None})
    # The held-out draw (mlxsci.held_out.HeldOutDraw.to_json()): its commitment
    # from the start, its secret and configuration once revealed; no option.
    held_out_draw: dict | None = dataclasses.field(default=None, metadata={"click": None})

    def to_json(self) -> dict:
        """What run.json holds."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict, where: Path) -> SearchOptions:
        """The options a run.json (at `where`) holds, with what a run.json from
        before an option ran with; ValueError when it lacks one every run has."""
        types = typing.get_type_hints(cls)
        wrong = [
            f"{f.name} ({types[f.name].__name__})"
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING
            and (not isinstance(data.get(f.name), types[f.name]) or isinstance(data[f.name], bool))
        ]
        if wrong:
            raise ValueError(
                f"{where} is damaged: it lacks {', '.join(wrong)}; cannot resume this run"
            )
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def given_anew(self, **given) -> SearchOptions:
        """These options with those a resume gave (not None) in place: a resumed
        run may be extended, re-capped, ..."""
        return dataclasses.replace(self, **{k: v for k, v in given.items() if v is not None})


OPTIONS = [f for f in dataclasses.fields(SearchOptions) if f.metadata["click"] is not None]
# What a resume may give anew; the others are the run's own (its run.json's).
GIVEN_ANEW = tuple(f.name for f in OPTIONS if f.metadata["anew"])
FIXED_BY_THE_RUN = tuple(f.name for f in OPTIONS if not f.metadata["anew"])


def search_options(command: Callable) -> Callable:
    """A click command with an option for each field of SearchOptions, in
    the record's order."""
    for f in reversed(OPTIONS):
        command = click.option("--" + f.name.replace("_", "-"), **f.metadata["click"])(command)
    return command


def given_options(**given) -> dict:
    """The options a run() call or a command line gave (SearchOptions' names),
    each one left out at its default; TypeError for a name that is no option."""
    unknown = [name for name in given if name not in {f.name for f in OPTIONS}]
    if unknown:
        raise TypeError(f"run() got an unexpected keyword argument {unknown[0]!r}")
    return {f.name: given.get(f.name, f.metadata["click"].get("default")) for f in OPTIONS}


def default_run_dir(task: str, model: str) -> Path:
    """Where a run without --out goes: results/<task>_<model>_<timestamp>."""
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    return Path("results") / f"{task}_{safe_name(model, 'model')}_{stamp}"


def search_dialect(opts: SearchOptions) -> str:
    """The dialect candidates are written in: --dialect, else the backend's own."""
    options = backend_options(opts.backend, opts.dialect, opts.sim_gpu)
    return get_backend(opts.backend, **options).dialect


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


def proposer_for(opts: SearchOptions, prices: str | dict | None):
    """The proposer the options name; `prices`: a price table, the path of a
    JSON one, or None (the built-in table)."""
    return make_proposer(
        opts.model,
        api=opts.api,
        base_url=opts.base_url,
        seed=opts.seed,
        prices=prices if isinstance(prices, dict) else load_prices(prices),
        timeout_s=opts.llm_timeout,
        max_retries=opts.llm_retries,
        api_key_env=opts.api_key_env,
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


def defaults_of_a_new_run(given: dict) -> dict:
    """The options given as None (left out) that a new run records a value for."""
    defaults = {
        "iterations": NEW_RUN_ITERATIONS,
        "llm_timeout": DEFAULT_LLM_TIMEOUT_S,
        "llm_retries": DEFAULT_LLM_RETRIES,
    }
    return {name: value if given[name] is None else given[name] for name, value in defaults.items()}


def new_options(given: dict, start: str | Path | None) -> tuple[SearchOptions, Task]:
    """The options of a new run (run.json) from those given (given_options)
    and the start file, and its task, every one checked (ValueError) before
    anything is made."""
    backend = resolve_backend_name(given["backend"])
    sizes = given["sizes"]
    if sizes is None:
        sizes = backend_class(backend).default_size_set
    if sizes in ("held-out", "all"):
        raise ValueError("a search never scores on held-out sizes; use smoke or in-dist")
    # Fails early on an unknown task. A task folder of your own is recorded by its
    # absolute path (task.ref), so a resume from another directory finds it.
    task_def = load_task(given["task"])
    # A start file written in another dialect than the backend's own says so by its name.
    dialect = given["dialect"] or name_of_file(start)
    opts = SearchOptions(
        **{
            **given,
            "task": task_def.ref,
            "backend": backend,
            "sizes": sizes,
            "dialect": dialect,
            **defaults_of_a_new_run(given),
            "accept": check_accept_rule(given["accept"]),  # fails early on an unknown rule
            # Fails early on a timer that cannot time this backend.
            "timer": check_timer(given["timer"], backend),
            "keep_implausible": bool(given["keep_implausible"]),
        }
    )
    make_strategy(opts.strategy)  # fails early on an unknown strategy
    for name, low in (("population", 1), ("islands", 1), ("migration_interval", 1)):
        value = getattr(opts, name)  # (the command line's ranges; run() is checked here)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    # Fails early on a dialect the backend cannot run, or a GPU it cannot model.
    backend_options(backend, dialect, opts.sim_gpu)
    check_sanitize(opts.sanitize, backend)  # fails early where compute-sanitizer cannot run
    written_in = search_dialect(opts)
    opts = dataclasses.replace(opts, sim_gpu=modelled_gpu(backend, written_in, opts.sim_gpu))
    # The whole task folder, before any run directory: its reference, sizes, and
    # the seed of this dialect unless a start file stands in for it.
    check_task(task_def, None if start else written_in)
    if start:
        opts = dataclasses.replace(opts, start_source=read_start(start, written_in, task_def))
    return with_new_draw(opts, task_def), task_def


def with_new_draw(opts: SearchOptions, task_def: Task) -> SearchOptions:
    """`opts` with a new held-out draw (mlxsci/held_out.py): for secret, its
    commitment only; a task that declares no secret draw falls back to its
    listed held-out, and the record says metal-sci."""
    mode = held_out.effective_mode(task_def, opts.held_out)
    draw = held_out.begin(task_def, mode)
    return dataclasses.replace(opts, held_out=mode, held_out_draw=draw.to_json())


def held_out_record(opts: SearchOptions, task_def: Task) -> held_out.HeldOutDraw:
    """The run's held-out draw; a run.json from before draws had the listed held-out."""
    if opts.held_out_draw is None:
        return held_out.begin(task_def, "metal-sci")
    return held_out.HeldOutDraw.from_json(opts.held_out_draw)


def resumed_options(rd_path: Path, sim_gpu: str | None = None, **given) -> SearchOptions:
    """The options of the run in `rd_path` (run.json), with those a resume may
    give anew (GIVEN_ANEW) replaced where given. ValueError when the folder
    holds no run, or for a `sim_gpu` other than the one the run is timed on
    (its times would not compare with the run's; naming its own is no change)."""
    rd = RunDir(rd_path)
    recorded = rd.options()
    opts = SearchOptions.from_json(recorded, rd.file("run.json"))
    # A task folder moved away or broken since: ValueError, before anything runs.
    check_task(load_task(opts.task))
    if not backend_class(opts.backend).available():  # (an unknown name: ValueError too)
        raise ValueError(
            f"this run ran on the {opts.backend} backend, which is not available on "
            f"this machine: resume it where {opts.backend} runs"
        )
    ran_on = modelled_gpu(opts.backend, search_dialect(opts), opts.sim_gpu)
    if sim_gpu is not None and sim_gpu != ran_on:
        on = f"the modelled {ran_on}" if ran_on else f"the {opts.backend} backend's own GPU"
        raise ValueError(f"this run is timed on {on}: a resume keeps it (leave out sim_gpu)")
    return opts.given_anew(**given)


def check_extension(history: list[dict], iterations: int | None) -> None:
    """A resume's --iterations must not be fewer than the iterations already done."""
    done = max((r["iteration"] for r in history), default=0)
    if iterations is not None and iterations < done:
        raise ValueError(
            f"this run has done {done} iterations; --iterations {iterations} "
            f"cannot shorten it (give at least {done} to extend it, or leave "
            "--iterations out to finish it as planned)"
        )
