"""adi3d: reference facts from the spec and a deliberately wrong candidate."""

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.reference import adi3d as ref
from mlxsci.task import load_task

TASK = load_task("adi3d")


@pytest.mark.parametrize(
    "label, max_ref", [("64x64x64x20", 0.744), ("96x96x96x15", 0.899), ("128x128x128x10", 0.960)]
)
@pytest.mark.slow
def test_reference_max_matches_spec(label, max_ref):
    (size,) = [s for s in TASK.size_set("in-dist") if s.label == label]
    out = ref.solve(TASK.make_inputs(size.params), size.params)
    u = out["u"]
    assert u.dtype == np.float32
    assert np.max(np.abs(u)) == pytest.approx(max_ref, abs=1e-3)
    assert ref.tolerance(out, size.params) == pytest.approx(1e-3 + 1e-3 * max_ref, rel=1e-3)
    for face in (u[0], u[-1], u[:, 0], u[:, -1], u[:, :, 0], u[:, :, -1]):
        assert not face.any()


def test_sweep_solves_each_interior_line():
    # One x sweep on a prism, checked line by line against a dense solve.
    params = {"NX": 7, "NY": 5, "NZ": 4, "n_steps": 1}
    u = np.random.default_rng(1).uniform(size=(4, 5, 7)).astype(np.float32)
    out = ref.sweep(u, 2, 0.5)
    n, mu = 7, 0.5
    A = np.eye(n) * (1 + 2 * mu) - mu * (np.eye(n, k=1) + np.eye(n, k=-1))
    A[0], A[-1] = np.eye(n)[0], np.eye(n)[-1]
    for k in range(4):
        for j in range(5):
            if 0 < j < 4 and 0 < k < 3:
                np.testing.assert_allclose(out[k, j], np.linalg.solve(A, u[k, j]), rtol=1e-5)
            else:
                assert np.array_equal(out[k, j], u[k, j])  # face line: copied
    assert TASK.make_inputs(params)["u_in"].shape == (4, 5, 7)


def test_byte_model_and_sizes():
    mb = [TASK.bytes_moved(s.params) / 1e6 for s in TASK.size_set("in-dist")]
    assert mb == pytest.approx([125.8, 318.5, 503.3], rel=1e-3)
    (held,) = TASK.size_set("held-out")
    assert TASK.bytes_moved(held.params) / 1e9 == pytest.approx(1.510, rel=1e-3)
    with pytest.raises(ValueError):
        TASK.custom_size({"NX": 2})


FACE_X = "if (j == 0 || k == 0 || j == NY - 1 || k == NZ - 1) {"


def test_wrong_face_rule_fails():
    # adi_x copies the lines next to the y faces instead of solving them.
    seed = TASK.seed()
    assert seed.count(FACE_X) == 1
    bad = seed.replace(FACE_X, "if (j <= 1 || k == 0 || j >= NY - 2 || k == NZ - 1) {")
    ev = smoke_eval("adi3d", bad)
    assert ev.compile_ok and not ev.correct
    assert "at size 21x13x10x3" in ev.fail_reason and "max_abs=" in ev.fail_reason


# --- CUDA dialect (seed.cu) on the simulator ---------------------------------

CUDA_SEED = TASK.seed("cuda")
CUDA_FACE_X = "if (j == 0 || k == 0 || j == ny - 1 || k == nz - 1) {"


def test_cuda_wrong_face_rule_fails():
    # The wrong Metal candidate above in CUDA: adi_x copies the lines next to the y faces.
    assert CUDA_SEED.count(CUDA_FACE_X) == 1
    ev = smoke_eval(
        "adi3d",
        CUDA_SEED.replace(CUDA_FACE_X, "if (j <= 1 || k == 0 || j >= ny - 2 || k == nz - 1) {"),
        dialect="cuda",
    )
    assert ev.compile_ok and not ev.correct
    assert "at size 21x13x10x3" in ev.fail_reason and "max_abs=" in ev.fail_reason
