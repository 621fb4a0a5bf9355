"""Many searches: `python -m mlxsci.sweep`, in this process or as Ray tasks.

mlxsci/sweep/sweeper.py is the command and `sweep()`; runs.py names, plans
and runs the searches; budget.py shares a cost cap between them;
ray_executor.py runs them as Ray tasks; arguments.py checks the command line.
"""

from mlxsci.sweep.sweeper import main, sweep

__all__ = ["main", "sweep"]
