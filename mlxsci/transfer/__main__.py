"""`python -m mlxsci.transfer TASK CANDIDATE` (= `mlxsci transfer ...`): the
transfer check of one candidate against a baseline (the task's seed unless
--baseline names a file).

It evaluates both at the search sizes (the backend's default size set, as a
search scores: smoke on the simulator, in-dist on a GPU; --sizes chooses),
at the held-out configuration (--held-out secret: one drawn from a secret
committed to before anything runs and revealed at the end, the default;
metal-sci: the task's listed one), and what the grade needs besides
(mlxsci.transfer.judge_transfer), then prints the grade, its reason and its
evidence, or with --json one object. Progress goes to stderr. While the
secret is not revealed no line names the drawn values: the drawn size is
labelled "secret held-out", its distribution "the held-out's data".

Exit status: 0 when the check ran, whatever the grade; 2 for bad input, a
one-line message (an unknown task, a missing or unreadable file, a candidate
or baseline that does not parse or fit the task, a dialect or timer the
backend cannot use, a --sim-gpu with a GPU backend); 3 when the machine stopped an evaluation (no space, a
worker that could not start): no grade then.
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
    modelled_gpu,
    sim_gpu_names,
)
from mlxsci.evaluation.arguments import TaskArgument, check_backend, check_sim_gpu, require_seed
from mlxsci.evaluation.comparison import compare
from mlxsci.evaluation.evaluator import candidate_refusal, evaluate
from mlxsci.kernel import dialects
from mlxsci.kernel.candidate import read_candidate_file
from mlxsci.sandbox import SandboxUnavailable
from mlxsci.storage.faults import EXIT_CODE, EnvironmentFault
from mlxsci.task import Size, load_task
from mlxsci.timing.timers import TIMER_NAMES, check_timer
from mlxsci.transfer.measurement import judge_transfer


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("task", type=TaskArgument())
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The file the candidate is compared with. Default: the task's seed.",
)
@click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "metal", "cuda", "sim"]),
)
@click.option("--sim-gpu", type=click.Choice(sim_gpu_names()), default=None, help=SIM_GPU_HELP)
@click.option(
    "--held-out",
    "mode",
    default=held_out.DEFAULT_MODE,
    show_default=True,
    type=click.Choice(held_out.MODES),
    help="secret: a configuration drawn in secret and revealed at the end; metal-sci: "
    "the task's listed held-out size (a task without a secret draw uses it anyway).",
)
@click.option(
    "--sizes",
    "size_set",
    default=None,
    type=click.Choice(["smoke", "in-dist"]),
    help="The search sizes. Default: the backend's (smoke on the simulator, in-dist on a GPU).",
)
@click.option(
    "--dialect",
    type=click.Choice(["metal", "cuda"]),
    default=None,
    help="Default: the candidate file's extension.",
)
@click.option(
    "--timer", type=click.Choice(TIMER_NAMES), default=None, help="Default: the backend's."
)
@click.option("--timeout", type=click.FloatRange(min=1), help="Seconds allowed per size.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def main(
    task, candidate, baseline, backend, sim_gpu, mode, size_set, dialect, timer, timeout, as_json
):
    """Grade whether CANDIDATE's win over the baseline for TASK transfers to
    the held-out configuration and to other input data: transfers, A
    (size-tuned branch beside a slow fallback), B (a wrong arm off the
    measured sizes), C (a published held-out value enumerated), D (fit to
    the in-distribution data), or no-win."""
    t = load_task(task)  # TaskArgument checked the task folder
    check_sim_gpu(backend, sim_gpu)  # before whether a GPU backend is here
    backend_name = check_backend(backend)
    dialect = dialect or dialects.name_of_file(candidate) or dialects.for_backend(backend_name).name
    check_dialect_and_timer(backend_name, dialect, timer)
    sources = read_sources(t, candidate, baseline, dialect)
    search_sizes = list(t.size_set(size_set or backend_class(backend_name).default_size_set))
    record = held_out.begin(t, held_out.effective_mode(t, mode))
    if record.mode != mode:
        say(f"{t.name} declares no secret held-out: using its listed one (metal-sci)")
    elif record.mode == "secret":
        say(f"held-out: a secret draw, committed to as {record.commitment[:16]}...")

    def run(source: str, filename: str, sizes: list[Size], coverage: bool = False) -> dict:
        return evaluate(
            task, source, backend=backend_name, sizes=sizes, filename=filename, dialect=dialect,
            timer=timer, timeout=timeout, progress=say, coverage=coverage, sim_gpu=sim_gpu,
        ).to_json()  # fmt: skip

    def timed(baseline_source: str, candidate_source: str, sizes: list[Size]) -> dict:
        return compare(
            task, baseline_source, candidate_source, backend=backend_name, sizes=sizes,
            filenames=(sources[1][1], sources[0][1]), dialect=dialect, timer=timer,
            timeout=timeout, held_out=True, sim_gpu=sim_gpu,
        )  # fmt: skip

    try:
        judged = judge_transfer(
            t, sources[0][0], sources[1][0], dialect=dialect, search_sizes=search_sizes,
            held_out=held_out.held_out_sizes(t, record), evaluate=run,
            candidate_filename=sources[0][1], baseline_filename=sources[1][1], progress=say,
            compare=timed,
        )  # fmt: skip
    except SandboxUnavailable as exc:
        raise click.UsageError(str(exc)) from None
    except EnvironmentFault as exc:
        click.echo(f"error: the machine stopped the evaluation, no grade: {exc}", err=True)
        sys.exit(EXIT_CODE)
    record = held_out.reveal(t, record)
    name_revealed_distribution(judged, record)
    if as_json:
        doc = {"task": t.name, "candidate": str(candidate), "baseline": sources[1][1], **judged}
        doc["sim_gpu"] = modelled_gpu(backend_name, dialect, sim_gpu)
        click.echo(json.dumps({**doc, "held_out": record.to_json()}, indent=2))
    else:
        click.echo(format_judgement(judged, record))


def say(line: str) -> None:
    """A progress line, on stderr so that --json's stdout stays one object."""
    click.echo(line, err=True)


def check_dialect_and_timer(backend_name: str, dialect: str, timer: str | None) -> None:
    try:
        backend_options(backend_name, dialect)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dialect") from exc
    try:
        check_timer(timer, backend_name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timer") from exc


def read_sources(t, candidate: Path, baseline: Path | None, dialect: str) -> list[tuple[str, str]]:
    """[(candidate text, its file name), (baseline's, its)]: each a text file
    that parses, passes the source policy and fits the task, or a usage
    error naming what is wrong (before anything is evaluated)."""
    if baseline is None:
        require_seed(t, dialect)
    found = []
    for path, hint in ((candidate, "CANDIDATE"), (baseline, "--baseline")):
        if path is None:
            text, filename = t.seed(dialect), str(t.seed_path(dialect))
        else:
            try:
                text, filename = read_candidate_file(path), str(path)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint=hint) from exc
        why = candidate_refusal(t, text, dialect, filename)
        if why:
            raise click.BadParameter(f"it cannot run: {why}", param_hint=hint)
        found.append((text, filename))
    return found


def name_revealed_distribution(judged: dict, record: held_out.HeldOutDraw) -> None:
    """Once the draw is revealed, the second distribution's name (which the
    check kept out of its numbers while it was part of the secret)."""
    second = judged.get("numbers", {}).get("second_distribution", {})
    if second.get("from_held_out_draw") and record.revealed and record.params:
        second["distribution"] = record.params.get("distribution")


def format_judgement(judged: dict, record: held_out.HeldOutDraw) -> str:
    """The grade, its reason, the evidence (one item a line) and the numbers
    of each place, then the held-out draw as revealed."""
    lines = [f"transfer grade: {judged['grade']}", f"reason: {judged['reason']}", "evidence:"]
    for item in judged["evidence"]:
        where = f" ({item['where']})" if item.get("where") else ""
        lines.append(f"  - {item['what']}{where}")
    lines.append("numbers:")
    for key, place in judged["numbers"].items():
        if not place.get("measured"):
            lines.append(f"  {key}: not measured")
            continue
        drawn = place.get("from_held_out_draw") and place.get("distribution")
        data = f" (the draw's distribution: {place['distribution']})" if drawn else ""
        ratio = "-" if place.get("ratio") is None else f"{place['ratio']:.3g}x"
        kept = place.get("kept_fraction")
        kept = "" if kept is None else f", keeps {kept:.2f} of the gain"
        lines.append(
            f"  {key} [{place['sizes']}]{data}: candidate {fmt(place['candidate'])}, baseline "
            f"{fmt(place['baseline'])}: {ratio} {place.get('verdict') or ''}{kept}".rstrip()
        )
    lines.append(describe_draw(record))
    return "\n".join(lines)


def fmt(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def describe_draw(record: held_out.HeldOutDraw) -> str:
    if record.mode == "metal-sci":
        return "held-out: the task's listed size (metal-sci)"
    drawn = held_out.describe(record.params)
    return f"held-out: secret draw revealed: {drawn} (secret {record.secret}, commitment {record.commitment})"


if __name__ == "__main__":
    sys.exit(main())
