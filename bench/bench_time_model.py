"""The simulator's clock, before and after it modeled a GPU (issue 22;
docs/simulator-time.md).

Before, the sim timer was the host thread's CPU time around a launch; now it
is the makespan of that time spread over the launch's threadgroups on 32
virtual cores of 32 lanes. This script evaluates the same candidates in two
trees, an export of an older commit (`--old-rev`, the clock before) and this
one, each in its own processes (PYTHONPATH picks the tree; each has its own
runtime digest, so its own kernel and roofline caches), and reports:

- every task's metal seed: fraction and modeled seconds at its smoke size
  (and at its first in-dist size for `--in-dist TASK ...`), old and new, and
  the host CPU seconds of the kernels under each runtime (their ratio is the
  per-group counter's overhead on the kernels themselves);
- the autotuner's variants: the candidates of a `--model autotune` search run
  with the new clock, each evaluated at the smoke size under both, ranked;
  and the outcome of the same search under each clock;
- a warm smoke evaluation's wall time, old and new, alternating, `--pairs`
  times: the ratio's median and spread.

    python bench/bench_time_model.py --out bench/results/sim/time_model_<date>.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlxsci.task import load_task  # noqa: E402

TASKS = (
    "adi3d",
    "fft3d",
    "gradshaf",
    "heat2d",
    "hmc",
    "ising",
    "lbm",
    "lj",
    "morton",
    "nbody",
    "saxpy",
    "wave3d",
)
OLD_REV = "HEAD"  # a commit whose sim timer is the host's CPU time (before 2026-11-24)


def export_tree(rev: str, into: Path) -> Path:
    """`git archive rev` unpacked under `into`: the old tree, importable."""
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_in(tree: Path, args: list, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def evaluate(tree: Path, task: str, extra: list, timeout: float) -> dict:
    """One `mlxsci.eval --json` in `tree`: {label: (fraction, seconds,
    host seconds)} of its correct sizes, or {"error": why}."""
    try:
        p = run_in(tree, ["mlxsci.eval", task, "--backend", "sim", "--json", *extra], timeout)
        data = json.loads(p.stdout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    except ValueError:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:120]}
    out: dict = {}
    for s in data["sizes"]:
        if not s["correct"]:
            out["error"] = (s.get("fail_reason") or "failed")[:120]
            continue
        info = s.get("timer_info") or {}
        out[s["label"]] = (s["fraction"], s["seconds"], info.get("host_seconds", s["seconds"]))
    return out


def resolve(rev: str) -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True)
    return out.stdout.decode().strip() or rev


def size_arg(params: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items())


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


# ------------------------------------------------------------------ seeds
def seeds(old: Path, new: Path, in_dist: list, timeout: float) -> tuple[list, list]:
    """Rows of the seeds' table and the host-seconds ratios (new / old)."""
    rows, ratios = [], []
    for task in TASKS:
        extras: list[list[str]] = [[]]
        if task in in_dist:
            first = load_task(task).size_set("in-dist")[0]
            extras.append(["--size", size_arg(first.params)])
        for extra in extras:
            a, b = evaluate(old, task, extra, timeout), evaluate(new, task, extra, timeout)
            labels = [k for k in b if k != "error"] or [k for k in a if k != "error"]
            if not labels:
                rows.append([task, "-", "-", "-", "-", "-", "-", a.get("error") or b.get("error")])
            for label in labels:
                fa, sa, ha = a.get(label, (None, None, None))
                fb, sb, hb = b.get(label, (None, None, None))
                if ha and hb:
                    ratios.append(hb / ha)
                note = a.get("error") or b.get("error") or ""
                rows.append(
                    [
                        task,
                        label,
                        fmt(fa),
                        fmt(fb),
                        fmt(sa),
                        fmt(sb),
                        fmt(hb / ha if ha and hb else None),
                        note,
                    ]
                )
            print(rows[-1], flush=True)
    return rows, ratios


# ------------------------------------------------------------------ autotuner
def search(tree: Path, task: str, out: Path, iterations: int, timeout: float) -> dict:
    args = ["mlxsci.search", "--task", task, "--model", "autotune", "--backend", "sim"]
    args += ["--iterations", str(iterations), "--out", str(out)]
    run_in(tree, args, timeout)
    try:
        return json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def candidates(run: Path) -> list[tuple[str, Path]]:
    found = [("seed", run / "00_seed.metal")]
    found += [(p.name[:2], p) for p in sorted(run.glob("[0-9][0-9]_candidate.metal"))]
    return [(name, p) for name, p in found if p.exists()]


def launch_of(path: Path) -> str:
    lines = [ln[4:] for ln in path.read_text().splitlines() if ln.startswith("//! ")]
    return "; ".join(ln for ln in lines if ln.startswith(("threadgroup", "param")))[:60]


def ranks(values: list) -> list:
    """1 for the highest fraction; "-" where there is none (a failed run)."""
    order = sorted((i for i, v in enumerate(values) if v is not None), key=lambda i: -values[i])
    out: list = ["-"] * len(values)
    for r, i in enumerate(order, 1):
        out[i] = r
    return out


def autotune(old: Path, new: Path, task: str, work: Path, iters: int, timeout: float) -> dict:
    run = work / f"{task}_search"
    summary = search(new, task, run, iters, timeout)
    rows = []
    for name, path in candidates(run):
        fa = evaluate(old, task, ["--source", str(path)], timeout)
        fb = evaluate(new, task, ["--source", str(path)], timeout)
        label = next((k for k in fb if k != "error"), None)
        rows.append([name, launch_of(path), fa.get(label, (None,))[0], fb.get(label, (None,))[0]])
        print(task, rows[-1], flush=True)
    ra, rb = ranks([r[2] for r in rows]), ranks([r[3] for r in rows])
    return {"rows": [r + [x, y] for r, x, y in zip(rows, ra, rb)], "summary": summary}


# ------------------------------------------------------------------ overhead
def overhead(old: Path, new: Path, task: str, pairs: int, timeout: float) -> list:
    """Wall seconds of warm smoke evaluations, alternating old and new."""
    walls = []
    for tree in (old, new):
        run_in(tree, ["mlxsci.eval", task, "--backend", "sim"], timeout)  # warm the caches
    for _ in range(pairs):
        pair = []
        for tree in (old, new):
            t = time.perf_counter()
            run_in(tree, ["mlxsci.eval", task, "--backend", "sim"], timeout)
            pair.append(time.perf_counter() - t)
        walls.append(pair)
    return walls


def spread(xs: list) -> str:
    return f"median {statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f}, n={len(xs)})"


def report(args, seed_rows, host_ratios, tuned: dict, walls: list) -> str:
    out = [
        "# The simulator's clock: host CPU time against the modeled GPU",
        "",
        f"`python bench/bench_time_model.py {' '.join(sys.argv[1:])}`, old tree "
        f"`{resolve(args.old_rev)}` (the host thread's CPU time), new tree the working tree "
        "(docs/simulator-time.md: threadgroups on 32 cores x 32 lanes). Machine: "
        f"{os.cpu_count()}-core x86-64, shared with other jobs while it ran; every "
        "figure is the sim timer's minimum over the protocol's timed runs.",
        "",
        "## Seeds (metal)",
        "",
        "fraction of the roofline, seconds per run, and the kernels' host CPU "
        "seconds new / old (the per-group counter's cost, plus noise).",
        "",
        "| task | size | fraction old | fraction new | s old | s new | host new/old | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in seed_rows]
    if host_ratios:
        out += ["", f"Host CPU seconds new / old over the seeds: {spread(host_ratios)}."]
    for task, t in tuned.items():
        out += ["", f"## Autotuner variants: {task}", ""]
        s = t["summary"] or {}
        out += [
            f"A search with the new clock (`--model autotune --iterations {args.iterations}`): "
            f"S seed {fmt(s.get('seed_score'))} -> best {fmt(s.get('best_score'))} (iteration "
            f"{s.get('best_iteration')}), outcome {s.get('outcome')}. Its candidates, each "
            "evaluated at the smoke size under both clocks (the old tree cannot run a search: "
            "`mlxsci.search` resolves to the working tree's package):",
            "",
            "| iteration | launch | fraction old | fraction new | rank old | rank new |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {n} | `{launch}` | {fmt(a)} | {fmt(b)} | {ra} | {rb} |"
            for n, launch, a, b, ra, rb in t["rows"]
        ]
    if walls:
        ratios = [n / o for o, n in walls]
        out += [
            "",
            f"## Overhead: warm smoke evaluation of {args.overhead_task}, wall seconds",
            "",
            f"old {spread([o for o, _ in walls])}; new {spread([n for _, n in walls])}; "
            f"new / old per pair {spread(ratios)}.",
        ]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-rev", default=OLD_REV)
    ap.add_argument(
        "--in-dist", nargs="*", default=[], help="tasks also run at their first in-dist size"
    )
    ap.add_argument("--search", nargs="*", default=["saxpy", "heat2d"])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--overhead-task", default="heat2d")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="time_model_") as tmp:
        old = export_tree(args.old_rev, Path(tmp) / "old")
        walls = overhead(old, ROOT, args.overhead_task, args.pairs, args.timeout)
        seed_rows, host_ratios = seeds(old, ROOT, args.in_dist, args.timeout)
        tuned = {
            t: autotune(old, ROOT, t, Path(tmp), args.iterations, args.timeout) for t in args.search
        }
    text = report(args, seed_rows, host_ratios, tuned, walls)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
