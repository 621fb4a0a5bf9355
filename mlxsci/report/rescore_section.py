"""The report's re-score section: what mlxsci's harness made of imported
candidates (`python -m mlxsci.import_metal_sci ... --rescore` writes
OUT/rescore.json, its records described in mlxsci/import_metal_sci/records.py)
against what the other harness recorded for them on its chip.

load_rescore finds the rescore.json beside the reported runs (in a folder
given to the report, or the parent of a reported run directory) and keeps
the records of reported runs. The file is hostile input like any other: a
file that is not a JSON list, or records with missing keys, wrong types or a
verdict outside mlxsci.import_metal_sci.records.VERDICTS, give one warning
line on stderr per file, and the file or the bad records are left out.
rescore.json lies outside the run directories, so no run's manifest covers
it: each record carries the signature of the re-score that made it
(mlxsci.import_metal_sci.records.record_trust). A record with none, or edited
since, is left out with a warning; one signed by another machine's key is
shown with a warning that it cannot be checked here. The records of a
tampered run are left out unless --include-tampered.

Seven tables. `agreement` (pass/fail agreement per task, signature-only
Metal errors apart) and `metal_sci` (Metal-Sci's table of each run's best
beside mlxsci's modelled one) are mlxsci/report/audit.py's. The other five
are grouped by where the verdicts were recorded (`recorded on`: the chip and
harness, mlxsci.report.runs.recorded_on) and the backend (with the GPU the
simulator modelled) and size set mlxsci evaluated at:

    counts          records, agree (both verdicts the same), disagree (both
                    given, different), not judged (a limit of the machine
                    stopped mlxsci's evaluation: its time limit, a memory
                    limit; never counted as a disagreement), not evaluated
                    (mlxsci: none),
                    not recorded (no recorded verdict, mlxsci's given)
    matrix          one row per recorded verdict, one column per mlxsci
                    verdict plus `mlxsci not evaluated`, and the total
    disagreements   one row per disagreeing record: run, iteration, recorded,
                    mlxsci, cause (audit.cause: why they differ, in one line),
                    reason, backend, sizes
    not_evaluated   one row per record mlxsci could not evaluate (not
                    converted, file missing): run, iteration, recorded, reason
    best            per run, its recorded best (the record with
                    recorded_best): recorded verdict and S (labelled with the
                    chip), mlxsci's verdict and S at the size set, the
                    held-out (its label and mode) with mlxsci's verdict and
                    Phi there, the transfer grade

Markdown and LaTeX print them after the report's other tables under a title
and a note (rescore_text); JSON holds them as {"rescore": {"counts", "agreement", "metal_sci",
"matrix", "disagreements", "not_evaluated", "best"}}; CSV writes each to its own file beside
--out FILE.csv (FILE_rescore.csv, FILE_rescore_matrix.csv, ...).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from mlxsci.import_metal_sci.metal_run import UnreadableFile, parse_json, read_text
from mlxsci.import_metal_sci.records import (
    FORGED,
    MAX_RESCORE_BYTES,
    MLXSCI_VERDICTS,
    NOT_JUDGED,
    RESCORE_FILE,
    SIGNED_ELSEWHERE,
    VERDICTS,
    record_trust,
)
from mlxsci.report.audit import (
    AGREEMENT_COLUMNS,
    METAL_SCI_COLUMNS,
    MODEL_FACTOR,
    agreement_table,
    cause,
    metal_sci_table,
)
from mlxsci.report.runs import is_tampered, number, recorded_on, shorten, warn
from mlxsci.report.tables import latex_escape, render

NOT_EVALUATED = "not evaluated"
NOT_RECORDED = "not recorded"
NOT_JUDGED_WORDS = "not judged"  # mlxsci's NOT_JUDGED: a limit of the machine stopped it
# A reason in a table cell; rescore.json holds the whole text.
REASON_CHARS = 120
PROBLEMS_SHOWN = 3

GROUP = ("recorded on", "backend", "sizes")
COLUMNS = {
    "counts": (
        *GROUP,
        "records",
        "agree",
        "disagree",
        NOT_JUDGED_WORDS,
        NOT_EVALUATED,
        NOT_RECORDED,
    ),
    "matrix": (
        *GROUP,
        "recorded",
        *(f"mlxsci {v}" for v in (*MLXSCI_VERDICTS, NOT_EVALUATED)),
        "total",
    ),
    "agreement": AGREEMENT_COLUMNS,
    "metal_sci": METAL_SCI_COLUMNS,
    "disagreements": (
        "run",
        "iteration",
        "recorded",
        "mlxsci",
        "cause",
        "reason",
        "backend",
        "sizes",
    ),
    "not_evaluated": ("run", "iteration", "recorded", "reason", "backend", "sizes"),
    "best": (
        "run",
        "task",
        "model",
        "iteration",
        "recorded on",
        "recorded",
        "recorded S",
        "backend",
        "sizes",
        "mlxsci",
        "mlxsci S",
        "held-out",
        "held-out mode",
        "held-out mlxsci",
        "held-out phi",
        "transfer grade",
    ),
}
TITLES = {
    "counts": "Re-score of imported candidates: recorded verdicts against mlxsci's",
    "matrix": "Recorded verdict (rows) x mlxsci verdict (columns)",
    "agreement": "Pass/fail agreement with the recorded verdicts (signature-only Metal errors apart)",
    "metal_sci": "Metal-Sci's table beside mlxsci's: each run's best over its seed, recorded and modelled",
    "disagreements": "Disagreements: recorded and mlxsci verdicts differ, and why",
    "not_evaluated": "Not evaluated by mlxsci, and why (not converted, no file)",
    "best": "Each run's recorded best, re-scored",
}
RESCORE_NOTE = (
    "recorded: the verdict and S the imported run's harness recorded on the chip "
    "named under `recorded on`; mlxsci: mlxsci's evaluation of the converted "
    "candidate on the backend and size set named (not evaluated: mlxsci did not "
    "evaluate it, e.g. it could not be converted; the reason says why). agree + "
    "disagree + not judged + not evaluated + not recorded = records; not judged: a "
    "limit of the machine (its time limit, a memory limit) stopped mlxsci's evaluation "
    "before a verdict. From rescore.json beside "
    "the imported runs, each record signed by the re-score that made it"
)
AUDIT_NOTE = (
    "agreement: of the candidates both harnesses judged (mlxsci's not judged and not "
    "evaluated left out), those whose only Metal error lies in the kernel's signature, "
    "which MLX writes, are counted apart; compared = judged by both - apart; agree: both "
    "correct, or both a failure of any kind"
)
TABLE_NOTE = (
    f"x: the best's figure over its run's seed's. recorded: Metal-Sci's, on its chip (the "
    f"in-distribution speedup from its summary, the held-out ratio from its results "
    f"folder's logs, FAIL where its best failed there); modelled: mlxsci's re-score of the "
    f"same two kernels on the modelled GPU; the note names where the two differ by more "
    f"than the modelled clock's stated uncertainty ({MODEL_FACTOR:g}x) or mlxsci judged "
    f"the best other than correct"
)
NO_AGREEMENT = "No candidate was judged by both harnesses."
NO_METAL_SCI = (
    "No run's recorded best was re-scored at the in-distribution sizes (--rescore --in-dist "
    "with a held-out)."
)
NOTES = {"counts": RESCORE_NOTE, "agreement": AUDIT_NOTE, "metal_sci": TABLE_NOTE}
NO_DISAGREEMENTS = "No disagreements."
NO_UNEVALUATED = "Every candidate was evaluated."
NO_BEST = "No run's recorded best is among the re-scored candidates."


# -- reading rescore.json -----------------------------------------------------


def _verdict(value) -> bool:
    return value is None or value in VERDICTS


def _mlxsci_verdict(value) -> bool:
    return value is None or value in MLXSCI_VERDICTS


def _text_or_none(value) -> bool:
    return value is None or isinstance(value, str)


def _number_or_none(value) -> bool:
    """None or a number (nan and inf included: they show as no number)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _problem(rec) -> str | None:
    """What is wrong with one record (None: a record the report can show)."""
    if not isinstance(rec, dict):
        return "not an object"
    missing = [
        k
        for k in ("run", "iteration", "recorded", "mlxsci", "reason", "backend", "sizes")
        if k not in rec
    ]
    if missing:
        return f"no {', '.join(missing)}"
    run = rec["run"]
    if not isinstance(run, str) or not run or Path(run).name != run or run in (".", ".."):
        return "'run' is not a run folder's name"
    it = rec["iteration"]
    if isinstance(it, bool) or not isinstance(it, int) or it < 0:
        return "'iteration' is not a count"
    for key, ok, allowed in (
        ("recorded", _verdict, VERDICTS),
        ("mlxsci", _mlxsci_verdict, MLXSCI_VERDICTS),
    ):
        if not ok(rec[key]):
            return f"{key!r} is {shorten(repr(rec[key]), 30)}, not one of {', '.join(allowed)}"
    if not _text_or_none(rec["reason"]):
        return "'reason' is not text"
    if not (isinstance(rec["backend"], str) and isinstance(rec["sizes"], str)):
        return "'backend' or 'sizes' is not text"
    if not _text_or_none(rec.get("sim_gpu")):
        return "'sim_gpu' is not text"
    if not isinstance(rec.get("recorded_best", False), bool):
        return "'recorded_best' is not true or false"
    for key in ("recorded_score", "mlxsci_score"):
        if not _number_or_none(rec.get(key)):
            return f"{key!r} is not a number"
    held = rec.get("held_out")
    if held is not None and not (
        isinstance(held, dict)
        and _text_or_none(held.get("label"))
        and _mlxsci_verdict(held.get("mlxsci"))
        and _number_or_none(held.get("phi"))
        and _text_or_none(held.get("reason"))
        and _text_or_none(held.get("mode"))
    ):
        return "'held_out' is not a held-out record"
    transfer = rec.get("transfer")
    if transfer is not None and not (
        isinstance(transfer, dict)
        and _text_or_none(transfer.get("grade"))
        and _text_or_none(transfer.get("reason"))
    ):
        return "'transfer' is not a transfer record"
    return None


def _read_records(path: Path) -> list | None:
    """rescore.json's list, or None (with one warning) when it is not one.
    Read as the re-score reads it (mlxsci.import_metal_sci.metal_run: no
    link followed, capped, nesting bounded)."""
    try:
        data = parse_json(read_text(path, MAX_RESCORE_BYTES), path.name)
    except (OSError, UnreadableFile) as exc:
        warn(f"{path}: unreadable ({shorten(str(exc), 80)}); no re-score section from it")
        return None
    if not isinstance(data, list):
        warn(
            f"{path}: not a list of re-score records (a JSON {type(data).__name__}); "
            "no re-score section from it"
        )
        return None
    return data


def rescore_files(runs: list[dict], paths=()) -> list[Path]:
    """The rescore.json files in the folders given (`paths`) and beside the
    reported run directories (their parents), each once."""
    found: dict[Path, Path] = {}
    folders = [Path(p) for p in paths] + [Path(r["run_dir"]).parent for r in runs]
    for folder in folders:
        path = folder / RESCORE_FILE
        if path.exists() or path.is_symlink():
            found.setdefault(path.resolve(), path)
    return list(found.values())


def load_rescore(runs: list[dict], paths=()) -> list[dict]:
    """The re-score records of the reported runs, from every rescore.json
    rescore_files finds: each a checked copy of its record plus `_run` (the
    run's loaded summary). A record naming a run that is not a folder beside
    its rescore.json is a bad record; one naming a run there that the report
    was not given is left out quietly."""
    by_dir = {Path(r["run_dir"]).resolve(): r for r in runs}
    records: list[dict] = []
    for path in rescore_files(runs, paths):
        data = _read_records(path)
        if data is None:
            continue
        bad: list[str] = []
        trust = {FORGED: 0, SIGNED_ELSEWHERE: 0}
        for k, rec in enumerate(data):
            problem = _problem(rec)
            if problem is None and not (path.parent / rec["run"]).is_dir():
                problem = f"names no run folder here ({shorten(rec['run'], 40)})"
            if problem is not None:
                bad.append(f"record {k}: {problem}")
                continue
            run = by_dir.get((path.parent / rec["run"]).resolve())
            if run is None:
                continue
            seal = record_trust(rec)
            if seal in trust:
                trust[seal] += 1
            if seal != FORGED:
                records.append({**rec, "_run": run})
        _warn_trust(path, trust)
        if bad:
            shown = bad[:PROBLEMS_SHOWN] + (["..."] if len(bad) > PROBLEMS_SHOWN else [])
            warn(
                f"{path}: skipped {len(bad)} of {len(data)} re-score record(s) ({'; '.join(shown)})"
            )
    return records


def _warn_trust(path: Path, trust: dict) -> None:
    """One line per kind of record whose verdicts cannot be vouched for."""
    if trust[FORGED]:
        warn(
            f"{path}: left out {trust[FORGED]} re-score record(s) with no signature of the "
            "re-score that made them, or edited since (verdicts mlxsci did not give)"
        )
    if trust[SIGNED_ELSEWHERE]:
        warn(
            f"{path}: {trust[SIGNED_ELSEWHERE]} re-score record(s) were signed by another "
            "machine's key: their signatures cannot be checked here"
        )


# -- the tables -----------------------------------------------------------------


def _backend(rec: dict) -> str:
    """The backend a record was made on, with the GPU the simulator modelled
    (records of two GPUs are two groups): `sim (apple-m1-pro)`."""
    gpu = rec.get("sim_gpu")
    return shorten(f"{rec['backend']} ({gpu})" if gpu else rec["backend"], 40)


def _group(rec: dict) -> tuple[str, str, str]:
    return (recorded_on(rec["_run"]), _backend(rec), shorten(rec["sizes"], 30))


def _kind(rec: dict) -> str:
    """How a record's two verdicts compare: agree, disagree, not judged (a
    limit of the machine stopped mlxsci's evaluation), not evaluated, not recorded."""
    if rec["mlxsci"] is None:
        return NOT_EVALUATED
    if rec["mlxsci"] == NOT_JUDGED:
        return NOT_JUDGED_WORDS
    if rec["recorded"] is None:
        return NOT_RECORDED
    return "agree" if rec["recorded"] == rec["mlxsci"] else "disagree"


def _groups(records: list[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for rec in records:
        groups.setdefault(_group(rec), []).append(rec)
    return dict(sorted(groups.items()))


def counts_table(records: list[dict]) -> list[dict]:
    rows = []
    for key, group in _groups(records).items():
        kinds = [_kind(r) for r in group]
        row: dict = dict(zip(GROUP, key))
        row["records"] = len(group)
        kinds_shown = ("agree", "disagree", NOT_JUDGED_WORDS, NOT_EVALUATED, NOT_RECORDED)
        row.update({k: kinds.count(k) for k in kinds_shown})
        rows.append(row)
    return rows


def matrix_table(records: list[dict]) -> list[dict]:
    rows = []
    for key, group in _groups(records).items():
        recorded_rows: list = list(VERDICTS)
        if any(r["recorded"] is None for r in group):
            recorded_rows.append(None)
        for recorded in recorded_rows:
            mine = [r for r in group if r["recorded"] == recorded]
            row: dict = dict(zip(GROUP, key))
            row["recorded"] = recorded or NOT_RECORDED
            for v in (*MLXSCI_VERDICTS, None):
                row[f"mlxsci {v or NOT_EVALUATED}"] = sum(1 for r in mine if r["mlxsci"] == v)
            row["total"] = len(mine)
            rows.append(row)
    return rows


def _order(rec: dict) -> tuple:
    return (rec["run"], rec["iteration"], _backend(rec), rec["sizes"])


def _listed(records: list[dict], kind: str, columns: tuple[str, ...]) -> list[dict]:
    """One row per record of `kind` (_kind), with the given columns."""
    rows = []
    for rec in sorted(records, key=_order):
        if _kind(rec) != kind:
            continue
        row = {
            "run": rec["run"],
            "iteration": rec["iteration"],
            "recorded": rec["recorded"],
            "mlxsci": rec["mlxsci"],
            "cause": cause(rec) if kind == "disagree" else None,
            "reason": shorten(rec["reason"], REASON_CHARS) if rec["reason"] else None,
            "backend": _backend(rec),
            "sizes": shorten(rec["sizes"], 30),
        }
        rows.append({c: row[c] for c in columns})
    return rows


def disagreements_table(records: list[dict]) -> list[dict]:
    return _listed(records, "disagree", COLUMNS["disagreements"])


def not_evaluated_table(records: list[dict]) -> list[dict]:
    """The candidates mlxsci could not evaluate, with the reason: what the
    converter cannot express, a missing or unreadable file."""
    return _listed(records, NOT_EVALUATED, COLUMNS["not_evaluated"])


def best_table(records: list[dict]) -> list[dict]:
    rows = []
    for rec in sorted(records, key=_order):
        if not rec.get("recorded_best"):
            continue
        held = rec.get("held_out") or {}
        transfer = rec.get("transfer") or {}
        grade = transfer.get("grade")
        rows.append(
            {
                "run": rec["run"],
                "task": rec["_run"]["task"],
                "model": rec["_run"]["model"],
                "iteration": rec["iteration"],
                "recorded on": recorded_on(rec["_run"]),
                "recorded": rec["recorded"],
                "recorded S": number(rec.get("recorded_score")),
                "backend": _backend(rec),
                "sizes": shorten(rec["sizes"], 30),
                "mlxsci": rec["mlxsci"],
                "mlxsci S": number(rec.get("mlxsci_score")),
                "held-out": shorten(held["label"], 40) if held.get("label") else None,
                "held-out mode": shorten(held["mode"], 20) if held.get("mode") else None,
                "held-out mlxsci": held.get("mlxsci"),
                "held-out phi": number(held.get("phi")),
                "transfer grade": shorten(grade, 24) if grade else None,
            }
        )
    return rows


def rescore_tables(records: list[dict], include_tampered: bool = False) -> dict | None:
    """{"counts", "agreement", "metal_sci", "matrix", "disagreements",
    "not_evaluated", "best"}: the section's tables,
    or None when no record is left to show (the records of tampered runs
    are left out unless include_tampered)."""
    shown = [r for r in records if include_tampered or not is_tampered(r["_run"])]
    if not shown:
        return None
    return {
        "counts": counts_table(shown),
        "agreement": agreement_table(shown),
        "metal_sci": metal_sci_table(shown),
        "matrix": matrix_table(shown),
        "disagreements": disagreements_table(shown),
        "not_evaluated": not_evaluated_table(shown),
        "best": best_table(shown),
    }


# -- rendering ------------------------------------------------------------------


def rescore_text(tables: dict, fmt: str) -> str:
    """The section in Markdown or LaTeX: each table under its title, the note
    under the counts; an empty disagreements, not-evaluated or best table is one line."""
    if fmt not in ("md", "latex"):
        raise ValueError(f"rescore_text renders md or latex, not {fmt!r}")
    empty = {
        "agreement": NO_AGREEMENT,
        "metal_sci": NO_METAL_SCI,
        "disagreements": NO_DISAGREEMENTS,
        "not_evaluated": NO_UNEVALUATED,
        "best": NO_BEST,
    }
    parts = []
    for name, rows in tables.items():
        title = TITLES[name]
        body = render(rows, fmt, notes=False) if rows else f"{empty[name]}\n"
        if fmt == "md":
            parts.append(f"**{title}**\n\n{body}")
        else:
            parts.append(rf"\par\textbf{{{latex_escape(title)}}}" + "\n\n" + body)
        if name in NOTES:
            note = f"{NOTES[name][0].upper()}{NOTES[name][1:]}."
            parts.append(
                f"{note}\n" if fmt == "md" else rf"\par\footnotesize {latex_escape(note)}" + "\n"
            )
    return "\n".join(parts)


def rescore_csv(name: str, rows: list[dict]) -> str:
    """One of the section's tables as CSV (the header alone when it is empty)."""
    if rows:
        return render(rows, "csv")
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(COLUMNS[name])
    return buf.getvalue()


def csv_suffix(name: str) -> str:
    """The name a table's CSV file takes beside --out FILE.csv: FILE_<suffix>.csv."""
    return "rescore" if name == "counts" else f"rescore_{name}"
