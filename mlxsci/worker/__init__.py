"""The untrusted side: the worker process that runs one candidate (`python -m mlxsci.worker`). It imports nothing of the trusted side (mlxsci.evaluation)."""
