"""The untrusted side: the worker process that runs one candidate
(`python -m mlxsci.worker`, mlxsci/worker/serve.py). It imports nothing of
the trusted side (mlxsci.evaluation, roofline, search, report, sweep).

This package's __init__ imports nothing, on purpose: mlxsci.api imports
`mlxsci.worker.launch.Launcher` (a candidate's kernels launched as a task's
pipeline asks, also in the caller's process), which must not load the
worker's process machinery. What other layers use: `launch.Launcher`, and
the worker's command line (mlxsci.evaluation.runner starts it).
"""
