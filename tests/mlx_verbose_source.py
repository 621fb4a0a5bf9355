"""Print the Metal source the installed MLX would compile, as JSON on the last line.

Run as a subprocess: MLX's `verbose=True` prints from C++ to fd 1, so it can
only be captured from outside the process. Uses the export_function trick:
MLX allows metal_kernel calls while mx.export_function traces and prints the
generated source then, which works without a Mac.

stdin: JSON {name, input_names, output_names, source, header, inputs:
[[dtype, shape]], output_dtypes, template: [[k, v, kind]] | null, atomic_outputs}
"""

import json
import os
import sys
import tempfile

import mlx.core as mx


def dtype(name):
    return mx.bool_ if name == "bool" else getattr(mx, name)


def main():
    job = json.load(sys.stdin)
    arrays = [mx.zeros(shape, dtype=dtype(dt)) for dt, shape in job["inputs"]]
    template = None
    if job["template"] is not None:
        template = [(k, dtype(v) if kind == "dtype" else v) for k, v, kind in job["template"]]
    kernel = mx.fast.metal_kernel(
        name=job["name"],
        input_names=job["input_names"],
        output_names=job["output_names"],
        source=job["source"],
        header=job["header"],
        atomic_outputs=job["atomic_outputs"],
    )

    def f(*xs):
        return kernel(
            inputs=list(xs),
            template=template,
            grid=(32, 1, 1),
            threadgroup=(32, 1, 1),
            output_shapes=[(4,)] * len(job["output_names"]),
            output_dtypes=[dtype(d) for d in job["output_dtypes"]],
            verbose=True,
        )

    path = os.path.join(tempfile.mkdtemp(), "k.mlxfn")
    mx.export_function(path, f, *arrays)


if __name__ == "__main__":
    main()
