"""What a search keeps in its run directory, and reads back on resume: the
seed's and each iteration's artefacts (proposal, candidate, result), the best,
the held-out results, and the state rebuilt from them.

It is separate from search/loop.py because it is the run directory side of a
search (what makes a killed run resumable), apart from proposing, evaluating
and judging: loop.Search holds an `IterationFiles` and does those itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlxsci.search.proposers import Proposal
from mlxsci.search.rundir import RunDir
from mlxsci.search.strategies import Context, Entry, Outcome, Request, State, Strategy


def generations(records: list[dict]) -> list[list[dict]]:
    """Records grouped by generation, in order (a record from before
    generations is one of its own)."""
    groups: list[list[dict]] = []
    last = object()
    for rec in records:
        key = rec.get("generation", ("iteration", rec["iteration"]))
        if not groups or key != last:
            groups.append([])
            last = key
        groups[-1].append(rec)
    return groups


class IterationFiles:
    """The files of one search's iterations in its run directory `rd`."""

    def __init__(self, rd: RunDir):
        self.rd = rd
        self.seed_file = rd.file(f"00_seed.{rd.ext}")
        self.seed_result_file = rd.file("00_result.json")

    # -- reading back -----------------------------------------------------------
    def recorded_seed(self, history: list[dict]) -> Entry | None:
        """The seed as a finished iteration 0 left it, or None when it has none."""
        if not (history and history[0]["iteration"] == 0):
            return None
        return Entry(
            self.artefact(self.seed_file, 0), self.artefact(self.seed_result_file, 0, True), 0
        )

    def artefact(self, path: Path, iteration: int, as_json: bool = False):
        """The text (or JSON) of a file a history record stands for; ValueError,
        saying what to do, when it is gone or damaged."""
        try:
            text = path.read_text()
            return json.loads(text) if as_json else text
        except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
            reason = (
                "is missing"
                if isinstance(exc, FileNotFoundError)
                else f"is damaged ({type(exc).__name__}: {exc})"
            )
            raise ValueError(
                f"{path} {reason}, but history.jsonl records iteration {iteration} as done: "
                f"restore the file, or delete that iteration's line from history.jsonl to "
                "run it again"
            ) from None

    def rebuild(
        self, seed: Entry, history: list[dict], strategy: Strategy
    ) -> tuple[State, list[Entry]]:
        """The state between generations, as the recorded ones left it (each
        generation told to the strategy again, its recorded decisions kept),
        and every evaluated entry, the seed first."""
        state = State(seed=seed, best=seed, history=history)
        strategy.start(state)
        entries = [seed]
        for records in generations(history[1:]):
            for rec in records:  # as the live run's ask made them, before any new best
                state.lane(rec.get("lane", 0))
            outcomes = []
            for rec in records:
                entry = None
                if rec["role"] != "skipped":
                    it = rec["iteration"]
                    entry = Entry(
                        self.artefact(self.rd.iter_file(it, "candidate"), it),
                        self.artefact(self.rd.iter_file(it, "result.json"), it, True),
                        it,
                        rec.get("parent"),
                        tuple(rec.get("inspirations") or ()),
                    )
                    entries.append(entry)
                    if rec.get("is_new_best"):
                        state.best = entry
                lane = rec.get("lane", 0)
                request = Request(rec.get("slot", 0), lane, Context(None, None, [], seed))
                outcomes.append(Outcome(request, entry, rec))
            strategy.tell(state, outcomes)
        return state, entries

    def tried_sources(self, seed: Entry, history: list[dict]) -> list[str]:
        """Every candidate proposed so far, the seed first."""
        return [seed.source] + [
            self.artefact(self.rd.iter_file(r["iteration"], "candidate"), r["iteration"])
            for r in history[1:]
            if r["role"] == "candidate"
        ]

    # -- one iteration's proposal -------------------------------------------------
    def saved_proposal(self, it: int, place: dict | None = None) -> Proposal | None:
        """The proposal of iteration `it` if a killed run saved it, else None.
        place: where the iteration now sits (generation, slot, lane); an
        answer saved for another place (the run was resumed with other
        --iterations, which moves generations' bounds) is not this one's."""
        saved = self.rd.iter_file(it, "proposal.json")
        if saved.exists():
            meta = self.rd.read_json(saved)
            if place is not None and meta.get("place", place) != place:
                return None
            response = self.rd.iter_file(it, "response.md")
            reasoning = self.rd.iter_file(it, "reasoning.md")
            return Proposal(
                text=response.read_text() if response.exists() else None,
                reasoning=reasoning.read_text() if reasoning.exists() else None,
                input_tokens=meta["input_tokens"],
                output_tokens=meta["output_tokens"],
                cost_usd=meta["cost_usd"],
                error=meta["error"],
                model=meta["model"],
                exhausted=meta.get("exhausted", False),
            )
        return None

    def forget(self, it: int) -> float:
        """Remove what a stopped run left of iteration `it` (its proposal
        first, so that no half of it is taken for saved); what its saved call
        had cost (0 when there was none)."""
        cost = 0.0
        path = self.rd.iter_file(it, "proposal.json")
        if path.exists():
            try:
                value = self.rd.read_json(path).get("cost_usd")
            except (OSError, ValueError, AttributeError):
                value = None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
                cost = float(value)
        for kind in ("proposal.json", "response.md", "reasoning.md", "candidate", "result.json"):
            self.rd.iter_file(it, kind).unlink(missing_ok=True)
        return cost

    def save_proposal(self, it: int, proposal: Proposal, place: dict | None = None) -> None:
        saved = self.rd.iter_file(it, "proposal.json")
        # Artefacts first, then proposal.json: its presence means the call is saved.
        if proposal.text is not None:
            self.rd.write_text(self.rd.iter_file(it, "response.md"), proposal.text)
        if proposal.reasoning:
            self.rd.write_text(self.rd.iter_file(it, "reasoning.md"), proposal.reasoning)
        self.rd.write_json(
            saved,
            {
                "input_tokens": proposal.input_tokens,
                "output_tokens": proposal.output_tokens,
                "cost_usd": proposal.cost_usd,
                "error": proposal.error,
                "model": proposal.model,
                "exhausted": proposal.exhausted,
                **({"place": place} if place is not None else {}),
            },
        )

    def write_best(self, entry: Entry) -> None:
        self.rd.write_text(self.rd.file(f"best.{self.rd.ext}"), entry.source)
        self.rd.write_json(self.rd.file("best_result.json"), entry.result)

    # -- the held-out gate --------------------------------------------------------
    def held_out_file(self, name: str) -> Path:
        return self.rd.file(f"held_out_{name}.json")

    def saved_held_out(self, entry: Entry, name: str, draw: str) -> dict | None:
        """The held-out result of `entry` saved as `name` (seed, best) at the
        held-out `draw` (its commitment, or the mode), if saved for them."""
        return self.saved_for(self.held_out_file(name), entry, draw)

    def save_held_out(self, entry: Entry, name: str, result: dict, draw: str) -> None:
        self.save_for(self.held_out_file(name), entry, draw, result)

    def saved_transfer(self, entry: Entry, draw: str) -> dict | None:
        """The transfer grade of `entry` at `draw` (transfer.json), if judged."""
        return self.saved_for(self.rd.file("transfer.json"), entry, draw)

    def save_transfer(self, entry: Entry, draw: str, judged: dict) -> None:
        self.save_for(self.rd.file("transfer.json"), entry, draw, judged)

    def saved_for(self, path: Path, entry: Entry, draw: str) -> dict | None:
        """What `path` holds for `entry` at `draw`: None when it holds another's."""
        if not path.exists():
            return None
        saved = self.rd.read_json(path)
        # (a result saved before draws existed was at the listed held-out)
        if saved.get("iteration") == entry.iteration and saved.get("draw", "metal-sci") == draw:
            return saved["result"]
        return None

    def save_for(self, path: Path, entry: Entry, draw: str, result: dict) -> None:
        self.rd.write_json(path, {"iteration": entry.iteration, "draw": draw, "result": result})
