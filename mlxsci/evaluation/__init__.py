"""The trusted side of an evaluation: run a candidate in worker processes,
check its outputs against references, give verdicts and scores.

What other layers and users call, importable from here: `evaluate()` (=
`mlxsci.evaluate`) and its records (`Evaluation`, `SizeResult`,
`format_evaluation`), `compare()` (two candidates timed against each
other), `misfit` (why a candidate does not fit its task), `check_sanitize`
(what --sanitize needs), the verdicts on a change of score (`assess`,
`assess_summary`, `band`, `change`, `IMPROVED`, `REGRESSED`, `NOISE_FLOOR`:
verdicts.py), the redaction of secrets in what is recorded (`redact`,
`redact_json`, `remember_secret`), and the command line's task argument
(`TaskArgument`). The modules here are the protocol's parts
(mlxsci/evaluation/evaluator.py drives them). Nothing here is imported by
the worker (mlxsci/worker/), which runs the candidate's code.
"""

from mlxsci.evaluation.arguments import TaskArgument
from mlxsci.evaluation.checks import misfit
from mlxsci.evaluation.comparison import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.redaction import redact, redact_json, remember_secret
from mlxsci.evaluation.results import Evaluation, SizeResult, format_evaluation
from mlxsci.evaluation.sanitizer import check_sanitize
from mlxsci.evaluation.verdicts import (
    IMPROVED,
    NOISE_FLOOR,
    REGRESSED,
    assess,
    assess_summary,
    band,
    change,
)

__all__ = [
    "IMPROVED",
    "NOISE_FLOOR",
    "REGRESSED",
    "Evaluation",
    "SizeResult",
    "TaskArgument",
    "assess",
    "assess_summary",
    "band",
    "change",
    "check_sanitize",
    "compare",
    "evaluate",
    "format_evaluation",
    "misfit",
    "redact",
    "redact_json",
    "remember_secret",
]
