"""A kernel call's arguments, checked and converted as MLX 0.32 does at call
time: the same exception types (TypeError where MLX's binding refuses a
type, ValueError for its own checks), messages that say which argument and
why. `Call` is what the simulator (or MLX) is then handed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlxsci.fast.definition import KernelDefinition
from mlxsci.kernel import dialects

INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class Call:
    """One call's arguments, converted: inputs as mx.arrays (Python scalars
    as MLX converts them), shapes and launch dimensions as int tuples."""

    inputs: tuple  # mx.array each
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple  # mx.Dtype each
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    template: tuple  # (name, bool | int | mx.Dtype) pairs
    init_value: float | None
    verbose: bool


def _scalar_array(value) -> mx.array:
    """A Python or NumPy scalar as MLX's kernel call converts it: bool ->
    bool, int -> int32 (int64 beyond int32), float and np.float64 ->
    float32, np.int64 -> int64."""
    if isinstance(value, (bool, np.bool_)):
        return mx.array(bool(value))
    if isinstance(value, int):
        dtype = mx.int32 if INT32[0] <= value <= INT32[1] else mx.int64
        return mx.array(value, dtype=dtype)
    if isinstance(value, float):
        return mx.array(value, dtype=mx.float32)
    return mx.array(value)


def _input(dialect: str, name: str, value) -> mx.array:
    if isinstance(value, mx.array):
        return value
    if isinstance(value, (bool, int, float, np.generic)):
        return _scalar_array(value)
    if isinstance(value, np.ndarray):
        return mx.array(value)
    raise ValueError(
        f"{dialects.get(dialect).call_tag} input '{name}': invalid type {type(value).__name__} "
        "(an mx.array, a NumPy array or a Python scalar)"
    )


def _length(dialect: str, what: str, value, n: int) -> list:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            f"{dialects.get(dialect).call_tag} `{what}` must be a list, got {type(value).__name__}"
        )
    items = list(value)
    if len(items) != n:
        raise ValueError(
            f"{dialects.get(dialect).call_tag} Expected `{what}` to have size {n} but got size {len(items)}."
        )
    return items


def _int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _dims(dialect: str, what: str, value) -> tuple[int, int, int]:
    """grid / threadgroup: three ints each below 2^31 (MLX's binding takes a
    C++ tuple<int, int, int>: anything else is its TypeError)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 3:
        raise TypeError(
            f"{dialects.get(dialect).call_tag} `{what}` must be a tuple of three ints, got {value!r}"
        )
    if not all(_int(v) for v in value):
        raise TypeError(
            f"{dialects.get(dialect).call_tag} `{what}` must be a tuple of three ints, got {value!r}"
        )
    dims = tuple(int(v) for v in value)
    if any(v > INT32[1] for v in dims):
        raise TypeError(
            f"{dialects.get(dialect).call_tag} `{what}` {dims}: each dimension must fit a C++ int (< 2^31)"
        )
    return dims  # type: ignore[return-value]


def _shape(dialect: str, output: str, value) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            f"{dialects.get(dialect).call_tag} output shape of '{output}' must be a sequence of ints, "
            f"got {value!r}"
        )
    if not all(_int(d) for d in value):
        raise TypeError(
            f"{dialects.get(dialect).call_tag} output shape of '{output}' must hold ints, got {value!r}"
        )
    shape = tuple(int(d) for d in value)
    if any(d < 0 or d > INT32[1] for d in shape):
        # MLX aborts the whole process on a dimension >= 2^31; refused here.
        raise ValueError(
            f"{dialects.get(dialect).call_tag} output shape of '{output}' {shape}: each dimension "
            "must be in [0, 2^31)"
        )
    return shape


def _template(dialect: str, template) -> tuple:
    if template is None:
        return ()
    if isinstance(template, (str, bytes)) or not isinstance(template, Sequence):
        raise TypeError(
            f"{dialects.get(dialect).template_tag} `template` must be a list of (name, value) pairs"
        )
    pairs = []
    for entry in template:
        if (
            isinstance(entry, (str, bytes))
            or not isinstance(entry, Sequence)
            or len(entry) != 2
            or not isinstance(entry[0], str)
        ):
            raise TypeError(
                f"{dialects.get(dialect).template_tag} `template` must be a list of (name, value) pairs, "
                f"got {entry!r}"
            )
        name, value = entry
        in_range = (
            isinstance(value, bool) or not isinstance(value, int) or INT32[0] <= value <= INT32[1]
        )
        if not isinstance(value, (bool, int, mx.Dtype)) or not in_range:
            raise ValueError(
                f"{dialects.get(dialect).template_tag} Invalid template argument. Must be "
                f"`mlx.core.Dtype`, `int` or `bool`. ({name!r} is {type(value).__name__})"
            )
        pairs.append((name, value))
    return tuple(pairs)


def _stream(dialect: str, stream) -> None:
    """MLX runs custom kernels only on a GPU stream: a CPU stream or device
    is its ValueError (here too, so a test that passes one fails alike)."""
    if stream is None:
        return
    device = stream.device if isinstance(stream, mx.Stream) else stream
    if isinstance(device, mx.DeviceType):
        kind = device
    elif isinstance(device, mx.Device):
        kind = device.type
    else:
        raise TypeError(
            f"{dialects.get(dialect).call_tag} `stream` must be None, an mx.Stream or an mx.Device, "
            f"got {type(stream).__name__}"
        )
    if kind != mx.gpu:
        raise ValueError(f"{dialects.get(dialect).call_tag} Only supports the GPU.")


def check_call(
    d: KernelDefinition,
    inputs,
    output_shapes,
    output_dtypes,
    grid,
    threadgroup,
    template=None,
    init_value=None,
    verbose=False,
    stream=None,
) -> Call:
    """The converted Call, or the error MLX raises for these arguments."""
    dialect = d.dialect
    given = _length(dialect, "inputs", inputs, len(d.input_names))
    arrays = tuple(_input(dialect, n, v) for n, v in zip(d.input_names, given))
    shapes = _length(dialect, "output_shapes", output_shapes, len(d.output_names))
    dtypes = _length(dialect, "output_dtypes", output_dtypes, len(d.output_names))
    for name, dt in zip(d.output_names, dtypes):
        if not isinstance(dt, mx.Dtype):
            raise TypeError(
                f"{dialects.get(dialect).call_tag} output dtype of '{name}' must be an mx.Dtype "
                f"(mx.float32, ...), got {dt!r}"
            )
    if init_value is not None and (
        isinstance(init_value, (bool, np.bool_))
        or not isinstance(init_value, (int, float, np.number))
    ):
        raise TypeError(
            f"{dialects.get(dialect).call_tag} `init_value` must be a float or None, got {init_value!r}"
        )
    if not isinstance(verbose, bool):
        raise TypeError(f"{dialects.get(dialect).call_tag} `verbose` must be a bool")
    _stream(dialect, stream)
    return Call(
        inputs=arrays,
        output_shapes=tuple(_shape(dialect, n, s) for n, s in zip(d.output_names, shapes)),
        output_dtypes=tuple(dtypes),
        grid=_dims(dialect, "grid", grid),
        threadgroup=_dims(dialect, "threadgroup", threadgroup),
        template=_template(dialect, template),
        init_value=None if init_value is None else float(init_value),
        verbose=verbose,
    )
