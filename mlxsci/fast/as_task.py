"""`mlxsci.task_from_kernel`: a `mlxsci.fast` kernel and a NumPy reference as a task.

    task = mlxsci.task_from_kernel(
        kernel,                                   # mlxsci.fast.metal_kernel(...)'s
        reference=reference,                      # (inputs, size) -> {output: array}
        make_inputs=make_inputs,                  # (size, seed) -> {input: array}
        sizes={"smoke": {"rows": 7, "cols": 333}, "in-dist": [...], "held-out": {...}},
        grid=("rows * THREADS", 1, 1), threadgroup=("THREADS", 1, 1),
        template=[("THREADS", 256)],
        output_shapes=[("rows", "cols")], output_dtypes=[mx.float32],
    )
    mlxsci.evaluate(task, backend="sim", size_set="smoke")
    mlxsci.search.run(task, "autotune", iterations=4, backend="sim", out="results/softmax")

The result is a Task like any other: the kernel's own source is its seed,
its one kernel's contract is the kernel's inputs and outputs, and a run is
one launch. An evaluation runs each candidate in a sandboxed worker process
that loads the task by its folder, and a search may be resumed by another
process, so the task is written as a task folder (the shape of
examples/conv1d) in the cache, `<cache>/tasks/<name>-<digest>/`, the digest
covering every argument and the source files of the functions given:

- seed.metal (or seed.cu): the kernel as a candidate (its template ints are
  `//! param`s, its dtype template arguments typedefs in the header);
- task.py: the contract, sizes and roofline model, and make_inputs (with the
  other functions the worker calls) imported by module and qualified name
  (load_function);
- reference.py: the reference and the tolerance, imported the same way by
  the trusted side alone; it imports nothing of mlxsci.

Functions are therefore refused unless another process can import them by
name (no lambdas, closures or functions of the script being run). The worker
may read the package (or the single module file) each of its functions comes
from, nothing else of yours (Task.code_paths). Each function's source file is
recorded by digest, and a task whose file changed since refuses to load:
call task_from_kernel again, which makes a new folder.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import pprint
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from mlxsci.kernel import dialects, launch_expr
from mlxsci.kernel.candidate import CandidateError, parse
from mlxsci.kernel.launch_limits import check_launch
from mlxsci.kernel.signature import CUDA_TYPES, METAL_TYPES, dtype_name
from mlxsci.kernel.spec import KernelFault
from mlxsci.kernel.validate import validate
from mlxsci.storage.cache import atomic_write_bytes, cache_dir
from mlxsci.task import SIZE_SETS, KernelContract, Size, Task, load_task, task_names

__all__ = ["task_from_kernel", "kernel_task", "load_function", "function_ref"]

# A dtype template argument becomes a typedef of this type in the seed's header.
TYPE_NAMES = {"metal": METAL_TYPES, "cuda": CUDA_TYPES}
BOUNDS = ("bandwidth", "compute")
# The functions only the trusted side calls (reference.py's): the worker needs not read them.
REFERENCE_SIDE = ("reference", "tolerance")


# -------------------------------------------------------------- functions by name


def function_ref(fn, what: str) -> dict:
    """How another process imports `fn`: its module and qualified name, the
    place its top-level package (or module file) was imported from, and the
    digest of its module's file. ValueError, saying what to do, for a function
    no other process can import by name."""
    if not callable(fn):
        raise TypeError(f"{what} must be a function, got {type(fn).__name__}")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    label = f"{what}={getattr(fn, '__name__', fn)!r}"
    how = (
        "evaluations run in other processes (the sandboxed worker makes the inputs, the "
        "parent computes the reference), which import each function by its module and "
        "name: define it at the top level of a module of yours (e.g. myproject/"
        "reference.py) and pass that function"
    )
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise ValueError(f"{label} has no module and name to import it by; {how}")
    if "<lambda>" in qualname:
        raise ValueError(f"{label} is a lambda; {how}")
    if "<locals>" in qualname:
        raise ValueError(f"{label} is defined inside a function ({qualname}); {how}")
    if module == "__main__":
        raise ValueError(
            f"{label} is defined in the script being run (__main__), which another process "
            f"cannot import without running the script again; {how}"
        )
    found = sys.modules.get(module)
    file = getattr(found, "__file__", None)
    if found is None or not file or not os.path.isfile(file):
        raise ValueError(f"{label}: its module {module!r} has no source file here; {how}")
    obj: object = found
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        raise ValueError(
            f"{label}: {module}.{qualname} is not this function (it was redefined, "
            f"wrapped or is a functools.partial); {how}"
        )
    top = sys.modules.get(module.partition(".")[0])
    paths = getattr(top, "__path__", None)
    if paths is not None:
        location = [os.path.realpath(p) for p in paths]
    else:
        location = [os.path.realpath(getattr(top, "__file__", None) or file)]
    file = os.path.realpath(file)
    if not any(file == p or file.startswith(p.rstrip(os.sep) + os.sep) for p in location):
        raise ValueError(f"{label}: its file {file} is not inside its package {location}; {how}")
    return {
        "module": module,
        "qualname": qualname,
        "location": location,
        "package": paths is not None,
        "file": file,
        "digest": hashlib.sha256(Path(file).read_bytes()).hexdigest(),
    }


def load_function(ref: dict):
    """The function `ref` (function_ref's record) names, imported by module
    and name. Where this process has not imported its top-level package, it
    is imported from the place recorded (the sandboxed worker may read that
    place only, and another process may not have it on sys.path). ImportError
    when its module's file is gone or changed since the task was made.

    Self-contained (the standard library only, imported here): reference.py
    carries a copy of this function's text, as it imports nothing of mlxsci."""
    import hashlib
    import importlib
    import importlib.machinery
    import importlib.util
    import os
    import sys

    module, top = ref["module"], ref["module"].partition(".")[0]
    named = f"{module}.{ref['qualname']}"
    again = "make the task again (mlxsci.task_from_kernel)"
    try:
        with open(ref["file"], "rb") as f:
            changed = hashlib.sha256(f.read()).hexdigest() != ref["digest"]
    except FileNotFoundError:
        raise ImportError(f"{named}: {ref['file']} is gone; {again}") from None
    if changed:
        raise ImportError(f"{named}: {ref['file']} changed since the task was made; {again}")
    try:
        if top not in sys.modules:
            places = list(ref["location"])
            init = os.path.join(places[0], "__init__.py")
            spec: importlib.machinery.ModuleSpec | None
            if ref["package"] and not os.path.isfile(init):  # a namespace package
                spec = importlib.machinery.ModuleSpec(top, None, is_package=True)
                spec.submodule_search_locations = places
            elif ref["package"]:
                spec = importlib.util.spec_from_file_location(
                    top, init, submodule_search_locations=places
                )
            else:
                spec = importlib.util.spec_from_file_location(top, places[0])
            if spec is None:
                raise ImportError(f"{named}: cannot import {top} from {places[0]}; {again}")
            new = importlib.util.module_from_spec(spec)
            sys.modules[top] = new  # before it runs, as an import does
            try:
                if spec.loader is not None:
                    spec.loader.exec_module(new)
            except BaseException:
                sys.modules.pop(top, None)
                raise
        found = importlib.import_module(module)
    except PermissionError as exc:  # the sandboxed worker's Landlock said no
        raise ImportError(
            f"{named}: importing {module} reads {exc.filename}, which this process may not "
            "read (mlxsci's sandboxed worker reads the package of the task's functions, "
            "Python's installation and mlxsci's kernel side, not mlxsci's evaluation or "
            "search): keep the task's functions in a module that does not import those"
        ) from exc
    file = os.path.realpath(getattr(found, "__file__", None) or "")
    if file != ref["file"]:
        raise ImportError(f"{named}: {module} is imported from {file} here, not {ref['file']}")
    obj = found
    for part in ref["qualname"].split("."):
        obj = getattr(obj, part)
    return obj


def _named(ref: dict) -> str:
    return f"{ref['module']}.{ref['qualname']}"


def _takes_seed(fn) -> bool:
    """Whether make_inputs takes (size, seed) rather than (size); TypeError
    for a function that can be called neither way."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature to read: called with a seed
        return True
    slots = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in slots if p.default is p.empty]
    keyword_only = [p for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    spread = any(p.kind == p.VAR_POSITIONAL for p in params)
    if not keyword_only and len(required) <= 2 and (len(slots) >= 2 or spread):
        return True
    if not keyword_only and len(slots) == 1 and len(required) <= 1:
        return False
    raise TypeError(
        f"make_inputs must take (size, seed) or (size), got "
        f"{getattr(fn, '__name__', fn)}{inspect.signature(fn)}"
    )


# ------------------------------------------------------------------- arguments


def _definition(kernel):
    from mlxsci.fast.definition import KernelDefinition
    from mlxsci.fast.kernels import FastKernel

    if isinstance(kernel, FastKernel):
        return kernel.definition
    if isinstance(kernel, KernelDefinition):
        return kernel
    raise TypeError(
        f"kernel must be a kernel made by mlxsci.fast.metal_kernel / cuda_kernel, got "
        f"{type(kernel).__name__}; MLX's own kernel objects do not say what they were made "
        "from: make it with mlxsci.fast (the same arguments), or import the module that makes "
        "it with mx.fast inside `with mlxsci.fast.simulate():`"
    )


def _size_params(label: str, params) -> dict:
    if not isinstance(params, Mapping) or not params:
        raise ValueError(f"size {label!r}: its parameters must be a non-empty dict, got {params!r}")
    out = {}
    for key, value in params.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"size {label!r}: parameter name {key!r} is not an identifier")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise ValueError(f"size {label!r}: {key} = {value!r} is not an int or a float")
        value = int(value) if isinstance(value, (int, np.integer)) else float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"size {label!r}: {key} = {value!r} is not finite")
        out[key] = value
    return out


def _label(params: dict) -> str:
    if all(isinstance(v, int) for v in params.values()):
        return "x".join(str(v) for v in params.values())
    return ",".join(f"{k}={v}" for k, v in params.items())


def _one_set(which: str, given) -> list[tuple[str, dict]]:
    """A size set: one dict of parameters, a list of them, or {label: parameters}."""
    if isinstance(given, Mapping) and given and all(isinstance(v, Mapping) for v in given.values()):
        return [(str(label), _size_params(str(label), p)) for label, p in given.items()]
    if isinstance(given, Mapping):
        params = _size_params(which, given)
        return [(_label(params), params)]
    if isinstance(given, Sequence) and not isinstance(given, (str, bytes)) and given:
        sizes = [_size_params(f"{which}[{i}]", p) for i, p in enumerate(given)]
        return [(_label(p), p) for p in sizes]
    raise ValueError(
        f"sizes[{which!r}] must be a dict of size parameters, a list of them or "
        f"{{label: parameters}}, got {given!r}"
    )


def _sizes(given) -> dict[str, list[tuple[str, dict]]]:
    """{size set: [(label, params)]}: `given` is {set: sizes} with sets among
    smoke, in-dist and held-out, or the in-dist sizes alone. A missing smoke
    set is the smallest in-dist size, a missing in-dist set the smoke sizes;
    a missing held-out set stays empty (evaluate works, a search refuses)."""
    if isinstance(given, Mapping) and given and set(given) <= set(SIZE_SETS):
        sets = {which: _one_set(which, given[which]) for which in given}
    elif isinstance(given, Mapping) and set(given) & set(SIZE_SETS):
        other = sorted(set(given) - set(SIZE_SETS))
        raise ValueError(
            f"sizes mixes size sets with other keys ({', '.join(other)}): give "
            f"{{set: sizes}} with sets among {', '.join(SIZE_SETS)}, or the in-dist sizes alone"
        )
    else:
        sets = {"in-dist": _one_set("in-dist", given)}
    if "smoke" not in sets and "in-dist" not in sets:
        raise ValueError("sizes needs a smoke or an in-dist size to evaluate at")
    if "in-dist" not in sets:
        sets["in-dist"] = list(sets["smoke"])
    if "smoke" not in sets:
        smallest = min(sets["in-dist"], key=lambda s: math.prod(abs(v) or 1 for v in s[1].values()))
        sets["smoke"] = [smallest]
    sets.setdefault("held-out", [])
    keys = list(sets["in-dist"][0][1])
    for which, sizes in sets.items():
        for label, params in sizes:
            if set(params) != set(keys):
                raise ValueError(
                    f"size {label!r} ({which}) has parameters {', '.join(params)}; every size "
                    f"needs the same ones ({', '.join(keys)})"
                )
    labels: dict = {}
    for sizes in sets.values():
        for label, params in sizes:
            if labels.setdefault(label, params) != params:
                raise ValueError(f"two sizes are labelled {label!r}; give them labels of their own")
    return {which: sets[which] for which in SIZE_SETS}


def _template(definition, template, choices) -> tuple[list[dict], str]:
    """(the seed's params: int and bool template arguments with their
    choices, the typedefs of its dtype template arguments)."""
    if template is None:
        pairs: list = []
    elif isinstance(template, Mapping):
        pairs = list(template.items())
    else:
        pairs = [tuple(p) for p in template]
    if choices is not None and not isinstance(choices, Mapping):
        raise TypeError(f"template_choices must be {{name: [values]}}, got {choices!r}")
    choices = dict(choices or {})
    for key, options in choices.items():
        if isinstance(options, (str, bytes)) or not isinstance(options, Sequence):
            raise TypeError(f"template_choices[{key!r}] must be a list of values, got {options!r}")
    params, typedefs = [], []
    for pair in pairs:
        if len(pair) != 2 or not isinstance(pair[0], str) or not pair[0].isidentifier():
            raise ValueError(f"template holds (name, value) pairs, got {pair!r}")
        name, value = pair
        if isinstance(value, (bool, np.bool_, int, np.integer)):
            options = [int(c) for c in choices.pop(name, [value])]
            if int(value) not in options:
                raise ValueError(
                    f"template_choices[{name!r}] {options} lacks its value {int(value)}"
                )
            params.append({"name": name, "value": int(value), "choices": options})
            continue
        try:
            type_name = TYPE_NAMES[definition.dialect][dtype_name(value)]
        except (TypeError, ValueError):
            raise ValueError(
                f"template argument {name} = {value!r} is neither an int, a bool nor a dtype"
            ) from None
        if name in choices:
            raise ValueError(
                f"template_choices[{name!r}]: only int template arguments have choices"
            )
        typedefs.append(f"typedef {type_name} {name};\n")
    if choices:
        raise ValueError(f"template_choices names no int template argument: {', '.join(choices)}")
    return params, "".join(typedefs)


def _launch(what: str, given, names: set[str]) -> str:
    """A launch expression: "(x, y, z)" text or three ints / expressions."""
    if callable(given):
        raise TypeError(
            f"{what} must be a launch expression over the size parameters and template ints, "
            f"not a function: a search rewrites launch shapes as expressions (`//! {what} = "
            "...`), which a Python function cannot be; e.g. ('rows * THREADS', 1, 1) or "
            "'(ceil_div(N, 256) * 256, 1, 1)' (+ - * // %, min, max, ceil_div)"
        )
    if isinstance(given, str):
        expr = given.strip()
    elif isinstance(given, Sequence) and len(given) == 3:
        parts = []
        for g in given:
            if isinstance(g, (bool, np.bool_)) or not isinstance(g, (int, np.integer, str)):
                raise TypeError(f"{what} holds ints or expression strings, got {g!r}")
            parts.append(str(int(g)) if not isinstance(g, str) else g.strip())
        expr = f"({', '.join(parts)})"
    else:
        raise TypeError(
            f"{what} must be three ints or expressions, or '(x, y, z)' text, got {given!r}"
        )
    try:
        launch_expr.check(expr, names, dims=3)
    except launch_expr.LaunchExprError as exc:
        raise ValueError(f"{what}: {exc} (names: {', '.join(sorted(names)) or 'none'})") from None
    return expr


def _per_output(what: str, given, outputs: tuple[str, ...]) -> list:
    if isinstance(given, Mapping):
        missing = [n for n in outputs if n not in given]
        extra = [n for n in given if n not in outputs]
        if missing or extra:
            raise ValueError(
                f"{what} must name each output ({', '.join(outputs)}): "
                f"{'missing ' + ', '.join(missing) if missing else 'unknown ' + ', '.join(extra)}"
            )
        return [given[n] for n in outputs]
    if isinstance(given, Sequence) and not isinstance(given, str) and len(given) == len(outputs):
        return list(given)
    raise ValueError(
        f"{what} must be a list with one entry per output ({', '.join(outputs)}) or a dict by "
        f"output name, got {given!r}"
    )


def _shape_exprs(given, outputs: tuple[str, ...], names: set[str]) -> list[list[str]]:
    shapes = []
    for name, shape in zip(outputs, _per_output("output_shapes", given, outputs)):
        if isinstance(shape, (str, int, np.integer)):
            shape = (shape,)
        if not isinstance(shape, Sequence):
            raise TypeError(f"output_shapes[{name!r}] must be a tuple, got {shape!r}")
        dims = []
        for d in shape:
            if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer, str)):
                raise TypeError(f"output_shapes[{name!r}] holds ints or expressions, got {d!r}")
            expr = str(int(d)) if not isinstance(d, str) else d.strip()
            try:
                launch_expr.check(expr, names)
            except launch_expr.LaunchExprError as exc:
                raise ValueError(f"output_shapes[{name!r}]: {exc}") from None
            dims.append(expr)
        shapes.append(dims)
    return shapes


def _quantity(what: str, given, names: set[str]):
    """A roofline quantity: None (the default), a number, an integer
    expression over the size parameters, or a function of the size."""
    if given is None:
        return None
    if isinstance(given, (bool, np.bool_)):
        raise TypeError(f"{what} must be a number, an expression or a function, got {given!r}")
    if isinstance(given, (int, float, np.number)):
        if not math.isfinite(float(given)) or given < 0:
            raise ValueError(f"{what} = {given!r} is not a size")
        return float(given)
    if isinstance(given, str):
        try:
            launch_expr.check(given, names)
        except launch_expr.LaunchExprError as exc:
            raise ValueError(f"{what}: {exc}") from None
        return given.strip()
    return function_ref(given, what)


def _finite(what: str, value) -> float:
    """A finite float (task.py writes it as a literal: nan and inf are no
    literal there), or a ValueError naming `what`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{what} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{what} must be finite, got {value!r}")
    return float(value)


def _tolerance(given):
    if isinstance(given, (int, float, np.number)) and not isinstance(given, (bool, np.bool_)):
        given = (given, 0.0)
    if isinstance(given, Sequence) and not isinstance(given, str) and len(given) == 2:
        atol, rtol = (_finite("tolerance", v) for v in given)
        if atol < 0 or rtol < 0:
            raise ValueError(f"tolerance must not be negative, got {tuple(given)}")
        return [atol, rtol]
    if callable(given):
        return function_ref(given, "tolerance")
    raise TypeError(
        "tolerance must be a number (absolute), a pair (atol, rtol) meaning atol + rtol * "
        f"max|reference|, or a function (reference_outputs, size) -> float; got {given!r}"
    )


# ----------------------------------------------------------------- the task


def _int_names(params: dict) -> dict:
    return {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}


def output_shapes_at(spec: dict, params: dict, functions: dict) -> list[tuple[int, ...]]:
    """The outputs' shapes at a size (spec["output_shapes"]: expressions, or
    a function's name in `functions`)."""
    given = spec["output_shapes"]
    if isinstance(given, dict):
        shapes = functions["output_shapes"](dict(params))
        return [
            tuple(int(d) for d in s)
            for s in _per_output("output_shapes", shapes, tuple(spec["outputs"]))
        ]
    names = _int_names(params)
    return [tuple(_integer(d, names) for d in dims) for dims in given]


def _integer(expr: str, names: dict) -> int:
    value = launch_expr.evaluate(expr, names)
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{expr!r} is {value!r} at size {names}, not a count")
    return value


def _quantity_at(given, params: dict, functions: dict, what: str) -> float:
    if isinstance(given, (int, float)):
        return float(given)
    if isinstance(given, str):
        return float(_integer(given, _int_names(params)))
    return float(functions[what](dict(params)))


def kernel_task(spec: dict, make_inputs: Callable, folder: Path) -> Task:
    """The Task a folder of task_from_kernel's describes: `spec` is its
    task.py's SPEC, `make_inputs` the task.py's wrapper of the user's."""
    functions = {
        what: load_function(ref)
        for what, ref in spec["functions"].items()
        if what not in ("reference", "make_inputs", "tolerance")
    }
    kernel, outputs = spec["kernel"], tuple(spec["outputs"])
    dtypes = list(spec["output_dtypes"])

    def run(launch, inputs, params):
        shapes = output_shapes_at(spec, params, functions)
        wanted = {n: (s, d) for n, s, d in zip(outputs, shapes, dtypes)}
        return dict(launch(kernel, inputs, outputs=wanted))

    input_bytes: dict = {}  # size -> bytes of its inputs (make_inputs run once per size)

    def moved(params) -> float:
        key = tuple(sorted(params.items()))
        if key not in input_bytes:
            input_bytes[key] = sum(int(np.asarray(v).nbytes) for v in make_inputs(params).values())
        shapes = output_shapes_at(spec, params, functions)
        out = sum(math.prod(s) * np.dtype(d).itemsize for s, d in zip(shapes, dtypes))
        return float(input_bytes[key] + out)

    def quantity(what: str, default):
        given = spec[what]
        if given is None:
            return default
        return lambda params: _quantity_at(given, params, functions, what)

    sizes = {
        which: tuple(Size(label, dict(params)) for label, params in spec["sizes"][which])
        for which in SIZE_SETS
    }
    return Task(
        name=spec["name"],
        description=spec["description"],
        kernels=(
            KernelContract(
                name=kernel,
                inputs=tuple(spec["inputs"]),
                outputs=outputs,
                grid=spec["grid"],
                threadgroup=spec["threadgroup"],
                atomic_outputs=spec["atomic_outputs"],
                init_value=spec["init_value"],
            ),
        ),
        sizes=sizes,
        defaults=dict(spec["defaults"]),
        make_inputs=make_inputs,
        run=run,
        bytes_moved=quantity("bytes_moved", moved),
        flops=quantity("flops", lambda params: 0.0),
        working_set=quantity("working_set", quantity("bytes_moved", moved)),
        bound=spec["bound"],
        chain=dict(spec["chain"]),
        regime="one kernel of your own (mlxsci.task_from_kernel)",
        check=f"max abs of {', '.join(outputs)}",
        tolerance=spec["tolerance_text"],
        model=spec["model_text"],
        code_paths=tuple(spec["code_paths"]),
        folder=folder,
    )


# ------------------------------------------------------------ the folder's files

TASK_PY = '''"""{title}

Written by mlxsci.task_from_kernel, which writes it again when called with
the same arguments: to change the task, call it with others (or copy this
folder and edit the copy: a task folder of your own, see examples/conv1d).
The functions are imported by module and name from where they were defined;
their files' digests are recorded (SPEC["functions"]), and a changed file
stops the task from loading.
"""

from pathlib import Path

import numpy as np

from mlxsci.fast.as_task import kernel_task, load_function

SPEC = {spec}

_make_inputs = load_function(SPEC["functions"]["make_inputs"])


{make_inputs}


TASK = kernel_task(SPEC, make_inputs, Path(__file__).resolve().parent)
'''

MAKE_INPUTS_SEEDED = '''def make_inputs(params, seed=None):
    """{named}(size, seed), seed 0 for the task's fixed inputs."""
    inputs = _make_inputs(dict(params), 0 if seed is None else int(seed))
    return {{name: np.asarray(value) for name, value in inputs.items()}}'''

MAKE_INPUTS_FIXED = '''def make_inputs(params):
    """{named}(size): the task's one set of inputs per size."""
    return {{name: np.asarray(value) for name, value in _make_inputs(dict(params)).items()}}'''

REFERENCE_PY = '''"""The reference of the task {name}: {named}, imported by module and name.

Written by mlxsci.task_from_kernel. It imports nothing of mlxsci: the checker
shares no code with the checked (load_function is a copy of
mlxsci.fast.as_task.load_function).
"""

import numpy as np

REFERENCE = {reference}
TOLERANCE = {tolerance}


{loader}


_reference = load_function(REFERENCE)
_tolerance = load_function(TOLERANCE) if isinstance(TOLERANCE, dict) else None


def solve(inputs, params):
    outputs = _reference(dict(inputs), dict(params))
    return {{name: np.asarray(value) for name, value in outputs.items()}}


def tolerance(ref, params):
    if _tolerance is not None:
        return float(_tolerance(ref, dict(params)))
    atol, rtol = TOLERANCE
    largest = max((float(np.max(np.abs(v))) for v in ref.values() if np.size(v)), default=0.0)
    return atol + rtol * largest
'''


def _literal(value) -> str:
    return pprint.pformat(value, width=96, sort_dicts=False)


def _seed_text(d, params: list[dict], typedefs: str, grid: str, threadgroup: str) -> str:
    lines = [f"// The kernel {d.name!r} as mlxsci.task_from_kernel found it.\n"]
    for p in params:
        options = ", ".join(str(c) for c in p["choices"])
        lines.append(f"//! param {p['name']} = {p['value']} {{{options}}}\n")
    header = typedefs + d.header
    if header.strip():
        lines += ["//! header\n", header if header.endswith("\n") else header + "\n"]
    lines += [
        f"//! kernel {d.name}\n",
        f"//! grid = {grid}\n",
        f"//! threadgroup = {threadgroup}\n",
    ]
    body = d.source.lstrip("\n")
    lines.append(body if body.endswith("\n") else body + "\n")
    return "".join(lines)


def _first_paragraph(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        data = text.encode()
        if not path.is_file() or path.read_bytes() != data:
            atomic_write_bytes(path, data)


def task_from_kernel(
    kernel,
    *,
    reference: Callable,
    make_inputs: Callable,
    sizes,
    grid,
    threadgroup,
    output_shapes,
    output_dtypes,
    template=None,
    template_choices: Mapping | None = None,
    init_value: float | None = None,
    tolerance=(1e-5, 1e-5),
    chain: Mapping | str = "auto",
    bytes_moved=None,
    flops=None,
    working_set=None,
    bound: str = "bandwidth",
    name: str | None = None,
    description: str | None = None,
) -> Task:
    """A task of one `mlxsci.fast` kernel, checked against a NumPy reference,
    that mlxsci.evaluate, mlxsci.kernel_function and mlxsci.search.run take
    as they take a task folder (the module's docstring says how it is kept).

    kernel: what mlxsci.fast.metal_kernel / cuda_kernel returned (or its
    `.definition`); its source becomes the task's seed, its input and output
    names the task's buffers. A run is one launch of it.
    reference(inputs, size) -> {output name: array}: NumPy, on the trusted
    side; `inputs` are make_inputs' arrays, `size` a size's parameters.
    make_inputs(size, seed) -> {input name: NumPy array} (0-d for scalars):
    deterministic for a seed (an int; 0 is the task's fixed inputs), or
    make_inputs(size) for one fixed set. Both must be importable by name
    (top-level functions of a module, not of the script being run).
    sizes: {"smoke": ..., "in-dist": ..., "held-out": ...}, each a dict of
    size parameters (ints or floats), a list of them or {label: parameters};
    or the in-dist sizes alone. A missing smoke set is the smallest in-dist
    size, a missing in-dist set the smoke sizes; without held-out sizes a
    search refuses the task (its held-out gate needs one).
    grid, threadgroup: as MLX takes them, but in the candidate format's launch
    expressions over the size's int parameters and the int template
    arguments: ("rows * THREADS", 1, 1) or "(ceil_div(N, 256) * 256, 1, 1)".
    output_shapes: per output (a list, or a dict by name), a tuple of ints or
    expressions, e.g. [("rows", "cols")]; or a function (size) -> the list of
    shapes. output_dtypes: per output, an MLX or NumPy dtype or its name.
    template: MLX's template arguments, [(name, value)]: an int or bool is a
    `//! param` of the seed (template_choices {name: [values]} are what the
    autotuner may try), a dtype a typedef in its header. init_value: MLX's.
    tolerance: the largest max abs difference allowed: a number, (atol, rtol)
    for atol + rtol * max|reference| (default (1e-5, 1e-5)), or a function
    (reference outputs, size) -> float.
    chain: {input: output} whose output feeds that input in a next run, so
    runs timed back to back serialize (Task.chain); "auto" pairs each output
    with the first input of its shape and dtype at the smoke size, and fails
    when none has one: pass {} to time independent runs (on Metal the wall
    timer then needs them chained to count them all).
    bytes_moved, flops, working_set: the roofline model, each a number, an
    integer expression over the size parameters, or a function (size) ->
    float; default bytes_moved = working_set = the bytes of the inputs and
    outputs, flops = 0. bound: "bandwidth" (default) or "compute" (needs flops).
    name: the task's name (default the kernel's); description: what a
    search's prompt says the kernel computes (default: the kernel's contract
    and the reference's docstring).

    Raises TypeError or ValueError, saying what to change, for an argument
    the task cannot take, and whatever make_inputs or reference raise when
    they are tried once at the first smoke size.
    """
    d = _definition(kernel)
    task_name = _task_name(d, name)
    if description is not None and not isinstance(description, str):
        raise TypeError(f"description must be a str, got {type(description).__name__}")
    if init_value is not None:
        init_value = _finite("init_value", init_value)
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {', '.join(BOUNDS)}, got {bound!r}")
    size_sets = _sizes(sizes)
    every = [(label, p) for which in SIZE_SETS for label, p in size_sets[which]]
    defaults = dict(size_sets["in-dist"][0][1])
    size_ints = set(_int_names(defaults))
    params, typedefs = _template(d, template, template_choices)
    grid_expr, threadgroup_expr = _launch_exprs(d, grid, threadgroup, params, defaults, every)

    outputs = d.output_names
    refs = {
        "make_inputs": function_ref(make_inputs, "make_inputs"),
        "reference": function_ref(reference, "reference"),
    }
    takes_seed = _takes_seed(make_inputs)
    shapes_spec: dict | list
    if callable(output_shapes):
        shapes_spec = refs["output_shapes"] = function_ref(output_shapes, "output_shapes")
    else:
        shapes_spec = _shape_exprs(output_shapes, outputs, size_ints)
    try:
        dtypes = [dtype_name(t) for t in _per_output("output_dtypes", output_dtypes, outputs)]
    except ValueError as exc:
        raise ValueError(f"output_dtypes: {exc}") from None
    if "float64" in dtypes and not dialects.get(d.dialect).has_float64:
        raise ValueError(
            f"output_dtypes: {dialects.get(d.dialect).language} has no float64 (no double): "
            "MLX cannot compile such a kernel on a GPU"
        )
    tolerance_spec = _tolerance(tolerance)
    if isinstance(tolerance_spec, dict):
        refs["tolerance"] = tolerance_spec
    quantities = {
        what: _quantity(what, given, size_ints)
        for what, given in (
            ("bytes_moved", bytes_moved),
            ("flops", flops),
            ("working_set", working_set),
        )
    }
    refs.update((what, q) for what, q in quantities.items() if isinstance(q, dict))
    if bound == "compute" and flops is None:
        raise ValueError('bound="compute" scores FLOPs: give flops')
    _check_at_sizes(every, shapes_spec, quantities, outputs)
    seed = _seed(d, params, typedefs, grid_expr, threadgroup_expr, defaults)
    inputs, shape_of = _try_once(
        d, size_sets["smoke"][0], make_inputs, takes_seed, reference, shapes_spec, output_shapes
    )
    spec = {
        "name": task_name,
        "description": description
        or _description(d, refs["reference"], reference, defaults, task_name),
        "dialect": d.dialect,
        "kernel": d.name,
        "inputs": list(d.input_names),
        "outputs": list(outputs),
        "output_shapes": shapes_spec,
        "output_dtypes": dtypes,
        "grid": grid_expr,
        "threadgroup": threadgroup_expr,
        "atomic_outputs": d.atomic_outputs,
        "init_value": None if init_value is None else float(init_value),
        "sizes": {w: [[label, p] for label, p in size_sets[w]] for w in SIZE_SETS},
        "defaults": defaults,
        "chain": _chain(chain, inputs, shape_of, dict(zip(outputs, dtypes))),
        **quantities,
        "bound": bound,
        "tolerance_text": _tolerance_text(tolerance_spec),
        "model_text": _model_text(quantities, bound),
        # The worker reads the places of the functions it calls; the reference's is the parent's.
        "code_paths": sorted(
            {p for what, r in refs.items() if what not in REFERENCE_SIDE for p in r["location"]}
        ),
        "functions": refs,
    }
    files = _files(spec, d, seed, takes_seed, tolerance_spec)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_dir("tasks", f"{task_name}-{digest}")
    _write(folder, files)
    return load_task(str(folder))


def _task_name(d, name) -> str:
    """The task's name, once the kernel is one a task can take."""
    if d.math_mode != "safe":
        raise ValueError(
            f"kernel {d.name!r} is compiled with math_mode {d.math_mode!r}; a task compiles "
            "every candidate with MLX's default ('safe'), so make the kernel without "
            "compile_options to make a task of it"
        )
    if d.shared_memory:
        raise ValueError(
            f"kernel {d.name!r} asks for {d.shared_memory} bytes of dynamic shared memory, which "
            "a task's candidates cannot: declare a __shared__ array of a fixed size instead"
        )
    task_name = d.name if name is None else name
    if not isinstance(task_name, str) or not task_name.isidentifier():
        raise ValueError(f"name must be an identifier, got {task_name!r}")
    if task_name in task_names():
        raise ValueError(f"{task_name!r} is a built-in task's name: pass name= another one")
    return task_name


def _launch_exprs(d, grid, threadgroup, params: list[dict], defaults: dict, every: list):
    """(grid, threadgroup) as launch expressions, each launch checked
    against the GPU's limits at every listed size."""
    names = {p["name"] for p in params}
    clash = names & set(defaults)
    if clash:
        raise ValueError(
            f"template argument {sorted(clash)[0]!r} has the name of a size parameter: rename one"
        )
    allowed = set(_int_names(defaults)) | names
    grid_expr = _launch("grid", grid, allowed)
    threadgroup_expr = _launch("threadgroup", threadgroup, allowed)
    values = {p["name"]: p["value"] for p in params}
    for label, p in every:
        try:
            at = dict(_int_names(p), **values)
            check_launch(
                d.dialect,
                d.name,
                launch_expr.launch_dims(grid_expr, at, "grid"),
                launch_expr.launch_dims(threadgroup_expr, at, "threadgroup"),
            )
        except (launch_expr.LaunchExprError, KernelFault) as exc:
            raise ValueError(f"size {label!r}: {exc}") from None
    return grid_expr, threadgroup_expr


def _check_at_sizes(every: list, shapes_spec, quantities: dict, outputs) -> None:
    """The output shapes' and roofline's expressions, at every listed size."""
    for label, p in every:
        try:
            if isinstance(shapes_spec, list):
                output_shapes_at({"output_shapes": shapes_spec, "outputs": outputs}, p, {})
            for given in quantities.values():
                if isinstance(given, str):
                    _integer(given, _int_names(p))
        except ValueError as exc:  # LaunchExprError is one
            raise ValueError(f"size {label!r}: {exc}") from None


def _seed(d, params: list[dict], typedefs: str, grid: str, threadgroup: str, defaults) -> str:
    """The kernel as a candidate, parsed and checked as any candidate is."""
    seed = _seed_text(d, params, typedefs, grid, threadgroup)
    try:
        candidate = parse(seed, dialect=d.dialect, filename=f"<kernel {d.name}>")
    except CandidateError as exc:
        raise ValueError(f"kernel {d.name!r} cannot be a task's seed: {exc}") from None
    problems = validate(candidate, [d.name], set(defaults))
    if problems:
        raise ValueError(
            f"kernel {d.name!r} cannot be a task's seed: " + "; ".join(str(p) for p in problems)
        )
    return seed


def _try_once(d, smoke, make_inputs, takes_seed, reference, shapes_spec, output_shapes):
    """make_inputs and the reference tried once, at the first smoke size:
    what the evaluation relies on. (The inputs, the outputs' shapes.)"""
    label, size = smoke
    inputs = make_inputs(dict(size), 0) if takes_seed else make_inputs(dict(size))
    if not isinstance(inputs, Mapping) or set(inputs) != set(d.input_names):
        got = ", ".join(inputs) if isinstance(inputs, Mapping) else type(inputs).__name__
        raise ValueError(
            f"make_inputs must return {{input name: array}} for the kernel's inputs "
            f"({', '.join(d.input_names)}); at size {label!r} it returned {got}"
        )
    inputs = {k: np.asarray(v) for k, v in inputs.items()}
    if not dialects.get(d.dialect).has_float64:
        wide = [k for k, v in inputs.items() if v.dtype == np.float64]
        if wide:
            raise ValueError(
                f"make_inputs gives {', '.join(wide)} as float64, which "
                f"{dialects.get(d.dialect).language} has no type for (MLX makes NumPy float64 "
                "float32): return float32"
            )
    outputs = d.output_names
    functions = {"output_shapes": output_shapes} if callable(output_shapes) else {}
    spec = {"output_shapes": shapes_spec, "outputs": outputs}
    shape_of = dict(zip(outputs, output_shapes_at(spec, size, functions)))
    ref = reference({k: v.copy() for k, v in inputs.items()}, dict(size))
    if not isinstance(ref, Mapping) or set(ref) != set(outputs):
        got = ", ".join(ref) if isinstance(ref, Mapping) else type(ref).__name__
        raise ValueError(
            f"reference must return {{output name: array}} for the kernel's outputs "
            f"({', '.join(outputs)}); at size {label!r} it returned {got}"
        )
    for out in outputs:
        if np.shape(ref[out]) != shape_of[out]:
            raise ValueError(
                f"at size {label!r} the reference's {out} has shape {np.shape(ref[out])}, "
                f"output_shapes says {shape_of[out]}"
            )
    return inputs, shape_of


def _files(spec: dict, d, seed: str, takes_seed: bool, tolerance_spec) -> dict[str, str]:
    """The task folder's files: task.py, reference.py and the seed."""
    refs = spec["functions"]
    dialect = dialects.get(d.dialect)
    make_inputs = MAKE_INPUTS_SEEDED if takes_seed else MAKE_INPUTS_FIXED
    return {
        "task.py": TASK_PY.format(
            title=f"The task {spec['name']}: the {dialect.language} kernel {d.name!r}, "
            f"checked against {_named(refs['reference'])}.",
            spec=_literal(spec),
            make_inputs=make_inputs.format(named=_named(refs["make_inputs"])),
        ),
        "reference.py": REFERENCE_PY.format(
            name=spec["name"],
            named=_named(refs["reference"]),
            reference=_literal(refs["reference"]),
            tolerance=_literal(refs.get("tolerance", tolerance_spec)),
            loader=textwrap.dedent(inspect.getsource(load_function)).rstrip("\n"),
        ),
        dialect.file_name("seed"): seed,
    }


def _chain(chain, inputs: dict, shapes: dict, dtypes: dict) -> dict:
    if isinstance(chain, Mapping):
        pairs = dict(chain)
        for i, o in pairs.items():
            if i not in inputs or o not in shapes:
                raise ValueError(
                    f"chain {{{i!r}: {o!r}}}: keys are inputs ({', '.join(inputs)}), values "
                    f"outputs ({', '.join(shapes)})"
                )
            if inputs[i].shape != shapes[o] or inputs[i].dtype != np.dtype(dtypes[o]):
                raise ValueError(
                    f"chain {{{i!r}: {o!r}}}: input {i} is {inputs[i].dtype}{list(inputs[i].shape)} "
                    f"and output {o} {dtypes[o]}{list(shapes[o])}; a chained output must be its "
                    "input's shape and dtype"
                )
        return pairs
    if chain != "auto":
        raise TypeError(f'chain must be "auto" or {{input: output}}, got {chain!r}')
    pairs, taken = {}, set()
    for o, shape in shapes.items():
        for i, a in inputs.items():
            if i not in taken and a.shape == shape and a.dtype == np.dtype(dtypes[o]):
                pairs[i] = o
                taken.add(i)
                break
    if not pairs:
        raise ValueError(
            "chain: no output has the shape and dtype of an input, so runs timed back to back "
            "cannot each take the last one's result; pass chain={input: output} for a pair of "
            "your own, or chain={} to time independent runs"
        )
    return pairs


def _description(d, ref: dict, reference, defaults: dict, name: str) -> str:
    what = _first_paragraph(reference)
    language = dialects.get(d.dialect).language
    return (
        f"{what + ' ' if what else ''}The task {name} is the MLX {language} kernel {d.name!r} "
        f"(inputs {', '.join(d.input_names)}; outputs {', '.join(d.output_names)}), launched "
        f"once per run, its outputs checked against {_named(ref)}. Size parameters: "
        f"{', '.join(defaults)}."
    )


def _tolerance_text(tolerance) -> str:
    if isinstance(tolerance, dict):
        return _named(tolerance)
    atol, rtol = tolerance
    return f"{atol:g}" + (f" + {rtol:g} * max|ref|" if rtol else "")


def _model_text(quantities: dict, bound: str) -> str:
    def text(given, default: str) -> str:
        if given is None:
            return default
        if isinstance(given, dict):
            return _named(given)
        return f"{given:g}" if isinstance(given, float) else given

    if bound == "compute":
        return f"{text(quantities['flops'], '0')} FLOPs / FP32 peak"
    return f"{text(quantities['bytes_moved'], 'input + output')} bytes / bandwidth"
