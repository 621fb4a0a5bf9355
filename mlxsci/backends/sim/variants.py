"""Building a kernel variant's library, here or, from a sandboxed worker, in its parent.

A variant is one kernel at one call signature (input dtypes and shapes, output
dtypes, template arguments). Its library is built from the dialect's generated
text after the language rules pass (`variant_library`). In the process that
evaluates, that happens right there. A sandboxed worker (mlxsci.sandbox) may
start no compiler and write no cache, so it sends a *build request* to its
parent instead (`REMOTE`, installed by mlxsci.worker): the kernel spec and the
call signature as plain data, never generated text. The parent checks the
request's shape and that it names a kernel of the job it handed over
(`kernel_of_request`), generates the text itself, applies the
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

from mlxsci.backends.sim import bounds, build, coverage, language_rules, profile, toolchain
from mlxsci.kernel.signature import METAL_TYPES, ArgInfo, dtype_name
from mlxsci.kernel.spec import CompileError, KernelSpec
from mlxsci.protocol.jobs import CandidateJob
from mlxsci.storage.faults import fault_of

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


def variant_library(
    dialect,
    spec: KernelSpec,
    gen,
    extra_defines: tuple[str, ...],
    counted: bool = False,
    profiled: bool = False,
    bounded: bool = False,
) -> Path:
    """The cached library of generated text `gen`, built if needed: the
    language rules first (what the real compilers reject, and what no kernel
    language allows), then, `counted`, the candidate's text instrumented to
    count its branch arms (mlxsci/backends/sim/coverage.py: after the rules,
    which judge the candidate's own text), then the line-preserving rewrite,
    the TU, the build. `profiled`: the build the modelled GPU's clock counts
    with (profile.py), after the plain one (whose compile errors are the
    candidate's); `bounded`: the bounds-checked build (bounds.py), after the
    plain one too."""
    violation = language_rules.check(
        dialect.name, gen.text, gen.regions, spec.source_file, spec.math_mode == "fast"
    )
    if violation is not None:
        raise violation
    text, glue, prologue = gen.text, gen.glue, ""
    if counted:
        try:
            text = coverage.instrument_generated(text, gen.regions, spec)
            glue = coverage.glue(glue, gen.params)
        except coverage.NotInstrumentable as exc:
            raise CompileError(f"branch coverage: {exc}", None, "") from exc
        prologue = coverage.PROLOGUE
    if spec.math_mode == "fast":  # what Metal's fast math mode predefines
        prologue = "#define __FAST_MATH__ 1\n" + prologue
    rewritten = dialect.rewrite(text)
    if rewritten.count("\n") != gen.text.count("\n"):
        raise CompileError("internal: the source rewrite changed the number of lines", None, "")
    if gen.line1:
        first, nl, rest = rewritten.partition("\n")
        if first.strip():
            raise CompileError("internal: the generated text's first line is not empty", None, "")
        rewritten = gen.line1 + nl + rest
    tu = build.assemble(
        rewritten,
        gen.regions,
        glue,
        dialect.includes(),
        candidate_file=spec.source_file,
        prologue=prologue,
    )
    plain = build.build_library(tu, spec.source_file, extra_defines)
    if bounded:
        return bounds.bounded_library(tu, spec.source_file, extra_defines)
    if not profiled:
        return plain
    return profile.profiled_library(tu, spec.source_file, extra_defines).library


def request(
    dialect: str,
    spec: KernelSpec,
    infos: list[ArgInfo],
    out_dtypes: list[str],
    template,
    extra_defines: tuple[str, ...],
    counted: bool = False,
    profiled: bool = False,
    bounded: bool = False,
) -> dict:
    """A build request: everything the parent needs to generate the
    variant's text; `counted`: the variant that counts its branch arms;
    `profiled`: the one the modelled GPU's clock counts with; `bounded`: the
    bounds-checked one (bounds.py)."""
    return {
        "dialect": dialect,
        "spec": dict(
            spec.__dict__, input_names=list(spec.input_names), output_names=list(spec.output_names)
        ),
        "inputs": [[i.dtype, list(i.shape)] for i in infos],
        "out_dtypes": list(out_dtypes),
        # A candidate's template arguments are its params, (name, int) pairs,
        # and an in-place output's element type, (name, dtype name).
        "template": [[n, _template_entry(v)] for n, v in (template or ())],
        "extra_defines": list(extra_defines),
        "counted": counted,
        "profiled": profiled,
        "bounded": bounded,
    }


def _template_entry(value):
    """A template argument as a build request carries it (JSON): an int or
    bool as it is, a dtype as {"dtype": name} (as mlxsci.fast's launches
    carry it; one already in that form stays)."""
    if isinstance(value, (bool, int, dict)):
        return value
    return {"dtype": dtype_name(value)}


def _dtype_slot(value) -> str | None:
    """The dtype name of a request's {"dtype": name} template argument, or None."""
    if isinstance(value, dict) and set(value) == {"dtype"} and value["dtype"] in METAL_TYPES:
        return value["dtype"]
    return None


def _template_matches(asked: list, expected: list) -> bool:
    """Whether a request's template arguments are the parent's: the same names
    in order, the same ints, and a dtype where the parent's has a slot (None:
    an in-place output's element type, known only at the call)."""
    if len(asked) != len(expected):
        return False
    for (name, value), (want_name, want) in zip(asked, expected):
        if name != want_name:
            return False
        if want is None:
            if _dtype_slot(value) is None:
                return False
        elif type(value) is not type(want) or value != want:
            return False
    return True


class BadRequest(ValueError):
    """A build request that no honest worker sends."""


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise BadRequest(f"malformed build request: {what}")


def job_kernels(job: CandidateJob) -> list[tuple[KernelSpec, list]]:
    """Every (kernel spec, template) the candidates of `job` (the job the
    parent handed over: one candidate, or a comparison's two) can ask for:
    their plans' builds (mlxsci.kernel.plan.CandidatePlan.builds), made by
    the parent when it parsed them, the one time it did. A template entry
    None is an in-place output's element type, and the copy dispatch of
    in-place outputs is among them where a kernel has one."""
    return [build for plan in job.plans for build in plan.builds()]


def kernel_of_request(
    req: Any, job: CandidateJob
) -> tuple[str, KernelSpec, list, list, list, tuple, bool, bool, bool]:
    """(dialect, spec, infos, out_dtypes, template, extra_defines, counted, profiled, bounded)
    of a request read from a worker. The spec and template are the parent's
    own (job_kernels): the request must name one of them exactly, so nothing
    of the kernel's text comes from the worker. The call signature is
    checked for type and range; a counted variant only for a job that asks
    for coverage."""
    _need(isinstance(req, dict), "not an object")
    dialect = job.dialect
    _need(req.get("dialect") == dialect, "dialect")
    asked = req.get("spec")
    _need(isinstance(asked, dict), "spec")
    asked = dict(
        asked,
        input_names=tuple(asked.get("input_names") or ()),
        output_names=tuple(asked.get("output_names") or ()),
    )
    entries = req.get("template", [])
    _need(isinstance(entries, list), "template")
    _need(all(isinstance(e, list) and len(e) == 2 for e in entries), "template")
    asked_template = [(name, value) for name, value in entries]
    found = [
        (spec, [(n, _dtype_slot(v) or v) for n, v in asked_template])
        for spec, template in job_kernels(job)
        if spec.__dict__ == asked and _template_matches(asked_template, template)
    ]
    if not found:
        raise BadRequest("the build request names no kernel of the candidate handed over")
    spec, template = found[0]
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
    _need(len(out) == len(spec.output_names), "one output dtype per output")
    defines = tuple(req.get("extra_defines", ()))
    _need(defines in ALLOWED_DEFINES, "defines")
    counted = req.get("counted", False)
    _need(type(counted) is bool, "counted")
    _need(not counted or job.wants_coverage, "a counted variant the job does not ask for")
    profiled = req.get("profiled", False)
    _need(type(profiled) is bool, "profiled")
    _need(not (profiled and counted), "a variant both counted and profiled")
    bounded = req.get("bounded", False)
    _need(type(bounded) is bool, "bounded")
    _need(not (bounded and (counted or profiled)), "a bounds-checked variant of another kind")
    return dialect, spec, infos, out, template, defines, counted, profiled, bounded


def serve_request(text: bytes, job: CandidateJob, deadline: float | None = None) -> dict:
    """The parent's answer to a worker's build request: {"library": path} or
    {"error": {"kind": "compile", "message", "line", "log"}} (also for a
    request it refuses: the worker then reports a compile failure). Only a
    kernel of `job`'s own candidates is built, with the parent's spec of it;
    the compiler stops at `deadline` (time.monotonic()), the size's."""
    from mlxsci.backends.sim.dialects import DIALECTS

    try:
        if len(text) > MAX_REQUEST_BYTES:
            raise BadRequest(f"build request of {len(text)} bytes")
        try:
            req = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise BadRequest("build request is not JSON") from exc
        dialect_name, spec, infos, out, template, defines, counted, profiled, bounded = (
            kernel_of_request(req, job)
        )
        dialect = DIALECTS[dialect_name]()
        gen = dialect.generate(spec, infos, out, template)
        with toolchain.time_limit(deadline):
            library = variant_library(dialect, spec, gen, defines, counted, profiled, bounded)
            return {"library": str(library)}
    except CompileError as exc:
        return {
            "error": {"kind": "compile", "message": exc.message, "line": exc.line, "log": exc.log}
        }
    except Exception as exc:  # noqa: BLE001 - a worker's request never ends its parent
        fault = fault_of(exc)  # but the machine's own faults do: no verdict either way
        if fault is not None:
            raise fault from exc
        message = f"build request refused: {exc}"[:500]
        return {"error": {"kind": "compile", "message": message, "line": None, "log": ""}}


class BuildRequests:
    """The parent's build service for a sandboxed simulator worker
    (mlxsci.backends.base.BuildService): serve_request with its bounds."""

    max_builds_per_size = MAX_BUILDS_PER_SIZE
    max_request_bytes = MAX_REQUEST_BYTES

    def serve(self, request: bytes, job, deadline: float | None) -> dict:
        return serve_request(request, job, deadline)


def raise_reply(reply: dict) -> Path:
    """A worker's reading of its parent's answer: the library, or the error."""
    if isinstance(reply.get("library"), str):
        return Path(reply["library"])
    err = reply.get("error") or {}
    raise CompileError(
        str(err.get("message", "build failed")), err.get("line"), str(err.get("log", ""))
    )
