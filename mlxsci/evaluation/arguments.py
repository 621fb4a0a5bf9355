"""The eval command line's argument types and checks, found before anything runs.

`TaskArgument` (a built-in task name or a task folder, checked whole),
`parse_assignments` (`--size` / `--param` KEY=VALUE lists), `require_seed`,
`check_overrides`, `check_backend` (the --backend of transfer and
import-metal-sci) and `check_sim_gpu` (--sim-gpu: the simulator's only)
turn bad input into click usage errors (exit 2, one line). Apart from `main` in mlxsci/evaluation/evaluator.py because the search's
command line (search/__main__.py) takes a TASK the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from mlxsci.backends import backend_class, gpu_options, resolve_backend_name
from mlxsci.kernel.candidate import CandidateError, parse
from mlxsci.storage.faults import EXIT_CODE, EnvironmentFault
from mlxsci.task import check_task, load_task, task_names


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
        if (Path(value) / "task.py").is_file() or (
            Path(value).name == "task.py" and Path(value).is_file()
        ):
            try:  # the whole folder, before anything runs (the seed of a dialect: later)
                check_task(load_task(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
            return value
        if Path(value).is_dir():
            self.fail(
                f"{value!r} is not a task folder: it has no task.py (a task folder "
                "holds task.py, reference.py and seed.metal; see examples/conv1d)",
                param,
                ctx,
            )
        self.fail(
            f"{value!r} is neither a built-in task ({', '.join(task_names())}) nor a "
            "task folder (a directory holding task.py, reference.py and seed.metal)",
            param,
            ctx,
        )


def require_seed(task, dialect: str) -> None:
    """A usage error unless `task` can run from its seed in `dialect` (the
    dialect a command runs when no candidate file is given): check_task."""
    try:
        check_task(task, dialect)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def check_overrides(task, text, overrides, dialect):
    """--param names and values must fit the candidate's //! param lines."""
    try:
        parse(text if text is not None else task.seed(dialect), dialect=dialect).param_values(
            overrides
        )
    except CandidateError:
        return  # the evaluation reports format errors itself
    except (KeyError, ValueError) as exc:
        raise click.BadParameter(str(exc).strip("'\""), param_hint="--param") from exc


def check_backend(backend: str) -> str:
    """The backend's name, once this machine is known to run it: what it
    lacks (the simulator's compiler) exits EXIT_CODE, as mlxsci.eval does."""
    name = resolve_backend_name(backend)
    try:
        backend_class(name).check_machine()
    except EnvironmentFault as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CODE)
    if not backend_class(name).available():
        raise click.BadParameter(
            f"{name} is not available on this machine (use --backend sim or auto)",
            param_hint="--backend",
        )
    return name


def check_sim_gpu(backend: str, sim_gpu: str | None) -> None:
    """--sim-gpu names a GPU for the simulator to model: a usage error with
    a backend that times a real GPU, said before whether that backend is
    available here (click's Choice has refused an unknown name already)."""
    if sim_gpu is None:
        return
    try:
        gpu_options(resolve_backend_name(backend), sim_gpu)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
