"""`python -m mlxsci.sandbox.boot WORKER_ARGS...`: a sandboxed worker's first step.

Started by the parent (mlxsci.evaluation.runner) with the policy in $MLXSCI_SANDBOX. It
runs while the process still has a single thread (nothing but the standard
library is imported yet), puts every layer of mlxsci.sandbox in place, and
only then runs `mlxsci.worker` with WORKER_ARGS, which imports MLX and NumPy
and, later, loads the candidate's code.
"""

import sys

from mlxsci.sandbox import main_of_boot

if __name__ == "__main__":
    sys.exit(main_of_boot(sys.argv[1:]))
