"""What a kernel's object may call and define: the link-time fence of the simulator.

A kernel is compiled to an object file, then linked with the runtime object
(which alone talks to the C library) into one shared library. Before the link,
the kernel's object is read here (its ELF symbol table) and refused when it
- calls anything but the simulator's runtime (`__sim_*`), the linker's section
  bounds, the compiler's own helpers (compiler-rt: half and bfloat16
  conversions, wide arithmetic), C math functions and the memory functions the
  compiler emits for copies: a call to `open`, `socket`, `system`, `getenv`,
  `clock_gettime`, `dlsym`, `syscall`, ... is a compile error naming it;
- defines a symbol the runtime object refers to: linked into one library,
  that definition would take the place of the C library's for the runtime
  (a kernel defining `clock_gettime` would have set the simulator's clock),
  or any C-linkage function (a kernel has no business defining one);
- calls the modelled GPU's counters (`__sim_prof_block`, `__sim_prof_access`:
  runtime/sim_profile.inc) in the plain build: only the profiled build
  (profile.py) calls them, placed in its assembly after the candidate's text
  is compiled, and its check alone (`profiled=True`) lets them through, with
  the preludes' atomic markers (`__sim_prof_atomic_begin`/`_end`, compiled
  into that build only);
- defines, with any linkage, a name of the profiled build's hooks
  (`__sanitizer_cov_*`, which its compiler calls), of the counters
  (`__sim_prof_*`) or of the bounds-checked build's handler (`__ubsan_*`,
  bounds.py): a `static` one would bind that build's calls to itself
  within the object and take the runtime's place;
- calls the bounds check's handler (`__ubsan_handle_out_of_bounds`) in any
  build but the bounds-checked one (`bounded=True`);
- defines writable data that is not the runtime's own (`writable_state`: a
  data or thread-local symbol, local ones included, in a writable section:
  .data, .bss and the like): a variable that keeps its value from launch to
  launch, where a kernel could memoise answers or tell the check's runs from
  the timed ones. The runtime's threadgroup memory (refilled before each
  group) and its launch constants are its own.
After the link, the library may export only its entry points.

The rules read symbol names, not source text, so no spelling of the source
(macros, casts, templates) changes what they see. What they do not see is a
call through an address computed at run time; the worker's seccomp filter
(mlxsci.sandbox) is the layer for that. ELF only (Linux); on another format
the check is skipped, as is the sandbox.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

ENTRY_POINTS = frozenset({"__sim_entry", "__sim_tgmem_bytes"})
# The glue's own C-linkage definitions besides the entry points (hidden).
GLUE_DEFINITIONS = frozenset({"__sim_dyn_smem"})

_MATH = (
    "sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 exp10 expm1 "
    "log log2 log10 log1p logb ilogb pow sqrt cbrt hypot fabs floor ceil round trunc rint "
    "nearbyint lround llround lrint llrint fmod remainder remquo fma fmax fmin fdim copysign "
    "nextafter nexttoward ldexp frexp modf scalbn scalbln erf erfc tgamma lgamma sincos nan"
).split()
ALLOWED_CALLS = frozenset(
    [f + suffix for f in _MATH for suffix in ("", "f")] + ["memcpy", "memmove", "memset", "memcmp"]
)
# compiler-rt's helpers: __<operation><types><arity digit>, e.g. __extendhfsf2,
# __truncsfbf2, __muldc3, __udivti3, __popcountdi2.
COMPILER_RT_HELPERS = re.compile(
    r"__(extend|trunc|fix|fixuns|float|floatun|floatuns|mul|div|udiv|mod|umod|udivmod|divmod|"
    r"pow|powi|popcount|parity|clz|ctz|ffs|bswap|ashl|ashr|lshr|neg|cmp|ucmp|abs|absv|addv|"
    r"subv|mulv|negv|mulo|add|sub|eq|ne|lt|le|gt|ge|unord)[a-z]*[0-9]"
)
_LINKER_BOUNDS = re.compile(r"__(start|stop)_sim_\w+")
# The modelled GPU's counters: calls only the profiled build places
# (profile.py: rewrite_assembly), and the names a kernel may never define:
# those counters and the coverage hooks the profiled build's compiler calls.
PROFILE_CALLS = frozenset(
    {
        "__sim_prof_block",
        "__sim_prof_access",
        "__sim_prof_atomic_begin",
        "__sim_prof_atomic_end",
        "__sim_prof_thread_slot",
    }
)
_PROFILE_PREFIX = "__sim_prof_"
_HOOK_NAMES = re.compile(r"(?:__sanitizer_cov_|__sim_prof_|__ubsan_)\w*")
# The bounds-checked build's handler (bounds.py, runtime/sim_bounds.inc).
BOUNDS_CALLS = frozenset({"__ubsan_handle_out_of_bounds", "__ubsan_handle_out_of_bounds_abort"})


@dataclass(frozen=True)
class Symbol:
    name: str
    defined: bool
    binding: int  # 0 local, 1 global, 2 weak
    visibility: int  # 0 default, 1 internal, 2 hidden, 3 protected
    kind: int = 0  # 0 none, 1 object, 2 function, 3 section, 4 file, 6 thread-local
    section: str = ""  # the name of the section it is defined in
    writable: bool = False  # defined in memory the program can write (or a common/TLS symbol)


_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
_STT_FUNC, _STT_SECTION, _STT_FILE, _STT_TLS = 2, 3, 4, 6
_SHF_WRITE, _SHF_ALLOC, _SHF_TLS = 0x1, 0x2, 0x400
_SHN_LORESERVE, _SHN_COMMON = 0xFF00, 0xFFF2
# Writable data a kernel object may define: the runtime's own. The threadgroup
# statics and the records of guarded threadgroup arrays (sim_runtime.h: the
# runtime refills them before each group, so nothing written there outlives
# a group), the references binding file-scope ones (set once at load), the preludes' internal objects (`__sim_c`, the launch constants
# the fiber-free loop reads, rewritten at every launch; CUDA's running
# thread `__sim_cu_t`, clock and __syncthreads_count accumulator; the
# optimiser may split one into `.0`, `.1`, ...: a kernel cannot name
# `__sim*`, the source policy refuses it), and what is writable only while
# the loader relocates it (.data.rel.ro: read-only once loaded).
RUNTIME_DATA_SECTIONS = frozenset({"sim_tgmem", "sim_tgarrays", "sim_tgrefs"})
RUNTIME_OBJECTS = re.compile(r"_ZL\d+__sim_\w+(?:\.\d+)*")
_RELRO = ".data.rel.ro"


def symbols(path: Path, dynamic: bool = False) -> list[Symbol] | None:
    """The symbols of an ELF64 little-endian file: its static table (an
    object) or its dynamic one (a library); None when the file is not such
    an ELF file."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    names = data[sections[shstrndx][4] :] if shstrndx < shnum else b""

    def section_name(i: int) -> str:
        start = sections[i][0]
        return names[start : names.index(b"\0", start)].decode(errors="replace")

    wanted = _SHT_DYNSYM if dynamic else _SHT_SYMTAB
    found: list[Symbol] = []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != wanted or not entsize:
            continue
        strtab = sections[link]
        strings = data[strtab[4] : strtab[4] + strtab[5]]
        for k in range(1, size // entsize):  # entry 0 is the null symbol
            st_name, st_info, st_other, st_shndx = struct.unpack_from(
                "<IBBH", data, offset + k * entsize
            )
            end = strings.index(b"\0", st_name)
            name = strings[st_name:end].decode(errors="replace")
            where, writable = "", st_shndx == _SHN_COMMON or st_info & 0xF == _STT_TLS
            if 0 < st_shndx < min(shnum, _SHN_LORESERVE):
                where = section_name(st_shndx)
                flags = sections[st_shndx][2]
                writable = writable or (flags & _SHF_ALLOC and flags & (_SHF_WRITE | _SHF_TLS))
            found.append(
                Symbol(
                    name,
                    st_shndx != 0,
                    st_info >> 4,
                    st_other & 3,
                    st_info & 0xF,
                    where,
                    bool(writable),
                )  # fmt: skip
            )
    return found


def allowed_call(name: str, profiled: bool = False, bounded: bool = False) -> bool:
    if name.startswith(_PROFILE_PREFIX):
        return profiled and name in PROFILE_CALLS
    if name in BOUNDS_CALLS:
        return bounded
    return (
        name.startswith("__sim_")
        or name in ALLOWED_CALLS
        or bool(COMPILER_RT_HELPERS.fullmatch(name))
        or bool(_LINKER_BOUNDS.fullmatch(name))
    )


def object_violation(
    obj: Path, runtime: Path | None = None, *, profiled: bool = False, bounded: bool = False
) -> str | None:
    """Why a kernel's object may not be linked with the `runtime` object, in
    compiler-log form (the build reads it like clang's output); None when it
    may. `profiled`: the object of the profiled build (profile.py), which
    alone may call the counters (PROFILE_CALLS); `bounded`: the
    bounds-checked build's (bounds.py), which alone may call BOUNDS_CALLS."""
    table = symbols(obj)
    if table is None:
        return None
    runtime_table = symbols(runtime) if runtime is not None else None
    runtime_uses = {s.name for s in runtime_table or () if not s.defined}
    calls = sorted({s.name for s in table if not s.defined and s.name and s.binding != 0})
    counters = [n for n in calls if n.startswith(_PROFILE_PREFIX) and not allowed_call(n, profiled)]
    if counters:
        return (
            f"error: undefined symbol: {', '.join(counters)} (the modelled GPU's counters "
            "belong to the simulator's runtime: a kernel may not call them)"
        )
    refused = [n for n in calls if not allowed_call(n, profiled, bounded)]
    if refused:
        return (
            f"error: undefined symbol: {', '.join(refused)} (a kernel can call only the "
            "simulator's runtime, math functions and the kernel language's built-ins: "
            "no C library or system function)"
        )
    hooks = hook_definitions(table)
    if hooks:
        return (
            f"error: the kernel defines {', '.join(hooks)}: the names of the profiling "
            "hooks, of the modelled GPU's counters and of the bounds check's handler "
            "belong to the simulator's runtime"
        )
    own = sorted(
        {
            s.name
            for s in table
            if s.defined
            and s.binding != 0
            and s.name not in ENTRY_POINTS | GLUE_DEFINITIONS
            and (s.name in runtime_uses or (s.kind == _STT_FUNC and not s.name.startswith("_Z")))
        }
    )
    if own:
        return (
            f"error: the kernel defines the C-linkage symbol {', '.join(own)}: kernel code "
            "may not define C-linkage functions, nor anything the simulator's runtime uses "
            "(it would replace the C library's for the runtime)"
        )
    state = writable_state(table)
    if state:
        return (
            f"error: the kernel defines writable data that outlives a launch: "
            f"{', '.join(state[:8])} (a variable at program scope, a `static` local, a static "
            "data member or a thread_local that is not constant; a kernel's outputs must "
            "follow from its inputs within one launch: make it constant, or a local variable)"
        )
    return None


def hook_definitions(table: list[Symbol]) -> list[str]:
    """The profiling hooks' and counters' names an object defines, local
    ones included: within one object a call binds to a local definition
    before the runtime's."""
    return sorted(
        {
            s.name
            for s in table
            if s.defined and s.kind not in (_STT_SECTION, _STT_FILE) and _HOOK_NAMES.match(s.name)
        }
    )


def writable_state(table: list[Symbol]) -> list[str]:
    """The data objects of a kernel's object (local ones included: a
    `static` keeps its value whatever its linkage) that live in writable
    memory and are not the runtime's own: state a kernel could keep from
    launch to launch. The source policy refuses such variables in the text
    (mlxsci/kernel/source/storage.py); this sees what the compiler made of it, a
    run-time initialised constant's guard variable included."""
    return sorted(
        {
            s.name or f"data in section {s.section}"
            for s in table
            if s.defined
            and s.writable
            and s.kind not in (_STT_SECTION, _STT_FILE, _STT_FUNC)
            and s.section not in RUNTIME_DATA_SECTIONS
            and not s.section.startswith(_RELRO)
            and not RUNTIME_OBJECTS.fullmatch(s.name)
            # the dynamic shared memory's binding: a reference, set once at load
            and s.name not in GLUE_DEFINITIONS
        }
    )


def library_violation(library: Path) -> str | None:
    """Why a linked kernel library may not be loaded: it exports something
    besides its entry points. None when it may."""
    table = symbols(library, dynamic=True)
    if table is None:
        return None
    exported = sorted(
        {s.name for s in table if s.defined and s.binding != 0 and s.visibility in (0, 3)}
    )
    extra = [n for n in exported if n not in ENTRY_POINTS]
    if extra:
        return f"error: the kernel library exports {', '.join(extra)} besides its entry points"
    return None
