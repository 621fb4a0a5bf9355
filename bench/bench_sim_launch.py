"""The simulator's launch path: host overhead per launch, and the simulator
against the NumPy reference.

    python bench/bench_sim_launch.py [--overhead saxpy,heat2d,ising] [--ratio all]
                                     [--repeats 3] [--dialect metal] [--compare FILE]

Part 1, host overhead per launch, for small launches (each task's smallest
size, the smoke size): a pipeline run (Task.run through a Launcher, as the
worker times it) is run again and again; its wall time minus the runtime's
cpu_ns of the kernels' threads (what the sim timer reports), divided by the
number of launches, is the host work of one launch: argument marshalling,
buffers, fills, copies, checks (the least of --runs runs: on a shared machine
a preempted kernel inflates the wall clock but not cpu_ns). Rows for timed
runs and for verification runs (outputs poisoned through init_value).

Part 2, the simulator against the NumPy reference at each task's smallest
in-distribution size: wall time of one pipeline run (the fastest of a few,
after a compiling first run) and the kernels' own time, each over the time of
the reference's solve() on the same inputs (the fastest of a few). hmc's
solve() only builds the target covariance (its check is statistical), so hmc is
measured against reference.sample(), the vectorised NumPy run of the same
chains the kernel runs.

--compare FILE loads a second copy of the simulator driver (e.g. the
mlxsci/backends/sim/__init__.py of an earlier commit, saved elsewhere) and
measures it in the same process, interleaved with the current one, so the two
columns share the machine's load. Every figure is the median of --repeats
rounds with its spread (min-max). The driver was one file until 434b25e split
it into modules (kernel.py, buffers.py, ...), which a copy imports from the
installed package: --compare measures a one-file driver of an earlier commit
against today's; to compare two split versions, run the bench in two checkouts
one after the other.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

import mlx.core as mx
from tabulate import tabulate

from mlxsci.backends.base import RunMode
from mlxsci.kernel.candidate import parse
from mlxsci.task import load_reference, load_task, task_names
from mlxsci.worker.launch import Launcher


def load_driver(path: str | None):
    """The simulator driver module: the installed one, or a copy from `path`."""
    if path is None:
        import mlxsci.backends.sim as sim

        return sim
    spec = importlib.util.spec_from_file_location("mlxsci_sim_compare", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Setup:
    """One task at one size on one driver: inputs on the device, a launcher, compiled."""

    def __init__(self, driver, task, size, dialect: str):
        self.task, self.params = task, size.params
        self.backend = driver.SimBackend(dialect)
        candidate = parse(task.seed(dialect), dialect=dialect, filename=f"seed.{dialect}")
        self.launcher = Launcher(self.backend, task, candidate, self.params, f"seed.{dialect}")
        self.host = task.make_inputs(self.params)
        self.inputs = {k: self.backend.to_device(v) for k, v in self.host.items()}
        mx.eval(list(self.inputs.values()))
        self.run()  # compiles every kernel

    def run(self, init_value=None) -> tuple[float, float, int]:
        """(wall seconds, kernel seconds, launches) of one pipeline run."""
        self.launcher.mode = RunMode(init_value=init_value)
        self.backend.activity = []
        t = time.perf_counter()
        results = self.task.run(self.launcher, self.inputs, self.params)
        mx.eval(list(results.values()))
        wall = time.perf_counter() - t
        records, self.backend.activity = self.backend.activity, None
        self.launcher.mode = RunMode()
        # (name, modeled seconds, host CPU seconds): the host's is what the wall clock holds.
        return wall, sum(r[2] for r in records), len(records)


def overhead_ms(setup: Setup, runs: int, init_value=None) -> float:
    """Host milliseconds per launch: the least over `runs` pipeline runs. The
    host work is the same every run; a slower run was preempted (cpu_ns stops
    while the kernel's thread waits for a core, the wall clock does not)."""
    per_launch = []
    for _ in range(runs):
        wall, kernel, launches = setup.run(init_value)
        per_launch.append((wall - kernel) / max(1, launches) * 1e3)
    return min(per_launch)


def numpy_work(task):
    """The NumPy computation a task's simulator run is compared with: its
    reference's solve(), or for hmc (whose solve() runs no chain) sample()."""
    ref = load_reference(task.name)
    if task.name == "hmc":
        return lambda inputs, params: ref.sample(inputs["q_in"], inputs["A"], params["T"])
    return ref.solve


def numpy_seconds(task, params, runs: int) -> float:
    solve = numpy_work(task)
    inputs = task.make_inputs(params)
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        solve(inputs, params)
        best = min(best, time.perf_counter() - t)
    return best


def sim_seconds(setup: Setup, runs: int) -> tuple[float, float]:
    """(wall, kernel) seconds of the fastest of `runs` pipeline runs."""
    timings = [setup.run()[:2] for _ in range(runs)]
    return min(w for w, _ in timings), min(k for _, k in timings)


def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def drivers(args) -> dict:
    out = {"now": load_driver(None)}
    if args.compare:
        out["compare"] = load_driver(args.compare)
    return out


def overhead_table(args, named_drivers: dict) -> None:
    rows = []
    for name in [n for n in args.overhead.split(",") if n]:
        task = load_task(name)
        size = task.size_set("smoke")[0]
        setups = {k: Setup(d, task, size, args.dialect) for k, d in named_drivers.items()}
        launches = setups["now"].run()[2]
        for mode, init in (("timed", None), ("verify", float("nan"))):
            samples: dict[str, list] = {k: [] for k in setups}
            for _ in range(args.repeats):
                for k, s in setups.items():  # interleaved: both see the same load
                    samples[k].append(overhead_ms(s, args.runs, init))
            row = [name, size.label, launches, mode]
            row += [spread(samples[k]) for k in setups]
            if "compare" in setups:
                row.append(
                    spread([c / n for c, n in zip(samples["compare"], samples["now"])], "{:.1f}")
                )
            rows.append(row)
    headers = ["task", "size", "launches/run", "runs"] + [
        f"host ms/launch ({k})" for k in named_drivers
    ]
    if "compare" in named_drivers:
        headers.append("compare/now")
    print(
        "Host overhead per launch (smallest size; wall minus kernel cpu_ns, per launch; "
        f"least of {args.runs} runs per round)"
    )
    print(tabulate(rows, headers=headers))


def ratio_table(args, named_drivers: dict) -> None:
    names = task_names() if args.ratio == "all" else [n for n in args.ratio.split(",") if n]
    rows = []
    for name in names:
        task = load_task(name)
        size = task.size_set("in-dist")[0]
        setups = {k: Setup(d, task, size, args.dialect) for k, d in named_drivers.items()}
        np_s: list[float] = []
        wall: dict[str, list] = {k: [] for k in setups}
        kern: dict[str, list] = {k: [] for k in setups}
        for _ in range(args.repeats):
            np_s.append(numpy_seconds(task, size.params, args.ratio_runs))
            for k, s in setups.items():
                w, kn = sim_seconds(s, args.ratio_runs)
                wall[k].append(w / np_s[-1])
                kern[k].append(kn / np_s[-1])
        row = [name, size.label, spread(np_s, "{:.4f}")]
        for k in setups:
            row += [spread(wall[k], "{:.1f}"), spread(kern[k], "{:.1f}")]
        rows.append(row)
    headers = ["task", "size", "numpy s"]
    for k in named_drivers:
        headers += [f"wall/numpy ({k})", f"kernel/numpy ({k})"]
    print(
        "Simulator vs NumPy reference (smallest in-distribution size; fastest of "
        f"{args.ratio_runs} runs per round)"
    )
    print(tabulate(rows, headers=headers))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overhead", default="saxpy,heat2d,ising", help="tasks for part 1 ('' skips)")
    ap.add_argument("--ratio", default="all", help="tasks for part 2, or all ('' skips)")
    ap.add_argument("--dialect", default="metal", choices=["metal", "cuda"])
    ap.add_argument("--repeats", type=int, default=3, help="rounds per figure (median, spread)")
    ap.add_argument("--runs", type=int, default=5, help="pipeline runs per overhead round")
    ap.add_argument("--ratio-runs", type=int, default=3, help="runs per ratio round (fastest)")
    ap.add_argument("--compare", help="another copy of mlxsci/backends/sim/__init__.py to measure")
    args = ap.parse_args()
    named = drivers(args)
    if args.overhead:
        overhead_table(args, named)
        print()
    if args.ratio:
        ratio_table(args, named)


if __name__ == "__main__":
    main()
