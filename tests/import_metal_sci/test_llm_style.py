"""LLM-style Metal-Sci candidates convert and are correct on the simulator.

metal_sci_candidates/<task>_<what>.metal are correct optimised candidates
written the way a model answering Metal-Sci's prompt writes them (the
optimisations its prompt lists: threadgroup tiles with halos and barriers,
simd shuffles and reductions, simdgroup matrices, float4 math, cooperative
loads, compile-time paths, `[[max_total_threads_per_threadgroup]]` before
the kernel's name or GNU's `__attribute__((...))` after its parameters;
helpers, structs, program-scope `constant` tables, `#define`s, several thread
attributes, `ushort` attribute types, `[[kernel]]` and `kernel`, non-ASCII
comments). A Metal compiler and Metal-Sci's host run each one correctly, so
each must convert and come out correct on the simulator at its smoke sizes;
one that does not is a converter bug. The set takes ~30 s on 2 cores; the
one candidate whose simulation alone takes several seconds is marked slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import smoke_eval

from mlxsci.import_metal_sci.convert import convert_source
from mlxsci.kernel.candidate import parse, validate
from mlxsci.task import load_task, task_names

CANDIDATES = Path(__file__).parent / "metal_sci_candidates"
FILES = sorted(p.name for p in CANDIDATES.glob("*.metal"))

# Simulating these takes several seconds on 2 cores (simdgroup matrices:
# every 8x8 load and store is a collective the fibers meet at).
SLOW = {"hmc_simdgroup_matrix.metal"}


def task_of(name: str) -> str:
    return name.split("_", 1)[0]


def converted_text(name: str) -> str:
    task = task_of(name)
    c = convert_source(task, (CANDIDATES / name).read_text())
    assert c.text is not None, f"{name} not converted: {c.reason}"
    t = load_task(task)
    cand = parse(c.text, dialect="metal")
    names = t.launch_names(t.size_set("smoke")[0].params)
    assert validate(cand, t.kernel_names, names, {k.name: k.in_place for k in t.kernels}) == []
    assert not any("source policy refuses" in n for n in c.notes), c.notes
    return c.text


def test_every_task_has_llm_style_candidates():
    assert {task_of(n) for n in FILES} == set(task_names())
    assert len(FILES) >= 25


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in FILES],
)
@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_llm_style_candidate_is_correct_on_the_simulator(name):
    text = converted_text(name)
    result = smoke_eval(task_of(name), text, dialect="metal")
    assert result.correct, (result.fail_reason, text)


def test_what_the_conversions_changed():
    """The forms the converter once refused or mis-converted, as converted."""
    # an in-place buffer is mlxsci's output, started as a copy of the input:
    # a helper handed it, a kept row pointer, a float4 view work unchanged
    ising = converted_text("ising_read_helper.metal")
    assert "//! threadgroup = (16, 16, 1)\n//! inplace spins_out = spins\n" in ising
    assert "device char* ms_spins = (device char*)spins_out;" in ising
    assert "neighbour_sum(ms_spins, g, gid.x, gid.y)" in ising
    assert "ms_spins[site] = char(-s);" in ising
    rows = converted_text("ising_row_pointers.metal")
    assert "//! inplace spins_out = spins\n" in rows
    assert "device char* row = ms_spins + j * NX;" in rows
    assert "const int h = row[il] + row[ir] + north[i] + south[i];" in rows
    assert "row[i] = char(-s);" in rows
    saxpy = converted_text("saxpy_float4.metal")
    assert "//! inplace y_out = y\n" in saxpy
    assert "device float4* y4 = (device float4*)y_out;" in saxpy
    assert "y4[i] = fma(float4(a), x4[i], y4[i]);" in saxpy
    for text in (ising, rows, saxpy):
        assert "_in =" not in text and "carry" not in text
    # a one-float buffer bound by reference: a reference to MLX's element 0
    gradshaf = converted_text("gradshaf_axis_by_reference.metal")
    assert "device float& ms_psi_axis = *(device float*)psi_axis;" in gradshaf
    assert "const constant float& ms_psi_axis = *(const constant float*)psi_axis;" in gradshaf
    # the capped pipelines keep the host's default launch, whether the cap
    # stands before the kernel or, GNU's spelling, after its parameters
    for name in ("wave3d_xy_tile_zwindow.metal", "wave3d_tile3d.metal"):
        wave = converted_text(name)
        assert "//! threadgroup = (8, 8, 4)" in wave, name
        assert "max_total_threads" not in wave and "__attribute__" not in wave, name
    capped = converted_text("saxpy_kernel_attribute.metal")
    assert "//! threadgroup = (256, 1, 1)\n//! inplace y_out = y\n" in capped
    assert "y_out[gid] += a * x[gid];" in capped
