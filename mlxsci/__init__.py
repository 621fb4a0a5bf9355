"""mlxsci: an MLX-native benchmark and search harness for scientific GPU kernels.

From Python (mlxsci/api.py): `load_task(name_or_folder)`, `evaluate(task,
source, backend=..., size_set=...)`, `kernel_function(task, source)` (a
candidate as a function over MLX arrays), `task_inputs(task, size)` and
`task_from_kernel(kernel, reference=..., make_inputs=..., sizes=..., ...)`
(a task of one `mlxsci.fast` kernel: mlxsci/fast/as_task.py).
`mlxsci.evaluate` is the function; it lives in mlxsci/evaluation/evaluator.py (`from
mlxsci.evaluation import ...`), its `eval` command line in mlxsci/eval.py;
`compare` in mlxsci/evaluation/comparison.py.
No name exported here is also a module's name, so none hides a module.

The API is imported on first use of one of its names, not with the package:
the sandboxed worker (mlxsci.sandbox.boot) imports `mlxsci.sandbox` while its
process still has a single thread, which importing MLX and NumPy would end,
and the worker that runs a candidate should not load the trusted side
(evaluation, checks, references) at all.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "load_task",
    "evaluate",
    "kernel_function",
    "task_inputs",
    "task_from_kernel",
    "KernelFunction",
]


def _check_mlx() -> None:
    try:
        import mlx.core  # noqa: F401
    except ImportError as exc:  # MLX's Linux wheels need a backend extra
        raise ImportError(
            "mlxsci needs a working MLX. On Linux install one backend: "
            "pip install 'mlxsci[cpu]' (CPU and the simulator) or 'mlxsci[cuda]' "
            f"(NVIDIA GPUs), not both; on macOS plain 'mlx' brings Metal. ({exc})"
        ) from exc


def __getattr__(name: str) -> Any:
    if name in __all__:
        _check_mlx()
        from mlxsci import api

        return getattr(api, name)
    raise AttributeError(f"module 'mlxsci' has no attribute {name!r}")
