"""Writing an imported run: a Metal-Sci run directory as an mlxsci run
directory (the layout is in mlxsci/import_metal_sci/records.py).

Every iteration the run recorded is imported, whatever became of it: a
converted candidate beside its original, or the original alone with the
reason it could not be converted, or the reason there is no source at all
(a skipped iteration, a missing file). What the run recorded (its results,
scores, per-size times and chip) is kept as recorded, in files of its own
and under "recorded" in summary.json; mlxsci's own figures (seed_score,
best_score) stay null until mlxsci measures them, so the two never mix.

An import is written into a temporary folder beside its destination and
renamed into place when complete, with manifest.json (mlxsci.search.manifest)
sealing its files: a killed import leaves no half run, and importing the same
run again finds it done.

The run is hostile input (mlxsci/import_metal_sci/metal_run.py), and so is
its folder's name: the imported folder is named with letters, digits and
`._+-` only (`folder_name`), since the name reaches progress lines, the
report's tables and rescore.json; what it recorded reaches them too, so a
recorded number is kept only when finite and a recorded reason only as one
printable line. A folder already in OUT is read without following links and
is replaced only when it is an earlier import of the same source.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from mlxsci.import_metal_sci import records
from mlxsci.import_metal_sci.convert import convert_source
from mlxsci.import_metal_sci.metal_run import (
    MetalSciRun,
    RecordedIteration,
    UnreadableFile,
    parse_json,
    read_run,
    read_text,
    shown,
)
from mlxsci.import_metal_sci.recorded_errors import signature_error
from mlxsci.search import manifest
from mlxsci.storage.cache import atomic_write_bytes, atomic_write_json
from mlxsci.task import load_task

# History record fields kept from Metal-Sci's history.json, with their types.
_HISTORY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "compile_ok": bool,
    "correct": bool,
    "score": (int, float),
    "fail_reason": str,
    "elapsed_s": (int, float),
    "is_new_best": bool,
}
_SIZE_FIELDS = ("label", "correct", "gpu_seconds", "fraction_of_ceiling")
MAX_FOLDER_CHARS = 120  # of an imported run's folder name
MAX_REASON_CHARS = 2000  # of a recorded fail reason
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def folder_name(name: str) -> str:
    """The imported folder's name for a source folder named `name`: a folder
    name from a download may hold a newline, a terminal escape, LaTeX or
    Markdown, or be `rescore.json` (which would stop --rescore writing its
    file); every character but letters, digits and `._+-` becomes `_`, no
    leading dot (a hidden folder, or a staging folder's name), at most
    MAX_FOLDER_CHARS (a staging name adds ~35 to a 255-byte limit)."""
    safe = _UNSAFE.sub("_", name).lstrip(".-")[:MAX_FOLDER_CHARS] or "run"
    return "run_" + safe if safe.lower().startswith("rescore") else safe


def one_line(text, limit: int = MAX_REASON_CHARS) -> str | None:
    """A recorded text (a fail reason) as one printable line, or None: it is
    printed by --rescore's progress lines and shown in the report."""
    if not isinstance(text, str):
        return None
    return shown(" ".join(text[: limit * 2].split()))[:limit]


@dataclass
class Imported:
    """What importing one run did: its folder, and counts for the progress line."""

    source: Path
    out: Path
    action: str  # imported | already imported
    candidates: int = 0
    converted: int = 0
    not_converted: int = 0

    def line(self) -> str:
        name = shown(self.source.name)  # a downloaded folder's name: newlines, escapes
        if self.action != "imported":
            return f"{name}: {self.action} ({shown(self.out)})"
        return (
            f"{name}: imported to {shown(self.out)}: {self.candidates} source(s), "
            f"{self.converted} converted, {self.not_converted} not converted"
        )


def recorded_sizes(result: dict | None) -> list[dict]:
    sizes = result.get("sizes") if isinstance(result, dict) else None
    if not isinstance(sizes, list):
        return []
    kept = []
    for s in sizes[:16]:
        if isinstance(s, dict):
            kept.append({k: _plain(s.get(k)) for k in _SIZE_FIELDS})
    return kept


def _plain(value):
    """A size record's value: a bool, a finite number, a short printable
    label, else None."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return records.finite_number(value)
    return one_line(value, 200)


def recorded_block(it: RecordedIteration) -> dict:
    """import.json's "recorded" for one iteration: the verdict and figures
    its result (or history record) holds, type-checked."""
    result = it.result if isinstance(it.result, dict) else None
    source = result or it.history or {}
    verdict = records.recorded_verdict(result) if result else None
    reason = source.get("fail_reason")
    in_signature = (
        signature_error(it.source, reason)
        if verdict == records.COMPILE_ERROR and isinstance(reason, str)
        else None
    )
    return {
        "verdict": verdict,
        "score": records.finite_number(source.get("score")),
        "fail_reason": one_line(reason),
        "is_new_best": (it.history or {}).get("is_new_best") is True,
        "sizes": recorded_sizes(result),
        # Metal's only errors lie in the kernel's signature, which MLX writes
        # (mlxsci/import_metal_sci/recorded_errors.py): the first, or None.
        "signature_error": one_line(in_signature),
    }


def history_record(it: RecordedIteration, candidate_file: str | None) -> dict:
    """summary.json's history record for one iteration, marked recorded."""
    rec = it.history or it.result or {}
    out: dict = {"iteration": it.iteration, "role": it.role}
    for key, kind in _HISTORY_FIELDS.items():
        value = rec.get(key)
        if kind is bool:
            out[key] = value if isinstance(value, bool) else None
        elif kind is str:
            out[key] = one_line(value)
        else:
            out[key] = records.finite_number(value)
    out["source_path"] = candidate_file
    out["recorded"] = True
    return out


def _candidate_name(n: int) -> str:
    return "00_seed.metal" if n == 0 else f"{n:02d}_candidate.metal"


def import_iteration(task, it: RecordedIteration, folder: Path) -> dict:
    """Write one iteration's files; its import.json record."""
    nn = f"{it.iteration:02d}"
    entry: dict = {
        "iteration": it.iteration,
        "role": it.role,
        "original": None,
        "candidate": None,
        "reason": None,
        "notes": [],
        "recorded": recorded_block(it),
        # files of the iteration that were there but not read (a link, a FIFO,
        # over a cap, not JSON): the docs promise them here, not only absent
        "problems": list(it.problems),
    }
    for name, text in it.texts.items():
        atomic_write_bytes(folder / f"{nn}_{name}.md", text.encode())
    if isinstance(it.result, dict) and it.iteration > 0:
        atomic_write_json(folder / f"{nn}_recorded_result.json", it.result)
    if it.source is None:
        entry["reason"] = (
            shown(it.missing)
            if it.missing
            else (
                "skipped: the model's answer held no code block"
                if it.role == "skipped"
                else "no source recorded"
            )
        )
        return entry
    original = f"{nn}_original.metal"
    atomic_write_bytes(folder / original, it.source.encode())
    entry["original"] = original
    conversion = convert_source(task, it.source)
    # a reason or note may quote the source (a string literal's right-to-left
    # override, say): --rescore prints reasons, so each is one printable line
    entry["notes"] = [shown(note) for note in conversion.notes]
    if conversion.text is None:
        entry["reason"] = shown(f"not converted: {conversion.reason}")
        return entry
    entry["candidate"] = _candidate_name(it.iteration)
    atomic_write_bytes(folder / entry["candidate"], conversion.text.encode())
    return entry


def recorded_summary(run: MetalSciRun, held_out: dict | None = None) -> dict:
    s = run.summary
    return {
        "chip": run.chip,
        "seed_score": records.finite_number(s.get("seed_score")),
        "best_score": records.finite_number(s.get("best_score")),
        "improvement": records.finite_number(s.get("improvement")),
        "best_iteration": run.best_iteration,
        "n_iterations": records.finite_number(s.get("n_iterations")),
        # the best at the held-out, as the results folder's logs recorded it
        "held_out": held_out,
    }


def write_run(run: MetalSciRun, folder: Path, held_out: dict | None = None) -> tuple[int, int, int]:
    """Every file of the imported run into `folder`; (sources, converted, not)."""
    task = load_task(run.task)
    entries = [import_iteration(task, it, folder) for it in run.iterations]
    for name, text in run.files.items():
        atomic_write_bytes(folder / f"recorded_{name}", text.encode())
    sources = sum(1 for e in entries if e["original"])
    converted = sum(1 for e in entries if e["candidate"])
    identity = {"task": run.task, "model": run.model}
    atomic_write_json(
        folder / "run.json",
        {**identity, "imported": True, "source_format": records.SOURCE_FORMAT,
         "source": str(run.path.resolve()), "chip": run.chip},
    )  # fmt: skip
    atomic_write_json(
        folder / records.IMPORT_FILE,
        {"version": records.IMPORT_VERSION, "source_format": records.SOURCE_FORMAT,
         "source": str(run.path.resolve()), **identity, "chip": run.chip,
         "recorded_best_iteration": run.best_iteration, "problems": run.problems,
         "iterations": entries},
    )  # fmt: skip
    counts = {"candidates": sources, "converted": converted, "not_converted": sources - converted}
    history = [
        history_record(it, e["candidate"]) for it, e in zip(run.iterations, entries, strict=True)
    ]
    summary = {
        **identity,
        "iterations": sum(1 for it in run.iterations if it.iteration > 0),
        "imported": {"format": records.SOURCE_FORMAT, "source": str(run.path.resolve()),
                     "chip": run.chip, **counts},
        "recorded": recorded_summary(run, held_out),
        "seed_score": None, "best_score": None, "best_iteration": None,
        "history": history,
    }  # fmt: skip
    atomic_write_json(folder / "summary.json", summary)
    return sources, converted, sources - converted


def _source_of(folder: Path) -> str | None:
    """The source an earlier import into `folder` names, or None. OUT may
    have come with a download too: a folder that is a link is no import of
    ours (--force would delete through it), and run.json is read like a
    run's file, so that a FIFO there cannot hang the import."""
    if folder.is_symlink():
        return None
    try:
        doc = parse_json(read_text(folder / "run.json", 1 << 20), "run.json")
    except (OSError, UnreadableFile):
        return None
    return doc.get("source") if isinstance(doc, dict) and doc.get("imported") is True else None


def destination(out: Path, run: MetalSciRun) -> tuple[Path, bool]:
    """Where the run goes under `out`, and whether it is already imported
    there (a sealed import of the same source folder)."""
    source = str(run.path.resolve())
    name = folder_name(run.name)
    for k in range(1, 1000):
        folder = out / (name if k == 1 else f"{name}-{k}")
        if not folder.exists() and not folder.is_symlink():
            return folder, False
        if _source_of(folder) == source:
            return folder, (folder / manifest.MANIFEST).exists()
    raise ValueError(f"{shown(out)} already holds 999 runs named {name}")


def import_run(
    path: Path, out: Path, force: bool = False, held_out: dict | None = None
) -> Imported:
    """Import the Metal-Sci run at `path` into `out` (NotAMetalSciRun when it
    is none); `held_out`: the figures its results folder recorded for its best
    at the held-out (mlxsci/import_metal_sci/recorded_held_out.py), if any."""
    run = read_run(path)
    folder, done = destination(out, run)
    if done and not force:
        return Imported(run.path, folder, "already imported")
    staging = out / f".{folder.name}.importing-{time.time_ns()}"
    staging.mkdir(parents=True)
    try:
        sources, converted, failed = write_run(run, staging, held_out)
        if folder.exists():
            shutil.rmtree(folder)  # a re-import (--force) of this same source
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    manifest.write(folder)
    return Imported(run.path, folder, "imported", sources, converted, failed)
