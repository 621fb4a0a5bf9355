"""A candidate's output never floods its trusted parent (issue 23, outcome 4).

Whatever a process that runs or reads a candidate's text prints (a worker, a
worker under compute-sanitizer, a comparison's worker, the simulator's
compiler quoting the candidate in its diagnostics) is drained by the parent
and kept only in part: a tail of a few KB (the compiler's head and tail: its
first error is at the start), never a file that grows with it.

Each flood runs in a child process that plays the parent's side
(`parent_side`), so its peak memory (VmHWM) is that side's alone; a thread
there watches the largest file under its TMPDIR while the flood lasts. The
floods come from stand-ins (a worker, a compiler) that print hundreds of MB,
since the source policy keeps a real kernel from printing at all; the real
compiler's own flood (warnings, each instantiation of a template quoting the
line again) is shown against a lowered cap.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest
from helpers import size_job

from mlxsci.evaluation.redaction import WORKER_TEXT_BYTES, worker_text
from mlxsci.protocol import exchange as worker_io

# What each stand-in prints on each of its two streams.
FLOOD_MB = 300
# The most the parent's side may grow while a flood lasts, and the most any
# file under its TMPDIR may hold: a bounded tail is kilobytes, the flood is
# hundreds of megabytes.
GROWTH_LIMIT_MB = 100
FILE_LIMIT_BYTES = 16 << 20
# A deadline that only catches a hang (the floods take seconds).
CHILD_DEADLINE = 600

# Run in the child before and around the parent's side: its peak memory, and
# a watcher of the largest file under TMPDIR (and any folder named in WATCH).
PRELUDE = textwrap.dedent("""
    import json, os, sys, threading, time

    def peak_mb():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM")

    def largest_file(root):
        largest = 0
        for folder, _dirs, files in os.walk(root):
            for name in files:
                try:
                    largest = max(largest, os.lstat(os.path.join(folder, name)).st_size)
                except OSError:
                    pass
        return largest

    watched = [os.environ["TMPDIR"], *filter(None, os.environ.get("WATCH", "").split(":"))]
    largest = [0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            largest[0] = max([largest[0], *map(largest_file, watched)])
            time.sleep(0.02)

    def answer_record(result):
        # a worker's answer as JSON: a launch's stays a record, a size's is a SizeRun
        import dataclasses
        return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result
""")

RUN = textwrap.dedent("""
    setup()
    before = peak_mb()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    answer = act()
    done.set()
    watcher.join()
    print(json.dumps({"growth_mb": peak_mb() - before, "largest_file": largest[0],
                      "answer": answer}))
""")


def parent_side(tmp_path: Path, code: str, watch: tuple[Path, ...] = ()) -> dict:
    """Run `code` (defining setup() and act(), act returning JSON) in a child
    process with its own TMPDIR: its memory growth over act(), the largest
    file seen under TMPDIR while it ran, and act()'s answer."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmpdir), WATCH=":".join(map(str, watch)))
    script = tmp_path / "parent_side.py"
    script.write_text(PRELUDE + textwrap.dedent(code) + RUN)
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=CHILD_DEADLINE,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


# A worker speaking the persistent worker's protocol (mlxsci.evaluation.runner) that
# prints FLOOD_MB on stdout and on stderr for each size before it answers.
FLOOD_WORKER = textwrap.dedent(f"""
    import json, os, sys
    status = os.fdopen(int(sys.argv[-1]), "w", buffering=1)
    status.write("ready\\n")
    chunk = b"a candidate's worker says this again and again\\n" * 21846
    for line in sys.stdin:
        handed = json.loads(line)
        for fd in (1, 2):
            for _ in range({FLOOD_MB}):
                os.write(fd, chunk)
        os.write(2, b"its last words\\n")
        if handed["job"].get("kind") == "compare":
            result = {{"seconds": [[1e-3] * 5, [2e-3] * 5]}}
        else:
            result = {{"seconds": [1e-3]}}
        with open(os.path.join(handed["dir"], "result.json"), "w") as f:
            json.dump(result, f)
        status.write("done\\n")
""")

# A process (a worker per size, a compiler) that prints FLOOD_MB on each of
# stdout and stderr at once, ends with its last words on stderr, and writes a
# result into the job folder it was given last on its command line, if any.
FLOOD_PROCESS = textwrap.dedent(f"""\
    #!/bin/sh
    yes "a candidate's process says this on stdout" | head -c {FLOOD_MB}000000 &
    yes "a candidate's process says this on stderr" | head -c {FLOOD_MB}000000 >&2 &
    wait
    echo "its last words" >&2
    for last; do :; done
    if [ -d "$last" ]; then echo '{{"seconds": [0.001]}}' > "$last/result.json"; fi
    exit 3
""")


def flood_process(tmp_path: Path) -> Path:
    path = tmp_path / "flood.sh"
    path.write_text(FLOOD_PROCESS)
    path.chmod(0o755)
    return path


def assert_bounded(seen: dict) -> None:
    assert seen["growth_mb"] < GROWTH_LIMIT_MB, seen
    assert seen["largest_file"] < FILE_LIMIT_BYTES, seen


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_flooding_worker_leaves_its_parent_a_tail_only(tmp_path):
    (tmp_path / "worker.py").write_text(FLOOD_WORKER)
    seen = parent_side(
        tmp_path,
        f"""
        import sys
        from mlxsci.evaluation.runner import CandidateWorker

        def setup():
            CandidateWorker.command = (sys.executable, {str(tmp_path / "worker.py")!r})

        def act():
            from mlxsci.protocol.jobs import LaunchJob

            with CandidateWorker() as worker:
                result, _folder, tail = worker.run(LaunchJob({{}}, 0), 300)
            return {{"result": answer_record(result), "tail": tail}}
        """,
    )
    assert_bounded(seen)
    assert seen["answer"]["result"] == {"seconds": [1e-3]}
    # The tail of a size that answered is what had been drained by its
    # "done" (its very last words may still be in the pipe then).
    assert len(seen["answer"]["tail"]) <= worker_io.STDERR_TAIL_CHARS
    assert "again and again" in seen["answer"]["tail"]


@pytest.mark.slow
def test_a_flooding_worker_per_size_leaves_its_parent_a_tail_only(tmp_path):
    # The runs under compute-sanitizer (one process per size): the worker's
    # interpreter is replaced by the flood, which still answers its size.
    flood = flood_process(tmp_path)
    seen = parent_side(
        tmp_path,
        f"""
        import sys
        from mlxsci.evaluation.per_size_runner import ProcessPerSize

        def setup():
            sys.executable = {str(flood)!r}

        def act():
            sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
            from helpers import size_job

            with ProcessPerSize(None) as runner:
                result, _jobdir, tail = runner.run(size_job(), 300)
            return {{"result": answer_record(result), "tail": tail}}
        """,
    )
    assert_bounded(seen)
    assert seen["answer"]["result"]["seconds"] == [0.001]
    assert seen["answer"]["tail"].rstrip().endswith("its last words")
    assert len(seen["answer"]["tail"]) <= worker_io.STDERR_TAIL_CHARS


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_flooding_comparison_worker_leaves_its_parent_a_tail_only(tmp_path):
    (tmp_path / "worker.py").write_text(FLOOD_WORKER)
    seen = parent_side(
        tmp_path,
        f"""
        import sys
        from mlxsci.evaluation.comparison import compare
        from mlxsci.evaluation.runner import CandidateWorker
        from mlxsci.task import Size, load_task

        def setup():
            CandidateWorker.command = (sys.executable, {str(tmp_path / "worker.py")!r})

        def act():
            seed = (load_task("saxpy").folder / "seed.metal").read_text()
            return compare("saxpy", seed, seed, backend="sim", sizes=[Size("1000", {{"N": 1000}})],
                           unsandboxed=True)
        """,
    )
    assert_bounded(seen)
    assert seen["answer"]["sizes"][0]["speedup"] == pytest.approx(0.5)


def test_a_flooding_compiler_leaves_its_parent_a_head_and_tail_only(tmp_path):
    # Every compile of the simulator goes through run_compiler, in the
    # parent when it builds for a sandboxed worker: a compiler printing
    # hundreds of MB of diagnostics (a candidate's text quoted in each).
    flood = flood_process(tmp_path)
    seen = parent_side(
        tmp_path,
        f"""
        from mlxsci.backends.sim import toolchain

        def setup():
            toolchain.zig_executable = lambda: {str(flood)!r}
            toolchain._zig_version = "flood"
            os.environ["ZIG_GLOBAL_CACHE_DIR"] = {str(tmp_path / "zig")!r}

        def act():
            res = toolchain.run_compiler(["c++", "-c", "candidate.cpp"])
            return {{"returncode": res.returncode, "stdout": res.stdout, "stderr": res.stderr}}
        """,
    )
    assert_bounded(seen)
    answer = seen["answer"]
    assert answer["returncode"] != 0
    kept = len(answer["stdout"]) + len(answer["stderr"])
    assert kept < 256 << 10, kept
    # The first diagnostics are where a compile error is read from.
    assert answer["stderr"].startswith("a candidate's process says this on stderr\n")


# A candidate's header whose template warns on each of DEPTH instantiations,
# each warning quoting the long line and naming the instantiation: the real
# compiler's flood from a short text (depth 200 made 17.7 MB in 17 s).
TEMPLATE_FLOOD = """
#line 1 "<candidate-file>"
template <int N> struct Deep {{ static inline int f(int v) {{ {comparisons} return Deep<N - 1>::f(v) + 1; }} }};
template <> struct Deep<0> {{ static inline int f(int v) {{ return v; }} }};
int flood_entry(int v) {{ return Deep<{depth}>::f(v); }}
int not_a_kernel(int v) {{ return v +; }}
"""


def test_a_compiler_flood_of_real_warnings_is_stopped_at_the_cap(tmp_path, monkeypatch):
    from mlxsci.backends.sim import build, toolchain
    from mlxsci.kernel.spec import CompileError

    monkeypatch.setattr(toolchain, "COMPILER_OUTPUT_BYTES", 256 << 10)
    comparisons = " ".join(["v == v;"] * 20) + " " * 1500
    tu = TEMPLATE_FLOOD.format(comparisons=comparisons, depth=60)
    with pytest.raises(CompileError) as raised:
        build.build_library(tu, "flood.metal")
    log = raised.value.log
    assert len(log) < 128 << 10
    assert "flood.metal:1:" in log.splitlines()[0]  # the first diagnostic is kept
    assert "output passed" in raised.value.message
    # No compile log of it in the cache grew with the flood.
    logs = list(toolchain.cache_dir().glob("k-*.err"))
    assert all(p.stat().st_size < 128 << 10 for p in logs)


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_sanitizer_log_is_read_in_part(tmp_path):
    # compute-sanitizer's log of a size: a record at its start, its summary
    # at its end, 200 MB between them.
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    record = (
        "========= COMPUTE-SANITIZER\n"
        "========= Invalid __global__ write of size 4 bytes\n"
        "=========     at mlx::core::cu::custom_kernel_saxpy(float*)+0x1b0\n"
        "=========     by thread (103,0,0) in block (3,0,0)\n"
        "=========     Address 0x7f3a1e000fa0 is out of bounds\n"
        "=========\n"
    )
    filler = ("========= Program hit an error on a CUDA API call, again\n" * 20000).encode()
    with open(jobdir / "sanitizer.log", "wb") as log:
        log.write(record.encode())
        for _ in range(200 * 1000 * 1000 // len(filler)):
            log.write(filler)
        log.write(b"========= ERROR SUMMARY: 1 error\n")
    seen = parent_side(
        tmp_path,
        f"""
        import dataclasses
        from pathlib import Path
        from mlxsci.evaluation.per_size_runner import sanitizer_context, sanitizer_finding

        def setup():
            pass

        def act():
            found = sanitizer_finding(Path({str(jobdir)!r}), ("memcheck", "compute-sanitizer"))
            return {{"found": dataclasses.asdict(found) if found else None,
                    "context": sanitizer_context(Path({str(jobdir)!r}))}}
        """,
    )
    assert seen["growth_mb"] < GROWTH_LIMIT_MB, seen["growth_mb"]
    found = seen["answer"]["found"]
    assert found is not None and found["error"]["kind"] == "memcheck"  # a SizeRun, as a dict
    assert "kernel saxpy" in found["error"]["message"]
    assert len(json.dumps(found)) < 64 << 10


def test_worker_text_bounds_what_it_reads_whatever_it_is_handed():
    flood = b"\x1b[31mnoise\x00" * (8 << 20) + b"its last words\n"
    tracemalloc.start()
    try:
        text = worker_text(flood, 2000)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text.rstrip().endswith("its last words") and len(text) <= 2000
    assert peak < 16 << 20, peak  # the flood is ~100 MB; its decoded text 4x that


def test_a_cut_through_a_secret_leaves_no_part_of_it(monkeypatch):
    # worker_text reads a flood's end only: a secret that cut splits is not
    # redacted as a whole, so what is left of it must go too. NULs after it
    # are cleaned away, so no later cut to the limit drops it either.
    secret = "sk-test-0123456789abcdefghijklmnopq"
    monkeypatch.setenv("FLOOD_TEST_API_KEY", secret)
    last_words = b"the worker's last words\n" * 100
    for split in range(1, len(secret), 5):
        nuls = b"\x00" * (WORKER_TEXT_BYTES - len(secret) + split - len(last_words))
        flood = b"y" * 100 + secret.encode() + nuls + last_words
        text = worker_text(flood, 100_000)
        assert text.endswith("the worker's last words\n")
        pieces = [secret[k : k + 4] for k in range(len(secret) - 3)]
        assert not [p for p in pieces if p in text], (split, text)


def test_a_result_message_is_kept_in_part(tmp_path):
    # A worker's answer is up to 16 MiB: the messages in it are quoted in
    # verdicts, prompts and run records, so each is cut to a few KB.
    (tmp_path / "result.json").write_text(
        json.dumps({"error": {"kind": "runtime", "message": "boom " * (2 << 20), "line": None}})
    )
    fd = worker_io.open_folder(tmp_path)
    try:
        result = worker_io.read_result(fd, size_job())
    finally:
        os.close(fd)
    assert not isinstance(result, str) and result.error is not None
    assert result.error.kind == "runtime"
    assert len(result.error.message) <= worker_io.MESSAGE_CHARS + 100
    assert result.error.message.startswith("boom boom")


def test_a_workers_error_is_cut_before_it_is_written():
    # A compile log quoting the candidate (NVRTC's on a GPU, clang's in an
    # unsandboxed simulator worker) went into result.json whole: past
    # RESULT_BYTES the parent read no verdict at all, only "too large".
    from types import SimpleNamespace

    from mlxsci.kernel.spec import CompileError
    from mlxsci.worker.serve import error_record

    backend = SimpleNamespace(classify_error=lambda exc: exc)
    log = "kernel.cu(3): warning: a candidate's line quoted again\n" * (1 << 20)
    record = error_record(CompileError("expected a ';'", 3, log), backend)
    assert record["kind"] == "compile" and record["line"] == 3
    assert record["message"] == "expected a ';'"
    assert record["log"].startswith("kernel.cu(3): warning:")
    assert len(json.dumps(record)) < worker_io.MESSAGE_CHARS + 1000


def files_under(root: Path):
    """(path, stat) of every file under `root`, skipping what other processes
    remove meanwhile (the shared caches' temporary folders come and go)."""
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                st = os.stat(os.path.join(folder, name), follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield os.path.join(folder, name), st


@pytest.mark.slow
def test_a_compile_writes_no_file_past_the_cap(monkeypatch):
    # A constant array of the candidate's is data in the object the compiler
    # writes (and zig keeps in its cache): 512 MB of it had left a 512 MB
    # object there, one per such candidate.
    import uuid

    from mlxsci.backends.sim import build, toolchain
    from mlxsci.kernel.spec import CompileError

    monkeypatch.setattr(toolchain, "COMPILE_FILE_BYTES", 12 << 20)
    tu = (
        f"// {uuid.uuid4()}: a fresh text, never in zig's cache\n"
        '#line 1 "<candidate-file>"\n'
        "static const float big[1 << 23] = {1.0f, 2.0f};\n"
        "float big_at(unsigned i) { return big[i & ((1u << 23) - 1u)]; }\n"
    )
    started = time.time()
    with pytest.raises(CompileError) as raised:
        build.build_library(tu, "big.metal")
    assert "files of up to 12 MiB" in raised.value.message
    written = [
        path
        for root in (toolchain.zig_cache_dir(), toolchain.cache_dir())
        for path, st in files_under(root)
        if st.st_mtime >= started - 1 and st.st_size > 12 << 20
    ]
    assert written == []
