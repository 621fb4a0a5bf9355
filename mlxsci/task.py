"""Task contracts: what a task fixes and what a candidate may choose.

A task (one folder under tasks/) fixes the kernel names and buffers, the
sizes, the inputs, what the host does between kernels, and the roofline
model. A candidate chooses kernel bodies, helpers, params and launch shape.
Every task folder has the same shape: `task.py` defining `TASK = Task(...)`,
`seed.metal` and `seed.cu`, one seed per dialect. The matching NumPy reference
lives in reference/<name>.py (reference.py beside task.py for a task folder of
your own, e.g. examples/conv1d) and never imports anything from here.
docs/architecture.md ("The task contract") describes the whole contract.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlxsci.kernel import dialects

SIZE_SETS = ("smoke", "in-dist", "held-out")


@dataclass(frozen=True)
class KernelContract:
    """One kernel of a task: Metal-Sci's kernel name and MLX-native buffers.

    `grid` and `threadgroup` are the default launch expressions (integer
    arithmetic over the size's integer parameters and the candidate's params);
    a candidate may override both. `init_value` is for kernels whose outputs
    must start at a known value (atomic scatter); such outputs cannot be
    poisoned by the evaluator. `in_place` lists the outputs a candidate may
    have start as a copy of an input.
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    grid: str
    threadgroup: str
    atomic_outputs: bool = False
    init_value: float | None = None
    # (output, input) pairs a candidate may bind with `//! inplace OUT = IN`:
    # the output starts as a copy of the input (Metal-Sci's read-write
    # buffers; mlxsci/kernel/in_place.py).
    in_place: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Size:
    """A named problem size: e.g. Size("256x256x50", {"NX": 256, "NY": 256, "n_steps": 50}).

    `held_out`: a configuration drawn as a held-out (mlxsci/held_out.py)
    rather than listed in the task's held-out set; its label says nothing of
    its values ("secret held-out"), so no progress line or failure text
    written before the draw is revealed names them. A size's params may hold
    "distribution": the name of one of the task's input distributions
    (Task.distributions) its inputs are drawn from instead of make_inputs'.
    """

    label: str
    params: dict
    held_out: bool = False


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    kernels: tuple[KernelContract, ...]
    sizes: dict  # size set name -> tuple[Size, ...]
    defaults: dict  # default params for user-given sizes (--size)
    # (params, seed=None) -> {name: np.ndarray} (scalars 0-d). seed None: the
    # fixed (Metal-Sci) data; an int: data drawn from that secret seed (input_rng).
    make_inputs: Callable[..., dict]
    run: Callable  # (launch, inputs, params) -> {result: array}
    bytes_moved: Callable[[dict], float]  # roofline model: bytes per pipeline run
    flops: Callable[[dict], float]  # FLOPs per pipeline run
    working_set: Callable[[dict], float]  # bytes touched (picks the bandwidth level)
    bound: str  # "bandwidth" or "compute": the scored quantity
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
    # The held-out gate (mlxsci/held_out.py). draw_held_out: (rng) -> the
    # params of a held-out configuration drawn with that numpy Generator:
    # every key of `defaults`, off the power-of-two grid and away from every
    # listed size (held_out.draw_problems says what a draw must satisfy; it
    # is drawn again until it does), and where the task has one, an input
    # distribution under the key "distribution". None: the task has no
    # secret held-out (a task folder of your own), only its listed one.
    draw_held_out: Callable | None = None
    # Input distributions besides make_inputs' own: name -> a function like
    # make_inputs ((params, seed=None) -> inputs) whose data differ in their
    # statistics (each task's physics decides: another initial field, mass
    # distribution, conditioning, temperature, density). The first is the
    # one a transfer check uses when no draw names one.
    distributions: dict = field(default_factory=dict)
    # Size parameters that must stay on the power-of-two grid (an FFT's
    # length): a draw may take their published values, and differs from
    # the listed sizes in other parameters or its distribution.
    power_of_two_params: tuple = ()
    # Folders (or single module files) beyond `folder` that the task's own
    # code imports from and the sandboxed worker may therefore read: a task
    # made by mlxsci.task_from_kernel imports the user's make_inputs from
    # their package. Nothing else of the machine is opened to a candidate.
    code_paths: tuple[str, ...] = ()
    folder: Path = field(default=Path("."), compare=False)
    origin: str = ""  # what load_task was given, for worker processes; "" = the name

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
        return self.folder / dialects.get(dialect).file_name("seed")

    def seed(self, dialect: str = "metal") -> str:
        path = self.seed_path(dialect)
        if not path.is_file():
            have = ", ".join(self.seed_dialects()) or "none"
            raise ValueError(
                f"task {self.name} has no {dialects.get(dialect).language} seed ({path.name}); "
                f"its seeds' dialects: {have} (pass that dialect)"
            )
        return path.read_text()

    def seed_dialects(self) -> list[str]:
        """The dialects the task has a seed in."""
        return [name for name in dialects.NAMES if self.seed_path(name).is_file()]

    def size_set(self, which: str) -> tuple[Size, ...]:
        if which == "all":
            return tuple(s for key in SIZE_SETS for s in self.sizes[key])
        if which not in self.sizes:
            raise ValueError(
                f"unknown size set {which!r}; choose from {', '.join(SIZE_SETS + ('all',))}"
            )
        return tuple(self.sizes[which])

    def is_held_out(self, size: Size) -> bool:
        return size.held_out or self._in_set(size, "held-out")

    def is_in_dist(self, size: Size) -> bool:
        return self._in_set(size, "in-dist")

    def _in_set(self, size: Size, which: str) -> bool:
        return any(
            size.label == s.label and size.params == s.params for s in self.sizes.get(which, ())
        )

    def custom_size(self, given: dict) -> Size:
        """A user-given size: unspecified parameters take the defaults; a
        task with input distributions also takes distribution=NAME."""
        given = dict(given)
        distribution = given.pop("distribution", None)
        if distribution is not None and distribution not in self.distributions:
            known = ", ".join(self.distributions) or "none"
            raise ValueError(
                f"{self.name} has no input distribution {distribution!r} (it has: {known})"
            )
        unknown = set(given) - set(self.defaults)
        if unknown:
            raise ValueError(
                f"unknown size parameter(s) {', '.join(sorted(unknown))} for "
                f"{self.name}; known: {', '.join(self.defaults)}"
            )
        params = dict(self.defaults)
        for key, value in given.items():
            kind = type(self.defaults[key])
            try:
                params[key] = kind(value)
            except (TypeError, ValueError, OverflowError):
                raise ValueError(
                    f"size parameter {key} must be {kind.__name__}, got {value!r}"
                ) from None
            # float("inf") and float("nan") convert; no task has a use for them
            if kind is float and not math.isfinite(params[key]):
                raise ValueError(f"size parameter {key} must be a finite number, got {value!r}")
        self.validate_size(params)
        label = ",".join(f"{k}={params[k]}" for k in self.defaults)
        if distribution is not None:
            params["distribution"] = distribution
            label += f",distribution={distribution}"
        return Size(label, params)

    @property
    def takes_seed(self) -> bool:
        """Whether make_inputs draws its data from a seed it is given (every
        built-in task; a task folder of your own may not)."""
        try:
            return "seed" in inspect.signature(self.make_inputs).parameters
        except (TypeError, ValueError):
            return False

    def input_maker(self, params: dict) -> Callable[..., dict]:
        """The function that makes a size's inputs: make_inputs, or the
        distribution its params name (ValueError for one the task lacks)."""
        name = params.get("distribution")
        if name is None:
            return self.make_inputs
        if name not in self.distributions:
            known = ", ".join(self.distributions) or "none"
            raise ValueError(f"{self.name} has no input distribution {name!r} (it has: {known})")
        return self.distributions[name]

    def inputs(self, params: dict, seed: int | None = None) -> dict:
        """The size's inputs: drawn from `seed` where make_inputs takes one,
        else its fixed data (seed None, or a task that takes no seed); from
        the distribution the params name, if any."""
        make = self.input_maker(params)
        if seed is None or not self.takes_seed:
            return make(params)
        return make(params, seed=seed)

    def launch_names(self, params: dict) -> dict:
        """Integer size parameters usable in launch expressions."""
        return {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}


def input_rng(seed: int | None, fixed: int) -> np.random.Generator:
    """The generator a task's make_inputs draws data from: seeded with the
    task's own fixed constant when `seed` is None (Metal-Sci's inputs, as
    before), else with the pair (fixed, seed), so each constant of a task
    gives its own stream of an evaluation's secret seed."""
    return np.random.default_rng(fixed if seed is None else [fixed, int(seed)])


def input_word(seed: int | None, fixed: int) -> int:
    """A 32-bit input scalar (a kernel's PRNG seed): `fixed` when `seed` is
    None, else a word drawn from the pair (fixed, seed)."""
    return fixed if seed is None else int(input_rng(seed, fixed).integers(0, 2**32))


def perturbed(field: np.ndarray, seed: int | None, fixed: int, amplitude: float = 0.02):
    """A smooth initial field of a task whose Metal-Sci data has no random
    draw, made unpredictable by a secret seed: each element scaled by its own
    1 + U(-amplitude, amplitude), so zero edges stay zero and the field keeps
    its sign and shape. `field` itself when `seed` is None."""
    if seed is None:
        return field
    jitter = input_rng(seed, fixed).uniform(-amplitude, amplitude, size=field.shape)
    return (field * (1.0 + jitter)).astype(field.dtype)


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


# Tasks defined outside the package (your own task folder), by name -> folder,
# and their reference modules by folder.
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


def load_task(name: str | os.PathLike | Task) -> Task:
    """A task by name (tasks/ in the package) or by the path of a task folder
    of your own: the folder holds task.py (TASK = Task(...)), reference.py
    (solve, tolerance) and seed.metal / seed.cu, the same shape as tasks/.
    A name that is neither, or a folder whose task.py does not load, raises
    ValueError; check_task looks at the rest of a folder.

    A Task is taken as it is (one load_task or mlxsci.task_from_kernel
    returned): a task folder's becomes the task its name means again in this
    process (its reference is its folder's), and one made in memory, which no
    other process could load, is refused (ValueError): the worker loads a
    task by its name or folder (Task.ref)."""
    if isinstance(name, Task):
        return _known_task(name)
    name = os.fspath(name)
    if name in _CUSTOM:
        name = str(_CUSTOM[name])
    folder = Path(name)
    if folder.name == "task.py":
        folder = folder.parent
    if (folder / "task.py").is_file() and (
        os.sep in name or name.startswith(".") or name not in task_names()
    ):
        return _load_task_folder(folder.resolve())
    if name not in task_names():
        if folder.is_dir():
            raise ValueError(
                f"{name} is not a task folder: it has no task.py (a task folder "
                "holds task.py, reference.py and seed.metal; see examples/conv1d)"
            )
        raise ValueError(
            f"unknown task {name!r}; available: {', '.join(task_names())} "
            "(or the path of a task folder of your own)"
        )
    module = importlib.import_module(f"mlxsci.tasks.{name}.task")
    return module.TASK


def _known_task(task: Task) -> Task:
    if task.origin:
        _CUSTOM[task.name] = task.folder
        return task
    if task.name in task_names():
        return task
    raise ValueError(
        f"task {task.name!r} was made in memory, so no other process can load it (an "
        "evaluation's worker loads a task by its name or folder): write a task folder "
        "(see examples/conv1d) or make it with mlxsci.task_from_kernel"
    )


def _load_task_folder(folder: Path) -> Task:
    try:
        module = _import_file(folder / "task.py", f"mlxsci_custom_task_{abs(hash(folder))}")
    except Exception as exc:  # noqa: BLE001 - any error in the user's file, said plainly
        raise ValueError(f"cannot load {folder / 'task.py'}: {type(exc).__name__}: {exc}") from exc
    task = getattr(module, "TASK", None)
    if not isinstance(task, Task):
        raise ValueError(f"{folder / 'task.py'} defines no TASK = Task(...)")
    if not (folder / "reference.py").is_file():
        raise ValueError(f"{folder} has no reference.py (solve, tolerance)")
    if task.name in task_names():
        raise ValueError(f"custom task {task.name!r} has the name of a built-in task")
    _CUSTOM[task.name] = folder
    return dataclasses.replace(task, folder=folder, origin=str(folder))


def check_task(task: Task, dialect: str | None = None) -> None:
    """Raise ValueError naming every problem that would stop `task` partway
    through a run, so that nothing starts (no worker, no run directory) for a
    task folder that cannot finish: its reference must import and define
    solve and tolerance, the seed of `dialect` must be there (some seed when
    None), and its sizes must be well-formed (check_sizes)."""
    problems = _reference_problems(task) + _seed_problems(task, dialect) + check_sizes(task)
    if problems:
        raise ValueError(f"task {task.ref} cannot run: " + "; ".join(problems))


def _reference_problems(task: Task) -> list[str]:
    try:
        module = load_reference(task.name)
    except Exception as exc:  # noqa: BLE001 - a broken reference.py, said plainly
        return [f"its reference does not import ({type(exc).__name__}: {exc})"]
    return [
        f"its reference defines no {name}()"
        for name in ("solve", "tolerance")
        if not callable(getattr(module, name, None))
    ]


def _seed_problems(task: Task, dialect: str | None) -> list[str]:
    wanted = (dialect,) if dialect else dialects.NAMES
    if any(task.seed_path(d).is_file() for d in wanted):
        return []
    seeds = " or ".join(task.seed_path(d).name for d in wanted)
    others = [d for d in dialects.NAMES if d not in wanted and task.seed_path(d).is_file()]
    hint = (
        f"; its {task.seed_path(others[0]).name} runs with --dialect {others[0]}" if others else ""
    )
    return [
        f"{task.folder} has no {seeds} (the seed every evaluation and search starts from; "
        f"or give your own candidate file){hint}"
    ]


def check_sizes(task: Task) -> list[str]:
    """What is wrong with a task's sizes: each of the size sets smoke, in-dist
    and held-out must hold at least one Size whose params give every size
    parameter (task.defaults) and pass the task's validate_size, and whose
    working set (the memory estimate's basis) is a number."""
    if not isinstance(task.sizes, dict):
        return ["sizes must be a dict {size set: (Size(label, params), ...)}"]
    problems = [
        f"unknown size set {which!r} (the sets are {', '.join(SIZE_SETS)})"
        for which in task.sizes
        if which not in SIZE_SETS
    ]
    for which in SIZE_SETS:
        sizes = task.sizes.get(which)
        if not sizes:
            problems.append(f"its {which} size set is missing or empty")
            continue
        for size in sizes:
            problems += [
                f"{which} size {getattr(size, 'label', size)!r}: {p}"
                for p in _size_problems(task, size)
            ]
    default = Size("default", task.defaults)  # what --size fills in from
    problems += [f"default size: {p}" for p in _size_problems(task, default)]
    return problems


def _size_problems(task: Task, size) -> list[str]:
    if not isinstance(size, Size) or not isinstance(size.params, dict):
        return ["not a Size(label, params)"]
    missing = [k for k in task.defaults if k not in size.params]
    if missing:
        return [f"no value for {', '.join(missing)}"]
    try:
        task.validate_size(size.params)
        work = float(task.working_set(size.params))
    except Exception as exc:  # noqa: BLE001 - the task's own functions, said plainly
        return [f"{type(exc).__name__}: {exc}"]
    return [] if math.isfinite(work) and work >= 0 else [f"working set {work} is not a size"]


# ------------------------------------------------------------------ memory
# An evaluation holds a size's inputs and outputs several times over at once:
# NumPy builds the inputs on the host, the worker copies them to the device
# and keeps the outputs of its runs, and the parent checks those outputs
# against the reference (in float64). MEMORY_COPIES times the task's working
# set (the bytes of the inputs and outputs its kernels touch, which every task
# declares for the roofline) is the estimate: computed from the size alone,
# before anything is allocated. Measured (peak resident memory of the eval
# command and its worker, above that of a tiny size, reference not yet cached)
# on the simulator: saxpy N=2^26 3.0 x its working set, heat2d 4096x4096 2.3 x.
MEMORY_COPIES = 3


def memory_estimate(task: Task, params: dict) -> float:
    """Bytes an evaluation of `task` at size `params` needs, roughly."""
    return MEMORY_COPIES * float(task.working_set(params))


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def check_memory(task: Task, size: Size, available: int | None = None) -> None:
    """Raise ValueError when `size` needs more memory than the machine has
    (`available` bytes, default its physical memory)."""
    available = machine_memory() if available is None else available
    needed = memory_estimate(task, size.params)
    if available is None or needed <= available:
        return
    gib = 2.0**30
    raise ValueError(
        f"size {size.label} of {task.name} needs about {needed / gib:.1f} GiB to evaluate "
        f"({MEMORY_COPIES} x its {task.working_set(size.params) / gib:.1f} GiB of inputs and "
        f"outputs), more than this machine's {available / gib:.1f} GiB of memory; "
        "choose a smaller size"
    )


def load_reference(name: str):
    """The checker side: reference/<name>.py (solve, tolerance, optional error),
    or reference.py beside a custom task's task.py."""
    if name in _CUSTOM:
        # By folder: two folders may hold tasks of one name (the latest loaded counts).
        folder = _CUSTOM[name]
        if folder not in _CUSTOM_REFERENCES:
            module_name = f"mlxsci_custom_reference_{name}_{abs(hash(folder))}"
            _CUSTOM_REFERENCES[folder] = _import_file(folder / "reference.py", module_name)
        return _CUSTOM_REFERENCES[folder]
    return importlib.import_module(f"mlxsci.reference.{name}")
