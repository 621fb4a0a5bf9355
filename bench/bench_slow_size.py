"""How long the simulator takes to judge a kernel at the smallest
in-distribution size, with the default budget, against the default time
limit per size (issue 27: a correct hmc candidate with simdgroup matrices
needed about a minute a run, nine runs a size).

    python bench/bench_slow_size.py [--cases hmc-sgmatrix,hmc-seed,...] [--label L]

For each case it evaluates one size exactly as `python -m mlxsci.eval` does
with no budget option (the simulator's warm-up, timed, verification and
schedule runs, in the sandboxed worker) and prints one markdown row: the
verdict, the wall time of the evaluation, the worker's seconds per phase
(first run with its compile, warm-up, timed runs, the two verification
runs, the runs under the other thread orders), the timed runs' noise and
the share of the default limit used. To compare two versions of the code, run it once per checkout,
one after the other on the same machine (PYTHONPATH=OTHER_CHECKOUT for the
other: the worker imports the same mlxsci as its parent).

Cases: every task's seed at its smallest in-distribution size (both
dialects for hmc), and the converted Metal-Sci candidates of
tests/import_metal_sci/metal_sci_candidates/ that take longest on the
simulator at their smoke size: hmc with simdgroup matrices and with a
threadgroup-tiled matrix product, adi3d's threadgroup Thomas solver and its
private-array template, fft3d's SIMD radix-2.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from importlib.metadata import version
from pathlib import Path

from mlxsci.backends import backend_info
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.import_metal_sci.convert import convert_source
from mlxsci.task import load_task, task_names

ROOT = Path(__file__).resolve().parent.parent
METAL_SCI = ROOT / "tests" / "import_metal_sci" / "metal_sci_candidates"

# name: (task, dialect, Metal-Sci candidate file or None for the seed)
CASES = {
    "hmc-sgmatrix": ("hmc", "metal", "hmc_simdgroup_matrix.metal"),
    "hmc-tgmatrix": ("hmc", "metal", "hmc_tg_matrix_fixed_d.metal"),
    "adi3d-tgthomas": ("adi3d", "metal", "adi3d_tg_thomas.metal"),
    "adi3d-private": ("adi3d", "metal", "adi3d_private_template.metal"),
    "fft3d-simd": ("fft3d", "metal", "fft3d_simd_radix2.metal"),
    "hmc-seed-cuda": ("hmc", "cuda", None),
}
# every task's Metal seed
CASES.update({f"{t}-seed": (t, "metal", None) for t in task_names()})


def source_of(task: str, dialect: str, file: str | None) -> tuple[str | None, str | None]:
    """(source, filename) of a case: None for the task's seed, else the
    Metal-Sci candidate converted as `mlxsci import-metal-sci` converts it."""
    if file is None:
        return None, None
    conv = convert_source(task, (METAL_SCI / file).read_text())
    if conv.text is None:
        raise SystemExit(f"{file} does not convert: {conv.reason}")
    return conv.text, file


def phases(timings: dict) -> dict:
    """The worker's seconds per phase of a size (mlxsci/worker/serve.py)."""

    def get(key: str) -> float:
        value = timings.get(key)
        return float(value) if isinstance(value, (int, float)) else 0.0

    return {
        "first run": get("first_run"),
        "warm-up": get("warmup"),
        "timed": get("timed"),
        "verify": get("verify"),
        "schedules": get("schedules"),
    }


def run_case(name: str) -> list[str]:
    task_name, dialect, file = CASES[name]
    task = load_task(task_name)
    size = task.size_set("in-dist")[0]
    source, filename = source_of(task_name, dialect, file)
    limit = backend_info("sim").budget.seconds_per_size
    t = time.perf_counter()
    ev = evaluate(
        task_name, source, backend="sim", sizes=[size], filename=filename, dialect=dialect
    )
    wall = time.perf_counter() - t
    if not ev.sizes:
        return [name, size.label, f"no size ran: {ev.fail_reason}"] + [""] * 8
    s = ev.sizes[0]
    parts = phases(s.timings)
    return [
        name,
        size.label,
        "ok" if s.correct else f"FAIL: {(s.fail_reason or '')[:80]}",
        f"{wall:.1f}",
        *(f"{v:.1f}" for v in parts.values()),
        "" if s.noise is None else f"{s.noise:.1%}",
        f"{wall / limit:.0%}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    ap.add_argument("--label", default="", help="a name for this checkout, printed with the rows")
    args = ap.parse_args()
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)}")
    print(
        f"<!-- {args.label or 'this checkout'}: {platform.machine()}, {os.cpu_count()} cores, "
        f"MLX {version('mlx')}, {time.strftime('%Y-%m-%d %H:%M')} -->"
    )
    print(
        "| case | size | verdict | wall s | first run | warm-up | timed | verify | schedules "
        "| noise | of limit |"
    )
    print("|---" * 11 + "|")
    for name in names:
        print("| " + " | ".join(run_case(name)) + " |", flush=True)


if __name__ == "__main__":
    main()
