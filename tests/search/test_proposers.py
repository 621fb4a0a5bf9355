"""Proposers: the real openai / anthropic SDKs against a local scripted server,
the offline autotuner, replay, routing and prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_llm_server import SAXPY_ANSWER, broken_candidate, no_code_block, ok, slow, status

from mlxsci.kernel.candidate import extract_from_response, parse, render
from mlxsci.search.proposers.base import PromptContext, ProposerError
from mlxsci.search.proposers.prices import (
    DEFAULT_PRICES,
    cost_usd,
    estimate_tokens,
    load_prices,
    lookup_price,
    worst_case_cost,
)
from mlxsci.search.proposers.registry import (
    PLACEHOLDER_KEY,
    AnthropicProposer,
    AutotuneProposer,
    OpenAIChatProposer,
    OpenAIProposer,
    ReplayProposer,
    make_proposer,
)

ROOT = Path(__file__).resolve().parents[2]
SAXPY_SEED = (ROOT / "tasks" / "saxpy" / "seed.metal").read_text()

PARAM_CANDIDATE = """//! param VEC = 2 {1, 2, 4}
//! kernel saxpy
//! grid = (ceil_div(N, VEC), 1, 1)
//! threadgroup = (256, 1, 1)
uint base = thread_position_in_grid.x * VEC;
for (uint k = 0; k < VEC; ++k) {
    uint i = base + k;
    if (i < N) y_out[i] = a * x[i] + y[i];
}
"""

# (api, model, which base URL the SDK needs)
APIS = [
    ("anthropic", "claude-opus-4-1", "url"),
    ("openai", "gpt-5", "openai_url"),
    ("openai-chat", "qwen3-coder", "openai_url"),
]


def ctx_for(incumbent: str = SAXPY_SEED, iteration: int = 1, tried=(), task: str = "saxpy"):
    return PromptContext(
        task=task,
        dialect="metal",
        iteration=iteration,
        system="SYSTEM PROMPT",
        user="USER PROMPT",
        incumbent_source=incumbent,
        tried_sources=list(tried),
    )


def proposer_for(fake, api, model, url_attr, **kw):
    kw.setdefault("max_retries", 2)
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("backoff_s", 0.01)
    return make_proposer(model, api=api, base_url=getattr(fake, url_attr), **kw)


# --- LLM proposers against the fake server ---------------------------------------


@pytest.mark.parametrize("api,model,url_attr", APIS)
@pytest.mark.slow
def test_success_captures_text_usage_cost_reasoning(fake, api, model, url_attr):
    fake.script(
        ok(
            SAXPY_ANSWER,
            reasoning="VEC=4 amortises index math.",
            input_tokens=2000,
            output_tokens=1000,
        )
    )
    p = proposer_for(fake, api, model, url_attr)
    r = p.propose(ctx_for())
    assert r.error is None
    assert r.text == SAXPY_ANSWER
    assert extract_from_response(r.text, "metal").startswith("//! param VEC = 4")
    assert r.reasoning == "VEC=4 amortises index math."
    assert (r.input_tokens, r.output_tokens) == (2000, 1000)
    assert r.model == model
    assert r.cost_usd == pytest.approx(cost_usd(model, 2000, 1000, load_prices(None)))
    assert (r.cost_usd > 0) == (api != "openai-chat")
    assert len(fake.requests) == 1
    body = fake.requests[0]["body"]
    assert body["model"] == model
    # A local base URL gets the placeholder, never the provider's key.
    headers = fake.requests[0]["headers"]
    assert PLACEHOLDER_KEY in headers.get("x-api-key", "") + headers.get("authorization", "")
    assert "test-" not in " ".join(headers.values())
    if api == "anthropic":
        assert fake.requests[0]["path"] == "/v1/messages"
        assert body["system"] == "SYSTEM PROMPT"
        assert body["messages"] == [{"role": "user", "content": "USER PROMPT"}]
        assert body["thinking"]["type"] == "enabled"
        assert 1024 <= body["thinking"]["budget_tokens"] < body["max_tokens"]
    elif api == "openai":
        assert fake.requests[0]["path"] == "/v1/responses"
        assert body["instructions"] == "SYSTEM PROMPT" and body["input"] == "USER PROMPT"
        assert body["reasoning"] == {"effort": "high", "summary": "auto"}
    else:
        assert fake.requests[0]["path"] == "/v1/chat/completions"
        assert body["messages"] == [
            {"role": "system", "content": "SYSTEM PROMPT"},
            {"role": "user", "content": "USER PROMPT"},
        ]


@pytest.mark.parametrize("api,model,url_attr", APIS)
def test_rate_limit_is_retried(fake, api, model, url_attr):
    fake.script(status(429), ok())
    r = proposer_for(fake, api, model, url_attr).propose(ctx_for())
    assert r.error is None and r.text == SAXPY_ANSWER
    assert len(fake.requests) == 2


@pytest.mark.parametrize("api,model,url_attr", APIS)
def test_persistent_server_error_becomes_proposal_error(fake, api, model, url_attr):
    fake.script(status(500, "boom", times=None))
    r = proposer_for(fake, api, model, url_attr, max_retries=2).propose(ctx_for())
    assert r.text is None
    assert r.error.startswith("InternalServerError: ") and "boom" in r.error
    assert r.error.endswith("(gave up after 3 attempts)")
    assert len(fake.requests) == 3  # the first try and two retries


@pytest.mark.parametrize("api,model,url_attr", APIS)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_timeout_becomes_proposal_error_after_retries(fake, api, model, url_attr):
    # The server answers each request only after 3 s: an APITimeoutError after
    # two requests means each attempt gave up before its answer came (how long
    # that took depends on the machine's load, so it is not asserted).
    fake.script(slow(3.0, times=None))
    r = proposer_for(fake, api, model, url_attr, timeout_s=0.25, max_retries=1).propose(ctx_for())
    assert r.text is None and r.error.startswith("APITimeoutError")
    assert len(fake.requests) == 2


@pytest.mark.parametrize("api,model,url_attr", APIS)
def test_answers_without_usable_code_are_returned_as_is(fake, api, model, url_attr):
    p = proposer_for(fake, api, model, url_attr)
    fake.script(no_code_block(), broken_candidate())
    r = p.propose(ctx_for())
    assert r.error is None and r.text.startswith("I would need more information")
    assert extract_from_response(r.text, "metal") is None
    r = p.propose(ctx_for())
    assert r.error is None and "//! grid = (N /" in r.text


def test_chat_reasoning_field_and_think_tags(fake):
    p = proposer_for(fake, "auto", "local-model", "openai_url")
    assert isinstance(p, OpenAIChatProposer)
    fake.script(
        ok("answer", reasoning="via reasoning", reasoning_field="reasoning"),
        ok("<think>draft ```metal\nold\n```</think>\n\n" + SAXPY_ANSWER),
    )
    r = p.propose(ctx_for())
    assert (r.text, r.reasoning) == ("answer", "via reasoning")
    r = p.propose(ctx_for())
    assert r.text == SAXPY_ANSWER and r.reasoning.startswith("draft")


def test_chat_with_base_url_needs_no_key(fake, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    fake.script(ok())
    r = make_proposer("llama", base_url=fake.openai_url).propose(ctx_for())
    assert r.error is None
    assert fake.requests[0]["headers"]["authorization"] == f"Bearer {PLACEHOLDER_KEY}"


def test_anthropic_thinking_modes(fake):
    fake.script(ok(times=3))
    for model, kind in [
        ("claude-opus-4-6", "adaptive"),
        ("claude-3-haiku-20240307", None),
        ("claude-opus-4-1-20250805", "enabled"),
    ]:
        make_proposer(model, base_url=fake.url, api="anthropic").propose(ctx_for())
        assert fake.requests[-1]["body"].get("thinking", {}).get("type") == kind
    assert fake.requests[0]["body"]["output_config"] == {"effort": "high"}


def test_openai_non_reasoning_model_sends_no_reasoning(fake):
    fake.script(ok())
    make_proposer("gpt-4.1", base_url=fake.openai_url, api="openai").propose(ctx_for())
    assert "reasoning" not in fake.requests[0]["body"]


# --- keys and routing ---------------------------------------------------------------


@pytest.mark.parametrize(
    "model,api,var",
    [
        ("claude-opus-4-5", "auto", "ANTHROPIC_API_KEY"),
        ("gpt-5", "auto", "OPENAI_API_KEY"),
        ("gpt-4.1", "openai-chat", "OPENAI_API_KEY"),
    ],
)
def test_missing_key_names_the_variable(monkeypatch, model, api, var):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProposerError, match=var):
        make_proposer(model, api=api)


def test_routing(monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a")
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    (tmp_path / "01_candidate.metal").write_text(SAXPY_SEED)
    assert isinstance(make_proposer("autotune"), AutotuneProposer)
    assert isinstance(make_proposer(f"replay:{tmp_path}"), ReplayProposer)
    assert isinstance(make_proposer("claude-opus-4-5"), AnthropicProposer)
    assert isinstance(make_proposer("gpt-5"), OpenAIProposer)
    assert isinstance(make_proposer("o3"), OpenAIProposer)
    assert isinstance(
        make_proposer("claude-x", base_url="http://127.0.0.1:1/v1"), OpenAIChatProposer
    )
    assert isinstance(
        make_proposer("gemini-2.5-pro", base_url="http://127.0.0.1:1/v1"), OpenAIChatProposer
    )
    assert isinstance(make_proposer("gpt-5", api="openai-chat"), OpenAIChatProposer)
    assert isinstance(make_proposer("my-claude-finetune", api="anthropic"), AnthropicProposer)
    assert (
        make_proposer("mlx-community/Qwen3 8B", base_url="http://x/v1").name
        == "mlx-community-Qwen3-8B"
    )
    with pytest.raises(ProposerError, match="unknown api"):
        make_proposer("gpt-5", api="gemini")
    with pytest.raises(ProposerError, match="no NN_candidate"):
        make_proposer(f"replay:{ROOT / 'tasks'}")
    with pytest.raises(ProposerError, match="not a directory"):
        make_proposer(f"replay:{tmp_path / 'missing'}")


# --- secrets: a key goes only to its own provider (issue 12, outcome 1) ---------------

SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-REAL-anthropic-0123456789",
    "OPENAI_API_KEY": "sk-REAL-openai-0123456789",
    "ANTHROPIC_AUTH_TOKEN": "REAL-anthropic-token-0123456789",
    "OPENAI_ORG_ID": "org-REAL-0123456789",
    "OPENAI_PROJECT_ID": "proj_REAL-0123456789",
    "MY_LOCAL_KEY": "local-server-key-0123456789",
}


@pytest.fixture
def secrets(fake, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return fake


def sent_headers(request) -> str:
    return "\n".join(f"{k}: {v}" for k, v in request["headers"].items())


@pytest.mark.parametrize("api,model,url_attr", APIS)
def test_base_url_server_gets_no_provider_key(secrets, api, model, url_attr):
    secrets.script(ok())
    r = proposer_for(secrets, api, model, url_attr).propose(ctx_for())
    assert r.error is None
    headers = sent_headers(secrets.requests[0])
    for value in SECRETS.values():
        assert value not in headers
    assert f"Bearer {PLACEHOLDER_KEY}" in headers or f"x-api-key: {PLACEHOLDER_KEY}" in headers


@pytest.mark.parametrize("api,model,url_attr", APIS)
def test_api_key_env_sends_exactly_that_variable(secrets, api, model, url_attr):
    secrets.script(ok())
    p = proposer_for(secrets, api, model, url_attr, api_key_env="MY_LOCAL_KEY")
    assert p.propose(ctx_for()).error is None
    headers = secrets.requests[0]["headers"]
    sent = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
    assert sent == SECRETS["MY_LOCAL_KEY"]
    others = [v for k, v in SECRETS.items() if k != "MY_LOCAL_KEY"]
    assert not any(v in sent_headers(secrets.requests[0]) for v in others)
    assert SECRETS["MY_LOCAL_KEY"] not in repr(p)


@pytest.mark.parametrize(
    "api,model,key_var,official",
    [
        ("anthropic", "claude-opus-4-1", "ANTHROPIC_API_KEY", "https://api.anthropic.com"),
        ("openai", "gpt-5", "OPENAI_API_KEY", "https://api.openai.com/v1"),
        ("openai-chat", "gpt-4.1", "OPENAI_API_KEY", "https://api.openai.com/v1"),
    ],
)
def test_official_endpoint_gets_its_own_key(secrets, monkeypatch, api, model, key_var, official):
    # *_BASE_URL in the environment must not carry the key elsewhere.
    monkeypatch.setenv("OPENAI_BASE_URL", secrets.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", secrets.url)
    for base_url in (None, official):
        p = make_proposer(model, api=api, base_url=base_url, max_retries=0)
        assert str(p.client.base_url).rstrip("/") == official
        # The request that client makes, caught on its way out (the official host
        # is not reachable from a test): it carries the provider's key.
        p.client = p.client.copy(base_url=secrets.url if api == "anthropic" else secrets.openai_url)
        secrets.reset()
        secrets.script(ok())
        assert p.propose(ctx_for()).error is None
        headers = secrets.requests[0]["headers"]
        sent = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
        assert sent == SECRETS[key_var]
        if api != "anthropic":  # the account's ids go along to OpenAI itself
            assert headers["openai-organization"] == SECRETS["OPENAI_ORG_ID"]


def test_api_key_env_errors_never_show_a_key(monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ProposerError, match="NOT_SET_ANYWHERE is not set"):
        make_proposer("m", base_url="http://127.0.0.1:1/v1", api_key_env="NOT_SET_ANYWHERE")
    # A key pasted where the variable's name belongs is refused without echoing it.
    with pytest.raises(ProposerError, match="NAME of an environment variable") as info:
        make_proposer("m", base_url="http://127.0.0.1:1/v1", api_key_env="sk-live-abc.123")
    assert "sk-live-abc.123" not in str(info.value)


@pytest.mark.parametrize("api,model,url_attr", APIS)
def test_a_key_echoed_by_the_server_is_redacted(secrets, api, model, url_attr):
    secrets.script(status(401, f"Incorrect API key provided: {SECRETS['MY_LOCAL_KEY']}"))
    r = proposer_for(secrets, api, model, url_attr, api_key_env="MY_LOCAL_KEY").propose(ctx_for())
    assert r.text is None and "401" in r.error and "[API key]" in r.error
    assert SECRETS["MY_LOCAL_KEY"] not in r.error
    assert len(secrets.requests) == 1  # a client error is not retried


# --- prices ---------------------------------------------------------------------


def test_prices(tmp_path):
    assert lookup_price("claude-opus-4-1-20250805") == (15.0, 75.0)
    assert lookup_price("claude-opus-4-20250514") == (15.0, 75.0)
    assert lookup_price("claude-opus-4-5-20251101") == (5.0, 25.0)
    assert lookup_price("gpt-5-mini-2025-08-07") == DEFAULT_PRICES["gpt-5-mini"]
    assert lookup_price("openai/gpt-4.1") == DEFAULT_PRICES["gpt-4.1"]
    assert cost_usd("qwen3-coder-local", 10**6, 10**6) == 0.0
    assert cost_usd("gpt-5", 10**6, 10**6) == pytest.approx(11.25)
    f = tmp_path / "prices.json"
    f.write_text(json.dumps({"gpt-5": [2, 20], "my-local": [0.5, 1]}))
    table = load_prices(str(f))
    assert cost_usd("gpt-5-2025", 10**6, 0, table) == 2.0
    assert cost_usd("my-local-7b", 0, 10**6, table) == 1.0
    assert load_prices(None)["gpt-5"] == DEFAULT_PRICES["gpt-5"]
    f.write_text(json.dumps({"gpt-5": [2]}))
    with pytest.raises(ValueError, match="gpt-5"):
        load_prices(str(f))


def test_worst_case_cost_and_unpriced_models(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    assert estimate_tokens("") == 0 and estimate_tokens("abcd") == 2  # 3 characters a token
    assert worst_case_cost("unknown-local", "x" * 300, 1000) is None
    assert worst_case_cost("gpt-5", "x" * 3000, 1000) == pytest.approx(
        (1000 * 1.25 + 1000 * 10.0) / 1e6
    )
    p = make_proposer("gpt-5", max_tokens=2000)
    ctx = ctx_for()
    prompt_tokens = estimate_tokens(ctx.system + ctx.user)
    assert p.worst_case_cost(ctx) == pytest.approx((prompt_tokens * 1.25 + 2000 * 10.0) / 1e6)
    assert p.unpriced_model is None
    local = make_proposer("qwen3-coder", base_url="http://127.0.0.1:1/v1")
    assert local.unpriced_model == "qwen3-coder" and local.worst_case_cost(ctx) is None
    priced = make_proposer(
        "qwen3-coder", base_url="http://127.0.0.1:1/v1", prices={"qwen3-coder": (0.0, 0.0)}
    )
    assert priced.unpriced_model is None and priced.worst_case_cost(ctx) == 0.0
    assert AutotuneProposer().unpriced_model is None


# --- autotune -------------------------------------------------------------------


def run_autotune(incumbent: str, seed: int = 0, limit: int = 500):
    """Propose until exhausted, feeding back every proposal as tried."""
    p = make_proposer("autotune", seed=seed)
    tried, errors = [], []
    for it in range(1, limit + 1):
        r = p.propose(ctx_for(incumbent, iteration=it, tried=tried))
        assert (r.input_tokens, r.output_tokens, r.cost_usd, r.model) == (0, 0, 0.0, "autotune")
        if r.text is None:
            errors.append(r.error)
            break
        source = extract_from_response(r.text, "metal")
        assert source is not None
        tried.append(source)
    return tried, errors


def test_autotune_param_candidate_singles_first_then_exhausts():
    tried, errors = run_autotune(PARAM_CANDIDATE, seed=3)
    assert errors == ["autotune: search space exhausted"]
    # 2 other VEC values x 6 threadgroups (incl. the current 256) - the incumbent.
    assert len(tried) == 3 * 6 - 1 == len(set(tried))
    assert PARAM_CANDIDATE not in tried
    cands = [parse(t) for t in tried]
    singles = [
        sum([c.params[0].default != 2, c.kernels[0].threadgroup != "(256, 1, 1)"]) for c in cands
    ]
    assert singles[:7] == [1] * 7 and set(singles[7:]) == {2}
    for c in cands:  # grid kept, choices kept
        assert c.kernels[0].grid == "(ceil_div(N, VEC), 1, 1)"
        assert c.params[0].choices == (1, 2, 4)


def test_autotune_is_deterministic_and_seeded():
    a, _ = run_autotune(PARAM_CANDIDATE, seed=0, limit=6)
    b, _ = run_autotune(PARAM_CANDIDATE, seed=0, limit=6)
    c, _ = run_autotune(PARAM_CANDIDATE, seed=1, limit=6)
    assert a == b and a != c


def test_autotune_saxpy_seed():
    tried, errors = run_autotune(SAXPY_SEED)
    assert errors == ["autotune: search space exhausted"]
    shapes = sorted(parse(t).kernels[0].threadgroup for t in tried)
    assert shapes == sorted(f"({x}, 1, 1)" for x in (32, 64, 128, 512, 1024))
    assert all(parse(t).kernels[0].grid == "(ceil_div(N, 256) * 256, 1, 1)" for t in tried)


def test_autotune_2d_and_size_tied_threadgroups():
    two_d = parse((ROOT / "tasks" / "heat2d" / "seed.metal").read_text())
    axes = AutotuneProposer().axes(two_d, "heat2d")
    shapes = axes[0][1]
    assert (16, 16, 1) not in shapes and (32, 8, 1) in shapes and (8, 4, 1) in shapes
    assert all(32 <= x * y <= 1024 and z == 1 for x, y, z in shapes)
    tied = parse("//! kernel k\n//! grid = (N, N * N, 1)\n//! threadgroup = (N, 1, 1)\nx;\n")
    assert AutotuneProposer().axes(tied, "no-such-task") == []
    single_group = parse(
        "//! kernel k\n//! grid = (256, 1, 1)\n//! threadgroup = (256, 1, 1)\nx;\n"
    )
    assert AutotuneProposer().axes(single_group, "no-such-task") == []
    r = AutotuneProposer().propose(ctx_for(render(tied), task="no-such-task"))
    assert r.text is None and "exhausted" in r.error


def test_autotune_unparsable_incumbent():
    r = AutotuneProposer().propose(ctx_for("kernel void f() {}\n"))
    assert r.text is None and r.error.startswith("autotune: the incumbent does not parse")


# --- replay ---------------------------------------------------------------------


def test_replay(tmp_path):
    first = render(parse(PARAM_CANDIDATE))
    (tmp_path / "00_seed.metal").write_text(SAXPY_SEED)
    (tmp_path / "02_candidate.metal").write_text(first)
    (tmp_path / "10_candidate.metal").write_text(SAXPY_SEED)
    (tmp_path / "02_reasoning.md").write_text("because")
    (tmp_path / "02_response.md").write_text("ignored")
    p = make_proposer(f"replay:{tmp_path}")
    r1, r2, r3 = (p.propose(ctx_for(iteration=i)) for i in (1, 2, 3))
    assert extract_from_response(r1.text, "metal") == first and r1.reasoning == "because"
    assert extract_from_response(r2.text, "metal") == SAXPY_SEED and r2.reasoning is None
    assert r3.text is None and r3.error == "replay: no more candidates"
    assert p.name == "replay"
