"""`python -m mlxsci.sweep`."""

import sys

from mlxsci.sweep.sweeper import main

sys.exit(main())
