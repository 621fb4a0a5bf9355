"""The roofline, measured on the machine: `python -m mlxsci.roofline`.

A task's roofline time at a size is max(bytes / bw(working set), flops /
peak): ceilings.py is the record and the arithmetic, probes.py measures it with
the probe kernels in kernels/, store.py keeps one record per backend and timer
and is the command.

What other layers use, importable from here: `Roofline` and
`metal_sci_ceiling` (ceilings.py), `load_or_measure` and `cache_path`
(store.py), and the command's `main`.
"""

from mlxsci.roofline.ceilings import Roofline, metal_sci_ceiling
from mlxsci.roofline.store import cache_path, load_or_measure, main

__all__ = ["Roofline", "cache_path", "load_or_measure", "main", "metal_sci_ceiling"]
