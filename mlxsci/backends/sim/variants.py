"""Building a kernel variant's library, here or, from a sandboxed worker, in its parent.

A variant is one kernel at one call signature (input dtypes and shapes, output
dtypes, template arguments). Its library is built from the dialect's generated
text after the language rules pass (`variant_library`). In the process that
evaluates, that happens right there. A sandboxed worker (mlxsci.sandbox) may
start no compiler and write no cache, so it sends a *build request* to its
parent instead (`REMOTE`, installed by mlxsci.worker): the kernel spec and the
call signature as plain data, never generated text. The parent checks the
request's shape (`spec_of_request`), generates the text itself, applies the
same rules and builds into the cache it alone writes (`serve_request`); the
worker only loads the library it is told of. A worker whose candidate code
has taken it over can therefore ask for nothing a candidate file could not
have asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlxsci.backends.base import CompileError, KernelSpec
from mlxsci.backends.sim import build, language_rules, toolchain
from mlxsci.signature import METAL_TYPES, ArgInfo

# Set in a sandboxed worker: request -> library path (raises CompileError).
REMOTE: Callable[[dict], Path] | None = None

# The only defines a request may carry (SimBackend.extra_defines).
ALLOWED_DEFINES = ((), ("-DSIM_FIBER_UCONTEXT=1",))
# A request is small (a candidate's text and a few shapes); more is an attack.
MAX_REQUEST_BYTES = 4 << 20
# Builds a worker may ask for in one size: a task's pipeline has a few kernels,
# each at one or two call signatures; more is a worker making its parent
# compile variants the job never runs.
MAX_BUILDS_PER_SIZE = 16


def variant_library(dialect, spec: KernelSpec, gen, extra_defines: tuple[str, ...]) -> Path:
    """The cached library of generated text `gen`, built if needed: the
    language rules first (what the real compilers reject, and what no kernel
    language allows), then the line-preserving rewrite, the TU, the build."""
    violation = language_rules.check(dialect.name, gen.text, gen.regions, spec.source_file)
    if violation is not None:
        raise violation
    rewritten = dialect.rewrite(gen.text)
    if rewritten.count("\n") != gen.text.count("\n"):
        raise CompileError("internal: the source rewrite changed the number of lines", None, "")
    if gen.line1:
        first, nl, rest = rewritten.partition("\n")
        if first.strip():
            raise CompileError("internal: the generated text's first line is not empty", None, "")
        rewritten = gen.line1 + nl + rest
    tu = build.assemble(
        rewritten, gen.regions, gen.glue, dialect.includes(), candidate_file=spec.source_file
    )
    return build.build_library(tu, spec.source_file, extra_defines)


def _template_entry(name: str, value: Any) -> list:
    if isinstance(value, bool):
        return [name, "bool", value]
    if isinstance(value, int):
        return [name, "int", value]
    from mlxsci.signature import dtype_name

    return [name, "typename", dtype_name(value)]


def request(
    dialect: str,
    spec: KernelSpec,
    infos: list[ArgInfo],
    out_dtypes: list[str],
    template,
    extra_defines: tuple[str, ...],
) -> dict:
    """A build request: everything the parent needs to generate the variant's text."""
    return {
        "dialect": dialect,
        "spec": dict(
            spec.__dict__, input_names=list(spec.input_names), output_names=list(spec.output_names)
        ),
        "inputs": [[i.dtype, list(i.shape)] for i in infos],
        "out_dtypes": list(out_dtypes),
        "template": [_template_entry(n, v) for n, v in (template or ())],
        "extra_defines": list(extra_defines),
    }


class BadRequest(ValueError):
    """A build request that no honest worker sends."""


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise BadRequest(f"malformed build request: {what}")


def _names(value, what: str) -> tuple[str, ...]:
    _need(isinstance(value, list) and all(isinstance(v, str) for v in value), what)
    return tuple(value)


def spec_of_request(req: Any) -> tuple[str, KernelSpec, list, list, list, tuple]:
    """(dialect, spec, infos, out_dtypes, template, extra_defines) of a request
    read from a worker, every field checked for type and range."""
    _need(isinstance(req, dict), "not an object")
    _need(req.get("dialect") in ("metal", "cuda"), "dialect")
    s = req.get("spec")
    _need(isinstance(s, dict), "spec")
    fields = {
        "name",
        "input_names",
        "output_names",
        "source",
        "header",
        "atomic_outputs",
        "dialect",
        "source_file",
        "header_line",
        "body_line",
    }
    _need(set(s) == fields, "spec fields")
    for key in ("name", "source", "header", "source_file", "dialect"):
        _need(isinstance(s[key], str), f"spec.{key}")
    for key in ("header_line", "body_line"):
        _need(type(s[key]) is int and 0 <= s[key] < 1 << 31, f"spec.{key}")
    _need(isinstance(s["atomic_outputs"], bool), "spec.atomic_outputs")
    _need(s["dialect"] == req["dialect"], "spec.dialect")
    spec = KernelSpec(
        **dict(
            s,
            input_names=_names(s["input_names"], "input names"),
            output_names=_names(s["output_names"], "output names"),
        )
    )
    inputs = req.get("inputs")
    _need(isinstance(inputs, list) and len(inputs) == len(spec.input_names), "inputs")
    infos = []
    for entry in inputs:
        _need(isinstance(entry, list) and len(entry) == 2, "input")
        dtype, shape = entry
        _need(dtype in METAL_TYPES, "input dtype")
        _need(isinstance(shape, list) and len(shape) <= 16, "input shape")
        _need(all(type(d) is int and 0 <= d < 1 << 40 for d in shape), "input shape")
        infos.append(ArgInfo(dtype, tuple(shape)))
    out = req.get("out_dtypes")
    _need(isinstance(out, list) and all(d in METAL_TYPES for d in out), "output dtypes")
    template = []
    for entry in req.get("template", []):
        _need(isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str), "template")
        name, kind, value = entry
        ok = {
            "bool": type(value) is bool,
            "int": type(value) is int,
            "typename": value in METAL_TYPES,
        }.get(kind, False)
        _need(ok, "template value")
        template.append((name, value))
    _need(len(out) == len(spec.output_names), "one output dtype per output")
    names = (spec.name, *spec.input_names, *spec.output_names)
    _need(all(n.isidentifier() for n in names), "names")
    defines = tuple(req.get("extra_defines", ()))
    _need(defines in ALLOWED_DEFINES, "defines")
    return req["dialect"], spec, infos, out, template, defines


def job_kernels(job: dict) -> list[tuple[KernelSpec, list]]:
    """Every (kernel spec, template) the candidates of `job` (the job the
    parent handed over: one candidate, or a comparison's two) can ask for,
    derived by the parent from their text as the worker's Launcher does."""
    from mlxsci.candidate import parse, template_args, to_kernel_spec
    from mlxsci.task import load_task

    task = load_task(job["task"])
    dialect = (job.get("backend_options") or {}).get("dialect", "metal")
    sources = job.get("sources") or [job["source"]]
    filenames = job.get("filenames") or [job["filename"]]
    kernels = []
    for source, filename in zip(sources, filenames):
        c = parse(source, dialect=dialect, filename=filename)
        template = template_args(c, job.get("param_overrides"))
        for k in task.kernels:
            spec = to_kernel_spec(
                c, k.name, k.inputs, k.outputs, atomic_outputs=k.atomic_outputs, filename=filename
            )
            kernels.append((spec, template))
    return kernels


def serve_request(text: bytes, job: dict, deadline: float | None = None) -> dict:
    """The parent's answer to a worker's build request: {"library": path} or
    {"error": {"kind": "compile", "message", "line", "log"}} (also for a
    request it refuses: the worker then reports a compile failure). Only a
    kernel of `job`'s own candidates is built, with the parent's spec of it;
    the compiler stops at `deadline` (time.monotonic()), the size's."""
    from mlxsci.backends.sim.dialects import _DIALECTS

    try:
        if len(text) > MAX_REQUEST_BYTES:
            raise BadRequest(f"build request of {len(text)} bytes")
        try:
            req = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise BadRequest("build request is not JSON") from exc
        dialect_name, spec, infos, out, template, defines = spec_of_request(req)
        if (spec, template) not in job_kernels(job):
            raise BadRequest("the build request names no kernel of the candidate handed over")
        dialect = _DIALECTS[dialect_name]()
        gen = dialect.generate(spec, infos, out, template)
        with toolchain.time_limit(deadline):
            return {"library": str(variant_library(dialect, spec, gen, defines))}
    except CompileError as exc:
        return {
            "error": {"kind": "compile", "message": exc.message, "line": exc.line, "log": exc.log}
        }
    except Exception as exc:  # noqa: BLE001 - a worker's request never ends its parent
        message = f"build request refused: {exc}"[:500]
        return {"error": {"kind": "compile", "message": message, "line": None, "log": ""}}


def raise_reply(reply: dict) -> Path:
    """A worker's reading of its parent's answer: the library, or the error."""
    if isinstance(reply.get("library"), str):
        return Path(reply["library"])
    err = reply.get("error") or {}
    raise CompileError(
        str(err.get("message", "build failed")), err.get("line"), str(err.get("log", ""))
    )
