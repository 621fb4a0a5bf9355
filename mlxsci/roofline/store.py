"""The roofline, measured on the machine: `python -m mlxsci.roofline`.

A task's roofline time at a size is max(bytes / bw(working set),
flops / peak); the fraction a candidate scores is roofline time / measured
time. The bandwidth curve bw and the FP32 peak are measured by probe kernels
(mlxsci.roofline.probes), timed by the same timer as the kernels they are
compared with; the record they fill is mlxsci.roofline.ceilings.Roofline. This module
caches a measured roofline per device fingerprint, dialect and timer
(measured by one process at a time: the others wait and read it), prints
it beside the driver's theoretical figures and MLX's own copy, and keeps
Metal-Sci's static chip table as a paper-comparable column on Apple GPUs.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path

import click
from tabulate import tabulate

from mlxsci.backends import (
    SIM_GPU_HELP,
    backend_class,
    get_backend,
    gpu_options,
    has_chip_table,
    resolve_backend_name,
    sim_gpu_names,
)
from mlxsci.backends.base import Backend
from mlxsci.roofline.ceilings import Roofline, metal_sci_ceiling
from mlxsci.roofline.probes import measure, plan_for, probe_digest
from mlxsci.storage.cache import cache_dir, entry_name, json_bytes, read_verified, write_verified
from mlxsci.storage.faults import EXIT_CODE, EnvironmentFault, parent_writes
from mlxsci.storage.locks import building
from mlxsci.timing import timers


# ------------------------------------------------------------------ cache
def cache_path(backend: Backend, timer: str | None = None) -> Path:
    """One cached roofline per device, dialect and timer: a wall-clock ceiling
    is not comparable with a CUPTI one, and the simulator runs either
    dialect's probes, which it does not run equally fast. The entry's
    probe_digest covers the timer's version too (timers.timer_version): a
    timer whose code changed measures again."""
    timer = timer or timers.default_timer_name(backend.name)
    name = f"{backend.device_info()['fingerprint']}-{backend.dialect}-{timer}.json"
    return cache_dir("roofline") / name


# What an entry holds: every field but where it came from (Roofline.source).
STORED = frozenset(f.name for f in fields(Roofline)) - {"source"}


def identity(path: Path, raw: bytes, roof: Roofline) -> dict:
    """Which ceilings a result used: the entry's name in the cache, the sha256
    of its bytes and when it was measured (Roofline.source)."""
    return {
        "entry": entry_name(path),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "measured_at": roof.measured_at,
    }


def load_cached(path: Path, digest: str) -> Roofline | None:
    """The cached roofline, or None where there is none, it is not one this
    machine's parent wrote (mlxsci/storage/cache.py `read_verified`: planted ceilings
    would score every candidate against them; damage is named on stderr) or it
    is stale: written by another version of this module (missing or unknown
    fields: e.g. one whose probes were wall-clock timed) or by other probes or
    plans."""
    raw = read_verified(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or set(data) != STORED:
        return None
    roof = Roofline(**data)
    if roof.probe_digest != digest:
        return None
    roof.source = identity(path, raw, roof)
    return roof


MEASURING = "measuring the roofline of this machine (once)..."


def modelled_roofline(backend: Backend, ceilings: dict) -> Roofline:
    """The roofline of a modelled GPU (Backend.modelled_ceilings): nothing
    measured, nothing cached."""
    return Roofline(
        backend=backend.name,
        device=backend.device_info(),
        bandwidth=ceilings["bandwidth"],
        peak_gflops=ceilings["peak_gflops"],
        measured_at="modelled",
        timer="sim",
        theoretical={"dram_gbs": ceilings["dram_gbs"], "peak_gflops": ceilings["peak_gflops"]},
        plan={"modelled_gpu": ceilings["gpu"]},
        source={"entry": f"gpus/{ceilings['gpu']}.json", "modelled": True},
    )


def load_or_measure(
    backend: Backend, refresh: bool = False, progress=None, timer: str | None = None, announce=None
) -> Roofline:
    """The cached roofline, else a measured one. `announce` (default:
    `progress`) hears MEASURING before a measurement (not on a cache hit), or
    whom it waits for; `progress` hears each probe's result.

    Measured once per machine however many evaluations start at once: the
    measuring process holds the lock beside the entry (locks.building), the
    others wait for it and then read its entry, so every one scores against
    the same ceilings (concurrent first runs had each measured their own and
    the last writer's stayed)."""
    modelled = backend.modelled_ceilings()
    if modelled is not None:  # the simulator: its modelled GPU's own ceilings
        return modelled_roofline(backend, modelled)
    path = cache_path(backend, timer)
    digest = probe_digest(backend, plan_for(backend), timer)
    roof = None if refresh else load_cached(path, digest)
    if roof is not None:
        return roof
    announce = announce or progress
    with building(path, "measuring the roofline", waiting=announce) as held:
        roof = None if refresh else load_cached(path, digest)
        if roof is None:
            if announce is not None:
                announce(MEASURING)
            roof = measure(backend, progress, timer)
            raw = json_bytes({k: v for k, v in asdict(roof).items() if k in STORED})
            if held:  # else the holder writes the machine's one roofline
                write_verified(path, raw)
            roof.source = identity(path, raw, roof)
    return roof


# ------------------------------------------------------------------ table
def _ratio(measured: float | None, reference: float | None) -> str:
    if not measured or not reference:
        return ""
    return f" ({100 * measured / reference:.1f}% of {reference:.2f})"


def format_table(roof: Roofline) -> str:
    names = [n for n in ("copy", "triad", "read") if roof.probes.get(n)]
    curves = {n: {ws: gbps for ws, gbps in roof.probes[n]} for n in names}
    rows = [
        [f"{ws / 2**20:.3f}"]
        + [f"{curves[n][ws]:.2f}" if ws in curves[n] else "" for n in names]
        + [f"{gbps:.2f}"]
        for ws, gbps in roof.bandwidth
    ]
    headers = ["working set (MiB)"] + [f"{n} (GB/s)" for n in names] + ["bandwidth (GB/s)"]
    theo = roof.theoretical or {}
    plateau = roof.bandwidth[-1][1] if roof.bandwidth else None
    lines = [
        f"device: {roof.device.get('name')} ({roof.backend}); timer: {roof.timer or '?'}; "
        f"measured {roof.measured_at}",
        tabulate(rows, headers=headers, colalign=("right",) * len(headers)),
        f"FP32 peak: {roof.peak_gflops:.2f} GFLOPS"
        f"{_ratio(roof.peak_gflops, theo.get('fp32_gflops'))}",
    ]
    if theo.get("dram_gbps") and plateau:
        lines.append(
            f"DRAM (largest working set): {plateau:.2f} GB/s{_ratio(plateau, theo['dram_gbps'])}"
        )
    if roof.reference_copy_gbps:
        lines.append(
            f"MLX reference copy: {roof.reference_copy_gbps:.2f} GB/s; plateau is"
            f"{_ratio(plateau, roof.reference_copy_gbps)}"
        )
    if has_chip_table(roof.backend):
        gflops, gbps = metal_sci_ceiling(roof.device.get("name", ""))
        lines.append(f"Metal-Sci chip table: {gflops} GFLOPS, {gbps} GB/s")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "metal", "cuda", "sim"]),
)
@click.option("--sim-gpu", type=click.Choice(sim_gpu_names()), default=None, help=SIM_GPU_HELP)
@click.option(
    "--timer",
    default=None,
    type=click.Choice(list(timers.TIMER_NAMES)),
    help="How probes are timed (default: the backend's own, as for kernels).",
)
@click.option("--refresh", is_flag=True, help="Measure again even if a cached result exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the roofline as JSON.")
def main(backend, sim_gpu, timer, refresh, as_json):
    """Show (measuring if needed) the bandwidth and FP32 roofline of a backend
    (on the simulator: of the GPU it models, each GPU's cached apart)."""
    try:  # before whether the backend is here: --sim-gpu is the simulator's alone
        options = gpu_options(resolve_backend_name(backend), sim_gpu)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if backend != "auto" and not backend_class(backend).available():
        raise click.BadParameter(
            f"{backend} is not available on this machine (use --backend sim or auto)",
            param_hint="--backend",
        )
    be = get_backend(backend, **options)
    try:
        timer = timers.check_timer(timer, be.name)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        with parent_writes():  # a full or read-only cache: the machine's fault
            roof = load_or_measure(
                be, refresh=refresh, timer=timer, progress=lambda m: click.echo(m, err=True)
            )
    except timers.TimerError as exc:
        raise click.ClickException(str(exc)) from exc
    except EnvironmentFault as exc:
        click.echo(f"error: the machine stopped the measurement: {exc}", err=True)
        sys.exit(EXIT_CODE)
    click.echo(json.dumps(asdict(roof), indent=2) if as_json else format_table(roof))


if __name__ == "__main__":
    sys.exit(main())
