"""Guarded buffers for the simulator: every input and output in its own
mapping between PROT_NONE guard regions, kept between launches in a pool, and
the bytes written into them before a launch (input values, the garbage
pattern, init_value).
"""

from __future__ import annotations

import ctypes
import mmap as _mmap
from collections import OrderedDict

import numpy as np

from mlxsci.backends.sim.abi import libc

PAGE = _mmap.PAGESIZE
# PROT_NONE address space on each side of every buffer: wide enough that any
# 32-bit index, even of a 16-byte vector (2^31 * 16 bytes), lands in the
# buffer's own guard and is reported as that buffer's element. Reserved, never
# committed (MAP_NORESERVE): it costs no memory and no more time than a page.
GUARD_BYTES = 32 << 30
GUARD_BYTES_FALLBACK = 64 * PAGE  # where the address space is limited (ulimit -v)
GARBAGE_BYTE = 0x5A  # uninitialised outputs: 0x5A5A5A5A = 1.5e16f, not 0, not NaN
_MAP_NORESERVE = getattr(_mmap, "MAP_NORESERVE", 0x4000)
_GARBAGE_RUNS: dict = {}


def _garbage_bytes(n: int) -> bytes:
    """n garbage bytes: what untouched slack holds (one string per length)."""
    run = _GARBAGE_RUNS.get(n)
    if run is None:
        run = _GARBAGE_RUNS[n] = bytes([GARBAGE_BYTE]) * n
    return run


class GuardedBuffer:
    """`nbytes` of read-write memory between two PROT_NONE guard regions."""

    def __init__(self, nbytes: int, end_aligned: bool):
        self.nbytes = nbytes
        self.end_aligned = end_aligned
        self.data_len = max(PAGE, -(-nbytes // PAGE) * PAGE)
        flags = _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | _MAP_NORESERVE
        for guard in (GUARD_BYTES, GUARD_BYTES_FALLBACK):
            self.total = guard + self.data_len + guard
            lo = libc.mmap(None, self.total, 0, flags, -1, 0)
            if lo is not None and lo != ctypes.c_void_p(-1).value:
                break
        else:
            raise MemoryError(f"mmap of {self.total} bytes failed (errno {ctypes.get_errno()})")
        self.lo = lo
        self.data_start = lo + guard
        if libc.mprotect(self.data_start, self.data_len, _mmap.PROT_READ | _mmap.PROT_WRITE) != 0:
            libc.munmap(lo, self.total)
            raise MemoryError("mprotect failed")
        data_end = self.data_start + self.data_len
        self.base = ((data_end - nbytes) & ~15) if end_aligned else self.data_start
        self.pages = np.frombuffer(  # type: ignore[call-overload]  # numpy's stubs omit ctypes arrays
            (ctypes.c_ubyte * self.data_len).from_address(self.data_start), dtype=np.uint8
        )
        self.pages.fill(GARBAGE_BYTE)
        off = self.base - self.data_start
        self.bytes = self.pages[off : off + nbytes]
        self._front, self._back = self.pages[:off], self.pages[off + nbytes :]

    def slack_violation(self) -> int | None:
        """Byte offset (relative to base) of the first changed slack byte, if any."""
        # Fast path: the slack (under a page plus 15 bytes of alignment on
        # either side) compared as byte strings, about 1 us.
        if self._front.tobytes() == _garbage_bytes(
            self._front.size
        ) and self._back.tobytes() == _garbage_bytes(self._back.size):
            return None
        off = self.base - self.data_start
        front = self.pages[:off]
        bad = np.flatnonzero(front != GARBAGE_BYTE)
        if bad.size:
            return int(bad[0]) - off
        back = self.pages[off + self.nbytes :]
        bad = np.flatnonzero(back != GARBAGE_BYTE)
        if bad.size:
            return self.nbytes + int(bad[0])
        return None

    def free(self) -> None:
        if self.lo:
            self.pages = self.bytes = self._front = self._back = None
            libc.munmap(self.lo, self.total)
            self.lo = 0


class BufferPool:
    """Guarded buffers kept between launches, by (nbytes, end_aligned).

    Mapping a buffer, faulting its pages in and unmapping it cost 0.1-0.6 ms
    per buffer, most of a small launch. A buffer comes back here only after a
    launch that ended without a fault and whose slack bytes all still hold the
    garbage pattern, so a buffer taken from the pool is in the state of a fresh
    one except for its data bytes, which every launch overwrites (inputs with
    their values, outputs with garbage or init_value) before the kernel runs.
    Placement is part of the key, so the alternation of end- and start-aligned
    launches (overflow, underflow) is kept. Bounded in count and bytes (each
    buffer also reserves 64 GiB of address space): least recently used first out.
    """

    MAX_BUFFERS = 64
    MAX_BYTES = 128 << 20  # data bytes held across all pooled buffers
    MAX_BUFFER_BYTES = 32 << 20  # larger buffers are mapped per launch, as before

    def __init__(self):
        self._free: OrderedDict = OrderedDict()  # (nbytes, end_aligned) -> [buffers]
        self._count = 0
        self._bytes = 0

    def take(self, nbytes: int, end_aligned: bool) -> GuardedBuffer:
        """A buffer of `nbytes` whose data bytes the caller must overwrite."""
        key = (nbytes, end_aligned)
        free = self._free.get(key)
        if free:
            gb = free.pop()
            if not free:
                del self._free[key]
            self._count -= 1
            self._bytes -= gb.data_len
            return gb
        return GuardedBuffer(nbytes, end_aligned)

    def give(self, gb: GuardedBuffer) -> None:
        """Keep `gb` (its slack checked clean after a launch without a fault)."""
        if gb.data_len > self.MAX_BUFFER_BYTES:
            gb.free()
            return
        key = (gb.nbytes, gb.end_aligned)
        self._free.setdefault(key, []).append(gb)
        self._free.move_to_end(key)
        self._count += 1
        self._bytes += gb.data_len
        while self._count > self.MAX_BUFFERS or self._bytes > self.MAX_BYTES:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        key, free = next(iter(self._free.items()))
        gb = free.pop(0)
        if not free:
            del self._free[key]
        self._count -= 1
        self._bytes -= gb.data_len
        gb.free()

    def clear(self) -> None:
        while self._count:
            self._evict_oldest()


# One pool per process, used under the launch lock of kernel.py (launches run one at a time).
POOL = BufferPool()


# ------------------------------------------------------------------ data bytes
def host_dtype(name: str):
    if name == "bfloat16":
        return np.dtype(np.uint16)
    return np.dtype(name)


def host_bytes(arr) -> np.ndarray:
    """A numpy view (no copy when possible) of an mx.array's elements."""
    import mlx.core as mx

    if arr.dtype == mx.bfloat16:
        return np.asarray(arr.view(mx.uint16))
    return np.asarray(arr)


def stored_span(host: np.ndarray) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """(span, first, strides) of a strided view as a GPU kernel is handed
    it when MLX binds the array as stored: `span` the bytes its elements
    reach, lowest to highest (a copy), `first` the byte offset of element
    0 in the span (non-zero only for negative strides), `strides` in
    elements (0 for a broadcast axis)."""
    isz = host.itemsize
    if host.size == 0:
        return np.zeros(0, np.uint8), 0, tuple(0 for _ in host.shape)
    lo = sum(min(0, (n - 1) * st) for n, st in zip(host.shape, host.strides))
    hi = sum(max(0, (n - 1) * st) for n, st in zip(host.shape, host.strides)) + isz
    start = host.ctypes.data + lo
    span = np.frombuffer((ctypes.c_uint8 * (hi - lo)).from_address(start), np.uint8).copy()
    return span, -lo, tuple(st // isz for st in host.strides)


_INIT_PATTERNS: dict = {}


def _init_pattern(odt: str, init_value) -> np.ndarray:
    """The bytes of one element of mx.full(init_value, dtype=odt), which an
    output initialised with init_value repeats. (mx.full keeps float32 for a
    float value and an integer dtype: the pattern is then 4 bytes whatever
    the output's itemsize, as it always was here.)"""
    exact = np.float64(init_value).tobytes() if isinstance(init_value, float) else init_value
    key = (odt, type(init_value).__name__, exact)  # NaN != NaN: key by bits
    pattern = _INIT_PATTERNS.get(key)
    if pattern is None:
        import mlx.core as mx

        one = host_bytes(mx.full((1,), init_value, dtype=getattr(mx, odt)))
        pattern = _INIT_PATTERNS[key] = one.reshape(-1).view(np.uint8).copy()
    return pattern


def fill_output(gb: GuardedBuffer, odt: str, init_value, garbage: int = GARBAGE_BYTE) -> None:
    """Every data byte of an output before the launch: init_value where the
    caller asks for it (MLX's init_value), else the garbage pattern, so a
    stale value from an earlier launch never survives in a reused buffer.
    (`garbage`: another byte, for a second run that tells unwritten
    elements from written ones: mlxsci.fast's checks.)"""
    dst = gb.bytes
    if init_value is None:
        dst.fill(garbage)
        return
    pattern = _init_pattern(odt, init_value)
    width = pattern.size  # 1, 2, 4 or 8: an element's bytes
    whole = dst.size - dst.size % width
    if whole:
        word = np.dtype(f"u{width}")
        dst[:whole].view(word).fill(pattern.view(word)[0])
    dst[whole:] = pattern[: dst.size - whole]
