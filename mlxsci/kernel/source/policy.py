"""Only kernel code compiles: what a candidate's text may hold, checked before
any compiler sees it, on every backend (issue 21, outcome 1).

A candidate is text an LLM wrote. On a GPU its code cannot reach the host,
but the compiler runs on the host: `#include "/etc/hostname"`, `#embed` and
`__has_include` put host files into the compile errors a prompt quotes. On
the simulator the code itself runs as host code. So the header and every
kernel body may hold only what the dialect's kernel language needs, and
`check_candidate` refuses anything else as a CompileError at the candidate
file's line, with a message a model can act on:

  directives  only #define, #undef, the conditionals, `#include <h>` of the
              dialect's own headers (`HEADERS`) and the loop pragmas
              (mlxsci/kernel/source/preprocess.py): no #include of any other file,
              #include_next, #import, #embed, #line, #error, other #pragma
  names       no inline assembly (`asm`, `__asm__`), `_Pragma`,
              `__has_include` / `__has_include_next` / `__has_embed`,
              `__declspec`, `typeof`; no `__builtin_*` outside `BUILTINS`;
              no host-only function or object (`HOST_NAMES`: processes,
              files, sockets, the environment, dynamic loading, exit and
              signal handlers, stdio; `printf` too, CUDA's device printf
              included: on the simulator a kernel's output is host output
              that reaches prompts, and one rule for every backend keeps a
              candidate's verdict the same everywhere); none of
              the simulator's or the C library's internal names; no
              `__FILE__`-like names that reveal host paths or times
  constructs  attributes, `extern` (CUDA's `extern __shared__ T name[];`
              only), function pointers and function types
              (mlxsci/kernel/source/constructs.py)
  storage     no state that outlives a launch (mlxsci/kernel/source/storage.py):
              Metal's program-scope variables only in `constant`, no
              writable `static` variable; CUDA's `__device__`/`__managed__`
              and other mutable globals and non-const `static` locals
              refused (`__constant__`, const, `__shared__` stay)
  #define     no macro named like a keyword, a reserved name (`__x`, `_X`)
              or a name of the dialect's own (a header's macros also apply
              to the text MLX generates around a body)

Macros hide nothing: the raw tokens are checked (every line, taken or not,
each macro's replacement list as written), then the text is preprocessed
exactly as every compiler preprocesses it and the resulting tokens are
checked again, every token a `##` forms included.

The simulator's Metal rules read the same preprocessing's result
(`expand_parts`, mlxsci/kernel/source/expansion.py), so they too judge what
the compiler compiles.

Why a preprocessor of our own (mlxsci/kernel/source/macros.py,
mlxsci/kernel/source/preprocess.py, mlxsci/kernel/source/conditions.py) rather than clang's `-E`: the
check runs in the parent on every backend, also where no compiler of ours is
installed (Metal on macOS); a real preprocessor acts on what it reads
(`_Pragma` pragmas, `__has_include` probes, crashes on `#pragma clang
__debug`) and hides what `##` built; and clang's `-E` decides `#if` with
its own predefined macros, which differ from the simulator's prelude,
Metal's and NVRTC's, so what it vouched for need not be what another
compiler compiles. Ours refuses every `#if` whose value could differ between
compilers, sees each pasted token as it is made, and is bounded in time and
output (mlxsci/kernel/source/lexer.py refuses what lexers could disagree on).

What it cannot see (the simulator's link restrictions and sandbox guard it,
mlxsci/sandbox): a function pointer obtained without naming its type
(`auto f = some_function;`, a lambda converted to one, `decltype(f)*`, a
function type as a template argument); a host function under a name not in
`HOST_NAMES` (the list is defence in depth beside the simulator's
restrictions on what a kernel library may link); a compiler's own macro given a candidate's arguments, or one named
in lower case reaching a `##` (names in capitals and reserved names are
refused there).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

from mlxsci.kernel import dialects
from mlxsci.kernel.source.constructs import ATTRIBUTES, check_sequence
from mlxsci.kernel.source.expansion import PartExpansion, part_expansion
from mlxsci.kernel.source.lexer import Refused, Tok, lex_part
from mlxsci.kernel.source.macros import Macro
from mlxsci.kernel.source.preprocess import Preprocessor
from mlxsci.kernel.source.storage import check_storage
from mlxsci.kernel.spec import CompileError

__all__ = [
    "check_candidate",
    "check_parts",
    "expand_parts",
    "refusal",
    "BUILTINS",
    "HOST_NAMES",
    "HEADERS",
]

_MATH = (
    "acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 "
    "fabs fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 "
    "log1p log2 logb lrint lround modf nearbyint nextafter pow remainder remquo rint round scalbn "
    "sin sinh sqrt tan tanh tgamma trunc"
)
# The __builtin_ functions a kernel may call: math (plain, f, l), bit
# operations, overflow-checked arithmetic, classification, hints and
# constants. Not: frame/return addresses, alloca, setjmp, va_*, I/O, cpu_*.
BUILTINS = re.compile(
    r"__builtin_(?:(?:" + "|".join(_MATH.split()) + r")[fl]?"
    r"|(?:clz|ctz|popcount|parity|ffs|clrsb)(?:l|ll)?|clzg|ctzg|popcountg"
    r"|bswap(?:16|32|64)|bitreverse(?:8|16|32|64)|rotate(?:left|right)(?:8|16|32|64)"
    r"|(?:add|sub|mul)_overflow|[su](?:add|sub|mul)(?:l|ll)?_overflow"
    r"|isnan|isinf|isfinite|isnormal|signbit|fpclassify|isless|islessequal|isgreater"
    r"|isgreaterequal|islessgreater|isunordered|(?:inf|huge_val|nan|nans)[fl]?"
    r"|expect|expect_with_probability|assume|assume_aligned|unreachable|trap"
    r"|bit_cast|memcpy|memset|memmove|is_constant_evaluated|constant_p|offsetof|prefetch"
    r"|convertvector|shufflevector)\Z"
)
_PRINT = frozenset(
    "printf fprintf sprintf snprintf vprintf vfprintf vsprintf vsnprintf dprintf vdprintf puts "
    "putchar fputs fputc putc putw perror psignal psiginfo scanf fscanf sscanf vscanf getchar "
    "gets getline fgets fgetc getw".split()
)
HOST_NAMES = _PRINT | frozenset(
    # processes, signals, exit
    "system popen pclose fork vfork clone clone3 execl execlp execle execv execvp execvpe execve "
    "execveat fexecve posix_spawn posix_spawnp daemon setsid kill killpg ptrace prctl syscall "
    "exit _exit _Exit quick_exit abort atexit at_quick_exit on_exit signal sigaction raise "
    "alarm sigqueue setjmp longjmp sigsetjmp siglongjmp pthread_create thrd_create wait3 wait4 "
    # dynamic loading
    "dlopen dlmopen dlsym dlvsym dladdr dlinfo dlerror dlclose dl_iterate_phdr "
    # files and descriptors
    "fopen freopen fdopen fclose fwrite fread fflush open openat openat2 creat close read "
    "write pread pwrite readv writev unlink unlinkat remove rename renameat renameat2 mkdir "
    "rmdir link linkat symlink symlinkat truncate ftruncate chmod fchmod chown fchown mknod "
    "opendir readdir tmpfile mkstemp mkostemp mkstemps mkostemps mkdtemp mktemp tmpnam tempnam "
    "realpath canonicalize_file_name posix_openpt getpt ptsname grantpt unlockpt getloadavg "
    "mmap munmap mprotect mremap ioctl fcntl fileno dup dup2 dup3 pipe pipe2 sendfile splice "
    "stdin stdout stderr FILE "
    "cout cerr clog cin ofstream ifstream fstream filesystem "
    # network
    "socket socketpair connect getaddrinfo gethostbyname "
    # the environment
    "getenv secure_getenv setenv putenv unsetenv clearenv environ getauxval".split()
)
_ASM = frozenset({"asm", "__asm", "__asm__"})
_FILE_PROBES = frozenset({"__has_include", "__has_include_next", "__has_embed"})
_HOST_FACTS = frozenset(
    {"__FILE__", "__BASE_FILE__", "__FILE_NAME__", "__TIMESTAMP__", "__DATE__", "__TIME__"}
)
_OTHERS = {
    "_Pragma": "`_Pragma` runs a pragma; the only pragmas allowed are the loop pragmas, "
    "written as `#pragma unroll` and the like",
    "__pragma": "`__pragma` runs a pragma; the only pragmas allowed are the loop pragmas",
    "__declspec": "`__declspec` attributes are not allowed",
    "typeof": "`typeof` is not allowed (it can name a function pointer type); use decltype",
    "__typeof": "`__typeof` is not allowed (it can name a function pointer type)",
    "__typeof__": "`__typeof__` is not allowed (it can name a function pointer type)",
    "__VA_OPT__": "`__VA_OPT__` is not supported here; write the macro without it",
    "add_pointer": "`add_pointer` can name a function pointer type; kernels call functions by name",
    "add_pointer_t": "`add_pointer_t` can name a function pointer type; kernels call functions by name",
}
_LISTED = HOST_NAMES | frozenset(_OTHERS) | {"asm"}
# Variants of a host function's name (glibc's LFS, fortified, unlocked and
# reentrant twins, underscored aliases) name the same host function.
_VARIANT_SUFFIXES = ("_chk", "_unlocked", "64", "_2", "_r")
_TAILS = _VARIANT_SUFFIXES + tuple("0123456789")
# The simulator's runtime, the C and C++ runtimes' internals, linker symbols,
# the sanitizers' runtime hooks (the bounds-checked build calls __ubsan_*).
_INTERNAL = re.compile(
    r"(?:__sim|__SIM|__Sim|__mlxsci|__MLXSCI|__start_|__stop_|__libc|__cxa_|__gxx_|_IO_"
    r"|__environ|__CONCAT|__STRING|__XSTRING|_dl_|__dl|__gnu_|__pthread|__sys|__NR_"
    r"|__errno|__stack_chk|__morestack|__ubsan|__sanitizer|__asan)"
)
_CPP_KEYWORDS = frozenset(
    "alignas alignof asm auto bool break case catch char char8_t char16_t char32_t class concept "
    "const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype "
    "default delete do double dynamic_cast else enum explicit export extern false float for "
    "friend goto if inline int long mutable namespace new noexcept nullptr operator private "
    "protected public register reinterpret_cast requires return short signed sizeof static "
    "static_assert static_cast struct switch template this thread_local throw true try typedef "
    "typeid typename union unsigned using virtual void volatile wchar_t while override final "
    "defined".split()
)
_RESERVED = re.compile(r"__|_[A-Z]")


@dataclass(frozen=True)
class _Rules:
    """What a dialect's candidates may include, declare and #define."""

    headers: frozenset  # `#include <...>` names allowed
    extern_shared: bool  # `extern __shared__ T name[];` allowed
    own_names: frozenset  # names of the language a macro may not take


HEADERS = {
    "metal": frozenset(
        "metal_stdlib metal_math metal_atomic metal_simdgroup metal_simdgroup_matrix "
        "metal_compute metal_integer metal_common metal_geometric metal_relational "
        "metal_types metal_pack metal_numeric metal_matrix metal_limits metal_array "
        "metal_texture".split()
    ),
    "cuda": frozenset(
        "cuda_fp16.h cuda_bf16.h cooperative_groups.h cooperative_groups/reduce.h "
        "cuda/std/limits cuda/std/cmath cuda/std/type_traits cuda/std/utility "
        "cuda/std/cstdint cuda/std/array cuda/std/complex math_constants.h".split()
    ),
}
_RULES = {
    "metal": _Rules(
        HEADERS["metal"],
        False,
        ATTRIBUTES
        | frozenset(
            "kernel vertex fragment device constant threadgroup thread threadgroup_imageblock "
            "ray_data object_data half bfloat visible stitchable metal".split()
        ),
    ),
    "cuda": _Rules(
        HEADERS["cuda"],
        True,
        frozenset(
            "threadIdx blockIdx blockDim gridDim warpSize mlx core cu cg cooperative_groups".split()
        ),
    ),
}


def _name_problem(name: str, after: str, language: str) -> str | None:
    """Why identifier `name` (after the token `after`) is refused, or None."""
    variant = name[0] == "_" or name.endswith(_TAILS)
    if name in _ASM:
        return (
            f"`{name}` (inline assembly) is not part of the {language} kernel language; "
            f"write the computation in plain {language}"
        )
    if name in _FILE_PROBES:
        return f"`{name}` probes files on the host; a candidate may not test for files or headers"
    if name in _OTHERS:
        return _OTHERS[name]
    if name.startswith("__builtin") and not BUILTINS.match(name):
        return (
            f"`{name}` is not one of the builtins a kernel may use (math, bit operations, "
            "__builtin_expect/assume/unreachable/trap, ...); write it in plain "
            f"{language}"
        )
    if name in _HOST_FACTS:
        return f"`{name}` reveals facts of the host (paths, times); leave it out"
    if _INTERNAL.match(name):
        return f"`{name}` is an internal name of the simulator or the C runtime; kernels may not use it"
    host = name in HOST_NAMES or (variant and _host_core(name) in HOST_NAMES)
    if host and after not in (".", "->"):
        if _host_core(name) in _PRINT:
            return (
                f"`{name}` is a host call here: the simulator runs kernels as host code and "
                "their output could reach prompts; remove debug output"
            )
        return (
            f"`{name}` is a host function or object, not part of the {language} kernel "
            "language: a kernel cannot reach the host (rename a variable of that name)"
        )
    return None


def _host_core(name: str) -> str:
    """`name` without leading underscores and the suffixes of its variants."""
    core = name.lstrip("_")
    trimmed = True
    while trimmed:
        trimmed = False
        for suffix in _VARIANT_SUFFIXES:
            if core.endswith(suffix) and len(core) > len(suffix):
                core, trimmed = core[: -len(suffix)], True
    return core


def _check_names(toks: list[Tok], language: str) -> None:
    after = ""
    for t in toks:
        name = t.text
        # only names that can be refused reach _name_problem (speed on long texts)
        if t.kind == "id" and (name[0] == "_" or name in _LISTED or name.endswith(_TAILS)):
            why = _name_problem(name, after, language)
            if why:
                raise Refused(t.line, why)
        after = name


class _Check:
    """One candidate's check in one dialect."""

    def __init__(self, dialect: str, budget: int):
        self.dialect = dialect
        self.rules = _RULES[dialect]
        self.language = dialects.get(dialect).language
        self.budget = budget

    def names(self, toks: list[Tok]) -> None:
        _check_names(toks, self.language)

    def sequence(self, toks: list[Tok], fragment: bool = False) -> None:
        check_sequence(
            toks,
            language=self.language,
            extern_shared=self.rules.extern_shared,
            fragment=fragment,
        )

    def may_define(self, name: str, line: int) -> None:
        if (
            name in _CPP_KEYWORDS
            or _RESERVED.match(name)
            or name in self.rules.own_names
            or name.startswith("custom_kernel_")  # MLX's names of the kernels
        ):
            raise Refused(
                line,
                f"a candidate may not #define or #undef `{name}`: keywords, reserved names "
                f"(`__x`, `_X`) and the names of the {self.language} language belong to the "
                "compiler",
            )

    def macro(self, m: Macro) -> None:
        self.sequence(m.body, fragment=True)

    def preprocessor(self) -> Preprocessor:
        return Preprocessor(
            self.rules.headers, self.may_define, self.names, self.macro, self.budget
        )

    def raw(self, text: str, first_line: int):
        """The part's logical lines, after checking every raw token's name."""
        lines = lex_part(text, first_line)
        self.names([t for ln in lines for t in ln.toks])
        return lines

    def expanded(self, pp: Preprocessor, lines, program_scope: bool = False) -> list[Tok]:
        """The part's tokens after preprocessing, once they pass the checks."""
        toks = pp.run(lines)
        self.names(toks)
        self.sequence(toks)
        check_storage(toks, self.dialect, program_scope)
        return toks


def _budget(texts) -> int:
    """How many tokens macro expansion may produce: a multiple of the text's
    size, never so much that a malicious text takes seconds."""
    return min(1_000_000, max(50_000, 2 * sum(len(t) for t in texts)))


# The one macro a kernel may test without setting it: what Metal's fast math
# mode predefines (MLX's compile_options={"math_mode": "fast"}), defined by
# the simulator exactly where the GPU's compiler defines it.
FAST_MATH = "__FAST_MATH__"


@dataclass(frozen=True)
class _Verdict:
    """The policy's refusal, or (where it has none) what the compiler
    compiles of the header and of each body, as their changed lines
    (mlxsci/kernel/source/expansion.py). Kept with the verdict in one cache
    entry: the simulator's Metal rules read the expansion of the very text
    the policy has just passed, and preprocessing it again would double the
    cost of a large candidate."""

    error: CompileError | None
    parts: tuple[PartExpansion, ...] = ()


@functools.lru_cache(maxsize=32)
def _check(
    dialect: str, header: tuple, bodies: tuple, source_file: str, fast_math: bool = False
) -> _Verdict:
    check = _Check(dialect, _budget([header[0], *(b[0] for b in bodies)]))
    try:
        header_lines = check.raw(*header)
        pp = check.preprocessor()
        pp.predefined.add(FAST_MATH)
        if fast_math:
            pp.macros[FAST_MATH] = Macro(FAST_MATH, None, False, [Tok("num", "1", 0)], 0)
        header_toks = check.expanded(pp, header_lines, program_scope=True)
        parts = [part_expansion(header[0], header[1], header_lines, header_toks)]
        for body in bodies:
            body_lines = check.raw(*body)
            body_toks = check.expanded(pp.fork(), body_lines)
            parts.append(part_expansion(body[0], body[1], body_lines, body_toks))
    except Refused as exc:
        where = f"{source_file}:{exc.line}: " if exc.line else f"{source_file}: "
        return _Verdict(CompileError(exc.message, exc.line, f"{where}error: {exc.message}\n"))
    return _Verdict(None, tuple(parts))


def _fresh(err: CompileError | None) -> CompileError | None:
    return None if err is None else dataclasses.replace(err)  # callers may raise it


def check_parts(
    dialect: str, parts, source_file: str = "<candidate>", fast_math: bool = False
) -> CompileError | None:
    """The policy's refusal of one kernel's text, or None: `parts` are
    (text, first line in the candidate file), the header's first when there
    is one, then the body's. `fast_math`: the kernel is built with Metal's
    fast math mode (__FAST_MATH__ defined)."""
    return expand_parts(dialect, parts, source_file, fast_math)[1]


def expand_parts(
    dialect: str, parts, source_file: str = "<candidate>", fast_math: bool = False
) -> tuple[list[PartExpansion] | None, CompileError | None]:
    """`check_parts`'s refusal, and where there is none, what the compiler
    compiles of each of `parts` (in their order) as their changed lines:
    the text the simulator's Metal rules judge (issue 41). The expansion is
    the policy's own, not a compiler's `-E`: it is the one the policy has
    vouched for (every `#if` it follows is decided the same by every
    compiler, `__FAST_MATH__` as the build defines it), it is bounded in
    time and output on hostile text, it reads no file, and it costs nothing
    more where the policy has run (the same cache entry)."""
    parts = [(_ended(text), line) for text, line in parts]
    header = parts[0] if len(parts) > 1 else ("", 1)
    verdict = _check(dialect, header, tuple(parts[-1:]), source_file, fast_math)
    if verdict.error is not None:
        return None, _fresh(verdict.error)
    got = list(verdict.parts)
    return (got if len(parts) > 1 else got[1:]), None


def check_candidate(c) -> CompileError | None:
    """The policy's refusal of candidate `c` (mlxsci.kernel.model.Candidate), or None."""
    bodies = tuple((_ended(k.body), k.body_line or 1) for k in c.kernels)
    header = (_ended(c.header), c.header_line or 1)
    # fast_math given as check_parts gives it: lru_cache keys on the arguments as passed
    return _fresh(_check(c.dialect, header, bodies, c.source_file, False).error)


def _ended(text: str) -> str:
    """`text` with its trailing newlines made one. Blank lines at the end of
    a part hold no token, so the policy's verdict is the same; the key of
    its cache is then the same for a candidate's part as parsed and as the
    simulator's generated text holds it (with a blank line after a body),
    and a kernel built by the parent is not checked a second time."""
    return text.rstrip("\n") + "\n" if text else text


def refusal(c, where: str) -> str | None:
    """Why `c` is refused, as an evaluation's fail reason ("compile error:
    {where}{line}: ..."), or None when the policy allows it."""
    err = check_candidate(c)
    if err is None:
        return None
    return (
        f"compile error: {where}{err.line}: {err.message}"
        if err.line
        else f"compile error: {err.message}"
    )
