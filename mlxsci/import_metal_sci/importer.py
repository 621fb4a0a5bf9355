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
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from mlxsci.import_metal_sci import records
from mlxsci.import_metal_sci.convert import convert_source
from mlxsci.import_metal_sci.metal_run import MetalSciRun, RecordedIteration, read_run
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
        if self.action != "imported":
            return f"{self.source.name}: {self.action} ({self.out})"
        return (
            f"{self.source.name}: imported to {self.out}: {self.candidates} source(s), "
            f"{self.converted} converted, {self.not_converted} not converted"
        )


def recorded_sizes(result: dict | None) -> list[dict]:
    sizes = result.get("sizes") if isinstance(result, dict) else None
    if not isinstance(sizes, list):
        return []
    kept = []
    for s in sizes[:16]:
        if isinstance(s, dict):
            kept.append({k: s.get(k) for k in _SIZE_FIELDS if _plain(s.get(k))})
    return kept


def _plain(value) -> bool:
    return (
        value is None
        or isinstance(value, (bool, int, float))
        or (isinstance(value, str) and len(value) <= 200)
    )


def recorded_block(it: RecordedIteration) -> dict:
    """import.json's "recorded" for one iteration: the verdict and figures
    its result (or history record) holds, type-checked."""
    result = it.result if isinstance(it.result, dict) else None
    source = result or it.history or {}
    score = source.get("score")
    reason = source.get("fail_reason")
    return {
        "verdict": records.recorded_verdict(result) if result else None,
        "score": score if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
        "fail_reason": reason[:2000] if isinstance(reason, str) else None,
        "is_new_best": (it.history or {}).get("is_new_best") is True,
        "sizes": recorded_sizes(result),
    }


def history_record(it: RecordedIteration, candidate_file: str | None) -> dict:
    """summary.json's history record for one iteration, marked recorded."""
    rec = it.history or it.result or {}
    out: dict = {"iteration": it.iteration, "role": it.role}
    for key, kind in _HISTORY_FIELDS.items():
        value = rec.get(key)
        ok = (
            isinstance(value, bool)
            if kind is bool
            else (isinstance(value, kind) and not isinstance(value, bool))
        )
        out[key] = value if ok else None
    if isinstance(out.get("fail_reason"), str):
        out["fail_reason"] = out["fail_reason"][:2000]
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
    }
    for name, text in it.texts.items():
        atomic_write_bytes(folder / f"{nn}_{name}.md", text.encode())
    if isinstance(it.result, dict) and it.iteration > 0:
        atomic_write_json(folder / f"{nn}_recorded_result.json", it.result)
    if it.source is None:
        entry["reason"] = it.missing or (
            "skipped: the model's answer held no code block"
            if it.role == "skipped"
            else "no source recorded"
        )
        return entry
    original = f"{nn}_original.metal"
    atomic_write_bytes(folder / original, it.source.encode())
    entry["original"] = original
    conversion = convert_source(task, it.source)
    entry["notes"] = list(conversion.notes)
    if conversion.text is None:
        entry["reason"] = f"not converted: {conversion.reason}"
        return entry
    entry["candidate"] = _candidate_name(it.iteration)
    atomic_write_bytes(folder / entry["candidate"], conversion.text.encode())
    return entry


def recorded_summary(run: MetalSciRun) -> dict:
    s = run.summary

    def number(key):
        v = s.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return {
        "chip": run.chip,
        "seed_score": number("seed_score"),
        "best_score": number("best_score"),
        "improvement": number("improvement"),
        "best_iteration": run.best_iteration,
        "n_iterations": number("n_iterations"),
    }


def write_run(run: MetalSciRun, folder: Path) -> tuple[int, int, int]:
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
        "recorded": recorded_summary(run),
        "seed_score": None, "best_score": None, "best_iteration": None,
        "history": history,
    }  # fmt: skip
    atomic_write_json(folder / "summary.json", summary)
    return sources, converted, sources - converted


def _source_of(folder: Path) -> str | None:
    try:
        doc = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return None
    return doc.get("source") if isinstance(doc, dict) and doc.get("imported") is True else None


def destination(out: Path, run: MetalSciRun) -> tuple[Path, bool]:
    """Where the run goes under `out`, and whether it is already imported
    there (a sealed import of the same source folder)."""
    source = str(run.path.resolve())
    for k in range(1, 1000):
        folder = out / (run.name if k == 1 else f"{run.name}-{k}")
        if not folder.exists():
            return folder, False
        if _source_of(folder) == source:
            return folder, (folder / manifest.MANIFEST).exists()
    raise ValueError(f"{out} already holds 999 runs named {run.name}")


def import_run(path: Path, out: Path, force: bool = False) -> Imported:
    """Import the Metal-Sci run at `path` into `out` (NotAMetalSciRun when it is none)."""
    run = read_run(path)
    folder, done = destination(out, run)
    if done and not force:
        return Imported(run.path, folder, "already imported")
    staging = out / f".{folder.name}.importing-{time.time_ns()}"
    staging.mkdir(parents=True)
    try:
        sources, converted, failed = write_run(run, staging)
        if folder.exists():
            shutil.rmtree(folder)  # a re-import (--force) of this same source
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    manifest.write(folder)
    return Imported(run.path, folder, "imported", sources, converted, failed)
