"""Reads the language leaves undefined, as the simulator saw them, and the
words a verdict gives them.

The simulator's runtime counts every SIMD/warp read it answers with poison
(a shuffle or broadcast from a lane that is not at the call, or from a lane
id that does not exist; runtime/sim_runtime.h, __sim_undefined_read) and
names the first one. A GPU returns *some* value there (often the source
lane's stale register), so a kernel that depends on one may pass on one GPU
and fail on another; on the simulator it reads NaN and fails as a bare
"max_abs=inf". This module turns the record into a sentence that says why.

A record, as the worker sends it (mlxsci.worker.serve) and the backend keeps
it (mlxsci.backends.sim):

    {"count": N, "first": {"op": "simd_shuffle", "reason": "diverged",
     "lane": 21, "aux": 0, "group": [2, 0, 0], "thread": [5, 0, 0]}}

The parent reads it from a worker, whose process ran the candidate's code:
`clean` keeps only a record of exactly that shape and those ranges, and the
text is made from the cleaned values alone (the op name must be an
identifier), so nothing the worker wrote reaches a verdict unchecked.
"""

from __future__ import annotations

import re
from typing import TypeGuard

# Why the first read was undefined (abi.UB_REASONS, the runtime's __SIM_UB_*):
# the source lane's thread was at another SIMD operation or barrier, had
# finished, did not exist, was no lane id, or was not in the CUDA mask.
REASONS = ("diverged", "returned", "absent", "invalid_lane", "outside_mask")

# Integer fields: counts and lane ids are int64 in the runtime, thread and
# group coordinates uint32 (or -1 where the runtime knew no thread).
_INT64 = 1 << 63
_COORD = 1 << 32
_OP = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}", re.ASCII)

# The flag of a size whose checked run read undefined values.
FLAG = "undefined_read"


def merge(seen: dict | None, new: dict | None) -> dict | None:
    """Two records as one: the counts summed, the earlier first read kept."""
    if not new:
        return seen
    if not seen:
        return {"count": new["count"], "first": dict(new["first"])}
    return {"count": min(seen["count"] + new["count"], _INT64 - 1), "first": seen["first"]}


def _int(x, lo: int, hi: int) -> bool:
    return type(x) is int and lo <= x < hi


def _coords(x) -> TypeGuard[list]:
    return isinstance(x, list) and len(x) == 3 and all(_int(c, -1, _COORD) for c in x)


def clean(record) -> dict | None:
    """`record` as a fresh record of plain values when it has exactly the
    shape above (known reason, identifier op, integers in range), else None:
    a malformed record is dropped, never quoted and never an exception."""
    if not isinstance(record, dict):
        return None
    count, first = record.get("count"), record.get("first")
    if not _int(count, 1, _INT64) or not isinstance(first, dict):
        return None
    op, reason = first.get("op"), first.get("reason")
    if not isinstance(op, str) or not _OP.fullmatch(op) or reason not in REASONS:
        return None
    lane, aux = first.get("lane"), first.get("aux")
    if not _int(lane, -_INT64, _INT64) or not _int(aux, -_INT64, _INT64):
        return None
    group, thread = first.get("group"), first.get("thread")
    if not _coords(group) or not _coords(thread):
        return None
    return {
        "count": count,
        "first": {
            "op": op,
            "reason": reason,
            "lane": lane,
            "aux": aux,
            "group": list(group),
            "thread": list(thread),
        },
    }


def _is_cuda(op: str) -> bool:
    # The CUDA warp functions are __shfl*_sync; Metal's are simd_* and quad_*.
    return op.startswith("__")


def _why(first: dict, cuda: bool) -> str:
    """The clause on the source lane: which lane, and why its value is undefined."""
    lane, aux, reason = first["lane"], first["aux"], first["reason"]
    unit = "warp" if cuda else "simdgroup"
    # The simulator runs a lane that skips the call on to its next SIMD
    # operation or barrier ("diverged"), or to its end ("returned"): either
    # way it did not execute the call, which is what makes the read undefined.
    if reason == "diverged":
        return (
            f"lane {lane}, which was not active at that call (its thread was elsewhere in "
            "the kernel: it had taken another branch)"
        )
    if reason == "returned":
        return (
            f"lane {lane}, which was not active at that call (its thread did not execute it: "
            "it had taken another branch and run to its end, or returned)"
        )
    if reason == "absent":
        return (
            f"lane {lane}, which no thread has: that {unit} has only {aux} thread(s) "
            f"(a partial {unit} at the end of the {'block' if cuda else 'threadgroup'})"
        )
    if reason == "invalid_lane":
        return f"lane {lane}, which is not a valid lane id (the operation has lanes 0..{aux - 1})"
    # outside_mask: CUDA only
    return (
        f"lane {lane}, which its mask 0x{aux & 0xFFFFFFFF:08x} does not name (a shuffle reads "
        "only lanes of its mask that execute it)"
    )


def describe(record: dict) -> str:
    """A cleaned record (`clean`) as the clause a verdict appends after "the
    kernel read values the language leaves undefined: ", in its dialect's
    words (told by the operation's name)."""
    first = record["first"]
    op = first["op"]
    cuda = _is_cuda(op)
    group_word = "block" if cuda else "threadgroup"
    group, thread = tuple(first["group"]), tuple(first["thread"])
    who = (
        f"thread {thread} of {group_word} {group}"
        if min(group + thread) >= 0
        else "a thread"  # the runtime knew no thread (never so for a resolver's lane)
    )
    language = "CUDA" if cuda else "Metal"
    count = record["count"]
    more = f"; {count} such reads in that run" if count > 1 else ""
    return (
        f"{op} by {who} read {_why(first, cuda)}; {language} leaves such a read undefined, "
        "so a GPU may return some value by chance (often the lane's stale register) and the "
        "kernel may pass on one GPU and fail on another; the simulator returns NaN (all "
        f"ones for an integer){more}. {_fix(first['reason'], cuda)}"
    )


def _fix(reason: str, cuda: bool) -> str:
    """What makes such a read defined, so the author (or a model) can act."""
    unit = "warp" if cuda else "simdgroup"
    if reason in ("diverged", "returned"):
        return (
            f"Call it where every lane it reads executes it (before the branch or early "
            f"return, every lane of the {unit} together), and select the value afterwards"
        )
    if reason == "absent":
        return (
            f"Read only lanes that exist (a {unit} at the grid's edge can be partial), or "
            "keep every thread alive up to the call"
        )
    if reason == "invalid_lane":
        return "Keep lane ids within the operation's lanes"
    return "Name every lane it reads in the mask, and have them all execute the call"


LEAD = "the kernel read values the language leaves undefined: "


# ---- threadgroup / __shared__ memory read before it was written
# The simulator fills that memory with poison (NaN) before each group. Where
# the verified outputs hold a NaN, the worker runs once more with it
# zero-filled (mlxsci.worker.serve.unwritten_threadgroup_run) and sends
# result["unwritten_threadgroup"] = {"outputs_change": bool}: a change says
# the NaN came from memory read before it was written.
THREADGROUP_FLAG = "threadgroup_read_before_write"


def threadgroup_outputs_change(record) -> bool:
    """Whether the worker's record says the outputs changed with the other
    fill: only a dict whose "outputs_change" is exactly True says so."""
    return isinstance(record, dict) and record.get("outputs_change") is True


def threadgroup_text(cuda: bool) -> str:
    """The clause a failed size's verdict gets for it, in the dialect's words."""
    memory, language = ("__shared__", "CUDA") if cuda else ("threadgroup", "Metal")
    return (
        f"the result depends on {memory} memory read before it was written in the launch "
        f"(with that memory zero-filled instead of NaN the outputs changed); {language} "
        "leaves such memory undefined, so a GPU may hold zeros or an earlier group's values "
        "there by chance and the kernel may pass on one GPU and fail on another. Write every "
        "element before any thread reads it, with a barrier between"
    )
