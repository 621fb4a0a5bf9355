"""One worker process per candidate vs one per size (issue 11, outcome 3).

Times evaluate() on the simulator both ways, alternating in one process so
both see the same machine load: "per-size" hands every size to a fresh
process (run_worker, as before), "per-candidate" runs all sizes of the
candidate in one (CandidateWorker). Prints each pair and the median ratio.

    python bench/bench_worker_process.py [--repeats 5] [TASK:SIZESET ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

from mlxsci.evaluation import evaluator as EV


def per_size_runner(*args):
    return EV.ProcessPerSize(None)  # run_worker(job, timeout, None): a process per size


def timed_evaluate(task: str, size_set: str, per_candidate: bool) -> float:
    runner = EV.candidate_worker if per_candidate else per_size_runner
    # evaluate() looks its runner up by this name. Both unsandboxed: a process
    # per size builds its own kernels (bench/bench_sandbox.py measures the sandbox).
    with mock.patch.object(EV, "candidate_worker", runner):
        started = time.perf_counter()
        ev = EV.evaluate(task, None, backend="sim", size_set=size_set, unsandboxed=True)
        seconds = time.perf_counter() - started
    if not ev.correct:
        raise SystemExit(f"{task} {size_set}: the seed failed: {ev.fail_reason}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=["heat2d:in-dist", "morton:smoke", "saxpy:smoke"])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    for case in args.cases:
        task, size_set = case.split(":")
        timed_evaluate(task, size_set, True)  # warm: roofline, references, compiled kernels
        pairs = []
        for k in range(args.repeats):
            # Alternate which goes first, so a drift in load hits both alike.
            order = (False, True) if k % 2 == 0 else (True, False)
            got = {which: timed_evaluate(task, size_set, which) for which in order}
            pairs.append((got[False], got[True]))
        ratios = [after / before for before, after in pairs]
        print(
            f"{case}: per-size s "
            + " ".join(f"{b:.2f}" for b, _ in pairs)
            + " | per-candidate s "
            + " ".join(f"{a:.2f}" for _, a in pairs)
            + f" | ratio median {statistics.median(ratios):.3f}"
            f" (min {min(ratios):.3f}, max {max(ratios):.3f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
