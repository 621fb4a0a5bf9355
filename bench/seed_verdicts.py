"""Every seed's verdicts, for a behaviour-unchanged check across a refactor.

    python bench/seed_verdicts.py [--sizes smoke] [--input-seed 12345] > verdicts.json

Evaluates every task's seed in every dialect it has on the simulator at the
size set, with a fixed input seed (which also seeds the modelled clock's
draws), and prints per task and dialect: compile_ok, correct, the fail
reason, S and Phi, and per size its label, verdict, error and modelled
seconds. Run it with two versions of mlxsci (two environments) and compare
the outputs: a refactor that changes nothing a user sees gives the same
bytes.
"""

from __future__ import annotations

import argparse
import json

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.task import load_task, task_names


def verdicts(task: str, dialect: str, size_set: str, seed: int) -> dict:
    ev = evaluate(task, backend="sim", dialect=dialect, size_set=size_set, input_seed=seed)
    return {
        "compile_ok": ev.compile_ok,
        "correct": ev.correct,
        "fail_reason": ev.fail_reason,
        "score": ev.score,
        "phi": ev.phi,
        "sizes": [
            {"label": s.label, "correct": s.correct, "error": s.error, "seconds": s.seconds}
            for s in ev.sizes
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="smoke")
    ap.add_argument("--input-seed", type=int, default=12345)
    ap.add_argument("--tasks", default="all")
    args = ap.parse_args()
    names = task_names() if args.tasks == "all" else args.tasks.split(",")
    out = {
        f"{name}/{dialect}": verdicts(name, dialect, args.sizes, args.input_seed)
        for name in names
        for dialect in load_task(name).seed_dialects()
    }
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
