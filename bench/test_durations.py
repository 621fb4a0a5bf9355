"""The test suite's time, file by file, from pytest's own durations report.

    python -m pytest -q -n auto --durations=0 -vv > before.txt   # on one version
    python -m pytest -q -n auto --durations=0 -vv > after.txt    # on the other
    python bench/test_durations.py before=before.txt after=after.txt [--top 25]

Prints a markdown table: per test file, the seconds its tests took (setup,
call and teardown summed over every test: worker time, not wall), for each
labelled report side by side, the largest files of the first report first;
then each report's totals: tests passed, worker seconds, and the wall time
pytest printed on its last line. Run the reports back to back (or
alternated) on one machine at one load: worker seconds grow with the load.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

DURATION = re.compile(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S+?)::")
SUMMARY = re.compile(r"=* ?(.*?) in ([\d.]+)s")


def read_report(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per test file, and the last line's counts and wall seconds."""
    per_file: dict[str, float] = defaultdict(float)
    summary: dict[str, float] = {}
    for line in path.read_text(errors="replace").splitlines():
        found = DURATION.match(line)
        if found:
            per_file[found.group(2)] += float(found.group(1))
            continue
        done = SUMMARY.match(line.strip("= "))
        if done and ("passed" in line or "failed" in line):
            summary = {"wall": float(done.group(2))}
            for n, word in re.findall(r"(\d+) (passed|failed|skipped)", line):
                summary[word] = int(n)
    return per_file, summary


def table(reports: dict[str, tuple[dict[str, float], dict[str, float]]], top: int) -> str:
    labels = list(reports)
    first = reports[labels[0]][0]
    files = sorted(first, key=first.__getitem__, reverse=True)[:top]
    rows = ["| test file | " + " | ".join(f"{x} (s)" for x in labels) + " |"]
    rows.append("|---|" + "---|" * len(labels))
    for name in files:
        cells = [f"{reports[x][0].get(name, 0.0):.1f}" for x in labels]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    rest = [sum(v for f, v in reports[x][0].items() if f not in files) for x in labels]
    rows.append("| (every other file) | " + " | ".join(f"{v:.1f}" for v in rest) + " |")
    rows.append("")
    rows.append("| report | passed | failed | skipped | worker seconds | wall seconds |")
    rows.append("|---|---|---|---|---|---|")
    for x in labels:
        per_file, s = reports[x]
        rows.append(
            f"| {x} | {s.get('passed', 0)} | {s.get('failed', 0)} | {s.get('skipped', 0)} "
            f"| {sum(per_file.values()):.0f} | {s.get('wall', float('nan')):.0f} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", help="label=path of a pytest --durations=0 report")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    reports = {}
    for item in args.reports:
        label, sep, path = item.partition("=")
        if not sep:
            ap.error(f"{item!r} is not label=path")
        try:
            reports[label] = read_report(Path(path))
        except OSError as exc:
            ap.error(f"cannot read {path}: {exc.strerror}")
    print(table(reports, args.top))


if __name__ == "__main__":
    main()
