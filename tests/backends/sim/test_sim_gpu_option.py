"""The GPU the simulator models (--sim-gpu, issue 36), as the backends see it:
the options that carry it to the worker, each dialect's default, the
refusals (an unknown name, a name given to a backend that times a real GPU),
and the device it makes: named, and fingerprinted apart, so that a roofline
measured for one GPU is never read for another."""

import dataclasses

import pytest

from mlxsci.backends import (
    backend_class,
    backend_options,
    get_backend,
    gpu_options,
    modelled_gpu,
)
from mlxsci.backends.sim import SimBackend, gpus
from mlxsci.roofline.store import cache_path

GPUS = ("apple-m1-pro", "nvidia-h100")


def test_the_issue_s_gpus_are_there_with_a_default_per_dialect():
    assert set(GPUS) <= set(gpus.names())
    assert modelled_gpu("sim", "metal") == "apple-m1-pro"
    assert modelled_gpu("sim", "cuda") == "nvidia-h100"
    assert modelled_gpu("sim", None) == "apple-m1-pro"  # the simulator's own dialect: metal
    assert modelled_gpu("sim", "metal", "nvidia-h100") == "nvidia-h100"
    assert modelled_gpu("cuda", "cuda") is None and modelled_gpu("metal", "metal") is None


def test_a_named_gpu_rides_in_the_options_a_job_carries_to_the_worker():
    options = backend_options("sim", "metal", "nvidia-h100")
    assert options == {"dialect": "metal", "sim_gpu": "nvidia-h100"}
    assert backend_options("sim", None, "apple-m1-pro") == {"sim_gpu": "apple-m1-pro"}
    # None leaves the dialect's default: the options are as before
    assert backend_options("sim", "cuda") == {"dialect": "cuda"}
    # what the worker does with a job's options (mlxsci/worker/serve.py run_job)
    be = get_backend("sim", **options)
    assert (be.dialect, be.gpu.name) == ("metal", "nvidia-h100")
    assert get_backend("sim", **backend_options("sim", "cuda")).gpu.name == "nvidia-h100"
    assert SimBackend().gpu.name == "apple-m1-pro"


def test_an_unknown_gpu_is_a_value_error_listing_the_choices():
    with pytest.raises(ValueError, match="unknown GPU 'h200'.*apple-m1-pro, nvidia-h100"):
        gpu_options("sim", "h200")
    with pytest.raises(gpus.UnknownGpu, match="choose from"):
        SimBackend(sim_gpu="h200")
    with pytest.raises(ValueError, match="unknown GPU"):
        backend_options("sim", "metal", "h200")


@pytest.mark.parametrize("backend", ["cuda", "metal"])
def test_a_backend_on_a_real_gpu_takes_no_gpu_name(backend):
    assert gpu_options(backend, None) == {}
    with pytest.raises(ValueError, match=f"the {backend} backend times the GPU it runs on"):
        gpu_options(backend, "nvidia-h100")
    with pytest.raises(ValueError, match="use --backend sim"):
        backend_options(backend, backend_class(backend).dialect, "apple-m1-pro")


def test_the_device_names_its_gpu_and_each_gpu_has_its_own_roofline_entry():
    m1, h100 = (SimBackend(dialect="metal", sim_gpu=name) for name in GPUS)
    a, b = m1.device_info(), h100.device_info()
    assert (a["sim_gpu"], b["sim_gpu"]) == GPUS
    assert a["name"].startswith("CPU simulator (") and a["name"].endswith("apple-m1-pro")
    assert a["fingerprint"] != b["fingerprint"]
    assert cache_path(m1) != cache_path(h100)  # the roofline cache is keyed by it
    assert SimBackend(dialect="metal").device_info() == a  # the default is the same GPU


def test_the_fingerprint_follows_the_gpu_s_parameters():
    be = SimBackend(sim_gpu="apple-m1-pro")
    before = be.device_info()["fingerprint"]
    be.gpu = dataclasses.replace(be.gpu, dram_gbs=be.gpu.dram_gbs * 2)  # a re-fitted file
    assert be.device_info()["fingerprint"] != before
