"""Does an in-distribution win transfer? (issue 25)

"Gaming Without an Attacker" (arXiv 2608.08722) found that 30 % of
Metal-Sci's in-distribution wins fail to transfer to the held-out
configuration, in four ways: A, a branch tuned for the measured case beside
a slow fallback; B, a wrong arm that never runs in-distribution; C, a
disclosed held-out configuration enumerated; D, overfitting to the
in-distribution data's statistics. This package grades a candidate against
a baseline (a search's best against its seed) by those four, or
`transfers`, or `no-win`, with the evidence for it (docs/transfer.md):

- mlxsci/transfer/size_literals.py: the static scan of the candidate's
  source for comparisons, case labels and template arguments on a value of
  the task's listed sizes (`scan`, `Finding`);
- mlxsci/transfer/grading.py: the grade as a pure function of measurements
  (`grade`, `Measurements`, `Place`, `Figure`, `TRANSFER_FRACTION`);
- mlxsci/transfer/coverage.py: branch coverage read from an evaluation;
- mlxsci/transfer/measurement.py: `judge_transfer`, which evaluates what
  the grade needs and grades it (what a search calls at the end of a run);
- mlxsci/transfer/__main__.py: `python -m mlxsci.transfer TASK CANDIDATE`.

It sits between the evaluation (whose verdicts and evaluate() it uses) and
the search (which calls judge_transfer).
"""

from mlxsci.transfer.grading import (
    GRADES,
    NO_WIN,
    TRANSFER_FRACTION,
    TRANSFERS,
    Figure,
    Measurements,
    Place,
    grade,
)
from mlxsci.transfer.measurement import judge_transfer
from mlxsci.transfer.size_literals import Finding, ScanError, scan

__all__ = [
    "GRADES",
    "NO_WIN",
    "TRANSFERS",
    "TRANSFER_FRACTION",
    "Figure",
    "Finding",
    "Measurements",
    "Place",
    "ScanError",
    "grade",
    "judge_transfer",
    "scan",
]
