"""The profiled variant of a kernel: the build the modelled GPU's clock counts with.

The modelled time of a launch (docs/simulator-time.md, time_model.py) comes
from what the kernel does, not from how long the host took: its SIMD
instructions by class, its memory accesses coalesced per simdgroup, its
threadgroup-memory bank conflicts, its barriers. The counts come from a build
of the kernel's translation unit that calls the runtime at each basic block
and before each load and store:

1. clang compiles the TU to assembly with SanitizerCoverage's block guards
   and load/store hooks (`-fsanitize-coverage=trace-pc-guard,trace-loads,
   trace-stores`, every block kept), and without vectorisation, so that each
   element access stays one hooked access (a vector wider than 16 bytes is not
   hooked);
2. `rewrite_assembly` turns each block's guard call into
   `__sim_prof_block(<its number>)` and each hook into
   `__sim_prof_access(addr, <site, size, load or store>)`, numbering them in
   the text, and counts each block's instructions by class
   (`WEIGHT_CLASSES`): what the block costs a GPU each time a simdgroup
   enters it. The register shuffles and spills around the calls, the calls'
   own set-up and the loads and stores themselves (counted through the hooks)
   are not counted;
3. the rewritten assembly is assembled and linked with the runtime object
   like any kernel, through the same symbol checks (kernel_symbols.py).

The counters live in the runtime (sim_profile.inc); a kernel's text cannot
name them, and the calls are placed after the candidate's text is compiled.
A candidate that defines a hook's name itself is refused by the symbol check
(`__sanitizer_cov_*` is no runtime call a kernel may define), so it cannot
take a hook's place.

x86-64 hosts only: the rewrite reads x86-64 assembly. Elsewhere `supported()`
is False and the clock says so.

The same hooks serve the opt-in diagnostics (`Checks`, at the end of this
module; runtime/sim_check.inc): SimBackend.check_threadgroup_reads,
check_device_bounds, check_output_reads and watch_writes launch the profiled
variant with a record of what to check, whether or not the clock counts that
launch.
"""

from __future__ import annotations

import ctypes
import json
import platform
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlxsci.backends.sim import kernel_symbols
from mlxsci.backends.sim.abi import (
    RESULT_OK,
    RESULT_UNINIT_OUTPUT_READ,
    RESULT_UNINIT_READ,
    SimCheck,
    SimLaunch,
)
from mlxsci.backends.sim.toolchain import (
    LINK_FLAGS,
    STATS,
    build_lock,
    cache_dir,
    kernel_compile_args,
    library_key,
    run_compiler,
    runtime_object,
)
from mlxsci.kernel.spec import CompileError
from mlxsci.storage.cache import install_verified, read_verified, verify_file, write_verified

# The instruction classes a block's weight counts, in the runtime's order
# (sim_profile.inc: kWeightClasses).
WEIGHT_CLASSES = ("alu", "sfu", "atomic", "fp64")

PROFILE_FLAGS = (
    # The preludes' atomics tell the hooks they are atomic (sim_runtime.h:
    # __SIM_ATOMIC_SCOPE) in this build only; a candidate cannot test the
    # name (the source policy refuses `__SIM` names).
    "-D__SIM_PROFILED=1",
    "-fno-vectorize",
    "-fno-slp-vectorize",
    "-fsanitize-coverage=trace-pc-guard,trace-loads,trace-stores",
    "-mllvm",
    "-sanitizer-coverage-prune-blocks=0",
)

# A profile description bigger than this is no honest kernel's.
MAX_PROFILE_BYTES = 8 << 20


def supported() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


@dataclass(frozen=True)
class Profile:
    """A profiled variant's library and what its calls number."""

    library: Path
    weights: tuple[tuple[int, ...], ...]  # per block, one count per WEIGHT_CLASSES
    sites: int  # memory access sites
    # Whether it calls an atomic operation (the preludes' markers): only then
    # can lanes in lock-step lose an update the detector does not see as a
    # race (a read-modify-write split into two atomic operations).
    atomics: bool = True

    def to_json(self) -> str:
        return json.dumps(
            {
                "weights": [list(w) for w in self.weights],
                "sites": self.sites,
                "atomics": self.atomics,
            }
        )


def read_description(library: Path) -> Profile:
    """The weights written beside a profiled library (`<library>.json`)."""
    path = Path(str(library) + ".json")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise CompileError(
            f"the profiled variant's description is missing: {exc}", None, ""
        ) from exc
    if len(raw) > MAX_PROFILE_BYTES:
        raise CompileError("the profiled variant's description is too large", None, "")
    try:
        data = json.loads(raw)
        weights = tuple(tuple(int(x) for x in w) for w in data["weights"])
        sites = int(data["sites"])
        atomics = bool(data.get("atomics", True))  # unknown: take it that it has some
    except (ValueError, KeyError, TypeError) as exc:
        raise CompileError(
            f"the profiled variant's description is damaged: {exc}", None, ""
        ) from exc
    if any(len(w) != len(WEIGHT_CLASSES) for w in weights) or sites < 0:
        raise CompileError("the profiled variant's description is damaged", None, "")
    return Profile(library, weights, sites, atomics)


# ------------------------------------------------------------------ the rewrite
_GUARD_CALL = re.compile(r"^\s*callq?\s+__sanitizer_cov_trace_pc_guard(?:@PLT)?\s*$")
_GUARD_INIT = re.compile(r"^\s*(?:callq?|jmp)\s+__sanitizer_cov_trace_pc_guard_init(?:@PLT)?\s*$")
_HOOK_CALL = re.compile(r"^(\s*)callq?\s+__sanitizer_cov_(load|store)(1|2|4|8|16)(?:@PLT)?\s*$")
# The preludes' atomic-operation markers and the glue's thread slot (this
# build only): bookkeeping for the hooks, no GPU work.
_ATOMIC_MARK = re.compile(
    r"^\s*callq?\s+__sim_prof_(?:atomic_begin|atomic_end|thread_slot)(?:@PLT)?\s*$"
)
_LABEL = re.compile(r"^(?:\.LBB[\w.]+|[A-Za-z_$][\w.$]*):")
_BB_COMMENT = re.compile(r"^# %bb\.\d+:")
_MATH_CALL = re.compile(
    r"^callq?\s+(?:" + "|".join(sorted(kernel_symbols.ALLOWED_CALLS)) + r")(?:@PLT)?$"
)
_STACK = re.compile(r"\(%r[sb]p\)")
_FRAME = re.compile(r"%r[sb]p\b")
_LOG2 = {"1": 0, "2": 1, "4": 2, "8": 3, "16": 4}


def _instruction(line: str) -> str | None:
    """The instruction of an assembly line (without comment), or None."""
    text = line.split("#", 1)[0].strip()
    if not text or text.startswith(".") or text.endswith(":"):
        return None
    return text


def classify(ins: str) -> tuple[int, int, int, int]:
    """What one instruction costs a GPU, by WEIGHT_CLASSES, or zeros for
    what a GPU would not execute (stack traffic, register copies, jumps, the
    profiling calls' own set-up) and for loads and stores (counted through
    the hooks)."""
    parts = ins.split(None, 1)
    op = parts[0]
    args = parts[1] if len(parts) > 1 else ""
    if op in ("lock", "xchgl", "xchgq") or op.startswith(("lock", "cmpxchg", "xadd")):
        return (0, 0, 1, 0)
    if op.startswith(("push", "pop", "ret", "nop", "jmp", "ud2", "int3", "endbr")):
        return (0, 0, 0, 0)
    is_move = op.startswith(("mov", "vmov", "lddqu"))
    if _FRAME.search(args) and (is_move or not _STACK.search(args)):
        # A spill or reload, or the frame's own set-up (`subq $56, %rsp`):
        # the host's register pressure, not the kernel's work. Arithmetic
        # on a reloaded operand (`addss -64(%rbp), %xmm0`) still counts.
        return (0, 0, 0, 0)
    if op.startswith("call"):
        if _MATH_CALL.match(ins.replace("\t", " ")):
            return (4, 1, 0, 0)  # a math function: a special-function op and its set-up
        return (1, 0, 0, 0)
    is_move = op.startswith(("mov", "vmov", "lddqu", "cvtsi2", "cvtsd2", "cvtss2"))
    if is_move and not op.startswith(("cvtsi2", "cvtsd2", "cvtss2")):
        return (0, 0, 0, 0)  # a copy between registers, a constant, or a load/store
    if op.rstrip("lqwb") in ("div", "idiv"):
        return (20, 0, 0, 0)  # integer division: a GPU has no divider
    if op.startswith(("sqrt", "div", "rsqrt", "rcp", "vsqrt", "vdiv")):
        return (0, 1, 0, 0) if not op.endswith(("sd", "pd")) else (0, 0, 0, 1)
    if op.endswith(("sd", "pd")) and not op.startswith(("cvt", "unpck", "shuf")):
        return (0, 0, 0, 1)
    return (1, 0, 0, 0)


def rewrite_assembly(asm: str) -> tuple[str, list[tuple[int, ...]], int]:
    """(rewritten assembly, weights per block, number of access sites)."""
    lines = asm.split("\n")
    out: list[str] = []
    weights: list[list[int]] = []
    current: list[int] | None = None  # the block instructions are charged to
    pending = [0, 0, 0, 0]  # instructions of an asm block before its first guard call
    sites = 0
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        # A guard call: the guard's address was put in %rdi just before
        # (`leaq .L__sancov_gen_...(%rip), %rdi`, or from a register the
        # compiler hoisted it into); the block's number replaces it.
        if _GUARD_CALL.match(line):
            _uncount_setup(out, current if current is not None else pending)
            block = len(weights)
            weights.append(pending)
            pending = [0, 0, 0, 0]
            current = weights[block]
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}movl\t${block}, %edi")
            out.append(f"{indent}callq\t__sim_prof_block@PLT")
            i += 1
            continue
        if "__start___sancov_guards" in line or "__stop___sancov_guards" in line:
            i += 1  # the guards' bounds, for the initialiser dropped below
            continue
        if _GUARD_INIT.match(line):
            i += 1  # the guards need no numbering: the rewrite numbered the calls
            continue
        hook = _HOOK_CALL.match(line)
        if hook:
            indent, kind, size = hook.groups()
            info = (sites << 8) | ((1 if kind == "store" else 0) << 7) | _LOG2[size]
            sites += 1
            # The hook's argument set-up (the address into %rdi) is no GPU work.
            _uncount_setup(out, current if current is not None else pending)
            out.append(f"{indent}movl\t${info}, %esi")
            out.append(f"{indent}callq\t__sim_prof_access@PLT")
            i += 1
            continue
        if _ATOMIC_MARK.match(line):
            _uncount_setup(out, current if current is not None else pending)
            out.append(line)
            i += 1
            continue
        if _LABEL.match(line) or _BB_COMMENT.match(line):
            current = None  # a new asm block: charged to its own guard
        ins = _instruction(line)
        if ins is not None:
            cost = classify(ins)
            target = current if current is not None else pending
            for k in range(4):
                target[k] += cost[k]
        out.append(line)
        i += 1
    return "\n".join(out), [tuple(w) for w in weights], sites


def _uncount_setup(out: list[str], target: list[int]) -> None:
    """Takes back the cost of the last instruction in `out` when it only
    sets up a profiling call's argument (it writes %rdi)."""
    for line in reversed(out):
        ins = _instruction(line)
        if ins is None:
            continue
        if ins.replace(" ", "").replace("\t", "").endswith(",%rdi"):
            cost = classify(ins)
            for k in range(4):
                target[k] = max(0, target[k] - cost[k])
        return


# ------------------------------------------------------------------ the build
def profiled_library(
    tu: str, source_file: str = "<candidate>", extra_defines: tuple[str, ...] = ()
) -> Profile:
    """The cached profiled library of `tu` (built if needed) and its weights.
    The candidate's own compile errors were found by its plain build first
    (variants.variant_library builds that one before this)."""
    if not supported():
        raise CompileError(
            f"the modelled GPU's clock needs an x86-64 host, not {platform.machine()}", None, ""
        )
    with build_lock:
        key = library_key(tu, extra_defines + PROFILE_FLAGS, "profiled")
        d = cache_dir()
        so = d / f"p-{key}.so"
        desc = Path(str(so) + ".json")
        if verify_file(so) and read_verified(desc) is not None:
            STATS["cache_hits"] += 1
            return read_description(so)
        rt = runtime_object(extra_defines)
        with tempfile.TemporaryDirectory(prefix=f"p-{key}.", dir=d) as tmp:
            cpp = Path(tmp, "k.cpp")
            cpp.write_text(tu)
            asm = Path(tmp, "k.s")
            res = run_compiler(
                kernel_compile_args(cpp, asm, extra_defines, flags=PROFILE_FLAGS, output="-S")
            )
            _check(res, "compiling the profiled variant")
            text, weights, sites = rewrite_assembly(asm.read_text())
            atomics = "__sim_prof_atomic_begin" in text
            rewritten = Path(tmp, "p.s")
            rewritten.write_text(text)
            obj = Path(tmp, "p.o")
            _check(
                run_compiler(["c++", "-c", str(rewritten), "-o", str(obj)]),
                "assembling the profiled variant",
            )
            why = kernel_symbols.object_violation(obj, rt, profiled=True)
            if why:
                raise CompileError(why, None, why)
            tmp_so = Path(tmp, "p.so")
            _check(
                run_compiler(["c++", *LINK_FLAGS, str(obj), str(rt), "-o", str(tmp_so)]),
                "linking the profiled variant",
            )
            why = kernel_symbols.library_violation(tmp_so)
            if why:
                raise CompileError(why, None, why)
            STATS["compiles"] += 1
            profile = Profile(so, tuple(weights), sites, atomics)
            write_verified(desc, profile.to_json().encode())
            install_verified(tmp_so, so)
        return profile


def _check(res: subprocess.CompletedProcess, what: str) -> None:
    if res.returncode != 0:
        log = (res.stderr or "") + (res.stdout or "")
        first = next((l for l in log.splitlines() if "error" in l), log.strip()[:300])
        raise CompileError(f"{what} failed: {first}", None, log)


# ------------------------------------------------------------------ the checks
WATCH_CAP = 64  # the stores to a watched element recorded with their thread
# Runs of one launch the read checks may take to tell the loads of memory
# nothing wrote from loads of stores they do not see (Checks).
MAX_CHECK_RUNS = 16


def checks_of(
    backend, tgmem_bytes: int, init_value=None, lockstep: bool = False, races: bool = False
) -> Checks | None:
    """What the backend asks the hooks to check in a launch of a variant with
    `tgmem_bytes` of threadgroup memory whose outputs get `init_value` (None:
    none, they hold garbage), or None: nothing asked, a host without the
    profiled build (`supported()` False: the checks silently do nothing
    there), or the worker's coverage run (its counted variant has no hooks).
    `lockstep`: the launch's lanes take turns at every device access, which
    only the hooks can switch them for; `races`: the race detector on, as
    with check_device_races (both are the lock-step verification run's:
    SimBackend.other_orders, kernel.py)."""
    races = races or lockstep or bool(getattr(backend, "check_device_races", False))
    tg_reads = bool(getattr(backend, "check_threadgroup_reads", False)) and tgmem_bytes > 0
    bounds = bool(getattr(backend, "check_device_bounds", False))
    # Outputs launched with init_value hold it from the start: nothing to check.
    output_reads = bool(getattr(backend, "check_output_reads", False)) and init_value is None
    watch = getattr(backend, "watch_writes", None)
    if not (tg_reads or bounds or output_reads or races or watch is not None):
        return None
    if not supported() or backend.count_branches:
        return None
    return Checks(backend, tg_reads, watch, bounds, output_reads, races, lockstep)


class _Settling:
    """The runs that settle one read check's report (Checks): where the
    next run starts reporting, the load the last run reported, whether the
    next run fills with the other byte."""

    def __init__(self, on: bool):
        self.on = on
        self.restart()

    def restart(self) -> None:
        self.report_from = 0  # the loads before it read something written
        self.reported: int | None = None
        self.other = False

    def settle(self, found: int) -> bool:
        """After a run that reported load `found`: whether it runs again
        (False: the same load under both fill bytes, the report stands)."""
        if found == self.reported:
            return False
        self.reported = self.report_from = found
        self.other = not self.other
        return True


class Checks:
    """The checks of one kernel call, over the runs it takes.

    Threadgroup reads (SimBackend.check_threadgroup_reads): the runtime
    (runtime/sim_check.inc) reports the first load of threadgroup /
    __shared__ bytes (static arrays and CUDA's `extern __shared__`) that no
    thread of the group stored since the group began and that still hold the
    group's fill byte. The hooks see every load and store of 1 to 16 bytes,
    atomics included (the preludes implement them as plain loads and
    stores). A store they do not see (a memcpy, a copy wider than 16 bytes, a
    loop the compiler turned into a memset) is inferred from the bytes it
    changed; one that wrote exactly the fill byte cannot be told apart that
    way, so a report stands only once two runs of the launch (same schedule
    and seed) with different fill bytes report the same load: a load that
    reads the fill under both read memory nothing wrote. Until they agree,
    each run starts reporting at the load the previous one reported (the
    loads before it read something written) with the other fill byte. A
    launch that runs clean with another fill than its own runs once more,
    without the read checks, with its own, so a correct kernel's outputs are
    those of a launch without the check. Not checked: the arrays the rewrite
    cannot guard (plain statics in the `sim_tgmem` section), and loads wider
    than 16 bytes (unseen). A kernel that reads unwritten memory through an
    unseen load may be reported at a later load than that one.

    Output reads (SimBackend.check_output_reads; outputs launched without
    init_value, which hold the backend's output_garbage): judged when the
    launch has run, the first load in run order of an output element no
    store had touched, when no thread but its reader stored to the element
    in the rest of the launch either: a read of memory nobody writes before
    the reader (if anyone). A thread reading what another stores, before or
    after it in this order, is no report: that is a race, which the
    schedules find. Settled the same way, with another garbage byte for the
    outputs. A store the hooks do not see after a read drops the read (its
    thread is not known); one after the reader's own store to the element is
    not seen. A launch that faults otherwise reports that fault.

    Device bounds (SimBackend.check_device_bounds): the first load or store,
    read checks' runs aside, that touches a byte of an input's or output's
    mapping outside its data bytes (the alignment slack, the page padding,
    the guard pages; a 0-byte buffer has none), reported as the guard pages
    report theirs. An input passed as stored is valid over the whole span
    its strides reach, its element counted from the span's first byte.
    Accesses the hooks do not see (above) meet the guard pages and the
    slack check after the launch as before.

    Device races (SimBackend.check_device_races, and the lock-step
    verification run): the first data race on an input's or output's
    element, two threads' stores neither atomic nor ordered by a barrier of
    their group or a SIMD operation of their simdgroup, the later one
    changing the element's bytes (runtime/sim_race.inc says what is seen and
    what not: loads are left to the other orders), raises KernelFault("race")
    naming the buffer, the element and both threads. A conflict whose store left the bytes as they were is
    benign: counted (races_benign), not reported. Lock-step (the
    LOCKSTEP schedule, on fibers): each simdgroup's lanes take turns at every
    device-memory access, so a read-modify-write split into two atomic
    operations loses updates as on a GPU.

    Watched element (SimBackend.watch_writes): every store touching the
    element's bytes, with its group and thread, in the order the schedule
    ran them (the first WATCH_CAP; the count is of all), stores by atomic
    operations included; the stores the hooks do not see (above) are not
    recorded. A strided input passed as stored is indexed in its storage."""

    def __init__(
        self,
        backend,
        tg_reads: bool,
        watch,
        device_bounds: bool = False,
        output_reads: bool = False,
        races: bool = False,
        lockstep: bool = False,
    ):
        self.backend = backend
        self.watch = watch
        self.device_bounds = device_bounds
        self.races = races
        self.lockstep = lockstep
        self.tg = _Settling(tg_reads)
        self.out = _Settling(output_reads)
        fill = backend.tg_fill
        self.fill = 0xFF if fill is None else int(fill) & 0xFF  # sim_runtime.h: poison
        self.other_fill = 0xA5 if self.fill != 0xA5 else 0x5A  # a byte no memset writes
        self.garbage = int(getattr(backend, "output_garbage", 0x5A)) & 0xFF
        self.other_garbage = 0xA5 if self.garbage != 0xA5 else 0x5A
        self.record = SimCheck()
        self.records = (ctypes.c_int64 * (6 * WATCH_CAP))()
        self.flags: ctypes.Array | None = None
        self.seed: int | None = None
        self.restart()

    @property
    def tg_reads(self) -> bool:
        return self.tg.on

    @property
    def output_reads(self) -> bool:
        return self.out.on

    @property
    def output_fill(self) -> int:
        """The byte outputs without init_value are filled with in this run."""
        return self.other_garbage if self.out.other else self.garbage

    def restart(self) -> None:
        """From the first run again: a launch that moved to fibers numbers
        its loads anew."""
        self.tg.restart()
        self.out.restart()
        self.runs = 0

    def attach(self, launch: SimLaunch, guards) -> None:
        """Points `launch` at the record: the watched element among
        `guards` (the launch's (buffer, role, name, itemsize)), the outputs
        whose reads are checked (every output: checks_of asks for them only
        in a call without init_value), the fills of this run and the
        schedule's seed of the first."""
        R = self.record
        R.tg_reads = 1 if self.tg.on else 0
        R.report_from = self.tg.report_from
        R.watch_lo = R.watch_hi = 0
        if self.watch is not None:
            R.watch_lo, R.watch_hi = self._watched_bytes(guards)
        R.watch_records = ctypes.cast(self.records, ctypes.POINTER(ctypes.c_int64))
        R.watch_cap = WATCH_CAP
        R.device_bounds = 1 if self.device_bounds else 0
        R.device_races = 1 if self.races else 0
        R.lockstep = 1 if self.lockstep else 0
        R.output_reads = 1 if self.out.on else 0
        self.flags = (ctypes.c_uint8 * max(1, len(guards)))(
            *[1 if role == "output" else 0 for _gb, role, _name, _isz in guards]
        )
        R.out_flags = ctypes.cast(self.flags, ctypes.POINTER(ctypes.c_uint8))
        R.out_fill = self.output_fill
        R.out_report_from = self.out.report_from
        if self.seed is None:
            self.seed = launch.schedule_seed
        launch.schedule_seed = self.seed  # each run replays the first one's schedule
        if self.tg.other:
            launch.tg_fill = 0x100 | self.other_fill
        launch.check = ctypes.addressof(R)

    def _watched_bytes(self, guards) -> tuple[int, int]:
        name, index = self.watch
        for gb, _role, gname, isz in guards:
            if gname == name:
                n = gb.nbytes // max(1, isz)
                if not 0 <= int(index) < n:
                    raise ValueError(
                        f"watch_writes: element {index} of '{name}' is out of range "
                        f"(it has {n} elements)"
                    )
                lo = gb.base + int(index) * isz
                return lo, lo + isz
        names = ", ".join(repr(g[2]) for g in guards)
        raise ValueError(f"watch_writes names {name!r}, no buffer of this kernel ({names})")

    def rerun(self, kind: int) -> bool:
        """After a run that ended with result `kind`: whether the launch
        runs again to settle a read check's report (see the class). The
        watched stores of the run are the backend's now."""
        if self.watch is not None:
            count = int(self.record.watch_count)
            rows = [list(self.records[6 * k : 6 * k + 6]) for k in range(min(count, WATCH_CAP))]
            self.backend.watched_write_count = count
            self.backend.watched_writes = [{"group": r[:3], "thread": r[3:]} for r in rows]
        if kind == RESULT_OK:
            if not (self.tg.other or self.out.other):
                return False  # clean with the launch's own fills
            # Nothing reads memory nothing wrote: once more, without the read checks, with its own.
            self._stop_reads()
            return True
        if kind == RESULT_UNINIT_READ and self.tg.on:
            again = self.tg.settle(int(self.record.read_ordinal))
        elif kind == RESULT_UNINIT_OUTPUT_READ and self.out.on:
            again = self.out.settle(int(self.record.out_ordinal))
        else:
            return False
        if not again:
            return False
        self.runs += 1
        if self.runs >= MAX_CHECK_RUNS:  # too many unseen stores to tell: once more unchecked
            self._stop_reads()
        return True

    def _stop_reads(self) -> None:
        for s in (self.tg, self.out):
            s.on = s.other = False
