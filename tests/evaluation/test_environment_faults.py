"""Faults of the machine are not verdicts (issue 23, outcome 2).

Each test reproduces what the issue saw on the old code (noted per test) and
checks what happens now: the run stops with exit status 3 and says how to
resume, nothing is recorded against the candidate, and a resume on a fixed
machine finishes the run. A small disk is a tmpfs mounted for the test where
this process may mount one (root, as on CI); where it may not, the full disk
is simulated (statvfs reports it full and the worker fails as ENOSPC makes
it fail), and the tests that need a real disk are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import namedtuple
from pathlib import Path

import pytest
from click.testing import CliRunner
from disks import ENOSPC_WORKER, fill, mount_tmpfs, tmpfs, unmount

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.runner import CandidateWorker
from mlxsci.storage import faults as environment_faults
from mlxsci.storage.faults import EXIT_CODE, EnvironmentFault


def run_with_cache(cache: Path, *argv: str) -> subprocess.CompletedProcess:
    """`python *argv` with MLXSCI_CACHE_DIR=cache, its output captured."""
    env = dict(os.environ, MLXSCI_CACHE_DIR=str(cache))
    command = [sys.executable, *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB tmpfs at tmp_path/disk, or None where none can be mounted."""
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, 64):
        yield None
        return
    try:
        yield disk
    finally:
        unmount(disk)


Usage = namedtuple("Usage", "total used free")


def simulate_full(monkeypatch, folder: Path) -> None:
    """Where no disk can be mounted: statvfs says `folder` is full, and the
    worker dies as a full disk makes it die (before the fix, its death was the
    candidate's crash)."""
    real = shutil.disk_usage

    def usage(path):
        if str(path).startswith(str(folder)):
            return Usage(1 << 30, 1 << 30, 0)
        return real(path)

    monkeypatch.setattr(environment_faults.shutil, "disk_usage", usage)
    script = folder.parent / "enospc_worker.py"
    script.write_text(ENOSPC_WORKER)
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", (sys.executable, str(script)))


def history(run_dir: Path) -> list[dict]:
    path = run_dir / "history.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------------ a full TMPDIR
@pytest.mark.slow
def test_a_full_temp_folder_stops_the_search_and_blames_no_candidate(
    small_disk, tmp_path, monkeypatch
):
    """Old code: every evaluation, the seed's included, was a "crash" (exit
    code 1 without a result), the search ended `flat` with exit 0."""
    from mlxsci.search import run

    if small_disk is None:
        small_disk = tmp_path / "disk"
        small_disk.mkdir()
        simulate_full(monkeypatch, small_disk)
    else:
        fill(small_disk, 150 << 10)
    monkeypatch.setattr(tempfile, "tempdir", str(small_disk))
    run_dir = tmp_path / "run"
    said: list[str] = []
    with pytest.raises(EnvironmentFault) as stopped:
        run("saxpy", "autotune", iterations=2, backend="sim", out=run_dir, echo=said.append)
    assert "free" in str(stopped.value)
    assert any(f"--resume {run_dir}" in line for line in said), said
    assert history(run_dir) == [] and not (run_dir / "00_result.json").exists()

    # The machine fixed (TMPDIR elsewhere): the resume evaluates the seed anew.
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    summary = run(None, resume=run_dir, echo=said.append)
    records = history(run_dir)
    assert [r["iteration"] for r in records] == [0, 1, 2]
    assert summary["seed_score"] and summary["seed_score"] > 0
    assert not any("crash" in str(r.get("fail_reason")) for r in records)


STANDIN_FILLER = textwrap.dedent("""
    import os, sys
    status = os.fdopen(int(sys.argv[-1]), "w", buffering=1)
    status.write("ready\\n")
    import json
    jobdir = json.loads(sys.stdin.readline())["dir"]
    try:
        with open(os.path.join(jobdir, "hog"), "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
                f.flush()
    except OSError as exc:
        sys.stderr.write(f"OSError: [Errno {exc.errno}] No space left on device\\n")
    os._exit(1)
""")


def test_a_worker_that_fills_the_disk_itself_is_still_blamed(small_disk, tmp_path, monkeypatch):
    """The parent judges the machine once the worker's folder is gone: a
    candidate cannot pass off its own failure as the machine's by filling the
    disk and saying "No space left on device"."""
    if small_disk is None:
        pytest.skip("needs a tmpfs (mount)")
    script = tmp_path / "filler.py"
    script.write_text(STANDIN_FILLER)
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", (sys.executable, str(script)))
    monkeypatch.setattr(tempfile, "tempdir", str(small_disk))
    ev = evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
    assert not ev.correct and ev.sizes[0].flags == ["crash"]
    assert "No space left" in ev.fail_reason
    assert shutil.disk_usage(small_disk).used < 1 << 20  # its hog went with its folder


# ------------------------------------------------------------------ workers that cannot start
DIES_AT_START = (
    sys.executable,
    "-c",
    "import sys; sys.stderr.write('ImportError: mlx\\n'); sys.exit(1)",
)
NEVER_READY = (sys.executable, "-c", "import time; time.sleep(60)")


def test_a_worker_that_cannot_start_is_the_machines_fault(monkeypatch, tmp_path):
    """Old code: a crash of the candidate (the seed's included) at its first size."""
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", DIES_AT_START)
    with pytest.raises(EnvironmentFault, match="could not start.*ImportError: mlx"):
        evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
    from mlxsci.search.__main__ import main as search_main

    run_dir = tmp_path / "run"
    args = ["--task", "saxpy", "--model", "autotune", "--iterations", "1"]
    out = CliRunner().invoke(search_main, [*args, "--backend", "sim", "--out", str(run_dir)])
    assert out.exit_code == EXIT_CODE, out.output
    assert "Traceback" not in out.output and f"--resume {run_dir}" in out.output
    assert history(run_dir) == []


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_worker_that_never_says_ready_is_the_machines_fault(monkeypatch):
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", NEVER_READY)
    with pytest.raises(EnvironmentFault, match="did not start within 3 s"):
        evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1, timeout=3)


# ------------------------------------------------------------------ caches and run directories
@pytest.mark.slow
def test_a_full_kernel_cache_is_the_machines_fault_and_caches_no_compile_error(tmp_path):
    """Old code: a CompileError traceback from the roofline's probes (or a
    FileNotFoundError from the build's clean-up), the candidate's build log
    cached as its compile error."""
    with tmpfs(tmp_path / "cache", 4) as cache:
        key = "from mlxsci.storage.cache import integrity_key; integrity_key()"
        run_with_cache(cache, "-c", key).check_returncode()
        fill(cache, 100 << 10)
        out = run_with_cache(cache, "-m", "mlxsci.eval", "saxpy", "--backend", "sim")
        assert out.returncode == EXIT_CODE, out.stderr[-2000:]
        assert "Traceback" not in out.stderr and "free" in out.stderr
        assert not list((cache / "sim").glob("*.err"))


def test_a_read_only_cache_is_reported_not_a_traceback(tmp_path):
    with tmpfs(tmp_path / "cache", 4, read_only=True) as cache:
        out = run_with_cache(cache, "-m", "mlxsci.eval", "saxpy", "--backend", "sim")
        assert out.returncode == EXIT_CODE, out.stderr[-2000:]
        assert "Traceback" not in out.stderr and "read-only" in out.stderr


def test_a_full_run_directory_stops_the_search_without_a_traceback(small_disk, tmp_path):
    """Old code: `OSError: [Errno 28]` as a raw traceback."""
    if small_disk is None:
        pytest.skip("needs a tmpfs (mount)")
    from mlxsci.search.__main__ import main as search_main

    fill(small_disk, 0)
    args = ["--task", "saxpy", "--model", "autotune", "--iterations", "1", "--backend", "sim"]
    out = CliRunner().invoke(search_main, [*args, "--out", str(small_disk / "run")])
    assert out.exit_code == EXIT_CODE, (out.output, out.exception)
    assert "no space left" in out.output and "Traceback" not in out.output


def test_a_missing_compiler_is_named_not_blamed(monkeypatch, tmp_path):
    """Old code: a traceback (ImportError or RuntimeError) from the roofline's probes."""
    from mlxsci.eval import main as eval_main

    monkeypatch.setitem(sys.modules, "ziglang", None)  # import ziglang fails
    out = CliRunner().invoke(eval_main, ["saxpy", "--backend", "sim"])
    assert out.exit_code == EXIT_CODE and "ziglang" in out.output and "pip install" in out.output


# ------------------------------------------------------------------ sweeps
@pytest.mark.slow  # two real searches, then two more
def test_a_sweep_leaves_a_run_the_machine_stopped_unfinished(monkeypatch, tmp_path):
    """Old code: such a run was "finished" (flat, every candidate a crash).
    (nbody: the seed at its secret held-out draw costs ~2 s on the
    simulator, heat2d's ~20 s.)"""
    from mlxsci.sweep.sweeper import main as sweep_main

    out_dir = tmp_path / "sweep"
    args = ["--tasks", "saxpy,nbody", "--models", "autotune", "--iterations", "1"]
    args += ["--backend", "sim", "--out", str(out_dir), "--quiet"]
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", DIES_AT_START)
    out = CliRunner().invoke(sweep_main, args)
    assert out.exit_code == EXIT_CODE, out.output
    index = {e["task"]: e for e in json.loads((out_dir / "index.json").read_text())["runs"]}
    assert index["saxpy"]["status"] == "unfinished" and index["saxpy"]["machine_fault"]
    assert index["nbody"]["action"] == "not started"
    assert history(out_dir / index["saxpy"]["path"]) == []

    monkeypatch.undo()  # the machine fixed: the same command finishes both
    again = CliRunner().invoke(sweep_main, args)
    assert again.exit_code == 0, again.output
    index = json.loads((out_dir / "index.json").read_text())["runs"]
    assert [e["status"] for e in index] == ["finished", "finished"]
    assert not any(e.get("machine_fault") for e in index)


def test_a_read_only_sweep_folder_is_reported_not_a_traceback(tmp_path):
    """Old code: an OSError traceback from index.json (or its lock)."""
    from mlxsci.sweep.sweeper import main as sweep_main

    with tmpfs(tmp_path / "sweep", 1, read_only=True) as out_dir:
        args = ["--tasks", "saxpy", "--models", "autotune", "--iterations", "1"]
        out = CliRunner().invoke(sweep_main, [*args, "--backend", "sim", "--out", str(out_dir)])
        assert out.exit_code == EXIT_CODE, (out.output, out.exception)
        assert "read-only" in out.output and "Traceback" not in out.output


def test_a_read_only_cache_stops_the_roofline_command_cleanly(tmp_path):
    """Old code: an OSError traceback (mkdir of the roofline folder)."""
    with tmpfs(tmp_path / "cache", 1, read_only=True) as cache:
        # The host-time clock's roofline is measured and cached (a modelled GPU's is not).
        os.environ["MLXSCI_SIM_CLOCK"] = "host"
        try:
            out = run_with_cache(cache, "-m", "mlxsci.roofline", "--backend", "sim")
        finally:
            del os.environ["MLXSCI_SIM_CLOCK"]
        assert out.returncode == EXIT_CODE and "read-only" in out.stderr, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
