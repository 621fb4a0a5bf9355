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
already there for the same backend, modelled GPU and size set are not evaluated again: a
killed re-score continues where it stopped. Two re-scores of one folder at
once are refused (a lock beside rescore.json).
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mlxsci import held_out
from mlxsci.backends import backend_class, backend_info
from mlxsci.evaluation.comparison import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.import_metal_sci import records
from mlxsci.import_metal_sci.metal_run import (
    MAX_JSON_BYTES,
    MAX_SOURCE_BYTES,
    UnreadableFile,
    parse_json,
    read_text,
    shown,
)
from mlxsci.search import manifest
from mlxsci.storage import locks
from mlxsci.storage.cache import atomic_write_json
from mlxsci.task import Size, Task, load_task, task_names
from mlxsci.transfer.measurement import judge_transfer

REASON_CHARS = 500  # of a fail reason kept in a record (the harness bounds it already)
HELD_OUT_MODES = (*held_out.MODES, "none")
# The sizes Metal-Sci judged at, as far as a re-score on the simulator can
# afford them: each task's first in-distribution size (every candidate
# Metal-Sci recorded ran there first), and for a recorded failure the
# in-distribution size its fail reason names (verdict_sizes).
METAL_SCI_SIZES = "metal-sci"
# Metal-Sci's size in a recorded fail reason: "... at size 64cube: ...".
_RECORDED_SIZE = re.compile(r"at size ([\w.]{1,60})")


@dataclass(frozen=True)
class Settings:
    backend: str
    size_set: str  # the sizes every candidate is evaluated at (or METAL_SCI_SIZES)
    held_out: str  # metal-sci | secret | none: the recorded best's held-out
    transfer: bool  # grade the recorded best's transfer
    timeout: float | None = None
    # The GPU the simulator models (--sim-gpu, else Metal's default); None on a GPU.
    sim_gpu: str | None = None
    # Candidates evaluated at once (--jobs); records do not depend on it.
    jobs: int = 1
    # Each recorded best and its seed also at the task's in-distribution
    # sizes, where Metal-Sci recorded its speedup (--in-dist).
    in_dist: bool = True
    # Timed runs per size where a recorded best and its seed are evaluated
    # beyond the sizes of the verdict (in-dist, held-out, the transfer's
    # second distribution); None: the backend's protocol. On the simulator
    # one is enough: its modelled clock gives the same inputs the same time,
    # and the checks (poisoned outputs, thread orders, the reference) all run.
    extra_timed_runs: int | None = None

    @property
    def key(self) -> tuple:
        """What a record made with these settings is filed under, besides its candidate."""
        return (self.backend, self.size_set, self.sim_gpu)


@dataclass
class Item:
    """One imported candidate to re-score."""

    run: str
    folder: Path
    task: str
    entry: dict  # its import.json record
    recorded_best: bool
    seed_file: str | None  # the run's converted seed, for the held-out and transfer


def verdict_sizes(task: Task, size_set: str, recorded_reason: str | None = None) -> list[Size]:
    """The sizes a candidate is judged at: the task's `size_set`, or with
    METAL_SCI_SIZES its first in-distribution size and the in-distribution
    size Metal-Sci's `recorded_reason` says it failed at, if another."""
    if size_set != METAL_SCI_SIZES:
        return list(task.size_set(size_set))
    in_dist = list(task.size_set("in-dist"))
    failed = recorded_size(in_dist, recorded_reason)
    return [s for k, s in enumerate(in_dist) if k == 0 or s is failed]


def recorded_size(sizes: list[Size], recorded_reason: str | None) -> Size | None:
    """The one size of `sizes` whose parameters hold every number of the size
    a recorded fail reason names (Metal-Sci labels its sizes otherwise:
    "64cube", "d32_K1024", "N1728_M5_steps20"); None where none or several do."""
    m = _RECORDED_SIZE.search((recorded_reason or "")[:4096])
    if m is None:
        return None
    numbers = {int(n) for n in re.findall(r"\d{1,9}", m.group(1))}
    fits = [
        s for s in sizes
        if numbers <= {v for v in s.params.values() if isinstance(v, int)}
    ]  # fmt: skip
    return fits[0] if numbers and len(fits) == 1 else None


def imported_runs(out: Path, say: Callable[[str], None] | None = None) -> list[Path]:
    """The run folders directly under `out` that this machine imported: an
    import.json, and a manifest this machine's key signed with every file as
    it was sealed. A folder that came from elsewhere (a downloaded import
    folder), or was edited since, is passed over with a note: its import.json
    could name any candidate and any recorded verdict."""
    if not out.is_dir():
        raise ValueError(f"{shown(out)} is not a folder of imported runs")
    found = []
    for d in sorted(out.iterdir()):
        if d.is_symlink() or not (d / records.IMPORT_FILE).is_file():
            continue
        status = manifest.check(d).status
        if status == manifest.SEALED:
            found.append(d)
        elif say is not None:
            say(
                f"re-score: {shown(d.name)} passed over: its files are not as this machine's "
                f"import sealed them ({status}); import its Metal-Sci run here to re-score it"
            )
    return found


_CANDIDATE_NAME = re.compile(r"^(?:00_seed|\d{2,5}_candidate)\.metal$")


def _entry_problem(e) -> str | None:
    """Why an import.json entry cannot be re-scored as it is (None: it can)."""
    if not isinstance(e, dict):
        return "not a record"
    it, recorded = e.get("iteration"), e.get("recorded")
    if not isinstance(it, int) or isinstance(it, bool) or not 0 <= it < 100_000:
        return "no iteration number"
    if e.get("candidate") is not None and not (
        isinstance(e["candidate"], str) and _CANDIDATE_NAME.match(e["candidate"])
    ):
        return "its candidate is not a file name of the run's own"
    if not isinstance(recorded, dict) or recorded.get("verdict") not in (*records.VERDICTS, None):
        return "its recorded block is not one"
    if not all(isinstance(e.get(k), (str, type(None))) for k in ("reason", "role", "original")):
        return "a field of the wrong type"
    return None


def read_import(folder: Path) -> dict:
    """An imported run's import.json (read as any run file: no link, capped),
    its iterations those entries that are shaped as the importer writes them."""
    path = folder / records.IMPORT_FILE
    try:
        doc = parse_json(read_text(path, MAX_JSON_BYTES), path.name)
    except (UnreadableFile, OSError) as exc:
        raise ValueError(f"{shown(path)} is unreadable ({shown(exc)})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{shown(path)} is not an import record")
    entries = doc.get("iterations")
    if not isinstance(entries, list) or not isinstance(doc.get("task"), str):
        raise ValueError(f"{shown(path)} is not an import record")
    if doc["task"] not in task_names():
        raise ValueError(f"{shown(path)} names no task of this suite")
    return {**doc, "iterations": [e for e in entries if _entry_problem(e) is None]}


def plan(out: Path, say: Callable[[str], None] | None = None) -> list[Item]:
    """Every imported candidate under `out`, in run then iteration order
    (skipped iterations are no candidates). ValueError when `out` holds no
    run this machine imported."""
    folders = imported_runs(out, say)
    if not folders:
        raise ValueError(
            f"{shown(out)} holds no imported run (import Metal-Sci runs into it first)"
        )
    items = []
    for folder in folders:
        doc = read_import(folder)
        best = doc.get("recorded_best_iteration")
        entries = doc["iterations"]
        seed = next((e.get("candidate") for e in entries if e.get("iteration") == 0), None)
        for e in entries:
            if e.get("role") == "skipped" and not e.get("original"):
                continue
            it = e.get("iteration")
            items.append(Item(folder.name, folder, doc["task"], e, it == best, seed))
    return items


def load_records(path: Path, say: Callable[[str], None]) -> list[dict]:
    """rescore.json's records that this machine made (record_trust: signed
    here, as they were written); [] when there is none. A file that is not a
    list of records, or holds any record this machine did not sign, is set
    aside (renamed), not trusted: a downloaded folder could hold verdicts
    mlxsci never gave."""
    if not path.exists() and not path.is_symlink():
        return []
    try:
        found = parse_json(read_text(path, records.MAX_RESCORE_BYTES), path.name)
    except (UnreadableFile, OSError):
        found = None
    kept = [r for r in found if _trusted(r)] if isinstance(found, list) else []
    if isinstance(found, list) and len(kept) == len(found):
        return kept
    aside = path.with_name(f"{path.name}.untrusted-{time.time_ns()}")
    path.replace(aside)
    what = (
        f"{len(found) - len(kept)} of its {len(found)} record(s) were not signed by this "
        "machine's re-score (forged, edited, or made elsewhere)"
        if isinstance(found, list)
        else "it was not a list of records"
    )
    say(f"re-score: {shown(path)}: {what}: moved to {shown(aside.name)}; those are made again")
    return kept


def _trusted(rec) -> bool:
    return (
        isinstance(rec, dict)
        and _key_of(rec) is not None
        and records.record_trust(rec) == records.SIGNED
    )


def _key_of(rec: dict):
    """(run, iteration, backend, sizes, sim_gpu): a record from before GPUs
    were modelled has none, so it is made again on the simulator."""
    key = (rec.get("run"), rec.get("iteration"), rec.get("backend"), rec.get("sizes"))
    gpu = rec.get("sim_gpu")
    if all(isinstance(k, (str, int)) for k in key) and isinstance(gpu, (str, type(None))):
        return (*key, gpu)
    return None


def _source(item: Item, name: str | None) -> str | None:
    if not (isinstance(name, str) and _CANDIDATE_NAME.match(name)):
        return None  # only the run's own candidate files, never a path
    try:
        return read_text(item.folder / name, MAX_SOURCE_BYTES)
    except (UnreadableFile, OSError):
        return None


def _digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def _done(rec: dict, item: Item) -> bool:
    """Whether a signed record still stands for the item: the candidate it
    judged is the one the run holds now."""
    return rec.get("candidate_sha256") == _digest(_source(item, item.entry.get("candidate")))


def _verdict_and_reason(candidate: dict) -> tuple[str, str | None]:
    """mlxsci's verdict on an evaluation's candidate record
    (Evaluation.to_json()["candidate"]) and its reason, cut for a record."""
    stopped = candidate.get("not_judged")
    verdict = records.mlxsci_verdict(
        candidate["compile_ok"], candidate["correct"], candidate["fail_reason"], stopped
    )
    reason = f"not judged: {stopped}" if stopped else candidate["fail_reason"]
    return verdict, (reason or "")[:REASON_CHARS] or None


def _verdict(ev) -> tuple[str, float | None, str | None]:
    verdict, reason = _verdict_and_reason(
        {"compile_ok": ev.compile_ok, "correct": ev.correct, "fail_reason": ev.fail_reason,
         "not_judged": ev.not_judged}
    )  # fmt: skip
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
    """Evaluates items with one backend's settings. Safe to share between
    threads: each evaluation runs in a worker process of its own."""

    def __init__(self, settings: Settings):
        self.settings = settings
        # A run's seed is evaluated for its transfer grade (at the search
        # sizes, the held-out, the second distribution); runs of one task
        # share the seed's text, so each evaluation of one text at one set
        # of sizes is made once: (sha256, sizes) -> Evaluation.to_json().
        self._seed_results: dict[tuple, dict] = {}
        self._seed_locks: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()

    def seed_evaluation(
        self, source: str, sizes: list[Size], make: Callable[[], dict], extra: bool = False
    ) -> dict:
        """`make()`'s result for the seed text `source` at `sizes` (`extra`:
        with the extras' protocol), made once however many runs ask (the
        others wait for it)."""
        at = tuple((s.label, repr(sorted(s.params.items()))) for s in sizes)
        key = (_digest(source), at, extra)
        with self._lock:
            lock = self._seed_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._seed_results:
                self._seed_results[key] = make()
            return self._seed_results[key]

    def evaluate(
        self, task: Task, source: str, filename: str, sizes: list[Size], coverage: bool = False,
        extra: bool = False,
    ):  # fmt: skip
        """`source` at `sizes`; `extra`: beyond the verdict's sizes, with the
        settings' extra_timed_runs."""
        s = self.settings
        return evaluate(
            task.name, source, backend=s.backend, sizes=sizes, filename=filename,
            dialect="metal", timeout=s.timeout, coverage=coverage, sim_gpu=s.sim_gpu,
            n_measure=s.extra_timed_runs if extra else None,
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
            "sizes": self.settings.size_set, "sim_gpu": self.settings.sim_gpu,
            "recorded_best": item.recorded_best,
            "held_out": None, "transfer": None,
            "extra_timed_runs": self.settings.extra_timed_runs,
        }  # fmt: skip
        in_signature = entry.get("recorded", {}).get("signature_error")
        # Metal's error lies in the kernel's signature, which MLX writes: apart in the audit.
        rec["recorded_signature_error"] = in_signature if isinstance(in_signature, str) else None
        source = _source(item, entry.get("candidate"))
        rec["candidate_sha256"] = _digest(source)
        if source is None:
            rec["reason"] = _explain(recorded, None, None, entry)
            return rec
        sizes = verdict_sizes(task, self.settings.size_set, _recorded_reason(entry))
        ev = self.evaluate(task, source, str(item.folder / entry["candidate"]), sizes)
        verdict, rec["mlxsci_score"], mlx_reason = _verdict(ev)
        rec["mlxsci"] = verdict
        rec["reason"] = _explain(recorded, verdict, mlx_reason, entry)
        if item.recorded_best:
            self.best_extras(rec, task, item, source, ev, sizes)
        return rec

    def best_extras(
        self, rec: dict, task: Task, item: Item, source: str, ev, judged_at: list[Size]
    ) -> None:
        """The recorded best beside its run's seed where Metal-Sci recorded
        their figures: at the task's in-distribution sizes (its speedup over
        the seed, `in_dist`, unless the settings leave it out) and at the
        held-out (`held_out`, with the seed's Phi); then its transfer grade
        at the sizes it was judged at. The seed's evaluations are made once per
        seed text (seed_evaluation)."""
        if self.settings.held_out == "none":
            return
        seed = _source(item, item.seed_file) or task.seed("metal")
        seed_file = str(item.folder / item.seed_file) if item.seed_file else "seed.metal"
        cand_file = str(item.folder / item.entry["candidate"])
        if self.settings.in_dist:
            in_dist = list(task.size_set("in-dist"))
            judged_in_dist = self.settings.size_set == "in-dist"  # the verdict's sizes already
            best_in = (
                ev.to_json()
                if judged_in_dist
                else self.evaluate(task, source, cand_file, in_dist, extra=True).to_json()
            )
            seed_in = self.seed_run(task, seed, seed_file, in_dist, extra=not judged_in_dist)
            rec["in_dist"] = _beside_seed(best_in, seed_in, "score")
        draw = held_out.begin(task, held_out.effective_mode(task, self.settings.held_out))
        sizes = held_out.held_out_sizes(task, draw)
        held = self.evaluate(task, source, cand_file, sizes, extra=True).to_json()
        seed_held = self.seed_run(task, seed, seed_file, sizes, extra=True)
        draw = held_out.reveal(task, draw)
        label = sizes[0].label if draw.mode == "metal-sci" else held_out.describe(draw.params)
        rec["held_out"] = {
            "label": label,
            "mode": draw.mode,
            **_beside_seed(held, seed_held, "phi"),
        }
        if not (self.settings.transfer and ev.correct and item.entry.get("iteration")):
            return  # (a seed that stayed the best has no win over itself to grade)
        known = {"candidate_in_dist": ev.to_json(), "candidate_held_out": held,
                 "baseline_held_out": seed_held}  # fmt: skip
        rec["transfer"] = self.transfer(
            task, source, cand_file, seed, seed_file, known, sizes, judged_at
        )

    def seed_run(
        self, task: Task, seed: str, seed_file: str, sizes: list[Size], extra: bool = False
    ) -> dict:
        """The seed's evaluation at `sizes` (Evaluation.to_json()), made once per text."""
        return self.seed_evaluation(
            seed, sizes, lambda: self.evaluate(task, seed, seed_file, sizes, extra=extra).to_json(),
            extra,
        )  # fmt: skip

    def transfer(self, task, source, cand_file, seed, seed_file, known, sizes, search_sizes):
        s = self.settings

        def run(src: str, filename: str, at: list[Size], coverage: bool = False) -> dict:
            extra = at != search_sizes  # the verdict's own sizes keep the full protocol
            if src == seed and not coverage:
                return self.seed_run(task, src, filename, at, extra)
            return self.evaluate(task, src, filename, at, coverage, extra).to_json()

        def timed(baseline: str, candidate: str, at: list[Size]) -> dict:
            return compare(
                task.name, baseline, candidate, backend=s.backend, sizes=at,
                filenames=(seed_file, cand_file), dialect="metal", timeout=s.timeout,
                held_out=True, sim_gpu=s.sim_gpu,
            )  # fmt: skip

        judged = judge_transfer(
            task, source, seed, dialect="metal", search_sizes=search_sizes, held_out=sizes,
            evaluate=run, known=known, candidate_filename=cand_file,
            baseline_filename=seed_file,
            # A modelled clock no neighbour moves needs no interleaving: the
            # ratio of the two evaluations' figures is the speedup.
            compare=None if backend_info(s.backend).modelled else timed,
        )  # fmt: skip
        return {"grade": judged["grade"], "reason": str(judged["reason"])[:REASON_CHARS]}


def _beside_seed(best: dict, seed: dict, figure: str) -> dict:
    """A record's block for the recorded best beside its run's seed at one
    place, from their Evaluation.to_json(): the best's verdict and `figure`
    (score: S; phi: Phi), the seed's, and their ratio (the speedup)."""
    b, s = best["candidate"], seed["candidate"]
    verdict, reason = _verdict_and_reason(b)
    mine = b[figure] if b["correct"] else None
    theirs = s[figure] if s["correct"] else None
    return {
        "mlxsci": verdict,
        figure: mine,
        f"seed_{figure}": theirs,
        "speedup": mine / theirs if mine is not None and theirs else None,
        "reason": reason,
    }


def _recorded_reason(entry: dict) -> str | None:
    reason = entry.get("recorded", {}).get("fail_reason")
    return reason if isinstance(reason, str) else None


def _number(entry: dict, key: str) -> float | None:
    v = entry.get("recorded", {}).get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def progress_line(k: int, n: int, rec: dict) -> str:
    """One record as a line; the run's name and the reasons are shown plain
    (a folder name or a recorded reason may hold a newline or an escape)."""
    reason = shown(rec["reason"])
    if rec["mlxsci"] is None:
        verdict = f"not evaluated: {reason}"
    elif rec["recorded"] == rec["mlxsci"]:
        verdict = f"{rec['mlxsci']} (agree)"
    else:
        verdict = f"{rec['mlxsci']} (DIFFER: {reason})"
    line = (
        f"[{k}/{n}] {shown(rec['run'])} iteration {rec['iteration']:02d}: recorded "
        f"{rec['recorded'] or '-'}, mlxsci {verdict}"
    )
    if rec.get("held_out"):
        line += f"; held-out {shown(rec['held_out']['label'])}: {rec['held_out']['mlxsci']}"
    if rec.get("transfer"):
        line += f"; transfer grade {rec['transfer']['grade']}"
    return line


def rescore(out: Path, settings: Settings, say: Callable[[str], None] | None = None) -> list[dict]:
    """Re-score every imported candidate under `out` not yet re-scored with
    these settings; the records of rescore.json, old and new, each signed
    with this machine's cache key."""
    say = say or (lambda line: print(line, file=sys.stderr))
    out = Path(out)
    path = out / records.RESCORE_FILE
    items = plan(out, say)  # sealed imports only: reading them needs no lock
    with locks.hold(out / ".rescore.lock", "re-scoring imported runs"):
        kept = load_records(path, say)
        done = {_key_of(r): r for r in kept}
        key = settings.key

        def finished(i: Item) -> bool:
            rec = done.get((i.run, i.entry.get("iteration"), *key))
            if rec is None or not _done(rec, i):
                return False
            # a recorded best made before bests were taken to in-dist is made again
            wanted = i.recorded_best and settings.held_out != "none" and settings.in_dist
            return not wanted or "in_dist" in rec

        todo = [i for i in items if not finished(i)]
        stale = {(i.run, i.entry.get("iteration"), *key) for i in todo}
        kept = [r for r in kept if _key_of(r) not in stale]  # a candidate changed since
        if len(todo) < len(items):
            say(f"re-score: resuming, {len(items) - len(todo)} of {len(items)} already re-scored")
        scorer = Rescorer(settings)
        order: dict[tuple, int] = {
            (i.run, i.entry.get("iteration")): n for n, i in enumerate(items)
        }
        written = threading.Lock()
        made = [len(items) - len(todo)]

        def one(item: Item) -> None:
            rec = records.sign_record(scorer.record(item))
            with written:  # each record saved as soon as it is made, in import order
                kept.append(rec)
                kept.sort(key=lambda r: order.get((r.get("run"), r.get("iteration")), -1))
                atomic_write_json(path, kept)
                made[0] += 1
                say(progress_line(made[0], len(items), rec))

        run_items(one, longest_first(todo) if settings.jobs > 1 else todo, settings.jobs)
    return kept


def longest_first(todo: list[Item]) -> list[Item]:
    """The recorded bests first, each a long job (its in-dist and held-out
    sizes, beside its seed's), then the rest in import order: started early,
    the long jobs overlap the short ones instead of ending the re-score with
    one CPU busy and the others idle."""
    return sorted(todo, key=lambda item: not item.recorded_best)


def run_items(work: Callable[[Item], None], todo: list[Item], jobs: int) -> None:
    """`work` on every item, `jobs` at a time (each evaluation is a worker
    process of its own, so threads are enough to keep `jobs` CPUs busy); the
    first exception stops the rest and is raised."""
    if jobs <= 1:
        for item in todo:
            work(item)
        return
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(work, item) for item in todo]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def default_size_set(backend: str) -> str:
    """A GPU judges at all of Metal-Sci's in-distribution sizes; the simulator,
    slower by far at those, at METAL_SCI_SIZES."""
    kind = backend_class(backend)
    return METAL_SCI_SIZES if backend_info(kind.name).modelled else kind.default_size_set


def default_extra_timed_runs(backend: str) -> int | None:
    """One timed run per size beyond the verdict's on the simulator (its
    modelled clock repeats itself); a GPU's own protocol elsewhere."""
    return 1 if backend_info(backend).modelled else None
