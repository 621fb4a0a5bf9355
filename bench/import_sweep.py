"""Importing and re-scoring a sweep-sized folder of Metal-Sci runs, killed
part-way through its re-score and resumed (issue 26).

    python bench/import_sweep.py [--out DIR] [--models N] [--kill-after K] [--results FILE]

What it measures: whether `python -m mlxsci.import_metal_sci` handles a
sweep's worth of runs (dozens) with progress, and whether a re-score killed
with SIGKILL continues where it stopped without evaluating anything twice or
losing a record; and how long each part takes on this machine.

How: it writes a synthetic Metal-Sci results/ folder, 12 tasks x N models
(default 3: 36 runs), every run in Metal-Sci's format from the Metal-Sci-style
seeds of tests/import_metal_sci/metal_sci_sources/. The runs are made here,
not published ones, and their recorded numbers are invented: iteration 1 is
the seed's source again, recorded correct and the new best; iteration 2 is
skipped (the answer held no code); iteration 3 is the seed with a line that
does not compile, recorded as a compile error. Plus a `_run_logs/` folder
that is no run. Then, as subprocesses:

1. `python -m mlxsci.import_metal_sci DIR/results --out DIR/imported`;
2. the same again (every run already imported: nothing to do);
3. `python -m mlxsci.import_metal_sci --out DIR/imported --rescore --backend sim
   --held-out none`, killed with SIGKILL once rescore.json holds K records;
4. the same command again, which resumes; its progress lines are counted;
5. `python -m mlxsci.report DIR/imported` (Markdown), saved beside the runs.

The held-out evaluation of each run's recorded best is left out
(--held-out none): at the published held-out sizes the simulator needs
minutes per task (tests/import_metal_sci/test_rescore.py covers that path).
Writes the results file (default bench/results/sim/import_sweep_<date>.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "import_metal_sci"))

from metal_sci_runs import (  # noqa: E402  (the fixture builder lives with the tests)
    COMPILE_FAILED,
    Iteration,
    metal_sci_source,
    result,
    write_run,
)

TASKS = "saxpy heat2d wave3d nbody hmc lbm ising lj gradshaf fft3d adi3d morton".split()
COMMAND = [sys.executable, "-m", "mlxsci.import_metal_sci"]


def make_results(folder: Path, models: int) -> int:
    """The synthetic results/ folder; the number of runs in it."""
    n = 0
    for task in TASKS:
        seed = metal_sci_source(task)
        broken = seed + "\nthis line is not Metal;\n"
        for m in range(models):
            write_run(
                folder, task, seed,
                [Iteration(seed, result(score=0.6)), Iteration(None),
                 Iteration(broken, COMPILE_FAILED)],
                model=f"model-{chr(ord('a') + m)}", stamp=f"20260501_12000{m}",
            )  # fmt: skip
            n += 1
    (folder / "_run_logs").mkdir()
    (folder / "_run_logs" / "sweep.log").write_text("a log, not a run\n")
    return n


def run(args: list[str], log: Path) -> tuple[int, float, str]:
    start = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    log.write_text(proc.stdout + proc.stderr)
    return proc.returncode, time.monotonic() - start, proc.stdout + proc.stderr


def records(path: Path) -> list:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return found if isinstance(found, list) else []


def killed_rescore(args: list[str], rescore_json: Path, kill_after: int, log: Path) -> dict:
    """Start the re-score, SIGKILL it once rescore.json holds `kill_after`
    records; what it had done."""
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)  # fmt: skip
        while proc.poll() is None and len(records(rescore_json)) < kill_after:
            time.sleep(0.2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return {"seconds": time.monotonic() - start, "records": len(records(rescore_json)),
            "returncode": proc.returncode}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/mlxsci_import_sweep"))
    ap.add_argument("--models", type=int, default=3)
    ap.add_argument("--kill-after", type=int, default=40)
    stamp = datetime.date.today().isoformat()
    ap.add_argument("--results", type=Path,
                    default=ROOT / "bench" / "results" / "sim" / f"import_sweep_{stamp}.md")  # fmt: skip
    a = ap.parse_args()
    if a.out.exists():
        raise SystemExit(f"{a.out} exists: give a new --out")
    results, imported = a.out / "results", a.out / "imported"
    n_runs = make_results(results, a.models)
    rc1, t_import, out1 = run(
        [*COMMAND, str(results), "--out", str(imported)], a.out / "import.log"
    )
    rc2, t_again, out2 = run([*COMMAND, str(results), "--out", str(imported)], a.out / "again.log")
    rescore = [*COMMAND, "--out", str(imported), "--rescore", "--backend", "sim",
               "--held-out", "none"]  # fmt: skip
    kill = killed_rescore(rescore, imported / "rescore.json", a.kill_after, a.out / "killed.log")
    rc3, t_resume, out3 = run(rescore, a.out / "resumed.log")
    final = records(imported / "rescore.json")
    keys = [(r.get("run"), r.get("iteration")) for r in final]
    rc4, _, report = run(
        [sys.executable, "-m", "mlxsci.report", str(imported)], a.out / "report.log"
    )
    (a.out / "report.md").write_text(report)
    resumed_lines = [line for line in out3.splitlines() if line.startswith("[")]
    facts = {
        "runs": n_runs, "import_rc": rc1, "import_s": t_import,
        "import_lines": sum(1 for line in out1.splitlines() if line.startswith("[")),
        "again_rc": rc2, "again_s": t_again,
        "again_already": out2.count("already imported"),
        "killed": kill, "resume_rc": rc3, "resume_s": t_resume,
        "resume_note": next((x for x in out3.splitlines() if "resuming" in x), None),
        "resumed_progress_lines": len(resumed_lines),
        "records": len(final), "distinct": len(set(keys)),
        "verdicts": _pairs(final), "report_rc": rc4,
    }  # fmt: skip
    a.results.write_text(render(facts, a))
    print(json.dumps(facts, indent=2))


def _pairs(final: list) -> dict:
    pairs: dict = {}
    for r in final:
        key = f"{r.get('recorded')} -> {r.get('mlxsci') or 'not evaluated'}"
        pairs[key] = pairs.get(key, 0) + 1
    return dict(sorted(pairs.items()))


def render(f: dict, a) -> str:
    import mlx.core as mx

    k = f["killed"]
    lines = [
        f"# Import and re-score of a sweep-sized Metal-Sci folder ({datetime.date.today()})",
        "",
        f"Made by `python bench/import_sweep.py --models {a.models} --kill-after "
        f"{a.kill_after}` on {platform.node() or 'this machine'} ({os.cpu_count()} cores, "
        f"{platform.platform()}), Python {platform.python_version()}, MLX {getattr(mx, '__version__', '?')}, "
        "backend sim. The runs are synthetic (bench/import_sweep.py's docstring says how "
        "they are made); the recorded numbers in them are invented.",
        "",
        "| step | result |",
        "|---|---|",
        f"| import {f['runs']} runs (+ a `_run_logs/` folder) | exit {f['import_rc']}, "
        f"{f['import_s']:.1f} s, {f['import_lines']} progress lines |",
        f"| import again | exit {f['again_rc']}, {f['again_s']:.1f} s, "
        f"{f['again_already']} runs already imported |",
        f"| re-score, SIGKILLed | after {k['seconds']:.1f} s with {k['records']} records in "
        "rescore.json |",
        f"| re-score again | exit {f['resume_rc']}, {f['resume_s']:.1f} s, "
        f"`{f['resume_note']}`, {f['resumed_progress_lines']} progress lines |",
        f"| rescore.json at the end | {f['records']} records, {f['distinct']} distinct "
        "(run, iteration) |",
        f"| report | exit {f['report_rc']} (report.md beside the runs) |",
        "",
        "Recorded -> mlxsci verdicts over all records:",
        "",
        *[f"- {pair}: {count}" for pair, count in f["verdicts"].items()],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
