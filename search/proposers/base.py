"""What a proposer is: something that, given prompts, returns a candidate.

Every proposer (LLM APIs, the offline autotuner, replay of a recorded run)
implements `Proposer.propose(PromptContext) -> Proposal`. The search loop
never looks inside a proposer; a proposer never evaluates anything.

A proposer never raises for a failed call: a provider failure of any kind
(HTTP error, timeout, refused connection, malformed or truncated answer) is a
Proposal with text None and `error` saying why, which the loop records as a
skipped iteration. Two optional hooks serve the loop: `say` (set by the loop)
prints progress such as retries, and `worst_case_cost` bounds the next call's
cost so a spending cap is checked before the call, not after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PromptContext:
    """Everything a proposer may use for one iteration. It never holds a
    held-out size or result: those stay inside the search loop."""

    task: str  # task name
    dialect: str  # "metal" or "cuda"
    iteration: int  # 1-based
    system: str  # system prompt
    user: str  # user prompt
    incumbent_source: str  # the incumbent candidate file
    tried_sources: list = field(default_factory=list)  # every candidate proposed so far
    # Its place among the generation's concurrent requests (0 when one at a time):
    # an offline proposer answers each slot with a different candidate.
    slot: int = 0
    # The model that answers, where several share a run (search/proposers/mix.py).
    model: str | None = None


@dataclass
class Proposal:
    """A proposer's answer. `text` is the raw response (None when the call
    failed for good, with `error` saying why); the loop extracts the candidate."""

    text: str | None
    reasoning: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    error: str | None = None
    model: str = ""  # the model that answered, as the provider names it
    exhausted: bool = False  # the proposer has nothing left to propose: the run stops


class ProposerError(Exception):
    """A proposer cannot be used at all (missing API key, unknown model, bad
    replay directory): raised before the search starts, with a clear message."""


class Proposer:
    name: str = "proposer"  # used in run-directory names and summaries
    # The model whose calls cost money but have no price (None: priced, or free
    # by nature like the autotuner); the loop refuses it under a spending cap.
    unpriced_model: str | None = None

    def propose(self, ctx: PromptContext) -> Proposal:
        raise NotImplementedError

    def say(self, message: str) -> None:
        """A progress line (retries, waits); the loop replaces this with its own."""

    def worst_case_cost(self, ctx: PromptContext) -> float | None:
        """The most the call for `ctx` can cost in USD; None when unknown (the
        loop then checks a spending cap only after each call)."""
        return None
