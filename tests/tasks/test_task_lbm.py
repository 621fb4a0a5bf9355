"""lbm: reference facts from the spec, lattice invariants, and wrong candidates."""

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.task import load_reference, load_task

TASK = load_task("lbm")
REF = load_reference("lbm")
SMOKE = TASK.size_set("smoke")[0]


@pytest.mark.parametrize(
    "label, max_ref",
    [("64x64x50", 0.452), ("128x128x100", 0.453), ("256x256x100", 0.450), ("192x192x75", 0.450)],
)
def test_max_ref_and_tolerance_match_spec(label, max_ref):
    (size,) = [s for s in TASK.size_set("all") if s.label == label]
    ref = REF.solve(TASK.make_inputs(size.params), size.params)
    assert ref["f"].shape == (9, size.params["NY"], size.params["NX"])
    assert ref["f"].dtype == np.float32
    assert float(np.max(np.abs(ref["f"]))) == pytest.approx(max_ref, abs=5e-4)
    assert REF.tolerance(ref, size.params) == pytest.approx(5e-4 + 1e-4 * max_ref, abs=1e-7)


def test_inputs_are_soa_equilibrium_at_rest():
    inp = TASK.make_inputs(SMOKE.params)
    f = inp["f_in"]
    assert f.shape == (9, 23, 37) and f.dtype == np.float32
    rho = f.sum(axis=0, dtype=np.float64)
    assert rho.min() > 0.999 and rho.max() == pytest.approx(1.05, abs=2e-3)
    w = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4, dtype=np.float32)
    assert np.array_equal(f, w[:, None, None] * (f[0] / w[0])[None])
    assert inp["tau"].dtype == np.float32 and inp["tau"].shape == ()


def test_reference_conserves_mass_and_keeps_rest_state():
    p = dict(SMOKE.params)
    inp = TASK.make_inputs(p)
    f = REF.solve(inp, p)["f"]
    assert f.sum(dtype=np.float64) == pytest.approx(inp["f_in"].sum(dtype=np.float64), rel=1e-6)
    # A uniform fluid at rest is a fixed point of stream + collide.
    w = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4, dtype=np.float32)
    rest = dict(inp, f_in=np.broadcast_to(w[:, None, None], (9, 5, 6)).copy())
    out = REF.solve(rest, {"NX": 6, "NY": 5, "n_steps": 3})["f"]
    assert np.max(np.abs(out - rest["f_in"])) < 1e-7


def test_reference_pulls_with_periodic_wrap():
    # Streaming alone (omega = 0 switches the collision off): a marked value in
    # direction 5 (CX = 1, CY = 1) moves one cell up and right, wrapping both axes.
    f = np.zeros((9, 4, 5), dtype=np.float32)
    f[:, :, :] = 0.1
    f[5, 3, 4] = 1.0  # top-right corner: moves to (j, i) = (0, 0) through both wraps
    out = REF.step(f, np.float32(0.0))
    assert out[5, 0, 0] == np.float32(1.0) and out[5, 3, 4] == np.float32(0.1)


def test_validate_size():
    with pytest.raises(ValueError):
        TASK.custom_size({"NY": 0})
    with pytest.raises(ValueError):
        TASK.custom_size({"n_steps": 0})


SEED = TASK.seed()


@pytest.mark.parametrize(
    "old, new",
    [
        ("(int(i) - CX[k])", "(int(i) + CX[k])"),  # push instead of pull in x
        ("if (sj < 0) sj += ny;", ""),  # no wrap below row 0: stale row instead
    ],
)
def test_wrong_candidate_fails(old, new):
    assert old in SEED
    source = SEED.replace(old, new)
    if not new:  # keep the load in bounds so the failure is a correctness one
        source = source.replace("uint(sj) * NX", "uint(max(sj, 0)) * NX")
    ev = smoke_eval("lbm", source)
    assert ev.compile_ok and not ev.correct
    assert "correctness failed at size 37x23x7" in ev.fail_reason
    assert "max_abs_f=" in ev.fail_reason


# --- CUDA dialect on the simulator --------------------------------------------------

CUDA_SEED = TASK.seed("cuda")


@pytest.mark.parametrize(
    "old, new",
    [
        ("(int(i) - CX[k])", "(int(i) + CX[k])"),  # push instead of pull in x
        ("if (sj < 0) sj += ny;", ""),  # no wrap below row 0: stale row instead
    ],
)
def test_cuda_wrong_candidate_fails(old, new):
    assert old in CUDA_SEED
    source = CUDA_SEED.replace(old, new)
    if not new:  # keep the load in bounds so the failure is a correctness one
        source = source.replace("uint32_t(sj) * NX_", "uint32_t(max(sj, 0)) * NX_")
    ev = smoke_eval("lbm", source, dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert "correctness failed at size 37x23x7" in ev.fail_reason
    assert "max_abs_f=" in ev.fail_reason
