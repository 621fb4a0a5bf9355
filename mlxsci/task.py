"""Task contracts: what a task fixes and what a candidate may choose.

A task (one folder under tasks/) fixes the kernel names and buffers, the
sizes, the inputs, what the host does between kernels, and the roofline
model. A candidate chooses kernel bodies, helpers, params and launch shape.
Every task folder has the same shape: `task.py` defining `TASK = Task(...)`,
`seed.metal` and (later) `seed.cu`. The matching NumPy reference lives in
reference/<name>.py and never imports anything from here.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SIZE_SETS = ("smoke", "in-dist", "held-out")


@dataclass(frozen=True)
class KernelContract:
    """One kernel of a task: Metal-Sci's kernel name and MLX-native buffers.

    `grid` and `threadgroup` are the default launch expressions (integer
    arithmetic over the size's integer parameters and the candidate's params);
    a candidate may override both. `init_value` is for kernels whose outputs
    must start at a known value (atomic scatter); such outputs cannot be
    poisoned by the evaluator.
    """
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    grid: str
    threadgroup: str
    atomic_outputs: bool = False
    init_value: float | None = None


@dataclass(frozen=True)
class Size:
    """A named problem size: e.g. Size("256x256x50", {"NX": 256, "NY": 256, "n_steps": 50})."""
    label: str
    params: dict


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    kernels: tuple[KernelContract, ...]
    sizes: dict                        # size set name -> tuple[Size, ...]
    defaults: dict                     # default params for user-given sizes (--size)
    make_inputs: Callable[[dict], dict]        # params -> {name: np.ndarray} (scalars 0-d)
    run: Callable                              # (launch, inputs, params) -> {result: array}
    bytes_moved: Callable[[dict], float]       # roofline model: bytes per pipeline run
    flops: Callable[[dict], float]             # FLOPs per pipeline run
    working_set: Callable[[dict], float]       # bytes touched (picks the bandwidth level)
    bound: str                                 # "bandwidth" or "compute": the scored quantity
    validate_size: Callable[[dict], None] = lambda params: None  # raises ValueError
    # Input name -> name of the result (a key of the dict `run` returns) that
    # feeds that input in a next run, so that runs enqueued back to back each
    # start from the previous run's results (they serialize on the GPU and none
    # can be skipped). The result must have exactly the input's shape and
    # dtype. Every input the kernels consume as evolving state is chained;
    # constants (sizes, scalars, tables) are not. See chain_inputs.
    chain: dict = field(default_factory=dict)
    # For the suite table (README): Metal-Sci's regime, what is checked with
    # which tolerance, and the scored roofline model, in words.
    regime: str = ""
    check: str = ""
    tolerance: str = ""
    model: str = ""
    folder: Path = field(default=Path("."), compare=False)
    origin: str = ""   # what load_task was given, for worker processes; "" = the name

    @property
    def ref(self) -> str:
        """How another process loads this task (its name, or its folder if custom)."""
        return self.origin or self.name

    def kernel(self, name: str) -> KernelContract:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.kernels]

    def seed_path(self, dialect: str = "metal") -> Path:
        return self.folder / ("seed.metal" if dialect == "metal" else "seed.cu")

    def seed(self, dialect: str = "metal") -> str:
        return self.seed_path(dialect).read_text()

    def size_set(self, which: str) -> tuple[Size, ...]:
        if which == "all":
            return tuple(s for key in SIZE_SETS for s in self.sizes[key])
        if which not in self.sizes:
            raise ValueError(f"unknown size set {which!r}; choose from "
                             f"{', '.join(SIZE_SETS + ('all',))}")
        return tuple(self.sizes[which])

    def is_held_out(self, size: Size) -> bool:
        return self._in_set(size, "held-out")

    def is_in_dist(self, size: Size) -> bool:
        return self._in_set(size, "in-dist")

    def _in_set(self, size: Size, which: str) -> bool:
        return any(size.label == s.label and size.params == s.params
                   for s in self.sizes.get(which, ()))

    def custom_size(self, given: dict) -> Size:
        """A user-given size: unspecified parameters take the defaults."""
        unknown = set(given) - set(self.defaults)
        if unknown:
            raise ValueError(f"unknown size parameter(s) {', '.join(sorted(unknown))} for "
                             f"{self.name}; known: {', '.join(self.defaults)}")
        params = dict(self.defaults)
        for key, value in given.items():
            kind = type(self.defaults[key])
            try:
                params[key] = kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"size parameter {key} must be {kind.__name__}, got {value!r}")
        self.validate_size(params)
        label = ",".join(f"{k}={params[k]}" for k in self.defaults)
        return Size(label, params)

    def launch_names(self, params: dict) -> dict:
        """Integer size parameters usable in launch expressions."""
        return {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}


def chain_inputs(task: Task, inputs: dict, results: dict) -> dict:
    """The inputs of a next run: a copy of `inputs` with each chained input
    replaced by the result that feeds it (task.chain)."""
    following = dict(inputs)
    for name, result in task.chain.items():
        following[name] = results[result]
    return following


def step_counter(launch, value: int):
    """A per-step counter (0-d uint32) for a task's run. A Launcher makes each
    one once on the device and reuses it (Launcher.counter); a plain function
    standing in for launch (a dry run that records the launches) gets a fresh
    array, as it never times anything."""
    if hasattr(launch, "counter"):
        return launch.counter(value)
    import mlx.core as mx
    return mx.array(value, dtype=mx.uint32)


def task_names() -> list[str]:
    import mlxsci.tasks as pkg
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.ispkg)


# Tasks defined outside the package (your own task folder), by name -> folder.
_CUSTOM: dict = {}
_CUSTOM_REFERENCES: dict = {}


def _import_file(path: Path, module_name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as a normal import does: inspect.getmodule (the
    # reference cache key hashes the task module's source) and dataclasses look
    # modules up in sys.modules.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_task(name: str) -> Task:
    """A task by name (tasks/ in the package) or by the path of a task folder
    of your own: the folder holds task.py (TASK = Task(...)), reference.py
    (solve, tolerance) and seed.metal / seed.cu, the same shape as tasks/."""
    if name in _CUSTOM:
        name = str(_CUSTOM[name])
    folder = Path(name)
    if folder.name == "task.py":
        folder = folder.parent
    if (folder / "task.py").is_file() and (os.sep in name or name.startswith(".")
                                           or name not in task_names()):
        folder = folder.resolve()
        module = _import_file(folder / "task.py", f"mlxsci_custom_task_{abs(hash(folder))}")
        task = module.TASK
        if not (folder / "reference.py").is_file():
            raise ValueError(f"{folder} has no reference.py (solve, tolerance)")
        if task.name in task_names():
            raise ValueError(f"custom task {task.name!r} has the name of a built-in task")
        _CUSTOM[task.name] = folder
        return dataclasses.replace(task, folder=folder, origin=str(folder))
    if name not in task_names():
        raise ValueError(f"unknown task {name!r}; available: {', '.join(task_names())} "
                         "(or the path of a task folder of your own)")
    module = importlib.import_module(f"mlxsci.tasks.{name}.task")
    return module.TASK


def load_reference(name: str):
    """The checker side: reference/<name>.py (solve, tolerance, optional error),
    or reference.py beside a custom task's task.py."""
    if name in _CUSTOM:
        if name not in _CUSTOM_REFERENCES:
            _CUSTOM_REFERENCES[name] = _import_file(_CUSTOM[name] / "reference.py",
                                                    f"mlxsci_custom_reference_{name}")
        return _CUSTOM_REFERENCES[name]
    return importlib.import_module(f"mlxsci.reference.{name}")
