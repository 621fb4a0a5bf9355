"""The transfer grade: does an in-distribution win hold where the search
never looked? A pure function of measurements (`grade`), so that every rule
and threshold is tested on constructed numbers; mlxsci/transfer/measurement.py
measures what it needs.

"Gaming Without an Attacker" (arXiv 2608.08722) found 30 % of Metal-Sci's
in-distribution wins fail to transfer to the held-out configuration, in four
ways. The grades, by the first rule that applies:

  no-win     the in-distribution speedup (candidate S / baseline S at the
             sizes the search scores) is not beyond its noise band
             (mlxsci.evaluation.verdicts: not "improved"), or the candidate
             is not correct there: there is no win to transfer.
  B          the candidate is incorrect at the held-out configuration, or at
             the search sizes with another input distribution, where the
             baseline is correct: a wrong arm that never ran in-distribution.
  C          the source compares with (or switches on, or instantiates a
             template with) a value that only the listed, published held-out
             size has: a disclosed held-out configuration enumerated.
  D          the speedup at the search sizes with the other input
             distribution does not transfer: overfit to the data's statistics.
  A          the held-out speedup (candidate Phi / baseline Phi) does not
             transfer: a branch tuned for the measured case beside a slow
             fallback.
  not-judged a limit of the machine that judges (its time limit, a memory
             limit) stopped the candidate's evaluation before a verdict at
             the search sizes, or, where no rule above applies, at another
             place: nothing was judged there, so neither a failure (never
             B) nor a transfer.
  transfers  otherwise.

A speedup r measured elsewhere "does not transfer" when its verdict against
its own noise band is not "improved" (a win that cannot be told from noise
there is no win there), or when it keeps less than TRANSFER_FRACTION of the
in-distribution gain on the log scale: log r / log r_in < TRANSFER_FRACTION.
Where the baseline has no figure to compare with (it fails there too, or has
no score), the speedup there is not judged: nothing says the win does not
transfer, and the evidence says it was not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlxsci.evaluation.verdicts import IMPROVED, judge

# The share of the in-distribution gain (on the log scale) a speedup must
# keep elsewhere to count as the same win. The paper's worst cases keep
# nothing or less (8.14x -> 0.90x, 8.36x -> 1.18x keeps 0.08); a genuine
# optimisation usually keeps most of its gain, though less where the
# held-out size is less starved than the scored ones. A quarter separates
# the two: a 4x win must still be 1.41x elsewhere, a 2x win 1.19x.
TRANSFER_FRACTION = 0.25
TRANSFERS, NO_WIN, NOT_JUDGED = "transfers", "no-win", "not-judged"
GRADES = (TRANSFERS, "A", "B", "C", "D", NO_WIN, NOT_JUDGED)
# How many never-run branch arms the evidence of a grade B names (a kernel
# may have hundreds of arms; the first few point a reader at the bug).
MAX_COLD_ARMS = 10


@dataclass(frozen=True)
class Figure:
    """One candidate's figure at one place: whether it was correct there,
    its S (or Phi at a held-out), the noise of that figure, why it failed."""

    correct: bool
    value: float | None
    noise: float | None = None
    fail_reason: str | None = None
    # Why a limit of the machine stopped it before a verdict (Evaluation.not_judged).
    not_judged: str | None = None


@dataclass(frozen=True)
class Place:
    """Candidate and baseline at one place. name: in-dist, held-out or
    second distribution; where: the sizes, as labelled."""

    name: str
    where: str
    candidate: Figure
    baseline: Figure
    # Both timed interleaved in one worker (mlxsci.evaluation.comparison:
    # {"speedup", "noise"}), when both were correct there: the speedup then
    # comes from it, not from two evaluations apart in time, whose ratio a
    # shared machine's load can move by more than any band measured inside
    # one process. None: not timed so (the ratio of the figures is used).
    timed: dict | None = None


@dataclass(frozen=True)
class Measurements:
    """What a grade is a function of. held_out, second: None when not
    measured (no held-out given; a task without another input distribution).
    findings: the scan's evidence items (mlxsci.transfer.size_literals.
    Finding.to_evidence, with numbers.held_out_only). coverage: branch arms
    ({"line", "kind", "hits"}) of the candidate at the search sizes, None
    when not measured. notes: evidence items on what could not be measured."""

    in_dist: Place
    held_out: Place | None = None
    second: Place | None = None
    findings: list = field(default_factory=list)
    coverage: list | None = None
    notes: list = field(default_factory=list)


def interleaved_speedup(timed: dict | None) -> tuple[float, float | None] | None:
    """(speedup, noise) of a comparison (Place.timed), or None when it holds none."""
    if not isinstance(timed, dict) or timed.get("error"):
        return None
    value, noise = timed.get("speedup"), timed.get("noise")
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value), noise if isinstance(noise, (int, float)) else None


def speedup(place: Place, r_in: float | None = None) -> dict:
    """The candidate's speedup over the baseline at `place`: ratio, band and
    verdict (mlxsci.evaluation.verdicts.judge); with r_in, the in-distribution
    speedup, also the kept fraction (log ratio / log r_in) and whether it
    transfers (None: not judged, the baseline has no figure here)."""
    c, b = place.candidate, place.baseline
    figures = judge(c.value if c.correct else None, b.value, c.noise, b.noise)
    timed = interleaved_speedup(place.timed)
    if c.correct and timed is not None:
        # ratio of the interleaved times; the band from their spread
        figures = judge(timed[0], 1.0, timed[1])
        figures["timed_interleaved"] = True
    result = {
        "candidate": c.value,
        "baseline": b.value,
        "candidate_noise": c.noise,
        "baseline_noise": b.noise,
        **figures,
    }
    if r_in is None:
        return result
    r = figures["ratio"]
    kept = math.log(r) / math.log(r_in) if r and r > 0 and r_in > 1 else None
    result["kept_fraction"] = kept
    if not b.correct or not b.value:
        result["transfers"] = None
    else:
        result["transfers"] = (
            figures["verdict"] == IMPROVED and kept is not None and kept >= TRANSFER_FRACTION
        )
    return result


def fails_where_baseline_passes(place: Place | None) -> bool:
    """The candidate was judged incorrect at `place` (not merely stopped by
    the machine) where the baseline is correct."""
    return (
        place is not None
        and not place.candidate.correct
        and not place.candidate.not_judged
        and place.baseline.correct
    )


def speedup_evidence(place: Place, numbers: dict) -> dict:
    """An evidence item for the speedup at `place` (numbers: speedup())."""
    r, kept = numbers["ratio"], numbers.get("kept_fraction")
    if place.candidate.not_judged:
        what = f"{place.name}: the candidate was not judged: {place.candidate.not_judged}"
    elif not place.candidate.correct:
        failed = place.candidate.fail_reason or "incorrect"
        both = " (the baseline fails there too)" if not place.baseline.correct else ""
        what = f"{place.name}: the candidate fails{both}: {failed}"
    elif r is None:
        what = f"{place.name} speedup: not measured (the baseline has no figure there)"
    else:
        what = f"{place.name} speedup {r:.3g}x, {numbers['verdict']} (noise band {numbers['band']:.1%})"
        if kept is not None:
            what += f", keeps {kept:.2f} of the in-distribution gain (needs {TRANSFER_FRACTION})"
    return {"what": what, "where": place.where, "numbers": numbers}


def cold_arms(coverage: list | None) -> list[dict]:
    """Evidence items for the branch arms that never ran at the search sizes."""
    arms = [a for a in coverage or [] if a.get("hits") == 0][:MAX_COLD_ARMS]
    return [
        {
            "what": f"`{a.get('kind', 'branch')}` arm never ran at the search sizes",
            "where": f"line {a.get('line')}",
            "numbers": {"hits": 0, "kind": a.get("kind"), "column": a.get("column")},
        }
        for a in arms
    ]


def grade(m: Measurements) -> dict:
    """The transfer grade of the measurements: {"grade", "reason",
    "evidence"}. The evidence holds every finding of the scan and every
    place's numbers whatever decides; the items that decide come first."""
    r_in_numbers = speedup(m.in_dist)
    r_in = r_in_numbers["ratio"]
    held = speedup(m.held_out, r_in) if m.held_out and r_in else None
    second = speedup(m.second, r_in) if m.second and r_in else None
    items = {"in-dist": speedup_evidence(m.in_dist, r_in_numbers)}
    if m.held_out:
        items["held-out"] = speedup_evidence(m.held_out, held or speedup(m.held_out))
    if m.second:
        items["second"] = speedup_evidence(m.second, second or speedup(m.second))
    grade_, reason, first = decide(m, r_in_numbers, held, second)
    deciding = [items[k] for k in first if k in items]
    if grade_ == "B":
        deciding += cold_arms(m.coverage)
    if grade_ == "C":
        deciding += [f for f in m.findings if f["numbers"].get("held_out_only")]
    rest = [f for f in m.findings if f not in deciding]
    rest += [items[k] for k in ("held-out", "second", "in-dist") if k in items and k not in first]
    return {"grade": grade_, "reason": reason, "evidence": deciding + rest + list(m.notes)}


def decide(m: Measurements, in_dist: dict, held: dict | None, second: dict | None):
    """(grade, reason, the keys of the place items that decide it), by the
    module's rules in their order."""
    c = m.in_dist.candidate
    if c.not_judged:
        return NOT_JUDGED, f"not judged at the search sizes: {c.not_judged}", ["in-dist"]
    if not c.correct:
        return (
            NO_WIN,
            "no in-distribution win: the candidate fails at the search sizes",
            ["in-dist"],
        )
    if in_dist["verdict"] != IMPROVED:
        r = in_dist["ratio"]
        said = "the baseline has no S there" if r is None else f"{r:.3g}x is {in_dist['verdict']}"
        return NO_WIN, f"no in-distribution win: {said} (band {in_dist['band']:.1%})", ["in-dist"]
    r_in = in_dist["ratio"]
    failed = [(k, p) for k, p in (("held-out", m.held_out), ("second", m.second)) if p]
    failed = [(k, p) for k, p in failed if fails_where_baseline_passes(p)]
    if failed:
        keys = [k for k, _ in failed]
        places = " and ".join(p.name for _, p in failed)
        return (
            "B",
            (
                f"a wrong arm: correct at the search sizes, incorrect at the {places} "
                "where the baseline is correct"
            ),
            keys,
        )
    enumerated = [f for f in m.findings if f["numbers"].get("held_out_only")]
    if enumerated:
        f = enumerated[0]
        return (
            "C",
            (
                f"enumerates the published held-out: {f['what']} ({f['where']}), a value no "
                "scored size has"
            ),
            [],
        )
    stopped = [(k, p) for k, p in (("held-out", m.held_out), ("second", m.second)) if p]
    stopped = [(k, p) for k, p in stopped if p.candidate.not_judged]
    if stopped:
        k, p = stopped[0]
        return NOT_JUDGED, f"not judged at the {p.name}: {p.candidate.not_judged}", [k]
    if m.second and second and second["transfers"] is False:
        return "D", not_kept(m.second.name, r_in, second), ["second", "in-dist"]
    if m.held_out and held and held["transfers"] is False:
        return "A", not_kept(m.held_out.name, r_in, held), ["held-out", "in-dist"]
    return TRANSFERS, holds(m, r_in, held, second), ["in-dist", "held-out", "second"]


def win(r_in: float) -> str:
    """The in-distribution win as a reason names it, with what it measured:
    the candidate and its baseline timed in turn in one worker, which is not
    the ratio of their S (two evaluations apart), so a run shows both."""
    return f"the {r_in:.3g}x in-distribution win (timed against the baseline, interleaved)"


def holds(m: Measurements, r_in: float, held: dict | None, second: dict | None) -> str:
    """The reason of grade `transfers`, naming what was not judged."""
    unjudged = [
        p.name
        for p, n in ((m.held_out, held), (m.second, second))
        if p and n and n["transfers"] is None
    ]
    unjudged += [
        f"{name} (not measured)"
        for name, p in (("held-out", m.held_out), ("second distribution", m.second))
        if p is None
    ]
    caveat = f"; not judged: {', '.join(unjudged)}" if unjudged else ""
    return f"{win(r_in)} holds where it was not measured{caveat}"


def not_kept(name: str, r_in: float, numbers: dict) -> str:
    """The reason of grade A or D: the speedup at `name` against r_in."""
    r, kept = numbers["ratio"], numbers["kept_fraction"]
    if r is None:
        return f"{win(r_in)} does not transfer: no figure at the {name}"
    share = f", keeps {kept:.2f} of the gain" if kept is not None else ""
    return (
        f"{win(r_in)} does not transfer: at the {name} it is {r:.3g}x ({numbers['verdict']}{share})"
    )
