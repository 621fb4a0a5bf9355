"""Cheap fakes (issue 22): the least work that could pass a task's check, as real
candidates on the simulator, each failing with the error kind of the check
that catches it; and the honest computation passing those checks for many
input seeds (the NumPy mirrors, fast).

hmc: a kernel that does no sampling (halves the N(0, 4 Sigma) start once, then
copies it) passes the mean / covariance / acceptance statistics; so does one
that draws an exact N(0, Sigma) sample at every step, or runs 2 leapfrog steps
instead of L. nbody: dropping the pairs beyond r = sqrt(3) passes Metal-Sci's
1e-3 + 1e-3 max|ref| at the smoke size. fft3d: half-precision twiddles pass
its max abs tolerance at every size the simulator runs.
"""

from pathlib import Path

import numpy as np
import pytest
import scipy.fft
from helpers import replace_once, smoke_eval

from mlxsci.evaluation.references import get_reference
from mlxsci.reference import fft3d as fft_ref
from mlxsci.reference import hmc as hmc_ref
from mlxsci.reference import nbody as nbody_ref
from mlxsci.task import load_task

FAKES = Path(__file__).resolve().parents[1] / "data" / "fakes"
HMC = load_task("hmc")
HMC_SMOKE = HMC.size_set("smoke")[0].params
NBODY = load_task("nbody")
FFT = load_task("fft3d")


def fake(name: str) -> str:
    return (FAKES / name).read_text()


def assert_caught(ev, kind: str) -> None:
    assert ev.compile_ok, ev.fail_reason
    assert not ev.correct
    assert "correctness failed" in ev.fail_reason and kind in ev.fail_reason, ev.fail_reason


# --- hmc ------------------------------------------------------------------------------


def hmc_reference(params, seed):
    inputs = HMC.make_inputs(params, seed=seed)
    return inputs, hmc_ref.solve(inputs, params)


def test_hmc_statistics_alone_pass_no_sampling():
    # The gap the mixing check closes: half the start is a perfect sample.
    inputs, ref = hmc_reference(HMC_SMOKE, 3)
    q = inputs["q_in"] * np.float32(0.5)
    T = HMC_SMOKE["T"]
    acc = np.where(np.arange(HMC_SMOKE["K"]) % 10 != 9, T, 0).astype(np.uint32)
    assert hmc_ref.statistics(q, acc, ref["Sigma"], T)["passed"]
    err, passed, kind = hmc_ref.error({"q": q, "accept_cnt": acc}, ref, HMC_SMOKE)
    assert not passed and err > 1 and kind.startswith("hmc_not_mixed[")


@pytest.mark.parametrize(
    "name,dialect", [("hmc_no_sampling.metal", None), ("hmc_no_sampling.cu", "cuda")]
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_hmc_no_sampling_is_caught(name, dialect):
    assert_caught(smoke_eval("hmc", fake(name), dialect=dialect), "hmc_not_mixed[")


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_hmc_direct_draw_is_caught():
    # An exact, independent N(0, Sigma) sample per step: statistics and mixing
    # pass; the chains are not the spec's chains.
    assert_caught(smoke_eval("hmc", fake("hmc_direct_draw.metal")), "hmc_replay[")


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_hmc_two_leapfrog_steps_is_caught():
    source = replace_once(
        HMC.seed(), "for (uint l = 0; l < L; ++l) {", "for (uint l = 0; l < 2u; ++l) {"
    )
    source = replace_once(source, "(l == L - 1u)", "(l == 1u)")
    assert_caught(smoke_eval("hmc", source), "hmc_replay[")


def test_hmc_replay_allowance():
    assert hmc_ref.replay_allowance(16384) == pytest.approx(0.03)
    assert hmc_ref.replay_allowance(50) == pytest.approx(0.06)  # 3 chains


def test_hmc_mirror_passes_every_check_for_many_seeds():
    # The kernel's own computation (the fp32 mirror is what solve replays) passes,
    # and so does a sampler in float64 (other rounding, other Metropolis flips).
    for seed in range(12):
        inputs, ref = hmc_reference(HMC_SMOKE, seed)
        out = {"q": ref["q"], "accept_cnt": ref["accept_cnt"]}
        err, passed, kind = hmc_ref.error(out, ref, HMC_SMOKE)
        assert passed and err < 1, (seed, kind)
    q64, acc64 = sample_fp64(inputs, HMC_SMOKE)
    err, passed, kind = hmc_ref.error({"q": q64, "accept_cnt": acc64}, ref, HMC_SMOKE)
    assert passed, kind
    assert hmc_ref.replay_agreement(q64, acc64, ref["q"], ref["accept_cnt"]) > 0.995


def test_hmc_replay_excuses_only_departures_at_a_tie():
    # A chain may leave the mirror's path only through a decision the mirror
    # took within REPLAY_TIE_RTOL of its threshold; two chains that never
    # came near one (tie 1e-3) are more than REPLAY_UNTIED_CHAINS allows.
    inputs, ref = hmc_reference(HMC_SMOKE, 4)
    q, acc = ref["q"].copy(), ref["accept_cnt"].copy()
    q[[10, 20]] += 1.0
    tie = ref["replay_tie"].copy()
    tie[[10, 20]] = 1e-6
    missed, untied, why = hmc_ref.replay_check(q, acc, dict(ref, replay_tie=tie))
    assert why is None and untied == 0
    tie[[10, 20]] = 1e-3
    err, passed, kind = hmc_ref.error(
        {"q": q, "accept_cnt": acc}, dict(ref, replay_tie=tie), HMC_SMOKE
    )
    assert not passed and err > 1 and kind.startswith("hmc_replay_untied[2 of 2 chains"), kind


@pytest.mark.parametrize("dialect", [None, "cuda"])
@pytest.mark.slow
def test_hmc_half_precision_kinetic_energy_is_caught(dialect):
    # The starting kinetic energy summed in half moves dH by ~1e-3: ~98 % of
    # chains still agree, but departures away from any tie give it away.
    seed = HMC.seed(dialect or "metal")
    half = "half" if dialect is None else "__half"
    source = replace_once(seed, "float K_old = 0.0f;", f"{half} K_old = 0.0f;")
    assert_caught(smoke_eval("hmc", source, dialect=dialect), "hmc_replay")


def sample_fp64(inputs, params):
    """The same HMC steps in float64 (as a kernel with other rounding)."""
    q = inputs["q_in"].astype(np.float64)
    A = inputs["A"].astype(np.float64)
    K, d = q.shape
    eps, L, seed = float(inputs["eps"]), int(inputs["L"]), int(inputs["seed"])
    chains = np.arange(K)
    acc = np.zeros(K, dtype=np.uint32)
    for t in range(params["T"]):
        counters = t * (d + 1) + np.arange(d + 1)
        u = hmc_ref.uniform(hmc_ref.hmc_bits(seed, chains[:, None], counters[None, :]))
        u = u.astype(np.float64)
        r = np.sqrt(-2.0 * np.log(np.maximum(u[:, 0:d:2], 1e-7)))
        theta = 2.0 * np.pi * u[:, 1:d:2]
        p = np.empty_like(q)
        p[:, 0::2], p[:, 1::2] = r * np.cos(theta), r * np.sin(theta)
        f = q @ A.T
        h_old = 0.5 * np.sum(q * f, axis=1) + 0.5 * np.sum(p * p, axis=1)
        qn = q.copy()
        p = p - 0.5 * eps * f
        for step in range(L):
            qn = qn + eps * p
            f = qn @ A.T
            p = p - (0.5 * eps if step == L - 1 else eps) * f
        dh = 0.5 * np.sum(qn * f, axis=1) + 0.5 * np.sum(p * p, axis=1) - h_old
        accept = np.log(np.maximum(u[:, d], 1e-30)) < -dh
        q = np.where(accept[:, None], qn, q)
        acc += accept.astype(np.uint32)
    return q.astype(np.float32), acc


def test_hmc_mixing_limit_scales_with_the_noise():
    assert hmc_ref.mix_limit(6, 999) == pytest.approx(0.3 + 3 * np.sqrt(6 / 999))
    # A start only permuted and negated in the whitened basis is not mixed either.
    inputs, ref = hmc_reference(HMC_SMOKE, 5)
    lam, vecs = np.linalg.eigh(ref["Sigma"].astype(np.float64))
    z = inputs["q_in"].astype(np.float64) @ (vecs / np.sqrt(lam)) / 2
    q = (-z[:, ::-1] * np.sqrt(lam)) @ vecs.T
    assert hmc_ref.start_correlation(ref["q_start"], q, ref["Sigma"]) > 0.9


# --- nbody ----------------------------------------------------------------------------

NBODY_SMOKE = NBODY.size_set("smoke")[0].params


def test_nbody_far_pairs_dropped_pass_metal_sci_tolerance_in_numpy():
    inputs = NBODY.make_inputs(NBODY_SMOKE, seed=1)
    ref = nbody_ref.solve(inputs, NBODY_SMOKE)
    pos = inputs["pos_in"][:, :3].astype(np.float32)
    vel = inputs["vel_in"][:, :3].astype(np.float32)
    mass = inputs["mass"].astype(np.float32)
    G, eps, dt = (np.float32(inputs[k]) for k in ("G", "eps", "dt"))
    for _ in range(NBODY_SMOKE["n_steps"]):
        d = pos[None, :, :] - pos[:, None, :]
        r2 = np.einsum("ijk,ijk->ij", d, d) + eps * eps
        w = np.where(r2 < 3.0, r2 ** np.float32(-1.5) * mass[None, :], 0.0)
        vel = vel + G * np.einsum("ij,ijk->ik", w, d).astype(np.float32) * dt
        pos = pos + vel * dt
    err = nbody_ref.error({"pos": pos}, ref, NBODY_SMOKE)
    assert err <= 1e-3 + 1e-3 * float(np.max(np.abs(ref["pos"])))  # Metal-Sci's
    assert err > 10 * nbody_ref.tolerance(ref, NBODY_SMOKE)


@pytest.mark.parametrize("dialect", [None, "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_nbody_far_pairs_dropped_is_caught(dialect):
    if dialect is None:
        old, new = "acc += (mass[j] * inv_r3) * d;", "if (r2 < 3.0f) acc += (mass[j] * inv_r3) * d;"
    else:
        old, new = "float s = mass[j] * inv_r3;", "float s = (r2 < 3.0f) ? mass[j] * inv_r3 : 0.0f;"
    source = replace_once(NBODY.seed(dialect or "metal"), old, new)
    assert_caught(smoke_eval("nbody", source, dialect=dialect), "max_abs_pos=")


@pytest.mark.parametrize("label", ["N397x9", "N2048x10"])
@pytest.mark.slow
def test_nbody_fp64_forces_pass_for_many_seeds(label):
    # Another rounding of the same forces (fp64 throughout) stays far inside.
    params = next(s.params for s in NBODY.size_set("all") if s.label == label)
    for seed in range(4 if params["N"] > 1000 else 10):
        inputs = NBODY.make_inputs(params, seed=seed)
        ref = nbody_ref.solve(inputs, params)
        pos = inputs["pos_in"][:, :3].astype(np.float64)
        vel = inputs["vel_in"][:, :3].astype(np.float64)
        mass = inputs["mass"].astype(np.float64)
        G, eps, dt = (float(inputs[k]) for k in ("G", "eps", "dt"))
        for _ in range(params["n_steps"]):
            vel = vel + nbody_ref.accelerations(pos, mass, G, eps) * dt
            pos = pos + vel * dt
        err = nbody_ref.error({"pos": pos.astype(np.float32)}, ref, params)
        assert err < 0.05 * nbody_ref.tolerance(ref, params), seed


# --- fft3d ----------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", [None, "cuda"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_fft3d_half_precision_twiddles_are_caught(dialect):
    if dialect is None:
        old = "float2 b = cmul(buf[i1], float2(cos(ang), sin(ang)));"
        new = "float2 b = cmul(buf[i1], float2(float(half(cos(ang))), float(half(sin(ang)))));"
    else:  # the twiddles' mantissas cut to 10 bits, as half keeps
        old = "make_float2(cosf(ang), sinf(ang))"
        new = (
            "make_float2(__int_as_float(__float_as_int(cosf(ang)) & 0xFFFFE000),"
            " __int_as_float(__float_as_int(sinf(ang)) & 0xFFFFE000))"
        )
    source = replace_once(FFT.seed(dialect or "metal"), old, new)
    assert_caught(smoke_eval("fft3d", source, dialect=dialect), "fft_rms[")


def test_fft3d_single_precision_fft_passes_for_many_seeds():
    for size in FFT.size_set("smoke") + FFT.size_set("in-dist")[:1]:
        for seed in range(6):
            inputs = FFT.make_inputs(size.params, seed=seed)
            ref = fft_ref.solve(inputs, size.params)
            x = inputs["in_data"][..., 0] + 1j * inputs["in_data"][..., 1]
            y = scipy.fft.fftn(x.astype(np.complex64))
            out = np.stack([y.real, y.imag], axis=-1).astype(np.float32)
            err, passed, kind = fft_ref.error({"data": out}, ref, size.params)
            assert passed, (size.label, seed, kind)
            assert fft_ref.relative_rms(out, ref["data"]) < 0.02 * fft_ref.RMS_TOL


def _wave_steps(inputs, params, lap_dtype, dtype=np.float32):
    """wave3d's steps with the Laplacian held in `lap_dtype` (a kernel that
    rounds it to half), in `dtype` arithmetic otherwise."""
    prev = inputs["u_prev"].astype(dtype)
    curr = inputs["u_curr"].astype(dtype)
    alpha = dtype(inputs["alpha"])
    for _ in range(params["n_steps"]):
        nxt = curr.copy()
        c = curr[1:-1, 1:-1, 1:-1]
        s = (curr[1:-1, 1:-1, :-2] + curr[1:-1, 1:-1, 2:] + curr[1:-1, :-2, 1:-1]
             + curr[1:-1, 2:, 1:-1] + curr[:-2, 1:-1, 1:-1] + curr[2:, 1:-1, 1:-1])  # fmt: skip
        lap = (s - dtype(6.0) * c).astype(lap_dtype).astype(dtype)
        nxt[1:-1, 1:-1, 1:-1] = dtype(2.0) * c - prev[1:-1, 1:-1, 1:-1] + alpha * lap
        prev, curr = curr, nxt
    return {"u": curr.astype(np.float32)}


def test_wave3d_half_laplacian_fails_and_float64_passes():
    from mlxsci.evaluation.references import verdict

    task = load_task("wave3d")
    size = task.size_set("smoke")[0]
    for seed in (1, 2, 3):
        ref = get_reference(task, size.params, seed=seed)
        inputs = task.inputs(size.params, seed)
        err, passed, kind = verdict("wave3d", _wave_steps(inputs, size.params, np.float16), ref,
                                    size.params)  # fmt: skip
        assert err <= ref.tolerance and not passed and kind.startswith("wave_rms")
        honest = _wave_steps(inputs, size.params, np.float64, np.float64)
        assert verdict("wave3d", honest, ref, size.params)[1]
