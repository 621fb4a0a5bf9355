"""What the lock-step run with the race detector costs a size, and whether
any seed fails it (issue 41).

    python bench/race_detector_cost.py [--tasks saxpy,lj] [--dialects metal,cuda]
        [--sizes smoke+first] [--repeats 2] [--out bench/results/sim/race_detector_DATE.md]

Evaluates every task's seed in each dialect on the simulator twice per
repeat, side by side: once as an evaluation runs it (the verification
orders reversed, two shuffled, and lock-step with the race detector), once
without the lock-step run (SimBackend.has_lockstep_order off in this, the
parent, process, which plans the worker's runs). Per size it reports the
worker's "schedules" phase (the other orders' runs) with and without the
lock-step run, the difference (what the lock-step run costs), the size's
whole worker time, and the verdict with it (a seed that fails is a false
positive of the detector or of the lock-step lanes). The evaluations of one
task alternate (with, without, with, ...) so that the machine's load falls
on both. Progress goes to stderr.
"""

from __future__ import annotations

import datetime
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import click
from tabulate import tabulate

from mlxsci.backends.sim import SimBackend
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.task import load_task, task_names

DIALECTS = ("metal", "cuda")


def sizes_of(task: str, which: str) -> list:
    t = load_task(task)
    if which == "smoke+first":
        return [*t.size_set("smoke"), t.size_set("in-dist")[0]]
    return list(t.size_set(which))


def one_run(task: str, dialect: str, sizes: list, lockstep: bool):
    """The seed's evaluation with or without the lock-step run."""
    real = SimBackend.has_lockstep_order
    if not lockstep:
        SimBackend.has_lockstep_order = classmethod(lambda cls: False)  # type: ignore[method-assign,assignment]
    try:
        return evaluate(task, backend="sim", dialect=dialect, sizes=sizes, input_seed=12345)
    finally:
        SimBackend.has_lockstep_order = real  # type: ignore[method-assign]


@click.command()
@click.option("--tasks", default=None, help="Comma-separated tasks (default: all).")
@click.option("--dialects", default=",".join(DIALECTS), show_default=True)
@click.option("--sizes", default="smoke+first", show_default=True)
@click.option("--repeats", default=2, show_default=True, type=int)
@click.option("--out", default=None, type=click.Path(), help="Markdown file to write.")
def main(tasks, dialects, sizes, repeats, out):
    names = tasks.split(",") if tasks else task_names()
    rows, failures = [], []
    for task in names:
        for dialect in dialects.split(","):
            sz = sizes_of(task, sizes)
            with_runs: dict = {}
            without_runs: dict = {}
            for r in range(repeats):
                for lockstep, store in ((True, with_runs), (False, without_runs)):
                    print(f"{task}/{dialect} repeat {r + 1} lockstep={lockstep}", file=sys.stderr)
                    ev = one_run(task, dialect, sz, lockstep)
                    if lockstep and not ev.correct:
                        failures.append(f"{task}/{dialect}: {ev.fail_reason}")
                    for s in ev.sizes:
                        store.setdefault(s.label, []).append(
                            (s.timings.get("schedules", 0.0), sum(s.timings.values()), s.correct)
                        )
            for label, runs in with_runs.items():
                off = without_runs.get(label, [])
                on_s = statistics.median(r[0] for r in runs)
                off_s = statistics.median(r[0] for r in off) if off else float("nan")
                total = statistics.median(r[1] for r in runs)
                rows.append(
                    [
                        task,
                        dialect,
                        label,
                        all(r[2] for r in runs),
                        f"{off_s:.3f}",
                        f"{on_s:.3f}",
                        f"{on_s - off_s:.3f}",
                        f"{min(r[0] for r in runs):.3f}-{max(r[0] for r in runs):.3f}",
                        f"{total:.2f}",
                        f"{(on_s - off_s) / total:.1%}" if total else "",
                    ]
                )
    headers = [
        "task",
        "dialect",
        "size",
        "correct with lock-step",
        "other orders without (s)",
        "with (s)",
        "lock-step run (s)",
        "with: min-max (s)",
        "size's worker time (s)",
        "share",
    ]
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    text = (
        "# The lock-step run with the race detector: cost and false positives\n\n"
        f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, "
        f"mlxsci {commit}, {platform.processor() or platform.machine()}, sizes `{sizes}`, "
        f"{repeats} repeat(s) with and without, alternating. Generated by "
        "`python bench/race_detector_cost.py`. Times are the worker's phases "
        "(host wall time), medians over the repeats.\n\n"
        + tabulate(rows, headers, tablefmt="github")
        + "\n\n## Seeds that fail with the lock-step run\n\n"
        + ("\n".join(f"- {f}" for f in failures) if failures else "None.")
        + "\n"
    )
    if out:
        Path(out).write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(text)


if __name__ == "__main__":
    main()
