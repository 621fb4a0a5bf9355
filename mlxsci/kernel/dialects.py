"""The kernel dialects, each described once: metal (`mx.fast.metal_kernel`)
and cuda (`mx.fast.cuda_kernel`).

Everything that differs between the two outside the simulator's own runtime
is a field of `Dialect`: the candidate file's extension, the words prose uses,
the generator of the signature MLX wraps a body in, the MLX constructor, the
simulator's prelude headers and the parser of the GPU compiler's log. Modules
ask this table (`get`, `of_file`, `for_backend`) instead of comparing dialect
names. The simulator's per-dialect launch semantics and C++ glue live in
mlxsci/backends/sim/dialects.py, its half of each dialect.

Adding a dialect is adding a Dialect here, its signature generator in
mlxsci/kernel/signature.py, its log parser in mlxsci/kernel/compile_logs.py and its
simulator half (CONTRIBUTING.md, "Adding a dialect").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlxsci.kernel import compile_logs
from mlxsci.kernel.signature import GeneratedSource, cuda_source, metal_source

__all__ = [
    "Dialect",
    "DIALECTS",
    "NAMES",
    "get",
    "of_file",
    "name_of_file",
    "for_backend",
    "mlx_kernel_from",
]


def _metal_text(spec, infos, out_dtypes, template=None) -> GeneratedSource:
    return metal_source(
        spec.name,
        list(spec.input_names),
        list(spec.output_names),
        spec.source,
        spec.header,
        infos,
        list(out_dtypes),
        template,
        spec.atomic_outputs,
    )


def _cuda_text(spec, infos, out_dtypes, template=None) -> GeneratedSource:
    return cuda_source(
        spec.name,
        list(spec.input_names),
        list(spec.output_names),
        spec.source,
        spec.header,
        infos,
        list(out_dtypes),
        template,
    )


def _metal_options(spec) -> dict:
    """metal_kernel's own constructor arguments for `spec`."""
    options = {"atomic_outputs": spec.atomic_outputs}
    if spec.math_mode != "safe":
        options["compile_options"] = {"math_mode": spec.math_mode}
    return options


def _cuda_options(spec) -> dict:
    # MLX's CUDA kernels have no atomic_outputs: a body declares atomics itself.
    return {"shared_memory": spec.shared_memory}


def mlx_kernel_from(constructor: Callable, spec):
    """MLX's kernel object for `spec`, made by `constructor` (an mx.fast
    constructor: mlxsci.fast passes MLX's own, taken before simulate() can
    replace them)."""
    return constructor(
        name=spec.name,
        input_names=list(spec.input_names),
        output_names=list(spec.output_names),
        source=spec.source,
        header=spec.header,
        ensure_row_contiguous=spec.ensure_row_contiguous,
        **DIALECTS[spec.dialect].mlx_options(spec),
    )


def _metal_kernel(spec):
    import mlx.core as mx

    return mlx_kernel_from(mx.fast.metal_kernel, spec)


def _cuda_kernel(spec):
    import mlx.core as mx

    return mlx_kernel_from(mx.fast.cuda_kernel, spec)


def _mlx_has_metal() -> bool:
    import mlx.core as mx

    return bool(mx.metal.is_available())


def _mlx_has_cuda() -> bool:
    import mlx.core as mx

    return bool(mx.cuda.is_available())


@dataclass(frozen=True)
class Dialect:
    name: str  # "metal" or "cuda": what options and job files say
    language: str  # the language's name in prose ("Metal", "CUDA")
    extension: str  # a candidate or seed file of this dialect: NAME + extension
    suffixes: tuple[str, ...]  # file suffixes read as this dialect
    fence: str  # the Markdown fence of its code in prompts
    answer_fences: frozenset  # fence languages taken from an LLM answer ("" = none given)
    gpu_backend: str  # the backend that runs it on a GPU
    source: Callable  # (spec, infos, out_dtypes, template) -> the text MLX compiles
    mlx_kernel: Callable  # spec -> MLX's kernel object (imports MLX when called)
    parse_log: Callable  # the GPU compiler's log -> [compile_logs.Diagnostic]
    sim_preludes: tuple[str, ...]  # the simulator's runtime headers after sim_runtime.h
    # MLX's API as mlxsci.fast mirrors it:
    mlx_constructor: str  # the mx.fast function that makes its kernels
    mlx_options: Callable  # spec -> that function's dialect-only arguments
    mlx_has_backend: Callable  # () -> whether the installed MLX runs it on a GPU
    construct_tag: str  # how MLX's constructor errors begin
    call_tag: str  # how MLX's call-time errors begin
    template_tag: str  # how MLX's template error begins
    verbose_shows_kernel_name: bool  # verbose=True titles the generated name, not the given one
    group_memory: str  # what prose calls memory shared by a group ("threadgroup", "shared")
    # A regex finding a declaration of such memory in a kernel body (the
    # map-elites archive's memory feature, mlxsci/search/features.py)
    group_memory_declaration: str
    has_compile_options: bool  # the constructor takes compile_options (math_mode)
    has_float64: bool  # its GPU compiler has a 64-bit float type (Metal has no double)
    # In-place outputs (mlxsci/kernel/in_place.py): the statement that binds
    # an output's name writable to its hidden const input (format fields:
    # type, name, source), and the copy dispatch's body (src -> dst, one
    # thread per element of the flattened array).
    writable_binding: str = ""
    copy_body: str = ""

    def file_name(self, stem: str) -> str:
        return stem + self.extension


METAL = Dialect(
    name="metal",
    language="Metal",
    extension=".metal",
    suffixes=(".metal",),
    fence="metal",
    answer_fences=frozenset({"", "metal", "msl", "cpp", "c++", "c"}),
    gpu_backend="metal",
    source=_metal_text,
    mlx_kernel=_metal_kernel,
    parse_log=compile_logs.parse_metal_log,
    sim_preludes=("sim_metal.h", "metal_prelude.h", "sim_metal_post.h"),
    mlx_constructor="metal_kernel",
    mlx_options=_metal_options,
    mlx_has_backend=_mlx_has_metal,
    construct_tag="[metal_kernel]",
    call_tag="[metal_kernel]",
    template_tag="[metal_kernel]",
    verbose_shows_kernel_name=False,
    group_memory="threadgroup",
    group_memory_declaration=r"\bthreadgroup\s+[A-Za-z_]",
    has_compile_options=True,
    has_float64=False,
    writable_binding="device {type}* {name} = (device {type}*){source};",
    # Metal runs exactly the grid's threads.
    copy_body="uint i = thread_position_in_grid.x;\ndst[i] = src[i];\n",
)

CUDA = Dialect(
    name="cuda",
    language="CUDA",
    extension=".cu",
    suffixes=(".cu", ".cuh"),
    fence="cuda",
    answer_fences=frozenset({"", "cuda", "cu", "cpp", "c++", "c"}),
    gpu_backend="cuda",
    source=_cuda_text,
    mlx_kernel=_cuda_kernel,
    parse_log=compile_logs.parse_nvrtc_log,
    sim_preludes=("cuda_prelude.h",),
    mlx_constructor="cuda_kernel",
    mlx_options=_cuda_options,
    mlx_has_backend=_mlx_has_cuda,
    construct_tag="[cuda_kernel]",
    call_tag="[custom_kernel]",
    template_tag="[cuda_kernel]",
    verbose_shows_kernel_name=True,
    group_memory="shared",
    group_memory_declaration=r"__shared__",
    has_compile_options=False,
    has_float64=True,
    writable_binding="{type}* {name} = const_cast<{type}*>({source});",
    # CUDA rounds the grid up to whole blocks: guard.
    copy_body=(
        "size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;\n"
        "if (i < size_t(src_shape[0])) dst[i] = src[i];\n"
    ),
)

DIALECTS = {d.name: d for d in (METAL, CUDA)}
NAMES = tuple(DIALECTS)
DEFAULT = METAL  # what a candidate is when nothing says (the simulator's default too)


def get(name: str) -> Dialect:
    """The dialect called `name`; ValueError naming the choices otherwise."""
    try:
        return DIALECTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dialect {name!r}; choose from {', '.join(NAMES)}") from None


def of_file(filename) -> Dialect | None:
    """The dialect a file's suffix says (.metal; .cu, .cuh), None for any other."""
    name = str(filename or "")
    for d in DIALECTS.values():
        if name.endswith(d.suffixes):
            return d
    return None


def name_of_file(filename) -> str | None:
    """The name of the dialect `of_file` gives, None for none."""
    d = of_file(filename)
    return d.name if d else None


def for_backend(backend_name: str) -> Dialect:
    """The dialect a backend runs when none is asked for: a GPU backend's own,
    metal on the simulator (which runs either)."""
    for d in DIALECTS.values():
        if d.gpu_backend == backend_name:
            return d
    return DEFAULT
