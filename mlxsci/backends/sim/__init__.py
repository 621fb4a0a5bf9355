"""`sim`: run MLX custom-kernel bodies on the CPU.

For every call the simulator generates the exact text MLX would compile
(mlxsci.signature), rewrites it line for line into C++, compiles it together
with a language prelude and the fiber runtime (runtime/), and runs the kernel
with the dialect's dispatch semantics, one fiber per GPU thread when the
kernel uses barriers or SIMD-group/warp functions, SIMD width 32:

- "metal" (mx.fast.metal_kernel): exactly `grid` threads, threadgroups
  clamped to the grid with partial edge groups; runtime/metal_prelude.h.
- "cuda" (mx.fast.cuda_kernel): whole blocks, block = min(threadgroup, grid),
  ceil(grid / threadgroup) blocks, so threads beyond the grid run too;
  runtime/cuda_prelude.h plus stub headers under runtime/include/ for the
  generated `#include`s. Dynamic shared memory (`extern __shared__`) uses
  `spec.shared_memory` bytes when the KernelSpec has such a field.

Every input and output lives in its own mapping with PROT_NONE guard pages on
both sides; placement alternates per launch between end-aligned (catches
overflow) and start-aligned (catches underflow). Faults, barrier divergence,
deadlock and timeouts come back as KernelFault; the Python caller lives on.

The launch path is kept cheap (issue 11: ~0.1-0.3 ms of host work per small
launch, 1-2 ms before): mappings are reused across launches (_BufferPool; only
after a clean launch, data bytes rewritten every time), generated text and
launch checks are cached per call signature and launch shape.
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import mmap as _mmap
import os
import platform
import re
import signal
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from mlxsci import launch_limits
from mlxsci.backends.base import Backend, CompileError, Kernel, KernelFault, KernelSpec
from mlxsci.backends.sim import build, language_rules
from mlxsci.signature import (CUDA_MAX_NDIM, ArgInfo, _template_kind, _template_value, cuda_source,
                              dtype_name, metal_source)

__all__ = ["SimBackend", "SimKernel"]

# ------------------------------------------------------------------ ABI mirrors
(_K_OK, _K_OOB, _K_DIV, _K_DEADLOCK, _K_TIMEOUT, _K_CRASH, _K_NEED_FIBERS, _K_STACK, _K_SETUP,
 _K_TG_OOB, _K_MISALIGNED, _K_GP) = range(12)


class _Guard(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64), ("base", ctypes.c_uint64),
                ("nbytes", ctypes.c_uint64), ("itemsize", ctypes.c_int64), ("buf", ctypes.c_int64)]


class _Launch(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_int64 * 3), ("tg", ctypes.c_int64 * 3),
                ("ngroups", ctypes.c_int64 * 3), ("bufs", ctypes.POINTER(ctypes.c_void_p)),
                ("nbufs", ctypes.c_int64), ("guards", ctypes.POINTER(_Guard)),
                ("nguards", ctypes.c_int64), ("use_fibers", ctypes.c_int64),
                ("timeout_s", ctypes.c_double), ("stack_size", ctypes.c_int64),
                ("tgmem", ctypes.c_void_p), ("tgmem_size", ctypes.c_int64),
                ("kernel", ctypes.c_char_p), ("schedule", ctypes.c_int64)]


class _Result(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int64), ("sig", ctypes.c_int64), ("buf", ctypes.c_int64),
                ("is_write", ctypes.c_int64), ("elem", ctypes.c_int64), ("line", ctypes.c_int64),
                ("line2", ctypes.c_int64), ("n_done", ctypes.c_int64), ("n_wait", ctypes.c_int64),
                ("odd_thread", ctypes.c_int64), ("group", ctypes.c_int64 * 3),
                ("thread", ctypes.c_int64 * 3), ("addr", ctypes.c_uint64), ("aux", ctypes.c_int64),
                ("cpu_ns", ctypes.c_int64), ("code", ctypes.c_int64), ("tg_name", ctypes.c_uint64),
                ("tg_decl", ctypes.c_uint64), ("tg_nelem", ctypes.c_int64), ("tg_esize", ctypes.c_int64),
                ("after", ctypes.c_int64), ("near_kind", ctypes.c_int64), ("near_dist", ctypes.c_int64)]


# ------------------------------------------------------------------ guarded buffers
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.mprotect.restype = ctypes.c_int
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.memcmp.restype = ctypes.c_int
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.memmove.restype = ctypes.c_void_p
_libc.memmove.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

PAGE = _mmap.PAGESIZE
# PROT_NONE address space on each side of every buffer: wide enough that any
# 32-bit index, even of a 16-byte vector (2^31 * 16 bytes), lands in the
# buffer's own guard and is reported as that buffer's element. Reserved, never
# committed (MAP_NORESERVE): it costs no memory and no more time than a page.
GUARD_BYTES = 32 << 30
GUARD_BYTES_FALLBACK = 64 * PAGE  # where the address space is limited (ulimit -v)
GARBAGE_BYTE = 0x5A               # uninitialised outputs: 0x5A5A5A5A = 1.5e16f, not 0, not NaN
_MAP_NORESERVE = getattr(_mmap, "MAP_NORESERVE", 0x4000)
_GARBAGE_RUNS: dict = {}


def _garbage_bytes(n: int) -> bytes:
    """n garbage bytes: what untouched slack holds (one string per length)."""
    run = _GARBAGE_RUNS.get(n)
    if run is None:
        run = _GARBAGE_RUNS[n] = bytes([GARBAGE_BYTE]) * n
    return run


class _GuardedBuffer:
    """`nbytes` of read-write memory between two PROT_NONE guard regions."""

    def __init__(self, nbytes: int, end_aligned: bool):
        self.nbytes = nbytes
        self.end_aligned = end_aligned
        self.data_len = max(PAGE, -(-nbytes // PAGE) * PAGE)
        flags = _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS | _MAP_NORESERVE
        for guard in (GUARD_BYTES, GUARD_BYTES_FALLBACK):
            self.total = guard + self.data_len + guard
            lo = _libc.mmap(None, self.total, 0, flags, -1, 0)
            if lo is not None and lo != ctypes.c_void_p(-1).value:
                break
        else:
            raise MemoryError(f"mmap of {self.total} bytes failed (errno {ctypes.get_errno()})")
        self.lo = lo
        self.data_start = lo + guard
        if _libc.mprotect(self.data_start, self.data_len, _mmap.PROT_READ | _mmap.PROT_WRITE) != 0:
            _libc.munmap(lo, self.total)
            raise MemoryError("mprotect failed")
        data_end = self.data_start + self.data_len
        self.base = ((data_end - nbytes) & ~15) if end_aligned else self.data_start
        self.pages = np.frombuffer((ctypes.c_ubyte * self.data_len).from_address(self.data_start),
                                   dtype=np.uint8)
        self.pages.fill(GARBAGE_BYTE)
        off = self.base - self.data_start
        self.bytes = self.pages[off:off + nbytes]
        self._front, self._back = self.pages[:off], self.pages[off + nbytes:]

    def slack_violation(self) -> int | None:
        """Byte offset (relative to base) of the first changed slack byte, if any."""
        # Fast path: the slack (under a page plus 15 bytes of alignment on
        # either side) compared as byte strings, about 1 us.
        if (self._front.tobytes() == _garbage_bytes(self._front.size)
                and self._back.tobytes() == _garbage_bytes(self._back.size)):
            return None
        off = self.base - self.data_start
        front = self.pages[:off]
        bad = np.flatnonzero(front != GARBAGE_BYTE)
        if bad.size:
            return int(bad[0]) - off
        back = self.pages[off + self.nbytes:]
        bad = np.flatnonzero(back != GARBAGE_BYTE)
        if bad.size:
            return self.nbytes + int(bad[0])
        return None

    def free(self) -> None:
        if self.lo:
            self.pages = self.bytes = self._front = self._back = None
            _libc.munmap(self.lo, self.total)
            self.lo = 0


class _BufferPool:
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
    MAX_BYTES = 128 << 20       # data bytes held across all pooled buffers
    MAX_BUFFER_BYTES = 32 << 20  # larger buffers are mapped per launch, as before

    def __init__(self):
        self._free: OrderedDict = OrderedDict()   # (nbytes, end_aligned) -> [buffers]
        self._count = 0
        self._bytes = 0

    def take(self, nbytes: int, end_aligned: bool) -> _GuardedBuffer:
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
        return _GuardedBuffer(nbytes, end_aligned)

    def give(self, gb: _GuardedBuffer) -> None:
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


# One pool per process, used under _launch_lock (launches run one at a time).
_POOL = _BufferPool()


# ------------------------------------------------------------------ helpers
def _uninitialised_hint(addr: int) -> str:
    """A note when a bad address looks like a pointer read from memory never
    written: outputs and slack hold 0x5A bytes, threadgroup memory poison 0xFF."""
    low = addr & 0xFFFFFFFF
    if low == 0x5A5A5A5A:
        return (" (the garbage pattern of an uninitialised output: a pointer read before it "
                "was written?)")
    if low == 0xFFFFFFFF:
        return (" (the poison of unwritten threadgroup/shared memory: a pointer read before "
                "it was written?)")
    return ""


def _access_word(R) -> str:
    """What a fault's access was: the runtime's is_write 1, 0 or -1 (unknown)."""
    return {1: "write", 0: "read"}.get(R.is_write, "access")


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


def _np_dtype(name: str):
    if name == "bfloat16":
        return np.dtype(np.uint16)
    return np.dtype(name)


def _host_bytes(arr) -> np.ndarray:
    """A numpy view (no copy when possible) of an mx.array's elements."""
    import mlx.core as mx
    if arr.dtype == mx.bfloat16:
        return np.asarray(arr.view(mx.uint16))
    return np.asarray(arr)


_INIT_PATTERNS: dict = {}


def _init_pattern(odt: str, init_value) -> np.ndarray:
    """The bytes of one element of mx.full(init_value, dtype=odt), which an
    output initialised with init_value repeats. (mx.full keeps float32 for a
    float value and an integer dtype: the pattern is then 4 bytes whatever
    the output's itemsize, as it always was here.)"""
    exact = np.float64(init_value).tobytes() if isinstance(init_value, float) else init_value
    key = (odt, type(init_value).__name__, exact)    # NaN != NaN: key by bits
    pattern = _INIT_PATTERNS.get(key)
    if pattern is None:
        import mlx.core as mx
        one = _host_bytes(mx.full((1,), init_value, dtype=getattr(mx, odt)))
        pattern = _INIT_PATTERNS[key] = one.reshape(-1).view(np.uint8).copy()
    return pattern


def _fill_output(gb: "_GuardedBuffer", odt: str, init_value) -> None:
    """Every data byte of an output before the launch: init_value where the
    caller asks for it (MLX's init_value), else the garbage pattern, so a
    stale value from an earlier launch never survives in a reused buffer."""
    dst = gb.bytes
    if init_value is None:
        dst.fill(GARBAGE_BYTE)
        return
    pattern = _init_pattern(odt, init_value)
    width = pattern.size                      # 1, 2, 4 or 8: an element's bytes
    whole = dst.size - dst.size % width
    if whole:
        word = np.dtype(f"u{width}")
        dst[:whole].view(word).fill(pattern.view(word)[0])
    dst[whole:] = pattern[: dst.size - whole]


_SIGNAMES = {int(s): s.name for s in signal.Signals}

_launch_lock = threading.Lock()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _signature_key(infos, out_dtypes, template) -> tuple | None:
    """What the generated text depends on besides the kernel spec: input
    dtypes and shapes, output dtypes, template arguments (kind and value, so
    True and 1 differ). None when a template value has no key (the generator
    then reports it)."""
    try:
        targs = tuple((name, _template_kind(value), _template_value(value))
                      for name, value in (template or ()))
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


# ------------------------------------------------------------------ dialects
@dataclass
class _Generated:
    """What a dialect produces for one call signature."""
    text: str                 # the exact source the framework would compile
    params: tuple             # (name, role) in signature order
    kernel_name: str
    regions: list             # build.Region list covering `text`
    glue: str                 # C++ calling the kernel once per simulated thread
    line1: str = ""           # replaces the (empty) first line of the rewritten text
    launch_error: str = ""    # a KernelFault("launch") every call of this variant raises


class _MetalDialect:
    """mx.fast.metal_kernel: MLX's generated Metal text, the Metal prelude."""
    name = "metal"
    fiber_words = re.compile(r"simd_|simdgroup_|quad_|barrier")
    tag = "[metal_kernel]"
    group_word = "threadgroup"
    barrier_word = "threadgroup_barrier"

    def launch_dims(self, kernel, grid, tg):
        """(grid, threadgroup, threadgroups) the runtime runs: exactly `grid`
        threads, threadgroups clamped to the grid, partial edge groups."""
        launch_limits.check_launch(self.name, kernel, grid, tg)
        tgc = tuple(min(t, g) for t, g in zip(tg, grid))
        ngroups = tuple(-(-g // t) for g, t in zip(grid, tgc))
        return grid, tgc, ngroups

    def check_tgmem(self, spec, nbytes: int) -> None:
        launch_limits.check_shared_memory(self.name, spec.name, nbytes)

    def includes(self) -> list:
        rt = build.RUNTIME_DIR
        return [rt / "sim_runtime.h", rt / "sim_metal.h", build.prelude_path(), rt / "sim_metal_post.h"]

    def rewrite(self, text: str) -> str:
        return build.rewrite(text)

    def needs_fibers(self, spec: KernelSpec) -> bool:
        return bool(self.fiber_words.search(spec.source) or self.fiber_words.search(spec.header))

    def generate(self, spec: KernelSpec, infos, out_dtypes, template) -> _Generated:
        ms = metal_source(spec.name, list(spec.input_names), list(spec.output_names), spec.source,
                          spec.header, infos, out_dtypes, template, spec.atomic_outputs)
        lines = ms.text.split("\n")
        # The explicit instantiation with [[host_name]] is not C++; the glue
        # instantiates the template by calling it. Blank it, keeping lines.
        for i, ln in enumerate(lines):
            if ln.startswith("template [[host_name("):
                lines[i] = ""
        text = "\n".join(lines)
        return _Generated(text, ms.params, ms.kernel_name, self._regions(spec, ms, text),
                          self._glue(ms, template))

    @staticmethod
    def _regions(spec: KernelSpec, ms, text: str) -> list:
        n_text = text.count("\n") + 1
        header = spec.header
        # A header without a final newline fuses with the next generated line
        # (as in MLX); that line counts as the header's last line.
        h = header.count("\n") + (1 if header and not header.endswith("\n") else 0)
        body_first = ms.body_first_line
        body_last = body_first + spec.source.count("\n")
        regions = []
        if h:
            regions.append(build.Region(1, h, spec.source_file, spec.header_line))
        if body_first - 1 > h:
            regions.append(build.Region(h + 1, body_first - 1, "<mlx-signature>", h + 1))
        regions.append(build.Region(body_first, body_last, spec.source_file, spec.body_line))
        if n_text > body_last:
            regions.append(build.Region(body_last + 1, n_text, "<mlx-signature>", body_last + 1))
        return regions

    @staticmethod
    def _glue(ms, template) -> str:
        call = ms.kernel_name
        if template:
            call += "<" + ", ".join(_template_value(v) for _, v in template) + ">"
        args = []
        b = 0
        for i, (name, role) in enumerate(ms.params):
            if role.startswith("attr:"):
                args.append(f"__SIM_A_{name}(__t)")
            else:
                args.append(f"__sim_bind<__sim_fn<__F>::arg<{i}>>::get(__b[{b}])")
                b += 1
        return "\n".join([
            "static void __sim_thread(void* const* __b, const __SimThread* __t) {",
            f"  typedef decltype(&{call}) __F;",
            f"  {call}(" + ",\n    ".join(args) + ");",
            "}",
            "__SIM_DEFINE_ENTRY(__sim_thread)",
        ])


class _CudaDialect:
    """mx.fast.cuda_kernel: MLX's generated CUDA text, the CUDA prelude, whole
    blocks launched (threads beyond the grid run too)."""
    name = "cuda"
    fiber_words = re.compile(r"__syncthreads|__shfl|__ballot|__any_sync|__all_sync|__syncwarp|"
                             r"__activemask|__reduce_\w+_sync|__match_any_sync|\.sync\s*\(|"
                             r"tiled_partition|\bshfl|\breduce\s*\(")
    tag = "[custom_kernel]"
    group_word = "block"
    barrier_word = "__syncthreads"

    def includes(self) -> list:
        rt = build.RUNTIME_DIR
        return [rt / "sim_runtime.h", rt / "cuda_prelude.h"]

    def rewrite(self, text: str) -> str:
        from mlxsci.backends.sim.rewrite import rewrite_cuda
        return rewrite_cuda(text)

    def needs_fibers(self, spec: KernelSpec) -> bool:
        return bool(self.fiber_words.search(spec.source) or self.fiber_words.search(spec.header))

    def launch_dims(self, kernel, grid, tg):
        """MLX's CUDA launch: block = min(t, g), blocks = ceil(g / t) per
        dimension, every block full (the runtime gets the rounded-up grid)."""
        launch_limits.check_launch(self.name, kernel, grid, tg)
        block, blocks = launch_limits.cuda_launch(grid, tg)
        return tuple(b * n for b, n in zip(block, blocks)), block, blocks

    def check_tgmem(self, spec, nbytes: int) -> None:
        # nbytes counts static and dynamic bytes; the dynamic request decides
        # whether MLX opted in to more than 48 KiB.
        dyn = int(getattr(spec, "shared_memory", 0) or 0)
        launch_limits.check_shared_memory(self.name, spec.name, nbytes, dyn)

    def generate(self, spec: KernelSpec, infos, out_dtypes, template) -> _Generated:
        from mlxsci.backends.sim.rewrite import uses_dynamic_shared
        cs = cuda_source(spec.name, list(spec.input_names), list(spec.output_names), spec.source,
                         spec.header, infos, out_dtypes, template)
        launch_error = ""
        if cs.unmatched_args:
            launch_error = (
                f"MLX passes {', '.join(cs.unmatched_args)} for a 0-d input although the generated "
                f"signature has no such parameter (the name occurs in the source, e.g. in a comment "
                f"or a longer name): on a GPU every later kernel argument is misaligned. Rename "
                f"the input or avoid the substring.")
        by_name = dict(zip(spec.input_names, infos))
        for name, role in cs.params:
            if role in ("shape", "strides") and by_name[name[: -len("_" + role)]].ndim > CUDA_MAX_NDIM:
                launch_error = "ndim can not be larger than 10."
        line1 = ""
        if uses_dynamic_shared(cs.text):
            dyn = int(getattr(spec, "shared_memory", 0) or 0)
            if dyn <= 0:
                launch_error = launch_error or (
                    "the kernel declares `extern __shared__` memory but was built with "
                    "shared_memory=0: on a GPU every access to it is out of bounds")
            n = max(16, -(-dyn // 16) * 16)
            line1 = (f"typedef unsigned char __sim_tgt___sim_dyn_smem[{n}]; "     # guarded, as __shared__ arrays
                     f'__SIM_TG_BIND(__sim_dyn_smem, "unsigned char[{n}]");')
        return _Generated(cs.text, cs.params, cs.kernel_name, self._regions(spec, cs, cs.text),
                          self._glue(cs), line1, launch_error)

    @staticmethod
    def _regions(spec: KernelSpec, cs, text: str) -> list:
        n_text = text.count("\n") + 1
        header = spec.header
        h0 = cs.header_first_line
        # A header without a final newline fuses with `namespace mlx::core::cu {`.
        h = header.count("\n") + (1 if header and not header.endswith("\n") else 0)
        body_first = cs.body_first_line
        body_last = body_first + spec.source.count("\n")
        regions = [build.Region(1, h0 - 1, "<mlx-signature>", 1)]
        if h:
            regions.append(build.Region(h0, h0 + h - 1, spec.source_file, spec.header_line))
        if body_first - 1 >= h0 + h:
            regions.append(build.Region(h0 + h, body_first - 1, "<mlx-signature>", h0 + h))
        regions.append(build.Region(body_first, body_last, spec.source_file, spec.body_line))
        if n_text > body_last:
            regions.append(build.Region(body_last + 1, n_text, "<mlx-signature>", body_last + 1))
        return regions

    @staticmethod
    def _glue(cs) -> str:
        fn = "mlx::core::cu::" + cs.kernel_name
        args = [f"__sim_bind<__sim_fn<__F>::arg<{i}>>::get(__b[{i}])" for i in range(len(cs.params))]
        return "\n".join([
            "static void __sim_thread(void* const* __b, const __SimThread* __t) {",
            "  __sim_cu_t = __t;",
            f"  typedef decltype(&{fn}) __F;",
            f"  {fn}(" + ",\n    ".join(args) + ");",
            "}",
            "__SIM_DEFINE_ENTRY(__sim_thread)",
        ])


_DIALECTS = {"metal": _MetalDialect, "cuda": _CudaDialect}


# ------------------------------------------------------------------ the kernel
class SimKernel(Kernel):
    def __init__(self, backend: "SimBackend", spec: KernelSpec):
        if not spec.output_names:
            raise ValueError(f"{backend._dialect.tag} Must specify at least one output.")
        self.backend = backend
        self.spec = spec
        self.dialect = backend._dialect
        self._variants: dict[str, _Variant] = {}
        # The same variants by call signature, so a repeated launch generates no text.
        self._by_signature: dict[tuple, _Variant] = {}
        # (grid, threadgroup) -> the launch dimensions, for launches that passed the checks.
        self._dims: dict[tuple, tuple] = {}
        self.launches = 0
        self.compile_seconds = 0.0   # time spent generating, compiling and loading variants
        self._needs_fibers = self.dialect.needs_fibers(spec)

    def _variant(self, infos, out_dtypes, template) -> _Variant:
        """The compiled variant for this call signature; generated text is
        produced only for a signature not seen before."""
        key = _signature_key(infos, out_dtypes, template)
        v = self._by_signature.get(key) if key is not None else None
        if v is None:
            v = self._variant_of_text(infos, out_dtypes, template)
            if key is not None:
                self._by_signature[key] = v
        return v

    def _variant_of_text(self, infos, out_dtypes, template) -> _Variant:
        spec = self.spec
        gen = self.dialect.generate(spec, infos, out_dtypes, template)
        key = gen.text + "\0" + gen.line1
        v = self._variants.get(key)
        if v is not None:
            return v
        # What the real compiler rejects and clang-as-C++ would accept (language_rules.py).
        violation = language_rules.check(self.dialect.name, gen.text, gen.regions, spec.source_file)
        if violation is not None:
            raise violation
        started = time.perf_counter()
        rewritten = self.dialect.rewrite(gen.text)
        if rewritten.count("\n") != gen.text.count("\n"):
            raise CompileError("internal: the source rewrite changed the number of lines", None, "")
        if gen.line1:
            first, nl, rest = rewritten.partition("\n")
            if first.strip():
                raise CompileError("internal: the generated text's first line is not empty", None, "")
            rewritten = gen.line1 + nl + rest
        tu = build.assemble(rewritten, gen.regions, gen.glue, self.dialect.includes(),
                            candidate_file=spec.source_file)
        so = build.build_library(tu, spec.source_file, self.backend.extra_defines)
        lib = build.load_library(so)
        # lib[...] makes a function object of our own (getattr caches one per
        # library, shared with any other user of the same loaded library).
        entry = lib["__sim_entry"]
        entry.restype = ctypes.c_int64
        entry.argtypes = [ctypes.POINTER(_Launch), ctypes.POINTER(_Result)]
        tgb = lib["__sim_tgmem_bytes"]
        tgb.restype = ctypes.c_int64
        v = _Variant(entry, gen.params, gen.kernel_name, self._needs_fibers, int(tgb()),
                     gen.launch_error)
        self._variants[key] = v
        self.compile_seconds += time.perf_counter() - started
        return v

    # -- call -------------------------------------------------------------
    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup,
                 template=None, init_value=None):
        spec = self.spec
        if len(inputs) != len(spec.input_names):
            raise ValueError(f"{self.dialect.tag} Expected `inputs` to have size {len(spec.input_names)} "
                             f"but got size {len(inputs)}.")
        if len(output_shapes) != len(spec.output_names) or len(output_dtypes) != len(spec.output_names):
            raise ValueError(f"{self.dialect.tag} Expected `output_shapes` and `output_dtypes` to have "
                             f"size {len(spec.output_names)}.")
        grid = tuple(int(g) for g in grid)
        tg = tuple(int(t) for t in threadgroup)
        if len(grid) != 3 or len(tg) != 3:
            raise KernelFault("launch", "grid and threadgroup must have three dimensions")
        if any(g <= 0 for g in grid) or any(t <= 0 for t in tg):
            raise KernelFault("launch", f"grid {grid} and threadgroup {tg} must be positive")
        if any(g >= 2 ** 31 for g in grid) or any(t >= 2 ** 31 for t in tg):
            raise KernelFault("launch", "grid and threadgroup dimensions must be below 2^31")
        dims = self._dims.get((grid, tg))
        if dims is None:   # checked once per shape: a refused launch raises every time
            dims = self._dims[(grid, tg)] = self.dialect.launch_dims(spec.name, grid, tg)
        grid, tgc, ngroups = dims

        arrays = [_to_mx(x) for x in inputs]
        infos = [_arg_info(a) for a in arrays]
        out_names = [dtype_name(d) for d in output_dtypes]
        v = self._variant(infos, out_names, template)
        if v.launch_error:
            raise KernelFault("launch", v.launch_error)
        self.dialect.check_tgmem(spec, v.tgmem_bytes)

        with _launch_lock:
            end_aligned = self.launches % 2 == 0
            self.launches += 1
            use_fibers = v.needs_fibers or self.backend.force_fibers
            while True:
                outcome = self._launch(v, arrays, infos, out_names, output_shapes, grid, tgc, ngroups,
                                       init_value, end_aligned, use_fibers)
                if outcome == "retry_with_fibers":
                    use_fibers = True
                    continue
                return outcome

    def _launch(self, v, arrays, infos, out_names, output_shapes, grid, tgc, ngroups, init_value,
                end_aligned, use_fibers):
        import mlx.core as mx
        spec = self.spec
        keep = []                       # ctypes objects that must outlive the call
        bufs: list[int] = []
        guards: list[tuple[_GuardedBuffer, str, str, int]] = []   # (buffer, role, name, itemsize)
        dtypes: list[str] = []                                    # numpy dtype name of each guard
        inputs_by_name = dict(zip(spec.input_names, zip(arrays, infos)))
        in_bufs: list[tuple[_GuardedBuffer, np.ndarray, np.ndarray]] = []
        out_bufs: list[tuple[_GuardedBuffer, str, tuple]] = []
        out_iter = iter(zip(spec.output_names, out_names, output_shapes))
        clean = False                   # the buffers may go back to the pool
        try:
            for name, role in v.params:
                if role == "input":
                    arr, info = inputs_by_name[name]
                    host = _host_bytes(arr)
                    src = host if host.flags.c_contiguous else np.ascontiguousarray(host)
                    gb = _POOL.take(src.nbytes, end_aligned)
                    guards.append((gb, "input", name, src.dtype.itemsize))
                    gb.bytes[:] = src.reshape(-1).view(np.uint8)
                    dtypes.append(info.dtype)
                    in_bufs.append((gb, host, src))
                    bufs.append(gb.base)
                elif role in ("shape", "strides", "ndim"):
                    c = self._shape_arg(name, role, inputs_by_name)
                    keep.append(c)
                    bufs.append(ctypes.addressof(c))
                elif role == "output":
                    oname, odt, oshape = next(out_iter)
                    shape = tuple(int(s) for s in oshape)
                    npdt = _np_dtype(odt)
                    n = math.prod(shape)
                    gb = _POOL.take(n * npdt.itemsize, end_aligned)
                    guards.append((gb, "output", oname, npdt.itemsize))
                    _fill_output(gb, odt, init_value)
                    dtypes.append(odt)
                    out_bufs.append((gb, odt, shape))
                    bufs.append(gb.base)
            gtab = (_Guard * max(1, len(guards)))()
            for i, (gb, _role, _name, isz) in enumerate(guards):
                gtab[i] = _Guard(gb.lo, gb.lo + gb.total, gb.base, gb.nbytes, isz, i)
            cbufs = (ctypes.c_void_p * max(1, len(bufs)))(*bufs)
            L = _Launch()
            L.grid[:] = grid
            L.tg[:] = tgc
            L.ngroups[:] = ngroups
            L.bufs = ctypes.cast(cbufs, ctypes.POINTER(ctypes.c_void_p))
            L.nbufs = len(bufs)
            L.guards = ctypes.cast(gtab, ctypes.POINTER(_Guard))
            L.nguards = len(guards)
            L.use_fibers = 1 if use_fibers else 0
            L.timeout_s = float(self.backend.launch_timeout_s or 0.0)
            L.stack_size = self.backend.stack_size
            L.kernel = v.kernel_name.encode()
            L.schedule = self.backend.schedule
            R = _Result()
            kind = v.entry(ctypes.byref(L), ctypes.byref(R))
            if kind == _K_NEED_FIBERS:
                return "retry_with_fibers"
            if kind != _K_OK:
                raise self._fault(R, guards, tgc, dtypes)
            if self.backend.activity is not None:   # the sim timer is listening
                self.backend.activity.append((spec.name, R.cpu_ns * 1e-9))
            for i, (gb, role, name, isz) in enumerate(guards):
                off = gb.slack_violation()
                if off is not None:
                    elem = off // isz
                    n = gb.nbytes // max(1, isz)
                    raise KernelFault(
                        "out_of_bounds",
                        f"out-of-bounds write to {role} '{name}' at element {elem} "
                        f"(valid elements 0..{n - 1}); detected after the launch",
                        {"buffer": name, "role": role, "element": elem, "access": "write"})
            # A GPU kernel can write its inputs: make the caller see it.
            for gb, host, src in in_bufs:
                if src.nbytes and _libc.memcmp(gb.base, src.ctypes.data, src.nbytes) != 0:
                    if host.flags.c_contiguous and host.flags.writeable:
                        _libc.memmove(host.ctypes.data, gb.base, src.nbytes)
            outs = []
            for gb, odt, shape in out_bufs:
                # mx.array copies: the buffer goes back to the pool.
                data = np.frombuffer(gb.bytes, dtype=_np_dtype(odt)).reshape(shape)
                a = mx.array(data)
                if odt == "bfloat16":
                    a = a.view(mx.bfloat16)
                outs.append(a)
            clean = True
            return outs
        finally:
            for gb, *_ in guards:
                if clean:
                    _POOL.give(gb)
                else:
                    gb.free()

    @staticmethod
    def _shape_arg(name: str, role: str, inputs_by_name: dict):
        """CUDA's by-value Shape/Strides (MAX_NDIM entries) or ndim of an input."""
        base = name[: -len("_" + role)]
        _arr, info = inputs_by_name[base]
        if role == "shape":
            return (ctypes.c_int32 * max(CUDA_MAX_NDIM, info.ndim))(*info.shape)
        if role == "strides":
            st = [1] * info.ndim
            for d in range(info.ndim - 2, -1, -1):
                st[d] = st[d + 1] * info.shape[d + 1]
            return (ctypes.c_int64 * max(CUDA_MAX_NDIM, info.ndim))(*st)
        return ctypes.c_int32(info.ndim)

    def _tg_array(self, R: _Result) -> tuple[str, str]:
        """(description, name) of the threadgroup array R's tg_* fields name."""
        name = ctypes.string_at(R.tg_name).decode(errors="replace")
        decl = ctypes.string_at(R.tg_decl).decode(errors="replace")
        if name == "__sim_dyn_smem":
            return "dynamic shared memory (extern __shared__)", "extern __shared__"
        word = "threadgroup" if self.dialect.name == "metal" else "__shared__"
        return f"{word} array '{name}' ({decl})", name

    @staticmethod
    def _vector_name(nbytes: int, dtype: str | None, itemsize: int) -> str:
        """float4 for 16 bytes of a float32 buffer; a byte count otherwise."""
        base = {"float32": "float", "float16": "half", "bfloat16": "bfloat", "int32": "int",
                "uint32": "uint", "int16": "short", "uint16": "ushort"}.get(dtype or "")
        lanes = nbytes // max(1, itemsize)
        if base and lanes in (2, 3, 4):
            return f"{base}{lanes}"
        return f"{nbytes}-byte vector"

    def _far_access(self, R: _Result, guards, where: str, details: dict) -> KernelFault | None:
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
            what, name = self._tg_array(R)
            role, n = "threadgroup", int(R.tg_nelem)
            valid = f"bound {n}"
        side = "before the start" if elem < 0 else "past the end"
        details.update(buffer=name, role=role, element=elem, access=access, address=int(R.addr),
                       distance=int(R.near_dist))
        return KernelFault("out_of_bounds",
                           f"out-of-bounds {access} of {what} at element {elem} ({side}, "
                           f"{R.near_dist} bytes beyond it; {valid}) by {where}; the faulting "
                           f"address {R.addr:#x} lies beyond every guard region, this is the "
                           f"nearest buffer", details)

    def _fault(self, R: _Result, guards, tgc, dtypes=()) -> KernelFault:
        group = tuple(R.group)
        thread = tuple(R.thread)
        gw = self.dialect.group_word
        where = f"thread {thread} of {gw} {group}"
        details = {"group": group, "thread": thread}
        kind = R.kind
        if kind == _K_OOB:
            gb, role, name, isz = guards[R.buf]
            n = gb.nbytes // max(1, isz)
            access = _access_word(R)
            side = "before the start" if R.elem < 0 else "past the end"
            details.update(buffer=name, role=role, element=int(R.elem), access=access)
            return KernelFault("out_of_bounds",
                               f"out-of-bounds {access} of {role} '{name}' at element {R.elem} "
                               f"({side}; valid elements 0..{n - 1}) by {where}", details)
        if kind == _K_TG_OOB:
            what, name = self._tg_array(R)
            access = _access_word(R)
            elem, bound = int(R.elem), int(R.tg_nelem)
            details.update(buffer=name, role="threadgroup", element=elem, access=access)
            if name == "extern __shared__":
                pos = f"at byte {elem} (size {bound} bytes)"
            else:
                pos = f"at index {elem} (bound {bound})"
            if R.after:
                details.pop("group")
                details.pop("thread")
                return KernelFault("out_of_bounds", f"out-of-bounds {access} of {what} {pos}; "
                                                    f"detected after the launch", details)
            return KernelFault("out_of_bounds", f"out-of-bounds {access} of {what} {pos} by {where}",
                               details)
        if kind == _K_MISALIGNED:
            access = _access_word(R)
            size, off = int(R.aux), int(R.elem)
            if R.tg_name:
                what, name = self._tg_array(R)
                scalar = ctypes.string_at(R.tg_decl).decode(errors="replace").split("[")[0].strip()
                dtype = {"float": "float32", "half": "float16", "int": "int32", "uint": "uint32",
                         "unsigned int": "uint32"}.get(scalar)
                vec = self._vector_name(size, dtype, int(R.tg_esize))
            elif R.buf >= 0:
                gb, role, name, isz = guards[R.buf]
                what = f"{role} '{name}'"
                vec = self._vector_name(size, dtypes[R.buf] if R.buf < len(dtypes) else None, isz)
            else:
                what, name, off = "memory", None, int(R.addr)
                vec = self._vector_name(size, None, 0)
            details.update(buffer=name, byte_offset=off, access=access, alignment=size)
            where_off = f"at byte offset {off}" if name is not None else f"at address {off:#x}"
            return KernelFault("misaligned", f"misaligned {vec} {access} of {what} {where_off} "
                                             f"({vec} needs {size}-byte alignment) by {where}", details)
        if kind == _K_GP:
            details.update(signal="SIGSEGV", address=int(R.addr))
            if R.addr:
                garbage = _uninitialised_hint(int(R.addr))
                return KernelFault("crash", f"SIGSEGV in {where}: access through the invalid "
                                            f"(non-canonical) address {R.addr:#x}{garbage}", details)
            return KernelFault("crash", f"SIGSEGV in {where}: general-protection fault (a misaligned "
                                        f"vector access or an invalid pointer; the instruction could "
                                        f"not be decoded)", details)
        if kind == _K_DIV:
            lines = [int(R.line)] + ([int(R.line2)] if R.line2 else [])
            details.update(lines=lines, n_done=int(R.n_done), n_wait=int(R.n_wait))
            if R.line2:
                other = f"thread {thread} waits at the barrier on line {R.line2}"
            else:
                other = f"{R.n_done} thread(s) returned without reaching it (e.g. thread {thread})"
            return KernelFault("barrier_divergence",
                               f"barrier divergence in {gw} {group}: {R.n_wait} thread(s) wait "
                               f"at {self.dialect.barrier_word} on line {R.line} while {other}", details)
        if kind == _K_DEADLOCK:
            return KernelFault("deadlock", f"deadlock in {gw} {group}: no thread can run", details)
        if kind == _K_TIMEOUT:
            t = self.backend.launch_timeout_s
            return KernelFault("timeout", f"kernel did not finish within {t:g} s ({where} was running)",
                               details)
        if kind == _K_STACK:
            details.update(signal="SIGSEGV", stack_overflow=True)
            if R.aux >= 0:
                size = f"per-thread stack {self.backend.stack_size // 1024} KiB"
            else:
                size = "fiber-free path, on the host thread's stack"
            return KernelFault("crash", f"stack overflow in {where} ({size}; deep recursion or "
                                        f"large local arrays?)", details)
        if kind == _K_SETUP:
            return KernelFault("crash", "the simulator could not allocate fiber stacks", details)
        signame = _SIGNAMES.get(int(R.sig), f"signal {R.sig}")
        details.update(signal=signame, address=int(R.addr))
        extra = ""
        if R.sig in (signal.SIGSEGV, signal.SIGBUS):
            if R.addr < 65536:
                extra = f": null pointer dereference (address {R.addr:#x})"
            elif R.near_kind:
                near = self._far_access(R, guards, where, details)
                if near is not None:
                    return near
                if R.near_kind == 1:
                    nearest = f"{guards[R.buf][1]} '{guards[R.buf][2]}'"
                else:
                    nearest = self._tg_array(R)[0]
                extra = (f": invalid address {R.addr:#x}, {R.near_dist} bytes from the nearest buffer, "
                         f"{nearest} (element {R.elem}){_uninitialised_hint(int(R.addr))}")
                details.update(nearest=nearest, distance=int(R.near_dist))
            else:
                extra = f": invalid address {R.addr:#x}{_uninitialised_hint(int(R.addr))}"
        elif R.sig == signal.SIGFPE:
            extra = ": arithmetic exception (integer division by zero?)"
        return KernelFault("crash", f"{signame} in {where}{extra}", details)


# ------------------------------------------------------------------ the backend
class SimBackend(Backend):
    name = "sim"
    eager = True    # a kernel call runs the kernel before it returns

    def __init__(self, dialect: str = "metal", launch_timeout_s: float = 60.0,
                 stack_size: int = 128 * 1024, force_fibers: bool | None = None):
        if dialect not in _DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}")
        self.dialect = dialect
        self._dialect = _DIALECTS[dialect]()
        self.launch_timeout_s = launch_timeout_s
        self.stack_size = int(stack_size)
        if force_fibers is None:
            force_fibers = os.environ.get("MLXSCI_SIM_FIBERS", "") not in ("", "0")
        self.force_fibers = bool(force_fibers)
        # The order threads run in (runtime/sim_runtime.h, __SIM_SCHEDULE_*): 0 in order,
        # 1 reversed. The worker verifies once more under 1 to expose races.
        self.schedule = int(os.environ.get("MLXSCI_SIM_SCHEDULE", "0") or 0)
        # (kernel name, seconds) of every launch while the sim timer records
        # (mlxsci.timers.SimTimer); None when nobody listens.
        self.activity: list | None = None
        self.extra_defines: tuple[str, ...] = ()
        if os.environ.get("MLXSCI_SIM_UCONTEXT", "") not in ("", "0"):
            self.extra_defines = ("-DSIM_FIBER_UCONTEXT=1",)

    @classmethod
    def available(cls) -> bool:
        try:
            build.zig_executable()
            import mlx.core  # noqa: F401
        except Exception:
            return False
        return True

    def device_info(self) -> dict:
        cpu = _cpu_model()
        h = hashlib.sha256()
        h.update(cpu.encode())
        h.update(build.runtime_digest().encode())
        return {"name": f"CPU simulator ({cpu})", "fingerprint": h.hexdigest()[:16]}

    def kernel(self, spec: KernelSpec) -> SimKernel:
        if spec.dialect != self.dialect:
            raise ValueError(f"kernel dialect {spec.dialect!r} does not match backend dialect "
                             f"{self.dialect!r}")
        return SimKernel(self, spec)

    def to_device(self, array):
        import mlx.core as mx
        return mx.array(array)

    def synchronize(self) -> None:
        return None
