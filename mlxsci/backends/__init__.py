"""The backends, each described once, and backend selection: metal if
available, else cuda, else the CPU simulator.

`BACKENDS` says what the rest of mlxsci needs to know about a backend without
importing it (MLX's GPU builds and the simulator's compiler are heavy), one
entry per backend: where its class lives, its own timer, the runs and seconds
a size gets (its timing budget), how the roofline probes it, whether its
clock is modelled, the environment its worker keeps, whether NVIDIA's
compute-sanitizer checks its kernels, whether Metal-Sci's published chip
ceilings describe its devices, and what one run asks of a Ray cluster.
Modules ask this table instead of comparing backend names, and no module
outside mlxsci/backends/ imports a backend's own modules
(tests/test_structure.py checks it). What a backend does (the dialects it runs, whether
a candidate's code runs natively, its once-per-machine set-up...) its class
answers (mlxsci.backends.base.Backend); `backend_options` asks it which
options make it run a dialect and model a GPU (the simulator's --sim-gpu).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from mlxsci.backends.base import Backend
from mlxsci.kernel import dialects
from mlxsci.protocol.jobs import RunCap, TimingBudget


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
    budget: TimingBudget  # the runs and seconds a size gets
    probe_plan: dict  # how the roofline probes it (mlxsci.roofline.probes)
    # Its clock is a model (the simulator's), not a device's: the same
    # kernel takes the same modelled time every run.
    modelled: bool
    # The variables its worker keeps beside everyone's
    # (mlxsci.evaluation.redaction.minimal_worker_env).
    environment: tuple[str, ...]
    # What a prompt adds after the backend's name, so a model knows how far to
    # trust the timings it is shown.
    prompt_note: str = ""


# A GPU: warm-up until the clocks settle, ten timed runs (CUPTI's or the
# wall clock's median), five minutes a size.
GPU_BUDGET = TimingBudget(
    n_warmup=3, n_measure=10, seconds_per_size=300.0, settle=RunCap(50, 10.0), extra_runs=None
)
# The simulator is deterministic and slow: fewer runs and more time. Its
# time is the fastest of its timed runs (mlxsci.timing.timers.SimTimer), and
# the fastest of more runs is steadier: runs that take little host time go
# on past the minimum, up to 15 runs or half a second of timed runs.
SIM_BUDGET = TimingBudget(
    n_warmup=1, n_measure=3, seconds_per_size=900.0, settle=RunCap(0, 0.0),
    extra_runs=RunCap(15, 0.5),
)  # fmt: skip

# Roofline probe plans (mlxsci.roofline.probes). A GPU launch moves >= 1
# GiB so its own time (>= ~0.3 ms at 3 TB/s) dwarfs the few microseconds of
# its start and drain; 2^18 read threads is about one per thread slot of a
# large GPU (H100: 132 SMs x 2048). The simulator is about a thousand times slower than a GPU and
# has no launch ramp in its timer, so it probes less: 8 MiB a launch, sizes
# from the host's L2 to twice a 32 MiB L3; its read probe only runs at the
# smallest size, where it is checked rather than needed. The simulator runs
# a thread's passes back to back, so a shift of 256 float4 (4 KiB) would put
# all of them in one set of the host's L1 and thrash it (under a quarter of the
# one-pass bandwidth at 256 KiB): it uses threadgroups of 32 (a 512 B shift),
# the smallest that fills the 32 lanes its clock charges a group over
# (docs/simulator-time.md: a group of 16 would be charged twice its share, and
# every kernel with groups of 32 or more would outrun the probes). Of 16, 32,
# 64 and 128 on a 2-core x86-64 host, 32 measured the highest modeled
# bandwidth at every size but 1 MiB (within 4 % of 64 there).
GPU_PROBES = {
    "sizes": [2**k for k in range(16, 31)],
    "bytes_per_launch": 2**30,
    "threadgroup": 256,
    "read_threads": 2**18,
    "fma_threads": 2**22,
    "fma_iters": 1024,
    "settle": {"min_runs": 3, "max_runs": 20, "max_seconds": 2.0},
    "timed_runs": 5,
}
SIM_PROBES = {
    "sizes": [2**k for k in range(16, 27, 2)],
    "bytes_per_launch": 2**23,
    "threadgroup": 32,
    "read_threads": 2**12,
    "fma_threads": 4096,
    "fma_iters": 256,
    "settle": {"min_runs": 1, "max_runs": 3, "max_seconds": 0.5},
    "timed_runs": 3,
}

# What each backend's worker keeps of the environment beside everyone's: the
# simulator's switches and, for a worker that builds its own kernels
# (MLXSCI_UNSANDBOXED), where zig keeps its cache (mlxsci/backends/sim/toolchain.py);
# CUDA's device choice, toolkit, JIT cache and numerics switches; Metal needs nothing.
CUDA_ENVIRONMENT = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_CACHE_PATH",
    "CUDA_CACHE_MAXSIZE",
    "CUDA_CACHE_DISABLE",
    "CUDA_MODULE_LOADING",
    "CUDA_LAUNCH_BLOCKING",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NVIDIA_TF32_OVERRIDE",
)
SIM_ENVIRONMENT = (
    "MLXSCI_SIM_CLOCK",
    "MLXSCI_SIM_FIBERS",
    "MLXSCI_SIM_SCHEDULE",
    "MLXSCI_SIM_UCONTEXT",
    "ZIG_GLOBAL_CACHE_DIR",
    "XDG_CACHE_HOME",
)

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
            budget=GPU_BUDGET,
            probe_plan=GPU_PROBES,
            modelled=False,
            environment=(),
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
            budget=GPU_BUDGET,
            probe_plan=GPU_PROBES,
            modelled=False,
            environment=CUDA_ENVIRONMENT,
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
            budget=SIM_BUDGET,
            probe_plan=SIM_PROBES,
            modelled=True,
            environment=SIM_ENVIRONMENT,
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


def sim_gpu_names() -> list[str]:
    """The GPUs the simulator's clock can model (--sim-gpu's choices: the
    files of mlxsci/backends/sim/gpus/)."""
    from mlxsci.backends.sim import gpus

    return gpus.names()


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
