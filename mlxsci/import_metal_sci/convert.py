"""A Metal-Sci candidate (a full Metal source) as an mlxsci candidate.

`convert_source(task, source)` returns a `Conversion`: the candidate in
mlxsci's format v1 (metal dialect), or None and a one-line reason, and notes
on what the conversion changed. It never raises.

How (design: the lead's issue; details decided here):

1. The source is cut by mlxsci/import_metal_sci/metal_source.py. Everything
   outside the kernel functions is the header, verbatim (MLX's `header`).
   Kernels the task does not have are dropped (Metal-Sci's host never
   dispatched them), and so is a task kernel mlxsci does not run
   (lj_clear_cells), each with a note. A task kernel missing, defined twice,
   a template, a buffer index outside Metal-Sci's table (mlxsci/import_metal_sci/interfaces.py)
   or declared with the wrong shape (an array as a reference) is not converted.
2. Each kernel body becomes a prologue plus the candidate's body, its
   identifiers renamed token-wise and simultaneously (never after `.`, `->`
   or `::`) only where needed:
   - a buffer is matched by its index, never its name, to mlxsci's parameter
     (MLX's types are found by a dry run of the task's pipeline at its first
     smoke size, through mlxsci.kernel.signature's rules). Same element type
     (uint = uint32_t, int = int32_t, uchar = uint8_t, atomic_uint =
     atomic<uint>, ...): a rename. Another type (nbody's float4 over
     mlxsci's (N, 4) float array, fft3d's float2, lj's `device uint*
     cell_list` over MLX's atomic output, ising's `device char*` over MLX's
     int8_t: char and signed char are distinct types in C++, and a pointer to
     one is no pointer to the other): an alias in the prologue with the
     candidate's element type in MLX's address space, cast from MLX's
     parameter.
   - a scalar of the same type is renamed; of another type it becomes a
     value (`const int N = int(NX_mlx);`); declared as a pointer it points at
     MLX's constant reference (`const constant uint* N = &N_mlx;`).
   - an array buffer declared as a reference (`constant float& psi_axis`, one
     float) is, as in Metal, a reference to its first element:
     `const constant float& ms_psi_axis = *(const constant float*)psi_axis;`.
   - a thread-attribute parameter becomes a prologue variable of its declared
     type from MLX's attribute (`uint2 gid = uint2(thread_position_in_grid.xy);`;
     MLX declares an attribute whose name the body holds).
   - any other body identifier equal to one of MLX's parameter names
     (inputs, outputs, `<input>_shape/_strides/_ndim`, attributes) is renamed,
     so that it cannot collide with MLX's declaration; so is a name the
     header declares (a constant, a helper, a macro: a macro would expand
     inside the signature MLX writes after the header), everywhere.
   - macros of the header that name a renamed parameter are renamed alike
     (when every kernel renames it the same way).
3. In-place buffers (saxpy y, ising spins, hmc accept_cnt): reads keep
   reading mlxsci's input X, writes go to the output X_out:
   `X[e] = v` -> `X_out[e] = v`; `X[e] op= v` -> `(X_out[e] = X[e] op (v))`;
   `X[e]++`, `++X[e]` alike; X read through a pointer to const (`(device
   const char*)X`, `device const char* row = X + k;`) reads the input, and
   so does X passed whole to a helper of the header whose every declaration
   takes a pointer to const there (`neighbour_sum(spins, i, j)`: the input
   is a pointer to const, so no overload that writes could be chosen
   anyway; a helper a macro names or declares, or one a namespace could
   overload, is not taken to read).
   A writable pointer declared in the body from X (a cast of X, `X +
   offset`, `&X[offset]`: `device float4* y4 = (device float4*)y;`, the
   usual vectorised saxpy) becomes a pair without a data-flow analysis:
   the declared name points into X_out (its initializer with X_out for X)
   and a fresh name, declared after it on the same line, points at the same
   place in X (the initializer with X's input, its casts written const);
   its subscripts are rewritten as X's are (`y4[i] = v` writes, `y4[i] +=
   v` is `(y4[i] = ms_y4_in[i] + (v))`, reads read `ms_y4_in`). That needs
   the pointer never reassigned and never escaping: used only by subscript
   (or read through a pointer to const) in its block, its name not used
   before it nor after its block nor in a macro, one declarator, and an
   initializer that can run twice (no side effect, no call but casts). A
   pointer to const from X (`device const char* row = &spins[k];`) reads
   the input. Any other use of X (a pointer to it reassigned, copied,
   offset or passed on, `&X[...]` elsewhere, a writable reference to X or
   an element, passing X to a function that may write it, a write to part
   of an element, a written index with side effects, X in a macro) is not
   converted. The task's
   carry (interfaces.py) then copies, per thread, the element of the
   thread's own grid position from X to X_out before the body runs, so
   elements the dispatch leaves alone keep their values.
4. `[[max_total_threads_per_threadgroup(N)]]` is dropped (MLX writes the
   signature) and the launch shape shrunk by the Metal-Sci host's rule
   instead; every kernel gets `//! grid` and `//! threadgroup` lines with
   the Metal-Sci host's shapes (fft3d: grid (N, N*N, 1), not mlxsci's default
   (N, N, N)).
5. What the conversion moves must not change what the kept kernels compile
   to (`_check_layout`): the source is hostile, and a kernel that compiles
   one way in the Metal-Sci source and another in the converted candidate
   would have mlxsci judge another kernel than the one the run recorded a
   verdict for (a cheat recorded correct, converted into an honest kernel,
   would be "confirmed" by a re-score). mlxsci's format puts the whole
   header before every body and drops other kernels, so a source is not
   converted when a dropped kernel holds a directive (`#define` there
   applies to the kernels after it), when a kept kernel `#define`s or
   `#undef`s a name the text after it uses, or when header text after a
   kept kernel declares a name that kernel uses (a macro, a constant, an
   overload that would win once declared first), or holds `using`,
   `namespace` or `operator`; nor when a macro could declare, hide or rename
   a kernel (`_check_macros`). Text a compiler could cut otherwise than the
   scanner is refused by metal_source.py.
6. The result parses (mlxsci.kernel.candidate.parse, metal dialect) and
   fits the task (mlxsci.kernel.validate). A candidate mlxsci's source policy
   refuses (an include of a file, printf, ...) is still returned, with a
   note: that is mlxsci's verdict on it (a compile error), not a conversion
   failure.

Limits (what the converted kernel cannot reproduce, or what is not converted):
- A writable pointer into an in-place buffer that is reassigned, offset,
  copied, dereferenced (`*p`), passed to a function that may write through
  it, or declared otherwise than as point 3 says, is not converted: which of
  its uses read and which write is not known without a data flow analysis.
  So are a writable reference to an in-place element (`device uint& c =
  accept_cnt[i];`) and a subscripted cast (`((device float4*)y)[i] = v;`).
- A read-only array MLX binds in the constant address space (fewer than 8
  elements: ising's p_accept, gradshaf_step's psi_axis) is renamed, not cast
  (Metal casts no pointer between address spaces): a helper function that
  takes it as a `device` pointer does not compile.
- Reads of an in-place buffer see the values before the dispatch: a kernel
  that writes an element and reads it back in the same dispatch (its own
  write or another thread's) reads the old value, where Metal-Sci's buffer
  gave the new one (undefined across threads on a GPU anyway).
- The carry copies the element of each thread's own grid position: a kernel
  whose threads write other positions' elements (hmc with several chains per
  thread, an ising kernel that packs the active sites onto fewer threads)
  races with another thread's copy; the simulator's schedule check reports
  such a race.
- An alias cast is written in the address space MLX uses at the task's
  first smoke size; an array that MLX binds as `constant` at one size and
  `device` at another (fewer than 8 elements) would need another cast.
- A pipeline maximum below what the host needs at some sizes only (fft3d's
  TG of N threads with max_total_threads_per_threadgroup below N) made
  Metal-Sci fail at those sizes; the converted kernel runs them (a note).
- Register pressure that lowered Metal's pipeline maximum (and so the
  host's threadgroup) without an attribute is not known from the source.
- lj_clear_cells is not run: what it did besides zeroing cell_count is lost.
"""

from __future__ import annotations

import ast
import operator
import re
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from mlxsci.import_metal_sci import interfaces as ifaces
from mlxsci.import_metal_sci.metal_source import (
    KernelFunction,
    MetalSource,
    MetalSourceError,
    Param,
    Token,
    directives,
    match_brackets,
    parse_metal_source,
    scan,
    split_params,
)
from mlxsci.kernel import signature
from mlxsci.kernel.model import CandidateError

__all__ = ["Conversion", "convert_source", "mlx_parameters", "MlxParam"]


@dataclass(frozen=True)
class Conversion:
    text: str | None  # the candidate in mlxsci's format (metal dialect); None: not converted
    reason: str | None  # one line: why it cannot be converted; None when converted
    notes: tuple[str, ...] = ()  # what the conversion changed

    @property
    def converted(self) -> bool:
        return self.text is not None


class _Refused(Exception):
    """The source cannot be converted; the message is the reason."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))
        self.message = " ".join(message.split())


def convert_source(task, source: str) -> Conversion:
    """`source` (a Metal-Sci candidate) as an mlxsci candidate of `task` (a
    Task or a task name). Never raises: an input it cannot convert gives
    Conversion(None, reason)."""
    notes: list[str] = []
    try:
        text = _convert(task, source, notes)
    except _Refused as exc:
        return Conversion(None, exc.message, tuple(notes))
    except MetalSourceError as exc:
        return Conversion(None, f"not a Metal source mlxsci can read: {exc}", tuple(notes))
    except RecursionError:
        return Conversion(None, "the source nests too deeply to convert", tuple(notes))
    except Exception as exc:  # noqa: BLE001 - never raise on any input: a converter bug is a reason too
        message = " ".join(str(exc).split())[:300]
        return Conversion(
            None, f"internal error of the converter: {type(exc).__name__}: {message}", tuple(notes)
        )
    return Conversion(text, None, tuple(notes))


# ---------------------------------------------------------------- MLX's side


@dataclass(frozen=True)
class MlxParam:
    """One parameter MLX declares for a kernel: `const device float* pos_in`
    is MlxParam("pos_in", "device", "*", True, "float", False)."""

    name: str
    space: str  # device or constant
    declarator: str  # "*" or "&"
    const: bool
    elem: str  # Metal type string of the element: float, uint32_t, int8_t
    atomic: bool = False

    @property
    def pointee(self) -> str:
        return f"atomic<{self.elem}>" if self.atomic else self.elem


_MLX_CACHE: dict[str, dict[str, dict[str, MlxParam]]] = {}


class _DryLaunch:
    """Stands in for mlxsci's Launcher: records the arguments of each
    kernel's first launch and returns zeros of the output shapes."""

    def __init__(self, task):
        self.task = task
        self.seen: dict[str, dict[str, MlxParam]] = {}

    def counter(self, value: int):
        return np.array(value, dtype=np.uint32)

    def __call__(self, name: str, inputs: dict, outputs: dict) -> dict:
        contract = self.task.kernel(name)
        if name not in self.seen:
            params: dict[str, MlxParam] = {}
            for n in contract.inputs:
                info = signature.ArgInfo.of(np.asarray(inputs[n]))
                t = signature.METAL_TYPES[info.dtype]
                if info.ndim == 0:
                    params[n] = MlxParam(n, "constant", "&", True, t)
                elif info.size < signature.MAX_CONSTANT_ARRAY_SIZE:
                    params[n] = MlxParam(n, "constant", "*", True, t)
                else:
                    params[n] = MlxParam(n, "device", "*", True, t)
            for n in contract.outputs:
                t = signature.METAL_TYPES[signature.dtype_name(outputs[n][1])]
                params[n] = MlxParam(n, "device", "*", False, t, contract.atomic_outputs)
            self.seen[name] = params
        return {n: np.zeros(outputs[n][0], dtype=outputs[n][1]) for n in contract.outputs}


def mlx_parameters(task) -> dict[str, dict[str, MlxParam]]:
    """Kernel name -> parameter name -> what MLX declares, for `task` at its
    first smoke size (a dry run of its pipeline with zero outputs)."""
    key = task.ref
    if key not in _MLX_CACHE:
        size = task.size_set("smoke")[0]
        launch = _DryLaunch(task)
        task.run(launch, task.inputs(size.params), size.params)
        _MLX_CACHE[key] = launch.seen
    return _MLX_CACHE[key]


# ------------------------------------------------------------------- types

_SCALAR_ALIASES = {
    "uint": "uint32_t",
    "unsigned": "uint32_t",
    "unsigned int": "uint32_t",
    "int": "int32_t",
    "signed": "int32_t",
    "signed int": "int32_t",
    # not "char": C++ keeps char, signed char (int8_t) and unsigned char apart,
    # so a `device char*` cannot take an int8_t pointer (an alias casts it)
    "signed char": "int8_t",
    "uchar": "uint8_t",
    "unsigned char": "uint8_t",
    "short": "int16_t",
    "signed short": "int16_t",
    "ushort": "uint16_t",
    "unsigned short": "uint16_t",
    "long": "int64_t",
    "ulong": "uint64_t",
    "unsigned long": "uint64_t",
    "half": "float16_t",
    "bfloat": "bfloat16_t",
    "atomic_uint": "atomic<uint32_t>",
    "atomic_int": "atomic<int32_t>",
    "atomic_float": "atomic<float>",
    "atomic_bool": "atomic<bool>",
}


def normal_type(t: str) -> str:
    """A type's spelling with Metal's synonyms folded: `metal::atomic<uint>`
    and `atomic_uint` are both atomic<uint32_t>."""
    t = re.sub(r"\s+", " ", t.replace("metal::", "")).strip()
    t = re.sub(r"\s*([<>,])\s*", r"\1", t)
    m = re.fullmatch(r"atomic<(.+)>", t)
    if m:
        return f"atomic<{_SCALAR_ALIASES.get(m.group(1), m.group(1))}>"
    return _SCALAR_ALIASES.get(t, t)


_VECTOR = re.compile(r"(?:metal::)?(u?(?:int|short|char|long)|half|float|bool)([234])")
_ATTRIBUTE_TYPES = dict(signature.METAL_ATTRIBUTES)


def _dims(base: str) -> int:
    m = _VECTOR.fullmatch(base.strip())
    return int(m.group(2)) if m else 1


# ------------------------------------------------------------------- names

_KEYWORDS = frozenset(
    "return case sizeof alignof typeid throw new delete co_await co_return co_yield else do".split()
)


def _identifiers(tokens: list[Token]) -> set[str]:
    return {t.text for t in tokens if t.kind == "id"}


def _is_member(tokens: list[Token], k: int) -> bool:
    return k > 0 and tokens[k - 1].kind == "punct" and tokens[k - 1].text in (".", "->", "::")


class _Names:
    """Fresh names: `ms_<base>`, then `ms_<base>_1`, ..., never one the
    source already holds, MLX declares, or this converter gave out."""

    def __init__(self, taken: set[str]):
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        name = f"ms_{base}"
        k = 1
        while name in self.taken:
            name = f"ms_{base}_{k}"
            k += 1
        self.taken.add(name)
        return name


def _header_globals(tokens: list[Token]) -> tuple[set[str], dict[str, set[str]]]:
    """Names the header declares at file scope (identifiers outside every
    bracket, macro names), and each #define's identifiers by macro name."""
    names: set[str] = set()
    macros: dict[str, set[str]] = {}
    match = match_brackets(tokens)
    k, n = 0, len(tokens)
    while k < n:
        t = tokens[k]
        if t.pp:
            if t.text == "#" and k + 2 < n and tokens[k + 1].text == "define" and tokens[k + 2].pp:
                name = tokens[k + 2].text
                names.add(name)
                j = k + 3
                ids: set[str] = set()
                while j < n and tokens[j].pp and tokens[j].text != "#":
                    if tokens[j].kind == "id":
                        ids.add(tokens[j].text)
                    j += 1
                macros[name] = ids
                k = j
                continue
            k += 1
            continue
        if t.kind == "punct" and t.text in "([{" and k in match:
            k = match[k] + 1
            continue
        if t.kind == "id":
            names.add(t.text)
        k += 1
    return names, macros


# ----------------------------------------------------------- launch attribute

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


def _int_expr(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _int_expr(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _int_expr(node.left), _int_expr(node.right)
        if isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= b < 64:
            raise ValueError("shift out of range")
        if abs(a) > 2**40 or abs(b) > 2**40:
            raise ValueError("too large")
        return _BINOPS[type(node.op)](a, b)
    raise ValueError("not an integer constant expression")


def _evaluate_count(expr: str, header_tokens: list[Token]) -> int:
    """The integer an attribute argument stands for: a literal, or object-like
    macros / program-scope integer constants of the header over literals."""
    defines: dict[str, str] = {}
    k, n = 0, len(header_tokens)
    while k < n:
        t = header_tokens[k]
        if t.pp and t.text == "#" and k + 2 < n and header_tokens[k + 1].text == "define":
            name_tok = header_tokens[k + 2]
            j = k + 3
            function_like = (
                j < n
                and header_tokens[j].pp
                and header_tokens[j].text == "("
                and header_tokens[j].start == name_tok.end
            )
            body = []
            while j < n and header_tokens[j].pp and header_tokens[j].text != "#":
                body.append(header_tokens[j].text)
                j += 1
            if not function_like:
                defines[name_tok.text] = " ".join(body)
            k = j
            continue
        k += 1
    header_text = " ".join(t.text for t in header_tokens if not t.pp)
    for m in re.finditer(
        r"\b(?:constexpr\s+)?constant\s+(?:constexpr\s+)?(?:const\s+)?(?:u?int|u?short|size_t|uint32_t|int32_t)\s+"
        r"([A-Za-z_]\w*)\s*=\s*([^;{}]+);",
        header_text,
    ):
        defines.setdefault(m.group(1), m.group(2))
    text = expr
    for _ in range(16):
        new = re.sub(
            r"\b[A-Za-z_]\w*\b",
            lambda m: f"({defines[m.group()]})" if m.group() in defines else m.group(),
            text,
        )
        if new == text:
            break
        text = new
    text = re.sub(r"\b(\d+|0[xX][0-9a-fA-F]+)[uUlL]+\b", r"\1", text)
    text = re.sub(r"\(\s*(?:uint|int|unsigned|ushort|short|size_t)\s*\)", "", text)
    try:
        value = _int_expr(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
        raise _Refused(
            f"cannot evaluate the thread count `{expr}` of max_total_threads_per_threadgroup"
        ) from None
    return value


# ---------------------------------------------------------------- the body


_ASSIGN = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="})
_COMPOUND = _ASSIGN - {"="}


@dataclass
class _InPlace:
    read: str  # what reads of X become
    write: str  # what writes to X go to
    view_of: str | None = None  # a pointer into this in-place buffer (a view), or None


def _no_fresh_names(base: str) -> str:
    raise _Refused(f"no fresh name for {base!r}")


@dataclass
class _Rewriter:
    """A body rewritten token by token: renames, and the in-place rewrites."""

    body: str
    rename: dict[str, str]
    inplace: dict[str, _InPlace]
    kernel: str
    line_of: object  # offset in the body -> line in the source
    # the header's functions: name -> each declaration's parameters (tokens)
    functions: dict[str, list[list[list[Token]]]] = field(default_factory=dict)
    # names the header's macros hold (a view named in one cannot be split)
    macro_ids: set[str] = field(default_factory=set)
    fresh: object = _no_fresh_names  # base -> a fresh name (_Names.fresh)
    tokens: list[Token] = field(init=False)
    match: dict[int, int] = field(init=False)
    # the pointers into in-place buffers (`_find_views`): name -> (the split,
    # the first and last token index where it is that view)
    views: dict[str, tuple[_InPlace, int, int]] = field(init=False)
    replace: dict[int, str] = field(init=False)  # token index -> its text
    const_at: set[int] = field(init=False)  # `(` or `<` of a cast written `const`
    after: dict[int, str] = field(init=False)  # token index -> text after it

    def __post_init__(self):
        self.tokens = scan(self.body)
        self.match = match_brackets(self.tokens)
        self.views, self.replace, self.const_at, self.after = {}, {}, set(), {}
        self._find_views()

    def split(self, name: str) -> _InPlace:
        """The in-place buffer or view `name`'s read and write names."""
        return self.inplace[name] if name in self.inplace else self.views[name][0]

    def what(self, name: str) -> str:
        split = self.split(name)
        if split.view_of is None:
            return f"in-place buffer {name!r}"
        return f"pointer {name!r} into in-place buffer {split.view_of!r}"

    def refuse(self, k: int, message: str) -> _Refused:
        line = self.line_of(self.tokens[k].start)  # type: ignore[operator]
        return _Refused(f"kernel {self.kernel!r}, line {line}: {message}")

    def text(self) -> str:
        toks = self.tokens
        if not toks:
            return self.body
        return self.body[: toks[0].start] + self.render(0, len(toks)) + self.body[toks[-1].end :]

    def render(self, lo: int, hi: int) -> str:
        toks = self.tokens
        out: list[str] = []
        k = lo
        while k < hi:
            if k > lo:
                out.append(self.body[toks[k - 1].end : toks[k].start])
            piece, nxt = self.token(k, hi)
            out.append(piece)
            out.extend(self.after[j] for j in range(k, nxt) if j in self.after)
            k = nxt
        return "".join(out)

    # ------------------------------------------- pointers into an in-place buffer

    def _find_views(self) -> None:
        """The declarations whose initializer points into an in-place buffer X
        (`device float4* y4 = (device float4*)y;`, `device char* row = spins
        + j * NX;`, `device char* row = &spins[j * NX];`): a pointer to const
        reads the input (its casts written const); a writable one becomes a
        pair, the declared name pointing into X_out (its writes) and a fresh
        name, declared after it, at the same place in X (its reads), and its
        subscripts are rewritten as X's are (`in_place`). Such a pointer may
        be used only by subscript (or read through a pointer to const) in
        its block, and never reassigned, offset, copied or passed to what may
        write through it; any other form is left to `in_place`, which
        refuses it. A writable reference bound to X or an element of it is
        refused."""
        toks = self.tokens
        for k, t in enumerate(toks):
            if t.kind != "id" or t.pp or t.text not in self.inplace or _is_member(toks, k):
                continue
            if k in self.replace:
                continue
            subscripted = k + 1 < len(toks) and toks[k + 1].text == "["
            decl = self._declaration_of(k)
            if decl is None:
                continue
            s, eq, e = decl
            if subscripted and not (k > 0 and toks[k - 1].text == "&"):
                # an element's value (`in_place` reads it), unless a writable
                # reference is bound to it: `device uint& c = accept_cnt[i];`
                if eq + 1 == k and self.match.get(k + 1) == e - 1:
                    self._reference_check(k, s, eq)
                continue
            self._view(k, s, eq, e)

    def _declaration_of(self, k: int) -> tuple[int, int, int] | None:
        """(the first token, the `=`, the `;`) of the declaration `TYPE NAME =
        INIT;` whose INIT holds tokens[k], when that is what holds it."""
        toks = self.tokens
        s = k - 1
        while s >= 0 and not (toks[s].kind == "punct" and toks[s].text in (";", "{", "}")):
            s -= 1
        s += 1
        # the `=` outside brackets (one inside them, as in a for-init, is not
        # a declaration's)
        eq, depth = None, 0
        for i in range(s, k):
            if toks[i].kind == "punct" and toks[i].text in ("(", "["):
                depth += 1
            elif toks[i].kind == "punct" and toks[i].text in (")", "]"):
                depth -= 1
            elif toks[i].text == "=" and depth == 0:
                eq = i
                break
        if eq is None or eq - s < 2 or toks[eq - 1].kind != "id":
            return None
        e = eq + 1
        while e < len(toks) and toks[e].text != ";":
            if toks[e].kind == "punct" and toks[e].text in ("(", "[", "{") and e in self.match:
                e = self.match[e] + 1
                continue
            if toks[e].kind == "punct" and toks[e].text in (")", "]", "}"):
                return None
            e += 1
        if e >= len(toks) or e < k:
            return None
        if not all(
            t.kind == "id" or t.text in ("*", "&", "::", "<", ">", ",") for t in toks[s : eq - 1]
        ):
            return None
        typ = toks[s : eq - 1]
        if toks[s].kind != "id" or toks[s].text in _KEYWORDS:
            return None  # `*p = X[i];` stores through p
        if not any(t.text in ("*", "&", "auto") for t in typ):
            return None
        return s, eq, e

    def _view(self, k: int, s: int, eq: int, e: int) -> None:
        toks = self.tokens
        x = toks[k].text
        split = self.inplace[x]
        name = toks[eq - 1].text
        typ = toks[s : eq - 1]
        stars = [i for i, t in enumerate(typ) if t.text == "*"]
        const = any(t.text == "const" for t in typ[: (stars[0] if stars else len(typ))])
        auto = any(t.text == "auto" for t in typ)
        if any(t.text == "&" for t in typ):
            self._reference_check(k, s, eq)
            return  # a reference to const: it is read (`in_place`)
        init = range(eq + 1, e)
        if len(stars) != (0 if auto and not stars else 1) or self._top_level_comma(s, e):
            raise self.refuse(
                k, f"in-place buffer {x!r} initialises a declaration the converter cannot split"
            )
        casts = self._pointer_casts(k, init)
        if auto and any(written_const for _, written_const in casts):
            const = True  # `auto p = (device const float4*)y;`
        if const:  # a pointer to const: it reads the input (its initializer runs once)
            if any(toks[i].text in _ASSIGN or toks[i].text in ("++", "--") for i in init):
                raise self.refuse(
                    k,
                    f"{name!r} points into in-place buffer {x!r} from an initializer with a "
                    "side effect",
                )
            self.replace[k] = split.read
            self.const_at |= {c for c, written_const in casts if not written_const}
            return
        problem = self._view_init_problem(k, init)
        if problem:
            raise self.refuse(k, f"{name!r} points into in-place buffer {x!r}, but {problem}")
        if name in self.views or any(t.kind == "id" and t.text == name for t in toks[:s]):
            raise self.refuse(
                k,
                f"{name!r} points into in-place buffer {x!r} and is declared more than once "
                "or used before: its reads and writes cannot be split",
            )
        if name in self.macro_ids:
            raise self.refuse(
                k, f"{name!r} points into in-place buffer {x!r} and a macro of the header names it"
            )
        end = len(toks)
        for o in range(s - 1, -1, -1):  # the block that holds the declaration
            if toks[o].text == "{" and toks[o].kind == "punct" and self.match.get(o, -1) > e:
                end = self.match[o]
                break
        later = [i for i in range(end, len(toks)) if toks[i].kind == "id" and toks[i].text == name]
        if later:
            raise self.refuse(
                later[0],
                f"{name!r} points into in-place buffer {x!r} in an inner block and the name "
                "is used again after it",
            )
        read = self.fresh(f"{name}_in")  # type: ignore[operator]
        write = self.rename.get(name, name)
        self.replace[k] = split.write
        read_type = self.plain(s, eq - 1, {}, set())
        if not auto:
            read_type = "const " + read_type  # `auto` takes the const of the read init
        read_init = self.plain(
            eq + 1, e, {k: split.read}, {c for c, written_const in casts if not written_const}
        )
        self.after[e] = f" {read_type} {read} = {read_init};"
        self.views[name] = (_InPlace(read, write, view_of=x), e + 1, end)

    def _reference_check(self, k: int, s: int, eq: int) -> None:
        """Refuse a writable reference (`device uint& c = accept_cnt[i];`)
        that the declaration tokens[s:eq] binds to in-place buffer tokens[k]
        or its element: its reads and writes go through one name."""
        toks = self.tokens
        typ = toks[s : eq - 1]
        if not any(t.text == "&" for t in typ):
            return
        amp = next(i for i, t in enumerate(typ) if t.text == "&")
        if any(t.text == "const" for t in typ[:amp]):
            return
        raise self.refuse(
            k,
            f"a writable reference {toks[eq - 1].text!r} is bound to in-place buffer "
            f"{toks[k].text!r}: its reads and writes cannot be told apart",
        )

    def _top_level_comma(self, lo: int, hi: int) -> bool:
        """Does tokens[lo:hi] hold a `,` outside brackets (several declarators)?"""
        toks = self.tokens
        i = lo
        while i < hi:
            if toks[i].kind == "punct" and toks[i].text in ("(", "[", "{") and i in self.match:
                i = self.match[i] + 1
                continue
            if toks[i].text == ",":
                return True
            i += 1
        return False

    def _view_init_problem(self, k: int, init: range) -> str | None:
        """Why the initializer `init` (holding in-place buffer tokens[k]) of
        a pointer cannot be evaluated twice, once per view, or None."""
        toks = self.tokens
        for i in init:
            t = toks[i]
            if t.pp:
                return "its initializer holds a preprocessor line"
            if t.text in _ASSIGN or t.text in ("++", "--"):
                return "its initializer has a side effect"
            if t.kind == "id" and i != k and (t.text in self.inplace or t.text in self.views):
                return f"its initializer also names {t.text!r}"
            if (
                t.kind == "id"
                and i + 1 in init
                and toks[i + 1].text == "("
                and not t.text.endswith("_cast")
                and not _BUILTIN_TYPE.fullmatch(t.text)
            ):
                return f"its initializer calls {t.text!r} (it would run once per view)"
        return None

    def _pointer_casts(self, k: int, init: range) -> list[tuple[int, bool]]:
        """The casts to a pointer type in `init` whose operand holds
        tokens[k] (the in-place buffer): (the index of the `(` of a C-style
        cast or the `<` of a `*_cast`, whether it is written const)."""
        toks = self.tokens
        found = []
        for i in init:
            t = toks[i]
            if t.text == "(" and t.kind == "punct" and i in self.match:
                close = self.match[i]
                group = toks[i + 1 : close]
                operand = close + 1  # the next token, or the bracket group it opens
            elif t.text == "<" and i > 0 and toks[i - 1].text.endswith("_cast"):
                found_close = next((j for j in init if j > i and toks[j].text == ">"), None)
                if found_close is None:
                    continue
                close = found_close
                group = toks[i + 1 : close]
                operand = close + 1
            else:
                continue
            if not _pointer_type(group) or operand not in init:
                continue
            if toks[operand].text == "&":  # `(device T*)&X[i]`
                operand += 1
            end = self.match.get(operand, operand)
            if toks[operand].text in ("(", "[") and toks[operand].kind == "punct":
                holds = operand < k < end
            else:  # a name, possibly subscripted: `(device T*)X`, `(device T*)&X[i]`
                holds = operand == k
            if holds:
                found.append((i, any(g.text == "const" for g in group)))
        return found

    def plain(self, lo: int, hi: int, subst: dict[int, str], const_at: set[int]) -> str:
        """tokens[lo:hi] as written, renamed, with `subst` for some tokens and
        `const ` after each token of `const_at` (no in-place rewriting)."""
        toks = self.tokens
        out: list[str] = []
        for i in range(lo, hi):
            if i > lo:
                out.append(self.body[toks[i - 1].end : toks[i].start])
            t = toks[i]
            if i in subst:
                out.append(subst[i])
            elif t.kind == "id" and not _is_member(toks, i):
                out.append(self.rename.get(t.text, t.text))
            else:
                out.append(t.text)
            if i in const_at:
                out.append("const ")
        return "".join(out)

    def token(self, k: int, hi: int) -> tuple[str, int]:
        t = self.tokens[k]
        if k in self.replace:
            return self.replace[k], k + 1
        if k in self.const_at:
            return t.text + "const ", k + 1
        if t.kind == "id" and not _is_member(self.tokens, k):
            if t.text in self.inplace or self._in_view(t.text, k):
                return self.in_place(k, hi)
            return self.rename.get(t.text, t.text), k + 1
        if (
            t.kind == "punct"
            and t.text in ("++", "--")
            and k + 1 < hi
            and self.tokens[k + 1].kind == "id"
            and (
                self.tokens[k + 1].text in self.inplace
                or self._in_view(self.tokens[k + 1].text, k + 1)
            )
        ):
            return self.prefix(k, hi)
        return t.text, k + 1

    def _in_view(self, name: str, k: int) -> bool:
        """Is tokens[k] (named `name`) a use of a view, in its block?"""
        view = self.views.get(name)
        return view is not None and view[1] <= k < view[2]

    def _element(self, k: int, hi: int, name: str) -> int:
        """tokens[k] is in-place buffer (or view) `name`; returns the index of
        its `]`."""
        toks = self.tokens
        if toks[k].pp:
            raise self.refuse(k, f"{self.what(name)} is used in a preprocessor line")
        if k + 1 >= hi or toks[k + 1].text != "[" or toks[k + 1].kind != "punct":
            if self.split(name).view_of is not None:
                raise self.refuse(
                    k,
                    f"{self.what(name)} is used other than by a subscript (reassigned, offset, "
                    "copied or passed to a function that may write through it): its reads "
                    "and writes cannot be told apart",
                )
            raise self.refuse(
                k,
                f"in-place buffer {name!r} is used other than by a subscript (pointer "
                "arithmetic, a pointer copy, passed to a function or an atomic): its writes "
                "cannot be redirected to mlxsci's output",
            )
        return self.match[k + 1]

    def _check_index(self, lo: int, hi: int, name: str) -> None:
        for j in range(lo, hi):
            if self.tokens[j].text in _ASSIGN or self.tokens[j].text in ("++", "--"):
                raise self.refuse(j, f"the index of a write to {self.what(name)} has a side effect")

    def _chain_end(self, a: int, hi: int) -> int:
        toks = self.tokens
        j = a
        while j < hi:
            if toks[j].text in (".", "->") and j + 1 < hi and toks[j + 1].kind == "id":
                j += 2
            elif toks[j].text == "[" and j in self.match:
                j = self.match[j] + 1
            else:
                break
        return j

    def _const_view(self, k: int) -> bool:
        """Is tokens[k] (an in-place buffer not subscripted) only read through
        a pointer to const: a cast `(device const T*)X`, `(const device
        T*)(X + i)`, `reinterpret_cast<device const T*>(X)`, or the initializer
        of a declaration `device const T* p = X + i;`?"""
        toks = self.tokens
        j = k - 1
        while j >= 0 and toks[j].text == "(" and toks[j].kind == "punct":
            j -= 1
        if j >= 0 and toks[j].text == ")" and j in self.match:
            group = toks[self.match[j] + 1 : j]
            if _const_pointer_type(group):
                return True
        if j >= 0 and toks[j].text == ">":
            depth, o = 0, j
            while o >= 0:
                if toks[o].text == ">":
                    depth += 1
                elif toks[o].text == "<":
                    depth -= 1
                    if depth == 0:
                        break
                o -= 1
            if (
                o > 0
                and toks[o - 1].text.endswith("_cast")
                and _const_pointer_type(toks[o + 1 : j])
            ):
                return True
        # the initializer of a declaration of a pointer to const
        s = k - 1
        while s >= 0 and not (toks[s].kind == "punct" and toks[s].text in (";", "{", "}")):
            s -= 1
        statement = toks[s + 1 : k]
        eq = next((i for i, t in enumerate(statement) if t.text == "="), None)
        if eq is None or eq < 3:
            return False
        before = statement[:eq]
        return (
            before[-1].kind == "id"
            and before[-2].text == "*"
            and _const_pointer_type(before[:-1])
            and not any(t.text in _ASSIGN or t.text in ("++", "--") for t in statement[eq + 1 :])
        )

    def _const_argument(self, k: int) -> bool:
        """Is tokens[k] (an in-place buffer not subscripted) a whole argument
        of a call to a helper of the header whose every declaration takes a
        pointer to const there (`neighbour_sum(spins, i, j)` with `int
        neighbour_sum(device const char* s, uint i, uint j)`)? Then the
        helper only reads it. Overloads all must; a function-like macro, a
        member or qualified call, a template call and a callee the header
        does not declare are not known to read only."""
        toks = self.tokens
        if k == 0 or k + 1 >= len(toks):
            return False
        if toks[k - 1].text not in ("(", ",") or toks[k + 1].text not in (",", ")"):
            return False
        j, index = k - 1, 0
        while j >= 0:  # the call's `(`, counting the arguments before X
            t = toks[j]
            if t.kind == "punct" and t.text in (")", "]", "}") and j in self.match:
                j = self.match[j] - 1
                continue
            if t.kind == "punct" and t.text in ("(", "[", "{"):
                break
            if t.kind == "punct" and t.text == ",":
                index += 1
            j -= 1
        if j < 1 or toks[j].text != "(" or toks[j].pp:
            return False
        callee = toks[j - 1]
        if callee.kind != "id" or callee.text in _CALL_KEYWORDS or _is_member(toks, j - 1):
            return False
        declarations = [d for d in self.functions.get(callee.text, []) if len(d) > index]
        return bool(declarations) and all(_const_pointer_param(d[index]) for d in declarations)

    def in_place(self, k: int, hi: int) -> tuple[str, int]:
        toks = self.tokens
        name = toks[k].text
        target = self.split(name)
        if (
            not toks[k].pp
            and (k + 1 >= hi or toks[k + 1].text != "[")
            and (self._const_view(k) or self._const_argument(k))
        ):
            return target.read, k + 1
        close = self._element(k, hi, name)
        if k > 0 and toks[k - 1].text == "&" and not self._operand_end(k - 2):
            raise self.refuse(k, f"the address of an element of {self.what(name)} is taken")
        a = close + 1
        if a < hi and toks[a].text in (".", "->", "["):
            j = self._chain_end(a, hi)
            if j < hi and (toks[j].text in _ASSIGN or toks[j].text in ("++", "--")):
                raise self.refuse(k, f"a write to part of an element of {self.what(name)}")
            return target.read, k + 1
        if a >= hi:
            return target.read, k + 1
        op = toks[a].text
        if op == "=":
            return target.write, k + 1
        if op in _COMPOUND:
            self._check_index(k + 2, close, name)
            index = self.render(k + 2, close)
            end = self._expression_end(a + 1, hi)
            if end == a + 1:
                raise self.refuse(k, f"a compound assignment to {name!r} without a value")
            value = self.render(a + 1, end)
            return (
                f"({target.write}[{index}] = {target.read}[{index}] {op[:-1]} ({value}))",
                end,
            )
        if op in ("++", "--"):
            self._check_index(k + 2, close, name)
            index = self.render(k + 2, close)
            sign = op[0]
            update = f"{target.write}[{index}] = {target.read}[{index}] {sign} 1"
            # a statement of its own (`X[e]++;`): its value is not used
            statement = k == 0 or toks[k - 1].text in (";", "{", "}", ")", "else", "do")
            if statement and a + 1 < hi and toks[a + 1].text == ";":
                return f"({update})", a + 1
            return f"({update}, {target.read}[{index}])", a + 1
        return target.read, k + 1

    def prefix(self, k: int, hi: int) -> tuple[str, int]:
        toks = self.tokens
        name = toks[k + 1].text
        target = self.split(name)
        close = self._element(k + 1, hi, name)
        j = self._chain_end(close + 1, hi)
        if j != close + 1:
            raise self.refuse(k, f"a write to part of an element of {self.what(name)}")
        self._check_index(k + 3, close, name)
        index = self.render(k + 3, close)
        sign = toks[k].text[0]
        return f"({target.write}[{index}] = {target.read}[{index}] {sign} 1)", close + 1

    def _operand_end(self, k: int) -> bool:
        """Does tokens[k] end an operand (so that a `&` after it is binary)?"""
        if k < 0:
            return False
        t = self.tokens[k]
        if t.kind in ("num", "str", "chr"):
            return True
        if t.kind == "id":
            return t.text not in _KEYWORDS
        return t.text in (")", "]")

    def _expression_end(self, j: int, hi: int) -> int:
        """The end of an assignment's right-hand side starting at tokens[j]."""
        toks = self.tokens
        pending = 0
        while j < hi:
            t = toks[j]
            if t.kind == "punct":
                if t.text in ("(", "[", "{") and j in self.match:
                    j = self.match[j] + 1
                    continue
                if t.text in (")", "]", "}", ";", ","):
                    break
                if t.text == "?":
                    pending += 1
                elif t.text == ":":
                    if pending == 0:
                        break
                    pending -= 1
            j += 1
        return j


_CALL_KEYWORDS = frozenset(
    "if while for switch return sizeof alignof decltype static_cast reinterpret_cast "
    "const_cast dynamic_cast typeid noexcept".split()
)


def _const_pointer_param(tokens: list[Token]) -> bool:
    """Is the parameter declared by `tokens` (`device const char* s`, with
    or without a name, attributes or a default) a pointer to const?"""
    decl: list[Token] = []
    k = 0
    while k < len(tokens):
        if tokens[k].text == "[" and k + 1 < len(tokens) and tokens[k + 1].text == "[":
            depth = 0
            while k < len(tokens):  # skip the [[...]] group
                depth += {"[": 1, "]": -1}.get(tokens[k].text, 0)
                k += 1
                if depth == 0:
                    break
            continue
        if tokens[k].text == "=":
            break
        decl.append(tokens[k])
        k += 1
    if len(decl) >= 2 and decl[-1].kind == "id" and decl[-2].text == "*":
        decl = decl[:-1]  # the parameter's name
    return _const_pointer_type(decl)


def _header_functions(
    tokens: list[Token], macros: dict[str, set[str]]
) -> dict[str, list[list[list[Token]]]]:
    """The helpers the header declares at file scope whose every declaration
    this module sees: name -> the parameters of each declaration (or
    definition), as token lists. A variable initialised with parentheses
    (`constant uint3 M(1, 2, 3);`) is listed too; its "parameters" are no
    pointers to const. Left out, so that no call to them counts as a read
    (`_Rewriter._const_argument`): a name a macro's replacement list holds or
    that appears inside parentheses at file scope (a macro's argument, such
    as `DECLARE(f)`, can declare an overload this scan never sees), and
    every name when the header defines a namespace (its functions, brought
    in by `using`, are overloads this scan does not list)."""
    code = [t for t in tokens if not t.pp]
    if any(
        t.text == "namespace" and (k == 0 or code[k - 1].text != "using")
        for k, t in enumerate(code)
    ):
        return {}  # a namespace defined (`using namespace metal;` defines none)
    match = match_brackets(code)
    found: dict[str, list[list[list[Token]]]] = {}
    hidden: set[str] = set().union(*macros.values()) if macros else set()
    hidden |= set(macros)
    k = 0
    while k < len(code):
        t = code[k]
        if t.kind == "punct" and t.text in ("{", "[") and k in match:
            k = match[k] + 1  # bodies (a struct's members too) and attributes
            continue
        if t.kind == "punct" and t.text == "(" and k in match:
            close = match[k]
            hidden |= {x.text for x in code[k + 1 : close] if x.kind == "id"}
            prev = code[k - 1] if k > 0 else None
            if prev is not None and prev.kind == "id" and not _is_member(code, k - 1):
                params = [code[a:b] for a, b in split_params(code, k + 1, close)]
                if len(params) == 1 and [x.text for x in params[0]] == ["void"]:
                    params = []
                found.setdefault(prev.text, []).append(params)
            k = close + 1
            continue
        k += 1
    return {name: decls for name, decls in found.items() if name not in hidden}


def _pointer_type(tokens: list[Token]) -> bool:
    """Are `tokens` a pointer type in an address space (`device float4*`,
    `const device char *`)?"""
    if not tokens or tokens[-1].text != "*":
        return False
    return all(t.kind == "id" or t.text in ("::", "<", ">", ",") for t in tokens[:-1]) and any(
        t.text in ("device", "constant", "threadgroup", "thread") for t in tokens[:-1]
    )


def _const_pointer_type(tokens: list[Token]) -> bool:
    """Are `tokens` a pointer type to const (`device const float4*`,
    `const device char *`)?"""
    if not tokens or tokens[-1].text != "*":
        return False
    if not any(t.text == "const" for t in tokens[:-1]):
        return False
    return all(t.kind == "id" or t.text in ("::", "<", ">", ",") for t in tokens[:-1]) and any(
        t.text in ("device", "constant") for t in tokens[:-1]
    )


# ---------------------------------------------------------- one kernel


@dataclass
class _Kernel:
    name: str
    grid: str
    threadgroup: str
    body: str
    header_renames: dict[str, str]


_DIRECTIVE_LINE = re.compile(r"^([ \t]*)//!", re.M)


@dataclass
class _Source:
    """What every kernel's conversion shares: the parsed source, its header's
    tokens, the names the header declares at file scope and its macros, every
    identifier of the source, and the header's names renamed because MLX
    declares a kernel parameter of their name."""

    parsed: MetalSource
    header_tokens: list[Token]
    header_names: set[str]
    macros: dict[str, set[str]]
    all_ids: set[str]
    global_renames: dict[str, str]
    functions: dict[str, list[list[list[Token]]]] = field(default_factory=dict)


def _reserved(mlx: dict[str, MlxParam]) -> set[str]:
    """The names MLX may declare in a kernel's parameter list: its inputs and
    outputs, an array input's `_shape`, `_strides`, `_ndim`, the attributes."""
    reserved = set(mlx) | set(_ATTRIBUTE_TYPES)
    for n, mp in mlx.items():
        if mp.const and mp.declarator == "*":
            reserved |= {n + "_shape", n + "_strides", n + "_ndim"}
    return reserved


def _convert_kernel(
    kf: KernelFunction,
    ki: ifaces.KernelInterface,
    mlx: dict[str, MlxParam],
    src: _Source,
    contract,
    notes: list[str],
) -> _Kernel:
    kname = kf.name
    lines = _line_counter(src.parsed.text)
    header_tokens = src.header_tokens

    def line_of(offset: int) -> int:
        return lines(kf.body_start + offset)

    reserved = _reserved(mlx)
    names = _Names(src.all_ids | reserved | set(src.global_renames.values()))

    rename: dict[str, str] = dict(src.global_renames)
    inplace: dict[str, _InPlace] = {}
    prologue: list[str] = []
    renamed_params: list[str] = []
    seen_index: dict[int, str] = {}
    seen_params: set[str] = set()

    def alias_name(p: Param) -> str:
        return p.name if p.name not in reserved else names.fresh(p.name)

    for p in kf.params:
        if p.name in src.macros:
            raise _Refused(
                f"kernel {kname!r}: parameter {p.name!r} has the name of a macro of the header"
            )
        if p.name in seen_params:
            raise _Refused(f"kernel {kname!r}: two parameters named {p.name!r}")
        seen_params.add(p.name)
        rename.pop(p.name, None)  # a parameter named like a header name wins in its body
        idx = p.buffer_index
        if p.attribute.startswith("buffer"):
            if idx is None:
                raise _Refused(
                    f"kernel {kname!r}: parameter {p.name!r} has the attribute "
                    f"[[{p.attribute}]], not a buffer index"
                )
            buf = ki.buffer(idx)
            if buf is None:
                have = ", ".join(f"{b.index} {b.name}" for b in ki.buffers)
                raise _Refused(
                    f"kernel {kname!r}: buffer({idx}) ({p.name!r}) is not in Metal-Sci's "
                    f"interface of {kname} (buffers {have}): the host binds nothing there"
                )
            if idx in seen_index:
                raise _Refused(
                    f"kernel {kname!r}: buffer({idx}) is declared twice "
                    f"({seen_index[idx]!r} and {p.name!r})"
                )
            seen_index[idx] = p.name
            _convert_buffer(p, buf, mlx, kname, rename, inplace, prologue, alias_name, names)
            if buf.kind != "inout":
                target = rename.get(p.name, p.name)
                if target != p.name and not target.startswith("ms_"):
                    renamed_params.append(f"{p.name} -> {target}")
            continue
        if p.attribute in _ATTRIBUTE_TYPES:
            mlx_type = _ATTRIBUTE_TYPES[p.attribute]
            cand_dims = _dims(p.base)
            mlx_dims = 3 if mlx_type.endswith("3") else 1
            if p.declarator or p.address_space:
                raise _Refused(
                    f"kernel {kname!r}: thread attribute {p.name!r} declared as "
                    f"`{p.type_text}`, not a value"
                )
            if cand_dims > mlx_dims:
                raise _Refused(
                    f"kernel {kname!r}: {p.name!r} [[{p.attribute}]] has {cand_dims} "
                    f"components, MLX's has {mlx_dims}"
                )
            swizzle = "" if cand_dims == mlx_dims else {1: ".x", 2: ".xy"}[cand_dims]
            target = alias_name(p)
            rename[p.name] = target
            qual = "const " if p.const else ""
            prologue.append(f"{qual}{p.base} {target} = {p.base}({p.attribute}{swizzle});")
            continue
        if not p.attribute:
            raise _Refused(
                f"kernel {kname!r}: parameter {p.name!r} has no attribute (no buffer index "
                "nor thread attribute)"
            )
        raise _Refused(
            f"kernel {kname!r}: parameter {p.name!r} [[{p.attribute}]] has no mlxsci "
            "equivalent (Metal-Sci's host binds only buffers)"
        )
    missing = [f"{b.index} {b.name}" for b in ki.buffers if b.index not in seen_index]
    if missing:
        notes.append(
            f"kernel {kname}: buffer(s) {', '.join(missing)} not declared by the candidate "
            "(unused; Metal-Sci's host bound them regardless)"
        )
    if renamed_params:
        notes.append(
            f"kernel {kname}: parameters renamed to mlxsci's names: {', '.join(renamed_params)}"
        )
    aliased = [line for line in prologue if any(f in line for f in ("= (", "= &", "= *("))]
    if aliased:
        notes.append(
            f"kernel {kname}: buffers of another element type than mlxsci's read through "
            f"aliases: {' '.join(aliased)}"
        )
    for name, split in inplace.items():
        notes.append(
            f"kernel {kname}: in-place buffer {name!r} split: reads from {split.read!r}, "
            f"writes to {split.write!r}"
        )

    # body identifiers that would collide with a parameter MLX declares
    body_tokens = scan(kf.body)
    params = {p.name for p in kf.params}
    collisions = []
    for k, t in enumerate(body_tokens):
        if t.kind != "id" or t.text in params or t.text not in reserved or t.text in rename:
            continue
        if _is_member(body_tokens, k):
            continue
        rename[t.text] = names.fresh(t.text)
        collisions.append(f"{t.text} -> {rename[t.text]}")
    if collisions:
        notes.append(
            f"kernel {kname}: names that MLX declares as kernel parameters renamed: "
            f"{', '.join(collisions)}"
        )

    macro_ids = set(src.macros).union(*src.macros.values()) if src.macros else set()
    rewriter = _Rewriter(
        kf.body,
        {k: v for k, v in rename.items() if k != v},
        inplace,
        kname,
        line_of,
        src.functions,
        macro_ids,
        names.fresh,
    )
    body = rewriter.text()

    # the launch
    cap = None
    for attr in kf.attributes:
        m = re.fullmatch(r"max_total_threads_per_threadgroup\((.*)\)", attr, re.S)
        if not m:
            raise _Refused(f"kernel {kname!r}: the attribute [[{attr}]] has no mlxsci equivalent")
        cap = _evaluate_count(m.group(1), header_tokens)
    try:
        grid, tg = ifaces.launch_shape(ki.launch, cap)
    except ifaces.LaunchRuleError as exc:
        raise _Refused(f"kernel {kname!r}: {exc}") from None
    if cap is not None:
        default = ifaces.launch_shape(ki.launch, None)
        what = (
            f"launch shrunk by Metal-Sci's host rule to grid {grid}, threadgroup {tg}"
            if (grid, tg) != default
            else "the launch is the host's default"
        )
        notes.append(
            f"kernel {kname}: [[max_total_threads_per_threadgroup({cap})]] dropped (MLX writes "
            f"the signature); {what}"
        )
        if ki.launch.rule == "fixed" and ki.launch.min_threads == "N":
            notes.append(
                f"kernel {kname}: Metal-Sci's host refused sizes with N > {cap} for this "
                "pipeline; the converted kernel runs them"
            )
    if contract is not None and (grid, tg) != (contract.grid, contract.threadgroup) and cap is None:
        notes.append(
            f"kernel {kname}: launch set from Metal-Sci's host: grid {grid}, threadgroup {tg} "
            f"(mlxsci's default: grid {contract.grid}, threadgroup {contract.threadgroup})"
        )

    # the carry of in-place buffers
    carry = ki.carry if inplace or any(b.kind == "inout" for b in ki.buffers) else ""
    if carry:
        notes.append(
            f"kernel {kname}: a carry copies each thread's own element of the in-place "
            "buffer to mlxsci's output before the body (elements the dispatch leaves alone "
            "keep their values)"
        )

    # layout: the prologue at the body's indentation
    body = re.sub(r"\A[ \t]*\r?\n", "", body)
    indent = re.match(r"[ \t]*", body).group() if body.strip() else "    "  # type: ignore[union-attr]
    pro = ""
    if prologue:
        pro += f"{indent}// the Metal-Sci kernel's parameters, from MLX's (converted)\n"
        pro += "".join(f"{indent}{line}\n" for line in prologue)
    if carry:
        pro += f"{indent}// carry: elements of the in-place buffer this dispatch leaves keep their values\n"
        pro += indent_text(carry, indent)
    body = pro + body
    if not body.endswith("\n"):
        body += "\n"
    header_renames = {
        p.name: rename[p.name] for p in kf.params if p.name in rename and rename[p.name] != p.name
    }
    for name in inplace:
        header_renames[name] = ""  # an in-place buffer in a macro: refused
    return _Kernel(kname, grid, tg, body, header_renames)


def indent_text(text: str, indent: str) -> str:
    """`text` with `indent` before each non-empty line (a carry as the
    converter places it in a body)."""
    return "".join(f"{indent}{line}\n" if line.strip() else "\n" for line in text.splitlines())


def _line_counter(text: str):
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    from bisect import bisect_right

    return lambda offset: bisect_right(starts, offset)


def _convert_buffer(p, buf, mlx, kname, rename, inplace, prologue, alias_name, names) -> None:
    mine = normal_type(p.base)
    if buf.kind == "scalar":
        m = mlx.get(buf.name)
        if m is None:
            raise _Refused(f"kernel {kname!r}: mlxsci has no parameter {buf.name!r}")
        same = mine == normal_type(m.elem)
        if p.declarator == "*":
            target = alias_name(p)
            rename[p.name] = target
            cast = "" if same else f"(const constant {p.base}*)"
            prologue.append(f"const constant {p.base}* {target} = {cast}&{m.name};")
            return
        if same:
            rename[p.name] = m.name
            return
        target = alias_name(p)
        rename[p.name] = target
        prologue.append(f"const {p.base} {target} = {p.base}({m.name});")
        return
    if p.declarator == "&" and buf.kind in ("in", "out"):
        # An array buffer bound to a reference (`constant float& psi_axis`, one
        # float; `device float& psi_axis` written by the reduction): Metal binds
        # the reference to the buffer's first element, and so does the alias.
        m = mlx.get(buf.name)
        if m is None:
            raise _Refused(f"kernel {kname!r}: mlxsci has no parameter {buf.name!r}")
        target = alias_name(p)
        rename[p.name] = target
        qual = "const " if m.const else ""
        prologue.append(
            f"{qual}{m.space} {p.base}& {target} = *({qual}{m.space} {p.base}*){m.name};"
        )
        return
    if p.declarator != "*":
        raise _Refused(
            f"kernel {kname!r}: buffer({buf.index}) is Metal-Sci's array {buf.name!r}, "
            f"declared as `{p.type_text} {p.name}`, not a pointer"
        )
    if buf.kind == "inout":
        r, w = mlx.get(buf.read_name), mlx.get(buf.write_name)
        if r is None or w is None:
            raise _Refused(f"kernel {kname!r}: mlxsci has no parameters for {buf.name!r}")
        if mine == normal_type(r.pointee) and mine == normal_type(w.pointee):
            inplace[p.name] = _InPlace(r.name, w.name)
            return
        ra, wa = names.fresh(r.name), names.fresh(w.name)
        prologue.append(f"const {r.space} {p.base}* {ra} = (const {r.space} {p.base}*){r.name};")
        prologue.append(f"{w.space} {p.base}* {wa} = ({w.space} {p.base}*){w.name};")
        inplace[p.name] = _InPlace(ra, wa)
        return
    m = mlx.get(buf.name)
    if m is None:
        raise _Refused(f"kernel {kname!r}: mlxsci has no parameter {buf.name!r}")
    if mine == normal_type(m.pointee):
        rename[p.name] = m.name
        return
    target = alias_name(p)
    rename[p.name] = target
    qual = "const " if m.const else ""
    prologue.append(f"{qual}{m.space} {p.base}* {target} = ({qual}{m.space} {p.base}*){m.name};")


# ------------------------------------------------- what the conversion moves

# Words no header declaration can give a new meaning to: C++'s and Metal's
# keywords and type names (a name a later declaration adds, such as an
# overload of `max`, is not among them).
_NOT_DECLARED = frozenset(
    """alignas alignof auto bool break case char class const constexpr const_cast continue
    decltype default delete do double dynamic_cast else enum explicit export extern false float
    for friend goto if inline int long mutable new noexcept nullptr private protected public
    register reinterpret_cast return short signed sizeof static static_assert static_cast struct
    switch template this thread_local throw true try typedef typeid typename union unsigned
    virtual void volatile while kernel vertex fragment device constant threadgroup thread
    threadgroup_imageblock half bfloat uint uchar ushort ulong size_t ptrdiff_t metal atomic
    int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t""".split()
)
_BUILTIN_TYPE = re.compile(
    r"(?:packed_)?(?:u?(?:char|short|int|long)|half|float|bool|bfloat)(?:[234](?:x[234])?)?"
    r"|atomic_\w+|simd_\w+"
)
# At file scope after a kernel, these change how every name before them is
# looked up, or what an operator does.
_LOOKUP_CHANGERS = ("using", "namespace", "operator")


def _declared(tokens: list[Token], match: dict[int, int]) -> tuple[set[str], str | None]:
    """The names the file-scope text `tokens` declares (what a #define or
    #undef names, and the identifiers of each declaration before its
    initializer, outside brackets, but keywords and built-in types), and a
    word of _LOOKUP_CHANGERS it holds, if any."""
    names: set[str] = set()
    k, n = 0, len(tokens)
    initializer = False
    while k < n:
        t = tokens[k]
        if t.pp:
            if t.text in ("define", "undef") and k > 0 and tokens[k - 1].text == "#":
                if k + 1 < n and tokens[k + 1].pp and tokens[k + 1].kind == "id":
                    names.add(tokens[k + 1].text)
            k += 1
            continue
        if t.kind == "punct" and t.text in "([{" and k in match:
            k = match[k] + 1
            continue
        if t.kind == "punct" and t.text in (";", ","):
            initializer = False
        elif t.kind == "punct" and t.text == "=":
            initializer = True
        elif t.kind == "id" and not initializer:
            if t.text in _LOOKUP_CHANGERS:
                return names, t.text
            if t.text not in _NOT_DECLARED and not _BUILTIN_TYPE.fullmatch(t.text):
                names.add(t.text)
        k += 1
    return names, None


def _check_layout(parsed: MetalSource, tokens: list[Token], kept: set[str]) -> None:
    """Refuse a source whose kept kernels would compile otherwise once
    converted (point 5 of the module's docstring). `tokens`: scan(parsed.text).
    Linear in the tokens (times the kept kernels, at most 3): a source may
    hold thousands of dropped kernels."""
    found = directives(parsed.text, tokens)
    kernels = sorted(parsed.kernels, key=lambda kf: kf.start)
    _check_macros(tokens, found, {kf.name for kf in kernels} | kept)
    starts = [kf.start for kf in kernels]

    def owner(offset: int) -> KernelFunction | None:
        i = bisect_right(starts, offset) - 1
        return kernels[i] if i >= 0 and offset < kernels[i].end else None

    in_kernel = [owner(t.start) for t in tokens]
    for k, word, _ in found:
        kf = in_kernel[k]
        if kf is not None and kf.name not in kept:
            if not (word == "pragma" and _loop_pragma(tokens, k)):
                raise _Refused(
                    f"kernel {kf.name} is dropped (mlxsci does not run it), but holds "
                    f"`#{word}`, which applies to the rest of the source: without it the "
                    "kernels that stay could compile to other code than Metal-Sci's"
                )
    for k, t in enumerate(tokens):
        kf = in_kernel[k]
        if t.text == "_Pragma" and kf is not None and kf.name not in kept:
            raise _Refused(
                f"kernel {kf.name} is dropped (mlxsci does not run it), but holds "
                "`_Pragma`, which can apply to the rest of the source"
            )
    for kf in kernels:
        if kf.name not in kept:
            continue
        after = [k for k, t in enumerate(tokens) if t.start >= kf.end]
        later_ids = {tokens[k].text for k in after if tokens[k].kind == "id"}
        for k, word, name in found:
            if in_kernel[k] is kf and name is not None and name in later_ids:
                raise _Refused(
                    f"kernel {kf.name!r} has `#{word} {name}`, and the source uses {name!r} "
                    "after the kernel: mlxsci's format puts that text before the kernel or "
                    "compiles it apart, where the macro would differ"
                )
        rest = [tokens[k] for k in after if in_kernel[k] is None]
        if not rest:
            continue
        declared, changer = _declared(rest, match_brackets(rest))
        if changer is not None:
            raise _Refused(
                f"header text after kernel {kf.name!r} holds `{changer}`: mlxsci's format "
                "puts the whole header before every kernel, where it would change how the "
                "kernel's names are looked up; move it above the kernel"
            )
        mine = {t.text for k, t in enumerate(tokens) if in_kernel[k] is kf and t.kind == "id"}
        clash = sorted(declared & mine)
        if clash:
            raise _Refused(
                f"header text after kernel {kf.name!r} declares {', '.join(clash[:5])}, "
                "which the kernel uses: mlxsci's format puts the whole header before every "
                "kernel, where a later declaration (a macro, an overload) could change what "
                "the kernel compiles to; move it above the kernel"
            )


def _loop_pragma(tokens: list[Token], k: int) -> bool:
    """Is the directive at tokens[k] a loop hint (`#pragma unroll`,
    `nounroll`, `clang loop`, `GCC unroll`), which applies to its loop only?"""
    words = [t.text for t in tokens[k + 2 : k + 4] if t.pp]
    return words[:1] in (["unroll"], ["nounroll"]) or words in (
        ["clang", "loop"],
        ["GCC", "unroll"],
    )


def _check_macros(tokens: list[Token], found, kernel_names: set[str]) -> None:
    """Refuse macros that could declare, hide or rename a kernel where this
    converter cannot see it: a #define or #undef of `kernel` or of a kernel's
    name (`#define heat_step unused` turns the kernel after it into another
    function, for a compiler); a replacement list holding `kernel` or a
    kernel's name (`#define MK [[kernel]] void heat_step(...) {...}` used at
    file scope declares a kernel this module never sees), or brackets that
    do not balance (`#define CLOSE }` ends a kernel early, `#define LP
    IGNORE(` swallows one); and a macro that pastes tokens (`##`, or naming
    one that does) used outside every function body (`[[CAT(ker, nel)]]`
    is `[[kernel]]`)."""
    replacement: dict[str, list[Token]] = {}
    starts = {k for k, _, _ in found}
    for k, word, name in found:
        if name is None:
            continue
        if name == "kernel" or name in kernel_names:
            raise _Refused(
                f"the source has `#{word} {name}`: a macro named like a kernel (or `kernel`) "
                "changes which function a compiler takes for the kernel"
            )
        if word == "define":
            j = k + 3
            while j < len(tokens) and tokens[j].pp and j not in starts:
                j += 1
            replacement[name] = tokens[k + 3 : j]
    for name, body in replacement.items():
        words = {t.text for t in body if t.kind == "id"}
        bad = sorted(words & (kernel_names | {"kernel"}))
        if bad:
            raise _Refused(
                f"macro {name!r} expands to {bad[0]!r}: a kernel declared or named through a "
                "macro is one this converter cannot see"
            )
        depth = 0
        for t in body:
            if t.kind == "punct" and t.text in "([{":
                depth += 1
            elif t.kind == "punct" and t.text in ")]}":
                depth -= 1
                if depth < 0:
                    break
        if depth != 0:
            raise _Refused(
                f"macro {name!r} opens or closes brackets it does not close or open: where its "
                "uses put a kernel's braces, a compiler and this converter would disagree"
            )
    # the macros that paste, and those naming one (through any chain of names)
    users: dict[str, set[str]] = {}
    for n, body in replacement.items():
        for t in body:
            if t.kind == "id":
                users.setdefault(t.text, set()).add(n)
    todo = [n for n, body in replacement.items() if any(t.text == "##" for t in body)]
    pasting = set(todo)
    while todo:
        for user in users.get(todo.pop(), ()):
            if user not in pasting:
                pasting.add(user)
                todo.append(user)
    if not pasting:
        return
    depth = 0  # of braces: a use inside a function's (or struct's) body is harmless
    for t in tokens:
        if t.pp:
            continue
        if t.kind == "punct" and t.text in ("{", "}"):
            depth += 1 if t.text == "{" else -1
        elif t.kind == "id" and t.text in pasting and depth == 0:
            raise _Refused(
                f"macro {t.text!r} pastes tokens (`##`) and is used outside every function "
                "body, where what it forms (`kernel`, a kernel's name) declares a kernel this "
                "converter cannot see"
            )


# ------------------------------------------------------------ the whole


def _load(task):
    from mlxsci.task import Task, load_task

    if isinstance(task, Task):
        return task
    if not isinstance(task, str):
        raise _Refused(f"not a task: {task!r}")
    try:
        return load_task(task)
    except ValueError as exc:
        raise _Refused(str(exc)) from None


def _convert(task_arg, source, notes: list[str]) -> str:
    task = _load(task_arg)
    iface = ifaces.interface(task.name)
    if iface is None:
        raise _Refused(f"task {task.name!r} has no Metal-Sci interface (not one of the 12 tasks)")
    if not isinstance(source, str):
        raise _Refused("the source is not text")
    if not source.strip():
        raise _Refused("the source is empty")
    parsed = parse_metal_source(source)
    if not parsed.kernels:
        raise _Refused("the source defines no kernel function")
    by_name: dict[str, KernelFunction] = {}
    for kf in parsed.kernels:
        if kf.name in by_name:
            raise _Refused(f"kernel {kf.name!r} is defined twice")
        by_name[kf.name] = kf
    missing = [k.name for k in iface.kernels if k.name not in by_name]
    if missing:
        raise _Refused(
            f"the source lacks kernel(s) {', '.join(missing)} of task {task.name} "
            "(Metal-Sci's host would fail to build the pipeline)"
        )
    for kf in parsed.kernels:
        if iface.kernel(kf.name) is None:
            notes.append(
                f"kernel {kf.name} dropped: not a kernel of {task.name} (Metal-Sci's host "
                "never dispatched it)"
            )
    for ki in iface.kernels:
        if not ki.runs:
            notes.append(f"kernel {ki.name} dropped: {ki.why_not_run}")

    header_tokens = scan(parsed.header)
    header_names, macros = _header_globals(header_tokens)
    source_tokens = scan(source)
    all_ids = _identifiers(source_tokens)
    mlx_all = mlx_parameters(task)
    runnable = [ki for ki in iface.kernels if ki.runs]
    _check_layout(parsed, source_tokens, {ki.name for ki in runnable})
    for ki in runnable:
        if ki.name not in mlx_all:
            raise _Refused(f"mlxsci's pipeline of {task.name} never launches {ki.name}")
    # A name the header declares (a macro, a constant, a function) that MLX
    # declares as a kernel parameter: a macro would expand inside the
    # signature MLX writes after the header, and the parameter would shadow
    # the rest inside a body. It is renamed everywhere (a kernel's own
    # parameter of that name still wins in its body, as it did in Metal).
    reserved_all = set().union(*(_reserved(mlx_all[ki.name]) for ki in runnable))
    fresh = _Names(all_ids | reserved_all)
    global_renames = {m: fresh.fresh(m) for m in sorted(header_names & reserved_all)}
    if global_renames:
        notes.append(
            "header names that MLX declares as kernel parameters renamed: "
            + ", ".join(f"{a} -> {b}" for a, b in global_renames.items())
        )
    src = _Source(
        parsed,
        header_tokens,
        header_names,
        macros,
        all_ids,
        global_renames,
        _header_functions(header_tokens, macros),
    )
    converted: list[_Kernel] = []
    for ki in runnable:
        try:
            contract = task.kernel(ki.name)
        except KeyError:
            raise _Refused(f"task {task.name} has no kernel {ki.name}") from None
        converted.append(
            _convert_kernel(by_name[ki.name], ki, mlx_all[ki.name], src, contract, notes)
        )

    header = _rename_tokens(parsed.header, header_tokens, global_renames)
    header = _rename_in_macros(header, scan(header), macros, converted, notes)
    text = _assemble(header, converted, notes)
    _check(task, text, notes)
    return text


def _rename_tokens(text: str, tokens: list[Token], mapping: dict[str, str]) -> str:
    """`text` with each identifier token in `mapping` (not after `.`, `->`,
    `::`) renamed."""
    if not mapping:
        return text
    out, pos = [], 0
    for k, t in enumerate(tokens):
        if t.kind == "id" and t.text in mapping and not _is_member(tokens, k):
            out.append(text[pos : t.start])
            out.append(mapping[t.text])
            pos = t.end
    out.append(text[pos:])
    return "".join(out)


def _rename_in_macros(header, header_tokens, macros, converted, notes) -> str:
    """The header with the #define lines that name a renamed parameter
    renamed alike (when every kernel agrees on the new name)."""
    in_macros = set().union(*macros.values()) if macros else set()
    wanted: dict[str, set[str]] = {}
    for k in converted:
        for old, new in k.header_renames.items():
            if old in in_macros:
                wanted.setdefault(old, set()).add(new)
    if not wanted:
        return header
    for old, news in wanted.items():
        if "" in news:
            raise _Refused(
                f"a macro of the header names in-place buffer {old!r}: its writes cannot be "
                "redirected to mlxsci's output"
            )
        if len(news) > 1:
            raise _Refused(
                f"a macro of the header names parameter {old!r}, which the kernels bind "
                f"to different mlxsci names ({', '.join(sorted(news))})"
            )
    mapping = {old: next(iter(news)) for old, news in wanted.items()}
    # only in #define lines, never a macro's own name
    own = {k + 2 for k, t in enumerate(header_tokens) if t.pp and t.text == "#"}
    tokens = [t for k, t in enumerate(header_tokens) if t.pp and k not in own]
    notes.append(
        "header macros renamed alike: " + ", ".join(f"{a} -> {b}" for a, b in mapping.items())
    )
    return _rename_tokens(header, tokens, mapping)


def _defuse(text: str, notes: list[str]) -> str:
    """`text` with each line that starts `//!` (a comment to Metal, a
    directive to mlxsci's parser) written `// !`."""
    fixed, n = _DIRECTIVE_LINE.subn(r"\1// !", text)
    note = "source comments starting `//!` written `// !` (mlxsci reads `//!` as a directive)"
    if n and note not in notes:
        notes.append(note)
    return fixed


def _assemble(header: str, kernels: list[_Kernel], notes: list[str]) -> str:
    parts = []
    if header.strip():
        parts.append("//! header\n" + _defuse(header, notes))
    for k in kernels:
        parts.append(
            f"//! kernel {k.name}\n//! grid = {k.grid}\n//! threadgroup = {k.threadgroup}\n"
            + _defuse(k.body, notes)
        )
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def _check(task, text: str, notes: list[str]) -> None:
    from mlxsci.kernel import candidate as cand

    try:
        parsed = cand.parse(text, dialect="metal", filename="<converted>")
    except CandidateError as exc:
        raise _Refused(f"the converted candidate does not parse: {exc}") from None
    names = set(task.launch_names(task.size_set("smoke")[0].params))
    for failure in cand.validate(parsed, task.kernel_names, names):
        if failure.kind == "refused":
            notes.append(f"mlxsci's source policy refuses the candidate: {failure}")
            continue
        raise _Refused(f"the converted candidate does not fit {task.name}: {failure}")
