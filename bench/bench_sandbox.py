"""The OS sandbox's cost on a warm evaluation (issue 21): sandboxed vs unsandboxed.

A warm search iteration is one evaluation of a candidate whose references,
roofline and kernel libraries are cached. This times evaluate() on the
simulator with the worker inside the sandbox (mlxsci.sandbox: boot, Landlock,
seccomp, a network namespace, kernels built by the parent on request) and
without it (--unsandboxed), alternating in one process so both see the same
machine load, and prints each pair and the ratio's median and range.

    python bench/bench_sandbox.py [--repeats 7] [TASK:SIZESET[:DIALECT] ...]
    python bench/bench_sandbox.py --tests [--repeats 2]

--tests times the fast test tier (`pytest -m "not slow"`, less the sandbox's
own tests, which need it) with the sandbox and with MLXSCI_UNSANDBOXED=1, in
alternating order, and prints each pair and the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from mlxsci.evaluation import evaluate


def timed(task: str, size_set: str, dialect: str, unsandboxed: bool) -> float:
    started = time.perf_counter()
    ev = evaluate(task, None, backend="sim", size_set=size_set, dialect=dialect,
                  unsandboxed=unsandboxed)  # fmt: skip
    seconds = time.perf_counter() - started
    if not ev.correct:
        raise SystemExit(f"{task} {size_set}: the seed failed: {ev.fail_reason}")
    return seconds


def timed_tests(unsandboxed: bool) -> float:
    env = dict(os.environ)
    env.pop("MLXSCI_UNSANDBOXED", None)
    if unsandboxed:
        env["MLXSCI_UNSANDBOXED"] = "1"
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider",
         "--ignore", "tests/test_sandbox.py"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit("the fast tier failed:\n" + out.stdout[-3000:])
    return seconds


def bench_tests(repeats: int) -> None:
    pairs = []
    for k in range(repeats):
        order = (True, False) if k % 2 == 0 else (False, True)
        got = {which: timed_tests(which) for which in order}
        pairs.append((got[True], got[False]))
        print(f"fast tier: unsandboxed {got[True]:.1f} s, sandboxed {got[False]:.1f} s", flush=True)
    ratios = [sandboxed / plain for plain, sandboxed in pairs]
    print(
        f"fast tier ratio (sandboxed / unsandboxed) median {statistics.median(ratios):.3f}"
        f" (min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", action="store_true", help="time the fast test tier both ways")
    ap.add_argument(
        "cases", nargs="*", default=["saxpy:smoke:metal", "heat2d:smoke:cuda", "lj:smoke:metal"]
    )
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if args.tests:
        bench_tests(args.repeats)
        return
    for case in args.cases:
        task, size_set, *rest = case.split(":")
        dialect = rest[0] if rest else "metal"
        timed(task, size_set, dialect, False)  # warm: roofline, references, kernels
        pairs = []
        for k in range(args.repeats):
            order = (True, False) if k % 2 == 0 else (False, True)
            got = {which: timed(task, size_set, dialect, which) for which in order}
            pairs.append((got[True], got[False]))
        ratios = [sandboxed / plain for plain, sandboxed in pairs]
        print(
            f"{case}: unsandboxed s "
            + " ".join(f"{p:.3f}" for p, _ in pairs)
            + " | sandboxed s "
            + " ".join(f"{s:.3f}" for _, s in pairs)
            + f" | ratio median {statistics.median(ratios):.3f}"
            f" (min {min(ratios):.3f}, max {max(ratios):.3f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
