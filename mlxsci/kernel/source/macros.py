"""Macro definitions and their expansion, for the source policy
(mlxsci/kernel/source/policy.py): what a compiler's preprocessor makes of a
candidate's macros, without running one.

`Macro.parse` reads a `#define` line; `Expander.expand` expands a token list
the way C++ [cpp.replace] does: object-like and function-like macros,
`#` (stringizing), `##` (pasting, with placemarkers and GNU's `, ##
__VA_ARGS__`), `__VA_ARGS__` and named variadic parameters, arguments
fully expanded before substitution unless next to `#` or `##`, and the
rescan with hide sets (each token carries the names that may not expand it
again: Prosser's algorithm, which clang and GCC implement). Every token a
`##` forms goes through `on_token`, the policy's check, the moment it exists.

The expander is bounded: at most `MAX_DEPTH` nested expansions behind a
token, arguments nested at most `MAX_NESTING` calls deep, and a total number
of produced tokens; past a bound it refuses rather than work on. A call whose
arguments run past the end of the token list (that is, across a directive,
or past the end of the header or body) is refused: compilers differ there,
and the policy must see what every compiler sees.
"""

from __future__ import annotations

from collections.abc import Callable

from mlxsci.kernel.source.lexer import Refused, Tok, lex_pasted

__all__ = ["Macro", "Expander", "MAX_DEPTH", "MAX_NESTING"]

MAX_DEPTH = 128  # macro expansions nested behind one token
MAX_NESTING = 64  # macro calls nested in one another's arguments
VA = "__VA_ARGS__"


class Macro:
    """One `#define`: `params` is None for an object-like macro."""

    __slots__ = ("name", "params", "variadic", "body", "line")

    def __init__(self, name: str, params, variadic: bool, body: list[Tok], line: int):
        self.name = name
        self.params = params
        self.variadic = variadic
        self.body = body
        self.line = line

    @staticmethod
    def parse(toks: list[Tok], line: int) -> Macro:
        """The macro that `toks` (a `#define` line after `define`) defines."""
        if not toks or toks[0].kind != "id":
            raise Refused(line, "`#define` must name a macro (an identifier)")
        name = toks[0].text
        if len(toks) > 1 and toks[1].text == "(" and not toks[1].space:
            params, variadic, rest = _parse_params(toks, line)
            body = toks[rest:]
        else:
            params, variadic, body = None, False, toks[1:]
        macro = Macro(name, params, variadic, body, line)
        macro.check_operators()
        return macro

    def check_operators(self) -> None:
        """`##` neither first nor last, `#` (function-like) before a parameter."""
        body = self.body
        if body and (body[0].text == "##" or body[-1].text == "##"):
            raise Refused(self.line, "`##` cannot begin or end a macro's replacement")
        if self.params is None:
            return
        for k, t in enumerate(body):
            if t.text == "#" and t.kind == "punct":
                if k + 1 >= len(body) or body[k + 1].text not in self.params:
                    raise Refused(
                        self.line, "`#` in a function-like macro must precede a parameter"
                    )

    def signature(self) -> tuple:
        return (self.params, self.variadic, tuple(t.text for t in self.body))


def _parse_params(toks: list[Tok], line: int) -> tuple[tuple[str, ...], bool, int]:
    params: list[str] = []
    variadic = False
    k = 2
    while k < len(toks) and toks[k].text != ")":
        t = toks[k]
        if t.text == "...":
            params.append(VA)
            variadic = True
        elif t.kind == "id" and t.text != VA and t.text not in params:
            params.append(t.text)
            if k + 1 < len(toks) and toks[k + 1].text == "...":
                variadic = True
                k += 1
        else:
            raise Refused(line, f"bad macro parameter list near `{t.text}`")
        k += 1
        if k < len(toks) and toks[k].text == ",":
            if variadic:
                raise Refused(line, "a variadic parameter must be the last")
            k += 1
    if k >= len(toks):
        raise Refused(line, "unterminated macro parameter list")
    return tuple(params), variadic, k + 1


def _stringize(arg: list[Tok], line: int) -> Tok:
    words = []
    for k, t in enumerate(arg):
        words.append((" " if k and t.space else "") + t.text)
    text = "".join(words).replace("\\", "\\\\").replace('"', '\\"')
    return Tok("str", f'"{text}"', line)


class Expander:
    """Expands token lists against `macros` (name -> Macro). `on_token` sees
    every token a paste forms; `budget` is the most tokens expansions may
    produce in all."""

    def __init__(self, macros: dict, known: set, on_token: Callable[[Tok], None], budget: int):
        self.macros = macros
        self.known = known  # names whose macro state the candidate has set
        self.on_token = on_token
        self.budget = budget
        self.unfinished: Tok | None = None  # a function-like name that ended the list

    def expand(self, toks: list[Tok], nesting: int = 0) -> list[Tok]:
        """`toks` fully macro-expanded. At nesting 0, a function-like macro's
        name that ends the list is left in `unfinished` (its `(` may follow
        after a directive, which the caller must refuse)."""
        if nesting > MAX_NESTING:
            raise Refused(toks[0].line if toks else None, "macro calls nested too deeply")
        self.unfinished = None
        macros = self.macros
        if not any(t.kind == "id" and t.text in macros for t in toks):
            return list(toks)
        out: list[Tok] = []
        stack = toks[::-1]
        while stack:
            t = stack.pop()
            m = self.macros.get(t.text) if t.kind == "id" else None
            if m is None or t.text in t.hide:
                out.append(t)
                continue
            if m.params is None:
                repl = self._substitute(m, None, t, t.hide | {m.name})
            elif not stack:
                if nesting == 0:
                    self.unfinished = t
                out.append(t)
                continue
            elif stack[-1].text != "(":
                out.append(t)
                continue
            else:
                args, rparen = self._arguments(m, t, stack)
                repl = self._substitute(m, args, t, (t.hide & rparen.hide) | {m.name}, nesting)
            self.budget -= len(repl)
            if self.budget < 0:
                raise Refused(t.line, "the candidate's macros expand to too much text")
            stack.extend(reversed(repl))
        return out

    def _arguments(self, m: Macro, name: Tok, stack: list[Tok]) -> tuple[list[list[Tok]], Tok]:
        """Pops `( args )` off `stack`: the arguments and the closing paren."""
        stack.pop()  # (
        args: list[list[Tok]] = [[]]
        depth = 0
        n_named = len(m.params) - (1 if m.variadic else 0)
        while stack:
            t = stack.pop()
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                if depth == 0:
                    return self._check_count(m, name, args), t
                depth -= 1
            elif t.text == "," and depth == 0 and not (m.variadic and len(args) > n_named):
                args.append([])
                continue
            args[-1].append(t)
        raise Refused(
            name.line,
            f"the call of macro `{m.name}` does not end before the next directive or the end "
            "of the header or body: a macro call must be complete between directives",
        )

    @staticmethod
    def _check_count(m: Macro, name: Tok, args: list[list[Tok]]) -> list[list[Tok]]:
        if len(m.params) == 0 and args == [[]]:
            return []
        if m.variadic and len(args) == len(m.params) - 1:
            args.append([])  # C++20: the variadic part may be left out
        if len(args) != len(m.params):
            raise Refused(
                name.line,
                f"macro `{m.name}` takes {len(m.params)} arguments, the call gives {len(args)}",
            )
        return args

    def _substitute(self, m: Macro, args, at: Tok, hide, nesting: int = 0) -> list[Tok]:
        """The replacement of `m` called at `at` with `args`, pastes done,
        each token painted with `hide`."""
        depth = at.depth + 1
        if depth > MAX_DEPTH:
            raise Refused(at.line, "macro expansions nested too deeply")
        params = m.params or ()
        expanded: dict[int, list[Tok]] = {}

        def param_value(k: int, raw: bool) -> list[Tok]:
            if raw:
                return args[k]
            if k not in expanded:
                expanded[k] = self.expand(args[k], nesting + 1)
            return expanded[k]

        body = m.body
        chunks: list[list[Tok]] = []  # what each body position contributes
        pre: list[bool] = []  # chunk k is an argument expanded before substitution
        glue: list[bool] = []  # chunk k is pasted onto chunk k-1
        paste_next = False
        i = 0
        while i < len(body):
            t = body[i]
            if t.kind == "punct" and t.text == "##":
                paste_next = True
                i += 1
                continue
            expanded_arg = False
            if m.params is not None and t.kind == "punct" and t.text == "#":
                chunk = [_stringize(args[params.index(body[i + 1].text)], at.line)]
                i += 1
            elif t.kind == "id" and t.text in params:
                k = params.index(t.text)
                beside_paste = paste_next or (i + 1 < len(body) and body[i + 1].text == "##")
                chunk = param_value(k, beside_paste)
                expanded_arg = not beside_paste
                if paste_next and t.text == VA and chunks and _gnu_comma(chunks[-1]):
                    # GNU: `, ## __VA_ARGS__` drops the comma when there are none
                    if not chunk:
                        chunks[-1] = chunks[-1][:-1]
                    paste_next = False
            else:
                chunk = [t.copy(line=at.line)]
            chunks.append(chunk)
            pre.append(expanded_arg)
            glue.append(paste_next)
            paste_next = False
            i += 1
        out: list[Tok] = []
        ends_in_token = False  # False after an empty argument: a placemarker
        for chunk, from_arg, pasted in zip(chunks, pre, glue):
            made = [
                Tok(
                    t.kind,
                    t.text,
                    t.line,
                    t.space,
                    t.hide | hide if t.hide else hide,
                    depth,
                    from_arg or t.expanded,
                )
                for t in chunk
            ]
            if pasted and ends_in_token and made:
                out[-1] = self._paste(out[-1], made[0], at)
                out.extend(made[1:])
            else:
                out.extend(made)
            if made or not pasted:
                ends_in_token = bool(made)
        return out

    def _paste(self, left: Tok, right: Tok, at: Tok) -> Tok:
        made = lex_pasted(left.text + right.text)
        if made is None:
            raise Refused(
                at.line,
                f"`{left.text} ## {right.text}` does not form one valid token",
            )
        made = Tok(made.kind, made.text, at.line, left.space, left.hide, left.depth)
        self.on_token(made)
        for t in (left, right):
            if t.expanded and t.kind == "id" and t.text not in self.known and _macro_like(t.text):
                raise Refused(
                    at.line,
                    f"`{t.text}` reaches `##` through a macro argument: a compiler that defines "
                    f"`{t.text}` as a macro would paste its expansion instead, so the result "
                    "cannot be checked; paste only names the candidate #defines or writes",
                )
        return made


def _macro_like(name: str) -> bool:
    """Could a compiler or its headers define `name` as a macro? Reserved
    names (`__x`, `_X`) and names in capitals (`INT_MAX`, `EOF`), which is how
    headers name their macros."""
    return (
        name[0] == "_"
        and (name[1:2] == "_" or name[1:2].isupper())
        or not any(c.islower() for c in name)
    )


def _gnu_comma(chunk: list[Tok]) -> bool:
    return bool(chunk) and chunk[-1].kind == "punct" and chunk[-1].text == ","
