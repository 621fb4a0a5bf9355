"""ising: the spec's RNG test vectors, acceptance table and checksums against the
NumPy reference, the in-place/fresh-output equivalence, and wrong candidates."""

import hashlib

import numpy as np
import pytest
from helpers import smoke_eval

from mlxsci.reference import ising as ref
from mlxsci.task import load_task

TASK = load_task("ising")
SMOKE = TASK.size_set("smoke")[0]

# Spec section 0.5, ising scheme: (step, site) -> bits, uniform.
ISING_VECTORS = [
    ((0, 0), 0xBA936299, 0.7288114),
    ((0, 1), 0x2D34D74E, 0.17658752),
    ((1, 0), 0x669C5833, 0.40082312),
    ((7, 12345), 0x4A0D2842, 0.28926325),
    ((99, 4194303), 0x2205A1E4, 0.13289839),
]


@pytest.mark.parametrize("args,bits,u", ISING_VECTORS)
def test_rng_test_vectors(args, bits, u):
    got = ref.ising_bits(0xC0FFEE01, *args)
    assert int(got) == bits
    assert float(ref.uniform(got)) == pytest.approx(u, rel=1e-7)


def test_acceptance_table_bits():
    inputs = TASK.make_inputs(SMOKE.params)
    table = inputs["p_accept"]
    assert table.dtype == np.float32 and table.shape == (5,)  # < 8 entries: constant T*
    assert [hex(b) for b in table.view(np.uint32)] == [
        "0x3f800000",
        "0x3f800000",
        "0x3f800000",
        "0x3e3ed8d2",
        "0x3d0e468f",
    ]
    assert table.tobytes() == ref.acceptance_table().tobytes()


# Spec section 7: (sum of initial spins, sum of final spins, first 8 final spins of
# row 0, sha256(final bytes)[:16]).
CHECKSUMS = {
    "256x256x100": (134, -6104, [-1, -1, -1, -1, -1, -1, -1, 1], "b5444a160076dba6"),
    "1024x1024x50": (504, 734, [1, 1, 1, -1, -1, 1, -1, -1], "6453c853867a4eea"),
    "2048x2048x25": (2478, -23426, [-1, -1, 1, 1, -1, -1, -1, -1], "9a04f1c5cdfd6b20"),
    "1536x1536x40": (346, -23234, [1, 1, -1, -1, 1, 1, 1, 1], "c6970f53a36dda86"),
}


def test_initial_spin_sums_at_every_metal_sci_size():
    sizes = TASK.size_set("in-dist") + TASK.size_set("held-out")
    assert sorted(s.label for s in sizes) == sorted(CHECKSUMS)
    for size in sizes:
        spins = TASK.make_inputs(size.params)["spins"]
        assert spins.dtype == np.int8 and spins.shape == (size.params["NY"], size.params["NX"])
        assert int(spins.sum(dtype=np.int64)) == CHECKSUMS[size.label][0]


# 2048x2048x25 and 1536x1536x40 also match (about 8 s each in NumPy); not run here.
@pytest.mark.parametrize("label", ["256x256x100", "1024x1024x50"])
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_final_checksums(label):
    size = next(s for s in TASK.size_set("in-dist") if s.label == label)
    inputs = TASK.make_inputs(size.params)
    final = ref.solve(inputs, size.params)["spins"]
    _, total, first8, digest = CHECKSUMS[label]
    assert final.dtype == np.int8
    assert int(final.sum(dtype=np.int64)) == total
    assert final[0, :8].tolist() == first8
    assert hashlib.sha256(final.tobytes()).hexdigest()[:16] == digest


def in_place_sweeps(s, n_sweeps, seed, table):
    """Metal-Sci's semantics, site by site in place (slow: small lattices only)."""
    s = s.copy()
    ny, nx = s.shape
    for step in range(2 * n_sweeps):
        for j in range(ny):
            for i in range(nx):
                if (i + j) % 2 != step % 2:
                    continue
                h = (
                    int(s[j, (i - 1) % nx])
                    + int(s[j, (i + 1) % nx])
                    + int(s[(j - 1) % ny, i])
                    + int(s[(j + 1) % ny, i])
                )
                u = ref.uniform(ref.ising_bits(seed, step, j * nx + i))
                if u < table[(int(s[j, i]) * h + 4) // 2]:
                    s[j, i] = -s[j, i]
    return s


def test_reference_equals_in_place_update_on_even_lattice():
    params = {"NX": 10, "NY": 6, "n_sweeps": 4}
    inputs = TASK.make_inputs(params)
    expected = in_place_sweeps(inputs["spins"], 4, 0xC0FFEE01, inputs["p_accept"])
    got = ref.solve(inputs, params)["spins"]
    assert np.array_equal(got, expected)
    assert not np.array_equal(got, inputs["spins"])


def test_sub_pass_leaves_the_other_colour_alone():
    inputs = TASK.make_inputs(SMOKE.params)
    s = inputs["spins"]
    out = ref.sub_pass(s, 3, 0xC0FFEE01, inputs["p_accept"])  # colour 1
    even = (np.add.outer(np.arange(s.shape[0]), np.arange(s.shape[1])) % 2) == 0
    assert np.array_equal(out[even], s[even]) and not np.array_equal(out, s)


def test_error_counts_differing_sites():
    a = np.ones((4, 6), np.int8)
    b = a.copy()
    b[1, 2] = b[3, 5] = -1
    assert ref.error({"spins": b}, {"spins": a}, {}) == 2.0
    assert ref.error({"spins": a}, {"spins": a}, {}) == 0.0
    assert ref.error({"spins": a[:3]}, {"spins": a}, {}) == 24.0
    assert ref.ERROR_KIND == "spin_disagreements" and ref.tolerance({}, {}) == 0.0


def test_validate_size():
    for bad in ({"NX": 255}, {"NY": 7}, {"NX": 0}, {"n_sweeps": 0}):
        with pytest.raises(ValueError):
            TASK.custom_size(bad)


def test_roofline_model_is_metal_sci_bytes():
    mb = [TASK.bytes_moved(s.params) / 1e6 for s in TASK.size_set("all")[1:]]
    assert [round(x, 1) for x in mb] == [13.1, 104.9, 209.7, 188.7]


def test_wrong_colour_order_fails_on_simulator():
    seed = TASK.seed()
    old = "if (((i + j) & 1u) != (step_idx & 1u)) {"
    assert seed.count(old) == 1
    ev = smoke_eval("ising", seed.replace(old, "if (((i + j) & 1u) == (step_idx & 1u)) {"))
    assert ev.compile_ok and not ev.correct
    assert f"at size {SMOKE.label}" in ev.fail_reason
    assert "spin_disagreements=" in ev.fail_reason


def test_skipping_the_copy_of_inactive_sites_fails():
    # The in-place habit: inactive threads return without writing spins_out. The
    # poison then reaches the next dispatch's neighbour sums, and the simulator
    # reports the resulting table read out of bounds before the unwritten check.
    seed = TASK.seed()
    old = "    spins_out[idx] = spins[idx];\n    return;"
    assert seed.count(old) == 1
    ev = smoke_eval("ising", seed.replace(old, "    return;"))
    assert not ev.correct and SMOKE.label in ev.fail_reason
    assert {"unwritten", "out_of_bounds"} & set(ev.sizes[0].flags)


# --- CUDA dialect (seed.cu) on the simulator ---------------------------------

CUDA_SEED = TASK.seed("cuda")


@pytest.mark.parametrize(
    "old, new, metric",
    [
        # The two wrong Metal candidates above, in CUDA: the wrong colour is updated ...
        (
            "if (((i + j) & 1u) != (step & 1u)) {",
            "if (((i + j) & 1u) == (step & 1u)) {",
            "spin_disagreements=",
        ),
        # ... and inactive threads return without copying their spin to spins_out.
        ("    spins_out[idx] = spins[idx];\n    return;", "    return;", None),
    ],
    ids=["wrong_colour", "no_copy_of_inactive_sites"],
)
def test_cuda_wrong_candidates_fail_on_simulator(old, new, metric):
    assert CUDA_SEED.count(old) == 1
    ev = smoke_eval("ising", CUDA_SEED.replace(old, new), dialect="cuda")
    assert ev.compile_ok and not ev.correct
    assert f"at size {SMOKE.label}" in ev.fail_reason
    if metric is not None:
        assert metric in ev.fail_reason
    else:
        assert {"unwritten", "out_of_bounds"} & set(ev.sizes[0].flags)
