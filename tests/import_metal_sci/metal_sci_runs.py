"""Metal-Sci run directories written for tests, in the format Metal-Sci's
search writes them (results/<task>_<model>_<stamp>/: 00_seed.metal,
NN_prompt.md, NN_response.md, NN_candidate.metal, NN_result.json, best.metal,
best_result.json, history.json, summary.json), from sources written here and
in metal_sci_sources/ (Metal-Sci-style kernels written from the task facts)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

SOURCES = Path(__file__).parent / "metal_sci_sources"
CHIP = "Apple M1 Pro"


def metal_sci_source(task: str) -> str:
    """The Metal-Sci-style seed of a task (tests/import_metal_sci/metal_sci_sources)."""
    return (SOURCES / f"{task}.metal").read_text()


HEAT_SIGNATURE = """#include <metal_stdlib>
using namespace metal;

kernel void heat_step(device const float* {src} [[buffer(0)]],
                      device float* {dst} [[buffer(1)]],
                      constant uint& NX [[buffer(2)]],
                      constant uint& NY [[buffer(3)]],
                      constant float& alpha [[buffer(4)]],
                      uint2 gid [[thread_position_in_grid]]) {{
    uint i = gid.x;
    uint j = gid.y;
    if (i >= NX || j >= NY) return;
    uint idx = j * NX + i;
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {{
        {dst}[idx] = {src}[idx];
        return;
    }}
    float c = {src}[idx];
    float lap = {src}[idx - 1] + {src}[idx + 1] + {src}[idx - NX] + {src}[idx + NX] - {four} * c;
    {dst}[idx] = c + alpha * lap;
}}
"""

# heat2d sources: the seed, a correct candidate naming its buffers otherwise,
# one with a wrong stencil weight, one that does not compile.
HEAT_SEED = HEAT_SIGNATURE.format(src="u_in", dst="u_out", four="4.0f")
HEAT_RENAMED = HEAT_SIGNATURE.format(src="src", dst="dst", four="4.0f")
HEAT_WRONG = HEAT_SIGNATURE.format(src="u_in", dst="u_out", four="3.0f")
HEAT_BROKEN = HEAT_SEED.replace("float c = u_in[idx];", "float c = u_in[idx]")
# Leaves the edge cells unwritten: right on Metal-Sci's host, whose two
# ping-pong buffers hold the zero edges from the start; wrong under mlxsci,
# whose outputs are poisoned before the verified run.
HEAT_NO_EDGES = HEAT_SEED.replace("        u_out[idx] = u_in[idx];\n", "")


def result(
    correct: bool = True,
    score: float | None = 0.5,
    fail_reason: str | None = None,
    compile_ok: bool = True,
    labels: tuple[str, ...] = ("256x256x50", "512x512x100", "1024x1024x50"),
) -> dict:
    """An NN_result.json as Metal-Sci writes it."""
    if not correct:
        score = None
    sizes = []
    if compile_ok:
        for k, label in enumerate(labels):
            ok = correct or k < len(labels) - 1
            sizes.append({
                "label": label, "correct": ok, "error_value": 1e-6 if ok else 0.5,
                "error_kind": "max_abs", "gpu_seconds": 0.001 * (k + 1),
                "achieved": 100.0, "achieved_unit": "GB/s", "ceiling": 200.0,
                "ceiling_unit": "GB/s", "fraction_of_ceiling": 0.5,
            })  # fmt: skip
            if not ok:
                break
    return {"compile_ok": compile_ok, "correct": correct, "score": score,
            "fail_reason": fail_reason, "sizes": sizes}  # fmt: skip


COMPILE_FAILED = result(
    correct=False, compile_ok=False, fail_reason="compile error: expected ';' after expression"
)
INCORRECT = result(
    correct=False, fail_reason="correctness failed at size 1024x1024x50: max_abs=0.5"
)


@dataclass
class Iteration:
    """One LLM iteration: its extracted source (None: skipped, no code block)
    and recorded result. missing_file: the run lost NN_candidate.metal."""

    source: str | None
    result: dict | None = None
    missing_file: bool = False
    reasoning: str | None = None
    extra: dict = field(default_factory=dict)


def write_run(
    root: Path,
    task: str,
    seed: str,
    iterations: list[Iteration],
    model: str = "test-model",
    stamp: str = "20260501_120000",
    seed_result: dict | None = None,
    chip: str = CHIP,
) -> Path:
    """A Metal-Sci run directory under `root`; its path."""
    run = root / f"{task}_{model}_{stamp}"
    run.mkdir(parents=True)
    (run / "00_seed.metal").write_text(seed)
    seed_result = seed_result or result(score=0.5)
    history = [{
        "iteration": 0, "role": "seed", "compile_ok": True, "correct": seed_result["correct"],
        "score": seed_result["score"], "fail_reason": seed_result["fail_reason"],
        "source_path": str(run / "00_seed.metal"), "elapsed_s": 1.0, "is_new_best": True,
    }]  # fmt: skip
    best, best_source, best_result = seed_result["score"] or 0.0, seed, seed_result
    for n, it in enumerate(iterations, 1):
        nn = f"{n:02d}"
        (run / f"{nn}_prompt.md").write_text(f"## Task: {task}\niteration {n} prompt\n")
        role = "candidate" if it.source is not None else "skipped"
        body = f"```metal\n{it.source}\n```\n" if it.source is not None else "no code, sorry\n"
        (run / f"{nn}_response.md").write_text(f"An idea for iteration {n}.\n\n{body}")
        if it.reasoning is not None:
            (run / f"{nn}_reasoning.md").write_text(it.reasoning)
        rec = {"iteration": n, "role": role, "compile_ok": False, "correct": False,
               "score": None, "fail_reason": None, "source_path": None,
               "elapsed_s": 2.0, "is_new_best": False}  # fmt: skip
        if it.source is not None:
            res = it.result or result()
            if not it.missing_file:
                (run / f"{nn}_candidate.metal").write_text(it.source)
            (run / f"{nn}_result.json").write_text(json.dumps(res, indent=2))
            new_best = res["score"] is not None and res["score"] > best
            rec.update(compile_ok=res["compile_ok"], correct=res["correct"], score=res["score"],
                       fail_reason=res["fail_reason"], source_path=str(run / f"{nn}_candidate.metal"),
                       is_new_best=new_best)  # fmt: skip
            if new_best:
                best, best_source, best_result = res["score"], it.source, res
        rec.update(it.extra)
        history.append(rec)
    (run / "best.metal").write_text(best_source)
    (run / "best_result.json").write_text(json.dumps(best_result, indent=2))
    (run / "history.json").write_text(json.dumps(history, indent=2))
    seed_score = seed_result["score"]
    summary = {"task": task, "model": model, "chip": chip, "n_iterations": len(iterations),
               "seed_score": seed_score, "best_score": best,
               "improvement": best / seed_score if seed_score else None, "history": history}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary, indent=2))
    return run


def heat2d_run(root: Path, edge_cheat: bool = False, **kw) -> Path:
    """A heat2d run: a correct candidate with renamed buffers (the new best),
    a skipped iteration, one with a wrong stencil, one that does not compile,
    and one whose candidate file is missing; with edge_cheat, last, one that
    leaves the edges unwritten, recorded correct and the new best."""
    iterations = [
        Iteration(HEAT_RENAMED, result(score=0.7)),
        Iteration(None),
        Iteration(HEAT_WRONG, INCORRECT),
        Iteration(HEAT_BROKEN, COMPILE_FAILED),
        Iteration(HEAT_SEED, result(score=0.6), missing_file=True),
    ]
    if edge_cheat:
        iterations.append(Iteration(HEAT_NO_EDGES, result(score=0.8)))
    return write_run(root, "heat2d", HEAT_SEED, iterations, **kw)
