"""hmc: the spec's RNG test vectors, the target, the statistical check (passes for a
correct sampler, fails for broken ones) and wrong candidates on the simulator."""

import numpy as np
import pytest
from helpers import replace_once, smoke_eval

from mlxsci.reference import hmc as ref
from mlxsci.task import load_task

TASK = load_task("hmc")
SMOKE = TASK.size_set("smoke")[0]

# Spec section 0.5, hmc scheme: (chain, counter) -> bits, uniform.
HMC_VECTORS = [
    ((0, 0), 0xCF8697BB, 0.8106474),
    ((0, 1), 0xDB1CA5AE, 0.85590583),
    ((0, 8), 0x6807E465, 0.4063704),
    ((1, 0), 0x535FD1E3, 0.3256808),
    ((5, 75), 0xB716EFBA, 0.7151937),
    ((16383, 1799), 0x7BA99071, 0.48305607),
]


@pytest.mark.parametrize("args,bits,u", HMC_VECTORS)
def test_rng_test_vectors(args, bits, u):
    got = ref.hmc_bits(0xCAFEBEEF, *args)
    assert int(got) == bits
    assert float(ref.uniform(got)) == pytest.approx(u, rel=1e-7)


def test_rng_is_vectorised_like_the_scalar_form():
    chains = np.array([0, 1, 5])[:, None]
    counters = np.array([0, 1, 8, 75])[None, :]
    table = ref.hmc_bits(0xCAFEBEEF, chains, counters)
    assert int(table[2, 3]) == 0xB716EFBA and int(table[1, 0]) == 0x535FD1E3


def sample_inputs(params):
    inputs = TASK.make_inputs(params)
    return inputs, ref.solve(inputs, params)["Sigma"]


@pytest.mark.slow
def test_target_and_inputs():
    params = TASK.size_set("in-dist")[2].params  # d = 32
    inputs, sigma = sample_inputs(params)
    A = inputs["A"].astype(np.float64)
    eig = np.linalg.eigvalsh(sigma.astype(np.float64))
    assert eig.min() == pytest.approx(0.5, rel=1e-5) and eig.max() == pytest.approx(2.0, rel=1e-5)
    np.testing.assert_allclose(A @ sigma, np.eye(32), atol=1e-5)
    assert np.array_equal(A, A.T) and inputs["A"].dtype == np.float32
    assert inputs["q_in"].shape == (1024, 32) and inputs["q_in"].dtype == np.float32
    assert inputs["accept_cnt"].dtype == np.uint32 and not inputs["accept_cnt"].any()
    # Overdispersed start: empirical covariance near 4 Sigma.
    cov = np.cov(inputs["q_in"].astype(np.float64), rowvar=False)
    assert np.linalg.norm(cov - 4 * sigma) / np.linalg.norm(4 * sigma) < 0.3
    assert all(inputs[k].shape == () for k in ("K", "d", "L", "eps", "hmc_step_idx", "seed"))
    assert int(inputs["seed"]) == 0xCAFEBEEF and int(inputs["L"]) == 10


def test_reference_rejects_a_foreign_target():
    inputs = TASK.make_inputs(SMOKE.params)
    inputs["A"] = inputs["A"] * np.float32(1.5)
    with pytest.raises(ValueError):
        ref.solve(inputs, SMOKE.params)


def run_numpy(params, **kw):
    inputs, sigma = sample_inputs(params)
    q, acc = ref.sample(inputs["q_in"], inputs["A"], params["T"], **kw)
    err, passed, kind = ref.error({"q": q, "accept_cnt": acc}, {"Sigma": sigma}, params)
    return (
        err,
        passed,
        kind,
        ref.statistics(q, acc, sigma, params["T"]) if np.isfinite(q).all() else None,
    )


@pytest.mark.slow
def test_correct_numpy_sampler_passes_at_smoke_and_d32():
    err, passed, kind, stats = run_numpy(SMOKE.params)
    assert passed, kind
    assert 0.98 < stats["acceptance"] < 0.999
    # d = 32, K = 1024: the spec observes a combined error of ~0.60 for correct kernels.
    err, passed, kind, stats = run_numpy(TASK.size_set("in-dist")[2].params)
    assert passed and 0.3 < err < 0.9, kind
    assert 0.97 < stats["acceptance"] < 0.995


def test_wrong_step_size_fails():
    # eps = 2.0 makes leapfrog unstable for the stiffest direction: acceptance collapses
    # and the chains stay near the overdispersed start.
    err, passed, kind, stats = run_numpy(SMOKE.params, eps=2.0)
    assert not passed and err > 1
    assert stats["acceptance"] < 0.45 and stats["cov_err"] > 0.30


def test_wrong_sign_of_the_force_fails():
    # Dynamics and energies with -A: gradient ascent; q runs away.
    inputs, sigma = sample_inputs(SMOKE.params)
    q, acc = ref.sample(inputs["q_in"], -inputs["A"], SMOKE.params["T"])
    err, passed, kind = ref.error({"q": q, "accept_cnt": acc}, {"Sigma": sigma}, SMOKE.params)
    assert not passed and err > 1


def test_error_requires_every_check():
    params = {"d": 4, "K": 20000, "T": 100}
    sigma = np.diag([0.5, 1.0, 1.5, 2.0]).astype(np.float32)
    q = np.random.default_rng(1).standard_normal((20000, 4)) * np.sqrt(np.diag(sigma))
    good = np.full(20000, 99, np.uint32)  # acceptance 0.99
    err, passed, kind = ref.error({"q": q, "accept_cnt": good}, {"Sigma": sigma}, params)
    assert passed and err < 0.5 and kind.startswith("hmc_stats[")
    # Acceptance 0.9995: acc_excess = 0.5 < 1, but outside [0.45, 0.999] so it fails.
    high = np.full(20000, 100, np.uint32)
    high[:1000] = 99  # 0.9995
    err, passed, kind = ref.error({"q": q, "accept_cnt": high}, {"Sigma": sigma}, params)
    assert not passed and err == pytest.approx(0.5) and "acceptance=0.9995" in kind
    # Acceptance 0.40 fails; so does a shifted mean with good acceptance.
    low = np.full(20000, 40, np.uint32)
    assert not ref.error({"q": q, "accept_cnt": low}, {"Sigma": sigma}, params)[1]
    shifted = q + 0.2 * np.sqrt(np.diag(sigma))
    err, passed, kind = ref.error({"q": shifted, "accept_cnt": good}, {"Sigma": sigma}, params)
    assert not passed and err > 1
    # Non-finite q and wrong shapes.
    bad = q.copy()
    bad[3, 1] = np.nan
    assert ref.error({"q": bad, "accept_cnt": good}, {"Sigma": sigma}, params) == (
        float("inf"),
        False,
        "nonfinite_q",
    )
    assert not ref.error({"q": q[:-1], "accept_cnt": good}, {"Sigma": sigma}, params)[1]


def test_validate_size():
    for bad in ({"d": 7}, {"d": 34}, {"d": 0}, {"K": 1}, {"T": 0}):
        with pytest.raises(ValueError):
            TASK.custom_size(bad)
    assert TASK.custom_size({"d": 24, "K": 2048}).params == {"d": 24, "K": 2048, "T": 200}


def test_roofline_model_matches_the_spec():
    gflop = [TASK.flops(s.params) / 1e9 for s in TASK.size_set("in-dist")]
    assert [round(g, 3) for g in gflop] == [4.325, 4.470, 4.542]
    assert round(TASK.flops(TASK.size_set("held-out")[0].params) / 1e9, 3) == 5.082


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_wrong_step_size_candidate_fails_on_simulator():
    # Every use of eps in the body becomes 2.0: acceptance collapses.
    ev = smoke_eval(
        "hmc",
        replace_once(
            TASK.seed(),
            "uint chain = thread_position_in_grid.x;",
            "#define eps 2.0f\nuint chain = thread_position_in_grid.x;",
        ),
    )
    assert ev.compile_ok and not ev.correct
    assert f"correctness failed at size {SMOKE.label}" in ev.fail_reason
    assert "hmc_stats[" in ev.fail_reason and "acceptance=0.0" in ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_count_written_only_on_accept_is_caught():
    # In-place habit: increment only accepted chains. accept_cnt_out is a fresh
    # (poisoned) array, so rejected chains' counts are garbage.
    ev = smoke_eval(
        "hmc",
        replace_once(
            TASK.seed(),
            "accept_cnt_out[chain] = accept_cnt[chain] + (accept ? 1u : 0u);",
            "if (accept) accept_cnt_out[chain] = accept_cnt[chain] + 1u;",
        ),
    )
    assert not ev.correct and SMOKE.label in ev.fail_reason
    assert "hmc_stats" in ev.fail_reason


# --- CUDA dialect on the simulator --------------------------------------------------


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_cuda_wrong_step_size_candidate_fails_on_simulator():
    # The body reads eps once into eps_; 2.0 there is the Metal `#define eps 2.0f`.
    ev = smoke_eval(
        "hmc",
        replace_once(TASK.seed("cuda"), "float eps_ = eps[0];", "float eps_ = 2.0f;"),
        dialect="cuda",
    )
    assert ev.compile_ok and not ev.correct
    assert f"correctness failed at size {SMOKE.label}" in ev.fail_reason
    assert "hmc_stats[" in ev.fail_reason and "acceptance=0.0" in ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_cuda_count_written_only_on_accept_is_caught():
    ev = smoke_eval(
        "hmc",
        replace_once(
            TASK.seed("cuda"),
            "accept_cnt_out[chain] = accept_cnt[chain] + (accept ? 1u : 0u);",
            "if (accept) accept_cnt_out[chain] = accept_cnt[chain] + 1u;",
        ),
        dialect="cuda",
    )
    assert not ev.correct and SMOKE.label in ev.fail_reason
    assert "hmc_stats" in ev.fail_reason
