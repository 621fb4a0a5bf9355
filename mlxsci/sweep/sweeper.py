"""Many searches: `python -m mlxsci.sweep`, in this process or as Ray tasks.

    python -m mlxsci.sweep --tasks saxpy,heat2d --models autotune --iterations 4 --backend sim
    python -m mlxsci.sweep --tasks all --models gpt-5.5 --iterations 10 --repeats 3 \\
        --executor ray --max-cost 50

Runs. Each (task, model) is searched K times (--repeats, default 1), into
DIR/<task>_<model>/ for repeat 1 and DIR/<task>_<model>_r<k>/ for repeat k
(the model name made safe for a path), each with proposer seed k - 1 (the
seed of autotune's order; LLM runs record it too). Repeat 1 is therefore the
run a sweep without --repeats makes, and asking an existing sweep for more
repeats keeps the runs it has. Runs start repeat by repeat (every cell's
first run before any cell's second), so a sweep cut short by its cost cap or
by a kill leaves every cell a run before it leaves any a second.

A sweep started again finds its own runs:
- summary.json with at least K iterations (or a proposer that ran dry):
  finished, skipped;
- summary.json with fewer iterations (stopped by the cost cap, or the sweep
  now asks for more): resumed and extended to K;
- a run directory without summary.json (a killed run): resumed;
- nothing there: a new search;
- with --sim-gpu, a run whose run.json names another modelled GPU: failed,
  refused (its times would not compare with the sweep's).
Each run is locked where it runs (search/run_lock.py): two sweeps on one
folder share the runs. A search that raises is recorded as failed and the
sweep goes on; one the machine stopped (mlxsci/storage/faults.py: no space,
a read-only folder, a worker that could not start) is left unfinished, no other
run starts, and the sweep exits 3: the same command resumes them once fixed.

Executors: `local` (the default) runs the searches one after another in
this process; `ray` (mlxsci.sweep.ray_executor, `pip install 'mlxsci[ray]'`) runs each
as a Ray task, on this machine or on a cluster. Either way each run writes its
own directory as it goes, so a killed sweep loses only unfinished iterations.

Cost: --max-cost caps the whole sweep, without overshoot (mlxsci.sweep.budget);
--max-cost-per-run caps each search.

DIR/index.json lists the runs (task, model, repeat, seed, path relative to
DIR, status, action, cost_usd; max_cost: the cap a run was given; stopped:
why a run stopped short; error: why it failed, was lost or did not start)
and is rewritten whenever a run starts or ends. status: finished; stopped (a
summary with fewer iterations than asked: the cost cap); unfinished
(pending, running, in use, killed, lost or not started); failed.
`python -m mlxsci.report DIR` reads it.

The runs' machinery (naming, running one, the driver's bookkeeping) is in
mlxsci.sweep.runs; this module is the entry point: sweep() and the CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mlxsci import held_out
from mlxsci.backends import SIM_GPU_HELP, resolve_backend_name, sim_gpu_names
from mlxsci.search.strategies import DEFAULT_ISLANDS, DEFAULT_MIGRATION_INTERVAL, STRATEGIES
from mlxsci.storage.faults import EXIT_CODE as ENVIRONMENT_EXIT
from mlxsci.storage.faults import EnvironmentFault, parent_writes
from mlxsci.sweep.arguments import (
    check_backend,
    check_executor,
    check_prices,
    check_tasks,
    make_executor,
    split_list,
)
from mlxsci.sweep.budget import CostBudget, spent_by_run
from mlxsci.sweep.runs import (
    Driver,
    Job,
    LocalExecutor,
    gpu_clash,
    is_finished,
    plan,
    run_name,
    run_one,
    run_spec,
    run_status,
    write_index,
)

# The runs' names, states and machinery (mlxsci.sweep.runs) are here too.
__all__ = [
    "sweep",
    "main",
    "Job",
    "plan",
    "run_name",
    "is_finished",
    "run_status",
    "run_one",
    "run_spec",
    "write_index",
    "Driver",
    "LocalExecutor",
    "DEFAULT_OUT",
    "EXECUTORS",
]

DEFAULT_OUT = Path("results") / "sweep"
EXECUTORS = ("local", "ray")


def sweep(
    tasks: list[str],
    models: list[str],
    iterations: int,
    *,
    repeats: int = 1,
    backend: str = "auto",
    out: str | Path = DEFAULT_OUT,
    strategy: str = "one-plus-one",
    quiet: bool = True,
    echo=print,
    executor=None,
    max_cost: float | None = None,
    max_cost_per_run: float | None = None,
    **run_options,
) -> list[dict]:
    """Run every search of the sweep that is not finished; return the index entries.

    executor: a LocalExecutor (the default) or mlxsci.sweep.ray_executor.RayExecutor.
    max_cost: USD for the whole sweep (all sessions); max_cost_per_run: USD
    per search. run_options go to each mlxsci.search.run (accept, timer,
    sim_gpu, prices, base_url, ...: mlxsci.search.options.SearchOptions' names; any
    other is a TypeError before a run starts). Each entry: task, model, repeat, seed, path
    (relative to out), status (finished, stopped, unfinished, failed), action
    (skipped, ran, resumed, lost, not started, in use, refused; pending or running while the
    sweep goes on), cost_usd, and max_cost, stopped, error where they apply."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    executor = executor or LocalExecutor()
    backend = resolve_backend_name(backend)  # once, here: the same for every run
    jobs = plan(tasks, models, repeats)
    entries: list[dict] = []
    waiting: list[dict] = []
    for job in jobs:
        entry = {
            "task": job.task,
            "model": job.model,
            "repeat": job.repeat,
            "seed": job.seed,
            "path": job.name,
            "cost_usd": spent_by_run(out / job.name),
        }
        clash = gpu_clash(out / job.name, run_options.get("sim_gpu"))
        if clash:  # neither resumed nor counted: its times are another GPU's
            entry.update(status="failed", action="refused", error=clash)
            echo(f"{job.name}: {clash}")
        elif is_finished(out / job.name, iterations):
            entry.update(status="finished", action="skipped")
            echo(f"{job.name}: finished, skipped")
        else:
            entry.update(status="unfinished", action="pending")
            waiting.append(
                run_spec(
                    job,
                    out,
                    iterations,
                    quiet=quiet,
                    options=dict(run_options, backend=backend, strategy=strategy),
                )
            )
        entries.append(entry)
    budget = CostBudget(
        max_cost, per_run=max_cost_per_run, spent=sum(e["cost_usd"] for e in entries)
    )
    driver = Driver(out, entries, waiting, budget, echo, iterations)
    try:
        executor.run(driver)
    finally:
        executor.close()
    if max_cost is not None:
        echo(f"cost: {budget.describe()}")
    return [driver.entries[p] for p in driver.order]


# -- command line ---------------------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--tasks", required=True, help="all, or a comma-separated list of tasks.")
@click.option("--models", required=True, help="Comma-separated models (autotune, gpt-5.5, ...).")
@click.option(
    "--iterations",
    required=True,
    type=click.IntRange(min=1),
    help="Proposals per search after the seed.",
)
@click.option(
    "--repeats",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Independent runs per task and model (repeat k: OUT/<task>_<model>_r<k>/, "
    "proposer seed k-1; repeat 1 keeps the plain name).",
)
@click.option(
    "--backend",
    default="auto",
    type=click.Choice(["auto", "metal", "cuda", "sim"]),
    show_default=True,
)
@click.option(
    "--sim-gpu",
    type=click.Choice(sim_gpu_names()),
    default=None,
    help=SIM_GPU_HELP + " Every search of the sweep models it; a run begun on another "
    "is not resumed (it fails, saying so).",
)
@click.option(
    "--out",
    default=str(DEFAULT_OUT),
    type=click.Path(file_okay=False),
    show_default=True,
    help="Sweep folder; runs go to OUT/<task>_<model>[_r<k>]/.",
)
@click.option(
    "--executor",
    default="local",
    show_default=True,
    type=click.Choice(EXECUTORS),
    help="local: one search after another in this process; ray: each search a "
    "Ray task (pip install 'mlxsci[ray]').",
)
@click.option(
    "--address",
    default=None,
    help="Ray only: the cluster to run on (auto, HOST:PORT or ray://HOST:PORT); "
    "default: start a Ray instance on this machine.",
)
@click.option(
    "--ship-results",
    is_flag=True,
    help="Ray only: runs write into a temporary folder on their node and the files "
    "come back to OUT (for nodes that do not share OUT's filesystem).",
)
@click.option(
    "--strategy",
    default="one-plus-one",
    show_default=True,
    type=click.Choice(list(STRATEGIES)),
    help="Each search's strategy (see mlxsci.search and docs/search.md).",
)
@click.option(
    "--population",
    default=1,
    show_default=True,
    type=click.IntRange(min=1, max=64),
    metavar="K",
    help="Proposals per generation of each search, in flight at once.",
)
@click.option(
    "--islands",
    default=DEFAULT_ISLANDS,
    show_default=True,
    type=click.IntRange(min=1, max=64),
    help="Islands of each search with --strategy islands.",
)
@click.option(
    "--migration-interval",
    default=DEFAULT_MIGRATION_INTERVAL,
    show_default=True,
    type=click.IntRange(min=1),
    metavar="M",
    help="Generations between two migrations with --strategy islands.",
)
@click.option("--base-url", default=None, help="OpenAI-compatible server for the models.")
@click.option(
    "--max-cost",
    default=None,
    type=click.FloatRange(min=0),
    help="USD cap for the whole sweep (all runs, all sessions), never overshot.",
)
@click.option(
    "--max-cost-per-run",
    default=None,
    type=click.FloatRange(min=0),
    help="USD cap for each search.",
)
@click.option(
    "--prices",
    "prices_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="JSON {model: [USD per M input tokens, USD per M output tokens]} added to "
    "the price table.",
)
@click.option(
    "--accept",
    type=click.Choice(["strict", "noise-aware"]),
    default="strict",
    show_default=True,
    help="Acceptance rule of each search (see mlxsci.search).",
)
@click.option(
    "--timer",
    type=click.Choice(["cupti", "sim", "wall"]),
    default=None,
    help="How runs are timed (default: the backend's own).",
)
@click.option(
    "--sanitize",
    type=click.Choice(["memcheck", "racecheck"]),
    default=None,
    help="CUDA only: every candidate first runs under NVIDIA's compute-sanitizer "
    "(see mlxsci.search).",
)
@click.option(
    "--held-out",
    "held_out_mode",
    type=click.Choice(held_out.MODES),
    default=held_out.DEFAULT_MODE,
    show_default=True,
    help="Each search's held-out gate: a secret draw per run, or the task's "
    "published size (see mlxsci.search).",
)
@click.option("--quiet", is_flag=True, help="Only a line or two per search.")
def main(
    tasks,
    models,
    iterations,
    repeats,
    backend,
    sim_gpu,
    out,
    executor,
    address,
    ship_results,
    strategy,
    population,
    islands,
    migration_interval,
    base_url,
    max_cost,
    max_cost_per_run,
    prices_file,
    accept,
    timer,
    sanitize,
    held_out_mode,
    quiet,
):
    """Run searches for every task x model (x repeat) into OUT and index them for
    `mlxsci.report`."""
    task_list = check_tasks(tasks)
    model_list = split_list(models, "--models", "model")
    remote = executor == "ray" and address is not None
    check_backend(backend, timer, sanitize, remote, sim_gpu)
    capped = max_cost is not None or max_cost_per_run is not None
    prices = check_prices(model_list, prices_file, capped)
    options = {"accept": accept, "timer": timer, "held_out": held_out_mode}
    options.update(population=population, islands=islands, migration_interval=migration_interval)
    given = (
        ("sanitize", sanitize),
        ("base_url", base_url),
        ("prices", prices),
        ("sim_gpu", sim_gpu),
    )
    for name, value in given:
        if value:
            options[name] = value
    check_executor(executor, address, ship_results)
    runner = make_executor(executor, address, ship_results, backend)
    try:  # a folder that cannot be made would fail every run
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        runner.close()
        raise click.BadParameter(
            f"cannot make the sweep folder {out}: {exc.strerror or exc}", param_hint="--out"
        ) from None
    try:
        with parent_writes():  # the sweep folder's own: index.json and its lock
            entries = sweep(
                task_list,
                model_list,
                iterations,
                repeats=repeats,
                backend=backend,
                out=out,
                strategy=strategy,
                quiet=quiet,
                echo=lambda msg: click.echo(msg, err=True),
                executor=runner,
                max_cost=max_cost,
                max_cost_per_run=max_cost_per_run,
                **options,
            )
    except EnvironmentFault as exc:
        click.echo(f"error: the machine stopped the sweep: {exc}", err=True)
        sys.exit(ENVIRONMENT_EXIT)
    done = [e for e in entries if e["status"] == "finished"]
    click.echo(
        f"{len(done)}/{len(entries)} runs finished; index: {Path(out) / 'index.json'}", err=True
    )
    faults = [e for e in entries if e.get("machine_fault") and e.get("error")]
    if faults:  # nothing was the runs' fault: the same command resumes them
        click.echo(
            f"error: the machine stopped the sweep ({faults[0]['error']}); once fixed, run the "
            "same command again: finished runs are kept and the others resume",
            err=True,
        )
        sys.exit(ENVIRONMENT_EXIT)
    if len(done) < len(entries):
        sys.exit(1)


if __name__ == "__main__":
    main()
