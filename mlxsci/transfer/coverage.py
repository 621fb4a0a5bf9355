"""Branch coverage of a candidate, as an evaluation recorded it, read as
hostile input.

On a backend that measures it (the simulator), `evaluate(..., coverage=True)`
records per branch arm of the candidate its line, column, kind and how often
it ran: Evaluation.coverage in to_json(), {"measured", "reason", "arms":
[{"line", "column", "kind", "hits"}], ...} (mlxsci.evaluation.evaluator.
CoverageTally.record), absent when not asked for or not measured. The counts come from
code the candidate's own text was compiled into, and a result file may be
old or hand-made, so nothing in it is trusted to have a shape: whatever is
not a plain record of (line, kind, hits) is dropped, and at most MAX_ARMS
arms are read. An arm that never ran at the search sizes is evidence of
grade B (mlxsci/transfer/grading.py): code no measurement ever checked.
"""

from __future__ import annotations

# A kernel has tens of branch arms; a list longer than this is no kernel's.
MAX_ARMS = 4096
MAX_KIND_CHARS = 40
MAX_REASON_CHARS = 200
# Keys an arm's count has gone by: `hits`, or `count` in a flatter record.
HIT_KEYS = ("hits", "count")


def plain_int(value, least: int) -> int | None:
    """`value` when it is an int (not a bool) of at least `least`, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        return None
    return value


def arm_of(item) -> dict | None:
    """One arm as {"line", "column", "kind", "hits"}, or None when `item` is
    not one (column 0 when it has none)."""
    if not isinstance(item, dict):
        return None
    line = plain_int(item.get("line"), 1)
    hits = plain_int(next((item[k] for k in HIT_KEYS if k in item), None), 0)
    if line is None or hits is None:
        return None
    column = plain_int(item.get("column"), 0) or 0
    kind = item.get("kind")
    kind = kind[:MAX_KIND_CHARS] if isinstance(kind, str) and kind.isprintable() else "branch"
    return {"line": line, "column": column, "kind": kind, "hits": hits}


def coverage_arms(evaluation) -> list[dict] | None:
    """The branch arms an evaluation's JSON records (Evaluation.to_json()),
    sorted by line and column: None when it records no coverage (not asked
    for, another backend, an older result, or `measured` not true), else the
    arms that have the expected shape. A bare list of arms is read too."""
    if not isinstance(evaluation, dict):
        return None
    raw = evaluation.get("coverage")
    if isinstance(raw, dict):
        raw = raw.get("arms") if raw.get("measured") is True else None
    if not isinstance(raw, list):
        return None
    arms = [arm for arm in map(arm_of, raw[:MAX_ARMS]) if arm is not None]
    return sorted(arms, key=lambda a: (a["line"], a["column"], a["kind"]))


def why_unmeasured(evaluation) -> str | None:
    """The reason an evaluation gives for recording no coverage (its
    coverage record's `reason`), cut to a line; None when it gives none."""
    raw = evaluation.get("coverage") if isinstance(evaluation, dict) else None
    reason = raw.get("reason") if isinstance(raw, dict) else None
    return " ".join(reason.split())[:MAX_REASON_CHARS] if isinstance(reason, str) else None
