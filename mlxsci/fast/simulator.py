"""Running a `mlxsci.fast` kernel on the simulator, with the checks that make
a fault an exception.

One SimBackend per dialect per process (a kernel object keeps its own
SimKernel, so its compiled variants). A call launches the kernel once: the
threads in order, each buffer against the guard page after it, outputs
without init_value full of one garbage byte. That run's outputs are the
call's. Out-of-bounds accesses past the guard pages, writes to inputs,
barrier divergence, deadlocks, timeouts and launches over the GPU's limits
fail it, checks or not.

With checks on (the default) a second run changes every condition: threads
in reverse order, buffers against the guard page before them, another
garbage byte (0xFF: NaN as a float), and the runtime's checks on, run in the
profiled variant where the host builds one (x86-64): the first read of
threadgroup memory no thread of its group wrote, any access outside a
buffer's bytes (the alignment slack the guard pages miss included), a read
of output bytes nobody wrote. Then:

- an output element holding each run's own garbage was never written
  (UnwrittenOutputError, only without init_value);
- outputs that differ: a third run, the first's order with the second's
  memory, tells a dependence on the order (RaceError, naming the threads
  that store to the element; an OrderDependenceWarning for kernels that use
  atomics, whose order may legitimately show) from one on memory nobody
  wrote (UninitializedReadError);
- where nothing above fired, one more run in the profiled variant with the
  race detector on: a data race on an input or output (two threads'
  stores, neither atomic, nothing ordering them, the later one changing the
  element) is a RaceError naming the element and both threads
  (runtime/sim_race.inc). For a kernel that uses atomics that run has each
  simdgroup's lanes in lock-step, taking turns at every device-memory
  access as a GPU's lanes do: an integer output that then differs from the
  first run's lost updates to a read-modify-write that is not one atomic
  operation (RaceError).

Where the host has no profiled variant, threadgroup reads before any write
are found by one more run with that memory zeroed instead of poisoned.
"""

from __future__ import annotations

import re
import sys
import warnings
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlxsci.backends.sim.abi import FORWARD_SCHEDULE, LOCKSTEP_SCHEDULE, REVERSED_SCHEDULE
from mlxsci.backends.sim.buffers import GARBAGE_BYTE, host_bytes
from mlxsci.backends.sim.profile import supported as profile_supported
from mlxsci.fast import errors
from mlxsci.fast.arguments import Call
from mlxsci.fast.definition import KernelDefinition
from mlxsci.kernel import dialects
from mlxsci.kernel.signature import ArgInfo, dtype_name
from mlxsci.kernel.spec import CompileError, KernelFault

# The checked run's garbage: no byte of the first's, so an element holding
# each run's own garbage was written by nobody; NaN as a float, so a value
# computed from it shows.
SECOND_GARBAGE = 0xFF

_BACKENDS: dict = {}
_announced = False


def backend_for(dialect: str):
    """This process's SimBackend of `dialect` (made at first use)."""
    backend = _BACKENDS.get(dialect)
    if backend is None:
        from mlxsci.backends.sim import SimBackend

        SimBackend.check_machine()
        backend = _BACKENDS[dialect] = SimBackend(dialect=dialect)
    return backend


def _announce_compile(name: str, seconds: float) -> None:
    """Once per process, where a first call spent noticeable time compiling."""
    global _announced
    if _announced or seconds < 0.5:
        return
    _announced = True
    from mlxsci.backends.sim import toolchain

    print(
        f"[mlxsci.fast] compiled kernel '{name}' for the simulator in {seconds:.1f} s; "
        f"compiled variants are cached in {toolchain.cache_dir()} and reused by later "
        "calls and processes",
        file=sys.stderr,
    )


def _bits(a: mx.array) -> np.ndarray:
    """An output's elements as unsigned integers of their width (bitwise
    comparable: NaNs compare by their bits); rows of bytes for a width
    with no integer type."""
    host = np.ascontiguousarray(host_bytes(a)).reshape(-1)
    if host.itemsize in (1, 2, 4, 8):
        return host.view(f"u{host.itemsize}")
    return host.view(np.uint8).reshape(host.size, host.itemsize)


def _filled(bits: np.ndarray, byte: int) -> np.ndarray:
    """Which elements hold nothing but `byte`."""
    if bits.ndim == 1:
        return bits == int.from_bytes(bytes([byte]) * bits.itemsize, "little")
    return np.all(bits == byte, axis=1)


def _differ(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    d = x != y
    return d if d.ndim == 1 else np.any(d, axis=1)


def _index(shape: tuple, flat: int) -> tuple:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _value(a: mx.array, flat: int):
    host = np.asarray(host_bytes(a)).reshape(-1)
    v = host[flat]
    if a.dtype == mx.bfloat16:  # its uint16 view: show the value
        return float(np.array([int(v) << 16], np.uint32).view(np.float32)[0])
    return v.item()


# The runtime's optional checks a launch may ask for (SimBackend attributes,
# all off by default): reads of threadgroup memory nobody wrote, accesses
# outside a buffer's bytes (the alignment slack included), reads of output
# bytes nobody wrote. The race detector has a run of its own (Run.races).
CHECK_FLAGS = ("check_threadgroup_reads", "check_device_bounds", "check_output_reads")

# Calls to atomic operations in either dialect (comments stripped first).
_ATOMIC_CALL = re.compile(r"\b(atomic_\w+|atomic[A-Z]\w*)\s*\(")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


@dataclass(frozen=True)
class Run:
    """How one launch runs (see SimRunner._launch)."""

    schedule: int = FORWARD_SCHEDULE  # the order threads run in
    garbage: int = GARBAGE_BYTE  # what outputs without init_value hold before it
    placement: str = "end"  # buffers against the guard page after ("end") or before ("start")
    tg_fill: int | None = None  # threadgroup memory's fill (None: the poison)
    checked: bool = False  # the runtime's checks on (the profiled variant)
    races: bool = False  # the race detector on (the profiled variant)
    watch: tuple[str, int] | None = None  # record the stores to (buffer, element)


FIRST = Run()
# The checked run: every condition the first run fixed, changed.
SECOND = Run(REVERSED_SCHEDULE, SECOND_GARBAGE, "start", checked=True)
# The first run's order with the second's memory: tells a dependence on the
# order (a race) from one on memory nobody wrote.
THIRD = Run(FORWARD_SCHEDULE, SECOND_GARBAGE, "start")
# The race detector's run, once the others found nothing: a data race named
# (RaceError), after the checks that say more about what the kernel read.
RACES = Run(races=True)
# The same with each simdgroup's lanes in lock-step (a kernel with atomics):
# lost updates too.
LOCKSTEP = Run(LOCKSTEP_SCHEDULE, races=True)
# Zero bytes in the outputs: tells an element no thread wrote from one
# computed from garbage (which may keep the garbage's bits).
ZEROED = Run(FORWARD_SCHEDULE, 0x00, "start")


class SimRunner:
    """A kernel definition's simulator side: its SimKernel and its checks."""

    def __init__(self, definition: KernelDefinition):
        self.definition = definition
        self._kernel = None

    def _sim_kernel(self):
        if self._kernel is None:
            k = backend_for(self.definition.dialect).kernel(self.definition.spec())
            self._kernel = k
        return self._kernel

    # -- one launch ---------------------------------------------------------
    def _launch(self, call: Call, run: Run = FIRST) -> list:
        """One launch as `run` says; the runtime's faults as mlxsci.fast's
        exceptions. `run.checked` turns on the runtime's checks where the
        host builds the profiled variant they run in."""
        k = self._sim_kernel()
        backend = k.backend
        settings = {
            "schedule": run.schedule,
            "output_garbage": run.garbage,
            "placement": run.placement,
            "tg_fill": run.tg_fill,
            "watch_writes": run.watch,
            "refuse_input_writes": True,
            **{flag: run.checked and profile_supported() for flag in CHECK_FLAGS},
            "check_device_races": run.races and profile_supported(),
        }
        saved = {name: getattr(backend, name, None) for name in settings}
        for name, value in settings.items():
            setattr(backend, name, value)
        compiled_before = k.compile_seconds
        try:
            return k(
                inputs=list(call.inputs),
                output_shapes=list(call.output_shapes),
                output_dtypes=list(call.output_dtypes),
                grid=call.grid,
                threadgroup=call.threadgroup,
                template=list(call.template) or None,
                init_value=call.init_value,
                as_stored=not self.definition.ensure_row_contiguous,
            )
        except KernelFault as fault:
            raise errors.from_fault(self.definition.name, fault) from None
        except CompileError as exc:
            where = self.definition.where(exc.line)
            raise errors.CompileError(
                self.definition.name,
                f"does not compile{': ' + where if where else ''}: {exc.message}"
                + (f"\n{exc.log}" if exc.log else ""),
                {"line": exc.line, "where": where, "log": exc.log},
            ) from None
        finally:
            for name, value in saved.items():
                setattr(backend, name, value)
            _announce_compile(self.definition.name, k.compile_seconds - compiled_before)

    # -- the call -----------------------------------------------------------
    def run(self, call: Call, checks: bool) -> list:
        """The outputs of the first run; with `checks`, the error the other
        runs expose, if any (the module's docstring)."""
        self._check_types(call)
        if call.verbose:
            self.print_source(call)
        first = self._launch(call, FIRST)
        if not checks:
            return first
        if not profile_supported() and self._sim_kernel().group_memory_bytes() > 0:
            self._check_group_memory_by_fill(call, first)
        second = self._second_run(call)
        if call.init_value is None:
            self._check_written(call, first, second)
        self._check_same(call, first, second)
        if profile_supported():
            if self._uses_atomics():
                self._check_lockstep(call, first)
            else:
                self._launch(call, RACES)
        return first

    def _check_types(self, call: Call) -> None:
        """Metal has no double: a float64 input or output does not compile on a Mac."""
        table = dialects.get(self.definition.dialect)
        if table.has_float64:
            return
        d = self.definition
        dtypes = [a.dtype for a in call.inputs] + list(call.output_dtypes)
        for name, dtype in zip(d.input_names + d.output_names, dtypes):
            if dtype == mx.float64:
                raise errors.CompileError(
                    self.definition.name,
                    f"'{name}' is float64, and {table.language} has no double: MLX's "
                    f"{table.mlx_constructor} cannot compile it on a GPU",
                    {"buffer": name},
                )

    def _second_run(self, call: Call) -> list:
        """The checked run. A fault only it finds: the checks' own (bounds,
        reads of memory nobody wrote) stand as they are; any other happened
        only in reverse order."""
        try:
            return self._launch(call, SECOND)
        except (
            errors.OutOfBoundsError,
            errors.UninitializedReadError,
            errors.InputWriteError,
            errors.CompileError,
        ):
            raise
        except errors.KernelError as exc:
            raise type(exc)(
                self.definition.name,
                str(exc).split(": ", 1)[1]
                + " (only with the threads in reverse order: the kernel depends on the "
                "order a GPU runs threads in)",
                dict(exc.details, schedule="reversed"),
            ) from None

    def print_source(self, call: Call) -> None:
        """What MLX prints with verbose=True: the generated source (without
        the preamble MLX compiles before it), on sys.stdout."""
        table = dialects.get(self.definition.dialect)
        infos = [ArgInfo.of(a) for a in call.inputs]
        out = [dtype_name(d) for d in call.output_dtypes]
        gen = table.source(self.definition.spec(), infos, out, list(call.template) or None)
        shown = gen.kernel_name if table.verbose_shows_kernel_name else self.definition.name
        print(f"Generated source code for `{shown}`:\n```\n{gen.text}\n```", flush=True)

    # -- the checks ---------------------------------------------------------
    def _check_written(self, call: Call, first: list, second: list) -> None:
        """Output elements holding each run's own garbage. A value computed
        from garbage can keep it (1.5e16 + 1 is 1.5e16; NaN + 1 is NaN), so
        whether the first such element was stored at all is asked of the
        profiled variant's watch (elsewhere: of a run with zero bytes in the
        outputs, where an element nobody wrote stays zero)."""
        suspects = {}
        for name, a, b in zip(self.definition.output_names, first, second):
            if a.size:
                held = _filled(_bits(a), GARBAGE_BYTE) & _filled(_bits(b), SECOND_GARBAGE)
                if held.any():
                    suspects[name] = (a, held)
        if not suspects:
            return
        zeroed = dict(zip(self.definition.output_names, self._launch(call, ZEROED)))
        for name, (a, held) in suspects.items():
            unwritten = held & _filled(_bits(zeroed[name]), 0x00)
            if not unwritten.any() or self._stored(call, name, int(np.argmax(held))):
                self._memory_dependent(call, name, a, zeroed[name])
            count = int(unwritten.sum())
            if count:
                flat = int(np.argmax(unwritten))
                raise errors.UnwrittenOutputError(
                    self.definition.name,
                    f"{count} of the {a.size} elements of output '{name}' were written by no "
                    f"thread, the first at index {_index(a.shape, flat)} (flat {flat}); without "
                    "init_value a GPU leaves whatever the recycled buffer held there. Write "
                    "every element, or pass init_value.",
                    {
                        "buffer": name,
                        "element": flat,
                        "count": count,
                        "index": _index(a.shape, flat),
                    },
                )

    def _check_lockstep(self, call: Call, first: list) -> None:
        """The lock-step run's integer outputs against the first run's: a
        count, a slot or a histogram bin an atomic operation keeps exact in
        any order, which lanes taking turns change only where a
        read-modify-write is split into two operations (float outputs may
        round differently in another order and are left to _check_same)."""
        lockstep = self._launch(call, LOCKSTEP)
        for name, a, b in zip(self.definition.output_names, first, lockstep):
            if not mx.issubdtype(a.dtype, mx.integer):
                continue
            differ = _differ(_bits(a), _bits(b))
            if not differ.any():
                continue
            flat = int(np.argmax(differ))
            idx = _index(a.shape, flat)
            raise errors.RaceError(
                self.definition.name,
                f"output '{name}' loses updates when a simdgroup's lanes run in lock-step, "
                f"as on a GPU: element {idx} (flat {flat}) is {_value(a, flat)!r} with the "
                f"threads one after another and {_value(b, flat)!r} with the lanes taking "
                f"turns at each device-memory access ({int(differ.sum())} element(s) "
                "differ). A read-modify-write split into a load and a store, even two "
                "atomic ones, is not atomic: use one atomic operation (atomic_fetch_add_"
                "explicit, atomicAdd).",
                {"buffer": name, "element": flat, "index": idx, "schedule": "lockstep"},
            )

    def _uses_atomics(self) -> bool:
        d = self.definition
        code = _COMMENT.sub(" ", d.header + "\n" + d.source)
        return d.atomic_outputs or bool(_ATOMIC_CALL.search(code))

    def _check_same(self, call: Call, first: list, second: list) -> None:
        """Outputs that differ between the first and the checked run: a
        third run in the first's order with the second's memory says
        whether the order or the memory made the difference."""
        differing = [
            (name, a, b)
            for name, a, b in zip(self.definition.output_names, first, second)
            if _differ(_bits(a), _bits(b)).any()
        ]
        if not differing:
            return
        third = self._launch(call, THIRD)
        by_name = dict(zip(self.definition.output_names, third))
        for name, a, b in differing:
            c = by_name[name]
            by_order = _differ(_bits(c), _bits(b))
            if by_order.any():
                self._order_dependent(call, name, c, b, by_order)
            else:
                self._memory_dependent(call, name, a, c)

    def _order_dependent(self, call: Call, name: str, a, b, differ: np.ndarray) -> None:
        flat = int(np.argmax(differ))
        count = int(differ.sum())
        idx = _index(a.shape, flat)
        what = (
            f"output '{name}' depends on the order threads run in: element {idx} "
            f"(flat {flat}) is {_value(a, flat)!r} with the threads in order and "
            f"{_value(b, flat)!r} in reverse order ({count} element(s) differ)"
        )
        if self._uses_atomics():
            warnings.warn(
                f"[mlxsci.fast] kernel '{self.definition.name}': {what}. It uses atomics, so "
                "this may be intended (float atomic sums round differently in another order, "
                "atomic compaction orders its output differently); it is not checked further.",
                errors.OrderDependenceWarning,
                stacklevel=2,
            )
            return
        writers, why = self._writers(call, name, flat)
        raise errors.RaceError(
            self.definition.name,
            f"{what}; {why}. A GPU orders neither threadgroups nor simdgroups/warps.",
            {
                "buffer": name,
                "element": flat,
                "count": count,
                "index": idx,
                "writers": writers,
                **(
                    {"thread": writers[0]["thread"], "group": writers[0]["group"]}
                    if writers
                    else {}
                ),
            },
        )

    def _memory_dependent(self, call: Call, name: str, a, c) -> None:
        differ = _differ(_bits(a), _bits(c))
        flat = int(np.argmax(differ))
        idx = _index(a.shape, flat)
        raise errors.UninitializedReadError(
            self.definition.name,
            f"output '{name}' depends on memory the kernel never wrote: element {idx} (flat "
            f"{flat}) is {_value(a, flat)!r} or {_value(c, flat)!r} as the garbage in its "
            "outputs changes. It reads an output element before any thread wrote it: its "
            "own (pass init_value, or write before reading) or another thread's (a race: "
            "nothing orders threads' device-memory writes within a launch).",
            {"buffer": name, "element": flat, "index": idx},
        )

    def _watched(self, call: Call, name: str, flat: int) -> tuple[list[dict], int]:
        """The stores to element `flat` of output `name` with the threads in
        order, as the profiled variant's watch records them: (the first
        stores' group and thread, how many there were)."""
        backend = self._sim_kernel().backend
        self._launch(call, Run(watch=(name, flat)))
        return [dict(w) for w in backend.watched_writes], backend.watched_write_count

    def _stored(self, call: Call, name: str, flat: int) -> bool:
        """Whether any thread stores to element `flat` of output `name`
        (False where the host has no profiled variant to watch with)."""
        return profile_supported() and self._watched(call, name, flat)[1] > 0

    def _writers(self, call: Call, name: str, flat: int) -> tuple[list, str]:
        """Who stores to element `flat` of output `name` (_watched), and a
        sentence on what that says about the race."""
        if not profile_supported():
            return [], "which threads wrote it is not known on this host"
        try:
            writers, total = self._watched(call, name, flat)
        except errors.KernelError:
            return [], "which threads wrote it could not be found"
        word = self._sim_kernel().dialect.group_word
        if not writers:
            return [], "no store to it was seen (written through memcpy or a wide store?)"
        threads = {(tuple(w["group"]), tuple(w["thread"])) for w in writers}
        if len(threads) == 1 and total == len(writers):
            w = writers[0]
            stores = "once" if total == 1 else f"{total} times"
            return writers, (
                f"one thread writes it ({stores}), thread {tuple(w['thread'])} of {word} "
                f"{tuple(w['group'])}: it computed from a value another thread writes "
                "(a missing barrier?)"
            )
        listed = ", ".join(
            f"thread {tuple(w['thread'])} of {word} {tuple(w['group'])}" for w in writers[:4]
        )
        more = f" and {total - 4} more" if total > 4 else ""
        return writers, f"{total} stores write it: {listed}{more}; the last one wins"

    def _check_group_memory_by_fill(self, call: Call, first: list) -> None:
        """Where the host builds no profiled variant (so no exact check): a
        run with threadgroup memory zeroed instead of poisoned; outputs that
        change show a read of it before any thread of the group wrote it."""
        zeroed = self._launch(call, Run(tg_fill=0x00))
        word = dialects.get(self.definition.dialect).group_memory
        for name, a, b in zip(self.definition.output_names, first, zeroed):
            differ = _differ(_bits(a), _bits(b))
            if differ.any():
                flat = int(np.argmax(differ))
                idx = _index(a.shape, flat)
                raise errors.UninitializedReadError(
                    self.definition.name,
                    f"reads {word} memory before any thread of its group wrote it: output "
                    f"'{name}' element {idx} (flat {flat}) is {_value(a, flat)!r} with that "
                    f"memory poisoned and {_value(b, flat)!r} with it zeroed; on a GPU it holds "
                    "whatever the last group left there (a missing barrier between the writes "
                    "and the reads?)",
                    {"buffer": name, "element": flat, "index": idx},
                )
