"""`python -m mlxsci.search`: evolve a task's kernels with an LLM (or offline).

    python -m mlxsci.search --task heat2d --model claude-opus-4-7 --iterations 10
    python -m mlxsci.search --task saxpy --model autotune --iterations 8 --backend sim
    python -m mlxsci.search --task nbody --model qwen3-coder --base-url http://localhost:8080/v1
    python -m mlxsci.search --resume results/heat2d_claude-opus-4-7_20261122_101500

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

from mlxsci.evaluation.arguments import TaskArgument
from mlxsci.sandbox import SandboxUnavailable
from mlxsci.storage.faults import EXIT_CODE as ENVIRONMENT_EXIT
from mlxsci.storage.faults import EnvironmentFault, fault_of
from mlxsci.storage.locks import LockHeld

# Options a run keeps in its run.json: a resume takes them from there, so they
# cannot be given with --resume (the others may, to extend or re-cap the run).
FIXED_BY_THE_RUN = (
    "task",
    "model",
    "strategy",
    "backend",
    "dialect",
    "sizes",
    "accept",
    "timer",
    "sanitize",
    "keep_implausible",
    "out",
    "start",
    "seed",
    "base_url",
    "api",
    "timeout",
)


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


def options_fixed_by_the_run(ctx: click.Context) -> list[str]:
    """The options given on the command line that a resumed run takes from its run.json."""
    from click.core import ParameterSource

    return [
        "--" + name.replace("_", "-")
        for name in FIXED_BY_THE_RUN
        if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    ]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
@click.option(
    "--task",
    type=TaskArgument(),
    help="Task to optimise: a built-in task name or the path of a task folder "
    "of your own (task.py, reference.py, seed.metal; see examples/conv1d).",
)
@click.option(
    "--model",
    default="autotune",
    show_default=True,
    help="claude-*, gpt-*/o*, any model served at --base-url, autotune (offline), "
    "or replay:RUN_DIR.",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=0),
    default=None,
    help="Proposals after the seed (default 10; with --resume, extends the run).",
)
@click.option(
    "--strategy",
    default="one-plus-one",
    show_default=True,
    type=click.Choice(["one-plus-one", "best-of-n"]),
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
    help="Kernel dialect (default: the backend's own; metal on the simulator).",
)
@click.option(
    "--sizes",
    type=click.Choice(["smoke", "in-dist"]),
    default=None,
    help="Sizes the search scores on. Default: in-dist on a GPU, smoke on the simulator.",
)
@click.option(
    "--accept",
    type=click.Choice(["strict", "noise-aware"]),
    default="strict",
    show_default=True,
    help="strict: a strictly higher S replaces the incumbent (Metal-Sci's (1+1)). "
    "noise-aware: such a candidate is re-timed against the incumbent in one "
    "worker and kept only if the speedup lies beyond the measured noise.",
)
@click.option(
    "--timer",
    type=click.Choice(["cupti", "sim", "wall"]),
    default=None,
    help="How a run is timed (default: cupti on CUDA when installed, else wall; "
    "sim on the simulator).",
)
@click.option(
    "--sanitize",
    type=click.Choice(["memcheck", "racecheck"]),
    default=None,
    help="CUDA only: before timing, run every candidate under NVIDIA's "
    "compute-sanitizer (memcheck or racecheck); one it reports an error for "
    "fails, with that error as its verdict.",
)
@click.option(
    "--keep-implausible",
    is_flag=True,
    default=None,
    help="Count a candidate timed below what the machine's measured ceilings "
    "allow (verdict implausible) as measured, so it may become the best: for "
    "studying such kernels. Default: its S is 0 and it is never kept.",
)
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
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of autotune's order.")
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0),
    help="Spend at most this many USD: a call is made only when its worst case "
    "(prompt + max output tokens) fits in what is left. A model without a price "
    "needs --prices.",
)
@click.option(
    "--base-url",
    help="OpenAI-compatible endpoint (mlx_lm.server, Ollama, vLLM, ...). "
    "It gets no API key unless --api-key-env names one.",
)
@click.option(
    "--api-key-env",
    metavar="NAME",
    help="Name of the environment variable holding the key for --base-url (e.g. "
    "GEMINI_API_KEY). OPENAI_API_KEY / ANTHROPIC_API_KEY go only to "
    "api.openai.com / api.anthropic.com.",
)
@click.option(
    "--llm-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Seconds one LLM call may wait for its answer before it is retried [default: 300].",
)
@click.option(
    "--llm-retries",
    type=click.IntRange(min=0),
    metavar="N",
    help="Retries of a failed LLM call (HTTP 429/5xx, timeout, lost connection, "
    "malformed answer), each announced [default: 4].",
)
@click.option(
    "--api",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "anthropic", "openai", "openai-chat"]),
)
@click.option(
    "--prices",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON price table {model: [USD per M input, USD per M output]}.",
)
@click.option(
    "--timeout", type=click.FloatRange(min=1), help="Seconds allowed per size evaluation."
)
@click.option("--quiet", is_flag=True, help="No progress lines.")
def main(
    ctx,
    task,
    model,
    iterations,
    strategy,
    backend,
    dialect,
    sizes,
    accept,
    timer,
    sanitize,
    keep_implausible,
    out,
    resume,
    start,
    seed,
    max_cost,
    base_url,
    api_key_env,
    llm_timeout,
    llm_retries,
    api,
    prices,
    timeout,
    quiet,
):
    """Search for faster correct kernels; report S (search sizes) and Phi (held-out)."""
    from mlxsci.search.loop import run
    from mlxsci.search.progress import S_AND_PHI
    from mlxsci.search.proposers.base import ProposerError
    from mlxsci.search.run_lock import RunDirUnwritable

    if not task and not resume:
        raise click.UsageError("give --task (or --resume RUN_DIR)")
    fixed = options_fixed_by_the_run(ctx) if resume else []
    if fixed:
        raise click.UsageError(
            f"--resume continues a run with the options in its run.json: leave out "
            f"{', '.join(fixed)} (--iterations, --max-cost, --prices, --api-key-env, "
            "--llm-timeout, --llm-retries and --quiet may be given)"
        )
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
    try:
        with stop_on_termination():
            summary = run(
                task,
                model,
                iterations=iterations,
                strategy=strategy,
                backend=backend,
                sizes=sizes,
                dialect=dialect,
                accept=accept,
                timer=timer,
                sanitize=sanitize,
                keep_implausible=bool(keep_implausible),
                out=out,
                resume=resume,
                seed=seed,
                max_cost=max_cost,
                base_url=base_url,
                api=api,
                prices=prices,
                start=start,
                timeout=timeout,
                api_key_env=api_key_env,
                llm_timeout=llm_timeout,
                llm_retries=llm_retries,
                quiet=quiet,
                echo=lambda m: click.echo(m),
            )
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
    s = summary

    def f(x):
        return "-" if x is None else f"{x:.4f}"

    click.echo(
        f"{s['task']} / {s['model']} on {s['backend']}: S {f(s['seed_score'])} -> "
        f"{f(s['best_score'])}; held-out Phi {f(s['held_out_seed'])} -> "
        f"{f(s['held_out_best'])}; outcome {s['outcome']} "
        f"(noise band {s['improvement_band']:.1%}); "
        f"{s['tokens']['input']}+{s['tokens']['output']} tokens, ${s['cost_usd']:.4f}; "
        f"run directory {s['run_dir']}"
    )
    if quiet:  # once per run: the progress output said it at the start otherwise
        click.echo(S_AND_PHI)
    if s["outcome"] == "no_candidates":  # not a usage error: the search ran, and found nothing
        click.echo(f"no candidates: {s['outcome_reason']}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    sys.exit(main())
