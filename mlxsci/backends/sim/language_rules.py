"""Language rules the real kernel compilers enforce and clang-as-C++ does not.

The simulator compiles MLX's generated kernel text as C++17 with a prelude
that defines Metal's address spaces away and gives CUDA a host C++ library,
so it accepts kernels that Apple's Metal compiler or NVRTC reject. This module
reads the generated text (comments and strings blanked; for Metal, the
candidate's lines as preprocessing leaves them: `expanded`) before it is
built and reports the first such violation as a CompileError in clang's
format, mapped to the candidate's own file and line through the dialect's
Regions.

Each dialect's rules live in their own module, listed there with the
specification sections they come from:
  Metal    metal_rules.py (the statement walk),
           metal_declaration_rules.py (declarations) and
           metal_expression_rules.py (casts, pointer initializers, lambdas)
  CUDA     cuda_rules.py
Both share the tokenizer and the violation -> CompileError mapping in
language_tokens.py. This module is the per-dialect dispatch the kernel calls.
After the dialect's rules, `check` applies the source policy
(mlxsci/kernel/source/policy.py: what no kernel language allows) to the candidate's
own lines of the text, so that the simulator refuses the same things however
it is reached (the evaluation also checks before any worker starts).
"""

from __future__ import annotations

from mlxsci.backends.sim.cuda_rules import check_cuda
from mlxsci.backends.sim.dialects import SIGNATURE_FILE
from mlxsci.backends.sim.language_tokens import CodeView, code_only
from mlxsci.backends.sim.metal_rules import check_metal
from mlxsci.kernel.source import policy as source_policy
from mlxsci.kernel.spec import CompileError

__all__ = ["check", "check_metal", "check_cuda", "expanded", "CHECKS"]


CHECKS = {"metal": check_metal, "cuda": check_cuda}
# The dialects whose rules read the text as the compiler compiles it
# (`expanded`), with that check; NVRTC's rules (cuda_rules.py) still read it
# as written.
EXPANDED_CHECKS = {"metal": check_metal}


def check(
    dialect: str, text: str, regions, source_file: str = "<candidate>", fast_math: bool = False
) -> CompileError | None:
    """The first violation of `dialect`'s language rules in `text` (the
    exact text MLX compiles), or else the source policy's refusal of the
    candidate's lines in it, or None. `fast_math`: built with Metal's fast
    math mode.

    Metal's rules judge what Apple's compiler compiles: the candidate's
    lines after preprocessing (`expanded`), so a construct hidden in a
    macro is refused at the line that uses the macro, and one in an `#if`
    group not taken is not judged. Where the policy refuses the text there
    is no expansion to judge; the rules then read it as written, so that a
    candidate breaking both gets the rule's message first, as before."""
    reads_expanded = EXPANDED_CHECKS.get(dialect)
    if reads_expanded is not None:
        view, refused = expanded(dialect, text, regions, source_file, fast_math)
        violation = reads_expanded(text, regions, source_file, view)
        return violation if violation is not None else refused
    violation = CHECKS[dialect](text, regions, source_file)
    if violation is not None:
        return violation
    return source_policy.check_parts(
        dialect, candidate_parts(text, regions), source_file, fast_math
    )


def expanded(
    dialect: str, text: str, regions, source_file: str = "<candidate>", fast_math: bool = False
) -> tuple[CodeView | None, CompileError | None]:
    """`text` as the compiler compiles it, for the rules to read (a
    CodeView: the lines preprocessing changes replaced by what it makes of
    them), or the source policy's refusal of the candidate's lines.

    The expansion is the source policy's (mlxsci/kernel/source/expansion.py),
    not clang's `-E`: the policy must run on this text anyway and keeps its
    expansion with its verdict (no second preprocessing, no compiler
    process per build); it reads no file and is bounded in time and output
    on hostile text; and it is what the policy vouched for, with every `#if`
    decided as every compiler decides it (the policy refuses a condition on
    a name the candidate did not set, except `__FAST_MATH__`, set as the
    build sets it). Only the candidate's own lines are expanded: the
    prelude's macros are the runtime's, not the candidate's, and MLX's
    generated lines are read as generated. The suite checks this expansion
    against the toolchain's clang -E on every twin of the rules
    (tests/backends/sim/test_metal_rules_macros.py)."""
    parts, refused = source_policy.expand_parts(
        dialect, candidate_parts(text, regions), source_file, fast_math
    )
    if parts is None:
        return None, refused
    lines = code_only(text).split("\n")
    changed: set[int] = set()
    moved: dict[int, list[tuple[int, int, int]]] = {}
    own = [r for r in regions if r.file != SIGNATURE_FILE]
    for region, part in zip(own, parts):
        for line, code in part.lines.items():
            at = region.first + (line - region.start_line)
            lines[at - 1] = code
            changed.add(at)
            if line in part.moved:
                moved[at] = part.moved[line]
    return CodeView("\n".join(lines), frozenset(changed), moved), None


def candidate_parts(text: str, regions) -> list[tuple[str, int]]:
    """The candidate's own parts of `text` (its header, its body) as
    (text, first line in the candidate file); the generated lines are not
    the candidate's."""
    lines = text.split("\n")
    return [
        ("\n".join(lines[r.first - 1 : r.last]) + "\n", r.start_line)
        for r in regions
        if r.file != SIGNATURE_FILE
    ]
