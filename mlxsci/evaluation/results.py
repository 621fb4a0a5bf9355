"""What an evaluation answers: the records of its sizes and of the candidate.

`SizeResult` is one size's verdict, timings and fraction of the roofline;
`Evaluation` is the candidate's (compile_ok, correct, S, Phi, noise, the
sizes), which `mlxsci.evaluate` returns and `mlxsci eval --json` prints
(`Evaluation.to_json`). `format_evaluation` is the same as a table, what
`mlxsci eval` prints.

They sit apart from mlxsci/evaluation/evaluator.py because more than the verb reads
them: the checks (mlxsci/evaluation/checks.py) fill a SizeResult, the search records
their JSON, tests build them; this module imports nothing of mlxsci's but
mlxsci/evaluation/redaction.py (itself only the standard library).

Both the JSON and the table are redacted (defence in depth): a fail_reason
may quote what a worker printed, and no secret value may leave in them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from mlxsci.evaluation.redaction import redact, redact_json


@dataclass
class SizeResult:
    label: str
    params: dict
    held_out: bool = False
    correct: bool = False
    error: float | None = None
    tol: float | None = None
    seconds: float | None = None  # device time per run: median of the timed runs
    # (their minimum for the sim timer)
    seconds_min: float | None = None
    seconds_max: float | None = None
    timer: str | None = None  # cupti, sim or wall (mlxsci.timing.timers)
    noise: float | None = None  # (max - min) / median of the timed runs
    kernels: dict = field(default_factory=dict)  # name -> {launches, seconds} per run
    timer_info: dict = field(default_factory=dict)  # wall: repeats, floor_seconds
    warmup: dict = field(default_factory=dict)  # runs, settled
    achieved: float | None = None
    unit: str = ""
    ceiling: float | None = None
    fraction: float | None = None
    metal_sci_fraction: float | None = None
    flags: list = field(default_factory=list)
    fail_reason: str | None = None
    timings: dict = field(default_factory=dict)
    # Why the time is below what the machine allows (mlxsci.evaluation.checks.implausibility):
    # a correct size whose fraction is not counted.
    implausible: str | None = None
    # Why the machine stopped this size before a verdict (its time limit, a
    # memory limit, the worker killed from outside): no verdict about the
    # kernel, and correct stays False only because nothing was judged.
    not_judged: str | None = None


@dataclass
class Evaluation:
    task: str
    backend: str
    device: str
    dialect: str = "metal"
    timer: str | None = None
    compile_ok: bool = True
    correct: bool = False
    score: float | None = 0.0
    phi: float | None = None
    noise: float | None = None  # of S: combined_noise of the scored sizes' noise
    fail_reason: str | None = None
    sizes: list = field(default_factory=list)
    sanitized: str | None = None  # the compute-sanitizer tool the sizes ran under (not scored)
    # The secret seed the inputs were drawn from (recorded after the run; None:
    # the task's fixed inputs). Never shown to a proposer.
    input_seed: int | None = None
    # Why a size's time is below what the machine allows (the first such size):
    # S is 0 and Phi none unless the evaluation kept it (implausible_kept).
    implausible: str | None = None
    implausible_kept: bool = False
    # The ceilings the sizes were scored against (mlxsci.roofline.ceilings.Roofline.source:
    # the roofline cache entry's name, the sha256 of its bytes, measured_at);
    # {} when no size ran.
    roofline: dict = field(default_factory=dict)
    # How often each arm of the candidate's branches ran (evaluate(coverage=True)
    # on a backend that measures it; the shape: mlxsci.evaluation.evaluator.CoverageTally.record).
    # Evidence only, apart from the verdict and the score. None when not asked.
    coverage: dict | None = None
    # The GPU the simulator's clock modelled (mlxsci/backends/sim/gpus/: the
    # file's name, e.g. apple-m1-pro); None on a GPU, whose own clock timed it.
    sim_gpu: str | None = None
    # Why the machine stopped the evaluation before a verdict (SizeResult.not_judged
    # of the size it stopped at): then correct is False and score None, and
    # nothing may read it as incorrect.
    not_judged: str | None = None

    def to_json(self) -> dict:
        data = {
            "task": self.task,
            "backend": self.backend,
            "device": self.device,
            "sim_gpu": self.sim_gpu,
            "dialect": self.dialect,
            "timer": self.timer,
            "candidate": {
                "compile_ok": self.compile_ok,
                "correct": self.correct,
                "score": self.score,
                "phi": self.phi,
                "noise": self.noise,
                "fail_reason": self.fail_reason,
                "implausible": self.implausible,
                "implausible_kept": self.implausible_kept,
                "not_judged": self.not_judged,
            },
            "input_seed": self.input_seed,
            "roofline": dict(self.roofline),
            "sizes": [json_size(s) for s in self.sizes],
        }
        if self.sanitized:  # only sanitized runs carry it; their score is None
            data["sanitized"] = self.sanitized
        if self.coverage is not None:  # only evaluations that asked for it carry it
            data["coverage"] = self.coverage
        return redact_json(data)


def json_size(s: SizeResult) -> dict:
    d = asdict(s)
    for key in ("error", "tol"):  # JSON has no inf/nan
        if d[key] is not None and not math.isfinite(d[key]):
            d[key] = str(d[key])
    return d


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-12)) for v in values) / len(values))


# What the two numbers of a result mean, in one line under them.
S_AND_PHI = (
    "S = geometric mean of the scored sizes' fractions of the roofline (0 if any "
    "fails); Phi = the fraction at the held-out size, never part of S"
)


def fmt(value, spec=".3g"):
    return "-" if value is None else format(value, spec)


# The table's columns, one row per size (size_row).
SIZE_COLUMNS = (
    "size",
    "verdict",
    "error",
    "tol",
    "ms (median)",
    "noise %",
    "achieved",
    "ceiling",
    "fraction",
    "flags",
)


def format_evaluation(ev: Evaluation) -> str:
    """The evaluation as `mlxsci eval` prints it: a heading, a row per size,
    the timer's and chip table's notes, the score, and what the verdict rests on."""
    # Imported here, not at the top: `import mlxsci` imports this module
    # (through mlxsci/evaluation/evaluator.py), and only the command line prints tables
    # (tabulate takes ~30 ms to import).
    from tabulate import tabulate

    modelled = f", modelled GPU {ev.sim_gpu}" if ev.sim_gpu else ""
    lines = [
        f"task {ev.task} on {ev.backend} ({ev.device}){modelled}, {ev.dialect} dialect, "
        f"timer {ev.timer}"
    ]
    if ev.sizes:
        rows = [size_row(s) for s in ev.sizes]
        lines.append(tabulate(rows, headers=list(SIZE_COLUMNS), disable_numparse=True))
    lines += timing_notes(ev)
    lines.append(
        f"score (gmean of fractions): {fmt(ev.score, '.4f')}"
        + (f" (noise {100 * ev.noise:.1f}%)" if ev.noise is not None else "")
        + (f"   held-out phi: {ev.phi:.4f}" if ev.phi is not None else "")
    )
    lines.append(S_AND_PHI)
    lines += provenance_notes(ev)
    return redact("\n".join(lines))


def size_row(s: SizeResult) -> list[str]:
    """One size's row of the table (SIZE_COLUMNS)."""
    verdict = "FAIL" if not s.correct else "IMPLAUSIBLE" if s.implausible else "ok"
    return [
        s.label + (" (held-out)" if s.held_out else ""),
        verdict,
        fmt(s.error, ".2e"),
        fmt(s.tol, ".2e"),
        fmt(None if s.seconds is None else s.seconds * 1e3, ".4g"),
        fmt(None if s.noise is None else 100 * s.noise, ".1f"),
        f"{fmt(s.achieved, '.2f')} {s.unit}".strip(),
        fmt(s.ceiling, ".2f"),
        fmt(s.fraction, ".3f"),
        ",".join(s.flags),
    ]


def timing_notes(ev: Evaluation) -> list[str]:
    """The lines under the table on how the sizes were timed: the wall
    timer's chains, Metal-Sci's chip-table fractions, compute-sanitizer."""
    lines = []
    for s in ev.sizes:
        if s.timer == "wall" and s.timer_info.get("repeats"):
            floor = s.timer_info.get("floor_seconds")
            lines.append(
                f"{s.label}: wall timer, {s.timer_info['repeats']} chained runs per eval"
                + (f", empty-eval floor {floor * 1e3:.4g} ms" if floor is not None else "")
                + " (an upper bound on device time)"
            )
            break
    if ev.sizes and any(s.metal_sci_fraction is not None for s in ev.sizes):
        lines.append(
            "Metal-Sci chip-table fractions: "
            + ", ".join(f"{s.label}={fmt(s.metal_sci_fraction, '.3f')}" for s in ev.sizes)
        )
    if ev.sanitized:
        lines.append(
            f"ran under compute-sanitizer {ev.sanitized}: timings are not comparable, no score"
        )
    return lines


def provenance_notes(ev: Evaluation) -> list[str]:
    """The lines under the score: the input seed, the ceilings it was scored
    against, why it failed, an implausible verdict."""
    lines = []
    if ev.input_seed is not None:
        lines.append(f"inputs drawn from seed {ev.input_seed} (--input-seed reproduces them)")
    if ev.roofline and ev.roofline.get("modelled"):
        lines.append(
            f"ceilings: the modelled GPU's own ({ev.roofline.get('entry')}: "
            "last-level cache, DRAM and FP32 peak)"
        )
    elif ev.roofline:
        lines.append(
            f"ceilings: {ev.roofline.get('entry')} (sha256 {str(ev.roofline.get('sha256'))[:12]}, "
            f"measured {ev.roofline.get('measured_at')})"
        )
    if ev.fail_reason:
        lines.append(f"fail_reason: {ev.fail_reason}")
    if ev.not_judged:
        lines.append(f"verdict: not judged, a limit of the machine stopped it: {ev.not_judged}")
    if ev.implausible:
        lines.append(
            f"verdict: {ev.implausible}; "
            + (
                "kept as measured (--keep-implausible)"
                if ev.implausible_kept
                else "not counted: S 0 (--keep-implausible counts it, for study)"
            )
        )
    return lines
