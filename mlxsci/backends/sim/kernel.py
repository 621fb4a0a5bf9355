"""SimKernel: one kernel on the simulator. It compiles a variant per call
signature (the dialect's text, rewritten and built against the runtime),
checks each launch, fills guarded buffers, runs the variant through the
runtime bridge and turns what the runtime reports into outputs or a
KernelFault.
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from mlxsci import sandbox
from mlxsci.backends.base import Kernel, RunMode
from mlxsci.backends.sim import build, coverage, profile, time_model, variants
from mlxsci.backends.sim.abi import (
    FORWARD_SCHEDULE,
    LOCKSTEP_SCHEDULE,
    PROFILE_COUNTS,
    PROFILE_CYCLES,
    RESULT_NEED_FIBERS,
    RESULT_OK,
    REVERSED_SCHEDULE,
    SEED_STEP,
    SHUFFLED_SCHEDULE,
    UB_REASONS,
    SimGuard,
    SimLaunch,
    SimProfile,
    SimResult,
    libc,
    next_schedule_seed,
)
from mlxsci.backends.sim.buffers import (
    POOL,
    GuardedBuffer,
    fill_output,
    host_bytes,
    host_dtype,
    stored_span,
)
from mlxsci.backends.sim.faults import fault_of
from mlxsci.kernel.signature import (
    CUDA_MAX_NDIM,
    ArgInfo,
    dtype_name,
    template_kind,
    template_value,
)
from mlxsci.kernel.spec import KernelFault, KernelSpec
from mlxsci.protocol import undefined_reads

if TYPE_CHECKING:
    from mlxsci.backends.sim import SimBackend


def _to_mx(x):
    import mlx.core as mx

    if isinstance(x, mx.array):
        return x
    return mx.array(x)


_ARG_INFOS: dict = {}


def _arg_info(arr) -> ArgInfo:
    """ArgInfo.of(arr), made once per (dtype, shape)."""
    key = (arr.dtype, arr.shape)
    info = _ARG_INFOS.get(key)
    if info is None:
        info = _ARG_INFOS[key] = ArgInfo.of(arr)
    return info


# Launches run one at a time (the runtime's state and the buffer pool are per process).
_launch_lock = threading.Lock()


def _signature_key(infos, out_dtypes, template) -> tuple | None:
    """What the generated text depends on besides the kernel spec: input
    dtypes and shapes, output dtypes, template arguments (kind and value, so
    True and 1 differ). None when a template value has no key (the generator
    then reports it)."""
    try:
        targs = tuple(
            (name, template_kind(value), template_value(value)) for name, value in (template or ())
        )
    except (TypeError, ValueError, KeyError):
        return None
    return tuple(infos), tuple(out_dtypes), targs


@dataclass
class _Variant:
    """One compiled specialisation of a kernel (signature text -> library)."""

    entry: object
    params: tuple
    kernel_name: str
    needs_fibers: bool
    tgmem_bytes: int
    launch_error: str = ""
    # Built to count its branch arms (coverage.py): its launches take one more
    # buffer pointer, the kernel's counters, after its own.
    counted: bool = False
    # Built for the modelled GPU's clock (profile.py): its blocks' weights.
    profile: profile.Profile | None = None


# Launches of one kind after the first in a timed size are profiled one time
# in this many, drawn at random, up to PROFILE_MAX profiled launches of the
# kind (the rest are charged their kind's mean): a second draw where the
# work depends on the data, at a bounded cost.
PROFILE_ONE_IN = 8
PROFILE_MAX = 2
# The launches of a lock-step verification run, counted from its first, that
# run with the race detector when the kernel has no atomic operation (one
# that has runs every launch with it: its lanes take turns in every launch).
RACE_CHECKED_LAUNCHES = 8


@dataclass(frozen=True)
class _LaunchTiming:
    """How one launch is timed by the modelled GPU's clock."""

    kind: tuple  # kernel, grid, threadgroup, argument signature
    profile: bool  # this launch runs the profiled variant
    threads_per_group: int


ORDERS = {
    "forward": FORWARD_SCHEDULE,
    "reversed": REVERSED_SCHEDULE,
    "shuffled": SHUFFLED_SCHEDULE,
    "lockstep": LOCKSTEP_SCHEDULE,
}


@dataclass(frozen=True)
class LaunchMode:
    """What one launch runs under: its call's RunMode over the backend's own
    settings (those of a direct user of the backend: tests, mlxsci.fast)."""

    schedule: int
    seed: int | None  # a shuffled order's seed for this launch; None: the backend's own
    tg_fill: int | None
    counted: bool
    bounded: bool = False  # the bounds-checked variant (bounds.py)
    launch: int = 0  # its index in its run (RunMode.launch)

    @classmethod
    def of(cls, backend, mode: RunMode | None) -> LaunchMode:
        if mode is None:
            return cls(backend.schedule, None, backend.tg_fill, bool(backend.count_branches))
        schedule = backend.schedule if mode.order is None else ORDERS[mode.order]
        # One step on per launch of the run, from its seed (abi.next_schedule_seed's step).
        seed = (mode.order_seed + mode.launch * SEED_STEP) % (1 << 64)
        return cls(
            schedule,
            seed if schedule == SHUFFLED_SCHEDULE else None,
            mode.tg_fill if mode.tg_fill is not None else backend.tg_fill,
            mode.count_branches or bool(backend.count_branches),
            mode.check_bounds,
            mode.launch,
        )


class SimKernel(Kernel):
    """One KernelSpec on a SimBackend: called like MLX's kernel object."""

    def __init__(self, backend: SimBackend, spec: KernelSpec):
        if not spec.output_names:
            raise ValueError(f"{backend.sim_dialect.tag} Must specify at least one output.")
        self.backend = backend
        self.spec = spec
        self.dialect = backend.sim_dialect
        self._variants: dict[str, _Variant] = {}
        # The same variants by call signature, so a repeated launch generates no text.
        self._by_signature: dict[tuple, _Variant] = {}
        # (grid, threadgroup) -> the launch dimensions, for launches that passed the checks.
        self._dims: dict[tuple, tuple] = {}
        self.launches = 0
        self.compile_seconds = 0.0  # time spent generating, compiling and loading variants
        self._needs_fibers = self.dialect.needs_fibers(spec)
        # The counters of the counted variants' launches (all variants of a
        # kernel share its arms: coverage.instrument_spec), made at the first.
        self._counts: ctypes.Array | None = None

    def _variant(
        self,
        infos,
        out_dtypes,
        template,
        profiled: bool = False,
        counted: bool = False,
        bounded: bool = False,
    ) -> _Variant:
        """The compiled variant for this call signature; generated text is
        produced only for a signature not seen before. `profiled`: the build
        the modelled GPU's clock counts with (profile.py); `counted`: the one
        that counts its branch arms (coverage.py); `bounded`: the one that
        checks indices into arrays of known bound (bounds.py)."""
        counted = (counted or bool(self.backend.count_branches)) and not (profiled or bounded)
        key = _signature_key(infos, out_dtypes, template)
        key = key + (counted, profiled, bounded) if key is not None else None
        v = self._by_signature.get(key) if key is not None else None
        if v is None:
            v = self._variant_of_text(infos, out_dtypes, template, counted, profiled, bounded)
            if key is not None:
                self._by_signature[key] = v
        return v

    def _variant_of_text(
        self, infos, out_dtypes, template, counted: bool, profiled: bool = False, bounded=False
    ) -> _Variant:
        spec = self.spec
        gen = self.dialect.generate(spec, infos, out_dtypes, template)
        key = (
            gen.text
            + "\0"
            + gen.line1
            + ("\0counted" if counted else "")
            + ("\0profiled" if profiled else "")
            + ("\0bounded" if bounded else "")
        )
        v = self._variants.get(key)
        if v is not None:
            return v
        started = time.perf_counter()
        if variants.REMOTE is not None:  # a sandboxed worker: its parent builds
            so = variants.REMOTE(
                variants.request(
                    self.dialect.name,
                    spec,
                    infos,
                    out_dtypes,
                    template,
                    self.backend.extra_defines,
                    counted,
                    profiled,
                    bounded,
                )
            )
        else:
            so = variants.variant_library(
                self.dialect, spec, gen, self.backend.extra_defines, counted, profiled, bounded
            )
        described = profile.read_description(so) if profiled else None
        sandbox.seal()  # no thread can start once candidate code is in the process
        lib = build.load_library(so)
        # lib[...] makes a function object of our own (getattr caches one per
        # library, shared with any other user of the same loaded library).
        entry = lib["__sim_entry"]
        entry.restype = ctypes.c_int64
        entry.argtypes = [ctypes.POINTER(SimLaunch), ctypes.POINTER(SimResult)]
        tgb = lib["__sim_tgmem_bytes"]
        tgb.restype = ctypes.c_int64
        v = _Variant(
            entry,
            gen.params,
            gen.kernel_name,
            self._needs_fibers,
            int(tgb()),
            gen.launch_error,
            counted,
            described,
        )
        self._variants[key] = v
        self.compile_seconds += time.perf_counter() - started
        return v

    def group_memory_bytes(self) -> int:
        """The most threadgroup/shared memory any variant built so far uses
        (static arrays and dynamic shared memory)."""
        return max((v.tgmem_bytes for v in self._variants.values()), default=0)

    # -- call -------------------------------------------------------------
    def __call__(
        self,
        *,
        inputs,
        output_shapes,
        output_dtypes,
        grid,
        threadgroup,
        template=None,
        init_value=None,
        as_stored: bool = False,
        mode: RunMode | None = None,
    ):
        """MLX's kernel call, run now. `as_stored`: inputs are passed as
        stored, strides and offset included (MLX's ensure_row_contiguous=False:
        a kernel that ignores `*_strides` reads the storage order, as on a
        GPU); otherwise each input is its row-contiguous copy. `mode`: how
        this run's launches run (RunMode: its order, threadgroup fill,
        counted variants), over the backend's own settings where it says."""
        spec = self.spec
        how = LaunchMode.of(self.backend, mode)
        if len(inputs) != len(spec.input_names):
            raise ValueError(
                f"{self.dialect.tag} Expected `inputs` to have size {len(spec.input_names)} "
                f"but got size {len(inputs)}."
            )
        if len(output_shapes) != len(spec.output_names) or len(output_dtypes) != len(
            spec.output_names
        ):
            raise ValueError(
                f"{self.dialect.tag} Expected `output_shapes` and `output_dtypes` to have "
                f"size {len(spec.output_names)}."
            )
        grid = tuple(int(g) for g in grid)
        tg = tuple(int(t) for t in threadgroup)
        if len(grid) != 3 or len(tg) != 3:
            raise KernelFault("launch", "grid and threadgroup must have three dimensions")
        if any(g <= 0 for g in grid) or any(t <= 0 for t in tg):
            raise KernelFault("launch", f"grid {grid} and threadgroup {tg} must be positive")
        if any(g >= 2**31 for g in grid) or any(t >= 2**31 for t in tg):
            raise KernelFault("launch", "grid and threadgroup dimensions must be below 2^31")
        dims = self._dims.get((grid, tg))
        if dims is None:  # checked once per shape: a refused launch raises every time
            dims = self._dims[(grid, tg)] = self.dialect.launch_dims(spec.name, grid, tg)
        grid, tgc, ngroups = dims

        arrays = [_to_mx(x) for x in inputs]
        infos = [_arg_info(a) for a in arrays]
        out_names = [dtype_name(d) for d in output_dtypes]
        v = self._variant(infos, out_names, template, counted=how.counted, bounded=how.bounded)
        if v.launch_error:
            raise KernelFault("launch", v.launch_error)
        self.dialect.check_tgmem(spec, v.tgmem_bytes)
        # The counted and bounds-checked variants are never timed, nor hooked.
        plain = not (how.counted or how.bounded)
        timing = self._timing_of(v, grid, tgc, infos, out_names) if plain else None
        # The backend's opt-in checks run in the profiled variant's hooks.
        # The lock-step run: the race detector in those hooks, and lanes that
        # take turns at every device access where an atomic operation could
        # be split in two (a kernel without atomics loses no update the
        # detector does not report as a race: it runs in its usual order,
        # without the switches' cost).
        lockstep = False
        detect = plain and how.schedule == LOCKSTEP_SCHEDULE and profile.supported()
        if detect:
            described = self._variant(infos, out_names, template, profiled=True).profile
            lockstep = described is None or described.atomics
            # Without atomics the run is the detector's alone, and a race a
            # kernel has is in its first launches as in its last: the rest of
            # the run goes without the hooks (hmc's first in-dist size ran 200
            # launches of one kernel, 80 % of the size's time, with them all).
            detect = lockstep or how.launch < RACE_CHECKED_LAUNCHES
        checks = (
            profile.checks_of(
                self.backend, v.tgmem_bytes, init_value, lockstep=lockstep, races=detect
            )
            if plain
            else None
        )
        if (timing is not None and timing.profile) or checks is not None:
            v = self._variant(infos, out_names, template, profiled=True)

        with _launch_lock:
            placement = self.backend.placement
            end_aligned = self.launches % 2 == 0 if placement is None else placement == "end"
            self.launches += 1
            # Lock-step lanes take turns, which only fibers can.
            use_fibers = v.needs_fibers or self.backend.force_fibers or lockstep
            while True:
                outcome = self._launch(
                    v,
                    arrays,
                    infos,
                    out_names,
                    output_shapes,
                    grid,
                    tgc,
                    ngroups,
                    init_value,
                    end_aligned,
                    use_fibers,
                    timing,
                    as_stored,
                    checks,
                    how,
                )
                if outcome == "retry_with_fibers":
                    use_fibers = True
                    if checks is not None:
                        checks.restart()
                    continue
                if outcome == "run_again":  # the checks settle a report (profile.Checks)
                    continue
                return outcome

    def _launch(
        self,
        v,
        arrays,
        infos,
        out_names,
        output_shapes,
        grid,
        tgc,
        ngroups,
        init_value,
        end_aligned,
        use_fibers,
        timing=None,
        as_stored=False,
        checks=None,
        how: LaunchMode | None = None,
    ):
        """One run of variant `v`: the outputs, or "retry_with_fibers" where
        the runtime asks for one fiber per thread, or "run_again" where the
        `checks` (profile.Checks) need another run; a KernelFault for a fault
        found during or after the run. The buffers go back to the pool only
        after a clean launch."""
        bufs = _LaunchBuffers()
        clean = False  # the buffers may go back to the pool
        try:
            # The output-read check's runs fill outputs without init_value with their own byte.
            garbage = self.backend.output_garbage if checks is None else checks.output_fill
            self._fill_buffers(
                bufs,
                v,
                arrays,
                infos,
                out_names,
                output_shapes,
                init_value,
                end_aligned,
                as_stored,
                garbage,
            )
            before = self._pass_counters(v, bufs)
            launch = self._launch_record(v, bufs, grid, tgc, ngroups, use_fibers, how)
            if checks is not None:
                checks.attach(launch, bufs.guards)
            profiled = timing is not None and timing.profile
            counts = self._profile_record(v, launch, bufs) if profiled else None
            R = SimResult()
            kind = v.entry(ctypes.byref(launch), ctypes.byref(R))
            if kind == RESULT_NEED_FIBERS:
                if before is not None:  # the launch runs again from the start
                    ctypes.memmove(self._counters(), before, len(before))
                return "retry_with_fibers"
            if checks is not None and checks.rerun(kind):
                return "run_again"
            self.backend.undefined_reads = undefined_reads.merge(
                self.backend.undefined_reads, _undefined_reads_of(R)
            )
            if kind != RESULT_OK:
                fault = fault_of(
                    R,
                    bufs.guards,
                    bufs.dtypes,
                    self.dialect,
                    self.backend,
                    self.spec.name,
                    self.spec,
                    checks.record if checks is not None else None,
                )
                raise _with_undefined_reads(fault, self.backend.undefined_reads)
            if self.backend.activity is not None:  # the sim timer is listening
                # The modelled GPU's time (docs/simulator-time.md), then the host's CPU time.
                seconds = self._modelled_seconds(R, counts, timing, v, bufs)
                self.backend.activity.append((self.spec.name, seconds, R.cpu_ns * 1e-9))
            _check_slack(bufs.guards)
            _copy_back_inputs(bufs.inputs, self.backend.refuse_input_writes)
            outs = _read_outputs(bufs.outputs)
            clean = True
            return outs
        finally:
            bufs.release(clean)

    # -- the modelled GPU's clock ------------------------------------------
    def _timing_of(self, v, grid, tgc, infos, out_names) -> _LaunchTiming | None:
        """How this launch is timed while the sim timer listens with a
        modelled GPU: profiled (the first launch of its kind in a timed size,
        and one in PROFILE_ONE_IN of the later ones up to PROFILE_MAX, drawn
        by the backend's profile_rng where the kernel cannot see it), or
        charged the mean of its kind's profiled launches so far. None: nobody
        is timing, or the host-time clock is in force."""
        backend = self.backend
        if backend.activity is None or backend.launch_models is None:
            return None
        if backend.count_branches or backend.host_clock:
            return None
        # This kernel object (a comparison times two candidates' kernels of one
        # name and shape in one timer), its launch shape and signature.
        kind = (id(self), self.spec.name, tuple(grid), tuple(tgc), tuple(infos), tuple(out_names))
        seen = backend.launch_models.get(kind)
        draw = seen is None or (
            len(seen) < PROFILE_MAX and backend.profile_rng.randrange(PROFILE_ONE_IN) == 0
        )
        return _LaunchTiming(kind, draw, int(tgc[0] * tgc[1] * tgc[2]))

    def _profile_record(self, v: _Variant, launch: SimLaunch, bufs) -> SimProfile | None:
        """The counters of a profiled variant's launch, pointed to by `launch`."""
        if v.profile is None:
            return None
        gpu = self.backend.gpu
        weights = v.profile.weights
        flat = (ctypes.c_int32 * max(1, 4 * len(weights)))(*[x for w in weights for x in w])
        P = SimProfile()
        P.weights = ctypes.cast(flat, ctypes.POINTER(ctypes.c_int32))
        P.n_blocks = len(weights)
        P.n_sites = v.profile.sites
        P.simd_width = gpu.simd_width
        P.sector_bytes = gpu.sector_bytes
        P.tg_banks = gpu.tg_banks
        P.tg_bank_bytes = gpu.tg_bank_bytes
        for name, value in time_model.costs(gpu).items():
            setattr(P, name, value)
        # A large launch counts a sample of its groups, drawn by a key the
        # kernel cannot see (time_model.sample_fraction).
        total = launch.ngroups[0] * launch.ngroups[1] * launch.ngroups[2]
        per_group = launch.tg[0] * launch.tg[1] * launch.tg[2]
        fraction = time_model.sample_fraction(total, per_group)
        P.sample_key = self.backend.profile_rng.getrandbits(64)
        P.sample_below = (1 << 64) - 1 if fraction >= 1 else int(fraction * 2**64)
        bufs.keep += [flat, P]
        launch.profile = ctypes.addressof(P)
        return P

    def _modelled_seconds(self, R, counts, timing, v: _Variant, bufs) -> float:
        """This launch's seconds on the clock in force (see _timing_of)."""
        if timing is None:
            return R.model_ps * 1e-12  # the host-time clock (no modelled GPU here)
        models = self.backend.launch_models
        assert models is not None  # _timing_of times only while the timer keeps them
        if counts is not None:
            shape = time_model.LaunchShape(
                timing.threads_per_group,
                v.tgmem_bytes,
                sum(gb.nbytes for gb, _role, _name, _isz in bufs.guards),
            )
            values = time_model.scaled(
                {name: getattr(counts, name) for name in PROFILE_COUNTS + PROFILE_CYCLES}
            )
            modelled = time_model.launch_time(values, self.backend.gpu, shape)
            models.setdefault(timing.kind, []).append(modelled.seconds)
            if self.backend.model_parts is not None:  # what set the time, per kernel
                self.backend.model_parts[self.spec.name] = dict(values, **modelled.parts)
            return modelled.seconds
        seen = models.get(timing.kind) or []
        return sum(seen) / len(seen) if seen else R.model_ps * 1e-12

    def _pass_counters(self, v: _Variant, bufs: _LaunchBuffers) -> bytes | None:
        """A counted variant's counters after its own buffers (where its glue
        looks: coverage.glue), and their values before the launch."""
        if not v.counted:
            return None
        if len(bufs.addresses) != coverage.buffer_count(v.params):
            raise KernelFault("launch", "internal: the counted variant's buffers do not line up")
        counts = self._counters()
        bufs.addresses.append(ctypes.addressof(counts))
        return bytes(counts)

    def _counters(self) -> ctypes.Array:
        if self._counts is None:
            n = coverage.counters_of(self.spec)
            self._counts = (ctypes.c_uint64 * max(1, n))()
        return self._counts

    def branch_hits(self) -> list[int]:
        """How often each counter of the kernel's arms (coverage.arms_of)
        was bumped, over every counted launch so far."""
        n = coverage.counters_of(self.spec)
        return list(self._counters())[:n]

    def _fill_buffers(
        self,
        bufs,
        v,
        arrays,
        infos,
        out_names,
        output_shapes,
        init_value,
        end_aligned,
        as_stored=False,
        garbage=None,
    ) -> None:
        """One buffer or by-value argument per parameter of `v`, in its order:
        inputs hold their values (`as_stored`: the bytes their strides reach,
        as laid out), outputs init_value or the garbage byte (`garbage`, by
        default the backend's output_garbage)."""
        if garbage is None:
            garbage = self.backend.output_garbage
        spec = self.spec
        inputs_by_name = dict(zip(spec.input_names, zip(arrays, infos)))
        strides_by_name: dict[str, tuple] = {}
        out_iter = iter(zip(spec.output_names, out_names, output_shapes))
        for name, role in v.params:
            if role == "input":
                arr, info = inputs_by_name[name]
                host = host_bytes(arr)
                if as_stored and not host.flags.c_contiguous:
                    span, first, strides = stored_span(host)
                    gb = POOL.take(span.nbytes, end_aligned)
                    bufs.guards.append((gb, "input", name, host.dtype.itemsize))
                    gb.bytes[:] = span
                    bufs.dtypes.append(info.dtype)
                    bufs.addresses.append(gb.base + first)
                    bufs.inputs.append((gb, None, span, name, host.dtype.itemsize))
                    strides_by_name[name] = strides
                    continue  # not copied back: a write lands in storage MLX may share
                src = host if host.flags.c_contiguous else np.ascontiguousarray(host)
                gb = POOL.take(src.nbytes, end_aligned)
                bufs.guards.append((gb, "input", name, src.dtype.itemsize))
                gb.bytes[:] = src.reshape(-1).view(np.uint8)
                bufs.dtypes.append(info.dtype)
                bufs.inputs.append((gb, host, src, name, src.dtype.itemsize))
                bufs.addresses.append(gb.base)
            elif role in ("shape", "strides", "ndim"):
                c = self._shape_arg(name, role, inputs_by_name, strides_by_name)
                bufs.keep.append(c)
                bufs.addresses.append(ctypes.addressof(c))
            elif role == "output":
                oname, odt, oshape = next(out_iter)
                shape = tuple(int(s) for s in oshape)
                npdt = host_dtype(odt)
                n = math.prod(shape)
                gb = POOL.take(n * npdt.itemsize, end_aligned)
                bufs.guards.append((gb, "output", oname, npdt.itemsize))
                fill_output(gb, odt, init_value, garbage)
                bufs.dtypes.append(odt)
                bufs.outputs.append((gb, odt, shape))
                bufs.addresses.append(gb.base)

    def _launch_record(self, v, bufs, grid, tgc, ngroups, use_fibers, how=None) -> SimLaunch:
        """The runtime's launch structure: dimensions, buffers and their
        guards, the backend's settings. What it points to is kept in `bufs`."""
        guards = bufs.guards
        gtab = (SimGuard * max(1, len(guards)))()
        for i, (gb, _role, _name, isz) in enumerate(guards):
            gtab[i] = SimGuard(gb.lo, gb.lo + gb.total, gb.base, gb.nbytes, isz, i)
        cbufs = (ctypes.c_void_p * max(1, len(bufs.addresses)))(*bufs.addresses)
        bufs.keep += [gtab, cbufs]
        L = SimLaunch()
        L.grid[:] = grid
        L.tg[:] = tgc
        L.ngroups[:] = ngroups
        L.bufs = ctypes.cast(cbufs, ctypes.POINTER(ctypes.c_void_p))
        L.nbufs = len(bufs.addresses)
        L.guards = ctypes.cast(gtab, ctypes.POINTER(SimGuard))
        L.nguards = len(guards)
        L.use_fibers = 1 if use_fibers else 0
        L.timeout_s = float(self.backend.launch_timeout_s or 0.0)
        L.stack_size = self.backend.stack_size
        L.kernel = v.kernel_name.encode()
        how = how or LaunchMode.of(self.backend, None)
        L.schedule = how.schedule
        if L.schedule == SHUFFLED_SCHEDULE:
            L.schedule_seed = how.seed if how.seed is not None else next_schedule_seed(self.backend)
        fill = how.tg_fill
        L.tg_fill = 0 if fill is None else 0x100 | (int(fill) & 0xFF)
        return L

    @staticmethod
    def _shape_arg(name: str, role: str, inputs_by_name: dict, strides_by_name: dict):
        """An input's shape, strides (CUDA: by value, MAX_NDIM entries) or
        ndim. Its strides are the row-contiguous copy's, or as stored where
        it is passed as stored (strides_by_name)."""
        base = name[: -len("_" + role)]
        _arr, info = inputs_by_name[base]
        if role == "shape":
            return (ctypes.c_int32 * max(CUDA_MAX_NDIM, info.ndim))(*info.shape)
        if role == "strides":
            st = strides_by_name.get(base)
            if st is None:
                st = [1] * info.ndim
                for d in range(info.ndim - 2, -1, -1):
                    st[d] = st[d + 1] * info.shape[d + 1]
            return (ctypes.c_int64 * max(CUDA_MAX_NDIM, info.ndim))(*st)
        return ctypes.c_int32(info.ndim)


@dataclass
class _LaunchBuffers:
    """A launch's arguments in the kernel's parameter order, and the
    guarded buffers behind them."""

    addresses: list[int] = field(default_factory=list)  # what each parameter points to
    keep: list = field(default_factory=list)  # ctypes objects that must outlive the call
    # (buffer, role, name, itemsize) of each input and output: the runtime's buffer numbers
    guards: list[tuple[GuardedBuffer, str, str, int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)  # numpy dtype name of each guard
    # (buffer, the caller's array or None, the bytes copied in, name, itemsize)
    inputs: list[tuple] = field(default_factory=list)
    outputs: list[tuple[GuardedBuffer, str, tuple]] = field(default_factory=list)

    def release(self, clean: bool) -> None:
        """Every buffer back to the pool after a clean launch, else unmapped."""
        for gb, *_ in self.guards:
            if clean:
                POOL.give(gb)
            else:
                gb.free()


def _undefined_reads_of(R: SimResult) -> dict | None:
    """The launch's reads the language leaves undefined (the runtime's
    ub_* fields) as an undefined_reads record, or None when it made none."""
    if R.ub_count <= 0:
        return None
    return {
        "count": int(R.ub_count),
        "first": {
            "op": R.ub_op.decode("ascii", "replace"),
            "reason": UB_REASONS.get(int(R.ub_why), "diverged"),
            "lane": int(R.ub_lane),
            "aux": int(R.ub_aux),
            "group": [int(x) for x in R.ub_group],
            "thread": [int(x) for x in R.ub_thread],
        },
    }


def _with_undefined_reads(fault: KernelFault, seen: dict | None) -> KernelFault:
    """`fault`, its message followed by the undefined reads before it where
    there were any: a poisoned lane read as an index (all ones) is the
    likeliest cause of a fault at a wild element, and only they explain it."""
    record = undefined_reads.clean(seen)
    if record is None:
        return fault
    return KernelFault(
        fault.kind,
        f"{fault.message}; before it, {undefined_reads.LEAD}{undefined_reads.describe(record)}",
        dict(fault.details, undefined_reads=record),
    )


def _check_slack(guards) -> None:
    """A KernelFault for a write past a buffer's end or before its start
    that stayed within the page-alignment slack (no guard page caught it)."""
    for gb, role, name, isz in guards:
        off = gb.slack_violation()
        if off is not None:
            elem = off // isz
            n = gb.nbytes // max(1, isz)
            raise KernelFault(
                "out_of_bounds",
                f"out-of-bounds write to {role} '{name}' at element {elem} "
                f"(valid elements 0..{n - 1}); detected after the launch",
                {"buffer": name, "role": role, "element": elem, "access": "write"},
            )


def _copy_back_inputs(inputs, refuse: bool = False) -> None:
    """A GPU kernel can write its inputs: make the caller see it; or, with
    `refuse` (mlxsci.fast), a KernelFault("input_write") naming the first
    element written, the caller's array untouched."""
    for gb, host, src, name, isz in inputs:
        if not src.nbytes or libc.memcmp(gb.base, src.ctypes.data, src.nbytes) == 0:
            continue
        if refuse:
            now = np.frombuffer(gb.bytes, np.uint8, count=src.nbytes)
            byte = int(np.argmax(now != src.reshape(-1).view(np.uint8)))
            elem = byte // max(1, isz)
            raise KernelFault(
                "input_write",
                f"write to input '{name}' at element {elem}: MLX hands a kernel its inputs' "
                "own memory, so on a GPU this changes the caller's array and every array "
                "sharing its buffer (MLX does not support in-place updates); write an output",
                {"buffer": name, "role": "input", "element": elem, "access": "write"},
            )
        if host is not None and host.flags.c_contiguous and host.flags.writeable:
            libc.memmove(host.ctypes.data, gb.base, src.nbytes)


def _read_outputs(outputs) -> list:
    """The outputs as mx.arrays (copies: the buffers go back to the pool)."""
    import mlx.core as mx

    outs = []
    for gb, odt, shape in outputs:
        data = np.frombuffer(gb.bytes, dtype=host_dtype(odt)).reshape(shape)
        # mx.array keeps NumPy's dtype except float64, which it makes float32
        a = mx.array(data, dtype=mx.float64) if odt == "float64" else mx.array(data)
        if odt == "bfloat16":
            a = a.view(mx.bfloat16)
        outs.append(a)
    return outs
