"""--sanitize: the worker under NVIDIA's compute-sanitizer (issue 10, outcome 7).

No GPU here. The reports below are written by hand in compute-sanitizer's
documented text format (each line prefixed `=========`, a record's header
after one space, its details indented, a bare prefix ending it; memcheck's
`Invalid __global__ write of size 4 bytes` / `by thread (x,y,z) in block
(x,y,z)` / `Address 0x... is out of bounds`; racecheck's `Error: Potential RAW
hazard detected at __shared__ 0x.. in block (x,y,z) :` with one `Write
Thread (..)` / `Read Thread (..)` line per access; the closing summaries). A
fake compute-sanitizer (a script that writes such a report) stands in for the
real one where a process is needed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import size_job

from mlxsci.evaluation import sanitizer
from mlxsci.evaluation.budget import mark_sanitized, sanitized_job
from mlxsci.evaluation.per_size_runner import run_worker
from mlxsci.evaluation.results import Evaluation, SizeResult
from mlxsci.evaluation.sanitizer import (
    check_sanitize,
    kernel_faults,
    parse_sanitizer_log,
    sanitizer_command,
    tool_problems,
    verdict,
)
from mlxsci.protocol.jobs import RunCap
from mlxsci.protocol.results import SizeRun

SAXPY_FN = (
    "mlx::core::cu::custom_kernel_saxpy(const float *, const float *, const float *, "
    "const unsigned int *, float *)"
)
REDUCE_FN = "mlx::core::cu::custom_kernel_block_sum_64(const float *, float *)"

MEMCHECK_OOB = f"""========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at {SAXPY_FN}+0x1b0
=========     by thread (232,0,0) in block (3,0,0)
=========     Address 0x7f3a1e000fa0 is out of bounds
=========     and is 0 bytes after the nearest allocation at 0x7f3a1e000000 of size 4000 bytes
=========
========= Invalid __global__ write of size 4 bytes
=========     at {SAXPY_FN}+0x1b0
=========     by thread (233,0,0) in block (3,0,0)
=========     Address 0x7f3a1e000fa4 is out of bounds
=========     and is 4 bytes after the nearest allocation at 0x7f3a1e000000 of size 4000 bytes
=========
========= ERROR SUMMARY: 24 errors
"""

RACECHECK_HAZARD = f"""========= COMPUTE-SANITIZER
========= Error: Potential RAW hazard detected at __shared__ 0x80 in block (2,0,0) :
=========     Write Thread (32,0,0) at {REDUCE_FN}+0x150
=========     Read Thread (0,0,0) at {REDUCE_FN}+0x1c0
=========     Current Value : 0
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

RACECHECK_ANALYSIS = f"""========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at {REDUCE_FN}+0x150
=========     and Read access at {REDUCE_FN}+0x1c0 [31 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

# A racecheck report holding only a warning: not an error, so not a verdict.
RACECHECK_WARNING_ONLY = f"""========= COMPUTE-SANITIZER
========= Warning: Potential WAW hazard detected at __shared__ 0x0 in block (0,0,0) :
=========     Write Thread (31,0,0) at {REDUCE_FN}+0xd0
=========     Write Thread (0,0,0) at {REDUCE_FN}+0xd0
=========     Current Value : 0, Incoming Value : 0
=========
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""

MEMCHECK_CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
RACECHECK_CLEAN = (
    "========= COMPUTE-SANITIZER\n"
    "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
)
TOOL_FAILED = (
    "========= COMPUTE-SANITIZER\n"
    "========= Error: No attachable process found. compute-sanitizer timed-out.\n"
)
API_ERROR_ONLY = (
    "========= COMPUTE-SANITIZER\n"
    '========= Program hit cudaErrorNotSupported (error 801) due to "operation not '
    'supported" on CUDA API call to cuDeviceGetAttribute.\n'
    "=========\n========= ERROR SUMMARY: 1 error\n"
)


# ------------------------------------------------------------ the parser
def test_memcheck_out_of_bounds_write_is_named():
    faults = parse_sanitizer_log(MEMCHECK_OOB, "memcheck")
    assert len(faults) == 2
    f = faults[0]
    assert (f.kind, f.kernel, f.thread, f.block) == (
        "Invalid __global__ write of size 4 bytes",
        "saxpy",
        "(232,0,0)",
        "(3,0,0)",
    )
    assert f.address == "0x7f3a1e000fa0 is out of bounds"
    text = verdict(faults, MEMCHECK_OOB)
    assert text == (
        "compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes in "
        "kernel saxpy by thread (232,0,0) in block (3,0,0): address 0x7f3a1e000fa0 is out "
        "of bounds (is 0 bytes after the nearest allocation at 0x7f3a1e000000 of "
        "size 4000 bytes); 23 more error(s) reported"
    )


def test_racecheck_shared_memory_hazard_is_named():
    faults = parse_sanitizer_log(RACECHECK_HAZARD, "racecheck")
    assert len(faults) == 1
    f = faults[0]
    assert f.kernel == "block_sum_64" and f.block == "(2,0,0)" and f.address == "__shared__ 0x80"
    assert f.accesses == [("Write", "(32,0,0)"), ("Read", "(0,0,0)")]
    assert verdict(faults, RACECHECK_HAZARD) == (
        "compute-sanitizer racecheck: Potential RAW hazard (a shared-memory race) in kernel "
        "block_sum_64 Write by thread (32,0,0), Read by thread (0,0,0) in block (2,0,0): "
        "address __shared__ 0x80"
    )


def test_racecheck_analysis_report_is_named():
    (f,) = parse_sanitizer_log(RACECHECK_ANALYSIS, "racecheck")
    assert f.kind == "Race reported" and f.kernel == "block_sum_64"
    assert [role for role, _ in f.accesses] == ["Write", "Read"]


@pytest.mark.parametrize(
    "clean,tool",
    [
        (MEMCHECK_CLEAN, "memcheck"),
        (RACECHECK_CLEAN, "racecheck"),
        (RACECHECK_WARNING_ONLY, "racecheck"),
    ],
)
def test_clean_runs_have_no_fault(clean, tool):
    assert parse_sanitizer_log(clean, tool) == []


def test_the_tool_failing_is_not_a_kernel_fault():
    assert parse_sanitizer_log(TOOL_FAILED, "memcheck") == []
    assert tool_problems(TOOL_FAILED) == [
        "Error: No attachable process found. compute-sanitizer timed-out."
    ]
    # A failed CUDA API call alone is no kernel fault either (context only).
    assert kernel_faults(parse_sanitizer_log(API_ERROR_ONLY, "memcheck")) == []
    assert tool_problems(API_ERROR_ONLY)[0].startswith("Program hit cudaErrorNotSupported")


def test_command_uses_the_documented_options(tmp_path):
    cmd = sanitizer_command("/opt/cs", "racecheck", tmp_path / "s.log", ["python", "-m", "w"])
    assert cmd[:7] == [
        "/opt/cs",
        "--tool",
        "racecheck",
        "--error-exitcode",
        "86",
        "--log-file",
        str(tmp_path / "s.log"),
    ]
    assert cmd[-3:] == ["python", "-m", "w"]
    assert "--racecheck-report" in cmd and "--report-api-errors" not in cmd
    assert "--report-api-errors" in sanitizer_command("/opt/cs", "memcheck", "l", ["w"])


# ------------------------------------------------- the worker under it
FAKE = """#!{python}
# A stand-in for compute-sanitizer: writes the report in report.txt (beside
# its bin/ folder; not an environment variable: a worker's environment is an
# allowlist) to the --log-file, writes result.txt there, when there is one, as
# the result of the worker's job dir (the last argument), and exits as the
# real one would.
import os, sys
args = sys.argv[1:]
here = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0])))
log = args[args.index("--log-file") + 1]
report = open(os.path.join(here, "report.txt")).read()
open(log, "w").write(report)
if os.path.exists(os.path.join(here, "result.txt")):
    result = open(os.path.join(here, "result.txt")).read()
    open(os.path.join(args[-1], "result.json"), "w").write(result)
sys.exit(86 if "Invalid" in report or "Error: Potential" in report else 0)
"""


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "compute-sanitizer"
    path.parent.mkdir()
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def use(report: str, result: dict | None = None) -> str:
        (tmp_path / "report.txt").write_text(report)
        if result is not None:
            (tmp_path / "result.txt").write_text(json.dumps(result))
        return str(path)

    return use


def test_a_reported_fault_is_the_workers_verdict(fake_sanitizer):
    exe = fake_sanitizer(MEMCHECK_OOB, result={"seconds": [1e-3]})  # the worker "passed"
    result, jobdir, _ = run_worker(size_job("saxpy", backend="cuda"), 60, ("memcheck", exe))
    assert result.error.kind == "memcheck"
    assert "Invalid __global__ write of size 4 bytes in kernel saxpy" in result.error.message


def test_a_clean_report_keeps_the_workers_result(fake_sanitizer):
    exe = fake_sanitizer(MEMCHECK_CLEAN, result={"seconds": [1e-3]})
    result, _, _ = run_worker(size_job("saxpy", backend="cuda"), 60, ("memcheck", exe))
    assert result == SizeRun(seconds=(1e-3,))


def test_a_worker_that_died_under_a_failing_tool_says_so(fake_sanitizer):
    exe = fake_sanitizer(TOOL_FAILED)
    result, _, tail = run_worker(size_job("saxpy", backend="cuda"), 60, ("memcheck", exe))
    assert result is None and "No attachable process found" in tail


def test_sanitized_job_and_result():
    job = sanitized_job(
        size_job("saxpy", timer="cupti", n_warmup=3, n_measure=10, settle=RunCap(50, 10.0)),
        None,
        None,
    )
    assert (job.timer, job.n_warmup, job.n_measure) == ("wall", 1, 1)
    ev = Evaluation(
        "saxpy",
        "cuda",
        "H100",
        "cuda",
        correct=True,
        score=0.8,
        phi=0.7,
        sizes=[SizeResult("n", {}, correct=True, fraction=0.8)],
    )
    mark_sanitized(ev, "memcheck")
    assert ev.score is None and ev.phi is None and ev.sizes[0].flags == ["sanitized"]
    assert ev.to_json()["sanitized"] == "memcheck"
    failed = Evaluation("saxpy", "cuda", "H100", "cuda", correct=False, score=0.0)
    mark_sanitized(failed, "memcheck")
    assert failed.score == 0.0  # a failure stays a failure


# ------------------------------------------------------- the refusals
@pytest.fixture
def no_sanitizer(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sanitizer, "STANDARD_DIRS", ())
    monkeypatch.setattr(sanitizer, "wheel_dirs", lambda: [])


def test_check_refuses_other_backends_and_a_missing_tool(no_sanitizer, tmp_path, monkeypatch):
    assert check_sanitize(None, "sim") is None
    with pytest.raises(ValueError, match="CUDA kernels only; this run uses the sim backend"):
        check_sanitize("memcheck", "sim")
    with pytest.raises(ValueError, match="neither on PATH nor in .*cuda/bin"):
        check_sanitize("memcheck", "cuda")
    exe = tmp_path / "cuda" / "bin" / "compute-sanitizer"  # found in $CUDA_HOME/bin
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert check_sanitize("racecheck", "cuda") == str(exe)


def cli(module: str, args: list[str]):
    import importlib

    main = importlib.import_module(module).main
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize(
    "module,args",
    [
        ("mlxsci.eval", ["saxpy", "--backend", "sim", "--sanitize", "memcheck"]),
        (
            "mlxsci.search.__main__",
            ["--task", "saxpy", "--backend", "sim", "--sanitize", "racecheck"],
        ),
        (
            "mlxsci.sweep",
            [
                "--tasks",
                "saxpy",
                "--models",
                "autotune",
                "--iterations",
                "1",
                "--backend",
                "sim",
                "--sanitize",
                "memcheck",
            ],
        ),
    ],
)
def test_clis_refuse_sanitizing_without_cuda(module, args):
    r = cli(module, args)
    assert r.exit_code == 2 and "CUDA kernels only" in r.output


def test_eval_refuses_without_compute_sanitizer(no_sanitizer):
    r = cli("mlxsci.eval", ["saxpy", "--backend", "cuda", "--sanitize", "memcheck"])
    assert r.exit_code == 2 and "compute-sanitizer" in r.output and "PATH" in r.output


def test_eval_takes_sanitize_when_the_tool_is_there(no_sanitizer, fake_sanitizer, monkeypatch):
    # With compute-sanitizer on PATH the --sanitize check passes; what stops
    # this run is the missing CUDA backend, said on its own.
    exe = fake_sanitizer(MEMCHECK_CLEAN)
    monkeypatch.setenv("PATH", str(Path(exe).parent) + os.pathsep + os.environ["PATH"])
    from mlxsci.backends import backend_class

    if backend_class("cuda").available():
        pytest.skip("a CUDA GPU is here: the refusal this checks cannot happen")
    r = cli("mlxsci.eval", ["saxpy", "--backend", "cuda", "--sanitize", "memcheck"])
    assert r.exit_code == 2 and "--backend" in r.output and "compute-sanitizer" not in r.output
