"""`metal_kernel` and `cuda_kernel`: MLX 0.32's custom-kernel constructors,
run on the simulator, or handed to MLX's own where a GPU backend is there.

Which one runs a call (`backend=`, else $MLXSCI_FAST_BACKEND, else "sim"):
- "sim": the simulator, on any machine;
- "auto": MLX's own kernel where MLX has the kernel's GPU backend (Metal
  for metal_kernel, CUDA for cuda_kernel), else the simulator: one code path
  for the Mac, the GPU box and CI;
- "mlx": MLX's own kernel always (MLX's error where it has no such backend).

The user's kernel runs in this process as the user's own code, as it would
in MLX (it is compiled C++ here: it can do whatever this process can);
`isolated=True` runs each call in mlxsci's sandboxed worker instead.
"""

from __future__ import annotations

import os
from dataclasses import replace

import mlx.core as mx

from mlxsci.fast import arguments, definition, simulator, transforms
from mlxsci.kernel import dialects

BACKENDS = ("sim", "auto", "mlx")
BACKEND_VARIABLE = "MLXSCI_FAST_BACKEND"
CHECKS_VARIABLE = "MLXSCI_FAST_CHECKS"

# MLX's own constructors, taken before mlxsci.fast.simulate() can replace them.
MLX_CONSTRUCTORS = {d.name: getattr(mx.fast, d.mlx_constructor) for d in dialects.DIALECTS.values()}


def mlx_has(dialect: str) -> bool:
    """Whether MLX here has the GPU backend a kernel of `dialect` needs."""
    try:
        return dialects.get(dialect).mlx_has_backend()
    except Exception:  # noqa: BLE001 - an MLX without that module has no such backend
        return False


def chosen_backend(given: str | None) -> str:
    """The backend in force: `given`, else $MLXSCI_FAST_BACKEND, else "sim"."""
    name = given if given is not None else os.environ.get(BACKEND_VARIABLE, "") or "sim"
    if name not in BACKENDS:
        source = "backend" if given is not None else f"${BACKEND_VARIABLE}"
        raise ValueError(f"[mlxsci.fast] {source} is {name!r}; use one of {', '.join(BACKENDS)}")
    return name


def checks_default() -> bool:
    """Checks are on unless $MLXSCI_FAST_CHECKS is 0 (or false/off/no)."""
    return os.environ.get(CHECKS_VARIABLE, "1").strip().lower() not in ("0", "false", "off", "no")


class FastKernel:
    """A kernel made by mlxsci.fast.metal_kernel / cuda_kernel; called as
    MLX's kernel object is: keyword arguments, a list of arrays back."""

    def __init__(self, d: definition.KernelDefinition, backend=None, checks=None, isolated=False):
        self.definition = d
        self.backend = chosen_backend(backend)
        self.checks = checks
        self.isolated = bool(isolated)
        self._sim = simulator.SimRunner(d)
        self._mlx = None  # MLX's own kernel object, made at its first use

    def __repr__(self) -> str:
        d = self.definition
        return (
            f"<mlxsci.fast {d.dialect}_kernel {d.name!r} inputs={list(d.input_names)} "
            f"outputs={list(d.output_names)} backend={self.backend!r}>"
        )

    def runs_on_mlx(self) -> bool:
        """Whether calls go to MLX's own kernel (see the module's docstring)."""
        if self.backend == "mlx":
            return True
        return self.backend == "auto" and mlx_has(self.definition.dialect)

    def __call__(
        self,
        *,
        inputs,
        output_shapes,
        output_dtypes,
        grid,
        threadgroup,
        template=None,
        init_value=None,
        verbose=False,
        stream=None,
        checks=None,
        isolated=None,
    ) -> list:
        """MLX's call. `checks` (default: the kernel's, else on unless
        $MLXSCI_FAST_CHECKS=0): run the kernel again in other conditions to
        expose races, unwritten outputs and uninitialised threadgroup reads
        (mlxsci.fast.simulator); out-of-bounds accesses are caught either way.
        `isolated`: run it in the sandboxed worker."""
        if self.runs_on_mlx():
            return self._mlx_kernel()(
                inputs=inputs,
                output_shapes=output_shapes,
                output_dtypes=output_dtypes,
                grid=grid,
                threadgroup=threadgroup,
                template=template,
                init_value=init_value,
                verbose=verbose,
                stream=stream,
            )
        call = arguments.check_call(
            self.definition,
            inputs,
            output_shapes,
            output_dtypes,
            grid,
            threadgroup,
            template,
            init_value,
            verbose,
            stream,
        )
        check = self.checks if checks is None else checks
        check = checks_default() if check is None else bool(check)
        isolate = self.isolated if isolated is None else bool(isolated)
        run = self._isolated_run if isolate else self._sim.run
        return transforms.with_transforms(
            self.definition.name, lambda arrays: run(_with_inputs(call, arrays), check), call.inputs
        )

    def _isolated_run(self, call: arguments.Call, checks: bool) -> list:
        from mlxsci.fast import isolated

        return isolated.run(self.definition, call, checks)

    def _mlx_kernel(self):
        if self._mlx is None:
            d = self.definition
            self._mlx = dialects.mlx_kernel_from(MLX_CONSTRUCTORS[d.dialect], d.spec())
        return self._mlx


def _with_inputs(call: arguments.Call, arrays: tuple) -> arguments.Call:
    """`call` with the arrays the custom function hands its forward."""
    return replace(call, inputs=tuple(arrays))


def metal_kernel(
    name,
    input_names,
    output_names,
    source,
    header="",
    ensure_row_contiguous=True,
    atomic_outputs=False,
    compile_options=None,
    *,
    backend=None,
    checks=None,
    isolated=False,
) -> FastKernel:
    """MLX's mx.fast.metal_kernel (0.32), run on the simulator by default.
    Beyond MLX's arguments: backend ("sim", "auto", "mlx"), checks (None:
    on unless $MLXSCI_FAST_CHECKS=0) and isolated (run in the sandboxed
    worker)."""
    d = definition.define(
        "metal",
        name,
        input_names,
        output_names,
        source,
        header,
        ensure_row_contiguous,
        atomic_outputs,
        compile_options,
    )
    return FastKernel(d, backend, checks, isolated)


def cuda_kernel(
    name,
    input_names,
    output_names,
    source,
    header="",
    ensure_row_contiguous=True,
    shared_memory=0,
    *,
    backend=None,
    checks=None,
    isolated=False,
) -> FastKernel:
    """MLX's mx.fast.cuda_kernel (0.32), run on the simulator by default;
    the extra arguments are metal_kernel's."""
    d = definition.define(
        "cuda",
        name,
        input_names,
        output_names,
        source,
        header,
        ensure_row_contiguous,
        shared_memory=shared_memory,
    )
    return FastKernel(d, backend, checks, isolated)
