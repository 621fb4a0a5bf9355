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
3. In-place buffers (saxpy y, ising spins, hmc accept_cnt) are bound to
   mlxsci's output X_out like any output, and the kernel gets `//! inplace
   X_out = X`: X_out starts as a copy of input X (mlxsci/kernel/in_place.py),
   so the body reads and writes one buffer as it did in Metal and every
   form of access converts unchanged (pointer walks, a row pointer kept and
   reused, writable references, helpers and macros that write through it,
   atomics), and elements the dispatch leaves alone keep their values.
4. `[[max_total_threads_per_threadgroup(N)]]` (or GNU's `__attribute__`
   spelling) is dropped (MLX writes the signature) and the launch shape
   shrunk by the Metal-Sci host's rule instead; every kernel gets `//! grid` and `//! threadgroup` lines with
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
   a kernel (`_check_macros`). `#undef` lines that end the source change
   nothing and are dropped first (`_without_trailing_undefs`). Text a
   compiler could cut otherwise than the scanner is refused by
   metal_source.py.
6. The result parses (mlxsci.kernel.candidate.parse, metal dialect) and
   fits the task (mlxsci.kernel.validate). A candidate mlxsci's source policy
   refuses (an include of a file, printf, ...) is still returned, with a
   note: that is mlxsci's verdict on it (a compile error), not a conversion
   failure.

Limits (what the converted kernel cannot reproduce, or what is not converted):
- A read-only array MLX binds in the constant address space (fewer than 8
  elements: ising's p_accept, gradshaf_step's psi_axis) is renamed, not cast
  (Metal casts no pointer between address spaces): a helper function that
  takes it as a `device` pointer does not compile.
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


# ---------------------------------------------------------- one kernel


@dataclass
class _Kernel:
    name: str
    grid: str
    threadgroup: str
    body: str
    header_renames: dict[str, str]
    in_place: list[tuple[str, str]] = field(default_factory=list)


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


def _reserved(mlx: dict[str, MlxParam]) -> set[str]:
    """The names MLX may declare in a kernel's parameter list: its inputs and
    outputs, an array input's `_shape`, `_strides`, `_ndim`, the attributes."""
    reserved = set(mlx) | set(_ATTRIBUTE_TYPES)
    for n, mp in mlx.items():
        if mp.const and mp.declarator == "*":
            reserved |= {n + "_shape", n + "_strides", n + "_ndim"}
    return reserved


@dataclass
class _Binding:
    """How one kernel's parameters reach MLX's: renames of body names, the
    prologue's declarations (aliases, attribute locals, scalar values), and
    the `//! inplace` pairs of its read-write buffers."""

    rename: dict[str, str]
    prologue: list[str] = field(default_factory=list)
    in_place: list[tuple[str, str]] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)  # "old -> new", for the notes
    missing: list[str] = field(default_factory=list)  # Metal-Sci's buffers not declared


def _convert_kernel(
    kf: KernelFunction,
    ki: ifaces.KernelInterface,
    mlx: dict[str, MlxParam],
    src: _Source,
    contract,
    notes: list[str],
) -> _Kernel:
    reserved = _reserved(mlx)
    names = _Names(src.all_ids | reserved | set(src.global_renames.values()))
    binding = _bind_parameters(kf, ki, mlx, src, reserved, names)
    _note_binding(kf.name, binding, notes)
    tokens = scan(kf.body)
    _rename_collisions(kf, tokens, reserved, binding.rename, names, notes)
    body = _rename_tokens(kf.body, tokens, {k: v for k, v in binding.rename.items() if k != v})
    grid, tg = _launch(kf, ki, contract, src.header_tokens, notes)
    header_renames = {
        p.name: binding.rename[p.name]
        for p in kf.params
        if p.name in binding.rename and binding.rename[p.name] != p.name
    }
    return _Kernel(
        kf.name, grid, tg, _with_prologue(body, binding.prologue), header_renames, binding.in_place
    )


def _bind_parameters(kf, ki, mlx, src: _Source, reserved: set[str], names) -> _Binding:
    """Each parameter of `kf` bound to MLX's: a buffer by its index, a thread
    attribute to a local from MLX's attribute; anything else is refused."""
    kname = kf.name
    binding = _Binding(rename=dict(src.global_renames))
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
        binding.rename.pop(p.name, None)  # a parameter named like a header name wins in its body
        if p.attribute.startswith("buffer"):
            buf = _buffer_of(p, ki, kname, seen_index)
            _convert_buffer(p, buf, mlx, kname, binding, alias_name)
            target = binding.rename.get(p.name, p.name)
            if buf.kind != "inout" and target != p.name and not target.startswith("ms_"):
                binding.renamed.append(f"{p.name} -> {target}")
        elif p.attribute in _ATTRIBUTE_TYPES:
            _bind_attribute(p, kname, binding, alias_name)
        elif not p.attribute:
            raise _Refused(
                f"kernel {kname!r}: parameter {p.name!r} has no attribute (no buffer index "
                "nor thread attribute)"
            )
        else:
            raise _Refused(
                f"kernel {kname!r}: parameter {p.name!r} [[{p.attribute}]] has no mlxsci "
                "equivalent (Metal-Sci's host binds only buffers)"
            )
    binding.missing = [f"{b.index} {b.name}" for b in ki.buffers if b.index not in seen_index]
    return binding


def _buffer_of(p: Param, ki, kname: str, seen_index: dict[int, str]) -> ifaces.Buffer:
    """The Metal-Sci buffer a `[[buffer(i)]]` parameter is bound to."""
    idx = p.buffer_index
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
    return buf


def _bind_attribute(p: Param, kname: str, binding: _Binding, alias_name) -> None:
    """A thread-attribute parameter as a local of its declared type, from
    MLX's attribute (`uint2 gid = uint2(thread_position_in_grid.xy);`)."""
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
    binding.rename[p.name] = target
    qual = "const " if p.const else ""
    binding.prologue.append(f"{qual}{p.base} {target} = {p.base}({p.attribute}{swizzle});")


def _note_binding(kname: str, binding: _Binding, notes: list[str]) -> None:
    """What the binding changed, as notes."""
    if binding.missing:
        notes.append(
            f"kernel {kname}: buffer(s) {', '.join(binding.missing)} not declared by the candidate "
            "(unused; Metal-Sci's host bound them regardless)"
        )
    if binding.renamed:
        notes.append(
            f"kernel {kname}: parameters renamed to mlxsci's names: {', '.join(binding.renamed)}"
        )
    aliased = [line for line in binding.prologue if any(f in line for f in ("= (", "= &", "= *("))]
    if aliased:
        notes.append(
            f"kernel {kname}: buffers declared otherwise than mlxsci's parameters (another "
            f"element type, or a reference) used through aliases: {' '.join(aliased)}"
        )
    for out, inp in binding.in_place:
        notes.append(
            f"kernel {kname}: in-place buffer {inp!r} is mlxsci's output {out!r}, which starts "
            f"as a copy of {inp!r} (`//! inplace {out} = {inp}`: the copy is not timed)"
        )


def _rename_collisions(
    kf, body_tokens: list[Token], reserved: set[str], rename: dict[str, str], names, notes
) -> None:
    """Body identifiers (`body_tokens`, kf's body scanned) that would collide
    with a parameter MLX declares get fresh names."""
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
            f"kernel {kf.name}: names that MLX declares as kernel parameters renamed: "
            f"{', '.join(collisions)}"
        )


def _launch(kf, ki, contract, header_tokens, notes: list[str]) -> tuple[str, str]:
    """The Metal-Sci host's grid and threadgroup of `kf`, shrunk by a
    `max_total_threads_per_threadgroup` attribute as the host's rule does."""
    kname = kf.name
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
            f"kernel {kname}: max_total_threads_per_threadgroup({cap}) dropped (MLX writes "
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
    return grid, tg


def _with_prologue(body: str, prologue: list[str]) -> str:
    """`body` after the prologue's declarations, at the body's indentation."""
    body = re.sub(r"\A[ \t]*\r?\n", "", body)
    indent = re.match(r"[ \t]*", body).group() if body.strip() else "    "  # type: ignore[union-attr]
    pro = ""
    if prologue:
        pro += f"{indent}// the Metal-Sci kernel's parameters, from MLX's (converted)\n"
        pro += "".join(f"{indent}{line}\n" for line in prologue)
    body = pro + body
    return body if body.endswith("\n") else body + "\n"


def _convert_buffer(p: Param, buf, mlx, kname: str, binding: _Binding, alias_name) -> None:
    """A `[[buffer(i)]]` parameter bound to mlxsci's parameter of buffer `buf`:
    renamed where the element types agree, else an alias cast from MLX's. A
    read-write buffer X is mlxsci's output X_out, which starts as a copy of
    input X (`//! inplace X_out = X`), so every access works as in Metal."""
    mine = normal_type(p.base)
    rename, prologue = binding.rename, binding.prologue
    if buf.kind == "scalar":
        _convert_scalar(p, buf, mlx, kname, binding, alias_name)
        return
    if buf.kind == "inout":
        binding.in_place.append((buf.write_name, buf.read_name))
    m = mlx.get(buf.write_name if buf.kind == "inout" else buf.name)
    if m is None:
        raise _Refused(f"kernel {kname!r}: mlxsci has no parameter for {buf.name!r}")
    qual = "const " if m.const else ""
    if p.declarator == "&":
        # An array buffer bound to a reference (`constant float& psi_axis`, one
        # float; `device uint& c` of an in-place counter): Metal binds the
        # reference to the buffer's first element, and so does the alias.
        target = alias_name(p)
        rename[p.name] = target
        prologue.append(
            f"{qual}{m.space} {p.base}& {target} = *({qual}{m.space} {p.base}*){m.name};"
        )
        return
    if p.declarator != "*":
        raise _Refused(
            f"kernel {kname!r}: buffer({buf.index}) is Metal-Sci's array {buf.name!r}, "
            f"declared as `{p.type_text} {p.name}`, not a pointer"
        )
    if mine == normal_type(m.pointee):
        rename[p.name] = m.name
        return
    target = alias_name(p)
    rename[p.name] = target
    prologue.append(f"{qual}{m.space} {p.base}* {target} = ({qual}{m.space} {p.base}*){m.name};")


def _convert_scalar(p: Param, buf, mlx, kname: str, binding: _Binding, alias_name) -> None:
    """A scalar buffer: renamed to MLX's constant of the same type, a value of
    the candidate's type, or a pointer at MLX's constant."""
    m = mlx.get(buf.name)
    if m is None:
        raise _Refused(f"kernel {kname!r}: mlxsci has no parameter {buf.name!r}")
    same = normal_type(p.base) == normal_type(m.elem)
    if p.declarator == "*":
        target = alias_name(p)
        binding.rename[p.name] = target
        cast = "" if same else f"(const constant {p.base}*)"
        binding.prologue.append(f"const constant {p.base}* {target} = {cast}&{m.name};")
        return
    if same:
        binding.rename[p.name] = m.name
        return
    target = alias_name(p)
    binding.rename[p.name] = target
    binding.prologue.append(f"const {p.base} {target} = {p.base}({m.name});")


def _line_counter(text: str):
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    from bisect import bisect_right

    return lambda offset: bisect_right(starts, offset)


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
    source = _without_trailing_undefs(source, notes)
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


# A line of the source's tail that changes nothing the compiler has read:
# blank, a `//` comment, or `#undef NAME` (a backslash would continue it).
_INERT_TAIL_LINE = re.compile(r"[ \t]*(?:#[ \t]*undef[ \t]+[A-Za-z_]\w*[ \t]*)?(?://[^\n\\]*)?")


def _without_trailing_undefs(source: str, notes: list[str]) -> str:
    """`source` less the `#undef` lines that end it (after its last closing
    brace, nothing but them, blank lines and `//` comments): at the end of a
    translation unit they undefine nothing anything reads, while mlxsci's
    format would put them in the header, before the kernels that use the
    macros."""
    last = source.rfind("}")
    tail = source[last + 1 :]
    lines = tail.split("\n")
    if last < 0 or "#" not in tail or not all(_INERT_TAIL_LINE.fullmatch(x) for x in lines):
        return source
    undone = re.findall(r"#[ \t]*undef[ \t]+([A-Za-z_]\w*)", tail)
    notes.append(
        f"the #undef lines that end the source ({', '.join(undone)}) dropped: at the end of "
        "the translation unit they change nothing"
    )
    return source[: last + 1] + "\n"


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
        in_place = "".join(f"//! inplace {o} = {i}\n" for o, i in k.in_place)
        parts.append(
            f"//! kernel {k.name}\n//! grid = {k.grid}\n//! threadgroup = {k.threadgroup}\n"
            + in_place
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
    allowed = {k.name: k.in_place for k in task.kernels}
    for failure in cand.validate(parsed, task.kernel_names, names, allowed):
        if failure.kind == "refused":
            notes.append(f"mlxsci's source policy refuses the candidate: {failure}")
            continue
        raise _Refused(f"the converted candidate does not fit {task.name}: {failure}")
