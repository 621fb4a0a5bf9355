"""The report's section on how each search ran (with --details, Markdown):
its generations, where their time went, and a map-elites run's archive.

Apart from the tables (mlxsci/report/tables.py), which hold one row per run
or per cell, because these are tables per run, read from summary.json's
`generations`, `time` and `archive` (mlxsci.search.summary), for the runs
that have them: a run of one proposal per generation has nothing here that
the details table does not say.
"""

from __future__ import annotations

from pathlib import Path

from mlxsci.search.archive_map import archive_markdown


def _number(value) -> float | None:
    """A figure of summary.json, or None when it is not a number (a report
    never trusts a file's types)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _seconds(value) -> str:
    value = _number(value)
    return "-" if value is None else f"{value:.1f}"


def generations_markdown(generations: list[dict]) -> str:
    lines = [
        "| generation | iterations | correct | best S after | new best | wall s "
        "| longest model wait s | evaluating s | idle s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in generations:
        if not isinstance(g, dict):
            continue
        listed = g.get("iterations")
        its: list = listed if isinstance(listed, list) else []
        span = f"{its[0]}-{its[-1]}" if len(its) > 1 else str(its[0] if its else "-")
        best = _number(g.get("best_score"))
        lines.append(
            f"| {g.get('generation')} | {span} | {g.get('correct')} | "
            f"{'-' if best is None else f'{best:.4f}'} | {'yes' if g.get('new_best') else 'no'} | "
            f"{_seconds(g.get('wall_s'))} | {_seconds(g.get('model_wait_s'))} | "
            f"{_seconds(g.get('evaluate_s'))} | {_seconds(g.get('idle_s'))} |"
        )
    return "\n".join(lines) + "\n"


def search_section(runs: list[dict]) -> str | None:
    """The section, or None when no run had several proposals a generation
    or an archive."""
    parts = []
    for r in runs:
        generations = r.get("generations") or []
        archive = r.get("archive") or []
        population = _number(r.get("population")) or 1
        if not (archive or population > 1) or not isinstance(generations, list):
            continue
        if not isinstance(archive, list) or not all(isinstance(a, dict) for a in archive):
            archive = []
        name = Path(str(r.get("run_dir") or "?")).name
        recorded = r.get("time")
        spent: dict = recorded if isinstance(recorded, dict) else {}
        share = _number(spent.get("idle_share"))
        parts.append(
            f"### {name}: {r.get('strategy')}, K = {r.get('population', 1)}\n\n"
            f"{len(generations)} generations, {_seconds(spent.get('generations_wall_s'))} s; "
            f"idle (waiting on models alone) {'-' if share is None else f'{share:.0%}'}; "
            f"model calls {_seconds(spent.get('model_calls_s'))} s and evaluations "
            f"{_seconds(spent.get('evaluate_s'))} s summed over the slots.\n"
        )
        parts.append(generations_markdown(generations))
        if archive:
            parts.append(
                f"Archive ({len(archive)} cells; picture: {name}/archive.png):\n\n"
                + archive_markdown(archive)
            )
    if not parts:
        return None
    return "## Searches in generations\n\n" + "\n".join(parts)
