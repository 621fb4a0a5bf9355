"""Turning the runtime's result of a failed launch (abi.SimResult) into a
KernelFault whose message names the buffer or array, the element, the access
and the thread, in the dialect's words.

`guards` is the launch's list of (buffer, role, name, itemsize), indexed by
the runtime's buffer number; `dtypes` the element dtype name of each.
"""

from __future__ import annotations

import ctypes
import re
import signal

from mlxsci.backends.sim.abi import (
    RESULT_DEADLOCK,
    RESULT_DIVERGENCE,
    RESULT_GP_FAULT,
    RESULT_MISALIGNED,
    RESULT_OOB,
    RESULT_PRIVATE_OOB,
    RESULT_RACE,
    RESULT_SETUP_FAILED,
    RESULT_STACK_OVERFLOW,
    RESULT_TG_OOB,
    RESULT_TIMEOUT,
    RESULT_UNINIT_OUTPUT_READ,
    RESULT_UNINIT_READ,
    SIGNAL_NAMES,
    SimCheck,
    SimResult,
)
from mlxsci.backends.sim.build import CANDIDATE_FILE
from mlxsci.kernel.spec import KernelFault


def _uninitialised_hint(addr: int) -> str:
    """A note when a bad address looks like a pointer read from memory never
    written: outputs and slack hold 0x5A bytes, threadgroup memory poison 0xFF."""
    low = addr & 0xFFFFFFFF
    if low == 0x5A5A5A5A:
        return (
            " (the garbage pattern of an uninitialised output: a pointer read before it "
            "was written?)"
        )
    if low == 0xFFFFFFFF:
        return (
            " (the poison of unwritten threadgroup/shared memory: a pointer read before "
            "it was written?)"
        )
    return ""


def _access_word(R) -> str:
    """What a fault's access was: the runtime's is_write 1, 0 or -1 (unknown)."""
    return {1: "write", 0: "read"}.get(R.is_write, "access")


def _tg_array(R: SimResult, dialect) -> tuple[str, str]:
    """(description, name) of the threadgroup array R's tg_* fields name."""
    name = ctypes.string_at(R.tg_name).decode(errors="replace")
    decl = ctypes.string_at(R.tg_decl).decode(errors="replace")
    if name == "__sim_dyn_smem":
        return "dynamic shared memory (extern __shared__)", "extern __shared__"
    return f"{dialect.array_word} array '{name}' ({decl})", name


def _vector_name(nbytes: int, dtype: str | None, itemsize: int) -> str:
    """float4 for 16 bytes of a float32 buffer; a byte count otherwise."""
    base = {
        "float32": "float",
        "float16": "half",
        "bfloat16": "bfloat",
        "int32": "int",
        "uint32": "uint",
        "int16": "short",
        "uint16": "ushort",
    }.get(dtype or "")
    lanes = nbytes // max(1, itemsize)
    if base and lanes in (2, 3, 4):
        return f"{base}{lanes}"
    return f"{nbytes}-byte vector"


def fault_of(
    R: SimResult,
    guards,
    dtypes,
    dialect,
    backend,
    kernel: str = "",
    spec=None,
    check: SimCheck | None = None,
) -> KernelFault:
    """The KernelFault for a launch of `kernel` (its KernelSpec `spec`, whose
    text names an array a bounds check found) that ended with result R
    (R.kind not OK); `check` the launch's record of the hooks' checks, if it
    had one (a race's earlier access is there)."""
    group = tuple(R.group)
    thread = tuple(R.thread)
    gw = dialect.group_word
    where = f"thread {thread} of {gw} {group}"
    details: dict[str, object] = {"group": group, "thread": thread}
    kind = R.kind
    if kind == RESULT_UNINIT_READ:
        return _uninitialized_read(R, dialect, where, kernel)
    if kind == RESULT_UNINIT_OUTPUT_READ:
        return _uninitialized_output_read(R, guards, where, kernel)
    if kind == RESULT_RACE and check is not None:
        return _device_race(R, check, guards, dialect, kernel)
    if kind == RESULT_OOB:
        return _buffer_out_of_bounds(R, guards, where, details)
    if kind == RESULT_TG_OOB:
        return _array_out_of_bounds(R, dialect, where, details)
    if kind == RESULT_PRIVATE_OOB:
        return _private_out_of_bounds(R, where, details, spec)
    if kind == RESULT_MISALIGNED:
        return _misaligned(R, guards, dtypes, dialect, where, details)
    if kind == RESULT_GP_FAULT:
        return _general_protection(R, where, details)
    if kind == RESULT_DIVERGENCE:
        lines = [int(R.line)] + ([int(R.line2)] if R.line2 else [])
        details.update(lines=lines, n_done=int(R.n_done), n_wait=int(R.n_wait))
        if R.line2:
            other = f"thread {thread} waits at the barrier on line {R.line2}"
        else:
            other = f"{R.n_done} thread(s) returned without reaching it (e.g. thread {thread})"
        return KernelFault(
            "barrier_divergence",
            f"barrier divergence in {gw} {group}: {R.n_wait} thread(s) wait "
            f"at {dialect.barrier_word} on line {R.line} while {other}",
            details,
        )
    if kind == RESULT_DEADLOCK:
        return KernelFault("deadlock", f"deadlock in {gw} {group}: no thread can run", details)
    if kind == RESULT_TIMEOUT:
        t = backend.launch_timeout_s
        return KernelFault(
            "timeout", f"kernel did not finish within {t:g} s ({where} was running)", details
        )
    if kind == RESULT_STACK_OVERFLOW:
        details.update(signal="SIGSEGV", stack_overflow=True)
        if R.aux >= 0:
            size = f"per-thread stack {backend.stack_size // 1024} KiB"
        else:
            size = "fiber-free path, on the host thread's stack"
        return KernelFault(
            "crash",
            f"stack overflow in {where} ({size}; deep recursion or large local arrays?)",
            details,
        )
    if kind == RESULT_SETUP_FAILED:
        return KernelFault("crash", "the simulator could not allocate fiber stacks", details)
    return _signal_crash(R, guards, dialect, where, details)


def _buffer_out_of_bounds(R: SimResult, guards, where: str, details: dict) -> KernelFault:
    """An access that landed in a buffer's own guard region."""
    gb, role, name, isz = guards[R.buf]
    n = gb.nbytes // max(1, isz)
    access = _access_word(R)
    side = "before the start" if R.elem < 0 else "past the end"
    details.update(buffer=name, role=role, element=int(R.elem), access=access)
    return KernelFault(
        "out_of_bounds",
        f"out-of-bounds {access} of {role} '{name}' at element {R.elem} "
        f"({side}; valid elements 0..{n - 1}) by {where}",
        details,
    )


def _array_out_of_bounds(R: SimResult, dialect, where: str, details: dict) -> KernelFault:
    """An index past a threadgroup/__shared__ array's bound (or, after the
    launch, a write into its guard bytes)."""
    what, name = _tg_array(R, dialect)
    access = _access_word(R)
    elem, bound = int(R.elem), int(R.tg_nelem)
    details.update(buffer=name, role="threadgroup", element=elem, access=access)
    if name == "extern __shared__":
        pos = f"at byte {elem} (size {bound} bytes)"
    else:
        pos = f"at index {elem} (bound {bound})"
    if R.after:
        # Found in the bytes between the array and its guard pages (before
        # its start, or the alignment bytes past its end), which are checked
        # only when the launch is over: no thread was caught in the act.
        details.pop("group")
        details.pop("thread")
        side = "before its start" if elem < 0 else "past its end"
        return KernelFault(
            "out_of_bounds",
            f"out-of-bounds {access} of {what} {pos}, {side}; detected after the launch "
            f"in the bytes next to the array, so which thread wrote it is not known "
            f"(an index a few elements out of range, such as l - 1 for l == 0?)",
            details,
        )
    return KernelFault(
        "out_of_bounds", f"out-of-bounds {access} of {what} {pos} by {where}", details
    )


def _array_type(quoted: str) -> tuple[str, int | None]:
    """(type, bound) of a type name as the compiler's bounds check spells
    it: 'float[9]' -> ("float[9]", 9); a typedef's "'name' (aka 'int[4][4]')"
    -> ("name (int[4][4])", 4). The bound is the first dimension's, the one
    the checked subscript indexes."""
    names = re.findall(r"'([^']*)'", quoted) or [quoted]
    shape = names[-1]
    bound = re.search(r"\[(\d+)\]", shape)
    text = names[0] if len(names) == 1 else f"{names[0]} ({shape})"
    return text, int(bound.group(1)) if bound else None


def _subscripted(spec, line: int, column: int) -> str | None:
    """The array expression the subscript at the candidate's `line` and
    `column` indexes (`f` of `f[k]`, `s.w` of `s.w[k]`), read from the
    kernel's text: the check's data holds its position, not its name."""
    if spec is None:
        return None
    for first, text in ((spec.body_line, spec.source), (spec.header_line, spec.header)):
        lines = text.split("\n")
        if first <= line < first + len(lines):
            m = re.match(r"([A-Za-z_][\w.]*(?:->[\w.]+)*)\s*\[", lines[line - first][column - 1 :])
            return m.group(1) if m else None
    return None


def _declared_dimensions(spec, name: str | None) -> int:
    """How many subscripts the declaration of array `name` in the kernel's
    text has (`float a[4][4];` -> 2), 0 where none is found."""
    if spec is None or not name or not re.fullmatch(r"[A-Za-z_]\w*", name):
        return 0
    text = f"{spec.header}\n{spec.source}"
    m = re.search(r"\b[A-Za-z_]\w*[\s*&]+" + name + r"\s*((?:\[[^\]\[]*\]\s*)+)[=;{]", text)
    return m.group(1).count("[") if m else 0


def _private_out_of_bounds(R: SimResult, where: str, details: dict, spec=None) -> KernelFault:
    """The bounds-checked build's report (bounds.py, runtime/sim_bounds.inc):
    an index past a thread-private or constant array, which no guard page
    surrounds, caught before the access with the line of the subscript."""
    file = ctypes.string_at(R.tg_name).decode(errors="replace") if R.tg_name else ""
    array, bound = _array_type(ctypes.string_at(R.tg_decl).decode(errors="replace"))
    index, line, column = int(R.elem), int(R.line), int(R.aux)
    # The TU names the candidate's file CANDIDATE_FILE (build.py); a check in
    # a prelude's own code names that header.
    own = file == CANDIDATE_FILE
    name = _subscripted(spec, line, column) if own else None
    named = f"'{name}', " if name else ""
    at = f"line {line}, column {column}" + ("" if own else f" of {file}")
    valid = f"valid indices 0..{bound - 1}" if bound else "bound unknown"
    side = "before the start" if index < 0 else "past the end"
    # An inner subscript of a multi-dimensional array (`a[0][k]` of `float
    # a[4][4]` with k past 3): undefined in C++, but a GPU addresses the array
    # flat, so k < 16 reads the element it names there. The check cannot see
    # the flat index, so such a report is marked, and the bounds run lets it
    # pass (mlxsci.worker.serve.bounds_run).
    inner = _declared_dimensions(spec, name) > array.count("[") > 0
    details.update(
        inner_subscript=inner,
        buffer=name,
        role="private",
        array_type=array,
        element=index,
        bound=bound,
        line=line if own else None,
        column=column,
        file=None if own else file,
        access="index",
    )
    return KernelFault(
        "out_of_bounds",
        f"out-of-bounds index {index} into {named}a thread-private "
        f"or constant array of type {array} ({side}; {valid}) at {at}, by {where}: found by "
        f"the bounds-checked build "
        f"(without the check the compiler may drop the code that indexes past the array, "
        f"since that is undefined)",
        details,
    )


def _uninitialized_read(R: SimResult, dialect, where: str, kernel: str) -> KernelFault:
    """A load of threadgroup/__shared__ bytes no thread of the group had
    stored (SimBackend.check_threadgroup_reads; profile.Checks)."""
    what, name = _tg_array(R, dialect)
    elem = int(R.elem)
    pos = f"at byte {elem}" if name == "extern __shared__" else f"element {elem}"
    in_kernel = f" in kernel '{kernel}'" if kernel else ""
    return KernelFault(
        "uninitialized_read",
        f"read of {what} {pos} before any thread of the {dialect.group_word} wrote it, "
        f"by {where}{in_kernel}",
        {
            "array": name,
            "element": elem,
            "thread": [int(x) for x in R.thread],
            "group": [int(x) for x in R.group],
            "access": "read",
            "kernel": kernel,
        },
    )


def _uninitialized_output_read(R: SimResult, guards, where: str, kernel: str) -> KernelFault:
    """A load of output bytes no thread had stored in the launch, of an
    output launched without init_value (SimBackend.check_output_reads)."""
    _gb, role, name, _isz = guards[R.buf]
    elem = int(R.elem)
    in_kernel = f" in kernel '{kernel}'" if kernel else ""
    return KernelFault(
        "uninitialized_read",
        f"read of {role} '{name}' element {elem} before any thread wrote it (without "
        f"init_value an output holds whatever the recycled buffer held: pass init_value) "
        f"by {where}{in_kernel}",
        {
            "buffer": name,
            "role": role,
            "element": elem,
            "thread": [int(x) for x in R.thread],
            "group": [int(x) for x in R.group],
            "access": "read",
            "kernel": kernel,
        },
    )


def _device_race(R: SimResult, check: SimCheck, guards, dialect, kernel: str) -> KernelFault:
    """Two unordered accesses of one input or output element by two
    threads, one a store that changed it, neither atomic (the race detector,
    runtime/sim_race.inc: SimBackend.check_device_races and the lock-step
    verification run)."""
    _gb, role, name, _isz = guards[R.buf]
    elem = int(R.elem)
    gw = dialect.group_word
    later = {"thread": [int(x) for x in R.thread], "group": [int(x) for x in R.group]}
    first = [int(x) for x in check.race_first]
    earlier = {"thread": first[3:], "group": first[:3]}
    first_access = "written" if check.race_first_write else "read"
    later_access = "written" if R.is_write == 1 else "read"
    in_kernel = f" in kernel '{kernel}'" if kernel else ""

    def who(t: dict) -> str:
        return f"thread {tuple(t['thread'])} of {gw} {tuple(t['group'])}"

    same_group = earlier["group"] == later["group"]
    unordered = f"no {dialect.barrier_word} between them" if same_group else f"in different {gw}s"
    return KernelFault(
        "race",
        f"data race on {role} '{name}' element {elem}{in_kernel}: {first_access} by "
        f"{who(earlier)}, then {later_access} by {who(later)}, neither access atomic and "
        f"{unordered} (a GPU may run them in either order; the value changed)",
        {
            "buffer": name,
            "role": role,
            "element": elem,
            "kernel": kernel,
            "first": dict(earlier, access="write" if check.race_first_write else "read"),
            "second": dict(later, access="write" if R.is_write == 1 else "read"),
            "thread": later["thread"],
            "group": later["group"],
        },
    )


def _misaligned(R: SimResult, guards, dtypes, dialect, where: str, details: dict) -> KernelFault:
    """A vector access at an address its width does not divide."""
    access = _access_word(R)
    size, off = int(R.aux), int(R.elem)
    if R.tg_name:
        what, name = _tg_array(R, dialect)
        scalar = ctypes.string_at(R.tg_decl).decode(errors="replace").split("[")[0].strip()
        dtype = {
            "float": "float32",
            "half": "float16",
            "int": "int32",
            "uint": "uint32",
            "unsigned int": "uint32",
        }.get(scalar)
        vec = _vector_name(size, dtype, int(R.tg_esize))
    elif R.buf >= 0:
        gb, role, name, isz = guards[R.buf]
        what = f"{role} '{name}'"
        vec = _vector_name(size, dtypes[R.buf] if R.buf < len(dtypes) else None, isz)
    else:
        # not in any buffer or threadgroup array: thread-private memory (a
        # local array cast to a vector pointer) or a stray pointer
        what, name, off = (
            "memory in no buffer or threadgroup array (thread-private?)",
            None,
            int(R.addr),
        )
        vec = _vector_name(size, None, 0)
    details.update(buffer=name, byte_offset=off, access=access, alignment=size)
    where_off = f"at byte offset {off}" if name is not None else f"at address {off:#x}"
    return KernelFault(
        "misaligned",
        f"misaligned {vec} {access} of {what} {where_off} "
        f"({vec} needs {size}-byte alignment) by {where}",
        details,
    )


def _general_protection(R: SimResult, where: str, details: dict) -> KernelFault:
    """A SIGSEGV without a faulting address: a non-canonical pointer or an
    instruction the runtime could not decode."""
    details.update(signal="SIGSEGV", address=int(R.addr), buffer=None)
    access = _access_word(R)
    if R.addr:
        garbage = _uninitialised_hint(int(R.addr))
        return KernelFault(
            "crash",
            f"SIGSEGV in {where}: {access} through the invalid (non-canonical) address "
            f"{R.addr:#x}, which no buffer or array holds: a pointer into nothing{garbage}",
            details,
        )
    # The runtime decodes the faulting instruction's operand; this one it
    # could not (a string move or a library call such as memcpy, say), so
    # there is no address, hence no buffer or element to name.
    return KernelFault(
        "crash",
        f"SIGSEGV in {where}: general-protection fault in an instruction the simulator "
        f"could not decode, so the address and the buffer are unknown (an access through "
        f"a pointer read from uninitialised memory, or a misaligned 16-byte vector access?)",
        details,
    )


def _signal_crash(R: SimResult, guards, dialect, where: str, details: dict) -> KernelFault:
    """Any other signal: a null or stray pointer, or an arithmetic exception."""
    signame = SIGNAL_NAMES.get(int(R.sig), f"signal {R.sig}")
    details.update(signal=signame, address=int(R.addr))
    extra = ""
    if R.sig in (signal.SIGSEGV, signal.SIGBUS):
        # Not in any buffer's or threadgroup array's guard region: the
        # address belongs to none of them, so what is named is the nearest.
        details.update(buffer=None)
        access = _access_word(R)
        if R.addr < 65536:
            extra = (
                f": {access} through a null pointer (address {R.addr:#x}), which points into "
                f"no buffer or array (a pointer never set, or a call through a null one?)"
            )
        elif R.near_kind:
            near = _far_access(R, guards, dialect, where, details)
            if near is not None:
                return near
            if R.near_kind == 1:
                nearest = f"{guards[R.buf][1]} '{guards[R.buf][2]}'"
            else:
                nearest = _tg_array(R, dialect)[0]
            extra = (
                f": {access} at address {R.addr:#x}, which no buffer or threadgroup array "
                f"holds (the nearest, {nearest}, is {R.near_dist} bytes away); a stray "
                f"pointer, or an index far outside a thread-private array"
                f"{_uninitialised_hint(int(R.addr))}"
            )
            details.update(nearest=nearest, distance=int(R.near_dist))
        else:
            extra = (
                f": {access} at address {R.addr:#x}, which no buffer or array holds"
                f"{_uninitialised_hint(int(R.addr))}"
            )
    elif R.sig == signal.SIGFPE:
        # x86 raises #DE (FPE_INTDIV) for INT_MIN / -1 as for a zero divisor
        extra = {
            1: ": integer division by zero (or the overflow INT_MIN / -1)",
            2: ": integer overflow",
        }.get(int(R.code), ": arithmetic exception (integer division by zero?)")
    elif R.sig in (signal.SIGILL, signal.SIGTRAP):
        extra = (
            ": a trap instruction (__builtin_trap(), or one the compiler put on a path "
            "whose behaviour is undefined)"
        )
    elif R.sig == signal.SIGABRT:
        extra = ": abort() was called (a failed assert?)"
    return KernelFault("crash", f"{signame} in {where}{extra}", details)


def _far_access(R: SimResult, guards, dialect, where: str, details: dict) -> KernelFault | None:
    """A fault beyond every guard region, as an access to the nearest
    buffer or threadgroup array when a 32-bit index could reach it."""
    elem = int(R.elem)
    nbytes = guards[R.buf][0].nbytes if R.near_kind == 1 else int(R.tg_nelem * R.tg_esize)
    # Farther than this, a stray pointer is likelier than a bad index.
    if R.near_dist > max(64 << 20, 16 * nbytes):
        return None
    access = _access_word(R)
    if R.near_kind == 1:
        gb, role, name, isz = guards[R.buf]
        what, n = f"{role} '{name}'", gb.nbytes // max(1, isz)
        valid = f"valid elements 0..{n - 1}"
    else:
        what, name = _tg_array(R, dialect)
        role, n = "threadgroup", int(R.tg_nelem)
        valid = f"bound {n}"
    side = "before the start" if elem < 0 else "past the end"
    details.update(
        buffer=name,
        role=role,
        element=elem,
        access=access,
        address=int(R.addr),
        distance=int(R.near_dist),
    )
    return KernelFault(
        "out_of_bounds",
        f"out-of-bounds {access} of {what} at element {elem} ({side}, "
        f"{R.near_dist} bytes beyond it; {valid}) by {where}; the faulting "
        f"address {R.addr:#x} lies beyond every guard region, this is the "
        f"nearest buffer",
        details,
    )
