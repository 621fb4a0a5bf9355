"""Where candidates come from: offline proposers (autotune, replay) and LLM clients, with their keys and prices.

What the search uses: `make_proposer(model, ...)` (search/proposers/registry.py)
picks the proposer for a model name; every proposer is a `Proposer` whose
`propose(PromptContext)` returns a `Proposal`, and one that cannot be used at
all raises `ProposerError` (search/proposers/base.py). `load_prices` and
`lookup_price` read the price table (search/proposers/prices.py); the LLM
calls' default timeout and retries are DEFAULT_LLM_TIMEOUT_S and
DEFAULT_LLM_RETRIES.
"""

from mlxsci.search.proposers.base import PromptContext, Proposal, Proposer, ProposerError
from mlxsci.search.proposers.mix import ModelMix, choose_models, model_costs
from mlxsci.search.proposers.prices import load_prices, lookup_price
from mlxsci.search.proposers.registry import (
    DEFAULT_LLM_RETRIES,
    DEFAULT_LLM_TIMEOUT_S,
    make_proposer,
)

__all__ = [
    "make_proposer",
    "Proposer",
    "Proposal",
    "PromptContext",
    "ProposerError",
    "ModelMix",
    "choose_models",
    "model_costs",
    "load_prices",
    "lookup_price",
    "DEFAULT_LLM_TIMEOUT_S",
    "DEFAULT_LLM_RETRIES",
]
