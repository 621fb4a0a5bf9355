"""Search strategies: what a proposer is shown, and what gets kept.

A strategy sees the search state and decides the context of the next
proposal; the loop owns proposing, evaluating and recording. Adding an
island or archive strategy means adding a class here, nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass, field


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
    previous: Entry | None = None            # the most recent attempt (even if it failed)
    previous_skipped: bool = False            # the last proposal had no usable candidate
    history: list = field(default_factory=list)


@dataclass
class Context:
    """What the next prompt shows."""
    previous: Entry | None
    incumbent: Entry | None
    history: list
    base: Entry                               # what the proposer should improve


class Strategy:
    name = ""

    def context(self, state: State) -> Context:
        raise NotImplementedError

    def accept(self, state: State, entry: Entry) -> bool:
        """True when `entry` becomes the new best."""
        return entry.result.get("candidate", {}).get("correct", False) and \
            entry.score > state.best.score


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
