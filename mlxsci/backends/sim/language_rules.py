"""Language rules the real kernel compilers enforce and clang-as-C++ does not.

The simulator compiles MLX's generated kernel text as C++17 with a prelude
that defines Metal's address spaces away and gives CUDA a host C++ library,
so it accepts kernels that Apple's Metal compiler or NVRTC reject. This module
reads the generated text (comments and strings blanked) before it is built
and reports the first such violation as a CompileError in clang's format,
mapped to the candidate's own file and line through the dialect's Regions.

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
from mlxsci.backends.sim.metal_rules import check_metal
from mlxsci.kernel.source import policy as source_policy
from mlxsci.kernel.spec import CompileError

__all__ = ["check", "check_metal", "check_cuda", "CHECKS"]


CHECKS = {"metal": check_metal, "cuda": check_cuda}


def check(
    dialect: str, text: str, regions, source_file: str = "<candidate>", fast_math: bool = False
) -> CompileError | None:
    """The first violation of `dialect`'s language rules in `text` (the
    exact text MLX compiles), or else the source policy's refusal of the
    candidate's lines in it, or None. `fast_math`: built with Metal's fast
    math mode."""
    violation = CHECKS[dialect](text, regions, source_file)
    if violation is not None:
        return violation
    return source_policy.check_parts(
        dialect, candidate_parts(text, regions), source_file, fast_math
    )


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
