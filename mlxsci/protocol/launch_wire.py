"""One kernel launch as it crosses between a caller and a worker (mlxsci.fast's isolated calls).

The caller (mlxsci/fast/isolated.py) sends a launch as one JSON line of the
worker protocol (mlxsci/worker/serve.py) and its inputs' bytes as a file,
INPUTS_FILE, which it writes into the launch's job folder before handing
the line over (`write_new_file`: through the folder's descriptor, never
following a link, never over a file already there); the worker
(mlxsci/backends/sim/launch_job.py) runs the launch and answers with
result.json and, after a clean launch, the file of its outputs. Both sides
use what is here:

- an input is a slice of INPUTS_FILE (its elements' bytes, bfloat16 as its
  uint16 bits) with its MLX dtype, its shape and a layout (`Inputs`):
  "contiguous"  row-major elements;
  "stored"      an input bound as it is laid out (ensure_row_contiguous=False)
                that is not row-contiguous: the bytes its strides reach (its
                span), its strides in elements and the offset of element 0
                in the span, from which the worker makes the same strided
                view;
  "copied"      the row-major elements of an input the caller holds in some
                other layout: the worker hands the kernel a view that is not
                contiguous either, so that a kernel's write to it is kept
                from the caller in both places alike (the simulator copies
                writes back into contiguous inputs only);
- a fault's details travel tagged (`encode_value`), so its tuples (a thread,
  a group) come back as tuples: JSON knows only lists;
- the worker's outputs come back as an .npz the caller reads as hostile
  input (`read_arrays`): only the members it expects, stored uncompressed,
  of exactly the dtype and shape the call asked for, never unpickled.

Nothing here imports MLX: the worker and the caller make their arrays.
"""

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from mlxsci.kernel.signature import METAL_TYPES

# The file of a launch's inputs in its job folder.
INPUTS_FILE = "inputs.bin"
LAYOUTS = ("contiguous", "stored", "copied")
ALIGN = 64
# The most an .npy member's header may add to its data, and how deep a
# fault's details may nest.
NPY_HEADER_BYTES = 64 * 1024
MAX_DEPTH = 8
_INT64 = 1 << 64


class BadAnswer(ValueError):
    """What a worker sent is not an answer to the launch it was asked for."""


def host_dtype(name: str) -> np.dtype:
    """The NumPy dtype an array of MLX dtype `name` travels as (bfloat16 as
    its uint16 bits)."""
    if name not in METAL_TYPES:
        raise BadAnswer(f"unknown dtype {name!r}")
    return np.dtype(np.uint16) if name == "bfloat16" else np.dtype(name)


def row_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of a row-contiguous array of `shape`."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def span_elements(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """(elements the strided view's span holds, element 0's offset in it)."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    return hi - lo + 1, -lo


class Inputs:
    """A launch's inputs as the caller packs them: `entries` for the launch
    line, `chunks` the bytes of INPUTS_FILE, in order."""

    def __init__(self):
        self.entries: list[dict] = []
        self.chunks: list[np.ndarray] = []
        self.nbytes = 0

    def _add(self, entry: dict, chunk: np.ndarray) -> None:
        pad = -self.nbytes % ALIGN  # each input's bytes aligned, as in a fresh buffer
        if pad:
            self.chunks.append(np.zeros(pad, np.uint8))
            self.nbytes += pad
        chunk = np.ascontiguousarray(chunk)
        self.entries.append(dict(entry, at=self.nbytes, nbytes=chunk.nbytes))
        self.chunks.append(chunk)
        self.nbytes += chunk.nbytes

    def add(self, dtype: str, host: np.ndarray) -> None:
        """An input of MLX dtype `dtype`, its elements in row order:
        "contiguous" where `host` (the array as NumPy sees it, uint16 for
        bfloat16) is, else "copied"."""
        layout = "contiguous" if host.flags.c_contiguous else "copied"
        self._add({"dtype": dtype, "shape": [int(n) for n in host.shape], "layout": layout}, host)

    def add_span(
        self, dtype: str, shape: tuple, span: np.ndarray, offset: int, strides: tuple
    ) -> None:
        """An input bound as laid out that is not row-contiguous: the bytes
        its strides reach (`span`), element 0's offset in the span and the
        strides, in elements (mlxsci.backends.sim.buffers.stored_span)."""
        entry = {
            "dtype": dtype,
            "shape": [int(n) for n in shape],
            "layout": "stored",
            "strides": [int(s) for s in strides],
            "offset": int(offset),
        }
        self._add(entry, span)


def write_new_file(dir_fd: int, name: str, chunks: list) -> None:
    """Write `chunks` (buffers) to a new file `name` in the folder held by
    `dir_fd`: never following a link, never over a file already there (a
    worker can write that folder). OSError where it cannot."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Packed:
    """An input as it arrived: `data` its elements (or its span) as a 1-D
    read-only array of the travel dtype."""

    dtype: str
    shape: tuple[int, ...]
    layout: str
    data: np.ndarray
    strides: tuple[int, ...] = ()
    offset: int = 0


def _dims(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 32:
        raise BadAnswer(f"{what}: not a list of at most 32 ints")
    if not all(type(n) is int and -(1 << 62) < n < 1 << 62 for n in value):
        raise BadAnswer(f"{what}: not a list of ints")
    return tuple(value)


def unpack_array(entry, blob) -> Packed:
    """An input of a launch line, its bytes taken from `blob` (INPUTS_FILE's
    contents), checked: they agree with its dtype, shape and layout."""
    if not isinstance(entry, dict) or entry.get("layout") not in LAYOUTS:
        raise BadAnswer("an input without a known layout")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str):
        raise BadAnswer("an input without a dtype")
    travel = host_dtype(dtype)
    shape = _dims(entry.get("shape"), "shape")
    if any(n < 0 for n in shape):
        raise BadAnswer("a negative dimension")
    at, nbytes = entry.get("at"), entry.get("nbytes")
    if not (type(at) is int and type(nbytes) is int and 0 <= at and 0 <= nbytes):
        raise BadAnswer("an input without its place in the inputs' file")
    if at + nbytes > len(blob) or nbytes % travel.itemsize:
        raise BadAnswer("an input's bytes are not in the inputs' file")
    data = np.frombuffer(blob, travel, nbytes // travel.itemsize, at)
    size = math.prod(shape)
    layout = entry["layout"]
    if layout != "stored":
        if data.size != size:
            raise BadAnswer(f"an input of shape {shape} with {data.size} elements")
        if layout == "copied" and size < 2:
            raise BadAnswer("a copied input of fewer than two elements")
        return Packed(dtype, shape, layout, data)
    strides = _dims(entry.get("strides"), "strides")
    offset = entry.get("offset")
    if len(strides) != len(shape) or type(offset) is not int or size == 0:
        raise BadAnswer("a stored input's strides or offset")
    elements, first = span_elements(shape, strides)
    if data.size != elements or offset != first:
        raise BadAnswer("a stored input's span does not match its strides")
    return Packed(dtype, shape, layout, data, strides, offset)


# ---- values: a fault's details, tuples kept
def encode_value(value, depth: int = 0):
    """`value` (None, bool, int, float, str, and tuples, lists and dicts of
    them) as JSON data, containers tagged; anything else as its text."""
    if depth > MAX_DEPTH:
        return "..."
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (tuple, list)):
        tag = "tuple" if isinstance(value, tuple) else "list"
        return [tag, [encode_value(v, depth + 1) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[str(k), encode_value(v, depth + 1)] for k, v in value.items()]]
    return str(value)


def decode_value(data, depth: int = 0):
    """encode_value's value back, from hostile data (BadAnswer)."""
    if depth > MAX_DEPTH:
        raise BadAnswer("details nested too deep")
    if data is None or isinstance(data, (bool, str, float)):
        return data
    if type(data) is int:
        if not -_INT64 < data < _INT64:
            raise BadAnswer("an integer out of range in the details")
        return data
    if isinstance(data, list) and len(data) == 2 and isinstance(data[1], list):
        tag, items = data
        if tag == "tuple":
            return tuple(decode_value(v, depth + 1) for v in items)
        if tag == "list":
            return [decode_value(v, depth + 1) for v in items]
        if tag == "dict":
            out = {}
            for pair in items:
                if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise BadAnswer("a malformed entry in the details")
                out[pair[0]] = decode_value(pair[1], depth + 1)
            return out
    raise BadAnswer("malformed details")


# ---- the worker's outputs
def read_arrays(
    path: Path, expected: dict[str, tuple[np.dtype, tuple[int, ...]]], required: set[str]
) -> dict[str, np.ndarray]:
    """The arrays of the .npz at `path` (a copy the caller made, bounded in
    size), each of the dtype and shape `expected` gives by name: every name
    of `required`, any other of `expected`, nothing else. Members must be
    stored uncompressed (no archive unpacks beyond its own size) and are
    read by their .npy headers, never unpickled. BadAnswer otherwise."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            names = [i.filename for i in infos]
            if len(set(names)) != len(names):
                raise BadAnswer("the outputs' archive names a member twice")
            found: dict[str, np.ndarray] = {}
            for info in infos:
                name = info.filename.removesuffix(".npy")
                if not info.filename.endswith(".npy") or name not in expected:
                    raise BadAnswer(f"the outputs' archive holds {info.filename[:64]!r}")
                dtype, shape = expected[name]
                nbytes = dtype.itemsize * math.prod(shape)
                if info.compress_type != zipfile.ZIP_STORED:
                    raise BadAnswer(f"{name} is compressed")
                if info.file_size > nbytes + NPY_HEADER_BYTES:
                    raise BadAnswer(f"{name} is larger than its array")
                found[name] = _read_npy(archive, info, name, dtype, shape, nbytes)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise BadAnswer(f"the outputs' archive cannot be read: {exc}") from exc
    missing = sorted(required - set(found))
    if missing:
        raise BadAnswer(f"no {', '.join(missing)} among the outputs")
    return found


def _read_npy(archive, info, name: str, dtype: np.dtype, shape: tuple, nbytes: int) -> np.ndarray:
    with archive.open(info) as member:
        try:
            version = npy_format.read_magic(member)
            if version == (1, 0):
                header = npy_format.read_array_header_1_0(member)
            elif version == (2, 0):
                header = npy_format.read_array_header_2_0(member)
            else:
                raise BadAnswer(f"{name}: .npy version {version}")
        except ValueError as exc:
            raise BadAnswer(f"{name}: not an .npy array: {exc}") from exc
        got_shape, fortran, got_dtype = header
        if got_dtype != dtype or tuple(got_shape) != tuple(shape) or fortran:
            raise BadAnswer(
                f"{name} came back as {got_dtype} {tuple(got_shape)}"
                f"{' (Fortran order)' if fortran else ''} where the call asked for "
                f"{dtype} {tuple(shape)}"
            )
        data = member.read(nbytes + 1)
    if len(data) != nbytes:
        raise BadAnswer(f"{name} holds {len(data)} bytes where its array has {nbytes}")
    return np.frombuffer(data, dtype).reshape(shape)


def clean_text(text, limit: int) -> str:
    """A worker's text for a message: at most `limit` characters, control
    characters but newlines and tabs shown as '?' (no terminal escapes)."""
    if not isinstance(text, str):
        return ""
    if len(text) > limit:
        text = text[:limit] + f" [... {len(text) - limit} characters left out]"
    return "".join(c if c in "\n\t" or (c >= " " and c != "\x7f") else "?" for c in text)
