"""What a proposer is: something that, given prompts, returns a candidate.

Every proposer (LLM APIs, the offline autotuner, replay of a recorded run)
implements `Proposer.propose(PromptContext) -> Proposal`. The search loop
never looks inside a proposer; a proposer never evaluates anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PromptContext:
    """Everything a proposer may use for one iteration. It never holds a
    held-out size or result: those stay inside the search loop."""
    task: str                    # task name
    dialect: str                 # "metal" or "cuda"
    iteration: int               # 1-based
    system: str                  # system prompt
    user: str                    # user prompt
    incumbent_source: str        # the incumbent candidate file
    tried_sources: list = field(default_factory=list)   # every candidate proposed so far


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
    model: str = ""              # the model that answered, as the provider names it
    exhausted: bool = False      # the proposer has nothing left to propose: the run stops


class ProposerError(Exception):
    """A proposer cannot be used at all (missing API key, unknown model, bad
    replay directory): raised before the search starts, with a clear message."""


class Proposer:
    name: str = "proposer"       # used in run-directory names and summaries

    def propose(self, ctx: PromptContext) -> Proposal:
        raise NotImplementedError
