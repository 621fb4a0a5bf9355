"""Run a task's host pipeline through the Metal backend on a machine without Metal.

MLX allows metal_kernel calls while mx.export_function traces, and prints the
generated source with verbose=True (tests/mlx_verbose_source.py uses the same
trick). This exercises Launcher -> MetalBackend -> mx.fast.metal_kernel
exactly as on a Mac, short of compiling. Prints MLX's output; run as a subprocess.

argv: TASK SIZE_SET
"""

import os
import sys
import tempfile

import mlx.core as mx

from mlxsci.backends.mlx_gpu import MetalBackend
from mlxsci.kernel.candidate import parse
from mlxsci.task import load_task
from mlxsci.worker.launch import Launcher


def main(task_name, size_set):
    task = load_task(task_name)
    size = task.size_set(size_set)[0]
    backend = MetalBackend(verbose=True)
    cand = parse(task.seed("metal"), dialect="metal", filename=str(task.seed_path("metal")))
    launcher = Launcher(backend, task, cand, size.params)
    host = task.make_inputs(size.params)
    names = list(host)

    def pipeline(*arrays):
        return list(task.run(launcher, dict(zip(names, arrays)), size.params).values())

    path = os.path.join(tempfile.mkdtemp(), "pipeline.mlxfn")
    mx.export_function(path, pipeline, *[mx.array(host[n]) for n in names])


if __name__ == "__main__":
    main(*sys.argv[1:])
