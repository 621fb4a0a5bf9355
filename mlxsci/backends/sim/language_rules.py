"""Language rules the real kernel compilers enforce and clang-as-C++ does not.

The simulator compiles MLX's generated kernel text as C++17 with a prelude
that defines Metal's address spaces away and gives CUDA a host C++ library,
so it accepts kernels that Apple's Metal compiler or NVRTC reject. This module
reads the generated text (comments and strings blanked) before it is built
and reports the first such violation as a CompileError in clang's format,
mapped to the candidate's own file and line through the dialect's Regions.

Metal (Metal Shading Language Specification, "MSL" below, 3.x):
  lambda      no lambda expressions (MSL 1.4.4/1.5.4, C++ features not supported;
              MSL 4.0 on macOS 26 relaxes this, the recorded M1 verdicts do not)
  program     program-scope variables must be declared in the `constant`
              address space (MSL 4.2); `constexpr` alone is not enough: Apple's
              compiler reports "program scope variable must reside in constant
              address space" for a namespace-scope `constexpr` (AdaptiveCpp#864,
              AliceO2#15802); `constexpr sampler` is the documented exception
              (MSL 2.10). Function-scope `static` variables are not supported.
  addrspace   every pointer or reference type names its address space (MSL 4:
              "pointer type must have explicit address space qualifier"), and no
              cast or initialization moves a pointer to another address space
              (clang: "converts between mismatching address spaces")
  keyword     `half` (a type keyword, MSL 2.1), the address spaces (MSL 4) and
              the function qualifiers kernel/vertex/fragment (MSL 5.1) are
              keywords and cannot name a variable, parameter, member or function.
              Vector and scalar typedef names (float2, uint, ...) are not
              keywords: C++ lets a declaration shadow them, so they are allowed.

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
Lambdas are legal CUDA device code and are not checked.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from mlxsci.backends.base import CompileError
from mlxsci.backends.sim import build
from mlxsci.backends.sim.rewrite import mask_comments_and_strings

__all__ = ["check", "check_metal", "check_cuda", "CHECKS"]


# ------------------------------------------------------------------ tokens
@dataclass(frozen=True)
class _Tok:
    text: str
    pos: int      # offset in the kernel text

    @property
    def is_ident(self) -> bool:
        return self.text[:1].isalpha() or self.text[:1] == "_"


# `>>` stays two tokens so that nested template argument lists close; `<<` is
# one token so that a shift never opens one.
_TOKEN = re.compile(r"[A-Za-z_]\w*|\.?\d[\w.]*(?:[eE][+-]\d+\w*)?|::|->|<<=?|\+\+|--|&&|\|\||"
                    r"[-+*/%&|^!=<>]=|\S")
_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#.*?(?<!\\)$", re.M | re.S)


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + "".join(c if c == "\n" else " " for c in text[start:end]) + text[end:]


def _code_only(text: str) -> str:
    """Comments, strings and preprocessor lines (with their continuations)
    replaced by spaces; offsets and newlines unchanged."""
    masked = mask_comments_and_strings(text)
    for m in reversed(list(_PREPROCESSOR_LINE.finditer(masked))):
        masked = _blank(masked, m.start(), m.end())
    return masked


def _tokens(code: str) -> list[_Tok]:
    return [_Tok(m.group(), m.start()) for m in _TOKEN.finditer(code)]


def _close(toks: list[_Tok], i: int) -> int:
    """Index of the bracket closing toks[i] ((, [, {), or len(toks)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[toks[i].text]]
    for j in range(i + 1, len(toks)):
        t = toks[j].text
        if t in pairs:
            stack.append(pairs[t])
        elif stack and t == stack[-1]:
            stack.pop()
            if not stack:
                return j
    return len(toks)


def _close_angle(toks: list[_Tok], i: int) -> int | None:
    """Index of the `>` closing the template argument list opened at toks[i],
    or None where toks[i] is a less-than (a `;` or `{` comes first)."""
    depth = 0
    j = i
    while j < len(toks):
        t = toks[j].text
        if t == "<":
            depth += 1
        elif t == ">":
            depth -= 1
            if depth == 0:
                return j
        elif t in ("(", "["):
            j = _close(toks, j)
        elif t in (";", "{", "}", "&&", "||"):
            return None
        j += 1
    return None


# ------------------------------------------------------------------ violations
@dataclass(frozen=True)
class _Violation:
    pos: int
    message: str


def _to_compile_error(v: _Violation, text: str, regions, source_file: str) -> CompileError:
    """A CompileError from clang-style log text at the candidate's file and
    line, built by the same parser as the simulator's own compile errors."""
    line = text.count("\n", 0, v.pos) + 1
    col = v.pos - (text.rfind("\n", 0, v.pos) + 1) + 1
    file, file_line = "<mlx-signature>", line
    for r in regions:
        if r.first <= line <= r.last:
            file, file_line = r.file, r.start_line + (line - r.first)
            break
    src_line = text.split("\n")[line - 1]
    log = (f"{build._line_file(file)}:{file_line}:{col}: error: {v.message}\n"
           f"{src_line}\n{' ' * (col - 1)}^\n")
    return build.parse_compile_error(log, source_file)


def _first(violations: list[_Violation], text: str, regions, source_file: str) -> CompileError | None:
    if not violations:
        return None
    return _to_compile_error(min(violations, key=lambda v: v.pos), text, regions, source_file)


# ================================================================== Metal
_ADDRESS_SPACES = frozenset({"device", "constant", "thread", "threadgroup", "threadgroup_imageblock",
                             "ray_data", "object_data"})
_FUNCTION_QUALIFIERS = frozenset({"kernel", "vertex", "fragment"})
# Words of Metal's language that can never name anything (see the module docstring).
_METAL_KEYWORDS = {"half": "a Metal scalar type keyword (MSL 2.1)"}
_METAL_KEYWORDS.update({w: "a Metal address-space keyword (MSL 4)" for w in _ADDRESS_SPACES})
_METAL_KEYWORDS.update({w: "a Metal function qualifier keyword (MSL 5.1)" for w in _FUNCTION_QUALIFIERS})

_SCALAR_TYPES = frozenset({
    "bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "float",
    "double", "bfloat", "size_t", "ptrdiff_t", "void", "int8_t", "int16_t", "int32_t", "int64_t",
    "uint8_t", "uint16_t", "uint32_t", "uint64_t", "float16_t", "bfloat16_t", "complex64_t",
    "vec", "packed_vec", "atomic", "atomic_int", "atomic_uint", "atomic_float", "atomic_bool",
    "sampler", "array", "matrix", "simdgroup_matrix", "signed", "unsigned"})
_TYPE_WORD = re.compile(r"(?:packed_)?(?:bool|char|uchar|short|ushort|int|uint|long|ulong|half|float|"
                        r"bfloat)[234]|(?:half|float|bfloat)[234]x[234]|simdgroup_\w+8x8|texture\w+|"
                        r"depth\w+")
# Words that may precede or follow the type in a declaration's specifiers.
_SPECIFIERS = frozenset({"const", "volatile", "constexpr", "static", "inline", "extern", "typename",
                         "register", "mutable", "struct", "class", "enum", "union"}) | _ADDRESS_SPACES
_INTEGER_WORDS = frozenset({"int", "char", "short", "long"})
_CASTS = frozenset({"static_cast", "reinterpret_cast", "const_cast"})
# Keywords after which an expression (a cast, a lambda) can start.
_EXPRESSION_KEYWORDS = frozenset({"return", "case", "else", "do", "throw", "new", "delete",
                                 "co_return", "co_yield", "co_await"})


@dataclass
class _Var:
    """What a name holds, for address-space checks: `kind` is "pointer"
    (space = its pointee's address space), "array", "value" or "reference"
    (space = where the object lives); `type` is for messages."""
    kind: str
    space: str | None
    type: str


@dataclass
class _Scope:
    kind: str                              # "program", "type", "enum", "function"
    names: dict = field(default_factory=dict)


class _MetalChecker:
    """One pass over the tokens: scopes, declarations and casts."""

    def __init__(self, code: str):
        self.toks = _tokens(code)
        self.types = set(_SCALAR_TYPES)
        self.scopes = [_Scope("program")]
        self.params: list[tuple[str, _Var]] = []   # of the function whose body opens next
        self.out: list[_Violation] = []

    # -- helpers ---------------------------------------------------------
    def is_type(self, word: str) -> bool:
        return word in self.types or bool(_TYPE_WORD.fullmatch(word))

    def lookup(self, name: str) -> _Var | None:
        for scope in reversed(self.scopes):
            if name in scope.names:
                return scope.names[name]
        return None

    def flag(self, tok: _Tok, message: str) -> None:
        self.out.append(_Violation(tok.pos, message))

    # -- the walk --------------------------------------------------------
    def run(self) -> list[_Violation]:
        self.check_lambdas()
        toks = self.toks
        i = 0
        while i < len(toks):
            t = toks[i].text
            if t == "}":
                if len(self.scopes) > 1:
                    self.scopes.pop()
                i += 1
                continue
            if t == ";":
                i += 1
                continue
            end, opens = self.statement_end(i)
            kind = self.statement(toks[i:end], opens)
            if opens:
                scope = _Scope(kind)
                if kind == "function":
                    scope.names.update(self.params)
                self.scopes.append(scope)
            self.params = []
            # a `}` that ends a statement (`enum E { A, B }`) still closes its scope
            i = end if end < len(toks) and toks[end].text == "}" else end + 1
        return self.out

    def statement_end(self, i: int) -> tuple[int, bool]:
        """(index of the `;` or block-opening `{` that ends the statement
        starting at i, whether it opens a block). Braces of initializers,
        brace-init and lambda bodies belong to the statement."""
        toks = self.toks
        j = i
        while j < len(toks):
            t = toks[j].text
            if t in ("(", "["):
                j = _close(toks, j) + 1
                continue
            if t == ";" or t == "}":
                return j, False
            if t == "{":
                if self.opens_block(i, j):
                    return j, True
                j = _close(toks, j) + 1
                continue
            j += 1
        return len(toks), False

    def opens_block(self, start: int, j: int) -> bool:
        """Whether the `{` at j (in the statement from `start`) opens a body
        or block rather than an initializer or a lambda body."""
        toks = self.toks
        if j == start:
            return True
        prev = toks[j - 1].text
        words = {t.text for t in toks[start:j]}
        if words & {"struct", "class", "union", "enum", "namespace"} and "=" not in words \
                and "(" not in words:
            return True
        if prev == ")":
            # a lambda's parameter list follows its capture list: `](...) {`
            k = j - 1
            depth = 0
            while k > start:
                if toks[k].text == ")":
                    depth += 1
                elif toks[k].text == "(":
                    depth -= 1
                    if depth == 0:
                        break
                k -= 1
            return not (k > start and toks[k - 1].text == "]")
        if prev in ("else", "do", "try", ":", '"', "const", "noexcept", "override", "final"):
            return True
        if prev == "]" and j >= 2 and toks[j - 2].text == "]":   # after [[attributes]]
            return True
        return False

    # -- statements ------------------------------------------------------
    def statement(self, stmt: list[_Tok], opens: bool) -> str:
        """Checks one statement; returns the kind of scope its `{` opens."""
        scope = self.scopes[-1].kind
        self.check_casts(stmt)
        if not stmt:
            return scope
        body = self.strip_template(stmt)
        head = [t.text for t in body]
        if head[:1] == ["namespace"] or head[:1] == ["extern"]:
            return "program"
        if head[:1] and head[0] in ("struct", "class", "union", "enum") or \
                (head[:1] == ["typedef"] and len(head) > 1 and head[1] in ("struct", "class", "union", "enum")):
            k = 1 if head[0] != "typedef" else 2
            if k < len(head) and head[k] == "class" and head[k - 1] == "enum":
                k += 1
            if k < len(body) and body[k].is_ident:
                self.types.add(body[k].text)
                self.check_name(body[k], what="type")
            if head[0] == "typedef" and not opens and body[-1].is_ident:
                self.types.add(body[-1].text)
            return "enum" if "enum" in head[:3] else "type"
        if head[:1] == ["typedef"]:
            if body and body[-1].is_ident:
                self.types.add(body[-1].text)
            return scope
        if head[:1] == ["using"]:
            if len(head) > 2 and head[2] == "=" and body[1].is_ident:
                self.types.add(body[1].text)
            return scope
        if scope == "enum":
            return scope
        if scope == "function":
            self.function_statement(body, opens)
            return "function"
        # program or type scope: a function or a variable
        self.declaration(body, scope, opens)
        return "function" if opens else scope

    def strip_template(self, stmt: list[_Tok]) -> list[_Tok]:
        """The statement without leading `template <...>` headers (whose type
        parameters become type names) and [[attributes]]."""
        k = 0
        while k < len(stmt):
            if stmt[k].text == "template" and k + 1 < len(stmt) and stmt[k + 1].text == "<":
                end = _close_angle(stmt, k + 1)
                if end is None:
                    break
                inner = stmt[k + 2:end]
                for a, b in zip(inner, inner[1:]):
                    if a.text in ("typename", "class") and b.is_ident:
                        self.types.add(b.text)
                k = end + 1
            elif stmt[k].text == "[" and k + 1 < len(stmt) and stmt[k + 1].text == "[":
                k = _close(stmt, k) + 1
            else:
                break
        return stmt[k:]

    def function_statement(self, body: list[_Tok], opens: bool) -> None:
        head = [t.text for t in body]
        if head[:1] == ["for"] and len(body) > 2 and head[1] == "(":
            inner = body[2:_close(body, 1)]
            semi = next((k for k, t in enumerate(inner) if t.text == ";"), len(inner))
            self.local_declaration(inner[:semi])
            return
        if head[:1] and head[0] in ("if", "while", "switch", "return", "else", "do", "case",
                                    "default", "break", "continue", "goto"):
            return
        self.local_declaration(body)

    # -- declarations ----------------------------------------------------
    def specifiers(self, toks: list[_Tok], k: int = 0) -> tuple[int, list[_Tok], str | None] | None:
        """Parses decl-specifiers from toks[k]: (index after them, the
        specifier tokens, the type word), or None where no type is named."""
        start = k
        type_word = None
        while k < len(toks):
            t = toks[k].text
            if t in _SPECIFIERS:
                # an address-space keyword right before a declarator end is a name, not a specifier
                if type_word is not None and t in _METAL_KEYWORDS and k + 1 < len(toks) and \
                        toks[k + 1].text in ("=", ";", ",", "[", ")", "(", "{", ":"):
                    break
                k += 1
                continue
            if t == "metal" and k + 1 < len(toks) and toks[k + 1].text == "::":
                k += 2
                continue
            if type_word is None and toks[k].is_ident and self.is_type(t):
                type_word = t
                k += 1
                if t in ("unsigned", "signed", "long", "short"):
                    while k < len(toks) and toks[k].text in _INTEGER_WORDS:
                        k += 1
                if k < len(toks) and toks[k].text == "<":
                    end = _close_angle(toks, k)
                    if end is None:
                        return None
                    k = end + 1
                if k < len(toks) and toks[k].text == "::":   # T::member: not a plain type
                    return None
                continue
            break
        if type_word is None:
            return None
        return k, toks[start:k], type_word

    def declarators(self, toks: list[_Tok], k: int) -> list[tuple[list[_Tok], _Tok | None, list[_Tok]]]:
        """Splits toks[k:] at top-level commas into (pointer/reference marks,
        name token, the rest: array bounds, attributes, initializer)."""
        out = []
        while k < len(toks):
            marks = []
            while k < len(toks) and (toks[k].text in ("*", "&", "&&") or
                                     (marks and toks[k].text in _SPECIFIERS)):
                marks.append(toks[k])
                k += 1
            name = toks[k] if k < len(toks) and toks[k].is_ident else None
            if name is not None:
                k += 1
            rest_start = k
            while k < len(toks) and toks[k].text != ",":
                if toks[k].text in ("(", "[", "{"):
                    k = _close(toks, k)
                elif toks[k].text == "<":
                    end = _close_angle(toks, k)
                    k = end if end is not None else k
                k += 1
            out.append((marks, name, toks[rest_start:k]))
            k += 1
        return out

    def local_declaration(self, body: list[_Tok]) -> None:
        spec = self.specifiers(body)
        if spec is None:
            return
        k, specs, type_word = spec
        if k >= len(body) or not (body[k].is_ident or body[k].text in ("*", "&")):
            return      # `float(x);`, `half2 = ...` and other expressions
        words = {t.text for t in specs}
        if "static" in words and "constant" not in words:
            self.flag(body[0], "function-scope static variables are not supported in Metal: a "
                               "static variable must be at program scope in the constant address "
                               "space (MSL 4.2); move it out of the function as `constant ...`")
        self.declare(specs, type_word, body, k, default_space="thread")

    def declaration(self, body: list[_Tok], scope: str, opens: bool) -> None:
        """A declaration at program or type scope: a function, a variable or a member."""
        paren = self.function_paren(body)
        if paren is not None:
            name_tok = body[paren - 1]
            self.check_name(name_tok, what="function")
            close = _close(body, paren)
            if opens or self.looks_like_parameters(body[paren + 1:close]):
                self.params = self.parameters(body[paren + 1:close]) if opens else []
                return
        spec = self.specifiers(body)
        if spec is None:
            return
        k, specs, type_word = spec
        words = {t.text for t in specs}
        for marks, name, rest in self.declare(specs, type_word, body, k, default_space=None,
                                              what="member" if scope == "type" else "variable"):
            if name is None or scope != "program" or opens:
                continue
            if "constant" in words or type_word == "sampler" and "constexpr" in words:
                continue
            self.flag(name, f"program scope variable must reside in constant address space: "
                            f"'{name.text}' is declared outside any function without `constant` "
                            f"(MSL 4.2; `constexpr` alone is not enough); write `constant "
                            f"{' '.join(t.text for t in specs if t.text != 'static')} ...`")

    def function_paren(self, body: list[_Tok]) -> int | None:
        """Index of the `(` of a function declarator: the first top-level `(`
        right after an identifier (or an operator), before any `=`."""
        k = 0
        while k < len(body):
            t = body[k].text
            if t == "=":
                return None
            if t == "(":
                if k > 0 and (body[k - 1].is_ident and body[k - 1].text not in _SPECIFIERS
                              or "operator" in (x.text for x in body[max(0, k - 3):k])):
                    return k
                return None
            if t == "[":
                k = _close(body, k)
            elif t == "<":
                end = _close_angle(body, k)
                k = end if end is not None else k
            k += 1
        return None

    def looks_like_parameters(self, inner: list[_Tok]) -> bool:
        """`T name(args);` declares a function when args are parameter
        declarations, a variable when they are values (`uint3 M(1, 2, 3);`)."""
        if not inner:
            return True
        return inner[0].text in _SPECIFIERS or (inner[0].is_ident and self.is_type(inner[0].text)
                                                and inner[0].text != "half" or inner[0].text == "void")

    def parameters(self, inner: list[_Tok]) -> list[tuple[str, _Var]]:
        """Checks a parameter list; returns the parameters' names and what they hold."""
        out = []
        k = 0
        while k < len(inner):
            end = k
            while end < len(inner) and inner[end].text != ",":
                if inner[end].text in ("(", "["):
                    end = _close(inner, end)
                elif inner[end].text == "<":
                    close = _close_angle(inner, end)
                    end = close if close is not None else end
                end += 1
            param = inner[k:end]
            spec = self.specifiers(param)
            if spec is not None:
                pk, specs, type_word = spec
                for marks, name, rest in self.declare(specs, type_word, param, pk, default_space="thread",
                                                      record=False, check_init=False,
                                                      what="parameter"):
                    if name is not None:
                        out.append((name.text, self.var_of(specs, type_word, marks, rest, "thread")))
            k = end + 1
        return out

    def declare(self, specs, type_word, toks, k, default_space, record=True, check_init=True,
                what="variable"):
        """Checks the declarators after `specs` (names, address spaces,
        initializers) and records them in the current scope."""
        decls = self.declarators(toks, k)
        for marks, name, rest in decls:
            if name is not None:
                self.check_name(name, what=what)
            self.check_pointer_marks(specs, type_word, marks)
            var = self.var_of(specs, type_word, marks, rest, default_space)
            if check_init and name is not None and var.kind == "pointer" and var.space is not None:
                self.check_initializer(name, var, rest)
            if record and name is not None:
                self.scopes[-1].names[name.text] = var
        return decls

    def var_of(self, specs, type_word, marks, rest, default_space) -> _Var:
        space = next((t.text for t in specs if t.text in _ADDRESS_SPACES), None)
        if space is None:
            space = next((t.text for t in marks if t.text in _ADDRESS_SPACES), None)
        type_text = " ".join(t.text for t in specs)
        ptr = [t.text for t in marks if t.text in ("*", "&", "&&")]
        if type_word == "auto":
            return _Var("value", None, type_text)
        if ptr and ptr[0] == "*":
            return _Var("pointer", space, f"{type_text} *")
        if ptr:
            return _Var("reference", space, f"{type_text} &")
        if len(rest) > 1 and rest[0].text == "[" and rest[1].text != "[":   # not [[attribute]]
            return _Var("array", space or default_space, type_text)
        return _Var("value", space or default_space, type_text)

    def check_pointer_marks(self, specs, type_word, marks) -> None:
        if type_word == "auto" or not marks:
            return
        first = marks[0]
        if first.text == "&&":
            return      # forwarding references deduce their address space
        has_space = any(t.text in _ADDRESS_SPACES for t in specs) or \
            any(t.text in _ADDRESS_SPACES for t in marks)
        if not has_space:
            kind = "pointer" if first.text == "*" else "reference"
            self.flag(first, f"{kind} type must have explicit address space qualifier: "
                             f"'{' '.join(t.text for t in specs)} {first.text}' (MSL 4: write "
                             f"device, constant, threadgroup or thread before the type)")

    def check_name(self, tok: _Tok, what: str) -> None:
        why = _METAL_KEYWORDS.get(tok.text)
        if why is not None:
            self.flag(tok, f"'{tok.text}' is {why} and cannot name a {what}; rename it "
                           f"(e.g. '{tok.text}_')")

    # -- address spaces of expressions -------------------------------------
    def check_initializer(self, name: _Tok, var: _Var, rest: list[_Tok]) -> None:
        if not rest or rest[0].text != "=":
            return
        got = self.operand_space(rest, 1, whole=True)
        if got is not None and got[0] != var.space:
            self.flag(rest[1], f"cannot initialize a variable of type '{var.type}' with an lvalue "
                               f"of type '{got[1]}': the pointer would change address space from "
                               f"{got[0]} to {var.space} (MSL 4)")

    def operand_space(self, toks: list[_Tok], k: int, whole: bool = False) -> tuple[str, str] | None:
        """(address space, type text) of the pointer the expression at toks[k]
        evaluates to, where it is a name, `name + offset`, `&name`,
        `&name[i]` or a cast; None where it cannot be told. With `whole`, the
        expression must span the rest of toks (an initializer)."""
        while k < len(toks) and toks[k].text == "(":
            cast = self.cast_at(toks, k)
            if cast is not None:
                return (cast[1], cast[2]) if cast[1] else None
            close = _close(toks, k)
            if whole and close != len(toks) - 1:
                return None
            toks, k = toks[k + 1:close], 0
        if k < len(toks) and toks[k].text in _CASTS:
            cast = self.cast_at(toks, k)
            return (cast[1], cast[2]) if cast and cast[1] else None
        address_of = k < len(toks) and toks[k].text == "&"
        if address_of:
            k += 1
        if k >= len(toks) or not toks[k].is_ident:
            return None
        var = self.lookup(toks[k].text)
        nxt = toks[k + 1].text if k + 1 < len(toks) else ""
        if var is None or var.space is None:
            return None
        if whole and nxt not in ("", "+", "-", "["):
            return None
        if address_of:
            if nxt == "[" and var.kind in ("pointer", "array"):
                return var.space, f"{var.type.rstrip(' *')} *"
            if nxt in ("", ")", ";", ",") and var.kind in ("value", "array", "reference"):
                return var.space, f"{var.type.removesuffix(' &')} *"
            return None
        if nxt == "[" or nxt == "(" or nxt in (".", "->"):
            return None
        if var.kind == "pointer":
            return var.space, var.type
        if var.kind == "array":
            return var.space, f"{var.type} *"
        return None

    def cast_at(self, toks: list[_Tok], k: int):
        """(end index, target address space or None, target type text, the
        cast's name, the `*` token) of a pointer cast at toks[k], or None."""
        t = toks[k].text
        if t in _CASTS:
            if k + 1 >= len(toks) or toks[k + 1].text != "<":
                return None
            end = _close_angle(toks, k + 1)
            if end is None or toks[end - 1].text not in ("*", "&"):
                return None
            inner = toks[k + 2:end]
            if end + 1 >= len(toks) or toks[end + 1].text != "(":
                return None
            return self.cast_parts(inner, end, t)
        if t != "(":
            return None
        if k > 0 and (toks[k - 1].text in (")", "]") or
                      toks[k - 1].is_ident and toks[k - 1].text not in _EXPRESSION_KEYWORDS):
            return None          # a call, a declarator's parameters, sizeof(T*)
        close = _close(toks, k)
        if close >= len(toks) or close - k < 3 or toks[close - 1].text not in ("*",):
            return None
        inner = toks[k + 1:close]
        if not all(x.is_ident or x.text in ("*", "::", "<", ">", ",") or x.text[:1].isdigit()
                   for x in inner):
            return None
        if not any(x.is_ident and (self.is_type(x.text) or x.text in self.types) for x in inner):
            return None
        after = toks[close + 1].text if close + 1 < len(toks) else ""
        if after in ("", ")", ";", ",", "]", "}", "=", "{"):
            return None          # not followed by an operand
        return self.cast_parts(inner, close, "C-style cast")

    def cast_parts(self, inner, end, how):
        star = next(x for x in inner if x.text in ("*", "&"))
        space = next((x.text for x in inner if x.text in _ADDRESS_SPACES), None)
        return end, space, " ".join(x.text for x in inner), how, star

    def check_casts(self, stmt: list[_Tok]) -> None:
        for k in range(len(stmt)):
            if stmt[k].text not in ("(",) and stmt[k].text not in _CASTS:
                continue
            if stmt[k].text == "(" and k > 0 and stmt[k - 1].text in _CASTS | {">"}:
                continue
            cast = self.cast_at(stmt, k)
            if cast is None:
                continue
            end, space, target, how, star = cast
            if space is None:
                self.flag(star, f"pointer type must have explicit address space qualifier: "
                                f"{how} to '{target}' (MSL 4: write device, constant, threadgroup "
                                f"or thread in the cast's type)")
                continue
            operand = end + 1 if how == "C-style cast" else end + 2
            got = self.operand_space(stmt, operand)
            if got is not None and got[0] != space:
                self.flag(stmt[k], f"{how} from '{got[1]}' to '{target}' converts between "
                                   f"mismatching address spaces ({got[0]} to {space}); Metal "
                                   f"cannot move a pointer between address spaces (MSL 4)")

    # -- lambdas ---------------------------------------------------------
    def check_lambdas(self) -> None:
        toks = self.toks
        for k, tok in enumerate(toks):
            if tok.text != "[" or (k + 1 < len(toks) and toks[k + 1].text == "["):
                continue
            if k > 0 and (toks[k - 1].text == "[" or
                          (toks[k - 1].is_ident and toks[k - 1].text not in _EXPRESSION_KEYWORDS) or
                          toks[k - 1].text in (")", "]", ">") or toks[k - 1].text[:1].isdigit()):
                continue            # a subscript, an array bound or an attribute
            close = _close(toks, k)
            inner = [t.text for t in toks[k + 1:close]]
            if not all(x in ("&", "=", ",", "this", "*") or re.fullmatch(r"[A-Za-z_]\w*", x)
                       for x in inner):
                continue
            after = toks[close + 1].text if close + 1 < len(toks) else ""
            if after in ("(", "{", "mutable", "->", "<"):
                self.flag(tok, "lambda expressions are not supported in Metal (MSL 1.4.4: C++ "
                               "features not supported); write a helper function in the header "
                               "instead")


def check_metal(text: str, regions, source_file: str = "<candidate>") -> CompileError | None:
    """The first Metal language rule the kernel text breaks, as a CompileError
    at the candidate's line; None where it breaks none."""
    violations = _MetalChecker(_code_only(text)).run()
    return _first(violations, text, regions, source_file)


# ================================================================== CUDA
# Host C and C++ standard library headers: NVRTC's include path has only the
# CUDA toolkit's and MLX's headers ("cannot open source file").
_HOST_HEADERS = frozenset("""
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
    """.split())
# The few std:: names that exist under NVRTC with MLX's headers (NVRTC 12.9).
_STD_AVAILABLE = frozenset({"initializer_list", "move", "forward", "tuple_size", "tuple_element",
                            "align_val_t"})
# Names a host header would define; NVRTC: `identifier "M_PI" is undefined`.
_HOST_NAMES = frozenset({
    "M_E", "M_LOG2E", "M_LOG10E", "M_LN2", "M_LN10", "M_PI", "M_PI_2", "M_PI_4", "M_1_PI", "M_2_PI",
    "M_2_SQRTPI", "M_SQRT2", "M_SQRT1_2", "MAXFLOAT", "HUGE_VALF",
    "M_PI_F", "M_PI_2_F", "M_PI_4_F", "M_1_PI_F", "M_2_PI_F", "M_E_F", "M_SQRT2_F", "M_SQRT1_2_F",
    "M_LN2_F", "M_LN10_F", "M_LOG2E_F", "M_LOG10E_F",
    "uint", "ushort", "uchar", "ulong"})
_HOST_FUNCTIONS = frozenset({"exit", "abort", "rand", "srand"})
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<(?P<name>[^>\n]+)>", re.M)
_DEFINED_NAME = re.compile(r"#[ \t]*define[ \t]+(?P<name>\w+)|\btypedef\b[^;{}]*?\b(?P<tdef>\w+)\s*;|"
                           r"\busing\s+(?P<alias>\w+)\s*=")


def _cuda_includes(masked: str) -> list[_Violation]:
    out = []
    for m in _INCLUDE.finditer(masked):
        name = m.group("name").strip()
        if name in _HOST_HEADERS:
            out.append(_Violation(m.start("name") - 1,
                                  f'catastrophic error: cannot open source file "{name}": NVRTC '
                                  f"has no host C/C++ standard library headers (NVRTC User Guide "
                                  f"4.5); use CUDA's built-in functions or <cuda/std/...> headers"))
    return out


def _cuda_std_names(toks: list[_Tok]) -> list[_Violation]:
    out = []
    for k in range(len(toks) - 2):
        if toks[k].text != "std" or toks[k + 1].text != "::" or not toks[k + 2].is_ident:
            continue
        if k > 0 and toks[k - 1].text == "::":
            continue            # cuda::std::
        name = toks[k + 2].text
        if name not in _STD_AVAILABLE:
            out.append(_Violation(toks[k].pos, f'namespace "std" has no member "{name}": NVRTC '
                                               f"compiles device code without the C++ standard "
                                               f"library; use cuda::std::{name} where libcu++ has "
                                               f"it, or CUDA's own functions (e.g. fminf, sqrtf)"))
    return out


def _cuda_host_functions(toks: list[_Tok]) -> list[_Violation]:
    out = []
    for k, tok in enumerate(toks):
        if tok.text != "__host__":
            continue
        lo = k
        while lo > 0 and toks[lo - 1].text not in (";", "{", "}"):
            lo -= 1
        hi = k
        while hi < len(toks) and toks[hi].text not in ("(", ";", "{"):
            hi += 1
        if not any(t.text == "__device__" for t in toks[lo:hi]):
            out.append(_Violation(tok.pos, "A function explicitly marked as a __host__ function "
                                           "is not allowed in JIT mode (NVRTC User Guide 4.1); "
                                           "mark it __device__ or __host__ __device__"))
    return out


def _cuda_undefined_names(toks: list[_Tok], masked_with_directives: str) -> list[_Violation]:
    defined = set()
    for m in _DEFINED_NAME.finditer(masked_with_directives):
        defined.add(m.group("name") or m.group("tdef") or m.group("alias"))
    out = []
    for k, tok in enumerate(toks):
        name = tok.text
        if name in defined or (k > 0 and toks[k - 1].text in (".", "->", "::")):
            continue
        call = k + 1 < len(toks) and toks[k + 1].text == "("
        if name in _HOST_NAMES or (name in _HOST_FUNCTIONS and call):
            out.append(_Violation(tok.pos, f'identifier "{name}" is undefined: it comes from a host '
                                           f"header or from Metal, which NVRTC does not have"
                                           + _cuda_hint(name)))
    return out


def _cuda_hint(name: str) -> str:
    if name.startswith("M_") or name in ("MAXFLOAT", "HUGE_VALF"):
        return "; write the constant out (e.g. 3.14159265358979f) or include <math_constants.h> " \
               "for CUDART_PI_F"
    if name in ("uint", "ushort", "uchar", "ulong"):
        return "; use unsigned int / uint32_t and friends"
    return "; device code cannot call it"


def check_cuda(text: str, regions, source_file: str = "<candidate>") -> CompileError | None:
    """The first NVRTC rule the kernel text breaks, as a CompileError at the
    candidate's line; None where it breaks none."""
    masked = mask_comments_and_strings(text)
    toks = _tokens(_code_only(text))
    violations = (_cuda_includes(masked) + _cuda_std_names(toks) + _cuda_host_functions(toks)
                  + _cuda_undefined_names(toks, masked))
    return _first(violations, text, regions, source_file)


CHECKS = {"metal": check_metal, "cuda": check_cuda}


def check(dialect: str, text: str, regions, source_file: str = "<candidate>") -> CompileError | None:
    """The first violation of `dialect`'s language rules in `text` (the
    exact text MLX compiles), or None."""
    return CHECKS[dialect](text, regions, source_file)
