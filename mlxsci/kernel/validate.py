"""Whether a parsed candidate fits its task: structured failures, never exceptions.

`validate` checks a `Candidate` (mlxsci/kernel/model.py) against a task's kernel
names and size scalars: every kernel the task names is there and no other,
no empty body, no param named like a size scalar, launch expressions
well-formed over the size's scalars and the candidate's params
(mlxsci/kernel/launch_expr.py), and text that only kernel code holds
(mlxsci/kernel/source/policy.py; the evaluation reports that one as a compile
error, before anything else). mlxsci.evaluation.checks.misfit turns the failures into the one
line the evaluation, the API and the search report.

Apart from the parser because it needs a task's names, which the format
itself does not know. The parser (mlxsci/kernel/candidate.py) imports this module
and re-exports `validate` and `CandidateFailure`; both import the data model
from mlxsci/kernel/model.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxsci.kernel import launch_expr
from mlxsci.kernel.model import Candidate
from mlxsci.kernel.source import policy as source_policy

# The launch directives of a kernel (`//! grid = ...`, `//! threadgroup = ...`),
# as KernelBlock's fields name them: the parser reads them, validate checks them.
LAUNCH_KEYS = ("grid", "threadgroup")


@dataclass
class CandidateFailure:
    """A structured reason a parsed candidate does not fit its task.

    kind: "missing_kernel", "unknown_kernel", "bad_expression",
    "unknown_name", "name_conflict", "empty_kernel", "in_place" (a pair the
    task does not allow) or "refused" (the source policy: something no
    kernel language allows).
    """

    kind: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.kind}: {self.message}"


def validate(
    c: Candidate, kernel_names, allowed_launch_names, in_place: dict | None = None
) -> list[CandidateFailure]:
    """Structured reasons `c` does not fit a task with kernels `kernel_names`
    whose launch expressions may use `allowed_launch_names` (size scalars) and
    the candidate's params, and whose kernels allow the `//! inplace` pairs
    `in_place` lists (kernel name -> (output, input) pairs; none where
    absent). An empty list means it fits."""
    failures: list[CandidateFailure] = []
    failures += _in_place_failures(c, in_place or {})
    wanted = list(kernel_names)
    have = {k.name for k in c.kernels}
    allowed = set(allowed_launch_names)
    param_names = {p.name for p in c.params}
    for name in wanted:
        if name not in have:
            failures.append(
                CandidateFailure(
                    "missing_kernel",
                    f"the task needs kernel {name!r}, which the candidate lacks",
                    None,
                )
            )
    for k in c.kernels:
        if k.name not in wanted:
            failures.append(
                CandidateFailure(
                    "unknown_kernel",
                    f"kernel {k.name!r} is not one of the task's ({', '.join(wanted) or 'none'})",
                    k.line,
                )
            )
        if not k.body.strip():
            failures.append(
                CandidateFailure("empty_kernel", f"kernel {k.name!r} has an empty body", k.line)
            )
    for p in c.params:
        if p.name in allowed:
            failures.append(
                CandidateFailure(
                    "name_conflict", f"param {p.name!r} has the name of a size scalar", p.line
                )
            )
    names = allowed | param_names
    for k in c.kernels:
        for key in LAUNCH_KEYS:
            expr = getattr(k, key)
            if expr is None:
                continue
            line = getattr(k, key + "_line") or k.line
            try:
                used = launch_expr.names_used(expr)
                launch_expr.check(expr, used, dims=3)
            except launch_expr.LaunchExprError as exc:
                failures.append(
                    CandidateFailure("bad_expression", f"{key} of {k.name!r}: {exc}", line)
                )
                continue
            for name in sorted(used - names):
                failures.append(
                    CandidateFailure(
                        "unknown_name",
                        f"{key} of {k.name!r} uses {name!r}, which is neither a param nor a size "
                        f"scalar ({', '.join(sorted(names)) or 'none available'})",
                        line,
                    )
                )
    refused = source_policy.check_candidate(c)
    if refused is not None:
        failures.append(CandidateFailure("refused", refused.message, refused.line))
    return failures


def _in_place_failures(c: Candidate, allowed: dict) -> list[CandidateFailure]:
    """A `//! inplace` pair the task's kernel does not list."""
    failures = []
    for k in c.kernels:
        ok = set(allowed.get(k.name, ()))
        for pair in k.in_place:
            if pair not in ok:
                listed = ", ".join(f"{o} = {i}" for o, i in sorted(ok)) or "none"
                failures.append(
                    CandidateFailure(
                        "in_place",
                        f"kernel {k.name!r}: `//! inplace {pair[0]} = {pair[1]}` is not one "
                        f"the task allows (its kernel's: {listed})",
                        k.in_place_line or k.line,
                    )
                )
    return failures
