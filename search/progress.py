"""A run's console lines: what S and Phi mean, the line of each finished
iteration, the final line, and how to resume a run that stopped.

It is separate from search/loop.py because it only words numbers the loop has
computed; nothing here evaluates, proposes or touches the run directory.
"""

from __future__ import annotations

from contextlib import contextmanager

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


def done_line(summary: dict) -> str:
    """The final line of a run: S and Phi of seed and best, verdicts, outcome."""
    return (
        f"done: S seed={fmt(summary['seed_score'])} best={fmt(summary['best_score'])} "
        f"({summary['improvement_verdict'] or 'n/a'}, band {summary['improvement_band']:.1%})  "
        f"Phi seed={fmt(summary['held_out_seed'])} best={fmt(summary['held_out_best'])} "
        f"({summary['held_out_verdict'] or 'n/a'})  outcome={summary['outcome']}"
        + _implausible_note(summary)
    )


def _implausible_note(summary: dict) -> str:
    n = summary.get("implausible_iterations") or 0
    if not n:
        return ""
    kept = "counted, --keep-implausible" if summary.get("keep_implausible") else "not counted"
    return f"  implausible candidates: {n} ({kept})"


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
