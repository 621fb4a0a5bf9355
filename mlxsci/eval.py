"""`python -m mlxsci.eval TASK`: the evaluation verb's command line, which
lives with `evaluate()` in mlxsci/evaluation.py (`mlxsci eval TASK` is the same).

Only this spelling needs a module of its own: `import mlxsci` imports
mlxsci.evaluation, and runpy warns when a module run with -m is already in
sys.modules, so `python -m mlxsci.evaluation` would warn on every run.
"""

import sys

from mlxsci.evaluation import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
