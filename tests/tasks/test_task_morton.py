"""morton: Morton-order facts, reference facts from the spec, and wrong candidates."""

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.task import load_reference, load_task

TASK = load_task("morton")
REF = load_reference("morton")


def morton_slow(x, y, z, log_n):
    m = 0
    for b in range(log_n):
        m |= ((x >> b) & 1) << (3 * b)
        m |= ((y >> b) & 1) << (3 * b + 1)
        m |= ((z >> b) & 1) << (3 * b + 2)
    return m


def test_morton_order_matches_spec_and_masks():
    n = 16
    m = REF.morton_of_row_major(n)
    assert sorted(m.ravel().tolist()) == list(range(n**3))  # a permutation
    for z, y, x in [(0, 0, 1), (0, 1, 0), (1, 0, 0), (3, 5, 7), (15, 15, 15), (9, 2, 12)]:
        assert m[z, y, x] == morton_slow(x, y, z, 4)
    mask = (1 << 12) - 1
    assert int(np.bitwise_or.reduce(m[0, 0, :])) == 0x09249249 & mask
    assert int(np.bitwise_or.reduce(m[0, :, 0])) == 0x12492492 & mask
    assert int(np.bitwise_or.reduce(m[:, 0, 0])) == 0x24924924 & mask
    # 32 consecutive Morton indices cover a 4 (x) x 4 (y) x 2 (z) block.
    z, y, x = np.nonzero(m < 32)
    assert (np.ptp(x), np.ptp(y), np.ptp(z)) == (3, 3, 1)


def test_inputs_are_the_gaussian_scattered_into_morton_order():
    p = {"N": 16, "n_steps": 1}
    inp = TASK.make_inputs(p)
    assert inp["u_in"].shape == (16**3,) and inp["u_in"].dtype == np.float32
    assert int(inp["logN"]) == 4 and inp["logN"].dtype == np.uint32
    g = inp["u_in"][REF.morton_of_row_major(16)]  # gather back
    assert np.allclose(g, g.transpose(0, 2, 1)) and np.allclose(g, g.transpose(2, 1, 0))
    assert not g[0].any() and not g[:, -1].any() and not g[:, :, 0].any()
    assert inp["u_in"][morton_slow(1, 1, 1, 4)] == g[1, 1, 1] != 0


@pytest.mark.parametrize(
    "label, max_ref", [("32x32x32x120", 0.340), ("64x64x64x60", 0.829), ("128x128x128x30", 0.975)]
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_max_ref_and_tolerance_match_spec(label, max_ref):
    (size,) = [s for s in TASK.size_set("all") if s.label == label]
    ref = REF.solve(TASK.make_inputs(size.params), size.params)
    n = size.params["N"]
    assert ref["u"].shape == (n, n, n) and ref["u"].dtype == np.float32
    assert float(np.max(np.abs(ref["u"]))) == pytest.approx(max_ref, abs=5e-4)
    assert REF.tolerance(ref, size.params) == pytest.approx(1e-4 + 1e-5 * max_ref, abs=1e-8)


def test_error_gathers_morton_output_to_row_major():
    p = {"N": 8, "n_steps": 2}
    inp = TASK.make_inputs(p)
    ref = REF.solve(inp, p)
    morton = np.empty(8**3, dtype=np.float32)
    morton[REF.morton_of_row_major(8).ravel()] = ref["u"].ravel()
    assert REF.error({"u": morton}, ref, p) == 0.0
    assert REF.error({"u": ref["u"].ravel()}, ref, p) > 1e-2  # row-major is not Morton
    morton[5] = np.nan
    assert REF.error({"u": morton}, ref, p) == float("inf")
    assert REF.error({}, ref, p) == float("inf")


def test_validate_size():
    for n in (0, 1, 12, 2048):
        with pytest.raises(ValueError, match="power of two"):
            TASK.custom_size({"N": n})
    assert TASK.custom_size({"N": 4, "n_steps": 3}).params == {"N": 4, "n_steps": 3}


ROW_MAJOR = """//! kernel morton_stencil
// Wrong: treats tid as a row-major index.
uint tid = thread_position_in_grid.x;
if (tid >= N * N * N) return;
uint x = tid % N, y = (tid / N) % N, z = tid / (N * N);
float c = u_in[tid];
if (x == 0 || y == 0 || z == 0 || x == N - 1 || y == N - 1 || z == N - 1) {
    u_out[tid] = c;
    return;
}
u_out[tid] = c + alpha * (u_in[tid - 1] + u_in[tid + 1] + u_in[tid - N] + u_in[tid + N]
                          + u_in[tid - N * N] + u_in[tid + N * N] - 6.0f * c);
"""


@pytest.mark.parametrize(
    "source",
    [
        ROW_MAJOR,
        # Off by one: the neighbour re-encode drops the top bit of each coordinate.
        # (Swapping the x and y bits would pass: the Gaussian is symmetric in x and y.)
        TASK.seed().replace(
            "    m |= ((z >> b) & 1u) << (3u * b + 2u);",
            "    m |= ((z >> b) & 1u) << (3u * b + 2u);\n        if (b + 2 == logN) break;",
        ),
    ],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_wrong_candidate_fails(source):
    assert source != TASK.seed()
    ev = smoke_eval("morton", source)
    assert ev.compile_ok and not ev.correct
    assert "correctness failed at size 8x8x8x5" in ev.fail_reason
    assert "max_abs=" in ev.fail_reason


# --- CUDA dialect (seed.cu) on the simulator ---------------------------------

CUDA_SEED = TASK.seed("cuda")
CUDA_ROW_MAJOR = """//! kernel morton_stencil
// Wrong: treats tid as a row-major index.
const uint32_t n = N[0];
const float a = alpha[0];
uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
if (tid >= n * n * n) return;
uint32_t x = tid % n, y = (tid / n) % n, z = tid / (n * n);
float c = u_in[tid];
if (x == 0 || y == 0 || z == 0 || x == n - 1 || y == n - 1 || z == n - 1) {
    u_out[tid] = c;
    return;
}
u_out[tid] = c + a * (u_in[tid - 1] + u_in[tid + 1] + u_in[tid - n] + u_in[tid + n]
                      + u_in[tid - n * n] + u_in[tid + n * n] - 6.0f * c);
"""


@pytest.mark.parametrize(
    "source",
    [
        # The wrong Metal candidates above, in CUDA: row-major indexing, and the
        # neighbour re-encode that drops the top bit of each coordinate.
        CUDA_ROW_MAJOR,
        CUDA_SEED.replace(
            "    m |= ((z >> b) & 1u) << (3u * b + 2u);",
            "    m |= ((z >> b) & 1u) << (3u * b + 2u);\n        if (b + 2 == logN) break;",
        ),
    ],
    ids=["row_major", "dropped_top_bit"],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_cuda_wrong_candidates_fail(source):
    assert source != CUDA_SEED
    ev = smoke_eval("morton", source, dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert "correctness failed at size 8x8x8x5" in ev.fail_reason
    assert "max_abs=" in ev.fail_reason
