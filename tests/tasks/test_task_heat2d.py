"""heat2d facts from the spec and a deliberately wrong candidate."""

import pytest
from helpers import smoke_eval

from mlxsci.evaluation.references import get_reference
from mlxsci.task import load_task

TASK = load_task("heat2d")
SMOKE = TASK.size_set("smoke")[0]


@pytest.mark.parametrize("label,tol", [("256x256x50", 1.0578e-4)])
def test_tolerance_matches_spec(label, tol):
    size = next(s for s in TASK.size_set("in-dist") if s.label == label)
    assert get_reference(TASK, size.params).tolerance == pytest.approx(tol, rel=1e-4)


def test_skipped_boundary_copy_is_rejected():
    # The seed without its Dirichlet copy: edge cells are never written.
    src = TASK.seed().replace("    u_out[idx] = c;\n    return;", "    return;")
    assert src != TASK.seed()
    ev = smoke_eval("heat2d", src)
    assert not ev.correct
    assert f"correctness failed at size {SMOKE.label}: max_abs=" in ev.fail_reason


def test_wrong_neighbour_is_rejected():
    src = TASK.seed().replace("float up = u_in[idx + NX];", "float up = u_in[idx + 1];")
    ev = smoke_eval("heat2d", src)
    assert not ev.correct and "max_abs=" in ev.fail_reason and SMOKE.label in ev.fail_reason


# --- CUDA dialect on the simulator --------------------------------------------------

CUDA_SEED = TASK.seed("cuda")


@pytest.mark.parametrize(
    "old, new",
    [
        ("    u_out[idx] = c;\n    return;", "    return;"),  # no Dirichlet copy
        ("float up = u_in[idx + nx];", "float up = u_in[idx + 1];"),  # wrong neighbour
    ],
    ids=["no_boundary_copy", "wrong_neighbour"],
)
def test_cuda_wrong_candidate_is_rejected(old, new):
    assert old in CUDA_SEED
    ev = smoke_eval("heat2d", CUDA_SEED.replace(old, new), dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert f"correctness failed at size {SMOKE.label}: max_abs=" in ev.fail_reason
