"""wave3d: reference facts from the spec, the three-buffer rotation, and wrong candidates."""

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.task import load_reference, load_task

TASK = load_task("wave3d")
REF = load_reference("wave3d")
SMOKE = TASK.size_set("smoke")[0]


def solve(size):
    return REF.solve(TASK.make_inputs(size.params), size.params)


@pytest.mark.parametrize(
    "label, max_ref",
    [
        ("64x64x64x30", 0.400),
        ("160x160x160x20", 0.608),
        ("192x192x192x15", 0.832),
        ("128x128x128x20", 0.428),
    ],
)
@pytest.mark.slow
def test_max_ref_and_tolerance_match_spec(label, max_ref):
    (size,) = [s for s in TASK.size_set("all") if s.label == label]
    ref = solve(size)
    assert ref["u"].shape == (size.params["NZ"], size.params["NY"], size.params["NX"])
    assert ref["u"].dtype == np.float32
    assert float(np.max(np.abs(ref["u"]))) == pytest.approx(max_ref, abs=5e-4)
    assert REF.tolerance(ref, size.params) == pytest.approx(1e-4 + 1e-5 * max_ref, abs=1e-8)


def test_inputs_are_a_gaussian_bump_at_rest():
    inp = TASK.make_inputs(SMOKE.params)
    u = inp["u_curr"]
    assert u.shape == (13, 17, 23) and u.dtype == np.float32
    assert np.array_equal(inp["u_prev"], u)
    for face in (u[0], u[-1], u[:, 0], u[:, -1], u[:, :, 0], u[:, :, -1]):
        assert not face.any()
    assert float(u.max()) == pytest.approx(1.0, abs=0.05)  # peak near the centre
    assert np.unravel_index(np.argmax(u), u.shape) == (6, 8, 11)


def test_reference_matches_a_per_cell_loop():
    # A slow, independent restatement of the update on a tiny non-cubic grid.
    p = {"NX": 7, "NY": 6, "NZ": 5, "n_steps": 3}
    inp = TASK.make_inputs(p)
    prev, curr = inp["u_prev"].astype(np.float64), inp["u_curr"].astype(np.float64)
    for _ in range(p["n_steps"]):
        nxt = curr.copy()
        for k in range(1, 4):
            for j in range(1, 5):
                for i in range(1, 6):
                    lap = (
                        curr[k, j, i - 1]
                        + curr[k, j, i + 1]
                        + curr[k, j - 1, i]
                        + curr[k, j + 1, i]
                        + curr[k - 1, j, i]
                        + curr[k + 1, j, i]
                        - 6 * curr[k, j, i]
                    )
                    nxt[k, j, i] = 2 * curr[k, j, i] - prev[k, j, i] + 0.18 * lap
        prev, curr = curr, nxt
    assert np.max(np.abs(REF.solve(inp, p)["u"] - curr)) < 1e-6


def test_pipeline_rotates_three_buffers():
    # A fake launch that records what each step was given.
    seen = []

    def launch(name, inputs, outputs):
        seen.append((inputs["u_prev"], inputs["u_curr"]))
        return {"u_next": np.full(outputs["u_next"][0], len(seen), dtype=np.float32)}

    p = dict(SMOKE.params, n_steps=4)
    inp = TASK.make_inputs(p)
    out = TASK.run(launch, inp, p)
    assert seen[0][0] is inp["u_prev"] and seen[0][1] is inp["u_curr"]
    assert seen[1][0] is inp["u_curr"] and seen[1][1][0, 0, 0] == 1
    assert seen[3][0][0, 0, 0] == 2 and seen[3][1][0, 0, 0] == 3
    assert out["u"][0, 0, 0] == 4


def test_validate_size():
    with pytest.raises(ValueError):
        TASK.custom_size({"NX": 0})
    with pytest.raises(ValueError):
        TASK.custom_size({"n_steps": 0})
    assert TASK.custom_size({"NX": 10, "NZ": 3}).params == {
        "NX": 10,
        "NY": 64,
        "NZ": 3,
        "n_steps": 30,
    }


WRONG = """//! kernel wave_step
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
uint k = thread_position_in_grid.z;
if (i >= NX || j >= NY || k >= NZ) return;
uint idx = (k * NY + j) * NX + i;
float c = u_curr[idx];
if (i == 0 || j == 0 || k == 0 || i == NX - 1 || j == NY - 1 || k == NZ - 1) {
    u_next[idx] = c;
    return;
}
float lap = u_curr[idx - 1] + u_curr[idx + 1] + u_curr[idx - NX] + u_curr[idx + NX]
          + u_curr[idx - NX * NY] + u_curr[idx + NX * NY] - 6.0f * c;
u_next[idx] = PREV + alpha * lap;
"""


@pytest.mark.parametrize(
    "prev",
    [
        "2.0f * c - u_curr[idx]",  # forgets u_prev (identical at step 1, wrong from step 2)
        "2.0f * c + u_prev[idx]",  # wrong sign
    ],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_wrong_candidate_fails(prev):
    ev = smoke_eval("wave3d", WRONG.replace("PREV", prev))
    assert ev.compile_ok and not ev.correct
    assert "correctness failed at size 23x17x13x5" in ev.fail_reason
    assert "max_abs=" in ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_right_candidate_in_same_shape_passes():
    ev = smoke_eval("wave3d", WRONG.replace("PREV", "2.0f * c - u_prev[idx]"))
    assert ev.correct, ev.fail_reason


# --- CUDA dialect on the simulator --------------------------------------------------

WRONG_CUDA = """//! kernel wave_step
//! grid = (ceil_div(NX, 8) * 8, ceil_div(NY, 8) * 8, ceil_div(NZ, 4) * 4)
//! threadgroup = (8, 8, 4)
uint32_t nx = NX[0], ny = NY[0], nz = NZ[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
uint32_t k = blockIdx.z * blockDim.z + threadIdx.z;
if (i >= nx || j >= ny || k >= nz) return;
uint32_t idx = (k * ny + j) * nx + i;
float c = u_curr[idx];
if (i == 0 || j == 0 || k == 0 || i == nx - 1 || j == ny - 1 || k == nz - 1) {
    u_next[idx] = c;
    return;
}
float lap = u_curr[idx - 1] + u_curr[idx + 1] + u_curr[idx - nx] + u_curr[idx + nx]
          + u_curr[idx - nx * ny] + u_curr[idx + nx * ny] - 6.0f * c;
u_next[idx] = PREV + alpha[0] * lap;
"""


@pytest.mark.parametrize(
    "prev",
    [
        "2.0f * c - u_curr[idx]",  # forgets u_prev
        "2.0f * c + u_prev[idx]",  # wrong sign
    ],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_cuda_wrong_candidate_fails(prev):
    # The Metal WRONG candidates above, in CUDA (launch shape spelled out, whole
    # blocks launched, so the guard matters).
    ev = smoke_eval("wave3d", WRONG_CUDA.replace("PREV", prev), dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert "correctness failed at size 23x17x13x5" in ev.fail_reason
    assert "max_abs=" in ev.fail_reason
