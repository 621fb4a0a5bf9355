"""fft3d: reference facts from the spec and a deliberately wrong candidate."""

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.reference import fft3d as ref
from mlxsci.task import load_task

TASK = load_task("fft3d")


@pytest.mark.parametrize("n, max_ref", [(32, 824.7), (64, 2572.5), (128, 8371.2)])
def test_reference_max_matches_spec(n, max_ref):
    params = {"N": n}
    out = ref.solve(TASK.make_inputs(params), params)
    data = out["data"]
    assert data.dtype == np.float32 and data.shape == (n, n, n, 2)
    assert np.max(np.abs(data)) == pytest.approx(max_ref, abs=0.1)
    assert ref.tolerance(out, params) == pytest.approx(1e-3 + 1e-3 * max_ref, rel=1e-4)


def test_reference_is_the_unnormalised_forward_dft():
    n = 4
    inputs = TASK.make_inputs({"N": n})
    d = inputs["in_data"].astype(np.float64)
    x = d[..., 0] + 1j * d[..., 1]
    w = np.exp(-2j * np.pi * np.outer(np.arange(n), np.arange(n)) / n)
    y = np.einsum("ka,jb,ic,abc->kji", w, w, w, x)  # axes (z, y, x)
    out = ref.solve(inputs, {"N": n})["data"]
    np.testing.assert_allclose(out[..., 0], y.real, atol=1e-4)
    np.testing.assert_allclose(out[..., 1], y.imag, atol=1e-4)


def test_inputs_and_byte_model():
    inputs = TASK.make_inputs({"N": 8})
    rng = np.random.default_rng(0xF17F)
    re = rng.standard_normal((8, 8, 8), dtype=np.float32)
    im = rng.standard_normal((8, 8, 8), dtype=np.float32)
    assert inputs["in_data"].shape == (8, 8, 8, 2)
    assert np.array_equal(inputs["in_data"][..., 0], re)
    assert np.array_equal(inputs["in_data"][..., 1], im)
    # Metal-Sci's scored 96 N^3 (3.15 / 25.2 / 201.3 MB), twice the physical 48 N^3.
    mb = [TASK.bytes_moved(s.params) / 1e6 for s in TASK.size_set("in-dist")]
    assert mb == pytest.approx([3.15, 25.2, 201.3], rel=2e-3)


@pytest.mark.parametrize("n", [1, 12, 2048])
def test_validate_size_rejects(n):
    with pytest.raises(ValueError, match="power of two"):
        TASK.custom_size({"N": n})


LOAD = "= src[base + t * stride];\n    threadgroup_barrier(mem_flags::mem_threadgroup);\n"


def test_missing_barrier_after_load_fails():
    # The line transform all three passes share (fft_line, in the header)
    # without the barrier between the bit-reversed load and the first
    # butterfly stage: threads read entries their neighbours have not stored.
    seed = TASK.seed()
    assert seed.count(LOAD) == 1
    bad = seed.replace(LOAD, "= src[base + t * stride];\n", 1)
    ev = smoke_eval("fft3d", bad)
    assert ev.compile_ok and not ev.correct
    assert "at size 16" in ev.fail_reason and "max_abs=" in ev.fail_reason


def test_wrong_twiddle_sign_fails():
    # An inverse-direction twiddle (exp(+i...)) in all three passes (they share fft_line).
    seed = TASK.seed()
    bad = seed.replace("float ang = -M_PI_F", "float ang = M_PI_F")
    assert bad != seed
    ev = smoke_eval("fft3d", bad)
    assert not ev.correct and "max_abs=" in ev.fail_reason


# --- CUDA dialect (seed.cu) on the simulator ---------------------------------

CUDA_SEED = TASK.seed("cuda")
CUDA_LOAD = "= src[base + t * stride];\n    __syncthreads();\n"


@pytest.mark.parametrize("which", ["missing_barrier_after_load", "wrong_twiddle_sign"])
def test_cuda_wrong_candidates_fail(which):
    # The two wrong Metal candidates above, in CUDA.
    if which == "missing_barrier_after_load":  # in fft_line, which every pass calls
        assert CUDA_SEED.count(CUDA_LOAD) == 1
        bad = CUDA_SEED.replace(CUDA_LOAD, "= src[base + t * stride];\n", 1)
    else:  # exp(+i...) in all three passes
        assert CUDA_SEED.count("float ang = -FFT_PI_F") == 1
        bad = CUDA_SEED.replace("float ang = -FFT_PI_F", "float ang = FFT_PI_F")
    ev = smoke_eval("fft3d", bad, dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert "at size 16" in ev.fail_reason and "max_abs=" in ev.fail_reason
