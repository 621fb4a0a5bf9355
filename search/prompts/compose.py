"""The prompts of the LLM kernel search: system prompt and user prompts.

The structure follows the Metal-Sci benchmark's search prompts: a
system prompt that is the same at every call (role, output format, the task's
contract, hard rules, dialect pitfalls, optimisation hints), an iteration-1
prompt (task brief, seed, its measured result) and an iteration-k prompt
(brief, previous attempt, incumbent, short history, optional stagnation
notice). The wording is this project's own, and everything task-specific is
derived from the `Task` object, so a new task folder needs no prompt edits.
This module holds the wording; the parts computed from the task and from
results live beside it:

- search/prompts/pipeline.py: the task's host pipeline read off a dry run of
  `task.run` (launch order, dtypes and shapes, what feeds what, symbolic
  shapes);
- search/prompts/contract.py: the contract section (`contract_text`) with the exact
  signatures MLX generates (`metal_signature`, `cuda_signature`);
- search/prompts/result_lines.py: an evaluation's result and history lines
  (`format_result`, `format_history_line`), with the timer, the noise and the
  time per kernel.
Those public names are imported here too, so `mlxsci.search.prompts` stays the
one place a caller imports the prompts from. What the prompt says differently
per dialect is one `DialectWords` entry per dialect name in
search/prompts/dialect_words.py (role, hard rules, pitfalls) and one in search/prompts/contract.py.

Held-out sizes never reach a prompt: the pipeline analysis reads only the
`smoke` and `in-dist` size sets, and `format_result` drops any size marked
`held_out` (defence in depth; the loop passes only in-dist or smoke results).

No secret reaches a prompt either: both prompts are redacted as they are
finished (`_redacted`, mlxsci/evaluation/redaction.py), since a result quotes what a
worker printed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec

from mlxsci.backends import BACKENDS
from mlxsci.evaluation.redaction import redact
from mlxsci.kernel import dialects
from mlxsci.search.prompts.contract import contract_text, cuda_signature, metal_signature
from mlxsci.search.prompts.dialect_words import WORDS
from mlxsci.search.prompts.result_lines import format_history_line, format_result
from mlxsci.task import Task

__all__ = [
    "system_prompt",
    "user_prompt",
    "archive_prompt",
    "format_result",
    "format_history_line",
    "stagnating",
    "contract_text",
    "metal_signature",
    "cuda_signature",
    "HISTORY_LINES",
]

HISTORY_LINES = 8  # history entries shown in an iteration-k prompt
STAGNATION_WINDOW = 3  # correct candidate iterations looked at
STAGNATION_BAND = 0.85  # "close to the best" means score >= 0.85 * best

_P = ParamSpec("_P")


def _redacted(build: Callable[_P, str]) -> Callable[_P, str]:
    """A prompt builder whose prompt is redacted when finished: the last
    step before it goes to a proposer."""

    @functools.wraps(build)
    def finished(*args: _P.args, **kwargs: _P.kwargs) -> str:
        return redact(build(*args, **kwargs))

    return finished


# --- system prompt ------------------------------------------------------------


def _skeleton(task: Task, dialect: str) -> str:
    ex = [
        "//! param TILE = 16 {8, 16, 32}",
        "//! header",
        "// helpers and program-scope constants shared by all kernels",
    ]
    for c in task.kernels:
        ex += [
            f"//! kernel {c.name}",
            f"//! grid = {c.grid}",
            f"//! threadgroup = {c.threadgroup}",
            f"// body of {c.name}: statements only, no function header",
        ]
    return "\n".join(ex)


def _format_section(task: Task, dialect: str) -> str:
    fence = dialects.get(dialect).fence
    lang = dialects.get(dialect).language
    kernel_list = ", ".join(f"`{k}`" for k in task.kernel_names)
    return f"""## Output format
Answer with a short explanation (under about 150 words) of what you changed and why it
should be faster, then exactly one fenced code block opened with ```{fence} that holds the
complete candidate file. The file contains every kernel of the task, even the ones you
did not change: {kernel_list}. Nothing outside that block is compiled.

## The candidate file (format v1)
Lines that start with `//!` are directives; every other line is {lang} code. Any `//!` line
must be one of the directives below (write ordinary comments with `//`).
- `//! param NAME = VALUE {{c1, c2, ...}}`: optional, any number, before everything else. An
  integer compile-time constant that MLX passes as a template argument, so it is visible
  in every kernel body (usable as an array bound) but NOT in the header. The braces
  list values an autotuner may try; they must include VALUE. NAME must not clash with a
  size parameter, a buffer name, `min`, `max` or `ceil_div`.
- `//! header`: optional, at most once, before the first kernel. Everything up to the first
  `//! kernel` is shared code pasted before every kernel function: helper functions,
  structs, program-scope constants.
- `//! kernel NAME`: one per kernel of the task, with the task's exact names. The lines
  after it (up to the next `//! kernel`) are the kernel BODY: statements that MLX pastes
  inside a function it writes itself. MLX generates the whole signature from the task's
  buffer names and dtypes (shown below), so a body never declares parameters, never
  writes a function header and never returns a value.
- `//! grid = (X, Y, Z)` and `//! threadgroup = (X, Y, Z)`: optional, right after
  `//! kernel NAME`; without them the task's defaults (shown below) are used. The grid
  counts THREADS, not threadgroups. Each entry is an integer expression built from
  integer literals, `+ - * // %`, parentheses, `min(a, b, ...)`, `max(a, b, ...)`,
  `ceil_div(a, b)`, the size's integer parameters and your params. `//` and `%` are
  integer floor division and remainder; `/`, floats and other functions are rejected.

Skeleton (placeholders only; write real code):
```{fence}
{_skeleton(task, dialect)}
```
"""


def _hard_rules(task: Task, dialect: str) -> str:
    words = WORDS[dialect]
    return f"""## Hard rules
- The host side is fixed. It launches the kernels in the order given above, the number of
  times given above, and passes buffers between launches exactly as described. You choose
  kernel bodies, helpers, params and launch shapes, nothing else. Every launch is one step
  of the algorithm: you cannot fuse steps or skip launches.
- Correctness gates the score. Every size is checked against a NumPy reference; if any
  size is out of tolerance (or crashes, hangs or reads out of bounds) the score is 0.
- Outputs are new buffers at every launch, and during verification they are pre-filled
  with poison values: every element of every output must be written at every launch
  (boundary cells included), unless the contract says the output starts from a given
  value.
- Inputs are read-only; their checksums are compared before and after the run.
- Be deterministic: the last timed run must reproduce the verified output.
- {words.edge_rule}
- {words.memory_rule}
- At most 1024 threads per threadgroup (the real limit can be lower for kernels that
  use many registers). The SIMD-group (warp) width is 32.
- Score: per size, the fraction of the roofline (achieved / ceiling, from the task's
  byte or FLOP model); the candidate's score is the geometric mean over the scored sizes.
"""


@_redacted
def system_prompt(task: Task, dialect: str = "metal") -> str:
    """The system prompt: the same at every call of a search."""
    dialects.get(dialect)  # ValueError naming the dialects for any other name
    words = WORDS[dialect]
    return (
        "\n".join(
            [
                words.role + " You improve one benchmark task at a time; each answer is scored by "
                "measured speed against a roofline, but only if it is correct.",
                "",
                _format_section(task, dialect),
                "## The task contract",
                contract_text(task, dialect),
                _hard_rules(task, dialect),
                words.pitfalls,
            ]
        ).rstrip()
        + "\n"
    )


# --- stagnation ---------------------------------------------------------------


def stagnating(history: list[dict]) -> bool:
    """Metal-Sci's rule: the last 3 correct candidate iterations all scored within
    [0.85 * best, best] (best = the highest score so far, seed included) and
    none of them was a new best."""
    scored = [
        r
        for r in history
        if r.get("role") != "skipped" and r.get("correct") and r.get("score") is not None
    ]
    if not scored:
        return False
    best = max(float(r["score"]) for r in scored)
    recent = [r for r in scored if r.get("role") == "candidate"][-STAGNATION_WINDOW:]
    if len(recent) < STAGNATION_WINDOW or best <= 0:
        return False
    return all(
        STAGNATION_BAND * best <= float(r["score"]) <= best and not r.get("is_new_best")
        for r in recent
    )


# --- user prompts -------------------------------------------------------------


def _scored_labels(*results) -> list[tuple[str, dict]]:
    seen, out = set(), []
    for res in results:
        for s in (res or {}).get("sizes", []):
            if s.get("held_out") or s.get("label") in seen:
                continue
            seen.add(s.get("label"))
            out.append((s.get("label"), s.get("params") or {}))
    return out


def _brief(task: Task, seed_result: dict, *others) -> str:
    sizes = _scored_labels(seed_result, *others)
    listed = (
        "; ".join(
            f"{label} ({', '.join(f'{k}={v}' for k, v in params.items())})"
            if params
            else str(label)
            for label, params in sizes
        )
        or "(none reported)"
    )
    unit = (
        "GB/s against the measured memory bandwidth"
        if task.bound == "bandwidth"
        else "GFLOPS against the measured FP32 peak"
    )
    where = f"{seed_result.get('backend', '?')} backend, device: {seed_result.get('device', '?')}"
    if seed_result.get("backend") in BACKENDS:
        where += BACKENDS[seed_result["backend"]].prompt_note
    return (
        f"## Task: {task.name}\n{task.description}\n\n"
        f"Roofline model: {task.model or task.bound}; scored in {unit}.\n"
        f"Scored sizes: {listed}.\n"
        f"Measurements come from the {where}.\n"
    )


def _block(source: str, dialect: str) -> str:
    return f"```{dialects.get(dialect).fence}\n{source.rstrip()}\n```"


def _last_candidate_iteration(history: list[dict]) -> int | None:
    its = [r.get("iteration") for r in history if r.get("role") == "candidate"]
    return its[-1] if its else None


def _stagnation_notice(task: Task) -> str:
    options = [
        "a different mapping of threads to work (one threadgroup per row, line or tile; "
        "several outputs per thread; grid-stride loops over fewer, fuller threadgroups)",
        "cooperative loads of a tile plus halo into threadgroup memory, reused by the group",
        "SIMD-group shuffles and reductions instead of threadgroup memory and barriers",
        "a different data access pattern inside the kernel (vector loads, transposed or "
        "register-blocked traversal, better coalescing)",
        "cheaper arithmetic in the inner loop (hoisted invariants, fma, reduced precision "
        "only where the tolerance clearly allows it)",
        "a different launch shape and param values exposed with `//! param` choices",
    ]
    return (
        "## Stagnation notice\nThe last few correct attempts all scored close to the best "
        "without beating it: small tweaks of the same design have stopped paying. Switch "
        "to a structurally different approach, for example:\n"
        + "\n".join(f"- {o}" for o in options)
        + "\n"
    )


@_redacted
def user_prompt(
    task: Task,
    dialect: str = "metal",
    *,
    iteration: int,
    seed_source: str,
    seed_result: dict,
    previous: tuple[str, dict] | None,
    incumbent: tuple[str, dict] | None,
    history: list[dict],
    stagnation: bool,
    accept: str = "strict",
) -> str:
    """The user prompt of one iteration (1-based). Iteration 1 shows the seed;
    later ones show the previous attempt, the incumbent when it differs, the
    last entries of the history and, when asked, the stagnation notice.
    accept: the search's acceptance rule, stated in the instructions."""
    fence = dialects.get(dialect).fence  # ValueError naming the dialects for any other name
    if iteration <= 1:
        return _first_prompt(task, dialect, seed_source, seed_result)
    prev_res = previous[1] if previous else None
    inc_res = incumbent[1] if incumbent else None
    parts = [_brief(task, seed_result, prev_res, inc_res)]
    attempt, previous_failed = _previous_attempt(dialect, iteration, previous, history)
    parts += attempt
    if incumbent is not None and (previous is None or incumbent[0].strip() != previous[0].strip()):
        parts += [
            "## Current best (incumbent)",
            _block(incumbent[0], dialect),
            "Result:",
            format_result(incumbent[1]),
            "",
        ]
    parts += _history_section(history)
    if stagnation:
        parts.append(_stagnation_notice(task))
    best_res = inc_res if incumbent is not None else prev_res
    best_score = None
    if best_res and best_res.get("candidate", {}).get("correct"):
        best_score = best_res["candidate"].get("score")
    parts += _instructions(task, fence, previous_failed, best_score, accept)
    return "\n".join(parts).rstrip() + "\n"


@_redacted
def archive_prompt(
    task: Task,
    dialect: str = "metal",
    *,
    seed_result: dict,
    parent: tuple[str, dict, str],
    inspirations: list[tuple[str, dict, str]],
    history: list[dict],
    accept: str = "strict",
) -> str:
    """The user prompt of a proposal drawn from an archive (the map-elites
    strategy): the brief, the parent (source, result, the kind of kernel it
    is), a few of the best kernels of other kinds as inspirations, the last
    entries of the history, and the instructions to beat the parent."""
    fence = dialects.get(dialect).fence
    source, result, kind = parent
    parts = [
        _brief(task, seed_result, result),
        f"## Parent: the best kernel of its kind so far ({kind})",
        _block(source, dialect),
        "Result:",
        format_result(result),
        "",
    ]
    if inspirations:
        parts += [
            "## Inspirations: the best kernels of other kinds",
            "Each takes another approach (threadgroup memory, vector width, launch "
            "shape); borrow what helps the parent.",
            "",
        ]
        for other_source, other_result, other_kind in inspirations:
            parts += [
                f"### {other_kind}",
                _block(other_source, dialect),
                "Result:",
                format_result(other_result),
                "",
            ]
    parts += _history_section(history)
    cand = result.get("candidate", {})
    score = cand.get("score") if cand.get("correct") else None
    parts += _instructions(task, fence, False, score, accept)
    return "\n".join(parts).rstrip() + "\n"


def _history_section(history: list[dict]) -> list[str]:
    """The last HISTORY_LINES entries of the history, oldest first (none: no section)."""
    if not history:
        return []
    recent = sorted(history, key=lambda r: r.get("iteration", 0))[-HISTORY_LINES:]
    return ["## History (iteration 0 is the seed)", *[format_history_line(r) for r in recent], ""]


def _kernel_names(task: Task) -> str:
    return ", ".join(f"`{k}`" for k in task.kernel_names)


def _first_prompt(task: Task, dialect: str, seed_source: str, seed_result: dict) -> str:
    """Iteration 1's user prompt: the brief, the seed and its measured result."""
    fence = dialects.get(dialect).fence
    parts = [
        _brief(task, seed_result),
        "## Baseline: the seed candidate",
        _block(seed_source, dialect),
        "Measured result of the seed:",
        format_result(seed_result),
        "",
        "## Your task",
        "Write a faster candidate that stays correct at every size. The score is the "
        "geometric mean over the sizes of achieved / ceiling, and 0 if any size is "
        f"incorrect. Answer with a short explanation and then one ```{fence} block holding "
        f"the whole candidate file, with the kernels {_kernel_names(task)} under their exact "
        "names.",
    ]
    return "\n".join(parts).rstrip() + "\n"


def _previous_attempt(
    dialect: str, iteration: int, previous: tuple[str, dict] | None, history: list[dict]
) -> tuple[list[str], bool]:
    """The sections of an iteration-k prompt on the proposer's last answer: a
    notice when it held no usable block, then its most recent evaluated
    attempt with the result; and whether that attempt failed."""
    fence = dialects.get(dialect).fence
    parts: list[str] = []
    last = max(history, key=lambda r: r.get("iteration", -1)) if history else None
    skipped = last is not None and last.get("role") == "skipped"
    if previous is None and not skipped:
        skipped = True  # no previous attempt to show at k >= 2: the proposal yielded nothing
    previous_failed = skipped
    if skipped:
        n = last.get("iteration") if last is not None else iteration - 1
        parts += [
            "## Your previous attempt",
            f"Your answer at iteration {n} contained no usable ```{fence} block (or the "
            "request failed), so nothing was evaluated. Make sure the answer holds exactly "
            f"one complete ```{fence} block.",
            "",
        ]
    if previous is not None:
        src, res = previous
        n = _last_candidate_iteration(history)
        title = "## Your most recent evaluated attempt" if skipped else "## Your previous attempt"
        parts += [
            title + (f" (iteration {n})" if n is not None else ""),
            _block(src, dialect),
            "Result:",
            format_result(res),
            "",
        ]
        cand = res.get("candidate", {})
        previous_failed = previous_failed or not (
            cand.get("compile_ok", True) and cand.get("correct")
        )
    return parts, previous_failed


def _instructions(
    task: Task, fence: str, previous_failed: bool, best_score, accept: str
) -> list[str]:
    """The numbered instructions that end an iteration-k prompt."""
    steps = []
    if previous_failed:
        steps.append(
            "Your previous attempt did not produce a correct result: find and fix the "
            "cause first (or go back to the incumbent and change it more carefully)."
        )
    rule = (
        "strictly higher score."
        if accept == "strict"
        else "strictly higher score and a speedup beyond the timing noise when the two are "
        "re-timed side by side."
    )
    steps.append(
        "Beat the incumbent"
        + (f" (score {float(best_score):.4f})" if best_score is not None else "")
        + " while staying correct at every size; a candidate replaces it only with a "
        + rule
    )
    steps.append(
        f"Answer with a short explanation and then exactly one ```{fence} block "
        f"holding the whole candidate file, with the kernels {_kernel_names(task)} under their "
        "exact names."
    )
    return ["## Instructions", *[f"{i}. {s}" for i, s in enumerate(steps, 1)]]
