"""The generator in mlxsci.signature must agree byte for byte with MLX's own."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlxsci.signature import ArgInfo, metal_source

HELPER = Path(__file__).with_name("mlx_verbose_source.py")

CASES = {
    "saxpy": dict(name="saxpy", input_names=["x", "y", "a", "N"], output_names=["y_out"],
                  source="\nuint i = thread_position_in_grid.x;\nif (i < N) y_out[i] = a * x[i] + y[i];\n",
                  header="", inputs=[("float32", [1000]), ("float32", [1000]), ("float32", []),
                                     ("uint32", [])],
                  output_dtypes=["float32"], template=None, atomic_outputs=False),
    "template_small_shapes": dict(
        name="myexp", input_names=["inp", "s", "small", "flag"], output_names=["out", "out2"],
        source="uint n = inp_shape[0] + inp_strides[0] + inp_ndim; threadgroup float buf[256];\n"
               "uint l = thread_index_in_simdgroup + simdgroup_index_in_threadgroup;\n"
               "out[thread_position_in_grid.x] = T(n + l);",
        header="#include <metal_simdgroup>\n",
        inputs=[("float32", [4, 16]), ("float32", []), ("float16", [3]), ("bool", [])],
        output_dtypes=["float32", "int32"],
        template=[["T", "float32", "dtype"], ["N", 4, "int"], ["B", False, "bool"]],
        atomic_outputs=False),
    "negative_template_atomic": dict(
        name="acc", input_names=["v"], output_names=["o"],
        source="atomic_fetch_add_explicit(&o[0], v[threads_per_threadgroup.x], memory_order_relaxed);",
        header="", inputs=[("int32", [64])], output_dtypes=["int32"],
        template=[["K", -2, "int"]], atomic_outputs=True),
    "quirk_shape_two_outputs_no_attr": dict(
        name="q", input_names=["a"], output_names=["o1", "o2"], source="o1[0] = a_shape[0]; o2[0] = 1;",
        header="", inputs=[("int32", [10])], output_dtypes=["int32", "int32"], template=None,
        atomic_outputs=False),
    "header_without_newline": dict(
        name="h", input_names=["a"], output_names=["o"], source="o[0] = a[0];",
        header="inline float two() { return 2.0f; }", inputs=[("float32", [100])],
        output_dtypes=["float32"], template=None, atomic_outputs=False),
}


def mlx_generated(case):
    proc = subprocess.run([sys.executable, str(HELPER)], input=json.dumps(case), text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    start = out.index("```\n") + 4
    end = out.rindex("```")
    # MLX prints the source followed by a newline of its own before the fence.
    assert out[end - 1] == "\n"
    return out[start:end - 1]


@pytest.mark.parametrize("key", sorted(CASES))
def test_metal_source_matches_mlx(key):
    case = CASES[key]
    template = None
    if case["template"] is not None:
        template = [(k, v) for k, v, _ in case["template"]]
    ours = metal_source(case["name"], case["input_names"], case["output_names"], case["source"],
                        case["header"], [ArgInfo(d, tuple(s)) for d, s in case["inputs"]],
                        case["output_dtypes"], template, case["atomic_outputs"])
    assert ours.text == mlx_generated(case)


def test_body_line_points_at_body():
    src = metal_source("k", ["a"], ["o"], "o[0] = 1;\no[1] = 2;", "// h1\n// h2\n",
                       [ArgInfo("float32", (10,))], ["float32"])
    lines = src.text.splitlines()
    assert lines[src.body_first_line - 1] == "o[0] = 1;"
    assert lines[src.header_first_line - 1] == "// h1"
