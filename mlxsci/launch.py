"""The bridge from a task's host pipeline to a candidate's kernels.

A task's `run(launch, inputs, params)` calls `launch(kernel_name, inputs,
outputs=...)`; the Launcher looks up the candidate's body for that kernel,
evaluates its launch expressions for the current size and params, and calls
the backend kernel with MLX's call signature. The evaluator flips
`init_value` to poison outputs during verification runs.
"""
from __future__ import annotations

import mlx.core as mx

from mlxsci.backends.base import Backend
from mlxsci.candidate import Candidate, template_args, to_kernel_spec
from mlxsci.launch_expr import launch_dims
from mlxsci.task import Task


def mx_dtype(name: str):
    return mx.bool_ if name == "bool" else getattr(mx, name)


class Launcher:
    def __init__(self, backend: Backend, task: Task, candidate: Candidate, params: dict,
                 filename: str = "<candidate>", param_overrides: dict | None = None):
        self.task = task
        self.init_value = None
        names = dict(task.launch_names(params))
        names.update(candidate.param_values(param_overrides))
        self.template = template_args(candidate, param_overrides) or None
        self.kernels, self.grid, self.threadgroup = {}, {}, {}
        for contract in task.kernels:
            block = candidate.kernel(contract.name)
            spec = to_kernel_spec(candidate, contract.name, contract.inputs, contract.outputs,
                                  atomic_outputs=contract.atomic_outputs, filename=filename)
            self.kernels[contract.name] = backend.kernel(spec)
            # Launch shapes are fixed per size, so evaluate them once, up front:
            # a bad expression fails before any kernel runs.
            self.grid[contract.name] = launch_dims(block.grid or contract.grid, names)
            self.threadgroup[contract.name] = launch_dims(
                block.threadgroup or contract.threadgroup, names)

    def __call__(self, name: str, inputs: dict, outputs: dict) -> dict:
        contract = self.task.kernel(name)
        init = contract.init_value if contract.init_value is not None else self.init_value
        results = self.kernels[name](
            inputs=[inputs[n] for n in contract.inputs],
            output_shapes=[tuple(outputs[n][0]) for n in contract.outputs],
            output_dtypes=[mx_dtype(outputs[n][1]) for n in contract.outputs],
            grid=self.grid[name], threadgroup=self.threadgroup[name],
            template=self.template, init_value=init)
        return dict(zip(contract.outputs, results))

    def compile_seconds(self) -> float | None:
        """Time spent compiling, where the backend measures it (the simulator does)."""
        times = [getattr(k, "compile_seconds", None) for k in self.kernels.values()]
        return None if any(t is None for t in times) else float(sum(times))
