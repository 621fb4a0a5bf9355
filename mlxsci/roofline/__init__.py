"""The roofline, measured on the machine: `python -m mlxsci.roofline`.

A task's roofline time at a size is max(bytes / bw(working set), flops /
peak): ceilings.py is the record and the arithmetic, probes.py measures it with
the probe kernels in kernels/, store.py keeps one record per backend and timer
and is the command.
"""

from mlxsci.roofline.ceilings import Roofline
from mlxsci.roofline.store import load_or_measure, main

__all__ = ["Roofline", "load_or_measure", "main"]
