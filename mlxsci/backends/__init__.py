"""Backend selection: metal if available, else cuda, else the CPU simulator."""

from __future__ import annotations

from mlxsci.backends.base import Backend

BACKEND_NAMES = ("metal", "cuda", "sim")


def backend_class(name: str) -> type[Backend]:
    if name == "metal":
        from mlxsci.backends.mlx_gpu import MetalBackend

        return MetalBackend
    if name == "cuda":
        from mlxsci.backends.mlx_gpu import CudaBackend

        return CudaBackend
    if name == "sim":
        from mlxsci.backends.sim import SimBackend

        return SimBackend
    raise ValueError(f"unknown backend {name!r}; choose from auto, {', '.join(BACKEND_NAMES)}")


def resolve_backend_name(name: str = "auto") -> str:
    if name != "auto":
        backend_class(name)  # validates the name
        return name
    for candidate in ("metal", "cuda"):
        if backend_class(candidate).available():
            return candidate
    return "sim"


def get_backend(name: str = "auto", **options) -> Backend:
    name = resolve_backend_name(name)
    cls = backend_class(name)
    if not cls.available():
        raise RuntimeError(f"backend {name!r} is not available on this machine")
    return cls(**options)
