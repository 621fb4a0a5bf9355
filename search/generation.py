"""One generation's proposals in flight at once, each evaluated as it arrives.

A generation is a list of `Slot`s (one per request of the strategy). Each
slot's proposal is either saved already (a resumed run: reused, never asked
for again) or asked of the proposer; with more than one slot the calls go
out together, one thread each (the SDKs' clients are thread-safe, and a call
spends its time waiting on the network). An answer is taken in by the one
thread that writes the run directory (this module's caller's), which saves
it, extracts the candidate and hands it to an evaluation thread; at most
`workers` evaluations run at once (each in its own sandboxed worker process:
threads only wait on them). A candidate whose normalised text was evaluated
before (an earlier generation, or another slot of this one) is not evaluated
again: it takes that evaluation's result and is marked a duplicate.

Nothing here decides what is kept: the caller gets every slot filled in
(proposal, source, result, times) and decides in slot order, so arrival
order never changes the bookkeeping. One proposal and one worker (the
default search) run inline, in this thread, exactly as the loop always did.

Times: each slot's model wait (its call, retries included) and evaluation
seconds, and the generation's busy intervals, from which the caller takes
the time the harness sat idle, waiting on models only.
"""

from __future__ import annotations

import hashlib
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mlxsci.search.proposers import PromptContext, Proposal
from mlxsci.search.strategies import Request


def normalised_hash(source: str) -> str:
    """What two candidates share when they differ only in whitespace within
    lines or in blank lines: the digest of their non-blank lines, each with
    its runs of spaces and tabs made one space. Line breaks count (they end
    a `//` comment, a `#define` and a `//!` directive)."""
    lines = (re.sub(r"[ \t\f\v]+", " ", line).strip() for line in source.splitlines())
    text = "\n".join(line for line in lines if line)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


@dataclass
class Slot:
    """One request of a generation, and what became of it."""

    request: Request
    iteration: int
    generation: int = 0
    model: str | None = None  # the model asked, in a run of several
    saved: Proposal | None = None  # its answer, saved by a stopped run
    prompt: PromptContext | None = None  # None: the proposal was saved before
    proposal: Proposal | None = None
    source: str | None = None  # the extracted candidate (None: no usable block)
    result: dict | None = None
    duplicate_of: int | None = None  # the iteration whose evaluation this one took
    model_wait_s: float = 0.0
    evaluate_s: float = 0.0
    discarded_cost: float = 0.0  # what an answer saved for another place had cost

    @property
    def place(self) -> dict:
        """Where the request sits: what a saved answer must have been asked for."""
        place = {
            "generation": self.generation,
            "slot": self.request.slot,
            "lane": self.request.lane,
        }
        return place if self.model is None else {**place, "model": self.model}


@dataclass
class Hooks:
    """What the generation needs from the search (search/loop.py Search)."""

    call: Callable[[PromptContext], Proposal]  # the proposer's answer; never raises
    took_proposal: Callable[[Slot], str | None]  # saves it, returns the candidate's text
    saved_result: Callable[[Slot], dict | None]  # a result saved for this very text
    evaluate: Callable[[Slot], dict]
    took_result: Callable[[Slot], None]  # saves the result


@dataclass
class Generation:
    slots: list[Slot]
    hooks: Hooks
    workers: int  # evaluations at once
    known: dict = field(default_factory=dict)  # normalised hash -> (iteration, result)
    busy: list = field(default_factory=list)  # (start, end) of each evaluation

    def run(self) -> None:
        if len(self.slots) == 1 or (self.workers <= 1 and self.all_saved()):
            for slot in self.slots:
                self.arrived(slot, self.propose(slot), inline=True)
        else:
            self.run_concurrently()
        self.settle_twins()

    def all_saved(self) -> bool:
        return all(slot.prompt is None for slot in self.slots)

    # -- proposing ------------------------------------------------------------
    def propose(self, slot: Slot) -> Proposal:
        if slot.saved is not None:
            return slot.saved
        assert slot.prompt is not None, "a slot without a saved proposal has its prompt"
        t0 = time.perf_counter()
        proposal = self.hooks.call(slot.prompt)
        slot.model_wait_s = time.perf_counter() - t0
        return proposal

    # -- one answer in --------------------------------------------------------
    def arrived(self, slot: Slot, proposal: Proposal, inline: bool = False) -> Slot | None:
        """Take `slot`'s answer in; the slot to evaluate (None: nothing to
        evaluate now: no candidate, a duplicate, or a result saved before)."""
        slot.proposal = proposal
        slot.source = self.hooks.took_proposal(slot)
        if slot.source is None:
            return None
        saved = self.hooks.saved_result(slot)
        twin = self.known.get(normalised_hash(slot.source))
        if saved is not None:
            slot.result = saved
            if twin is not None and twin[0] != slot.iteration:
                slot.duplicate_of = twin[0]  # as it was when first evaluated
            else:
                self.known[normalised_hash(slot.source)] = (slot.iteration, saved)
            return None
        if twin is not None:
            self.take_twin(slot, *twin)
            return None
        self.known[normalised_hash(slot.source)] = (slot.iteration, None)  # being evaluated
        if inline:
            self.evaluate(slot)
            self.finished(slot)
            return None
        return slot

    def take_twin(self, slot: Slot, iteration: int, result: dict | None) -> None:
        """`slot` holds a text evaluated (or being evaluated) as `iteration`."""
        slot.duplicate_of = iteration
        if result is not None:
            slot.result = result
            self.hooks.took_result(slot)

    def evaluate(self, slot: Slot) -> None:
        t0 = time.perf_counter()
        slot.result = self.hooks.evaluate(slot)
        t1 = time.perf_counter()
        slot.evaluate_s = t1 - t0
        self.busy.append((t0, t1))

    def finished(self, slot: Slot) -> None:
        """`slot`'s evaluation is in: saved, and given to the slots that wait on its text."""
        self.hooks.took_result(slot)
        assert slot.source is not None and slot.result is not None
        self.known[normalised_hash(slot.source)] = (slot.iteration, slot.result)
        for other in self.slots:
            if other.duplicate_of == slot.iteration and other.result is None:
                other.result = slot.result
                self.hooks.took_result(other)

    # -- many at once -----------------------------------------------------------
    def run_concurrently(self) -> None:
        events: queue.Queue = queue.Queue()
        to_evaluate: queue.Queue = queue.Queue()
        stop = threading.Event()

        def ask(slot: Slot) -> None:
            try:
                events.put(("proposal", slot, self.propose(slot)))
            except BaseException as exc:  # noqa: BLE001 - handed to the writing thread
                events.put(("error", slot, exc))

        def evaluate_in_turn() -> None:
            while not stop.is_set():
                slot = to_evaluate.get()
                if slot is None:
                    return
                try:
                    self.evaluate(slot)
                    events.put(("result", slot, None))
                except BaseException as exc:  # noqa: BLE001 - handed to the writing thread
                    events.put(("error", slot, exc))

        # Daemons: a run stopped (Ctrl-C, a fault) does not wait on a model;
        # each evaluation's worker ends with this process (its lifeline).
        evaluators = [
            threading.Thread(target=evaluate_in_turn, daemon=True, name=f"evaluate-{i}")
            for i in range(max(1, self.workers))
        ]
        for thread in evaluators:
            thread.start()
        for slot in self.slots:
            threading.Thread(
                target=ask, args=(slot,), daemon=True, name=f"propose-{slot.iteration}"
            ).start()
        pending = len(self.slots)  # answers not yet in, and evaluations not yet done
        try:
            while pending:
                kind, slot, payload = self.next_event(events)
                if kind == "error":
                    self.keep_arrived(events)
                    raise payload
                if kind == "proposal":
                    ready = self.arrived(slot, payload)
                    if ready is not None:
                        to_evaluate.put(ready)
                        continue  # its evaluation is still pending
                else:
                    self.finished(slot)
                pending -= 1
        finally:
            stop.set()
            for _ in evaluators:
                to_evaluate.put(None)

    def settle_twins(self) -> None:
        """Twins within the generation, whichever arrived first: the lowest
        iteration is the original, the others its duplicates (a text seen in
        an earlier generation keeps that one as the original)."""
        ours = {slot.iteration for slot in self.slots}
        groups: dict[str, list[Slot]] = {}
        for slot in self.slots:
            if slot.source is not None:
                groups.setdefault(normalised_hash(slot.source), []).append(slot)
        for members in groups.values():
            earlier = [s.duplicate_of for s in members if s.duplicate_of not in ours | {None}]
            origin = earlier[0] if earlier else min(s.iteration for s in members)
            for slot in members:
                slot.duplicate_of = None if slot.iteration == origin else origin

    def keep_arrived(self, events: queue.Queue) -> None:
        """Before a generation stops on an error: save the answers already
        in (paid for), so that a resume does not ask for them again."""
        while True:
            try:
                kind, slot, payload = events.get_nowait()
            except queue.Empty:
                return
            if kind == "proposal":
                try:
                    slot.proposal = payload
                    self.hooks.took_proposal(slot)
                except Exception:  # noqa: BLE001 - the first error is the one to raise
                    return

    @staticmethod
    def next_event(events: queue.Queue):
        """The next event; waits in short steps so Ctrl-C reaches this thread."""
        while True:
            try:
                return events.get(timeout=0.2)
            except queue.Empty:
                continue


def idle_seconds(started: float, ended: float, busy: list[tuple[float, float]]) -> float:
    """Seconds of [started, ended] in which no evaluation ran (the union of
    the busy intervals taken away)."""
    covered, last = 0.0, started
    for a, b in sorted(busy):
        a, b = max(a, last), min(b, ended)
        if b > a:
            covered += b - a
            last = b
    return max(0.0, (ended - started) - covered)
