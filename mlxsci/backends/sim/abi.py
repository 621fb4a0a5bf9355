"""The simulator's runtime bridge: ctypes mirrors of the structures the fiber
runtime (runtime/sim_runtime.h) exchanges with Python, its result kinds, and
the libc calls the guarded buffers and the launch path make.

The field order and types here must match sim_runtime.h exactly: the runtime
reads `SimLaunch` and fills `SimResult` through raw pointers.
"""

from __future__ import annotations

import ctypes
import signal

# ------------------------------------------------------------------ ABI mirrors
(
    RESULT_OK,
    RESULT_OOB,
    RESULT_DIVERGENCE,
    RESULT_DEADLOCK,
    RESULT_TIMEOUT,
    RESULT_CRASH,
    RESULT_NEED_FIBERS,
    RESULT_STACK_OVERFLOW,
    RESULT_SETUP_FAILED,
    RESULT_TG_OOB,
    RESULT_MISALIGNED,
    RESULT_GP_FAULT,
    RESULT_UNINIT_READ,
    RESULT_UNINIT_OUTPUT_READ,
    RESULT_RACE,
) = range(15)
# runtime/sim_bounds.inc's __SIM_PRIVATE_OOB: the bounds-checked build's
# report of an index past a private or constant array (bounds.py).
RESULT_PRIVATE_OOB = 20


# SimLaunch.schedule (sim_runtime.h, __SIM_SCHEDULE_*): the order threads run in.
FORWARD_SCHEDULE, REVERSED_SCHEDULE, SHUFFLED_SCHEDULE, LOCKSTEP_SCHEDULE = 0, 1, 2, 3
SEED_STEP = 0x9E3779B97F4A7C15  # an odd step: consecutive seeds never repeat


def next_schedule_seed(backend) -> int:
    """The shuffled schedule's seed for the next launch, from the backend's
    `schedule_seed` (set by whoever asks for the schedule: mlxsci.worker),
    which moves on by one step: each launch of a pipeline run gets its own
    order, and the same starting seed gives the same orders again."""
    seed = int(getattr(backend, "schedule_seed", 0) or 0) % (1 << 64)
    backend.schedule_seed = (seed + SEED_STEP) % (1 << 64)
    return seed


class SimGuard(ctypes.Structure):
    _fields_ = [
        ("lo", ctypes.c_uint64),
        ("hi", ctypes.c_uint64),
        ("base", ctypes.c_uint64),
        ("nbytes", ctypes.c_uint64),
        ("itemsize", ctypes.c_int64),
        ("buf", ctypes.c_int64),
    ]


class SimLaunch(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_int64 * 3),
        ("tg", ctypes.c_int64 * 3),
        ("ngroups", ctypes.c_int64 * 3),
        ("bufs", ctypes.POINTER(ctypes.c_void_p)),
        ("nbufs", ctypes.c_int64),
        ("guards", ctypes.POINTER(SimGuard)),
        ("nguards", ctypes.c_int64),
        ("use_fibers", ctypes.c_int64),
        ("timeout_s", ctypes.c_double),
        ("stack_size", ctypes.c_int64),
        ("tgmem", ctypes.c_void_p),
        ("tgmem_size", ctypes.c_int64),
        ("kernel", ctypes.c_char_p),
        ("schedule", ctypes.c_int64),
        ("schedule_seed", ctypes.c_uint64),
        ("tg_fill", ctypes.c_int64),
        ("profile", ctypes.c_void_p),
        ("check", ctypes.c_void_p),
    ]


class SimCheck(ctypes.Structure):
    """sim_runtime.h's __SimCheck: what a profiled variant's hooks check in
    one launch (profile.Checks), and what they found."""

    _fields_ = [
        ("tg_reads", ctypes.c_int64),
        ("report_from", ctypes.c_uint64),
        ("watch_lo", ctypes.c_uint64),
        ("watch_hi", ctypes.c_uint64),
        ("watch_records", ctypes.POINTER(ctypes.c_int64)),
        ("watch_cap", ctypes.c_int64),
        ("watch_count", ctypes.c_int64),
        ("tg_loads", ctypes.c_uint64),
        ("read_ordinal", ctypes.c_uint64),
        ("device_bounds", ctypes.c_int64),
        ("output_reads", ctypes.c_int64),
        ("out_flags", ctypes.POINTER(ctypes.c_uint8)),
        ("out_fill", ctypes.c_int64),
        ("out_report_from", ctypes.c_uint64),
        ("out_loads", ctypes.c_uint64),
        ("out_ordinal", ctypes.c_uint64),
        ("device_races", ctypes.c_int64),
        ("lockstep", ctypes.c_int64),
        ("race_first", ctypes.c_int64 * 6),
        ("race_first_write", ctypes.c_int64),
        ("races_benign", ctypes.c_int64),
        ("races_unchecked", ctypes.c_int64),
    ]


# __SimProfile's counts, in its order after the costs.
PROFILE_COUNTS = (
    "launch_groups analysed_groups groups threads simdgroups issue sfu fp64 atomic_lanes thread_ops dev_requests "
    "dev_sectors tg_requests tg_wavefronts private_requests group_sectors "
    "dram_read_sectors dram_write_sectors barriers simd_ops untracked"
).split()
PROFILE_CYCLES = [
    "throughput_cycles_sum",
    "throughput_cycles_max",
    "path_cycles_sum",
    "path_cycles_max",
]
_PROFILE_INPUTS = (
    [
        ("weights", ctypes.POINTER(ctypes.c_int32)),
        ("n_blocks", ctypes.c_int64),
        ("n_sites", ctypes.c_int64),
        ("simd_width", ctypes.c_int64),
        ("sector_bytes", ctypes.c_int64),
        ("tg_banks", ctypes.c_int64),
        ("tg_bank_bytes", ctypes.c_int64),
    ]
    + [
        (name, ctypes.c_double)
        for name in (
            "c_issue c_sfu c_fp64 c_tg c_sector c_atomic c_barrier c_dev_latency c_tg_latency"
        ).split()
    ]
    + [("sample_key", ctypes.c_uint64), ("sample_below", ctypes.c_uint64)]
)


class SimProfile(ctypes.Structure):
    """sim_runtime.h's __SimProfile: a profiled launch's inputs (the variant's
    block weights, the GPU's costs in core cycles) and the runtime's counts."""

    _fields_ = (
        _PROFILE_INPUTS  # type: ignore[assignment]
        + [(name, ctypes.c_int64) for name in PROFILE_COUNTS]
        + [(name, ctypes.c_double) for name in PROFILE_CYCLES]
    )


class SimResult(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int64),
        ("sig", ctypes.c_int64),
        ("buf", ctypes.c_int64),
        ("is_write", ctypes.c_int64),
        ("elem", ctypes.c_int64),
        ("line", ctypes.c_int64),
        ("line2", ctypes.c_int64),
        ("n_done", ctypes.c_int64),
        ("n_wait", ctypes.c_int64),
        ("odd_thread", ctypes.c_int64),
        ("group", ctypes.c_int64 * 3),
        ("thread", ctypes.c_int64 * 3),
        ("addr", ctypes.c_uint64),
        ("aux", ctypes.c_int64),
        ("cpu_ns", ctypes.c_int64),
        ("code", ctypes.c_int64),
        ("tg_name", ctypes.c_uint64),
        ("tg_decl", ctypes.c_uint64),
        ("tg_nelem", ctypes.c_int64),
        ("tg_esize", ctypes.c_int64),
        ("after", ctypes.c_int64),
        ("near_kind", ctypes.c_int64),
        ("near_dist", ctypes.c_int64),
        ("model_ps", ctypes.c_int64),
        ("ub_count", ctypes.c_int64),
        ("ub_why", ctypes.c_int64),
        ("ub_lane", ctypes.c_int64),
        ("ub_aux", ctypes.c_int64),
        ("ub_group", ctypes.c_int64 * 3),
        ("ub_thread", ctypes.c_int64 * 3),
        ("ub_op", ctypes.c_char * 32),
    ]


# SimResult.ub_why (sim_runtime.h, __SIM_UB_*): why the first undefined read was.
UB_REASONS = {
    1: "diverged",
    2: "returned",
    3: "absent",
    4: "invalid_lane",
    5: "outside_mask",
}


# ------------------------------------------------------------------ libc
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
libc.mprotect.restype = ctypes.c_int
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.munmap.restype = ctypes.c_int
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.memcmp.restype = ctypes.c_int
libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
libc.memmove.restype = ctypes.c_void_p
libc.memmove.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

# Signal numbers -> names, for crash messages.
SIGNAL_NAMES = {int(s): s.name for s in signal.Signals}
