"""The search prompts: built from the Task for every task, exact MLX signatures,
no held-out size anywhere, Metal-Sci's result lines, history and stagnation rule."""

import re

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.kernel.signature import ArgInfo, dtype_name, metal_source
from mlxsci.search.prompts.compose import (
    HISTORY_LINES,
    format_history_line,
    format_result,
    stagnating,
    system_prompt,
    user_prompt,
)
from mlxsci.task import load_task, task_names

TASKS = task_names()


# --- fabricated results ---------------------------------------------------------


def size_entry(size, i, correct=True, held_out=False):
    return {
        "label": size.label,
        "params": dict(size.params),
        "held_out": held_out,
        "correct": correct,
        "error": 1e-6 if correct else 0.5,
        "tol": 1e-4,
        "seconds": 0.002 * (i + 1),
        "seconds_min": 0.002,
        "seconds_max": 0.003,
        "achieved": 123.4,
        "unit": "GB/s",
        "ceiling": 400.0,
        "fraction": 0.3085,
        "metal_sci_fraction": None,
        "flags": [],
        "fail_reason": None
        if correct
        else f"correctness failed at size {size.label}: max_abs=0.5 (tol=0.0001)",
        "timings": {},
    }


def result(task, score=0.25, fail_at=None, compile_error=None):
    sizes = []
    for i, s in enumerate(task.size_set("in-dist")):
        ok = fail_at is None or i < fail_at
        sizes.append(size_entry(s, i, correct=ok))
        if not ok:
            break
    correct = fail_at is None and compile_error is None
    reason = compile_error or (sizes[-1]["fail_reason"] if fail_at is not None else None)
    return {
        "task": task.name,
        "backend": "metal",
        "device": "Apple M1 Pro",
        "candidate": {
            "compile_ok": compile_error is None,
            "correct": correct,
            "score": score if correct else 0.0,
            "phi": 0.987654,
            "fail_reason": reason,
        },
        "sizes": [] if compile_error else sizes,
    }


def record(it, role="candidate", correct=True, score=0.2, new_best=False, compile_ok=True):
    return {
        "iteration": it,
        "role": role,
        "compile_ok": compile_ok,
        "correct": correct,
        "score": score if correct else 0.0,
        "is_new_best": new_best,
    }


def prompts(task):
    seed = task.seed("metal")
    sys_p = system_prompt(task, "metal")
    first = user_prompt(
        task,
        "metal",
        iteration=1,
        seed_source=seed,
        seed_result=result(task),
        previous=None,
        incumbent=None,
        history=[],
        stagnation=False,
    )
    history = [
        record(0, "seed", score=0.25, new_best=True),
        record(1, score=0.3, new_best=True),
        record(2, correct=False),
    ]
    third = user_prompt(
        task,
        "metal",
        iteration=3,
        seed_source=seed,
        seed_result=result(task),
        previous=(seed + "// tweak\n", result(task, fail_at=1)),
        incumbent=(seed + "// better\n", result(task, score=0.3)),
        history=history,
        stagnation=True,
    )
    return sys_p, first, third


# --- an independent dry run: what each kernel is given at a size ----------------


class _Stop(Exception):
    pass


def first_launches(task, params):
    """kernel -> (input ArgInfos, output dtypes) of its first launch."""
    seen = {}

    def launch(name, inputs, outputs):
        c = task.kernel(name)
        if name not in seen:
            seen[name] = (
                [ArgInfo(dtype_name(inputs[n].dtype), tuple(inputs[n].shape)) for n in c.inputs],
                [outputs[n][1] for n in c.outputs],
            )
        if len(seen) == len(task.kernels):
            raise _Stop
        return {n: mx.zeros(outputs[n][0], dtype=getattr(mx, outputs[n][1])) for n in c.outputs}

    host = {k: mx.array(np.asarray(v)) for k, v in task.make_inputs(params).items()}
    with pytest.raises(_Stop):
        task.run(launch, host, params)
    return seen


def expected_signature(task, kernel, params):
    infos, out_dtypes = first_launches(task, params)[kernel]
    c = task.kernel(kernel)
    text = metal_source(
        c.name,
        list(c.inputs),
        list(c.outputs),
        "",
        "",
        infos,
        out_dtypes,
        atomic_outputs=c.atomic_outputs,
    ).text
    return text[: text.index(") {\n") + 3]


# --- held-out leak detection -------------------------------------------------------


def held_out_leaks(task, text):
    """Each way a held-out size could show: its label as a token (unless it is a bare
    number, which occurs innocently), `NAME=value` for a parameter value that no
    other size has, or all such distinctive values together on one line."""
    others = [s for which in ("smoke", "in-dist") for s in task.size_set(which)]
    other_values = {str(v) for s in others for v in s.params.values()}
    other_labels = {s.label for s in others}
    found = []
    for h in task.size_set("held-out"):
        distinct = {k: str(v) for k, v in h.params.items() if str(v) not in other_values}
        if not h.label.isdigit() and h.label not in other_labels:
            if re.search(rf"(?<![\w.]){re.escape(h.label)}(?![\w.])", text):
                found.append(f"label {h.label}")
        for k, v in distinct.items():
            if re.search(rf"\b{re.escape(k)}\s*[=:]\s*{re.escape(v)}(?![\w.])", text):
                found.append(f"{k}={v}")
        if len(distinct) >= 2:
            tokens = [rf"(?<![\w.]){re.escape(v)}(?![\w.])" for v in distinct.values()]
            for line in text.splitlines():
                if all(re.search(t, line) for t in tokens):
                    found.append(f"values {sorted(distinct.values())} on line {line!r}")
    return found


def test_leak_detector_sees_a_planted_size():
    task = load_task("heat2d")
    assert held_out_leaks(task, "sizes: 768x768x75")
    assert held_out_leaks(task, "NX=768, NY=768, n_steps=75")
    assert held_out_leaks(task, "768 by 768 grid, 75 steps")
    assert not held_out_leaks(task, "256x256x50, 512x512x100, threadgroup (16, 16, 1)")


# --- per task ------------------------------------------------------------------------


@pytest.mark.parametrize("name", TASKS)
def test_prompts_cover_the_contract_and_leak_no_held_out_size(name):
    task = load_task(name)
    sys_p, first, third = prompts(task)
    smoke = task.size_set("smoke")[0].params
    for c in task.kernels:
        assert f"//! kernel {c.name}" in sys_p
        for buf in c.inputs + c.outputs:
            assert f"`{buf}`" in sys_p, (c.name, buf)
        # The printed signature is exactly what MLX generates for the pipeline's inputs.
        assert expected_signature(task, c.name, smoke) in sys_p
        # ... and the address spaces do not change at the scored sizes.
        assert expected_signature(task, c.name, task.size_set("in-dist")[0].params) in sys_p
    for label in (s.label for s in task.size_set("in-dist")):
        assert label in first and label in third
    for text in (sys_p, first, third):
        assert held_out_leaks(task, text) == [], name
        assert "0.987654" not in text and not re.search(r"\bphi\b", text, re.I)
        assert text.isascii()
    assert "```metal\n" + task.seed("metal").rstrip() + "\n```" in first
    assert "## Stagnation notice" in third and "## Stagnation notice" not in first
    assert "## Current best (incumbent)" in third and "## Your previous attempt" in third


@pytest.mark.parametrize("name", ["heat2d", "lj"])
def test_cuda_system_prompt(name):
    task = load_task(name)
    text = system_prompt(task, "cuda")
    assert "```cuda" in text and "__syncthreads" in text and "NX[0]" in text
    for c in task.kernels:
        assert f"__global__ void custom_kernel_{c.name}(" in text
    assert held_out_leaks(task, text) == []
    with pytest.raises(ValueError):
        system_prompt(task, "opencl")


def test_pipeline_feeds_are_described():
    text = system_prompt(load_task("wave3d"))
    assert "`u_next` of the second most recent `wave_step` launch" in text
    assert "`u_next` of the most recent `wave_step` launch" in text
    text = system_prompt(load_task("lj"))
    assert "`cell_count` of the most recent `lj_build_cells` launch" in text
    assert "device atomic<uint32_t>* cell_count" in text
    assert "shape (M*M*M*64,)" in text
    text = system_prompt(load_task("hmc"))
    assert "set by the host anew at every launch" in text and "shape (K, d)" in text
    assert "repeats 2 * n_sweeps times" in system_prompt(load_task("ising"))
    assert "`const constant float*`" in system_prompt(load_task("gradshaf"))


# --- result lines ----------------------------------------------------------------------


def test_format_result_lines():
    task = load_task("heat2d")
    text = format_result(result(task, score=0.25))
    lines = text.splitlines()
    assert lines[0] == "256x256x50: correct, 2.000 ms, 123 GB/s (30.9% of 400 GB/s)"
    assert lines[-1] == "score (gmean of fraction): 0.2500"
    bad = format_result(result(task, fail_at=1))
    assert "512x512x100: INCORRECT (max_abs=0.5 (tol=0.0001))" in bad
    assert "fail_reason: correctness failed at size 512x512x100" in bad
    assert "1024x1024x50" not in bad
    comp = format_result(result(task, compile_error="compile error: c.metal:4: undeclared 'idz'"))
    assert comp == "COMPILE FAILED: compile error: c.metal:4: undeclared 'idz'"


def test_format_result_drops_held_out_sizes_and_phi():
    task = load_task("heat2d")
    res = result(task, score=0.25)
    held = task.size_set("held-out")[0]
    res["sizes"].append(size_entry(held, 3, held_out=True))
    text = format_result(res)
    assert held.label not in text and "0.987654" not in text
    assert len(text.splitlines()) == 4
    # A failure at a held-out size is not described either.
    res["sizes"][-1] = size_entry(held, 3, correct=False, held_out=True)
    res["candidate"].update(correct=False, fail_reason=res["sizes"][-1]["fail_reason"])
    text = format_result(res)
    assert held.label not in text and held_out_leaks(task, text) == []


# --- how each size was timed: timer, noise, time per kernel -----------------------


def profiled(size, i, kernels, timer="cupti", noise=0.031, held_out=False):
    entry = size_entry(size, i, held_out=held_out)
    entry.update(timer=timer, noise=noise, kernels=kernels)
    return entry


def test_format_result_shows_the_kernel_breakdown():
    task = load_task("gradshaf")
    sizes = task.size_set("in-dist")
    res = result(task, score=0.25)
    # 30 launches of 18.6 us out of a 0.786 ms run (71 %), the rest in the reduction
    res["sizes"][0] = profiled(
        sizes[0],
        0,
        {
            "gradshaf_axis_reduce": {"launches": 30, "seconds": 30 * 7.6e-6},
            "gradshaf_step": {"launches": 30, "seconds": 30 * 18.6e-6},
        },
    )
    res["sizes"][0]["seconds"] = 30 * (18.6e-6 + 7.6e-6)
    res["sizes"][1] = profiled(sizes[1], 1, {}, timer="wall", noise=0.2)
    res["candidate"]["noise"] = 0.042
    lines = format_result(res).splitlines()
    assert lines[1] == "  timer cupti, noise 3.1% (spread of the timed runs)"
    assert lines[2] == (
        "  time per kernel: gradshaf_step 71% of the run, 30 launches, 18.6 us "
        "each; gradshaf_axis_reduce 29% of the run, 30 launches, 7.6 us each"
    )
    # The wall timer sees no kernels: its line says what it is, and no breakdown follows.
    wall = lines.index(next(l for l in lines if l.startswith(sizes[1].label)))
    assert lines[wall + 1].startswith("  timer wall (wall clock per run: an upper bound")
    assert "noise 20.0%" in lines[wall + 1] and "time per kernel" not in lines[wall + 2]
    assert lines[-1] == "score (gmean of fraction): 0.2500 (noise 4.2%)"


def test_kernel_breakdown_lists_the_longest_first_and_sums_the_rest():
    task = load_task("saxpy")
    size = task.size_set("in-dist")[0]
    kernels = {f"k{i}": {"launches": 1, "seconds": (i + 1) * 1e-6} for i in range(8)}
    res = {
        "candidate": {"compile_ok": True, "correct": True, "score": 0.5},
        "sizes": [profiled(size, 0, kernels, timer="sim")],
    }
    res["sizes"][0]["seconds"] = 36e-6
    line = format_result(res).splitlines()[2]
    assert line.startswith("  time per kernel: k7 22% of the run, 1 launch, 8 us each; k6 ")
    assert line.endswith("; 2 more kernel(s) (8% of the run)")


def test_breakdown_never_for_a_held_out_size():
    task = load_task("heat2d")
    res = result(task, score=0.25)
    held = task.size_set("held-out")[0]
    res["sizes"].append(
        profiled(
            held, 3, {"heat_step": {"launches": 75, "seconds": 0.075}}, noise=0.777, held_out=True
        )
    )
    text = format_result(res)
    assert held.label not in text and "75 launches" not in text and "77.7%" not in text
    assert held_out_leaks(task, text) == []
    # ... nor in a user prompt built from it, as incumbent or previous attempt.
    history = [record(0, "seed", score=0.25, new_best=True), record(1, score=0.3)]
    prompt = user_prompt(
        task,
        "metal",
        iteration=2,
        seed_source=task.seed(),
        seed_result=res,
        previous=(task.seed() + "// a\n", res),
        incumbent=(task.seed() + "// b\n", res),
        history=history,
        stagnation=False,
    )
    assert "75 launches" not in prompt and held_out_leaks(task, prompt) == []


def test_user_prompt_shows_the_breakdown_of_incumbent_and_previous():
    task = load_task("heat2d")
    size = task.size_set("in-dist")[0]

    def res(launches, us):
        r = result(task, score=0.25)
        r["sizes"][0] = profiled(
            size, 0, {"heat_step": {"launches": launches, "seconds": launches * us * 1e-6}}
        )
        r["sizes"][0]["seconds"] = launches * us * 1e-6
        return r

    history = [
        record(0, "seed", score=0.25, new_best=True),
        record(1, score=0.3, new_best=True),
        record(2, score=0.28),
    ]
    text = user_prompt(
        task,
        "metal",
        iteration=3,
        seed_source=task.seed(),
        seed_result=result(task),
        previous=(task.seed() + "// p\n", res(50, 12.5)),
        incumbent=(task.seed() + "// i\n", res(50, 9.25)),
        history=history,
        stagnation=False,
    )
    previous = text[text.index("## Your previous attempt") : text.index("## Current best")]
    incumbent = text[text.index("## Current best") : text.index("## History")]
    assert "heat_step 100% of the run, 50 launches, 12.5 us each" in previous
    assert "heat_step 100% of the run, 50 launches, 9.25 us each" in incumbent
    assert "strictly higher score." in text and "timing noise" not in text


def test_noise_aware_rule_and_re_timing_in_the_prompt():
    task = load_task("saxpy")
    kept = dict(
        record(1, score=0.3, new_best=True),
        comparison={"speedup": 1.2, "verdict": "improved", "accepted": True},
    )
    dropped = dict(
        record(2, score=0.31),
        comparison={"speedup": 1.031, "verdict": "within noise", "accepted": False},
    )
    failed = dict(record(3, score=0.32), comparison={"error": "crash", "accepted": False})
    assert format_history_line(kept).endswith(
        "| re-timed against the incumbent: 1.200x, improved, kept"
    )
    assert format_history_line(dropped) == (
        "iter 2: compile=OK | correct=True | score=0.3100 | re-timed against the incumbent: "
        "1.031x, within noise, not kept"
    )
    assert format_history_line(failed).endswith("| re-timing failed, not kept")
    text = user_prompt(
        task,
        "metal",
        iteration=4,
        seed_source=task.seed(),
        seed_result=result(task),
        previous=(task.seed() + "//x\n", result(task)),
        incumbent=None,
        history=[record(0, "seed", new_best=True), kept, dropped, failed],
        stagnation=False,
        accept="noise-aware",
    )
    assert "1.031x, within noise, not kept" in text
    assert "a speedup beyond the timing noise when the two are re-timed side by side" in text


# --- history and stagnation -----------------------------------------------------------


def test_history_shows_the_last_eight_entries():
    task = load_task("saxpy")
    history = (
        [record(0, "seed", score=0.5, new_best=True)]
        + [record(i, score=0.1 * (i % 5)) for i in range(1, 12)]
        + [record(12, "skipped")]
    )
    text = user_prompt(
        task,
        "metal",
        iteration=13,
        seed_source=task.seed(),
        seed_result=result(task),
        previous=(task.seed() + "//x\n", result(task)),
        incumbent=None,
        history=history,
        stagnation=False,
    )
    shown = re.findall(r"^iter (\d+): ", text, re.M)
    assert shown == [str(i) for i in range(5, 13)] and len(shown) == HISTORY_LINES
    assert "iter 12: compile=FAIL | correct=False | score=N/A" in text
    assert "no usable ```metal block" in text
    assert "## Stagnation notice" not in text
    assert (
        format_history_line(record(3, score=0.31234))
        == "iter 3: compile=OK | correct=True | score=0.3123"
    )
    assert (
        format_history_line(record(4, correct=False, compile_ok=False))
        == "iter 4: compile=FAIL | correct=False | score=N/A"
    )


def test_incumbent_shown_only_when_it_differs():
    task = load_task("saxpy")
    src = task.seed() + "// v2\n"
    history = [record(0, "seed", score=0.2, new_best=True), record(1, score=0.3, new_best=True)]
    text = user_prompt(
        task,
        "metal",
        iteration=2,
        seed_source=task.seed(),
        seed_result=result(task),
        previous=(src, result(task, 0.3)),
        incumbent=(src, result(task, 0.3)),
        history=history,
        stagnation=False,
    )
    assert "## Current best (incumbent)" not in text
    assert "## Your previous attempt (iteration 1)" in text


def test_stagnating_rule():
    seed = record(0, "seed", score=0.5, new_best=True)
    best = record(1, score=1.0, new_best=True)
    near = [record(i, score=s) for i, s in zip((2, 3, 4), (0.9, 0.86, 0.95))]
    assert stagnating([seed, best] + near)
    # Failures and skips in between do not break the run of correct candidates.
    mixed = [
        seed,
        best,
        near[0],
        record(3, correct=False),
        record(4, "skipped", correct=False),
        record(5, score=0.86),
        record(6, score=0.95),
    ]
    assert stagnating(mixed)
    assert not stagnating([seed, best] + near[:2])  # only 2 correct candidates
    assert not stagnating([seed, best, near[0], near[1], record(4, score=0.84)])  # one far below
    assert not stagnating([seed, near[0], near[1], record(4, score=1.0, new_best=True)])
    # Three candidates all equal to the best, one of which set it: not stagnating yet.
    assert not stagnating(
        [seed, record(1, score=1.0, new_best=True), record(2, score=1.0), record(3, score=1.0)]
    )
    assert stagnating(
        [
            seed,
            record(1, score=1.0, new_best=True),
            record(2, score=1.0),
            record(3, score=1.0),
            record(4, score=1.0),
        ]
    )
    assert not stagnating([])
    # The seed counts toward best but is not one of the three candidates.
    assert not stagnating(
        [record(0, "seed", score=1.0, new_best=True), record(1, score=0.9), record(2, score=0.9)]
    )


def test_after_a_skipped_first_iteration():
    task = load_task("nbody")
    history = [record(0, "seed", score=0.2, new_best=True), record(1, "skipped", correct=False)]
    text = user_prompt(
        task,
        "cuda",
        iteration=2,
        seed_source="//! kernel nbody_step\n;\n",
        seed_result=result(task),
        previous=None,
        incumbent=("//! kernel nbody_step\n;\n", result(task, 0.2)),
        history=history,
        stagnation=False,
    )
    assert "Your answer at iteration 1 contained no usable ```cuda block" in text
    assert "## Current best (incumbent)\n```cuda\n" in text
    assert "iter 1: compile=FAIL | correct=False | score=N/A" in text
    assert "fix the cause" in text and "score 0.2000" in text
