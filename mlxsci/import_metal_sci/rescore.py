"""Re-scoring imported runs under mlxsci's harness: every imported candidate
evaluated on a backend (all of mlxsci's checks: the worker sandbox, poisoned
outputs, input checksums, the reference, plausibility), its verdict set
beside the one its run recorded, into OUT/rescore.json (a list of records,
the shape in mlxsci/import_metal_sci/records.py).

Each run's recorded best is also evaluated at the held-out (the task's
published one, or a secret draw) beside the run's own seed, and, where it is
correct at the evaluated sizes, graded for transfer (mlxsci.transfer: the
same grading a search's best gets).

rescore.json is rewritten (atomically) after each record, and records
already there for the same backend and size set are not evaluated again: a
killed re-score continues where it stopped. Two re-scores of one folder at
once are refused (a lock beside rescore.json).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlxsci import held_out
from mlxsci.backends import backend_class
from mlxsci.evaluation.comparison import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.import_metal_sci import records
from mlxsci.import_metal_sci.metal_run import MAX_SOURCE_BYTES, UnreadableFile, read_text
from mlxsci.storage import locks
from mlxsci.storage.cache import atomic_write_json
from mlxsci.task import Size, Task, load_task
from mlxsci.transfer.measurement import judge_transfer

REASON_CHARS = 500  # of a fail reason kept in a record (the harness bounds it already)
HELD_OUT_MODES = (*held_out.MODES, "none")


@dataclass(frozen=True)
class Settings:
    backend: str
    size_set: str  # the sizes every candidate is evaluated at
    held_out: str  # metal-sci | secret | none: the recorded best's held-out
    transfer: bool  # grade the recorded best's transfer
    timeout: float | None = None


@dataclass
class Item:
    """One imported candidate to re-score."""

    run: str
    folder: Path
    task: str
    entry: dict  # its import.json record
    recorded_best: bool
    seed_file: str | None  # the run's converted seed, for the held-out and transfer


def imported_runs(out: Path) -> list[Path]:
    """The imported run folders directly under `out` (those with import.json)."""
    if not out.is_dir():
        raise ValueError(f"{out} is not a folder of imported runs")
    return sorted(d for d in out.iterdir() if (d / records.IMPORT_FILE).is_file())


def read_import(folder: Path) -> dict:
    """An imported run's import.json, checked for the fields re-scoring reads."""
    try:
        doc = json.loads((folder / records.IMPORT_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{folder / records.IMPORT_FILE} is unreadable ({exc})") from None
    entries = doc.get("iterations") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not isinstance(doc.get("task"), str):
        raise ValueError(f"{folder / records.IMPORT_FILE} is not an import record")
    return doc


def plan(out: Path) -> list[Item]:
    """Every imported candidate under `out`, in run then iteration order
    (skipped iterations are no candidates)."""
    items = []
    for folder in imported_runs(out):
        doc = read_import(folder)
        best = doc.get("recorded_best_iteration")
        entries = [e for e in doc["iterations"] if isinstance(e, dict)]
        seed = next((e.get("candidate") for e in entries if e.get("iteration") == 0), None)
        for e in entries:
            if e.get("role") == "skipped" and not e.get("original"):
                continue
            it = e.get("iteration")
            items.append(Item(folder.name, folder, doc["task"], e, it == best, seed))
    return items


def load_records(path: Path, say: Callable[[str], None]) -> list[dict]:
    """rescore.json's records (those shaped like records); [] when there is
    none. A file that is not a list of records is set aside, not trusted."""
    if not path.exists():
        return []
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        found = None
    if not isinstance(found, list):
        aside = path.with_name(path.name + ".unreadable")
        path.replace(aside)
        say(f"re-score: {path} was not a list of records: moved to {aside}, starting afresh")
        return []
    return [r for r in found if isinstance(r, dict) and _key_of(r) is not None]


def _key_of(rec: dict):
    key = (rec.get("run"), rec.get("iteration"), rec.get("backend"), rec.get("sizes"))
    return key if all(isinstance(k, (str, int)) for k in key) else None


def _source(item: Item, name: str | None) -> str | None:
    if not name:
        return None
    try:
        return read_text(item.folder / name, MAX_SOURCE_BYTES)
    except (UnreadableFile, OSError):
        return None


def _verdict(ev) -> tuple[str, float | None, str | None]:
    verdict = records.mlxsci_verdict(ev.compile_ok, ev.correct, ev.fail_reason)
    reason = (ev.fail_reason or "")[:REASON_CHARS] or None
    return verdict, (ev.score if verdict == records.CORRECT else None), reason


def _explain(recorded: str | None, mlxsci: str | None, mlx_reason: str | None, entry: dict) -> str:
    if mlxsci is None:
        return entry.get("reason") or "not evaluated"
    if recorded is None:
        return f"no recorded verdict; mlxsci: {mlx_reason or mlxsci}"
    if recorded == mlxsci:
        return f"both {mlxsci}" + (f"; mlxsci: {mlx_reason}" if mlx_reason else "")
    rec_reason = entry.get("recorded", {}).get("fail_reason")
    parts = [f"mlxsci: {mlx_reason}" if mlx_reason else f"mlxsci: {mlxsci}"]
    if rec_reason:
        parts.append(f"recorded: {str(rec_reason)[:REASON_CHARS]}")
    return "; ".join(parts)


class Rescorer:
    """Evaluates items with one backend's settings."""

    def __init__(self, settings: Settings, say: Callable[[str], None]):
        self.settings = settings
        self.say = say

    def evaluate(self, task: Task, source: str, filename: str, sizes: list[Size] | None = None):
        s = self.settings
        return evaluate(
            task.name, source, backend=s.backend, size_set=s.size_set, sizes=sizes,
            filename=filename, dialect="metal", timeout=s.timeout,
        )  # fmt: skip

    def record(self, item: Item) -> dict:
        task = load_task(item.task)
        entry = item.entry
        recorded = entry.get("recorded", {}).get("verdict")
        recorded = recorded if recorded in records.VERDICTS else None
        rec = {
            "run": item.run, "iteration": entry.get("iteration"), "recorded": recorded,
            "mlxsci": None, "reason": "", "recorded_score": _number(entry, "score"),
            "mlxsci_score": None, "backend": self.settings.backend,
            "sizes": self.settings.size_set, "recorded_best": item.recorded_best,
            "held_out": None, "transfer": None,
        }  # fmt: skip
        source = _source(item, entry.get("candidate"))
        if source is None:
            rec["reason"] = _explain(recorded, None, None, entry)
            return rec
        ev = self.evaluate(task, source, str(item.folder / entry["candidate"]))
        verdict, rec["mlxsci_score"], mlx_reason = _verdict(ev)
        rec["mlxsci"] = verdict
        rec["reason"] = _explain(recorded, verdict, mlx_reason, entry)
        if item.recorded_best:
            self.best_extras(rec, task, item, source, ev)
        return rec

    def best_extras(self, rec: dict, task: Task, item: Item, source: str, ev) -> None:
        """The recorded best's held-out verdict and transfer grade."""
        if self.settings.held_out == "none":
            return
        draw = held_out.begin(task, held_out.effective_mode(task, self.settings.held_out))
        sizes = held_out.held_out_sizes(task, draw)
        cand_file = str(item.folder / item.entry["candidate"])
        held = self.evaluate(task, source, cand_file, sizes)
        verdict, _, reason = _verdict(held)
        draw = held_out.reveal(task, draw)
        label = sizes[0].label if draw.mode == "metal-sci" else held_out.describe(draw.params)
        rec["held_out"] = {"label": label, "mode": draw.mode, "mlxsci": verdict,
                           "phi": held.phi, "reason": reason}  # fmt: skip
        seed = _source(item, item.seed_file) or task.seed("metal")
        if not (self.settings.transfer and ev.correct and item.entry.get("iteration")):
            return  # (a seed that stayed the best has no win over itself to grade)
        seed_file = str(item.folder / item.seed_file) if item.seed_file else "seed.metal"
        rec["transfer"] = self.transfer(task, source, cand_file, seed, seed_file, ev, held, sizes)

    def transfer(self, task, source, cand_file, seed, seed_file, ev, held, sizes) -> dict:
        s = self.settings

        def run(src: str, filename: str, at: list[Size], coverage: bool = False) -> dict:
            return evaluate(
                task.name, src, backend=s.backend, sizes=at, filename=filename,
                dialect="metal", timeout=s.timeout, coverage=coverage,
            ).to_json()  # fmt: skip

        def timed(baseline: str, candidate: str, at: list[Size]) -> dict:
            return compare(
                task.name, baseline, candidate, backend=s.backend, sizes=at,
                filenames=(seed_file, cand_file), dialect="metal", timeout=s.timeout,
                held_out=True,
            )  # fmt: skip

        search_sizes = list(task.size_set(s.size_set))
        judged = judge_transfer(
            task, source, seed, dialect="metal", search_sizes=search_sizes, held_out=sizes,
            evaluate=run, known={"candidate_in_dist": ev.to_json(),
                                 "candidate_held_out": held.to_json()},
            candidate_filename=cand_file, baseline_filename=seed_file, compare=timed,
        )  # fmt: skip
        return {"grade": judged["grade"], "reason": str(judged["reason"])[:REASON_CHARS]}


def _number(entry: dict, key: str) -> float | None:
    v = entry.get("recorded", {}).get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def progress_line(k: int, n: int, rec: dict) -> str:
    if rec["mlxsci"] is None:
        verdict = f"not evaluated: {rec['reason']}"
    elif rec["recorded"] == rec["mlxsci"]:
        verdict = f"{rec['mlxsci']} (agree)"
    else:
        verdict = f"{rec['mlxsci']} (DIFFER: {rec['reason']})"
    line = (
        f"[{k}/{n}] {rec['run']} iteration {rec['iteration']:02d}: recorded "
        f"{rec['recorded'] or '-'}, mlxsci {verdict}"
    )
    if rec.get("held_out"):
        line += f"; held-out {rec['held_out']['label']}: {rec['held_out']['mlxsci']}"
    if rec.get("transfer"):
        line += f"; transfer grade {rec['transfer']['grade']}"
    return line


def rescore(out: Path, settings: Settings, say: Callable[[str], None] | None = None) -> list[dict]:
    """Re-score every imported candidate under `out` not yet re-scored with
    these settings; the records of rescore.json, old and new."""
    say = say or (lambda line: print(line, file=sys.stderr))
    out = Path(out)
    items = plan(out)
    path = out / records.RESCORE_FILE
    with locks.hold(out / ".rescore.lock", "re-scoring imported runs"):
        kept = load_records(path, say)
        done = {_key_of(r) for r in kept}
        key = (settings.backend, settings.size_set)
        todo = [i for i in items if (i.run, i.entry.get("iteration"), *key) not in done]
        if len(todo) < len(items):
            say(f"re-score: resuming, {len(items) - len(todo)} of {len(items)} already re-scored")
        scorer = Rescorer(settings, say)
        for k, item in enumerate(todo, len(items) - len(todo) + 1):
            rec = scorer.record(item)
            kept.append(rec)
            atomic_write_json(path, kept)
            say(progress_line(k, len(items), rec))
    return kept


def default_size_set(backend: str) -> str:
    return backend_class(backend).default_size_set
