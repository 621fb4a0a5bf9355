"""mlxsci: an MLX-native benchmark and search harness for scientific GPU kernels."""
try:
    import mlx.core  # noqa: F401
except ImportError as exc:  # MLX's Linux wheels need a backend extra
    raise ImportError(
        "mlxsci needs a working MLX. On Linux install one backend: "
        "pip install 'mlxsci[cpu]' (CPU and the simulator) or 'mlxsci[cuda]' "
        f"(NVIDIA GPUs), not both; on macOS plain 'mlx' brings Metal. ({exc})") from exc
