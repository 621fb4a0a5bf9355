"""The constructs the source policy (mlxsci/kernel/source/policy.py) checks as
token sequences: attributes, `extern`, function pointers and function types.

`check_sequence` runs over a stream of tokens (a part of the candidate after
preprocessing: what a compiler parses) or over a macro's replacement list
(`fragment=True`: a construct it leaves unfinished is refused, since the
text after the macro's use is not known, except the allowed `extern` form
before its `;` and a closed parenthesised group).

  attributes  `[[...]]` may name only the standard attributes and Metal's
              (`ATTRIBUTES`), never a namespaced one (`gnu::`, `clang::`,
              `using gnu:`); `__attribute__((...))` only `GNU_ATTRIBUTES`:
              no constructor, destructor, visibility, alias, weak, section,
              used, ifunc, cleanup, naked, ...
  extern      only `extern __shared__ T name[];` and only where the dialect
              has dynamic shared memory (CUDA); never `extern "C"`
  functions   no function-pointer or function-reference declarator (`(*)`,
              `(&)`, `(C::*)`, `(^)` followed by a parameter list; also a call
              through `(*p)(...)`), no `decltype(&...)`, no function type
              named by `typedef` or `using`, no computed `goto *`: the ways
              to turn an integer into code to call; no `operator new` or
              `operator delete` of its own (they would replace the process's)
"""

from __future__ import annotations

from mlxsci.kernel.source.lexer import Refused, Tok

__all__ = ["check_sequence", "ATTRIBUTES", "GNU_ATTRIBUTES"]

ATTRIBUTES = frozenset(
    # C++: [dcl.attr]
    "maybe_unused likely unlikely fallthrough nodiscard noreturn deprecated "
    "carries_dependency no_unique_address assume "
    # Metal (MSL 5.2): kernel arguments and functions
    "kernel buffer texture sampler threadgroup thread_position_in_grid "
    "thread_position_in_threadgroup threadgroup_position_in_grid threads_per_threadgroup "
    "threads_per_grid threadgroups_per_grid thread_index_in_threadgroup "
    "thread_index_in_simdgroup thread_index_in_quadgroup thread_execution_width "
    "threads_per_simdgroup simdgroup_index_in_threadgroup simdgroups_per_threadgroup "
    "quadgroup_index_in_threadgroup quadgroups_per_threadgroup "
    "dispatch_threads_per_threadgroup dispatch_simdgroups_per_threadgroup "
    "dispatch_quadgroups_per_threadgroup grid_origin grid_size "
    "max_total_threads_per_threadgroup function_constant host_name id stage_in "
    "attribute user position".split()
)
# GNU attributes that change code generation only, spelled with or without
# the surrounding underscores.
GNU_ATTRIBUTES = frozenset(
    "aligned always_inline noinline unused maybe_unused packed pure const flatten hot cold "
    "noreturn vector_size ext_vector_type".split()
)
_ALIGN = ("__align__", "alignas")
_CV = ("const", "volatile", "restrict", "__restrict", "__restrict__")
_NOT_FUNCTION_TYPE = frozenset(
    "decltype sizeof alignof alignas __align__ __alignof__ _Alignof noexcept".split()
)
_POINTERS = ("*", "&", "&&", "^")


def _matches(toks: list[Tok]) -> list[int]:
    """For each opening bracket, the index of the bracket closing it (-1 if none)."""
    closer = {"(": ")", "[": "]", "{": "}"}
    match = [-1] * len(toks)
    stack: list[int] = []
    for k, t in enumerate(toks):
        if t.kind != "punct":
            continue
        if t.text in closer:
            stack.append(k)
        elif t.text in (")", "]", "}"):
            while stack and closer[toks[stack[-1]].text] != t.text:
                stack.pop()  # an unbalanced opener stays unmatched
            if stack:
                match[stack.pop()] = k
    return match


def _split(toks: list[Tok], lo: int, hi: int, match: list[int]) -> list[tuple[int, int]]:
    """[lo, hi) cut at its top-level commas."""
    parts, start, k = [], lo, lo
    while k < hi:
        if toks[k].text in ("(", "[", "{") and match[k] > 0:
            k = match[k] + 1
            continue
        if toks[k].text == ",":
            parts.append((start, k))
            start = k + 1
        k += 1
    parts.append((start, hi))
    return [p for p in parts if p[1] > p[0]]


class _Checker:
    def __init__(self, toks: list[Tok], fragment: bool, language: str, extern_shared: bool):
        self.toks = toks
        self.n = len(toks)
        self.fragment = fragment
        self.language = language
        self.extern_shared = extern_shared
        self.match = _matches(toks)
        self.in_alias = bytearray(len(toks))  # scanned as part of a typedef or alias

    def text(self, k: int) -> str:
        return self.toks[k].text if 0 <= k < self.n else ""

    def refuse(self, k: int, why: str) -> Refused:
        return Refused(self.toks[min(k, self.n - 1)].line, why)

    def run(self) -> None:
        k = 0
        while k < self.n:
            t = self.toks[k].text
            if t == "extern":
                k = self.extern(k)
            elif t in ("__attribute__", "__attribute"):
                k = self.gnu_attribute(k)
            elif t == "[" and self.text(k + 1) == "[":
                k = self.attribute(k)
            elif t == "(":
                self.function_pointer(k)
            elif t == "decltype" and self.text(k + 1) == "(" and self.text(k + 2) in ("&", "&&"):
                raise self.refuse(k, f"`decltype(&...)` names a function pointer type; {_NO_FP}")
            elif t == "operator" and self.text(k + 1) in ("new", "delete", ""):
                raise self.refuse(
                    k, "a kernel may not define its own `operator new` or `operator delete`"
                )
            elif t == "goto" and self.text(k + 1) in ("*", ""):
                raise self.refuse(
                    k, "a computed `goto *` jumps to an address; use structured control flow"
                )
            elif (t == "typedef" or (t == "using" and self.text(k + 2) == "=")) and not (
                self.in_alias[k]
            ):
                self.alias(k)
            k += 1

    # ------------------------------------------------------------ attributes
    def attribute(self, k: int) -> int:
        close = self.match[k + 1]
        if close < 0 or self.match[k] != close + 1:
            raise self.refuse(
                k, "`[[` must open an attribute list closed by `]]` in the same place"
            )
        for lo, _hi in _split(self.toks, k + 2, close, self.match):
            name = self.text(lo)
            if name == "using" or self.text(lo + 1) == "::":
                raise self.refuse(
                    lo, "namespaced attributes (`gnu::`, `clang::`, `using ...:`) are not allowed"
                )
            if name not in ATTRIBUTES:
                raise self.refuse(lo, f"`[[{name}]]` is not an attribute a kernel may use")
        return close + 1

    def gnu_attribute(self, k: int) -> int:
        if self.text(k + 1) != "(" or self.text(k + 2) != "(":
            raise self.refuse(k, "`__attribute__` must be followed by `((...))` in the same place")
        close = self.match[k + 2]
        if close < 0 or self.match[k + 1] != close + 1:
            raise self.refuse(k, "`__attribute__((` must be closed by `))` in the same place")
        for lo, _hi in _split(self.toks, k + 3, close, self.match):
            name = self.text(lo)
            bare = name[2:-2] if name.startswith("__") and name.endswith("__") else name
            if bare not in GNU_ATTRIBUTES:
                raise self.refuse(
                    lo,
                    f"`__attribute__(({name}))` is not allowed in a kernel (allowed: "
                    f"{', '.join(sorted(GNU_ATTRIBUTES))})",
                )
        return close + 2

    # ------------------------------------------------------------ extern
    def extern(self, k: int) -> int:
        form = "`extern __shared__ T name[];` (dynamic shared memory)"
        if not self.extern_shared:
            raise self.refuse(
                k,
                f"`extern` is not part of a {self.language} kernel candidate: it declares "
                "something outside the kernel; declare what you need in the header or the body",
            )
        if k + 1 < self.n and self.toks[k + 1].kind == "str":
            raise self.refuse(
                k, f'`extern "..."` linkage is not allowed; the only `extern` is {form}'
            )
        if self.text(k + 1) != "__shared__":
            raise self.refuse(
                k, f"the only `extern` a {self.language} candidate may write is {form}"
            )
        j = k + 2
        while j < self.n and self.text(j) != "[":
            t = self.toks[j]
            if t.text in _ALIGN and self.text(j + 1) == "(" and self.match[j + 1] > 0:
                j = self.match[j + 1] + 1
            elif t.kind in ("id", "num") or t.text in ("::", "<", ">", ",", "*"):
                j += 1
            else:
                raise self.refuse(
                    j, f"the only `extern` a {self.language} candidate may write is {form}"
                )
        tail = [self.text(j + d) for d in range(3)]
        complete = tail == ["[", "]", ";"] or (self.fragment and tail == ["[", "]", ""])
        if not complete or self.toks[j - 1].kind != "id" or j - 1 <= k + 1:
            raise self.refuse(
                k, f"the only `extern` a {self.language} candidate may write is {form}"
            )
        return j + 2

    # ------------------------------------------------------------ functions
    def function_pointer(self, k: int) -> None:
        j = k + 1
        while j < self.n and j - k <= 4 and (self.toks[j].kind == "id" or self.text(j) == "::"):
            j += 1
        if self.text(j) not in _POINTERS:
            return
        member = self.text(j - 1) == "::"
        if j > k + 1 and not member:  # `(T* ...)`: a cast unless a name follows the `*`s
            d = j
            while self.text(d) in _POINTERS or self.text(d) in _CV:
                d += 1
            if self.text(d) == ")":
                return
        close = self.match[k]
        if close < 0:
            if self.fragment:
                raise self.refuse(k, f"a macro may not leave `({self.text(j)}` open; {_NO_FP}")
            return
        if self.text(close + 1) == "(":
            raise self.refuse(k, f"function pointers and references are not allowed; {_NO_FP}")

    def alias(self, k: int) -> None:
        """Refuses a `typedef` or alias declaration that names a function type."""
        j = k + 1
        while j < self.n and self.text(j) != ";":
            self.in_alias[j] = 1
            t = self.text(j)
            if t == "{" and self.match[j] > 0:
                j = self.match[j] + 1
                continue
            if t == "(" and j > 0:
                before = self.toks[j - 1]
                if (
                    before.kind == "id" and before.text not in _NOT_FUNCTION_TYPE
                ) or before.text in (">", "]"):
                    raise self.refuse(j, f"a `typedef` or `using` naming a function type; {_NO_FP}")
            j += 1


_NO_FP = (
    "kernels call functions by name (a function pointer made from an integer can call any address)"
)


def check_sequence(
    toks: list[Tok], *, language: str, extern_shared: bool, fragment: bool = False
) -> None:
    """Raises Refused at the first construct in `toks` the policy forbids."""
    if toks:
        _Checker(toks, fragment, language, extern_shared).run()
