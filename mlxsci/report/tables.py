"""The report's tables, built from loaded runs (mlxsci.report.runs), and their
rendering as Markdown, LaTeX, CSV or JSON.

main_table: one row per task, one column group per model (medians and
spreads when a cell holds several runs, mlxsci.report.spread);
details_table: one row per run; transfer_table: per model and task, how many
wins transferred to the held-out and how the others failed (A/B/C/D). render
turns any of them into text. Imported runs (mlxsci.report.runs.is_imported)
add `recorded` columns labelled with the chip their figures were recorded
on, and never count in mlxsci's own columns. What the columns mean is in
mlxsci/report/build.py's docstring. Separate from the plots
(mlxsci.report.plots), which need matplotlib and none of this.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from tabulate import tabulate

from mlxsci.evaluation.verdicts import assess_summary
from mlxsci.report.runs import (
    FAILURE_GRADES,
    NO_WIN,
    NOT_JUDGED,
    TRANSFERS,
    cell_runs,
    converted,
    held_out_mode,
    held_out_status,
    held_out_unverified,
    imported_cell,
    improved,
    is_imported,
    is_tampered,
    models_of,
    native,
    outcome_label,
    recorded_figures,
    recorded_on,
    speedup,
    strongest_evidence,
    transfer_grade,
    trusted,
)
from mlxsci.report.spread import SPREAD_NOTE, median_and_spread, spread_kind
from mlxsci.search.outcomes import OUTCOMES

FORMATS = ("md", "latex", "csv", "json")
TAMPERED_NOTE = (
    "tampered: runs whose files changed after they finished (named on stderr), "
    "left out of the cells unless --include-tampered"
)
UNVERIFIED_NOTE = (
    "unverified: runs whose secret held-out draw does not verify against the "
    "commitment made at their start (named on stderr, the problem in the details "
    "table): their held-out figures may come from another configuration, and "
    "their transfer grades are left out of the transfer table's grade counts"
)
IMPORTED_NOTE = (
    "recorded: figures of imported runs (python -m mlxsci.import_metal_sci), as "
    "recorded by another harness on the chip named under `recorded on`, not "
    "measured by mlxsci; mlxsci's own columns leave imported runs out, so a cell "
    "holding only imported runs is empty there"
)
# The row of a model's transfer table that sums its tasks.
ALL_TASKS = "all tasks"
TRANSFER_NOTE = (
    "Transfer grades (Gaming Without an Attacker): transferred: the win holds at the "
    "held-out; A: a win tied to the measured sizes (a tuned branch beside a slow "
    "fallback, or a shape tuned for them); "
    "B: a wrong arm never run in-distribution; C: a disclosed held-out enumerated; "
    "D: overfit to the in-distribution data. runs = ungraded + unverified + no win "
    "+ not judged + wins; ungraded: no grade (written before grading, or not gradable); "
    "not judged: a limit of the machine (its time limit, a memory limit) stopped an "
    "evaluation the grade needed, never counted as a failure; "
    "wins = transferred + A + B + C + D; transfer rate = transferred / wins"
)


# -- tables -------------------------------------------------------------------


def _single_cell(m: str, r: dict | None) -> dict:
    """A cell of one run (or none): the table as it has always been."""
    return {
        f"{m} speedup": speedup(r) if r else None,
        f"{m} improved": None if r is None else improved(r),
        f"{m} held-out phi": r.get("held_out_best") if r else None,
        f"{m} held-out ratio": r.get("held_out_ratio") if r else None,
        f"{m} outcome": outcome_label(r) if r else None,
    }


def _label_counts(cell: list[dict]) -> str:
    """The labels of the cell's runs, commonest first, each with its count:
    'improved 2/3, flat 1/3' (ties in mlxsci.search.outcomes.OUTCOMES' order)."""
    labels = [outcome_label(r) for r in cell]
    order = list(OUTCOMES)
    # whatever OUTCOMES holds is shown; a label it lacks sorts last, not a crash
    rank = {lab: order.index(lab) if lab in order else len(order) for lab in labels}
    found = sorted(set(labels), key=lambda lab: (-labels.count(lab), rank[lab], lab))
    return ", ".join(f"{lab} {labels.count(lab)}/{len(cell)}" for lab in found)


def _repeated_cell(m: str, cell: list[dict]) -> dict:
    """A cell of any number of runs: medians, spreads, count (mlxsci.report.spread)."""
    if not cell:
        return {
            f"{m} {k}": None
            for k in (
                "runs",
                "speedup",
                "speedup lo",
                "speedup hi",
                "spread",
                "improved",
                "held-out phi",
                "held-out ratio",
                "held-out ratio lo",
                "held-out ratio hi",
                "outcome",
            )
        }
    speedups = [speedup(r) for r in cell]
    s, s_lo, s_hi = median_and_spread(speedups)
    ratio, r_lo, r_hi = median_and_spread([r.get("held_out_ratio") for r in cell])
    phi = median_and_spread([r.get("held_out_best") for r in cell])[0]
    return {
        f"{m} runs": len(cell),
        f"{m} speedup": s,
        f"{m} speedup lo": s_lo,
        f"{m} speedup hi": s_hi,
        f"{m} spread": spread_kind(len([x for x in speedups if x is not None])),
        f"{m} improved": 2 * sum(improved(r) for r in cell) > len(cell),
        f"{m} held-out phi": phi,
        f"{m} held-out ratio": ratio,
        f"{m} held-out ratio lo": r_lo,
        f"{m} held-out ratio hi": r_hi,
        f"{m} outcome": _label_counts(cell) if len(cell) > 1 else outcome_label(cell[0]),
    }


def _recorded_cell(m: str, cell: list[dict], repeated: bool) -> dict:
    """The recorded figures of a cell's imported runs: their median recorded
    speedup (with runs, lo, hi and spread when any cell holds several) and
    where they were recorded ('Apple M1 Pro (Metal-Sci)')."""
    s, lo, hi = median_and_spread([recorded_figures(r)["speedup"] for r in cell])
    row: dict = {}
    if repeated:
        row[f"{m} recorded runs"] = len(cell) if cell else None
    row[f"{m} recorded speedup"] = s
    if repeated:
        n = sum(1 for r in cell if recorded_figures(r)["speedup"] is not None)
        row.update(
            {
                f"{m} recorded speedup lo": lo,
                f"{m} recorded speedup hi": hi,
                f"{m} recorded spread": spread_kind(n),
            }
        )
    row[f"{m} recorded on"] = ", ".join(sorted({recorded_on(r) for r in cell})) or None
    return row


def main_table(runs: list[dict], include_tampered: bool = False) -> list[dict]:
    """One row (an ordered dict) per task; per model: speedup, improved (bool),
    held-out phi, held-out ratio, outcome, and when any cell holds several runs
    also runs, speedup lo/hi, spread, held-out ratio lo/hi (module docstring).
    Values are raw numbers (None if unknown). Those columns are mlxsci's: they
    count no imported run (mlxsci.report.runs.is_imported). Each model with
    imported runs also gets `recorded speedup` and `recorded on` (the
    chip and harness that recorded it; IMPORTED_NOTE), from the cell's
    imported runs (mlxsci.report.runs.imported_cell; with `recorded runs`,
    lo, hi and spread when any cell has several). When any run is tampered
    (mlxsci.report.runs.is_tampered), each model also gets `tampered`, the count of
    such runs, which the cells leave out unless include_tampered; when any
    run in a cell has a held-out draw that does not verify
    (mlxsci.report.runs.held_out_unverified), each model gets `unverified`,
    the count of such runs among the cell's."""
    models = models_of(runs)
    tasks = sorted({r["task"] for r in runs})
    counted = runs if include_tampered else trusted(runs)
    cells = {(t, m): cell_runs(counted, t, m) for t in tasks for m in models}
    repeated = any(len(cell) > 1 for cell in cells.values())
    recorded = {(t, m): imported_cell(counted, t, m) for t in tasks for m in models}
    # the models with imported runs (tampered ones too: their columns stay, empty)
    recorded_models = {r["model"] for r in runs if is_imported(r)}
    recorded_repeated = any(len(cell) > 1 for cell in recorded.values())
    flagged = any(is_tampered(r) for r in runs)
    unverified = any(held_out_unverified(r) for r in counted)
    rows = []
    for task in tasks:
        row = {"task": task}
        for m in models:
            cell = cells[(task, m)]
            row.update(
                _repeated_cell(m, cell) if repeated else _single_cell(m, cell[0] if cell else None)
            )
            if m in recorded_models:
                row.update(_recorded_cell(m, recorded[(task, m)], recorded_repeated))
            if flagged:
                row[f"{m} tampered"] = sum(
                    1 for r in runs if r["task"] == task and r["model"] == m and is_tampered(r)
                )
            if unverified:  # in the cell, but its held-out figures are in doubt
                row[f"{m} unverified"] = sum(1 for r in cell if held_out_unverified(r))
        rows.append(row)
    return rows


def _count(history, pred) -> int:
    """How many of the history's iterations (not the seed) satisfy pred;
    entries that are not records of an iteration are not counted."""
    if not isinstance(history, list):
        return 0
    return sum(
        1
        for h in history
        if isinstance(h, dict)
        and isinstance(h.get("iteration", 0), int)
        and h.get("iteration", 0) > 0
        and pred(h)
    )


def _compile_failure(h: dict) -> bool:
    return h.get("role") == "candidate" and not h.get("compile_ok")


def _incorrect(h: dict) -> bool:
    return h.get("role") == "candidate" and bool(h.get("compile_ok")) and not h.get("correct")


# The details columns that are mlxsci's measurements or its search's records:
# empty for an imported run, whose recorded figures have columns of their own.
MLXSCI_DETAILS = (
    "backend",
    "compile failures",
    "incorrect",
    "skipped",
    "implausible",
    "best iteration",
    "seed S",
    "best S",
    "S band",
    "tokens in",
    "tokens out",
    "cost usd",
    "wall s",
    "search outcome",
    "strategy",
    "K",
    "generations",
    "idle share",
    "duplicates",
    "lineage",
    "archive cells",
    "transfer grade",
    "held-out mode",
    "held-out verified",
    "evidence",
)


def _recorded_details(r: dict) -> dict:
    """An imported run's recorded figures for the details table (None for a
    native run): where they were recorded, seed and best S, speedup, best
    iteration, compile failures and wrong results of its recorded history,
    and how many of its candidates were converted."""
    if not is_imported(r):
        return dict.fromkeys(
            (
                "recorded on",
                "recorded seed S",
                "recorded best S",
                "recorded speedup",
                "recorded best iteration",
                "recorded compile failures",
                "recorded incorrect",
                "converted",
            )
        )
    figures = recorded_figures(r)
    hist = r.get("history")
    return {
        "recorded on": recorded_on(r),
        "recorded seed S": figures["seed S"],
        "recorded best S": figures["best S"],
        "recorded speedup": figures["speedup"],
        "recorded best iteration": figures["best iteration"],
        "recorded compile failures": _count(hist, _compile_failure),
        "recorded incorrect": _count(hist, _incorrect),
        "converted": converted(r),
    }


def lineage_text(chain) -> str | None:
    """A best's lineage, seed first: `0 > 3 > 7 (+5, 6)` (inspirations after +)."""
    if not isinstance(chain, list) or not chain:
        return None
    steps = []
    for step in reversed(chain):
        if not isinstance(step, dict):
            return None
        shown = str(step.get("iteration"))
        if step.get("inspirations"):
            shown += " (+" + ", ".join(str(i) for i in step["inspirations"]) + ")"
        steps.append(shown)
    return " > ".join(steps)


def details_table(runs: list[dict]) -> list[dict]:
    """One row per run. When any run is imported, the rows gain its recorded
    figures (_recorded_details, IMPORTED_NOTE), and an imported run's row
    leaves mlxsci's columns (MLXSCI_DETAILS) empty."""
    rows = []
    any_imported = any(is_imported(r) for r in runs)
    for r in runs:
        hist = r.get("history", [])
        tokens = r.get("tokens") or {}
        tokens = tokens if isinstance(tokens, dict) else {}
        row = {
            "task": r["task"],
            "model": r["model"],
            "backend": r.get("backend"),
            "iterations": r.get("iterations"),
            "compile failures": _count(hist, _compile_failure),
            "incorrect": _count(hist, _incorrect),
            "skipped": _count(hist, lambda h: h.get("role") == "skipped"),
            # correct, but timed below what the machine allows (mlxsci.evaluation.checks)
            "implausible": _count(hist, lambda h: bool(h.get("implausible"))),
            "best iteration": r.get("best_iteration"),
            "seed S": r.get("seed_score"),
            "best S": r.get("best_score"),
            # the noise band the speedup was judged against (mlxsci.evaluation.verdicts)
            "S band": None if is_imported(r) else assess_summary(r)["improvement_band"],
            "tokens in": tokens.get("input", 0),
            "tokens out": tokens.get("output", 0),
            "cost usd": r.get("cost_usd", 0.0),
            "wall s": r.get("wall_s"),
            "search outcome": r.get("outcome"),
            # the loop's shape (mlxsci.search: generations of K proposals), the
            # share of its time spent waiting on models alone, the best's lineage
            "strategy": r.get("strategy"),
            "K": r.get("population", 1),
            "generations": len(r.get("generations") or []) or None,
            "idle share": (r.get("time") or {}).get("idle_share"),
            "duplicates": r.get("duplicates"),
            "lineage": lineage_text(r.get("lineage")),
            "archive cells": len(r["archive"]) if r.get("archive") else None,
            # how the best fared at the held-out (summary.json's transfer):
            # its grade, how the held-out was chosen, whether the secret
            # draw verifies, and the strongest evidence for the grade
            "transfer grade": transfer_grade(r),
            "held-out mode": held_out_mode(r),
            "held-out verified": held_out_status(r),
            "evidence": strongest_evidence(r),
        }
        if is_imported(r):
            row.update(dict.fromkeys(MLXSCI_DETAILS))
        if any_imported:
            row.update(_recorded_details(r))
        # whether its files are as it finished (mlxsci.search.manifest)
        row["integrity"] = r.get("_integrity")
        row["run"] = Path(r["run_dir"]).name
        rows.append(row)
    return rows


def _transfer_row(
    model: str, task: str, cell: list[dict], tampered: int | None, show_unverified: bool
) -> dict:
    """One row of the transfer table: the cell's runs by grade. A run whose
    held-out draw does not verify is counted as unverified, not by its grade;
    `tampered` (None: no column) counts the runs left out as tampered."""
    unverified = [r for r in cell if held_out_unverified(r)]
    grades = [transfer_grade(r) for r in cell if not held_out_unverified(r)]
    wins = sum(1 for g in grades if g not in (None, NO_WIN, NOT_JUDGED))
    row: dict = {"model": model, "task": task, "runs": len(cell), "ungraded": grades.count(None)}
    if show_unverified:
        row["unverified"] = len(unverified)
    if tampered is not None:
        row["tampered"] = tampered
    row["no win"] = grades.count(NO_WIN)
    row["not judged"] = grades.count(NOT_JUDGED)
    row["wins"] = wins
    row["transferred"] = grades.count(TRANSFERS)
    row.update({g: grades.count(g) for g in FAILURE_GRADES})
    row["transfer rate"] = grades.count(TRANSFERS) / wins if wins else None
    return row


def transfer_table(runs: list[dict], include_tampered: bool = False) -> list[dict]:
    """The sequel's transfer table: per model, one row per task it ran and,
    with several tasks, an `all tasks` row over them; columns model, task,
    runs, ungraded, [unverified], [tampered], no win, not judged, wins, transferred, A,
    B, C, D, transfer rate (TRANSFER_NOTE). A row counts the runs the main
    table's cell counts (one per proposer seed, mlxsci.report.runs.cell_runs;
    tampered runs left out unless include_tampered); `unverified` appears
    when any counted run's held-out draw fails to verify, `tampered` when any
    run is tampered. Imported runs have no mlxsci grade: they are left out."""
    runs = native(runs)
    models, tasks = models_of(runs), sorted({r["task"] for r in runs})
    counted = runs if include_tampered else trusted(runs)
    show_unverified = any(held_out_unverified(r) for r in counted)
    flagged = any(is_tampered(r) for r in runs)
    rows = []
    for m in models:
        mine: list[dict] = []
        for task in tasks:
            cell = cell_runs(counted, task, m)
            bad = sum(1 for r in runs if r["task"] == task and r["model"] == m and is_tampered(r))
            if cell or bad:
                rows.append(_transfer_row(m, task, cell, bad if flagged else None, show_unverified))
            mine += cell
        ran = {r["task"] for r in runs if r["model"] == m}
        if len(ran) > 1:
            bad = sum(1 for r in runs if r["model"] == m and is_tampered(r))
            rows.append(
                _transfer_row(m, ALL_TASKS, mine, bad if flagged else None, show_unverified)
            )
    return rows


# -- rendering ----------------------------------------------------------------


def _fmt_cell(key: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if key.endswith("speedup"):
            return f"{value:.2f}x"
        if key.endswith("cost usd"):
            return f"{value:.4f}"
        if key == "idle share":
            return f"{value:.0%}"
        if key.endswith("wall s"):
            return f"{value:.1f}"
        if key.endswith(" rate"):
            return f"{value:.0%}"
        return f"{value:.3f}"
    return str(value)


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def _has_spread(rows: list[dict]) -> bool:
    return bool(rows) and any(k.endswith(" spread") for k in rows[0])


def _notes(rows: list[dict]) -> list[str]:
    """What the table's notes say: how spreads are made, what tampered counts."""
    notes = [f"Per cell: {SPREAD_NOTE}."] if _has_spread(rows) else []
    keys = list(rows[0]) if rows else []
    if "transfer rate" in keys:
        notes.append(f"{TRANSFER_NOTE}.")
    if any(k == "recorded on" or k.endswith(" recorded on") for k in keys):
        notes.append(f"{IMPORTED_NOTE[0].upper()}{IMPORTED_NOTE[1:]}.")
    for word, note in (("tampered", TAMPERED_NOTE), ("unverified", UNVERIFIED_NOTE)):
        if any(k == word or k.endswith(f" {word}") for k in keys):
            notes.append(f"{note[0].upper()}{note[1:]}.")
    return notes


def _with_spread(key: str, row: dict) -> str:
    """A cell, with its `[lo, hi]` when the row has them: '1.02x [1.00x, 1.05x]'."""
    text = _fmt_cell(key, row[key])
    lo, hi = row.get(f"{key} lo"), row.get(f"{key} hi")
    if lo is None or hi is None:
        return text
    return f"{text} [{_fmt_cell(key, lo)}, {_fmt_cell(key, hi)}]"


def _display(rows: list[dict]):
    """Headers and formatted cells for md/latex: `X improved` columns become
    the bold marking of `X speedup`; `X lo` / `X hi` join X's cell as its
    spread (`X spread` goes to the note under the table). Returns (headers,
    cells, bold)."""
    keys = list(rows[0]) if rows else []
    marks = {k[: -len(" improved")] + " speedup": k for k in keys if k.endswith(" improved")}
    shown = [k for k in keys if not k.endswith((" improved", " lo", " hi", " spread"))]
    spread = {k for k in shown if f"{k} lo" in keys}
    headers = [f"{k} [spread]" if k in spread else k for k in shown]
    cells, bold = [], []
    for row in rows:
        cells.append([_with_spread(k, row) for k in shown])
        bold.append([bool(k in marks and row.get(marks[k])) for k in shown])
    return headers, cells, bold


def _numeric(col: list[str]) -> bool:
    vals = [c for c in col if c != "-"]
    return bool(vals) and all(re.fullmatch(r"[-+]?[\d.]+(e[-+]?\d+)?[x%]?", v) for v in vals)


def render(rows: list[dict], fmt: str = "md", notes: bool = True) -> str:
    """Render rows (main_table, details_table or transfer_table) as md, latex,
    csv or json; md and latex with the notes their columns call for under
    the table, unless not `notes`."""
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return buf.getvalue()
    headers, cells, bold = _display(rows)
    align = ["right" if _numeric([c[i] for c in cells]) else "left" for i in range(len(headers))]
    if fmt == "md":
        # a | inside a cell (evidence quoting code: `a || b`) would end the cell
        cells = [[c.replace("|", r"\|") for c in cr] for cr in cells]
        shown = [[f"**{c}**" if b else c for c, b in zip(cr, br)] for cr, br in zip(cells, bold)]
        note = "".join(f"\n{n}\n" for n in _notes(rows)) if notes else ""
        return (
            tabulate(
                shown, headers=headers, tablefmt="github", colalign=align, disable_numparse=True
            )
            + "\n"
            + note
        )
    if fmt == "latex":

        def tex(c: str, b: bool = False) -> str:
            t = latex_escape(c)
            if re.fullmatch(r"[-+\d.]+x( \[[-+\d.]+x, [-+\d.]+x\])?", t):  # 1.02x [1.00x, 1.05x]
                t = re.sub(r"([\d.]+)x", r"\1$\\times$", t)
            return rf"\textbf{{{t}}}" if b else t

        spec = "".join("r" if a == "right" else "l" for a in align)
        lines = [
            rf"\begin{{tabular}}{{{spec}}}",
            r"\toprule",
            " & ".join(tex(h) for h in headers) + r" \\",
            r"\midrule",
        ]
        lines += [
            " & ".join(tex(c, b) for c, b in zip(cr, br)) + r" \\" for cr, br in zip(cells, bold)
        ]
        lines += [r"\bottomrule", r"\end{tabular}"]
        for n in _notes(rows) if notes else []:  # under the tabular, as a caption would
            lines += ["", rf"\par\footnotesize {latex_escape(n)}"]
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
