"""`python -m mlxsci VERB ...`: the `mlxsci` command (mlxsci/cli.py)."""

import sys

from mlxsci.cli import main

if __name__ == "__main__":
    sys.exit(main())
