"""The search loop end to end on the simulator, with scripted proposers."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from mlxsci.search import run
from mlxsci.search.proposer import Proposal, Proposer
from mlxsci.task import load_task

SAXPY = load_task("saxpy")
HEAD = "//! kernel saxpy\n//! grid = (ceil_div(N, 256) * 256, 1, 1)\n//! threadgroup = (256, 1, 1)\n"
# Correct but slow: a useless loop the compiler cannot drop (no fast-math).
SLOW = HEAD + """uint i = thread_position_in_grid.x;
if (i >= N) return;
float acc = 0.0f;
for (uint k = 0; k < {loops}u; ++k) {{ acc = acc * 0.5f + x[(i + k) % N]; }}
y_out[i] = a * x[i] + y[i] + acc * 0.0f;
"""
SMOKE_N = SAXPY.size_set("smoke")[0].params["N"]
# Fast and correct at the search size only; at any other size wrong or slow.
CHEAT_WRONG = HEAD + f"""uint i = thread_position_in_grid.x;
if (i >= N) return;
y_out[i] = (N == {SMOKE_N}u) ? a * x[i] + y[i] : 0.0f;
"""
CHEAT_SLOW = HEAD + f"""uint i = thread_position_in_grid.x;
if (i >= N) return;
float acc = 0.0f;
if (N != {SMOKE_N}u) {{
    for (uint k = 0; k < 200u; ++k) {{ acc = acc * 0.5f + x[(i + k) % N]; }}
}}
y_out[i] = a * x[i] + y[i] + acc * 0.0f;
"""


class Scripted(Proposer):
    """Answers with the given texts in turn; records what it was shown."""
    name = "scripted"

    def __init__(self, answers, cost=0.0):
        self.answers = list(answers)
        self.cost = cost
        self.seen = []

    def propose(self, ctx):
        self.seen.append(ctx)
        text = self.answers.pop(0) if self.answers else None
        if isinstance(text, Exception):
            return Proposal(text=None, error=str(text), cost_usd=self.cost)
        return Proposal(text=text, input_tokens=100, output_tokens=50, cost_usd=self.cost,
                        reasoning="thinking..." if text else None, model="scripted")


def fenced(src):
    return f"Here is a faster kernel.\n```metal\n{src}```\n"


def test_run_directory_records_everything(tmp_path):
    out = tmp_path / "run"
    answers = [fenced(SAXPY.seed().replace("(256, 1, 1)", "(128, 1, 1)")),
               "Sorry, I cannot help with that.",                      # no code block
               fenced("//! kernel saxpy\nthis is not metal;\n"),       # broken candidate
               RuntimeError("RateLimitError: retries exhausted")]      # failed call
    summary = run("saxpy", proposer=Scripted(answers, cost=0.01), iterations=4, backend="sim",
                  out=out)
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in history] == [0, 1, 2, 3, 4]
    assert [r["role"] for r in history] == ["seed", "candidate", "skipped", "candidate", "skipped"]
    assert history[1]["correct"] and not history[3]["compile_ok"]
    assert "no fenced code block" in history[2]["fail_reason"]
    assert "RateLimitError" in history[4]["fail_reason"]
    for name in ["run.json", "00_seed.metal", "00_result.json", "system_prompt.md",
                 "01_prompt.md", "01_response.md", "01_reasoning.md", "01_candidate.metal",
                 "01_result.json", "02_response.md", "03_result.json", "best.metal",
                 "best_result.json", "summary.json", "held_out_seed.json"]:
        assert (out / name).exists(), name
    assert not (out / "02_candidate.metal").exists()
    s = json.loads((out / "summary.json").read_text())
    for key in ["task", "model", "backend", "device", "iterations", "seed_score", "best_score",
                "improvement", "held_out_seed", "held_out_best", "held_out_ratio", "outcome",
                "tokens", "cost_usd", "wall_s"]:
        assert key in s, key
    assert s["iterations"] == 4 and s["tokens"] == {"input": 300, "output": 150}
    assert s["cost_usd"] == pytest.approx(0.04) and s["outcome"] in ("improved", "flat")
    assert summary["best_score"] == s["best_score"]
    # The iteration-3 prompt shows the broken attempt's compile failure.
    assert "COMPILE FAILED" in (out / "04_prompt.md").read_text() or \
        "compile" in (out / "04_prompt.md").read_text().lower()


def test_held_out_labels_never_reach_a_proposer(tmp_path):
    proposer = Scripted([fenced(SAXPY.seed())] * 2)
    run("saxpy", proposer=proposer, iterations=2, backend="sim", out=tmp_path / "r")
    held = [s.label for s in SAXPY.size_set("held-out")]
    for ctx in proposer.seen:
        for label in held:
            assert label not in ctx.system and label not in ctx.user


@pytest.mark.parametrize("cheat,outcome", [(CHEAT_WRONG, "held_out_failure"),
                                           (CHEAT_SLOW, "held_out_regression")])
def test_size_special_casing_is_promoted_by_s_and_caught_by_phi(tmp_path, cheat, outcome):
    start = tmp_path / "slow.metal"
    start.write_text(SLOW.format(loops=20))
    summary = run("saxpy", proposer=Scripted([fenced(cheat)]), iterations=1, backend="sim",
                  out=tmp_path / "run", start=start)
    assert summary["best_iteration"] == 1                 # S promoted the cheat
    assert summary["best_score"] > summary["seed_score"]
    assert summary["held_out_seed"] is not None
    assert summary["outcome"] == outcome
    if outcome == "held_out_failure":
        assert summary["held_out_best"] is None and "4M" in summary["held_out_best_fail_reason"]
    else:
        assert summary["held_out_ratio"] < 0.9


def test_max_cost_stops_cleanly(tmp_path):
    summary = run("saxpy", proposer=Scripted([fenced(SAXPY.seed())] * 5, cost=0.6),
                  iterations=5, backend="sim", out=tmp_path / "r", max_cost=1.0)
    assert summary["iterations"] == 2 and summary["stopped"].startswith("max_cost")
    assert summary["cost_usd"] == pytest.approx(1.2)


def test_best_of_n_always_starts_from_the_seed(tmp_path):
    proposer = Scripted([fenced(SAXPY.seed().replace("(256, 1, 1)", f"({t}, 1, 1)"))
                         for t in (64, 128, 512)])
    run("saxpy", proposer=proposer, iterations=3, backend="sim", out=tmp_path / "r",
        strategy="best-of-n")
    assert all(ctx.incumbent_source == proposer.seen[0].incumbent_source for ctx in proposer.seen)
    assert all("previous attempt" not in ctx.user.lower() for ctx in proposer.seen)


def test_killed_run_resumes_without_repeating_or_losing_an_iteration(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "mlxsci.search", "--task", "saxpy", "--model", "autotune",
           "--iterations", "5", "--backend", "sim", "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:   # kill while iteration 3 is being evaluated
        if (out / "03_candidate.metal").exists() or proc.poll() is not None:
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = (out / "history.jsonl").read_text().splitlines()
    assert 1 <= len(before) <= 4          # killed mid-run
    done = subprocess.run([sys.executable, "-m", "mlxsci.search", "--resume", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in history] == list(range(6))
    assert history[:len(before)] == [json.loads(line) for line in before]   # nothing rewritten
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iterations"] == 5 and summary["best_score"] >= summary["seed_score"]


def test_autotune_run_stops_when_its_space_is_exhausted(tmp_path):
    summary = run("saxpy", "autotune", iterations=20, backend="sim", out=tmp_path / "r")
    assert summary["stopped"].startswith("the proposer has nothing left")
    roles = [r["role"] for r in summary["history"]]
    assert roles[-1] == "skipped" and roles.count("skipped") == 1
    assert summary["best_score"] >= summary["seed_score"]      # (1+1) never loses the seed
    # resuming a finished, exhausted run changes nothing
    again = run(None, resume=tmp_path / "r")
    assert [r["iteration"] for r in again["history"]] == [r["iteration"] for r in summary["history"]]


@pytest.mark.parametrize("api,model,url_attr", [("anthropic", "claude-opus-4-7", "url"),
                                                ("openai", "gpt-5.5", "openai_url"),
                                                ("openai-chat", "local-coder", "openai_url")])
def test_search_through_the_real_sdks(tmp_path, monkeypatch, api, model, url_attr):
    """The real SDKs against a local server answering like each API: 429 then
    success, a persistent 500, a timeout, no code block, a broken candidate;
    the run directory records each outcome."""
    from fake_llm_server import FakeLLMServer, broken_candidate, no_code_block, ok, slow, status
    from mlxsci.search.proposers import make_proposer
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    good = fenced(SAXPY.seed().replace("(256, 1, 1)", "(128, 1, 1)"))
    with FakeLLMServer() as server:
        server.script(status(429), ok(good, reasoning="I will shrink the threadgroup."),
                      status(500, times=2),            # both tries of iteration 2 fail
                      slow(3.0, times=2),              # both tries of iteration 3 time out
                      no_code_block(), broken_candidate())
        proposer = make_proposer(model, api=api, base_url=getattr(server, url_attr),
                                 max_retries=1, timeout_s=1.0)
        out = tmp_path / "run"
        summary = run("saxpy", proposer=proposer, iterations=5, backend="sim", out=out)
    history = summary["history"]
    assert [r["role"] for r in history] == ["seed", "candidate", "skipped", "skipped",
                                            "skipped", "candidate"]
    assert history[1]["correct"] and history[1]["input_tokens"] > 0
    assert (out / "01_reasoning.md").read_text().strip() == "I will shrink the threadgroup."
    assert "500" in history[2]["fail_reason"] or "Internal" in history[2]["fail_reason"]
    assert "timeout" in history[3]["fail_reason"].lower() or \
        "timed out" in history[3]["fail_reason"].lower()
    assert "no fenced code block" in history[4]["fail_reason"]
    assert (out / "04_response.md").exists() and not (out / "04_candidate.metal").exists()
    assert not history[5]["correct"] and (out / "05_result.json").exists()
    assert json.loads((out / "02_proposal.json").read_text())["error"]
    assert summary["tokens"]["input"] > 0 and json.loads((out / "summary.json").read_text())


def test_missing_api_key_is_a_usage_error_and_leaves_no_run_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = subprocess.run([sys.executable, "-m", "mlxsci.search", "--task", "saxpy", "--model",
                           "claude-opus-4-7", "--backend", "sim", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr
    assert not (tmp_path / "r").exists()
