"""Many searches, one after another: `python -m mlxsci.sweep`.

    python -m mlxsci.sweep --tasks saxpy,heat2d --models autotune --iterations 4 --backend sim

Each (task, model) runs into DIR/<task>_<model>/ (the model name made safe
for a path), so a sweep started again finds its own runs:
- summary.json with at least K iterations (or a proposer that ran dry):
  finished, skipped;
- summary.json with fewer iterations: resumed and extended to K;
- a run directory without summary.json (a killed run): resumed;
- nothing there: a new search.
A search that raises is recorded as failed and the sweep goes on.
DIR/index.json lists the runs (task, model, path relative to DIR, status:
finished, unfinished or failed) and is rewritten after each one;
`python -m mlxsci.report DIR` reads it.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import click

from mlxsci.cache import atomic_write_json

DEFAULT_OUT = Path("results") / "sweep"


def run_name(task: str, model: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") or "model"
    return f"{task}_{safe}"


def _summary(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_finished(run_dir: Path, iterations: int) -> bool:
    s = _summary(run_dir)
    if s is None:
        return False
    ran_dry = "nothing left to propose" in (s.get("stopped") or "")
    return (s.get("iterations") or 0) >= iterations or ran_dry


def plan(tasks: list[str], models: list[str]) -> list[tuple[str, str]]:
    return [(t, m) for t in tasks for m in models]


def write_index(out: Path, entries: list[dict]) -> None:
    atomic_write_json(out / "index.json", {"runs": entries})


def sweep(tasks: list[str], models: list[str], iterations: int, *, backend: str = "auto",
          out: str | Path = DEFAULT_OUT, strategy: str = "one-plus-one", quiet: bool = True,
          echo=print, **run_options) -> list[dict]:
    """Run every (task, model) search that is not finished; return the index entries.

    Each entry: task, model, path (relative to out), status (finished,
    unfinished, failed), action (skipped, ran, resumed) and error when failed."""
    from mlxsci.search import run
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for task, model in plan(tasks, models):
        name = run_name(task, model)
        run_dir = out / name
        entry = {"task": task, "model": model, "path": name}
        if is_finished(run_dir, iterations):
            entry.update(status="finished", action="skipped")
            echo(f"{name}: finished, skipped")
        else:
            resume = run_dir.exists() and (run_dir / "run.json").exists()
            entry["action"] = "resumed" if resume else "ran"
            echo(f"{name}: {'resuming' if resume else 'running'} ({iterations} iterations)")
            try:
                if resume:
                    run(None, resume=run_dir, iterations=iterations, quiet=quiet, echo=echo,
                        **run_options)
                else:
                    run(task, model, iterations=iterations, strategy=strategy, backend=backend,
                        out=run_dir, quiet=quiet, echo=echo, **run_options)
                entry["status"] = "finished" if (run_dir / "summary.json").exists() \
                    else "unfinished"
            except Exception as exc:   # noqa: BLE001 - one failed search must not end a sweep
                entry.update(status="failed", error=f"{type(exc).__name__}: {exc}")
                echo(f"{name}: failed: {entry['error']}")
        entries.append(entry)
        # Rewritten after every run: an interrupted sweep still leaves an index.
        write_index(out, entries + [{"task": t, "model": m, "path": run_name(t, m),
                                     "status": "unfinished", "action": "pending"}
                                    for t, m in plan(tasks, models)[len(entries):]])
    write_index(out, entries)
    return entries


def split_list(text: str, option: str, noun: str) -> list[str]:
    """'a, b,,a' -> ['a', 'b']: the names a comma-separated option gives, each
    once; a usage error when it gives none."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise click.BadParameter(f"no {noun} given in {text!r}: give a comma-separated list",
                                 param_hint=option)
    return names


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--tasks", required=True, help="all, or a comma-separated list of tasks.")
@click.option("--models", required=True, help="Comma-separated models (autotune, gpt-5.5, ...).")
@click.option("--iterations", required=True, type=click.IntRange(min=1),
              help="Proposals per search after the seed.")
@click.option("--backend", default="auto", type=click.Choice(["auto", "metal", "cuda", "sim"]),
              show_default=True)
@click.option("--out", default=str(DEFAULT_OUT), type=click.Path(file_okay=False),
              show_default=True, help="Sweep folder; runs go to OUT/<task>_<model>/.")
@click.option("--strategy", default="one-plus-one", show_default=True,
              type=click.Choice(["one-plus-one", "best-of-n"]))
@click.option("--base-url", default=None, help="OpenAI-compatible server for the models.")
@click.option("--max-cost", default=None, type=click.FloatRange(min=0), help="USD cap per search.")
@click.option("--accept", type=click.Choice(["strict", "noise-aware"]), default="strict",
              show_default=True, help="Acceptance rule of each search (see mlxsci.search).")
@click.option("--timer", type=click.Choice(["cupti", "sim", "wall"]), default=None,
              help="How runs are timed (default: the backend's own).")
@click.option("--sanitize", type=click.Choice(["memcheck", "racecheck"]), default=None,
              help="CUDA only: every candidate first runs under NVIDIA's compute-sanitizer "
                   "(see mlxsci.search).")
@click.option("--quiet", is_flag=True, help="Only one line per search.")
def main(tasks, models, iterations, backend, out, strategy, base_url, max_cost, accept, timer,
         sanitize, quiet):
    """Run searches for every task x model into OUT and index them for `mlxsci.report`."""
    from mlxsci.task import task_names
    known = task_names()
    task_list = known if tasks.strip() == "all" else split_list(tasks, "--tasks", "task")
    unknown = [t for t in task_list if t not in known]
    if unknown:
        raise click.BadParameter(f"unknown task(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(known)}", param_hint="--tasks")
    model_list = split_list(models, "--models", "model")
    from mlxsci.backends import backend_class, resolve_backend_name
    if backend != "auto" and not backend_class(backend).available():
        # every search would fail the same way: say so once, before any starts
        raise click.BadParameter(f"{backend} is not available on this machine "
                                 "(use --backend sim or auto)", param_hint="--backend")
    from mlxsci.timers import check_timer
    try:   # a timer that cannot time this backend would fail every search: say so once
        check_timer(timer, resolve_backend_name(backend))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timer")
    from mlxsci.sanitizer import check_sanitize
    try:   # likewise a sanitizer that cannot run
        check_sanitize(sanitize, resolve_backend_name(backend))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sanitize")
    options = {"accept": accept, "timer": timer}
    if sanitize:
        options["sanitize"] = sanitize
    if base_url:
        options["base_url"] = base_url
    if max_cost is not None:
        options["max_cost"] = max_cost
    entries = sweep(task_list, model_list, iterations, backend=backend, out=out,
                    strategy=strategy, quiet=quiet,
                    echo=lambda msg: click.echo(msg, err=True), **options)
    failed = [e for e in entries if e["status"] != "finished"]
    click.echo(f"{len(entries) - len(failed)}/{len(entries)} runs finished; "
               f"index: {Path(out) / 'index.json'}", err=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
