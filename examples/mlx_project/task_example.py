"""The package's row softmax kernel as an mlxsci task: evaluate it, then search it.

    python task_example.py            # evaluate the kernel on the simulator (smoke sizes)
    python task_example.py --search   # and a short offline search (the autotuner)

mlxsci.task_from_kernel takes the kernel object, the NumPy reference and the
inputs (mlx_project/reference.py), the sizes and how a call launches it, and
gives a task that mlxsci.evaluate and mlxsci.search.run take like a built-in
one. The reference and make_inputs live in the package, not in this script:
the evaluation's worker process imports them by name.
"""

from __future__ import annotations

import argparse

import mlx.core as mx

import mlxsci
import mlxsci.fast
import mlxsci.search
from mlxsci.evaluation.results import format_evaluation


def row_softmax_task():
    # The kernel object must be mlxsci.fast's (it keeps what it was made from):
    # the package makes it with mx.fast.metal_kernel, which simulate() routes there.
    with mlxsci.fast.simulate():
        from mlx_project.softmax import THREADS, softmax_kernel

        kernel = softmax_kernel()
    from mlx_project.reference import make_inputs, reference

    return mlxsci.task_from_kernel(
        kernel,
        reference=reference,
        make_inputs=make_inputs,
        sizes={
            "smoke": [{"rows": 7, "cols": 333}, {"rows": 3, "cols": 1000}],
            "in-dist": [{"rows": 64, "cols": 1024}, {"rows": 256, "cols": 4096}],
            "held-out": {"rows": 96, "cols": 3000},
        },
        # softmax() launches one threadgroup of THREADS threads per row.
        grid=("rows * THREADS", 1, 1),
        threadgroup=("THREADS", 1, 1),
        template=[("THREADS", THREADS)],
        template_choices={"THREADS": [64, 128, 256, 512, 1024]},  # what the autotuner tries
        output_shapes=[("rows", "cols")],
        output_dtypes=[mx.float32],
        tolerance=(1e-6, 1e-5),  # max |y - reference| <= 1e-6 + 1e-5 * max|reference|
        bytes_moved="8 * rows * cols",  # read x once, write y once
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", action="store_true", help="then run a short search")
    parser.add_argument("--out", default="results/row_softmax", help="the search's run directory")
    args = parser.parse_args()

    task = row_softmax_task()
    print(f"task {task.name}: {task.folder}")
    ev = mlxsci.evaluate(task, backend="sim", size_set="smoke")
    print(format_evaluation(ev))  # a row per size, then S (or why it failed)

    if args.search:
        summary = mlxsci.search.run(
            task, "autotune", iterations=4, backend="sim", sizes="smoke", out=args.out
        )
        print(
            f"search: S {summary['seed_score']:.4f} -> {summary['best_score']:.4f} "
            f"({summary['outcome']}); run directory {summary['run_dir']}"
        )


if __name__ == "__main__":
    main()
