"""State that outlives a launch, refused: the source policy's storage rule
(mlxsci/kernel/source/policy.py runs `check_storage` on each part's tokens after
preprocessing: the header at program scope, a body inside its kernel).

A benchmark kernel's outputs must be a function of its inputs within one
launch. A variable of static storage duration that a kernel can write (at
program scope, a `static` local, a static data member) keeps its value from
launch to launch: there a kernel could memoise an answer, count its runs, or
tell the check's runs from the timed ones (a first thread writing down that
it was not thread 0 knows the simulator runs another order). So:

  Metal  every program-scope variable in the `constant` address space, as
         Apple's compiler requires ("program scope variable must reside in
         constant address space"; `constexpr sampler` is its exception), no
         `static` variable in a function unless `constant` (Apple's compiler
         refuses other function-scope statics), no static data member unless
         `constant`, `const` or `constexpr`;
  CUDA   a program-scope variable only `__constant__`, `const`, `constexpr`
         or `__shared__` (one per block, refilled with poison per group on
         the simulator): no `__device__` or `__managed__` global a kernel
         writes, no plain one; no `static` local or static data member
         unless const. `extern __shared__` and `__shared__` arrays stay.
  both   no `thread_local`, no `mutable` member (a const object's mutable
         member can be written), a pointer of static storage only as
         `T* const` (a pointer it can reseat is state too).

A const variable initialised at run time (a `static const` local set from
the first launch's arguments) is not told apart from a constant one here:
a GPU compiler refuses it (Metal refuses function-scope statics; CUDA wants
device statics initialised by constants), and on the simulator the kernel
symbol check refuses the writable object and the guard it needs
(mlxsci/backends/sim/kernel_symbols.py). Declarations are read from tokens,
not parsed: `T name(x);` is taken for a function unless `x` is a value (a
number, an expression, or a name the candidate did not declare as a type);
the symbol check is the fence behind a misreading on the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlxsci.kernel.source.lexer import Refused, Tok

__all__ = ["check_storage"]

_CLASS_KEYS = frozenset({"struct", "class", "union", "enum"})


@dataclass(frozen=True)
class _Rules:
    """A dialect's storage rules."""

    const: frozenset  # words that make a declaration's object immutable
    group: frozenset  # per-group memory (refilled with poison per group on the simulator)
    space: str  # the address space every program-scope variable and static local needs ("")
    program: str  # the refusal of a program-scope variable ({what}, {kind})
    fix: str  # what to write instead
    local: str  # the refusal's start for a static local


_RULES = {
    "metal": _Rules(
        frozenset({"const", "constexpr", "constant"}),
        frozenset({"threadgroup"}),
        "constant",
        "program scope variable must reside in constant address space: '{what}' is "
        "declared outside any function without `constant`",
        "write `constant T {what} = ...;`",
        "function-scope static variables are not supported in Metal: ",
    ),
    "cuda": _Rules(
        frozenset({"const", "constexpr", "__constant__"}),
        frozenset({"__shared__"}),
        "",
        "'{what}' is a mutable {kind} variable",
        "make it `__constant__`, `const` or `constexpr` (a table)",
        "",
    ),
}
# Words before a `(` that are part of a declaration's specifiers, not a declarator.
_SPEC_CALLS = frozenset(
    {"alignas", "__align__", "decltype", "__attribute__", "__attribute", "__launch_bounds__"}
)
# What may follow a function's parameter list (besides its body or `;`).
_AFTER_PARAMS = frozenset(
    {"const", "volatile", "noexcept", "override", "final", "->", "&", "&&", ":", "[", "="}
)
_TYPE_WORDS = frozenset(
    "void bool char short int long float double signed unsigned auto half bfloat uint uchar "
    "ushort ulong size_t ptrdiff_t typename const volatile struct class union enum device "
    "constant thread threadgroup __restrict__ restrict".split()
)
_VECTOR = ("float", "half", "int", "uint", "short", "ushort", "char", "uchar", "bool", "long")


def _type_word(name: str) -> bool:
    base = name.rstrip("0123456789x")
    return name in _TYPE_WORDS or name.endswith("_t") or (base in _VECTOR and base != name)


class _Walk:
    def __init__(self, toks: list[Tok], dialect: str):
        self.toks, self.n = toks, len(toks)
        self.rules = _RULES[dialect]
        self.types: set[str] = set()  # names the candidate declared as types
        closer = {"(": ")", "[": "]", "{": "}"}
        self.match = [-1] * self.n
        stack: list[int] = []
        for k, t in enumerate(toks):
            if t.text in closer:
                stack.append(k)
            elif t.text in (")", "]", "}"):
                while stack and closer[toks[stack[-1]].text] != t.text:
                    stack.pop()
                if stack:
                    self.match[stack.pop()] = k

    def text(self, k: int) -> str:
        return self.toks[k].text if 0 <= k < self.n else ""

    def skip(self, k: int) -> int:
        """Past the bracket opened at k (to its end when it is not closed)."""
        return self.match[k] + 1 if self.match[k] > k else self.n

    def angle_end(self, k: int) -> int:
        """Past the template argument list opened by the `<` at k."""
        depth, j = 0, k
        while j < self.n:
            t = self.text(j)
            if t in ("(", "["):
                j = self.skip(j)
                continue
            if t in (";", "{", "}"):
                return j
            depth += {"<": 1, ">": -1, ">>": -2}.get(t, 0)
            j += 1
            if depth <= 0:
                return j
        return j

    def statement_end(self, k: int, hi: int) -> int:
        """The index of the `;` ending the statement at k (brackets skipped)."""
        while k < hi and self.text(k) != ";":
            k = self.skip(k) if self.text(k) in ("(", "[", "{") else k + 1
        return k

    # ------------------------------------------------------------ scopes
    def declarations(self, lo: int, hi: int, scope: str) -> None:
        """The statements of a namespace (scope "program") or a class body."""
        k = lo
        while k < hi:
            k = self.statement(k, hi, scope) if self.text(k) not in (";", "}") else k + 1

    def function(self, lo: int, hi: int) -> None:
        """A function body or an initializer: every `static` in it, classes
        defined in it, lambdas included."""
        k, start, after = lo, lo, lo  # after: past the last `)`, `:`, else, do
        judged = (-1, -1, -1)  # (statement start, first, end) last judged
        while k < hi:
            t = self.text(k)
            if t in (")", ":", "else", "do"):
                after = k + 1
            if t in (";", "{", "}"):
                start = k + 1
            elif t in ("static", "thread_local"):
                first = max(start, after)
                if judged[0] == start and k < judged[2]:
                    # the same declaration, or a second, which no compiler takes
                    # (judging the statement again per `static` was quadratic)
                    if first != judged[1]:
                        raise Refused(self.toks[k].line, "two statics in one statement")
                else:
                    judged = (start, first, self.statement_end(k, hi))
                    self.variables(first, judged[2], "function")
            elif self.class_head(k):
                k = self.class_definition(k, hi, "function", start)
                start = k
                continue
            k += 1

    def class_head(self, k: int) -> bool:
        """Whether a class (or enum) definition's key is at k: `struct S {`,
        `struct S : B {`, `struct {`, `enum class E {`."""
        if self.text(k) not in _CLASS_KEYS or self.text(k - 1) == "enum":
            return False
        j = k + 2 if self.text(k) == "enum" and self.text(k + 1) in ("class", "struct") else k + 1
        j += self.toks[j].kind == "id" if j < self.n else 0
        return self.text(j) in ("{", ":")

    # ------------------------------------------------------------ statements
    def statement(self, k: int, hi: int, scope: str) -> int:
        j = k
        while True:  # prefixes: template parameter lists, attributes
            if self.text(j) == "template" and self.text(j + 1) == "<":
                end = self.angle_end(j + 1)
                for q in range(j + 2, end):  # the parameters that name types
                    if self.text(q - 1) in ("typename", "class") and self.toks[q].kind == "id":
                        self.types.add(self.text(q))
                j = end
            elif self.text(j) == "template":
                j += 1
            elif self.text(j) == "[" and self.text(j + 1) == "[":
                j = self.skip(j)
            elif self.text(j) in ("__attribute__", "__attribute"):
                j = self.skip(j + 1)
            else:
                break
        t = self.text(j)
        if t == "namespace":
            end = j
            while end < hi and self.text(end) not in ("{", ";"):
                end += 1
            if self.text(end) == "{":
                self.declarations(end + 1, self.skip(end) - 1, "program")
                return self.skip(end)
            return end + 1
        if t in ("using", "typedef", "static_assert", "friend"):
            end = self.statement_end(j, hi)
            if t == "using" and self.text(j + 2) == "=":
                self.types.add(self.text(j + 1))
            elif t == "typedef" and self.toks[end - 1].kind == "id":
                self.types.add(self.text(end - 1))
            for b in range(j, end):  # `typedef struct { ... } T;`
                if self.class_head(b):
                    self.class_definition(b, hi, scope, j, declarators=False)
                    break
            return end + 1
        c = j
        while c < hi and self.text(c) not in ("(", "=", "{", "[", ";", "<"):
            if self.text(c) in _CLASS_KEYS:
                return self.class_definition(c, hi, scope, j)
            c += 1
        return self.declaration(j, hi, scope)

    def class_definition(
        self, c: int, hi: int, scope: str, start: int, declarators: bool = True
    ) -> int:
        """`struct S ... { ... } declarators;` from the class key at c: its
        body checked as a class scope, the variables after it as `scope`'s.
        Without a body: a declaration (`struct S;` declares no variable)."""
        if self.text(c + 1) in ("class", "struct"):  # enum class
            c += 1
        named = c + 1 < self.n and self.toks[c + 1].kind == "id"
        if named:
            self.types.add(self.text(c + 1))
        b = c + 1
        while b < hi and self.text(b) not in ("{", ";", "(", "="):
            b = self.angle_end(b) if self.text(b) == "<" else b + 1
        if self.text(b) != "{":
            if self.text(b) == ";" and named and b == c + 2 or scope == "function":
                return b + 1
            return self.declaration(start, hi, scope)
        close = self.skip(b) - 1
        if self.text(c) != "enum" and self.text(c - 1) != "enum":
            self.declarations(b + 1, close, "class")
        end = self.statement_end(close + 1, hi)
        if declarators and scope != "function" and end > close + 1:
            specs = self.words(start, c)
            self.variables(close + 1, end, scope, specs=specs)
        return end + 1

    def declaration(self, j: int, hi: int, scope: str) -> int:
        """A declaration at program or class scope: a function (its body
        checked) or variables (their initializers checked)."""
        k = j
        while k < hi:
            t = self.text(k)
            if t == "<" and k > j and self.toks[k - 1].kind == "id":
                k = self.angle_end(k)
            elif t == "(" and self.text(k - 1) in _SPEC_CALLS:
                k = self.skip(k)
            elif t == "(":
                if self.is_function(k):
                    return self.function_rest(self.skip(k), hi)
                break
            elif t in ("=", "{", "[", ";", ",", ":"):
                break
            else:
                k += 1
        end = self.statement_end(k, hi)
        b = k
        while b < end:  # initializers: lambdas may hold statics
            if self.text(b) == "{" and (b == k or self.text(b - 1) != "{"):
                self.function(b + 1, self.skip(b) - 1)
                # function() saw every token inside, nested braces too: a
                # walk of each nested brace again was quadratic in the nesting
                b = self.skip(b)
                continue
            b += 1
        words = self.words(j, k)
        if scope == "program" or "static" in words:
            self.variables(j, end, scope)
        elif scope == "class" and "mutable" in words:
            raise Refused(self.toks[j].line, _MUTABLE)
        return end + 1

    def is_function(self, p: int) -> bool:
        """Whether the `(` at p opens a parameter list (not a direct initializer)."""
        before = self.toks[p - 1] if p > 0 else None
        if before is None or not (before.kind == "id" or before.text in (">", ">>", "]")):
            return True  # `operator()(...)` and the like: not a variable either way
        after = self.text(self.skip(p))
        if after == "{" or after in _AFTER_PARAMS:
            return True
        inner = self.toks[p + 1 : self.skip(p) - 1]
        if not inner:
            return True
        first, second = inner[0], inner[1].text if len(inner) > 1 else ""
        if first.kind != "id":
            return False
        if _type_word(first.text) or first.text in self.types:
            return True
        return second in ("*", "&", "&&", "<", "::", "...", "[") or (
            len(inner) > 1 and inner[1].kind == "id"
        )

    def function_rest(self, k: int, hi: int) -> int:
        """Past a function's declaration from after its parameter list; its body checked."""
        init_list = self.text(k) == ":"
        while k < hi and self.text(k) != ";":
            t = self.text(k)
            if t == "{" and not (init_list and self.toks[k - 1].kind == "id"):
                self.function(k + 1, self.skip(k) - 1)
                return self.skip(k)
            k = self.skip(k) if t in ("(", "[", "{") else k + 1
        return k + 1

    def words(self, lo: int, hi: int) -> set[str]:
        return {self.text(k) for k in range(lo, hi)}

    # ------------------------------------------------------------ variables
    def variables(self, lo: int, hi: int, scope: str, specs: set[str] | None = None) -> None:
        """Refuses the first variable declared in [lo, hi) (`;` not included)
        that a kernel could write and that outlives a launch. `specs`: the
        specifiers when [lo, hi) holds declarators only (after a class body)."""
        for a, b in self.segments(lo, hi):
            name, marks = self.declarator(a, b)
            if specs is None:
                specs = self.words(a, min(marks) if marks else name if name is not None else b)
            if name is not None:
                self.judge(name, marks, specs, scope)

    def segments(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """[lo, hi) cut at its top-level commas (not those of template arguments)."""
        out, start, k, head = [], lo, lo, True
        while k < hi:
            t = self.text(k)
            if t == ",":
                out.append((start, k))
                start, head, k = k + 1, True, k + 1
            elif t in ("(", "[", "{"):
                head = head and t == "(" and self.text(k - 1) in _SPEC_CALLS
                k = self.skip(k)
            elif t == "<" and head and k > start and self.toks[k - 1].kind == "id":
                k = self.angle_end(k)
            else:
                head = head and t not in ("=", ":")
                k += 1
        out.append((start, hi))
        return out

    def declarator(self, lo: int, hi: int) -> tuple[int | None, list[int]]:
        """The index of the name declared in [lo, hi), and of the pointer and
        reference marks before it."""
        k, name, marks = lo, None, []
        while k < hi:
            t = self.text(k)
            if t in ("=", "[", "{", ":") or (t == "(" and name is not None):
                break
            if t == "(" and self.text(k - 1) in _SPEC_CALLS:
                k = self.skip(k)
                continue
            if t == "<" and k > lo and self.toks[k - 1].kind == "id":
                k = self.angle_end(k)
                continue
            if t in ("*", "&", "&&"):
                marks.append(k)
            elif self.toks[k].kind == "id" and t not in ("const", "volatile", "constant"):
                name = k
            k += 1
        return name, [m for m in marks if name is None or m < name]

    def judge(self, name: int, marks: list[int], specs: set[str], scope: str) -> None:
        tok, rules = self.toks[name], self.rules
        what = tok.text
        stars = [m for m in marks if self.text(m) == "*"]
        const = bool(specs & rules.const)
        if stars:
            const = "const" in self.words(stars[-1] + 1, name)
        if "thread_local" in specs:
            raise Refused(tok.line, f"`thread_local` '{what}': {_WHY} make it a local variable")
        if specs & rules.group and scope != "class":  # per group (CUDA: at program scope too)
            if scope == "function" or not rules.space:
                return
        if scope == "program":
            if rules.space:  # as Metal's compiler: the constant address space (or a sampler)
                ok = rules.space in specs and (const or not stars)
                ok = ok or {"constexpr", "sampler"} <= specs
            else:
                ok = const
            if ok:
                return
            kind = next((w for w in ("__device__", "__managed__") if w in specs), "namespace-scope")
            raise Refused(
                tok.line,
                f"{rules.program.format(what=what, kind=kind)}{_ptr(stars)}; {_WHY} "
                f"{rules.fix.format(what=what)}, or make it a local variable",
            )
        local = scope == "function" and bool(rules.space)
        if local and rules.space not in specs:  # Metal's compiler: only `constant` statics
            const = False
        if "static" in specs and not const:
            where = "member" if scope == "class" else "local"
            fix = f"`{rules.space}`" if local else "`const` or `constexpr`"
            raise Refused(
                tok.line,
                f"{rules.local * local}'{what}' is a non-const `static` {where}{_ptr(stars)}; "
                f"{_WHY} make it {fix} (a table), or a local variable",
            )


_WHY = (
    "a kernel's outputs must follow from its inputs within one launch, and a variable "
    "that keeps its value from launch to launch could carry state between them;"
)
_MUTABLE = (
    f"`mutable` members can be written in a const object; {_WHY} drop `mutable` (kernels "
    "keep no state in objects of static storage)"
)


def _ptr(stars: list) -> str:
    return " (a pointer of static storage must be `T* const`)" if stars else ""


def check_storage(toks: list[Tok], dialect: str, program_scope: bool) -> None:
    """Raises Refused at the first variable in `toks` (one part of a
    candidate after preprocessing) that keeps writable state from launch to
    launch: `program_scope` for a header, else a kernel body."""
    if not toks or dialect not in _RULES:
        return
    walk = _Walk(toks, dialect)
    for k, t in enumerate(toks):
        if t.text == "mutable" and walk.text(k - 1) != ")":
            raise Refused(t.line, _MUTABLE)
    if program_scope:
        walk.declarations(0, len(toks), "program")
    else:
        walk.function(0, len(toks))
