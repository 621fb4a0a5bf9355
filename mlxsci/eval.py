"""`python -m mlxsci.eval TASK` (= `mlxsci eval TASK`): the evaluation verb's
command line. The function it calls, `evaluate()`, is in mlxsci/evaluation/evaluator.py.

It exits 0 whenever the evaluation ran, whatever the verdict; 2 for usage
errors, each a one-line message, found before anything runs: an unknown task
or a task folder that cannot run (mlxsci.task.check_task), a --size the task
rejects or this machine's memory cannot hold (mlxsci.task.check_memory), a
--source that is not a candidate text file (binary, not UTF-8, empty), a
--sim-gpu the simulator does not model or given with a GPU backend; and
mlxsci.storage.faults.EXIT_CODE (3) when the machine stopped the evaluation (no
space, a read-only folder, a worker that could not start): no verdict then.
The argument types and checks are in mlxsci/evaluation/arguments.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mlxsci import held_out
from mlxsci.backends import (
    SIM_GPU_HELP,
    backend_class,
    backend_options,
    resolve_backend_name,
    sim_gpu_names,
)
from mlxsci.evaluation import sanitizer
from mlxsci.evaluation.arguments import (
    TaskArgument,
    check_backend,
    check_overrides,
    check_sim_gpu,
    parse_assignments,
    require_seed,
)
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.results import format_evaluation
from mlxsci.kernel import dialects
from mlxsci.kernel.candidate import read_candidate_file
from mlxsci.sandbox import SandboxUnavailable
from mlxsci.storage.faults import EXIT_CODE, EnvironmentFault
from mlxsci.task import check_memory, load_task
from mlxsci.timing.timers import TIMER_NAMES, check_timer


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("task", type=TaskArgument())
@click.option(
    "--source",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Candidate file (.metal or .cu). Default: the task's seed.",
)
@click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "metal", "cuda", "sim"]),
)
@click.option(
    "--dialect",
    type=click.Choice(["metal", "cuda"]),
    default=None,
    help="Kernel dialect. Default: the --source file's extension (.cu / .metal), "
    "else the backend's own (metal on the simulator).",
)
@click.option("--sim-gpu", type=click.Choice(sim_gpu_names()), default=None, help=SIM_GPU_HELP)
@click.option(
    "--sizes",
    "size_set",
    default=None,
    type=click.Choice(["smoke", "in-dist", "held-out", "all"]),
    help="Size set. Default: in-dist on a GPU, smoke on the simulator.",
)
@click.option(
    "--size",
    "custom",
    metavar="KEY=VALUE,...",
    help="Evaluate one size you give, e.g. NX=67,NY=45,n_steps=4.",
)
@click.option(
    "--param", "params", metavar="NAME=INT,...", help="Override the candidate's //! param values."
)
@click.option("--warmup", type=click.IntRange(min=1), help="Warm-up runs per size.")
@click.option("--measure", type=click.IntRange(min=1), help="Timed runs per size.")
@click.option("--timeout", type=click.FloatRange(min=1), help="Seconds allowed per size.")
@click.option(
    "--timer",
    type=click.Choice(TIMER_NAMES),
    default=None,
    help="How a run is timed: cupti (CUDA kernel activity; the default on CUDA), "
    "sim (the simulator's own clock; its default), wall (chained runs per "
    "eval, an upper bound; the default on Metal).",
)
@click.option(
    "--sanitize",
    type=click.Choice(sanitizer.TOOLS),
    default=None,
    help="CUDA only: run each size's worker under NVIDIA's compute-sanitizer "
    "(memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory "
    "races); a reported error fails the size. Timings under it mean nothing, "
    "so the result has no score.",
)
@click.option(
    "--keep-implausible",
    is_flag=True,
    help="Count a size timed below what the machine's measured ceilings allow "
    "(verdict implausible) as measured instead of scoring the candidate 0: for "
    "studying such kernels.",
)
@click.option(
    "--input-seed",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=None,
    help="The seed the inputs are drawn from (default: a fresh secret one, "
    "printed in the result), to reproduce an evaluation.",
)
@click.option(
    "--held-out",
    "held_out_mode",
    type=click.Choice(held_out.MODES),
    default=held_out.DEFAULT_MODE,
    show_default=True,
    help="The held-out size of --sizes held-out / all: secret draws a configuration "
    "for this evaluation, shown (with its commitment) only when it is over; "
    "metal-sci is the task's published one.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def main(
    task,
    source,
    backend,
    dialect,
    sim_gpu,
    size_set,
    custom,
    params,
    warmup,
    measure,
    timeout,
    timer,
    sanitize,
    keep_implausible,
    input_seed,
    held_out_mode,
    as_json,
):
    """Evaluate a kernel candidate for TASK and print per-size verdicts and the score.

    TASK is a built-in task name or the path of a task folder of your own
    (task.py, reference.py, seed.metal; see examples/conv1d)."""
    t = load_task(task)  # TaskArgument checked the task folder
    check_sim_gpu(backend, sim_gpu)  # before whether a GPU backend is here
    check_backend_and_sanitize(backend, sanitize)
    sizes = [custom_size(t, custom)] if custom else None
    overrides = param_overrides(params) if params else None
    try:
        text = read_candidate_file(source) if source else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--source") from exc
    backend_name = resolve_backend_name(backend)
    dialect = dialect or dialects.name_of_file(source)
    check_dialect_and_timer(backend_name, dialect, timer)
    # With no text the seed runs: the one of the dialect the backend will run.
    runs = dialect or dialects.for_backend(backend_name).name
    if text is None:
        require_seed(t, runs)
    if overrides:
        check_overrides(t, text, overrides, runs)
    size_set = size_set or backend_class(backend_name).default_size_set
    draw = None  # drawn only when a held-out is evaluated
    if sizes is None and size_set in ("held-out", "all"):
        try:
            draw = held_out.begin(t, held_out.effective_mode(t, held_out_mode))
        except EnvironmentFault as exc:
            click.echo(f"error: the machine stopped the evaluation, no verdict: {exc}", err=True)
            sys.exit(EXIT_CODE)
        sizes = sizes_with_held_out(t, size_set, draw)
    progress = None if as_json else (lambda msg: click.echo(msg, err=True))
    try:
        ev = evaluate(
            task,
            text,
            backend=backend,
            size_set=size_set,
            sizes=sizes,
            filename=str(source) if source else None,
            n_warmup=warmup,
            n_measure=measure,
            timeout=timeout,
            param_overrides=overrides,
            dialect=dialect,
            timer=timer,
            sanitize=sanitize,
            progress=progress,
            input_seed=input_seed,
            keep_implausible=keep_implausible,
            sim_gpu=sim_gpu,
        )
    except SandboxUnavailable as exc:
        raise click.UsageError(str(exc)) from None
    except EnvironmentFault as exc:
        click.echo(f"error: the machine stopped the evaluation, no verdict: {exc}", err=True)
        sys.exit(EXIT_CODE)
    revealed = held_out.reveal(t, draw) if draw is not None and draw.mode == "secret" else None
    if as_json:
        record = ev.to_json()
        if revealed is not None:
            record["held_out"] = revealed.to_json()
        click.echo(json.dumps(record, indent=2))
        return
    click.echo(format_evaluation(ev))
    if revealed is not None:
        shown = held_out.describe(revealed.params)
        click.echo(f"secret held-out, revealed: {shown} (commitment {revealed.commitment})")


def sizes_with_held_out(t, size_set: str, draw: held_out.HeldOutDraw) -> list:
    """The sizes of --sizes held-out or all, with the draw's held-out
    configuration in place of the listed one."""
    listed = [s for s in t.size_set(size_set) if not t.is_held_out(s)]
    return listed + held_out.held_out_sizes(t, draw)


def check_backend_and_sanitize(backend: str, sanitize: str | None) -> None:
    """--backend and --sanitize: what --sanitize needs (said even where CUDA
    is missing), what this machine lacks to run the backend asked for (the
    simulator's compiler: EXIT_CODE), and whether it is available here."""
    try:  # before availability: say what --sanitize needs even where CUDA is missing
        sanitizer.check_sanitize(sanitize, resolve_backend_name(backend))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sanitize") from exc
    if backend != "auto":  # auto picks what this machine has
        check_backend(backend)


def custom_size(t, custom: str):
    """The size --size gives; one the machine cannot hold is refused before
    anything is allocated."""
    try:
        size = t.custom_size(parse_assignments(custom, "--size"))
        check_memory(t, size)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--size") from exc
    return size


def param_overrides(params: str) -> dict:
    """The --param values, integers."""
    try:
        return {k: int(v) for k, v in parse_assignments(params, "--param").items()}
    except ValueError:
        raise click.BadParameter("param values must be integers", param_hint="--param") from None


def check_dialect_and_timer(backend_name: str, dialect: str | None, timer: str | None) -> None:
    """--dialect: one the backend runs; --timer: one that times it."""
    try:
        backend_options(backend_name, dialect)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dialect") from exc
    try:
        check_timer(timer, backend_name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timer") from exc


if __name__ == "__main__":
    sys.exit(main())
