"""Every imported Metal-Sci candidate the simulator judged correct, judged
again: does a new check fail a kernel that was correct before (issue 41: the
race detector, the lock-step lanes, the bounds run, hmc's replay ties, lj's
cell-count sum)?

    python bench/corpus_recheck.py IMPORTED [--sizes smoke] [--tasks lj,hmc]
        [--jobs 2] [--baseline PYTHON] [--out bench/results/sim/corpus_recheck_DATE.md]

IMPORTED is a folder `python -m mlxsci.import_metal_sci RUNS --out IMPORTED
--rescore --backend sim` wrote (its rescore.json says which candidates the
simulator judged correct then; the corpus itself is not in this repository:
docs/metal-sci.md says where to get it). Each such candidate is evaluated
again on the simulator at the size set, with the task's fixed inputs, and
listed with its verdict now; a candidate that fails now is printed with its
reason. The size set need not be the one the rescore used (the smoke sizes
are far cheaper, and some candidates fail there for their own reasons: a
row length a float4 read does not divide), so with --baseline, the Python
of an environment holding an earlier mlxsci, each candidate that fails now
is judged again by that version at the same sizes: one that fails there too
is no new failure. Progress goes to stderr.
"""

from __future__ import annotations

import collections
import datetime
import json
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click
from tabulate import tabulate


def judged_correct(imported: Path, tasks: set[str] | None) -> list[tuple[str, Path]]:
    """(task, candidate file) of every rescored record the simulator judged correct."""
    records = json.loads((imported / "rescore.json").read_text())
    found = []
    for r in records:
        if r.get("mlxsci") != "correct" or r.get("backend") != "sim":
            continue
        run, it = str(r["run"]), int(r["iteration"])
        task = run.split("_", 1)[0]
        if tasks and task not in tasks:
            continue
        name = "00_seed" if it == 0 else f"{it:02d}_candidate"
        path = imported / run / f"{name}.metal"
        if path.is_file():
            found.append((task, path))
    return found


def judge(job: tuple[str, str, str]) -> dict:
    import mlxsci

    task, path, sizes = job
    try:
        ev = mlxsci.evaluate(task, Path(path).read_text(), backend="sim", size_set=sizes)
    except Exception as exc:  # the harness failed: say so
        return {"path": path, "task": task, "status": "error", "reason": f"{exc}"[:300]}
    status = "correct" if ev.correct else ("compile_error" if not ev.compile_ok else "incorrect")
    return {"path": path, "task": task, "status": status, "reason": (ev.fail_reason or "")[:400]}


def judged_by(python: str, task: str, path: str, sizes: str) -> dict:
    """judge() run by another environment's Python (--baseline)."""
    res = subprocess.run(
        [python, __file__, "IGNORED", "--judge-one", task, path, sizes],
        capture_output=True,
        text=True,
        cwd="/",
    )
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"status": "error", "reason": (res.stderr or "no answer")[-300:]}


@click.command()
@click.argument("imported", type=click.Path(file_okay=False, path_type=Path))
@click.option("--sizes", default="smoke", show_default=True)
@click.option("--tasks", default=None, help="Comma-separated tasks (default: all).")
@click.option("--jobs", default=2, show_default=True, type=int)
@click.option("--out", default=None, type=click.Path(), help="Markdown file to write.")
@click.option("--baseline", default=None, help="Python of an earlier mlxsci's environment.")
@click.option("--judge-one", "judge_one", nargs=3, default=None, hidden=True)
def main(imported, sizes, tasks, jobs, out, baseline, judge_one):
    if judge_one:  # --baseline's child: one verdict as JSON
        print(json.dumps(judge(tuple(judge_one))))
        return
    wanted = set(tasks.split(",")) if tasks else None
    found = judged_correct(imported, wanted)
    print(f"{len(found)} candidates judged correct before", file=sys.stderr)
    results = []
    with ProcessPoolExecutor(jobs) as pool:
        for k, rec in enumerate(pool.map(judge, [(t, str(p), sizes) for t, p in found]), 1):
            print(f"[{k}/{len(found)}] {rec['task']} {rec['status']}", file=sys.stderr)
            results.append(rec)
    by_task: dict = collections.defaultdict(collections.Counter)
    for rec in results:
        by_task[rec["task"]][rec["status"]] += 1
    rows = [
        [t, sum(c.values()), c["correct"], c["incorrect"], c["compile_error"], c["error"]]
        for t, c in sorted(by_task.items())
    ]
    rows.append(["**total**", *[sum(r[i] for r in rows) for i in range(1, 6)]])
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    now = [r for r in results if r["status"] != "correct"]
    for r in now:
        if baseline:
            before = judged_by(baseline, r["task"], r["path"], sizes)
            r["before"] = before["status"]
            print(f"baseline {Path(r['path']).parent.name}: {before['status']}", file=sys.stderr)
    new = [r for r in now if r.get("before") == "correct"]
    text = (
        "# Imported Metal-Sci candidates judged correct before, judged again\n\n"
        f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}, "
        f"mlxsci {commit}, sizes `{sizes}`. Generated by `python bench/corpus_recheck.py`.\n\n"
        + tabulate(
            rows,
            ["task", "candidates", "correct now", "incorrect now", "compile error", "error"],
            tablefmt="github",
        )
        + (
            f"\n\nWith --baseline `{baseline}`: {len(new)} of the {len(now)} not correct now "
            "were correct with the earlier version at these sizes (new failures).\n"
            if baseline
            else "\n"
        )
        + "\n## Not correct now\n\n"
        + (
            "\n".join(
                f"- `{Path(r['path']).parent.name}/{Path(r['path']).name}`"
                + (f" (earlier version: {r['before']})" if "before" in r else "")
                + f": {r['reason']}"
                for r in now
            )
            if now
            else "None."
        )
        + "\n"
    )
    if out:
        Path(out).write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(text)


if __name__ == "__main__":
    main()
