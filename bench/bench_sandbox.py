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
import functools
import os
import statistics
import subprocess
import sys
import time

from mlxsci.evaluation.evaluator import evaluate


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
         "--ignore", "tests/sandbox/test_sandbox.py"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit("the fast tier failed:\n" + out.stdout[-3000:])
    return seconds


def alternating_pairs(measure, repeats: int, each=None) -> list[tuple[float, float]]:
    """(unsandboxed, sandboxed) seconds of `measure(unsandboxed)`, `repeats`
    times, alternating which goes first so a drift in load hits both alike;
    `each` hears every pair as it comes."""
    pairs = []
    for k in range(repeats):
        order = (True, False) if k % 2 == 0 else (False, True)
        got = {which: measure(which) for which in order}
        pairs.append((got[True], got[False]))
        if each is not None:
            each(*pairs[-1])
    return pairs


def ratio_line(pairs: list[tuple[float, float]]) -> str:
    ratios = [sandboxed / plain for plain, sandboxed in pairs]
    return (
        f"ratio median {statistics.median(ratios):.3f}"
        f" (min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


def bench_tests(repeats: int) -> None:
    def say(plain: float, sandboxed: float) -> None:
        print(f"fast tier: unsandboxed {plain:.1f} s, sandboxed {sandboxed:.1f} s", flush=True)

    pairs = alternating_pairs(timed_tests, repeats, say)
    print(f"fast tier (sandboxed / unsandboxed) {ratio_line(pairs)}")


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
        pairs = alternating_pairs(functools.partial(timed, task, size_set, dialect), args.repeats)
        print(
            f"{case}: unsandboxed s "
            + " ".join(f"{p:.3f}" for p, _ in pairs)
            + " | sandboxed s "
            + " ".join(f"{s:.3f}" for _, s in pairs)
            + f" | {ratio_line(pairs)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
