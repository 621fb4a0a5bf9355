"""What a search keeps in its run directory, and reads back on resume: the
seed's and each iteration's artefacts (proposal, candidate, result), the best,
the held-out results, and the state rebuilt from them.

It is separate from search/loop.py because it is the run directory side of a
search (what makes a killed run resumable), apart from proposing and judging.
`IterationFiles` is a base of loop.Search: its evaluations go through
Search.evaluate, so they stay the loop's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from mlxsci.search.progress import fmt
from mlxsci.search.proposers.base import Proposal
from mlxsci.search.rundir import RunDir
from mlxsci.search.strategies import Entry, State
from mlxsci.search.summary import entry_score
from mlxsci.task import Task


class IterationFiles:
    """The run directory methods of a search (loop.Search sets the attributes)."""

    opts: dict
    rd: RunDir
    task: Task
    dialect: str
    say: Callable[[str], object]

    def evaluate(self, source: str, filename: str, size_set: str) -> dict:
        raise NotImplementedError  # loop.Search.evaluate

    # -- the seed -------------------------------------------------------------
    def seed_entry(self, history: list[dict]) -> Entry:
        seed_file = self.rd.file(f"00_seed.{self.rd.ext}")
        result_file = self.rd.file("00_result.json")
        if history and history[0]["iteration"] == 0:
            return Entry(self.artefact(seed_file, 0), self.artefact(result_file, 0, True), 0)
        source = self.opts["start_source"] or self.task.seed(self.dialect)
        self.rd.write_text(seed_file, source)
        self.say("iter 0: evaluating the seed")
        t0 = time.perf_counter()
        result = self.evaluate(source, str(seed_file), self.opts["sizes"])
        self.rd.write_json(result_file, result)
        self.say(f"iter 0  seed     S={fmt(entry_score(result))}")
        record = {
            "iteration": 0,
            "role": "seed",
            "exhausted": False,
            "compile_ok": result["candidate"]["compile_ok"],
            "correct": result["candidate"]["correct"],
            "score": entry_score(result),
            "fail_reason": result["candidate"]["fail_reason"],
            "source_path": seed_file.name,
            "elapsed_s": time.perf_counter() - t0,
            "is_new_best": True,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
        }
        self.rd.append_history(record)
        history.insert(0, record)  # before any later record a damaged line left behind
        return Entry(source, result, 0)

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

    # -- rebuilding the state from the run directory --------------------------
    def rebuild(self, seed: Entry, history: list[dict]) -> State:
        state = State(seed=seed, best=seed, history=history)
        for rec in history[1:]:
            if rec["role"] == "skipped":
                state.previous_skipped = True
                continue
            it = rec["iteration"]
            entry = Entry(
                self.artefact(self.rd.iter_file(it, "candidate"), it),
                self.artefact(self.rd.iter_file(it, "result.json"), it, True),
                it,
            )
            state.previous, state.previous_skipped = entry, False
            if rec.get("is_new_best"):
                state.best = entry
        return state

    # -- one iteration's proposal -------------------------------------------------
    def saved_proposal(self, it: int) -> Proposal | None:
        """The proposal of iteration `it` if a killed run saved it, else None."""
        saved = self.rd.iter_file(it, "proposal.json")
        if saved.exists():
            meta = self.rd.read_json(saved)
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

    def save_proposal(self, it: int, proposal: Proposal) -> None:
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
            },
        )

    def write_best(self, entry: Entry) -> None:
        self.rd.write_text(self.rd.file(f"best.{self.rd.ext}"), entry.source)
        self.rd.write_json(self.rd.file("best_result.json"), entry.result)

    # -- the held-out gate --------------------------------------------------------
    def held_out(self, entry: Entry, name: str) -> dict:
        """Held-out evaluation of an entry, cached in the run dir per iteration."""
        path = self.rd.file(f"held_out_{name}.json")
        if path.exists():
            saved = self.rd.read_json(path)
            if saved.get("iteration") == entry.iteration:
                return saved["result"]
        self.say(f"held-out: evaluating the {name} (iteration {entry.iteration})")
        result = self.evaluate(entry.source, f"{name}.{self.rd.ext}", "held-out")
        self.rd.write_json(path, {"iteration": entry.iteration, "result": result})
        return result
