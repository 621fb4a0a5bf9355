"""CUDA's language rules that NVRTC enforces and clang-as-C++ does not.

CUDA (NVRTC with MLX's flags, `--device-as-default-execution-space`; NVRTC
User Guide 4.1 Execution Space and 4.5 Include Syntax; each rule below was
checked against NVRTC 12.9 with MLX 0.32's embedded device headers, and the
messages are NVRTC's):
  include     host C/C++ standard library headers are not on NVRTC's include path
  std         namespace std is empty under NVRTC (only a few names that
              libcu++ and NVRTC declare exist); use cuda::std:: or CUDA's own
              functions (sqrtf, fminf, ...)
  host        a function explicitly marked `__host__` alone is rejected in JIT mode
  undefined   math.h's M_* constants and Metal's scalar type names (uint, ...)
              are not defined
  shared      a `__shared__` variable has no initializer (CUDA C++ Programming
              Guide, __shared__: "__shared__ variables cannot have an
              initialization as part of their declaration"); clang-as-C++
              would initialise it once per launch, not per block
Lambdas are legal CUDA device code and are not checked.
"""

from __future__ import annotations

import re

from mlxsci.backends.sim.language_tokens import (
    Token,
    Violation,
    close_bracket,
    code_only,
    first_error,
    tokenize,
)
from mlxsci.backends.sim.source_scan import mask_comments_and_strings
from mlxsci.kernel.spec import CompileError

__all__ = ["check_cuda"]


# Host C and C++ standard library headers: NVRTC's include path has only the
# CUDA toolkit's and MLX's headers ("cannot open source file").
_HOST_HEADERS = frozenset(
    """
    algorithm any array atomic barrier bit bitset cassert cctype cerrno cfenv cfloat charconv chrono
    cinttypes climits clocale cmath codecvt compare complex concepts condition_variable coroutine
    csetjmp csignal cstdarg cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype deque
    exception execution expected filesystem format forward_list fstream functional future
    initializer_list iomanip ios iosfwd iostream istream iterator latch limits list locale map memory
    memory_resource mutex new numbers numeric optional ostream queue random ranges ratio regex
    scoped_allocator semaphore set shared_mutex source_location span sstream stack stdexcept stop_token
    streambuf string string_view syncstream system_error thread tuple type_traits typeindex typeinfo
    unordered_map unordered_set utility valarray variant vector version
    assert.h ctype.h errno.h fenv.h float.h inttypes.h limits.h locale.h math.h setjmp.h signal.h
    stdarg.h stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h time.h wchar.h wctype.h
    """.split()
)
# The few std:: names that exist under NVRTC with MLX's headers (NVRTC 12.9).
_STD_AVAILABLE = frozenset(
    {"initializer_list", "move", "forward", "tuple_size", "tuple_element", "align_val_t"}
)
# Names a host header would define; NVRTC: `identifier "M_PI" is undefined`.
_HOST_NAMES = frozenset(
    {
        "M_E",
        "M_LOG2E",
        "M_LOG10E",
        "M_LN2",
        "M_LN10",
        "M_PI",
        "M_PI_2",
        "M_PI_4",
        "M_1_PI",
        "M_2_PI",
        "M_2_SQRTPI",
        "M_SQRT2",
        "M_SQRT1_2",
        "MAXFLOAT",
        "HUGE_VALF",
        "M_PI_F",
        "M_PI_2_F",
        "M_PI_4_F",
        "M_1_PI_F",
        "M_2_PI_F",
        "M_E_F",
        "M_SQRT2_F",
        "M_SQRT1_2_F",
        "M_LN2_F",
        "M_LN10_F",
        "M_LOG2E_F",
        "M_LOG10E_F",
        "uint",
        "ushort",
        "uchar",
        "ulong",
    }
)
_HOST_FUNCTIONS = frozenset({"exit", "abort", "rand", "srand"})
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<(?P<name>[^>\n]+)>", re.M)
# `typedef` is found alone: what it names is the word before the `;` that
# ends it (`_defined_names`), where a regex running on to that `;` again from
# every `typedef` of a long run was quadratic.
_DEFINED_NAME = re.compile(
    r"#[ \t]*define[ \t]+(?P<name>\w+)|\b(?P<typedef>typedef)\b|\busing\s+(?P<alias>\w+)\s*="
)
_TYPEDEF_END = re.compile(r"[;{}]")
_LAST_WORD = re.compile(r"\b(\w+)\s*\Z")


def _defined_names(masked: str) -> set[str]:
    """The names a `#define`, `typedef ... NAME;` or `using NAME =` defines."""
    defined: set[str] = set()
    pos, end_at, end = 0, -1, -1  # the `;{}` after end_at, memoized: asked in order
    nameless = -1  # a `;` with no word before it: every typedef ending there fails
    while True:
        m = _DEFINED_NAME.search(masked, pos)
        if m is None:
            return defined
        if not m.group("typedef"):
            defined.add(m.group("name") or m.group("alias"))
            pos = m.end()
            continue
        if not (end_at <= m.end() <= end):
            found = _TYPEDEF_END.search(masked, m.end())
            end = found.start() if found else len(masked)
        end_at = m.end()
        word = None
        if masked.startswith(";", end) and end != nameless:
            word = _LAST_WORD.search(masked, m.end(), end)
            nameless = end if word is None else nameless
        if word is None:  # no `;` ends it, or no word before that `;`: not a typedef here
            pos = m.start() + 1
            continue
        defined.add(word.group(1))
        pos = end + 1


def _cuda_includes(masked: str) -> list[Violation]:
    out = []
    for m in _INCLUDE.finditer(masked):
        name = m.group("name").strip()
        if name in _HOST_HEADERS:
            out.append(
                Violation(
                    m.start("name") - 1,
                    f'catastrophic error: cannot open source file "{name}": NVRTC '
                    f"has no host C/C++ standard library headers (NVRTC User Guide "
                    f"4.5); use CUDA's built-in functions or <cuda/std/...> headers",
                )
            )
    return out


def _cuda_std_names(toks: list[Token]) -> list[Violation]:
    out = []
    for k in range(len(toks) - 2):
        if toks[k].text != "std" or toks[k + 1].text != "::" or not toks[k + 2].is_ident:
            continue
        if k > 0 and toks[k - 1].text == "::":
            continue  # cuda::std::
        name = toks[k + 2].text
        if name not in _STD_AVAILABLE:
            out.append(
                Violation(
                    toks[k].pos,
                    f'namespace "std" has no member "{name}": NVRTC '
                    f"compiles device code without the C++ standard "
                    f"library; use cuda::std::{name} where libcu++ has "
                    f"it, or CUDA's own functions (e.g. fminf, sqrtf)",
                )
            )
    return out


def _cuda_host_functions(toks: list[Token]) -> list[Violation]:
    out: list[Violation] = []
    if not any(t.text == "__host__" for t in toks):
        return out
    # per token: where its declaration starts (after the last `;{}`), where
    # its declarator's `(` (or the `;{` ending it) is, and how many
    # `__device__` come before it; in two passes, since a scan both ways
    # from every `__host__` was quadratic in a run of them
    n = len(toks)
    starts, devices = [0] * n, [0] * (n + 1)
    start = 0
    for k, t in enumerate(toks):
        starts[k] = start
        if t.text in (";", "{", "}"):
            start = k + 1
        devices[k + 1] = devices[k] + (t.text == "__device__")
    ends, end = [n] * n, n
    for k in range(n - 1, -1, -1):
        if toks[k].text in ("(", ";", "{"):
            end = k
        ends[k] = end
    for k, tok in enumerate(toks):
        if tok.text != "__host__":
            continue
        lo, hi = starts[k], ends[k]
        if devices[hi] == devices[lo]:
            out.append(
                Violation(
                    tok.pos,
                    "A function explicitly marked as a __host__ function "
                    "is not allowed in JIT mode (NVRTC User Guide 4.1); "
                    "mark it __device__ or __host__ __device__",
                )
            )
    return out


def _cuda_shared_initializers(toks: list[Token]) -> list[Violation]:
    """`__shared__ float s[4] = {0};`, `__shared__ int n{};`: the `=` or
    brace after the declarator, before the `;` that ends the declaration
    (the brackets of bounds and the parentheses of `__align__(16)` skipped)."""
    out = []
    for k, tok in enumerate(toks):
        if tok.text != "__shared__":
            continue
        j = k + 1
        while j < len(toks):
            t = toks[j].text
            if t in ("(", "["):
                j = close_bracket(toks, j) + 1
                continue
            if t == "=" or (t == "{" and (toks[j - 1].is_ident or toks[j - 1].text == "]")):
                out.append(
                    Violation(
                        toks[j].pos,
                        "initializer not allowed for __shared__ variable: shared memory "
                        "is undefined when a block starts (CUDA C++ Programming Guide); "
                        "declare it without one, have the threads write it, then "
                        "__syncthreads()",
                    )
                )
            # another `__shared__` scans on from there: each token is read once
            if t in ("=", "{", ";", "}", "__shared__"):
                break
            j += 1
    return out


def _cuda_undefined_names(toks: list[Token], masked_with_directives: str) -> list[Violation]:
    defined = _defined_names(masked_with_directives)
    out = []
    for k, tok in enumerate(toks):
        name = tok.text
        if name in defined or (k > 0 and toks[k - 1].text in (".", "->", "::")):
            continue
        call = k + 1 < len(toks) and toks[k + 1].text == "("
        if name in _HOST_NAMES or (name in _HOST_FUNCTIONS and call):
            out.append(
                Violation(
                    tok.pos,
                    f'identifier "{name}" is undefined: it comes from a host '
                    f"header or from Metal, which NVRTC does not have" + _cuda_hint(name),
                )
            )
    return out


def _cuda_hint(name: str) -> str:
    if name.startswith("M_") or name in ("MAXFLOAT", "HUGE_VALF"):
        return (
            "; write the constant out (e.g. 3.14159265358979f) or include <math_constants.h> "
            "for CUDART_PI_F"
        )
    if name in ("uint", "ushort", "uchar", "ulong"):
        return "; use unsigned int / uint32_t and friends"
    return "; device code cannot call it"


def check_cuda(text: str, regions, source_file: str = "<candidate>") -> CompileError | None:
    """The first NVRTC rule the kernel text breaks, as a CompileError at the
    candidate's line; None where it breaks none."""
    masked = mask_comments_and_strings(text)
    toks = tokenize(code_only(text))
    violations = (
        _cuda_includes(masked)
        + _cuda_std_names(toks)
        + _cuda_host_functions(toks)
        + _cuda_undefined_names(toks, masked)
        + _cuda_shared_initializers(toks)
    )
    return first_error(violations, text, regions, source_file)
