"""How the checkers and rewrites before any compiler scale with the text
(issue 23, outcome 5): every pathological shape of tests/rule_shapes.py, in
a header and in a kernel body of both dialects, timed stage by stage at two
sizes; linear time gives a ratio near the ratio of the sizes (4 for 250 KB
and 1 MB), quadratic time its square.

    python bench/bench_rules.py --out bench/results/sim/linear_rules_DATE.md
    python bench/bench_rules.py --sizes 100000,200000,400000 --shapes open_parens

Each shape runs in a process of its own under --timeout seconds (a case
past it is reported as such), so that the script also measures a tree
whose checkers are quadratic: PYTHONPATH=OLD_TREE python bench/bench_rules.py
... times that tree's mlxsci (tests/rule_shapes.py is taken from this one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent / "tests"
_STAGES = ("parse", "validate", "generate", "rules", "policy", "rewrite")


def _child(shape: str, sizes: list[int], places: str, dialects: str) -> None:
    """Times every place and dialect of `shape` at `sizes` (those named in
    `places` and `dialects`, comma-separated, when given); one JSON line each."""
    sys.path.insert(0, str(_TESTS))
    import rule_shapes  # tests/rule_shapes.py

    for name, place, dialect in rule_shapes.cases():
        if name != shape or (places and place not in places.split(",")):
            continue
        if dialects and dialect not in dialects.split(","):
            continue
        for size in sizes:
            text = rule_shapes.candidate_text(shape, size, place, dialect)
            t0 = time.perf_counter()
            stages = rule_shapes.each_checker(text, dialect)
            total = time.perf_counter() - t0
            verdict = str(rule_shapes.front_end(text, dialect)["verdict"])
            row = dict(place=place, dialect=dialect, size=size, total=total, stages=stages)
            print(json.dumps(dict(row, verdict=verdict[:70])), flush=True)


def _measure(
    shape: str, sizes: list[int], timeout: float, places: str, dialects: str
) -> list[dict]:
    cmd = [sys.executable, __file__, "--child", shape, "--sizes", ",".join(map(str, sizes))]
    cmd += ["--places", places, "--dialects", dialects]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out, failed = done.stdout, done.returncode != 0 and done.stderr[-300:]
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        failed = f"past {timeout:.0f} s"
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if failed:
        rows.append(dict(shape=shape, failed=failed))
    for row in rows:
        row["shape"] = shape
    return rows


def _table(rows: list[dict], sizes: list[int]) -> list[str]:
    """One line per case: the total seconds at each size, the ratio of the
    last to the first, and the stage that took longest at the last size."""
    kb = [f"{size // 1000} KB" for size in sizes]
    head = (
        f"| shape | place | dialect | verdict at {kb[-1]} | "
        + " | ".join(f"total s at {k}" for k in kb)
        + f" | ratio {kb[-1]} / {kb[0]} | slowest stage at {kb[-1]} (s, ratio) |"
    )
    lines = [head, "|" + "---|" * (6 + len(sizes))]
    by_case: dict[tuple, dict[int, dict]] = {}
    for row in rows:
        if "failed" in row:
            lines.append(
                f"| {row['shape']} | | | did not finish: {row['failed']} |"
                + " |" * (len(sizes) + 2)
            )
            continue
        by_case.setdefault((row["shape"], row["place"], row["dialect"]), {})[row["size"]] = row
    for (shape, place, dialect), at in by_case.items():
        totals = [f"{at[size]['total']:.2f}" if size in at else "-" for size in sizes]
        a, b = at.get(sizes[0]), at.get(sizes[-1])
        ratio, slowest = "-", "-"
        if a is not None and b is not None:
            ratio = f"{b['total'] / max(a['total'], 1e-4):.1f}"
            stage = max(b["stages"], key=lambda s: b["stages"][s])
            grown = b["stages"][stage] / max(a["stages"].get(stage, 0.0), 1e-4)
            slowest = f"{stage} {b['stages'][stage]:.2f} (x{grown:.1f})"
        verdict = (b or a or {}).get("verdict", "-").replace("|", "/")
        lines.append(
            f"| {shape} | {place} | {dialect} | {verdict} | "
            + " | ".join(totals)
            + f" | {ratio} | {slowest} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="250000,1000000", help="text sizes in bytes, comma-separated"
    )
    parser.add_argument("--shapes", default="", help="shapes to run (default: all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per shape")
    parser.add_argument("--places", default="", help="header, body, preamble (default: all)")
    parser.add_argument("--dialects", default="", help="metal, cuda (default: both)")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child:
        _child(args.child, sizes, args.places, args.dialects)
        return
    sys.path.insert(0, str(_TESTS))
    import rule_shapes

    shapes = (
        args.shapes.split(",")
        if args.shapes
        else [*rule_shapes.SHAPES, *rule_shapes.PREAMBLE_SHAPES]
    )
    rows = []
    for shape in shapes:
        rows += _measure(shape, sizes, args.timeout, args.places, args.dialects)
        print(shape, "done", file=sys.stderr, flush=True)
    lines = _table(rows, sizes)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores", file=sys.stderr)


if __name__ == "__main__":
    main()
