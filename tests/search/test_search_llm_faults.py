"""Provider faults, secrets and the cost cap (issue 12, outcomes 1-4), through the
real openai / anthropic SDKs against the local scripted server.

Every fault must end as a skipped iteration with its reason (history.jsonl,
NN_proposal.json, the console), with each retry announced; a run with no
candidate at all ends as `no_candidates` (CLI exit status 1); the cost cap is
checked before each call. Loop-level tests stand a stub in for the evaluator
(the evaluation itself is tested elsewhere), so they take well under a second.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from fake_llm_server import SAXPY_ANSWER, dropped, free_port, ok, raw, slow, status, truncated

from mlxsci.search import loop, run
from mlxsci.search.outcomes import OUTCOMES
from mlxsci.search.proposers import llm as llm_proposers
from mlxsci.search.proposers.base import PromptContext, Proposer
from mlxsci.search.proposers.registry import make_proposer
from mlxsci.task import load_task

SAXPY = load_task("saxpy")
TIMEOUT_S = 0.3  # per attempt, in every test that times out
APIS = [
    ("anthropic", "claude-opus-4-1", "url"),
    ("openai", "gpt-5", "openai_url"),
    ("openai-chat", "local-coder", "openai_url"),
]

# Answers that are not answers. The Anthropic proposer streams, so its malformed
# and garbage answers are event streams; the OpenAI ones are JSON bodies.
MALFORMED = {
    "anthropic": raw(
        'event: message_start\ndata: {"type": "message_start", "message": {"id\n\n',
        content_type="text/event-stream",
        times=None,
    ),
    "openai": raw('{"id": "resp_1", "output": [{"type": "message", "content": [', times=None),
    "openai-chat": raw(
        '{"id": "chatcmpl-1", "choices": [{"message": {"content": "Unterm', times=None
    ),
}
GARBAGE = {
    "anthropic": raw("event: ping\ndata: {}\n\n", content_type="text/event-stream", times=None),
    "openai": raw("{}", times=None),
    "openai-chat": raw('{"object": "nonsense"}', times=None),
}


def ctx() -> PromptContext:
    return PromptContext(
        task="saxpy",
        dialect="metal",
        iteration=1,
        system="SYSTEM",
        user="USER",
        incumbent_source=SAXPY.seed(),
    )


def proposer(fake, api, model, url_attr, base_url=None, **kw):
    kw.setdefault("max_retries", 2)
    p = make_proposer(
        model,
        api=api,
        base_url=base_url or getattr(fake, url_attr),
        timeout_s=TIMEOUT_S,
        backoff_s=0.01,
        **kw,
    )
    lines = []
    p.say = lines.append
    return p, lines


# --- each fault, each API: a failed Proposal with its reason, retries announced ---------

FAULTS = {
    # name: (behaviour or None for a refused connection, words of the reason, retried)
    "malformed_json": (
        MALFORMED,
        ("malformed", "json", "decode", "expecting", "unterminated", "ended before"),
        True,
    ),
    "truncated": (
        truncated(times=None),
        ("incomplete", "closed", "disconnect", "peer", "ended before", "connection"),
        True,
    ),
    "http_500_forever": (status(500, "overloaded forever", times=None), ("500",), True),
    "timeout": (slow(5.0, times=None), ("timed out", "timeout"), True),
    "connection_refused": (None, ("connect", "refused"), True),
    "dropped_connection": (dropped(times=None), ("disconnect", "connection", "closed"), True),
    "garbage": (GARBAGE, ("no choices", "no output", "no message"), True),
    "empty_completion": (ok("", times=None), ("empty answer",), False),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("api,model,url_attr", APIS)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_every_fault_is_a_failed_proposal_with_its_reason(fake, api, model, url_attr, fault):
    behaviour, words, retried = FAULTS[fault]
    base_url = None
    if behaviour is None:
        base_url = f"http://127.0.0.1:{free_port()}" + ("" if api == "anthropic" else "/v1")
    else:
        fake.script(behaviour[api] if isinstance(behaviour, dict) else behaviour)
    p, lines = proposer(fake, api, model, url_attr, base_url=base_url)
    r = p.propose(ctx())
    assert r.text is None and r.error, r
    assert any(w in r.error.lower() for w in words), r.error
    retries = [line for line in lines if ", retry " in line]
    if retried:
        assert r.error.endswith("(gave up after 3 attempts)")
        assert [line.split(", retry ")[1].split(" in ")[0] for line in retries] == ["1/2", "2/2"]
        assert all(line.startswith(f"model {model}: ") for line in retries)
        if behaviour is not None:
            assert len(fake.requests) == 3
    else:
        assert retries == [] and len(fake.requests) == 1
    assert lines[0].startswith(f"model {model}: waiting for an answer")


@pytest.mark.parametrize("api,model,url_attr", APIS)
def test_a_fault_then_an_answer_succeeds(fake, api, model, url_attr):
    fake.script(dataclasses.replace(MALFORMED[api], times=1, served=0), ok(SAXPY_ANSWER))
    p, lines = proposer(fake, api, model, url_attr)
    r = p.propose(ctx())
    assert r.error is None and r.text == SAXPY_ANSWER
    assert len([line for line in lines if "retry 1/2" in line]) == 1


def test_retry_waits_follow_retry_after_else_double(fake):
    p, lines = proposer(fake, "openai-chat", "local-coder", "openai_url", max_retries=3)
    fake.script(status(503, times=None))  # carries retry-after-ms: 5
    p.propose(ctx())
    assert [line.rsplit(" in ", 1)[1] for line in lines[1:]] == ["5 ms"] * 3
    lines.clear()
    fake.reset()
    fake.script(dropped(times=None))  # no header: 10, 20, 40 ms
    p.propose(ctx())
    assert [line.rsplit(" in ", 1)[1] for line in lines[1:]] == ["10 ms", "20 ms", "40 ms"]


# --- through the loop: recorded skipped iterations, no_candidates -------------------


def stub_evaluate(task, source, *, size_set=None, sizes=None, timer=None, **kw):
    """Stands in for mlxsci.evaluation.evaluator.evaluate: every candidate is correct, S 0.3
    (0.4 for one holding 'faster'), Phi 0.5 (at the listed held-out or a drawn one)."""
    score = 0.4 if "faster" in source else 0.3
    held = size_set == "held-out" or any(SAXPY.is_held_out(s) for s in sizes or ())
    label = SAXPY.size_set("held-out" if held else "smoke")[0].label
    sizes = [
        {
            "label": label,
            "held_out": held,
            "correct": True,
            "fraction": 0.5 if held else score,
            "noise": 0.01,
            "timer": "sim",
            "seconds": 1e-3,
            "kernels": {"saxpy": {"launches": 1, "seconds": 1e-3}},
        }
    ]
    cand = {
        "compile_ok": True,
        "correct": True,
        "score": None if held else score,
        "phi": 0.5 if held else None,
        "noise": 0.01,
        "fail_reason": None,
    }
    result = {
        "task": "saxpy",
        "backend": "sim",
        "device": "stub",
        "dialect": "metal",
        "timer": timer or "sim",
        "candidate": cand,
        "sizes": sizes,
    }
    return types.SimpleNamespace(to_json=lambda: result)


@pytest.fixture
def stubbed(fake, monkeypatch):
    monkeypatch.setattr(loop, "evaluate", stub_evaluate)
    monkeypatch.setattr(llm_proposers, "DEFAULT_BACKOFF_S", 0.01)  # run() makes the proposer
    return fake


def search(fake, tmp_path, model="local-coder", iterations=2, url=None, **kw):
    lines = []
    kw.setdefault("llm_retries", 1)
    kw.setdefault("llm_timeout", TIMEOUT_S)
    summary = run(
        "saxpy",
        model,
        iterations=iterations,
        backend="sim",
        out=tmp_path / "run",
        base_url=url or fake.openai_url,
        quiet=False,
        echo=lines.append,
        **kw,
    )
    return summary, lines


def history(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]


def test_malformed_json_is_a_recorded_skip_and_the_run_ends_no_candidates(stubbed, tmp_path):
    stubbed.script(MALFORMED["openai-chat"])
    summary, lines = search(stubbed, tmp_path)
    out = tmp_path / "run"
    records = history(out)
    assert [r["role"] for r in records] == ["seed", "skipped", "skipped"]
    for r in records[1:]:
        assert "JSONDecodeError" in r["fail_reason"] or "malformed" in r["fail_reason"].lower()
        proposal = json.loads((out / f"{r['iteration']:02d}_proposal.json").read_text())
        assert proposal["error"] == r["fail_reason"]
    # On the console: the retry and each skipped iteration with its reason.
    retries = [line for line in lines if line.startswith("model local-coder: malformed answer")]
    assert len(retries) == 2 and all("retry 1/1" in line for line in retries)
    skipped = [line for line in lines if line.startswith("iter ") and "skipped" in line]
    assert len(skipped) == 2 and all(records[1]["fail_reason"] in line for line in skipped)
    on_disk = json.loads((out / "summary.json").read_text())
    for s in (summary, on_disk):
        assert s["outcome"] == "no_candidates" and "no_candidates" in OUTCOMES
        assert s["skipped_iterations"] == 2
        assert s["last_failure"] == records[2]["fail_reason"]
        assert (
            "2 proposal(s)" in s["outcome_reason"]
            and records[2]["fail_reason"] in s["outcome_reason"]
        )


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_resume_after_faults_continues_and_finds_a_candidate(stubbed, tmp_path):
    stubbed.script(MALFORMED["openai-chat"])
    first, _ = search(stubbed, tmp_path, iterations=1)
    assert first["outcome"] == "no_candidates"
    stubbed.reset()
    stubbed.script(ok(SAXPY_ANSWER.replace("if (i < N)", "if (i < N)  // faster")))
    lines = []
    again = run(None, resume=tmp_path / "run", iterations=2, quiet=False, echo=lines.append)
    assert [r["role"] for r in again["history"]] == ["seed", "skipped", "candidate"]
    assert again["outcome"] != "no_candidates" and again["outcome_reason"] is None
    assert again["skipped_iterations"] == 1 and again["best_iteration"] == 2


def test_some_failures_among_candidates_are_not_no_candidates(stubbed, tmp_path):
    stubbed.script(status(500, times=2), ok(SAXPY_ANSWER))
    summary, _ = search(stubbed, tmp_path)
    assert [r["role"] for r in summary["history"]] == ["seed", "skipped", "candidate"]
    assert summary["outcome"] != "no_candidates" and summary["skipped_iterations"] == 1
    assert "500" in summary["last_failure"]


class Raising(Proposer):
    name = "raising"

    def propose(self, ctx):
        raise json.JSONDecodeError("Unterminated string starting at", '{"a": "', 6)


def test_a_proposer_that_raises_is_a_skipped_iteration(stubbed, tmp_path):
    summary = run("saxpy", proposer=Raising(), iterations=1, backend="sim", out=tmp_path / "r")
    assert summary["outcome"] == "no_candidates"
    assert summary["last_failure"].startswith("the proposer failed: JSONDecodeError: Unterminated")


def test_zero_iterations_is_flat_not_no_candidates(stubbed, tmp_path):
    summary, _ = search(stubbed, tmp_path, iterations=0)
    assert summary["outcome"] == "flat" and stubbed.requests == []


# --- the cost cap (outcome 4) -------------------------------------------------------

PRICEY = {"pricey-model": [10.0, 100.0]}  # USD per M: 32000 output tokens cost $3.20


def test_cost_cap_is_checked_before_each_call(stubbed, tmp_path):
    # Each answer uses the whole output allowance: the second call could not fit.
    stubbed.script(ok(SAXPY_ANSWER, input_tokens=4000, output_tokens=32000, times=None))
    summary, lines = search(
        stubbed, tmp_path, model="pricey-model", iterations=3, max_cost=5.0, prices=PRICEY
    )
    assert len(stubbed.requests) == 1
    assert summary["cost_usd"] == pytest.approx(0.04 + 3.2) and summary["cost_usd"] <= 5.0
    assert summary["stopped"].startswith("max_cost: the next call could cost up to $")
    assert any(line.startswith("stopping before iteration 2: max_cost") for line in lines)
    assert [r["role"] for r in summary["history"]] == ["seed", "candidate"]
    assert not (tmp_path / "run" / "02_prompt.md").exists()
    assert (
        json.loads((tmp_path / "run" / "summary.json").read_text())["stopped"] == summary["stopped"]
    )


def test_cost_cap_below_one_call_makes_no_call(stubbed, tmp_path):
    summary, _ = search(stubbed, tmp_path, model="pricey-model", max_cost=1.0, prices=PRICEY)
    assert stubbed.requests == [] and summary["cost_usd"] == 0.0
    assert summary["outcome"] == "no_candidates" and "max_cost" in summary["outcome_reason"]


def test_unpriced_model_is_refused_under_a_cap_and_warned_about_without(stubbed, tmp_path):
    with pytest.raises(ValueError, match="--prices") as info:
        search(stubbed, tmp_path, max_cost=1.0)
    assert "'local-coder'" in str(info.value)
    assert not (tmp_path / "run").exists()
    stubbed.script(ok(SAXPY_ANSWER, times=None))
    summary, lines = search(stubbed, tmp_path)
    warnings = [line for line in lines if "cost counted as $0: no price for local-coder" in line]
    assert len(warnings) == 1 and summary["cost_usd"] == 0.0
    # A price of its own lets it run under a cap.
    free = search(stubbed, tmp_path / "free", max_cost=1.0, prices={"local-coder": [0, 0]})[0]
    assert free["stopped"] is None and free["iterations"] == 2


def test_run_json_records_the_key_variable_name_never_the_key(stubbed, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_LOCAL_KEY", "local-secret-0123456789")
    stubbed.script(status(401, "bad key local-secret-0123456789", times=None))
    summary, lines = search(stubbed, tmp_path, api_key_env="MY_LOCAL_KEY", iterations=1)
    out = tmp_path / "run"
    opts = json.loads((out / "run.json").read_text())
    assert opts["api_key_env"] == "MY_LOCAL_KEY" and opts["llm_retries"] == 1
    for path in out.iterdir():
        assert "local-secret-0123456789" not in path.read_text(), path.name
    assert not any("local-secret-0123456789" in line for line in lines)
    assert "[API key]" in summary["last_failure"]


# --- the command line: exit codes, keys, resume -----------------------------------------


def cli(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "mlxsci.search", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


@pytest.mark.slow
def test_cli_faults_exit_1_with_reasons_and_keys_stay_home(fake, tmp_path):
    env = dict(
        os.environ,
        OPENAI_API_KEY="sk-REAL-openai-0123456789",
        MY_LOCAL_KEY="local-server-key-0123456789",
    )
    fake.script(MALFORMED["openai-chat"])
    out = tmp_path / "run"
    common = ["--llm-retries", "1", "--llm-timeout", "5"]
    proc = cli(
        "--task",
        "saxpy",
        "--model",
        "local-coder",
        "--base-url",
        fake.openai_url,
        "--iterations",
        "1",
        "--backend",
        "sim",
        "--out",
        str(out),
        *common,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "no candidates: " in proc.stderr
    assert "model local-coder: malformed answer, retry 1/1 in 1.0 s" in proc.stdout
    assert proc.stdout.count("cost counted as $0: no price for local-coder") == 1
    assert "outcome no_candidates" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["outcome"] == "no_candidates" and summary["skipped_iterations"] == 1
    assert len(fake.requests) == 2
    assert all("sk-REAL" not in json.dumps(r["headers"]) for r in fake.requests)
    # Resumed and extended, with a key named for the server: exactly that key is sent.
    fake.reset()
    fake.script(MALFORMED["openai-chat"])
    proc = cli(
        "--resume", str(out), "--iterations", "2", "--api-key-env", "MY_LOCAL_KEY", *common, env=env
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert {r["headers"]["authorization"] for r in fake.requests} == {
        "Bearer local-server-key-0123456789"
    }
    assert [r["role"] for r in history(out)] == ["seed", "skipped", "skipped"]
    for path in out.iterdir():
        text = path.read_text()
        assert "sk-REAL" not in text and "local-server-key-0123456789" not in text


@pytest.mark.slow
def test_cli_usage_errors_for_prices_and_key_variables(fake, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NOT_SET_ANYWHERE"}
    out = tmp_path / "run"
    base = [
        "--task",
        "saxpy",
        "--model",
        "local-coder",
        "--base-url",
        fake.openai_url,
        "--backend",
        "sim",
        "--out",
        str(out),
    ]
    proc = cli(*base, "--max-cost", "2", env=env)
    assert proc.returncode == 2 and "--prices" in proc.stderr and "local-coder" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    proc = cli(*base, "--api-key-env", "NOT_SET_ANYWHERE", env=env)
    assert proc.returncode == 2 and "NOT_SET_ANYWHERE is not set" in proc.stderr
    for bad in (["--llm-timeout", "0"], ["--llm-retries", "-1"]):
        proc = cli(*base, *bad, env=env)
        assert proc.returncode == 2 and bad[0] in proc.stderr and not out.exists()
    assert fake.requests == []
