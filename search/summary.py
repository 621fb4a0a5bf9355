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
from mlxsci.search.options import SearchOptions
from mlxsci.search.outcomes import classify
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
        "history": history,
    }


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


def reopen_record(rd) -> None:
    """A run resumed is unfinished again: its manifest goes until it finishes."""
    run_manifest.remove(rd.path)
