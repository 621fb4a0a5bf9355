"""mlxsci.task_from_kernel (mlxsci/fast/as_task.py): an mlxsci.fast kernel and
a NumPy reference as a task that evaluate and the search take; arguments it
cannot take refused with what to change; the example project
(examples/mlx_project) whose tests run on the simulator through the plugin.

The functions given to task_from_kernel are this module's: the worker
imports them by name from this file (a single-file module), which is all of
the tests folder it may read. So this module imports nothing at its top that
the sandboxed worker may not read (mlxsci.search: inside the test).
"""

import ast
import functools
import importlib
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import mlxsci
from mlxsci import fast
from mlxsci.task import load_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mlx_project"

# A fused elementwise op as an MLX project writes it: y = max(x, 0) * scale.
RELU_SCALE = """
uint i = thread_position_in_grid.x;
y[i] = max(x[i], 0.0f) * scale;
"""
WRONG_BODY = "y[i] = x[i] * scale;"  # forgets the max: wrong wherever x < 0


def relu_scale_kernel():
    return fast.metal_kernel("relu_scale", ["x", "scale"], ["y"], RELU_SCALE)


def make_inputs(size, seed):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal(size["N"]).astype(np.float32),
        "scale": np.array(1.5, dtype=np.float32),
    }


def reference(inputs, size):
    """y = max(x, 0) * scale, elementwise."""
    return {"y": (np.maximum(inputs["x"], 0) * inputs["scale"]).astype(np.float32)}


def make_inputs_float64(size, seed):
    return dict(make_inputs(size, seed), x=np.zeros(size["N"]))  # NumPy's default: float64


def wrong_reference(inputs, size):
    return {"z": inputs["x"]}


SIZES = {"smoke": {"N": 1001}, "in-dist": [{"N": 4096}], "held-out": {"N": 3000}}


def relu_scale_task(**overrides):
    arguments = dict(
        reference=reference,
        make_inputs=make_inputs,
        sizes=SIZES,
        grid=("N", 1, 1),
        threadgroup=(64, 1, 1),
        output_shapes=[("N",)],
        output_dtypes=[mx.float32],
    )
    arguments.update(overrides)
    return mlxsci.task_from_kernel(relu_scale_kernel(), **arguments)


def test_the_task_is_a_task_folder_of_the_kernel():
    task = relu_scale_task()
    assert task.name == "relu_scale" and task.kernel_names == ["relu_scale"]
    contract = task.kernel("relu_scale")
    assert contract.inputs == ("x", "scale") and contract.outputs == ("y",)
    assert contract.grid == "(N, 1, 1)" and contract.threadgroup == "(64, 1, 1)"
    assert [s.label for s in task.size_set("all")] == ["1001", "4096", "3000"]
    assert task.chain == {"x": "y"}  # the one input of the output's shape and dtype
    assert task.takes_seed
    # The worker may read this file (the functions' module), nothing else of the tests.
    assert task.code_paths == (str(Path(__file__).resolve()),)
    assert "//! kernel relu_scale" in task.seed() and "max(x[i], 0.0f)" in task.seed()
    assert {p.name for p in task.folder.iterdir()} >= {"task.py", "reference.py", "seed.metal"}
    # The trusted side's reference.py imports nothing of mlxsci.
    tree = ast.parse((task.folder / "reference.py").read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert imported and not [m for m in imported if m and m.startswith("mlxsci")], imported
    # The same arguments make the same folder; another tolerance, another task.
    assert relu_scale_task().folder == task.folder
    assert relu_scale_task(tolerance=1e-3).folder != task.folder
    # The roofline's default: the inputs' and outputs' bytes.
    assert task.bytes_moved({"N": 1001}) == 4 * 1001 + 4 + 4 * 1001
    assert task.flops({"N": 1001}) == 0 and task.bound == "bandwidth"
    assert mlxsci.task_inputs(task, {"N": 10}, numpy=True)["x"].shape == (10,)


@pytest.mark.slow
def test_evaluate_passes_the_kernel_and_gives_a_wrong_one_a_verdict():
    task = relu_scale_task()
    ev = mlxsci.evaluate(task, backend="sim", size_set="smoke")
    assert ev.correct, ev.fail_reason
    assert ev.task == "relu_scale" and ev.score > 0
    wrong = task.seed().replace("y[i] = max(x[i], 0.0f) * scale;", WRONG_BODY)
    assert wrong != task.seed()
    ev = mlxsci.evaluate(task, wrong, backend="sim", size_set="smoke")
    assert not ev.correct and ev.score == 0.0
    assert "correctness failed" in ev.fail_reason
    # and as an MLX function, the size's N given
    relu = mlxsci.kernel_function(task, backend="sim")
    y = relu(x=np.array([-1.0, 2.0], dtype=np.float32), scale=2.0, size={"N": 2})["y"]
    assert np.array(y).tolist() == [0.0, 4.0]


RELU_SCALE_CUDA = """
auto i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) y[i] = fmaxf(x[i], 0.0f) * scale[0];
"""


@pytest.mark.slow
def test_a_cuda_kernels_task_is_evaluated_in_cuda_without_saying_so():
    kernel = fast.cuda_kernel("relu_scale_cu", ["x", "scale"], ["y"], RELU_SCALE_CUDA)
    task = mlxsci.task_from_kernel(
        kernel,
        reference=reference,
        make_inputs=make_inputs,
        sizes=SIZES,
        grid=("N", 1, 1),
        threadgroup=(64, 1, 1),
        output_shapes=[("N",)],
        output_dtypes=[mx.float32],
    )
    assert task.seed_dialects() == ["cuda"]
    ev = mlxsci.evaluate(task, backend="sim", size_set="smoke")
    assert ev.correct, ev.fail_reason
    with pytest.raises(ValueError, match="no Metal seed"):
        task.seed("metal")


@pytest.mark.slow
def test_the_search_runs_on_it(tmp_path):
    import mlxsci.search

    summary = mlxsci.search.run(
        relu_scale_task(), "autotune", iterations=1, backend="sim", sizes="smoke", out=tmp_path
    )
    assert summary["task"] == "relu_scale" and summary["seed_score"] > 0
    assert (tmp_path / "summary.json").is_file()


def _closure():
    def inner(inputs, size):
        return inputs

    return inner


def _from_main(inputs, size):
    return inputs


_from_main.__module__ = "__main__"


@pytest.mark.parametrize(
    "given, said",
    [
        (lambda inputs, size: inputs, "is a lambda"),
        (_closure(), "defined inside a function"),
        (_from_main, "the script being run (__main__)"),
        (functools.partial(reference), "has no module and name"),
        (print, "has no source file here"),
    ],
)
def test_a_reference_no_other_process_can_import_is_refused(given, said):
    with pytest.raises(ValueError) as caught:
        relu_scale_task(reference=given)
    assert said in str(caught.value)
    assert "top level of a module" in str(caught.value)


@pytest.mark.parametrize(
    "overrides, error, said",
    [
        ({"grid": lambda size: (size["N"], 1, 1)}, TypeError, "not a function"),
        ({"grid": ("M", 1, 1)}, ValueError, "unknown name 'M'"),
        ({"threadgroup": (2048, 1, 1)}, ValueError, "threadgroup"),
        ({"reference": wrong_reference}, ValueError, "returned z"),
        ({"output_shapes": [("N", 2)]}, ValueError, "output_shapes says (1001, 2)"),
        ({"output_dtypes": ["float128"]}, ValueError, "output_dtypes"),
        ({"sizes": {"smoke": {"N": 5}, "big": {"N": 9}}}, ValueError, "mixes size sets"),
        ({"template": [("N", 4)]}, ValueError, "name of a size parameter"),
        ({"name": "saxpy"}, ValueError, "built-in task's name"),
        ({"chain": {"scale": "y"}}, ValueError, "a chained output must be"),
        ({"bound": "compute"}, ValueError, "give flops"),
        ({"tolerance": float("nan")}, ValueError, "tolerance must be finite"),
        ({"tolerance": (-1.0, 0.0)}, ValueError, "must not be negative"),
        ({"init_value": float("inf")}, ValueError, "init_value must be finite"),
        ({"output_dtypes": [mx.float64]}, ValueError, "Metal has no float64"),
        ({"make_inputs": make_inputs_float64}, ValueError, "x as float64"),
        ({"template_choices": {"T": 5}}, TypeError, "must be a list of values"),
        ({"description": 5}, TypeError, "description must be a str"),
    ],
)
def test_arguments_it_cannot_take_say_what_to_change(overrides, error, said):
    with pytest.raises(error) as caught:
        relu_scale_task(**overrides)
    assert said in str(caught.value)


def test_mlxs_own_kernel_object_is_refused_with_the_way_round():
    with pytest.raises(TypeError, match="mlxsci.fast.simulate"):
        mlxsci.task_from_kernel(
            object(), reference=reference, make_inputs=make_inputs, sizes=SIZES,
            grid=("N", 1, 1), threadgroup=(64, 1, 1), output_shapes=[("N",)],
            output_dtypes=[mx.float32],
        )  # fmt: skip


def test_a_task_made_in_memory_is_refused_by_load_task():
    import dataclasses

    task = dataclasses.replace(relu_scale_task(), origin="")
    with pytest.raises(ValueError, match="made in memory"):
        load_task(task)


MODULE = """
import numpy as np


def make_inputs(size):
    return {"x": np.linspace(-1, 1, size["N"], dtype=np.float32),
            "scale": np.array(2.0, dtype=np.float32)}


def reference(inputs, size):
    return {"y": np.maximum(inputs["x"], 0) * inputs["scale"]}
"""


@pytest.mark.slow
def test_another_process_loads_it_and_a_changed_module_stops_it(tmp_path, monkeypatch):
    """A module that is on no path another process has (a resumed search, the
    worker) is imported from where it was; once its file changes the task
    refuses to load, here and there."""
    module = tmp_path / "relu_parts.py"
    module.write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "relu_parts", raising=False)
    import relu_parts

    task = relu_scale_task(make_inputs=relu_parts.make_inputs, reference=relu_parts.reference)
    try:
        assert not task.takes_seed  # make_inputs(size): one fixed set of inputs
        assert task.code_paths == (str(module.resolve()),)
        # As the worker loads it: by its folder, the trusted side never imported.
        code = (
            "import sys\n"
            "from mlxsci.task import load_task\n"
            f"task = load_task({str(task.folder)!r})\n"
            "print(task.inputs({'N': 5})['x'].tolist())\n"
            "trusted = ('evaluation', 'roofline', 'search', 'report', 'sweep')\n"
            "print([m for m in sys.modules if m.startswith('mlxsci.') and m.split('.')[1] in trusted])\n"
        )
        elsewhere = [sys.executable, "-c", code]
        done = subprocess.run(elsewhere, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[:2] == ["[-1.0, -0.5, 0.0, 0.5, 1.0]", "[]"]

        module.write_text(module.read_text().replace("2.0", "3.0"))
        with pytest.raises(ValueError, match="changed since the task was made"):
            load_task(str(task.folder))
        done = subprocess.run(elsewhere, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode != 0 and "changed since the task was made" in done.stderr
    finally:
        shutil.rmtree(task.folder)  # its folder names this test's tmp_path: no later use


@pytest.mark.slow
def test_the_worker_reads_a_module_on_no_path_and_says_what_it_may_not_read(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    tasks = []
    try:
        for name, first in (("relu_plain", ""), ("relu_greedy", "import mlxsci.search\n")):
            (tmp_path / f"{name}.py").write_text(first + textwrap.dedent(MODULE))
            monkeypatch.delitem(sys.modules, name, raising=False)
            parts = importlib.import_module(name)
            tasks.append(
                relu_scale_task(make_inputs=parts.make_inputs, reference=parts.reference, name=name)
            )
        ev = mlxsci.evaluate(tasks[0], backend="sim", size_set="smoke")
        assert ev.correct, ev.fail_reason
        ev = mlxsci.evaluate(tasks[1], backend="sim", size_set="smoke")
        assert not ev.correct and "which this process may not read" in ev.fail_reason
        assert "search/__init__.py" in ev.fail_reason, ev.fail_reason
    finally:
        for task in tasks:
            shutil.rmtree(task.folder)


@pytest.mark.slow
def test_the_example_projects_tests_pass_with_the_plugin():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "mlxsci.fast.pytest_plugin",
         "examples/mlx_project/tests", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout


@pytest.mark.slow
def test_the_example_projects_task_script_evaluates_its_kernel():
    done = subprocess.run(
        [sys.executable, "examples/mlx_project/task_example.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("7x333", "3x1000"))]
    assert len(rows) == 2 and all(" ok " in row for row in rows), done.stdout
