"""The backends, each described once, and backend selection: metal if
available, else cuda, else the CPU simulator.

`BACKENDS` says what the rest of mlxsci needs to know about a backend without
importing it (MLX's GPU builds and the simulator's compiler are heavy): where
its class lives, its own timer, whether NVIDIA's compute-sanitizer checks its
kernels, whether Metal-Sci's published chip ceilings describe its devices,
and what one run asks of a Ray cluster. Modules ask this table instead of
comparing backend names. What a backend does (the dialects it runs, whether
a candidate's code runs natively, its once-per-machine set-up...) its class
answers (mlxsci.backends.base.Backend); `backend_options` asks it which
options make it run a dialect and model a GPU (the simulator's --sim-gpu).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from mlxsci.backends.base import Backend
from mlxsci.kernel import dialects


@dataclass(frozen=True)
class BackendInfo:
    name: str
    module: str  # where its class is, imported when the backend is asked for
    class_name: str
    timer: str  # its own timer: sim, cupti (wall without cupti-python), wall
    sanitizable: bool  # compute-sanitizer (--sanitize) checks its kernels
    chip_table: bool  # Metal-Sci's published chip ceilings describe its devices
    ray_task: dict  # the Ray options of one run on it
    ray_limit: str  # the Ray resource that limits how many run at once
    # What a prompt adds after the backend's name, so a model knows how far to
    # trust the timings it is shown.
    prompt_note: str = ""


BACKENDS = {
    b.name: b
    for b in (
        BackendInfo(
            "metal",
            "mlxsci.backends.mlx_gpu",
            "MetalBackend",
            timer="wall",
            sanitizable=False,
            chip_table=True,
            ray_task={"num_cpus": 1, "resources": {"apple_gpu": 1}},
            ray_limit="apple_gpu",
        ),
        BackendInfo(
            "cuda",
            "mlxsci.backends.mlx_gpu",
            "CudaBackend",
            timer="cupti",
            sanitizable=True,
            chip_table=False,
            ray_task={"num_cpus": 1, "num_gpus": 1},
            ray_limit="GPU",
        ),
        BackendInfo(
            "sim",
            "mlxsci.backends.sim",
            "SimBackend",
            timer="sim",
            sanitizable=False,
            chip_table=False,
            ray_task={"num_cpus": 1},
            ray_limit="CPU",
            prompt_note=(
                " (MLX kernels simulated on the CPU: timings rank candidates only roughly, "
                "correctness is checked as on a GPU)"
            ),
        ),
    )
}
BACKEND_NAMES = tuple(BACKENDS)

# --sim-gpu's help, the same on every command that takes it (its choices are
# the files of mlxsci/backends/sim/gpus/, one per GPU).
SIM_GPU_HELP = (
    "The GPU the simulator's clock models (--backend sim only). Default: the "
    "dialect's: apple-m1-pro for Metal, nvidia-h100 for CUDA."
)


def backend_info(name: str) -> BackendInfo:
    """The description of backend `name`; ValueError naming the choices otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from auto, {', '.join(BACKEND_NAMES)}")
    return BACKENDS[name]


def sanitizable(name: str) -> bool:
    """Whether compute-sanitizer checks this backend's kernels (False for auto)."""
    return name in BACKENDS and BACKENDS[name].sanitizable


def has_chip_table(name: str) -> bool:
    """Whether Metal-Sci's published chip ceilings describe this backend's devices."""
    return name in BACKENDS and BACKENDS[name].chip_table


def backend_class(name: str) -> type[Backend]:
    info = backend_info(name)
    return getattr(importlib.import_module(info.module), info.class_name)


def backend_options(name: str, dialect: str | None, sim_gpu: str | None = None) -> dict:
    """The options that make backend `name` run `dialect` (none when no
    dialect is asked for) and model the GPU `sim_gpu` (gpu_options): the
    class answers (Backend.dialect_options); a GPU backend runs its own
    dialect only, the simulator either. ValueError for an unknown dialect or
    one the backend cannot run, and as gpu_options says."""
    options = {}
    if dialect is not None:
        dialects.get(dialect)
        options = backend_class(name).dialect_options(dialect)
    return {**options, **gpu_options(name, sim_gpu)}


def gpu_options(name: str, sim_gpu: str | None) -> dict:
    """The options that make backend `name` model the GPU named `sim_gpu`
    (--sim-gpu; None: its default, none given): the class answers
    (Backend.gpu_options). ValueError for a name given to a backend that
    times a real GPU, and for a GPU the simulator does not model (naming the
    ones it does)."""
    return backend_class(name).gpu_options(sim_gpu)


def modelled_gpu(name: str, dialect: str | None, sim_gpu: str | None = None) -> str | None:
    """The name of the GPU whose modelled clock times backend `name`'s
    kernels in `dialect` (None: the backend's own) with --sim-gpu `sim_gpu`:
    the one named, else the dialect's default; None on a GPU backend."""
    cls = backend_class(name)
    return cls.modelled_gpu(dialect or cls.dialect, sim_gpu)


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
