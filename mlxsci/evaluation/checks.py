"""The trusted side's checks: a candidate against its task, a size's result
against the reference.

`misfit` says why a parsed candidate does not fit its task (before any
worker starts). `check_size` judges what a worker brought back for one size
(mlxsci/evaluation/runner.py brings it; mlxsci/worker/serve.py made it) against the cached
NumPy reference (mlxsci/evaluation/references.py), trusting only its raw
measurements:
- the verified outputs (poisoned with two sentinels) against the reference,
  NaN-safe (err <= tol);
- no output element left unwritten;
- the last timed run's output (when it differs bitwise) also within tolerance,
  and the last timed run on each other input set against that set's own
  reference (`_rotation_problems`, flag `timed_output_wrong`);
- on the simulator, the verified outputs the same as those of the same run
  with the threads in other orders (reversed, and shuffled by seeds:
  mlxsci.worker.serve.schedule_plan), each judged by schedule_race: a difference
  that matters is a race; there the unwritten counts and these comparisons
  are worked out here from the outputs sent back (`own_findings`), and every
  warm-up and timed run must have given its set's checked bits
  (`_unchecked_runs`, flag `unchecked_run_differs`);
- every input's checksum before and after equal to the reference inputs';
- on the simulator, the verified run's reads the language leaves undefined
  (result.undefined_reads, mlxsci.protocol.undefined_reads): named in the
  reason of a failed size, flagged `undefined_read` on a correct one; and
  where the outputs changed with threadgroup memory zero-filled instead of
  poisoned (result.threadgroup_outputs_change), memory read before it was
  written, named likewise (flag `threadgroup_read_before_write`);
- the fraction of the roofline recomputed here from the raw seconds: above
  `plausible_limit` (1.5 x (1 + noise), the noise counted 5-25 %) the size
  is `implausible` (a physics floor; the evaluation then scores 0), above
  1.0 within it flagged `suspicious`.
Apart from the verb (mlxsci/evaluation/evaluator.py) so that the rules of a verdict
read in one place, and can be tested without a worker (tests/evaluation/test_checks.py).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from mlxsci.backends import has_chip_table
from mlxsci.evaluation.references import Reference, get_reference, verdict
from mlxsci.evaluation.results import SizeResult
from mlxsci.evaluation.verdicts import NOISE_FLOOR
from mlxsci.kernel.validate import validate
from mlxsci.protocol import undefined_reads
from mlxsci.protocol.exchange import MAX_SCHEDULES, schedule_file
from mlxsci.protocol.jobs import SizeJob
from mlxsci.protocol.outputs import outputs_digest, same_bits, unwritten_count
from mlxsci.protocol.results import OrderRun, SizeRun
from mlxsci.roofline.ceilings import Roofline, metal_sci_ceiling
from mlxsci.task import Size, Task
from mlxsci.timing.measurement import Measurement


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


def _race_message(
    name: str, a: np.ndarray, b: np.ndarray, i: int, orders: tuple[str, str] | None
) -> str:
    x, y = _scalar_text(a.flat[i]), _scalar_text(b.flat[i])
    if orders:
        x, y = f"{x} ({orders[0]})", f"{y} ({orders[1]})"
    return f"{RACE_VERDICT} (output '{name}' differs between schedules at element {i}: {x} vs {y})"


def schedule_race(
    first: dict, second: dict, ref: Reference, judge, orders: tuple[str, str] | None = None
) -> str | None:
    """The race verdict when outputs of one run and of the same run with the
    threads in another order (the simulator's schedules) differ in a way
    that matters, else None; `orders` names the two orders in the message
    ("forward", "shuffled (seed 7)"). Only outputs the reference checks count.

    Integer and bool outputs must be bitwise equal: integer sums, minima and
    maxima (atomic or not) do not depend on the order of their terms. Float
    outputs may differ in the last bits when terms add in another order (lj:
    atomics fill its cell lists in another order, so forces sum in another
    order), so they count as different where an element differs by more than
    the task's tolerance (NaN on one side only counts, NaN on both does not),
    or where the task's own verdict, `judge(outputs) -> (error, passed[,
    kind])` against the reference, passes one run and fails the other (a task whose
    tolerance is not an absolute error per element, such as hmc's statistics).
    """
    close_calls = []  # (largest difference, name, a, b, element): floats within the tolerance
    for name in ref.outputs:
        if name not in first or name not in second:
            continue
        a, b = np.asarray(first[name]), np.asarray(second[name])
        if a.shape != b.shape or a.dtype != b.dtype:
            one, other = orders or ("one", "the other")
            return (
                f"{RACE_VERDICT} (output '{name}' has shape {a.shape} {a.dtype} in {one} "
                f"schedule and {b.shape} {b.dtype} in {other})"
            )
        a, b = a.reshape(-1), b.reshape(-1)
        if not np.issubdtype(a.dtype, np.inexact):
            differ = np.flatnonzero(a != b)
            if differ.size:
                return _race_message(name, a, b, int(differ[0]), orders)
            continue
        both_nan = np.isnan(a) & np.isnan(b)
        wide = np.complex128 if np.iscomplexobj(a) else np.float64
        diff = np.abs(a.astype(wide) - b.astype(wide))
        beyond = np.flatnonzero(~both_nan & ~(diff <= ref.tolerance))  # NaN-safe
        if beyond.size:
            return _race_message(name, a, b, int(beyond[0]), orders)
        differ = np.flatnonzero(~both_nan & (a != b))
        if differ.size:
            i = int(differ[np.argmax(diff[differ])])
            close_calls.append((float(diff[i]), name, a, b, i))
    # The outputs differ somewhere (the caller compares only runs that do),
    # within the tolerance or in a result the reference does not hold (lj's
    # cell counts): the task's own verdict may still pass one and fail the other.
    first_verdict, second_verdict = judge(first), judge(second)
    if bool(first_verdict[1]) == bool(second_verdict[1]):
        return None
    one, other = orders or ("one", "the other")
    failing, kind = (other, second_verdict) if first_verdict[1] else (one, first_verdict)
    why = f": {kind[2]}" if len(kind) > 2 else ""
    if close_calls:
        _, name, a, b, i = max(close_calls, key=lambda c: c[0])
        return f"{_race_message(name, a, b, i, orders)}; the task's check fails there{why}"
    return f"{RACE_VERDICT} (the task's check fails only in the {failing} schedule{why})"


def _order_name(order, seed) -> str:
    """A schedule's name for a message, made here from what the worker said
    (a known order, an integer seed), never its text."""
    if order in ("forward", "reversed"):
        return str(order)
    if order == "lockstep":
        return "lock-step simdgroups"
    if order == "shuffled" and type(seed) is int:
        return f"shuffled (seed {seed})"
    return "another order"


def _schedule_race(
    task: Task, size: Size, result: SizeRun, jobdir: Path, ref, verified
) -> str | None:
    """The race verdict from the simulator's verification runs under other
    schedules (result.schedules, mlxsci.worker.serve.schedule_plan: reversed,
    then shuffled orders): each whose outputs differ bitwise from the
    verified ones (mlxsci.protocol.exchange.schedule_file(k)) is judged by schedule_race;
    the first race, naming both orders, or None (also on a GPU: no runs)."""
    if result.schedules is None:
        return None
    verified_order = _order_name(result.verified_order, None)
    for k, run in enumerate(result.schedules[:MAX_SCHEDULES], start=1):
        if run.equals_verified is not False:
            continue
        race = schedule_race(
            verified,
            _load_npz(jobdir / schedule_file(k)),
            ref,
            lambda outputs: verdict(task.name, outputs, ref, size.params),
            (verified_order, _order_name(run.order, run.seed)),
        )
        if race:
            return race
    return None


def check_size(
    task: Task,
    size: Size,
    result: SizeRun,
    jobdir: Path,
    roof: Roofline,
    backend_name: str,
    device_name: str,
    ref: Reference | None = None,
    rotation_refs: list | None = None,
    job: SizeJob | None = None,
) -> SizeResult:
    """Every integrity check of one size, against the trusted reference (loaded
    from the cache unless the caller already holds it), and the references of
    the other input sets the timed runs took in turn (`rotation_refs`, in the
    order of the job's input_seeds after the first). What the worker left
    is hostile input: an answer the checks cannot read (an output missing,
    larger than the task's, of the wrong names or shapes, not an archive, a
    field of the wrong type) fails the size, never the parent."""
    try:
        return _check_size(
            task,
            size,
            result,
            jobdir,
            roof,
            backend_name,
            device_name,
            ref,
            rotation_refs or [],
            job,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, EOFError,
            zipfile.BadZipFile) as exc:  # fmt: skip
        why = f"the worker's answer could not be read ({type(exc).__name__}: {exc})"[:400]
        return failed_size(size, task, f"runtime error at size {size.label}: {why}", "crash")


def _check_size(
    task: Task,
    size: Size,
    result: SizeRun,
    jobdir: Path,
    roof: Roofline,
    backend_name: str,
    device_name: str,
    ref: Reference | None,
    rotation_refs: list,
    job: SizeJob | None,
) -> SizeResult:
    out = SizeResult(size.label, dict(size.params), held_out=task.is_held_out(size))
    out.timings = dict(result.timings)
    ref = ref or get_reference(task, size.params)
    out.tol = ref.tolerance
    verified = _load_npz(jobdir / "verified.npz")
    if job and job.every_output:
        result = own_findings(result, jobdir, verified, job)
    out.error, passed, kind = verdict(task.name, verified, ref, size.params)
    problems = _run_problems(task, size, result, jobdir, ref, out.flags)
    problems += _rotation_problems(task, size, result, jobdir, rotation_refs, out.flags)
    if job and job.every_output:
        problems += _unchecked_runs(result, jobdir, len(rotation_refs) + 1, out.flags)
    if not passed:
        problems.insert(0, f"{kind}={out.error:.4g} (tol={out.tol:.4g})")
    race = _schedule_race(task, size, result, jobdir, ref, verified)  # the simulator's orders
    if race:
        out.flags.append("race")
        problems.insert(0, race)  # the cause of any wrong result above
    out.correct = not problems
    # The simulator's reads the language leaves undefined, in the verified
    # run: named where the size fails (their poison is the likeliest cause,
    # and nothing else in the verdict would say so), a flag where it passes
    # (the value never reached an output). Only words: the worker's record
    # decides nothing, and a malformed one is dropped.
    undefined = result.undefined_reads
    if undefined is not None:
        out.flags.append(undefined_reads.FLAG)
        if problems:
            problems.append(undefined_reads.LEAD + undefined_reads.describe(undefined))
    # Likewise threadgroup memory read before it was written, where the
    # worker's run with that memory zero-filled changed the outputs.
    if result.threadgroup_outputs_change:
        out.flags.append(undefined_reads.THREADGROUP_FLAG)
        if problems:
            problems.append(undefined_reads.threadgroup_text(_dialect(job) == "cuda"))
    if problems:
        out.fail_reason = f"correctness failed at size {size.label}: " + "; ".join(problems)
    _measure(out, task, size, result, roof, backend_name, device_name)
    return out


def _dialect(job: SizeJob | None) -> str:
    """The dialect the parent asked the backend for (its own job, not the worker's word)."""
    return job.dialect if job is not None else "metal"


def _run_problems(
    task: Task, size: Size, result: SizeRun, jobdir: Path, ref: Reference, flags: list
) -> list[str]:
    """The checks of the runs on the first input set beyond the verified
    outputs' error: the inputs the kernel got and left, no output element
    unwritten, the last timed run right where it differs bitwise."""
    problems = []
    if result.input_checksums_before != ref.input_checksums:
        problems.append("inputs given to the kernel differ from the reference inputs")
    mutated = sorted(
        k
        for k, v in (result.input_checksums_after or {}).items()
        if ref.input_checksums.get(k) != v
    )
    if mutated:
        flags.append("input_mutated")
        problems.append(f"input mutated: {', '.join(mutated)}")
    # Results the reference checks; a task's extra results only carry state from
    # run to run for the wall timer's chains (Task.chain), as before this held.
    unwritten = {k: n for k, n in result.unwritten.items() if n and k in ref.outputs}
    if unwritten:
        flags.append("unwritten")
        problems.append(
            "unwritten output: "
            + ", ".join(f"{n} element(s) of {k} never written" for k, n in unwritten.items())
        )
    if not result.last_equals_verified:
        flags.append("nondeterministic")
        last_err, last_ok, last_kind = verdict(
            task.name, _load_npz(jobdir / "last.npz"), ref, size.params
        )
        if not last_ok:
            problems.append(f"last timed run's output is wrong ({last_kind}={last_err:.4g})")
    return problems


def _measure(
    out: SizeResult,
    task: Task,
    size: Size,
    result: SizeRun,
    roof: Roofline,
    backend_name: str,
    device_name: str,
) -> None:
    """The size's time from the raw seconds (by the timer's statistic), its
    noise, what it achieved against the roofline, and the physics floor's
    verdict on it (implausible, or above the roofline: suspicious); where
    Metal-Sci's chip table describes the device, the fraction of its ceiling."""
    # The timer says which statistic of its runs is the size's time; from the
    # raw seconds, never the worker's own figure (mlxsci.timing.measurement).
    timed = Measurement.of(result.seconds, result.statistic)
    out.seconds, out.seconds_min, out.seconds_max = timed.value, timed.low, timed.high
    out.timer = result.timer
    out.timer_info = dict(result.timer_info)
    # The noise widens the allowance of the physics floor below.
    out.noise = timed.noise
    out.kernels = dict(result.kernels)
    out.warmup = dict(result.warmup)
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
    out.implausible = implausibility(out)
    if out.implausible:
        out.flags.append("implausible")
    elif out.fraction > 1.0:
        out.flags.append("suspicious")
    if has_chip_table(backend_name):
        gflops, gbps = metal_sci_ceiling(device_name)
        out.metal_sci_fraction = out.achieved / (gbps if task.bound == "bandwidth" else gflops)


def _rotation_problems(
    task: Task, size: Size, result: SizeRun, jobdir: Path, refs: list, flags: list
) -> list[str]:
    """The timed runs' checks beyond the first input set: each other set
    reached the kernel as the parent made it and left unchanged, and the last
    timed run of each is right against that set's own reference. The parent
    gives a job only as many sets as its runs reach (mlxsci.evaluation.budget.input_sets),
    so each must have its timed run: the worker's word is not asked."""
    problems: list[str] = []
    if not refs:
        return problems
    before = result.rotation_checksums_before
    if before != tuple(r.input_checksums for r in refs):
        problems.append("inputs given to the timed runs differ from the reference inputs")
    after = result.rotation_checksums_after or ()
    if after != before and "input_mutated" not in flags:
        flags.append("input_mutated")
        problems.append("input mutated by a timed run")
    for k, ref in enumerate(refs, start=1):
        err, ok, kind = verdict(task.name, _load_npz(jobdir / f"timed_{k}.npz"), ref, size.params)
        if not ok:
            if "timed_output_wrong" not in flags:
                flags.append("timed_output_wrong")
            problems.append(
                f"a timed run's output is wrong on input set {k + 1} ({kind}={err:.4g})"
            )
    return problems


# How far past the measured roofline a time may lie before it is not a win
# but a time the machine cannot produce. The roofline is measured, at the
# working set's level of the memory hierarchy, and a task's model of bytes
# and FLOPs is what Metal-Sci scores, so a kernel may beat it only by reuse
# the model does not credit (neighbours kept in registers, a fused step):
# CACHE_MARGIN allows 50 % of that. The size's own run-to-run noise (at
# least the verdicts' floor) widens the allowance further, but at most by
# NOISE_ALLOWANCE_CAP: a kernel could make one run slow on purpose to widen it.
CACHE_MARGIN = 0.5
NOISE_ALLOWANCE_CAP = 0.25


def noise_allowance(noise: float | None) -> float:
    return min(max(noise or 0.0, NOISE_FLOOR), NOISE_ALLOWANCE_CAP)


def plausible_limit(noise: float | None) -> float:
    """The largest fraction of the roofline a size may reach and count."""
    return (1.0 + CACHE_MARGIN) * (1.0 + noise_allowance(noise))


def implausibility(out: SizeResult) -> str | None:
    """Why a correct size's time is implausible (a physics floor: below what
    the machine's measured ceilings allow), with the numbers; None when it
    is within them."""
    limit = plausible_limit(out.noise)
    if out.fraction is None or out.seconds is None or out.fraction <= limit:
        return None
    floor = out.seconds * out.fraction / limit
    return (
        f"implausible at size {out.label}: {out.seconds * 1e3:.4g} ms per run is "
        f"{out.fraction:.3g}x the roofline ({out.achieved:.4g} {out.unit} against a "
        f"measured ceiling of {out.ceiling:.4g} {out.unit}); the machine allows no less "
        f"than {floor * 1e3:.4g} ms ({limit:.3g}x: {CACHE_MARGIN:.0%} cache margin, "
        f"noise {noise_allowance(out.noise):.1%})"
    )


def own_findings(result: SizeRun, jobdir: Path, verified: dict, job: SizeJob) -> SizeRun:
    """The worker's result with what the parent can find out itself from the
    outputs the worker sent back (job "every_output", the simulator, where
    the worker's process runs the candidate's native code and so could
    write any result): the unwritten counts (the second verification run),
    whether the last timed run on the first set gave the verified bits, and
    whether each other order's run did, for every order the job planned."""
    second = _load_npz(jobdir / "second.npz")
    planned = 1 + len(job.schedule_seeds or ()) + (1 if job.lockstep else 0)
    told = result.schedules
    if told is None or len(told) != planned:
        told = (OrderRun(None, None, None),) * planned
    return result.but(
        unwritten={k: unwritten_count(verified[k], second[k]) for k in verified},
        last_equals_verified=same_bits(_load_npz(jobdir / "last.npz"), verified),
        schedules=tuple(
            OrderRun(
                run.order,
                run.seed,
                same_bits(_load_npz(jobdir / schedule_file(k)), verified),
            )
            for k, run in enumerate(told, start=1)
        ),
    )


def _unchecked_runs(result: SizeRun, jobdir: Path, sets: int, flags: list) -> list[str]:
    """Every warm-up and timed run gave the same bits as its set's checked
    run (the simulator's runs do, run after run): a kernel that does less
    work in the runs it believes unchecked fails."""
    digests = result.run_digests
    if digests is None or len(digests) != sets:
        raise ValueError("the worker sent no digest of its runs' outputs")
    files = ["last.npz"] + [f"timed_{k}.npz" for k in range(1, sets)]
    for k, (name, seen) in enumerate(zip(files, digests), start=1):
        checked = outputs_digest(_load_npz(jobdir / name))
        if any(d != checked for d in seen):
            flags.append("unchecked_run_differs")
            return [
                f"a warm-up or timed run on input set {k} gave other outputs than the "
                "run that was checked (the simulator's runs give the same bits every time)"
            ]
    return []


def failed_size(size: Size, task: Task, reason: str, flag: str) -> SizeResult:
    return SizeResult(
        size.label,
        dict(size.params),
        held_out=task.is_held_out(size),
        correct=False,
        flags=[flag],
        fail_reason=reason,
    )


def misfit(candidate, task: Task, where: str) -> str | None:
    """Why a parsed candidate does not fit `task`, as one line, or None when it
    fits: mlxsci.kernel.validate.validate against the task's kernels and the size
    scalars of its defaults and of every size, each failure with a line number
    written `{where}{line}: ` (e.g. where="seed.metal:" or "line "). The one
    rule the evaluation, the API (mlxsci.api.kernel_function) and the search's
    --start use."""
    size_names = set(task.defaults) | {k for s in task.size_set("all") for k in s.params}
    failures = validate(
        candidate, task.kernel_names, size_names, {k.name: k.in_place for k in task.kernels}
    )
    if not failures:
        return None
    return "; ".join(f"{where}{f.line}: {f.message}" if f.line else f.message for f in failures)
