"""The simulator's modelled time held against Metal-Sci's recorded Apple M1
Pro timings (issue 36).

    python bench/time_model_validation.py PATH [--set calibration|validation]
        [--tasks heat2d,lbm,...] [--jobs N] [--limit N] [--sim-gpu NAME]
        [--warmup 1] [--measure 1] [--timeout S] [--imports DIR] [--out FILE.md]

PATH is a local copy of the public repository vicgalle/metal-sci-kernels (a
folder holding its results/). The runs of the chosen set are imported with
mlxsci's importer (mlxsci/import_metal_sci/importer.py, as `python -m
mlxsci.import_metal_sci` does) into --imports (default: a folder per set in
mlxsci's cache; runs already there are reused). Every candidate the M1
recorded correct, with a recorded time at its task's first in-distribution
size, is evaluated at that size on `--backend sim`, and its modelled
seconds are paired with the recorded `gpu_seconds`. Per task with at least
8 such candidates correct on the simulator too: Spearman's rank
correlation, the share of the pairs the M1 separates by >= 15% that the
model orders the same way, and the share modelled within 2x of the M1
(bench/time_model_stats.py); tasks with fewer are listed as too few.
Writes a markdown table (--out, default
bench/results/sim/time_model_<set>_<date>.md) and beside it a JSON file with
every candidate's row, the failures and what was passed over.

Calibration and validation are kept apart: the calibration set is Claude's
runs (results/*_claude-*), the one to fit the model on; the validation set
is Gemini's and GPT's runs, run once, at the end, and reported as it comes
out (issue 36). Each set is imported into its own folder and only its own
runs are read.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time_model_stats as stats  # noqa: E402

from mlxsci.evaluation.evaluator import evaluate  # noqa: E402
from mlxsci.import_metal_sci.importer import import_run  # noqa: E402
from mlxsci.import_metal_sci.metal_run import (  # noqa: E402
    MAX_SOURCE_BYTES,
    NotAMetalSciRun,
    UnreadableFile,
    read_text,
    shown,
)
from mlxsci.import_metal_sci.records import CORRECT, mlxsci_verdict  # noqa: E402
from mlxsci.import_metal_sci.rescore import Item, plan  # noqa: E402
from mlxsci.storage.cache import cache_dir  # noqa: E402
from mlxsci.storage.faults import EnvironmentFault  # noqa: E402
from mlxsci.task import load_task, task_names  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "sim"
REASON_CHARS = 300  # of a failure's reason kept in the report


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def first_size(task_name: str):
    return load_task(task_name).size_set("in-dist")[0]


def takes_sim_gpu() -> bool:
    """Whether this checkout's evaluate() names the GPU the simulator models."""
    return "sim_gpu" in inspect.signature(evaluate).parameters


# --- choosing and importing the runs -------------------------------------------------


def import_set(runs: list[Path], imports: Path) -> tuple[set[str], list[str]]:
    """Each run imported into `imports` (reused when it is there already):
    the imported folders' names, and a note per run that could not be."""
    imports.mkdir(parents=True, exist_ok=True)
    folders, notes = set(), []
    for k, run in enumerate(runs, 1):
        try:
            done = import_run(run, imports)
        except NotAMetalSciRun as exc:
            notes.append(f"{shown(run.name)}: not imported ({shown(exc)})")
            say(f"import [{k}/{len(runs)}] {notes[-1]}")
            continue
        folders.add(done.out.name)
        say(f"import [{k}/{len(runs)}] {done.line()}")
    return folders, notes


def recorded_time(item: Item, size) -> tuple[float | None, str | None]:
    """The M1's recorded seconds of the item at `size`, or why there are none
    to compare (not recorded correct, no converted candidate, no such size)."""
    entry = item.entry
    rec = entry.get("recorded") or {}
    if rec.get("verdict") != CORRECT:
        return None, "not recorded correct"
    if not entry.get("candidate"):
        return None, "no converted candidate"
    sizes = rec.get("sizes") or []
    if not sizes and entry.get("role") == "seed":
        return None, "a seed (Metal-Sci records no per-size time for it)"
    if not sizes or not isinstance(sizes[0], dict):
        return None, "no recorded time"
    first = sizes[0]
    label, secs = first.get("label"), first.get("gpu_seconds")
    if not (isinstance(label, str) and stats.same_size(label, size.params)):
        return None, "first recorded size is not mlxsci's first in-distribution size"
    if first.get("correct") is not True or not isinstance(secs, (int, float)) or not secs > 0:
        return None, "no recorded time"
    return float(secs), None


def choose(items: list[Item], tasks: list[str], limit: int | None) -> tuple[list[dict], dict]:
    """The candidates to evaluate (at most `limit` per task, in run and
    iteration order), and a count of those passed over, by why."""
    chosen: list[dict] = []
    passed: dict[str, int] = {}
    per_task: dict[str, int] = {}
    sizes = {t: first_size(t) for t in tasks}
    for item in items:
        if item.task not in sizes or item.entry.get("role") == "skipped":
            continue
        secs, why = recorded_time(item, sizes[item.task])
        if why is not None:
            passed[why] = passed.get(why, 0) + 1
            continue
        if limit is not None and per_task.get(item.task, 0) >= limit:
            passed["over --limit"] = passed.get("over --limit", 0) + 1
            continue
        per_task[item.task] = per_task.get(item.task, 0) + 1
        chosen.append(
            {"task": item.task, "run": item.run, "iteration": item.entry["iteration"],
             "file": str(item.folder / item.entry["candidate"]), "recorded": secs}
        )  # fmt: skip
    return chosen, passed


# --- evaluating ----------------------------------------------------------------------


def evaluate_one(job: dict) -> dict:
    """One candidate at its task's first in-distribution size on the
    simulator (in a pool process with --jobs): its verdict, modelled
    seconds and the wall time it took. A machine fault is returned as
    `fault`, to stop the run."""
    start = time.perf_counter()
    out: dict = {"verdict": None, "modelled": None, "reason": None, "device": None}
    try:
        source = read_text(Path(job["file"]), MAX_SOURCE_BYTES)
    except (UnreadableFile, OSError) as exc:
        return {**out, "verdict": "unreadable", "reason": shown(exc), "wall_s": 0.0}
    kwargs = {"sim_gpu": job["sim_gpu"]} if job["sim_gpu"] else {}
    try:
        ev = evaluate(
            job["task"], source, backend="sim", sizes=[first_size(job["task"])],
            filename=job["file"], dialect="metal", n_warmup=job["warmup"],
            n_measure=job["measure"], timeout=job["timeout"], **kwargs,
        )  # fmt: skip
    except EnvironmentFault as exc:
        return {**out, "fault": str(exc), "wall_s": time.perf_counter() - start}
    except Exception as exc:  # noqa: BLE001 - counted and listed as a failure, never a traceback
        reason = f"{type(exc).__name__}: {exc}"
        return {**out, "verdict": "error", "reason": reason, "wall_s": time.perf_counter() - start}
    out["verdict"] = mlxsci_verdict(ev.compile_ok, ev.correct, ev.fail_reason)
    out["device"] = ev.device
    out["reason"] = (ev.fail_reason or "")[:REASON_CHARS] or None
    if ev.correct and ev.sizes and ev.sizes[0].seconds:
        out["modelled"] = ev.sizes[0].seconds
        out["launches"] = ev.sizes[0].timer_info.get("launches")
        out["kernels"] = ev.sizes[0].kernels
        out["implausible"] = ev.implausible
    return {**out, "wall_s": time.perf_counter() - start}


def progress_line(k: int, n: int, row: dict) -> str:
    head = f"[{k}/{n}] {row['task']} {shown(row['run'])} iteration {row['iteration']:02d}: "
    wall = f" ({row['wall_s']:.1f} s)"
    if row["modelled"] is None:
        reason = shown(row["reason"] or "")[:200]
        return head + f"FAILED {row['verdict']}: {reason}" + wall
    return head + (
        f"modelled {stats.seconds(row['modelled'])}, M1 {stats.seconds(row['recorded'])}, "
        f"ratio {row['ratio']:.3g}" + wall
    )


def run_all(jobs: list[dict], workers: int) -> list[dict]:
    """Every job evaluated (`workers` at a time), a progress line each; stops
    with SystemExit 3 at a fault of the machine."""
    rows: list[dict] = []

    def take(job: dict, result: dict) -> None:
        if "fault" in result:
            say(f"error: the machine stopped the work: {result['fault']}")
            raise SystemExit(3)
        ratio = None if result["modelled"] is None else result["modelled"] / job["recorded"]
        rows.append({**job, **result, "ratio": ratio})
        say(progress_line(len(rows), len(jobs), rows[-1]))

    if workers <= 1:
        for job in jobs:
            take(job, evaluate_one(job))
        return rows
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(evaluate_one, job): job for job in jobs}
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except BrokenProcessPool:
                result = {"verdict": "error", "modelled": None, "wall_s": 0.0,
                          "reason": "its evaluation process died", "device": None}  # fmt: skip
            take(futures[fut], result)
    return rows


# --- the report ----------------------------------------------------------------------


def summarise(rows: list[dict], tasks: list[str]) -> dict:
    """Per task: its size, the figures over the candidates correct on the
    simulator (bench/time_model_stats.py: task_figures) and the failures."""
    out = {}
    for task in tasks:
        mine = sorted(
            (r for r in rows if r["task"] == task), key=lambda r: (r["run"], r["iteration"])
        )
        ok = [r for r in mine if r["modelled"] is not None]
        if not mine:
            continue
        figures = stats.task_figures([r["recorded"] for r in ok], [r["modelled"] for r in ok])
        out[task] = {"size": first_size(task).label, **figures, "failed": len(mine) - len(ok)}
    return out


def git_commit(path: Path) -> str | None:
    """The commit checked out at `path` when it is the top of a git work tree."""
    done = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--show-toplevel", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    lines = done.stdout.split()
    if done.returncode or len(lines) != 2 or Path(lines[0]).resolve() != path.resolve():
        return None
    changed = subprocess.run(
        ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return lines[1] + (" with uncommitted changes" if changed else "")


def markdown(meta: dict, per_task: dict, rows: list[dict]) -> str:
    walls = [r["wall_s"] for r in rows if r["verdict"] != "unreadable"]
    lines = [
        f"# The simulator's modelled time against Metal-Sci's M1 Pro: {meta['set']} set",
        "",
        f"- mlxsci {meta['mlxsci_commit'] or '?'}, simulator modelling {meta['device'] or '?'}"
        f" (--sim-gpu {meta['sim_gpu'] or 'default'}); --warmup {meta['warmup']} "
        f"--measure {meta['measure']}",
        f"- Metal-Sci checkout {meta['metal_sci_commit'] or '(not a git checkout)'}: "
        f"{meta['runs']} run(s) of the {meta['set']} set ({', '.join(meta['patterns'])})",
        f"- tasks: {', '.join(meta['tasks'])}"
        + (f"; at most {meta['limit']} candidate(s) per task (--limit)" if meta["limit"] else ""),
        f"- {len(rows)} candidate(s) evaluated with {meta['jobs']} job(s) on "
        f"{meta['host']}, in {meta['wall_s']:.0f} s"
        + (
            f"; wall time per candidate: median {statistics.median(walls):.1f} s, "
            f"max {max(walls):.1f} s"
            if walls
            else ""
        ),
        "",
        "Each candidate the M1 recorded correct is evaluated at its task's first "
        "in-distribution size; the figures are over those correct on the simulator too. "
        f"Targets (issue 36): Spearman >= {stats.TARGETS['spearman']}, >= "
        f"{stats.percent(stats.TARGETS['pairwise'])} of the pairs in the M1's order, >= "
        f"{stats.percent(stats.TARGETS['within_2x'])} within 2x; a task with fewer than "
        f"{stats.MIN_CANDIDATES} candidates gets no figures.",
        "",
        stats.TABLE_HEAD,
        *(stats.table_row(t, f["size"], f, f["failed"]) for t, f in per_task.items()),
    ]
    failures = [r for r in rows if r["modelled"] is None]
    if failures:
        lines += ["", f"## Failures on the simulator ({len(failures)})", ""]
        lines += [
            f"- {r['task']} {shown(r['run'])} iteration {r['iteration']:02d}: {r['verdict']}: "
            f"{shown(r['reason'] or '')[:REASON_CHARS]}"
            for r in failures
        ]
    if meta["passed_over"] or meta["not_imported"] or meta["in_no_set"]:
        lines += ["", "## Passed over", ""]
        lines += [f"- {n} candidate(s): {why}" for why, n in sorted(meta["passed_over"].items())]
        lines += [f"- {note}" for note in meta["not_imported"]]
        if meta["in_no_set"]:
            lines.append(f"- runs in no set: {', '.join(map(shown, meta['in_no_set']))}")
    return "\n".join(lines) + "\n"


# --- the command line ----------------------------------------------------------------


def check_gpu(p: argparse.ArgumentParser, name: str) -> None:
    """--sim-gpu names a GPU this checkout's simulator models (else exit 2)."""
    if not takes_sim_gpu():
        p.error("--sim-gpu: this checkout's simulator models no named GPU yet")
    try:
        gpus = importlib.import_module("mlxsci.backends.sim.gpus")
        known = list(gpus.names())
    except (ImportError, AttributeError):
        return  # evaluate() will say
    if name not in known:
        p.error(f"--sim-gpu: unknown GPU {name!r}; choose from {', '.join(known)}")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("metal_sci", type=Path, help="a local copy of vicgalle/metal-sci-kernels")
    p.add_argument("--set", dest="which", choices=list(stats.SETS), default="calibration")
    p.add_argument("--tasks", help="comma-separated tasks (default: all)")
    p.add_argument("--jobs", type=int, default=1, help="evaluations at once")
    p.add_argument("--limit", type=int, help="at most this many candidates per task")
    p.add_argument("--sim-gpu", help="the GPU the simulator models (default: its own)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up runs per evaluation")
    p.add_argument("--measure", type=int, default=1, help="timed runs per evaluation")
    p.add_argument("--timeout", type=float, help="seconds allowed per evaluation")
    p.add_argument("--imports", type=Path, help="where the runs are imported (reused)")
    p.add_argument("--out", type=Path, help="the markdown file (the JSON goes beside it)")
    args = p.parse_args(argv)
    known = task_names()
    args.tasks = args.tasks.split(",") if args.tasks else sorted(known)
    unknown = [t for t in args.tasks if t not in known]
    if unknown:
        p.error(f"--tasks: unknown task(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    for name in ("jobs", "limit", "warmup", "measure"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.timeout is not None and not args.timeout > 0:
        p.error("--timeout must be positive")
    if args.sim_gpu:
        check_gpu(p, args.sim_gpu)
    results = args.metal_sci / "results"
    if not results.is_dir() or results.is_symlink():
        p.error(
            f"{shown(args.metal_sci)} is not a Metal-Sci checkout: it has no results/ folder "
            "(give the path of a local copy of vicgalle/metal-sci-kernels)"
        )
    args.results = results
    today = datetime.date.today().isoformat()
    args.out = args.out or RESULTS / f"time_model_{args.which}_{today}.md"
    args.imports = args.imports or cache_dir("time_model_validation", args.which)
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    started = time.perf_counter()
    runs, in_no_set = stats.split_runs(args.results, args.which)
    runs = [r for r in runs if stats.task_of_run(r.name) in args.tasks]
    if not runs:
        say(f"error: {shown(args.results)} holds no run of the {args.which} set for these tasks")
        return 2
    folders, not_imported = import_set(runs, args.imports)
    try:
        items = [i for i in plan(args.imports) if i.run in folders]
    except ValueError as exc:  # nothing this machine imported is there
        say(f"error: {shown(exc)}")
        return 2
    chosen, passed_over = choose(items, args.tasks, args.limit)
    say(f"{len(chosen)} candidate(s) to evaluate; passed over: {passed_over or 'none'}")
    common = {"sim_gpu": args.sim_gpu, "warmup": args.warmup, "measure": args.measure,
              "timeout": args.timeout}  # fmt: skip
    rows = run_all([{**c, **common} for c in chosen], args.jobs)
    rows.sort(key=lambda r: (r["task"], r["run"], r["iteration"]))
    per_task = summarise(rows, args.tasks)
    meta = {
        "set": args.which, "patterns": list(stats.SETS[args.which]), "runs": len(runs),
        "tasks": args.tasks, "limit": args.limit, "jobs": args.jobs, "sim_gpu": args.sim_gpu,
        "device": next((r["device"] for r in rows if r["device"]), None),
        "warmup": args.warmup, "measure": args.measure, "mlxsci_commit": git_commit(ROOT),
        "metal_sci_commit": git_commit(args.metal_sci), "host": f"{platform.node()} "
        f"({os.cpu_count()} CPUs)", "wall_s": time.perf_counter() - started,
        "passed_over": passed_over, "not_imported": not_imported, "in_no_set": in_no_set,
    }  # fmt: skip
    text = markdown(meta, per_task, rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    doc = {"meta": meta, "tasks": per_task, "candidates": rows}
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    print(text)
    say(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
