"""The LLM proposers: Claude through the Messages API, OpenAI through the
Responses API, and any OpenAI-compatible Chat Completions server; with them,
how a failed call is classified and the retries around each call (which key
goes to which endpoint is in search/proposers/keys.py).

Everything here talks to a network service, which is why it is apart from the
offline proposers (search/proposers/offline.py); search/proposers/registry.py picks a
proposer for a model name (make_proposer).

Keys (search/proposers/keys.py): a provider's key goes only to that provider's own
endpoint; any other base URL gets the key named with `api_key_env`, or none.
A key is never written to a run directory, a log line or an error message,
and the prompts a proposer sends are redacted once more on their way out
(mlxsci/evaluation/redaction.py), whoever built them.

Retries are ours, not the SDKs' (their retries are turned off), so each one
is announced with `say`: rate limits, overload and other 5xx answers,
timeouts, refused or dropped connections and malformed or truncated answers
are retried up to `max_retries` times, after the server's Retry-After or an
exponential backoff; a client error (400, 401, 403, 404, ...) is not. When the
retries are used up the proposer returns Proposal(text=None, error=...) and
the loop records a skipped iteration.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import time
from collections.abc import Callable

from mlxsci.evaluation.redaction import redact
from mlxsci.search.proposers.base import PromptContext, Proposal, Proposer, ProposerError
from mlxsci.search.proposers.keys import (
    ANTHROPIC_URL,
    OPENAI_URL,
    PLACEHOLDER_KEY,
    endpoint_and_key,
    origin,
)
from mlxsci.search.proposers.prices import cost_usd, load_prices, lookup_price, worst_case_cost
from mlxsci.storage.names import safe_name

__all__ = [
    "AnthropicProposer",
    "OpenAIProposer",
    "OpenAIChatProposer",
    "PLACEHOLDER_KEY",
    "DEFAULT_LLM_TIMEOUT_S",
    "DEFAULT_LLM_RETRIES",
]

DEFAULT_LLM_TIMEOUT_S = 300.0  # per attempt; a long reasoning answer takes minutes
DEFAULT_LLM_RETRIES = 4
DEFAULT_BACKOFF_S = 1.0  # the first wait without a Retry-After; doubled per retry
MAX_WAIT_S = 120.0  # longest wait between attempts, Retry-After included
# Client errors: the same request would fail the same way again.
_RETRYABLE_STATUS = frozenset({408, 409, 429})


# --- failures -------------------------------------------------------------------


class BadAnswer(Exception):
    """An answer that arrived but is not a usable response (no choices, a
    stream that stopped before its end): retried like a transport error."""


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _one_line(text: str, limit: int = 300, clean: Callable[[str], str] = redact) -> str:
    # Cleaned before it is cut, so that no cut leaves a piece of a secret.
    text = " ".join(clean(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _retry_after(exc: BaseException) -> float | None:
    """The wait the server asked for (retry-after-ms or retry-after seconds)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        try:
            return max(0.0, float(value) * scale) if value is not None else None
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
    return None


def classify_failure(
    exc: BaseException, timeout_s: float, clean: Callable[[str], str] = redact
) -> tuple[str, str, bool]:
    """(short label for the console, full reason, whether to retry) of a failed
    call; clean: what the exception's text goes through before it is cut."""
    names = _class_names(exc)
    reason = f"{type(exc).__name__}: {_one_line(str(exc), clean=clean) or type(exc).__name__}"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 400:
        retry = status in _RETRYABLE_STATUS or status >= 500
        return f"HTTP {status}", reason, retry
    if names & {"APITimeoutError", "TimeoutException"} or isinstance(exc, TimeoutError):
        return f"no answer within {timeout_s:g} s", reason, True
    # The SDKs wrap transport errors in a generic "Connection error.": name the cause.
    cause = exc.__cause__ or exc.__context__
    if names & {"APIConnectionError"} and cause is not None:
        reason = _one_line(f"{reason} ({type(cause).__name__}: {cause})", clean=clean)
    if "complete message body" in reason:  # the body ended before its length
        return "truncated answer", reason, True
    if names & {"APIConnectionError", "TransportError"} or isinstance(exc, OSError):
        return "connection failed", reason, True
    if isinstance(exc, (ValueError, BadAnswer)):  # JSONDecodeError, a shape we cannot read
        return "malformed answer", reason, True
    return type(exc).__name__, reason, True


def _seconds(wait: float) -> str:
    return f"{wait:.1f} s" if wait >= 0.1 else f"{wait * 1000:.0f} ms"


# --- LLM proposers -----------------------------------------------------------


class _LLMProposer(Proposer):
    """Shared settings of the API-backed proposers, and the retry loop around
    one call (`_call`, which raises on any failure)."""

    key_var = ""  # the provider's own key variable
    official_url = ""  # the provider's own endpoint

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        prices: dict | None = None,
        timeout_s: float = DEFAULT_LLM_TIMEOUT_S,
        max_retries: int = DEFAULT_LLM_RETRIES,
        max_tokens: int = 32000,
        api_key_env: str | None = None,
        backoff_s: float | None = None,
    ):
        self.model = model
        self.name = safe_name(model, "model")
        self.base_url, self._api_key = endpoint_and_key(
            self.key_var, self.official_url, base_url, api_key_env, model
        )
        self.own_endpoint = origin(self.base_url) == origin(self.official_url)
        self.prices = load_prices(None) if prices is None else prices
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)
        # Read at call time, not bound as a default, so that tests can make it tiny.
        self.backoff_s = DEFAULT_BACKOFF_S if backoff_s is None else float(backoff_s)

    def __repr__(self) -> str:  # the key stays out of any printed proposer
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def unpriced_model(self) -> str | None:
        return None if lookup_price(self.model, self.prices) is not None else self.model

    def worst_case_cost(self, ctx: PromptContext) -> float | None:
        return worst_case_cost(self.model, ctx.system + ctx.user, self.max_tokens, self.prices)

    def _cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        # Price by the name we asked for; providers sometimes answer with a dated snapshot.
        cost = cost_usd(self.model, input_tokens, output_tokens, self.prices)
        if cost == 0.0 and model and model != self.model:
            cost = cost_usd(model, input_tokens, output_tokens, self.prices)
        return cost

    def _redact(self, text: str) -> str:
        key = self._api_key
        if key and key != PLACEHOLDER_KEY:
            text = text.replace(key, "[API key]")
        return redact(text)  # and any other secret an error message may echo

    def _wait(self, exc: BaseException, retry: int) -> float:
        asked = _retry_after(exc)
        wait = asked if asked is not None else self.backoff_s * 2 ** (retry - 1)
        return min(wait, MAX_WAIT_S)

    def propose(self, ctx: PromptContext) -> Proposal:
        # The last step before the network: no secret leaves (this proposer's
        # own key included: search/proposers/keys.py remembered it), whoever built ctx.
        ctx = dataclasses.replace(ctx, system=redact(ctx.system), user=redact(ctx.user))
        attempts = self.max_retries + 1
        self.say(
            f"model {self.model}: waiting for an answer (up to {self.timeout_s:g} s, "
            f"{self.max_retries} retries)"
        )
        for attempt in range(1, attempts + 1):
            try:
                return self._call(ctx)
            # Any failure of the provider, the transport or the answer's shape is a
            # skipped iteration, never the end of a run that may have taken hours.
            except Exception as exc:  # noqa: BLE001
                label, reason, retry = classify_failure(exc, self.timeout_s, self._redact)
                label, reason = self._redact(label), self._redact(reason)
                if not retry or attempt == attempts:
                    tries = f" (gave up after {attempt} attempts)" if attempt > 1 else ""
                    return Proposal(text=None, error=reason + tries, model=self.model)
                wait = self._wait(exc, attempt)
                self.say(
                    f"model {self.model}: {label}, retry {attempt}/{self.max_retries} "
                    f"in {_seconds(wait)}"
                )
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call(self, ctx: PromptContext) -> Proposal:
        raise NotImplementedError

    def _answer(
        self, text: str, reasoning: str | None, model: str, n_in: int, n_out: int
    ) -> Proposal:
        """The Proposal for an answer that arrived; an empty one is a failure,
        not retried: it was generated, and billed."""
        n_in, n_out = max(0, n_in), max(0, n_out)  # a server's negative count is no refund
        cost = self._cost(model, n_in, n_out)
        if not text.strip():
            return Proposal(
                text=None,
                reasoning=reasoning,
                input_tokens=n_in,
                output_tokens=n_out,
                cost_usd=cost,
                model=model,
                error=f"model {self.model} returned an empty answer",
            )
        return Proposal(
            text=text,
            reasoning=reasoning,
            input_tokens=n_in,
            output_tokens=n_out,
            cost_usd=cost,
            model=model,
        )


def _anthropic_thinking(model: str, max_tokens: int) -> dict:
    """Extra messages.create arguments that turn on extended thinking where the
    model has it: adaptive thinking with high effort for the newest models
    (the SDK deprecates budgeted thinking there), a token budget for older ones."""
    name = model.lower()
    m = re.match(r"claude-(opus|sonnet|haiku)-4(?:-(\d{1,2}))?(?:-\d{8})?\b", name)
    adaptive = bool(re.match(r"claude-(mythos|[a-z]+-[5-9])", name))
    if m and m.group(2) is not None and int(m.group(2)) >= 6 and m.group(1) != "haiku":
        adaptive = True
    if adaptive:
        return {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}
    budgeted = (m is not None and (m.group(1) != "haiku" or m.group(2) == "5")) or name.startswith(
        "claude-3-7-sonnet"
    )
    if budgeted and max_tokens > 2048:
        budget = max(1024, min(max_tokens - 1024, (max_tokens * 3) // 4))
        return {"thinking": {"type": "enabled", "budget_tokens": budget}}
    return {}


def _sdk(package: str, model: str):
    """A provider's SDK module, imported when its first proposer is made (so
    the autotuner needs neither), or ProposerError naming the package."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ProposerError(f"the {package} package is needed for {model!r}: {exc}") from None


class AnthropicProposer(_LLMProposer):
    """Claude through the Messages API, streamed (the SDK requires streaming for
    requests that may run past 10 minutes, which large max_tokens do)."""

    key_var = "ANTHROPIC_API_KEY"
    official_url = ANTHROPIC_URL

    def __init__(self, model: str, **kwargs):
        super().__init__(model, **kwargs)
        anthropic = _sdk("anthropic", model)
        # An explicit key keeps the SDK from reading ANTHROPIC_API_KEY or
        # ANTHROPIC_AUTH_TOKEN for a base URL they do not belong to.
        self.client = anthropic.Anthropic(
            api_key=self._api_key, base_url=self.base_url, timeout=self.timeout_s, max_retries=0
        )

    def request_args(self, ctx: PromptContext) -> dict:
        return dict(
            model=self.model,
            max_tokens=self.max_tokens,
            system=ctx.system,
            messages=[{"role": "user", "content": ctx.user}],
            **_anthropic_thinking(self.model, self.max_tokens),
        )

    def _call(self, ctx: PromptContext) -> Proposal:
        with self.client.messages.stream(**self.request_args(ctx)) as stream:
            try:
                message = stream.get_final_message()
            except AssertionError:  # how the SDK says that no message_start came
                raise BadAnswer("the answer's stream held no message") from None
        if getattr(message, "stop_reason", None) is None:
            raise BadAnswer("the answer's stream ended before its last event")
        texts, thoughts = [], []
        for block in message.content or []:
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text or "")
            elif kind == "thinking":
                thoughts.append(getattr(block, "thinking", "") or "")
        usage = message.usage
        n_in = int(getattr(usage, "input_tokens", 0) or 0)
        for extra in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            n_in += int(getattr(usage, extra, 0) or 0)
        n_out = int(getattr(usage, "output_tokens", 0) or 0)
        model = getattr(message, "model", None) or self.model
        reasoning = "\n\n".join(t for t in thoughts if t) or None
        return self._answer("".join(texts), reasoning, model, n_in, n_out)


def _is_openai_reasoning_model(model: str) -> bool:
    name = model.lower().rsplit("/", 1)[-1]
    return bool(re.match(r"(gpt-5|o[1-9])", name)) and "chat" not in name


class _OpenAIBase(_LLMProposer):
    key_var = "OPENAI_API_KEY"
    official_url = OPENAI_URL

    def __init__(self, model: str, **kwargs):
        super().__init__(model, **kwargs)
        openai = _sdk("openai", model)
        # Nor do the account's organization and project (OPENAI_ORG_ID, OPENAI_PROJECT_ID)
        # leave for another host.
        account = (
            None
            if self.own_endpoint
            else {"OpenAI-Organization": openai.omit, "OpenAI-Project": openai.omit}
        )
        self.client = openai.OpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=0,
            default_headers=account,
        )


class OpenAIProposer(_OpenAIBase):
    """OpenAI through the Responses API; high reasoning effort with a summary
    for reasoning models (gpt-5*, o-series), as Metal-Sci ran them."""

    def request_args(self, ctx: PromptContext) -> dict:
        args = dict(
            model=self.model,
            instructions=ctx.system,
            input=ctx.user,
            max_output_tokens=self.max_tokens,
        )
        if _is_openai_reasoning_model(self.model):
            args["reasoning"] = {"effort": "high", "summary": "auto"}
        return args

    def _call(self, ctx: PromptContext) -> Proposal:
        response = self.client.responses.create(**self.request_args(ctx))
        if not isinstance(getattr(response, "output", None), list):
            raise BadAnswer("the answer has no output list")
        summaries = []
        for item in response.output:
            if getattr(item, "type", None) == "reasoning":
                for part in getattr(item, "summary", None) or []:
                    text = getattr(part, "text", None)
                    if text:
                        summaries.append(text)
        usage = response.usage
        n_in = int(getattr(usage, "input_tokens", 0) or 0) if usage else 0
        n_out = int(getattr(usage, "output_tokens", 0) or 0) if usage else 0
        model = getattr(response, "model", None) or self.model
        return self._answer(
            response.output_text or "", "\n\n".join(summaries) or None, model, n_in, n_out
        )


_THINK = re.compile(r"\A\s*<think>(.*?)</think>\s*", re.S)


class OpenAIChatProposer(_OpenAIBase):
    """Any OpenAI-compatible Chat Completions endpoint (local servers, Gemini)."""

    def request_args(self, ctx: PromptContext) -> dict:
        return dict(
            model=self.model,
            max_tokens=self.max_tokens,
            messages=[
                {"role": "system", "content": ctx.system},
                {"role": "user", "content": ctx.user},
            ],
        )

    def _call(self, ctx: PromptContext) -> Proposal:
        completion = self.client.chat.completions.create(**self.request_args(ctx))
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise BadAnswer("the answer has no choices")
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None) or ""
        if not isinstance(text, str):
            raise BadAnswer(f"the answer's content is a {type(text).__name__}, not text")
        reasoning = None
        if message is not None:
            extra = getattr(message, "model_extra", None) or {}
            for field in ("reasoning_content", "reasoning"):
                value = getattr(message, field, None) or extra.get(field)
                if isinstance(value, str) and value.strip():
                    reasoning = value
                    break
        # Some servers leave a thinking model's <think>...</think> in the content;
        # move it out so that draft code inside it is not taken for the answer.
        m = _THINK.match(text)
        if m:
            reasoning = reasoning or m.group(1).strip() or None
            text = text[m.end() :]
        usage = getattr(completion, "usage", None)
        n_in = int(getattr(usage, "prompt_tokens", 0) or 0) if usage else 0
        n_out = int(getattr(usage, "completion_tokens", 0) or 0) if usage else 0
        model = getattr(completion, "model", None) or self.model
        return self._answer(text, reasoning, model, n_in, n_out)
