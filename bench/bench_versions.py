"""A warm evaluation's wall time under two checkouts of mlxsci, side by side.

What a change to the protocol costs (issue 22: the secret input seeds and
their references, three input sets in turn, the timed runs checked, more race
schedules): each checkout is its own Python environment (a venv with that
checkout installed editable), and each measurement is one fresh process

    OLD_PYTHON -m mlxsci.eval TASK --backend sim --sizes SET --dialect D --json

against the same with NEW_PYTHON, alternating which goes first, after one
discarded warm-up each (the cache then holds both versions' kernels and
rooflines). Prints each pair and, per task, the median ratio new / old and
its range.

    python bench/bench_versions.py --old /tmp/oldenv/bin/python \\
        --new python [--repeats 5] [TASK:SIZESET[:DIALECT] ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

DEFAULT_CASES = ["saxpy:smoke", "heat2d:smoke", "heat2d:smoke:cuda", "lbm:smoke", "nbody:smoke"]


def timed(python: str, case: str) -> float:
    task, size_set, *rest = case.split(":")
    dialect = rest[0] if rest else "metal"
    command = [python, "-m", "mlxsci.eval", task, "--backend", "sim", "--sizes", size_set,
               "--dialect", dialect, "--json"]  # fmt: skip
    started = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    try:
        correct = json.loads(out.stdout)["candidate"]["correct"]
    except (ValueError, KeyError):
        correct = False
    if out.returncode != 0 or not correct:
        raise SystemExit(f"{python} {case}: the seed did not pass:\n{out.stdout[-2000:]}"
                         f"{out.stderr[-2000:]}")  # fmt: skip
    return seconds


def pairs_of(old: str, new: str, case: str, repeats: int) -> list[tuple[float, float]]:
    timed(old, case), timed(new, case)  # warm both caches; not counted
    pairs = []
    for k in range(repeats):
        if k % 2 == 0:
            a = timed(old, case)
            b = timed(new, case)
        else:
            b = timed(new, case)
            a = timed(old, case)
        print(f"  {case}: old {a:.2f} s  new {b:.2f} s  ratio {b / a:.3f}", flush=True)
        pairs.append((a, b))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="python of the old checkout's environment")
    parser.add_argument("--new", default="python", help="python of the new checkout's environment")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("cases", nargs="*", default=DEFAULT_CASES)
    args = parser.parse_args()
    for case in args.cases:
        ratios = [b / a for a, b in pairs_of(args.old, args.new, case, args.repeats)]
        print(
            f"{case}: new/old median {statistics.median(ratios):.3f} "
            f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} pairs)",
            flush=True,
        )


if __name__ == "__main__":
    main()
