"""LLM-driven kernel search: `python -m mlxsci.search`, or `mlxsci.search.run(...)`."""


def run(*args, **kwargs):
    """See mlxsci.search.loop.run."""
    from mlxsci.search.loop import run as _run

    return _run(*args, **kwargs)
