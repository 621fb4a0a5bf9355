"""What reading the expanded text costs the simulator's Metal rules (issue 41,
point 4): `language_rules.check` on the text of every Metal seed's kernels,
and on the pathological shapes of tests/rule_shapes.py, with the source
policy's cache emptied before each call (what a first build of the variant
pays for: the policy's preprocessing, the changed lines, the rules) and
with the policy's verdict cached, as in an evaluation.

    python bench/bench_expanded_rules.py [--size 1000000] [--shapes a,b]
    PYTHONPATH=OLD_TREE python bench/bench_expanded_rules.py ...

Prints one JSON line per text: its name, bytes, the verdict's first words
and the median seconds of `--repeat` calls of each stage (`_time`). Run
with an older tree, it times what that tree has (`cold`, `warm`,
`rules_raw`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

from mlxsci.backends.base import Backend
from mlxsci.backends.sim import language_rules
from mlxsci.backends.sim.dialects import DIALECTS
from mlxsci.backends.sim.metal_rules import check_metal
from mlxsci.kernel.candidate import load as load_candidate
from mlxsci.kernel.signature import ArgInfo, dtype_name
from mlxsci.kernel.source import policy
from mlxsci.task import load_task, task_names
from mlxsci.worker.launch import Launcher

_TESTS = Path(__file__).resolve().parent.parent / "tests"
DEFAULT_SHAPES = "deep_macro_calls,many_defines,tiny_lines,huge_line,lambdas,device_pointers"


class _Texts(Backend):
    """Runs a task's host pipeline without compiling; keeps each kernel's
    generated text (its first launch's) and returns zeros."""

    name = "texts"

    def __init__(self) -> None:
        self.texts: dict[str, tuple[str, list, str]] = {}

    def kernel(self, spec):
        def call(*, inputs, output_shapes, output_dtypes, template=None, **_kw):
            arrays = [a if isinstance(a, mx.array) else mx.array(a) for a in inputs]
            gen = DIALECTS["metal"]().generate(
                spec,
                [ArgInfo.of(a) for a in arrays],
                [dtype_name(d) for d in output_dtypes],
                template,
            )
            self.texts.setdefault(spec.name, (gen.text, gen.regions, spec.source_file))
            return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]

        return call

    def to_device(self, array):
        return mx.array(array)


def _seed_texts(task_name: str) -> dict[str, tuple[str, list, str]]:
    task = load_task(task_name)
    cand = load_candidate(task.seed_path("metal"), "metal")
    backend = _Texts()
    size = task.size_set("smoke")[0]
    launcher = Launcher(backend, task, cand, size.params, filename=str(task.seed_path("metal")))
    inputs = {k: mx.array(v) for k, v in task.make_inputs(size.params).items()}
    task.run(launcher, inputs, size.params)
    return backend.texts


def _shape_text(shape: str, size: int, place: str) -> tuple[str, list, str]:
    sys.path.insert(0, str(_TESTS))
    import rule_shapes  # tests/rule_shapes.py

    from mlxsci.kernel.candidate import parse, template_args, to_kernel_spec

    task = load_task("saxpy")
    text = rule_shapes.candidate_text(shape, size, place, "metal")
    cand = parse(text, dialect="metal", filename="cand.metal")
    contract = task.kernels[0]
    spec = to_kernel_spec(cand, contract.name, contract.inputs, contract.outputs)
    infos = [ArgInfo("float32", (1024,)), ArgInfo("float32", (1024,))]
    infos += [ArgInfo("float32", ()), ArgInfo("uint32", ())]
    gen = DIALECTS["metal"]().generate(spec, infos, ["float32"], template_args(cand))
    return gen.text, gen.regions, "cand.metal"


def _median(run, repeat: int, before=None) -> float:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _time(text: str, regions: list, source_file: str, repeat: int) -> dict:
    """Median seconds of: `check` with the policy's cache empty (`cold`: a
    build in a process that has not checked the candidate: mlxsci.fast, a
    direct SimBackend) and with the policy's verdict cached (`warm`: an
    evaluation, whose parent runs the policy before any build); the Metal
    rules on the text as written (`rules_raw`); and, in a tree that has
    them, the changed lines made inside the policy (`expansion`), the view
    built from them (`view`) and the rules on it (`rules_view`). What the
    evaluation path adds is expansion + view + rules_view - rules_raw,
    measured in one process (two runs on shared cores differ by more)."""
    parts = language_rules.candidate_parts(text, regions)
    row: dict = {}
    err = language_rules.check("metal", text, regions, source_file)
    row["verdict"] = ("ok" if err is None else f"line {err.line}: {err.message}")[:60]
    made = getattr(policy, "part_expansion", None)
    spent = [0.0]
    if made is not None:

        def timed(*args):
            t0 = time.perf_counter()
            try:
                return made(*args)
            finally:
                spent[0] += time.perf_counter() - t0

        policy.part_expansion = timed
    # The policy's verdicts are cached by text and file name: a new file
    # name per call makes each call a first one.
    calls = iter(range(1 << 30))
    name = [source_file]

    def clear() -> None:
        name[0] = f"{next(calls)}-{source_file}"

    row["cold"] = _median(
        lambda: language_rules.check("metal", text, regions, name[0]), repeat, clear
    )
    if made is not None:
        row["expansion"] = spent[0] / repeat
        policy.part_expansion = made

    def prime() -> None:
        clear()
        policy.check_parts("metal", parts, name[0])

    row["warm"] = _median(
        lambda: language_rules.check("metal", text, regions, name[0]), repeat, prime
    )
    row["rules_raw"] = _median(lambda: check_metal(text, regions, source_file), repeat)
    expanded = getattr(language_rules, "expanded", None)
    if expanded is not None:
        prime()
        view = expanded("metal", text, regions, name[0])[0]
        row["view"] = _median(lambda: expanded("metal", text, regions, name[0]), repeat)
        if view is not None:
            row["rules_view"] = _median(
                lambda: check_metal(text, regions, source_file, view),
                repeat,
            )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--shape-repeat", type=int, default=3)

    args = ap.parse_args()
    for name in task_names():
        if "metal" not in load_task(name).seed_dialects():
            continue
        for kernel, (text, regions, source_file) in _seed_texts(name).items():
            row = _time(text, regions, source_file, args.repeat)
            print(json.dumps(dict(text=f"{name}/{kernel}", bytes=len(text), **row)), flush=True)
    for shape in [s for s in args.shapes.split(",") if s]:
        for place in ("header", "body"):
            text, regions, source_file = _shape_text(shape, args.size, place)
            row = _time(text, regions, source_file, args.shape_repeat)
            print(json.dumps(dict(text=f"{shape}/{place}", bytes=len(text), **row)), flush=True)


if __name__ == "__main__":
    main()
