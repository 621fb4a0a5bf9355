"""Tables and plots from search run directories: `python -m mlxsci.report RUNS...`.

mlxsci/report/build.py is the command and its functions; runs.py finds and
loads run directories, tables.py and plots.py render them, spread.py sums up
repeated runs, suite_table.py writes the task table of the docs. Matplotlib is
loaded only when plots are asked for.
"""

from mlxsci.report.build import main, report_files, report_text

__all__ = ["main", "report_files", "report_text"]
