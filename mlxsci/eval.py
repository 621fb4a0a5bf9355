"""`python -m mlxsci.eval TASK`: evaluate a kernel candidate (the seed by default).

Exit code 0 whenever the evaluation ran, whatever the verdict; 2 for usage
errors, each a one-line message, found before anything runs: an unknown task
or a task folder that cannot run (mlxsci.task.check_task), a --size the task
rejects or this machine's memory cannot hold (mlxsci.task.check_memory), a
--source that is not a candidate text file (binary, not UTF-8, empty).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from tabulate import tabulate

from mlxsci.api import read_candidate_file
from mlxsci.backends import backend_class, resolve_backend_name
from mlxsci.candidate import CandidateError, parse
from mlxsci.evaluate import Evaluation, backend_options, dialect_of, evaluate
from mlxsci.sanitizer import TOOLS as SANITIZER_TOOLS, check_sanitize
from mlxsci.task import check_memory, check_task, load_task, task_names
from mlxsci.timers import TIMER_NAMES, check_timer


def parse_assignments(text: str | None, what: str) -> dict:
    """'NX=67,NY=45' -> {'NX': '67', 'NY': '45'} (values converted by the caller)."""
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        out[key.strip()] = value.strip()
    return out


# What the two numbers of a result mean, in one line under them.
S_AND_PHI = ("S = geometric mean of the scored sizes' fractions of the roofline (0 if any "
             "fails); Phi = the fraction at the held-out size, never part of S")


def native_dialect(backend_name: str) -> str:
    """The dialect a backend runs when none is asked for (metal on the simulator)."""
    return "cuda" if backend_name == "cuda" else "metal"


def fmt(value, spec=".3g"):
    return "-" if value is None else format(value, spec)


def format_evaluation(ev: Evaluation) -> str:
    rows = []
    for s in ev.sizes:
        verdict = "ok" if s.correct else "FAIL"
        rows.append([s.label + (" (held-out)" if s.held_out else ""), verdict,
                     fmt(s.error, ".2e"), fmt(s.tol, ".2e"),
                     fmt(None if s.seconds is None else s.seconds * 1e3, ".4g"),
                     fmt(None if s.noise is None else 100 * s.noise, ".1f"),
                     f"{fmt(s.achieved, '.2f')} {s.unit}".strip(), fmt(s.ceiling, ".2f"),
                     fmt(s.fraction, ".3f"), ",".join(s.flags)])
    lines = [f"task {ev.task} on {ev.backend} ({ev.device}), {ev.dialect} dialect, "
             f"timer {ev.timer}"]
    if rows:
        lines.append(tabulate(rows, headers=["size", "verdict", "error", "tol", "ms (median)",
                                             "noise %", "achieved", "ceiling", "fraction",
                                             "flags"],
                              disable_numparse=True))
    for s in ev.sizes:
        if s.timer == "wall" and s.timer_info.get("repeats"):
            floor = s.timer_info.get("floor_seconds")
            lines.append(f"{s.label}: wall timer, {s.timer_info['repeats']} chained runs per eval"
                         + (f", empty-eval floor {floor * 1e3:.4g} ms" if floor is not None else "")
                         + " (an upper bound on device time)")
            break
    if ev.sizes and any(s.metal_sci_fraction is not None for s in ev.sizes):
        lines.append("Metal-Sci chip-table fractions: " + ", ".join(
            f"{s.label}={fmt(s.metal_sci_fraction, '.3f')}" for s in ev.sizes))
    if ev.sanitized:
        lines.append(f"ran under compute-sanitizer {ev.sanitized}: timings are not comparable, "
                     "no score")
    lines.append(f"score (gmean of fractions): {fmt(ev.score, '.4f')}"
                 + (f" (noise {100 * ev.noise:.1f}%)" if ev.noise is not None else "")
                 + (f"   held-out phi: {ev.phi:.4f}" if ev.phi is not None else ""))
    lines.append(S_AND_PHI)
    if ev.fail_reason:
        lines.append(f"fail_reason: {ev.fail_reason}")
    return "\n".join(lines)


class TaskArgument(click.ParamType):
    """A built-in task name or the path of a task folder of your own (a
    directory holding task.py, reference.py and seeds, as examples/conv1d)."""
    name = "task"

    def get_metavar(self, param, ctx=None):
        return "{" + "|".join(task_names()) + "|PATH}"

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem
        return [CompletionItem(n) for n in task_names() if n.startswith(incomplete)]

    def convert(self, value, param, ctx):
        if value in task_names():
            return value
        if (Path(value) / "task.py").is_file() or (Path(value).name == "task.py"
                                                  and Path(value).is_file()):
            try:   # the whole folder, before anything runs (the seed of a dialect: later)
                check_task(load_task(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
            return value
        if Path(value).is_dir():
            self.fail(f"{value!r} is not a task folder: it has no task.py (a task folder "
                      "holds task.py, reference.py and seed.metal; see examples/conv1d)",
                      param, ctx)
        self.fail(f"{value!r} is neither a built-in task ({', '.join(task_names())}) nor a "
                  "task folder (a directory holding task.py, reference.py and seed.metal)",
                  param, ctx)


def require_seed(task, dialect: str) -> None:
    """A usage error unless `task` can run from its seed in `dialect` (the
    dialect a command runs when no candidate file is given): check_task."""
    try:
        check_task(task, dialect)
    except ValueError as exc:
        raise click.UsageError(str(exc))


def check_overrides(task, text, overrides, dialect):
    """--param names and values must fit the candidate's //! param lines."""
    try:
        parse(text if text is not None else task.seed(dialect),
              dialect=dialect).param_values(overrides)
    except CandidateError:
        return  # the evaluation reports format errors itself
    except (KeyError, ValueError) as exc:
        raise click.BadParameter(str(exc).strip("'\""), param_hint="--param")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("task", type=TaskArgument())
@click.option("--source", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Candidate file (.metal or .cu). Default: the task's seed.")
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(["auto", "metal", "cuda", "sim"]))
@click.option("--dialect", type=click.Choice(["metal", "cuda"]), default=None,
              help="Kernel dialect. Default: the --source file's extension (.cu / .metal), "
                   "else the backend's own (metal on the simulator).")
@click.option("--sizes", "size_set", default=None,
              type=click.Choice(["smoke", "in-dist", "held-out", "all"]),
              help="Size set. Default: in-dist on a GPU, smoke on the simulator.")
@click.option("--size", "custom", metavar="KEY=VALUE,...",
              help="Evaluate one size you give, e.g. NX=67,NY=45,n_steps=4.")
@click.option("--param", "params", metavar="NAME=INT,...",
              help="Override the candidate's //! param values.")
@click.option("--warmup", type=click.IntRange(min=1), help="Warm-up runs per size.")
@click.option("--measure", type=click.IntRange(min=1), help="Timed runs per size.")
@click.option("--timeout", type=click.FloatRange(min=1), help="Seconds allowed per size.")
@click.option("--timer", type=click.Choice(TIMER_NAMES), default=None,
              help="How a run is timed: cupti (CUDA kernel activity; the default on CUDA), "
                   "sim (the simulator's own clock; its default), wall (chained runs per "
                   "eval, an upper bound; the default on Metal).")
@click.option("--sanitize", type=click.Choice(SANITIZER_TOOLS), default=None,
              help="CUDA only: run each size's worker under NVIDIA's compute-sanitizer "
                   "(memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory "
                   "races); a reported error fails the size. Timings under it mean nothing, "
                   "so the result has no score.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def main(task, source, backend, dialect, size_set, custom, params, warmup, measure, timeout,
         timer, sanitize, as_json):
    """Evaluate a kernel candidate for TASK and print per-size verdicts and the score.

    TASK is a built-in task name or the path of a task folder of your own
    (task.py, reference.py, seed.metal; see examples/conv1d)."""
    t = load_task(task)   # TaskArgument checked the task folder
    try:   # before availability: say what --sanitize needs even where CUDA is missing
        check_sanitize(sanitize, resolve_backend_name(backend))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sanitize")
    if backend != "auto" and not backend_class(backend).available():
        raise click.BadParameter(f"{backend} is not available on this machine "
                                 "(use --backend sim or auto)", param_hint="--backend")
    sizes = None
    if custom:
        try:   # a size the machine cannot hold is refused before anything is allocated
            sizes = [t.custom_size(parse_assignments(custom, "--size"))]
            check_memory(t, sizes[0])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--size")
    overrides = None
    if params:
        try:
            overrides = {k: int(v) for k, v in parse_assignments(params, "--param").items()}
        except ValueError:
            raise click.BadParameter("param values must be integers", param_hint="--param")
    try:
        text = read_candidate_file(source) if source else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--source")
    backend_name = resolve_backend_name(backend)
    dialect = dialect or dialect_of(str(source) if source else None)
    try:
        backend_options(backend_name, dialect)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dialect")
    try:
        check_timer(timer, backend_name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timer")
    if text is None:   # the seed runs: the one of the dialect the backend will run
        require_seed(t, dialect or native_dialect(backend_name))
    if overrides:
        check_overrides(t, text, overrides, dialect or native_dialect(backend_name))
    if size_set is None:
        size_set = "smoke" if backend_name == "sim" else "in-dist"
    progress = None if as_json else (lambda msg: click.echo(msg, err=True))
    ev = evaluate(task, text, backend=backend, size_set=size_set, sizes=sizes,
                  filename=str(source) if source else None, n_warmup=warmup, n_measure=measure,
                  timeout=timeout, param_overrides=overrides, dialect=dialect,
                  timer=timer, sanitize=sanitize, progress=progress)
    click.echo(json.dumps(ev.to_json(), indent=2) if as_json else format_evaluation(ev))


if __name__ == "__main__":
    sys.exit(main())
