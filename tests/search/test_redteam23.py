"""Red-team findings against issue 23's work (run locks, environment faults,
sealed caches, the roofline lock). Each test reproduces one finding: each
failed on the code the red team attacked, and passes since its fix.

A worker is played by a stand-in script (CandidateWorker.sandboxed_command),
as tests/evaluation/test_environment_faults.py does: what the script does is what a
candidate's native code may do in the sandbox (write its own folder, hold a
descriptor, report an error; calls through computed addresses are outside
what the source policy and the symbol check see). A small disk is a tmpfs
(root, as on CI); without one those tests are skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from disks import ENOSPC_WORKER, fill, mount_tmpfs, unmount

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.runner import CandidateWorker
from mlxsci.storage import locks
from mlxsci.storage.faults import EnvironmentFault

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def small_tmp(tmp_path, monkeypatch):
    """TMPDIR on a 64 MiB tmpfs (skipped where none can be mounted)."""
    disk = tmp_path / "disk"
    if not mount_tmpfs(disk, 64):
        pytest.skip("needs a tmpfs (mount)")
    monkeypatch.setattr(tempfile, "tempdir", str(disk))
    try:
        yield disk
    finally:
        monkeypatch.setattr(tempfile, "tempdir", None)
        unmount(disk)


def stand_in(tmp_path: Path, monkeypatch, text: str) -> None:
    script = tmp_path / f"standin_{time.monotonic_ns()}.py"
    script.write_text(textwrap.dedent(text))
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", (sys.executable, str(script)))


# ------------------------------------------------------------------ a candidate's failure passed off as the machine's
# The sandbox lets a worker write its whole folder (runner: worker_policy(..., [logdir])),
# not only the size's job folder; the parent removes only the job folder before it
# judges the machine (evaluation.blame_machine_first), and the logdir at the very end.
HOG_IN_WORKER_FOLDER = """
    import json, os, sys
    status = os.fdopen(int(sys.argv[-1]), "w", buffering=1)
    status.write("ready\\n")
    jobdir = json.loads(sys.stdin.readline())["dir"]
    try:
        with open(os.path.join(os.path.dirname(jobdir), "hog"), "wb") as hog:
            while True:
                hog.write(b"x" * (1 << 20))
                hog.flush()
    except OSError:
        pass
    sys.stderr.write("Segmentation fault\\n")
    os._exit(139)
"""

# A worker that reports an error ("done") stays alive; a file it holds open
# keeps its blocks after the parent removed the job folder.
HOG_HELD_OPEN = """
    import json, os, shutil, sys
    status = os.fdopen(int(sys.argv[-1]), "w", buffering=1)
    status.write("ready\\n")
    jobdir = json.loads(sys.stdin.readline())["dir"]
    with open(os.path.join(jobdir, "result.json"), "w") as f:
        json.dump({"error": {"kind": "fault", "message": "out-of-bounds read"}}, f)
    hog = open(os.path.join(jobdir, "hog"), "wb")
    try:
        while shutil.disk_usage(jobdir).free > (4 << 20):
            hog.write(b"x" * (1 << 20))
            hog.flush()
    except OSError:
        pass
    status.write("done\\n")
    sys.stdin.readline()  # alive, the hog held, until told no size follows
"""


def test_a_worker_filling_the_disk_beside_its_job_folder_is_still_blamed(
    small_tmp, tmp_path, monkeypatch
):
    stand_in(tmp_path, monkeypatch, HOG_IN_WORKER_FOLDER)
    ev = evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
    assert not ev.correct and ev.sizes[0].flags == ["crash"]


def test_a_worker_holding_its_hog_open_is_still_blamed(small_tmp, tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, HOG_HELD_OPEN)
    ev = evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
    assert not ev.correct and "out-of-bounds read" in ev.fail_reason


CUDA_DOUBLE_TO_BF16 = """\
//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= N[0]) return;
y_out[i] = a[0] * x[i] + y[i] + 0.0f * (float)(__bf16)(1.0 / (double)x[i]);
"""


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_double_to_bf16_conversion_is_the_candidates_not_a_damaged_toolchain():
    ev = evaluate(
        "saxpy",
        CUDA_DOUBLE_TO_BF16,
        backend="sim",
        size_set="smoke",
        n_warmup=1,
        n_measure=1,
        filename="cand.cu",
    )
    # A verdict either way: compiled and correct, or the candidate's compile error.
    assert ev.correct or not ev.compile_ok


# ------------------------------------------------------------------ a machine's fault taken for a verdict
def test_a_comparison_on_a_full_temp_folder_is_the_machines_fault(small_tmp, tmp_path, monkeypatch):
    from mlxsci.evaluation.comparison import compare
    from mlxsci.task import load_task

    fill(small_tmp, 150 << 10)
    stand_in(tmp_path, monkeypatch, ENOSPC_WORKER)
    seed = load_task("saxpy").seed("metal")
    with pytest.raises(EnvironmentFault):
        compare("saxpy", seed, seed, backend="sim", size_set="smoke", n_warmup=1, n_measure=1)


# ------------------------------------------------------------------ lock files that are not files
def test_a_run_lock_that_is_a_symlink_is_not_followed(tmp_path, monkeypatch):
    from test_run_locks import crafted_autotune_run

    from mlxsci.search import run

    run_dir = tmp_path / "run"
    crafted_autotune_run(monkeypatch, run_dir, iterations=1)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n" * 100)
    (run_dir / locks.LOCK_NAME).unlink(missing_ok=True)
    os.symlink(victim, run_dir / locks.LOCK_NAME)
    try:
        run(None, resume=run_dir, iterations=2, echo=lambda m: None)
    except Exception:  # noqa: BLE001 - a refusal is a fine answer; the victim is the point
        pass
    assert victim.read_text() == "precious\n" * 100


FIFO_PROBE = """
import sys
from mlxsci.storage import locks
locks.is_held(sys.argv[1])
locks.holder(sys.argv[1])
print("returned")
"""


def test_a_lock_file_that_is_a_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "run" / locks.LOCK_NAME
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    try:
        out = subprocess.run(
            [sys.executable, "-c", FIFO_PROBE, str(fifo)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("is_held/holder on a FIFO lock file hung")
    assert "returned" in out.stdout, out.stderr[-2000:]


# ------------------------------------------------------------------ a held entry lock
WARM = """
from mlxsci.evaluation import evaluate
evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
"""
HOLD = """
import fcntl, os, sys, time
fds = []
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, f"{os.getpid()}\\nbuilding a precompiled header\\n".encode(), 0)
    fds.append(fd)
print("held", flush=True)
time.sleep(600)
"""
EVAL_10S = """
from mlxsci.evaluation import evaluate
ev = evaluate("saxpy", backend="sim", size_set="smoke", n_warmup=1, n_measure=1, timeout=10,
              progress=print)
print("VERDICT", ev.correct, ev.fail_reason)
"""


@pytest.mark.slow
def test_a_stopped_pch_builder_does_not_hang_other_evaluations(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, MLXSCI_CACHE_DIR=str(cache))
    subprocess.run([sys.executable, "-c", WARM], cwd=ROOT, env=env, check=True, timeout=600)
    sim = cache / "sim"
    for p in list(sim.glob("k-*")) + list(sim.glob("pch-*.pch")) + list(sim.glob("pch-*.pch.hmac")):
        p.unlink()
    lock_files = sorted(str(p) for p in sim.glob("pch-*.pch.lock"))
    assert lock_files
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, *lock_files], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        try:
            out = subprocess.run(
                [sys.executable, "-c", EVAL_10S],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("an evaluation with a 10 s size timeout waited 90 s for the PCH lock")
        assert "VERDICT" in out.stdout or str(holder.pid) in out.stderr, out.stderr[-2000:]
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------ a huge planted entry
BIG_ENTRY = """
import os, resource, sys
from mlxsci.storage.cache import cache_dir, read_verified, write_verified
path = cache_dir("roofline") / "planted.json"
write_verified(path, b"{}")
os.truncate(path, 512 << 20)  # sparse: no disk, but 512 MiB to read
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert read_verified(path) is None
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print("grew_kib", grew)
"""


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_huge_planted_entry_is_not_read_into_memory(tmp_path):
    env = dict(os.environ, MLXSCI_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run(
        [sys.executable, "-c", BIG_ENTRY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    grew = int(out.stdout.split("grew_kib")[1])
    assert grew < 64 << 10, f"the parent grew by {grew >> 10} MiB reading a planted entry"
