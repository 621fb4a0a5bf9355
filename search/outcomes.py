"""What a search run came to: the one outcome vocabulary of summary.json and the report.

The search writes `outcome` into summary.json with classify(), and the report
(python -m mlxsci.report) labels each run with classify() too, so a run has
the same outcome wherever it is shown. Every rule that asks "did it change?"
asks mlxsci.evaluation.verdicts (the measured noise band, the same rule --accept
noise-aware uses), so no second band exists here.

classify() recomputes the verdicts from a summary's numbers and noises rather
than reading its verdict fields, so summaries written before noise was
measured (no noise keys) are judged by the same rule, the 5 % floor deciding.
"""

from __future__ import annotations

from mlxsci.evaluation.verdicts import IMPROVED, REGRESSED, assess_summary

# A seed S at least this large leaves little to gain: a run that found no
# gain from such a seed is `saturated`, not `flat`.
SATURATED_SEED = 0.8

# The vocabulary, in the order classify() tries its rules; the first that applies wins.
OUTCOMES = {
    "no_candidates": "proposals were asked for and none gave a candidate (every call "
    "failed, held no code, or the cost cap stopped the run)",
    "saturated": "no higher S than the seed's, and the seed already scores S >= 0.8",
    "flat": "no higher S than the seed's (the best is the seed), and the seed scores below 0.8",
    "held_out_not_judged": "a higher S, but a limit of the machine (its time limit, a "
    "memory limit) stopped the best's held-out evaluation before a verdict: no verdict "
    "there, neither a failure nor a win",
    "held_out_failure": "a higher S, but the best fails at the held-out size where the "
    "seed does not (e.g. a kernel that special-cases the scored sizes)",
    "held_out_regression": "a higher S, but Phi regressed beyond the held-out noise band, "
    "whether or not the S gain is beyond its own band",
    "not_transferred": "S improved beyond the noise band, but Phi did not improve beyond "
    "its band: the gain does not carry to the held-out configuration",
    "improved": "S improved beyond the noise band, and so did Phi (or the seed has no "
    "Phi to compare with)",
    "within_noise": "a higher S, inside the noise band: no evidence of a change",
}
(
    NO_CANDIDATES,
    SATURATED,
    FLAT,
    HELD_OUT_NOT_JUDGED,
    HELD_OUT_FAILURE,
    HELD_OUT_REGRESSION,
    NOT_TRANSFERRED,
    IMPROVED_RUN,
    WITHIN_NOISE_RUN,
) = OUTCOMES


def _no_gain(seed_score, best_score) -> bool:
    """The best scores no higher than the seed (or either has no score)."""
    return best_score is None or seed_score is None or best_score <= seed_score


def classify(numbers: dict, *, no_candidates: bool = False) -> str:
    """The outcome of a run from its summary.json numbers (seed_score,
    best_score, held_out_seed, held_out_best and their noises), by the first
    rule of OUTCOMES that applies. `no_candidates` is a fact about the
    proposals, not the numbers: the caller says it."""
    if no_candidates:
        return NO_CANDIDATES
    seed_score, best_score = numbers.get("seed_score"), numbers.get("best_score")
    if _no_gain(seed_score, best_score):
        return SATURATED if (seed_score or 0.0) >= SATURATED_SEED else FLAT
    if numbers.get("held_out_best_not_judged"):
        return HELD_OUT_NOT_JUDGED
    if numbers.get("held_out_best") is None and numbers.get("held_out_seed") is not None:
        return HELD_OUT_FAILURE
    verdicts = assess_summary(numbers)
    if verdicts["held_out_verdict"] == REGRESSED:
        return HELD_OUT_REGRESSION
    if verdicts["improvement_verdict"] != IMPROVED:
        return WITHIN_NOISE_RUN
    # A win is one in speed at the held-out too (the sequel's gate): a Phi
    # merely not worse is a gain that does not transfer.
    if numbers.get("held_out_seed") is None or verdicts["held_out_verdict"] == IMPROVED:
        return IMPROVED_RUN
    return NOT_TRANSFERRED


def classify_summary(summary: dict) -> str:
    """classify() of a summary.json as the search wrote it; its no_candidates
    outcome is kept (the numbers alone cannot tell it from a flat run)."""
    return classify(summary, no_candidates=summary.get("outcome") == NO_CANDIDATES)
