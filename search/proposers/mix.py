"""Several models in one run: `--model a,b,c`, a bandit choosing which proposes each request.

`ModelMix` is a proposer made of others (one per model); a request's
PromptContext names the member that answers it (`ctx.model`), and the loop
names it with `choose_models`: UCB1 over the run's history, where a model's
proposal is a success when it gave a correct candidate scoring above the
parent its prompt asked to improve. A model not yet asked goes first (in
the order given); within a generation each choice counts as a pull already,
so K requests spread over the models as their scores allow. The choice is a
function of the recorded history alone, so a resumed run chooses as an
unstopped one would have. The cost of each model is in summary.json
(`models`), from the records' `model_choice`.

Which key goes where is each member's own (search/proposers/keys.py); a
model without a price makes the mix unpriced (refused under a cost cap).
"""

from __future__ import annotations

import math
from pathlib import Path

from mlxsci.search.proposers.base import PromptContext, Proposal, Proposer
from mlxsci.search.rundir import record_score

SEPARATOR = ","


def model_names(model: str) -> list[str]:
    """The models a --model names: one, or several separated by commas (a
    replay of a folder whose name holds a comma is one). ValueError for an
    empty name between commas."""
    whole = model.strip()
    if whole.startswith("replay:") and Path(whole[len("replay:") :].strip()).is_dir():
        return [whole]
    names = [m.strip() for m in model.split(SEPARATOR)]
    if len(names) > 1 and not all(names):
        raise ValueError(f"--model {model!r} has an empty name between its commas")
    return [n for n in names if n] or [whole]


class ModelMix(Proposer):
    """Members by model name; each call goes to the member `ctx.model` names
    (the first when none is named)."""

    def __init__(self, members: dict[str, Proposer]):
        if not members:
            raise ValueError("a model mix needs at least one model")
        self.members = dict(members)
        self.name = "+".join(self.members)
        unpriced = [p.unpriced_model for p in self.members.values() if p.unpriced_model]
        self.unpriced_model = unpriced[0] if unpriced else None

    @property
    def models(self) -> list[str]:
        return list(self.members)

    def member(self, ctx: PromptContext) -> Proposer:
        return self.members.get(ctx.model or "", next(iter(self.members.values())))

    def propose(self, ctx: PromptContext) -> Proposal:
        return self.member(ctx).propose(ctx)

    def worst_case_cost(self, ctx: PromptContext) -> float | None:
        return self.member(ctx).worst_case_cost(ctx)

    def __setattr__(self, name, value):
        # The loop sets `say` on its proposer: every member prints through it.
        if name == "say" and "members" in self.__dict__:
            for member in self.members.values():
                member.say = value
        super().__setattr__(name, value)


def success(record: dict, scores: dict[int, float | None]) -> bool:
    """A proposal that gave a correct candidate scoring above its parent's."""
    if record.get("role") != "candidate" or not record.get("correct"):
        return False
    score, parent = record.get("score"), record.get("parent")
    base = scores.get(parent) if isinstance(parent, int) else None
    return isinstance(score, (int, float)) and (base is None or score > base)


def choose_models(history: list[dict], models: list[str], n: int) -> list[str]:
    """The models of the next generation's `n` requests (UCB1 over the
    history's records, each choice counted as a pull for the next)."""
    scores = {r["iteration"]: record_score(r) for r in history}
    pulls = dict.fromkeys(models, 0)
    wins = dict.fromkeys(models, 0)
    for rec in history:
        model = rec.get("model_choice")
        if model in pulls:
            pulls[model] += 1
            wins[model] += success(rec, scores)
    chosen = []
    for _ in range(n):
        untried = [m for m in models if pulls[m] == 0]
        if untried:
            pick = untried[0]
        else:
            total = sum(pulls.values())
            pick = max(
                models,
                key=lambda m: wins[m] / pulls[m] + math.sqrt(2 * math.log(total) / pulls[m]),
            )
        chosen.append(pick)
        pulls[pick] += 1
    return chosen


def model_costs(history: list[dict], models: list[str]) -> dict[str, dict]:
    """Per model: calls, successes, tokens and USD, from the records."""
    scores = {r["iteration"]: record_score(r) for r in history}
    out = {m: {"calls": 0, "successes": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
           for m in models}  # fmt: skip
    for rec in history:
        row = out.get(str(rec.get("model_choice")))
        if row is None:
            continue
        row["calls"] += 1
        row["successes"] += success(rec, scores)
        row["input_tokens"] += rec.get("input_tokens", 0)
        row["output_tokens"] += rec.get("output_tokens", 0)
        row["cost_usd"] += rec.get("cost_usd", 0.0)
    return out
