"""A full Metal-Sci source cut into what mlxsci's candidate format needs.

A Metal-Sci candidate is one Metal translation unit: includes, `using`,
#defines, structs, program-scope constants and helper functions, and the
task's `kernel void NAME(params) { body }` functions. `parse_metal_source`
splits it into

- the header: every character outside the kernel functions, verbatim and in
  order (what `mx.fast.metal_kernel` takes as its header);
- each kernel: its name, its attributes (`[[max_total_threads_per_threadgroup(N)]]`
  or GNU's `__attribute__((...))` before or after `kernel` / `[[kernel]]`
  or the parameter list; Metal's compiler refuses a `[[...]]` after the
  parameter list, and so does this module), its
  parameters (declared type, name, attribute: `buffer(i)`,
  `thread_position_in_grid`, ...) and its body text (brace-matched).

The scanner (`scan`) is small and comment-, string- and directive-aware: a
brace in a comment, a string, a character literal or a preprocessor line
never counts, and every token keeps its offsets so that the converter
(mlxsci/import_metal_sci/convert.py) rewrites a body token by token and
copies everything between tokens (whitespace, comments) unchanged.

Anything this module cannot read as a Metal-Sci source (an unterminated
comment or string, unbalanced braces, a template kernel, a kernel inside a
namespace or a preprocessor conditional, a kernel without a body) raises
`MetalSourceError`, whose message is one line.

So does a source a compiler could cut otherwise than `scan` (`_check_lexing`):
a published run is hostile, and a source whose kernels a compiler finds
elsewhere than this scanner would convert into another kernel than the one
its run recorded a verdict for. A lone carriage return ends a `//` comment
for clang, not here; a backslash-newline continues a `//` comment, or joins
`ker` and `nel`, for a compiler, not here; a trigraph or digraph is a
backslash, `#` or brace to a compiler. A source holding any of those (with
the rest of what mlxsci's source policy refuses as lexers' disagreements:
raw strings, control characters, non-ASCII code) is refused, wherever it
is, including in a kernel the converter drops.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from mlxsci.kernel.source.lexer import Refused, lex_part

__all__ = [
    "MetalSourceError",
    "Token",
    "Param",
    "KernelFunction",
    "MetalSource",
    "scan",
    "parse_metal_source",
    "match_brackets",
]

# A source this long is no kernel file (Metal-Sci's are kilobytes); the
# scanner is linear, but the converter's output must fit mlxsci's own limit.
MAX_SOURCE_CHARS = 2 << 20


class MetalSourceError(Exception):
    """A source this module cannot read; `message` is one line."""

    def __init__(self, message: str, line: int | None = None):
        message = " ".join(message.split())
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.message = message
        self.line = line


@dataclass(frozen=True)
class Token:
    """kind: id, num, str, chr, punct or other. `pp`: the token is part of a
    preprocessor directive line. start/end: offsets in the scanned text."""

    kind: str
    text: str
    start: int
    end: int
    pp: bool = False


_TOKEN = re.compile(
    r"""
     (?P<splice>\\[ \t]*\r?\n)
    |(?P<nl>\r?\n)
    |(?P<ws>[ \t\f\v\r]+)
    |(?P<lc>//[^\n]*)
    |(?P<bc>/\*.*?\*/)
    |(?P<ubc>/\*)
    |(?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\ \t\n"]{0,16})\(.*?\)(?P=delim)")
    |(?P<str>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*")
    |(?P<chr>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*')
    |(?P<ustr>(?:u8|u|U|L)?["'])
    |(?P<num>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*)
    |(?P<id>[A-Za-z_$][0-9A-Za-z_$]*)
    |(?P<punct>\.\.\.|<=>|<<=|>>=|->\*|\#\#|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\|
               |[-+*/%&|^]=|\.\*|[-+*/%&|^~!=<>?:;,.()\[\]{}\#@])
    |(?P<other>.)
    """,
    re.X | re.S,
)


class _Lines:
    """Offsets to 1-based line numbers."""

    def __init__(self, text: str):
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def __call__(self, offset: int) -> int:
        return bisect_right(self.starts, offset)


def scan(text: str) -> list[Token]:
    """The tokens of `text`, comments and whitespace skipped; tokens of a
    preprocessor directive line (a `#` first on its line, continued by
    backslash-newlines) are marked `pp`. Raises MetalSourceError on an
    unterminated comment or literal."""
    tokens: list[Token] = []
    at_line_start = True
    in_directive = False
    lines: _Lines | None = None
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "other"
        if kind in ("ws", "lc", "bc", "splice"):
            continue
        if kind == "nl":
            at_line_start, in_directive = True, False
            continue
        if kind in ("ubc", "ustr"):
            lines = lines or _Lines(text)
            what = "/* comment" if kind == "ubc" else "string or character literal"
            raise MetalSourceError(f"unterminated {what}", lines(m.start()))
        if kind == "raw":
            kind = "str"
        word = m.group()
        if at_line_start and word == "#":
            in_directive = True
        at_line_start = False
        tokens.append(Token(kind, word, m.start(), m.end(), in_directive))
    return tokens


_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def match_brackets(tokens: list[Token]) -> dict[int, int]:
    """Index of each bracket token (outside directives) -> index of its
    partner, both ways. Raises MetalSourceError when they do not balance."""
    match: dict[int, int] = {}
    stack: list[int] = []
    for k, t in enumerate(tokens):
        if t.pp or t.kind != "punct":
            continue
        if t.text in _OPEN:
            stack.append(k)
        elif t.text in _CLOSE:
            if not stack or tokens[stack[-1]].text != _CLOSE[t.text]:
                raise MetalSourceError(f"unbalanced `{t.text}`")
            j = stack.pop()
            match[j], match[k] = k, j
    if stack:
        raise MetalSourceError(f"unclosed `{tokens[stack[-1]].text}`")
    return match


# Address spaces and qualifiers of a parameter's declared type.
ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread", "threadgroup_imageblock")
_QUALIFIERS = ("const", "volatile", "restrict", "__restrict", "__restrict__")


@dataclass(frozen=True)
class Param:
    """One kernel parameter as declared: `device const float4* pos_in [[buffer(0)]]`
    gives type_text "device const float4*", name "pos_in", attribute
    "buffer(0)", address_space "device", const True, base "float4",
    declarator "*". declarator: "*" (pointer), "&" (reference) or "" (value)."""

    type_text: str
    name: str
    attribute: str
    address_space: str | None
    const: bool
    base: str
    declarator: str
    line: int

    @property
    def buffer_index(self) -> int | None:
        m = re.fullmatch(r"buffer\((\d+)[uU]?\)", self.attribute)
        return int(m.group(1)) if m else None

    @property
    def value_type(self) -> str:
        """The type without address space and reference/pointer: `const uint2`."""
        return ("const " if self.const else "") + self.base


@dataclass(frozen=True)
class KernelFunction:
    """A kernel function of the source. attributes: the texts inside `[[ ]]`
    other than `kernel` (e.g. "max_total_threads_per_threadgroup(256)").
    body: the text between its braces. start/end: its span in the source
    (leading attributes included); body_start: the offset of body[0]."""

    name: str
    attributes: tuple[str, ...]
    params: tuple[Param, ...]
    body: str
    body_start: int
    start: int
    end: int
    line: int


@dataclass(frozen=True)
class MetalSource:
    text: str
    header: str
    kernels: tuple[KernelFunction, ...]

    def kernel(self, name: str) -> KernelFunction | None:
        for k in self.kernels:
            if k.name == name:
                return k
        return None


def _attribute_groups(tokens: list[Token], k: int, match: dict[int, int]):
    """Starting at tokens[k] == `[` followed by `[` (or `__attribute__((`):
    (the attribute texts, the index after the closing `]]` or `))`), or None
    when it is no attribute."""
    if k + 1 >= len(tokens) or tokens[k + 1].text != "(" and tokens[k + 1].text != "[":
        return None
    opener = tokens[k].text
    if (opener, tokens[k + 1].text) not in (("[", "["), ("__attribute__", "(")):
        return None
    if opener == "__attribute__":
        # GNU's spelling, `__attribute__((max_total_threads_per_threadgroup(N)))`,
        # which Metal's compiler takes where `[[...]]` goes.
        k += 1
        if k + 1 >= len(tokens) or tokens[k + 1].text != "(":
            return None
    close = match.get(k + 1)
    closer = ")" if opener == "__attribute__" else "]"
    if close is None or close + 1 >= len(tokens) or tokens[close + 1].text != closer:
        return None
    if match.get(k) != close + 1:
        return None
    inner = tokens[k + 2 : close]
    items: list[str] = []
    depth, cur = 0, ""
    for t in inner:
        if t.text in "([{" and t.kind == "punct":
            depth += 1
        elif t.text in ")]}" and t.kind == "punct":
            depth -= 1
        if t.text == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        cur += t.text
    items.append(cur)
    return [i for i in items if i], close + 2


def _parse_param(tokens: list[Token], lo: int, hi: int, match: dict[int, int], line: int) -> Param:
    """The parameter declared by tokens[lo:hi]."""
    if lo >= hi:
        raise MetalSourceError("empty parameter", line)
    attrs: list[str] = []
    decl: list[Token] = []
    k = lo
    while k < hi:
        got = _attribute_groups(tokens, k, match) if tokens[k].text == "[" else None
        if got is not None:
            attrs += got[0]
            k = got[1]
            continue
        decl.append(tokens[k])
        k += 1
    if len(attrs) > 1:
        raise MetalSourceError(f"parameter with several attributes: {', '.join(attrs)}", line)
    # an array parameter (`float x[4]`) or a default value: not a kernel parameter form
    if any(t.text in ("[", "=") for t in decl):
        text = " ".join(t.text for t in decl)
        raise MetalSourceError(f"unsupported parameter declaration `{text}`", line)
    names = [i for i, t in enumerate(decl) if t.kind == "id"]
    if not names or names[-1] != len(decl) - 1:
        text = " ".join(t.text for t in decl)
        raise MetalSourceError(f"parameter without a name: `{text}`", line)
    name = decl[-1].text
    type_toks = decl[:-1]
    space = None
    const = False
    declarator = ""
    base: list[str] = []
    for t in type_toks:
        if t.text in ADDRESS_SPACES:
            space = t.text
        elif t.text in _QUALIFIERS:
            const = const or t.text == "const"
        elif t.text in ("*", "&"):
            if declarator:
                raise MetalSourceError(f"parameter {name!r}: unsupported declarator", line)
            declarator = t.text
        else:
            if declarator:
                raise MetalSourceError(f"parameter {name!r}: unsupported declarator", line)
            base.append(t.text)
    if not base:
        raise MetalSourceError(f"parameter {name!r} has no type", line)
    return Param(
        type_text=" ".join(t.text for t in type_toks)
        .replace(" *", "*")
        .replace(" &", "&")
        .replace(" < ", "<")
        .replace(" >", ">"),
        name=name,
        attribute=attrs[0] if attrs else "",
        address_space=space,
        const=const,
        base=_join_type(base),
        declarator=declarator,
        line=line,
    )


def _join_type(parts: list[str]) -> str:
    out = ""
    for p in parts:
        if out and (out[-1].isalnum() or out[-1] == "_") and (p[0].isalnum() or p[0] == "_"):
            out += " "
        out += p
    return out


def split_params(tokens: list[Token], lo: int, hi: int) -> list[tuple[int, int]]:
    """Top-level comma-separated ranges of tokens[lo:hi] (angle brackets of
    a template type such as vec<float, 4> count as nesting)."""
    ranges = []
    depth = 0
    start = lo
    for k in range(lo, hi):
        t = tokens[k]
        if t.kind != "punct":
            continue
        if t.text in ("(", "[", "{", "<"):
            depth += 1
        elif t.text in (")", "]", "}", ">"):
            depth -= 1
        elif t.text == "," and depth == 0:
            ranges.append((start, k))
            start = k + 1
    if start < hi or ranges:
        ranges.append((start, hi))
    return ranges


_CONDITIONAL_OPEN = ("if", "ifdef", "ifndef")


def parse_metal_source(text: str) -> MetalSource:
    """Split a full Metal source into its header and kernel functions.
    Raises MetalSourceError with a one-line message."""
    if not isinstance(text, str):
        raise MetalSourceError("the source is not text")
    if len(text) > MAX_SOURCE_CHARS:
        raise MetalSourceError(f"the source is longer than {MAX_SOURCE_CHARS} characters")
    if "\x00" in text:
        raise MetalSourceError("the source holds a NUL character (binary data, not Metal)")
    _check_lexing(text)
    lines = _Lines(text)
    tokens = scan(text)
    match = match_brackets(tokens)
    _check_conditionals(text, tokens, lines)
    kernels: list[KernelFunction] = []
    decl_start = 0  # index of the first token of the current top-level declaration
    cond_depth = 0  # open preprocessor conditionals at this point
    brace_kinds: list[str] = []  # "namespace" or "other" for each open `{`
    k = 0
    n = len(tokens)
    while k < n:
        t = tokens[k]
        if t.pp:
            if t.text == "#" and k + 1 < n and tokens[k + 1].pp:
                word = tokens[k + 1].text
                if word in _CONDITIONAL_OPEN:
                    cond_depth += 1
                elif word == "endif":
                    cond_depth = max(0, cond_depth - 1)
            k += 1
            if not brace_kinds:
                decl_start = k
            continue
        if t.kind == "punct" and t.text == "{":
            kind = "other"
            # `namespace N {` / `namespace {` / `extern "C" {`
            prev = [x for x in tokens[decl_start:k] if not x.pp]
            if prev and prev[0].text in ("namespace", "extern"):
                kind = "namespace"
            if kind == "other":
                k = match[k] + 1
                if not brace_kinds or all(b == "namespace" for b in brace_kinds):
                    # a function body or struct at file (or namespace) scope
                    if k < n and tokens[k].text == ";":
                        k += 1
                    decl_start = k
                continue
            brace_kinds.append(kind)
            k += 1
            decl_start = k
            continue
        if t.kind == "punct" and t.text == "}":
            if brace_kinds:
                brace_kinds.pop()
            k += 1
            decl_start = k
            continue
        if t.kind == "punct" and t.text == ";":
            k += 1
            decl_start = k
            continue
        if t.kind == "punct" and t.text == "(" and k in match:
            # No kernel is declared inside parentheses: one found there is
            # text a macro call takes as its argument (`IGNORE(; kernel ...)`
            # with `#define IGNORE(...)`), which a compiler never sees.
            k = match[k] + 1
            continue
        is_kernel = t.kind == "id" and t.text == "kernel"
        if not is_kernel and t.text == "[":
            got = _attribute_groups(tokens, k, match)
            if got is not None and "kernel" in got[0]:
                is_kernel = True
            elif got is not None:
                k = got[1]
                continue
            elif t.kind == "punct" and k in match:
                k = match[k] + 1  # nor inside brackets
                continue
        if is_kernel:
            if brace_kinds:
                raise MetalSourceError(
                    "a kernel inside a namespace or extern block", lines(t.start)
                )
            if cond_depth:
                raise MetalSourceError(
                    "a kernel inside a preprocessor conditional (#if/#ifdef): "
                    "which one the compiler sees depends on macros",
                    lines(t.start),
                )
            kf, k = _read_kernel(text, tokens, match, decl_start, lines)
            kernels.append(kf)
            decl_start = k
            continue
        k += 1
    header = _header(text, kernels)
    return MetalSource(text=text, header=header, kernels=tuple(kernels))


_BETWEEN = re.compile(r"//[^\n]*|/\*.*?\*/|\\[ \t\f\v\r]*\n", re.S)


def directives(text: str, tokens: list[Token]) -> list[tuple[int, str, str | None]]:
    """The directives of `text` (scanned into `tokens`): (the index of each
    one's `#` in `tokens`, its word, the name a #define or #undef names). A
    `#` starts a directive where scan marks it and a line break (not a
    splice, not one inside a comment) comes before it: a `#` inside a
    #define is an operator of the macro."""
    found = []
    for k, t in enumerate(tokens):
        if not (t.pp and t.text == "#"):
            continue
        if k > 0 and tokens[k - 1].pp:
            if "\n" not in _BETWEEN.sub(" ", text[tokens[k - 1].end : t.start]):
                continue
        word = tokens[k + 1].text if k + 1 < len(tokens) and tokens[k + 1].pp else ""
        name = None
        if word in ("define", "undef") and k + 2 < len(tokens) and tokens[k + 2].pp:
            name = tokens[k + 2].text
        found.append((k, word, name))
    return found


def _check_conditionals(text: str, tokens: list[Token], lines: _Lines) -> None:
    """Refuse a preprocessor conditional whose branches open or close
    brackets: `scan` counts the brackets of every branch, a compiler those of
    the branch it takes, so `#if 0 { #endif` inside a helper's body hides
    the kernel after it from this module (but not from the compiler), and
    `{ #if 0 } kernel ... { #endif }` hides a kernel from the compiler (but
    not from this module). Each branch must leave the depth as it found it."""
    depth = 0
    opened: list[tuple[int, int]] = []  # (depth at the #if, its line)
    starts = {k: word for k, word, _ in directives(text, tokens)}
    for k, t in enumerate(tokens):
        word = starts.get(k)
        if word in ("if", "ifdef", "ifndef"):
            opened.append((depth, lines(t.start)))
        elif word in ("elif", "elifdef", "elifndef", "else", "endif") and opened:
            at, line = opened[-1]
            if depth != at:
                raise MetalSourceError(
                    f"a branch of the preprocessor conditional at line {line} opens or "
                    "closes brackets: which kernels a compiler sees would depend on the branch",
                    lines(t.start),
                )
            if word == "endif":
                opened.pop()
        elif not t.pp and t.kind == "punct":
            if t.text in _OPEN:
                depth += 1
            elif t.text in _CLOSE:
                depth -= 1


# A line splice as compilers take it (mlxsci/kernel/source/lexer.py's): spaces,
# tabs, form feeds, vertical tabs and a carriage return may sit between the
# backslash and the newline.
_SPLICE = re.compile(r"\\[ \t\f\v\r]*\n")


def _check_lexing(text: str) -> None:
    """Refuse a source a compiler could read otherwise than `scan`: what
    mlxsci's source policy refuses as lexers' disagreements (a lone carriage
    return, trigraphs, digraphs, raw strings, control and non-ASCII
    characters outside comments and literals: mlxsci.kernel.source.lexer),
    anywhere in the source, and a backslash-newline that changes the tokens
    (`scan` takes one as a blank; a compiler joins the lines first, so one
    ending a `//` comment comments out the next line, and one inside a word
    makes one word of two). The policy checks the converted candidate too,
    but only what is left of the source: text in a kernel the converter
    drops would never reach it."""
    try:
        lex_part(text, 1)
    except Refused as exc:
        message = exc.message.replace("the candidate has", "the source has", 1)
        raise MetalSourceError(message, exc.line) from None
    if not _SPLICE.search(text):
        return
    as_written = [(t.kind, _SPLICE.sub("", t.text), t.pp) for t in scan(text)]
    as_compiled = [(t.kind, t.text, t.pp) for t in scan(_SPLICE.sub("", text))]
    if as_written != as_compiled:
        at = next(
            (k for k, (a, b) in enumerate(zip(as_written, as_compiled)) if a != b),
            min(len(as_written), len(as_compiled)),
        )
        near = as_written[at][1] if at < len(as_written) else "the end"
        raise MetalSourceError(
            "a backslash at the end of a line continues a // comment or joins two words "
            f"(near `{near[:40]}`): a compiler reads other code than its lines show"
        )


def _more_attributes(tokens: list[Token], k: int, match: dict[int, int], attrs: list[str]) -> int:
    """Attribute groups from tokens[k] on (after `void`, after the parameter
    list), `[[...]]` or `__attribute__((...))`, added to `attrs`, `kernel`
    left out; the index after them."""
    while k < len(tokens) and tokens[k].text in ("[", "__attribute__"):
        got = _attribute_groups(tokens, k, match)
        if got is None:
            break
        attrs += [a for a in got[0] if a != "kernel"]
        k = got[1]
    return k


def _read_kernel(text, tokens, match, decl_start, lines):
    """The kernel declared by tokens[decl_start:...]; returns it and the index
    after its closing brace."""
    k = decl_start
    n = len(tokens)
    attrs: list[str] = []
    saw_kernel = False
    first = tokens[decl_start]
    line = lines(first.start)

    def fail(message: str) -> MetalSourceError:
        return MetalSourceError(message, line)

    # leading part: attributes, `kernel`, the return type `void`
    while k < n:
        t = tokens[k]
        if t.pp:
            raise fail("a preprocessor directive inside a kernel's declaration")
        if t.text in ("[", "__attribute__"):
            got = _attribute_groups(tokens, k, match)
            if got is None:
                raise fail(f"unexpected `{t.text}` before a kernel's name")
            for a in got[0]:
                if a == "kernel":
                    saw_kernel = True
                else:
                    attrs.append(a)
            k = got[1]
            continue
        if t.text == "kernel":
            saw_kernel = True
            k += 1
            continue
        if t.text == "template":
            raise fail(
                "a template kernel (or an explicit instantiation): mlxsci has no template kernels"
            )
        if t.text == "void":
            k += 1
            break
        if t.text in ("static", "inline", "extern"):
            raise fail(f"a kernel declared `{t.text}`")
        raise fail(f"unexpected `{t.text}` in a kernel's declaration")
    if not saw_kernel:
        raise fail("a kernel without `kernel`")
    # attributes between `void` and the name
    k = _more_attributes(tokens, k, match, attrs)
    if k >= n or tokens[k].kind != "id":
        raise fail("a kernel without a name")
    name = tokens[k].text
    line = lines(tokens[k].start)
    k += 1
    if k < n and tokens[k].text == "<":
        raise fail(f"kernel {name!r} is a template specialization or instantiation")
    if k >= n or tokens[k].text != "(":
        raise fail(f"kernel {name!r}: expected `(` after its name")
    close = match[k]
    params = []
    for lo, hi in split_params(tokens, k + 1, close):
        if lo == hi:
            raise fail(f"kernel {name!r}: an empty parameter")
        if hi - lo == 1 and tokens[lo].text == "void":
            continue
        params.append(_parse_param(tokens, lo, hi, match, lines(tokens[lo].start)))
    k = close + 1
    if k < n and tokens[k].text == "[" and _attribute_groups(tokens, k, match) is not None:
        # Metal's compiler takes a `[[...]]` there as an attribute of the
        # function's type and refuses it ("cannot be applied to types");
        # GNU's `__attribute__((...))` it takes.
        after = _attribute_groups(tokens, k, match)[0]
        raise fail(
            f"kernel {name!r}: [[{', '.join(after)}]] after the parameter list, where Metal's "
            'compiler refuses it ("cannot be applied to types"); it belongs before `kernel` '
            "or the kernel's name"
        )
    k = _more_attributes(tokens, k, match, attrs)
    if k < n and tokens[k].text == ";":
        raise fail(f"kernel {name!r} is declared without a body")
    if k >= n or tokens[k].text != "{":
        raise fail(f"kernel {name!r}: expected its body `{{` after the parameters")
    body_close = match[k]
    body_start = tokens[k].end
    kf = KernelFunction(
        name=name,
        attributes=tuple(attrs),
        params=tuple(params),
        body=text[body_start : tokens[body_close].start],
        body_start=body_start,
        start=first.start,
        end=tokens[body_close].end,
        line=line,
    )
    return kf, body_close + 1


def _header(text: str, kernels: list[KernelFunction]) -> str:
    """The text outside the kernels, in order; a kernel's own line breaks
    are dropped with it, and runs of blank lines left behind collapse."""
    parts = []
    pos = 0
    for kf in kernels:
        parts.append(text[pos : kf.start])
        pos = kf.end
    parts.append(text[pos:])
    header = "".join(parts)
    header = re.sub(r"\n[ \t]*(?:\n[ \t]*){2,}", "\n\n", header)
    return header.strip("\n") + "\n" if header.strip() else ""
