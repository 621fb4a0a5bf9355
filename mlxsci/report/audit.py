"""The audit of imported Metal-Sci runs: how far mlxsci's re-score agrees
with what Metal-Sci recorded, and Metal-Sci's own table set beside mlxsci's.

Three tables of the report's re-score section (mlxsci/report/rescore_section.py
renders them) and one plot, all from rescore.json's records:

    agreement   per task and over all: the candidates both harnesses gave a
                verdict (mlxsci's `not_judged` and not-evaluated ones left
                out), those whose only Metal error lies in the kernel's
                signature counted apart (MLX writes the signature, so no
                re-score can reproduce that error:
                mlxsci/import_metal_sci/recorded_errors.py), and of the rest
                how many agree on pass or fail (correct against any failure).
    metal_sci   per run, Metal-Sci's published figures for its best (the
                in-distribution speedup over the seed, and the held-out ratio
                its results folder recorded) beside mlxsci's of the same
                kernels on the modelled GPU, mlxsci's verdicts and transfer
                grade, and a note where the two speedups differ by more than
                the modelled clock's stated uncertainty (MODEL_FACTOR).
    cause       (a column of the disagreements table) why one verdict
                differs from the other, in one line, from what the records
                say: the size mlxsci ran, the check that failed, the error
                Metal's compiler gave.

`write_audit_plot` draws recorded against modelled in-distribution speedup.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from mlxsci.import_metal_sci.records import CORRECT, MLXSCI_VERDICTS, NOT_JUDGED
from mlxsci.import_metal_sci.rescore import recorded_size, verdict_sizes
from mlxsci.report.runs import number, shorten
from mlxsci.task import load_task

# The modelled clock's stated uncertainty against a real GPU: the share of
# kernels its validation found within this factor of the M1 Pro's time
# (docs/simulator-time.md, "Validated against real timings"). A speedup is a
# ratio of two such times; beyond this factor the two disagree.
MODEL_FACTOR = 2.0
CAUSE_CHARS = 160
ALL = "all tasks"

AGREEMENT_COLUMNS = (
    "task",
    "judged by both",
    "signature error (apart)",
    "compared",
    "agree",
    "disagree",
    "agreement",
)
METAL_SCI_COLUMNS = (
    "task",
    "model",
    "run",
    "recorded in-dist x",
    "modelled in-dist x",
    "recorded held-out x",
    "modelled held-out x",
    "mlxsci in-dist",
    "mlxsci held-out",
    "transfer grade",
    "note",
)


def _judged(rec: dict) -> bool:
    """Both harnesses gave a verdict about the kernel."""
    return rec["recorded"] is not None and rec["mlxsci"] not in (None, NOT_JUDGED)


def _passes(verdict: str) -> bool:
    return verdict == CORRECT


def agreement_table(records: list[dict]) -> list[dict]:
    """Per task, and over all tasks: pass/fail agreement (module docstring)."""
    by_task: dict[str, list[dict]] = {}
    for rec in records:
        by_task.setdefault(rec["_run"]["task"], []).append(rec)
    rows = [_agreement_row(task, recs) for task, recs in sorted(by_task.items())]
    if len(rows) > 1:
        rows.append(_agreement_row(ALL, records))
    return rows


def _agreement_row(task: str, records: list[dict]) -> dict:
    judged = [r for r in records if _judged(r)]
    apart = [r for r in judged if r.get("recorded_signature_error")]
    compared = [r for r in judged if not r.get("recorded_signature_error")]
    agree = sum(1 for r in compared if _passes(r["recorded"]) == _passes(r["mlxsci"]))
    return {
        "task": task,
        "judged by both": len(judged),
        "signature error (apart)": len(apart),
        "compared": len(compared),
        "agree": agree,
        "disagree": len(compared) - agree,
        "agreement": agree / len(compared) if compared else None,
    }


# -- why two verdicts differ -------------------------------------------------------

_AT_SIZE = re.compile(r"at size ([\w.x+-]{1,60})")
_METAL_ERROR = re.compile(r"program_source:\d+:\d+: error: ([^\n^]{1,140})")


def _size_of(reason: str | None) -> str | None:
    m = _AT_SIZE.search(reason or "")
    return m.group(1) if m else None


def _labels(task: str, size_set: str, recorded_reason: str | None = None) -> list[str]:
    """The labels of the sizes a record's size set judged its candidate at
    (with METAL_SCI_SIZES, the first in-dist one and the recorded failure's)."""
    try:
        return [s.label for s in verdict_sizes(load_task(task), size_set, recorded_reason)]
    except (ValueError, KeyError):
        return []


def cause(rec: dict) -> str:
    """Why mlxsci's verdict differs from the recorded one, in one line."""
    task = rec["_run"]["task"]
    recorded, mine = rec["recorded"], rec["mlxsci"]
    reason = rec.get("reason") or ""
    if rec.get("recorded_signature_error"):
        return shorten(
            "Metal's only error lies in the kernel's signature, which MLX writes: "
            + rec["recorded_signature_error"],
            CAUSE_CHARS,
        )
    if recorded == "compile_error":
        m = _METAL_ERROR.search(reason)
        said = m.group(1) if m else "its compiler's error"
        if "mismatching address spaces" in said:
            # MLX binds an input of fewer than 8 elements as `constant`, where
            # Metal-Sci's signature said `device`: the same cast is valid here.
            return shorten(
                "the address space of a buffer, which MLX's signature sets (an input of "
                f"fewer than 8 elements is constant), made Metal refuse a cast: {said}",
                CAUSE_CHARS,
            )
        return shorten(f"Metal's compiler refused what mlxsci's accepts: {said}", CAUSE_CHARS)
    if _passes(recorded) and not _passes(mine):
        return _mlxsci_failure_cause(task, rec["sizes"], reason)
    if not _passes(recorded) and _passes(mine):
        return _unreproduced_cause(task, rec["sizes"], reason)
    return shorten(f"both fail, differently: {reason}", CAUSE_CHARS)


def _unreproduced_cause(task: str, size_set: str, reason: str) -> str:
    """Why a kernel Metal-Sci recorded failing is correct here: mlxsci did
    not run the size it failed at, or ran it and found it correct."""
    theirs = reason.split("recorded:", 1)[-1]
    size = _size_of(theirs)
    ran = _labels(task, size_set, theirs)
    try:
        same = recorded_size(list(load_task(task).size_set("in-dist")), theirs)
    except (ValueError, KeyError):
        same = None
    if size and (same is None or same.label not in ran):
        return shorten(
            f"Metal-Sci failed at its size {size}; mlxsci ran its {size_set} sizes "
            f"({', '.join(ran) or size_set}), where the kernel is correct",
            CAUSE_CHARS,
        )
    if size and same is not None:
        return shorten(
            f"mlxsci ran Metal-Sci's failing size {size} ({same.label}) and found the kernel "
            f"correct: {reason}",
            CAUSE_CHARS,
        )
    return shorten(f"a recorded failure mlxsci does not reproduce: {reason}", CAUSE_CHARS)


def _mlxsci_failure_cause(task: str, size_set: str, reason: str) -> str:
    """Why a kernel Metal-Sci recorded correct fails here."""
    size = _size_of(reason)
    theirs = size is not None and size in _labels(task, "in-dist")
    if size is None:
        where = f"at mlxsci's {size_set} sizes"
    elif theirs:
        where = f"at {size}, one of Metal-Sci's sizes"
    else:
        where = f"at mlxsci's {size_set} size {size}, which Metal-Sci never ran"
    if "unwritten output" in reason:
        what = (
            "leaves output elements unwritten (Metal-Sci's host buffers held them; "
            "mlxsci's start poisoned)"
        )
    elif "misaligned" in reason:
        what = "a misaligned vector access (Metal-Sci's sizes are multiples of the vector width)"
    elif "out_of_bounds" in reason or "out-of-bounds" in reason:
        what = "an access out of bounds, which a GPU reads or writes silently"
    elif "leaves undefined" in reason:
        what = "reads what Metal leaves undefined (the M1 happened to give a usable value)"
    elif "race" in reason or "order" in reason:
        what = "a result that depends on the threads' order (a race)"
    else:
        what = "fails mlxsci's checks"
    return shorten(f"{what}, {where}: {reason}", CAUSE_CHARS)


# -- Metal-Sci's table beside mlxsci's -------------------------------------------------


def _factor(a: float | None, b: float | None) -> float | None:
    """How many times apart two speedups are (>= 1), None without both."""
    if not a or not b or a <= 0 or b <= 0:
        return None
    return math.exp(abs(math.log(a / b)))


def _note(rec: dict, recorded_in: float | None, recorded_held: float | None) -> str | None:
    """Where mlxsci's figures differ from Metal-Sci's beyond the model's
    uncertainty, which kernel and why it thinks so; None where they agree."""
    in_dist, held = rec.get("in_dist") or {}, rec.get("held_out") or {}
    notes = []
    for place, block, theirs in (
        ("in-dist", in_dist, recorded_in),
        ("held-out", held, recorded_held),
    ):
        if block.get("mlxsci") not in (None, CORRECT):
            said = block.get("reason") or block["mlxsci"]
            notes.append(f"{place}: mlxsci judged the best {block['mlxsci']} ({said})")
            continue
        apart = _factor(block.get("speedup"), theirs)
        if apart is not None and apart > MODEL_FACTOR:
            notes.append(
                f"{place}: modelled {block['speedup']:.3g}x against recorded {theirs:.3g}x, "
                f"{apart:.2g} times apart, beyond the modelled clock's {MODEL_FACTOR:g}x"
            )
    return shorten("; ".join(notes), 240) if notes else None


def metal_sci_table(records: list[dict]) -> list[dict]:
    """One row per run's recorded best re-scored with its in-dist block
    (module docstring), by task and model."""
    rows = []
    bests = [r for r in records if r.get("recorded_best") and r.get("in_dist")]
    for rec in sorted(bests, key=lambda r: (r["_run"]["task"], r["_run"]["model"], r["run"])):
        recorded = rec["_run"].get("recorded") or {}
        theirs_held = recorded.get("held_out") or {}
        recorded_in = recorded.get("improvement")
        recorded_held = theirs_held.get("ratio")
        grade = (rec.get("transfer") or {}).get("grade")
        held_verdict = (rec.get("held_out") or {}).get("mlxsci")
        rows.append(
            {
                "task": rec["_run"]["task"],
                "model": rec["_run"]["model"],
                "run": rec["run"],
                "recorded in-dist x": number(recorded_in),
                "modelled in-dist x": number(rec["in_dist"].get("speedup")),
                "recorded held-out x": number(recorded_held)
                if recorded_held is not None
                else ("FAIL" if theirs_held.get("fail") else None),
                "modelled held-out x": number((rec.get("held_out") or {}).get("speedup")),
                "mlxsci in-dist": rec["in_dist"].get("mlxsci"),
                "mlxsci held-out": held_verdict if held_verdict in MLXSCI_VERDICTS else None,
                "transfer grade": shorten(grade, 24) if grade else None,
                "note": _note(rec, recorded_in, recorded_held),
            }
        )
    return rows


def write_audit_plot(rows: list[dict], out: Path) -> list[Path]:
    """Recorded against modelled in-distribution speedup of each run's best
    (metal_sci_table's rows), log-log, with the diagonal and the model's
    stated uncertainty; PNG and SVG. [] when no row has both."""
    points = [
        (r["recorded in-dist x"], r["modelled in-dist x"], r["task"])
        for r in rows
        if isinstance(r["recorded in-dist x"], float) and isinstance(r["modelled in-dist x"], float)
        and r["recorded in-dist x"] > 0 and r["modelled in-dist x"] > 0
    ]  # fmt: skip
    if not points:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    tasks = sorted({t for _, _, t in points})
    cmap = plt.get_cmap("tab20", max(len(tasks), 1))
    for k, task in enumerate(tasks):
        xs = [x for x, _, t in points if t == task]
        ys = [y for _, y, t in points if t == task]
        ax.scatter(xs, ys, label=task, color=cmap(k), s=28)
    lo = min(min(x, y) for x, y, _ in points) / 1.5
    hi = max(max(x, y) for x, y, _ in points) * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", lw=1)
    for f in (MODEL_FACTOR, 1 / MODEL_FACTOR):
        ax.plot([lo, hi], [lo * f, hi * f], color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    ax.set_xlabel("recorded in-distribution speedup (Metal-Sci, M1 Pro)")
    ax.set_ylabel("modelled in-distribution speedup (mlxsci, modelled GPU)")
    ax.set_title(f"Best over seed, per run (dashed: {MODEL_FACTOR:g}x apart)")
    ax.legend(fontsize=7, ncol=2)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "audit_speedups.png", out / "audit_speedups.svg"]
    fig.savefig(paths[0], dpi=120, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return paths
