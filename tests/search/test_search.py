"""The search loop end to end on the simulator, with scripted proposers."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import types

import pytest
from helpers import LISTED_HELD_OUT
from scripted_runs import HEAD, SAXPY, SEED, SMOKE_LABEL, Scripted, crafted_run, fenced, variant

from mlxsci.evaluation.results import geometric_mean
from mlxsci.evaluation.verdicts import NOISE_FLOOR, change
from mlxsci.search import loop, run
from mlxsci.search.outcomes import OUTCOMES, classify
from mlxsci.timing.noise import combined_noise

# Correct but slow: a useless loop the compiler cannot drop (no fast-math).
SLOW = (
    HEAD
    + """uint i = thread_position_in_grid.x;
if (i >= N) return;
float acc = 0.0f;
for (uint k = 0; k < {loops}u; ++k) {{ acc = acc * 0.5f + x[(i + k) % N]; }}
y_out[i] = a * x[i] + y[i] + acc * 0.0f;
"""
)
SMOKE_N = SAXPY.size_set("smoke")[0].params["N"]
# Fast and correct at the search size only; at any other size wrong or slow.
CHEAT_WRONG = (
    HEAD
    + f"""uint i = thread_position_in_grid.x;
if (i >= N) return;
y_out[i] = (N == {SMOKE_N}u) ? a * x[i] + y[i] : 0.0f;
"""
)
CHEAT_SLOW = (
    HEAD
    + f"""uint i = thread_position_in_grid.x;
if (i >= N) return;
float acc = 0.0f;
if (N != {SMOKE_N}u) {{
    for (uint k = 0; k < 20u; ++k) {{ acc = acc * 0.5f + x[(i + k) % N]; }}
}}
y_out[i] = a * x[i] + y[i] + acc * 0.0f;
"""
)


@pytest.mark.slow
def test_run_directory_records_everything(tmp_path):
    out = tmp_path / "run"
    answers = [
        fenced(SAXPY.seed().replace("(256, 1, 1)", "(128, 1, 1)")),
        "Sorry, I cannot help with that.",  # no code block
        fenced("//! kernel saxpy\nthis is not metal;\n"),  # broken candidate
        RuntimeError("RateLimitError: retries exhausted"),
    ]  # failed call
    summary = run(
        "saxpy",
        proposer=Scripted(answers, cost=0.01),
        iterations=4,
        backend="sim",
        out=out,
        held_out=LISTED_HELD_OUT,
    )
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in history] == [0, 1, 2, 3, 4]
    assert [r["role"] for r in history] == ["seed", "candidate", "skipped", "candidate", "skipped"]
    assert history[1]["correct"] and not history[3]["compile_ok"]
    assert "no fenced code block" in history[2]["fail_reason"]
    assert "RateLimitError" in history[4]["fail_reason"]
    for name in [
        "run.json",
        "00_seed.metal",
        "00_result.json",
        "system_prompt.md",
        "01_prompt.md",
        "01_response.md",
        "01_reasoning.md",
        "01_candidate.metal",
        "01_result.json",
        "02_response.md",
        "03_result.json",
        "best.metal",
        "best_result.json",
        "summary.json",
        "held_out_seed.json",
    ]:
        assert (out / name).exists(), name
    assert not (out / "02_candidate.metal").exists()
    s = json.loads((out / "summary.json").read_text())
    for key in [
        "task",
        "model",
        "backend",
        "device",
        "iterations",
        "seed_score",
        "best_score",
        "improvement",
        "held_out_seed",
        "held_out_best",
        "held_out_ratio",
        "outcome",
        "tokens",
        "cost_usd",
        "wall_s",
    ]:
        assert key in s, key
    assert s["iterations"] == 4 and s["tokens"] == {"input": 300, "output": 150}
    assert s["cost_usd"] == pytest.approx(0.04)
    # Iteration 1 differs from the seed only in its threadgroup: on the simulator
    # its S and Phi differ from the seed's by timing noise, in either direction,
    # so any outcome but a held-out failure can come out.
    assert s["outcome"] in OUTCOMES and s["outcome"] != "held_out_failure"
    if s["best_iteration"] == 0:
        assert s["outcome"] == "flat"
    assert summary["best_score"] == s["best_score"]
    # The iteration-3 prompt shows the broken attempt's compile failure.
    assert (
        "COMPILE FAILED" in (out / "04_prompt.md").read_text()
        or "compile" in (out / "04_prompt.md").read_text().lower()
    )


@pytest.mark.slow
def test_held_out_labels_never_reach_a_proposer(tmp_path):
    proposer = Scripted([fenced(SAXPY.seed())] * 2)
    run("saxpy", proposer=proposer, iterations=2, backend="sim", out=tmp_path / "r")
    held = [s.label for s in SAXPY.size_set("held-out")]
    for ctx in proposer.seen:
        for label in held:
            assert label not in ctx.system and label not in ctx.user


def extra_loads(source: str, n: int) -> int:
    """Loads per element beyond saxpy's own in SLOW, CHEAT_WRONG or CHEAT_SLOW
    at size N = n: its `for (k < K)` loop's K where it runs the loop."""
    loop_ = re.search(r"for \(uint k = 0; k < (\d+)u", source)
    if loop_ is None or (f"N != {SMOKE_N}u" in source and n == SMOKE_N):
        return 0
    return int(loop_.group(1))


MODELED_NOISE = 0.02


def modeled_fraction(source: str, n: int) -> float:
    """The roofline fraction the work model gives: saxpy's 12 bytes per element
    at 0.6 of the roofline, slowed by each extra load."""
    return 0.6 / (1 + extra_loads(source, n) / 4)


def with_modeled_times(real_evaluate):
    """mlxsci.evaluation.evaluator.evaluate, real in everything but its times: each candidate
    is compiled, run and checked at every size in a worker, and each correct
    size gets the fraction and noise of the work model instead of measured ones.
    Measured times, and the noise bands taken from them, differ from run to run
    on a loaded machine, and this test failed on different parameters in two
    runs (issue 11); the model keeps the times' order of size:
    SLOW (2 extra loads) 0.4 at every size, a cheat 0.6 at the search size,
    CHEAT_SLOW (20 extra loads) 0.1 at the held-out size. The loops stay short
    because the held-out size (4M) runs them for real."""

    def evaluate(task, source, **kw):
        result = real_evaluate(task, source, **kw).to_json()
        for size in result["sizes"]:
            if size["correct"]:
                size["fraction"] = modeled_fraction(source, size["params"]["N"])
                size["noise"] = MODELED_NOISE
        cand = result["candidate"]
        if cand["correct"]:  # S, Phi and S's noise from the sizes, as evaluate() takes them
            scored = [s for s in result["sizes"] if not s["held_out"]]
            held = [s["fraction"] for s in result["sizes"] if s["held_out"]]
            cand["score"] = geometric_mean([s["fraction"] for s in scored]) if scored else None
            cand["noise"] = combined_noise([s["noise"] for s in scored]) if scored else None
            cand["phi"] = held[0] if held else None
        return types.SimpleNamespace(to_json=lambda: result)

    return evaluate


@pytest.mark.slow
@pytest.mark.parametrize(
    "cheat,outcome", [(CHEAT_WRONG, "held_out_failure"), (CHEAT_SLOW, "held_out_regression")]
)
def test_size_special_casing_is_promoted_by_s_and_caught_by_phi(
    tmp_path, monkeypatch, cheat, outcome
):
    monkeypatch.setattr(loop, "evaluate", with_modeled_times(loop.evaluate))
    start = tmp_path / "slow.metal"
    start.write_text(SLOW.format(loops=2))
    summary = run(
        "saxpy",
        proposer=Scripted([fenced(cheat)]),
        iterations=1,
        backend="sim",
        out=tmp_path / "run",
        start=start,
        # the failure is named by the secret draw's label; the regression shows at any size
        held_out="secret" if outcome == "held_out_failure" else LISTED_HELD_OUT,
    )
    assert summary["best_iteration"] == 1  # S promoted the cheat
    assert summary["best_score"] > summary["seed_score"]
    assert summary["held_out_seed"] is not None
    assert summary["outcome"] == outcome
    if outcome == "held_out_failure":
        # at the run's secret draw, named by its label until the run reveals it
        reason = summary["held_out_best_fail_reason"]
        assert summary["held_out_best"] is None and "secret held-out" in reason
    else:
        assert summary["held_out_ratio"] < 0.9


@pytest.mark.slow
def test_max_cost_stops_cleanly(tmp_path):
    summary = run(
        "saxpy",
        proposer=Scripted([fenced(SAXPY.seed())] * 5, cost=0.6),
        iterations=5,
        backend="sim",
        out=tmp_path / "r",
        max_cost=1.0,
        held_out=LISTED_HELD_OUT,
    )
    assert summary["iterations"] == 2 and summary["stopped"].startswith("max_cost")
    assert summary["cost_usd"] == pytest.approx(1.2)


@pytest.mark.slow
def test_best_of_n_always_starts_from_the_seed(tmp_path):
    proposer = Scripted(
        [fenced(SAXPY.seed().replace("(256, 1, 1)", f"({t}, 1, 1)")) for t in (64, 128, 512)]
    )
    run(
        "saxpy",
        proposer=proposer,
        iterations=3,
        backend="sim",
        out=tmp_path / "r",
        strategy="best-of-n",
        held_out=LISTED_HELD_OUT,
    )
    assert all(ctx.incumbent_source == proposer.seen[0].incumbent_source for ctx in proposer.seen)
    assert all("previous attempt" not in ctx.user.lower() for ctx in proposer.seen)


@pytest.mark.slow
def test_killed_run_resumes_without_repeating_or_losing_an_iteration(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "mlxsci.search",
        "--task",
        "saxpy",
        "--model",
        "autotune",
        "--iterations",
        "5",
        "--backend",
        "sim",
        "--out",
        str(out),
        "--quiet",
        "--held-out",
        LISTED_HELD_OUT,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.time() + 300
    while time.time() < deadline:  # kill while iteration 3 is being evaluated
        if (out / "03_candidate.metal").exists() or proc.poll() is not None:
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = (out / "history.jsonl").read_text().splitlines()
    assert 1 <= len(before) <= 4  # killed mid-run
    done = subprocess.run(
        [sys.executable, "-m", "mlxsci.search", "--resume", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in history] == list(range(6))
    assert history[: len(before)] == [json.loads(line) for line in before]  # nothing rewritten
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iterations"] == 5 and summary["best_score"] >= summary["seed_score"]


@pytest.mark.slow
def test_autotune_run_stops_when_its_space_is_exhausted(tmp_path):
    summary = run(
        "saxpy",
        "autotune",
        iterations=20,
        backend="sim",
        out=tmp_path / "r",
        held_out=LISTED_HELD_OUT,
    )
    assert summary["stopped"].startswith("the proposer has nothing left")
    roles = [r["role"] for r in summary["history"]]
    assert roles[-1] == "skipped" and roles.count("skipped") == 1
    assert summary["best_score"] >= summary["seed_score"]  # (1+1) never loses the seed
    # resuming a finished, exhausted run changes nothing
    again = run(None, resume=tmp_path / "r")
    assert [r["iteration"] for r in again["history"]] == [
        r["iteration"] for r in summary["history"]
    ]


@pytest.mark.parametrize(
    "api,model,url_attr",
    [
        ("anthropic", "claude-opus-4-7", "url"),
        ("openai", "gpt-5.5", "openai_url"),
        ("openai-chat", "local-coder", "openai_url"),
    ],
)
@pytest.mark.slow
def test_search_through_the_real_sdks(tmp_path, monkeypatch, api, model, url_attr):
    """The real SDKs against a local server answering like each API: 429 then
    success, a persistent 500, a timeout, no code block, a broken candidate;
    the run directory records each outcome."""
    from fake_llm_server import FakeLLMServer, broken_candidate, no_code_block, ok, slow, status

    from mlxsci.search.proposers.registry import make_proposer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    good = fenced(SAXPY.seed().replace("(256, 1, 1)", "(128, 1, 1)"))
    with FakeLLMServer() as server:
        server.script(
            status(429),
            ok(good, reasoning="I will shrink the threadgroup."),
            status(500, times=2),  # both tries of iteration 2 fail
            slow(3.0, times=2),  # both tries of iteration 3 time out
            no_code_block(),
            broken_candidate(),
        )
        proposer = make_proposer(
            model, api=api, base_url=getattr(server, url_attr), max_retries=1, timeout_s=1.0
        )
        out = tmp_path / "run"
        summary = run(
            "saxpy",
            proposer=proposer,
            iterations=5,
            backend="sim",
            out=out,
            held_out=LISTED_HELD_OUT,
        )
    history = summary["history"]
    assert [r["role"] for r in history] == [
        "seed",
        "candidate",
        "skipped",
        "skipped",
        "skipped",
        "candidate",
    ]
    assert history[1]["correct"] and history[1]["input_tokens"] > 0
    assert (out / "01_reasoning.md").read_text().strip() == "I will shrink the threadgroup."
    assert "500" in history[2]["fail_reason"] or "Internal" in history[2]["fail_reason"]
    assert (
        "timeout" in history[3]["fail_reason"].lower()
        or "timed out" in history[3]["fail_reason"].lower()
    )
    assert "no fenced code block" in history[4]["fail_reason"]
    assert (out / "04_response.md").exists() and not (out / "04_candidate.metal").exists()
    assert not history[5]["correct"] and (out / "05_result.json").exists()
    assert json.loads((out / "02_proposal.json").read_text())["error"]
    assert summary["tokens"]["input"] > 0 and json.loads((out / "summary.json").read_text())


def test_missing_api_key_is_a_usage_error_and_leaves_no_run_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlxsci.search",
            "--task",
            "saxpy",
            "--model",
            "claude-opus-4-7",
            "--backend",
            "sim",
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr
    assert not (tmp_path / "r").exists()


# --- noise: summary verdicts and noise-aware acceptance (crafted evaluations) ---------


OUTCOME_CASES = {
    # S up 20 % against a 5 % band; Phi up 20 % too
    "improved": ({"best": (0.36, 0.02, 0.60, 0.02)}, "improved", "improved"),
    # S up 20 %, Phi unchanged: the gain does not transfer in speed
    "not_transferred": ({"best": (0.36, 0.02, 0.50, 0.02)}, "improved", "within noise"),
    # S up 6.7 %, but the best's S noise is 8 %
    "within_noise": ({"best": (0.32, 0.08, 0.50, 0.02)}, "within noise", "within noise"),
    # S up 20 %, Phi down 20 % against a 5 % band
    "held_out_regression": ({"best": (0.36, 0.02, 0.40, 0.02)}, "improved", "regressed"),
    # the same Phi drop, inside the 30 % noise measured at the held-out size: not a regression
    "held_out_noisy": ({"best": (0.36, 0.02, 0.40, 0.30)}, "improved", "within noise"),
    # the best fails at the held-out size
    "held_out_failure": ({"best": (0.36, 0.02, None, None)}, "improved", None),
    # the candidate is slower: the seed stays the best
    "flat": ({"best": (0.25, 0.01, 0.50, 0.02)}, "within noise", "within noise"),
}


@pytest.mark.parametrize("case", list(OUTCOME_CASES))
def test_summary_outcome_from_noise(tmp_path, monkeypatch, case):
    table, s_verdict, phi_verdict = OUTCOME_CASES[case]
    summary, fake, _ = crafted_run(tmp_path, monkeypatch, dict(table, seed=SEED), ["best"])
    expected = "not_transferred" if case == "held_out_noisy" else case
    assert summary["outcome"] == expected and expected in OUTCOMES
    best = table["best"] if case != "flat" else SEED
    assert summary["seed_noise"] == SEED[1] and summary["best_noise"] == best[1]
    assert summary["held_out_seed_noise"] == SEED[3]
    assert summary["held_out_best_noise"] == best[3]
    assert summary["noise_floor"] == NOISE_FLOOR
    assert summary["improvement_band"] == max(NOISE_FLOOR, SEED[1], best[1])
    assert summary["improvement_verdict"] == s_verdict
    assert summary["held_out_verdict"] == phi_verdict
    if phi_verdict is not None:
        assert summary["held_out_band"] == max(NOISE_FLOOR, SEED[3], best[3])
    # The facts stay whatever the verdict: seed vs best, and the keys other code reads.
    assert summary["seed_score"] == SEED[0] and summary["best_score"] == best[0]
    assert summary["best_iteration"] == (0 if case == "flat" else 1)
    assert summary["improvement"] == pytest.approx(best[0] / SEED[0])
    assert summary["held_out_seed"] == SEED[2] and summary["held_out_best"] == best[2]
    assert summary["accept"] == "strict" and summary["timer"] == "sim"
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["outcome"] == expected and on_disk["improvement_verdict"] == s_verdict


def test_outcome_rules_in_order():
    # (seed S, best S, seed Phi, best Phi), noises 0: the 5 % floor is the band
    def o(s0, s1, p0, p1):
        return classify(dict(seed_score=s0, best_score=s1, held_out_seed=p0, held_out_best=p1))

    assert o(0.3, 0.3, 0.5, 0.5) == "flat"
    assert o(0.3, 0.29, 0.5, 0.5) == "flat"
    assert o(0.3, 0.4, 0.5, None) == "held_out_failure"
    # a best within noise on S that also drops Phi beyond noise: the regression is the finding
    assert o(0.3, 0.31, 0.5, 0.3) == "held_out_regression"
    assert o(0.3, 0.4, None, None) == "improved"
    assert o(0.3, 0.31, None, 0.4) == "within_noise"


def fake_compare(result, calls):
    """Stands in for mlxsci.evaluation.comparison.compare; `calls` records the
    acceptance rule's re-timings (the transfer check's, at the run's end, ask
    held_out=True and are answered alike but not recorded)."""

    def compare(task, incumbent, candidate, **kw):
        if not kw.get("held_out"):
            calls.append({"task": task, "incumbent": incumbent, "candidate": candidate, **kw})
        if isinstance(result, Exception):
            raise result
        return dict(result)

    return compare


def comparison(speedup, noise):
    return {
        "timer": "sim",
        "sizes": [
            {
                "label": SMOKE_LABEL,
                "incumbent": 1e-3 * speedup,
                "candidate": 1e-3,
                "speedup": speedup,
                "noise": noise,
            }
        ],
        "speedup": speedup,
        "noise": noise,
    }


@pytest.mark.parametrize(
    "result,accepted,verdict",
    [
        (comparison(1.20, 0.03), True, "improved"),
        (comparison(1.04, 0.02), False, "within noise"),  # inside the 5 % floor
        (comparison(1.10, 0.12), False, "within noise"),  # inside the measured 12 %
        ({"timer": "sim", "error": f"comparison at size {SMOKE_LABEL} failed: crash"}, False, None),
        (RuntimeError("worker pool gone"), False, None),
    ],
)
def test_noise_aware_acceptance(tmp_path, monkeypatch, result, accepted, verdict):
    calls = []
    monkeypatch.setattr(loop, "compare", fake_compare(result, calls))
    messages = []
    table = {"seed": SEED, "faster": (0.36, 0.01, 0.60, 0.02), "next": (0.2, 0.01, 0.5, 0.02)}
    summary, _, proposer = crafted_run(
        tmp_path,
        monkeypatch,
        table,
        ["faster", "next"],
        accept="noise-aware",
        quiet=False,
        echo=messages.append,
    )
    rec = summary["history"][1]
    assert len(calls) == 1  # iteration 2 scores lower: the strict rule already says no
    assert calls[0]["incumbent"] == SAXPY.seed() and calls[0]["candidate"] == variant("faster")
    assert (calls[0]["backend"], calls[0]["size_set"], calls[0]["dialect"], calls[0]["timer"]) == (
        "sim",
        "smoke",
        "metal",
        "sim",
    )
    assert rec["is_new_best"] is accepted and rec["comparison"]["accepted"] is accepted
    assert rec["comparison"]["verdict"] == verdict
    assert "comparison" not in summary["history"][2]
    assert summary["best_iteration"] == (1 if accepted else 0)
    # Without the candidate, S did not change at all: the outcome says so.
    assert summary["outcome"] == ("improved" if accepted else "flat")
    if verdict is None:
        assert rec["comparison"]["reason"].startswith("not accepted: ")
        assert "fail" in rec["comparison"]["reason"] or "gone" in rec["comparison"]["reason"]
        assert any("re-timing failed: not accepted" in m for m in messages)
    else:
        assert rec["comparison"]["band"] == max(NOISE_FLOOR, result["noise"])
        assert rec["comparison"]["speedup"] == result["speedup"]
        assert any(f"re-timed {result['speedup']:.3f}x" in m and verdict in m for m in messages)
    # The next prompt tells the proposer what happened, and the rule it is judged by.
    assert ("not kept" in proposer.seen[1].user) is (not accepted)
    assert "beyond the timing noise" in proposer.seen[1].user
    assert json.loads((tmp_path / "run" / "run.json").read_text())["accept"] == "noise-aware"
    assert summary["accept"] == "noise-aware"


def test_strict_acceptance_never_re_times(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(loop, "compare", fake_compare(comparison(1.0, 0.01), calls))
    summary, _, proposer = crafted_run(
        tmp_path, monkeypatch, {"seed": SEED, "faster": (0.31, 0.01, 0.50, 0.02)}, ["faster"]
    )
    assert calls == [] and summary["history"][1]["is_new_best"]
    assert "comparison" not in summary["history"][1]
    assert summary["outcome"] == "within_noise"  # 1.033x: kept by (1+1), not a gain


def test_timer_reaches_every_evaluation_and_comparison(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(loop, "compare", fake_compare(comparison(1.2, 0.01), calls))
    summary, fake, _ = crafted_run(
        tmp_path,
        monkeypatch,
        {"seed": SEED, "faster": (0.36, 0.01, 0.5, 0.02)},
        ["faster"],
        accept="noise-aware",
        timer="wall",
    )
    assert {c["timer"] for c in fake.calls} == {"wall"}
    # the search sizes, the held-out, and the transfer check's sizes (second distribution)
    assert {c["size_set"] for c in fake.calls} == {"smoke", "held-out", "given sizes"}
    assert calls[0]["timer"] == "wall"
    assert json.loads((tmp_path / "run" / "run.json").read_text())["timer"] == "wall"


def test_bad_options_fail_before_any_run_directory(tmp_path):
    with pytest.raises(ValueError, match="cupti"):
        run("saxpy", proposer=Scripted([]), backend="sim", timer="cupti", out=tmp_path / "a")
    with pytest.raises(ValueError, match="acceptance"):
        run("saxpy", proposer=Scripted([]), backend="sim", accept="lenient", out=tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--timer", "cupti"], "cupti"),
        (["--timer", "stopwatch"], "stopwatch"),
        (["--accept", "lenient"], "lenient"),
    ],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_bad_timer_or_rule_is_a_usage_error(tmp_path, args, message):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlxsci.search",
            "--task",
            "saxpy",
            "--backend",
            "sim",
            "--out",
            str(tmp_path / "r"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


def test_resume_of_a_run_from_before_the_new_options(tmp_path, monkeypatch):
    table = {"seed": SEED, "a": (0.36, 0.01, 0.5, 0.02), "b": (0.5, 0.01, 0.6, 0.02)}
    crafted_run(tmp_path, monkeypatch, table, ["a"])
    opts_path = tmp_path / "run" / "run.json"
    opts = json.loads(opts_path.read_text())
    for key in ("accept", "timer"):  # as written before these options existed
        del opts[key]
    opts_path.write_text(json.dumps(opts))
    calls = []
    monkeypatch.setattr(loop, "compare", fake_compare(comparison(1.0, 0.01), calls))
    summary = run(
        None, resume=tmp_path / "run", iterations=2, proposer=Scripted([fenced(variant("b"))])
    )
    assert [r["iteration"] for r in summary["history"]] == [0, 1, 2]
    assert summary["accept"] == "strict" and calls == []  # strict, as it ran
    assert summary["best_iteration"] == 2 and summary["outcome"] == "improved"


def test_resume_keeps_noise_aware_acceptance(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(loop, "compare", fake_compare(comparison(1.3, 0.01), calls))
    table = {"seed": SEED, "a": (0.25, 0.01, 0.5, 0.02), "b": (0.5, 0.01, 0.5, 0.02)}
    crafted_run(tmp_path, monkeypatch, table, ["a"], accept="noise-aware", timer="wall")
    assert calls == []  # "a" is slower: no re-timing
    summary = run(
        None, resume=tmp_path / "run", iterations=2, proposer=Scripted([fenced(variant("b"))])
    )
    assert len(calls) == 1 and calls[0]["timer"] == "wall"  # the run's own options
    assert summary["history"][2]["comparison"]["accepted"] and summary["best_iteration"] == 2


@pytest.mark.slow
def test_noise_aware_autotune_on_the_simulator(tmp_path):
    """A real run: autotune, --accept noise-aware, through the CLI."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlxsci.search",
            "--task",
            "saxpy",
            "--model",
            "autotune",
            "--iterations",
            "3",
            "--backend",
            "sim",
            "--accept",
            "noise-aware",
            "--out",
            str(out),
            "--held-out",
            LISTED_HELD_OUT,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    opts = json.loads((out / "run.json").read_text())
    assert opts["accept"] == "noise-aware" and opts["timer"] == "sim"
    summary = json.loads((out / "summary.json").read_text())
    history = summary["history"]
    assert [r["iteration"] for r in history] == [0, 1, 2, 3]
    # Exactly the candidates the strict rule would take were re-timed; only
    # those re-timed beyond the noise became the best.
    best = history[0]["score"]
    for rec in history[1:]:
        strict = rec["role"] == "candidate" and rec["correct"] and rec["score"] > best
        assert ("comparison" in rec) is strict, rec
        if strict:
            cmp = rec["comparison"]
            assert cmp["reason"].startswith(("accepted: ", "not accepted: "))
            if "error" not in cmp:
                assert cmp["timer"] == "sim"
                assert [s["label"] for s in cmp["sizes"]] == [SMOKE_LABEL]
                assert cmp["band"] >= NOISE_FLOOR and cmp["speedup"] > 0
                assert cmp["verdict"] == change(cmp["speedup"], cmp["band"])
                assert cmp["accepted"] is (cmp["verdict"] == "improved")
                assert f"re-timed {cmp['speedup']:.3f}x" in proc.stdout
            assert rec["is_new_best"] is cmp["accepted"]
        else:
            assert not rec["is_new_best"]
        if rec["is_new_best"]:
            best = rec["score"]
    assert summary["outcome"] in OUTCOMES
    assert summary["improvement_verdict"] in ("improved", "within noise", "regressed")
    assert summary["seed_noise"] is not None and summary["improvement_band"] >= NOISE_FLOOR


@pytest.mark.slow
def test_noise_aware_re_times_for_real_on_the_simulator(tmp_path):
    """A real comparison: from a slow start, the seed is far faster (accepted
    beyond any noise); a slower candidate after it is never re-timed."""
    start = tmp_path / "slow.metal"
    start.write_text(SLOW.format(loops=40))
    proposer = Scripted([fenced(SAXPY.seed()), fenced(SLOW.format(loops=80))])
    summary = run(
        "saxpy",
        proposer=proposer,
        iterations=2,
        backend="sim",
        out=tmp_path / "r",
        start=start,
        accept="noise-aware",
        held_out=LISTED_HELD_OUT,
    )
    first, second = summary["history"][1:]
    cmp = first["comparison"]
    assert cmp["timer"] == "sim" and [s["label"] for s in cmp["sizes"]] == [SMOKE_LABEL]
    assert cmp["speedup"] > 1 + cmp["band"] and cmp["band"] >= NOISE_FLOOR
    assert cmp["verdict"] == "improved" and cmp["accepted"] and first["is_new_best"]
    assert cmp["sizes"][0]["incumbent"] > cmp["sizes"][0]["candidate"] > 0
    assert "comparison" not in second and not second["is_new_best"]
    assert summary["best_iteration"] == 1 and summary["accept"] == "noise-aware"
