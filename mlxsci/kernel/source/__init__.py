"""The source policy: what a candidate's text may hold, checked as a C++
preprocessor and lexer see it, before any compiler does.

What other layers use, importable from here (mlxsci/kernel/source/policy.py):
`refusal` (why a parsed candidate is refused, as a verdict's line),
`check_candidate` and `check_parts` (the CompileError at the offending line).
"""

from mlxsci.kernel.source.policy import check_candidate, check_parts, refusal

__all__ = ["check_candidate", "check_parts", "refusal"]
