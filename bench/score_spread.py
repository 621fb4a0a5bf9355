"""How steady the score S is across fresh processes.

    python bench/score_spread.py heat2d --size NX=256,NY=256,n_steps=20 [--backend sim]
                                 [--processes 5] [--source FILE] [--timer wall]

Runs `python -m mlxsci.eval` that many times, each a fresh process (with the
roofline cached, as in normal use), and prints every S, the max / min and the
per-run times, so a claim about S can quote its spread.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def fresh_scores(task: str, size: str, backend: str, processes: int, extra=()) -> list:
    """[(S, seconds of the size)] from `processes` fresh evaluations of one size
    given as KEY=VALUE,... (None where an evaluation failed)."""
    out = []
    for _ in range(processes):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "mlxsci.eval",
                task,
                "--backend",
                backend,
                "--size",
                size,
                "--json",
                *extra,
            ],
            capture_output=True,
            text=True,
        )
        data = json.loads(run.stdout) if run.returncode == 0 else {}
        sizes = data.get("sizes") or [{}]
        out.append(((data.get("candidate") or {}).get("score"), sizes[0].get("seconds")))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("--size", required=True, help="KEY=VALUE,... as python -m mlxsci.eval takes")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--source", default=None)
    ap.add_argument("--timer", default=None)
    args = ap.parse_args()
    extra = [
        *(["--source", args.source] if args.source else []),
        *(["--timer", args.timer] if args.timer else []),
    ]
    runs = fresh_scores(args.task, args.size, args.backend, args.processes, extra)
    for i, (score, seconds) in enumerate(runs, 1):
        ms = "-" if seconds is None else f"{seconds * 1e3:.4g} ms"
        print(f"process {i}: S = {score if score is None else f'{score:.4f}'}  ({ms})")
    scores = [s for s, _ in runs if s]
    if len(scores) == len(runs) and scores:
        print(f"S max/min = {max(scores) / min(scores):.4f} over {len(scores)} processes")
    else:
        print("some evaluations failed; no spread")


if __name__ == "__main__":
    main()
