"""`python -m mlxsci.roofline`."""

import sys

from mlxsci.roofline.store import main

sys.exit(main())
