"""The summary of a search (summary.json): S and Phi of the seed and the best,
their noise, bands and verdicts (mlxsci.evaluation.verdicts), the outcome
(mlxsci.search.outcomes), the skipped iterations, tokens, cost and time.

Apart from the loop (search/loop.py) because it only judges what the loop
recorded: it proposes and evaluates nothing, and writes only the record of a
finished run: summary.json, then the manifest of every file of the run
(search/manifest.py), which the report checks.
"""

from __future__ import annotations

import time

from mlxsci.evaluation.verdicts import NOISE_FLOOR, assess
from mlxsci.search import manifest as run_manifest
from mlxsci.search.archive_map import archive_rows, draw_archive
from mlxsci.search.iteration_files import generations
from mlxsci.search.options import SearchOptions
from mlxsci.search.outcomes import classify
from mlxsci.search.proposers.mix import model_costs
from mlxsci.search.rundir import record_score
from mlxsci.search.strategies import State


def entry_score(result: dict) -> float | None:
    """The S of an evaluation result (Evaluation.to_json()): None unless correct."""
    cand = result.get("candidate", {})
    return cand.get("score") if cand.get("correct") else None


def _phi_noise(result: dict) -> float | None:
    """The noise of Phi: that of the held-out size Phi is taken from (the first
    correct one, as evaluate() takes it)."""
    for s in result.get("sizes", []):
        if s.get("held_out") and s.get("correct"):
            return s.get("noise")
    return None


def _score_noise(result: dict) -> float | None:
    return result.get("candidate", {}).get("noise")


def _no_candidates_reason(history: list[dict], iterations: int, stopped: str | None) -> str | None:
    """Why a run that asked for proposals has no candidate, or None when it has one."""
    proposals = history[1:]
    if iterations < 1 or any(r["role"] == "candidate" for r in proposals):
        return None
    if not proposals:
        return f"no proposal was made: {stopped or 'the run stopped first'}"
    last = proposals[-1].get("fail_reason") or "unknown"
    return (
        f"none of the {len(proposals)} proposal(s) gave a candidate "
        f"(all skipped); the last failure: {last}"
    )


def summarize(
    opts: SearchOptions,
    task_name: str,
    state: State,
    history: list[dict],
    *,
    held_seed: dict,
    held_best: dict,
    cost: float,
    stopped: str | None,
    held_started: float,
) -> dict:
    """The summary of the run with options `opts` whose iterations left `state`
    and `history`: held_seed and held_best are the held-out evaluations of the
    seed and the best, cost the USD spent, stopped why the run ended early
    (None: it ran its iterations), held_started the time.perf_counter() at
    which this session's held-out evaluation began."""
    scores = judged_scores(state, held_seed, held_best)
    why_none = _no_candidates_reason(history, opts.iterations, stopped)
    skipped = [r for r in history[1:] if r["role"] == "skipped"]
    progress = generation_progress(history)
    return {
        # The task's name (run.json keeps the folder of a task of your own).
        "task": task_name,
        "model": opts.model,
        "strategy": opts.strategy,
        "backend": opts.backend,
        "device": state.seed.result.get("device", ""),
        "sim_gpu": opts.sim_gpu,  # the GPU the simulator modelled (None on a GPU)
        "sizes": opts.sizes,
        "accept": opts.accept,
        "timer": state.seed.result.get("timer"),
        "iterations": max(r["iteration"] for r in history),
        **scores,
        # One vocabulary with the report (mlxsci.search.outcomes), judged from these numbers.
        "outcome": classify(scores, no_candidates=why_none is not None),
        "outcome_reason": why_none,
        "skipped_iterations": len(skipped),
        # Candidates timed below what the machine allows (never kept unless
        # the run kept them for study: keep_implausible).
        "implausible_iterations": sum(1 for r in history if r.get("implausible")),
        "keep_implausible": bool(opts.keep_implausible),
        "last_failure": skipped[-1]["fail_reason"] if skipped else None,
        "tokens": {
            "input": sum(r.get("input_tokens", 0) for r in history),
            "output": sum(r.get("output_tokens", 0) for r in history),
        },
        # Wall time over all sessions of a resumed run: every iteration's own
        # time plus this session's held-out evaluation.
        "cost_usd": cost,
        "stopped": stopped,
        "wall_s": sum(r.get("elapsed_s", 0.0) for r in history)
        + (time.perf_counter() - held_started),
        "population": opts.population,
        "generations": progress,
        "time": time_spent(history, progress),
        "duplicates": sum(1 for r in history if r.get("duplicate_of") is not None),
        "lineage": lineage(history, state.best.iteration),
        **models_used(history),
        "history": history,
    }


def models_used(history: list[dict]) -> dict:
    """With several models in the run (the records name the one each asked):
    each one's calls, successes, tokens and USD."""
    names = list(dict.fromkeys(str(r["model_choice"]) for r in history if r.get("model_choice")))
    return {"models": model_costs(history, names)} if names else {}


def generation_progress(history: list[dict]) -> list[dict]:
    """Per generation: its iterations, how many gave a correct candidate, the
    best S after it, whether it found a new best, and its seconds (wall,
    longest model wait, evaluating, idle: waiting on models alone)."""
    out, best = [], record_score(history[0]) if history else None
    for records in generations(history[1:]):
        scores = [r["score"] for r in records if r.get("is_new_best") and r.get("score")]
        best = scores[-1] if scores else best
        first = records[0]
        out.append(
            {
                "generation": first.get("generation", first["iteration"]),
                "iterations": [r["iteration"] for r in records],
                "correct": sum(1 for r in records if r.get("correct") and r["role"] == "candidate"),
                "best_score": best,
                "new_best": bool(scores),
                "wall_s": first.get("generation_wall_s", first.get("elapsed_s", 0.0)),
                "model_wait_s": max(r.get("model_wait_s", 0.0) for r in records),
                "evaluate_s": sum(r.get("evaluate_s", 0.0) for r in records),
                "idle_s": first.get("generation_idle_s"),
            }
        )
    return out


def time_spent(history: list[dict], progress: list[dict]) -> dict:
    """Where the generations' seconds went (`progress`: generation_progress's):
    wall, the calls' own seconds (summed: several overlap in a generation),
    evaluating (summed likewise), and idle (no evaluation running: the
    harness waiting on models alone), with its share of the wall."""
    wall = sum(g["wall_s"] for g in progress)
    idle = sum(g["idle_s"] for g in progress if g["idle_s"] is not None)
    return {
        "generations_wall_s": wall,
        "model_calls_s": sum(r.get("model_wait_s", 0.0) for r in history[1:]),
        "evaluate_s": sum(r.get("evaluate_s", 0.0) for r in history[1:]),
        "idle_s": idle,
        "idle_share": idle / wall if wall else None,
    }


def lineage(history: list[dict], best_iteration: int) -> list[dict]:
    """How the best came about: from the best back to the seed, each step's
    iteration, S, the parent its prompt asked to improve and the inspirations
    shown beside it."""
    by_iteration = {r["iteration"]: r for r in history}
    chain: list[dict] = []
    it: int | None = best_iteration
    seen: set[int] = set()
    while it is not None and it in by_iteration and it not in seen:
        seen.add(it)
        rec = by_iteration[it]
        chain.append(
            {
                "iteration": it,
                "score": rec.get("score"),
                "parent": rec.get("parent") if it else None,
                "inspirations": rec.get("inspirations") or [],
                "cell": rec.get("cell"),
            }
        )
        # (a record from before lineages names no parent: the chain ends there)
        it = rec.get("parent") if it else None
    return chain


def judged_scores(state: State, held_seed: dict, held_best: dict) -> dict:
    """S and Phi of the seed and the best, with their noises, the bands these
    give and the verdicts (mlxsci.evaluation.verdicts), as summary.json holds them."""
    phi_seed = held_seed["candidate"]["phi"]
    phi_best = held_best["candidate"]["phi"]
    seed_score = entry_score(state.seed.result)
    best_score = entry_score(state.best.result)
    noises = {
        "seed_noise": _score_noise(state.seed.result),
        "best_noise": _score_noise(state.best.result),
        "held_out_seed_noise": _phi_noise(held_seed),
        "held_out_best_noise": _phi_noise(held_best),
    }
    verdicts = assess(seed_score, best_score, phi_seed, phi_best, **noises)
    return {
        "seed_score": seed_score,
        "best_score": best_score,
        "improvement": best_score / seed_score if seed_score and best_score else None,
        "best_iteration": state.best.iteration,
        "held_out_seed": phi_seed,
        "held_out_best": phi_best,
        "held_out_ratio": phi_best / phi_seed if phi_seed and phi_best is not None else None,
        "held_out_best_fail_reason": held_best["candidate"]["fail_reason"],
        # Why a limit of the machine stopped the best's held-out before a
        # verdict (None: it was judged): never read as a held-out failure.
        "held_out_best_not_judged": held_best["candidate"].get("not_judged"),
        **noises,
        "noise_floor": NOISE_FLOOR,
        "improvement_band": verdicts["improvement_band"],
        "improvement_verdict": verdicts["improvement_verdict"],
        "held_out_band": verdicts["held_out_band"],
        "held_out_verdict": verdicts["held_out_verdict"],
    }


def write_record(rd, summary: dict) -> None:
    """A finished run's record: summary.json, then, last, its manifest."""
    rd.write_json(rd.file("summary.json"), summary)
    run_manifest.write(rd.path)


def write_search_record(rd, summary: dict, strategy_state: dict) -> None:
    """A finished search's record: the strategy's last state in the summary
    (and strategy_state.json), a map-elites archive as a table in the
    summary and a picture (archive.png), then summary.json and the manifest."""
    summary["strategy_state"] = strategy_state
    rd.write_json(rd.file("strategy_state.json"), strategy_state)
    if strategy_state.get("archive"):
        summary["archive"] = archive_rows(strategy_state["archive"], summary["history"])
        draw_archive(summary["archive"], rd.file("archive.png"), summary.get("task", ""))
    write_record(rd, summary)


def reopen_record(rd) -> None:
    """A run resumed is unfinished again: its manifest goes until it finishes."""
    run_manifest.remove(rd.path)
