"""The modelled GPUs' data files (mlxsci/backends/sim/gpus; issue 36): both
load, every parameter has a source, the loader refuses a damaged file naming
the parameter, and the headline figures agree with the vendors' published
peaks."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import fields

import pytest

from mlxsci.backends.sim import gpus
from mlxsci.backends.sim.gpus import GpuModel, UnknownGpu, default_for, from_dict, load, names

SHIPPED = ("apple-m1-pro", "nvidia-h100")
NUMERIC = [
    f.name for f in fields(GpuModel) if f.name not in ("name", "title", "dialect", "sources")
]
# Parameters no datasheet gives: their sources must say they are fitted.
FITTED = ("dispatch_us", "barrier_cycles", "atomic_cycles")


def raw(name: str) -> dict:
    return json.loads((gpus.HERE / f"{name}.json").read_text())


def test_names_lists_both_gpus():
    assert set(SHIPPED) <= set(names())


@pytest.mark.parametrize("name", SHIPPED)
def test_file_loads_with_a_source_for_every_parameter(name):
    gpu = load(name)
    assert gpu.name == name == raw(name)["name"]
    assert set(gpu.parameters()) == set(NUMERIC)
    assert set(gpu.sources) == set(NUMERIC)
    assert all(len(source.strip()) > 20 for source in gpu.sources.values())
    for param in FITTED:
        # What no datasheet gives is fitted, or says it is still to be.
        assert "fitted" in gpu.sources[param], param


@pytest.mark.parametrize("dialect, name", [("metal", "apple-m1-pro"), ("cuda", "nvidia-h100")])
def test_each_dialect_defaults_to_its_own_gpu(dialect, name):
    assert default_for(dialect) == name
    assert load(name).dialect == dialect


def test_unknown_name_lists_the_choices():
    with pytest.raises(UnknownGpu) as info:
        load("nvidia-b200")
    message = str(info.value)
    assert "nvidia-b200" in message
    assert all(name in message for name in SHIPPED)


def _drop(params):
    del params["clock_ghz"]


def _text(params):
    params["clock_ghz"]["value"] = "fast"


def _boolean(params):
    params["clock_ghz"]["value"] = True


def _negative(params):
    params["clock_ghz"]["value"] = -1.0


def _nan(params):
    params["clock_ghz"]["value"] = math.nan


def _infinite(params):
    params["clock_ghz"]["value"] = math.inf


def _zero(params):
    params["clock_ghz"]["value"] = 0


def _no_source(params):
    del params["clock_ghz"]["source"]


def _blank_source(params):
    params["clock_ghz"]["source"] = "   "


def _bare_number(params):
    params["clock_ghz"] = 1.296


DAMAGE = [
    (_drop, "is missing"),
    (_text, "not a number"),
    (_boolean, "not a number"),
    (_negative, "positive"),
    (_nan, "positive"),
    (_infinite, "positive"),
    (_zero, "positive"),
    (_no_source, "no source"),
    (_blank_source, "no source"),
    (_bare_number, "is missing"),
]


@pytest.mark.parametrize("damage, says", DAMAGE, ids=[d.__name__.strip("_") for d, _ in DAMAGE])
def test_damaged_parameter_is_refused_by_name(damage, says):
    data = copy.deepcopy(raw("apple-m1-pro"))
    damage(data["parameters"])
    with pytest.raises(UnknownGpu) as info:
        from_dict(data, "apple-m1-pro.json")
    assert "'clock_ghz'" in str(info.value) and says in str(info.value)


def test_unknown_parameter_is_refused_by_name():
    data = copy.deepcopy(raw("nvidia-h100"))
    data["parameters"]["tensor_cores"] = {"value": 4, "source": "Hopper whitepaper"}
    with pytest.raises(UnknownGpu, match="tensor_cores"):
        from_dict(data)


def test_zero_atomic_cost_is_allowed():
    data = copy.deepcopy(raw("nvidia-h100"))
    data["parameters"]["atomic_cycles"]["value"] = 0
    assert from_dict(data).atomic_cycles == 0.0


def test_counts_load_as_integers():
    gpu = load("nvidia-h100")
    assert isinstance(gpu.cores, int) and isinstance(gpu.llc_bytes, int)
    assert isinstance(gpu.clock_ghz, float)


@pytest.mark.parametrize(
    "name, tflops, gbs",
    [
        ("apple-m1-pro", 5.2, 204.8),  # 16-core M1 Pro: 5.2 TFLOPS, LPDDR5-6400 x 256 bit
        ("nvidia-h100", 67.0, 3350.0),  # H100 SXM5 datasheet: 67 TFLOPS FP32, 3.35 TB/s
    ],
)
def test_peaks_match_published_figures(name, tflops, gbs):
    gpu = load(name)
    assert gpu.flops_per_second == pytest.approx(tflops * 1e12, rel=0.05)
    assert gpu.bytes_per_second == pytest.approx(gbs * 1e9, rel=0.05)
