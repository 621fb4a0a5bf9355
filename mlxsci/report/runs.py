"""Finding and loading search run directories, and the per-run figures a
report is made of (speedup, improved, outcome label, which run stands for a
cell, the transfer grade and its strongest evidence), whether a run's files
are still those it finished with (mlxsci.search.manifest: a tampered run is
named on stderr and marked), and whether its secret held-out draw verifies
against the commitment made at its start (mlxsci.held_out: an unverified run
is named on stderr and marked), and whether it is an imported run
(python -m mlxsci.import_metal_sci: figures recorded on another chip by
another harness, shown as such and never as mlxsci's measurements).

Separate from the tables and the plots because both read runs through it:
mlxsci.report.tables and mlxsci.report.plots import it, never the other way round. The
rules (a sweep's index.json, unfinished runs skipped with a note, one run per
task, model and proposer seed) are described in mlxsci/report/build.py's docstring.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlxsci import held_out
from mlxsci.evaluation.verdicts import IMPROVED, assess_summary
from mlxsci.import_metal_sci import records as import_records
from mlxsci.search import manifest as run_manifest
from mlxsci.search.outcomes import classify_summary
from mlxsci.task import load_task


def warn(msg: str) -> None:
    """A report's warning, one line on stderr."""
    print(f"report: {msg}", file=sys.stderr)


# -- loading ----------------------------------------------------------------


def _warn_tampered(run_dir: Path, integrity: run_manifest.Integrity, then: str) -> None:
    shown = integrity.problems[:6] + (["..."] if len(integrity.problems) > 6 else [])
    warn(
        f"TAMPERED run {run_dir}: its files changed after the run finished "
        f"({'; '.join(shown)}); {then}"
    )


def _load_run(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    integrity = run_manifest.check(run_dir)
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        if integrity.tampered:  # a finished run (it has a manifest) lost its summary
            _warn_tampered(run_dir, integrity, "skipped")
        else:
            warn(f"skipping unfinished run {run_dir} (no summary.json)")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        warn(f"skipping {run_dir}: unreadable summary.json ({exc})")
        return None
    if not isinstance(summary, dict) or not all(
        isinstance(summary.get(k), str) for k in ("task", "model")
    ):
        warn(f"skipping {run_dir}: its summary.json is not a search summary (no task, model)")
        return None
    if integrity.tampered:
        _warn_tampered(
            run_dir,
            integrity,
            "marked tampered, left out of the main table and the plots "
            "(--include-tampered keeps it)",
        )
    _warn_transfer(run_dir, summary)
    spec = _run_spec(run_dir)
    summary["run_dir"] = str(run_dir)
    summary["_integrity"] = integrity.status
    summary["_mtime"] = path.stat().st_mtime
    summary["_seed"] = _run_seed(spec)
    # run.json's word on an import (the summary's own "imported" block is the other)
    summary["_spec_imported"] = spec.get("imported") is True
    summary["_spec_chip"] = spec.get("chip") if isinstance(spec.get("chip"), str) else None
    summary["_spec_format"] = (
        spec.get("source_format") if isinstance(spec.get("source_format"), str) else None
    )
    return summary


def _run_spec(run_dir: Path) -> dict:
    """The run's run.json ({} when it has none or it is not an object)."""
    try:
        spec = json.loads((run_dir / "run.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return spec if isinstance(spec, dict) else {}


def _run_seed(spec: dict):
    """The run's proposer seed (run.json; 0, the default, when it has none)."""
    seed = spec.get("seed", 0)
    return seed if isinstance(seed, (int, str)) and not isinstance(seed, bool) else 0


def _index_runs(index: Path) -> list[Path]:
    """The run directories a sweep's index.json lists; ValueError when the
    file is not such an index ({"runs": [{"path": ...}, ...]})."""
    try:
        entries = json.loads(index.read_text()).get("runs")
        paths = [index.parent / e["path"] for e in entries]
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError, KeyError) as exc:
        raise ValueError(
            f"{index} is not a sweep index (mlxsci.sweep writes "
            f'{{"runs": [{{"path": ...}}, ...]}}): {type(exc).__name__}: '
            f"{exc}"
        ) from None
    return paths


def _run_dirs(path: Path) -> list[Path]:
    """Run directories under `path`: through index.json when there is one."""
    if (path / "summary.json").exists() or (path / "run.json").exists():
        return [path]
    index = path / "index.json"
    if index.exists():
        return _index_runs(index)
    found = {p.parent for p in path.rglob("summary.json")}
    found |= {p.parent for p in path.rglob("run.json")}  # unfinished ones, to report them
    # A folder with its own index.json below `path` is read through its index.
    for idx in path.rglob("index.json"):
        inner = idx.parent
        found = {d for d in found if inner not in d.parents}
        found |= set(_index_runs(idx))
    return sorted(found)


def load_runs(paths) -> list[dict]:
    """Summaries (plus `run_dir`) of the finished runs at or under `paths`,
    sorted by task, model and path. A path holding no run at all (finished or
    not), or an index.json that is not a sweep's, raises ValueError."""
    runs, seen = [], set()
    for p in [paths] if isinstance(paths, (str, Path)) else paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist")
        dirs = _run_dirs(p)
        if not dirs:
            raise ValueError(
                f"{p} holds no search run (a folder with summary.json or "
                "run.json): give run directories, folders holding them, or a "
                "sweep folder"
            )
        for d in dirs:
            key = d.resolve()
            if key in seen:
                continue
            seen.add(key)
            summary = _load_run(d)
            if summary is not None:
                runs.append(summary)
    runs.sort(key=lambda r: (r["task"], r["model"], r["run_dir"]))
    _note_unchecked(runs)
    return runs


_UNCHECKED = {
    run_manifest.UNSEALED: "have no manifest.json (finished before runs recorded their "
    "files' digests, or resumed and not finished again): their files cannot be checked",
    run_manifest.DIGESTS_MATCH: "match their manifest.json, which another machine's cache "
    "key signed: its signature cannot be checked here",
}


def _note_unchecked(runs: list[dict]) -> None:
    """One line per kind of run whose files the report cannot fully vouch for."""
    for status, what in _UNCHECKED.items():
        n = sum(1 for r in runs if r.get("_integrity") == status)
        if n:
            warn(f"{n} run(s) {what}")


def is_tampered(run: dict) -> bool:
    """Whether the run's files changed after it finished (mlxsci.search.manifest)."""
    return run.get("_integrity") == run_manifest.TAMPERED


def trusted(runs: list[dict]) -> list[dict]:
    """The runs whose files are as they finished, or could not be checked."""
    return [r for r in runs if not is_tampered(r)]


# -- imported runs ------------------------------------------------------------
#
# An imported run (python -m mlxsci.import_metal_sci, the layout in
# mlxsci/import_metal_sci/records.py) holds what another harness recorded on
# another chip: its summary.json's "recorded" block (seed and best S, the
# improvement, on the chip it names) and null seed_score / best_score, since
# mlxsci has measured nothing of it. The report shows the recorded figures in
# columns of their own, labelled with the chip (recorded_on), and leaves the
# imported run out of every figure that is mlxsci's: the cells' speedups and
# outcomes, the transfer table, the plots.

# How a source format is named beside the chip: "Apple M1 Pro (Metal-Sci)".
SOURCE_NAMES = {import_records.SOURCE_FORMAT: "Metal-Sci"}
UNKNOWN_CHIP = "unknown chip"


def is_imported(run: dict) -> bool:
    """Whether the run was imported from another harness's records (its
    summary's "imported" block, or run.json's "imported": true), not
    searched by mlxsci."""
    return bool(run.get("imported")) or bool(run.get("_spec_imported"))


def native(runs: list[dict]) -> list[dict]:
    """The runs mlxsci searched and measured itself (not imported)."""
    return [r for r in runs if not is_imported(r)]


def imported_runs(runs: list[dict]) -> list[dict]:
    """The imported runs among `runs`."""
    return [r for r in runs if is_imported(r)]


def _block(run: dict, key: str) -> dict:
    block = run.get(key)
    return block if isinstance(block, dict) else {}


def _text(value) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def number(value) -> float | None:
    """A finite number from a JSON value (bools, strings, nan, inf, an
    integer past a float: None)."""
    found = import_records.finite_number(value)
    return None if found is None else float(found)


def recorded_chip(run: dict) -> str | None:
    """The chip an imported run's figures were recorded on (the summary's
    "recorded" or "imported" block, else run.json), None when none says."""
    for value in (
        _block(run, "recorded").get("chip"),
        _block(run, "imported").get("chip"),
        run.get("_spec_chip"),
    ):
        chip = _text(value)
        if chip:
            return shorten(chip, 60)
    return None


def recorded_on(run: dict) -> str:
    """Where an imported run's figures come from, for a `recorded on` cell:
    the chip and the harness, 'Apple M1 Pro (Metal-Sci)'."""
    fmt = _text(_block(run, "imported").get("format")) or _text(run.get("_spec_format"))
    source = SOURCE_NAMES.get(fmt or "", shorten(fmt, 30) if fmt else "imported")
    return f"{recorded_chip(run) or UNKNOWN_CHIP} ({source})"


def recorded_figures(run: dict) -> dict:
    """An imported run's recorded figures, each None unless a usable number:
    seed S, best S, speedup (the recorded improvement, else best / seed) and
    the best iteration."""
    rec = _block(run, "recorded")
    seed, best = number(rec.get("seed_score")), number(rec.get("best_score"))
    gain = number(rec.get("improvement"))
    if gain is None and seed and best is not None:
        gain = best / seed
    it = rec.get("best_iteration")
    return {
        "seed S": seed,
        "best S": best,
        "speedup": gain,
        "best iteration": it if isinstance(it, int) and not isinstance(it, bool) else None,
    }


def converted(run: dict) -> str | None:
    """How many of an imported run's recorded candidates were converted to
    mlxsci's format, 'converted/candidates' (None when the counts are not there)."""
    block = _block(run, "imported")
    done, of = block.get("converted"), block.get("candidates")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (done, of)):
        return None
    return f"{done}/{of}"


def imported_cell(runs: list[dict], task: str, model: str) -> list[dict]:
    """The imported runs of one cell: one per recorded source folder (of a
    folder imported twice, pick_run's choice), in path order."""
    by_source: dict = {}
    for r in imported_runs(runs):
        if r["task"] == task and r["model"] == model:
            source = _block(r, "imported").get("source")
            key = source if isinstance(source, str) else r["run_dir"]
            by_source.setdefault(key, []).append(r)
    return sorted((pick_run(group) for group in by_source.values()), key=lambda r: r["run_dir"])


# -- numbers and labels -----------------------------------------------------


def speedup(summary: dict) -> float | None:
    seed, best = summary.get("seed_score"), summary.get("best_score")
    if not seed or best is None:
        return None
    return best / seed


def improved(summary: dict) -> bool:
    """True when S_best / S_seed is an improvement beyond the noise."""
    return assess_summary(summary)["improvement_verdict"] == IMPROVED


def outcome_label(summary: dict) -> str:
    """The run's outcome (mlxsci.search.outcomes.classify_summary: the vocabulary and
    rules of the search's summary.json). The verdicts are recomputed from the
    summary's numbers and noises, not read from its verdict fields, so old
    summaries (no noise) get labels by the same rule."""
    return classify_summary(summary)


def pick_run(runs: list[dict]) -> dict:
    """Most iterations, then newest, then last path."""
    return max(runs, key=lambda r: (r.get("iterations") or 0, r.get("_mtime", 0.0), r["run_dir"]))


def models_of(runs: list[dict]) -> list[str]:
    return sorted({r["model"] for r in runs})


def cell_runs(runs: list[dict], task: str, model: str) -> list[dict]:
    """The runs of one cell: one per proposer seed (picked by pick_run), by
    seed. Imported runs are not among them (imported_cell): a cell's figures
    are mlxsci's."""
    by_seed: dict = {}
    for r in native(runs):
        if r["task"] == task and r["model"] == model:
            by_seed.setdefault(r.get("_seed", 0), []).append(r)
    ordered = sorted(by_seed.items(), key=lambda kv: (isinstance(kv[0], str), kv[0]))
    return [pick_run(group) for _, group in ordered]


# -- transfer grades and the held-out draw -------------------------------------
#
# summary.json's `transfer` grades the run's best as "Gaming Without an
# Attacker" (arXiv 2608.08722) does: a win that transfers to the held-out, one
# of four ways a win fails to (A: a tuned branch for the measured case beside
# a slow fallback; B: a wrong arm never run in-distribution; C: a disclosed
# held-out enumerated; D: overfitting to the in-distribution data), or no win.
# Its grade is null when the search could not grade the run; summaries written
# before grading have no `transfer` at all. Both count as ungraded.

TRANSFERS = "transfers"
NO_WIN = "no-win"
NOT_JUDGED = "not-judged"  # a limit of the machine stopped an evaluation the grade needed
FAILURE_GRADES = ("A", "B", "C", "D")
GRADES = (TRANSFERS, *FAILURE_GRADES, NO_WIN, NOT_JUDGED)
# A table cell holds one line of evidence; the rest is in summary.json.
EVIDENCE_CHARS = 80
WHERE_CHARS = 24


def has_transfer_records(runs: list[dict]) -> bool:
    """Whether any run was written since runs record a held-out draw and a
    transfer grade: only then does a transfer table say anything."""
    return any("transfer" in r or "held_out" in r for r in runs)


def transfer_grade(summary: dict) -> str | None:
    """The run's transfer grade (GRADES), or None when it has none: written
    before grading, not gradable (grade null), or a grade this report does not
    know (named on stderr when the run is loaded)."""
    record = summary.get("transfer")
    grade = record.get("grade") if isinstance(record, dict) else None
    return grade if grade in GRADES else None


def shorten(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters ('...' where cut)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def strongest_evidence(summary: dict) -> str | None:
    """The first (strongest) item of the grade's evidence as one short line,
    'what (where)'; the `where` is kept whole however long `what` is, since
    it is what points a reader into the kernel. None when there is none."""
    record = summary.get("transfer")
    evidence = record.get("evidence") if isinstance(record, dict) else None
    if not isinstance(evidence, list) or not evidence or not isinstance(evidence[0], dict):
        return None
    what, where = evidence[0].get("what"), evidence[0].get("where")
    where = shorten(where, WHERE_CHARS) if isinstance(where, str) and where.strip() else None
    room = EVIDENCE_CHARS - (len(where) + 3 if where else 0)
    text = shorten(what, room) if what is not None else ""
    if where:
        return f"{text} ({where})" if text else where
    return text or None


def held_out_mode(summary: dict) -> str | None:
    """How the run's held-out was chosen (secret or metal-sci; None: no record)."""
    record = summary.get("held_out")
    mode = record.get("mode") if isinstance(record, dict) else None
    return mode if isinstance(mode, str) else None


def _commitment_problems(record: dict) -> list[str]:
    """The report's own check of a revealed draw (mlxsci.held_out.verify):
    the secret against the commitment made at the start, a hash anyone can
    recompute, and, where the task loads here, the configuration the secret
    draws against the one recorded (a summary whose params were changed)."""
    mode = record.get("mode")
    if mode == "metal-sci":
        return []
    if mode not in held_out.MODES:
        return [f"unknown held-out mode {mode!r}"]
    try:
        draw = held_out.HeldOutDraw.from_json(record)
    except ValueError as exc:
        return [str(exc)]
    if not (draw.task and draw.nonce and draw.commitment):
        return ["the held-out record lacks its task, nonce or commitment"]
    if draw.secret is None:
        return ["the secret is not revealed"]
    try:
        task = load_task(draw.task)
    except ValueError:  # a task folder of your own, not here: the hash is what is checked
        mismatch = held_out.commitment(draw.task, draw.nonce, draw.secret) != draw.commitment
        return [held_out.COMMITMENT_MISMATCH] if mismatch else []
    return held_out.verify(task, draw)


def held_out_problems(summary: dict) -> list[str] | None:
    """What does not hold in the run's held-out draw: the problems the search
    recorded (held_out_verified) and those the report finds itself
    (_commitment_problems). Empty: it verified; None: the run has no draw
    to verify (written before runs recorded one)."""
    record = summary.get("held_out")
    recorded = summary.get("held_out_verified")
    if record is None and recorded is None:
        return None
    if not isinstance(record, dict):
        return ["the held-out record is missing or not an object"]
    problems = []
    if isinstance(recorded, list):
        problems += [str(p) for p in recorded]
    elif recorded is not None:
        problems.append(f"held_out_verified is not a list: {shorten(str(recorded), 60)}")
    problems += _commitment_problems(record)
    return list(dict.fromkeys(problems))  # the search and the report may say the same


def held_out_unverified(summary: dict) -> bool:
    """Whether the run's held-out draw fails to verify: its transfer grade
    and held-out numbers rest on a configuration that may not be the one
    committed to before the search saw anything."""
    return bool(held_out_problems(summary))


def held_out_status(summary: dict) -> str | None:
    """The details table's word on the draw: 'yes' (verified), 'n/a' (the
    listed metal-sci size, nothing secret), 'NO: <problems>', None (no draw)."""
    problems = held_out_problems(summary)
    if problems is None:
        return None
    if problems:
        return "NO: " + shorten("; ".join(problems), EVIDENCE_CHARS)
    return "n/a" if held_out_mode(summary) == "metal-sci" else "yes"


def _warn_transfer(run_dir: Path, summary: dict) -> None:
    """Name on stderr a run whose draw does not verify, or whose grade is unknown."""
    problems = held_out_problems(summary)
    if problems:
        warn(
            f"UNVERIFIED held-out draw in run {run_dir}: {'; '.join(problems)}; "
            "its transfer grade is left out of the transfer table (counted as unverified)"
        )
    record = summary.get("transfer")
    grade = record.get("grade") if isinstance(record, dict) else None
    if grade is not None and grade not in GRADES:
        warn(f"run {run_dir}: unknown transfer grade {grade!r}, counted as ungraded")
