"""One vocabulary for "did it change?": improved, regressed or within noise.

The search (summary.json, --accept noise-aware) and the report
(python -m mlxsci.report) both judge a ratio new / old of a higher-is-better
figure (S, Phi, a re-timed speedup) against a noise band, and both use this
module, so a run is never "improved" in one place and "flat" in the other.

The band is the larger of the measured noises of the two things compared
and NOISE_FLOOR. The floor is there because noise measured inside one
process (the spread of a size's timed runs, mlxsci.timing.noise.run_noise) does not
see what changes between processes: on an H100 the CUPTI span of one
kernel (heat2d 1024^2) varied by up to 1.08x across 5 fresh processes.
A change is real only when it lies beyond the band on the ratio's log scale:
above 1 + band, or below 1 / (1 + band), so a 5 % band means the same
distance up and down.
"""

from __future__ import annotations

import math

NOISE_FLOOR = 0.05
IMPROVED, REGRESSED, WITHIN_NOISE = "improved", "regressed", "within noise"
VERDICTS = (IMPROVED, REGRESSED, WITHIN_NOISE)


def band(*noises) -> float:
    """The noise band of a comparison: the largest of the given relative
    noises (None or missing counts as 0: old results recorded none) and the
    floor."""
    measured = [float(n) for n in noises if n is not None and math.isfinite(float(n))]
    return max([NOISE_FLOOR] + measured)


def change(ratio: float, band: float) -> str:
    """The verdict on ratio = new / old of a higher-is-better figure: improved
    when it exceeds 1 + band, regressed when it falls below 1 / (1 + band),
    else within noise (both boundaries themselves are within noise)."""
    if ratio is None or math.isnan(ratio):
        raise ValueError("change() needs a ratio; None or nan has no verdict")
    if ratio > 1.0 + band:
        return IMPROVED
    if ratio < 1.0 / (1.0 + band):
        return REGRESSED
    return WITHIN_NOISE


def ratio(new, old) -> float | None:
    """new / old, or None when there is nothing to divide (a missing or zero old)."""
    if new is None or not old:
        return None
    return new / old


def judge(new, old, *noises) -> dict:
    """ratio, band and verdict of `new` against `old` with these noises; the
    verdict is None when there is no ratio."""
    r, b = ratio(new, old), band(*noises)
    return {"ratio": r, "band": b, "verdict": None if r is None else change(r, b)}


def assess(
    seed_score,
    best_score,
    phi_seed,
    phi_best,
    *,
    seed_noise=None,
    best_noise=None,
    held_out_seed_noise=None,
    held_out_best_noise=None,
) -> dict:
    """Both verdicts of a search, as summary.json records them: S of the best
    against S of the seed (improvement_*), and Phi of the best against Phi of
    the seed at the held-out size (held_out_*), each with its own band."""
    s = judge(best_score, seed_score, seed_noise, best_noise)
    h = judge(phi_best, phi_seed, held_out_seed_noise, held_out_best_noise)
    return {
        "improvement": s["ratio"],
        "improvement_band": s["band"],
        "improvement_verdict": s["verdict"],
        "held_out_ratio": h["ratio"],
        "held_out_band": h["band"],
        "held_out_verdict": h["verdict"],
    }


def assess_summary(summary: dict) -> dict:
    """assess() of a summary.json's numbers. Summaries written before noise was
    measured have no noise keys: their noise counts as 0, so the floor applies."""
    return assess(
        summary.get("seed_score"),
        summary.get("best_score"),
        summary.get("held_out_seed"),
        summary.get("held_out_best"),
        seed_noise=summary.get("seed_noise"),
        best_noise=summary.get("best_noise"),
        held_out_seed_noise=summary.get("held_out_seed_noise"),
        held_out_best_noise=summary.get("held_out_best_noise"),
    )
