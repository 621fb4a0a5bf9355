"""The simulator's modelled NVIDIA H100 time of every CUDA seed held against
our own CUPTI spans of those seeds on an H100 (issue 36).

    python bench/h100_seed_model.py [SPANS.json] [--split calibration|validation|all]
        [--tasks heat2d,ising,...] [--sizes LABEL,...] [--jobs N] [--timeout S]
        [--out FILE.md]

SPANS.json (default ../shared/gpu/h100-seed-spans.json, relative to the
repository's root) holds a header (device, mlx, project_commit, measured,
note) and `rows`: {task, size, span_ms}, span_ms being the CUPTI span (first
kernel start to last kernel end of one pipeline run, CUDA graphs on) of the
task's CUDA seed, median of 15 runs. It is not ours: read it where it lies,
never copy it into the repository.

Each row's size label is looked up among its task's in-distribution and
held-out sizes (mlxsci/task.py: Size.label; exactly, else once separators and
case are set aside); a row that matches none, or more than one, is reported
as unmatched and not evaluated. The task's CUDA seed is evaluated at the
matched size on `--backend sim` modelling the H100 (dialect cuda, sim_gpu
nvidia-h100), with one warm-up and one timed run: the modelled clock is
deterministic. Per row: the modelled seconds, modelled / CUPTI, whether it is
within 2x (issue 36's target: every seed at every listed size), and per
kernel the bound and the parts of its modelled launch time the size's
timer_info["launches"] carries. Failures (compile error, wrong answer,
timeout, runtime error) are counted and listed, never a traceback.

The tasks are split in two halves (SPLITS): the lead fits the modelled H100's
one free parameter, dispatch_us, on the calibration half only, and the
validation half is what it is judged on. `--split calibration` evaluates only
the calibration half's tasks. Writes a markdown table (--out, default
bench/results/sim/h100_seed_model_<date>.md) with a summary line per half,
and beside it a JSON file with every row.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time_model_stats as stats  # noqa: E402
from time_model_validation import git_commit  # noqa: E402

from mlxsci.evaluation.evaluator import evaluate  # noqa: E402
from mlxsci.import_metal_sci.metal_run import shown  # noqa: E402
from mlxsci.import_metal_sci.records import mlxsci_verdict  # noqa: E402
from mlxsci.storage.faults import EnvironmentFault  # noqa: E402
from mlxsci.task import Size, load_task, task_names  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "sim"
DEFAULT_SPANS = Path("..") / "shared" / "gpu" / "h100-seed-spans.json"  # from ROOT
SIM_GPU = "nvidia-h100"
REASON_CHARS = 300  # of a failure's reason kept in the report
WORST = 3  # rows named as the worst in a half's summary line

# The two halves of the tasks (issue 36: fit on one, judge on the other).
SPLITS = {
    "calibration": ("adi3d", "fft3d", "gradshaf", "heat2d", "hmc", "ising"),
    "validation": ("lbm", "lj", "morton", "nbody", "saxpy", "wave3d"),
}
NO_SPLIT = "in neither half"  # a task added since the halves were drawn
# The size sets a measured row may be at, in the order they are searched.
MEASURED_SETS = ("in-dist", "held-out")
# The parts of a kernel's modelled launch (timer_info["launches"][kernel]) kept per row.
LAUNCH_PARTS = ("bound", "throughput_s", "latency_s", "memory_s", "cache_s", "dispatch_s", "groups")


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- the measured spans --------------------------------------------------------------


class BadSpans(Exception):
    """The spans file is missing or is not what this script reads."""


HEADER_FIELDS = ("what", "device", "mlx", "project_commit", "measured", "note")


def read_spans(path: Path) -> tuple[dict, list[dict]]:
    """The header fields (HEADER_FIELDS present as strings) and the rows of a
    spans file, each row {task, size, span_ms, ...} as written. BadSpans
    when the file cannot be read, is not JSON, or a row lacks a task, a size
    label or a positive, finite span_ms."""
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise BadSpans(f"{shown(path)} {what} (give the path of h100-seed-spans.json)")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise BadSpans(f"{shown(path)} cannot be read: {shown(exc)}") from None
    except json.JSONDecodeError as exc:
        raise BadSpans(f"{shown(path)} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise BadSpans(f"{shown(path)} has no list of rows (a JSON object with 'rows': [...])")
    header = {k: doc[k] for k in HEADER_FIELDS if isinstance(doc.get(k), str)}
    rows = []
    for k, row in enumerate(doc["rows"]):
        where = f"{shown(path)}: row {k}"
        if not isinstance(row, dict):
            raise BadSpans(f"{where} is not an object")
        for key in ("task", "size"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise BadSpans(f"{where} has no {key} (a non-empty string)")
        span = row.get("span_ms")
        if isinstance(span, bool) or not isinstance(span, (int, float)):
            raise BadSpans(f"{where} ({row['task']} {row['size']}) has no span_ms (a number)")
        if not (math.isfinite(span) and span > 0):
            raise BadSpans(f"{where} ({row['task']} {row['size']}): span_ms {span} is not > 0")
        rows.append(row)
    if not rows:
        raise BadSpans(f"{shown(path)} has no rows")
    return header, rows


# --- which size, which half ----------------------------------------------------------


def split_of(task: str) -> str:
    """The half a task belongs to (NO_SPLIT for a task in neither)."""
    return next((name for name, tasks in SPLITS.items() if task in tasks), NO_SPLIT)


def tasks_of(split: str, known: Iterable[str]) -> list[str]:
    """The known tasks `--split` chooses ("all": every known task, a task in
    neither half included)."""
    if split == "all":
        return sorted(known)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}, all")
    return [t for t in SPLITS[split] if t in set(known)]


def normal_label(label: str) -> str:
    """A size label with case and separators set aside: "N1728_M5" and
    "n1728-m5" are the same, "256x256x50" and "256_256_50" too."""
    return " ".join(t for t in re.split(r"[\s_,;:x\-]+", label.lower()) if t)


def match_size(sizes: Mapping[str, Sequence[Size]], label: str) -> tuple[dict | None, str]:
    """The size of a task (its `sizes`: size set -> sizes) a measured label
    names, among the MEASURED_SETS: ({"size", "set", "how"}, "") where one
    size's label is `label` ("exact"), else where exactly one size's label
    is the same once case and separators are set aside ("as <label>"); else
    (None, why)."""
    found = [(s, name) for name in MEASURED_SETS for s in sizes.get(name, ())]
    exact = [(s, name) for s, name in found if s.label == label]
    if len(exact) == 1:
        return {"size": exact[0][0], "set": exact[0][1], "how": "exact"}, ""
    if len(exact) > 1:
        return None, f"{len(exact)} sizes are labelled {label!r}"
    near = [(s, name) for s, name in found if normal_label(s.label) == normal_label(label)]
    if len(near) == 1:
        s, name = near[0]
        return {"size": s, "set": name, "how": f"as {s.label}"}, ""
    labels = ", ".join(s.label for s, _ in found) or "none"
    if near:
        return None, f"{label!r} is ambiguous: it could be {', '.join(s.label for s, _ in near)}"
    return None, f"no in-distribution or held-out size labelled {label!r} (labels: {labels})"


def plan(
    rows: list[dict], tasks: list[str], sizes_of: Mapping[str, Mapping], labels: set | None
) -> tuple[list[dict], list[dict], list[str]]:
    """The rows of the chosen `tasks` (and, given `labels`, of those size
    labels) matched to their sizes (sizes_of: task -> its size sets): the
    jobs to evaluate, the rows that match no size (each with `why`), and the
    chosen tasks' in-distribution and held-out sizes that no row measures."""
    jobs, unmatched = [], []
    measured: dict[str, set] = {t: set() for t in tasks}
    for row in rows:
        task, label = row["task"], row["size"]
        if labels is not None and label not in labels:
            continue
        if task not in tasks:
            if task not in sizes_of:
                unmatched.append({**row, "why": f"mlxsci has no task {task!r}"})
            continue
        found, why = match_size(sizes_of[task], label)
        if found is None:
            unmatched.append({**row, "why": why})
            continue
        measured[task].add(found["size"].label)
        jobs.append(
            {"task": task, "size": label, "span_ms": float(row["span_ms"]),
             "spread": row.get("spread_max_over_min"), "split": split_of(task),
             "size_set": found["set"], "matched": found["how"], "params": found["size"]}
        )  # fmt: skip
    unmeasured = [
        f"{t} {s.label} ({name})"
        for t in tasks
        for name in MEASURED_SETS
        for s in sizes_of[t].get(name, ())
        if s.label not in measured[t] and (labels is None or s.label in labels)
    ]
    return jobs, unmatched, unmeasured


# --- evaluating ----------------------------------------------------------------------


def verdict_of(ev) -> str:
    """correct, compile_error, incorrect, runtime_error or timeout."""
    flags = ev.sizes[0].flags if ev.sizes else []
    if "timeout" in flags:
        return "timeout"
    return mlxsci_verdict(ev.compile_ok, ev.correct, ev.fail_reason)


def kernel_parts(kernels: dict, launches: dict) -> dict:
    """Per kernel of a size's result: its launches and modelled seconds per
    pipeline run (SizeResult.kernels), and the LAUNCH_PARTS of its last
    profiled launch (timer_info["launches"]), "launch_s" that launch's
    modelled seconds."""
    out: dict = {}
    for name in list(kernels) + [n for n in launches if n not in kernels]:
        run = kernels.get(name) or {}
        parts = launches.get(name) or {}
        out[name] = {
            "launches": run.get("launches"),
            "seconds": run.get("seconds"),
            "launch_s": parts.get("seconds"),
            **{k: parts.get(k) for k in LAUNCH_PARTS},
        }
    return out


def slowest(kernels: dict) -> str | None:
    """The kernel with the most modelled seconds per run (failing that, per
    launch); None for none."""
    if not kernels:
        return None

    def cost(name: str) -> tuple[float, float]:
        k = kernels[name]
        return (k.get("seconds") or 0.0, k.get("launch_s") or 0.0)

    return max(kernels, key=cost)


def evaluate_one(job: dict) -> dict:
    """The task's CUDA seed at the job's size on the simulator modelling the
    H100 (in a pool process with --jobs): its verdict, modelled seconds, per
    kernel parts and the wall time it took. A machine fault is returned as
    `fault`, to stop the run."""
    start = time.perf_counter()
    out: dict = {"verdict": None, "modelled": None, "reason": None, "device": None, "kernels": {}}
    try:
        ev = evaluate(
            job["task"], None, backend="sim", sizes=[job["params"]], dialect="cuda",
            sim_gpu=SIM_GPU, n_warmup=1, n_measure=1, timeout=job["timeout"],
        )  # fmt: skip
    except EnvironmentFault as exc:
        return {**out, "fault": str(exc), "wall_s": time.perf_counter() - start}
    except Exception as exc:  # noqa: BLE001 - counted and listed as a failure, never a traceback
        reason = f"{type(exc).__name__}: {exc}"[:REASON_CHARS]
        return {**out, "verdict": "error", "reason": reason, "wall_s": time.perf_counter() - start}
    out["verdict"] = verdict_of(ev)
    out["device"] = ev.device
    out["reason"] = (ev.fail_reason or "")[:REASON_CHARS] or None
    if ev.correct and ev.sizes and ev.sizes[0].seconds:
        size = ev.sizes[0]
        out["modelled"] = size.seconds
        out["kernels"] = kernel_parts(size.kernels, size.timer_info.get("launches") or {})
        out["implausible"] = size.implausible
    return {**out, "wall_s": time.perf_counter() - start}


def within_2x(measured: float, modelled: float) -> bool:
    return stats.within_factor([measured], [modelled]) == 1.0


def finish(job: dict, result: dict) -> dict:
    """A row of the report: the job, its result, and the figures."""
    row = {k: v for k, v in job.items() if k not in ("params", "timeout")}
    row.update(result)
    measured = job["span_ms"] * 1e-3
    modelled = result.get("modelled")
    row["measured"] = measured
    row["ratio"] = None if modelled is None else modelled / measured
    row["within_2x"] = None if modelled is None else within_2x(measured, modelled)
    row["slowest"] = slowest(row.get("kernels") or {})
    row["bound"] = row["kernels"][row["slowest"]]["bound"] if row["slowest"] else None
    return row


def progress_line(k: int, n: int, row: dict) -> str:
    head = f"[{k}/{n}] {row['task']} {row['size']}: "
    wall = f" ({row['wall_s']:.1f} s)"
    if row["modelled"] is None:
        return head + f"FAILED {row['verdict']}: {shown(row['reason'] or '')[:200]}" + wall
    bound = f"{row['slowest']} {row['bound']}-bound" if row["slowest"] else "no kernel parts"
    return head + (
        f"modelled {stats.seconds(row['modelled'])}, CUPTI {stats.seconds(row['measured'])}, "
        f"ratio {row['ratio']:.3g}{'' if row['within_2x'] else ' (not within 2x)'}; "
        f"{bound}" + wall
    )


def run_all(jobs: list[dict], workers: int) -> list[dict]:
    """Every job evaluated (`workers` at a time), a progress line each, the
    rows in the jobs' order; stops with SystemExit 3 at a fault of the machine."""
    done: dict[int, dict] = {}

    def take(k: int, result: dict) -> None:
        if "fault" in result:
            say(f"error: the machine stopped the work: {result['fault']}")
            raise SystemExit(3)
        done[k] = finish(jobs[k], result)
        say(progress_line(len(done), len(jobs), done[k]))

    if workers <= 1:
        for k, job in enumerate(jobs):
            take(k, evaluate_one(job))
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(evaluate_one, job): k for k, job in enumerate(jobs)}
            for fut in as_completed(futures):
                try:
                    result = fut.result()
                except BrokenProcessPool:
                    result = {"verdict": "error", "modelled": None, "wall_s": 0.0,
                              "reason": "its evaluation process died", "device": None,
                              "kernels": {}}  # fmt: skip
                take(futures[fut], result)
    return [done[k] for k in range(len(jobs))]


# --- the report ----------------------------------------------------------------------


def off_by(row: dict) -> float:
    """How far a row's modelled time is from its span, either way (a factor >= 1)."""
    return math.exp(abs(math.log(row["ratio"])))


def summarise(rows: list[dict]) -> dict:
    """A half's figures: rows, rows modelled (correct on the simulator),
    rows failed, rows within 2x, the median modelled / CUPTI over the rows
    modelled, and the WORST rows furthest from their span either way."""
    ok = [r for r in rows if r["ratio"] is not None]
    worst = sorted(ok, key=off_by, reverse=True)[:WORST]
    return {
        "rows": len(rows),
        "modelled": len(ok),
        "failed": len(rows) - len(ok),
        "within_2x": sum(1 for r in ok if r["within_2x"]),
        "median_ratio": statistics.median(r["ratio"] for r in ok) if ok else None,
        "worst": [{"task": r["task"], "size": r["size"], "ratio": r["ratio"]} for r in worst],
    }


def summaries(rows: list[dict]) -> dict:
    """summarise() per half present among the rows, in SPLITS' order, and
    over them all when more than one half is present."""
    halves = [*SPLITS, NO_SPLIT]
    present = [h for h in halves if any(r["split"] == h for r in rows)]
    out = {h: summarise([r for r in rows if r["split"] == h]) for h in present}
    if len(present) > 1:
        out["all"] = summarise(rows)
    return out


def summary_line(half: str, s: dict) -> str:
    ratio = "-" if s["median_ratio"] is None else f"{s['median_ratio']:.3g}"
    failed = f" ({s['failed']} failed on the simulator)" if s["failed"] else ""
    worst = ", ".join(f"{w['task']} {w['size']} ({w['ratio']:.3g})" for w in s["worst"]) or "-"
    return (
        f"- **{half}**: {s['within_2x']} of {s['rows']} rows within 2x{failed}; "
        f"median modelled / CUPTI {ratio}; furthest off: {worst}"
    )


def part(value) -> str:
    return stats.seconds(value) if isinstance(value, (int, float)) else "-"


TABLE_HEAD = (
    "| task | size | CUPTI span | modelled | modelled / CUPTI | within 2x "
    "| slowest kernel: bound |\n|---|---|---|---|---|---|---|"
)
KERNEL_HEAD = (
    "| task, size | kernel | launches | modelled per run | per launch | bound | throughput "
    "| latency | memory | cache | dispatch | groups |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def table_row(row: dict) -> str:
    size = row["size"] + (" (held-out)" if row["size_set"] == "held-out" else "")
    if row["modelled"] is None:
        return (
            f"| {row['task']} | {size} | {part(row['measured'])} | failed: {row['verdict']} "
            "| - | no | - |"
        )
    bound = f"{row['slowest']}: {row['bound']}" if row["slowest"] else "-"
    cells = [row["task"], size, part(row["measured"]), part(row["modelled"]),
             f"{row['ratio']:.3g}", "yes" if row["within_2x"] else "**no**", bound]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def kernel_rows(row: dict) -> list[str]:
    lines = []
    for name, k in (row.get("kernels") or {}).items():
        cells = [
            f"{row['task']} {row['size']}", name, str(k["launches"] or "-"), part(k["seconds"]),
            part(k["launch_s"]), str(k["bound"] or "-"),
            *(part(k[p]) for p in ("throughput_s", "latency_s", "memory_s", "cache_s",
                                   "dispatch_s")),
            str(k["groups"] or "-"),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(meta: dict, rows: list[dict], unmatched: list[dict], unmeasured: list[str]) -> str:
    spans = meta["spans"]
    walls = [r["wall_s"] for r in rows]
    lines = [
        f"# The simulator's modelled H100 against CUPTI spans of the CUDA seeds: {meta['split']}",
        "",
        f"- measured: {spans.get('device', '?')}, MLX {spans.get('mlx', '?')}, project commit "
        f"{spans.get('project_commit', '?')}, measured {spans.get('measured', '?')} "
        f"({meta['spans_path']})",
    ]
    if spans.get("note"):
        lines.append(f"- the measurements' note: {spans['note']}")
    lines += [
        f"- modelled: mlxsci {meta['mlxsci_commit'] or '?'}, {meta['device'] or '?'} "
        f"(--sim-gpu {SIM_GPU}, dispatch_us {meta['dispatch_us']}); --dialect cuda, "
        "--warmup 1 --measure 1 (the modelled clock is deterministic)",
        f"- tasks: {', '.join(meta['tasks'])}"
        + (f"; sizes: {', '.join(meta['sizes'])}" if meta["sizes"] else ""),
        f"- {len(rows)} row(s) evaluated with {meta['jobs']} job(s) on {meta['host']}, in "
        f"{meta['wall_s']:.0f} s"
        + (
            f"; wall time per row: median {statistics.median(walls):.1f} s, max {max(walls):.1f} s"
            if walls
            else ""
        ),
        "",
        "The CUPTI span is first kernel start to last kernel end of one pipeline run (CUDA "
        "graphs on), median of 15; the modelled time is the simulator's for the same run. "
        "Target (issue 36): every seed within 2x of its span at every listed size. The "
        "calibration half (" + ", ".join(SPLITS["calibration"]) + ") is the one the modelled "
        "H100's dispatch_us is fitted on; the validation half ("
        + ", ".join(SPLITS["validation"])
        + ") is not.",
        "",
        "## Summary",
        "",
        *(summary_line(h, s) for h, s in meta["summaries"].items()),
        "",
        "## Rows",
        "",
        TABLE_HEAD,
        *(table_row(r) for r in rows),
    ]
    detail = [line for r in rows for line in kernel_rows(r)]
    if detail:
        lines += ["", "## Per kernel (its last profiled launch)", "", KERNEL_HEAD, *detail]
    failures = [r for r in rows if r["modelled"] is None]
    if failures:
        lines += ["", f"## Failures on the simulator ({len(failures)})", ""]
        lines += [
            f"- {r['task']} {r['size']}: {r['verdict']}: {shown(r['reason'] or '')}"
            for r in failures
        ]
    if unmatched:
        lines += ["", f"## Rows matching no size ({len(unmatched)}, not evaluated)", ""]
        lines += [f"- {shown(r['task'])} {shown(r['size'])}: {shown(r['why'])}" for r in unmatched]
    if unmeasured:
        lines += ["", "## Sizes with no measured row", "", f"- {', '.join(unmeasured)}"]
    matched_near = [r for r in rows if r["matched"] != "exact"]
    if matched_near:
        lines += ["", "## Rows matched by a label written differently", ""]
        lines += [f"- {r['task']} {r['size']}: {r['matched']}" for r in matched_near]
    return "\n".join(lines) + "\n"


# --- the command line ----------------------------------------------------------------


def shown_path(path: Path) -> str:
    """A path as the report names it: from the repository's root where it
    can be, so that no machine's own folders end up in a committed file."""
    try:
        return os.path.relpath(path.resolve(), ROOT)
    except ValueError:  # another drive
        return str(path)


def dispatch_us() -> float | None:
    """The modelled H100's dispatch cost (its one fitted parameter), for the header."""
    try:
        from mlxsci.backends.sim import gpus

        return float(gpus.load(SIM_GPU).dispatch_us)
    except Exception:  # noqa: BLE001 - the header says '?' then
        return None


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "spans", type=Path, nargs="?", default=ROOT / DEFAULT_SPANS,
        help=f"the CUPTI spans (default: {DEFAULT_SPANS} from the repository's root)",
    )  # fmt: skip
    p.add_argument("--split", choices=[*SPLITS, "all"], default="all", help="which half")
    p.add_argument("--tasks", help="comma-separated tasks (default: all of the split's)")
    p.add_argument("--sizes", help="comma-separated size labels (default: every row's)")
    p.add_argument("--jobs", type=int, default=1, help="evaluations at once")
    p.add_argument("--timeout", type=float, help="seconds allowed per evaluation")
    p.add_argument("--out", type=Path, help="the markdown file (the JSON goes beside it)")
    args = p.parse_args(argv)
    known = task_names()
    chosen = tasks_of(args.split, known)
    if args.tasks:
        asked = [t for t in args.tasks.split(",") if t]
        unknown = [t for t in asked if t not in known]
        if unknown:
            p.error(
                f"--tasks: unknown task(s) {', '.join(unknown)}; choose from {', '.join(known)}"
            )
        outside = [t for t in asked if t not in chosen]
        if outside:
            p.error(
                f"--tasks: {', '.join(outside)} not in the {args.split} half ({', '.join(chosen)})"
            )
        chosen = [t for t in chosen if t in asked]
    args.tasks = chosen
    args.sizes = [s for s in args.sizes.split(",") if s] if args.sizes else None
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if args.timeout is not None and not args.timeout > 0:
        p.error("--timeout must be positive")
    today = datetime.date.today().isoformat()
    args.out = args.out or RESULTS / f"h100_seed_model_{today}.md"
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    started = time.perf_counter()
    try:
        header, spans = read_spans(args.spans)
    except BadSpans as exc:
        say(f"error: {exc}")
        return 2
    every = {t: load_task(t).sizes for t in task_names()}
    labels = set(args.sizes) if args.sizes else None
    jobs, unmatched, unmeasured = plan(spans, args.tasks, every, labels)
    for row in unmatched:
        say(f"unmatched: {shown(row['task'])} {shown(row['size'])}: {shown(row['why'])}")
    if not jobs:
        say(f"error: {shown(args.spans)} has no row matching a size of {', '.join(args.tasks)}")
        return 2
    say(f"{len(jobs)} row(s) to evaluate; {len(unmatched)} unmatched")
    rows = run_all([{**j, "timeout": args.timeout} for j in jobs], args.jobs)
    meta = {
        "split": args.split, "tasks": args.tasks, "sizes": args.sizes, "jobs": args.jobs,
        "spans": header, "spans_path": shown(shown_path(args.spans)), "sim_gpu": SIM_GPU,
        "dispatch_us": dispatch_us(), "device": next((r["device"] for r in rows if r["device"]),
        None), "mlxsci_commit": git_commit(ROOT),
        "host": f"{platform.node()} ({os.cpu_count()} CPUs)",
        "wall_s": time.perf_counter() - started, "summaries": summaries(rows),
    }  # fmt: skip
    text = markdown(meta, rows, unmatched, unmeasured)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    failed = [r for r in rows if r["modelled"] is None]
    doc = {"meta": meta, "rows": rows, "failed": len(failed), "unmatched": unmatched,
           "unmeasured": unmeasured}  # fmt: skip
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(text)
    if failed:
        say(
            f"{len(failed)} row(s) failed: " + ", ".join(f"{r['task']} {r['size']}" for r in failed)
        )
    say(f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
