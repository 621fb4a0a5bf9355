"""The prompts of the LLM kernel search: system prompt, user prompts, result lines.

The structure follows the Metal-Sci benchmark's search prompts: a
system prompt that is the same at every call (role, output format, the task's
contract, hard rules, dialect pitfalls, optimisation hints), an iteration-1
prompt (task brief, seed, its measured result) and an iteration-k prompt
(brief, previous attempt, incumbent, short history, optional stagnation
notice). The wording is this project's own, and everything task-specific is
derived from the `Task` object, so a new task folder needs no prompt edits:

- the kernel signatures are produced by `mlxsci.signature.metal_source`, fed
  with the dtypes and shapes the task's host pipeline really passes (a dry run
  of `task.run` at the smoke size with a stand-in `launch`), so the prompt
  shows exactly the text MLX generates;
- what feeds what (ping-pong, counters, producer -> consumer) is read off the
  same dry run, by object identity of the arrays handed between launches;
- buffer shapes are written symbolically (`(NY, NX)`) by matching the dry
  runs at several non-held-out sizes against the sizes' integer parameters.

Held-out sizes never reach a prompt: this module reads only the `smoke` and
`in-dist` size sets, and `format_result` drops any size marked `held_out`
(defence in depth; the loop passes only in-dist or smoke results).

Each scored size's result also says how it was timed and how noisy the
timing was, and, where the timer sees kernels (cupti, sim), where the time
went per kernel: a proposer that knows one kernel takes 70 % of a run knows
where to look.
"""
from __future__ import annotations

import itertools
import re
import textwrap
from dataclasses import dataclass

import numpy as np

from mlxsci import dialects
from mlxsci.signature import (CUDA_TYPES, METAL_ATTRIBUTES, METAL_TYPES, ArgInfo,
                              cuda_source, dtype_name, metal_source)
from mlxsci.task import KernelContract, Task

__all__ = ["system_prompt", "user_prompt", "format_result", "format_history_line",
           "stagnating", "contract_text", "metal_signature", "cuda_signature", "HISTORY_LINES"]

HISTORY_LINES = 8            # history entries shown in an iteration-k prompt
STAGNATION_WINDOW = 3        # correct candidate iterations looked at
STAGNATION_BAND = 0.85       # "close to the best" means score >= 0.85 * best
_MAX_MESSAGE = 3000          # characters of a compile log / failure shown
KERNELS_SHOWN = 6            # kernels listed per size in the time breakdown, longest first

def _check_dialect(dialect: str) -> None:
    dialects.get(dialect)   # ValueError naming the dialects for any other name


# --- the task's pipeline, read off a dry run ----------------------------------

class _Done(Exception):
    """Stops a dry run early (too many launches)."""


@dataclass
class _Launch:
    kernel: str
    inputs: dict          # name -> array object passed
    outputs: dict         # name -> array object returned


@dataclass
class _Trace:
    params: dict
    host: dict            # name -> array object of the task's inputs
    launches: list        # [_Launch]
    specs: dict           # kernel -> (input ArgInfos, output (shape, dtype) dict)
    complete: bool        # False when the dry run was cut short (launch counts unknown)


def _dry_run(task: Task, params: dict, max_launches: int = 400) -> _Trace:
    """Run the task's host pipeline with a stand-in `launch` that records what
    each kernel is given and returns (lazy, never evaluated) zero arrays."""
    import mlx.core as mx

    host = {k: mx.array(np.asarray(v)) for k, v in task.make_inputs(params).items()}
    launches: list[_Launch] = []
    specs: dict = {}

    def launch(name: str, inputs: dict, outputs: dict) -> dict:
        contract = task.kernel(name)
        given = {n: inputs[n] for n in contract.inputs}
        if name not in specs:
            infos = [ArgInfo(dtype_name(a.dtype), tuple(int(d) for d in a.shape))
                     for a in (given[n] if hasattr(given[n], "shape") else np.asarray(given[n])
                               for n in contract.inputs)]
            specs[name] = (infos, {n: (tuple(outputs[n][0]), outputs[n][1])
                                   for n in contract.outputs})
        made = {n: mx.zeros(tuple(outputs[n][0]),
                            dtype=mx.bool_ if outputs[n][1] == "bool" else getattr(mx, outputs[n][1]))
                for n in contract.outputs}
        launches.append(_Launch(name, given, made))
        if len(launches) >= max_launches:
            raise _Done
        return made

    complete = True
    try:
        task.run(launch, dict(host), params)
    except _Done:
        complete = False
    return _Trace(dict(params), host, launches, specs, complete)


def _trace_sizes(task: Task) -> list[dict]:
    """Parameters of the sizes dry-run for the prompt: every smoke size and the
    first in-distribution size (never a held-out one)."""
    chosen = []
    for which in ("smoke", "in-dist"):
        sizes = task.sizes.get(which, ())
        chosen.extend(s.params for s in (sizes if which == "smoke" else sizes[:1]))
    if not chosen:
        chosen.append(task.custom_size({}).params)
    return chosen


def _symbolic_dim(values: list[int], int_params: list[dict]) -> str | None:
    """A dimension as an expression of the sizes' integer parameters, if one
    expression fits every traced size: a parameter, a constant, or a product
    of up to three parameters, optionally times a constant."""
    names = sorted(set.intersection(*(set(p) for p in int_params)))
    single = [n for n in names if all(p[n] == v for p, v in zip(int_params, values))]
    if len(single) == 1:
        return single[0]
    if len(single) > 1:
        return None
    if len(set(values)) == 1:
        return str(values[0])
    for r in (2, 3):
        found = []
        for combo in itertools.combinations_with_replacement(names, r):
            prods = [int(np.prod([p[n] for n in combo], dtype=np.int64)) for p in int_params]
            if any(q <= 0 for q in prods):
                continue
            if values[0] % prods[0]:
                continue
            factor = values[0] // prods[0]
            if all(q * factor == v for q, v in zip(prods, values)):
                found.append("*".join(combo) + ("" if factor == 1 else f"*{factor}"))
        if len(found) == 1:
            return found[0]
        if found:
            return None
    return None


@dataclass
class _KernelInfo:
    contract: KernelContract
    infos: list                # ArgInfo per input, at the first traced size
    out_shapes: dict           # output -> (shape, dtype) at the first traced size
    shapes: dict               # buffer name -> symbolic shape text
    feeds: dict                # input name -> description of where it comes from
    launches_per_run: str      # e.g. "once per step (n_steps times)"


@dataclass
class _PipelineInfo:
    order: list                # kernel names in launch order within one period
    repeat: str                # how often the period repeats, in words
    kernels: dict              # name -> _KernelInfo


def _period(seq: list[str]) -> int:
    for p in range(1, len(seq) + 1):
        if len(seq) % p == 0 and seq == seq[:p] * (len(seq) // p):
            return p
    return len(seq)


def _repeat_words(counts: list[int], int_params: list[dict]) -> str:
    """A launch count as words: a count that is the same at every traced size, or
    one size parameter (times 2 or 3) that fits the count at every traced size."""
    if len(set(counts)) == 1 and (counts[0] == 1 or len(counts) > 1):
        return "once per run" if counts[0] == 1 else f"{counts[0]} times per run"
    names = sorted(set.intersection(*(set(p) for p in int_params)))
    for f in (1, 2, 3):
        fits = [n for n in names if all(p[n] * f == c for p, c in zip(int_params, counts))]
        if len(fits) == 1:
            return f"{fits[0]} times per run" if f == 1 else f"{f} * {fits[0]} times per run"
    return "a size-dependent number of times per run (see the task description)"


def _ordinal(k: int) -> str:
    return {1: "most recent", 2: "second most recent", 3: "third most recent"}.get(
        k, f"{k}th most recent")


def _feeds(trace: _Trace, kernel: str) -> dict:
    """For the last launch of `kernel`: where each input came from."""
    idx = max(i for i, l in enumerate(trace.launches) if l.kernel == kernel)
    first = min(i for i, l in enumerate(trace.launches) if l.kernel == kernel)
    last, first_launch = trace.launches[idx], trace.launches[first]
    out = {}
    for name, arr in last.inputs.items():
        host_name = next((h for h, a in trace.host.items() if a is arr), None)
        if host_name is not None:
            out[name] = ("the task's input" if host_name == name
                         else f"the task's input {host_name}") + " (the same at every launch)"
            continue
        producer = None
        for j in range(idx - 1, -1, -1):
            for oname, o in trace.launches[j].outputs.items():
                if o is arr:
                    producer = (j, oname)
                    break
            if producer:
                break
        if producer is None:
            out[name] = "set by the host anew at every launch (e.g. a step counter)"
            continue
        j, oname = producer
        pk = trace.launches[j].kernel
        back = sum(1 for l in trace.launches[j:idx] if l.kernel == pk)
        text = f"`{oname}` of the {_ordinal(back)} `{pk}` launch"
        initial = first_launch.inputs.get(name)
        h0 = next((h for h, a in trace.host.items() if a is initial), None)
        if h0 is not None:
            text += f" (at the start of the run: the task's initial `{h0}`)"
        out[name] = text
    return out


_PIPELINES: dict = {}


def _pipeline(task: Task) -> _PipelineInfo:
    key = id(task)
    cached = _PIPELINES.get(key)
    if cached is not None and cached[0] is task:
        return cached[1]
    traces = [_dry_run(task, p) for p in _trace_sizes(task)]
    main = traces[0]
    int_params = [task.launch_names(t.params) for t in traces]
    seq = [l.kernel for l in main.launches]
    period = _period(seq) if seq else 0
    order = seq[:period] if seq else list(task.kernel_names)
    reps = len(seq) // period if period else 0
    unknown = "a size-dependent number of times per run (see the task description)"
    full = [t for t in traces if t.complete]
    full_params = [task.launch_names(t.params) for t in full]
    per_period = [len(t.launches) // period for t in full] if period else []
    repeat = _repeat_words(per_period, full_params) if reps and main.complete else unknown
    kernels = {}
    for contract in task.kernels:
        if contract.name not in main.specs:
            continue
        infos, outs = main.specs[contract.name]
        shapes = {}
        all_names = list(contract.inputs) + list(contract.outputs)
        for pos, name in enumerate(all_names):
            per_size = []
            for t in traces:
                if contract.name not in t.specs:
                    continue
                ins, os_ = t.specs[contract.name]
                shp = ins[pos].shape if pos < len(contract.inputs) else os_[name][0]
                per_size.append(tuple(shp))
            base = per_size[0]
            if len(base) == 0:
                shapes[name] = "scalar (0-d)"
                continue
            usable = [s for s in per_size if len(s) == len(base)]
            ip = int_params[:len(usable)] if len(usable) == len(per_size) else int_params[:1]
            usable = usable if len(usable) == len(per_size) else [base]
            dims = []
            for d in range(len(base)):
                sym = _symbolic_dim([s[d] for s in usable], ip)
                dims.append(sym if sym is not None else None)
            if all(x is not None for x in dims):
                shapes[name] = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
            else:
                shapes[name] = "(" + ", ".join(str(x) for x in base) + \
                               ("," if len(base) == 1 else "") + ") at a small test size"
        counts = [sum(1 for l in t.launches if l.kernel == contract.name) for t in full]
        kernels[contract.name] = _KernelInfo(
            contract, infos, outs, shapes, _feeds(main, contract.name),
            _repeat_words(counts, full_params) if main.complete else unknown)
    info = _PipelineInfo(order, repeat, kernels)
    _PIPELINES[key] = (task, info)
    return info


# --- signatures ---------------------------------------------------------------

def metal_signature(task: Task, kernel: str) -> str:
    """The signature MLX generates for `kernel` (no params, no thread attributes),
    from `[[kernel]]` through `) {`, at the first smoke size."""
    info = _pipeline(task).kernels[kernel]
    c = info.contract
    out_dtypes = [info.out_shapes[n][1] for n in c.outputs]
    src = metal_source(c.name, list(c.inputs), list(c.outputs), "", "", info.infos, out_dtypes,
                       atomic_outputs=c.atomic_outputs)
    return src.text.split("\n}\n", 1)[0].rstrip("\n")


def cuda_signature(task: Task, kernel: str) -> str:
    """The signature mx.fast.cuda_kernel generates for `kernel` (no params),
    from `__global__` through `) {`, at the first smoke size."""
    info = _pipeline(task).kernels[kernel]
    c = info.contract
    out_dtypes = [info.out_shapes[n][1] for n in c.outputs]
    text = cuda_source(c.name, list(c.inputs), list(c.outputs), "", "", info.infos,
                       out_dtypes).text
    start = text.index("__global__")
    return text[start:text.index(") {", start) + 3]


def _metal_decl(arg: ArgInfo) -> str:
    t = metal_source("k", ["v"], ["o"], "", "", [arg], ["float32"]).text
    m = re.search(r"^  (.*?) v \[\[buffer", t, re.M)
    return m.group(1) if m else ""


def contract_text(task: Task, dialect: str = "metal") -> str:
    """The task's contract, kernel by kernel, as the prompt states it."""
    _check_dialect(dialect)
    pipe = _pipeline(task)
    fence = dialects.get(dialect).fence
    sizes = ", ".join(sorted(task.launch_names(task.defaults)))
    lines = [f"Task `{task.name}`: {len(task.kernels)} kernel(s). The host runs one period of "
             f"launches, in this order: " + " -> ".join(f"`{k}`" for k in pipe.order)
             + f"; the period repeats {pipe.repeat}.",
             f"Integer size parameters usable in launch expressions: {sizes}.", ""]
    for name in task.kernel_names:
        info = pipe.kernels.get(name)
        if info is None:
            lines.append(f"### Kernel `{name}` (not launched at the test size)")
            continue
        c = info.contract
        lines.append(f"### Kernel `{name}` (launched {info.launches_per_run})")
        lines.append(f"Default launch: grid = {c.grid}, threadgroup = {c.threadgroup}")
        lines.append("Inputs (read-only):")
        for n, arg in zip(c.inputs, info.infos):
            kind = (f"{arg.dtype} scalar" if arg.ndim == 0
                    else f"{arg.dtype} array, shape {info.shapes[n]}")
            if dialect == "metal":
                decl = _metal_decl(arg)
            else:
                decl = f"const {CUDA_TYPES[arg.dtype]}*" + (f" (read `{n}[0]`)" if arg.ndim == 0 else "")
            lines.append(f"  - `{n}`: {kind}; seen as `{decl}`; {info.feeds.get(n, '')}")
        if c.atomic_outputs or c.init_value is not None:
            start = f"start filled with {c.init_value:g} (init_value)" if c.init_value is not None \
                else "are fresh buffers"
            lines.append(f"Outputs ({'atomic, ' if c.atomic_outputs else ''}{start}; "
                         "this kernel must leave them holding the task's result):")
        else:
            lines.append("Outputs (fresh buffers at every launch, filled with poison values "
                         "before verification runs: write every element):")
        for n in c.outputs:
            shp, dt = info.out_shapes[n]
            if dialect == "metal":
                t = METAL_TYPES[dtype_name(dt)]
                decl = f"device atomic<{t}>*" if c.atomic_outputs else f"device {t}*"
            else:
                decl = f"{CUDA_TYPES[dtype_name(dt)]}*"
            lines.append(f"  - `{n}`: {dt} array, shape {info.shapes[n]}; seen as `{decl}`")
        if dialect == "metal":
            lines.append("The function MLX generates around your body (shown with no `//! param` "
                         "and no thread attribute in use):")
            sig = metal_signature(task, name)
        else:
            lines.append("The function mx.fast.cuda_kernel generates around your body:")
            sig = cuda_signature(task, name)
        lines += [f"```{fence}", sig, "    // ... your body ...", "}", "```", ""]
    return "\n".join(lines).rstrip() + "\n"


# --- system prompt ------------------------------------------------------------

def _skeleton(task: Task, dialect: str) -> str:
    ex = ["//! param TILE = 16 {8, 16, 32}", "//! header",
          "// helpers and program-scope constants shared by all kernels"]
    for c in task.kernels:
        ex += [f"//! kernel {c.name}", f"//! grid = {c.grid}", f"//! threadgroup = {c.threadgroup}",
               f"// body of {c.name}: statements only, no function header"]
    return "\n".join(ex)


def _format_section(task: Task, dialect: str) -> str:
    fence = dialects.get(dialect).fence
    lang = dialects.get(dialect).language
    kernel_list = ", ".join(f"`{k}`" for k in task.kernel_names)
    return f"""## Output format
Answer with a short explanation (under about 150 words) of what you changed and why it
should be faster, then exactly one fenced code block opened with ```{fence} that holds the
complete candidate file. The file contains every kernel of the task, even the ones you
did not change: {kernel_list}. Nothing outside that block is compiled.

## The candidate file (format v1)
Lines that start with `//!` are directives; every other line is {lang} code. Any `//!` line
must be one of the directives below (write ordinary comments with `//`).
- `//! param NAME = VALUE {{c1, c2, ...}}`: optional, any number, before everything else. An
  integer compile-time constant that MLX passes as a template argument, so it is visible
  in every kernel body (usable as an array bound) but NOT in the header. The braces
  list values an autotuner may try; they must include VALUE. NAME must not clash with a
  size parameter, a buffer name, `min`, `max` or `ceil_div`.
- `//! header`: optional, at most once, before the first kernel. Everything up to the first
  `//! kernel` is shared code pasted before every kernel function: helper functions,
  structs, program-scope constants.
- `//! kernel NAME`: one per kernel of the task, with the task's exact names. The lines
  after it (up to the next `//! kernel`) are the kernel BODY: statements that MLX pastes
  inside a function it writes itself. MLX generates the whole signature from the task's
  buffer names and dtypes (shown below), so a body never declares parameters, never
  writes a function header and never returns a value.
- `//! grid = (X, Y, Z)` and `//! threadgroup = (X, Y, Z)`: optional, right after
  `//! kernel NAME`; without them the task's defaults (shown below) are used. The grid
  counts THREADS, not threadgroups. Each entry is an integer expression built from
  integer literals, `+ - * // %`, parentheses, `min(a, b, ...)`, `max(a, b, ...)`,
  `ceil_div(a, b)`, the size's integer parameters and your params. `//` and `%` are
  integer floor division and remainder; `/`, floats and other functions are rejected.

Skeleton (placeholders only; write real code):
```{fence}
{_skeleton(task, dialect)}
```
"""


def _hard_rules(task: Task, dialect: str) -> str:
    edge = ("On Metal exactly grid.x * grid.y * grid.z threads run and the threadgroups on\n"
            "  the far edges may be partial, so guard every index against the data bounds."
            if dialect == "metal" else
            "CUDA launches whole blocks (ceil(grid / threadgroup) per axis), so threads past\n"
            "  the end of the data run too: guard every index against the data bounds.")
    tg_mem = ("Threadgroup memory is at most 32 KB per threadgroup, declared statically in\n"
              "  the body." if dialect == "metal" else
              "Shared memory is static `__shared__` arrays in the body, at most 48 KB per\n"
              "  block (stay under 32 KB to keep occupancy).")
    return f"""## Hard rules
- The host side is fixed. It launches the kernels in the order given above, the number of
  times given above, and passes buffers between launches exactly as described. You choose
  kernel bodies, helpers, params and launch shapes, nothing else. Every launch is one step
  of the algorithm: you cannot fuse steps or skip launches.
- Correctness gates the score. Every size is checked against a NumPy reference; if any
  size is out of tolerance (or crashes, hangs or reads out of bounds) the score is 0.
- Outputs are new buffers at every launch, and during verification they are pre-filled
  with poison values: every element of every output must be written at every launch
  (boundary cells included), unless the contract says the output starts from a given
  value.
- Inputs are read-only; their checksums are compared before and after the run.
- Be deterministic: the last timed run must reproduce the verified output.
- {edge}
- {tg_mem}
- At most 1024 threads per threadgroup (the real limit can be lower for kernels that
  use many registers). The SIMD-group (warp) width is 32.
- Score: per size, the fraction of the roofline (achieved / ceiling, from the task's
  byte or FLOP model); the candidate's score is the geometric mean over the scored sizes.
"""


_METAL_PITFALLS = """## Metal pitfalls in MLX kernel bodies
- MLX compiles: its own preamble (which includes <metal_stdlib> and `using namespace metal;`),
  your header, then `[[kernel]] void custom_kernel_...(<generated parameters>) {` + your body
  + `}`. `#include <metal_stdlib>` is not needed. Do not write `kernel void`, `[[kernel]]`,
  buffer indices, or function attributes such as `[[max_total_threads_per_threadgroup(N)]]`:
  there is no place for them.
- Thread attributes are used by name and declared by MLX. If the body's text contains one
  of these names, MLX appends it as a parameter with a fixed type (uint3 for positions and
  counts, uint for indices; you cannot pick ushort):
  @ATTRS@.
  The search is plain text, so a mention in a comment declares it too. Never declare a
  variable with one of these names. The header is not searched: a header helper that
  needs a thread index must receive it as an argument.
- Writing `<input>_shape`, `<input>_strides` or `<input>_ndim` in a body adds those
  parameters; avoid such identifiers unless you mean them.
- Scalars arrive as `const constant T&` references: use them directly (`NX`, not `NX[0]`).
  Arrays with fewer than 8 elements arrive as `const constant T*`, larger ones as
  `const device T*`. Reinterpret float data as vectors with casts such as
  `((const device float4*)pos_in)[i]`.
- Template params from `//! param` are visible in bodies but not in the header, so a
  header helper that needs one must itself be a template (`template <int T> ...`).
- Program-scope constants (tables, coefficients) go in the header with the `constant`
  address space: `constant float W[9] = {...};`.
- `threadgroup` arrays are declared in the body with compile-time sizes (literals, header
  constants or params); there is no dynamic threadgroup memory.
- Every thread of a threadgroup must reach each `threadgroup_barrier`: do not `return`
  early before a barrier, guard the work instead. Partial edge threadgroups are smaller
  than requested: `threads_per_threadgroup` holds the actual size.
- `half` is a type (`float16_t` is the same); `bfloat16_t` exists. No lambdas, recursion,
  exceptions, virtual functions or dynamic allocation. Do not redefine names from MLX's
  preamble (`ceildiv`, `elem_to_loc`, `Limits`, `complex64_t`, ...).
- Atomic outputs are `device atomic<T>*`: use `atomic_fetch_add_explicit(&out[i], v,
  memory_order_relaxed)` and friends.
- Keep the file ASCII only.

## Optimisations that often pay off
- Threadgroup tiling: load a tile (plus halo) cooperatively into threadgroup memory, one
  `threadgroup_barrier(mem_flags::mem_threadgroup)`, then compute from it.
- SIMD-group functions instead of threadgroup memory and barriers: `simd_sum`, `simd_max`,
  `simd_shuffle`, `simd_shuffle_down` / `_up` / `_xor`, `simd_broadcast`,
  `simd_prefix_exclusive_sum`.
- Vectorised, coalesced memory access (`float4` loads and stores), fewer redundant loads,
  values kept in registers.
- More work per thread (several outputs, register blocking, loop unrolling with a
  compile-time trip count) when it cuts loads or overhead; the launch shape and params
  let you size this. Launch shapes matter: try threadgroup sizes that are multiples of 32.
- Cheaper arithmetic: precomputed constants, `fma`, `rsqrt`, `fast::` math where the
  tolerance allows. The number of launches is fixed by the host; the gain is inside each
  launch.
"""

_CUDA_PITFALLS = """## CUDA pitfalls in MLX kernel bodies
- MLX compiles (NVRTC): its device utilities, your header at global scope, then
  `namespace mlx::core::cu { __global__ void custom_kernel_...(<generated parameters>) {`
  + your body + `} }`. Do not write `__global__`, a kernel signature or launch bounds.
- Every input, scalars included, arrives as `const T*`: read a scalar as `NX[0]`. Outputs
  are `T*`; outputs that start from an init value are updated with `atomicAdd` and
  friends.
- Use `threadIdx`, `blockIdx`, `blockDim`, `gridDim`. Whole blocks are launched: guard
  every index.
- `//! param` values become `constexpr int` inside the body: visible in bodies, not in the
  header, so header helpers that need one must be templates. Header functions need no
  `__device__`.
- Shared memory: static `__shared__` arrays with compile-time sizes; `__syncthreads()` must
  be reached by every thread of the block (no early return before it).
- Warp width 32: `__shfl_xor_sync(0xffffffff, v, m)`, `__shfl_down_sync`, `__shfl_sync`.
- No `--use_fast_math`: use intrinsics such as `__expf`, `rsqrtf`, `__fdividef` where the
  tolerance allows. Keep the file ASCII only.

## Optimisations that often pay off
Shared-memory tiling with halos, warp-shuffle reductions, vectorised `float4` loads via
`reinterpret_cast`, coalesced access, more work per thread when it saves loads, block
sizes that are multiples of 32. The number of launches is fixed by the host.
"""


def system_prompt(task: Task, dialect: str = "metal") -> str:
    """The system prompt: the same at every call of a search."""
    _check_dialect(dialect)
    if dialect == "metal":
        role = ("You are an expert Metal Shading Language (MSL) engineer who writes fast, "
                "correct GPU compute kernels for Apple GPUs. Your kernels are bodies for "
                "MLX's `mx.fast.metal_kernel`.")
        pitfalls = _METAL_PITFALLS.replace(
            "@ATTRS@", textwrap.fill(", ".join(f"`{a}`" for a, _ in METAL_ATTRIBUTES),
                                     width=88, subsequent_indent="  "))
    else:
        role = ("You are an expert CUDA engineer who writes fast, correct GPU compute kernels "
                "for NVIDIA GPUs. Your kernels are bodies for MLX's `mx.fast.cuda_kernel`.")
        pitfalls = _CUDA_PITFALLS
    return "\n".join([
        role + " You improve one benchmark task at a time; each answer is scored by "
        "measured speed against a roofline, but only if it is correct.",
        "",
        _format_section(task, dialect),
        "## The task contract",
        contract_text(task, dialect),
        _hard_rules(task, dialect),
        pitfalls,
    ]).rstrip() + "\n"


# --- results ------------------------------------------------------------------

def _num(x) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    x = float(x)
    if x != x:
        return "nan"
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def _clip(text: str, limit: int = _MAX_MESSAGE) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " [...]"


def _size_detail(size: dict) -> str:
    label = size.get("label", "")
    reason = size.get("fail_reason") or ""
    prefix = f"correctness failed at size {label}: "
    if reason.startswith(prefix):
        return _clip(reason[len(prefix):])
    if reason:
        return _clip(reason.replace(f" at size {label}:", ":", 1))
    err, tol = size.get("error"), size.get("tol")
    return f"error={_num(err)}, tol={_num(tol)}"


def _size_line(size: dict) -> str:
    label = size.get("label", "?")
    if not size.get("correct"):
        return f"{label}: INCORRECT ({_size_detail(size)})"
    unit = size.get("unit", "")
    secs = size.get("seconds")
    ms = "n/a" if secs is None else f"{secs * 1e3:.3f}"
    frac = size.get("fraction")
    pct = "n/a" if frac is None else f"{frac * 100:.1f}"
    line = (f"{label}: correct, {ms} ms, {_num(size.get('achieved'))} {unit} "
            f"({pct}% of {_num(size.get('ceiling'))} {unit})")
    if size.get("flags"):
        line += " [flags: " + ", ".join(str(f) for f in size["flags"]) + "]"
    return line


def _duration(seconds: float) -> str:
    """A time with its unit, 3 significant digits: 18.6 us, 1.25 ms, 182 us."""
    scale, unit = next(((s, u) for s, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"))
                        if abs(seconds) >= s), (1e-9, "ns"))
    v = seconds / scale
    return f"{v:.0f} {unit}" if abs(v) >= 100 else f"{v:.3g} {unit}"


def _kernel_part(name: str, entry: dict, run_seconds: float | None) -> str:
    launches = int(entry.get("launches") or 0)
    seconds = float(entry.get("seconds") or 0.0)
    share = f" {seconds / run_seconds * 100:.0f}% of the run," if run_seconds else ""
    each = f", {_duration(seconds / launches)} each" if launches else ""
    plural = "launch" if launches == 1 else "launches"
    return f"{name}{share} {launches} {plural}{each}"


def _profile_lines(size: dict) -> list[str]:
    """How a correct size was timed: the timer and the run-to-run noise, and
    the GPU time per kernel where the timer records it (cupti, sim; the wall
    timer sees only the whole run). Results from before timers had neither."""
    timer, noise = size.get("timer"), size.get("noise")
    kernels = size.get("kernels") or {}
    lines = []
    if timer is not None or noise is not None:
        how = f"timer {timer}" if timer else "timer unknown"
        if timer == "wall":
            how += " (wall clock per run: an upper bound, host overhead included)"
        if noise is not None:
            how += f", noise {float(noise) * 100:.1f}% (spread of the timed runs)"
        lines.append(f"  {how}")
    if kernels:
        # Shares of the run: the run's time is the span of its kernels (cupti) or
        # their sum (sim), but the size's time can be another statistic of the
        # runs than the per-kernel medians, so never divide by less than their sum.
        total = sum(float(e.get("seconds") or 0.0) for e in kernels.values())
        run_seconds = max(float(size.get("seconds") or 0.0), total) or None
        ordered = sorted(kernels.items(), key=lambda kv: -float(kv[1].get("seconds") or 0.0))
        parts = [_kernel_part(name, entry, run_seconds)
                 for name, entry in ordered[:KERNELS_SHOWN]]
        rest = ordered[KERNELS_SHOWN:]
        if rest:
            rest_s = sum(float(e.get("seconds") or 0.0) for _, e in rest)
            share = f" ({rest_s / run_seconds * 100:.0f}% of the run)" if run_seconds else ""
            parts.append(f"{len(rest)} more kernel(s){share}")
        lines.append("  time per kernel: " + "; ".join(parts))
    return lines


def format_result(result: dict) -> str:
    """Metal-Sci-style result lines of an `Evaluation.to_json()` dict. Sizes
    marked `held_out` are dropped (and any failure text naming them), and phi
    is never shown."""
    cand = result.get("candidate", {})
    sizes = [s for s in result.get("sizes", []) if not s.get("held_out")]
    hidden = [s.get("label", "") for s in result.get("sizes", []) if s.get("held_out")]
    reason = cand.get("fail_reason")
    if reason and any(h and h in reason for h in hidden):
        reason = "a check outside the scored sizes failed"
    if not cand.get("compile_ok", True):
        return f"COMPILE FAILED: {_clip(reason or 'unknown error')}"
    lines = []
    for s in sizes:
        lines.append(_size_line(s))
        if s.get("correct"):
            lines += _profile_lines(s)
    if not sizes:
        lines.append("(no size was evaluated)")
    if any(not s.get("correct") for s in sizes):
        lines.append("(evaluation stops at the first failing size; later sizes were not run)")
    if cand.get("correct") and cand.get("score") is not None:
        noise = cand.get("noise")
        lines.append(f"score (gmean of fraction): {float(cand['score']):.4f}"
                     + ("" if noise is None else f" (noise {float(noise) * 100:.1f}%)"))
    else:
        lines.append("score (gmean of fraction): 0.0000 (rejected: not every size is correct)")
    if reason:
        lines.append(f"fail_reason: {_clip(reason)}")
    return "\n".join(lines)


def format_history_line(record: dict) -> str:
    skipped = record.get("role") == "skipped"
    compile_ok = bool(record.get("compile_ok")) and not skipped
    correct = bool(record.get("correct")) and not skipped
    score = record.get("score")
    shown = f"{float(score):.4f}" if correct and score is not None else "N/A"
    line = (f"iter {record.get('iteration')}: compile={'OK' if compile_ok else 'FAIL'} | "
            f"correct={correct} | score={shown}")
    comparison = record.get("comparison")
    if comparison:   # noise-aware acceptance re-timed it against the incumbent
        if comparison.get("speedup") is None:
            line += " | re-timing failed, not kept"
        else:
            kept = "kept" if comparison.get("accepted") else "not kept"
            line += (f" | re-timed against the incumbent: {float(comparison['speedup']):.3f}x, "
                     f"{comparison.get('verdict')}, {kept}")
    return line


def stagnating(history: list[dict]) -> bool:
    """Metal-Sci's rule: the last 3 correct candidate iterations all scored within
    [0.85 * best, best] (best = the highest score so far, seed included) and
    none of them was a new best."""
    scored = [r for r in history
              if r.get("role") != "skipped" and r.get("correct") and r.get("score") is not None]
    if not scored:
        return False
    best = max(float(r["score"]) for r in scored)
    recent = [r for r in scored if r.get("role") == "candidate"][-STAGNATION_WINDOW:]
    if len(recent) < STAGNATION_WINDOW or best <= 0:
        return False
    return all(STAGNATION_BAND * best <= float(r["score"]) <= best and not r.get("is_new_best")
               for r in recent)


# --- user prompts -------------------------------------------------------------

def _scored_labels(*results) -> list[tuple[str, dict]]:
    seen, out = set(), []
    for res in results:
        for s in (res or {}).get("sizes", []):
            if s.get("held_out") or s.get("label") in seen:
                continue
            seen.add(s.get("label"))
            out.append((s.get("label"), s.get("params") or {}))
    return out


def _brief(task: Task, seed_result: dict, *others) -> str:
    sizes = _scored_labels(seed_result, *others)
    listed = "; ".join(
        f"{label} ({', '.join(f'{k}={v}' for k, v in params.items())})" if params else str(label)
        for label, params in sizes) or "(none reported)"
    unit = "GB/s against the measured memory bandwidth" if task.bound == "bandwidth" \
        else "GFLOPS against the measured FP32 peak"
    where = f"{seed_result.get('backend', '?')} backend, device: {seed_result.get('device', '?')}"
    if seed_result.get("backend") == "sim":
        where += (" (MLX kernels simulated on the CPU: timings rank candidates only roughly, "
                  "correctness is checked as on a GPU)")
    return (f"## Task: {task.name}\n{task.description}\n\n"
            f"Roofline model: {task.model or task.bound}; scored in {unit}.\n"
            f"Scored sizes: {listed}.\n"
            f"Measurements come from the {where}.\n")


def _block(source: str, dialect: str) -> str:
    return f"```{dialects.get(dialect).fence}\n{source.rstrip()}\n```"


def _last_candidate_iteration(history: list[dict]) -> int | None:
    its = [r.get("iteration") for r in history if r.get("role") == "candidate"]
    return its[-1] if its else None


def _stagnation_notice(task: Task) -> str:
    options = [
        "a different mapping of threads to work (one threadgroup per row, line or tile; "
        "several outputs per thread; grid-stride loops over fewer, fuller threadgroups)",
        "cooperative loads of a tile plus halo into threadgroup memory, reused by the group",
        "SIMD-group shuffles and reductions instead of threadgroup memory and barriers",
        "a different data access pattern inside the kernel (vector loads, transposed or "
        "register-blocked traversal, better coalescing)",
        "cheaper arithmetic in the inner loop (hoisted invariants, fma, reduced precision "
        "only where the tolerance clearly allows it)",
        "a different launch shape and param values exposed with `//! param` choices",
    ]
    return ("## Stagnation notice\nThe last few correct attempts all scored close to the best "
            "without beating it: small tweaks of the same design have stopped paying. Switch "
            "to a structurally different approach, for example:\n"
            + "\n".join(f"- {o}" for o in options) + "\n")


def user_prompt(task: Task, dialect: str = "metal", *, iteration: int, seed_source: str,
                seed_result: dict, previous: tuple[str, dict] | None,
                incumbent: tuple[str, dict] | None, history: list[dict],
                stagnation: bool, accept: str = "strict") -> str:
    """The user prompt of one iteration (1-based). Iteration 1 shows the seed;
    later ones show the previous attempt, the incumbent when it differs, the
    last entries of the history and, when asked, the stagnation notice.
    accept: the search's acceptance rule, stated in the instructions."""
    _check_dialect(dialect)
    fence = dialects.get(dialect).fence
    names = ", ".join(f"`{k}`" for k in task.kernel_names)
    if iteration <= 1:
        parts = [
            _brief(task, seed_result),
            "## Baseline: the seed candidate",
            _block(seed_source, dialect),
            "Measured result of the seed:",
            format_result(seed_result),
            "",
            "## Your task",
            "Write a faster candidate that stays correct at every size. The score is the "
            "geometric mean over the sizes of achieved / ceiling, and 0 if any size is "
            f"incorrect. Answer with a short explanation and then one ```{fence} block holding "
            f"the whole candidate file, with the kernels {names} under their exact names.",
        ]
        return "\n".join(parts).rstrip() + "\n"

    prev_res = previous[1] if previous else None
    inc_res = incumbent[1] if incumbent else None
    parts = [_brief(task, seed_result, prev_res, inc_res)]
    last = max(history, key=lambda r: r.get("iteration", -1)) if history else None
    skipped = last is not None and last.get("role") == "skipped"
    if previous is None and not skipped:
        skipped = True   # no previous attempt to show at k >= 2: the proposal yielded nothing
    previous_failed = skipped
    if skipped:
        n = last.get("iteration") if last is not None else iteration - 1
        parts += ["## Your previous attempt",
                  f"Your answer at iteration {n} contained no usable ```{fence} block (or the "
                  "request failed), so nothing was evaluated. Make sure the answer holds exactly "
                  f"one complete ```{fence} block.", ""]
    if previous is not None:
        src, res = previous
        n = _last_candidate_iteration(history)
        title = "## Your most recent evaluated attempt" if skipped else "## Your previous attempt"
        parts += [title + (f" (iteration {n})" if n is not None else ""),
                  _block(src, dialect), "Result:", format_result(res), ""]
        cand = res.get("candidate", {})
        previous_failed = previous_failed or not (cand.get("compile_ok", True)
                                                  and cand.get("correct"))
    if incumbent is not None and (previous is None or incumbent[0].strip() != previous[0].strip()):
        parts += ["## Current best (incumbent)", _block(incumbent[0], dialect), "Result:",
                  format_result(incumbent[1]), ""]
    if history:
        recent = sorted(history, key=lambda r: r.get("iteration", 0))[-HISTORY_LINES:]
        parts += ["## History (iteration 0 is the seed)",
                  *[format_history_line(r) for r in recent], ""]
    if stagnation:
        parts.append(_stagnation_notice(task))
    best_res = inc_res if incumbent is not None else prev_res
    best_score = None
    if best_res and best_res.get("candidate", {}).get("correct"):
        best_score = best_res["candidate"].get("score")
    steps = []
    if previous_failed:
        steps.append("Your previous attempt did not produce a correct result: find and fix the "
                     "cause first (or go back to the incumbent and change it more carefully).")
    rule = ("strictly higher score." if accept == "strict" else
            "strictly higher score and a speedup beyond the timing noise when the two are "
            "re-timed side by side.")
    steps.append("Beat the incumbent" + (f" (score {float(best_score):.4f})"
                                         if best_score is not None else "")
                 + " while staying correct at every size; a candidate replaces it only with a "
                 + rule)
    steps.append(f"Answer with a short explanation and then exactly one ```{fence} block "
                 f"holding the whole candidate file, with the kernels {names} under their "
                 "exact names.")
    parts += ["## Instructions", *[f"{i}. {s}" for i, s in enumerate(steps, 1)]]
    return "\n".join(parts).rstrip() + "\n"
