"""The sweep's command-line checks: what would fail every search the same
way, said once (exit 2) before any starts. mlxsci/sweep/sweeper.py's `main` calls
them; mlxsci/sweep/runs.py runs the searches.
"""

from __future__ import annotations

import click

from mlxsci.backends import backend_class, gpu_options, resolve_backend_name, sanitizable
from mlxsci.sweep.runs import LocalExecutor


def split_list(text: str, option: str, noun: str) -> list[str]:
    """'a, b,,a' -> ['a', 'b']: the names a comma-separated option gives, each
    once; a usage error when it gives none."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise click.BadParameter(
            f"no {noun} given in {text!r}: give a comma-separated list", param_hint=option
        )
    return names


def check_tasks(tasks: str) -> list[str]:
    from mlxsci.task import task_names

    known = task_names()
    task_list = known if tasks.strip() == "all" else split_list(tasks, "--tasks", "task")
    unknown = [t for t in task_list if t not in known]
    if unknown:
        raise click.BadParameter(
            f"unknown task(s) {', '.join(unknown)}; known: {', '.join(known)}", param_hint="--tasks"
        )
    return task_list


def check_backend(
    backend: str, timer: str | None, sanitize: str | None, remote: bool, sim_gpu: str | None = None
) -> None:
    """What would fail every search the same way, said once before any starts.
    With a Ray cluster (`remote`) the runs happen on its nodes, so the
    backend and compute-sanitizer are not looked for here."""
    if remote and backend == "auto":
        raise click.BadParameter(
            "with a Ray cluster (--address) name the backend its nodes run "
            "(--backend cuda, metal or sim): auto would pick this "
            "machine's, and each run's resource request depends on it",
            param_hint="--backend",
        )
    try:  # before whether the backend is here: --sim-gpu is the simulator's alone
        gpu_options(resolve_backend_name(backend), sim_gpu)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if not remote and backend != "auto" and not backend_class(backend).available():
        raise click.BadParameter(
            f"{backend} is not available on this machine (use --backend sim or auto)",
            param_hint="--backend",
        )
    from mlxsci.timing.timers import check_timer

    try:
        check_timer(timer, resolve_backend_name(backend))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timer") from exc
    if sanitize and remote and not sanitizable(backend):
        raise click.BadParameter(
            "--sanitize checks CUDA kernels only: use --backend cuda", param_hint="--sanitize"
        )
    if sanitize and not remote:
        from mlxsci.evaluation.sanitizer import check_sanitize

        try:
            check_sanitize(sanitize, resolve_backend_name(backend))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--sanitize") from exc


def check_prices(models: list[str], prices_file: str | None, capped: bool) -> dict | None:
    """The price table the searches get (None: their default), read once here;
    under a cost cap every LLM model must have a price, or the cap could not
    be kept (each search would refuse to start)."""
    from mlxsci.search.proposers import load_prices, lookup_price

    try:
        table = load_prices(prices_file)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--prices") from exc
    if capped:
        unpriced = [
            m
            for m in models
            if m != "autotune" and not m.startswith("replay:") and lookup_price(m, table) is None
        ]
        if unpriced:
            raise click.BadParameter(
                f"--max-cost needs a price for {', '.join(unpriced)}, which the price table "
                'lacks: pass --prices FILE.json holding {"MODEL": [USD per million input '
                "tokens, USD per million output tokens]} ([0, 0] for a free local model)",
                param_hint="--max-cost",
            )
    return table if prices_file else None


def check_executor(name: str, address: str | None, ship_results: bool) -> None:
    """Options that belong to another executor, or Ray missing: usage errors."""
    if name == "local" and (address is not None or ship_results):
        option = "--address" if address is not None else "--ship-results"
        raise click.BadParameter(f"{option} is for --executor ray", param_hint=option)
    if name == "ray":
        from mlxsci.sweep import ray_executor as sweep_ray

        try:
            sweep_ray.require_ray()
        except sweep_ray.RayUnavailable as exc:
            raise click.UsageError(str(exc)) from exc


def make_executor(name: str, address: str | None, ship_results: bool, backend: str):
    """The executor, connected; a usage error (exit 2) when it cannot be."""
    if name == "local":
        return LocalExecutor()
    from mlxsci.sweep import ray_executor as sweep_ray

    try:
        return sweep_ray.RayExecutor(address=address, ship_results=ship_results, backend=backend)
    except sweep_ray.RayUnavailable as exc:
        raise click.UsageError(str(exc)) from exc
