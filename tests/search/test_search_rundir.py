"""Run directories and the search's bad inputs (issue 12, outcomes 5-7, search side).

- A damaged line of history.jsonl (cut short by a kill, or junk) is reported
  by file and line number and skipped; the records after it still count.
- run.json says what a resumed run runs (an extension's iterations).
- A killed search (SIGTERM, Ctrl-C, kill -9) leaves no worker process and no
  job folder behind: real searches on the simulator, killed while their worker
  runs a kernel that never ends.
- Bad inputs to `python -m mlxsci.search` get a one-line message and exit 2,
  with no run directory made; they run in this process through click's
  CliRunner, with evaluate() replaced by a stand-in wherever nothing may run.
- The output says what S and Phi mean, once per run.
Most runs here use test_search's crafted evaluator (no kernel runs).
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import helpers
import pytest
from click.testing import CliRunner
from scripted_runs import SEED, Crafted, Scripted, crafted_run, fenced, variant

from mlxsci.search import __main__ as search_cli
from mlxsci.search import loop, options, run
from mlxsci.search.rundir import RunDir
from mlxsci.task import load_task

ROOT = Path(__file__).resolve().parents[2]
CONV1D = ROOT / "examples" / "conv1d"
# name -> (S, S noise, Phi, Phi noise), for crafted runs
TABLE = {
    "seed": SEED,
    **{name: (0.30 + 0.01 * k, 0.01, 0.50, 0.02) for k, name in enumerate("abcdef", start=1)},
}
# A saxpy kernel that never ends (the simulator's own limit is the size's timeout).
HANG = """//! kernel saxpy
uint i = thread_position_in_grid.x;
if (i >= N) return;
float v = x[i];
while (v == v) { v = v * 0.5f + 1.0f; y_out[i] = v; }
"""


def record(iteration: int) -> dict:
    return {
        "iteration": iteration,
        "role": "seed" if iteration == 0 else "skipped",
        "fail_reason": None if iteration == 0 else "no fenced code block",
        "is_new_best": iteration == 0,
        "cost_usd": 0.0,
    }


def line(iteration: int) -> str:
    return json.dumps(record(iteration), sort_keys=True)


# -- history.jsonl: damaged lines ------------------------------------------------------


@pytest.mark.parametrize(
    "lines,kept,bad",
    [
        # junk inserted in the middle: every record kept
        ([line(0), line(1), "garbage !!", line(2), line(3)], [0, 1, 2, 3], [3]),
        # a record cut short in the middle (and the one after it kept)
        ([line(0), line(1), line(2)[:20], line(3)], [0, 1, 3], [3]),
        # a torn last line, as kill -9 mid-write leaves it
        ([line(0), line(1), line(2)[:25]], [0, 1], [3]),
        # valid JSON that is no record: a bare number, a list, an unknown role
        (
            [line(0), "17", "[1, 2]", json.dumps({"iteration": 1, "role": "?"}), line(1)],
            [0, 1],
            [2, 3, 4],
        ),
    ],
)
def test_a_damaged_history_line_is_reported_and_skipped_and_later_records_kept(
    tmp_path, lines, kept, bad
):
    (tmp_path / "history.jsonl").write_text("\n".join(lines) + "\n")
    rd = RunDir(tmp_path)
    assert [r["iteration"] for r in rd.history()] == kept
    assert [n for n, _ in rd.skipped_lines] == bad
    report = rd.skipped_report()
    assert len(report) == len(bad)
    for n, said in zip(bad, report):
        assert f"{tmp_path / 'history.jsonl'}:{n}: " in said and "skipped" in said


def test_binary_junk_in_the_history_is_skipped(tmp_path):
    (tmp_path / "history.jsonl").write_bytes(
        (line(0) + "\n").encode() + b"\xff\xfe\x00\x01junk\n" + (line(1) + "\n").encode()
    )
    rd = RunDir(tmp_path)
    assert [r["iteration"] for r in rd.history()] == [0, 1]
    assert [n for n, _ in rd.skipped_lines] == [2]


def test_a_resume_past_a_damaged_line_repeats_nothing(tmp_path, monkeypatch):
    summary, fake, _ = crafted_run(tmp_path, monkeypatch, TABLE, ["a", "b", "c"])
    history = tmp_path / "run" / "history.jsonl"
    lines = history.read_text().splitlines()
    lines.insert(2, "this line is junk")  # line 3 of 5
    history.write_text("\n".join(lines) + "\n")
    evaluated = len(fake.calls)
    said = []
    proposer = Scripted([fenced(variant("d"))])
    summary = run(None, resume=tmp_path / "run", iterations=4, proposer=proposer, echo=said.append)
    assert [ctx.iteration for ctx in proposer.seen] == [4]  # only the new one
    # (the held-out gate and the transfer check run again: the extension draws anew)
    searched = [c for c in fake.calls[evaluated:] if c["size_set"] == "smoke"]
    assert len(searched) == 1  # no iteration re-run
    assert [r["iteration"] for r in summary["history"]] == [0, 1, 2, 3, 4]
    warnings = [s for s in said if "history.jsonl:3:" in s]
    assert len(warnings) == 1 and "skipped" in warnings[0], said
    # The history is rewritten with its records only; the junk is kept aside.
    assert [json.loads(ln)["iteration"] for ln in history.read_text().splitlines()] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert (
        "history.jsonl line 3: this line is junk"
        in (tmp_path / "run" / "history_skipped.txt").read_text()
    )
    # A second resume finds nothing to report.
    said.clear()
    run(None, resume=tmp_path / "run", proposer=Scripted([]), echo=said.append)
    assert not [s for s in said if "history.jsonl" in s]


def test_a_lost_seed_record_is_evaluated_again_and_the_later_records_kept(tmp_path, monkeypatch):
    crafted_run(tmp_path, monkeypatch, TABLE, ["a", "b"])
    history = tmp_path / "run" / "history.jsonl"
    lines = history.read_text().splitlines()
    history.write_text("\n".join(['{"iteration": 0, "ro'] + lines[1:]) + "\n")
    proposer = Scripted([])
    summary = run(None, resume=tmp_path / "run", proposer=proposer, echo=lambda m: None)
    assert [r["iteration"] for r in summary["history"]] == [0, 1, 2] and proposer.seen == []
    assert summary["best_iteration"] == 2


# -- run.json reflects what runs -------------------------------------------------------


def test_run_json_says_how_many_iterations_an_extended_run_has(tmp_path, monkeypatch):
    crafted_run(tmp_path, monkeypatch, TABLE, ["a", "b"])
    opts_path = tmp_path / "run" / "run.json"
    assert json.loads(opts_path.read_text())["iterations"] == 2
    run(
        None,
        resume=tmp_path / "run",
        iterations=3,
        max_cost=5.0,
        proposer=Scripted([fenced(variant("c"))]),
    )
    opts = json.loads(opts_path.read_text())
    assert opts["iterations"] == 3 and opts["max_cost"] == 5.0
    # A resume cannot shorten a run: refused, and run.json stays as it was.
    with pytest.raises(ValueError, match="has done 3 iterations; --iterations 1 cannot"):
        run(None, resume=tmp_path / "run", iterations=1, proposer=Scripted([]))
    assert json.loads(opts_path.read_text())["iterations"] == 3


# -- S and Phi, said once ----------------------------------------------------------------


@pytest.mark.parametrize("quiet", [False, True])
def test_the_output_says_what_s_and_phi_are_once(tmp_path, monkeypatch, quiet):
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    args = [
        "--task",
        "saxpy",
        "--backend",
        "sim",
        "--model",
        "autotune",
        "--iterations",
        "2",
        "--out",
        str(tmp_path / "run"),
    ] + (["--quiet"] if quiet else [])
    out = CliRunner().invoke(search_cli.main, args)
    assert out.exit_code == 0, (out.output, out.exception)
    assert out.output.count(loop.S_AND_PHI) == 1
    lines = out.output.splitlines()
    where = lines.index(loop.S_AND_PHI)
    if quiet:  # last, after the final line and those on the held-out, transfer and why
        final = next(
            i for i, line in enumerate(lines) if line.startswith("saxpy / autotune on sim")
        )
        after = lines[final + 1 : where]
        assert where == len(lines) - 1 and after[0].startswith("held-out: secret draw N=")
        assert all(line.startswith(("held-out: ", "transfer: ", "why ")) for line in after)
    else:  # among the first lines of the progress output
        assert where <= 2 and lines[where - 1] == f"run directory {tmp_path / 'run'}"
    assert (
        "S = geometric mean" in loop.S_AND_PHI
        and "Phi = the fraction at the held-out" in loop.S_AND_PHI
    )


# -- bad inputs: one line, exit 2, no run directory ----------------------------------------


@pytest.fixture
def nothing_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a bad input reached evaluate()")

    monkeypatch.setattr(loop, "evaluate", refuse)


def usage_error(args, *needles) -> str:
    """`python -m mlxsci.search ARGS` must exit 2 with a message holding every needle."""
    return helpers.usage_error(search_cli.main, args, *needles)


def new_run(tmp_path, *more):
    return ["--task", "saxpy", "--backend", "sim", "--out", tmp_path / "run", *more]


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is a binary file"),
        (b"//! kernel saxpy\n\xff\xfe y_out[i] = 0;\n", "is not UTF-8 text"),
        (b"", "is empty"),
        (b"\n  \n", "is empty"),
        (b"// only a comment\n/* and another\n   one */\n", "has no kernels"),
        (b"//! kernel saxpy_typo\nuint i = 0;\n", "does not fit saxpy"),
    ],
)
def test_a_start_file_that_holds_no_kernels_is_refused(tmp_path, nothing_runs, content, needle):
    start = tmp_path / "start.metal"
    start.write_bytes(content)
    usage_error(new_run(tmp_path, "--start", start), "start file", needle)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=needle):  # the same from Python
        run("saxpy", "autotune", backend="sim", start=start, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def task_folder_without(tmp_path, *names) -> Path:
    import shutil

    folder = tmp_path / "mytask"
    shutil.copytree(CONV1D, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in names:
        (folder / name).unlink()
    return folder


def test_a_task_folder_without_the_seed_of_the_searched_dialect(tmp_path, nothing_runs):
    folder = task_folder_without(tmp_path, "seed.metal")  # seed.cu is still there
    usage_error(
        ["--task", folder, "--backend", "sim", "--out", tmp_path / "run"],
        "has no seed.metal",
        "--dialect cuda",
    )
    assert not (tmp_path / "run").exists()
    # Its own start file stands in for the seed: then the search would run.
    start = tmp_path / "mine.metal"
    start.write_text((CONV1D / "seed.metal").read_text())
    with pytest.raises(AssertionError, match="reached evaluate"):
        run(str(folder), "autotune", backend="sim", start=start, out=tmp_path / "run2")


def test_a_cu_start_file_is_searched_in_the_cuda_dialect(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    start = tmp_path / "mine.cu"
    start.write_text(load_task("saxpy").seed("cuda"))
    summary = run(
        "saxpy",
        proposer=Scripted([]),
        iterations=0,
        backend="sim",
        start=start,
        out=tmp_path / "run",
    )
    assert json.loads((tmp_path / "run" / "run.json").read_text())["dialect"] == "cuda"
    assert (tmp_path / "run" / "00_seed.cu").read_text() == start.read_text()
    assert summary["iterations"] == 0


def crafted_run_dir(tmp_path, monkeypatch) -> Path:
    """A finished autotune run of 2 iterations, made through the CLI, evaluated by
    the crafted evaluator (as the resumes that follow are)."""
    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    out = CliRunner().invoke(
        search_cli.main,
        [
            "--task",
            "saxpy",
            "--backend",
            "sim",
            "--model",
            "autotune",
            "--iterations",
            "2",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ],
    )
    assert out.exit_code == 0, (out.output, out.exception)
    history = [json.loads(ln) for ln in (tmp_path / "run" / "history.jsonl").open()]
    assert [r["role"] for r in history] == ["seed", "candidate", "candidate"]
    return tmp_path / "run"


@pytest.mark.parametrize(
    "damage,needles",
    [
        ("none", ["is not a run directory: it has no run.json"]),
        (b"\x00\x01garbage", ["run.json is damaged", "cannot resume"]),
        (b'{"task": "saxpy", ', ["run.json is damaged", "JSONDecodeError"]),
        (b"[1, 2]", ["must hold a JSON object"]),
        (b'{"task": "saxpy"}', ["lacks model (str), iterations (int)"]),
        (
            b'{"task": "no-such-task", "model": "autotune", "iterations": 1, "strategy": '
            b'"one-plus-one", "backend": "sim", "sizes": "smoke"}',
            ["unknown task 'no-such-task'"],
        ),
        (
            b'{"task": "saxpy", "model": "autotune", "iterations": 1, "strategy": "one-plus-one", '
            b'"backend": "gpu9", "sizes": "smoke"}',
            ["unknown backend 'gpu9'"],
        ),
    ],
)
def test_resume_of_a_folder_that_holds_no_run(tmp_path, nothing_runs, damage, needles):
    folder = tmp_path / "notarun"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    if damage != "none":
        (folder / "run.json").write_bytes(damage)
    usage_error(["--resume", folder], *needles)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["notes.txt"] + ([] if damage == "none" else ["run.json"])
    )  # nothing written


def test_resume_of_a_run_whose_backend_this_machine_lacks(tmp_path, monkeypatch):
    rd = crafted_run_dir(tmp_path, monkeypatch)
    sim = options.backend_class("sim")
    monkeypatch.setattr(sim, "available", classmethod(lambda cls: False))
    usage_error(["--resume", rd], "ran on the sim backend, which is not available")


def test_resume_of_a_run_whose_recorded_candidate_is_gone(tmp_path, monkeypatch):
    rd = crafted_run_dir(tmp_path, monkeypatch)
    (rd / "01_candidate.metal").unlink()
    usage_error(
        ["--resume", rd], "01_candidate.metal is missing", "history.jsonl records iteration 1"
    )
    (rd / "02_result.json").write_text("{not json")
    usage_error(["--resume", rd], "is missing")  # the first problem first
    (rd / "01_candidate.metal").write_text(variant("a"))
    usage_error(["--resume", rd], "02_result.json is damaged")


def test_resume_refuses_options_its_run_json_fixes_and_a_shorter_run(tmp_path, monkeypatch):
    rd = crafted_run_dir(tmp_path, monkeypatch)
    usage_error(
        ["--resume", rd, "--task", "heat2d", "--backend", "sim"], "leave out --task, --backend"
    )
    usage_error(["--resume", rd, "--iterations", "1"], "has done 2 iterations")
    assert json.loads((rd / "run.json").read_text())["iterations"] == 2


def test_out_where_no_run_directory_can_go(tmp_path, nothing_runs):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    usage_error(["--task", "saxpy", "--backend", "sim", "--out", a_file], "is a file")
    usage_error(
        ["--task", "saxpy", "--backend", "sim", "--out", a_file / "run"],
        "cannot make the run directory",
    )
    with pytest.raises(ValueError, match="is a file, not a folder"):  # from Python
        run("saxpy", "autotune", backend="sim", out=a_file)
    assert a_file.read_text() == "x"


def test_a_binary_price_file(tmp_path, nothing_runs):
    prices = tmp_path / "prices.json"
    prices.write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    out = usage_error(new_run(tmp_path, "--prices", prices), "is not UTF-8 text")
    assert "codec" not in out and not (tmp_path / "run").exists()


# -- a killed search leaves nothing running and nothing behind --------------------------------


def processes_marked(mark: str, running: bytes = b"") -> set[int]:
    """Ids of the live processes whose environment holds MLXSCI_TEST_MARK=mark
    (and whose command line holds `running`)."""
    needle = f"MLXSCI_TEST_MARK={mark}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (
                needle in (entry / "environ").read_bytes().split(b"\0")
                and running in (entry / "cmdline").read_bytes()
            ):
                found.add(int(entry.name))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found


def leftovers(tmp: Path) -> list[str]:
    """mlxsci's folders left in tmp/ holding anything. A sandboxed worker whose
    parent died empties its folder but cannot remove the folder itself (Landlock
    lets it write only beneath it): an empty one is all that may stay."""
    return sorted(
        p.name
        for p in tmp.iterdir()
        if p.name.startswith("mlxsci-") and (not p.is_dir() or any(p.iterdir()))
    )


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def default_sigint():
    # A background job may inherit SIGINT ignored; Ctrl-C reaches a search in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_marked(tmp_path, argv) -> tuple[subprocess.Popen, str, Path]:
    """A command whose processes carry a mark and whose temporary folders go to tmp/."""
    mark, tmp = uuid.uuid4().hex, tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), MLXSCI_TEST_MARK=mark)
    proc = subprocess.Popen(
        [str(a) for a in argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_sigint,
        cwd=tmp_path,
    )
    return proc, mark, tmp


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kill_when_a_job_runs(
    proc, mark, tmp, jobs_glob: str, how: int, after: Path | None = None
) -> tuple[str, str]:
    """Kill `proc` with `how` once its worker spins in the kernel that never ends
    (the first worker after the file `after` exists); then no process of it and
    no folder of it may remain."""
    try:
        # (The job folder is made just before the worker process starts.)
        running = wait_for(
            lambda: (
                proc.poll() is not None
                or (
                    (after is None or after.exists())
                    and list(tmp.glob(jobs_glob))
                    and processes_marked(mark, b"mlxsci.sandbox.boot")
                )
            ),
            300,
        )
        assert running and proc.poll() is None, proc.communicate()
        workers = processes_marked(mark, b"mlxsci.sandbox.boot")
        # Imports and set-up take under a second of CPU; past that the worker is in
        # the kernel (native code, where only the lifeline's thread can notice).
        assert wait_for(lambda: max(cpu_seconds(pid) for pid in workers) > 1.5, 120)
        proc.send_signal(how)
        out, err = proc.communicate(timeout=60)
        # Gone within a few seconds: the worker and all it started, and every folder.
        assert wait_for(lambda: not processes_marked(mark) and not leftovers(tmp), 10), (
            processes_marked(mark),
            leftovers(tmp),
        )
        return out, err
    finally:  # a failed test leaves no kernel spinning either
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in processes_marked(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes in /proc")
@pytest.mark.parametrize(
    "how", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"]
)
def test_a_killed_search_leaves_no_worker_and_no_job_folder(tmp_path, how):
    # Iteration 1 proposes (by replay) a kernel that never ends; the search is
    # killed while its worker runs it.
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    (recorded / "01_candidate.metal").write_text(HANG)
    out_dir = tmp_path / "run"
    proc, mark, tmp = start_marked(
        tmp_path,
        [
            sys.executable,
            "-m",
            "mlxsci.search",
            "--task",
            "saxpy",
            "--backend",
            "sim",
            "--model",
            f"replay:{recorded}",
            "--iterations",
            "1",
            "--timeout",
            "300",
            "--out",
            out_dir,
        ],
    )
    out, err = kill_when_a_job_runs(
        proc, mark, tmp, "mlxsci-worker-*/mlxsci-job-*", how, after=out_dir / "01_candidate.metal"
    )
    if how == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + how and "Traceback" not in err, err
        assert f"continue with python -m mlxsci.search --resume {out_dir}" in out
    # The seed's iteration is kept; iteration 1 was never recorded.
    assert [json.loads(ln)["iteration"] for ln in (out_dir / "history.jsonl").open()] == [0]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes in /proc")
def test_a_killed_comparison_leaves_no_worker_and_no_job_folder(tmp_path):
    """A comparison's worker (one CandidateWorker for the size) watches its parent too."""
    script = (
        "from mlxsci.evaluation.comparison import compare\n"
        f"compare('saxpy', {HANG!r}, {HANG!r}, backend='sim', size_set='smoke', "
        "timeout=300)\n"
    )
    proc, mark, tmp = start_marked(tmp_path, [sys.executable, "-c", script])
    kill_when_a_job_runs(proc, mark, tmp, "mlxsci-worker-*/mlxsci-job-*", signal.SIGKILL)
