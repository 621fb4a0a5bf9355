"""mlxsci: an MLX-native benchmark and search harness for scientific GPU kernels.

From Python (mlxsci/api.py): `load_task(name_or_folder)`, `evaluate(task,
source, backend=..., size_set=...)`, `kernel_function(task, source)` (a
candidate as a function over MLX arrays) and `task_inputs(task, size)`.
`mlxsci.evaluate` is the function; it lives, with `compare` and the `eval`
command line, in mlxsci/evaluation.py (`from mlxsci.evaluation import ...`).
No name exported here is also a module's name, so none hides a module.
"""

try:
    import mlx.core  # noqa: F401
except ImportError as exc:  # MLX's Linux wheels need a backend extra
    raise ImportError(
        "mlxsci needs a working MLX. On Linux install one backend: "
        "pip install 'mlxsci[cpu]' (CPU and the simulator) or 'mlxsci[cuda]' "
        f"(NVIDIA GPUs), not both; on macOS plain 'mlx' brings Metal. ({exc})"
    ) from exc

from mlxsci.api import KernelFunction, evaluate, kernel_function, load_task, task_inputs  # noqa: E402

__all__ = ["load_task", "evaluate", "kernel_function", "task_inputs", "KernelFunction"]
