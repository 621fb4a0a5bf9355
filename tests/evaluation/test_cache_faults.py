"""Damaged cache entries and concurrent first runs (issue 23, outcomes 3 and 6).

Outcome 3: every entry under the cache directory that an evaluation reads
back (a reference, a kernel library, a cached compile error, the runtime
object, a precompiled header and the header it was built from, the roofline,
the integrity key) is rebuilt when it is empty, cut short, altered or
unsealed, with one line on stderr naming it, and the evaluation's verdict is
the one an intact cache gives. Before issue 21 a zero-length reference
printed only `Aborted!` (exit 1) and a truncated one a BadZipFile traceback;
since then they were rebuilt without a word.

Outcome 6: evaluations started together on an empty cache measure the
roofline once (a lock beside the entry: the others wait, then read it), and
each result names the ceiling it used (the entry, a digest of its bytes, the
date it was measured).

Every test has a cache directory of its own (MLXSCI_CACHE_DIR): the
evaluations here run as separate processes, as a user's would.
"""

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlxsci.roofline.store import MEASURING
from mlxsci.storage import cache
from mlxsci.storage.faults import EXIT_CODE

ROOT = Path(__file__).resolve().parents[2]
CONV1D = ROOT / "examples" / "conv1d"
REBUILDING = "rebuilding"

# Every kind of entry an evaluation reads back, by where it lives in the cache.
ENTRIES = {
    "reference": "reference/conv1d/*.npz",
    "kernel library": "sim/k-*.so",
    "runtime object": "sim/rt-*.o",
    "precompiled header": "sim/pch-*.pch",
    "precompiled header's source": "sim/pch-*.h",
    "roofline": "roofline/*.json",
}
DAMAGES = ("empty", "truncated", "flipped", "unsealed", "folder")


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x40]) + data[middle + 1 :])
    elif how == "unsealed":
        cache.sidecar(path).unlink(missing_ok=True)
    else:  # a folder where the entry belongs
        path.unlink()
        path.mkdir()
        (path / "inside").write_bytes(data)


# The simulator's host-time clock, whose roofline is measured and cached as a
# GPU's is (the modelled GPU's roofline is its parameters: nothing cached).
HOST_CLOCK = {"MLXSCI_SIM_CLOCK": "host"}


def run_eval(folder, cache_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MLXSCI_CACHE_DIR=str(cache_dir), **HOST_CLOCK)
    return subprocess.run(
        [sys.executable, "-m", "mlxsci.eval", str(folder), "--backend", "sim", "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


def rebuild_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if REBUILDING in line]


def sealed(cache_dir: Path, path: Path, monkeypatch) -> bool:
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(cache_dir))
    return path.stat().st_size > 0 and cache.verify_file(path)


@pytest.fixture(scope="module")
def seedless(tmp_path_factory) -> Path:
    """examples/conv1d with fixed inputs (make_inputs takes no seed): the kind
    of task whose reference an evaluation reads from the cache (a seeded
    task's references are drawn afresh each evaluation and never cached)."""
    folder = tmp_path_factory.mktemp("tasks") / "conv1d"
    shutil.copytree(CONV1D, folder)
    task_py = folder / "task.py"
    text = task_py.read_text()
    assert "def make_inputs(p, seed=None):" in text and "input_rng(seed, " in text
    text = text.replace("def make_inputs(p, seed=None):", "def make_inputs(p):")
    task_py.write_text(text.replace("input_rng(seed, ", "input_rng(None, "))
    return folder


@pytest.fixture(scope="module")
def warm(seedless, tmp_path_factory) -> tuple[Path, dict]:
    """A cache filled by one evaluation of the seedless task, and its result."""
    cache_dir = tmp_path_factory.mktemp("warm") / "cache"
    proc = run_eval(seedless, cache_dir)
    assert proc.returncode == 0, proc.stderr
    # A first run finds every entry missing: that is not damage, nothing said.
    assert rebuild_lines(proc.stderr) == []
    for kind, pattern in ENTRIES.items():
        assert glob.glob(str(cache_dir / pattern)), f"no {kind} entry in the warm cache"
    return cache_dir, json.loads(proc.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("how", DAMAGES)
def test_every_damaged_entry_is_rebuilt_with_one_line_each(
    warm, seedless, tmp_path, how, monkeypatch
):
    warm_dir, first = warm
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm_dir, cache_dir)
    damaged = [Path(p) for pattern in ENTRIES.values() for p in glob.glob(str(cache_dir / pattern))]
    for path in damaged:
        damage(path, how)

    proc = run_eval(seedless, cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Aborted" not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["candidate"]["correct"] and result["candidate"]["fail_reason"] is None
    assert [s["error"] for s in result["sizes"]] == [s["error"] for s in first["sizes"]]
    lines = rebuild_lines(proc.stderr)
    for path in damaged:
        name = path.relative_to(cache_dir).as_posix()
        assert sum(name in line for line in lines) == 1, (name, lines)
    assert len(lines) == len(damaged), lines
    # Rebuilt in place and sealed: the next evaluation uses them and says nothing.
    for path in damaged:
        assert sealed(cache_dir, path, monkeypatch), path
    repaired = {path: path.read_bytes() for path in damaged}
    again = run_eval(seedless, cache_dir)
    assert again.returncode == 0 and rebuild_lines(again.stderr) == [], again.stderr
    assert {path: path.read_bytes() for path in damaged} == repaired  # none built again


BROKEN = """//! kernel conv1d
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
out[thread_position_in_grid.x] = undeclared_thing;
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_cached_compile_error_is_rebuilt_with_the_same_verdict(
    warm, seedless, tmp_path, how, monkeypatch
):
    # A copy of the warm cache: the runtime, the precompiled header and the
    # roofline are there already, so only the compile error is built here.
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm[0], cache_dir)
    source = tmp_path / "broken.metal"
    source.write_text(BROKEN)
    first = run_eval(seedless, cache_dir, "--source", str(source))
    assert first.returncode == 0, first.stderr
    verdict = json.loads(first.stdout)["candidate"]
    assert not verdict["compile_ok"] and "undeclared_thing" in verdict["fail_reason"]
    (err,) = (cache_dir / "sim").glob("k-*.err")
    damage(err, how)
    proc = run_eval(seedless, cache_dir, "--source", str(source))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["candidate"] == verdict
    lines = rebuild_lines(proc.stderr)
    assert len(lines) == 1 and err.relative_to(cache_dir).as_posix() in lines[0], lines
    assert sealed(cache_dir, err, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("how", ("empty", "truncated", "removed"))
def test_a_damaged_integrity_key_is_replaced_with_one_line(
    warm, seedless, tmp_path, how, monkeypatch
):
    """A key of the wrong size, or one gone from under its entries, is
    replaced; every entry sealed with the old one is rebuilt, and the process
    says so once, not once per entry."""
    warm_dir, _ = warm
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm_dir, cache_dir)
    key = cache_dir / cache.KEY_NAME
    old = key.read_bytes()
    if how == "removed":  # lost from under the entries it sealed
        key.unlink()
    else:
        key.write_bytes(b"" if how == "empty" else old[:7])
    proc = run_eval(seedless, cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["candidate"]["correct"]
    lines = rebuild_lines(proc.stderr)
    assert len(lines) == 1 and cache.KEY_NAME in lines[0], lines
    assert len(key.read_bytes()) == cache.KEY_BYTES and key.read_bytes() != old
    for pattern in ENTRIES.values():
        for path in glob.glob(str(cache_dir / pattern)):
            assert sealed(cache_dir, Path(path), monkeypatch), path


def test_a_damaged_entry_is_named_once_per_process(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_REPORTED", set())
    monkeypatch.setattr(cache, "_KEY_REPLACED", [])  # an earlier test may have replaced it
    path = cache.cache_dir("things") / "a.bin"
    assert cache.read_verified(path) is None  # missing: a first run, nothing said
    assert capfd.readouterr().err == ""
    cache.write_verified(path, b"the parent's bytes")
    for _ in range(3):
        path.write_bytes(b"")
        assert cache.read_verified(path) is None
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "things/a.bin" in err and "empty" in err and REBUILDING in err
    assert cache.read_verified(path) is None
    assert capfd.readouterr().err == ""


PROBE_RUN = """
import json, sys
import mlxsci
ev = mlxsci.evaluate("saxpy", backend="sim", size_set="smoke",
                     announce=lambda line: print(line, file=sys.stderr, flush=True))
print(json.dumps(ev.to_json()))
"""


@pytest.mark.slow
def test_concurrent_first_evaluations_measure_the_roofline_once(tmp_path):
    cache_dir = tmp_path / "cache"
    env = dict(os.environ, MLXSCI_CACHE_DIR=str(cache_dir), **HOST_CLOCK)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE_RUN],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    # The probes ran in one process; the others waited for it (naming it) or,
    # started later, found its entry.
    measured = [err.count(MEASURING) for _, err in outs]
    assert sorted(measured) == [0, 0, 1], [err for _, err in outs]
    ceilings = [json.loads(out)["roofline"] for out, _ in outs]
    (entry,) = (cache_dir / "roofline").glob("*.json")

    digest = hashlib.sha256(entry.read_bytes()).hexdigest()
    for ceiling in ceilings:
        assert ceiling == ceilings[0]
        assert ceiling["entry"] == entry.relative_to(cache_dir).as_posix()
        assert ceiling["sha256"] == digest
        assert ceiling["measured_at"] == json.loads(entry.read_text())["measured_at"]
    # And every size was scored against it: same ceiling in each result.
    per_size = {s["ceiling"] for out, _ in outs for s in json.loads(out)["sizes"]}
    assert len(per_size) == 1


@pytest.mark.slow
def test_a_precompiled_header_the_compiler_refuses_is_named_and_built_again(
    seedless, tmp_path, monkeypatch
):
    """Same bytes, sealed, but its header's mtime changed (a restore from a
    backup): clang refuses the PCH. It is named, built again at once, and
    kept. (A cache of its own: a PCH names its header by absolute path, so a
    copied cache's PCH would still read the warm cache's header.)"""
    cache_dir = tmp_path / "cache"
    assert run_eval(seedless, cache_dir).returncode == 0
    (pch,) = (cache_dir / "sim").glob("pch-*.pch")
    os.utime(pch.with_suffix(".h"), (1e9, 1e9))
    for lib in (cache_dir / "sim").glob("k-*.so"):  # so that the kernel is compiled
        lib.unlink()
    old = pch.read_bytes()
    proc = run_eval(seedless, cache_dir)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["candidate"]["correct"]
    lines = rebuild_lines(proc.stderr)
    assert len(lines) == 1 and pch.name in lines[0] and "refused" in lines[0], lines
    assert sealed(cache_dir, pch, monkeypatch) and pch.read_bytes() != old
    again = run_eval(seedless, cache_dir)
    assert again.returncode == 0 and rebuild_lines(again.stderr) == [], again.stderr


HALF = """//! kernel conv1d
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
// Right, and needs compiler-rt: a float -> half conversion (__truncsfhf2 on a
// baseline x86-64 CPU), whose value is then multiplied away.
uint i = thread_position_in_grid.x;
if (i >= N) {
    return;
}
float acc = 0.0f;
for (int k = 0; k < 7; ++k) {
    int j = int(i) + k - 3;
    if (j >= 0 && j < int(N)) {
        acc += w[k] * x[j];
    }
}
out[i] = acc + 0.0f * float(half(acc));
"""


@pytest.mark.slow
def test_a_damaged_zig_cache_is_named_and_never_cached_as_a_compile_error(seedless, tmp_path):
    """zig's own cache (outside mlxsci's) holds compiler_rt, which links
    into every kernel that converts to half. Emptied, the link missed
    __truncsfhf2 and a correct candidate got a compile error, cached for good
    (a repaired zig cache did not help). Now it is the machine's fault
    (mlxsci/storage/faults.py): no verdict, exit 3, a message naming zig's
    cache and the fix, nothing cached; the repaired cache passes the candidate."""
    zig = tmp_path / "zig"
    cache_dir = tmp_path / "cache"
    source = tmp_path / "half.metal"
    source.write_text(HALF)

    def run() -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "mlxsci.eval", str(seedless), "--backend", "sim", "--json"]
            + ["--source", str(source)],
            env=dict(os.environ, ZIG_GLOBAL_CACHE_DIR=str(zig), MLXSCI_CACHE_DIR=str(cache_dir)),
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    assert json.loads(run().stdout)["candidate"]["correct"]
    (runtime_lib,) = zig.rglob("libcompiler_rt.a")
    runtime_lib.write_bytes(b"")
    for lib in (cache_dir / "sim").glob("k-*"):
        lib.unlink()
    broken = run()
    assert broken.returncode == EXIT_CODE and broken.stdout == ""
    assert "__truncsfhf2" in broken.stderr and "zig's cache: that cache is damaged" in broken.stderr
    assert not list((cache_dir / "sim").glob("k-*.err"))  # nothing cached against the candidate
    shutil.rmtree(runtime_lib.parent.parent.parent)  # the fix the message gives
    assert json.loads(run().stdout)["candidate"]["correct"]
