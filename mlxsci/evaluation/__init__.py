"""The trusted side of an evaluation: run a candidate in worker processes,
check its outputs against references, give verdicts and scores.

`evaluate()` (= `mlxsci.evaluate`) and `compare()` are what other layers and
users call; the modules here are the protocol's parts (mlxsci/evaluation/
evaluator.py drives them). Nothing here is imported by the worker
(mlxsci/worker/), which runs the candidate's code.
"""

from mlxsci.evaluation.compare import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.results import Evaluation, SizeResult

__all__ = ["Evaluation", "SizeResult", "compare", "evaluate"]
