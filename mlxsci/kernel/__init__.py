"""The kernel format: candidate files, dialects, generated signatures, launch
expressions and limits, and the source policy (kernel/source/).

What other layers use, importable from here: the candidate format
(`parse`, `load`, `read_candidate_file`, `render`, `extract_from_response`,
`Candidate`, `CandidateError`, `CandidateFailure`), a kernel of it as MLX
takes it (`to_kernel_spec`, `template_args`, `KernelSpec`), the errors a
kernel's build and launch raise (`BackendError`, `CompileError`,
`KernelFault`, `LaunchExprError`), and its launch (`launch_dims`,
`check_launch`). The per-dialect table is the module `dialects`, MLX's
generated text the module `signature`; validation against a task is
`mlxsci.kernel.validate.validate`.
"""

from mlxsci.kernel.candidate import (
    Candidate,
    CandidateError,
    CandidateFailure,
    extract_from_response,
    load,
    parse,
    read_candidate_file,
    render,
    template_args,
    to_kernel_spec,
)
from mlxsci.kernel.launch_expr import LaunchExprError, launch_dims
from mlxsci.kernel.launch_limits import check_launch
from mlxsci.kernel.spec import BackendError, CompileError, KernelFault, KernelSpec

__all__ = [
    "BackendError",
    "Candidate",
    "CandidateError",
    "CandidateFailure",
    "CompileError",
    "KernelFault",
    "KernelSpec",
    "LaunchExprError",
    "check_launch",
    "extract_from_response",
    "launch_dims",
    "load",
    "parse",
    "read_candidate_file",
    "render",
    "template_args",
    "to_kernel_spec",
]
