"""lj: reference facts from the spec (pair counts, occupancy, displacements), the
two-kernel pipeline, the cell-overflow rule, and wrong candidates."""

import sys

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.task import load_reference, load_task

TASK = load_task("lj")
REF = load_reference("lj")
SEED = TASK.seed()
SMOKE = TASK.size_set("smoke")
# (label, initial pairs within r_cut, max initial cell occupancy, max displacement over
# the run, max |final pos|, total MFLOP): Metal-Sci's computed values.
SPEC = [
    ("N1728-M5-L13.8x20", 29051, 27, 0.068, 13.84, 23.24),
    ("N4096-M7-L18.4x15", 68859, 27, 0.050, 18.42, 41.32),
    ("N10648-M10-L25.3x10", 178608, 20, 0.029, 25.32, 71.44),
    ("N2744-M6-L16.1x12", 46093, 20, 0.035, 16.12, 22.12),
]


def size(label):
    (s,) = [s for s in TASK.size_set("all") if s.label == label]
    return s


def occupancy(pos, p):
    box, m = np.float32(p["L"]), p["M"]
    w = pos - box * np.floor(pos / box)
    c = np.clip(np.floor(w / (box / np.float32(m))).astype(int), 0, m - 1)
    return np.bincount((c[:, 2] * m + c[:, 1]) * m + c[:, 0], minlength=m**3)


def test_sizes_are_the_spec_sizes():
    assert [s.label for s in TASK.size_set("in-dist")] == [row[0] for row in SPEC[:3]]
    assert TASK.size_set("held-out")[0].params == {"N": 2744, "M": 6, "L": 16.1, "n_steps": 12}
    assert TASK.defaults == TASK.size_set("in-dist")[0].params


@pytest.mark.parametrize("label, pairs, occ, disp, maxpos, mflop", SPEC)
def test_pair_counts_occupancy_and_flops_match_spec(label, pairs, occ, disp, maxpos, mflop):
    p = size(label).params
    assert TASK.flops(p) == 40.0 * pairs * p["n_steps"]
    assert TASK.flops(p) / 1e6 == pytest.approx(mflop, abs=0.005)
    assert occupancy(TASK.make_inputs(p)["pos_in"][:, :3], p).max() == occ


@pytest.mark.parametrize("label, pairs, occ, disp, maxpos, mflop", SPEC)
def test_reference_displacement_matches_spec(label, pairs, occ, disp, maxpos, mflop):
    p = size(label).params
    inp = TASK.make_inputs(p)
    ref = REF.solve(inp, p)
    assert ref["pos"].shape == (p["N"], 3) and ref["pos"].dtype == np.float32
    assert float(np.max(np.abs(ref["pos"] - inp["pos_in"][:, :3]))) == pytest.approx(disp, abs=1e-3)
    assert float(np.max(np.abs(ref["pos"]))) == pytest.approx(maxpos, abs=5e-3)
    assert REF.tolerance(ref, p) == 1e-4


def test_inputs_follow_the_spec():
    p = size("N1728-M5-L13.8x20").params
    inp = TASK.make_inputs(p)
    pos, vel = inp["pos_in"], inp["vel_in"]
    assert pos.shape == vel.shape == (1728, 4) and pos.dtype == np.float32
    assert not pos[:, 3].any() and not vel[:, 3].any()
    assert pos[:, :3].min() >= 0 and pos[:, :3].max() < 13.8  # wrapped into [0, L)
    assert np.abs(vel[:, :3].astype(np.float64).sum(axis=0)).max() < 1e-4  # no net momentum
    assert np.abs(vel).max() <= 0.31
    # Particle n = a*K^2 + b*K + c starts within 5 % of a spacing of (a, b, c) * spacing.
    spacing = 13.8 / 12
    a, b, c = np.indices((12, 12, 12)).reshape(3, -1)
    lattice = np.stack([a, b, c], axis=1) * spacing
    d = pos[:, :3] - lattice
    d -= 13.8 * np.round(d / 13.8)
    assert np.abs(d).max() <= 0.05 * spacing + 1e-5
    assert inp["N"].dtype == inp["M"].dtype == inp["MAX_PER_CELL"].dtype == np.uint32
    assert int(inp["MAX_PER_CELL"]) == 64 and float(inp["rcut2"]) == 6.25
    assert float(inp["dt"]) == pytest.approx(0.005) and float(inp["L"]) == pytest.approx(13.8)


def cell_coords(pos, p, wrap=True):
    """The seed's cell coordinates (fp32), with or without its periodic wrap."""
    box, m = np.float32(p["L"]), p["M"]
    w = pos - box * np.floor(pos / box) if wrap else pos
    return np.clip(np.floor(w / (box / np.float32(m))).astype(int), 0, m - 1)


def pairs_lost_without_wrap(pos, p):
    """Pairs within r_cut that a kernel binning without the wrap never sees:
    j's clamped cell is not one of the 27 around i's (wrapped) cell on some axis."""
    box, m = float(np.float32(p["L"])), p["M"]
    x = pos.astype(np.float64)
    d = x[None, :, :] - x[:, None, :] if len(x) <= 400 else None
    if d is None:  # large sizes: candidate pairs from a periodic tree
        from scipy.spatial import cKDTree

        w = np.mod(x, box)
        w[w >= box] = 0.0
        i, j = cKDTree(w, boxsize=box).query_pairs(2.5, output_type="ndarray").T
    else:
        d -= box * np.round(d / box)
        i, j = np.nonzero(np.triu((d * d).sum(-1) < 6.25, k=1))
    good, bad = cell_coords(pos, p), cell_coords(pos, p, wrap=False)
    lost = 0
    for a, b in ((i, j), (j, i)):  # a looks for b
        gap = np.abs(good[a] - bad[b]) % m
        lost += int(np.count_nonzero((np.minimum(gap, m - gap) > 1).any(axis=1)))
    return lost


SEEDED = [(s.label, s.params) for s in TASK.size_set("all")] + [
    ("held-out draw, " + dist, {"N": 2197, "M": 9, "L": 22.6, "n_steps": 6, "distribution": dist})
    for dist in sorted(TASK.distributions)
]


@pytest.mark.parametrize("label, p", SEEDED, ids=[row[0] for row in SEEDED])
def test_seeded_inputs_start_in_other_periodic_images(label, p, monkeypatch):
    # An evaluation's inputs (seeded) put particles in images of the box: the same
    # system as the draw wrapped into [0, L), but binning without the wrap loses pairs.
    pos = TASK.inputs(p, seed=20261130)["pos_in"][:, :3]
    box = float(np.float32(p["L"]))
    images = np.floor(pos.astype(np.float64) / box)
    # One window [o, o + L) per axis: every pair within L of each other per axis
    # (a single-shift minimum image stays right), some particles outside [0, L).
    assert (np.ptp(pos.astype(np.float64), axis=0) < box).all()
    assert (images != 0).any(axis=1).mean() > 0.05
    assert (cell_coords(pos, p) != cell_coords(pos, p, wrap=False)).any(axis=1).any()
    # With M = 3 the 27 cells around any cell are the whole box: nothing to lose.
    assert pairs_lost_without_wrap(pos, p) > 0 or p["M"] == 3
    # The images are whole periods of the same draw: without them, the same seed
    # gives the positions wrapped into the box (to fp32 rounding of the shifted ones).
    module = sys.modules[TASK.make_inputs.__module__]
    monkeypatch.setattr(module, "periodic_images", lambda x, box, seed: np.zeros(x.shape, int))
    in_box = TASK.inputs(p, seed=20261130)["pos_in"][:, :3].astype(np.float64)
    assert in_box.min() >= 0 and in_box.max() < box
    assert np.abs(pos.astype(np.float64) - box * images - in_box).max() < 4e-6


def test_draws_cover_both_sides_of_each_axis():
    # Across draws each axis has particles below 0 (a floor-based wrap, not a
    # truncating one) and past L, each draw within one window of width L.
    p = SMOKE[0].params
    box = float(np.float32(p["L"]))
    seen = set()
    for seed in range(12):
        pos = TASK.inputs(p, seed=seed)["pos_in"][:, :3].astype(np.float64)
        assert (np.ptp(pos, axis=0) < box).all()
        images = np.floor(pos / box)
        seen |= {(axis, v) for axis in range(3) for v in np.unique(images[:, axis]) if v}
    assert seen == {(axis, v) for axis in range(3) for v in (-1.0, 1.0)}


def test_fixed_data_stay_in_the_box():
    # Metal-Sci's inputs (seed None: the spec facts above, the pair count) keep every
    # particle in [0, L): only the seeded draws carry images.
    for s in TASK.size_set("all"):
        pos = TASK.make_inputs(s.params)["pos_in"][:, :3]
        assert pos.min() >= 0 and pos.max() < np.float32(s.params["L"])
        assert pairs_lost_without_wrap(pos, s.params) == 0


@pytest.mark.parametrize("which", [SMOKE[0], TASK.size_set("in-dist")[0]], ids=lambda s: s.label)
def test_particles_cross_a_face_during_the_run(which):
    # Besides starting in other images, particles cross the box's faces while the
    # reference integrates (the wrap is needed mid-run too, not only at step 0).
    p = which.params
    inp = TASK.inputs(p, seed=20261130)
    box = float(np.float32(p["L"]))
    start = np.floor(inp["pos_in"][:, :3].astype(np.float64) / box)
    end = np.floor(REF.solve(inp, p)["pos"].astype(np.float64) / box)
    assert np.count_nonzero((start != end).any(axis=1)) >= 1


def test_smoke_sizes_have_empty_and_crowded_cells():
    first, second = SMOKE
    occ = occupancy(TASK.make_inputs(first.params)["pos_in"][:, :3], first.params)
    assert (occ == 0).sum() >= 4 and occ.max() >= 12  # lattice packed into one corner
    occ = occupancy(TASK.make_inputs(second.params)["pos_in"][:, :3], second.params)
    assert occ.min() >= 8 and occ.max() >= 18  # spec-style lattice, M = 3
    for s in SMOKE:
        p = s.params
        assert round(p["N"] ** (1 / 3)) ** 3 == p["N"] and p["M"] >= 3 and p["L"] / p["M"] >= 2.5
        assert p["N"] % 16 and p["n_steps"] % 2


def test_reference_forces_match_all_pairs():
    # An independent all-pairs restatement (fp64, minimum image) on the first smoke size.
    p = SMOKE[0].params
    pos = TASK.make_inputs(p)["pos_in"][:, :3]
    x, box = pos.astype(np.float64), float(np.float32(p["L"]))
    d = x[None, :, :] - x[:, None, :]
    d -= box * np.round(d / box)
    r2 = (d * d).sum(-1)
    ok = (r2 < 6.25) & (r2 > 1e-12)
    inv_r2 = np.where(ok, 1.0 / np.where(ok, r2, 1.0), 0.0)
    coef = -24.0 * (2.0 * inv_r2**6 - inv_r2**3) * inv_r2
    f = (coef[:, :, None] * d).sum(axis=1)
    got = REF.forces(pos, box, 6.25)
    assert np.abs(f).max() > 1.0
    assert np.max(np.abs(got - f)) < 1e-9 * np.abs(f).max()


def test_contract_replaces_the_clear_kernel():
    assert TASK.kernel_names == ["lj_build_cells", "lj_step"]
    build = TASK.kernel("lj_build_cells")
    assert build.atomic_outputs and build.init_value == 0.0
    assert build.outputs == ("cell_count", "cell_list")
    step = TASK.kernel("lj_step")
    assert not step.atomic_outputs and step.init_value is None
    assert step.inputs[:4] == ("pos_in", "vel_in", "cell_count", "cell_list")


def test_pipeline_builds_then_steps_and_returns_last_counts():
    calls = []

    def launch(name, inputs, outputs):
        calls.append((name, inputs))
        k = len(calls)
        return {n: np.full(shape, k, dtype=dtype) for n, (shape, dtype) in outputs.items()}

    p = dict(SMOKE[1].params, n_steps=3)
    inp = TASK.make_inputs(p)
    out = TASK.run(launch, inp, p)
    assert [c[0] for c in calls] == ["lj_build_cells", "lj_step"] * 3
    assert calls[0][1]["pos"] is inp["pos_in"] and calls[1][1]["pos_in"] is inp["pos_in"]
    assert calls[2][1]["pos"][0, 0] == 2 and calls[3][1]["vel_in"][0, 0] == 2
    assert calls[3][1]["cell_count"][0] == 3 and calls[3][1]["cell_list"].shape == (27 * 64,)
    assert out["pos"].shape == (343, 3) and out["pos"][0, 0] == 6
    assert out["cell_count"].shape == (27,) and out["cell_count"][0] == 5


def test_error_enforces_cell_overflow_before_positions():
    p = SMOKE[1].params
    ref = {"pos": np.zeros((343, 3), np.float32)}
    counts = np.full(27, 13, np.uint32)
    counts[0] = 5  # every one of the 343 particles counted once
    assert REF.error({"pos": ref["pos"], "cell_count": counts}, ref, p) == (
        0.0,
        True,
        "max_abs_pos",
    )
    err, ok, kind = REF.error({"pos": ref["pos"] + 2e-4, "cell_count": counts}, ref, p)
    assert not ok and kind == "max_abs_pos" and err == pytest.approx(2e-4)
    counts[5] = 65
    assert REF.error({"pos": ref["pos"], "cell_count": counts}, ref, p) == (
        float("inf"),
        False,
        "cell_overflow",
    )
    counts[:] = 10
    counts[5], counts[0] = 64, 29  # a full cell, and still 343 in all
    assert REF.error({"pos": ref["pos"], "cell_count": counts}, ref, p)[1]
    nan = np.full((343, 3), np.nan, np.float32)
    assert not REF.error({"pos": nan, "cell_count": counts}, ref, p)[1]
    assert not REF.error({"pos": ref["pos"]}, ref, p)[1]


def test_error_refuses_cell_counts_that_do_not_sum_to_n():
    """Every particle takes one slot by an atomic fetch-add, so the counts sum
    to N in any order; an update lost to a split read-modify-write (lanes in
    lock-step on a GPU) leaves the sum short, whatever the positions."""
    p = SMOKE[1].params
    ref = {"pos": np.zeros((343, 3), np.float32)}
    counts = np.full(27, 13, np.uint32)
    counts[0] = 4  # one update lost
    assert REF.error({"pos": ref["pos"], "cell_count": counts}, ref, p) == (
        float("inf"),
        False,
        "cell_count_sum",
    )
    counts[0] = 5
    assert REF.error({"pos": ref["pos"], "cell_count": counts}, ref, p)[1]


def test_validate_size():
    for bad in ({"N": 1000 + 1}, {"M": 2, "L": 7.0}, {"M": 6}, {"n_steps": 0}):
        with pytest.raises(ValueError):
            TASK.custom_size(bad)
    assert TASK.custom_size({"N": 512, "M": 3, "L": 8.0}).params == {
        "N": 512,
        "M": 3,
        "L": 8.0,
        "n_steps": 20,
    }


@pytest.mark.parametrize(
    "old, new",
    [
        # neighbour cells not wrapped in x: misses pairs across the periodic boundary
        (
            "uint nx = uint((cx + dx + m) % m);",
            "if (cx + dx < 0 || cx + dx >= m) {\n continue;\n }\n uint nx = uint(cx + dx);",
        ),
        ("d -= L * round(d / L);", ""),  # no minimum image
        ("f += (-24.0f", "f -= (-24.0f"),  # attractive at short range
    ],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_wrong_candidate_fails(old, new):
    assert old in SEED
    ev = smoke_eval("lj", SEED.replace(old, new))
    assert ev.compile_ok and not ev.correct
    assert f"correctness failed at size {SMOKE[0].label}" in ev.fail_reason
    assert "max_abs_pos=" in ev.fail_reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_cell_overflow_fails():
    # Each particle bumps its cell's count by 8: the crowded cells pass 64.
    old = "atomic_fetch_add_explicit(&cell_count[cell], 1u, memory_order_relaxed);"
    new = "atomic_fetch_add_explicit(&cell_count[cell], 8u, memory_order_relaxed) / 8u;"
    assert old in SEED
    ev = smoke_eval("lj", SEED.replace(old, new))
    assert ev.compile_ok and not ev.correct
    assert f"correctness failed at size {SMOKE[0].label}" in ev.fail_reason
    assert "cell_overflow=inf" in ev.fail_reason


# --- CUDA dialect (seed.cu) on the simulator ---------------------------------

CUDA_SEED = TASK.seed("cuda")


@pytest.mark.parametrize(
    "old, new, metric",
    [
        # The wrong Metal candidates above, in CUDA. Neighbour cells not wrapped in x:
        (
            "uint32_t nx = (uint32_t)((cx + dx + m) % m);",
            "if (cx + dx < 0 || cx + dx >= m) {\n continue;\n }\n uint32_t nx = (uint32_t)(cx + dx);",
            "max_abs_pos=",
        ),
        # no minimum image (the three per-component lines go):
        (
            "                ddx -= box * roundf(ddx / box);\n"
            "                ddy -= box * roundf(ddy / box);\n"
            "                ddz -= box * roundf(ddz / box);\n",
            "",
            "max_abs_pos=",
        ),
        # attractive at short range (the force changes sign):
        ("float coef = -24.0f", "float coef = 24.0f", "max_abs_pos="),
        # each particle bumps its cell's count by 8: the crowded cells pass 64.
        (
            "atomicAdd(&cell_count[cell], 1u);",
            "atomicAdd(&cell_count[cell], 8u) / 8u;",
            "cell_overflow=inf",
        ),
    ],
    ids=["no_x_wrap", "no_minimum_image", "attractive", "cell_overflow"],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_cuda_wrong_candidates_fail_on_simulator(old, new, metric):
    assert CUDA_SEED.count(old) == 1
    ev = smoke_eval("lj", CUDA_SEED.replace(old, new), dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert f"correctness failed at size {SMOKE[0].label}" in ev.fail_reason
    assert metric in ev.fail_reason


@pytest.mark.parametrize(
    "dialect, old, new",
    [
        ("metal", "float3 w = r - L * floor(r / L);", "float3 w = r;"),
        # the build kernel's x line only (the mutant bench/mutation_score.py makes)
        ("cuda", "float wx = r.x - box * floorf(r.x / box);", "float wx = r.x;"),
    ],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_binning_without_the_wrap_fails(dialect, old, new):
    # Particles of every seeded draw lie outside [0, L): binned without the wrap they
    # land in clamped edge cells, which lose their partners (wrong positions) or
    # crowd past 64 (cell_overflow), either way at the first smoke size.
    seed = TASK.seed(dialect)
    assert seed.count(old) == 1
    ev = smoke_eval("lj", seed.replace(old, new), dialect=dialect)
    assert ev.compile_ok and not ev.correct
    assert f"correctness failed at size {SMOKE[0].label}" in ev.fail_reason
    assert "max_abs_pos=" in ev.fail_reason or "cell_overflow=inf" in ev.fail_reason
