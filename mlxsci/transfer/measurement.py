"""Measuring a transfer check: what the grade (mlxsci/transfer/grading.py)
needs, evaluated where it is missing, then graded.

`judge_transfer` is what a search calls at the end of a run with its best
candidate and its seed, and what `python -m mlxsci.transfer` calls. It is
given the evaluations already made (`known`) and a callback that evaluates a
source at given sizes with the caller's own backend, timer and timeout, and
evaluates the rest:

- both candidate and baseline at the search sizes with the task's second
  input distribution (mlxsci.held_out.second_distribution: the held-out
  draw's own, else the task's first other one), as sizes of their own
  (params + {"distribution": name}, not marked held-out);
- the candidate at the search sizes with branch coverage, where the
  backend measures it (mlxsci/transfer/coverage.py);
- the scan of the candidate's source (mlxsci/transfer/size_literals.py).

The evaluations are read as Evaluation.to_json() records, defensively: a
key missing or of another type counts as "not measured" or "not correct",
never as a pass. While a secret held-out draw is unrevealed, nothing this
module labels names its values: the second distribution's sizes are
labelled by the held-out they come from, not by the distribution's name,
and the returned numbers leave the name out (the caller reveals the draw).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mlxsci import held_out as held_out_draws
from mlxsci.backends import backend_class
from mlxsci.kernel import dialects
from mlxsci.task import Size, Task
from mlxsci.transfer.coverage import coverage_arms, why_unmeasured
from mlxsci.transfer.grading import Figure, Measurements, Place, grade, speedup
from mlxsci.transfer.size_literals import ScanError, scan

# A worker's fail_reason may be long; the evidence keeps its start.
MAX_REASON_CHARS = 300
# What `known` may hold, besides the four evaluations a search has made
# anyway: results of an earlier check, so tests and resumed runs share them.
KNOWN_KEYS = (
    "candidate_in_dist",
    "baseline_in_dist",
    "candidate_held_out",
    "baseline_held_out",
    "candidate_second_distribution",
    "baseline_second_distribution",
    "candidate_coverage",
)


def finite(value) -> float | None:
    """`value` as a float when it is a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def figure_of(evaluation, held_out: bool = False) -> Figure:
    """A candidate's Figure from its Evaluation.to_json(): S and its noise,
    or with `held_out` Phi and the noise of the held-out size it was taken at
    (an evaluation of held-out sizes alone has no S, hence no S noise)."""
    record = evaluation.get("candidate") if isinstance(evaluation, dict) else None
    if not isinstance(record, dict):
        return Figure(False, None, None, "no evaluation")
    correct = record.get("correct") is True
    reason = record.get("fail_reason")
    reason = reason[:MAX_REASON_CHARS] if isinstance(reason, str) else None
    stopped = record.get("not_judged")
    stopped = stopped[:MAX_REASON_CHARS] if isinstance(stopped, str) and not correct else None
    if not held_out:
        score, noise = finite(record.get("score")), finite(record.get("noise"))
        return Figure(correct, score, noise, reason, stopped)
    sizes = evaluation.get("sizes")
    noises = [
        finite(s.get("noise"))
        for s in (sizes if isinstance(sizes, list) else [])
        if isinstance(s, dict) and s.get("held_out") is True and s.get("correct") is True
    ]
    noise = noises[0] if noises else None
    return Figure(correct, finite(record.get("phi")), noise, reason, stopped)


def second_sizes(task: Task, search_sizes: list[Size], held_out: list[Size]) -> tuple:
    """(the distribution's name or None, the search sizes with it, a label
    for the place that names no secret). The name comes from the held-out
    draw when it names one (mlxsci.held_out.second_distribution)."""
    name = held_out_draws.second_distribution(task, held_out[0] if held_out else None)
    if name is None:
        return None, [], ""
    drawn = bool(held_out and held_out[0].held_out and held_out[0].params.get("distribution"))
    word = "the held-out's data" if drawn else f"{name} data"
    sizes = [Size(f"{s.label} ({word})", {**s.params, "distribution": name}) for s in search_sizes]
    return name, sizes, word


def measures_coverage(evaluation) -> bool:
    """Whether the backend of an evaluation (its JSON) measures branch
    coverage: a backend class that says so (`measures_coverage`)."""
    name = evaluation.get("backend") if isinstance(evaluation, dict) else None
    if not isinstance(name, str):
        return False
    try:
        return bool(getattr(backend_class(name), "measures_coverage", False))
    except (KeyError, ValueError, TypeError, ImportError):
        return False


def labels(sizes: list[Size]) -> str:
    return ", ".join(s.label for s in sizes)


def judge_transfer(
    task: Task,
    candidate_source: str,
    baseline_source: str,
    *,
    dialect: str,
    search_sizes: list[Size],
    held_out: list[Size],
    evaluate: Callable[..., dict],
    known: dict | None = None,
    coverage: bool | None = None,
    candidate_filename: str | None = None,
    baseline_filename: str | None = None,
    progress: Callable[[str], None] | None = None,
    compare: Callable[..., dict] | None = None,
) -> dict:
    """The transfer grade of `candidate_source` against `baseline_source`
    (the task's seed, for a search): {"grade", "reason", "evidence",
    "numbers": {"in_dist", "held_out", "second_distribution"}}.

    evaluate(source, filename, sizes, coverage=bool) -> Evaluation.to_json()
    evaluates with the caller's backend, timer and timeout. known: results
    already measured, by the names in KNOWN_KEYS; what is missing is
    evaluated. coverage: measure the candidate's branch coverage at the
    search sizes (None: where the backend of its evaluations measures it).
    candidate_filename, baseline_filename: the names evaluations and the
    scan report lines of (default: candidate.<ext>, baseline.<ext>).
    progress: hears a line as each evaluation starts.
    compare(baseline_source, candidate_source, sizes) -> the two timed
    interleaved in one worker (mlxsci.evaluation.comparison.compare's
    result): given, each place where both are correct takes its speedup from
    it rather than from the ratio of two evaluations made apart in time
    (the places of TIMED_PLACES: the held-out's pair runs back to back)."""
    have = dict(known or {})
    say = progress or (lambda line: None)
    ext = dialects.get(dialect)
    files = {
        "candidate": candidate_filename or ext.file_name("candidate"),
        "baseline": baseline_filename or ext.file_name("baseline"),
    }
    sources = {"candidate": candidate_source, "baseline": baseline_source}
    name, second, word = second_sizes(task, search_sizes, held_out)
    plan = [("in_dist", search_sizes, "the search sizes")]
    plan += [("held_out", held_out, "the held-out")] if held_out else []
    plan += [("second_distribution", second, f"the search sizes with {word}")] if second else []

    def measured(who: str, where: str, sizes: list[Size], what: str, cov: bool) -> dict:
        key = f"{who}_{where}" if not cov else f"{who}_coverage"
        if not isinstance(have.get(key), dict):
            say(f"transfer: evaluating the {who} at {what} ({labels(sizes)})")
            have[key] = evaluate(sources[who], files[who], sizes, coverage=cov)
        return have[key]

    for where, sizes, what in plan:
        for who in ("candidate", "baseline"):
            measured(who, where, sizes, what, False)
    if coverage is None:
        coverage = measures_coverage(have["candidate_in_dist"])
    cov = (
        measured("candidate", "in_dist", search_sizes, "the search sizes", True)
        if coverage
        else None
    )
    findings, notes = scan_evidence(task, candidate_source, dialect, files["candidate"])
    timed = timed_pairs([p for p in plan if p[0] in TIMED_PLACES], have, sources, compare, say)
    places = {
        where: Place(
            place_name(where),
            place_where(where, sizes),
            figure_of(have[f"candidate_{where}"], where == "held_out"),
            figure_of(have[f"baseline_{where}"], where == "held_out"),
            timed.get(where),
        )
        for where, sizes, _ in plan
    }
    m = Measurements(
        places["in_dist"],
        places.get("held_out"),
        places.get("second_distribution"),
        findings,
        coverage_arms(cov),
        notes + unmeasured(plan, task, cov, coverage),
    )
    judged = grade(m)
    judged["numbers"] = numbers(m, places, name, second_is_secret=word != f"{name} data")
    return judged


# The places timed interleaved when a compare is given. The held-out's pair
# is not: its two evaluations run back to back (the search's gate, or the
# command's own), where the in-distribution figures of a search are minutes
# apart, and timing it again would run a held-out size, the largest of all,
# twice more for each (on the simulator: most of a run's last minute).
TIMED_PLACES = ("in_dist", "second_distribution")


def timed_pairs(plan: list, have: dict, sources: dict, compare, say) -> dict:
    """Candidate and baseline timed interleaved at each place of `plan`
    where both evaluations were correct (nothing without `compare`); a
    comparison that failed is left out (its place keeps the figures' ratio)."""
    timed: dict = {}
    if compare is None:
        return timed
    for where, sizes, what in plan:
        both = (have[f"candidate_{where}"], have[f"baseline_{where}"])
        if not all(isinstance(r, dict) and r.get("candidate", {}).get("correct") for r in both):
            continue
        say(f"transfer: timing the candidate and the baseline interleaved at {what}")
        result = compare(sources["baseline"], sources["candidate"], sizes)
        if isinstance(result, dict) and not result.get("error"):
            timed[where] = result
    return timed


def scan_evidence(task: Task, source: str, dialect: str, filename: str) -> tuple[list, list]:
    """The scan's findings as evidence items, and a note when the source
    could not be scanned (it then failed its evaluations too)."""
    try:
        return [f.to_evidence() for f in scan(task, source, dialect, filename)], []
    except ScanError as exc:
        return [], [{"what": f"the source could not be scanned: {exc}", "where": "", "numbers": {}}]


def place_name(where: str) -> str:
    return {"in_dist": "in-distribution", "held_out": "held-out"}.get(
        where, "second input distribution"
    )


def place_where(where: str, sizes: list[Size]) -> str:
    return f"held-out: {labels(sizes)}" if where == "held_out" else labels(sizes)


def unmeasured(plan: list, task: Task, cov, asked: bool) -> list[dict]:
    """Notes on what was not measured, so that a grade's evidence says what
    it does not rest on."""
    notes = []
    measured_places = {where for where, *_ in plan}
    if "held_out" not in measured_places:
        notes.append({"what": "no held-out configuration was given", "where": "", "numbers": {}})
    if "second_distribution" not in measured_places:
        said = f"{task.name} declares no other input distribution"
        notes.append({"what": said, "where": "", "numbers": {}})
    if asked and coverage_arms(cov) is None:
        said = "branch coverage was asked for and not measured"
        why = why_unmeasured(cov)
        notes.append({"what": said + (f": {why}" if why else ""), "where": "", "numbers": {}})
    return notes


def numbers(m: Measurements, places: dict, name: str | None, second_is_secret: bool) -> dict:
    """Each place's figures and speedup for the result's `numbers`."""
    r_in = speedup(m.in_dist)["ratio"]
    out: dict = {}
    for where in ("in_dist", "held_out", "second_distribution"):
        place = places.get(where)
        if place is None:
            out[where] = {"measured": False}
            continue
        judged = speedup(place, r_in if where != "in_dist" and r_in else None)
        out[where] = {
            "measured": True,
            "sizes": place.where,
            "candidate_correct": place.candidate.correct,
            "baseline_correct": place.baseline.correct,
            **judged,
        }
    if places.get("second_distribution") is not None:
        # A drawn distribution is part of the secret until the caller reveals it.
        out["second_distribution"]["distribution"] = None if second_is_secret else name
        out["second_distribution"]["from_held_out_draw"] = second_is_secret
    return out
