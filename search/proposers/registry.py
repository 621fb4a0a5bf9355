"""The choice of a proposer: `make_proposer(model, ...)` picks one from the model name:

    "autotune"          AutotuneProposer (offline; the no-key default)
    "replay:RUN_DIR"    ReplayProposer (re-proposes a recorded run's candidates)
    "a,b,..."           ModelMix: several models, a bandit choosing which answers
                        each request (search/proposers/mix.py)
    with --base-url     OpenAIChatProposer (any OpenAI-compatible Chat Completions
                        server: mlx_lm.server, Ollama, vLLM, llama.cpp, Gemini)
    "claude*"           AnthropicProposer (Messages API)
    anything else       OpenAIProposer (Responses API)

`api=` forces "anthropic", "openai" (Responses) or "openai-chat".

The LLM proposers, with which key goes where and the retries, are in
search/proposers/llm.py; the autotuner and replay in search/proposers/offline.py.
This module is the face the loop and library users import them from.
"""

from __future__ import annotations

from typing import Any

from mlxsci.search.proposers.base import Proposer, ProposerError
from mlxsci.search.proposers.llm import (
    DEFAULT_LLM_RETRIES,
    DEFAULT_LLM_TIMEOUT_S,
    PLACEHOLDER_KEY,
    AnthropicProposer,
    OpenAIChatProposer,
    OpenAIProposer,
)
from mlxsci.search.proposers.mix import ModelMix, model_names
from mlxsci.search.proposers.offline import AutotuneProposer, ReplayProposer

__all__ = [
    "make_proposer",
    "AnthropicProposer",
    "OpenAIProposer",
    "OpenAIChatProposer",
    "AutotuneProposer",
    "ReplayProposer",
    "ModelMix",
    "APIS",
    "PLACEHOLDER_KEY",
    "DEFAULT_LLM_TIMEOUT_S",
    "DEFAULT_LLM_RETRIES",
]

APIS = ("auto", "anthropic", "openai", "openai-chat")


def make_proposer(
    model: str,
    *,
    api: str = "auto",
    base_url: str | None = None,
    seed: int = 0,
    prices: dict | None = None,
    timeout_s: float = DEFAULT_LLM_TIMEOUT_S,
    max_retries: int = DEFAULT_LLM_RETRIES,
    max_tokens: int = 32000,
    api_key_env: str | None = None,
    backoff_s: float | None = None,
) -> Proposer:
    """The proposer for `model` (see the module docstring for the routing, and
    search/proposers/llm.py for which key goes where). timeout_s: seconds one
    attempt may wait for its answer; max_retries: attempts after the first;
    backoff_s: the first wait between attempts when the server names none
    (doubled each time).
    Raises ProposerError when it cannot be used (missing key, bad replay dir)."""
    try:
        names = model_names(model or "")
    except ValueError as exc:
        raise ProposerError(str(exc)) from None
    model = names[0] if len(names) == 1 else model  # " autotune" is autotune
    if not model:
        raise ProposerError("no model given (use --model autotune for the offline autotuner)")
    api = api or "auto"
    if api not in APIS:
        raise ProposerError(f"unknown api {api!r}; expected one of {', '.join(APIS)}")
    # What every LLM proposer takes (a mix passes them on to each of its models).
    kwargs: dict[str, Any] = dict(
        base_url=base_url,
        prices=prices,
        timeout_s=timeout_s,
        max_retries=max_retries,
        max_tokens=max_tokens,
        api_key_env=api_key_env,
        backoff_s=backoff_s,
    )
    if len(names) > 1:  # several models in one run, a bandit choosing between them
        if len(set(names)) != len(names):
            raise ProposerError(f"--model names a model twice: {model}")
        return ModelMix({name: make_proposer(name, api=api, seed=seed, **kwargs) for name in names})
    if model == "autotune":
        return AutotuneProposer(seed=seed)
    if model.startswith("replay:"):
        path = model[len("replay:") :]
        if not path:
            raise ProposerError("replay needs a run directory: --model replay:RUN_DIR")
        return ReplayProposer(path)
    if not timeout_s > 0:
        raise ProposerError(
            f"the LLM timeout must be a positive number of seconds, got {timeout_s}"
        )
    if int(max_retries) != max_retries or max_retries < 0:
        raise ProposerError(f"the LLM retries must be a whole number >= 0, got {max_retries}")
    if api == "auto":
        if base_url:
            api = "openai-chat"
        elif model.lower().startswith("claude"):
            api = "anthropic"
        else:
            api = "openai"
    if api == "anthropic":
        return AnthropicProposer(model, **kwargs)
    if api == "openai":
        return OpenAIProposer(model, **kwargs)
    return OpenAIChatProposer(model, **kwargs)
