"""Search strategies: what each proposal of a generation is shown, and what is kept.

A strategy is `ask(state, n) -> [Request]` (the n proposals of the next
generation: what each prompt shows and which lane it belongs to) and
`tell(state, outcomes)` (the generation's outcomes, in slot order, folded
into the strategy's own bookkeeping: lanes' previous attempts, islands'
parents, the archive's cells). The loop (search/loop.py) owns proposing,
evaluating and recording, and it alone decides the run's best (the entry
the held-out gate and the transfer grade judge), with the acceptance rule.

Everything a strategy decides is a function of the state and the
generation's number (its random draws are seeded by the run's seed and the
generation), so a resumed run, which rebuilds the state by telling the
strategy every recorded generation again, asks for the same proposals a run
that was never stopped would have asked for. `state_json` is that state as
the run directory keeps it (strategy_state.json), by iteration numbers.

Acceptance rules sit on top of `accept`: `strict` takes what the strategy
takes (Metal-Sci: a strictly higher S); `noise-aware` also asks for a
re-timing of incumbent and candidate side by side
(mlxsci.evaluation.comparison.compare) whose speedup lies beyond the noise,
because two S values from separate workers differ by more than their own
runs' spread. The rule decides the run's best; islands' and cells' own
elites are search-internal parents, kept on a strictly higher S.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from mlxsci.evaluation.verdicts import IMPROVED, band, change
from mlxsci.search.features import cell_of, describe_cell

ACCEPT_RULES = ("strict", "noise-aware")
DEFAULT_ISLANDS = 4
DEFAULT_MIGRATION_INTERVAL = 5  # generations between two migrations
INSPIRATIONS = 2  # elites of other cells shown beside a map-elites parent


@dataclass
class Entry:
    """A candidate and its result (Evaluation.to_json() dict)."""

    source: str
    result: dict
    iteration: int
    parent: int | None = None  # the iteration of the entry its prompt asked to improve
    inspirations: tuple[int, ...] = ()  # iterations shown beside the parent

    @property
    def score(self) -> float:
        cand = self.result.get("candidate", {})
        return float(cand.get("score") or 0.0) if cand.get("correct") else 0.0


@dataclass
class Lane:
    """One chain of proposals (a slot of one-plus-one, an island): its own
    incumbent, its last attempt, and the history records it has seen."""

    best: Entry
    previous: Entry | None = None  # the most recent attempt (even if it failed)
    previous_skipped: bool = False  # the last proposal had no usable candidate
    records: list = field(default_factory=list)  # its own history records


@dataclass
class State:
    seed: Entry
    best: Entry
    history: list = field(default_factory=list)
    lanes: dict = field(default_factory=dict)  # lane number -> Lane
    archive: dict = field(default_factory=dict)  # map-elites: cell key -> Entry
    generation: int = 0  # generations told so far
    migrations: list = field(default_factory=list)  # islands: (generation, from, to, iteration)

    def lane(self, number: int) -> Lane:
        if number not in self.lanes:
            self.lanes[number] = Lane(best=self.best)
        return self.lanes[number]


@dataclass
class Context:
    """What one prompt shows."""

    previous: Entry | None
    incumbent: Entry | None
    history: list
    base: Entry  # what the proposer should improve
    first: bool = False  # the iteration-1 prompt: the seed and its result only
    inspirations: list = field(default_factory=list)  # [(Entry, kind)]: other cells' elites
    kind: str | None = None  # the base's archive cell, in words (map-elites)


@dataclass
class Request:
    """One proposal of a generation: its slot, the lane it extends, and its context."""

    slot: int
    lane: int
    context: Context


@dataclass
class Outcome:
    """What one request gave: an evaluated entry, or None (no candidate)."""

    request: Request
    entry: Entry | None
    record: dict


def lane_context(lane: Lane, incumbent: Entry, history: list) -> Context:
    """A (1+1) chain's next prompt: the first prompt until the lane has made
    an attempt, then its previous attempt beside `incumbent`, with `history`."""
    if lane.previous is None and not lane.previous_skipped:
        return Context(None, None, [], incumbent, first=True)
    return Context(lane.previous, incumbent, history, incumbent)


class Strategy:
    name = ""

    def __init__(
        self,
        seed: int = 0,
        islands: int = DEFAULT_ISLANDS,
        migration_interval: int = DEFAULT_MIGRATION_INTERVAL,
        kernels: tuple[str, ...] = (),
    ):
        self.seed = int(seed)
        self.islands = max(1, int(islands))
        self.migration_interval = max(1, int(migration_interval))
        self.kernels = tuple(kernels)

    def start(self, state: State) -> None:
        """Bookkeeping a run begins with (the seed in the archive, ...)."""

    def ask(self, state: State, n: int) -> list[Request]:
        """The `n` requests of the next generation."""
        raise NotImplementedError

    def tell(self, state: State, outcomes: list[Outcome]) -> None:
        """Fold a generation's outcomes (slot order) into the lanes; the
        run's best is already decided (the loop's)."""
        for outcome in outcomes:
            lane = state.lane(outcome.request.lane)
            lane.records.append(outcome.record)
            if outcome.entry is None:
                lane.previous_skipped = True
            else:
                lane.previous, lane.previous_skipped = outcome.entry, False
        state.generation += 1

    def accept(self, state: State, entry: Entry) -> bool:
        """True when `entry` may become the run's new best (before the noise-aware rule)."""
        return (
            entry.result.get("candidate", {}).get("correct", False)
            and entry.score > state.best.score
        )

    def rng(self, state: State, slot: int) -> random.Random:
        """The random draws of `slot` in the next generation: seeded by the
        run's seed, the generation and the slot, so a resume draws alike."""
        return random.Random(f"{self.name}:{self.seed}:{state.generation + 1}:{slot}")

    def state_json(self, state: State) -> dict:
        """The strategy's state by iteration numbers (strategy_state.json)."""
        return {
            "strategy": self.name,
            "generation": state.generation,
            "best": state.best.iteration,
            "lanes": {
                str(n): {
                    "best": lane.best.iteration,
                    "previous": lane.previous.iteration if lane.previous else None,
                    "previous_skipped": lane.previous_skipped,
                }
                for n, lane in sorted(state.lanes.items())
            },
        }


class OnePlusOne(Strategy):
    """Metal-Sci's strict (1+1): the proposer sees its previous attempt and the
    incumbent; a candidate replaces the incumbent only if its S is strictly
    higher. With several proposals a generation, each slot is a lane with its
    own previous attempt, all improving the one incumbent: a (1+K)."""

    name = "one-plus-one"

    def ask(self, state: State, n: int) -> list[Request]:
        return [Request(slot, slot, self.context(state, state.lane(slot))) for slot in range(n)]

    def context(self, state: State, lane: Lane) -> Context:
        return lane_context(lane, state.best, state.history)


class BestOfN(Strategy):
    """N independent proposals from the seed; the best is kept."""

    name = "best-of-n"

    def ask(self, state: State, n: int) -> list[Request]:
        return [
            Request(slot, slot, Context(None, None, [], state.seed, first=True))
            for slot in range(n)
        ]


class Islands(Strategy):
    """Several sub-populations (islands), each a (1+1) chain with its own
    incumbent, previous attempt and history; the slots of a generation go to
    the islands in turn. Every `migration_interval` generations each island's
    best moves to the next island in a ring, where it becomes the incumbent
    if it scores higher (FunSearch's and OpenEvolve's islands, kept small)."""

    name = "islands"

    def start(self, state: State) -> None:
        for number in range(self.islands):
            state.lane(number)

    def ask(self, state: State, n: int) -> list[Request]:
        # The islands take the proposals in turn, counted over the whole run
        # (not by generation: a resume with other --iterations may cut one short).
        done = state.history[-1]["iteration"] if state.history else 0
        requests = []
        for slot in range(n):
            number = (done + slot) % self.islands
            island = state.lane(number)
            shown = [state.history[0], *island.records] if state.history else island.records
            requests.append(Request(slot, number, lane_context(island, island.best, shown)))
        return requests

    def tell(self, state: State, outcomes: list[Outcome]) -> None:
        super().tell(state, outcomes)
        for outcome in outcomes:
            island = state.lane(outcome.request.lane)
            entry = outcome.entry
            if entry is not None and entry.score > island.best.score:
                island.best = entry
        if state.generation % self.migration_interval == 0 and self.islands > 1:
            self.migrate(state)

    def migrate(self, state: State) -> None:
        """Each island's best (as it was before this migration) to the next island."""
        bests = [state.lane(n).best for n in range(self.islands)]
        for n, migrant in enumerate(bests):
            target = state.lane((n + 1) % self.islands)
            if migrant.score > target.best.score:
                target.best = migrant
                state.migrations.append(
                    (state.generation, n, (n + 1) % self.islands, migrant.iteration)
                )

    def state_json(self, state: State) -> dict:
        out = super().state_json(state)
        out["migration_interval"] = self.migration_interval
        out["migrations"] = [
            {"generation": g, "from": a, "to": b, "iteration": it}
            for g, a, b, it in state.migrations
        ]
        return out


class MapElites(Strategy):
    """An archive keyed by what a kernel is (search/features.py: threadgroup
    memory or not, vector width, threadgroup size class, and the kernel that
    takes most of the time where a task has several): each cell keeps its
    best. A proposal's parent is drawn from the archive (the better of two
    cells drawn at random), and a few elites of other cells go in its prompt
    as inspirations (AlphaEvolve's program database, without islands)."""

    name = "map-elites"

    def start(self, state: State) -> None:
        self.place(state, state.seed)

    def place(self, state: State, entry: Entry) -> None:
        if not entry.result.get("candidate", {}).get("correct"):
            return
        key = cell_of(entry.source, entry.result, self.kernels)
        held = state.archive.get(key)
        if held is None or entry.score > held.score:
            state.archive[key] = entry

    def ask(self, state: State, n: int) -> list[Request]:
        return [self.request(state, slot) for slot in range(n)]

    def request(self, state: State, slot: int) -> Request:
        cells = sorted(state.archive)
        if not cells:  # the seed failed: nothing to draw from
            return Request(slot, 0, Context(None, None, [], state.seed, first=True))
        rng = self.rng(state, slot)
        a, b = rng.choice(cells), rng.choice(cells)
        key = a if state.archive[a].score >= state.archive[b].score else b
        others = [c for c in cells if c != key]
        rng.shuffle(others)
        inspirations = [(state.archive[c], describe_cell(c)) for c in others[:INSPIRATIONS]]
        parent = state.archive[key]
        ctx = Context(
            None, parent, state.history, parent,
            inspirations=inspirations, kind=describe_cell(key),
        )  # fmt: skip
        return Request(slot, 0, ctx)

    def tell(self, state: State, outcomes: list[Outcome]) -> None:
        super().tell(state, outcomes)
        for outcome in outcomes:
            if outcome.entry is not None:
                self.place(state, outcome.entry)

    def state_json(self, state: State) -> dict:
        out = super().state_json(state)
        out["archive"] = {
            key: {"iteration": e.iteration, "score": e.score}
            for key, e in sorted(state.archive.items())
        }
        return out


STRATEGIES = {s.name: s for s in (OnePlusOne, BestOfN, Islands, MapElites)}


def make_strategy(name: str, **settings) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return STRATEGIES[name](**settings)


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
