"""The generational loop: the default strategy unchanged byte for byte, each
strategy's bookkeeping with scripted proposers, several proposals in flight
(out of order, one failing, the cost cap reached mid-generation), and resume."""

import json

import pytest

from tests.search.golden_runs import GOLDEN, SCRIPTS, golden_run


@pytest.mark.parametrize("accept", sorted(SCRIPTS))
def test_one_plus_one_prompts_and_decisions_are_byte_identical(tmp_path, monkeypatch, accept):
    # Written by the loop before generations existed (tests/search/golden_runs.py).
    golden = json.loads((GOLDEN / f"one_plus_one_{accept}.json").read_text())
    now = golden_run(tmp_path / "run", accept, monkeypatch)
    assert sorted(now["prompts"]) == sorted(golden["prompts"])
    for name, text in golden["prompts"].items():
        assert now["prompts"][name] == text, name
    assert now["shown"] == golden["shown"]
    assert now["decisions"] == golden["decisions"]


# --- scripted generations -------------------------------------------------------

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from scripted_runs import (  # noqa: E402
    HELD_LABEL,
    SAXPY,
    Crafted,
    crafted_compare,
    fenced,
    variant,
)

from mlxsci.search import loop, run  # noqa: E402
from mlxsci.search.features import cell_of, features  # noqa: E402
from mlxsci.search.proposers import Proposal, Proposer  # noqa: E402
from tests.search.golden_runs import DECIDED  # noqa: E402
from tests.search.golden_runs import TABLE as GOLDEN_TABLE  # noqa: E402

TABLE = {**GOLDEN_TABLE, "f": (0.36, 0.01, 0.55, 0.02), "g": (0.28, 0.01, 0.45, 0.02),
         "h": (0.50, 0.01, 0.72, 0.02)}  # fmt: skip


class ByIteration(Proposer):
    """Answers iteration n with answers[n] (an Exception: a failed call),
    after delays.get(n, 0) seconds; thread-safe; records what it was shown
    and how many calls were in flight at once."""

    name = "scripted"

    def __init__(self, answers, delays=None, cost=0.0, worst=None):
        self.answers, self.delays = answers, delays or {}
        self.cost, self.worst = cost, worst
        self.seen, self.lock = {}, threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def propose(self, ctx):
        with self.lock:
            self.seen.setdefault(ctx.iteration, []).append(ctx)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delays.get(ctx.iteration, 0.0))
            text = self.answers.get(ctx.iteration)
            if isinstance(text, Exception):
                return Proposal(text=None, error=str(text), cost_usd=self.cost, model="scripted")
            return Proposal(
                text=text, input_tokens=10, output_tokens=5, cost_usd=self.cost, model="scripted"
            )
        finally:
            with self.lock:
                self.in_flight -= 1

    def worst_case_cost(self, ctx):
        return self.worst


def answers_for(names):
    return {i: fenced(variant(n)) for i, n in enumerate(names, start=1)}


def scripted(tmp_path, monkeypatch, names, *, name="run", proposer=None, table=TABLE, **kw):
    fake = Crafted(table)
    monkeypatch.setattr(loop, "evaluate", fake)
    monkeypatch.setattr(loop, "compare", crafted_compare(table))
    proposer = proposer or ByIteration(answers_for(names))
    kw.setdefault("iterations", len(names))
    summary = run("saxpy", proposer=proposer, backend="sim", out=tmp_path / name, **kw)
    return summary, fake, proposer


def decisions(summary):
    return [{k: v for k, v in r.items() if k in DECIDED} for r in summary["history"]]


NAMES = ["a", "b", "c", "d", "e", "f", "g", "h"]


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_arrivals_out_of_order_keep_the_bookkeeping_of_slot_order(tmp_path, monkeypatch):
    calm, _, _ = scripted(tmp_path, monkeypatch, NAMES, name="calm", population=4)
    # Slot 0 answers last, slot 3 first, in both generations.
    delays = {1: 0.6, 2: 0.4, 3: 0.2, 5: 0.6, 6: 0.4, 7: 0.2}
    proposer = ByIteration(answers_for(NAMES), delays)
    shuffled, _, _ = scripted(
        tmp_path, monkeypatch, NAMES, name="late", population=4, proposer=proposer
    )
    assert proposer.most_in_flight == 4  # the generation's calls went out together
    assert decisions(shuffled) == decisions(calm)
    hist = shuffled["history"]
    assert [(r.get("generation"), r.get("slot")) for r in hist[1:]] == [
        (g, s) for g in (1, 2) for s in range(4)
    ]
    assert [r["iteration"] for r in hist] == list(range(9))
    # One-plus-one with K=4: every slot of generation 2 improves the best of generation 1.
    assert shuffled["best_iteration"] == 8  # h, the highest S
    gen1_best = max((r for r in hist[1:5]), key=lambda r: r["score"])["iteration"]
    assert {r["parent"] for r in hist[5:]} == {gen1_best}
    assert [g["iterations"] for g in shuffled["generations"]] == [[1, 2, 3, 4], [5, 6, 7, 8]]
    # each slot's own previous attempt is in its prompt
    assert variant("a") in proposer.seen[5][0].user and variant("b") in proposer.seen[6][0].user


def test_one_request_failing_is_recorded_and_the_others_go_on(tmp_path, monkeypatch):
    answers = answers_for(["a", "b", "c", "d", "e", "f"])
    answers[2] = RuntimeError("RateLimitError: retries exhausted")
    proposer = ByIteration(answers)
    summary, fake, _ = scripted(
        tmp_path, monkeypatch, [], iterations=6, population=3, proposer=proposer
    )
    hist = summary["history"]
    assert [r["role"] for r in hist] == ["seed"] + ["candidate", "skipped"] + ["candidate"] * 4
    assert "RateLimitError" in hist[2]["fail_reason"]
    assert hist[2]["slot"] == 1 and hist[2]["generation"] == 1
    # The failed slot's next prompt (iteration 5, slot 1) says its last answer gave nothing.
    assert "contained no usable" in proposer.seen[5][0].user
    assert len([c for c in fake.calls if c["size_set"] == "smoke"]) == 1 + 5  # seed + candidates


def test_cost_cap_reached_mid_generation_cuts_it_before_the_calls(tmp_path, monkeypatch):
    proposer = ByIteration(answers_for(NAMES), cost=0.3, worst=0.4)
    summary, _, _ = scripted(
        tmp_path,
        monkeypatch,
        NAMES,
        proposer=proposer,
        population=4,
        max_cost=1.0,
        prices={"scripted": [0, 0]},
    )
    out = tmp_path / "run"
    # 0.4 + 0.4 fit in $1.00; a third call's worst case would not: two calls, no more.
    assert sorted(proposer.seen) == [1, 2]
    assert [r["iteration"] for r in summary["history"]] == [0, 1, 2]
    assert {r["slots"] for r in summary["history"][1:]} == {2}
    assert not (out / "03_prompt.md").exists() and not (out / "03_proposal.json").exists()
    assert summary["cost_usd"] == pytest.approx(0.6) and "max_cost" in summary["stopped"]
    # A resume with a larger cap goes on from iteration 3 and asks nothing twice.
    again = ByIteration(answers_for(NAMES), cost=0.3, worst=0.4)
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    summary = run(None, proposer=again, resume=out, max_cost=10.0, prices={"scripted": [0, 0]})
    assert sorted(again.seen) == [3, 4, 5, 6, 7, 8]
    assert [r["iteration"] for r in summary["history"]] == list(range(9))


class Interrupting(Crafted):
    """A crafted evaluator that is interrupted (Ctrl-C) at one candidate."""

    def __init__(self, table, at):
        super().__init__(table)
        self.at = at

    def __call__(self, task, source, **kw):
        if f"// crafted: {self.at}" in source:
            raise KeyboardInterrupt
        return super().__call__(task, source, **kw)


def test_a_run_stopped_mid_generation_resumes_without_losing_or_repeating(tmp_path, monkeypatch):
    whole, _, _ = scripted(tmp_path, monkeypatch, NAMES, name="whole", population=4)
    out = tmp_path / "run"
    first = ByIteration(answers_for(NAMES))
    monkeypatch.setattr(loop, "evaluate", Interrupting(TABLE, "g"))  # iteration 7, generation 2
    with pytest.raises(KeyboardInterrupt):
        run("saxpy", proposer=first, backend="sim", out=out, iterations=8, population=4)
    kept = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in kept] == [0, 1, 2, 3, 4]  # generation 2 is not recorded
    saved = {it for it in range(5, 9) if (out / f"{it:02d}_proposal.json").exists()}
    evaluated = {it for it in range(5, 9) if (out / f"{it:02d}_result.json").exists()}
    assert 7 not in evaluated
    second = ByIteration(answers_for(NAMES))
    fake = Crafted(TABLE)
    monkeypatch.setattr(loop, "evaluate", fake)
    summary = run(None, proposer=second, resume=out)
    # Asked again: only what was not saved; evaluated again: only what had no result.
    assert set(second.seen) == set(range(5, 9)) - saved
    assert len([c for c in fake.calls if c["size_set"] == "smoke"]) == 4 - len(evaluated)
    assert decisions(summary) == decisions(whole)
    history = (out / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in history] == list(range(9))


def test_a_generation_cut_between_its_records_is_made_again_from_its_files(tmp_path, monkeypatch):
    whole, _, _ = scripted(tmp_path, monkeypatch, NAMES, population=4)
    out = tmp_path / "run"
    lines = (out / "history.jsonl").read_text().splitlines(keepends=True)
    (out / "history.jsonl").write_text("".join(lines[:7]))  # 2 of generation 2's 4 records
    (out / "summary.json").unlink()
    proposer = ByIteration(answers_for(NAMES))
    fake = Crafted(TABLE)
    monkeypatch.setattr(loop, "evaluate", fake)
    summary = run(None, proposer=proposer, resume=out)
    assert proposer.seen == {}  # every answer was saved
    assert [c for c in fake.calls if c["size_set"] == "smoke"] == []  # and every result
    assert decisions(summary) == decisions(whole)
    assert [
        json.loads(x)["iteration"] for x in (out / "history.jsonl").read_text().splitlines()
    ] == list(range(9))


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_twin_is_not_evaluated_again_whichever_arrives_first(tmp_path, monkeypatch):
    text = fenced(variant("c"))
    spaced = text.replace("\n", "\n\n")  # the same candidate, other whitespace
    answers = {
        1: text,
        2: fenced(variant("a")),
        3: spaced,
        4: spaced,
        5: text,
        6: fenced(variant("e")),
    }
    proposer = ByIteration(answers, delays={1: 0.5})  # the original arrives last
    summary, fake, _ = scripted(
        tmp_path, monkeypatch, [], iterations=6, population=3, proposer=proposer
    )
    hist = summary["history"]
    assert [r.get("duplicate_of") for r in hist[1:]] == [None, None, 1, 1, 1, None]
    assert len([c for c in fake.calls if c["size_set"] == "smoke"]) == 1 + 3
    assert [r["score"] for r in hist[1:]] == [0.40, 0.33, 0.40, 0.40, 0.40, 0.45]
    assert summary["duplicates"] == 3 and not any(r["is_new_best"] for r in hist[3:6])


# --- the strategies -----------------------------------------------------------------


def test_best_of_n_shows_every_slot_the_seed(tmp_path, monkeypatch):
    summary, _, proposer = scripted(
        tmp_path, monkeypatch, ["a", "c", "b", "e", "d", "f"], strategy="best-of-n", population=3
    )
    prompts = {ctx.user for calls in proposer.seen.values() for ctx in calls}
    assert len(prompts) == 1 and "## Baseline: the seed candidate" in prompts.pop()
    assert summary["best_iteration"] == 4
    assert {r["parent"] for r in summary["history"][1:]} == {0}  # the seed


def test_islands_keep_their_own_parents_and_migrate(tmp_path, monkeypatch):
    names = ["a", "f", "c", "g", "b", "d"]  # island 0 gets a, c, b; island 1 f, g, d
    summary, _, proposer = scripted(
        tmp_path,
        monkeypatch,
        names,
        strategy="islands",
        islands=2,
        migration_interval=2,
        population=2,
    )
    hist = summary["history"]
    assert [r["lane"] for r in hist[1:]] == [0, 1, 0, 1, 0, 1]
    # generation 2: each island improves its own best (a on island 0, f on island 1)
    assert hist[3]["parent"] == 1 and hist[4]["parent"] == 2
    state = json.loads((tmp_path / "run" / "strategy_state.json").read_text())
    # after generation 2, island 0's best (c, iteration 3) moved to island 1
    assert {"generation": 2, "from": 0, "to": 1, "iteration": 3} in state["migrations"]
    assert hist[6]["parent"] == 3  # island 1's incumbent is now the migrant
    assert variant("c") in proposer.seen[6][0].user and variant("f") in proposer.seen[4][0].user
    assert variant("f") not in proposer.seen[3][0].user  # island 0 never saw island 1's own
    assert summary["best_iteration"] == 3
    for calls in proposer.seen.values():
        assert HELD_LABEL not in calls[0].user  # no island's prompt shows the held-out


def shaped(name, body):
    """A crafted candidate (known by name) whose text has the features `body` gives."""
    return SAXPY.seed() + body + f"// crafted: {name}\n"


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_map_elites_keeps_the_best_of_each_kind_and_shows_inspirations(tmp_path, monkeypatch):
    texts = {
        1: shaped("a", "threadgroup float tile[256];\n"),
        2: shaped("b", "float4 v = 0;\n"),
        3: shaped("c", "threadgroup float tile[256];\n"),  # a better one of a's kind
        4: shaped("d", "float2 w = 0;\n"),
        5: shaped("e", "float4 v = 1;\n"),
        6: shaped("f", "float2 w = 1;\n"),
    }
    proposer = ByIteration({i: fenced(t) for i, t in texts.items()})
    summary, _, _ = scripted(
        tmp_path,
        monkeypatch,
        [],
        iterations=6,
        population=2,
        strategy="map-elites",
        proposer=proposer,
    )
    out = tmp_path / "run"
    rows = {r["cell"]: r for r in summary["archive"]}
    assert len(rows) == 4  # the seed's kind, threadgroup memory, x4, x2
    shared = next(r for r in rows.values() if r["memory"] == "shared")
    assert shared["iteration"] == 3 and shared["candidates"] == 2
    assert next(r for r in rows.values() if r["vector"] == "x4")["iteration"] == 5
    assert (out / "archive.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    later = [ctx.user for it in (3, 4, 5, 6) for ctx in proposer.seen[it]]
    assert all("## Parent: the best kernel of its kind so far" in u for u in later)
    assert any("## Inspirations: the best kernels of other kinds" in u for u in later)
    hist = summary["history"]
    assert all(r["parent"] is not None for r in hist[3:])
    assert any(r["inspirations"] for r in hist[3:])
    best = summary["lineage"][0]
    assert (
        best["iteration"] == summary["best_iteration"] and summary["lineage"][-1]["iteration"] == 0
    )


def test_features_read_from_the_candidate_and_its_evaluation():
    seed = SAXPY.seed()
    assert features(seed, {"dialect": "metal"}) == {
        "memory": "none",
        "vector": "scalar",
        "threads": "65-256",
    }
    tiled = seed.replace("(256, 1, 1)", "(1024, 1, 1)") + "threadgroup half4 t[8];\n"
    assert features(tiled, {"dialect": "metal"}) == {
        "memory": "shared",
        "vector": "x4",
        "threads": ">256",
    }
    cuda = "//! kernel k\n//! threadgroup = (TG, 1, 1)\n__shared__ float2 s[4];\n"
    assert features(cuda, {"dialect": "cuda"})["memory"] == "shared"
    assert features(cuda, {"dialect": "cuda"})["threads"] == "expr"
    result = {
        "dialect": "metal",
        "sizes": [{"kernels": {"a": {"seconds": 1.0}, "b": {"seconds": 3.0}}}],
    }
    assert features(seed, result, ("a", "b"))["hot"] == "b"
    assert cell_of("not a candidate at all \x00", {}) == "memory=none vector=scalar threads=expr"


# --- kill -9 in the middle of a generation --------------------------------------------


@pytest.mark.slow
def test_kill_9_mid_generation_then_resume_loses_and_repeats_nothing(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "mlxsci.search",
        "--task",
        "heat2d",
        "--model",
        "autotune",
        "--iterations",
        "8",
        "--population",
        "4",
        "--backend",
        "sim",
        "--out",
        str(out),
        "--quiet",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.time() + 300
    while time.time() < deadline:  # generation 2 under way
        if (out / "06_candidate.metal").exists() or proc.poll() is not None:
            break
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = (out / "history.jsonl").read_text().splitlines()
    assert len(before) in (1, 5)  # the seed, or the seed and generation 1: never part of one
    done = subprocess.run(
        [sys.executable, "-m", "mlxsci.search", "--resume", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in history] == list(range(9))
    assert history[: len(before)] == [json.loads(line) for line in before]
    sources = [(out / f"{i:02d}_candidate.metal").read_text() for i in range(1, 9)]
    assert len(set(sources)) == 8  # every slot its own candidate, none proposed twice
    assert [(r["generation"], r["slot"]) for r in history[1:]] == [
        (g, s) for g in (1, 2) for s in range(4)
    ]


# --- the report and the sweep -------------------------------------------------------


def test_report_details_show_generations_lineage_and_archive(tmp_path, monkeypatch):
    from mlxsci.report.build import report_text
    from mlxsci.report.runs import load_runs

    texts = {
        i: fenced(shaped(n, body))
        for i, (n, body) in enumerate(
            [("a", "threadgroup float t[4];\n"), ("c", "float4 v;\n"), ("e", ""), ("b", "")], 1
        )
    }
    scripted(
        tmp_path,
        monkeypatch,
        [],
        iterations=4,
        population=2,
        strategy="map-elites",
        proposer=ByIteration(texts),
    )
    text = report_text(load_runs([tmp_path / "run"]), "md", details=True)
    assert "## Searches in generations" in text and "### run: map-elites, K = 2" in text
    assert "| generation | iterations |" in text and "| 2 | 3-4 |" in text
    assert "Archive (3 cells; picture: run/archive.png)" in text
    assert "| shared | scalar |" in text
    assert " 0 > 3 " in text  # the lineage of the best (e, iteration 3, from the seed)


def test_a_sweep_gives_each_search_its_population_and_strategy(tmp_path):
    from mlxsci.sweep.runs import Job, run_spec

    job = Job(task="saxpy", model="autotune")
    spec = run_spec(
        job,
        tmp_path,
        8,
        quiet=True,
        options={"strategy": "islands", "population": 4, "islands": 2, "migration_interval": 3},
    )
    search = spec["search"]
    assert (
        search["strategy"],
        search["population"],
        search["islands"],
        search["migration_interval"],
    ) == ("islands", 4, 2, 3)


# --- attacks on resume, the cost cap and twins (each failed before its fix) -----------


class StopAt(Crafted):
    """Ctrl-C while evaluating the candidate crafted as `at`; with `proposer`,
    only once none of its calls is in flight, so that which answers were in
    (and paid) when the run stopped does not depend on the machine's load."""

    def __init__(self, table, at, proposer=None):
        super().__init__(table)
        self.at, self.proposer = at, proposer

    def __call__(self, task, source, **kw):
        if f"// crafted: {self.at}\n" in source:
            if self.proposer is not None:
                deadline = time.monotonic() + 10
                while self.proposer.in_flight and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(0.3)  # the answers returned reach the run's queue
            raise KeyboardInterrupt
        return super().__call__(task, source, **kw)


def stopped_then_resumed(tmp_path, monkeypatch, answers, at, name="run", resume_kw=None, **kw):
    out = tmp_path / name
    first = ByIteration(answers)
    monkeypatch.setattr(loop, "evaluate", StopAt(TABLE, at, first))
    monkeypatch.setattr(loop, "compare", crafted_compare(TABLE))
    with pytest.raises(KeyboardInterrupt):
        run("saxpy", proposer=first, backend="sim", out=out, **kw)
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    again = ByIteration(answers)
    return run(None, proposer=again, resume=out, **(resume_kw or {})), again


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_resume_counts_what_saved_answers_cost(tmp_path, monkeypatch):
    answers = answers_for(NAMES)
    out = tmp_path / "run"
    monkeypatch.setattr(loop, "evaluate", StopAt(TABLE, "a"))
    paid = ByIteration(answers, cost=1.0, worst=1.0)
    with pytest.raises(KeyboardInterrupt):
        run(
            "saxpy",
            proposer=paid,
            backend="sim",
            out=out,
            iterations=8,
            population=4,
            max_cost=2.5,
            prices={"scripted": [0, 0]},
        )
    assert sorted(paid.seen) == [1, 2]  # the third call's worst case did not fit
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    again = ByIteration(answers, cost=1.0, worst=1.0)
    summary = run(None, proposer=again, resume=out, max_cost=2.5, prices={"scripted": [0, 0]})
    # The $2 of the two saved answers count: no third call fits in the $2.50.
    assert again.seen == {} and summary["cost_usd"] <= 2.5


def test_a_duplicate_keeps_its_mark_across_a_resume(tmp_path, monkeypatch):
    answers = answers_for(["c", "d", "c", "g"])  # iteration 3 repeats iteration 1
    whole, _, _ = scripted(
        tmp_path,
        monkeypatch,
        [],
        name="whole",
        iterations=4,
        population=2,
        proposer=ByIteration(answers),
    )
    resumed, _ = stopped_then_resumed(
        tmp_path, monkeypatch, answers, "g", iterations=4, population=2
    )
    assert [r.get("duplicate_of") for r in resumed["history"]] == [None, None, None, 1, None]
    assert decisions(resumed) == decisions(whole) and resumed["duplicates"] == 1


def test_an_extended_resume_never_reuses_an_answer_asked_for_another_island(tmp_path, monkeypatch):
    answers = answers_for(NAMES)
    summary, again = stopped_then_resumed(
        tmp_path,
        monkeypatch,
        answers,
        "f",
        iterations=6,
        population=4,
        strategy="islands",
        islands=4,
        resume_kw={"iterations": 8},
    )
    out = tmp_path / "run"
    for rec in summary["history"][1:]:
        prompt = out / f"{rec['iteration']:02d}_prompt.md"
        if rec["parent"] and prompt.exists():  # each prompt showed the parent it is recorded with
            assert variant(NAMES[rec["parent"] - 1]) in prompt.read_text(), rec["iteration"]
        assert rec["lane"] == (rec["iteration"] - 1) % 4  # the islands take turns over the run
    assert [r["iteration"] for r in summary["history"]] == list(range(9))


def test_under_a_cap_a_call_of_unknown_cost_goes_out_alone(tmp_path, monkeypatch):
    proposer = ByIteration(answers_for(NAMES), cost=1.0, worst=None)
    summary, _, _ = scripted(
        tmp_path,
        monkeypatch,
        NAMES,
        proposer=proposer,
        population=4,
        max_cost=1.5,
        prices={"scripted": [0, 0]},
    )
    # As with one at a time: the second call is made ($1 < $1.50), and then the run stops.
    assert proposer.most_in_flight == 1 and summary["cost_usd"] == pytest.approx(2.0)


def test_twins_differ_by_a_line_break_are_two_kernels():
    from mlxsci.search.generation import normalised_hash

    a = "// guard\nuint i = 0;\n"
    assert normalised_hash(a) != normalised_hash("// guard uint i = 0;\n")
    assert normalised_hash(a) == normalised_hash("//   guard  \n\n\tuint i =  0;")


@pytest.mark.parametrize("strategy", ["one-plus-one", "best-of-n", "islands", "map-elites"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_the_strategy_state_after_a_resume_is_the_uninterrupted_one(
    tmp_path, monkeypatch, strategy
):
    bodies = [
        "threadgroup float t[4];\n",
        "float4 v;\n",
        "threadgroup float t[4];\n",
        "float2 w;\n",
        "float4 v = 1;\n",
        "",
        "float2 w = 1;\n",
        "half4 q;\n",
    ]
    answers = {i: fenced(shaped(n, b)) for i, (n, b) in enumerate(zip(NAMES, bodies), 1)}
    kw = dict(iterations=8, population=3, strategy=strategy, islands=2, migration_interval=1)
    whole, _, _ = scripted(
        tmp_path, monkeypatch, [], name="whole", proposer=ByIteration(answers), **kw
    )
    resumed, _ = stopped_then_resumed(tmp_path, monkeypatch, answers, "f", **kw)
    state = [
        json.loads((tmp_path / n / "strategy_state.json").read_text()) for n in ("whole", "run")
    ]
    assert state[0] == state[1]
    assert decisions(resumed) == decisions(whole)


def test_the_report_takes_odd_summary_values_without_a_traceback():
    from mlxsci.report.search_section import search_section

    odd = {
        "run_dir": "r",
        "strategy": "x",
        "population": 2,
        "time": "nope",
        "generations": [{"best_score": "0.5", "iterations": 5}, "junk"],
        "archive": [{"score": "high", "memory": "a|b"}],
    }
    text = search_section([odd])
    assert text is not None and "| - |" in text and "a/b" in text


def test_an_answer_with_a_lone_surrogate_is_kept_and_judged(tmp_path, monkeypatch):
    text = fenced(variant("c")).replace("Here is", "Here \ud800 is")
    summary, _, _ = scripted(
        tmp_path, monkeypatch, [], iterations=1, proposer=ByIteration({1: text})
    )
    assert summary["history"][1]["role"] == "candidate" and summary["best_iteration"] == 1
    assert (
        "\ufffd" in (tmp_path / "run" / "01_response.md").read_text()
        or "?" in (tmp_path / "run" / "01_response.md").read_text()
    )


# --- several models, a bandit choosing --------------------------------------------------


class Fixed(Proposer):
    """A model that always answers with the candidates crafted as `names`, in turn."""

    def __init__(self, name, names, cost):
        self.name, self.names, self.cost, self.calls = name, names, cost, []
        self.lock = threading.Lock()

    def propose(self, ctx):
        with self.lock:
            self.calls.append(ctx.iteration)
            pick = self.names[len(self.calls) % len(self.names)]
        return Proposal(
            text=fenced(SAXPY.seed() + f"// {self.name} {ctx.iteration}\n// crafted: {pick}\n"),
            cost_usd=self.cost,
            model=self.name,
        )


def test_a_bandit_over_models_favours_the_one_that_improves(tmp_path, monkeypatch):
    from mlxsci.search.proposers import ModelMix

    table = {**TABLE}
    # "good" climbs one step above whatever it is shown; "bad" always fails to beat the seed.
    ladder = [f"l{i}" for i in range(16)]
    for i, name in enumerate(ladder):
        table[name] = (0.31 + 0.01 * i, 0.01, 0.5, 0.02)
    good, bad = Fixed("good", ladder, 0.02), Fixed("bad", ["d", "g"], 0.01)
    mix = ModelMix({"bad": bad, "good": good})
    summary, _, _ = scripted(
        tmp_path, monkeypatch, [], iterations=12, population=2, proposer=mix, table=table
    )
    hist = summary["history"][1:]
    assert [r["model_choice"] for r in hist[:2]] == ["bad", "good"]  # each tried once first
    assert len(good.calls) >= 8 and len(bad.calls) <= 4
    models = summary["models"]
    assert models["good"]["calls"] == len(good.calls) and models["bad"]["calls"] == len(bad.calls)
    assert models["good"]["cost_usd"] == pytest.approx(0.02 * len(good.calls))
    assert models["bad"]["successes"] == 0 and models["good"]["successes"] >= 6
    assert (
        json.loads((tmp_path / "run" / "01_proposal.json").read_text())["place"]["model"] == "bad"
    )


def test_several_models_on_the_command_line_make_a_mix(tmp_path):
    from mlxsci.search.proposers import ModelMix, make_proposer

    (tmp_path / "01_candidate.metal").write_text(SAXPY.seed())
    mix = make_proposer(f"autotune, replay:{tmp_path}")
    assert isinstance(mix, ModelMix) and mix.models == ["autotune", f"replay:{tmp_path}"]
    with pytest.raises(Exception, match="twice"):
        make_proposer("autotune,autotune")


# --- a second attack: answers that are not counts, mixes under a cap, names ---------------


class Billing(ByIteration):
    """ByIteration whose first answer reports `first` as its cost."""

    def __init__(self, answers, first, **kw):
        super().__init__(answers, **kw)
        self.first = first

    def propose(self, ctx):
        proposal = super().propose(ctx)
        if ctx.iteration == 1:
            proposal.cost_usd = self.first
        return proposal


@pytest.mark.parametrize("first", [float("nan"), -100.0, None, "0.5"])
def test_a_cost_that_is_no_count_neither_stops_the_run_nor_lifts_the_cap(
    tmp_path, monkeypatch, first
):
    proposer = Billing(answers_for(NAMES), first, cost=1.0, worst=1.0)
    summary, _, _ = scripted(
        tmp_path, monkeypatch, NAMES, proposer=proposer, max_cost=2.0, prices={"scripted": [0, 0]}
    )
    first_record = summary["history"][1]
    assert first_record["role"] == "skipped" and "cost_usd" in first_record["fail_reason"]
    assert sorted(proposer.seen) == [1, 2, 3]  # the cap still stops the run at $2
    assert summary["cost_usd"] == pytest.approx(2.0) and "max_cost" in summary["stopped"]


def test_an_offline_model_in_a_mix_under_a_cap_fills_the_generation(tmp_path, monkeypatch):
    from mlxsci.search.proposers import ModelMix
    from mlxsci.search.proposers.offline import AutotuneProposer

    priced = ByIteration(answers_for(NAMES), cost=0.01, worst=0.02)
    mix = ModelMix({"priced": priced, "autotune": AutotuneProposer()})
    summary, _, _ = scripted(
        tmp_path,
        monkeypatch,
        [],
        iterations=4,
        population=4,
        proposer=mix,
        max_cost=100.0,
        prices={"scripted": [0, 0]},
    )
    assert [r["slots"] for r in summary["history"][1:]] == [4, 4, 4, 4]


def test_model_names_on_the_command_line(tmp_path):
    from mlxsci.search.proposers import ProposerError, make_proposer
    from mlxsci.search.proposers.offline import AutotuneProposer, ReplayProposer

    assert isinstance(make_proposer(" autotune "), AutotuneProposer)
    with pytest.raises(ProposerError, match="empty name"):
        make_proposer("autotune,,autotune")
    folder = tmp_path / "re,play"
    folder.mkdir()
    (folder / "01_candidate.metal").write_text(SAXPY.seed())
    assert isinstance(make_proposer(f"replay:{folder}"), ReplayProposer)  # a comma in a folder


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_an_answer_forgotten_by_a_resume_still_counts_in_the_cost(tmp_path, monkeypatch):
    answers = answers_for(NAMES)
    out = tmp_path / "run"
    first = ByIteration(answers, cost=1.0)
    monkeypatch.setattr(loop, "evaluate", StopAt(TABLE, "f", first))
    with pytest.raises(KeyboardInterrupt):
        run("saxpy", proposer=first, backend="sim", out=out, iterations=8, population=4)
    paid = sum(len(v) for v in first.seen.values())
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    later = ByIteration(answers, cost=1.0)
    run(None, proposer=later, resume=out, iterations=5)  # generation 2 is one slot now
    last = ByIteration(answers, cost=1.0)
    summary = run(None, proposer=last, resume=out, iterations=8)
    paid += sum(len(v) for v in later.seen.values()) + sum(len(v) for v in last.seen.values())
    assert summary["cost_usd"] == pytest.approx(paid)


def test_run_checks_population_and_islands_before_making_anything(tmp_path):
    for bad in ({"population": 0}, {"islands": 0}, {"migration_interval": 0}, {"population": True}):
        with pytest.raises(ValueError, match="whole number"):
            run("saxpy", "autotune", backend="sim", out=tmp_path / "r", iterations=1, **bad)
        assert not (tmp_path / "r").exists()
