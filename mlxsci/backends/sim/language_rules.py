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
"""

from __future__ import annotations

from mlxsci.backends.base import CompileError
from mlxsci.backends.sim.cuda_rules import check_cuda
from mlxsci.backends.sim.metal_rules import check_metal

__all__ = ["check", "check_metal", "check_cuda", "CHECKS"]


CHECKS = {"metal": check_metal, "cuda": check_cuda}


def check(
    dialect: str, text: str, regions, source_file: str = "<candidate>"
) -> CompileError | None:
    """The first violation of `dialect`'s language rules in `text` (the
    exact text MLX compiles), or None."""
    return CHECKS[dialect](text, regions, source_file)
