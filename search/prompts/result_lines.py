"""An evaluation's result as the search prompts show it: Metal-Sci-style
result lines and history lines.

`format_result` turns an `Evaluation.to_json()` dict into one line per scored
size (time, achieved rate, fraction of the roofline, or the failure), how each
size was timed and how noisy the timing was, where the timer sees kernels
(cupti, sim) the time per kernel, and the score. `format_history_line` is one
iteration of a search's history in one line.

It is separate from search/prompts/compose.py because it describes measurements, not
the task: it needs no Task and no dialect. It is also where held-out sizes are
dropped from results (defence in depth: the loop passes only in-dist or smoke
results), and the score's phi is never shown.
"""

from __future__ import annotations

from mlxsci.evaluation.redaction import redact

__all__ = ["format_result", "format_history_line"]

_MAX_MESSAGE = 3000  # characters of a compile log / failure shown
KERNELS_SHOWN = 6  # kernels listed per size in the time breakdown, longest first


def _num(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    x = float(x)
    if x != x:
        return "nan"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def _clip(text: str, limit: int = _MAX_MESSAGE) -> str:
    # Redacted before it is cut: a cut could leave a piece of a secret that
    # the finished prompt's redaction would no longer recognise.
    text = redact(text).strip()
    return text if len(text) <= limit else text[:limit] + " [...]"


def _size_detail(size: dict) -> str:
    label = size.get("label", "")
    reason = size.get("fail_reason") or ""
    prefix = f"correctness failed at size {label}: "
    if reason.startswith(prefix):
        return _clip(reason[len(prefix) :])
    if reason:
        return _clip(reason.replace(f" at size {label}:", ":", 1))
    err, tol = size.get("error"), size.get("tol")
    return f"error={_num(err)}, tol={_num(tol)}"


def _size_line(size: dict) -> str:
    label = size.get("label", "?")
    if not size.get("correct"):
        return f"{label}: INCORRECT ({_size_detail(size)})"
    unit = size.get("unit", "")
    secs = size.get("seconds")
    ms = "n/a" if secs is None else f"{secs * 1e3:.3f}"
    frac = size.get("fraction")
    pct = "n/a" if frac is None else f"{frac * 100:.1f}"
    line = (
        f"{label}: correct, {ms} ms, {_num(size.get('achieved'))} {unit} "
        f"({pct}% of {_num(size.get('ceiling'))} {unit})"
    )
    if size.get("flags"):
        line += " [flags: " + ", ".join(str(f) for f in size["flags"]) + "]"
    return line


def _duration(seconds: float) -> str:
    """A time with its unit, 3 significant digits: 18.6 us, 1.25 ms, 182 us."""
    scale, unit = next(
        ((s, u) for s, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")) if abs(seconds) >= s),
        (1e-9, "ns"),
    )
    v = seconds / scale
    return f"{v:.0f} {unit}" if abs(v) >= 100 else f"{v:.3g} {unit}"


def _kernel_part(name: str, entry: dict, run_seconds: float | None) -> str:
    launches = int(entry.get("launches") or 0)
    seconds = float(entry.get("seconds") or 0.0)
    share = f" {seconds / run_seconds * 100:.0f}% of the run," if run_seconds else ""
    each = f", {_duration(seconds / launches)} each" if launches else ""
    plural = "launch" if launches == 1 else "launches"
    return f"{name}{share} {launches} {plural}{each}"


def _profile_lines(size: dict) -> list[str]:
    """How a correct size was timed: the timer and the run-to-run noise, and
    the GPU time per kernel where the timer records it (cupti, sim; the wall
    timer sees only the whole run). Results from before timers had neither."""
    timer, noise = size.get("timer"), size.get("noise")
    kernels = size.get("kernels") or {}
    lines = []
    if timer is not None or noise is not None:
        how = f"timer {timer}" if timer else "timer unknown"
        if timer == "wall":
            how += " (wall clock per run: an upper bound, host overhead included)"
        if noise is not None:
            how += f", noise {float(noise) * 100:.1f}% (spread of the timed runs)"
        lines.append(f"  {how}")
    if kernels:
        # Shares of the run: the run's time is the span of its kernels (cupti) or
        # their sum (sim), but the size's time can be another statistic of the
        # runs than the per-kernel medians, so never divide by less than their sum.
        total = sum(float(e.get("seconds") or 0.0) for e in kernels.values())
        run_seconds = max(float(size.get("seconds") or 0.0), total) or None
        ordered = sorted(kernels.items(), key=lambda kv: -float(kv[1].get("seconds") or 0.0))
        parts = [_kernel_part(name, entry, run_seconds) for name, entry in ordered[:KERNELS_SHOWN]]
        rest = ordered[KERNELS_SHOWN:]
        if rest:
            rest_s = sum(float(e.get("seconds") or 0.0) for _, e in rest)
            share = f" ({rest_s / run_seconds * 100:.0f}% of the run)" if run_seconds else ""
            parts.append(f"{len(rest)} more kernel(s){share}")
        lines.append("  time per kernel: " + "; ".join(parts))
    return lines


def format_result(result: dict) -> str:
    """Metal-Sci-style result lines of an `Evaluation.to_json()` dict. Sizes
    marked `held_out` are dropped (and any failure text naming them), and phi
    is never shown."""
    cand = result.get("candidate", {})
    sizes = [s for s in result.get("sizes", []) if not s.get("held_out")]
    hidden = [s.get("label", "") for s in result.get("sizes", []) if s.get("held_out")]
    reason = cand.get("fail_reason")
    if reason and any(h and h in reason for h in hidden):
        reason = "a check outside the scored sizes failed"
    if not cand.get("compile_ok", True):
        return f"COMPILE FAILED: {_clip(reason or 'unknown error')}"
    lines = []
    for s in sizes:
        lines.append(_size_line(s))
        if s.get("correct"):
            lines += _profile_lines(s)
    if not sizes:
        lines.append("(no size was evaluated)")
    if any(not s.get("correct") for s in sizes):
        lines.append("(evaluation stops at the first failing size; later sizes were not run)")
    if cand.get("correct") and cand.get("implausible") and not cand.get("implausible_kept"):
        lines.append(
            "score (gmean of fraction): 0.0000 (rejected: timed below what the "
            "machine's measured ceilings allow, not counted)"
        )
    elif cand.get("correct") and cand.get("score") is not None:
        noise = cand.get("noise")
        lines.append(
            f"score (gmean of fraction): {float(cand['score']):.4f}"
            + ("" if noise is None else f" (noise {float(noise) * 100:.1f}%)")
        )
    else:
        lines.append("score (gmean of fraction): 0.0000 (rejected: not every size is correct)")
    if reason:
        lines.append(f"fail_reason: {_clip(reason)}")
    if cand.get("implausible") and not any(h and h in cand["implausible"] for h in hidden):
        lines.append(f"verdict: {_clip(cand['implausible'])}")
    return "\n".join(lines)


def format_history_line(record: dict) -> str:
    """One iteration of a search's history: compiled, correct, score, and the
    re-timing verdict where the noise-aware rule re-timed it."""
    skipped = record.get("role") == "skipped"
    compile_ok = bool(record.get("compile_ok")) and not skipped
    correct = bool(record.get("correct")) and not skipped
    score = record.get("score")
    shown = f"{float(score):.4f}" if correct and score is not None else "N/A"
    line = (
        f"iter {record.get('iteration')}: compile={'OK' if compile_ok else 'FAIL'} | "
        f"correct={correct} | score={shown}"
    )
    if record.get("implausible"):
        line += " | implausible: timed below what the machine allows"
    comparison = record.get("comparison")
    if comparison:  # noise-aware acceptance re-timed it against the incumbent
        if comparison.get("speedup") is None:
            line += " | re-timing failed, not kept"
        else:
            kept = "kept" if comparison.get("accepted") else "not kept"
            line += (
                f" | re-timed against the incumbent: {float(comparison['speedup']):.3f}x, "
                f"{comparison.get('verdict')}, {kept}"
            )
    return line
