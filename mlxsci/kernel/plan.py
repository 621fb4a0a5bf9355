"""A candidate's plan: what its text says once parsed, for every later step.

The trusted side parses a candidate once (mlxsci.kernel.candidate.parse) and
turns it into a `CandidatePlan` against the task's kernel contracts: each
kernel's `KernelSpec` (in-place outputs bound), its launch expressions, the
MLX template arguments with any param overrides applied, and the param values
the launch expressions see. The plan travels to the worker inside its job
(`to_wire` / `from_wire`: plain JSON), and the simulator's build service
matches a worker's build request against the same plan (`builds`), so neither
parses the text again.

Contracts are duck-typed (mlxsci.task's KernelContract: name, inputs, outputs,
atomic_outputs) so this layer needs nothing of the task layer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mlxsci.kernel import in_place
from mlxsci.kernel.candidate import template_args, to_kernel_spec
from mlxsci.kernel.model import Candidate
from mlxsci.kernel.spec import KernelSpec


@dataclass(frozen=True)
class KernelPlan:
    """One kernel: its spec, its own launch expressions (None: the task's)."""

    spec: KernelSpec
    grid: str | None = None
    threadgroup: str | None = None
    in_place: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class CandidatePlan:
    """A parsed candidate, ready to launch: kernels in the task's order, the
    template arguments and the param values (overrides applied)."""

    dialect: str
    filename: str
    kernels: tuple[KernelPlan, ...]
    template: tuple[tuple[str, int], ...] = ()
    param_values: tuple[tuple[str, int], ...] = ()

    def kernel(self, name: str) -> KernelPlan:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"the plan has no kernel {name!r}")

    @property
    def has_in_place(self) -> bool:
        return any(k.in_place for k in self.kernels)

    def builds(self) -> list[tuple[KernelSpec, list]]:
        """Every (spec, template) a launch of this candidate compiles: each
        kernel with the template plus one element-type slot (None) per in-place
        output, and the in-place copy dispatch where a kernel has one."""
        out = [
            (k.spec, list(self.template) + [(in_place.type_param(o), None) for o, _ in k.in_place])
            for k in self.kernels
        ]
        if self.has_in_place:
            out.append((in_place.copy_spec(self.dialect), []))
        return out

    def to_wire(self) -> dict:
        return {
            "dialect": self.dialect,
            "filename": self.filename,
            "kernels": [
                {
                    "spec": asdict(k.spec),
                    "grid": k.grid,
                    "threadgroup": k.threadgroup,
                    "in_place": [list(p) for p in k.in_place],
                }
                for k in self.kernels
            ],
            "template": [list(t) for t in self.template],
            "param_values": [list(p) for p in self.param_values],
        }

    @classmethod
    def from_wire(cls, data: dict) -> CandidatePlan:
        """The plan the parent wrote (trusted: it comes from the parent)."""
        kernels = []
        for k in data["kernels"]:
            spec = dict(k["spec"])
            spec["input_names"] = tuple(spec["input_names"])
            spec["output_names"] = tuple(spec["output_names"])
            kernels.append(
                KernelPlan(
                    KernelSpec(**spec),
                    k["grid"],
                    k["threadgroup"],
                    tuple((str(o), str(i)) for o, i in k["in_place"]),
                )
            )
        return cls(
            data["dialect"],
            data["filename"],
            tuple(kernels),
            tuple((str(n), int(v)) for n, v in data["template"]),
            tuple((str(n), int(v)) for n, v in data["param_values"]),
        )


def plan_candidate(
    candidate: Candidate, contracts, filename: str, param_overrides: dict | None = None
) -> CandidatePlan:
    """The plan of a parsed `candidate` for the task's kernel `contracts`.
    Raises what Candidate.param_values raises for bad overrides (KeyError,
    TypeError, ValueError) and KeyError for a kernel the candidate lacks."""
    kernels = []
    for contract in contracts:
        block = candidate.kernel(contract.name)
        spec = to_kernel_spec(
            candidate,
            contract.name,
            contract.inputs,
            contract.outputs,
            atomic_outputs=contract.atomic_outputs,
            filename=filename,
        )
        kernels.append(KernelPlan(spec, block.grid, block.threadgroup, block.in_place))
    return CandidatePlan(
        candidate.dialect,
        filename,
        tuple(kernels),
        tuple(template_args(candidate, param_overrides)),
        tuple(candidate.param_values(param_overrides).items()),
    )
