"""Token prices for cost accounting: USD per million input / output tokens.

The table is as of 2026 and only lists models whose list prices we know;
prices change, so override any entry with `--prices FILE`, a JSON object
`{"model-or-prefix": [in_per_M, out_per_M], ...}`. A model matches the
longest key that is a prefix of its name (so "claude-opus-4-1-20250805"
matches "claude-opus-4-1"). A model nothing matches (local models) is
unpriced: its calls are counted as $0 (the search warns once), and a search
with a spending cap refuses it until --prices gives it a price ([0, 0] for
a free local model). Cached-input discounts and long-context surcharges are
ignored: the numbers are an estimate for a spending cap, not an invoice.

`worst_case_cost` bounds a call before it is made, for the cap: the prompt's
tokens estimated from its length (CHARS_PER_TOKEN, fewer characters per token
than real tokenizers give for English and code, so an overestimate) plus the
request's whole output allowance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = [
    "DEFAULT_PRICES",
    "CHARS_PER_TOKEN",
    "load_prices",
    "lookup_price",
    "cost_usd",
    "estimate_tokens",
    "worst_case_cost",
]

# Tokenizers give about 4 characters of English or code per token; 3 errs high.
CHARS_PER_TOKEN = 3

# As of 2026; override with --prices. Keys are model names or name prefixes.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    # Anthropic
    "claude-opus-4": (5.0, 25.0),  # Opus 4.5 and later
    "claude-opus-4-0": (15.0, 75.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4-2025": (15.0, 75.0),  # claude-opus-4-20250514 (Opus 4.0)
    "claude-4-opus": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-4-sonnet": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-haiku-4": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-haiku": (0.25, 1.25),
    "claude-3-opus": (15.0, 75.0),
    # OpenAI
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.4),
    "gpt-5-pro": (15.0, 120.0),
    "gpt-5.1": (1.25, 10.0),
    "gpt-5.2": (1.75, 14.0),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1-nano": (0.1, 0.4),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
    "o1": (15.0, 60.0),
    "o1-mini": (1.1, 4.4),
    "o1-pro": (150.0, 600.0),
    "o3": (2.0, 8.0),
    "o3-mini": (1.1, 4.4),
    "o3-pro": (20.0, 80.0),
    "o4-mini": (1.1, 4.4),
    # Google (through its OpenAI-compatible endpoint; prompts up to 200k tokens)
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.3, 2.5),
    "gemini-2.5-flash-lite": (0.1, 0.4),
}


def _check_entry(key, value, source: str) -> tuple[float, float]:
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"{source}: price keys must be non-empty model names or prefixes, got {key!r}"
        )
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in value)
    )
    if not ok:
        raise ValueError(
            f"{source}: price of {key!r} must be [input_usd_per_M, output_usd_per_M] "
            f"with two non-negative numbers, got {value!r}"
        )
    return float(value[0]), float(value[1])


def load_prices(path: str | None = None) -> dict:
    """The default table, with the entries of the JSON file at `path` (if any)
    added or replacing defaults. Raises ValueError on a malformed file."""
    prices = dict(DEFAULT_PRICES)
    if path is None:
        return prices
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read price file {path}: {exc}") from None
    except UnicodeDecodeError:  # a binary file: the codec's own words say nothing useful
        raise ValueError(
            f"price file {path} is not UTF-8 text: it must be a JSON file "
            '{"model-or-prefix": [in_per_M, out_per_M]}'
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"price file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"price file {path} must hold a JSON object "
            '{"model-or-prefix": [in_per_M, out_per_M]}'
        )
    for key, value in data.items():
        prices[key] = _check_entry(key, value, f"price file {path}")
    return prices


def lookup_price(model: str, prices: dict | None = None) -> tuple[float, float] | None:
    """(input, output) USD per million tokens for `model`, or None when unknown.
    The longest matching prefix wins; a provider prefix such as "openai/" is
    tried without it when the full name matches nothing."""
    table = DEFAULT_PRICES if prices is None else prices
    names = [model]
    if "/" in model:
        names.append(model.rsplit("/", 1)[1])
    for name in names:
        best = None
        for key in table:
            if name.startswith(key) and (best is None or len(key) > len(best)):
                best = key
        if best is not None:
            p_in, p_out = table[best]
            return float(p_in), float(p_out)
    return None


def cost_usd(
    model: str, input_tokens: int, output_tokens: int, prices: dict | None = None
) -> float:
    """Estimated cost of one call in USD; 0.0 for models without a price."""
    price = lookup_price(model or "", prices)
    if price is None:
        return 0.0
    return (input_tokens * price[0] + output_tokens * price[1]) / 1e6


def estimate_tokens(text: str) -> int:
    """A conservative (high) token count for `text`, without a tokenizer."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def worst_case_cost(
    model: str, prompt: str, max_output_tokens: int, prices: dict | None = None
) -> float | None:
    """The most one call can cost in USD: the prompt's estimated tokens plus
    every output token the request allows; None when `model` has no price."""
    price = lookup_price(model or "", prices)
    if price is None:
        return None
    return (estimate_tokens(prompt) * price[0] + max_output_tokens * price[1]) / 1e6
