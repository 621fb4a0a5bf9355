"""Search strategies: what a proposer is shown, and what gets kept.

A strategy sees the search state and decides the context of the next
proposal; the loop owns proposing, evaluating and recording. Adding an
island or archive strategy means adding a class here, nothing else.

Acceptance rules sit on top of a strategy's own `accept`: `strict` takes
what the strategy takes (Metal-Sci: a strictly higher S); `noise-aware`
also asks for a re-timing of incumbent and candidate side by side
(mlxsci.evaluation.comparison.compare) whose speedup lies beyond the noise, because two
S values from separate workers differ by more than their own runs' spread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlxsci.evaluation.verdicts import IMPROVED, band, change

ACCEPT_RULES = ("strict", "noise-aware")


@dataclass
class Entry:
    """A candidate and its result (Evaluation.to_json() dict)."""

    source: str
    result: dict
    iteration: int

    @property
    def score(self) -> float:
        cand = self.result.get("candidate", {})
        return float(cand.get("score") or 0.0) if cand.get("correct") else 0.0


@dataclass
class State:
    seed: Entry
    best: Entry
    previous: Entry | None = None  # the most recent attempt (even if it failed)
    previous_skipped: bool = False  # the last proposal had no usable candidate
    history: list = field(default_factory=list)


@dataclass
class Context:
    """What the next prompt shows."""

    previous: Entry | None
    incumbent: Entry | None
    history: list
    base: Entry  # what the proposer should improve


class Strategy:
    name = ""

    def context(self, state: State) -> Context:
        raise NotImplementedError

    def accept(self, state: State, entry: Entry) -> bool:
        """True when `entry` becomes the new best."""
        return (
            entry.result.get("candidate", {}).get("correct", False)
            and entry.score > state.best.score
        )


class OnePlusOne(Strategy):
    """Metal-Sci's strict (1+1): the proposer sees its previous attempt and the
    incumbent; a candidate replaces the incumbent only if its S is strictly higher."""

    name = "one-plus-one"

    def context(self, state: State) -> Context:
        if state.previous is None and not state.previous_skipped:
            return Context(None, None, [], state.best)
        return Context(state.previous, state.best, state.history, state.best)


class BestOfN(Strategy):
    """N independent proposals from the seed; the best is kept."""

    name = "best-of-n"

    def context(self, state: State) -> Context:
        return Context(None, None, [], state.seed)


STRATEGIES = {s.name: s for s in (OnePlusOne, BestOfN)}


def make_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return STRATEGIES[name]()


def check_accept_rule(name: str) -> str:
    if name not in ACCEPT_RULES:
        raise ValueError(f"unknown acceptance rule {name!r}; choose from {', '.join(ACCEPT_RULES)}")
    return name


def noise_aware_decision(comparison: dict) -> dict:
    """The comparison (mlxsci.evaluation.comparison.compare's dict) with the decision added:
    band (its noise, at least the floor), verdict of the speedup, accepted
    (only when the verdict is improved) and reason. A failed comparison
    ({"error": ...}) is not accepted: nothing shows the candidate is faster."""
    out = dict(comparison)
    if "error" in out:
        out.update(accepted=False, verdict=None, band=None, reason=f"not accepted: {out['error']}")
        return out
    b = band(out.get("noise"))
    verdict = change(out["speedup"], b)
    out.update(band=b, verdict=verdict, accepted=verdict == IMPROVED)
    how = f"re-timed speedup {out['speedup']:.3f}x against a band of {b:.1%}"
    out["reason"] = f"accepted: {how}" if out["accepted"] else f"not accepted: {how} is {verdict}"
    return out
