"""The held-out figures a Metal-Sci results folder recorded beside its runs.

Metal-Sci evaluates a run's best at the held-out size with scripts of its
own, after the search, and writes the figures to JSON files in
`results/_run_logs/`, not into the run folders. The file its published table
comes from measures every model's best of a task in one session:

    [{"task": "saxpy", "held": "4M", "seed_frac": 0.79,
      "models": {"claude-opus-4-7": {"frac": 0.93, "fail": null,
                                     "dir": "saxpy_claude-opus-4-7_20260507_110312"}, ...}},
     ...]

`recorded_held_out(folder)` reads every such file there and answers, per run
folder name, {"label", "seed_fraction", "best_fraction", "ratio" (best /
seed: the published "held-out x"), "fail" (the best's failure, then no
ratio), "source" (the file's name)}, with notes on what it passed over.
Files of another shape (a run's own seed/best pair, a two-model file) are
other measurements than the published table and are passed over. Like every
file of a published run, these are hostile input: read without following
links, under the JSON size cap, each value checked for its type.
"""

from __future__ import annotations

from pathlib import Path

from mlxsci.import_metal_sci.importer import one_line
from mlxsci.import_metal_sci.metal_run import (
    MAX_JSON_BYTES,
    UnreadableFile,
    parse_json,
    read_text,
    shown,
)
from mlxsci.import_metal_sci.records import finite_number

LOGS = "_run_logs"
MAX_FILES = 64
TEXT_CHARS = 200


def _text(value) -> str | None:
    return one_line(value, TEXT_CHARS) or None


def _entries(data, source: str) -> dict[str, dict]:
    """The run folder name -> figures of one file of the published shape."""
    found: dict[str, dict] = {}
    if not isinstance(data, list):
        return found
    for task in data:
        if not isinstance(task, dict) or not isinstance(task.get("models"), dict):
            continue
        seed = finite_number(task.get("seed_frac"))
        for model in task["models"].values():
            if not isinstance(model, dict) or not isinstance(model.get("dir"), str):
                continue
            best, fail = finite_number(model.get("frac")), _text(model.get("fail"))
            found[model["dir"]] = {
                "label": _text(task.get("held")),
                "seed_fraction": seed,
                "best_fraction": best,
                "ratio": best / seed if best is not None and seed and not fail else None,
                "fail": fail,
                "source": f"{LOGS}/{source}",
            }
    return found


def recorded_held_out(folder: Path) -> tuple[dict[str, dict], list[str]]:
    """Per run folder name, the held-out figures `folder/_run_logs` records
    (module docstring), and notes on the files passed over. A run two files
    give figures for keeps the first file's (by name), with a note."""
    logs = folder / LOGS
    if logs.is_symlink() or not logs.is_dir():
        return {}, []
    found: dict[str, dict] = {}
    notes: list[str] = []
    files = sorted(p for p in logs.iterdir() if p.suffix == ".json")[:MAX_FILES]
    for path in files:
        try:
            data = parse_json(read_text(path, MAX_JSON_BYTES), path.name)
        except (OSError, UnreadableFile) as exc:
            notes.append(f"{shown(path)}: not read ({shown(str(exc))[:120]})")
            continue
        entries = _entries(data, path.name)
        for run, figures in entries.items():
            if run in found and found[run] != {**figures, "source": found[run]["source"]}:
                notes.append(
                    f"{shown(path)}: held-out figures of {shown(run)} passed over: "
                    f"{found[run]['source']} gave them first"
                )
                continue
            found.setdefault(run, figures)
    return found, notes
