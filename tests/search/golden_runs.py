"""Scripted one-plus-one searches whose prompts and decisions are kept as
golden files (tests/data/search_golden), written by the loop before the
generational loop existed: the default strategy must still produce them byte
for byte (tests/search/test_generations.py).

    python tests/search/golden_runs.py   # rewrite the golden files (only on purpose)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

GOLDEN = HERE.parent / "data" / "search_golden"

# name -> (S, S noise, Phi, Phi noise)
TABLE = {
    "seed": (0.30, 0.01, 0.50, 0.02),
    "a": (0.33, 0.01, 0.52, 0.02),
    "b": (0.31, 0.01, 0.50, 0.02),
    "c": (0.40, 0.01, 0.61, 0.02),
    "d": (0.25, 0.01, 0.40, 0.02),
    "e": (0.45, 0.01, 0.70, 0.02),
}

# The proposer's answers, in turn: a scripted mix of better, worse, broken
# and failed calls, so every kind of prompt appears.
SCRIPTS = {
    "strict": ["a", "b", "no-fence", "c", "error", "d", "e", "c"],
    "noise-aware": ["a", "c", "no-fence", "e", "b"],
}


def answers(script):
    from scripted_runs import fenced, variant

    out = []
    for step in script:
        if step == "no-fence":
            out.append("I could not write a kernel this time.")
        elif step == "error":
            out.append(RuntimeError("RateLimitError: retries exhausted"))
        else:
            out.append(fenced(variant(step)))
    return out


def golden_run(out: Path, accept: str, monkeypatch) -> dict:
    """The run's prompts (file name -> text) and its decisions (each record
    without its times)."""
    from scripted_runs import Crafted, Scripted, crafted_compare

    from mlxsci.search import loop, run

    monkeypatch.setattr(loop, "evaluate", Crafted(TABLE))
    monkeypatch.setattr(
        loop,
        "compare",
        noise_aware_compare() if accept == "noise-aware" else crafted_compare(TABLE),
    )
    script = SCRIPTS[accept]
    proposer = Scripted(answers(script), cost=0.01)
    run("saxpy", proposer=proposer, iterations=len(script), backend="sim", out=out, accept=accept)
    prompts = {p.name: p.read_text() for p in sorted(out.glob("*prompt.md"))}
    decisions = [
        {k: v for k, v in r.items() if k in DECIDED}
        for r in map(json.loads, (out / "history.jsonl").read_text().splitlines())
    ]
    return {"prompts": prompts, "shown": [c.user for c in proposer.seen], "decisions": decisions}


# What a history record decides (its times and the generation fields added later left out).
DECIDED = (
    "iteration",
    "role",
    "correct",
    "compile_ok",
    "score",
    "fail_reason",
    "is_new_best",
    "comparison",
    "source_path",
    "cost_usd",
    "input_tokens",
    "output_tokens",
)


def noise_aware_compare():
    """Re-timings that accept a speedup above 1.1x and reject the rest."""
    from scripted_runs import SMOKE_LABEL, crafted_compare, crafted_name

    held = crafted_compare(TABLE)

    def compare(task, incumbent, candidate, **kw):
        if kw.get("held_out"):
            return held(task, incumbent, candidate, **kw)
        speedup = TABLE[crafted_name(candidate)][0] / TABLE[crafted_name(incumbent)][0]
        return {
            "timer": "sim",
            "sizes": [{"label": SMOKE_LABEL, "speedup": speedup, "noise": 0.02}],
            "speedup": speedup,
            "noise": 0.06,
        }

    return compare


if __name__ == "__main__":
    import tempfile

    import pytest

    for accept in SCRIPTS:
        with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
            data = golden_run(Path(tmp) / "run", accept, mp)
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / f"one_plus_one_{accept}.json").write_text(
            json.dumps(data, indent=1, sort_keys=True) + "\n"
        )
        print(accept, len(data["prompts"]), "prompts")
