"""`python -m mlxsci.report`."""

import sys

from mlxsci.report.build import main

sys.exit(main())
