"""The report's plots (matplotlib, Agg), PNG and SVG: convergence, roofline
(one per device), per-size fraction of the roofline and speedups; what each
shows is in mlxsci/report/build.py's docstring. write_plots draws them all,
from mlxsci's own runs: imported runs (mlxsci.report.runs.is_imported) hold
figures recorded on another chip, which the plots would set beside mlxsci's
as if measured alike, so they are left out (named on stderr); the tables show
their recorded figures, labelled.

matplotlib is imported inside the functions that draw, not at the top: a
report without --plots (and `import mlxsci.report`) never loads it, and
write_plots selects the Agg backend before pyplot is first imported.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mlxsci.evaluation.verdicts import NOISE_FLOOR
from mlxsci.report.runs import (
    cell_runs,
    imported_runs,
    models_of,
    native,
    pick_run,
    recorded_on,
    speedup,
    warn,
)
from mlxsci.report.spread import (
    BOOTSTRAP_LEVEL,
    BOOTSTRAP_MIN_RUNS,
    BOOTSTRAP_RESAMPLES,
    median_and_spread,
)
from mlxsci.storage.names import safe_name
from mlxsci.task import load_task


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _save(fig, out: Path, stem: str) -> list[Path]:
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=120, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})
    return paths


def _finish(fig, out: Path, stem: str, title: str | None = None, **title_style) -> list[Path]:
    """Lay the figure out (under `title`), save it as PNG and SVG, close it."""
    import matplotlib.pyplot as plt

    if title is not None:
        fig.suptitle(title, **title_style)
    fig.tight_layout()
    paths = _save(fig, out, stem)
    plt.close(fig)
    return paths


def _grid(n: int):
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def plot_convergence(runs: list[dict], out: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in runs})
    fig, axes = _grid(len(tasks))
    colors = dict(zip(models_of(runs), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10))
    for ax, task in zip(axes, tasks):
        for m in models_of(runs):
            cell = cell_runs(runs, task, m)
            for k, r in enumerate(cell):
                # every run of the cell in the model's colour, the legend once
                _convergence_line(
                    ax,
                    r,
                    colors[m],
                    m if k == 0 else None,
                    f" ({len(cell)} runs)" if len(cell) > 1 else "",
                )
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.axhline(1.0 + NOISE_FLOOR, color="gray", lw=0.6, ls=":")  # the least band
        ax.set_title(task)
        ax.set_xlabel("iteration")
        ax.set_ylabel("best-so-far speedup (S / S_seed)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    return _finish(fig, out, "convergence", "Convergence: best-so-far in-distribution speedup")


def _convergence_line(ax, r: dict, color, model: str | None, runs_note: str) -> None:
    """One run's best-so-far speedup; failed or skipped iterations as crosses on
    the baseline, the best as a star. Labelled only when `model` is given."""
    seed = r.get("seed_score")
    xs, ys, best, fails = [], [], seed, []
    for h in sorted(r.get("history", []), key=lambda h: h["iteration"]):
        if h.get("is_new_best") and h.get("score") is not None:
            best = h["score"]
        if h["iteration"] > 0 and not h.get("correct"):
            fails.append(h["iteration"])
        xs.append(h["iteration"])
        ys.append(best / seed if seed and best is not None else float("nan"))
    label = lambda text: text if model else None  # noqa: E731
    ax.step(xs, ys, where="post", color=color, label=label(f"{model}{runs_note}"), marker=".")
    if fails:
        ax.plot(
            fails,
            [1.0] * len(fails),
            "x",
            color=color,
            ms=8,
            label=label(f"{model}: failed / skipped"),
        )
    bi = r.get("best_iteration")
    if bi is not None and bi in xs:
        ax.plot(
            [bi],
            [ys[xs.index(bi)]],
            "*",
            color=color,
            ms=14,
            mec="black",
            label=label(
                f"{model}: best (iteration {bi})" if not runs_note else f"{model}: best of each run"
            ),
        )


def plot_speedups(runs: list[dict], out: Path) -> list[Path]:
    """Per task and model: the median speedup as a bar, its spread (min-max or
    bootstrap CI, mlxsci.report.spread) as an error bar, each run as a dot."""
    import matplotlib.pyplot as plt

    tasks, models = sorted({r["task"] for r in runs}), models_of(runs)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(tasks) * max(len(models), 1) + 2), 3.8))
    width = 0.8 / max(len(models), 1)
    for j, m in enumerate(models):
        for i, task in enumerate(tasks):
            values = [v for v in (speedup(r) for r in cell_runs(runs, task, m)) if v is not None]
            mid, lo, hi = median_and_spread(values)
            if mid is None:
                continue
            x = i + (j - (len(models) - 1) / 2) * width
            ax.bar(x, mid, width * 0.9, color=colors[j], alpha=0.6, label=m if i == 0 else None)
            if lo is not None and hi is not None:
                ax.errorbar(x, mid, yerr=[[mid - lo], [hi - mid]], color="black", capsize=4, lw=1.2)
            ax.plot([x] * len(values), values, "o", color=colors[j], mec="black", ms=4)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels(tasks)
    ax.set_ylabel("speedup S_best / S_seed")
    ax.set_title(
        f"Median speedup per cell (bar), each run (dot); error bar: min-max of the "
        f"runs under {BOOTSTRAP_MIN_RUNS},\nelse a {BOOTSTRAP_LEVEL:.0%} bootstrap CI "
        f"of the median ({BOOTSTRAP_RESAMPLES} resamples)",
        fontsize=8,
    )
    ax.legend(fontsize=7)
    return _finish(fig, out, "speedups")


def _first_scored(result: dict | None) -> dict | None:
    for s in (result or {}).get("sizes", []):
        if not s.get("held_out") and s.get("correct") and s.get("seconds"):
            return s
    return None


def _cached_roofline(backend: str, device: str):
    """(Roofline, how) cached for this device: the current machine's own
    fingerprint first, else the newest cached entry with the same name."""
    try:
        from mlxsci.roofline.store import Roofline
        from mlxsci.storage.cache import cache_dir
    except Exception:  # noqa: BLE001 - MLX missing: fall back to the runs' data
        return None, None
    try:
        from mlxsci.backends import get_backend
        from mlxsci.roofline.store import cache_path

        be = get_backend(backend)
        if be.device_info()["name"] == device and cache_path(be).exists():
            data = json.loads(cache_path(be).read_text())
            return Roofline(
                **data
            ), f"measured roofline, cached for fingerprint {data['device'].get('fingerprint')}"
    except Exception:  # noqa: BLE001 - backend unavailable here
        pass
    best = None
    for path in cache_dir("roofline").glob("*.json"):
        data = _read_json(path)
        if not isinstance(data, dict) or data.get("backend") != backend:
            continue
        if (data.get("device") or {}).get("name") != device:
            continue
        if best is None or data.get("measured_at", "") > best.get("measured_at", ""):
            best = data
    if best is None:
        return None, None
    try:
        return Roofline(**best), (
            f"cached roofline of the same device name, measured "
            f"{best.get('measured_at')} (may differ from the runs')"
        )
    except TypeError:
        return None, None


def _roofline_points(runs: list[dict]) -> list[dict]:
    """Per run: task, model, arithmetic intensity and achieved GFLOPS of seed and best."""
    points = []
    for r in runs:
        d = Path(r["run_dir"])
        seed_res, best_res = _read_json(d / "00_result.json"), _read_json(d / "best_result.json")
        first = _first_scored(seed_res)
        if first is None:
            continue
        try:
            task = load_task(r["task"])
        except Exception:  # noqa: BLE001 - a task not installed here
            continue
        p = first["params"]
        flops, nbytes, ws = task.flops(p), task.bytes_moved(p), task.working_set(p)
        best_size = next(
            (
                s
                for s in (best_res or {}).get("sizes", [])
                if s.get("label") == first["label"] and s.get("seconds")
            ),
            None,
        )
        points.append(
            {
                "task": r["task"],
                "model": r["model"],
                "flops": flops,
                "bytes": nbytes,
                "working_set": ws,
                "bound": task.bound,
                "label": first["label"],
                "ceiling": first.get("ceiling"),
                "seed": flops / first["seconds"] / 1e9,
                "best": flops / best_size["seconds"] / 1e9 if best_size else None,
            }
        )
    return points


def plot_roofline(runs: list[dict], out: Path) -> list[Path]:
    """One chart per device the runs ran on: its streaming bandwidth by
    working set, and the roofline with each task's seed and best."""
    import matplotlib.pyplot as plt

    paths = []
    devices = sorted({(r.get("backend", ""), r.get("device", "")) for r in runs})
    for backend, device in devices:
        group = [
            r for r in runs if (r.get("backend", ""), r.get("device", "")) == (backend, device)
        ]
        chosen = [
            pick_run([g for g in group if (g["task"], g["model"]) == key])
            for key in sorted({(g["task"], g["model"]) for g in group})
        ]
        points = _roofline_points(chosen)
        bw_curve, peak, how = _device_ceilings(backend, device, points)
        fig, (ax_bw, ax_roof) = plt.subplots(1, 2, figsize=(11, 4.2))
        _draw_bandwidth(ax_bw, bw_curve, points)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10
        _draw_roofline(ax_roof, bw_curve, peak, points, colors)
        paths += _finish(
            fig,
            out,
            f"roofline_{safe_name(device, 'device')}",
            f"{device} ({backend})\n{how}",
            fontsize=9,
        )
    return paths


def _device_ceilings(backend: str, device: str, points: list[dict]) -> tuple:
    """(bandwidth curve [(working set, GB/s)], FP32 peak or None, where they
    come from): the device's cached roofline, else the ceilings the runs were
    scored against (GB/s at each size's working set, bandwidth tasks)."""
    roof, how = _cached_roofline(backend, device)
    if roof is not None:
        return [(ws, gbps) for ws, gbps in roof.bandwidth], roof.peak_gflops, how
    bw_curve = sorted(
        (p["working_set"], p["ceiling"])
        for p in points
        if p["bound"] == "bandwidth" and p["ceiling"]
    )
    peak = max(
        (p["ceiling"] for p in points if p["bound"] == "compute" and p["ceiling"]),
        default=None,
    )
    how = (
        "no cached roofline for this device here: bandwidth from the ceilings "
        "recorded in the runs" + ("" if peak else "; FP32 peak unknown")
    )
    warn(f"{device}: {how}")
    return bw_curve, peak, how


def _draw_bandwidth(ax_bw, bw_curve: list, points: list[dict]) -> None:
    """The bandwidth panel: the curve, and each bandwidth task's ceiling at
    its working set."""
    if bw_curve:
        ax_bw.plot([w / 2**20 for w, _ in bw_curve], [g for _, g in bw_curve], "o-")
    for p in points:
        if p["bound"] == "bandwidth" and p["ceiling"]:
            ax_bw.plot(p["working_set"] / 2**20, p["ceiling"], "s", mfc="none", color="gray")
            ax_bw.annotate(p["task"], (p["working_set"] / 2**20, p["ceiling"]), fontsize=7)
    ax_bw.set_xscale("log")
    ax_bw.set_xlabel("working set (MiB)")
    ax_bw.set_ylabel("bandwidth (GB/s)")
    ax_bw.set_title("streaming bandwidth vs working set")


def _draw_roofline(ax_roof, bw_curve: list, peak, points: list[dict], colors: list) -> None:
    """The roofline panel: the DRAM and best cache roofs under the FP32 peak,
    and per task its seed, its ceiling at its working set and its best."""
    ais = [p["flops"] / p["bytes"] for p in points if p["flops"] > 0 and p["bytes"] > 0]
    lo = min(ais + [0.1]) / 4
    hi = max(ais + [10.0]) * 4
    x = np.logspace(math.log10(lo), math.log10(hi), 200)
    if bw_curve:
        levels = {
            "DRAM (largest working set)": bw_curve[-1][1],
            "best cache level": max(g for _, g in bw_curve),
        }
        for (name, gbps), ls in zip(levels.items(), ("-", "--")):
            y = gbps * x if peak is None else np.minimum(gbps * x, peak)
            ax_roof.plot(x, y, color="black", ls=ls, lw=1, label=f"{name}: {gbps:.3g} GB/s")
    if peak:
        ax_roof.axhline(peak, color="red", lw=0.8, ls=":", label=f"FP32 peak {peak:.3g} GFLOPS")
    for i, p in enumerate(points):
        if p["flops"] <= 0:
            warn(f"{p['task']}: no FLOPs in its model; left out of the roofline chart")
            continue
        _draw_task_point(ax_roof, p, colors[i])
    ax_roof.set_xscale("log")
    ax_roof.set_yscale("log")
    ax_roof.set_xlabel("arithmetic intensity (FLOP / byte, first scored size)")
    ax_roof.set_ylabel("GFLOP/s")
    ax_roof.set_title("roofline")
    ax_roof.legend(fontsize=6)


def _draw_task_point(ax_roof, p: dict, c) -> None:
    """One task on the roofline: its seed, its own ceiling, an arrow to its best."""
    ai = p["flops"] / p["bytes"]
    ax_roof.plot(ai, p["seed"], "o", mfc="none", color=c, label=f"{p['task']} ({p['model']}): seed")
    if p["ceiling"]:  # the task's own ceiling, at its working set
        roof_gflops = p["ceiling"] * (ai if p["bound"] == "bandwidth" else 1.0)
        ax_roof.plot(
            ai,
            roof_gflops,
            "_",
            color=c,
            ms=18,
            mew=2,
            label=f"{p['task']}: ceiling at its working set",
        )
    if p["best"]:
        ax_roof.plot(ai, p["best"], "o", color=c, label=f"{p['task']} ({p['model']}): best")
        ax_roof.annotate(
            "",
            (ai, p["best"]),
            (ai, p["seed"]),
            arrowprops={"arrowstyle": "->", "color": c},
        )


def _fractions(result: dict | None) -> dict:
    return {s["label"]: s.get("fraction") for s in (result or {}).get("sizes", [])}


def plot_fractions(runs: list[dict], out: Path) -> list[Path]:
    keys = sorted({(r["task"], r["model"]) for r in runs})
    fig, axes = _grid(len(keys))
    for ax, key in zip(axes, keys):
        r = pick_run([g for g in runs if (g["task"], g["model"]) == key])
        d = Path(r["run_dir"])
        seed, best = (
            _fractions(_read_json(d / "00_result.json")),
            _fractions(_read_json(d / "best_result.json")),
        )
        for name, target in (("seed", seed), ("best", best)):
            held = _read_json(d / f"held_out_{name}.json")
            for label, frac in _fractions((held or {}).get("result")).items():
                target[f"{label}\n(held-out)"] = frac
        labels = list(dict.fromkeys(list(seed) + list(best)))
        xs = range(len(labels))
        w = 0.38
        ax.bar([x - w / 2 for x in xs], [seed.get(k) or 0.0 for k in labels], w, label="seed")
        ax.bar(
            [x + w / 2 for x in xs],
            [best.get(k) or 0.0 for k in labels],
            w,
            label=f"best (iteration {r.get('best_iteration')})",
        )
        for x, k in zip(xs, labels):
            if k in best and best[k] is None:
                ax.text(x + w / 2, 0.02, "fail", rotation=90, fontsize=7, ha="center")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("fraction of roofline")
        ax.set_title(f"{key[0]} ({key[1]})")
        ax.legend(fontsize=7)
    return _finish(fig, out, "fractions", "Per-size fraction of the roofline: seed vs best")


def write_plots(runs: list[dict], out) -> list[Path]:
    """Convergence, roofline (one per device), per-size fraction and speedup
    (median and spread per cell) plots, PNG + SVG, of the runs mlxsci
    measured: imported runs are left out, with a line on stderr."""
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    left_out = imported_runs(runs)
    if left_out:
        where = ", ".join(sorted({recorded_on(r) for r in left_out}))
        warn(
            f"{len(left_out)} imported run(s) left out of the plots: their figures were "
            f"recorded on {where}, not measured by mlxsci (the tables show them, labelled)"
        )
    runs = native(runs)
    if not runs:
        return []
    return (
        plot_convergence(runs, out)
        + plot_roofline(runs, out)
        + plot_fractions(runs, out)
        + plot_speedups(runs, out)
    )
