"""The figures bench/time_model_validation.py reports, as pure functions its
tests (tests/bench/test_time_model_validation.py) can call on made-up data:
which Metal-Sci runs form the calibration and the validation set (issue 36:
fit on Claude's runs, validate once on Gemini's and GPT's), whether a
recorded size label is the size mlxsci evaluates, and per task how the
simulator's modelled times follow the recorded Apple M1 Pro times (Spearman,
pairwise order agreement, share within a factor of 2).
"""

from __future__ import annotations

import fnmatch
import math
import re
import statistics
from pathlib import Path

from scipy.stats import spearmanr

# Which run folders of Metal-Sci's results/ belong to which set, by name
# (<task>_<model>_<stamp>). A name matching the patterns of both sets, or of
# neither (a hand-written run such as hmc_lever1_manual_...), is in no set.
SETS = {
    "calibration": ("*_claude-*",),
    "validation": ("*_gemini-*", "*_gpt-*"),
}
MIN_CANDIDATES = 8  # a task with fewer correct candidates at its size gets no figures
SEPARATION = 0.15  # the pairs that count: the slower at least this much slower on the M1
WITHIN = 2.0  # the factor the modelled time should be within of the recorded one
# Issue 36's targets on the validation set.
TARGETS = {"spearman": 0.8, "pairwise": 0.85, "within_2x": 0.90}


def set_of(name: str) -> str | None:
    """The set a run folder's name belongs to, or None (neither, or both)."""
    found = [
        s for s, patterns in SETS.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)
    ]
    return found[0] if len(found) == 1 else None


def split_runs(results: Path, which: str) -> tuple[list[Path], list[str]]:
    """The run folders directly under `results` in set `which`, sorted, and
    the names of those in no set. Hidden and `_`-prefixed folders (Metal-Sci's
    `_run_logs/`, `_smoke_*`), files and links are no runs of either set."""
    if which not in SETS:
        raise ValueError(f"unknown set {which!r}; choose from {', '.join(SETS)}")
    chosen, neither = [], []
    for d in sorted(results.iterdir()):
        if d.name.startswith((".", "_")) or d.is_symlink() or not d.is_dir():
            continue
        kind = set_of(d.name)
        if kind == which:
            chosen.append(d)
        elif kind is None:
            neither.append(d.name)
    return chosen, neither


def task_of_run(name: str) -> str:
    """The task a run folder's name starts with (<task>_<model>_<stamp>)."""
    return name.split("_", 1)[0]


# A number in a Metal-Sci size label, with an optional binary K/M suffix
# ("1M" is 2**20 elements) that no letter follows.
_NUMBER = re.compile(r"(\d+(?:\.\d+)?)(?:([KM])(?![A-Za-z]))?")
_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20}  # (findall gives "" for no suffix)


def label_numbers(label: str) -> list[float]:
    """The numbers a recorded size label names: "N1728_M5_steps20" ->
    [1728, 5, 20], "1M" -> [1048576], "32cube" -> [32]."""
    return [float(n) * _SCALE[k] for n, k in _NUMBER.findall(label)]


def same_size(label: str, params: dict) -> bool:
    """Whether a recorded size label can be the size whose params mlxsci
    evaluates: it names at least one number, and each is one of the params'
    values. Metal-Sci labels its sizes its own way ("256x256_50" for
    mlxsci's 256x256x50), so the first recorded size is taken for the
    first in-distribution size only when this holds."""
    values = {float(v) for v in params.values() if isinstance(v, (int, float))}
    numbers = label_numbers(label)
    return bool(numbers) and all(n in values for n in numbers)


def spearman(recorded: list[float], modelled: list[float]) -> float | None:
    """Spearman's rank correlation of the two (ties get their mean rank);
    None where it is undefined: fewer than 2 candidates, or either side all equal."""
    if len(recorded) < 2 or len(set(recorded)) < 2 or len(set(modelled)) < 2:
        return None
    rho = float(spearmanr(recorded, modelled).statistic)
    return None if math.isnan(rho) else rho


def separated(a: float, b: float, separation: float = SEPARATION) -> bool:
    """Whether the slower of two recorded times is at least `separation`
    slower than the faster (the relative slack absorbs rounding at exactly
    the threshold: 1.0 and 1.15 are 15 % apart)."""
    fast, slow = min(a, b), max(a, b)
    return slow >= fast * (1 + separation) * (1 - 1e-12)


def pairwise_agreement(
    recorded: list[float], modelled: list[float], separation: float = SEPARATION
) -> tuple[int, int]:
    """(pairs in the recorded order, pairs counted): over the candidate pairs
    the recorded times separate by at least `separation`, those whose
    modelled times are ordered the same way. A modelled tie is not the
    recorded order."""
    agree = pairs = 0
    for i in range(len(recorded)):
        for j in range(i + 1, len(recorded)):
            if not separated(recorded[i], recorded[j], separation):
                continue
            pairs += 1
            same = (recorded[i] < recorded[j]) == (modelled[i] < modelled[j])
            agree += int(same and modelled[i] != modelled[j])
    return agree, pairs


def share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def within_factor(
    recorded: list[float], modelled: list[float], factor: float = WITHIN
) -> float | None:
    """The share of candidates whose modelled time is within `factor` of the
    recorded one, either way (None for no candidates)."""
    near = sum(1 for r, m in zip(recorded, modelled) if r / factor <= m <= r * factor)
    return share(near, len(recorded))


def task_figures(recorded: list[float], modelled: list[float]) -> dict:
    """A task's figures over its candidates (recorded and modelled seconds,
    paired by position). With fewer than MIN_CANDIDATES only n, the ranges
    and `too_few`."""
    n = len(recorded)
    figures: dict = {
        "n": n,
        "too_few": n < MIN_CANDIDATES,
        "recorded_range": [min(recorded), max(recorded)] if n else None,
        "modelled_range": [min(modelled), max(modelled)] if n else None,
        "median_ratio": statistics.median(m / r for r, m in zip(recorded, modelled)) if n else None,
    }
    if figures["too_few"]:
        return figures
    agree, pairs = pairwise_agreement(recorded, modelled)
    figures.update(
        spearman=spearman(recorded, modelled),
        pairs=pairs,
        pairs_agree=agree,
        pairwise=share(agree, pairs),
        within_2x=within_factor(recorded, modelled),
    )
    figures["missed"] = missed_targets(figures)
    return figures


def missed_targets(figures: dict) -> list[str]:
    """The issue's targets a task's figures miss (an undefined figure misses)."""
    return [k for k, goal in TARGETS.items() if figures.get(k) is None or figures[k] < goal]


def seconds(value: float | None) -> str:
    """A time in the unit that reads best: 840 us, 1.23 ms, 2.1 s."""
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def span(pair: list[float] | None) -> str:
    return "-" if not pair else f"{seconds(pair[0])} - {seconds(pair[1])}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


TABLE_HEAD = (
    "| task, size | n | Spearman | pairs in the M1's order (>= 15% apart) | within 2x "
    "| modelled / M1 (median) | modelled range | M1 range | failed | targets missed |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def table_row(task: str, size: str, figures: dict, failed: int) -> str:
    """One task's row of the markdown table (TABLE_HEAD)."""
    f = figures
    ratio = "-" if f["median_ratio"] is None else f"{f['median_ratio']:.3g}"
    common = [f"{task} {size}", str(f["n"])]
    tail = [ratio, span(f["modelled_range"]), span(f["recorded_range"]), str(failed)]
    if f["too_few"]:
        cells = [*common, f"too few (< {MIN_CANDIDATES})", "-", "-", *tail, "-"]
    else:
        rho = "-" if f["spearman"] is None else f"{f['spearman']:.2f}"
        pairs = f"{percent(f['pairwise'])} ({f['pairs_agree']}/{f['pairs']})"
        missed = ", ".join(f["missed"]) or "none"
        cells = [*common, rho, pairs, percent(f["within_2x"]), *tail, missed]
    return "| " + " | ".join(cells) + " |"
