"""One process per run directory (issue 23, outcome 1) and the read-only run
directory.

- A search, a resume or a sweep's run takes `<run dir>/.lock` (mlxsci/storage/locks.py)
  before it writes anything and holds it to the manifest. A second one is
  refused, naming the holder's pid, exit code 2 on the command line, and
  writes nothing (the old fault: two resumes of one run both ran, and
  history.jsonl held iterations [0, 1, 2, 3, 4, 5, 6, 3, 4, 5, 6]).
- Two sweeps on one folder share the runs: a run the other holds is left to
  it ("in use", status unfinished), a run the other finished is not run again,
  and index.json ends as the runs are on disk.
- The lock file is not one of the run's recorded files: a finished run with a
  .lock (or a new holder's stamp in it) is not "tampered".
- A read-only run directory: a resume with nothing left to do shows the run's
  result (exit 0); with work left, a one-line message (exit 2).

The competing process is real: a search or a sweep in a child process whose
evaluations wait for a file the test makes (the "gate"), so the test knows
it is mid-run and holding the lock. Evaluations are test_search's crafted
stand-in, in the child as in this process; the Ray test runs real ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import LISTED_HELD_OUT
from scripted_runs import SEED, Crafted

from mlxsci.search import loop, run
from mlxsci.search import manifest as run_manifest
from mlxsci.storage import locks
from mlxsci.sweep import sweeper as sweep

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parents[1]
# Each process gives every candidate the seed's numbers: autotune's sources carry no marker.
TABLE = {"seed": SEED}
DEADLINE = 120.0  # seconds: only to catch a hang, never a timing assert

# The start of a child process's script: evaluations are crafted and wait for the gate.
GATED = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from scripted_runs import SEED, Crafted
from mlxsci.search import loop
gate = Path({gate!r})
crafted = Crafted({{"seed": SEED}})
def gated(*args, **kw):
    while not gate.exists():
        time.sleep(0.05)
    return crafted(*args, **kw)
loop.evaluate = gated
"""


def start_gated(tmp_path: Path, body: str) -> subprocess.Popen:
    script = tmp_path / f"gated_{time.monotonic_ns()}.py"
    script.write_text(GATED.format(tests=str(TESTS), gate=str(tmp_path / "gate")) + body)
    return subprocess.Popen(
        [sys.executable, str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the child ended first: {proc.communicate()}")
        assert time.monotonic() < deadline, "gave up waiting (a hang)"
        time.sleep(0.05)


def open_gate(tmp_path: Path) -> None:
    (tmp_path / "gate").write_text("go")


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=DEADLINE)
    return proc.returncode, out, err


def snapshot(folder: Path, lock: bool = True) -> dict[str, bytes]:
    """Every file under `folder` with its bytes: what 'writes nothing' compares
    (`lock` False: but the lock file, which a later holder stamps)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and (lock or p.name != locks.LOCK_NAME)
    }


def iterations_of(run_dir: Path) -> list[int]:
    return [
        json.loads(line)["iteration"]
        for line in (run_dir / "history.jsonl").read_text().splitlines()
        if line.strip()
    ]


def search_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mlxsci.search", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )


def crafted_autotune_run(monkeypatch, out: Path, iterations: int) -> dict:
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    return run("saxpy", "autotune", iterations=iterations, backend="sim", out=out)


def one_line_refusal(result: subprocess.CompletedProcess, pid: int) -> str:
    """The refusal's stderr: one line naming `pid`, exit code 2, no traceback."""
    err = result.stderr.strip()
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], err[-2000:])
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"process {pid}" in err, err
    return err


# -- one process per run directory ---------------------------------------------------


@pytest.mark.slow
def test_a_second_resume_or_search_on_a_held_run_is_refused(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    crafted_autotune_run(monkeypatch, run_dir, iterations=2)
    holder = start_gated(
        tmp_path,
        f"from mlxsci.search import run\nrun(None, resume={str(run_dir)!r}, iterations=6)\n",
    )
    try:
        # Mid-run: iteration 3's candidate written, its evaluation waiting at the gate.
        wait_for(lambda: (run_dir / "03_candidate.metal").exists(), holder)
        before = snapshot(run_dir)
        second = search_cli("--resume", str(run_dir), "--iterations", "6", "--quiet")
        err = one_line_refusal(second, holder.pid)
        assert str(run_dir) in err
        fresh = search_cli(
            "--task", "saxpy", "--backend", "sim", "--iterations", "1", "--out", str(run_dir)
        )
        one_line_refusal(fresh, holder.pid)
        assert snapshot(run_dir) == before  # neither wrote a byte, .lock's stamp included
    finally:
        open_gate(tmp_path)
        code, out, err = finish(holder)
    assert code == 0, err
    assert iterations_of(run_dir) == [0, 1, 2, 3, 4, 5, 6]
    assert json.loads((run_dir / "summary.json").read_text())["iterations"] == 6
    # The holder let go: the run resumes again (here: nothing left, its result shown).
    assert not locks.is_held(run_dir / locks.LOCK_NAME)


def test_the_lock_is_taken_before_run_json_and_dies_with_a_killed_holder(tmp_path):
    run_dir = tmp_path / "new"
    holder = start_gated(
        tmp_path,
        "from mlxsci.search import run\n"
        f"run('saxpy', 'autotune', iterations=1, backend='sim', out={str(run_dir)!r})\n",
    )
    try:
        wait_for(lambda: (run_dir / "run.json").exists(), holder)
        assert locks.is_held(run_dir / locks.LOCK_NAME)
        assert locks.holder(run_dir / locks.LOCK_NAME)[0] == holder.pid
    finally:
        holder.kill()
        holder.communicate(timeout=DEADLINE)
    # kill -9 leaves no stale lock: the killed run resumes.
    assert not locks.is_held(run_dir / locks.LOCK_NAME)


# -- the manifest and the lock file ----------------------------------------------------


def test_the_lock_file_is_not_a_recorded_file_of_the_run(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    crafted_autotune_run(monkeypatch, run_dir, iterations=1)
    lock_file = run_dir / locks.LOCK_NAME
    lock_file.write_text("4242\nanother holder's stamp\n")  # a later, refused or read-only visit
    manifest = json.loads((run_dir / run_manifest.MANIFEST).read_text())
    assert locks.LOCK_NAME not in manifest["files"]
    assert run_manifest.check(run_dir).status == run_manifest.SEALED
    lock_file.unlink()  # gone again (a copy of the run without it)
    assert run_manifest.check(run_dir).status == run_manifest.SEALED
    (run_dir / "summary.json").write_text("{}")  # a real change still shows
    assert run_manifest.check(run_dir).tampered


# -- sweeps share the runs -----------------------------------------------------------------


def sweep_body(out: Path) -> str:
    return (
        "from mlxsci import sweep\n"
        "sweep.sweep(['saxpy'], ['autotune'], 2, repeats=2, backend='sim',"
        f" held_out={LISTED_HELD_OUT!r}, out={str(out)!r})\n"
    )


def test_two_sweeps_on_one_folder_share_the_runs(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    first, second = out / "saxpy_autotune", out / "saxpy_autotune_r2"
    other = start_gated(tmp_path, sweep_body(out))
    try:
        # The other sweep is in its first run, its seed's evaluation at the gate.
        wait_for(lambda: (first / "00_seed.metal").exists(), other)
        held_there = snapshot(first)
        monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
        said: list[str] = []
        entries = {
            e["path"]: e
            for e in sweep.sweep(
                ["saxpy"],
                ["autotune"],
                2,
                repeats=2,
                backend="sim",
                held_out=LISTED_HELD_OUT,
                out=out,
                echo=said.append,
            )
        }
        held = entries["saxpy_autotune"]
        assert held["status"] == "unfinished" and held["action"] == "in use", held
        assert f"process {other.pid}" in held["error"]
        assert snapshot(first) == held_there  # left to the other sweep: not a byte written
        assert entries["saxpy_autotune_r2"]["status"] == "finished"
        done_here = snapshot(second, lock=False)
    finally:
        open_gate(tmp_path)
        code, _, err = finish(other)
    assert code == 0, err
    assert iterations_of(first) == [0, 1, 2] and iterations_of(second) == [0, 1, 2]
    # The other sweep found the second run finished under its lock: not a byte
    # of the run rewritten (the lock file holds its stamp now).
    assert snapshot(second, lock=False) == done_here
    assert locks.holder(second / locks.LOCK_NAME)[0] == other.pid
    # The last index written (the other sweep's) is the runs as they are on disk.
    index = {e["path"]: e for e in json.loads((out / "index.json").read_text())["runs"]}
    assert {p: e["status"] for p, e in index.items()} == {
        "saxpy_autotune": "finished",
        "saxpy_autotune_r2": "finished",
    }
    assert {p: sweep.run_status(out / p, 2) for p in index} == {
        p: e["status"] for p, e in index.items()
    }


@contextlib.contextmanager
def lock_held_elsewhere(run_dir: Path):
    """A helper process holding run_dir's lock (as a search there would); its pid."""
    run_dir.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys\nfrom mlxsci.storage import locks\n"
        f"lock = locks.acquire({str(run_dir / locks.LOCK_NAME)!r}, 'a test holding it')\n"
        "print('held', flush=True)\nsys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=DEADLINE)


def test_a_sweep_skips_a_run_a_search_holds_and_takes_it_next_time(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))

    def run_sweep() -> list[dict]:
        return sweep.sweep(
            ["saxpy"], ["autotune"], 1, repeats=2, backend="sim", held_out=LISTED_HELD_OUT, out=out
        )

    with lock_held_elsewhere(out / "saxpy_autotune") as pid:
        entries = run_sweep()
        by_path = {e["path"]: e for e in entries}
        assert by_path["saxpy_autotune"]["status"] == "unfinished"
        assert f"process {pid}" in by_path["saxpy_autotune"]["error"]
        assert sorted(os.listdir(out / "saxpy_autotune")) == [locks.LOCK_NAME]
        assert by_path["saxpy_autotune_r2"]["status"] == "finished"
    again = run_sweep()
    assert [(e["status"], e["action"]) for e in again] == [
        ("finished", "ran"),
        ("finished", "skipped"),
    ]
    assert "error" not in again[0]


# -- a read-only run directory ----------------------------------------------------------------


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` unwritable: a read-only bind mount as root (chmod does not stop
    root), else its mode (skip where neither works)."""
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()}")
        try:
            subprocess.run(
                ["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True
            )
            yield
        finally:
            subprocess.run(["umount", str(folder)], check=True)
    else:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(mode)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_read_only_finished_run_shows_its_result_and_refuses_more_work(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    summary = crafted_autotune_run(monkeypatch, run_dir, iterations=2)
    before = snapshot(run_dir)
    with read_only(run_dir):
        with pytest.raises(OSError):  # the folder really cannot be written
            (run_dir / "probe").write_text("x")
        shown = search_cli("--resume", str(run_dir), "--quiet")
        more = search_cli("--resume", str(run_dir), "--iterations", "4", "--quiet")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "Traceback" not in shown.stderr
    assert f"outcome {summary['outcome']}" in shown.stdout and str(run_dir) in shown.stdout
    assert more.returncode == 2, (more.stdout[-2000:], more.stderr[-2000:])
    err = more.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert str(run_dir) in err and "cannot be written" in err
    assert snapshot(run_dir) == before


# -- the Ray executor ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("ship_results", [False, True])
def test_a_ray_sweep_leaves_a_held_run_to_its_holder(tmp_path, ship_results):
    """Real runs in Ray workers. Shared folder: the task takes the lock where
    the run executes; shipped: the driver holds it while the files are away."""
    ray = pytest.importorskip("ray")
    from mlxsci.sweep.ray_executor import RayExecutor

    out = tmp_path / "sweep"
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    try:
        with lock_held_elsewhere(out / "saxpy_autotune") as pid:
            executor = RayExecutor(backend="sim", ship_results=ship_results)
            entries = sweep.sweep(
                ["saxpy"],
                ["autotune"],
                1,
                repeats=2,
                backend="sim",
                held_out=LISTED_HELD_OUT,
                out=out,
                executor=executor,
            )
            held, ran = entries
            assert (held["status"], held["action"]) == ("unfinished", "in use")
            assert f"process {pid}" in held["error"]
            assert sorted(os.listdir(out / "saxpy_autotune")) == [locks.LOCK_NAME]
            assert locks.holder(out / "saxpy_autotune" / locks.LOCK_NAME)[0] == pid
    finally:
        ray.shutdown()
    assert (ran["status"], ran["action"]) == ("finished", "ran")
    assert iterations_of(out / "saxpy_autotune_r2") == [0, 1]
    who, doing = locks.holder(out / "saxpy_autotune_r2" / locks.LOCK_NAME)
    if ship_results:  # the driver held it; the worker's own lock stayed on its node
        assert who == os.getpid() and "shipped" in doing
    else:  # the Ray worker took it, not the driver
        assert who != os.getpid() and doing == "sweep run saxpy_autotune_r2"
    index = {e["path"]: e for e in json.loads((out / "index.json").read_text())["runs"]}
    assert index["saxpy_autotune"]["status"] == "unfinished"


def test_a_folder_not_writable_beside_a_writable_lock_file(tmp_path, monkeypatch):
    """As its owner after chmod a-w, the lock file (still writable) opens and
    locks; the folder's own permission decides (os.access, stubbed here: as
    root chmod stops nothing, and the read-only mount above fails the open)."""
    from mlxsci.search import run_lock

    run_dir = tmp_path / "run"
    summary = crafted_autotune_run(monkeypatch, run_dir, iterations=1)
    before = snapshot(run_dir, lock=False)
    real_access = os.access
    monkeypatch.setattr(
        run_lock.os,
        "access",
        lambda path, mode: False if Path(path) == run_dir else real_access(path, mode),
    )
    shown = run(None, resume=run_dir)
    assert shown["outcome"] == summary["outcome"] and shown["run_dir"] == str(run_dir)
    with pytest.raises(run_lock.RunDirUnwritable, match="2 of its 3 iterations are left"):
        run(None, resume=run_dir, iterations=3)
    assert snapshot(run_dir, lock=False) == before
    assert not locks.is_held(run_dir / locks.LOCK_NAME)  # let go of on the way out
