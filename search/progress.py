"""A run's console lines: what S and Phi mean, the line of each finished
iteration, the final line, and how to resume a run that stopped.

It is separate from search/loop.py because it only words numbers the loop has
computed; nothing here evaluates, proposes or touches the run directory.
"""

from __future__ import annotations

from contextlib import contextmanager

from mlxsci import held_out
from mlxsci.evaluation.verdicts import IMPROVED, REGRESSED, change
from mlxsci.search.outcomes import FLAT, SATURATED, SATURATED_SEED, WITHIN_NOISE_RUN
from mlxsci.storage.faults import EnvironmentFault, parent_writes

# What S and Phi mean, said once per run (progress output, or the final line).
S_AND_PHI = (
    "S = geometric mean of the roofline fractions at the search sizes (0 if any "
    "fails); Phi = the fraction at the held-out size, never shown to the proposer"
)


def fmt(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _comparison_note(comparison: dict) -> str:
    """The comparison in a progress line: 're-timed 1.031x, band 5.0%: within noise'."""
    if "error" in comparison:
        return "  re-timing failed: not accepted"
    return (
        f"  re-timed {comparison['speedup']:.3f}x, band {comparison['band'] * 100:.1f}%: "
        f"{comparison['verdict']}"
    )


def iteration_line(it: int, iterations: int, rec: dict, best_score: float, cost: float) -> str:
    """The progress line of iteration `it` (its history record `rec`)."""
    verdict = (
        "skipped"
        if rec["role"] == "skipped"
        else "FAIL"
        if not rec["correct"]
        else "IMPLAUS"
        if rec.get("implausible")
        else "correct"
    )
    score = "-" if rec["score"] is None else f"{rec['score']:.4f}"
    note = _comparison_note(rec["comparison"]) if "comparison" in rec else ""
    why = f"  ({rec['fail_reason']})" if rec["role"] == "skipped" else ""
    if rec.get("implausible"):  # why its S does not count (or, kept, why it is suspect)
        why += f"  ({rec['implausible']})"
    return (
        f"iter {it}/{iterations}  {verdict:8s} S={score:8s} "
        f"best={best_score:.4f}{' (new)' if rec['is_new_best'] else ''}{note}  "
        f"{rec['elapsed_s']:.1f}s  ${cost:.4f}{why}"
    )


def generation_line(records: list[dict], best_score: float) -> str:
    """The line after a generation of several proposals: how many gave a
    correct candidate, the best so far, and where its time went (waiting on
    the model, evaluating, and idle: waiting on the model alone)."""
    first = records[0]
    correct = sum(1 for r in records if r["role"] == "candidate" and r.get("correct"))
    twins = sum(1 for r in records if r.get("duplicate_of") is not None)
    wall, idle = first.get("generation_wall_s", 0.0), first.get("generation_idle_s", 0.0)
    waits = [r.get("model_wait_s", 0.0) for r in records]
    evaluating = sum(r.get("evaluate_s", 0.0) for r in records)
    return (
        f"gen {first.get('generation')}: {len(records)} proposals, {correct} correct"
        + (f", {twins} duplicate(s) not evaluated again" if twins else "")
        + f"  best={best_score:.4f}  {wall:.1f}s (longest model wait {max(waits):.1f}s, "
        f"evaluating {evaluating:.1f}s, idle {idle / wall if wall else 0.0:.0%})"
    )


def done_line(summary: dict) -> str:
    """The final line of a run: S and Phi of seed and best, verdicts, outcome."""
    return (
        f"done: S seed={fmt(summary['seed_score'])} best={fmt(summary['best_score'])} "
        f"({summary['improvement_verdict'] or 'n/a'}, band {summary['improvement_band']:.1%})  "
        f"Phi seed={fmt(summary['held_out_seed'])} best={fmt(summary['held_out_best'])} "
        f"({summary['held_out_verdict'] or 'n/a'})  outcome={summary['outcome']}"
        + _implausible_note(summary)
    )


def held_out_lines(summary: dict) -> list[str]:
    """The run's held-out (its secret draw revealed, and whether it verifies
    against the commitment made at the start) and, when the best is not the
    seed, the transfer grade of the best with its reason."""
    record = summary.get("held_out") or {}
    if record.get("mode") == "secret":
        shown = held_out.describe(record.get("params"))
        problems = summary.get("held_out_verified") or []
        check = f"DOES NOT VERIFY: {'; '.join(problems)}" if problems else "verified"
        lines = [f"held-out: secret draw {shown} (commitment {check})"]
    else:
        lines = ["held-out: the task's published size (metal-sci)"]
    transfer = summary.get("transfer") or {}
    if transfer.get("grade") and summary.get("best_iteration"):
        lines.append(f"transfer: {transfer['grade']}: {transfer.get('reason')}")
    return lines


def _implausible_note(summary: dict) -> str:
    n = summary.get("implausible_iterations") or 0
    if not n:
        return ""
    kept = "counted, --keep-implausible" if summary.get("keep_implausible") else "not counted"
    return f"  implausible candidates: {n} ({kept})"


def why_nothing_found(summary: dict) -> str | None:
    """One line on why a run found nothing (outcome flat, saturated or
    within_noise), from what it recorded: the closest candidate's S against
    the seed's and the noise band, a candidate re-timed and not kept, the
    candidates that failed, and why the run stopped early; None for any other
    outcome (no_candidates says why itself)."""
    outcome = summary["outcome"]
    if outcome not in (FLAT, SATURATED, WITHIN_NOISE_RUN):
        return None
    seed, band = summary["seed_score"], summary["improvement_band"]
    records = summary["history"][1:]
    if not seed:  # None (not correct), or 0 (an implausible seed not counted)
        reason = _first_line(summary["history"][0], "it scores 0")
        why = f"the seed has no S to compare a candidate's with ({reason})"
    elif outcome == WITHIN_NOISE_RUN:
        why = (
            f"the best, iteration {summary['best_iteration']}, scores S "
            f"{summary['best_score']:.4f}, {summary['best_score'] / seed:.3f}x the seed's "
            f"{seed:.4f}, inside the {band:.1%} noise band: no evidence of a change"
        )
    else:
        why = _closest_candidate(records, seed, band)
        if outcome == SATURATED:
            why = f"the seed already scores S {seed:.4f} (>= {SATURATED_SEED}); {why}"
    return f"why {outcome}: " + "; ".join([why, *_what_else(summary, records)])


def _closest_candidate(records: list[dict], seed: float, band: float) -> str:
    """Why no candidate of a run whose best is the seed replaced it."""
    candidates = [r for r in records if r["role"] == "candidate"]
    # Correct and counted: an implausible one not kept scores 0 (progress says so).
    scored = [r for r in candidates if r.get("correct") and r.get("score")]
    if not candidates:
        return "no candidate was proposed"
    if not scored:
        return f"none of the {len(candidates)} candidate(s) scored (correct and counted)"
    rejected = [r for r in scored if r.get("comparison") and not r["comparison"].get("accepted")]
    if rejected:
        best = max(rejected, key=lambda r: r["score"])
        return (
            f"iteration {best['iteration']} scored S {best['score']:.4f}, "
            f"{best['score'] / seed:.3f}x the seed's {seed:.4f}, but was "
            f"{best['comparison'].get('reason') or 'not accepted'}"
        )
    best = max(scored, key=lambda r: r["score"])
    ratio = best["score"] / seed
    where = {IMPROVED: "above", REGRESSED: "below"}.get(change(ratio, band), "within")
    return (
        f"no candidate scored above the seed's S {seed:.4f}: the closest of "
        f"{len(scored)} scored, iteration {best['iteration']}, has S {best['score']:.4f}, "
        f"{ratio:.3f}x the seed's, {where} the {band:.1%} noise band"
    )


def _what_else(summary: dict, records: list[dict]) -> list[str]:
    """The rest of a run that found nothing: failed candidates, proposals that
    gave none, and why it stopped early."""
    failed = [r for r in records if r["role"] == "candidate" and not r.get("correct")]
    skipped = [r for r in records if r["role"] == "skipped" and not r.get("exhausted")]
    notes = []
    if failed:
        notes.append(f"{len(failed)} candidate(s) failed ({_first_line(failed[-1])})")
    if skipped:
        notes.append(f"{len(skipped)} proposal(s) gave no candidate")
    if summary.get("stopped"):
        notes.append(f"stopped early: {summary['stopped']}")
    return notes


def _first_line(record: dict, otherwise: str = "no reason recorded", width: int = 100) -> str:
    """The first line of a record's failure (`otherwise` when it has none), cut to `width`."""
    reason = ((record.get("fail_reason") or "").strip() or otherwise).splitlines()[0]
    return reason if len(reason) <= width else reason[: width - 3] + "..."


@contextmanager
def stops_say_how_to_resume(run_dir, echo):
    """Around a run's iterations: a stop that is not the run's end (Ctrl-C,
    SIGTERM made KeyboardInterrupt, a fault of the machine: a full or
    read-only disk, a worker that could not start) says what is kept and the
    command that goes on, and goes on up. A fault of the machine records
    nothing of the iteration it met: the candidate did nothing wrong."""
    try:
        with parent_writes():  # the run directory's own OSErrors: EnvironmentFault
            yield
    except KeyboardInterrupt:
        echo(
            f"interrupted: every finished iteration is kept in {run_dir}; continue with "
            f"python -m mlxsci.search --resume {run_dir}"
        )
        raise
    except EnvironmentFault as fault:
        echo(
            f"stopped by the machine: {fault}. Every finished iteration is kept in {run_dir}; "
            f"the one it was on is not recorded. Once fixed, continue with "
            f"python -m mlxsci.search --resume {run_dir}"
        )
        raise
