"""One worker process per candidate for all its sizes (issue 11, outcome 3).

The process runs the sizes in order, each under its own time limit, and a
crash or a hang at one size is that size's verdict: the sizes before it keep
their results and the sizes after it never run. Real kernels on the
simulator show it end to end; a stand-in worker (a short script speaking the
same protocol) shows what the parent does with each way a process can end,
and which sizes it was handed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass

import pytest
from click.testing import CliRunner
from helpers import kernel_rules_off

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.runner import CandidateWorker
from mlxsci.protocol.results import SizeRun
from mlxsci.task import Size
from mlxsci.worker import serve as worker_module

SIZES = [Size("1000", {"N": 1000}), Size("2001", {"N": 2001}), Size("3000", {"N": 3000})]

# saxpy that does `{fault}` at N == 2001 only, the second of SIZES. _exit is
# libc's: the process ends at once, without a result, as a crash does. No
# candidate may call it (the source policy and the kernel's symbol check refuse
# it), so the tests that use it switch those off in this process, where kernels
# are built (`libc_exit_allowed`): what they test is the worker's death.
SAXPY_WITH_FAULT = {
    "metal": """//! header
extern "C" void _exit(int);
//! kernel saxpy
uint i = thread_position_in_grid.x;
if (i >= N) {{
    return;
}}
if (N == {at}) {{
    {fault}
}}
y_out[i] = a * x[i] + y[i];
""",
    "cuda": """//! header
extern "C" void _exit(int);
//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= N[0]) {{
    return;
}}
if (N[0] == {at}) {{
    {fault}
}}
y_out[i] = a[0] * x[i] + y[i];
""",
}
EXIT = "_exit(3);"
HANG = {
    "metal": "while (x[i] == x[i]) { y_out[i] += 1.0f; }",
    "cuda": "while (x[i] == x[i]) { y_out[i] += 1.0f; }",
}


def saxpy_with_fault(dialect: str, fault: str, at: int = 2001) -> str:
    # A comment of its own: the kernel cache keeps refusals by text.
    text = SAXPY_WITH_FAULT[dialect].format(fault=fault, at=at)
    return text.replace("//! header\n", f"//! header\n// {uuid.uuid4().hex}\n", 1)


@pytest.fixture
def libc_exit_allowed(monkeypatch):
    kernel_rules_off(monkeypatch)


def run_sizes(source: str, dialect: str, **kw):
    return evaluate("saxpy", source, backend="sim", sizes=SIZES, n_measure=2, dialect=dialect, **kw)


# ------------------------------------------------------------ real kernels
@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_a_crash_at_the_second_size_is_its_verdict_and_the_first_stands(libc_exit_allowed, dialect):
    ev = run_sizes(saxpy_with_fault(dialect, EXIT), dialect)
    assert not ev.correct and ev.score == 0.0
    assert [s.label for s in ev.sizes] == ["1000", "2001"]  # the third never ran
    first, second = ev.sizes
    assert first.correct and first.fraction > 0 and first.flags == []
    assert not second.correct and second.flags == ["crash"]
    assert "runtime error at size 2001" in second.fail_reason
    assert "exit code 3" in second.fail_reason


@pytest.mark.slow
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_the_same_kernel_without_the_crash_passes_every_size(libc_exit_allowed, dialect):
    ev = run_sizes(saxpy_with_fault(dialect, EXIT, at=7), dialect)  # no size has N == 7
    assert ev.correct, ev.fail_reason
    assert [s.label for s in ev.sizes] == ["1000", "2001", "3000"]
    assert all(s.correct for s in ev.sizes)


@pytest.mark.slow
def test_a_hang_at_one_size_times_out_that_size_only(libc_exit_allowed):
    source = saxpy_with_fault("metal", HANG["metal"])
    # The first size alone first, so its kernel is compiled and cached: the
    # 6 s limit then covers a process start and a cache hit (under 1 s), and
    # the test waits 6 s for the hang instead of a limit sized for cold caches.
    warm = evaluate("saxpy", source, backend="sim", sizes=SIZES[:1], n_measure=2, dialect="metal")
    assert warm.correct, warm.fail_reason
    ev = run_sizes(source, "metal", timeout=6)
    assert [s.label for s in ev.sizes] == ["1000", "2001"]
    assert ev.sizes[0].correct
    assert ev.sizes[1].flags == ["timeout"] and "within 6 s" in ev.sizes[1].fail_reason


# ------------------------------------------------------------ a stand-in worker
# Speaks mlxsci.worker's --serve protocol; what it does at each size comes from


# What the parent reads of every stand-in's result.json ({"act": ..., "seconds": [0.001]}):
# a size's answer, typed (mlxsci.protocol.results), its "act" left out.
ANSWERED = SizeRun(seconds=(0.001,))


@dataclass(frozen=True)
class ActJob:
    """A stand-in's job: what the stand-in worker is to do, on the wire as "act"
    (the fields the parent's exchange reads of any job are a size's)."""

    act: str
    output_bytes: int = 0
    kind: str = "size"
    input_seeds: tuple = ()
    every_output: bool = False

    def to_wire(self) -> dict:
        return {"kind": self.kind, "act": self.act}


# the job ("act"): "ok", "exit" (dies without a result), "hang", "slow" (takes
# 1.5 s, then answers), "die_after_result" (writes the result, then dies), and
# "linger" (answers, then ignores the end of stdin), and what a hostile worker
# could do instead of answering: "junk" and "longline" (lines that are not the
# protocol's), "bigresult" and "badresult" (a result.json too large or not JSON). It logs every job folder
# it is handed, and its process id, to the file named by its first argument
# (not an environment variable: a worker starts with a scrubbed environment).
# Results of a worker that runs a candidate's native code (the simulator's)
# and writes its own result.json: JSON, of a result's keys, with a field no
# run gives. Each is refused where the parent reads it, naming the field.
# Before mlxsci.protocol.results, "zero_seconds" reached the roofline
# division (ZeroDivisionError: the parent's traceback, the search over) and
# "negative_seconds" a correct size with a negative fraction of the roofline.
FORGED_RESULTS = {
    "zero_seconds": ({"seconds": [0.0]}, "seconds holds 0.0"),
    "negative_seconds": ({"seconds": [-1.0, -1.0, -1.0]}, "seconds holds -1.0"),
    "nan_seconds": ('{"seconds": [NaN]}', "seconds holds nan"),
    "text_timings": ({"seconds": [0.001], "timings": {"x": "y" * 99}}, "timings['x']"),
    "checksums_list": ({"seconds": [0.001], "input_checksums_before": [1]},
                       "input_checksums_before"),
    "error_line_text": ({"error": {"kind": "compile", "message": "m", "line": "7"}},
                        "error.line"),
}  # fmt: skip

STANDIN = textwrap.dedent("""
    import json, os, sys, time
    FORGED = json.loads(sys.argv[2])
    status = os.fdopen(int(sys.argv[-1]), "w", buffering=1)
    status.write("ready\\n")
    log = open(sys.argv[1], "a", buffering=1)
    linger = False
    for line in sys.stdin:
        handed = json.loads(line)
        jobdir, act = handed["dir"], handed["job"]["act"]
        log.write(json.dumps({"pid": os.getpid(), "act": act}) + "\\n")
        if act == "exit":
            sys.stderr.write("boom\\n")
            os._exit(5)
        if act == "hang":
            time.sleep(3600)
        if act == "slow":
            time.sleep(1.5)
        if act == "junk":
            status.write("hello parent\\n")
            time.sleep(3600)
        if act == "longline":
            status.write("x" * 100000)
            time.sleep(3600)
        if act in FORGED:
            with open(os.path.join(jobdir, "result.json"), "w") as f:
                f.write(FORGED[act])
            status.write("done\\n")
            continue
        if act in ("bigresult", "badresult"):
            with open(os.path.join(jobdir, "result.json"), "w") as f:
                f.write("[" * 100 if act == "badresult" else " " * (17 << 20) + "{}")
            status.write("done\\n")
            continue
        linger = linger or act == "linger"
        with open(os.path.join(jobdir, "result.json"), "w") as f:
            json.dump({"act": act, "seconds": [0.001]}, f)
        if act == "die_after_result":
            os._exit(0)
        status.write("done\\n")
    if linger:
        time.sleep(3600)
""")


@pytest.fixture
def standin(tmp_path, monkeypatch):
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)
    log = tmp_path / "handed.log"
    forged = {
        act: body if isinstance(body, str) else json.dumps(body)
        for act, (body, _) in FORGED_RESULTS.items()
    }
    command = (sys.executable, str(script), str(log), json.dumps(forged))
    monkeypatch.setattr(CandidateWorker, "command", command)

    def handed() -> list[dict]:
        return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []

    return handed


def run_acts(acts: list[str], timeout: float = 10.0) -> list[tuple]:
    """Hand the stand-in one size per act, stopping after the first that
    fails, as evaluate() does; (result, stderr tail) of each."""
    answers = []
    with CandidateWorker() as worker:
        for act in acts:
            result, jobdir, tail = worker.run(ActJob(act), timeout)
            answers.append((result, tail))
            if result is None:
                break
    return answers


def test_a_death_at_the_second_size_keeps_the_first_and_hands_over_no_third(standin):
    answers = run_acts(["ok", "exit", "ok"])
    assert len(answers) == 2
    assert answers[0][0] == ANSWERED
    assert answers[1][0] is None and "exit code 5" in answers[1][1] and "boom" in answers[1][1]
    assert [h["act"] for h in standin()] == ["ok", "exit"]
    assert len({h["pid"] for h in standin()}) == 1  # both sizes in one process


@pytest.mark.slow  # waits out a time limit
def test_a_hang_times_out_that_size_only(standin):
    started = time.monotonic()
    answers = run_acts(["ok", "hang", "ok"], timeout=2.0)
    assert time.monotonic() - started < 30  # killed, not waited for
    assert answers[0][0] == ANSWERED
    assert answers[1] == (None, "timeout: no verdict within 2 s")
    assert [h["act"] for h in standin()] == ["ok", "hang"]


@pytest.mark.slow  # waits out a time limit
def test_each_size_has_its_own_time_limit(standin):
    # 3 s in all, 1.5 s each: within a 2.5 s limit per size.
    answers = run_acts(["slow", "slow"], timeout=2.5)
    assert [a[0] for a in answers] == [
        ANSWERED,
        ANSWERED,
    ]


def test_a_size_after_a_dead_process_is_refused_not_run(standin):
    with CandidateWorker() as worker:
        assert worker.run(ActJob("exit"), 10)[0] is None
        result, _, tail = worker.run(ActJob("ok"), 10)
    assert result is None and tail.startswith("the worker ended at an earlier size")
    assert [h["act"] for h in standin()] == ["exit"]


def test_a_result_written_before_dying_stands_and_the_next_size_gets_a_new_process(standin):
    answers = run_acts(["die_after_result", "ok"])
    assert [a[0] for a in answers] == [
        ANSWERED,
        ANSWERED,
    ]
    assert len({h["pid"] for h in standin()}) == 2


@pytest.mark.slow  # waits out a time limit
def test_a_worker_that_outlives_its_last_size_is_killed(standin, monkeypatch):
    monkeypatch.setattr("mlxsci.evaluation.runner.CLOSE_GRACE_SECONDS", 0.5)
    with CandidateWorker() as worker:
        assert worker.run(ActJob("linger"), 10)[0] == ANSWERED
        proc = worker.proc
    assert proc.returncode == -signal.SIGKILL  # killed, not left running
    assert not worker.logdir.exists()


def test_each_candidate_has_its_own_process(standin):
    run_acts(["ok"])
    run_acts(["ok"])
    assert len({h["pid"] for h in standin()}) == 2


@pytest.mark.parametrize("args", [[], ["/tmp/some-job", "--serve", "3"]])
def test_the_worker_command_takes_one_jobdir_or_serve_not_both_or_neither(args):
    out = CliRunner().invoke(worker_module.main, args)
    assert out.exit_code == 2 and "give one JOBDIR or --serve FD" in out.output


# The packages of the side that judges a worker: the worker process, which runs
# the candidate's code, loads none of them.
TRUSTED_PACKAGES = ("evaluation", "roofline", "search", "report", "sweep")


def test_the_worker_loads_nothing_of_the_trusted_side():
    code = (
        "import sys, mlxsci.worker.serve\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('mlxsci'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.split()
    assert "mlxsci.worker.serve" in loaded  # the listing is the worker's
    trusted = [m for m in loaded if m.partition(".")[2].split(".")[0] in TRUSTED_PACKAGES]
    assert trusted == [], f"the worker loads the side that judges it: {trusted}"


@pytest.mark.parametrize("act", sorted(FORGED_RESULTS))
def test_a_forged_result_is_refused_where_it_is_read_naming_the_field(standin, act):
    answers = run_acts([act, "ok"])
    assert len(answers) == 1 and answers[0][0] is None  # no size after it in that process
    tail = answers[0][1]
    assert tail.startswith("the worker's result.json is malformed: ")
    assert FORGED_RESULTS[act][1] in tail


@pytest.mark.parametrize("act", ["junk", "longline", "bigresult", "badresult"])
def test_a_worker_that_breaks_the_protocol_fails_its_size_and_the_parent_lives_on(standin, act):
    started = time.monotonic()
    answers = run_acts([act, "ok"], timeout=30)
    assert time.monotonic() - started < 20  # not waited out to the size's limit
    assert len(answers) == 1 and answers[0][0] is None
    assert "protocol" in answers[0][1] or "result.json" in answers[0][1]


# ------------------------------------------------ a hostile worker's files
# What the red team's worker did to its job folder: links for the parent to
# follow (to a file to read, to its own pipe to hang on, to a reference to be
# judged by), a result of the wrong shape, and a forged build request. The
# stand-in does it and says "done" or "build".
HOSTILE = textwrap.dedent("""
    import json, os, sys, time
    status = os.fdopen(int(sys.argv[-1]), "w", buffering=1)
    status.write("ready\\n")
    victim = sys.argv[1]
    for line in sys.stdin:
        handed = json.loads(line)
        jobdir, act = handed["dir"], handed["job"]["act"]
        if act == "link_result":
            os.symlink(victim, os.path.join(jobdir, "result.json"))
        if act == "link_outputs":
            with open(os.path.join(jobdir, "result.json"), "w") as f:
                json.dump({"seconds": [0.001]}, f)
            os.symlink(victim, os.path.join(jobdir, "verified.npz"))
        if act == "fifo_request":
            os.mkfifo(os.path.join(jobdir, "build-1.json"))
            status.write("build build-1.json\\n")
            if "unexpected build request" not in sys.stdin.readline():
                time.sleep(3600)  # not answered as a refusal: the size times out
        if act == "no_kind":
            with open(os.path.join(jobdir, "result.json"), "w") as f:
                json.dump({"error": {"message": "no kind"}}, f)
        status.write("done\\n")
""")


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE)
    victim = tmp_path / "victim.json"
    victim.write_text(json.dumps({"seconds": [1e-9], "planted": True}))
    command = (sys.executable, str(script), str(victim))
    monkeypatch.setattr(CandidateWorker, "sandboxed_command", command)
    return victim


def run_hostile(act: str) -> tuple:
    with CandidateWorker(sandbox_read=[]) as worker:  # sandboxed: it may ask for builds
        result, folder, tail = worker.run(ActJob(act, output_bytes=1000), 10)
        return result, sorted(p.name for p in folder.iterdir()), tail


def test_a_result_that_is_a_link_is_not_followed(hostile):
    result, _, tail = run_hostile("link_result")
    assert result is None and "result.json" in tail


def test_outputs_that_are_links_are_not_copied(hostile):
    result, copied, _ = run_hostile("link_outputs")
    assert result == ANSWERED and copied == []


def test_a_build_request_that_is_not_a_file_is_refused_at_once(hostile):
    started = time.monotonic()
    result, _, tail = run_hostile("fifo_request")
    assert time.monotonic() - started < 9.5  # refused at once, not blocked until the limit
    assert result is None and not tail.startswith("timeout")


def test_a_result_of_the_wrong_shape_is_no_result(hostile):
    result, _, tail = run_hostile("no_kind")
    assert result is None and "malformed" in tail


def test_spare_workers_start_each_candidates_process_ahead_and_share_none(standin):
    """Within spare_workers() (a search) the next candidate's process is
    started while the one before runs: a candidate takes a process that has
    run nothing, never one another candidate used, and the last spare is
    closed on leaving."""
    from mlxsci.evaluation import runner

    with runner.spare_workers():
        spares = runner.SPARES
        assert spares is not None
        first = spares.take("sim", None)
        ahead = spares.ready[("sim", None)]
        assert ahead.proc is not None and ahead.starting  # started, not yet handed a size
        with first:
            assert first.run(ActJob("ok"), 10)[0] == ANSWERED
        second = spares.take("sim", None)
        assert second is ahead and second.proc is not first.proc
        with second:
            assert second.run(ActJob("ok"), 10)[0] == ANSWERED
        last = spares.ready[("sim", None)]
    assert runner.SPARES is None
    assert last.proc is None or last.proc.returncode is not None  # closed, and reaped
    pids = [h["pid"] for h in standin()]
    assert len(pids) == 2 and pids[0] != pids[1]  # one process per candidate


def test_no_spare_is_started_where_a_gpu_times_the_runs(standin):
    from mlxsci.evaluation import runner

    with runner.spare_workers():
        worker = runner.SPARES.take("cuda", None)  # type: ignore[union-attr]
        assert not runner.SPARES.ready and worker.proc is None  # type: ignore[union-attr]
        worker.close()


def test_a_spare_started_with_another_environment_is_not_used(standin, monkeypatch):
    from mlxsci.evaluation import runner

    monkeypatch.delenv("MLXSCI_SIM_SCHEDULE", raising=False)
    with runner.spare_workers():
        spares = runner.SPARES
        assert spares is not None
        spares.take("sim", None).close()
        ahead = spares.ready[("sim", None)]
        monkeypatch.setenv("MLXSCI_SIM_SCHEDULE", "1")  # a switch the worker keeps
        taken = spares.take("sim", None)
        assert taken is not ahead and ahead.proc.returncode is not None  # closed, not used
        taken.close()


def test_a_spare_that_ended_while_it_waited_is_not_used(standin):
    from mlxsci.evaluation import runner

    with runner.spare_workers():
        spares = runner.SPARES
        assert spares is not None
        spares.take("sim", None).close()
        ahead = spares.ready[("sim", None)]
        ahead.kill()  # killed from outside before any candidate took it
        taken = spares.take("sim", None)
        assert taken is not ahead
        with taken:
            assert taken.run(ActJob("ok"), 10)[0] == ANSWERED
