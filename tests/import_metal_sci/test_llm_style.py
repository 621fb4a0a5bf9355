"""LLM-style Metal-Sci candidates convert and are correct on the simulator.

metal_sci_candidates/<task>_<what>.metal are correct optimised candidates
written the way a model answering Metal-Sci's prompt writes them (the
optimisations its prompt lists: threadgroup tiles with halos and barriers,
simd shuffles and reductions, simdgroup matrices, float4 math, cooperative
loads, compile-time paths, `[[max_total_threads_per_threadgroup]]`; helpers,
structs, program-scope `constant` tables, `#define`s, several thread
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
    assert validate(cand, t.kernel_names, t.launch_names(t.size_set("smoke")[0].params)) == []
    assert not any("source policy refuses" in n for n in c.notes), c.notes
    return c.text


def test_every_task_has_llm_style_candidates():
    assert {task_of(n) for n in FILES} == set(task_names())
    assert len(FILES) >= 25


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in FILES],
)
def test_llm_style_candidate_is_correct_on_the_simulator(name):
    text = converted_text(name)
    result = smoke_eval(task_of(name), text, dialect="metal")
    assert result.correct, (result.fail_reason, text)


def test_what_the_conversions_changed():
    """The forms the converter once refused or mis-converted, as converted."""
    # a read-only helper taking the in-place buffer reads mlxsci's input
    ising = converted_text("ising_read_helper.metal")
    assert "neighbour_sum(ms_spins, g, gid.x, gid.y)" in ising
    assert "ms_spins_out[site] = char(-s);" in ising
    # a one-float buffer bound by reference: a reference to MLX's element 0
    gradshaf = converted_text("gradshaf_axis_by_reference.metal")
    assert "device float& ms_psi_axis = *(device float*)psi_axis;" in gradshaf
    assert "const constant float& ms_psi_axis = *(const constant float*)psi_axis;" in gradshaf
    # a writable pointer into an in-place buffer: a write view and a read view
    saxpy = converted_text("saxpy_float4.metal")
    assert (
        "device float4* y4 = (device float4*)y_out; "
        "const device float4* ms_y4_in = (const device float4*)y;" in saxpy
    )
    assert "y4[i] = fma(float4(a), x4[i], ms_y4_in[i]);" in saxpy
    rows = converted_text("ising_row_pointers.metal")
    assert "device char* row = ms_spins_out + j * NX; const device char* ms_row_in" in rows
    assert "const int h = ms_row_in[il] + ms_row_in[ir] + north[i] + south[i];" in rows
    assert "row[i] = char(-s);" in rows
    # the capped pipelines keep the host's default launch
    wave = converted_text("wave3d_xy_tile_zwindow.metal")
    assert "//! threadgroup = (8, 8, 4)" in wave and "max_total_threads" not in wave
