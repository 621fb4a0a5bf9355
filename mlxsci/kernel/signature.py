"""The kernel source text MLX hands to the compiler, reproduced exactly.

`mx.fast.metal_kernel` wraps a body in a generated signature whose shape
depends on the input names, dtypes, sizes, the text of the body and the
template arguments; this module mirrors MLX's generator. The simulator
compiles this same text, so a candidate sees the same parameters, types and
address spaces on every backend. `tests/kernel/test_signature.py` checks the output
against what the installed MLX prints with `verbose=True`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Thread attributes MLX detects by substring search in the body, in the order
# it emits them, with the type it declares.
METAL_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
)

# MLX dtype name -> Metal type string (get_type_string in MLX).
METAL_TYPES = {
    "float32": "float",
    "float16": "float16_t",
    "bfloat16": "bfloat16_t",
    "float64": "double",
    "complex64": "complex64_t",
    "bool": "bool",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
}

# Arrays with fewer elements than this are bound in the constant address space.
MAX_CONSTANT_ARRAY_SIZE = 8


def dtype_name(dtype) -> str:
    """'float32' for mx.float32, np.float32, np.dtype('float32') or 'float32'."""
    if isinstance(dtype, str):
        name = dtype
    else:
        name = str(dtype)
        if name.startswith("mlx.core."):
            name = name[len("mlx.core.") :]
        else:
            name = np.dtype(dtype).name
    if name not in METAL_TYPES:
        raise ValueError(f"unsupported dtype {dtype!r}")
    return name


@dataclass(frozen=True)
class ArgInfo:
    """What the generator needs to know of one bound input array."""

    dtype: str  # MLX dtype name, e.g. "float32"
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @classmethod
    def of(cls, array) -> ArgInfo:
        return cls(dtype_name(array.dtype), tuple(int(d) for d in array.shape))


def template_value(value) -> str:
    """A template argument as MLX writes it in a kernel's name and text:
    1/0 for a bool, the integer, else the dtype's Metal type."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return METAL_TYPES[dtype_name(value)]


def template_kind(value) -> str:
    """A template parameter's kind in the generated signature: bool, int or typename."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return "typename"


def metal_kernel_name(
    name: str,
    inputs: list[ArgInfo],
    output_dtypes: list[str],
    template: list[tuple[str, object]] | None = None,
) -> str:
    """The host name MLX gives a metal_kernel variant."""
    kname = "custom_kernel_" + name
    if template:
        args = "<" + ", ".join(template_value(v) for _, v in template) + ">"
        thash = args.replace("<", "_").replace(">", "_").replace(", ", "_").replace("-", "_")
        if thash.endswith("_"):
            thash = thash[:-1]
        kname += "_" + thash
    for info in inputs:
        suffix = "s" if info.ndim == 0 else ("c" if info.size < MAX_CONSTANT_ARRAY_SIZE else "")
        kname += "_" + METAL_TYPES[info.dtype] + suffix
    for dt in output_dtypes:
        kname += "_" + METAL_TYPES[dtype_name(dt)]
    return kname


def metal_attributes_used(source: str) -> list[tuple[str, str]]:
    """Thread attributes MLX will declare for this body (substring match, as MLX does)."""
    return [(attr, typ) for attr, typ in METAL_ATTRIBUTES if attr in source]


@dataclass(frozen=True)
class GeneratedSource:
    """Generated kernel text plus where the user's header and body sit in it."""

    text: str
    kernel_name: str
    header_first_line: int  # 1-based line of the header's first line in `text`
    body_first_line: int  # 1-based line of the body's first line in `text`
    params: tuple[tuple[str, str], ...]  # (parameter name, role) in signature order;
    # role is "input", "shape", "strides", "ndim", "output" or (Metal) "attr:<type>"


@dataclass(frozen=True)
class MetalSource(GeneratedSource):
    """What mx.fast.metal_kernel generates."""


def metal_input_params(
    input_names: list[str],
    inputs: list[ArgInfo],
    source: str,
    parts: list[str],
    params: list[tuple[str, str]],
) -> int:
    """The inputs' lines of a metal_kernel signature, appended to `parts`
    (and their (name, role) to `params`): each input in the constant (0-d,
    or fewer than MAX_CONSTANT_ARRAY_SIZE elements) or device address space,
    then its _shape, _strides and _ndim where the body names them. Returns
    the next buffer index."""
    index = 0
    for n, info in zip(input_names, inputs):
        t = METAL_TYPES[info.dtype]
        if info.ndim == 0:
            parts.append(f"  const constant {t}& {n} [[buffer({index})]],\n")
        elif info.size < MAX_CONSTANT_ARRAY_SIZE:
            parts.append(f"  const constant {t}* {n} [[buffer({index})]],\n")
        else:
            parts.append(f"  const device {t}* {n} [[buffer({index})]],\n")
        params.append((n, "input"))
        index += 1
        if info.ndim > 0:
            if n + "_shape" in source:
                parts.append(f"  const constant int* {n}_shape [[buffer({index})]],\n")
                params.append((n + "_shape", "shape"))
                index += 1
            if n + "_strides" in source:
                parts.append(f"  const constant int64_t* {n}_strides [[buffer({index})]],\n")
                params.append((n + "_strides", "strides"))
                index += 1
            if n + "_ndim" in source:
                parts.append(f"  const constant int& {n}_ndim [[buffer({index})]],\n")
                params.append((n + "_ndim", "ndim"))
                index += 1
    return index


def metal_source(
    name: str,
    input_names: list[str],
    output_names: list[str],
    source: str,
    header: str,
    inputs: list[ArgInfo],
    output_dtypes: list,
    template: list[tuple[str, object]] | None = None,
    atomic_outputs: bool = False,
) -> MetalSource:
    """Reproduce MLX 0.32's write_signature output, byte for byte.

    Includes its known quirk: with no thread attribute, any *_shape/_strides/
    _ndim parameter and two or more outputs, the closing `) {` is emitted too
    early, and the text does not compile, exactly as on a Mac.
    """
    if len(inputs) != len(input_names):
        raise ValueError(f"expected {len(input_names)} inputs, got {len(inputs)}")
    out_types = [METAL_TYPES[dtype_name(d)] for d in output_dtypes]
    kname = metal_kernel_name(name, inputs, output_dtypes, template)
    attrs = metal_attributes_used(source)
    params: list[tuple[str, str]] = []

    parts = [header]
    if template:
        parts.append(
            "template <" + ", ".join(f"{template_kind(v)} {k}" for k, v in template) + ">\n"
        )
    parts.append(f"[[kernel]] void {kname}(\n")
    index = metal_input_params(input_names, inputs, source, parts, params)
    n_args = len(inputs) + len(output_names)
    for n, t in zip(output_names, out_types):
        qual = f"device atomic<{t}>*" if atomic_outputs else f"device {t}*"
        parts.append(f"  {qual} {n} [[buffer({index})]]")
        params.append((n, "output"))
        # MLX compares the buffer index (which counts shape/stride/ndim slots)
        # with the number of inputs plus outputs: reproduced on purpose.
        parts.append(",\n" if (index < n_args - 1 or attrs) else ") {\n")
        index += 1
    for i, (attr, typ) in enumerate(attrs):
        parts.append(f"  {typ} {attr} [[{attr}]]")
        params.append((attr, "attr:" + typ))
        parts.append(",\n" if i < len(attrs) - 1 else ") {\n")
    body_start = "".join(parts)
    parts.append(source)
    parts.append("\n}\n")
    if template:
        args = ", ".join(template_value(v) for _, v in template)
        parts.append(
            f'\ntemplate [[host_name("{kname}")]] [[kernel]] '
            f"decltype({kname}<{args}>) {kname}<{args}>;\n"
        )
    text = "".join(parts)
    return MetalSource(
        text=text,
        kernel_name=kname,
        header_first_line=1,
        body_first_line=body_start.count("\n") + 1,
        params=tuple(params),
    )


# ---------------------------------------------------------------------- CUDA
# MLX dtype name -> CUDA type string (dtype_to_cuda_type in MLX's CUDA backend).
CUDA_TYPES = {
    "bool": "bool",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float",
    "float64": "double",
    "complex64": "mlx::core::cu::complex64_t",
}

# MAX_NDIM of MLX's CUDA device code: Shape and Strides are arrays of this size.
CUDA_MAX_NDIM = 10

# What build_kernel puts before the header (its `default_header`), as the
# released MLX 0.32.4 CUDA wheels hold it: the string literal in libmlx.so of
# mlx-cuda-12==0.32.4 is exactly these 5 lines, so the header starts on line 6
# of the program NVRTC compiles. Other trees of ml-explore/mlx (e.g. commit
# d6b204b5, mlx/backend/cuda/custom_kernel.cpp, `default_header`) add
# `#define inf cuda::std::numeric_limits<float>::infinity()` and a blank line:
# a mirror with those 2 lines placed the body 2 lines lower than NVRTC numbers
# it, so mapped lines came out 2 too small (an error on line 6 of a candidate
# read as line 4 on an H100 with 0.32.4). So
# 0.32.4 has no `inf` macro, and a body that uses `inf` fails to compile there
# and on the simulator alike. mlx_gpu.CudaBackend measures the offset at run
# time too, so a later MLX that adds lines still maps right.
CUDA_DEFAULT_HEADER = (
    '\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n'
)


def cuda_kernel_name(name: str, template: list[tuple[str, object]] | None = None) -> str:
    """The kernel name MLX gives a cuda_kernel variant: no dtype suffix, one
    `_<value>` per template argument (`_t`/`_f` for bools, the Metal-style
    type string for dtypes)."""
    kname = "custom_kernel_" + name
    for _, v in template or ():
        if isinstance(v, bool):
            kname += "_t" if v else "_f"
        elif isinstance(v, int):
            kname += f"_{v}"
        else:
            kname += "_" + METAL_TYPES[dtype_name(v)]
    return kname


@dataclass(frozen=True)
class CudaSource(GeneratedSource):
    """What mx.fast.cuda_kernel generates."""

    # Inputs for which MLX passes a shape/strides/ndim argument that the
    # signature does not declare (0-d inputs whose `<name>_shape` etc. occurs
    # in the source): on a GPU every later argument is misaligned.
    unmatched_args: tuple[str, ...] = ()


def cuda_source(
    name: str,
    input_names: list[str],
    output_names: list[str],
    source: str,
    header: str,
    inputs: list[ArgInfo],
    output_dtypes: list,
    template: list[tuple[str, object]] | None = None,
) -> CudaSource:
    """Reproduce MLX 0.32's CUDA build_kernel output, byte for byte.

    Includes its known quirk: for a 0-d input whose `<name>_shape`,
    `<name>_strides` or `<name>_ndim` occurs in the source, the signature omits
    the parameter while the launch still passes the argument; those argument
    names are listed in `unmatched_args`.
    """
    if len(inputs) != len(input_names):
        raise ValueError(f"expected {len(input_names)} inputs, got {len(inputs)}")
    kname = cuda_kernel_name(name, template)
    params: list[tuple[str, str]] = []
    unmatched: list[str] = []
    parts = [
        CUDA_DEFAULT_HEADER,
        header,
        "namespace mlx::core::cu {\n\n",
        "namespace cg = cooperative_groups;\n\n",
        "__global__ void ",
        kname,
        "(\n",
    ]
    for n, info in zip(input_names, inputs):
        parts.append(f"    const {CUDA_TYPES[info.dtype]}* {n},\n")
        params.append((n, "input"))
        flags = [
            (role, n + "_" + role)
            for role in ("shape", "strides", "ndim")
            if n + "_" + role in source
        ]
        if info.ndim > 0:
            for role, pname in flags:
                typ = {"shape": "Shape", "strides": "Strides", "ndim": "int"}[role]
                parts.append(f"    const __grid_constant__ {typ} {pname},\n")
                params.append((pname, role))
        else:
            unmatched.extend(pname for _, pname in flags)
    for i, (n, dt) in enumerate(zip(output_names, output_dtypes)):
        parts.append(f"    {CUDA_TYPES[dtype_name(dt)]}* {n}")
        params.append((n, "output"))
        parts.append(",\n" if i < len(output_names) - 1 else ") {\n")
    if template:
        for k, v in template:
            if isinstance(v, bool):
                parts.append(f"  constexpr bool {k} = {'true' if v else 'false'};\n")
            elif isinstance(v, int):
                parts.append(f"  constexpr int {k} = {v};\n")
            else:
                parts.append(f"  using {k} = {CUDA_TYPES[dtype_name(v)]};\n")
        parts.append("\n")
    body_start = "".join(parts)
    text = body_start + source + "\n}\n\n} // namespace mlx::core::cu\n"
    return CudaSource(
        text=text,
        kernel_name=kname,
        header_first_line=CUDA_DEFAULT_HEADER.count("\n") + 1,
        body_first_line=body_start.count("\n") + 1,
        params=tuple(params),
        unmatched_args=tuple(unmatched),
    )
