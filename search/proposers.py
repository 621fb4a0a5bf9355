"""The proposers: LLM APIs, the offline autotuner, and replay of a recorded run.

`make_proposer(model, ...)` picks one from the model name:

    "autotune"          AutotuneProposer (offline; the no-key default)
    "replay:RUN_DIR"    ReplayProposer (re-proposes a recorded run's candidates)
    with --base-url     OpenAIChatProposer (any OpenAI-compatible Chat Completions
                        server: mlx_lm.server, Ollama, vLLM, llama.cpp, Gemini)
    "claude*"           AnthropicProposer (Messages API)
    anything else       OpenAIProposer (Responses API)

`api=` forces "anthropic", "openai" (Responses) or "openai-chat". API keys
come only from the environment (ANTHROPIC_API_KEY, OPENAI_API_KEY).

Retries (429, 5xx, overload, connection errors, timeouts) are the SDKs' own,
with their exponential backoff; when they are used up the proposer returns
Proposal(text=None, error=...) and the loop records a skipped iteration.
"""
from __future__ import annotations

import ast
import itertools
import os
import random
import re
from pathlib import Path

from mlxsci.candidate import CandidateError, parse, render
from mlxsci.search.prices import cost_usd, load_prices
from mlxsci.search.proposer import PromptContext, Proposal, Proposer, ProposerError

__all__ = ["make_proposer", "AnthropicProposer", "OpenAIProposer", "OpenAIChatProposer",
           "AutotuneProposer", "ReplayProposer", "APIS"]

APIS = ("auto", "anthropic", "openai", "openai-chat")
LOCAL_API_KEY = "not-needed"     # local OpenAI-compatible servers rarely check the key


def _safe_name(model: str) -> str:
    """A model name usable in a run-directory name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") or "model"


def _require_key(var: str, model: str) -> str:
    key = os.environ.get(var, "").strip()
    if not key:
        raise ProposerError(f"model {model!r} needs an API key: set the environment variable {var} "
                            "(or use --model autotune, which needs none)")
    return key


def _failure(exc: BaseException) -> str:
    message = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {message}"


def _transport_errors() -> tuple[type, ...]:
    """Low-level errors that can escape an SDK mid-stream (the HTTP library's own)."""
    errors: list[type] = [OSError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(__import__(module).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _fence(source: str, dialect: str) -> str:
    """`source` in a fenced block whose fence is longer than any backtick run inside."""
    longest = max((len(m) for m in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    if not source.endswith("\n"):
        source += "\n"
    return f"{fence}{dialect}\n{source}{fence}"


# --- LLM proposers -----------------------------------------------------------

class _LLMProposer(Proposer):
    """Shared settings of the API-backed proposers."""

    def __init__(self, model: str, *, base_url: str | None = None, prices: dict | None = None,
                 timeout_s: float = 600.0, max_retries: int = 4, max_tokens: int = 32000):
        self.model = model
        self.name = _safe_name(model)
        self.base_url = base_url
        self.prices = load_prices(None) if prices is None else prices
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)

    def _cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        # Price by the name we asked for; providers sometimes answer with a dated snapshot.
        cost = cost_usd(self.model, input_tokens, output_tokens, self.prices)
        if cost == 0.0 and model and model != self.model:
            cost = cost_usd(model, input_tokens, output_tokens, self.prices)
        return cost


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
    budgeted = (m is not None and (m.group(1) != "haiku" or m.group(2) == "5")) \
        or name.startswith("claude-3-7-sonnet")
    if budgeted and max_tokens > 2048:
        budget = max(1024, min(max_tokens - 1024, (max_tokens * 3) // 4))
        return {"thinking": {"type": "enabled", "budget_tokens": budget}}
    return {}


class AnthropicProposer(_LLMProposer):
    """Claude through the Messages API, streamed (the SDK requires streaming for
    requests that may run past 10 minutes, which large max_tokens do)."""

    def __init__(self, model: str, **kwargs):
        super().__init__(model, **kwargs)
        api_key = _require_key("ANTHROPIC_API_KEY", model)
        try:
            import anthropic
        except ImportError as exc:   # pragma: no cover - a declared dependency
            raise ProposerError(f"the anthropic package is needed for {model!r}: {exc}") from None
        self._errors = (anthropic.AnthropicError,) + _transport_errors()
        self.client = anthropic.Anthropic(api_key=api_key, base_url=self.base_url,
                                          timeout=self.timeout_s, max_retries=self.max_retries)

    def request_args(self, ctx: PromptContext) -> dict:
        return dict(model=self.model, max_tokens=self.max_tokens, system=ctx.system,
                    messages=[{"role": "user", "content": ctx.user}],
                    **_anthropic_thinking(self.model, self.max_tokens))

    def propose(self, ctx: PromptContext) -> Proposal:
        try:
            with self.client.messages.stream(**self.request_args(ctx)) as stream:
                message = stream.get_final_message()
        except self._errors as exc:
            return Proposal(text=None, error=_failure(exc), model=self.model)
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
        return Proposal(text="".join(texts), reasoning=reasoning, input_tokens=n_in,
                        output_tokens=n_out, cost_usd=self._cost(model, n_in, n_out), model=model)


def _is_openai_reasoning_model(model: str) -> bool:
    name = model.lower().rsplit("/", 1)[-1]
    return bool(re.match(r"(gpt-5|o[1-9])", name)) and "chat" not in name


class _OpenAIBase(_LLMProposer):
    key_var = "OPENAI_API_KEY"

    def __init__(self, model: str, *, api_key: str, **kwargs):
        super().__init__(model, **kwargs)
        try:
            import openai
        except ImportError as exc:   # pragma: no cover - a declared dependency
            raise ProposerError(f"the openai package is needed for {model!r}: {exc}") from None
        self._errors = (openai.OpenAIError,) + _transport_errors()
        self.client = openai.OpenAI(api_key=api_key, base_url=self.base_url,
                                    timeout=self.timeout_s, max_retries=self.max_retries)


class OpenAIProposer(_OpenAIBase):
    """OpenAI through the Responses API; high reasoning effort with a summary
    for reasoning models (gpt-5*, o-series), as Metal-Sci ran them."""

    def __init__(self, model: str, **kwargs):
        super().__init__(model, api_key=_require_key("OPENAI_API_KEY", model), **kwargs)

    def request_args(self, ctx: PromptContext) -> dict:
        args = dict(model=self.model, instructions=ctx.system, input=ctx.user,
                    max_output_tokens=self.max_tokens)
        if _is_openai_reasoning_model(self.model):
            args["reasoning"] = {"effort": "high", "summary": "auto"}
        return args

    def propose(self, ctx: PromptContext) -> Proposal:
        try:
            response = self.client.responses.create(**self.request_args(ctx))
        except self._errors as exc:
            return Proposal(text=None, error=_failure(exc), model=self.model)
        summaries = []
        for item in response.output or []:
            if getattr(item, "type", None) == "reasoning":
                for part in getattr(item, "summary", None) or []:
                    text = getattr(part, "text", None)
                    if text:
                        summaries.append(text)
        usage = response.usage
        n_in = int(getattr(usage, "input_tokens", 0) or 0) if usage else 0
        n_out = int(getattr(usage, "output_tokens", 0) or 0) if usage else 0
        model = getattr(response, "model", None) or self.model
        return Proposal(text=response.output_text or "", reasoning="\n\n".join(summaries) or None,
                        input_tokens=n_in, output_tokens=n_out,
                        cost_usd=self._cost(model, n_in, n_out), model=model)


_THINK = re.compile(r"\A\s*<think>(.*?)</think>\s*", re.S)


class OpenAIChatProposer(_OpenAIBase):
    """Any OpenAI-compatible Chat Completions endpoint (local servers, Gemini)."""

    def __init__(self, model: str, **kwargs):
        if kwargs.get("base_url"):
            api_key = os.environ.get("OPENAI_API_KEY", "").strip() or LOCAL_API_KEY
        else:
            api_key = _require_key("OPENAI_API_KEY", model)
        super().__init__(model, api_key=api_key, **kwargs)

    def request_args(self, ctx: PromptContext) -> dict:
        return dict(model=self.model, max_tokens=self.max_tokens,
                    messages=[{"role": "system", "content": ctx.system},
                              {"role": "user", "content": ctx.user}])

    def propose(self, ctx: PromptContext) -> Proposal:
        try:
            completion = self.client.chat.completions.create(**self.request_args(ctx))
        except self._errors as exc:
            return Proposal(text=None, error=_failure(exc), model=self.model)
        choices = getattr(completion, "choices", None) or []
        message = choices[0].message if choices else None
        text = (getattr(message, "content", None) or "") if message is not None else ""
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
            text = text[m.end():]
        usage = getattr(completion, "usage", None)
        n_in = int(getattr(usage, "prompt_tokens", 0) or 0) if usage else 0
        n_out = int(getattr(usage, "completion_tokens", 0) or 0) if usage else 0
        model = getattr(completion, "model", None) or self.model
        return Proposal(text=text, reasoning=reasoning, input_tokens=n_in, output_tokens=n_out,
                        cost_usd=self._cost(model, n_in, n_out), model=model)


# --- offline autotuner -------------------------------------------------------

_SHAPES_1D = [(x, 1, 1) for x in (32, 64, 128, 256, 512, 1024)]
# Shapes below one SIMD group (32 threads) are left out: they waste lanes.
_SHAPES_2D = [(x, y, 1) for x in (8, 16, 32, 64) for y in (1, 2, 4, 8, 16, 32)
              if 32 <= x * y <= 1024]
_SHAPES_3D = [(x, y, z) for x in (8, 16, 32) for y in (2, 4, 8) for z in (1, 2, 4, 8)
              if 32 <= x * y * z <= 1024 and z <= y]
_SHAPES = {1: _SHAPES_1D, 2: _SHAPES_2D, 3: _SHAPES_3D}
_MAX_ENUMERATED = 4096      # combined variants enumerated in full; beyond, sampled
_MAX_DRAWS = 2000


def _literal_tuple(expr: str | None) -> tuple | None:
    """The launch expression as a tuple of components: ints where a component is
    an integer literal, None where it is not. None when not a tuple."""
    if expr is None:
        return None
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Tuple):
        return None
    return tuple(e.value if isinstance(e, ast.Constant) and type(e.value) is int else None
                 for e in node.elts)


def _dims(expr: str | None) -> int:
    """How many leading axes of a launch tuple are not the literal 1."""
    comps = _literal_tuple(expr)
    if not comps:
        return 0
    used = [i for i, c in enumerate(comps) if c != 1]
    return max(used) + 1 if used else 1


def _canonical(source: str, dialect: str) -> str:
    try:
        return render(parse(source, dialect)).strip()
    except (CandidateError, ValueError):
        return source.strip()


class AutotuneProposer(Proposer):
    """Explores the incumbent's `//! param` choices and each kernel's threadgroup
    shape, one change at a time first (coordinate descent around the current
    incumbent), then combinations; never proposes a text already tried.

    Grid expressions are kept: MLX grids count threads and kernels guard their
    edges. A threadgroup that is not all integer literals (e.g. `(N, 1, 1)`),
    or that is the whole grid (a single cooperating threadgroup), is taken to
    be tied to the algorithm and left alone.
    """
    name = "autotune"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def _default_launch(self, task: str, kernel: str) -> tuple[str | None, str | None]:
        try:
            from mlxsci.task import load_task
            contract = load_task(task).kernel(kernel)
            return contract.grid, contract.threadgroup
        except Exception:    # unknown task or kernel: fall back to what the candidate says
            return None, None

    def axes(self, cand, task: str) -> list[tuple[tuple, list]]:
        """The search axes: ((kind, name), [alternative values]) for each param
        with choices and each kernel with a literal threadgroup."""
        axes = []
        for p in cand.params:
            if p.choices:
                others = [v for v in p.choices if v != p.default]
                if others:
                    axes.append((("param", p.name), others))
        for k in cand.kernels:
            grid, tg = k.grid, k.threadgroup
            if grid is None or tg is None:
                d_grid, d_tg = self._default_launch(task, k.name)
                grid = grid if grid is not None else d_grid
                tg = tg if tg is not None else d_tg
            comps = _literal_tuple(tg) if tg is not None else None
            if tg is not None and (comps is None or None in comps or len(comps) != 3):
                continue
            if comps is not None and _literal_tuple(grid) == comps:
                continue     # one threadgroup covers the grid: a cooperative kernel
            dims = max(_dims(grid), _dims(tg), 1)
            current = tuple(comps) if comps else None
            shapes = [s for s in _SHAPES[min(dims, 3)] if s != current]
            if shapes:
                axes.append((("threadgroup", k.name), shapes))
        return axes

    def _apply(self, cand, changes: dict) -> str:
        params = [type(p)(p.name, changes.get(("param", p.name), p.default), p.choices)
                  for p in cand.params]
        kernels = []
        for k in cand.kernels:
            shape = changes.get(("threadgroup", k.name))
            tg = k.threadgroup if shape is None else "({}, {}, {})".format(*shape)
            kernels.append(type(k)(name=k.name, body=k.body, grid=k.grid, threadgroup=tg))
        return render(type(cand)(dialect=cand.dialect, params=params, header=cand.header,
                                 kernels=kernels))

    def propose(self, ctx: PromptContext) -> Proposal:
        try:
            cand = parse(ctx.incumbent_source, ctx.dialect)
        except (CandidateError, ValueError) as exc:
            return Proposal(text=None, error=f"autotune: the incumbent does not parse: {exc}",
                            model="autotune")
        seen = {_canonical(s, ctx.dialect) for s in ctx.tried_sources}
        seen.add(_canonical(ctx.incumbent_source, ctx.dialect))
        rng = random.Random(self.seed + ctx.iteration)
        axes = self.axes(cand, ctx.task)

        def fresh(changes: dict) -> str | None:
            text = self._apply(cand, changes)
            return None if text.strip() in seen else text

        # Single changes first, in a seeded order.
        singles = [{key: v} for key, values in axes for v in values]
        rng.shuffle(singles)
        for changes in singles:
            text = fresh(changes)
            if text is not None:
                return self._proposal(text, ctx)
        # Then combinations of two or more changes, fewest changes first.
        options = [[None] + values for _, values in axes]
        total = 1
        for o in options:
            total *= len(o)
        if total <= _MAX_ENUMERATED:
            combos = [c for c in itertools.product(*options)
                      if sum(v is not None for v in c) >= 2]
            rng.shuffle(combos)
            combos.sort(key=lambda c: sum(v is not None for v in c))
        else:
            combos = []
            for _ in range(_MAX_DRAWS):
                c = tuple(rng.choice(o) for o in options)
                if sum(v is not None for v in c) >= 2:
                    combos.append(c)
        for combo in combos:
            changes = {key: v for (key, _), v in zip(axes, combo) if v is not None}
            text = fresh(changes)
            if text is not None:
                return self._proposal(text, ctx)
        return Proposal(text=None, error="autotune: search space exhausted", model="autotune",
                        exhausted=True)

    @staticmethod
    def _proposal(text: str, ctx: PromptContext) -> Proposal:
        return Proposal(text=_fence(text, ctx.dialect), model="autotune")


# --- replay ------------------------------------------------------------------

_CANDIDATE_FILE = re.compile(r"(\d+)_candidate\.(metal|cu)\Z")


class ReplayProposer(Proposer):
    """Proposes the candidates of a recorded run (`NN_candidate.metal` / `.cu`),
    in iteration order, one per call; the recorded reasoning comes along."""
    name = "replay"

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise ProposerError(f"replay: {self.run_dir} is not a directory")
        found = []
        for path in self.run_dir.iterdir():
            m = _CANDIDATE_FILE.match(path.name)
            if m and path.is_file():
                found.append((int(m.group(1)), path.name, path))
        if not found:
            raise ProposerError(f"replay: {self.run_dir} holds no NN_candidate.metal or "
                                "NN_candidate.cu files")
        self.files = [path for _, _, path in sorted(found)]
        self.calls = 0

    def propose(self, ctx: PromptContext) -> Proposal:
        if self.calls >= len(self.files):
            return Proposal(text=None, error="replay: no more candidates", model="replay",
                            exhausted=True)
        path = self.files[self.calls]
        self.calls += 1
        try:
            source = path.read_text()
        except OSError as exc:
            return Proposal(text=None, error=f"replay: cannot read {path}: {exc}", model="replay")
        number = path.name.split("_", 1)[0]
        reasoning_file = path.with_name(f"{number}_reasoning.md")
        reasoning = None
        if reasoning_file.is_file():
            try:
                reasoning = reasoning_file.read_text() or None
            except OSError:
                reasoning = None
        return Proposal(text=_fence(source, ctx.dialect), reasoning=reasoning, model="replay")


# --- routing -----------------------------------------------------------------

def make_proposer(model: str, *, api: str = "auto", base_url: str | None = None, seed: int = 0,
                  prices: dict | None = None, timeout_s: float = 600.0, max_retries: int = 4,
                  max_tokens: int = 32000) -> Proposer:
    """The proposer for `model` (see the module docstring for the routing).
    Raises ProposerError when it cannot be used (missing key, bad replay dir)."""
    if not model:
        raise ProposerError("no model given (use --model autotune for the offline autotuner)")
    api = api or "auto"
    if api not in APIS:
        raise ProposerError(f"unknown api {api!r}; expected one of {', '.join(APIS)}")
    if model == "autotune":
        return AutotuneProposer(seed=seed)
    if model.startswith("replay:"):
        path = model[len("replay:"):]
        if not path:
            raise ProposerError("replay needs a run directory: --model replay:RUN_DIR")
        return ReplayProposer(path)
    kwargs = dict(base_url=base_url, prices=prices, timeout_s=timeout_s,
                  max_retries=max_retries, max_tokens=max_tokens)
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
