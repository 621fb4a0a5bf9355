"""The roofline: probe kernels compute what they claim in both dialects, the
bytes and FLOPs measure() divides by are the ones the kernels move, bw(ws)
takes the read probe only where it applies, a real measurement on the
simulator covers every working set, and stale cache files are measured again.
No assertion here depends on how fast anything runs."""

import json
from dataclasses import asdict, replace

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner

from mlxsci import backends
from mlxsci.backends.sim import SimBackend
from mlxsci.roofline import store as roofline
from mlxsci.roofline.ceilings import Roofline
from mlxsci.roofline.probes import (
    combine,
    elements,
    measure,
    probe_digest,
    probe_kernels,
    read_applies,
)
from mlxsci.roofline.store import cache_path, format_table, load_or_measure
from mlxsci.timing import timers


def launch(kernel, inputs, out_shape, threads, threadgroup):
    (out,) = kernel(
        inputs=inputs,
        output_shapes=[out_shape],
        output_dtypes=[mx.float32],
        grid=(threads, 1, 1),
        threadgroup=(threadgroup, 1, 1),
    )
    return np.array(out)


def u32(x):
    return np.array(x, np.uint32)


# n4 = 300 is not a whole number of threadgroups: Metal runs a partial last
# group, CUDA a whole block with threads past the end, and several passes
# rotate past the end of the array.
@pytest.mark.parametrize("threadgroup", [16, 256])
@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_stream_probes_equal_a_plain_copy_and_triad_after_any_passes(dialect, threadgroup):
    k = probe_kernels(SimBackend(dialect=dialect))
    n4 = 300
    a = np.arange(4 * n4, dtype=np.float32)
    b = np.full(4 * n4, 2.0, dtype=np.float32)
    for passes in (1, 5):
        copy = launch(k["stream_copy"], [a, u32(passes), u32(n4)], (4 * n4,), n4, threadgroup)
        np.testing.assert_array_equal(copy, a)
        triad = launch(k["stream_triad"], [a, b, u32(passes), u32(n4)], (4 * n4,), n4, threadgroup)
        np.testing.assert_array_equal(triad, a * 0.5 + 2.0)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_read_probe_writes_nothing_of_positive_data(dialect):
    k = probe_kernels(SimBackend(dialect=dialect))
    n4, threads, passes = 300, 512, 3
    src = np.random.default_rng(0).uniform(0.5, 1.0, 4 * n4).astype(np.float32)
    bound = np.array([0.0], np.float32)
    out = launch(k["stream_read"], [src, u32(passes), u32(n4), bound], (1,), threads, 256)
    np.testing.assert_array_equal(out, bound)  # only thread 0's pass-through of `bound`
    # The condition is live: negative data is written (every thread's sum is -4 * passes).
    neg = -np.ones(4 * n4, np.float32)
    out = launch(k["stream_read"], [neg, u32(passes), u32(n4), bound], (1,), threads, 256)
    np.testing.assert_array_equal(out, [-4.0 * passes])


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_read_probe_sums_the_rotated_elements(dialect):
    """With a bound every sum falls below, each thread writes its sum; the
    simulator runs threads in order, so the last thread's sum is what stays:
    elements (i % n4 + p * threadgroup) % n4 for p < passes."""
    k = probe_kernels(SimBackend(dialect=dialect))
    n4, threads, tg, passes = 300, 512, 256, 4
    src = np.arange(4 * n4, dtype=np.float32) / 1024
    out = launch(
        k["stream_read"],
        [src, u32(passes), u32(n4), np.array([1e30], np.float32)],
        (1,),
        threads,
        tg,
    )
    i = threads - 1
    rows = src.reshape(n4, 4)
    expect = sum(rows[(i % n4 + p * tg) % n4].sum() for p in range(passes))
    assert out[0] == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_fma_probe_computes_per_thread_values(dialect):
    k = probe_kernels(SimBackend(dialect=dialect))
    threads = 300
    out = launch(
        k["fma_peak"],
        [np.full(threads, 0.9999, np.float32), u32(16), u32(threads)],
        (threads,),
        threads,
        256,
    )
    assert np.all(np.isfinite(out)) and len(set(out.tolist())) > 1


# ------------------------------------------------------------------ accounting
SMALL_PLAN = {
    "sizes": [2**12, 2**14, 2**16],
    "bytes_per_launch": 2**14,
    "threadgroup": 16,
    "read_threads": 256,
    "fma_threads": 64,
    "fma_iters": 4,
    "settle": {"min_runs": 1, "max_runs": 1, "max_seconds": 0.0},
    "timed_runs": 2,
}
RATES = {"copy": 10.0, "triad": 20.0, "read": 30.0, "fma": 7.0}  # GB/s, GFLOPS


class AccountingTimer(timers.Timer):
    """Runs the work, counts from the kernel's own inputs the bytes (or FLOPs)
    it moves, and says it took exactly long enough to run at RATES."""

    name = "accounting"

    def __init__(self):
        self.launches = []  # (probe, bytes or FLOPs)

    def time(self, work):
        results = work.enqueue(work.inputs)
        work.wait(results)
        inp = {k: np.array(v) for k, v in work.inputs.items()}
        probe, amount = self.count(inp, np.array(results["dst"]))
        self.launches.append((probe, amount))
        return timers.Timing(amount / (RATES[probe] * 1e9), {}, results)

    @staticmethod
    def count(inp, dst):
        if "iters" in inp:
            return "fma", int(inp["n"]) * int(inp["iters"]) * 32 * 2
        n4, passes = int(inp["n4"]), int(inp["passes"])
        if "bound" in inp:
            assert dst.tolist() == inp["bound"].tolist()  # nothing of the data written
            return "read", SMALL_PLAN["read_threads"] * passes * 16
        assert inp["src"].size == 4 * n4 and dst.shape == inp["src"].shape
        if "src2" in inp:
            np.testing.assert_array_equal(dst, inp["src"] * 0.5 + inp["src2"])
            return "triad", 3 * 16 * n4 * passes  # two reads and a write per element
        np.testing.assert_array_equal(dst, inp["src"])
        return "copy", 2 * 16 * n4 * passes  # a read and a write per element


def test_measure_divides_the_bytes_the_kernels_move_by_the_timer_seconds(monkeypatch):
    small = replace(backends.BACKENDS["sim"], probe_plan=SMALL_PLAN)
    monkeypatch.setitem(backends.BACKENDS, "sim", small)
    fake = AccountingTimer()
    monkeypatch.setattr(timers, "make_timer", lambda name, backend, kernel_names=(): fake)
    roof = measure(SimBackend(dialect="metal"))
    for probe in ("copy", "triad"):
        assert [ws for ws, _ in roof.probes[probe]] == SMALL_PLAN["sizes"]
        assert [g for _, g in roof.probes[probe]] == pytest.approx([RATES[probe]] * 3, rel=1e-12)
    assert roof.probes["read"] == [[2**12, pytest.approx(RATES["read"], rel=1e-12)]]
    assert roof.bandwidth == [
        [2**12, pytest.approx(30.0)],
        [2**14, pytest.approx(20.0)],
        [2**16, pytest.approx(20.0)],
    ]
    assert roof.peak_gflops == pytest.approx(RATES["fma"], rel=1e-12)
    assert roof.timer == "sim" and roof.reference_copy_gbps is None and roof.theoretical == {}
    # Every streaming launch moves at least the plan's bytes per launch.
    assert all(
        amount >= SMALL_PLAN["bytes_per_launch"]
        for probe, amount in fake.launches
        if probe != "fma"
    )


def test_read_probe_counts_only_where_copy_cannot_fill_the_gpu():
    plan = {"threadgroup": 256, "read_threads": 2**18}  # copy fills 2^18 threads from 8 MiB
    mib = 2**20
    assert read_applies(4 * mib, plan) and not read_applies(8 * mib, plan)
    assert elements(8 * mib, 2, 256) == 2**18
    probes = {
        "copy": [[mib, 100.0], [8 * mib, 500.0], [64 * mib, 300.0]],
        "triad": [[mib, 120.0], [8 * mib, 450.0], [64 * mib, 310.0]],
        "read": [[mib, 900.0], [8 * mib, 999.0], [64 * mib, 999.0]],
    }
    roof = Roofline("cuda", {}, combine(probes, plan), 1.0, "", probes=probes, plan=plan)
    assert roof.bw(mib) == 900.0  # max(copy, triad, read)
    assert roof.bw(8 * mib) == 500.0  # max(copy, triad): read ignored
    assert roof.bw(64 * mib) == 310.0


@pytest.mark.slow
def test_real_sim_measurement_covers_every_working_set():
    be = SimBackend(dialect="metal")
    roof = measure(be)
    plan = backends.backend_info("sim").probe_plan
    assert roof.timer == "sim"
    assert [ws for ws, _ in roof.bandwidth] == plan["sizes"]
    assert all(gbps > 0 for _, gbps in roof.bandwidth)
    assert [ws for ws, _ in roof.probes["read"]] == [
        ws for ws in plan["sizes"] if read_applies(ws, plan)
    ]
    assert roof.peak_gflops > 0 and roof.reference_copy_gbps is None
    assert roof.probe_digest == probe_digest(be, roof.plan)


# ------------------------------------------------------------------ cache
OLD_FORMAT = {
    "backend": "sim",
    "device": {"name": "x"},
    "bandwidth": [[65536, 0.26]],
    "peak_gflops": 27.2,
    "measured_at": "2026-01-01T00:00:00+00:00",
}


@pytest.mark.parametrize("stale", ["old format", "unknown field", "other probes", "not json"])
def test_stale_cache_files_are_measured_again(stale, monkeypatch, tmp_path):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))
    be = SimBackend(dialect="metal")
    # The cache of a measured roofline (a GPU backend's): the simulator's own
    # ceilings are its modelled GPU's, never measured nor cached.
    monkeypatch.setattr(be, "modelled_ceilings", lambda: None)
    fresh = Roofline(
        "sim",
        {},
        [[65536, 5.0]],
        9.0,
        "now",
        timer="sim",
        probe_digest=probe_digest(be, roofline.plan_for(be)),
    )
    calls = []
    monkeypatch.setattr(
        roofline, "measure", lambda backend, progress=None, timer=None: calls.append(timer) or fresh
    )
    path = cache_path(be, "sim")
    data = {
        "old format": OLD_FORMAT,
        "unknown field": dict(asdict(fresh), extra=1),
        "other probes": dict(asdict(fresh), probe_digest="0" * 16),
    }.get(stale)
    path.write_text("{not json" if data is None else json.dumps(data))
    assert load_or_measure(be, timer="sim") == fresh and calls == ["sim"]
    assert load_or_measure(be, timer="sim") == fresh and calls == ["sim"]  # now cached


# ------------------------------------------------------------------ table and CLI
def test_table_shows_curves_and_measured_over_theoretical():
    roof = Roofline(
        "cuda",
        {"name": "GPU"},
        [[2**16, 800.0], [2**30, 3000.0]],
        50000.0,
        "now",
        timer="cupti",
        probes={
            "copy": [[2**16, 700.0], [2**30, 3000.0]],
            "triad": [[2**16, 650.0], [2**30, 2900.0]],
            "read": [[2**16, 800.0]],
        },
        theoretical={"fp32_gflops": 66900.0, "dram_gbps": 3352.0},
        reference_copy_gbps=3100.0,
    )
    text = format_table(roof)
    assert "read (GB/s)" in text and "timer: cupti" in text
    assert "74.7% of 66900.00" in text  # FP32
    assert "89.5% of 3352.00" in text  # DRAM plateau
    assert "96.8% of 3100.00" in text  # plateau over MLX's own copy


@pytest.mark.parametrize("timer", ["cupti", "nonsense"])
def test_cli_rejects_a_timer_the_backend_cannot_use(timer):
    result = CliRunner().invoke(roofline.main, ["--backend", "sim", "--timer", timer])
    assert result.exit_code == 2 and "Traceback" not in result.output
