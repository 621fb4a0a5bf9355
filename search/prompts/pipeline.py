"""The task's host pipeline as the search prompts describe it, read off a dry run.

`pipeline_info(task)` runs the task's `run` at the smoke sizes and the first
in-distribution size with a stand-in `launch` that records what each kernel is
given and returns lazy zero arrays (never evaluated), and reads off that trace:

- the kernels in launch order and how often the period repeats, in words;
- the dtypes and shapes the host really passes each kernel, from which
  search/prompts/contract.py generates the exact signatures MLX wraps a body in;
- what feeds what (ping-pong, counters, producer -> consumer), by object
  identity of the arrays handed between launches;
- buffer shapes written symbolically (`(NY, NX)`), by matching the dry runs at
  several sizes against the sizes' integer parameters.

It is separate from the prompt text because it is analysis, not wording: it
knows the Task and MLX arrays, and nothing about prompts or dialects. Held-out
sizes are never traced (`_trace_sizes` reads only the smoke and in-dist sets).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlxsci.kernel.signature import ArgInfo, dtype_name
from mlxsci.task import KernelContract, Task

__all__ = ["pipeline_info", "PipelineInfo", "KernelInfo"]


class _Done(Exception):
    """Stops a dry run early (too many launches)."""


@dataclass
class _Launch:
    kernel: str
    inputs: dict  # name -> array object passed
    outputs: dict  # name -> array object returned


@dataclass
class _Trace:
    params: dict
    host: dict  # name -> array object of the task's inputs
    launches: list  # [_Launch]
    specs: dict  # kernel -> (input ArgInfos, output (shape, dtype) dict)
    complete: bool  # False when the dry run was cut short (launch counts unknown)


def _dry_run(task: Task, params: dict, max_launches: int = 400) -> _Trace:
    """Run the task's host pipeline with a stand-in `launch` that records what
    each kernel is given and returns (lazy, never evaluated) zero arrays."""
    host = {k: mx.array(np.asarray(v)) for k, v in task.make_inputs(params).items()}
    launches: list[_Launch] = []
    specs: dict = {}

    def launch(name: str, inputs: dict, outputs: dict) -> dict:
        contract = task.kernel(name)
        given = {n: inputs[n] for n in contract.inputs}
        if name not in specs:
            infos = [
                ArgInfo(dtype_name(a.dtype), tuple(int(d) for d in a.shape))
                for a in (
                    given[n] if hasattr(given[n], "shape") else np.asarray(given[n])
                    for n in contract.inputs
                )
            ]
            specs[name] = (
                infos,
                {n: (tuple(outputs[n][0]), outputs[n][1]) for n in contract.outputs},
            )
        made = {
            n: mx.zeros(
                tuple(outputs[n][0]),
                dtype=mx.bool_ if outputs[n][1] == "bool" else getattr(mx, outputs[n][1]),
            )
            for n in contract.outputs
        }
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
    chosen: list[dict] = []
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
class KernelInfo:
    """One kernel as the traced pipeline uses it."""

    contract: KernelContract
    infos: list  # ArgInfo per input, at the first traced size
    out_shapes: dict  # output -> (shape, dtype) at the first traced size
    shapes: dict  # buffer name -> symbolic shape text
    feeds: dict  # input name -> description of where it comes from
    launches_per_run: str  # e.g. "once per step (n_steps times)"


@dataclass
class PipelineInfo:
    """The traced pipeline: launch order, repetition, and each launched kernel."""

    order: list  # kernel names in launch order within one period
    repeat: str  # how often the period repeats, in words
    kernels: dict  # name -> KernelInfo


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
        k, f"{k}th most recent"
    )


def _feeds(trace: _Trace, kernel: str) -> dict:
    """For the last launch of `kernel`: where each input came from."""
    idx = max(i for i, l in enumerate(trace.launches) if l.kernel == kernel)
    first = min(i for i, l in enumerate(trace.launches) if l.kernel == kernel)
    last, first_launch = trace.launches[idx], trace.launches[first]
    out = {}
    for name, arr in last.inputs.items():
        host_name = next((h for h, a in trace.host.items() if a is arr), None)
        if host_name is not None:
            out[name] = (
                "the task's input" if host_name == name else f"the task's input {host_name}"
            ) + " (the same at every launch)"
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


# One analysis per Task object (a search asks for it at every prompt); the entry
# keeps the task itself so that a reused id() of a collected task never matches.
_PIPELINES: dict = {}


def pipeline_info(task: Task) -> PipelineInfo:
    """The task's pipeline, read off dry runs at the smoke sizes and the first
    in-distribution size (cached per Task object)."""
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
            ip = int_params[: len(usable)] if len(usable) == len(per_size) else int_params[:1]
            usable = usable if len(usable) == len(per_size) else [base]
            syms = [_symbolic_dim([s[d] for s in usable], ip) for d in range(len(base))]
            dims = [x for x in syms if x is not None]
            if len(dims) == len(syms):
                shapes[name] = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
            else:
                shapes[name] = (
                    "("
                    + ", ".join(str(x) for x in base)
                    + ("," if len(base) == 1 else "")
                    + ") at a small test size"
                )
        counts = [sum(1 for l in t.launches if l.kernel == contract.name) for t in full]
        kernels[contract.name] = KernelInfo(
            contract,
            infos,
            outs,
            shapes,
            _feeds(main, contract.name),
            _repeat_words(counts, full_params) if main.complete else unknown,
        )
    info = PipelineInfo(order, repeat, kernels)
    _PIPELINES[key] = (task, info)
    return info
