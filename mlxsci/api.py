"""mlxsci from Python: load a task, evaluate a candidate, use a candidate as an MLX function.

    import mlxsci
    task = mlxsci.load_task("heat2d")                  # or the path of a task folder of your own
    ev = mlxsci.evaluate("heat2d", source, backend="sim", size_set="smoke")
    heat = mlxsci.kernel_function("heat2d", "results/.../best.metal", backend="sim")
    u = heat(u_in=u0, NX=67, NY=45, alpha=0.2, size={"n_steps": 5})["u"]
    task = mlxsci.task_from_kernel(kernel, reference=ref, make_inputs=inputs, sizes=..., ...)

`evaluate` is the benchmark's judge (worker subprocess, reference, integrity
checks, roofline score). `kernel_function` is for using a kernel: it runs the
task's host pipeline (steps, ping-pong, kernel order) with the candidate's
kernels in this process, on MLX arrays, and checks nothing. `task_from_kernel`
(mlxsci/fast/as_task.py) makes a task of one `mlxsci.fast` kernel and a NumPy
reference, which every function here and mlxsci.search.run take.
"""

from __future__ import annotations

import os
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlxsci.backends import backend_class, backend_options, get_backend, resolve_backend_name
from mlxsci.evaluation.checks import misfit
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.fast.as_task import task_from_kernel
from mlxsci.kernel.candidate import CandidateError, parse, read_candidate_file
from mlxsci.kernel.dialects import name_of_file
from mlxsci.task import Size, Task, load_task
from mlxsci.worker.launch import Launcher

__all__ = [
    "load_task",
    "evaluate",
    "kernel_function",
    "task_inputs",
    "task_from_kernel",
    "KernelFunction",
]


def _task(task: str | os.PathLike | Task) -> Task:
    return task if isinstance(task, Task) else load_task(str(task))


def _size(task: Task, size) -> Size:
    """A size label of any size set ("67x45x5"), a dict of size parameters
    (unspecified ones take the task's defaults) or a Size."""
    if isinstance(size, Size):
        return size
    if isinstance(size, str):
        for s in task.size_set("all"):
            if s.label == size:
                return s
        labels = ", ".join(s.label for s in task.size_set("all"))
        raise ValueError(
            f"{task.name} has no size labelled {size!r}; labels: {labels} "
            f"(or pass a dict of size parameters: {', '.join(task.defaults)})"
        )
    if isinstance(size, dict):
        return task.custom_size(size)
    raise TypeError(f"a size is a label, a dict of size parameters or a Size, got {size!r}")


def task_inputs(task: str | os.PathLike | Task, size, *, numpy: bool = False) -> dict:
    """The inputs a task builds for a size (the same fixed seeds the benchmark
    uses), as MLX arrays (NumPy arrays with numpy=True).

    size: a label of any size set ("smoke" sizes are small, e.g. heat2d's
    "67x45x5"), or a dict of size parameters ({"NX": 64, "NY": 32, "n_steps": 3});
    parameters left out take the task's defaults."""
    t = _task(task)
    host = t.inputs(_size(t, size).params)
    return dict(host) if numpy else {k: mx.array(v) for k, v in host.items()}


def _read_source(source) -> tuple[str | None, str | None]:
    """(text, filename): source is None (the seed), candidate text, or a path."""
    if source is None:
        return None, None
    if isinstance(source, os.PathLike):
        return read_candidate_file(source), str(source)
    if isinstance(source, str) and "\n" not in source and "//!" not in source:
        path = Path(source)
        if path.is_file():
            return read_candidate_file(path), str(path)
        raise FileNotFoundError(
            f"{source!r} is neither candidate text (it has no //! kernel line) nor an existing file"
        )
    return source, None


def _in_run_directory(path: Path) -> bool:
    """Whether a candidate file lies in a search's run directory (run.json
    beside it), where every candidate is a model's."""
    return (path.resolve().parent / "run.json").is_file()


class KernelFunction:
    """A task's host pipeline with a candidate's kernels, callable on MLX arrays.

    Call it with the task's inputs by name (keywords, or one dict positionally),
    and the size parameters the pipeline needs in `size`:

        f(x=x, y=y, a=2.5, N=n)                          # saxpy: N comes from the input N
        f({"u_in": u0, "alpha": 0.2}, size={"NX": 67, "NY": 45, "n_steps": 5})

    - Inputs are `input_names`. MLX arrays are used as they are (cast when
      their dtype differs from the task's); NumPy arrays and Python numbers are
      converted to the task's dtypes (scalars are 0-d, e.g. uint32 sizes).
    - Size parameters are `size_names` (the task's `defaults`). A scalar input
      of the same name as a size parameter (N, NX, NY, ...) gives it, and
      either one may be left out when the other is given; those that are no
      input (n_steps, ...) must be in `size`, a dict or a size label. The
      array shapes must fit the size, as `task_inputs` makes them: kernels
      index by the size scalars, so on a GPU a mismatch reads past the end.
    - Returns the task's results, e.g. {"y": array} for saxpy, {"u": array}
      for heat2d, as MLX arrays (lazy on a GPU, like any MLX op).
    """

    def __init__(self, task: Task, source: str, filename: str, backend, params: dict | None):
        self.task = task
        self.source = source
        self.filename = filename
        self.backend = backend
        self.dialect = backend.dialect
        self.params = dict(params or {})
        self.candidate = parse(source, dialect=self.dialect, filename=filename)
        why = misfit(self.candidate, task, f"{filename}:")
        if why:
            raise CandidateError(why, filename=filename)
        self.candidate.param_values(self.params)  # unknown params or bad values fail now
        # Names, dtypes and ranks of the inputs, from the task's smallest size.
        smallest = min(
            task.size_set("smoke") or task.size_set("all"),
            key=lambda s: sum(v for v in s.params.values() if isinstance(v, int)),
        )
        self._spec = {k: (v.dtype, v.ndim) for k, v in task.make_inputs(smallest.params).items()}
        self._launchers: dict = {}

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self._spec)

    @property
    def size_names(self) -> tuple[str, ...]:
        return tuple(self.task.defaults)

    def __repr__(self) -> str:
        return (
            f"KernelFunction({self.task.name}, {self.filename}, backend={self.backend.name}, "
            f"inputs=({', '.join(self.input_names)}), size=({', '.join(self.size_names)}))"
        )

    def _resolve_size(self, given: dict, size) -> Size:
        t = self.task
        if size is None:
            params = {}
        elif isinstance(size, dict):
            params = dict(size)
        else:
            params = dict(_size(t, size).params)
        unknown = set(params) - set(t.defaults)
        if unknown:
            raise ValueError(
                f"unknown size parameter(s) {', '.join(sorted(unknown))} for "
                f"{t.name}; its size parameters: {', '.join(t.defaults)}"
            )
        for name in t.defaults:
            if name in given and self._spec[name][1] == 0:
                value = np.asarray(given[name])
                if value.ndim != 0:
                    raise ValueError(
                        f"input {name} of {t.name} must be a scalar (0-d), got shape {value.shape}"
                    )
                value = value.item()
                if name in params and params[name] != value:
                    raise ValueError(
                        f"input {name}={value} disagrees with size {name}={params[name]}"
                    )
                params[name] = value
        missing = [n for n in t.defaults if n not in params]
        if missing:
            as_input = [n for n in missing if n in self._spec]
            hint = (
                f" (or give {', '.join(as_input)} as input(s) of the same name)" if as_input else ""
            )
            raise ValueError(
                f"{t.name} needs size parameter(s) {', '.join(missing)}: pass size="
                "{" + ", ".join(f"{n!r}: ..." for n in missing) + "}" + hint
            )
        return t.custom_size(params)  # converts types and runs the task's validate_size

    def __call__(self, inputs: dict | None = None, /, *, size=None, **named) -> dict:
        given = dict(inputs or {})
        overlap = set(given) & set(named)
        if overlap:
            raise TypeError(f"input(s) {', '.join(sorted(overlap))} given twice")
        given.update(named)
        unknown = [n for n in given if n not in self._spec]
        if unknown:
            raise TypeError(
                f"{self.task.name} has no input(s) {', '.join(unknown)}; "
                f"its inputs: {', '.join(self.input_names)}"
            )
        # Size scalars (N, NX, ...) may come from `size` instead; any other input is required.
        missing = [n for n in self._spec if n not in given and n not in self.task.defaults]
        if missing:
            raise TypeError(
                f"{self.task.name} needs input(s) {', '.join(missing)} "
                f"(given: {', '.join(given) or 'none'}; all inputs: "
                f"{', '.join(self.input_names)})"
            )
        sz = self._resolve_size(given, size)
        for name in self.size_names:
            if name in self._spec and name not in given:
                given[name] = sz.params[name]
        arrays = {name: self._convert(name, given[name]) for name in self._spec}
        key = tuple(sorted(sz.params.items()))
        launcher = self._launchers.get(key)
        if launcher is None:
            launcher = Launcher(
                self.backend, self.task, self.candidate, sz.params, self.filename, self.params
            )
            self._launchers[key] = launcher
        return dict(self.task.run(launcher, arrays, sz.params))

    def _convert(self, name: str, value) -> mx.array:
        dtype, ndim = self._spec[name]
        if isinstance(value, mx.array):
            a = value
            want = getattr(mx, "bool_" if dtype == np.bool_ else dtype.name)
            if a.dtype != want:
                a = a.astype(want)
        else:
            a = self.backend.to_device(np.asarray(value, dtype=dtype))
        if a.ndim != ndim:
            kind = "a scalar (0-d)" if ndim == 0 else f"{ndim}-d"
            raise ValueError(
                f"input {name} of {self.task.name} must be {kind}, got shape {tuple(a.shape)}"
            )
        return a


def kernel_function(
    task: str | os.PathLike | Task,
    source: str | os.PathLike | None = None,
    *,
    backend: str = "auto",
    dialect: str | None = None,
    params: dict | None = None,
    trusted: bool = False,
    sim_gpu: str | None = None,
) -> KernelFunction:
    """A candidate's kernels as one Python function over MLX arrays.

    It runs in your process and, on the simulator, as native code with your
    rights: for kernels you trust. A file from a search's run directory
    (beside its run.json) is model-written and is refused on the simulator
    unless `trusted=True` says you have read it; `evaluate` runs any
    candidate in a sandboxed worker instead.

    task: a task name ("heat2d"), the path of a task folder of your own
    ("examples/conv1d") or a Task. source: candidate text, the path of a
    candidate file (a run's best.metal), or None for the task's seed.
    backend: "auto" (metal, else cuda, else sim), "metal", "cuda" or "sim".
    dialect: "metal" or "cuda"; default the file's extension, else the
    backend's own. sim_gpu: the GPU the simulator models (as `evaluate`
    takes it; ValueError on another backend). params: values for the
    candidate's `//! param`s (default: the file's). Parse and format errors
    raise CandidateError naming the line; compile errors surface at the first call.
    See KernelFunction for how to call the result.
    """
    t = _task(task)
    text, filename = _read_source(source)
    name = resolve_backend_name(backend)
    native = backend_class(name).runs_candidate_natively  # the simulator: as host code
    if native and not trusted and filename and _in_run_directory(Path(filename)):
        raise ValueError(
            f"{filename} is in a search's run directory, so a model wrote it; kernel_function "
            "would run it in this process as you, outside the simulator's sandbox. Read it, "
            "then pass trusted=True, or judge it with mlxsci.evaluate (sandboxed)."
        )
    be = get_backend(name, **backend_options(name, dialect or name_of_file(filename), sim_gpu))
    if text is None:
        text, filename = t.seed(be.dialect), str(t.seed_path(be.dialect))
    return KernelFunction(t, text, filename or "<candidate>", be, params)
