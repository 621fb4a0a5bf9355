"""Running a `mlxsci.fast` kernel on the simulator, with the checks that make
a fault an exception.

One SimBackend per dialect per process (a kernel object keeps its own
SimKernel, so its compiled variants). A call launches the kernel once with
the threads in order; with checks on (the default) it launches it again:

- with the threads in reverse order and another garbage byte in the
  outputs: an output element that still holds each run's garbage was never
  written (UnwrittenOutputError, only without init_value); one that differs
  otherwise depends on the order threads run in (RaceError);
- where the kernel uses threadgroup/shared memory, once more with that
  memory zeroed instead of poisoned: outputs that change read it before any
  thread wrote it (UninitializedReadError).

Out-of-bounds accesses, barrier divergence, deadlocks, timeouts and launches
over the GPU's limits are caught in every run, checks or not (guard pages and
the runtime: docs/simulator.md).
"""

from __future__ import annotations

import sys

import mlx.core as mx
import numpy as np

from mlxsci.backends.sim.abi import FORWARD_SCHEDULE, REVERSED_SCHEDULE
from mlxsci.backends.sim.buffers import GARBAGE_BYTE, host_bytes
from mlxsci.backends.sim.profile import supported as profile_supported
from mlxsci.fast import errors
from mlxsci.fast.arguments import Call
from mlxsci.fast.definition import KernelDefinition
from mlxsci.kernel import dialects
from mlxsci.kernel.signature import ArgInfo, dtype_name
from mlxsci.kernel.spec import CompileError, KernelFault

# The second run's garbage: no byte of the first's, so an element holding
# each run's own garbage was written by nobody.
SECOND_GARBAGE = 0xA5

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


class SimRunner:
    """A kernel definition's simulator side: its SimKernel and its checks."""

    def __init__(self, definition: KernelDefinition):
        self.definition = definition
        self._kernel = None

    def _sim_kernel(self):
        if self._kernel is None:
            self._kernel = backend_for(self.definition.dialect).kernel(self.definition.spec())
        return self._kernel

    # -- one launch ---------------------------------------------------------
    def _launch(
        self,
        call: Call,
        schedule: int,
        garbage: int,
        tg_fill=None,
        check_reads: bool = False,
        watch: tuple[str, int] | None = None,
    ) -> list:
        """One launch: threads in `schedule` order, outputs without
        init_value filled with `garbage`, threadgroup memory with `tg_fill`
        (None: the poison); `check_reads`: the profiled variant names the first
        read of threadgroup memory nobody wrote; `watch`: it records who
        stores to (buffer, element) (backend.watched_writes)."""
        k = self._sim_kernel()
        backend = k.backend
        saved = (
            backend.schedule,
            backend.output_garbage,
            backend.tg_fill,
            backend.check_threadgroup_reads,
            backend.watch_writes,
        )
        backend.schedule, backend.output_garbage, backend.tg_fill = schedule, garbage, tg_fill
        backend.check_threadgroup_reads, backend.watch_writes = check_reads, watch
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
            (
                backend.schedule,
                backend.output_garbage,
                backend.tg_fill,
                backend.check_threadgroup_reads,
                backend.watch_writes,
            ) = saved
            _announce_compile(self.definition.name, k.compile_seconds - compiled_before)

    # -- the call -----------------------------------------------------------
    def run(self, call: Call, checks: bool) -> list:
        """The outputs of the in-order run; with `checks`, the error the
        other runs expose, if any."""
        if call.verbose:
            self.print_source(call)
        first = self._launch(call, FORWARD_SCHEDULE, GARBAGE_BYTE)
        if not checks:
            return first
        if self._sim_kernel().group_memory_bytes() > 0:
            self._check_group_memory(call, first)
        try:
            second = self._launch(call, REVERSED_SCHEDULE, SECOND_GARBAGE)
        except errors.KernelError as exc:
            raise type(exc)(
                self.definition.name,
                str(exc).split(": ", 1)[1]
                + " (only with the threads in reverse order: the kernel depends on the "
                "order a GPU runs threads in)",
                dict(exc.details, schedule="reversed"),
            ) from None
        if call.init_value is None:
            self._check_written(first, second)
        self._check_same(call, first, second)
        return first

    def print_source(self, call: Call) -> None:
        """What MLX prints with verbose=True: the generated source (without
        the preamble MLX compiles before it), on sys.stdout."""
        k = self._sim_kernel()
        infos = [ArgInfo.of(a) for a in call.inputs]
        gen = k.dialect.generate(
            k.spec, infos, [dtype_name(d) for d in call.output_dtypes], list(call.template) or None
        )
        table = dialects.get(self.definition.dialect)
        shown = gen.kernel_name if table.verbose_shows_kernel_name else self.definition.name
        print(f"Generated source code for `{shown}`:\n```\n{gen.text}\n```", flush=True)

    # -- the checks ---------------------------------------------------------
    def _check_written(self, first: list, second: list) -> None:
        for name, a, b in zip(self.definition.output_names, first, second):
            if a.size == 0:
                continue
            unwritten = _filled(_bits(a), GARBAGE_BYTE) & _filled(_bits(b), SECOND_GARBAGE)
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

    def _uses_atomics(self) -> bool:
        d = self.definition
        return d.atomic_outputs or "atomic" in d.source or "atomic" in d.header

    def _check_same(self, call: Call, first: list, second: list) -> None:
        for name, a, b in zip(self.definition.output_names, first, second):
            differ = _differ(_bits(a), _bits(b))
            if not differ.any():
                continue
            if self._uses_atomics() and _rounding_only(a, b):
                # Atomic float updates in another order round differently on
                # a GPU too: not a race in the kernel's logic.
                continue
            flat = int(np.argmax(differ))
            count = int(differ.sum())
            idx = _index(a.shape, flat)
            writers, why = self._writers(call, name, flat)
            raise errors.RaceError(
                self.definition.name,
                f"output '{name}' depends on the order threads run in: element {idx} "
                f"(flat {flat}) is {_value(a, flat)!r} with the threads in order and "
                f"{_value(b, flat)!r} in reverse order ({count} element(s) differ); {why}. "
                "A GPU orders neither threadgroups nor simdgroups/warps.",
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

    def _writers(self, call: Call, name: str, flat: int) -> tuple[list, str]:
        """Who stores to element `flat` of output `name` with the threads in
        order (the profiled variant's watch), and a sentence on what that
        says about the race."""
        if not profile_supported():
            return [], "which threads wrote it is not known on this host"
        backend = self._sim_kernel().backend
        try:
            self._launch(call, FORWARD_SCHEDULE, GARBAGE_BYTE, watch=(name, flat))
        except errors.KernelError:
            return [], "which threads wrote it could not be found"
        writers = [dict(w) for w in backend.watched_writes]
        total = backend.watched_write_count
        word = self._sim_kernel().dialect.group_word
        if not writers:
            return [], "no store to it was seen (written through memcpy or a wide store?)"
        if total == 1:
            w = writers[0]
            return writers, (
                f"one thread writes it, thread {tuple(w['thread'])} of {word} "
                f"{tuple(w['group'])}: it computed from a value another thread writes "
                "(a missing barrier?)"
            )
        listed = ", ".join(
            f"thread {tuple(w['thread'])} of {word} {tuple(w['group'])}" for w in writers[:4]
        )
        more = f" and {total - 4} more" if total > 4 else ""
        return writers, f"{total} stores write it: {listed}{more}; the last one wins"

    def _check_group_memory(self, call: Call, first: list) -> None:
        """The first read of threadgroup memory no thread of its group wrote:
        named exactly (array, element, thread) by the profiled variant's
        check where the host builds one; else found by a run with that memory
        zeroed instead of poisoned, whose changed outputs show such a read."""
        if profile_supported():
            self._launch(call, FORWARD_SCHEDULE, GARBAGE_BYTE, check_reads=True)
            return
        zeroed = self._launch(call, FORWARD_SCHEDULE, GARBAGE_BYTE, tg_fill=0x00)
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


def _rounding_only(a: mx.array, b: mx.array) -> bool:
    """Whether two float outputs differ by rounding alone."""
    if not mx.issubdtype(a.dtype, mx.floating):
        return False
    x = np.asarray(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a).astype(np.float64)
    y = np.asarray(b.astype(mx.float32) if b.dtype == mx.bfloat16 else b).astype(np.float64)
    return bool(np.allclose(x, y, rtol=1e-4, atol=1e-6, equal_nan=True))
