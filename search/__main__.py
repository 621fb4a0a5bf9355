"""`python -m mlxsci.search`: evolve a task's kernels with an LLM (or offline).

    python -m mlxsci.search --task heat2d --model claude-opus-4-7 --iterations 10
    python -m mlxsci.search --task saxpy --model autotune --iterations 8 --backend sim
    python -m mlxsci.search --task nbody --model qwen3-coder --base-url http://localhost:8080/v1
    python -m mlxsci.search --resume results/heat2d_claude-opus-4-7_20261122_101500

The last lines give S and Phi of the seed and the best and the outcome; a
run that found nothing (flat, saturated, within_noise) says why in one line,
from what it measured (search/progress.py why_nothing_found).

Exit status: 0 when the search ran (whatever its outcome), 1 when no proposal
gave a candidate (outcome no_candidates: every call failed, or the cost cap
stopped the run first), 2 for a usage error, 130 when interrupted (Ctrl-C)
and 143 when terminated (SIGTERM): either way the worker is killed, its job
folders removed, and every finished iteration kept for --resume.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

import click

from mlxsci.evaluation.arguments import check_sim_gpu
from mlxsci.sandbox import SandboxUnavailable
from mlxsci.search import options
from mlxsci.storage.faults import EXIT_CODE as ENVIRONMENT_EXIT
from mlxsci.storage.faults import EnvironmentFault, fault_of
from mlxsci.storage.locks import LockHeld

# A resume takes these from the run's run.json (with the record's own fixed
# options, its directory and its start), so they cannot be given with --resume;
# the others may, to extend or re-cap the run.
FIXED_BY_THE_RUN = (*options.FIXED_BY_THE_RUN, "out", "start")


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP), raised wherever the search is, so that it stops as on
    Ctrl-C: the worker killed and its folders removed on the way out."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_terminated(signum, frame):
    raise Terminated(signum)


@contextlib.contextmanager
def stop_on_termination():
    """Within: SIGTERM and SIGHUP raise Terminated (where one is ignored, as
    under nohup, it stays ignored); after: the handlers as they were."""
    before = {}
    # Only the main thread may set handlers (main() called from another thread sets none).
    in_main = threading.current_thread() is threading.main_thread()
    for name in ("SIGTERM", "SIGHUP") if in_main else ():
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
            before[signum] = signal.signal(signum, raise_terminated)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def check_resume(ctx: click.Context) -> None:
    """A usage error for the options given on the command line that a resumed
    run takes from its run.json."""
    from click.core import ParameterSource

    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    fixed = [
        flag(name)
        for name in FIXED_BY_THE_RUN
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    ]
    if fixed:
        free = [
            flag(p.name)
            for p in ctx.command.params
            if p.name and p.name not in (*FIXED_BY_THE_RUN, "resume") and p.name != "help"
        ]
        raise click.UsageError(
            f"--resume continues a run with the options in its run.json: leave out "
            f"{', '.join(fixed)} ({', '.join(free[:-1])} and {free[-1]} may be given)"
        )


def check_machine(sanitize: str | None, backend: str) -> None:
    """Usage errors for a --sanitize or --backend this machine cannot serve."""
    if sanitize:  # before availability: say what --sanitize needs even where CUDA is missing
        from mlxsci.backends import resolve_backend_name
        from mlxsci.evaluation.sanitizer import check_sanitize

        try:
            check_sanitize(sanitize, resolve_backend_name(backend))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--sanitize") from exc
    if backend not in ("auto", "sim"):
        from mlxsci.backends import backend_class

        if not backend_class(backend).available():
            raise click.BadParameter(
                f"{backend} is not available on this machine", param_hint="--backend"
            )


def run_here(**arguments) -> dict:
    """mlxsci.search.run(**arguments), its stops and failures made exit
    statuses: a usage error, an interruption (130, or 143 for SIGTERM), a
    run directory held or unwritable (2), the machine's fault (3)."""
    from mlxsci.search.loop import run
    from mlxsci.search.proposers import ProposerError
    from mlxsci.search.run_lock import RunDirUnwritable

    try:
        with stop_on_termination():
            return run(echo=lambda m: click.echo(m), **arguments)
    except (ProposerError, FileExistsError, ValueError, SandboxUnavailable) as exc:
        raise click.UsageError(str(exc)) from exc
    except KeyboardInterrupt as exc:  # run() said where the run is and how to resume it
        sys.exit(128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT))
    except (LockHeld, RunDirUnwritable) as exc:  # another process's run; one not writable
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except (EnvironmentFault, OSError) as exc:  # run() said how to resume, if it can
        fault = fault_of(exc)
        if fault is None:
            raise
        click.echo(f"error: {fault}", err=True)
        sys.exit(ENVIRONMENT_EXIT)


def show_result(s: dict, quiet: bool) -> None:
    """The run's last lines: S and Phi of the seed and the best, its outcome
    (and why nothing was found, when nothing was), tokens, cost and folder."""
    from mlxsci.search.progress import S_AND_PHI, held_out_lines, why_nothing_found

    def f(x):
        return "-" if x is None else f"{x:.4f}"

    modelled = f" ({s['sim_gpu']})" if s.get("sim_gpu") else ""
    seed, best = s["seed_score"], s["best_score"]
    # What S's own ratio measured, beside the transfer check's interleaved one.
    ratio = f" ({best / seed:.2f}x, each scored alone)" if seed and best is not None else ""
    click.echo(
        f"{s['task']} / {s['model']} on {s['backend']}{modelled}: S {f(seed)} -> "
        f"{f(best)}{ratio}; held-out Phi {f(s['held_out_seed'])} -> "
        f"{f(s['held_out_best'])}; outcome {s['outcome']} "
        f"(noise band {s['improvement_band']:.1%}); "
        f"{s['tokens']['input']}+{s['tokens']['output']} tokens, ${s['cost_usd']:.4f}; "
        f"run directory {s['run_dir']}"
    )
    for line in held_out_lines(s):
        click.echo(line)
    why = why_nothing_found(s)
    if why:  # flat, saturated, within noise: what the run measured, in one line
        click.echo(why)
    if quiet:  # once per run: the progress output said it at the start otherwise
        click.echo(S_AND_PHI)
    if s["outcome"] == "no_candidates":  # not a usage error: the search ran, and found nothing
        click.echo(f"no candidates: {s['outcome_reason']}", err=True)
        sys.exit(1)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
@options.search_options
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Run directory (default results/<task>_<model>_<timestamp>).",
)
@click.option(
    "--resume",
    type=click.Path(exists=True, file_okay=False),
    help="Continue a run directory (a killed run loses no finished iteration).",
)
@click.option(
    "--start",
    type=click.Path(exists=True, dir_okay=False),
    help="Start from this candidate file instead of the task's seed.",
)
@click.option(
    "--prices",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON price table {model: [USD per M input, USD per M output]}.",
)
@click.option("--quiet", is_flag=True, help="No progress lines.")
def main(ctx, task, resume, sanitize, backend, quiet, **given):
    """Search for faster correct kernels; report S (search sizes) and Phi (held-out)."""
    if not task and not resume:
        raise click.UsageError("give --task (or --resume RUN_DIR)")
    if resume:
        check_resume(ctx)
    check_sim_gpu(backend, given["sim_gpu"])  # before whether a GPU backend is here
    check_machine(sanitize, backend)
    summary = run_here(
        task=task, resume=resume, sanitize=sanitize, backend=backend, quiet=quiet, **given
    )
    show_result(summary, quiet)


if __name__ == "__main__":
    sys.exit(main())
