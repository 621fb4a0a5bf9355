"""`python -m mlxsci.import_metal_sci RUN_DIR... --out DIR` (also `mlxsci
import-metal-sci`): Metal-Sci run directories imported as mlxsci run
directories, and with --rescore every imported candidate re-evaluated under
mlxsci's harness into DIR/rescore.json.

    python -m mlxsci.import_metal_sci ~/metal-sci/results --out results/imported
    python -m mlxsci.import_metal_sci --out results/imported --rescore --backend sim
    python -m mlxsci.report results/imported

A RUN_DIR is one run (`<task>_<model>_<stamp>/`) or a folder holding runs
(Metal-Sci's results/). Importing a run already imported into DIR does
nothing (--force imports it again); a re-score continues where a killed one
stopped. Bad input exits 2 with one line; a fault of the machine exits 3.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from mlxsci.backends import SIM_GPU_HELP, backend_info, backend_options, modelled_gpu, sim_gpu_names
from mlxsci.evaluation.arguments import check_backend, check_sim_gpu
from mlxsci.import_metal_sci.importer import import_run
from mlxsci.import_metal_sci.metal_run import NotAMetalSciRun, find_runs
from mlxsci.import_metal_sci.recorded_held_out import recorded_held_out
from mlxsci.import_metal_sci.records import NOT_JUDGED
from mlxsci.import_metal_sci.rescore import (
    HELD_OUT_MODES,
    METAL_SCI_SIZES,
    Settings,
    default_extra_timed_runs,
    default_size_set,
    rescore,
)
from mlxsci.sandbox import SandboxUnavailable
from mlxsci.storage.faults import EXIT_CODE, EnvironmentFault
from mlxsci.storage.locks import LockHeld

SIZE_SETS = (METAL_SCI_SIZES, "smoke", "in-dist", "held-out", "all")


def say(line: str) -> None:
    click.echo(line, err=True)


def import_all(run_dirs: tuple[Path, ...], out: Path, force: bool) -> None:
    """Import every run the paths name, one line each."""
    try:
        runs, notes = find_runs(run_dirs)
    except NotAMetalSciRun as exc:
        raise click.BadParameter(str(exc), param_hint="RUN_DIR") from None
    held_out: dict[str, dict] = {}
    for folder in {run.parent for run in runs}:
        found, passed_over = recorded_held_out(folder)
        held_out.update(found)
        notes += passed_over
    for note in notes:
        say(note)
    out.mkdir(parents=True, exist_ok=True)
    refused = 0
    for k, run in enumerate(runs, 1):
        try:
            done = import_run(run, out, force=force, held_out=held_out.get(run.name))
        except NotAMetalSciRun as exc:
            say(f"[{k}/{len(runs)}] {exc}: not imported")
            refused += 1
            continue
        say(f"[{k}/{len(runs)}] {done.line()}")
    if refused:  # the others are imported; the exit status still says not all were
        raise click.UsageError(f"{refused} of {len(runs)} run(s) not imported (see above)")


def jobs_for(backend: str, jobs: int | None) -> int:
    """How many candidates a re-score on `backend` evaluates at once: `jobs`,
    by default one per CPU where the backend's clock is modelled (the
    simulator's: a neighbour does not move it), else 1. A GPU's clock is
    moved by whatever else runs on it, so more than one there is refused."""
    modelled = backend_info(backend).modelled
    if jobs is None:
        return max(1, os.cpu_count() or 1) if modelled else 1
    if jobs > 1 and not modelled:
        raise click.BadParameter(
            f"the {backend} backend times on one GPU: candidates evaluated at once would be "
            "timed against each other; leave --jobs at 1 there",
            param_hint="--jobs",
        )
    return jobs


def rescore_all(
    out: Path, backend: str, sim_gpu: str | None, sizes: str | None, mode: str, transfer: bool,
    timeout, jobs: int | None, in_dist: bool = True, extra_timed_runs: int | None = None,
):  # fmt: skip
    name = check_backend(backend)
    jobs = jobs_for(name, jobs)
    try:
        backend_options(name, "metal")
    except ValueError as exc:  # Metal sources: the metal backend or the simulator
        raise click.BadParameter(f"imported candidates are Metal sources: {exc}",
                                 param_hint="--backend") from None  # fmt: skip
    gpu = modelled_gpu(name, "metal", sim_gpu)
    settings = Settings(
        name, sizes or default_size_set(name), mode, transfer, timeout, gpu, jobs, in_dist,
        extra_timed_runs or default_extra_timed_runs(name),
    )  # fmt: skip
    say(
        f"re-scoring on {name}{f' (modelled {gpu})' if gpu else ''} at the "
        f"{settings.size_set} sizes"
        + ("" if mode == "none" else f"; recorded bests also at the held-out ({mode})")
        + (f"; {jobs} candidates at a time" if jobs > 1 else "")
    )
    try:
        found = rescore(out, settings, say)
    except LockHeld as exc:
        raise click.UsageError(f"another re-score of {out} is running ({exc})") from None
    except SandboxUnavailable as exc:
        raise click.UsageError(str(exc)) from None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--out") from None
    mine = [r for r in found if (r["backend"], r["sizes"], r.get("sim_gpu")) == settings.key]
    agree = sum(1 for r in mine if r["mlxsci"] is not None and r["recorded"] == r["mlxsci"])
    evaluated = sum(1 for r in mine if r["mlxsci"] is not None)
    stopped = sum(1 for r in mine if r["mlxsci"] == NOT_JUDGED)
    click.echo(
        f"re-scored {len(mine)} candidate(s): {evaluated} evaluated, {agree} agree with the "
        f"recorded verdict, {evaluated - agree - stopped} differ, {stopped} not judged (a "
        f"limit of the machine stopped them); {out / 'rescore.json'}"
    )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument(
    "run_dirs",
    nargs=-1,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The folder the imported runs go into (and rescore.json).",
)
@click.option("--force", is_flag=True, help="Import runs already imported into --out again.")
@click.option("--rescore", "do_rescore", is_flag=True, help="Re-evaluate every imported candidate.")
@click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "metal", "cuda", "sim"]),
    help="Where --rescore evaluates (Metal sources: metal, or the simulator).",
)
@click.option(
    "--sim-gpu",
    type=click.Choice(sim_gpu_names()),
    default=None,
    help=SIM_GPU_HELP + " Records of --rescore are kept per GPU.",
)
@click.option(
    "--sizes",
    type=click.Choice(SIZE_SETS),
    default=None,
    help="The sizes --rescore evaluates every candidate at. Default: in-dist on a GPU; on "
    "the simulator metal-sci: each task's first in-dist size, and for a recorded failure "
    "the in-dist size Metal-Sci says it failed at.",
)
@click.option(
    "--held-out",
    "mode",
    type=click.Choice(HELD_OUT_MODES),
    default="metal-sci",
    show_default=True,
    help="The held-out each run's recorded best is evaluated at: the task's published "
    "one (as Metal-Sci's scripts did), a secret draw, or none.",
)
@click.option(
    "--transfer/--no-transfer",
    default=True,
    show_default=True,
    help="Grade whether each recorded best's win transfers (mlxsci.transfer).",
)
@click.option("--timeout", type=click.FloatRange(min=1), help="Seconds allowed per size.")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Candidates --rescore evaluates at once. Default: one per CPU on the simulator "
    "(whose modelled clock no neighbour moves), 1 on a GPU, where more would time "
    "candidates against each other.",
)
@click.option(
    "--in-dist/--no-in-dist",
    default=True,
    show_default=True,
    help="Evaluate each run's recorded best and its seed at the task's in-distribution "
    "sizes too, where Metal-Sci recorded its speedup (the report sets the two side by side).",
)
@click.option(
    "--extra-timed-runs",
    type=click.IntRange(min=1),
    default=None,
    help="Timed runs per size where a recorded best and its seed are evaluated beyond the "
    "verdict's sizes (in-dist, held-out, second distribution). Default: 1 on the simulator, "
    "whose modelled clock repeats itself; the backend's own protocol on a GPU.",
)
def main(
    run_dirs, out, force, do_rescore, backend, sim_gpu, sizes, mode, transfer, timeout, jobs,
    in_dist, extra_timed_runs,
):  # fmt: skip
    """Import Metal-Sci run directories (RUN_DIR: a run, or a folder of runs)
    into --out as mlxsci run directories, and with --rescore re-evaluate
    every imported candidate under mlxsci's harness (--out's rescore.json).
    `python -m mlxsci.report OUT` shows both."""
    if not run_dirs and not do_rescore:
        raise click.UsageError("give RUN_DIR(s) to import, --rescore, or both")
    if sim_gpu is not None and not do_rescore:
        raise click.UsageError("--sim-gpu is the GPU --rescore models: give --rescore too")
    check_sim_gpu(backend, sim_gpu)  # before whether a GPU backend is here
    if out.exists() and not out.is_dir():
        raise click.BadParameter(f"{out} is a file", param_hint="--out")
    try:
        if run_dirs:
            import_all(run_dirs, out, force)
        if do_rescore:
            rescore_all(
                out, backend, sim_gpu, sizes, mode, transfer, timeout, jobs, in_dist,
                extra_timed_runs,
            )  # fmt: skip
    except EnvironmentFault as exc:
        click.echo(f"error: the machine stopped the work: {exc}", err=True)
        sys.exit(EXIT_CODE)
    except OSError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CODE)


if __name__ == "__main__":
    sys.exit(main())
