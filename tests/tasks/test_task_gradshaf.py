"""gradshaf: reference facts from the spec and a deliberately wrong candidate."""

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.reference import gradshaf as ref
from mlxsci.task import load_task

TASK = load_task("gradshaf")


def solve(size):
    inputs = TASK.make_inputs(size.params)
    out = ref.solve(inputs, size.params)
    return inputs, out, ref.tolerance(out, size.params)


@pytest.mark.parametrize(
    "label, max_ref",
    [("65x65x30", 0.989), ("257x257x40", 0.997), ("513x513x30", 0.999), ("129x129x35", 0.993)],
)
def test_reference_max_matches_spec(label, max_ref):
    (size,) = [s for s in TASK.size_set("all") if s.label == label]
    _, out, tol = solve(size)
    psi = out["psi"]
    assert psi.dtype == np.float32 and psi.shape == (size.params["NZ"], size.params["NR"])
    assert np.max(np.abs(psi)) == pytest.approx(max_ref, abs=1e-3)
    assert tol == pytest.approx(1e-4 + 1e-5 * max_ref, rel=1e-4)
    # Boundary stays exactly zero.
    assert not psi[0].any() and not psi[-1].any() and not psi[:, 0].any() and not psi[:, -1].any()


def test_inputs_and_byte_model():
    size = TASK.size_set("in-dist")[0]
    inputs = TASK.make_inputs(size.params)
    psi0 = inputs["psi_in"]
    assert psi0.dtype == np.float32 and psi0.shape == (65, 65)
    assert psi0[32, 32] == pytest.approx(1.0) and psi0[0, 10] == 0.0
    assert inputs["dR"].dtype == np.float32 and float(inputs["dR"]) == pytest.approx(1 / 64)
    mb = [TASK.bytes_moved(s.params) / 1e6 for s in TASK.size_set("in-dist")]
    assert mb == pytest.approx([1.52, 31.7, 94.7], rel=3e-3)
    assert TASK.bytes_moved(TASK.size_set("held-out")[0].params) / 1e6 == pytest.approx(
        6.99, rel=3e-3
    )


def test_one_step_matches_hand_computed_cell():
    # One Jacobi step at a single cell, written out from the spec's formulas in float64.
    inputs = TASK.make_inputs({"NR": 9, "NZ": 7, "n_steps": 1})
    psi = inputs["psi_in"].astype(np.float64)
    out = ref.solve(inputs, {"NR": 9, "NZ": 7, "n_steps": 1})["psi"]
    dr, dz = 1 / 8, 1 / 6
    j, i = 2, 3
    R = 1.0 + i * dr
    psin = psi[j, i] / psi[1:-1, 1:-1].max()
    J = R * 200 * 4 * psin * (1 - psin) if 0 < psin < 1 else 0.0
    aw, ae = 1 / dr**2 + 1 / (2 * R * dr), 1 / dr**2 - 1 / (2 * R * dr)
    ac = -2 / dr**2 - 2 / dz**2
    lap = (
        aw * psi[j, i - 1]
        + ae * psi[j, i + 1]
        + (psi[j + 1, i] + psi[j - 1, i]) / dz**2
        + ac * psi[j, i]
    )
    assert out[j, i] == pytest.approx(psi[j, i] + (-R * J - lap) / ac, abs=1e-5)


def test_validate_size():
    with pytest.raises(ValueError):
        TASK.custom_size({"NR": 2})
    assert TASK.custom_size({"NR": 40, "NZ": 33}).params["n_steps"] == 30


BARRIER_IN_TREE = """        partial[tid] = max(partial[tid], partial[tid + s]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);"""


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_missing_barrier_in_reduction_fails():
    # The tree reduction without its per-level barrier: thread 0 combines
    # partial maxima the other threads have not produced yet.
    seed = TASK.seed()
    assert BARRIER_IN_TREE in seed
    bad = seed.replace(BARRIER_IN_TREE, BARRIER_IN_TREE.rsplit("\n", 1)[0])
    ev = smoke_eval("gradshaf", bad)
    assert ev.compile_ok and not ev.correct
    assert "at size 37x29x6" in ev.fail_reason and "max_abs=" in ev.fail_reason


# --- CUDA dialect (seed.cu) on the simulator ---------------------------------

CUDA_SEED = TASK.seed("cuda")
CUDA_BARRIER_IN_TREE = """        partial[tid] = fmaxf(partial[tid], partial[tid + s]);
    }
    __syncthreads();"""


def test_cuda_missing_barrier_in_reduction_fails():
    # The wrong Metal candidate above in CUDA: no __syncthreads() per tree level.
    assert CUDA_SEED.count(CUDA_BARRIER_IN_TREE) == 1
    bad = CUDA_SEED.replace(CUDA_BARRIER_IN_TREE, CUDA_BARRIER_IN_TREE.rsplit("\n", 1)[0])
    ev = smoke_eval("gradshaf", bad, dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert "at size 37x29x6" in ev.fail_reason and "max_abs=" in ev.fail_reason
