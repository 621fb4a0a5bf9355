"""The evaluation verb: a candidate, a task, sizes -> a verdict and a score.

`evaluate()` is the library function (`mlxsci.evaluate` is this function);
`main()` is its command line, `mlxsci eval TASK` or `python -m mlxsci.eval
TASK` (mlxsci/eval.py only runs this `main`).

The trusted side. It parses and validates the candidate, holds the cached
NumPy reference, runs the sizes of a candidate in one worker subprocess
(mlxsci.worker; CandidateWorker), each size under its own timeout and checked
before the next is handed over, and checks what comes back:
- the verified outputs (poisoned with two sentinels) against the reference,
  NaN-safe (err <= tol);
- no output element left unwritten;
- the last timed run's output (when it differs bitwise) also within tolerance;
- on the simulator, the verified outputs the same as those of a run with the
  threads in reverse order (schedule_race): a difference is a race;
- every input's checksum before and after equal to the reference inputs';
- a fraction above 1.0 of the measured roofline is flagged `suspicious`.
Score S = geometric mean of the fractions of the in-distribution sizes (of the
other non-held-out sizes when none of those ran), 0 if any size fails; evaluation stops at the first failing size (as Metal-Sci).
Phi = the fraction at a held-out size, reported apart from S.

The command line exits 0 whenever the evaluation ran, whatever the verdict;
2 for usage errors, each a one-line message, found before anything runs: an
unknown task or a task folder that cannot run (mlxsci.task.check_task), a
--size the task rejects or this machine's memory cannot hold
(mlxsci.task.check_memory), a --source that is not a candidate text file
(binary, not UTF-8, empty).
"""
from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np

from mlxsci import dialects, sanitizer
from mlxsci.dialects import backend_options
from mlxsci.backends import backend_class, get_backend, resolve_backend_name
from mlxsci.candidate import CandidateError, parse, read_candidate_file, validate
from mlxsci.lifeline import GOODBYE, open_lifeline
from mlxsci.reference_store import Reference, get_reference, verdict
from mlxsci.task import Size, Task, check_memory, check_task, load_task, task_names
from mlxsci.timers import TIMER_NAMES, check_timer, combined_noise, run_noise

# mlxsci.roofline is a verb (`python -m mlxsci.roofline`), and `import mlxsci`
# imports this module: importing it here too would put it in sys.modules
# before runpy runs it as __main__ (a RuntimeWarning on every run), so the
# functions that need it import it.
if TYPE_CHECKING:
    from mlxsci.roofline import Roofline

# (warm-up runs, timed runs, seconds allowed per size) by backend kind. The
# simulator is deterministic and slow, so it needs fewer runs and more time.
DEFAULTS = {"sim": (1, 3, 900.0), "gpu": (3, 10, 300.0)}
# Warm-up goes on past the minimum until timings settle (GPU clocks ramp up
# under load), at most this many runs or seconds; the simulator has no clocks
# to ramp.
SETTLE = {"sim": {"max_runs": 0, "max_seconds": 0.0},
          "gpu": {"max_runs": 50, "max_seconds": 10.0}}
# The simulator's time is the fastest of its timed runs (mlxsci.timers.SimTimer),
# and the fastest of more runs is steadier: runs that take little host time go
# on past the minimum, up to this many runs or seconds of timed runs.
EXTRA_RUNS = {"sim": {"max_runs": 15, "max_seconds": 0.5}, "gpu": None}


@dataclass
class SizeResult:
    label: str
    params: dict
    held_out: bool = False
    correct: bool = False
    error: float | None = None
    tol: float | None = None
    seconds: float | None = None          # device time per run: median of the timed runs
                                          # (their minimum for the sim timer)
    seconds_min: float | None = None
    seconds_max: float | None = None
    timer: str | None = None              # cupti, sim or wall (mlxsci.timers)
    noise: float | None = None            # (max - min) / median of the timed runs
    kernels: dict = field(default_factory=dict)   # name -> {launches, seconds} per run
    timer_info: dict = field(default_factory=dict)  # wall: repeats, floor_seconds
    warmup: dict = field(default_factory=dict)      # runs, settled
    achieved: float | None = None
    unit: str = ""
    ceiling: float | None = None
    fraction: float | None = None
    metal_sci_fraction: float | None = None
    flags: list = field(default_factory=list)
    fail_reason: str | None = None
    timings: dict = field(default_factory=dict)


@dataclass
class Evaluation:
    task: str
    backend: str
    device: str
    dialect: str = "metal"
    timer: str | None = None
    compile_ok: bool = True
    correct: bool = False
    score: float | None = 0.0
    phi: float | None = None
    noise: float | None = None    # of S: combined_noise of the scored sizes' noise
    fail_reason: str | None = None
    sizes: list = field(default_factory=list)
    sanitized: str | None = None  # the compute-sanitizer tool the sizes ran under (not scored)

    def to_json(self) -> dict:
        data = {
            "task": self.task, "backend": self.backend, "device": self.device,
            "dialect": self.dialect, "timer": self.timer,
            "candidate": {"compile_ok": self.compile_ok, "correct": self.correct,
                          "score": self.score, "phi": self.phi, "noise": self.noise,
                          "fail_reason": self.fail_reason},
            "sizes": [json_size(s) for s in self.sizes],
        }
        if self.sanitized:   # only sanitized runs carry it; their score is None
            data["sanitized"] = self.sanitized
        return data


def json_size(s: SizeResult) -> dict:
    d = asdict(s)
    for key in ("error", "tol"):   # JSON has no inf/nan
        if d[key] is not None and not math.isfinite(d[key]):
            d[key] = str(d[key])
    return d


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-12)) for v in values) / len(values))


def new_job_dir(job: dict, parent: Path | None = None) -> Path:
    """A fresh folder holding job.json, for a worker to run (in `parent`, else
    the system's temporary folder)."""
    jobdir = Path(tempfile.mkdtemp(prefix="mlxsci-job-", dir=parent))
    (jobdir / "job.json").write_text(json.dumps(job))
    return jobdir


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a worker started in a session of its own, and all it started, and
    reap it. Only while it is not yet reaped: until then its id, which names
    the group, cannot go to another process."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_worker(job: dict, timeout: float, sanitize: tuple[str, str] | None = None
               ) -> tuple[dict | None, Path, str]:
    """Run one size in a fresh process. Returns (result or None, job dir, stderr tail).

    sanitize: (tool, compute-sanitizer executable) to run the worker under
    NVIDIA's compute-sanitizer (mlxsci.sanitizer); a kernel fault it reports
    is returned as the result's error, whatever the worker itself wrote.
    Interrupted (Ctrl-C, SIGTERM made an exception), it kills the worker and
    removes the job folder before the exception goes on."""
    jobdir = new_job_dir(job)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "mlxsci.worker", str(jobdir)]
    passed: tuple[int, ...] = ()
    keep = None    # the lifeline's write end
    if sanitize:
        # No lifeline through compute-sanitizer: which descriptors it hands on
        # to the worker is not ours to know.
        argv = sanitizer.sanitizer_command(sanitize[1], sanitize[0], jobdir / "sanitizer.log", argv)
    else:
        read_end, keep, more = open_lifeline([jobdir])
        env.update(more)
        passed = (read_end,)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                start_new_session=True, pass_fds=passed)
    except BaseException:
        shutil.rmtree(jobdir, ignore_errors=True)
        if keep is not None:
            os.close(keep)
        raise
    finally:
        for fd in passed:
            os.close(fd)
    try:
        return finish_worker(proc, jobdir, timeout, sanitize)
    except BaseException:
        kill_group(proc)
        shutil.rmtree(jobdir, ignore_errors=True)
        raise
    finally:
        if keep is not None:
            os.close(keep)   # the worker has ended: its lifeline may go


def finish_worker(proc: subprocess.Popen, jobdir: Path, timeout: float,
                  sanitize: tuple[str, str] | None) -> tuple[dict | None, Path, str]:
    """run_worker's answer, once its process has ended or been killed for its time."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # the worker and anything it started
        proc.communicate()
        found = sanitizer_finding(jobdir, sanitize)
        return found or None, jobdir, f"timeout: no verdict within {timeout:g} s"
    tail = err.decode(errors="replace")[-2000:]
    found = sanitizer_finding(jobdir, sanitize)
    if found:
        return found, jobdir, tail
    result_path = jobdir / "result.json"
    if not result_path.exists():
        return None, jobdir, death_reason(proc.returncode, tail + sanitizer_context(jobdir))
    return json.loads(result_path.read_text()), jobdir, tail


class CandidateWorker:
    """One worker process (mlxsci.worker --serve) that runs the sizes of one
    candidate in order, so imports and set-up are paid once per candidate.

    Isolation is as with a process per size where it matters: no two
    candidates share a process; each size has its own time limit, counted
    from the moment the parent hands it over (the first size's includes the
    process's start, as before); a crash or hang ends the process and is that
    size's verdict, and the parent hands over no later size. The parent hands
    a size over only after it has checked the size before, so no check runs
    beside a timed run and nothing runs past a failing size. run() answers as
    run_worker() does: (result or None, job dir, stderr tail).
    """

    # The worker's command line, before "--serve FD" (tests put a stand-in here).
    command = (sys.executable, "-m", "mlxsci.worker")

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.status = None          # the read end of the worker's "done" pipe
        self.lifeline: int | None = None   # the write end of its lifeline (mlxsci.lifeline)
        # The worker's folder: its stderr, and the job folder of each size, so
        # that one folder is all a worker whose parent died must remove.
        self.logdir = Path(tempfile.mkdtemp(prefix="mlxsci-worker-"))
        self.stderr_path = self.logdir / "stderr"
        self.ended: str | None = None   # why the process can take no more sizes

    def __enter__(self) -> "CandidateWorker":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None and self.proc is not None:
            self.kill()   # interrupted (Ctrl-C): the size it runs has no one to answer to
        self.close()

    def start(self) -> None:
        read_end, write_end = os.pipe()
        life_read, self.lifeline, life_env = open_lifeline([self.logdir])
        env = dict(os.environ, PYTHONUNBUFFERED="1", **life_env)
        try:
            with open(self.stderr_path, "wb") as stderr:
                self.proc = subprocess.Popen(
                    [*self.command, "--serve", str(write_end)],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr, env=env,
                    pass_fds=(write_end, life_read), start_new_session=True)
        except BaseException:
            os.close(self.lifeline)
            self.lifeline = None
            raise
        finally:
            os.close(write_end)
            os.close(life_read)
        self.status = os.fdopen(read_end, "rb", buffering=0)

    def run(self, job: dict, timeout: float) -> tuple[dict | None, Path, str]:
        """Run one size: (result or None, job dir, stderr tail). Interrupted
        (Ctrl-C, SIGTERM made an exception), it kills the worker and removes
        the size's job folder before the exception goes on."""
        jobdir = new_job_dir(job, self.logdir)
        try:
            return self.hand_over(jobdir, timeout)
        except BaseException:
            if self.proc is not None:
                self.kill()   # first: a worker still writing could refill the folder
            shutil.rmtree(jobdir, ignore_errors=True)
            raise

    def hand_over(self, jobdir: Path, timeout: float) -> tuple[dict | None, Path, str]:
        if self.ended:
            return None, jobdir, f"the worker ended at an earlier size: {self.ended}"
        if self.proc is None:
            self.start()
        stderr_from = self.stderr_path.stat().st_size
        deadline = time.monotonic() + timeout
        try:
            self.proc.stdin.write(f"{jobdir}\n".encode())
            self.proc.stdin.flush()
        except BrokenPipeError:   # the process died before reading it: answered below
            pass
        said = self.wait_for_line(deadline)
        tail = self.stderr_tail(stderr_from)
        if said == "done":
            return json.loads((jobdir / "result.json").read_text()), jobdir, tail
        if said is None:
            self.kill()
            self.ended = f"timeout: no verdict within {timeout:g} s"
            return None, jobdir, self.ended
        # The pipe closed without "done": the process ended during this size.
        returncode = self.reap(deadline)
        tail = self.stderr_tail(stderr_from)
        if (jobdir / "result.json").exists():
            # It died after writing this size's verdict, which stands (as a
            # process per size had it); a next size gets a fresh process.
            self.forget()
            return json.loads((jobdir / "result.json").read_text()), jobdir, tail
        self.ended = death_reason(returncode, tail)
        return None, jobdir, self.ended

    def wait_for_line(self, deadline: float) -> str | None:
        """The worker's next line ("done"); "" when its end of the pipe closed
        (it died); None when the deadline passed first."""
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.status], [], [], left)[0]:
                return None
            chunk = self.status.read(1)
            if not chunk:
                return ""
            line += chunk
        return line.decode(errors="replace").strip()

    def stderr_tail(self, start: int) -> str:
        """What the worker wrote to stderr since `start` (this size), its end."""
        with open(self.stderr_path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")[-2000:]

    def reap(self, deadline: float) -> int:
        """The exit status of a worker whose pipe closed, killing it (and all
        it started) if it lingers past the size's deadline."""
        try:
            return self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def forget(self) -> None:
        """Drop a process that has ended, so that the next size starts one."""
        self.close_pipes()
        self.proc, self.status = None, None

    def close_pipes(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:   # BrokenPipeError: it had ended already
            pass
        self.status.close()
        if self.lifeline is not None:   # after the worker ended: its lifeline may go
            os.close(self.lifeline)
            self.lifeline = None

    def kill(self) -> None:
        """End the worker and anything it started (its own process group)."""
        kill_group(self.proc)

    def close(self) -> None:
        """Tell the worker no size follows, wait a moment for it to exit, and
        kill what is left of it; then remove its folder (log and job folders)."""
        if self.proc is not None:
            try:
                # Goodbye first: the worker then takes the end of its stdin
                # for the end of its work, not for its parent's death.
                os.write(self.lifeline, GOODBYE)
            except OSError:   # it had ended already
                pass
            try:
                self.proc.stdin.close()   # end of stdin: the worker exits
            except OSError:
                pass
            try:
                self.proc.wait(timeout=CLOSE_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.kill()
            self.close_pipes()
        shutil.rmtree(self.logdir, ignore_errors=True)


# Seconds a worker may take to exit once told that no size follows.
CLOSE_GRACE_SECONDS = 10.0


class ProcessPerSize:
    """A fresh worker process for every size (run_worker), for sizes under
    compute-sanitizer: the sanitizer writes one log per process and its
    records say nothing of which size was running, so one process holds one
    size and every fault it reports is that size's. The imports a process per
    size repeats (~0.4 s) are small beside a sanitized run."""

    def __init__(self, sanitize: tuple[str, str]):
        self.sanitize = sanitize

    def __enter__(self) -> "ProcessPerSize":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def run(self, job: dict, timeout: float) -> tuple[dict | None, Path, str]:
        return run_worker(job, timeout, self.sanitize)


def sanitizer_finding(jobdir: Path, sanitize: tuple[str, str] | None) -> dict | None:
    """The worker's result when compute-sanitizer reported a kernel fault: an
    error of the tool's kind (memcheck, racecheck) naming what, where and who."""
    log = jobdir / "sanitizer.log"
    if not sanitize or not log.exists():
        return None
    text = log.read_text(errors="replace")
    faults = sanitizer.kernel_faults(sanitizer.parse_sanitizer_log(text, sanitize[0]))
    if not faults:
        return None
    return {"error": {"kind": sanitize[0], "message": sanitizer.verdict(faults, text),
                      "details": {"log": text[-4000:]}}}


def sanitizer_context(jobdir: Path) -> str:
    """What compute-sanitizer said about itself, for a worker that died under it."""
    log = jobdir / "sanitizer.log"
    if not log.exists():
        return ""
    said = sanitizer.tool_problems(log.read_text(errors="replace"))
    return ("\ncompute-sanitizer: " + "; ".join(said)) if said else ""


def death_reason(returncode: int, stderr_tail: str) -> str:
    """Why a worker ended without a result, never a bare "worker died": the
    simulator's own last words when it left any (a fault it could not turn
    into a verdict), else the signal or exit code by name with the end of
    the worker's stderr."""
    last_words = [ln for ln in stderr_tail.splitlines() if ln.startswith("mlxsci-sim:")]
    if last_words:
        return last_words[-1].strip()
    tail = stderr_tail.strip()[-600:]
    if returncode >= 0:
        return f"the worker exited with exit code {returncode} without a result: {tail or '(no output)'}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    if name == "SIGKILL":
        why = "killed from outside, most often by the system running out of memory"
    else:
        why = "a fault outside any kernel (in the harness or MLX)"
    return f"the worker process died of {name}, {why}: {tail or '(no output)'}"


def _load_npz(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


RACE_VERDICT = "result depends on thread scheduling: a race"


def _scalar_text(x) -> str:
    """An output element as a message shows it: 3, -1, 0.123456791, nan, True."""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (np.integer, int)):
        return str(int(x))
    return format(float(x), ".9g")


def _race_message(name: str, a: np.ndarray, b: np.ndarray, i: int) -> str:
    return (f"{RACE_VERDICT} (output '{name}' differs between schedules at element {i}: "
            f"{_scalar_text(a.flat[i])} vs {_scalar_text(b.flat[i])})")


def schedule_race(first: dict, second: dict, ref: Reference, judge) -> str | None:
    """The race verdict when outputs of one run and of the same run with the
    threads in another order (the simulator's schedules) differ in a way
    that matters, else None. Only outputs the reference checks count.

    Integer and bool outputs must be bitwise equal: integer sums, minima and
    maxima (atomic or not) do not depend on the order of their terms. Float
    outputs may differ in the last bits when terms add in another order (lj:
    atomics fill its cell lists in another order, so forces sum in another
    order), so they count as different where an element differs by more than
    the task's tolerance (NaN on one side only counts, NaN on both does not),
    or where the task's own verdict, `judge(outputs) -> (error, passed)`
    against the reference, passes one run and fails the other (a task whose
    tolerance is not an absolute error per element, such as hmc's statistics).
    """
    close_calls = []    # (largest difference, name, a, b, element): floats within the tolerance
    for name in ref.outputs:
        if name not in first or name not in second:
            continue
        a, b = np.asarray(first[name]), np.asarray(second[name])
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{RACE_VERDICT} (output '{name}' has shape {a.shape} {a.dtype} in one " \
                   f"schedule and {b.shape} {b.dtype} in the other)"
        a, b = a.reshape(-1), b.reshape(-1)
        if not np.issubdtype(a.dtype, np.inexact):
            differ = np.flatnonzero(a != b)
            if differ.size:
                return _race_message(name, a, b, int(differ[0]))
            continue
        both_nan = np.isnan(a) & np.isnan(b)
        wide = np.complex128 if np.iscomplexobj(a) else np.float64
        diff = np.abs(a.astype(wide) - b.astype(wide))
        beyond = np.flatnonzero(~both_nan & ~(diff <= ref.tolerance))   # NaN-safe
        if beyond.size:
            return _race_message(name, a, b, int(beyond[0]))
        differ = np.flatnonzero(~both_nan & (a != b))
        if differ.size:
            i = int(differ[np.argmax(diff[differ])])
            close_calls.append((float(diff[i]), name, a, b, i))
    if close_calls and bool(judge(first)[1]) != bool(judge(second)[1]):
        _, name, a, b, i = max(close_calls, key=lambda c: c[0])
        return _race_message(name, a, b, i)
    return None


def check_size(task: Task, size: Size, result: dict, jobdir: Path, roof: Roofline,
               backend_name: str, device_name: str,
               ref: Reference | None = None) -> SizeResult:
    """Every integrity check of one size, against the trusted reference (loaded
    from the cache unless the caller already holds it)."""
    out = SizeResult(size.label, dict(size.params), held_out=task.is_held_out(size))
    out.timings = result.get("timings", {})
    ref = ref or get_reference(task, size.params)
    out.tol = ref.tolerance
    verified = _load_npz(jobdir / "verified.npz")
    out.error, passed, kind = verdict(task.name, verified, ref, size.params)
    problems = []
    if result.get("input_checksums_before") != ref.input_checksums:
        problems.append("inputs given to the kernel differ from the reference inputs")
    mutated = sorted(k for k, v in result.get("input_checksums_after", {}).items()
                     if ref.input_checksums.get(k) != v)
    if mutated:
        out.flags.append("input_mutated")
        problems.append(f"input mutated: {', '.join(mutated)}")
    # Results the reference checks; a task's extra results only carry state from
    # run to run for the wall timer's chains (Task.chain), as before this held.
    unwritten = {k: n for k, n in result.get("unwritten", {}).items()
                 if n and k in ref.outputs}
    if unwritten:
        out.flags.append("unwritten")
        problems.append("unwritten output: " + ", ".join(
            f"{n} element(s) of {k} never written" for k, n in unwritten.items()))
    if not result.get("last_equals_verified", False):
        out.flags.append("nondeterministic")
        last_err, last_ok, last_kind = verdict(task.name, _load_npz(jobdir / "last.npz"), ref,
                                               size.params)
        if not last_ok:
            problems.append(f"last timed run's output is wrong ({last_kind}={last_err:.4g})")
    if not passed:
        problems.insert(0, f"{kind}={out.error:.4g} (tol={out.tol:.4g})")
    if result.get("reversed_equals_verified") is False:   # the simulator's second schedule
        race = schedule_race(verified, _load_npz(jobdir / "reversed.npz"), ref,
                             lambda outputs: verdict(task.name, outputs, ref, size.params)[:2])
        if race:
            out.flags.append("race")
            problems.insert(0, race)   # the cause of any wrong result above
    out.correct = not problems
    if problems:
        out.fail_reason = f"correctness failed at size {size.label}: " + "; ".join(problems)

    seconds = sorted(result["seconds"])
    info = dict(result.get("timer") or {})
    # The timer says which statistic of its runs is the size's time (mlxsci.timers).
    pick_min = info.get("statistic") == "min"
    out.seconds = seconds[0] if pick_min else float(np.median(seconds))
    out.seconds_min, out.seconds_max = seconds[0], seconds[-1]
    out.timer = info.pop("timer", None)
    out.timer_info = info
    out.noise = result.get("noise", run_noise(seconds, info.get("statistic", "median")))
    out.kernels = result.get("kernels", {})
    out.warmup = result.get("warmup", {})
    p = size.params
    nbytes, flops, ws = task.bytes_moved(p), task.flops(p), task.working_set(p)
    roof_seconds = roof.seconds(nbytes, flops, ws)
    out.fraction = roof_seconds / out.seconds
    # Achieved in the task's scored unit; the ceiling is what that unit would
    # reach at the roofline time, so achieved / ceiling == fraction even where
    # the other term of the roofline (bytes for a FLOP task) is the binding one.
    amount, out.unit = (nbytes, "GB/s") if task.bound == "bandwidth" else (flops, "GFLOPS")
    out.achieved = amount / out.seconds / 1e9
    out.ceiling = amount / roof_seconds / 1e9
    if out.fraction > 1.0:
        out.flags.append("suspicious")
    if backend_name == "metal":
        from mlxsci.roofline import metal_sci_ceiling
        gflops, gbps = metal_sci_ceiling(device_name)
        out.metal_sci_fraction = out.achieved / (gbps if task.bound == "bandwidth" else gflops)
    return out


def failed_size(size: Size, task: Task, reason: str, flag: str) -> SizeResult:
    return SizeResult(size.label, dict(size.params), held_out=task.is_held_out(size),
                      correct=False, flags=[flag], fail_reason=reason)


def misfit(candidate, task: Task, where: str) -> str | None:
    """Why a parsed candidate does not fit `task`, as one line, or None when it
    fits: mlxsci.candidate.validate against the task's kernels and the size
    scalars of its defaults and of every size, each failure with a line number
    written `{where}{line}: ` (e.g. where="seed.metal:" or "line "). The one
    rule the evaluation, the API (mlxsci.api.kernel_function) and the search's
    --start use."""
    size_names = set(task.defaults) | {k for s in task.size_set("all") for k in s.params}
    failures = validate(candidate, task.kernel_names, size_names)
    if not failures:
        return None
    return "; ".join(f"{where}{f.line}: {f.message}" if f.line else f.message for f in failures)


def _prepare(be, timer_name: str, announce, detail) -> Roofline:
    """What evaluations on this machine build or measure once (the simulator's
    compiler, the roofline); `announce` hears a line as each piece of that work
    starts (nothing on warm caches), `detail` the roofline probes' results."""
    if be.name == "sim":
        from mlxsci.backends.sim.build import prepare_toolchain
        prepare_toolchain(announce)
    from mlxsci.roofline import load_or_measure
    return load_or_measure(be, progress=detail, timer=timer_name, announce=announce)


def evaluate(task_name: str, source: str | None = None, *, backend: str = "auto",
             size_set: str = "in-dist", sizes: list[Size] | None = None,
             filename: str | None = None, n_warmup: int | None = None,
             n_measure: int | None = None, timeout: float | None = None,
             param_overrides: dict | None = None, dialect: str | None = None,
             timer: str | None = None, sanitize: str | None = None,
             progress=None, announce=None) -> Evaluation:
    """Evaluate a candidate (the task's seed when `source` is None).

    progress: a callable taking each progress line. announce: one taking only
    the lines that say once-per-machine work starts (building the simulator's
    compiler, measuring the roofline: minutes on a first run), default
    `progress`; a search passes it alone.

    dialect: "metal" or "cuda"; default: the file's extension when given, else
    the backend's own (the simulator's default is metal). timer: "cupti",
    "sim" or "wall" (mlxsci.timers); default: the backend's own.
    sanitize: "memcheck" or "racecheck" (cuda backend only): each size's worker
    runs under NVIDIA's compute-sanitizer, and a fault it reports (out-of-bounds
    or misaligned access, shared-memory hazard) fails the size. Timing under
    the sanitizer is meaningless, so the result records `sanitized` and has no
    score (None) and no phi; correctness is checked as usual."""
    task = load_task(task_name)
    backend_name = resolve_backend_name(backend)
    options = backend_options(backend_name, dialect or dialects.name_of_file(filename))
    timer_name = check_timer(timer, backend_name)
    sanitizer_exe = sanitizer.check_sanitize(sanitize, backend_name)
    be = get_backend(backend_name, **options)
    if source is None:
        source = task.seed(be.dialect)
        filename = filename or str(task.seed_path(be.dialect))
    filename = filename or "<candidate>"
    device = be.device_info()
    ev = Evaluation(task.name, backend_name, device["name"], be.dialect, timer_name)
    say = progress or (lambda msg: None)

    try:
        cand = parse(source, dialect=be.dialect, filename=filename)
    except CandidateError as exc:
        ev.compile_ok, ev.fail_reason = False, f"format error: {exc}"
        return ev
    why = misfit(cand, task, f"{filename}:")
    if why:
        ev.compile_ok, ev.fail_reason = False, f"format error: {why}"
        return ev

    kind = "sim" if backend_name == "sim" else "gpu"
    warm, measure, per_size = DEFAULTS[kind]
    sizes = list(sizes) if sizes is not None else list(task.size_set(size_set))
    say(f"{task.name}: roofline for {device['name']}")
    roof = _prepare(be, timer_name, announce or say, say)

    # One process runs all sizes of the candidate (CandidateWorker), one size
    # at a time, each checked before the next is handed over.
    runner = ProcessPerSize((sanitize, sanitizer_exe)) if sanitize else CandidateWorker()
    with runner as worker:
        for size in sizes:
            say(f"{task.name} {size.label}: reference")
            # Before the worker takes the size: its cost is not the candidate's.
            ref = get_reference(task, size.params)
            job = {"task": task.ref, "source": source, "filename": filename,
                   "backend": backend_name, "backend_options": options, "params": size.params,
                   "n_warmup": n_warmup if n_warmup is not None else warm,
                   "n_measure": n_measure if n_measure is not None else measure,
                   "param_overrides": param_overrides, "timer": timer_name,
                   "settle": SETTLE[kind],
                   "extra_runs": EXTRA_RUNS[kind] if n_measure is None else None}
            size_timeout = timeout or per_size
            if sanitize:
                job = sanitized_job(job, n_warmup, n_measure)
                size_timeout = timeout or per_size * SANITIZER_SLOWDOWN
            say(f"{task.name} {size.label}: running on {backend_name}"
                + (f" under compute-sanitizer {sanitize}" if sanitize else ""))
            result, jobdir, tail = worker.run(job, size_timeout)
            try:
                if result is None:
                    flag = "timeout" if tail.startswith("timeout") else "crash"
                    res = failed_size(size, task, f"runtime error at size {size.label}: {tail}",
                                      flag)
                elif "error" in result:
                    err = result["error"]
                    if err["kind"] in ("compile", "format"):
                        ev.compile_ok = False
                        line = f"{filename}:{err['line']}: " if err.get("line") else ""
                        ev.fail_reason = f"{err['kind']} error: {line}{err['message']}"
                        ev.correct, ev.score = False, 0.0
                        return ev
                    res = failed_size(size, task, f"runtime error at size {size.label}: "
                                      f"{err['kind']}: {err['message']}", err["kind"])
                else:
                    res = check_size(task, size, result, jobdir, roof, backend_name, device["name"],
                                     ref)
            finally:
                shutil.rmtree(jobdir, ignore_errors=True)
            ev.sizes.append(res)
            if not res.correct:
                ev.fail_reason = res.fail_reason
                break

    ev.correct = ev.fail_reason is None and bool(ev.sizes)
    # S is Metal-Sci's score over the in-distribution sizes whenever they ran;
    # otherwise (smoke or user-given sizes) over whatever non-held-out sizes ran.
    in_dist = [s for s, size in zip(ev.sizes, sizes) if task.is_in_dist(size)]
    scored = in_dist or [s for s in ev.sizes if not s.held_out]
    if not ev.correct:
        ev.score = 0.0
    else:   # None when only held-out sizes ran: S is defined over the others
        ev.score = geometric_mean([s.fraction for s in scored]) if scored else None
    ev.noise = combined_noise([s.noise for s in scored]) if scored and ev.correct else None
    held = [s.fraction for s in ev.sizes if s.held_out and s.correct]
    ev.phi = held[0] if held and ev.correct else None
    if sanitize:
        mark_sanitized(ev, sanitize)
    return ev


# A sanitized worker runs slower (every memory access is checked), so the
# default time allowed per size grows by this factor.
SANITIZER_SLOWDOWN = 4


def sanitized_job(job: dict, n_warmup: int | None, n_measure: int | None) -> dict:
    """A size's job for a run under compute-sanitizer: its timings mean
    nothing, so as few runs as the protocol allows (unless asked for more),
    timed by the wall clock, which needs no profiling interface beside the
    sanitizer's own (CUPTI under compute-sanitizer is untested here)."""
    return dict(job, timer="wall",
                n_warmup=n_warmup if n_warmup is not None else 1,
                n_measure=n_measure if n_measure is not None else 1,
                settle={"max_runs": 0, "max_seconds": 0.0}, extra_runs=None)


def mark_sanitized(ev: Evaluation, tool: str) -> None:
    """Record that the sizes ran under compute-sanitizer `tool`: their
    fractions are flagged, and a correct candidate gets no score or phi, since
    times measured under the sanitizer compare with nothing."""
    ev.sanitized = tool
    for s in ev.sizes:
        s.flags.append("sanitized")
    if ev.correct:
        ev.score, ev.phi, ev.noise = None, None, None


def compare(task_name: str, incumbent: str, candidate: str, *, backend: str = "auto",
            size_set: str = "in-dist", sizes: list[Size] | None = None,
            filenames: tuple[str, str] = ("incumbent", "candidate"),
            dialect: str | None = None, timer: str | None = None, n_warmup: int | None = None,
            n_measure: int | None = None, timeout: float | None = None) -> dict:
    """Time two correct candidates against each other, interleaved in one worker
    per size (mlxsci.worker.run_compare), so both see the same machine state.

    Returns {"timer", "sizes": [{"label", "incumbent", "candidate" (seconds, by
    the timer's statistic as in an evaluation), "speedup" (incumbent / candidate), "noise"}], "speedup" (geometric
    mean over sizes), "noise" (combined_noise of the sizes' noise, each the
    larger of the two candidates' spreads)}, or {"error": ...} when a worker
    failed. Noise-aware acceptance (search --accept noise-aware) takes a
    candidate only when the speedup lies beyond the noise (mlxsci.verdicts).
    """
    task = load_task(task_name)
    backend_name = resolve_backend_name(backend)
    options = backend_options(backend_name, dialect)
    timer_name = check_timer(timer, backend_name)
    kind = "sim" if backend_name == "sim" else "gpu"
    warm, measure, per_size = DEFAULTS[kind]
    sizes = list(sizes) if sizes is not None else list(task.size_set(size_set))
    out = {"timer": timer_name, "sizes": []}
    for size in sizes:
        if task.is_held_out(size):
            raise ValueError("a comparison never times held-out sizes")
        job = {"compare": True, "task": task.ref, "sources": [incumbent, candidate],
               "filenames": list(filenames), "backend": backend_name,
               "backend_options": options, "params": size.params, "timer": timer_name,
               "n_warmup": n_warmup if n_warmup is not None else warm,
               # interleaved pairs: at least 5 of each, to see the spread
               "n_measure": max(5, n_measure if n_measure is not None else measure)}
        result, jobdir, tail = run_worker(job, timeout or per_size)
        shutil.rmtree(jobdir, ignore_errors=True)
        if result is None or "error" in result:
            why = tail if result is None else f"{result['error']['kind']}: {result['error']['message']}"
            return {"timer": timer_name, "error": f"comparison at size {size.label} failed: {why}"}
        a, b = result["seconds"]
        statistic = result.get("timer", {}).get("statistic", "median")
        pick = min if statistic == "min" else np.median
        med_a, med_b = float(pick(a)), float(pick(b))
        out["sizes"].append({"label": size.label, "incumbent": med_a, "candidate": med_b,
                             "speedup": med_a / med_b if med_b > 0 else float("inf"),
                             "noise": max(run_noise(a, statistic), run_noise(b, statistic))})
    out["speedup"] = geometric_mean([s["speedup"] for s in out["sizes"]])
    out["noise"] = combined_noise([s["noise"] for s in out["sizes"]])
    return out


# --- the command line: `mlxsci eval` / `python -m mlxsci.eval` ---------------

def parse_assignments(text: str | None, what: str) -> dict:
    """'NX=67,NY=45' -> {'NX': '67', 'NY': '45'} (values converted by the caller)."""
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        out[key.strip()] = value.strip()
    return out


# What the two numbers of a result mean, in one line under them.
S_AND_PHI = ("S = geometric mean of the scored sizes' fractions of the roofline (0 if any "
             "fails); Phi = the fraction at the held-out size, never part of S")


def fmt(value, spec=".3g"):
    return "-" if value is None else format(value, spec)


def format_evaluation(ev: Evaluation) -> str:
    # Imported here, not at the top: `import mlxsci` imports this module, and
    # only the command line prints tables (tabulate takes ~30 ms to import).
    from tabulate import tabulate

    rows = []
    for s in ev.sizes:
        verdict = "ok" if s.correct else "FAIL"
        rows.append([s.label + (" (held-out)" if s.held_out else ""), verdict,
                     fmt(s.error, ".2e"), fmt(s.tol, ".2e"),
                     fmt(None if s.seconds is None else s.seconds * 1e3, ".4g"),
                     fmt(None if s.noise is None else 100 * s.noise, ".1f"),
                     f"{fmt(s.achieved, '.2f')} {s.unit}".strip(), fmt(s.ceiling, ".2f"),
                     fmt(s.fraction, ".3f"), ",".join(s.flags)])
    lines = [f"task {ev.task} on {ev.backend} ({ev.device}), {ev.dialect} dialect, "
             f"timer {ev.timer}"]
    if rows:
        lines.append(tabulate(rows, headers=["size", "verdict", "error", "tol", "ms (median)",
                                             "noise %", "achieved", "ceiling", "fraction",
                                             "flags"],
                              disable_numparse=True))
    for s in ev.sizes:
        if s.timer == "wall" and s.timer_info.get("repeats"):
            floor = s.timer_info.get("floor_seconds")
            lines.append(f"{s.label}: wall timer, {s.timer_info['repeats']} chained runs per eval"
                         + (f", empty-eval floor {floor * 1e3:.4g} ms" if floor is not None else "")
                         + " (an upper bound on device time)")
            break
    if ev.sizes and any(s.metal_sci_fraction is not None for s in ev.sizes):
        lines.append("Metal-Sci chip-table fractions: " + ", ".join(
            f"{s.label}={fmt(s.metal_sci_fraction, '.3f')}" for s in ev.sizes))
    if ev.sanitized:
        lines.append(f"ran under compute-sanitizer {ev.sanitized}: timings are not comparable, "
                     "no score")
    lines.append(f"score (gmean of fractions): {fmt(ev.score, '.4f')}"
                 + (f" (noise {100 * ev.noise:.1f}%)" if ev.noise is not None else "")
                 + (f"   held-out phi: {ev.phi:.4f}" if ev.phi is not None else ""))
    lines.append(S_AND_PHI)
    if ev.fail_reason:
        lines.append(f"fail_reason: {ev.fail_reason}")
    return "\n".join(lines)


class TaskArgument(click.ParamType):
    """A built-in task name or the path of a task folder of your own (a
    directory holding task.py, reference.py and seeds, as examples/conv1d)."""
    name = "task"

    def get_metavar(self, param, ctx=None):
        return "{" + "|".join(task_names()) + "|PATH}"

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem
        return [CompletionItem(n) for n in task_names() if n.startswith(incomplete)]

    def convert(self, value, param, ctx):
        if value in task_names():
            return value
        if (Path(value) / "task.py").is_file() or (Path(value).name == "task.py"
                                                  and Path(value).is_file()):
            try:   # the whole folder, before anything runs (the seed of a dialect: later)
                check_task(load_task(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
            return value
        if Path(value).is_dir():
            self.fail(f"{value!r} is not a task folder: it has no task.py (a task folder "
                      "holds task.py, reference.py and seed.metal; see examples/conv1d)",
                      param, ctx)
        self.fail(f"{value!r} is neither a built-in task ({', '.join(task_names())}) nor a "
                  "task folder (a directory holding task.py, reference.py and seed.metal)",
                  param, ctx)


def require_seed(task, dialect: str) -> None:
    """A usage error unless `task` can run from its seed in `dialect` (the
    dialect a command runs when no candidate file is given): check_task."""
    try:
        check_task(task, dialect)
    except ValueError as exc:
        raise click.UsageError(str(exc))


def check_overrides(task, text, overrides, dialect):
    """--param names and values must fit the candidate's //! param lines."""
    try:
        parse(text if text is not None else task.seed(dialect),
              dialect=dialect).param_values(overrides)
    except CandidateError:
        return  # the evaluation reports format errors itself
    except (KeyError, ValueError) as exc:
        raise click.BadParameter(str(exc).strip("'\""), param_hint="--param")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("task", type=TaskArgument())
@click.option("--source", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Candidate file (.metal or .cu). Default: the task's seed.")
@click.option("--backend", default="auto", show_default=True,
              type=click.Choice(["auto", "metal", "cuda", "sim"]))
@click.option("--dialect", type=click.Choice(["metal", "cuda"]), default=None,
              help="Kernel dialect. Default: the --source file's extension (.cu / .metal), "
                   "else the backend's own (metal on the simulator).")
@click.option("--sizes", "size_set", default=None,
              type=click.Choice(["smoke", "in-dist", "held-out", "all"]),
              help="Size set. Default: in-dist on a GPU, smoke on the simulator.")
@click.option("--size", "custom", metavar="KEY=VALUE,...",
              help="Evaluate one size you give, e.g. NX=67,NY=45,n_steps=4.")
@click.option("--param", "params", metavar="NAME=INT,...",
              help="Override the candidate's //! param values.")
@click.option("--warmup", type=click.IntRange(min=1), help="Warm-up runs per size.")
@click.option("--measure", type=click.IntRange(min=1), help="Timed runs per size.")
@click.option("--timeout", type=click.FloatRange(min=1), help="Seconds allowed per size.")
@click.option("--timer", type=click.Choice(TIMER_NAMES), default=None,
              help="How a run is timed: cupti (CUDA kernel activity; the default on CUDA), "
                   "sim (the simulator's own clock; its default), wall (chained runs per "
                   "eval, an upper bound; the default on Metal).")
@click.option("--sanitize", type=click.Choice(sanitizer.TOOLS), default=None,
              help="CUDA only: run each size's worker under NVIDIA's compute-sanitizer "
                   "(memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory "
                   "races); a reported error fails the size. Timings under it mean nothing, "
                   "so the result has no score.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def main(task, source, backend, dialect, size_set, custom, params, warmup, measure, timeout,
         timer, sanitize, as_json):
    """Evaluate a kernel candidate for TASK and print per-size verdicts and the score.

    TASK is a built-in task name or the path of a task folder of your own
    (task.py, reference.py, seed.metal; see examples/conv1d)."""
    t = load_task(task)   # TaskArgument checked the task folder
    try:   # before availability: say what --sanitize needs even where CUDA is missing
        sanitizer.check_sanitize(sanitize, resolve_backend_name(backend))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--sanitize")
    if backend != "auto" and not backend_class(backend).available():
        raise click.BadParameter(f"{backend} is not available on this machine "
                                 "(use --backend sim or auto)", param_hint="--backend")
    sizes = None
    if custom:
        try:   # a size the machine cannot hold is refused before anything is allocated
            sizes = [t.custom_size(parse_assignments(custom, "--size"))]
            check_memory(t, sizes[0])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--size")
    overrides = None
    if params:
        try:
            overrides = {k: int(v) for k, v in parse_assignments(params, "--param").items()}
        except ValueError:
            raise click.BadParameter("param values must be integers", param_hint="--param")
    try:
        text = read_candidate_file(source) if source else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--source")
    backend_name = resolve_backend_name(backend)
    dialect = dialect or dialects.name_of_file(source)
    try:
        backend_options(backend_name, dialect)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dialect")
    try:
        check_timer(timer, backend_name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timer")
    if text is None:   # the seed runs: the one of the dialect the backend will run
        require_seed(t, dialect or dialects.for_backend(backend_name).name)
    if overrides:
        check_overrides(t, text, overrides, dialect or dialects.for_backend(backend_name).name)
    if size_set is None:
        size_set = "smoke" if backend_name == "sim" else "in-dist"
    progress = None if as_json else (lambda msg: click.echo(msg, err=True))
    ev = evaluate(task, text, backend=backend, size_set=size_set, sizes=sizes,
                  filename=str(source) if source else None, n_warmup=warmup, n_measure=measure,
                  timeout=timeout, param_overrides=overrides, dialect=dialect,
                  timer=timer, sanitize=sanitize, progress=progress)
    click.echo(json.dumps(ev.to_json(), indent=2) if as_json else format_evaluation(ev))
