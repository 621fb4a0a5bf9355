"""What kind of kernel a candidate is: the features the map-elites archive is keyed by.

Read from the candidate's text and its evaluation, never by running anything:
- memory: whether a kernel body declares threadgroup (Metal) or `__shared__`
  (CUDA) memory;
- vector: the widest floating-point vector type the bodies use (scalar,
  x2, x4; integer vectors are mostly thread positions and are not counted);
- threads: the threadgroup size class of the largest literal threadgroup
  (up to 64, 65-256, above 256; `expr` when no kernel's is all literals);
- hot: where a task has several kernels, the kernel that took the largest
  share of the measured time (summed over the scored sizes).

A cell's key is these as `name=value` words joined by spaces; its order is
the order above, so keys sort into a stable table. A text the parser does
not read falls in the cell of what can be read of it, never an exception:
the candidate is someone's output.
"""

from __future__ import annotations

import ast
import re

from mlxsci.kernel import dialects
from mlxsci.kernel.candidate import CandidateError, parse

AXES = ("memory", "vector", "threads", "hot")
# Data vectors only: an index vector (uint2 of a thread position) says nothing of loads.
_VECTOR = re.compile(r"\b(?:float|half|bfloat|double|__half|__nv_bfloat)([234])\b")
THREAD_CLASSES = ((64, "<=64"), (256, "65-256"))  # above: ">256"


def memory_of(bodies: str, dialect: str) -> str:
    try:
        declaration = dialects.get(dialect).group_memory_declaration
    except ValueError:  # a result naming no dialect we know: read as Metal
        declaration = dialects.get("metal").group_memory_declaration
    return "shared" if re.search(declaration, bodies) else "none"


def vector_of(bodies: str) -> str:
    widths = [int(m.group(1)) for m in _VECTOR.finditer(bodies)]
    widest = max(widths, default=1)
    return "scalar" if widest == 1 else "x2" if widest == 2 else "x4"


def threads_of(threadgroups: list[str | None]) -> str:
    sizes = []
    for expr in threadgroups:
        size = _literal_product(expr)
        if size is not None:
            sizes.append(size)
    if not sizes:
        return "expr"
    largest = max(sizes)
    for limit, name in THREAD_CLASSES:
        if largest <= limit:
            return name
    return ">256"


def _literal_product(expr: str | None) -> int | None:
    """The product of a threadgroup tuple of integer literals, else None."""
    if not expr:
        return None
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # someone's text
        return None
    if not isinstance(node, ast.Tuple) or not node.elts:
        return None
    product = 1
    for e in node.elts:
        if not (isinstance(e, ast.Constant) and type(e.value) is int and e.value > 0):
            return None
        product *= e.value
    return product


def hot_kernel(result: dict, kernels: tuple[str, ...]) -> str | None:
    """The kernel with the largest share of the measured seconds (None with
    fewer than two kernels, or no per-kernel times)."""
    if len(kernels) < 2:
        return None
    totals: dict[str, float] = {}
    for size in result.get("sizes") or []:
        for name, timing in (size.get("kernels") or {}).items():
            seconds = timing.get("seconds") if isinstance(timing, dict) else None
            if name in kernels and isinstance(seconds, (int, float)):
                totals[name] = totals.get(name, 0.0) + float(seconds)
    return max(sorted(totals), key=lambda n: totals[n]) if totals else None


def features(source: str, result: dict, kernels: tuple[str, ...] = ()) -> dict[str, str]:
    """The features of a candidate (its text) and its evaluation (result)."""
    dialect = result.get("dialect") or "metal"
    try:
        cand = parse(source, dialect)
        bodies = "\n".join(k.body for k in cand.kernels) + "\n" + (cand.header or "")
        threadgroups = [k.threadgroup for k in cand.kernels]
    except (CandidateError, ValueError):
        bodies, threadgroups = source, []
    out = {
        "memory": memory_of(bodies, dialect),
        "vector": vector_of(bodies),
        "threads": threads_of(threadgroups),
    }
    hot = hot_kernel(result, kernels)
    if hot is not None:
        out["hot"] = hot
    return out


def cell_of(source: str, result: dict, kernels: tuple[str, ...] = ()) -> str:
    """The archive cell's key of a candidate: `memory=shared vector=x4 ...`."""
    found = features(source, result, kernels)
    return " ".join(f"{axis}={found[axis]}" for axis in AXES if axis in found)


def parse_cell(key: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in key.split() if "=" in part)


def describe_cell(key: str) -> str:
    """A cell in words, as a prompt names it."""
    f = parse_cell(key)
    words = [
        "threadgroup memory" if f.get("memory") == "shared" else "no threadgroup memory",
        {"scalar": "scalar loads", "x2": "2-wide vectors", "x4": "4-wide vectors"}.get(
            f.get("vector", ""), "vectors unknown"
        ),
        "threadgroup size not literal"
        if f.get("threads") == "expr"
        else f"{f.get('threads', '?')} threads per threadgroup",
    ]
    if f.get("hot"):
        words.append(f"most time in {f['hot']}")
    return ", ".join(words)
