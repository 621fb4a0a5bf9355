"""The bridge from a task's host pipeline to a candidate's kernels.

A task's `run(launch, inputs, params)` calls `launch(kernel_name, inputs,
outputs=...)`; the Launcher looks up the candidate's body for that kernel,
evaluates its launch expressions for the current size and params (checked
against the dialect's launch limits, mlxsci.kernel.launch_limits), and calls the
backend kernel with MLX's call signature and the run's mode (RunMode: the
verification runs' poison, the order threads run in, ...), which the worker
sets on the launcher, never on the backend. Per-step counters
come from `launch.counter(step)` (through mlxsci.task.step_counter), made once.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np

from mlxsci.backends.base import Backend, RunMode
from mlxsci.kernel import in_place
from mlxsci.kernel.candidate import Candidate
from mlxsci.kernel.launch_expr import launch_dims
from mlxsci.kernel.launch_limits import check_launch
from mlxsci.kernel.plan import CandidatePlan, plan_candidate
from mlxsci.task import Task


def mx_dtype(name: str):
    return mx.bool_ if name == "bool" else getattr(mx, name)


def launch_shapes(
    task: Task,
    candidate: Candidate | CandidatePlan,
    params: dict,
    param_overrides: dict | None = None,
) -> dict:
    """Kernel name -> (grid, threadgroup) of `candidate` at the size `params`:
    its launch expressions, else the task's, over the size's integers and the
    candidate's params."""
    plan = as_plan(candidate, task, param_overrides)
    names = dict(task.launch_names(params))
    names.update(plan.param_values)
    shapes = {}
    for contract in task.kernels:
        kernel = plan.kernel(contract.name)
        shapes[contract.name] = (
            launch_dims(kernel.grid or contract.grid, names),
            launch_dims(kernel.threadgroup or contract.threadgroup, names),
        )
    return shapes


def as_plan(
    candidate: Candidate | CandidatePlan,
    task: Task,
    param_overrides: dict | None = None,
    filename: str = "<candidate>",
) -> CandidatePlan:
    """The plan a launch works from: the one the parent made (the worker's
    case), or one made here from a parsed candidate (scripts, tests, the API)."""
    if isinstance(candidate, CandidatePlan):
        return candidate
    return plan_candidate(candidate, task.kernels, filename, param_overrides)


class Launcher:
    def __init__(
        self,
        backend: Backend,
        task: Task,
        candidate: Candidate | CandidatePlan,
        params: dict,
        filename: str = "<candidate>",
        param_overrides: dict | None = None,
    ):
        plan = as_plan(candidate, task, param_overrides, filename)
        self.task = task
        self.backend = backend
        self.launches = 0  # kernel calls in the current run (RunMode.launch)
        self._mode = RunMode()
        self.counters: dict = {}  # value -> 0-d uint32 device array (see counter)
        self.template = list(plan.template) or None
        self.kernels, self.grid, self.threadgroup = {}, {}, {}
        # kernel name -> its `//! inplace` (output, input) pairs
        self.in_place = {k.name: k.in_place for k in plan.kernels if k.in_place}
        self.copy = backend.kernel(in_place.copy_spec(backend.dialect)) if self.in_place else None
        # Launch shapes are fixed per size, so evaluate and check them once, up
        # front: a bad expression or a launch over a limit fails before any kernel runs.
        shapes = launch_shapes(task, plan, params)
        for contract in task.kernels:
            self.kernels[contract.name] = backend.kernel(plan.kernel(contract.name).spec)
            grid, threadgroup = shapes[contract.name]
            check_launch(backend.dialect, contract.name, grid, threadgroup)
            self.grid[contract.name], self.threadgroup[contract.name] = grid, threadgroup

    @property
    def mode(self) -> RunMode:
        """How the runs from now on run (RunMode), handed to every kernel call;
        setting it starts a run's count of launches afresh."""
        return self._mode

    @mode.setter
    def mode(self, mode: RunMode) -> None:
        self._mode, self.launches = mode, 0

    def call_mode(self) -> RunMode:
        """The mode of the next kernel call: the run's, with its launch's index."""
        mode = replace(self._mode, launch=self.launches)
        self.launches += 1
        return mode

    def __call__(self, name: str, inputs: dict, outputs: dict) -> dict:
        contract = self.task.kernel(name)
        init = contract.init_value if contract.init_value is not None else self.mode.init_value
        pairs = self.in_place.get(name, ())
        if pairs:
            return self._call_in_place(name, contract, inputs, outputs, pairs, init)
        results = self.kernels[name](
            inputs=[inputs[n] for n in contract.inputs],
            output_shapes=[tuple(outputs[n][0]) for n in contract.outputs],
            output_dtypes=[mx_dtype(outputs[n][1]) for n in contract.outputs],
            grid=self.grid[name],
            threadgroup=self.threadgroup[name],
            template=self.template,
            init_value=init,
            mode=self.call_mode(),
        )
        return dict(zip(contract.outputs, results))

    def _call_in_place(self, name, contract, inputs, outputs, pairs, init) -> dict:
        """A kernel with `//! inplace` outputs (mlxsci/kernel/in_place.py):
        each bound output starts as a copy of its input, made by the copy
        dispatch and handed to the kernel as a hidden input it writes."""
        bound = {out for out, _ in pairs}
        copies, template = [], list(self.template or [])
        for out, source in pairs:
            shape, dtype = tuple(outputs[out][0]), mx_dtype(outputs[out][1])
            copies.append(self._copied(inputs[source], shape, dtype, f"{name}: {out} = {source}"))
            template.append((in_place.type_param(out), dtype))
        kept = [n for n in contract.outputs if n not in bound]
        shapes = [tuple(outputs[n][0]) for n in kept] or [(1,)]
        dtypes = [mx_dtype(outputs[n][1]) for n in kept] or [mx.uint32]
        results = self.kernels[name](
            inputs=[inputs[n] for n in contract.inputs] + copies,
            output_shapes=shapes,
            output_dtypes=dtypes,
            grid=self.grid[name],
            threadgroup=self.threadgroup[name],
            template=template,
            init_value=init,
            mode=self.call_mode(),
        )
        # The copies hold the kernel's writes once it ran: nothing may read
        # them before (on a GPU the kernel is lazy work the copies know nothing of).
        written = mx.depends(copies, list(results))
        out = dict(zip(kept, results))
        out.update((o, a) for (o, _), a in zip(pairs, written))
        return out

    def _copied(self, array, shape: tuple, dtype, what: str):
        """A fresh array holding `array`'s values in `shape`, made by the copy
        dispatch: the buffer a bound output starts as."""
        if array.dtype != dtype or int(np.prod(shape)) != array.size:
            raise ValueError(
                f"//! inplace {what}: the output is {dtype} of shape {shape} and the input "
                f"{array.dtype} of shape {tuple(array.shape)}; they must hold the same elements"
            )
        n = int(array.size)
        if n == 0:
            return mx.zeros(shape, dtype=dtype)
        assert self.copy is not None  # made with the kernels, as some have in-place outputs
        flat = self.copy(
            inputs=[mx.reshape(array, (n,))],
            output_shapes=[(n,)],
            output_dtypes=[dtype],
            grid=(n, 1, 1),
            threadgroup=(min(in_place.COPY_GROUP, n), 1, 1),
            mode=self.call_mode(),
        )[0]
        return mx.reshape(flat, shape)

    def counter(self, value: int):
        """A per-step counter input (ising's step_idx, hmc's hmc_step_idx) as a
        0-d uint32 array, made through the backend on first use and reused by
        every later run at this size. On MLX's CUDA build a small array created
        on the host lives in managed memory, so one made per launch between
        timed runs makes kernels page-fault; a cached one is made during the
        first (compiling) run only. Its dtype and rank never change, so the
        kernel still compiles one variant."""
        a = self.counters.get(value)
        if a is None:
            a = self.counters[value] = self.backend.to_device(np.array(value, dtype=np.uint32))
        return a

    def branch_hits(self) -> dict:
        """Kernel name -> its counters' counts (Kernel.branch_hits: None on a
        backend that does not count)."""
        return {name: k.branch_hits() for name, k in self.kernels.items()}

    def compile_seconds(self) -> float | None:
        """Time spent compiling, where the backend measures it (the simulator does)."""
        times = [getattr(k, "compile_seconds", None) for k in self.kernels.values()]
        known = [t for t in times if t is not None]
        return float(sum(known)) if len(known) == len(times) else None
