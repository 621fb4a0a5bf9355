"""A sweep-wide cost cap shared by the sweep's runs, never overshot.

Each search enforces its own `max_cost` before every call (mlxsci.search:
the call's worst-case cost must fit in what is left of it), so the sweep
only has to hand out per-run caps whose sum never exceeds the sweep's:

    left = cap - spent - reserved

`spent` is what every run of the sweep has spent so far (earlier sessions
included, read from the run directories, so a sweep started again does not
spend its cap twice); `reserved` is what the runs in flight may still spend
(their allotments). A run that starts gets an allotment of what is left,
shared among the runs starting at that moment (one at a time with the local
executor; as many as the Ray cluster has room for with Ray), and a search cap
of what it had already spent plus that allotment. When it ends, what it did
not spend of its allotment goes back to what is left. No run starts when
nothing is left: with runs in flight it waits for what they give back;
without, the rest of the sweep is not started. Runs that make no paid calls
(autotune, replay: mlxsci.sweep.runs.free_model) take no share and start
regardless.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

# Less than this (USD) counts as nothing left: shares of a float never add up exactly.
NOTHING_LEFT = 1e-9


def spent_by_run(run_dir: Path) -> float:
    """USD a run has spent so far: the calls of its finished iterations
    (history.jsonl) plus any call saved for an iteration without a record yet
    (NN_proposal.json of a run killed between the call and the record, which
    a resume reuses rather than pays for again)."""
    from mlxsci.search.rundir import RunDir

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return 0.0
    history = RunDir(run_dir).history()
    recorded = {r["iteration"] for r in history}
    total = sum(_cost(r) for r in history)
    for path in run_dir.glob("*_proposal.json"):
        prefix = path.name.split("_", 1)[0]
        if not prefix.isdigit() or int(prefix) in recorded:
            continue
        try:
            total += _cost(json.loads(path.read_text()))
        except (OSError, ValueError):  # a damaged file: the resume will redo that call
            continue
    return total


def _cost(record) -> float:
    """A record's (or a saved proposal's) USD as the search counts it
    (mlxsci.search.rundir.spent_usd), 0 when not finite: a sweep's total
    stays a number."""
    from mlxsci.search.rundir import spent_usd

    spent = spent_usd(record) if isinstance(record, dict) else 0.0
    return spent if math.isfinite(spent) else 0.0


class CostBudget:
    """The sweep's cost cap (`total`, USD; None: no cap) and, optionally, a cap
    on each search's own total (`per_run`). `spent`: what the sweep's runs had
    spent before this session."""

    def __init__(self, total: float | None, per_run: float | None = None, spent: float = 0.0):
        self.total = total
        self.per_run = per_run
        self.spent = spent
        self.reserved: dict[str, float] = {}  # run name -> allotment, runs in flight

    def left(self) -> float:
        if self.total is None:
            return math.inf
        return self.total - self.spent - sum(self.reserved.values())

    def exhausted(self) -> bool:
        return self.left() <= NOTHING_LEFT

    def allot(self, starting: list[tuple[str, float]]) -> list[float | None]:
        """The search caps (their max_cost) of the runs starting now, given as
        (name, what it had already spent): each its spend so far plus an equal
        share of what is left (no more than per_run in all); None: no cap at
        all. Each allotment stays reserved until settle()."""
        if self.total is None:
            return [self.per_run] * len(starting)
        share = max(self.left(), 0.0) / max(len(starting), 1)
        caps: list[float | None] = []
        for name, prior in starting:
            allotment = share
            if self.per_run is not None:
                allotment = min(allotment, max(self.per_run - prior, 0.0))
            self.reserved[name] = allotment
            caps.append(prior + allotment)
        return caps

    def settle(self, name: str, prior: float, spent_now: float | None) -> None:
        """Run `name` ended having spent `spent_now` in all (None: unknown, as
        when its worker was lost with the run's files: its whole allotment is
        counted spent). What it did not spend is left for the others."""
        allotment = self.reserved.pop(name, 0.0)
        if spent_now is None:
            self.spent += allotment
        else:
            self.spent += max(spent_now - prior, 0.0)

    def describe(self) -> str:
        """'$3.2000 of $8.0000 spent' for the console."""
        if self.total is None:
            return f"${self.spent:.4f} spent"
        return f"${self.spent:.4f} of ${self.total:.4f} spent"
