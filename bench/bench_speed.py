"""How fast mlxsci is on this machine, in one report (issue 11's evidence):

    python bench/bench_speed.py [--tiers] [--out FILE.md]

1. the first evaluation on empty caches and a warm one (bench_first_run.py);
2. where a warm search iteration's time goes: one evaluation of the saxpy
   seed at its smoke size (what an autotune iteration evaluates), split into
   compile / reference / inputs / timed runs / verification / other
   (bench_sim.py --warm);
3. the simulator against the NumPy reference at each task's smallest
   in-distribution size (bench_sim_launch.py, part 2);
4. with --tiers, the wall time of the fast test tier (`-m "not slow"`) and of
   the full suite, each first on empty caches (a fresh $XDG_CACHE_HOME and zig
   cache, what CI's first session and a new machine see) and then again on
   the caches that run left (an edit loop's).

Each part is the existing script run as it is; this one only runs them in
order and collects their output, with the machine's load before each part
(the figures of a shared machine mean little without it).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PARTS = [
    ("first evaluation, cold and warm", ["bench/bench_first_run.py", "--repeat", "1"]),
    (
        "a warm search iteration's evaluation, split",
        ["bench/bench_sim.py", "--tasks", "saxpy", "--sizes", "smoke", "--warm"],
    ),
    (
        "simulator vs NumPy reference, smallest in-distribution size",
        ["bench/bench_sim_launch.py", "--overhead", "", "--ratio", "all", "--repeats", "3"],
    ),
]
TIERS = [
    ("fast test tier", ["-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"]),
    ("full test suite", ["-m", "pytest", "-q", "-p", "no:cacheprovider"]),
]


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def run_part(title: str, argv: list[str], env: dict | None = None) -> tuple[str, float, int]:
    """(output, wall seconds, exit code) of `python ARGV` in the repository."""
    print(f"== {title} (load {load()})", file=sys.stderr, flush=True)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - started
    return proc.stdout + proc.stderr, wall, proc.returncode


def tier_summary(output: str) -> str:
    """pytest's last line, e.g. `761 passed in 64.81s`."""
    lines = [ln for ln in output.strip().splitlines() if " in " in ln and "passed" in ln]
    return lines[-1].strip("= ") if lines else output.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiers", action="store_true", help="also time the test tiers (minutes)")
    ap.add_argument("--out", help="write the report to this Markdown file too")
    args = ap.parse_args()

    report = [
        f"# mlxsci speed on {platform.node() or 'this machine'}",
        "",
        f"{os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
    ]
    failed = False
    for title, argv in PARTS:
        before = load()
        out, wall, rc = run_part(title, argv)
        failed |= rc != 0
        report += [
            f"## {title}",
            "",
            f"`python {' '.join(repr(a) if not a else a for a in argv)}`"
            f" (load before: {before}; {wall:.0f} s; exit {rc})",
            "",
            "```",
            out.rstrip(),
            "```",
            "",
        ]
    if args.tiers:
        report += [
            "## test tiers",
            "",
            "| tier | caches | load before | result | wall |",
            "|---|---|---|---|---|",
        ]
        for title, argv in TIERS:
            with tempfile.TemporaryDirectory(prefix="mlxsci-bench-tiers-") as tmp:
                env = {k: v for k, v in os.environ.items() if k != "MLXSCI_CACHE_DIR"}
                env.update(
                    XDG_CACHE_HOME=str(Path(tmp, "xdg")), ZIG_GLOBAL_CACHE_DIR=str(Path(tmp, "zig"))
                )
                for caches in ("empty", "warm"):
                    before = load()
                    out, wall, rc = run_part(f"{title}, {caches} caches", argv, env)
                    failed |= rc != 0
                    report.append(
                        f"| {title} | {caches} | {before} | {tier_summary(out)} | {wall:.0f} s |"
                    )
        report.append("")
    text = "\n".join(report)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
