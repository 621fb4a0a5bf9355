"""Bad inputs to eval, report, sweep, roofline and the Python API: each gets a
one-line message and exit code 2 (or a ValueError from Python), never a
traceback, and nothing runs first. The commands run in this process through
click's CliRunner (the same code as `python -m mlxsci.VERB`); evaluate() is
replaced by a stand-in that fails the test if a bad input ever reaches it."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import usage_error

import mlxsci
from mlxsci import eval as eval_cli
from mlxsci import task as task_module
from mlxsci.report import build as report
from mlxsci.roofline import store as roofline
from mlxsci.sweep import sweeper as sweep
from mlxsci.task import Size, check_memory, check_task, load_task, memory_estimate

ROOT = Path(__file__).resolve().parents[1]
CONV1D = ROOT / "examples" / "conv1d"
SAMPLE_RUNS = ROOT / "bench" / "results" / "runs"


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a bad input reached evaluate()")

    monkeypatch.setattr(eval_cli, "evaluate", refuse)


def task_folder(tmp_path, drop=(), task_py_suffix=""):
    """A copy of examples/conv1d without the files in `drop`, its task.py
    followed by `task_py_suffix`."""
    folder = tmp_path / "mytask"
    shutil.copytree(CONV1D, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in drop:
        (folder / name).unlink()
    if task_py_suffix:
        with open(folder / "task.py", "a") as f:
            f.write("\n" + task_py_suffix + "\n")
    return folder


# -- eval: candidate files ------------------------------------------------------------


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is a binary file"),
        (
            b"//! kernel saxpy\n\xff\xfe y_out[i] = 0;\n",
            "is not UTF-8 text (byte 0xff at offset 17)",
        ),
        (b"", "is empty"),
        (b"  \n\n", "is empty"),
    ],
)
def test_eval_refuses_a_candidate_that_is_not_kernel_text(tmp_path, content, needle):
    path = tmp_path / "cand.metal"
    path.write_bytes(content)
    usage_error(eval_cli.main, ["saxpy", "--backend", "sim", "--source", path], "--source", needle)


def test_eval_refuses_a_directory_or_missing_file_as_source(tmp_path):
    usage_error(eval_cli.main, ["saxpy", "--source", tmp_path], "is a directory")
    usage_error(eval_cli.main, ["saxpy", "--source", tmp_path / "none.metal"], "does not exist")


# -- eval: tasks and task folders -------------------------------------------------------


def test_eval_refuses_unknown_tasks_and_folders_without_task_py(tmp_path):
    usage_error(eval_cli.main, ["nosuchtask"], "neither a built-in task")
    usage_error(eval_cli.main, [tmp_path], "is not a task folder: it has no task.py")
    usage_error(eval_cli.main, [tmp_path / "missing"], "neither a built-in task")


def test_task_folder_without_seed_metal(tmp_path):
    folder = task_folder(tmp_path, drop=["seed.metal"])  # seed.cu is still there
    usage_error(eval_cli.main, [folder, "--backend", "sim"], "has no seed.metal")
    # the CUDA seed is there: the folder is fine for the cuda dialect (stopped here
    # only by the stand-in evaluate)
    with pytest.raises(AssertionError, match="reached evaluate"):
        eval_cli.main.main(
            [str(folder), "--backend", "sim", "--dialect", "cuda"], standalone_mode=False
        )
    # with a candidate of its own the seed is not needed
    cand = tmp_path / "mine.metal"
    cand.write_text((CONV1D / "seed.metal").read_text())
    with pytest.raises(AssertionError, match="reached evaluate"):
        eval_cli.main.main(
            [str(folder), "--backend", "sim", "--source", str(cand)], standalone_mode=False
        )


def test_task_folder_without_any_seed_or_reference(tmp_path):
    usage_error(
        eval_cli.main,
        [task_folder(tmp_path, drop=["seed.metal", "seed.cu"])],
        "has no seed.metal or seed.cu",
    )
    shutil.rmtree(tmp_path / "mytask")
    usage_error(
        eval_cli.main, [task_folder(tmp_path, drop=["reference.py"])], "has no reference.py"
    )


def test_task_folder_with_a_broken_task_py_or_reference(tmp_path):
    folder = task_folder(tmp_path, task_py_suffix="def broken(:")
    usage_error(eval_cli.main, [folder], "cannot load", "SyntaxError")
    shutil.rmtree(folder)
    folder = task_folder(tmp_path, task_py_suffix="del TASK")
    usage_error(eval_cli.main, [folder], "defines no TASK = Task(...)")
    shutil.rmtree(folder)
    folder = task_folder(tmp_path)
    (folder / "reference.py").write_text("import nosuchmodule_xyz\n")
    usage_error(eval_cli.main, [folder], "its reference does not import", "nosuchmodule_xyz")
    (folder / "reference.py").write_text("def solve(inputs, params):\n    return {}\n")
    usage_error(eval_cli.main, [folder], "its reference defines no tolerance()")


@pytest.mark.parametrize(
    "suffix,needle",
    [
        (
            "TASK = dataclasses.replace(TASK, sizes={'smoke': TASK.sizes['smoke'], 'in-dist': ()})",
            "in-dist size set is missing or empty",
        ),
        (
            "TASK = dataclasses.replace(TASK, sizes=dict(TASK.sizes, smoke=(Size('0', {'N': 0}),)))",
            "smoke size '0': ValueError",
        ),
        (
            "TASK = dataclasses.replace(TASK, sizes=dict(TASK.sizes, smoke=(Size('x', {}),)))",
            "smoke size 'x': no value for N",
        ),
        (
            "TASK = dataclasses.replace(TASK, sizes=dict(TASK.sizes, indist=()))",
            "unknown size set 'indist'",
        ),
        (
            "TASK = dataclasses.replace(TASK, sizes=dict(TASK.sizes, smoke=((1000,),)))",
            "not a Size(label, params)",
        ),
    ],
)
def test_task_folder_with_malformed_sizes(tmp_path, suffix, needle):
    folder = task_folder(tmp_path, task_py_suffix="import dataclasses\n" + suffix)
    usage_error(eval_cli.main, [folder], "cannot run", needle)


def test_every_built_in_task_and_the_example_pass_the_folder_check():
    from mlxsci.task import task_names

    for name in task_names():
        check_task(load_task(name), "metal")
        check_task(load_task(name), "cuda")
    check_task(load_task(str(CONV1D)))


# -- eval: sizes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "size,needle",
    [
        ("N=0", "N must be in [1, 2^31)"),
        ("N=-5", "N must be in [1, 2^31)"),
        ("N=1.5", "N must be int, got '1.5'"),
        ("N=abc", "N must be int"),
        ("N=", "expected KEY=VALUE"),
        ("N=99999999999999999999999", "N must be in [1, 2^31)"),
        ("M=3", "unknown size parameter"),
    ],
)
def test_eval_refuses_bad_sizes(size, needle):
    usage_error(eval_cli.main, ["saxpy", "--backend", "sim", "--size", size], "--size", needle)


def test_eval_refuses_non_finite_float_sizes():
    usage_error(eval_cli.main, ["lj", "--backend", "sim", "--size", "L=inf"], "finite number")
    usage_error(eval_cli.main, ["lj", "--backend", "sim", "--size", "L=nan"], "finite number")


def test_a_size_beyond_the_machines_memory_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(task_module, "machine_memory", lambda: 16 * 2**30)
    text = usage_error(
        eval_cli.main,
        ["saxpy", "--backend", "sim", "--size", "N=2147483647"],
        "--size",
        "N=2147483647",
        "72.0 GiB",
        "24.0 GiB of inputs and outputs",
        "16.0 GiB of memory",
    )
    assert "smaller size" in text
    # a size that fits goes on (to the stand-in evaluate)
    with pytest.raises(AssertionError, match="reached evaluate"):
        eval_cli.main.main(["saxpy", "--backend", "sim", "--size", "N=1000"], standalone_mode=False)


def test_memory_estimate_is_a_function_of_the_size_alone():
    saxpy = load_task("saxpy")
    big = Size("big", {"N": 2**31 - 1})
    assert memory_estimate(saxpy, big.params) == 3 * 12.0 * (2**31 - 1)
    with pytest.raises(ValueError, match="needs about 72.0 GiB"):
        check_memory(saxpy, big, available=64 * 2**30)
    check_memory(saxpy, Size("small", {"N": 1000}), available=64 * 2**30)
    assert task_module.machine_memory() > 2**28


# -- roofline ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cuda", "metal"])
def test_roofline_on_a_missing_backend(backend):
    from mlxsci.backends import backend_class

    if backend_class(backend).available():
        pytest.skip(f"this machine has {backend}")
    usage_error(
        roofline.main,
        ["--backend", backend],
        "--backend",
        f"{backend} is not available on this machine",
    )


def test_roofline_with_a_timer_the_backend_lacks():
    usage_error(roofline.main, ["--backend", "sim", "--timer", "cupti"], "cupti")


# -- report --------------------------------------------------------------------------


def test_report_on_folders_that_hold_no_run(tmp_path):
    usage_error(report.main, [tmp_path], "holds no search run")
    (tmp_path / "notes.txt").write_text("hello")
    usage_error(report.main, [tmp_path / "notes.txt"], "is a file")
    usage_error(report.main, [tmp_path / "missing"], "does not exist")


def test_report_on_a_garbage_sweep_index(tmp_path):
    (tmp_path / "index.json").write_text("{not json")
    usage_error(report.main, [tmp_path], "is not a sweep index")
    (tmp_path / "index.json").write_text(json.dumps({"runs": [{"name": "x"}]}))
    usage_error(report.main, [tmp_path], "is not a sweep index")


def test_report_skips_a_summary_that_is_not_a_search_summary(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("[1, 2]")
    out = CliRunner().invoke(report.main, [str(tmp_path)])
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert "not a search summary" in out.output and "no finished runs" in out.output


def test_report_out_where_a_file_cannot_go(tmp_path):
    (tmp_path / "afile").write_text("")
    usage_error(report.main, [SAMPLE_RUNS, "--out", tmp_path / "afile" / "t.md"], "cannot write")
    usage_error(report.main, [SAMPLE_RUNS, "--out", tmp_path], "is a directory")


# -- sweep ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--tasks", "", "--models", "autotune", "--iterations", "1"], "no task given"),
        (["--tasks", ",", "--models", "autotune", "--iterations", "1"], "no task given"),
        (["--tasks", "saxpy", "--models", " , ", "--iterations", "1"], "no model given"),
        (["--tasks", "nosuch", "--models", "autotune", "--iterations", "1"], "unknown task"),
        (["--tasks", "saxpy", "--models", "autotune", "--iterations", "0"], "--iterations"),
        (["--tasks", "saxpy", "--models", "autotune", "--iterations", "x"], "--iterations"),
        (
            ["--tasks", "saxpy", "--models", "autotune", "--iterations", "1", "--max-cost", "-1"],
            "--max-cost",
        ),
        (["--tasks", "saxpy", "--models", "autotune"], "Missing option '--iterations'"),
    ],
)
def test_sweep_refuses_bad_arguments(tmp_path, monkeypatch, args, needle):
    import mlxsci.search

    monkeypatch.setattr(mlxsci.search, "run", lambda *a, **kw: pytest.fail("a search ran"))
    usage_error(sweep.main, args + ["--backend", "sim", "--out", tmp_path / "sw"], needle)
    assert not (tmp_path / "sw").exists()


def test_sweep_out_that_is_a_file_and_a_missing_backend(tmp_path):
    (tmp_path / "afile").write_text("")
    base = ["--tasks", "saxpy", "--models", "autotune", "--iterations", "1"]
    usage_error(sweep.main, base + ["--backend", "sim", "--out", tmp_path / "afile"], "is a file")
    from mlxsci.backends import backend_class

    if not backend_class("cuda").available():
        usage_error(
            sweep.main,
            base + ["--backend", "cuda", "--out", tmp_path / "sw"],
            "cuda is not available",
        )


# -- the Python API ------------------------------------------------------------------


def test_api_bad_inputs_raise_value_errors_that_say_what(tmp_path):
    binary = tmp_path / "k.metal"
    binary.write_bytes(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="is a binary file"):
        mlxsci.kernel_function("saxpy", binary, backend="sim")
    with pytest.raises(ValueError, match="is a binary file"):
        mlxsci.kernel_function("saxpy", str(binary), backend="sim")
    with pytest.raises(ValueError, match="has no task.py"):
        mlxsci.load_task(str(tmp_path))
    with pytest.raises(ValueError, match="unknown task"):
        mlxsci.load_task("nosuchtask")
