"""The generator in mlxsci.kernel.signature must agree byte for byte with MLX's own."""

import pytest
from helpers import mlx_verbose_output

from mlxsci.kernel.signature import ArgInfo, metal_source

CASES = {
    "saxpy": dict(
        name="saxpy",
        input_names=["x", "y", "a", "N"],
        output_names=["y_out"],
        source="\nuint i = thread_position_in_grid.x;\nif (i < N) y_out[i] = a * x[i] + y[i];\n",
        header="",
        inputs=[("float32", [1000]), ("float32", [1000]), ("float32", []), ("uint32", [])],
        output_dtypes=["float32"],
        template=None,
        atomic_outputs=False,
    ),
    "template_small_shapes": dict(
        name="myexp",
        input_names=["inp", "s", "small", "flag"],
        output_names=["out", "out2"],
        source="uint n = inp_shape[0] + inp_strides[0] + inp_ndim; threadgroup float buf[256];\n"
        "uint l = thread_index_in_simdgroup + simdgroup_index_in_threadgroup;\n"
        "out[thread_position_in_grid.x] = T(n + l);",
        header="#include <metal_simdgroup>\n",
        inputs=[("float32", [4, 16]), ("float32", []), ("float16", [3]), ("bool", [])],
        output_dtypes=["float32", "int32"],
        template=[["T", "float32", "dtype"], ["N", 4, "int"], ["B", False, "bool"]],
        atomic_outputs=False,
    ),
    "negative_template_atomic": dict(
        name="acc",
        input_names=["v"],
        output_names=["o"],
        source="atomic_fetch_add_explicit(&o[0], v[threads_per_threadgroup.x], memory_order_relaxed);",
        header="",
        inputs=[("int32", [64])],
        output_dtypes=["int32"],
        template=[["K", -2, "int"]],
        atomic_outputs=True,
    ),
    "quirk_shape_two_outputs_no_attr": dict(
        name="q",
        input_names=["a"],
        output_names=["o1", "o2"],
        source="o1[0] = a_shape[0]; o2[0] = 1;",
        header="",
        inputs=[("int32", [10])],
        output_dtypes=["int32", "int32"],
        template=None,
        atomic_outputs=False,
    ),
    "header_without_newline": dict(
        name="h",
        input_names=["a"],
        output_names=["o"],
        source="o[0] = a[0];",
        header="inline float two() { return 2.0f; }",
        inputs=[("float32", [100])],
        output_dtypes=["float32"],
        template=None,
        atomic_outputs=False,
    ),
}


def mlx_generated(case):
    out = mlx_verbose_output(case)
    start = out.index("```\n") + 4
    end = out.rindex("```")
    # MLX prints the source followed by a newline of its own before the fence.
    assert out[end - 1] == "\n"
    return out[start : end - 1]


@pytest.mark.parametrize("key", sorted(CASES))
def test_metal_source_matches_mlx(key):
    case = CASES[key]
    template = None
    if case["template"] is not None:
        template = [(k, v) for k, v, _ in case["template"]]
    ours = metal_source(
        case["name"],
        case["input_names"],
        case["output_names"],
        case["source"],
        case["header"],
        [ArgInfo(d, tuple(s)) for d, s in case["inputs"]],
        case["output_dtypes"],
        template,
        case["atomic_outputs"],
    )
    assert ours.text == mlx_generated(case)


def test_body_line_points_at_body():
    src = metal_source(
        "k",
        ["a"],
        ["o"],
        "o[0] = 1;\no[1] = 2;",
        "// h1\n// h2\n",
        [ArgInfo("float32", (10,))],
        ["float32"],
    )
    lines = src.text.splitlines()
    assert lines[src.body_first_line - 1] == "o[0] = 1;"
    assert lines[src.header_first_line - 1] == "// h1"


# ---------------------------------------------------------------------- CUDA
# Expected texts written out from MLX 0.32's build_kernel
# (mlx/backend/cuda/custom_kernel.cpp): default_header, the header pasted
# verbatim, `namespace mlx::core::cu {`, every input `const T*`, flagged
# Shape/Strides/int parameters, outputs `T*`, template constants, the body.
# (MLX 0.32.4's default_header, read in libmlx.so of its CUDA wheel: no `inf` macro.)
CUDA_PREFIX = (
    '\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n'
)


def test_cuda_source_saxpy():
    from mlxsci.kernel.signature import cuda_source

    src = "\n  auto i = cooperative_groups::this_grid().thread_rank();\n  if (i < N[0]) y_out[i] = a[0] * x[i] + y[i];\n"
    cs = cuda_source(
        "saxpy",
        ["x", "y", "a", "N"],
        ["y_out"],
        src,
        "",
        [
            ArgInfo("float32", (1000,)),
            ArgInfo("float32", (1000,)),
            ArgInfo("float32", ()),
            ArgInfo("uint32", ()),
        ],
        ["float32"],
    )
    assert cs.text == (
        CUDA_PREFIX + "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
        "__global__ void custom_kernel_saxpy(\n"
        "    const float* x,\n    const float* y,\n    const float* a,\n    const uint32_t* N,\n"
        "    float* y_out) {\n" + src + "\n}\n\n} // namespace mlx::core::cu\n"
    )
    assert cs.kernel_name == "custom_kernel_saxpy"
    assert cs.params == (
        ("x", "input"),
        ("y", "input"),
        ("a", "input"),
        ("N", "input"),
        ("y_out", "output"),
    )
    assert cs.header_first_line == 6 and cs.body_first_line == 16
    assert cs.text.split("\n")[cs.body_first_line - 1] == src.split("\n")[0]


def test_cuda_source_template_and_shape_flags():
    import mlx.core as mx

    from mlxsci.kernel.signature import cuda_source

    src = "out[0] = T(inp_shape[0] + inp_strides[1] + inp_ndim) + N + B + s[0];"
    cs = cuda_source(
        "myexp",
        ["inp", "s", "h"],
        ["out", "cnt"],
        src,
        "#include <cuda_fp16.h>\n",
        [ArgInfo("float16", (4, 16)), ArgInfo("float32", ()), ArgInfo("bfloat16", (3,))],
        ["float16", "int64"],
        [("T", mx.float32), ("N", 4), ("B", True), ("C", False), ("H", mx.float16), ("M", -3)],
    )
    assert cs.kernel_name == "custom_kernel_myexp_float_4_t_f_float16_t_-3"
    assert cs.text == (
        CUDA_PREFIX + "#include <cuda_fp16.h>\n"
        "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
        "__global__ void custom_kernel_myexp_float_4_t_f_float16_t_-3(\n"
        "    const __half* inp,\n"
        "    const __grid_constant__ Shape inp_shape,\n"
        "    const __grid_constant__ Strides inp_strides,\n"
        "    const __grid_constant__ int inp_ndim,\n"
        "    const float* s,\n"
        "    const __nv_bfloat16* h,\n"
        "    __half* out,\n"
        "    int64_t* cnt) {\n"
        "  using T = float;\n  constexpr int N = 4;\n  constexpr bool B = true;\n"
        "  constexpr bool C = false;\n  using H = __half;\n  constexpr int M = -3;\n\n"
        + src
        + "\n}\n\n} // namespace mlx::core::cu\n"
    )
    assert [r for _, r in cs.params] == [
        "input",
        "shape",
        "strides",
        "ndim",
        "input",
        "input",
        "output",
        "output",
    ]
    assert cs.header_first_line == 6 and cs.body_first_line == 27
    assert cs.unmatched_args == ()


def test_cuda_source_header_without_newline_and_zero_d_quirk():
    from mlxsci.kernel.signature import cuda_source

    # The header fuses with `namespace mlx::core::cu {`, as in MLX.
    cs = cuda_source(
        "h",
        ["a"],
        ["o"],
        "o[0] = two();",
        "__device__ float two() { return 2.0f; }",
        [ArgInfo("float32", (100,))],
        ["float32"],
    )
    assert cs.text == (
        CUDA_PREFIX + "__device__ float two() { return 2.0f; }namespace mlx::core::cu {\n\n"
        "namespace cg = cooperative_groups;\n\n__global__ void custom_kernel_h(\n"
        "    const float* a,\n    float* o) {\no[0] = two();\n}\n\n} // namespace mlx::core::cu\n"
    )
    # A 0-d input whose `<name>_shape` occurs in the source (here in a comment):
    # the signature omits the parameter; MLX would still pass the argument.
    cs = cuda_source(
        "q",
        ["x", "s"],
        ["o"],
        "// s_shape s_ndim\no[0] = x[0] * s[0] + x_shape[0];",
        "",
        [ArgInfo("float32", (4,)), ArgInfo("float32", ())],
        ["float32"],
    )
    assert (
        "    const float* x,\n    const __grid_constant__ Shape x_shape,\n    const float* s,\n    float* o) {\n"
        in cs.text
    )
    assert cs.unmatched_args == ("s_shape", "s_ndim")
    assert [n for n, _ in cs.params] == ["x", "x_shape", "s", "o"]
