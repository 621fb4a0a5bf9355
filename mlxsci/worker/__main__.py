"""`python -m mlxsci.worker`."""

import sys

from mlxsci.worker.serve import main

sys.exit(main())
