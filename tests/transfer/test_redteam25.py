"""Red-team attacks on the transfer grade (issue 25), each asserting that
its effect is absent: the scan still finds a size comparison written to
hide from it, a hostile literal makes no traceback, and a cheat that hides
its comparison does not grade `transfers`.

heat2d's listed values: NX and NY 67/45 (smoke), 256, 512, 1024 (in-dist),
768 (held-out only); n_steps 5, 50, 100, 75 (held-out only)."""

import json

import pytest
from scripted_runs import SAXPY, SEED, Crafted, Scripted, fenced

from mlxsci.task import load_task
from mlxsci.transfer import judge_transfer
from mlxsci.transfer.size_literals import integer_value, scan

TASK = load_task("heat2d")
HEAD = "//! kernel heat_step\n"
# A 5000-digit literal: past the 4300 digits Python converts from decimal.
HUGE = "1" * 5000


def held_out_only(body: str) -> list[int]:
    return [f.value for f in scan(TASK, HEAD + body, "metal") if f.held_out_only]


@pytest.mark.parametrize(
    "body",
    [
        "if (768u - NX == 0u) { return; }\n",
        "if (NX + 1u == 769u) { return; }\n",
        "if ((NX ^ 768u) == 0u) { return; }\n",
        "if (NX == 767u + 1u) { return; }\n",
        "if (NX == (2 * 384)) { return; }\n",
        "if (NX == 0x300 | 0) { return; }\n",
        "if (NX > 767u && NX < 769u) { return; }\n",
        "if (767u < NX && 769u > NX) { return; }\n",
    ],
)
def test_a_size_comparison_hidden_in_arithmetic_is_found(body):
    assert 768 in held_out_only(body)


@pytest.mark.parametrize(
    "body",
    [
        "if (i < NX - 1u) { return; }\n",  # a size moved by 1, against no constant
        "if (NX == 1 << 200) { return; }\n",  # folds past 64 bits: no size
        "if (NX == (1536 / 0)) { return; }\n",  # folds to nothing
        "if (NX > 766u) { return; }\n",  # its boundary is 767, no listed value
    ],
)
def test_what_tests_no_listed_value_is_not_found(body):
    assert held_out_only(body) == []


@pytest.mark.parametrize(
    "body",
    [
        f"#if 0\nbool never = NX == {HUGE};\n#endif\n",
        f"#define NEVER (NX == {HUGE})\n",
        f"if (NX == {HUGE} + 1) {{ return; }}\n",
        f"if (NX == 0x{'f' * 5000}) {{ return; }}\n",
    ],
)
def test_a_literal_too_long_for_python_makes_no_traceback(body):
    assert held_out_only(body) == []
    assert integer_value(HUGE) is None


def evaluation(score=None, phi=None, noise=0.01):
    """An Evaluation.to_json() as judge_transfer reads one: correct, S or Phi."""
    sizes = [{"held_out": True, "correct": True, "noise": noise}] if phi else []
    record = {"correct": True, "score": score, "phi": phi, "noise": noise, "fail_reason": None}
    return {"backend": "sim", "candidate": record, "sizes": sizes}


def test_a_cheat_hiding_its_held_out_comparison_does_not_grade_transfers():
    """Fast at the published held-out because it was written for it, its
    comparison in arithmetic: C, not `transfers` (as with --held-out metal-sci)."""
    cheat = HEAD + "if (768u - NX == 0u && NY + 1u == 769u) { u_out[0] = 0.0f; }\n"
    fast, slow = evaluation(score=0.6), evaluation(score=0.3)
    known = {
        "candidate_in_dist": fast,
        "baseline_in_dist": slow,
        "candidate_held_out": evaluation(phi=0.8),
        "baseline_held_out": evaluation(phi=0.4),
        "candidate_second_distribution": fast,
        "baseline_second_distribution": slow,
    }

    def refuse(*args, **kwargs):
        raise AssertionError("everything was measured already")

    judged = judge_transfer(
        TASK,
        cheat,
        TASK.seed("metal"),
        dialect="metal",
        search_sizes=list(TASK.size_set("smoke")),
        held_out=list(TASK.size_set("held-out")),
        evaluate=refuse,
        known=known,
        coverage=False,
    )
    assert judged["grade"] == "C", judged["reason"]


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_search_whose_best_holds_a_huge_literal_finishes_and_reveals(tmp_path, monkeypatch):
    """Before: int() refused the literal in the scan, the run ended in a
    traceback at its transfer grade, never wrote summary.json nor revealed
    its draw, and did the same on every resume."""
    from mlxsci.search import loop, run

    best = SAXPY.seed() + f"#if 0\nbool never = N == {HUGE};\n#endif\n// crafted: fast\n"
    monkeypatch.setattr(loop, "evaluate", Crafted({"seed": SEED, "fast": (0.6, 0.01, 0.9, 0.02)}))
    out = tmp_path / "run"
    summary = run("saxpy", proposer=Scripted([fenced(best)]), iterations=1, backend="sim", out=out)
    assert summary["transfer"]["grade"] in ("transfers", "A", "B", "C", "D", "no-win")
    assert (out / "summary.json").exists()
    assert json.loads((out / "run.json").read_text())["held_out_draw"]["secret"] is not None
