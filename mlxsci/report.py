"""Tables and plots from search run directories: `python -m mlxsci.report RUNS...`.

RUNS are run directories (holding summary.json) or folders holding them,
searched recursively; a folder with an `index.json` written by
`python -m mlxsci.sweep` is read through its index. Unfinished runs (no
summary.json yet) are skipped with a note on stderr.

Main table: one row per task, one column group per model. The runs of a
cell are told apart by their proposer seed (run.json; a sweep's repeat k
runs with seed k - 1): of several runs with the same task, model and seed
the one with the most iterations wins, then the newest (summary.json's
modification time), then the last path. Columns, for a cell of one run:

    speedup        in-distribution speedup S_best / S_seed
    held-out phi   the best's fraction of the roofline at the held-out size (Phi)
    held-out ratio Phi_best / Phi_seed
    outcome        the run's outcome: summary.json's vocabulary and rules
                   (mlxsci.outcomes.OUTCOMES lists them, in the order they
                   are tried: no_candidates, saturated, flat,
                   held_out_failure, held_out_regression, improved,
                   within_noise)

A cell of several runs (different seeds: `mlxsci.sweep --repeats K`) gives
the median of its runs with a spread (mlxsci.report_spread: min-max under 5
runs, else a 95 % bootstrap confidence interval of the median, 2000
resamples, seed 0), and once any cell of the table has several runs every
model's group gains the columns `runs` (the count), `speedup lo`, `speedup
hi`, `spread` (which of the two the speedup's is), `held-out ratio lo` and
`held-out ratio hi`; Markdown and LaTeX show them as `1.02x [1.00x, 1.05x]`
with a note under the table saying how the spread is made. A cell counts as
improved when more than half of its runs are, and its outcome lists its
runs' labels, commonest first, with their counts, e.g. `improved 2/3,
flat 1/3`.

"Beyond the noise" is mlxsci.verdicts' rule, the one the search's summary.json
uses too: a ratio above 1 + band (improved) or below 1 / (1 + band)
(regressed), band = the larger of the two figures' measured noises (S noise
for the speedup, the held-out size's noise for the ratio) and a 5 % floor.
Runs recorded before noise was measured have no noise fields; their noise
counts as 0, so the floor applies.

Only an improvement beyond the noise is bold in Markdown and LaTeX (a boolean
`<model> improved` column in CSV and JSON). The `outcome` field summary.json
recorded is shown in the details table (the same as the label for runs written
since both use mlxsci.outcomes).

Details table: one row per run (every run, not only the chosen ones).
`--details` prints it after the main table; CSV holds one table per file, so
`--format csv --details` needs `--out FILE.csv`: the main table goes to
FILE.csv and the details to FILE_details.csv (to stdout it is refused with a
usage error; `--format json` puts both in one document).

`--plots DIR` writes PNG and SVG (matplotlib, Agg): convergence.*
(best-so-far speedup per iteration, one panel per task, one line per model,
failed or skipped candidates as crosses on the 1.0 baseline, the best
iteration as a star), roofline_<device>.* (the measured roofline cached for
the device when this machine has it, else the ceilings recorded in the runs;
each task's seed and best at its arithmetic intensity) and fractions.* (per-size
fraction of the roofline, seed vs best, held-out size included) and
speedups.* (per task and model the median speedup as a bar, its spread as an
error bar, each run as a dot). Convergence draws every run of a cell, the
others one run per cell, picked as above.

Library: load_runs(paths), main_table(runs), details_table(runs),
render(rows, fmt), report_text(runs, fmt, details), report_files(runs, fmt,
details, out), outcome_label(summary), cell_runs(runs, task, model),
write_plots(runs, dir).
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from pathlib import Path

import click
from tabulate import tabulate

from mlxsci.report_spread import (BOOTSTRAP_LEVEL, BOOTSTRAP_MIN_RUNS, BOOTSTRAP_RESAMPLES,
                                  SPREAD_NOTE, median_and_spread, spread_kind)
from mlxsci.names import safe_name
from mlxsci.outcomes import OUTCOMES, classify_summary
from mlxsci.verdicts import IMPROVED, NOISE_FLOOR, assess_summary

FORMATS = ("md", "latex", "csv", "json")


def _warn(msg: str) -> None:
    print(f"report: {msg}", file=sys.stderr)


# -- loading ----------------------------------------------------------------

def _load_run(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        _warn(f"skipping unfinished run {run_dir} (no summary.json)")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _warn(f"skipping {run_dir}: unreadable summary.json ({exc})")
        return None
    if not isinstance(summary, dict) or not all(isinstance(summary.get(k), str)
                                                for k in ("task", "model")):
        _warn(f"skipping {run_dir}: its summary.json is not a search summary (no task, model)")
        return None
    summary["run_dir"] = str(run_dir)
    summary["_mtime"] = path.stat().st_mtime
    summary["_seed"] = _run_seed(run_dir)
    return summary


def _run_seed(run_dir: Path):
    """The run's proposer seed (run.json; 0, the default, when it has none)."""
    try:
        seed = json.loads((run_dir / "run.json").read_text()).get("seed", 0)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return 0
    return seed if isinstance(seed, (int, str)) and not isinstance(seed, bool) else 0


def _index_runs(index: Path) -> list[Path]:
    """The run directories a sweep's index.json lists; ValueError when the
    file is not such an index ({"runs": [{"path": ...}, ...]})."""
    try:
        entries = json.loads(index.read_text()).get("runs")
        paths = [index.parent / e["path"] for e in entries]
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError, KeyError) as exc:
        raise ValueError(f"{index} is not a sweep index (mlxsci.sweep writes "
                         f"{{\"runs\": [{{\"path\": ...}}, ...]}}): {type(exc).__name__}: "
                         f"{exc}") from None
    return paths


def _run_dirs(path: Path) -> list[Path]:
    """Run directories under `path`: through index.json when there is one."""
    if (path / "summary.json").exists() or (path / "run.json").exists():
        return [path]
    index = path / "index.json"
    if index.exists():
        return _index_runs(index)
    found = {p.parent for p in path.rglob("summary.json")}
    found |= {p.parent for p in path.rglob("run.json")}   # unfinished ones, to report them
    # A folder with its own index.json below `path` is read through its index.
    for idx in path.rglob("index.json"):
        inner = idx.parent
        found = {d for d in found if inner not in d.parents}
        found |= set(_index_runs(idx))
    return sorted(found)


def load_runs(paths) -> list[dict]:
    """Summaries (plus `run_dir`) of the finished runs at or under `paths`,
    sorted by task, model and path. A path holding no run at all (finished or
    not), or an index.json that is not a sweep's, raises ValueError."""
    runs, seen = [], set()
    for p in [paths] if isinstance(paths, (str, Path)) else paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist")
        dirs = _run_dirs(p)
        if not dirs:
            raise ValueError(f"{p} holds no search run (a folder with summary.json or "
                             "run.json): give run directories, folders holding them, or a "
                             "sweep folder")
        for d in dirs:
            key = d.resolve()
            if key in seen:
                continue
            seen.add(key)
            summary = _load_run(d)
            if summary is not None:
                runs.append(summary)
    runs.sort(key=lambda r: (r["task"], r["model"], r["run_dir"]))
    return runs


# -- numbers and labels -----------------------------------------------------

def speedup(summary: dict) -> float | None:
    seed, best = summary.get("seed_score"), summary.get("best_score")
    if not seed or best is None:
        return None
    return best / seed


def improved(summary: dict) -> bool:
    """True when S_best / S_seed is an improvement beyond the noise."""
    return assess_summary(summary)["improvement_verdict"] == IMPROVED


def outcome_label(summary: dict) -> str:
    """The run's outcome (mlxsci.outcomes.classify_summary: the vocabulary and
    rules of the search's summary.json). The verdicts are recomputed from the
    summary's numbers and noises, not read from its verdict fields, so old
    summaries (no noise) get labels by the same rule."""
    return classify_summary(summary)


def _pick(runs: list[dict]) -> dict:
    """Most iterations, then newest, then last path."""
    return max(runs, key=lambda r: (r.get("iterations") or 0, r.get("_mtime", 0.0), r["run_dir"]))


def models_of(runs: list[dict]) -> list[str]:
    return sorted({r["model"] for r in runs})


def cell_runs(runs: list[dict], task: str, model: str) -> list[dict]:
    """The runs of one cell: one per proposer seed (picked by _pick), by seed."""
    by_seed: dict = {}
    for r in runs:
        if r["task"] == task and r["model"] == model:
            by_seed.setdefault(r.get("_seed", 0), []).append(r)
    ordered = sorted(by_seed.items(), key=lambda kv: (isinstance(kv[0], str), kv[0]))
    return [_pick(group) for _, group in ordered]


def _single_cell(m: str, r: dict | None) -> dict:
    """A cell of one run (or none): the table as it has always been."""
    return {f"{m} speedup": speedup(r) if r else None,
            f"{m} improved": None if r is None else improved(r),
            f"{m} held-out phi": r.get("held_out_best") if r else None,
            f"{m} held-out ratio": r.get("held_out_ratio") if r else None,
            f"{m} outcome": outcome_label(r) if r else None}


def _label_counts(cell: list[dict]) -> str:
    """The labels of the cell's runs, commonest first, each with its count:
    'improved 2/3, flat 1/3' (ties in mlxsci.outcomes.OUTCOMES' order)."""
    labels = [outcome_label(r) for r in cell]
    order = list(OUTCOMES)
    found = sorted(set(labels), key=lambda lab: (-labels.count(lab), order.index(lab)))
    return ", ".join(f"{lab} {labels.count(lab)}/{len(cell)}" for lab in found)


def _repeated_cell(m: str, cell: list[dict]) -> dict:
    """A cell of any number of runs: medians, spreads, count (report_spread)."""
    if not cell:
        return {f"{m} {k}": None for k in ("runs", "speedup", "speedup lo", "speedup hi",
                                           "spread", "improved", "held-out phi",
                                           "held-out ratio", "held-out ratio lo",
                                           "held-out ratio hi", "outcome")}
    speedups = [speedup(r) for r in cell]
    s, s_lo, s_hi = median_and_spread(speedups)
    ratio, r_lo, r_hi = median_and_spread([r.get("held_out_ratio") for r in cell])
    phi = median_and_spread([r.get("held_out_best") for r in cell])[0]
    return {f"{m} runs": len(cell), f"{m} speedup": s, f"{m} speedup lo": s_lo,
            f"{m} speedup hi": s_hi,
            f"{m} spread": spread_kind(len([x for x in speedups if x is not None])),
            f"{m} improved": 2 * sum(improved(r) for r in cell) > len(cell),
            f"{m} held-out phi": phi, f"{m} held-out ratio": ratio,
            f"{m} held-out ratio lo": r_lo, f"{m} held-out ratio hi": r_hi,
            f"{m} outcome": _label_counts(cell) if len(cell) > 1 else outcome_label(cell[0])}


def main_table(runs: list[dict]) -> list[dict]:
    """One row (an ordered dict) per task; per model: speedup, improved (bool),
    held-out phi, held-out ratio, outcome, and when any cell holds several runs
    also runs, speedup lo/hi, spread, held-out ratio lo/hi (module docstring).
    Values are raw numbers (None if unknown)."""
    models = models_of(runs)
    tasks = sorted({r["task"] for r in runs})
    cells = {(t, m): cell_runs(runs, t, m) for t in tasks for m in models}
    repeated = any(len(cell) > 1 for cell in cells.values())
    rows = []
    for task in tasks:
        row = {"task": task}
        for m in models:
            cell = cells[(task, m)]
            row.update(_repeated_cell(m, cell) if repeated
                       else _single_cell(m, cell[0] if cell else None))
        rows.append(row)
    return rows


def _count(history: list[dict], pred) -> int:
    return sum(1 for h in history if h.get("iteration", 0) > 0 and pred(h))


def details_table(runs: list[dict]) -> list[dict]:
    """One row per run."""
    rows = []
    for r in runs:
        hist = r.get("history", [])
        tokens = r.get("tokens") or {}
        rows.append({
            "task": r["task"], "model": r["model"], "backend": r.get("backend"),
            "iterations": r.get("iterations"),
            "compile failures": _count(hist, lambda h: h.get("role") == "candidate"
                                       and not h.get("compile_ok")),
            "incorrect": _count(hist, lambda h: h.get("role") == "candidate"
                                and h.get("compile_ok") and not h.get("correct")),
            "skipped": _count(hist, lambda h: h.get("role") == "skipped"),
            "best iteration": r.get("best_iteration"),
            "seed S": r.get("seed_score"), "best S": r.get("best_score"),
            # the noise band the speedup was judged against (mlxsci.verdicts)
            "S band": assess_summary(r)["improvement_band"],
            "tokens in": tokens.get("input", 0), "tokens out": tokens.get("output", 0),
            "cost usd": r.get("cost_usd", 0.0), "wall s": r.get("wall_s"),
            "search outcome": r.get("outcome"), "run": Path(r["run_dir"]).name,
        })
    return rows


# -- rendering ----------------------------------------------------------------

def _fmt_cell(key: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if key.endswith("speedup"):
            return f"{value:.2f}x"
        if key.endswith("cost usd"):
            return f"{value:.4f}"
        if key.endswith("wall s"):
            return f"{value:.1f}"
        return f"{value:.3f}"
    return str(value)


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def _has_spread(rows: list[dict]) -> bool:
    return bool(rows) and any(k.endswith(" spread") for k in rows[0])


def _with_spread(key: str, row: dict) -> str:
    """A cell, with its `[lo, hi]` when the row has them: '1.02x [1.00x, 1.05x]'."""
    text = _fmt_cell(key, row[key])
    lo, hi = row.get(f"{key} lo"), row.get(f"{key} hi")
    if lo is None or hi is None:
        return text
    return f"{text} [{_fmt_cell(key, lo)}, {_fmt_cell(key, hi)}]"


def _display(rows: list[dict]):
    """Headers and formatted cells for md/latex: `X improved` columns become
    the bold marking of `X speedup`; `X lo` / `X hi` join X's cell as its
    spread (`X spread` goes to the note under the table). Returns (headers,
    cells, bold)."""
    keys = list(rows[0]) if rows else []
    marks = {k[: -len(" improved")] + " speedup": k for k in keys if k.endswith(" improved")}
    shown = [k for k in keys if not k.endswith((" improved", " lo", " hi", " spread"))]
    spread = {k for k in shown if f"{k} lo" in keys}
    headers = [f"{k} [spread]" if k in spread else k for k in shown]
    cells, bold = [], []
    for row in rows:
        cells.append([_with_spread(k, row) for k in shown])
        bold.append([bool(k in marks and row.get(marks[k])) for k in shown])
    return headers, cells, bold


def _numeric(col: list[str]) -> bool:
    vals = [c for c in col if c != "-"]
    return bool(vals) and all(re.fullmatch(r"[-+]?[\d.]+(e[-+]?\d+)?x?", v) for v in vals)


def render(rows: list[dict], fmt: str = "md") -> str:
    """Render rows (main_table or details_table) as md, latex, csv or json."""
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        if rows:
            writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return buf.getvalue()
    headers, cells, bold = _display(rows)
    align = ["right" if _numeric([c[i] for c in cells]) else "left" for i in range(len(headers))]
    if fmt == "md":
        shown = [[f"**{c}**" if b else c for c, b in zip(cr, br)] for cr, br in zip(cells, bold)]
        note = f"\nPer cell: {SPREAD_NOTE}.\n" if _has_spread(rows) else ""
        return tabulate(shown, headers=headers, tablefmt="github", colalign=align,
                        disable_numparse=True) + "\n" + note
    if fmt == "latex":
        def tex(c: str, b: bool = False) -> str:
            t = latex_escape(c)
            if re.fullmatch(r"[-+\d.]+x( \[[-+\d.]+x, [-+\d.]+x\])?", t):   # 1.02x [1.00x, 1.05x]
                t = re.sub(r"([\d.]+)x", r"\1$\\times$", t)
            return rf"\textbf{{{t}}}" if b else t
        spec = "".join("r" if a == "right" else "l" for a in align)
        lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
                 " & ".join(tex(h) for h in headers) + r" \\", r"\midrule"]
        lines += [" & ".join(tex(c, b) for c, b in zip(cr, br)) + r" \\"
                  for cr, br in zip(cells, bold)]
        lines += [r"\bottomrule", r"\end{tabular}"]
        if _has_spread(rows):    # under the tabular, where a caption would say it
            lines += ["", rf"\par\footnotesize Per cell: {latex_escape(SPREAD_NOTE)}."]
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")


# -- plots -------------------------------------------------------------------------

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
                _convergence_line(ax, r, colors[m], m if k == 0 else None,
                                  f" ({len(cell)} runs)" if len(cell) > 1 else "")
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.axhline(1.0 + NOISE_FLOOR, color="gray", lw=0.6, ls=":")   # the least band
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
    label = (lambda text: text if model else None)   # noqa: E731
    ax.step(xs, ys, where="post", color=color, label=label(f"{model}{runs_note}"), marker=".")
    if fails:
        ax.plot(fails, [1.0] * len(fails), "x", color=color, ms=8,
                label=label(f"{model}: failed / skipped"))
    bi = r.get("best_iteration")
    if bi is not None and bi in xs:
        ax.plot([bi], [ys[xs.index(bi)]], "*", color=color, ms=14, mec="black",
                label=label(f"{model}: best (iteration {bi})" if not runs_note
                            else f"{model}: best of each run"))


def plot_speedups(runs: list[dict], out: Path) -> list[Path]:
    """Per task and model: the median speedup as a bar, its spread (min-max or
    bootstrap CI, report_spread) as an error bar, each run as a dot."""
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
            ax.bar(x, mid, width * 0.9, color=colors[j], alpha=0.6,
                   label=m if i == 0 else None)
            if lo is not None:
                ax.errorbar(x, mid, yerr=[[mid - lo], [hi - mid]], color="black", capsize=4,
                            lw=1.2)
            ax.plot([x] * len(values), values, "o", color=colors[j], mec="black", ms=4)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set_xticks(range(len(tasks)))
    ax.set_xticklabels(tasks)
    ax.set_ylabel("speedup S_best / S_seed")
    ax.set_title(f"Median speedup per cell (bar), each run (dot); error bar: min-max of the "
                 f"runs under {BOOTSTRAP_MIN_RUNS},\nelse a {BOOTSTRAP_LEVEL:.0%} bootstrap CI "
                 f"of the median ({BOOTSTRAP_RESAMPLES} resamples)", fontsize=8)
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
        from mlxsci.cache import cache_dir
        from mlxsci.roofline import Roofline
    except Exception:   # noqa: BLE001 - MLX missing: fall back to the runs' data
        return None, None
    try:
        from mlxsci.backends import get_backend
        from mlxsci.roofline import cache_path
        be = get_backend(backend)
        if be.device_info()["name"] == device and cache_path(be).exists():
            data = json.loads(cache_path(be).read_text())
            return Roofline(**data), f"measured roofline, cached for fingerprint " \
                                     f"{data['device'].get('fingerprint')}"
    except Exception:   # noqa: BLE001 - backend unavailable here
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
        return Roofline(**best), (f"cached roofline of the same device name, measured "
                                  f"{best.get('measured_at')} (may differ from the runs')")
    except TypeError:
        return None, None


def _roofline_points(runs: list[dict]) -> list[dict]:
    """Per run: task, model, arithmetic intensity and achieved GFLOPS of seed and best."""
    from mlxsci.task import load_task
    points = []
    for r in runs:
        d = Path(r["run_dir"])
        seed_res, best_res = _read_json(d / "00_result.json"), _read_json(d / "best_result.json")
        first = _first_scored(seed_res)
        if first is None:
            continue
        try:
            task = load_task(r["task"])
        except Exception:   # noqa: BLE001 - a task not installed here
            continue
        p = first["params"]
        flops, nbytes, ws = task.flops(p), task.bytes_moved(p), task.working_set(p)
        best_size = next((s for s in (best_res or {}).get("sizes", [])
                          if s.get("label") == first["label"] and s.get("seconds")), None)
        points.append({"task": r["task"], "model": r["model"], "flops": flops, "bytes": nbytes,
                       "working_set": ws, "bound": task.bound, "label": first["label"],
                       "ceiling": first.get("ceiling"),
                       "seed": flops / first["seconds"] / 1e9,
                       "best": flops / best_size["seconds"] / 1e9 if best_size else None})
    return points


def plot_roofline(runs: list[dict], out: Path) -> list[Path]:
    import matplotlib.pyplot as plt
    import numpy as np
    paths = []
    devices = sorted({(r.get("backend", ""), r.get("device", "")) for r in runs})
    for backend, device in devices:
        group = [r for r in runs if (r.get("backend", ""), r.get("device", "")) == (backend, device)]
        chosen = [_pick([g for g in group if (g["task"], g["model"]) == key])
                  for key in sorted({(g["task"], g["model"]) for g in group})]
        points = _roofline_points(chosen)
        roof, how = _cached_roofline(backend, device)
        if roof is not None:
            bw_curve = [(ws, gbps) for ws, gbps in roof.bandwidth]
            peak = roof.peak_gflops
        else:
            # No cached roofline for this device here: the ceilings the runs were
            # scored against (GB/s at each size's working set, bandwidth tasks).
            bw_curve = sorted((p["working_set"], p["ceiling"]) for p in points
                              if p["bound"] == "bandwidth" and p["ceiling"])
            peak = max((p["ceiling"] for p in points
                        if p["bound"] == "compute" and p["ceiling"]), default=None)
            how = ("no cached roofline for this device here: bandwidth from the ceilings "
                   "recorded in the runs" + ("" if peak else "; FP32 peak unknown"))
            _warn(f"{device}: {how}")
        fig, (ax_bw, ax_roof) = plt.subplots(1, 2, figsize=(11, 4.2))
        if bw_curve:
            ax_bw.plot([w / 2**20 for w, _ in bw_curve], [g for _, g in bw_curve], "o-")
        for p in points:
            if p["bound"] == "bandwidth" and p["ceiling"]:
                ax_bw.plot(p["working_set"] / 2**20, p["ceiling"], "s", mfc="none",
                           color="gray")
                ax_bw.annotate(p["task"], (p["working_set"] / 2**20, p["ceiling"]), fontsize=7)
        ax_bw.set_xscale("log")
        ax_bw.set_xlabel("working set (MiB)")
        ax_bw.set_ylabel("bandwidth (GB/s)")
        ax_bw.set_title("streaming bandwidth vs working set")

        ais = [p["flops"] / p["bytes"] for p in points if p["flops"] > 0 and p["bytes"] > 0]
        lo = min(ais + [0.1]) / 4
        hi = max(ais + [10.0]) * 4
        x = np.logspace(math.log10(lo), math.log10(hi), 200)
        if bw_curve:
            levels = {"DRAM (largest working set)": bw_curve[-1][1],
                      "best cache level": max(g for _, g in bw_curve)}
            for (name, gbps), ls in zip(levels.items(), ("-", "--")):
                y = gbps * x if peak is None else np.minimum(gbps * x, peak)
                ax_roof.plot(x, y, color="black", ls=ls, lw=1,
                             label=f"{name}: {gbps:.3g} GB/s")
        if peak:
            ax_roof.axhline(peak, color="red", lw=0.8, ls=":",
                            label=f"FP32 peak {peak:.3g} GFLOPS")
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 10
        for i, p in enumerate(points):
            if p["flops"] <= 0:
                _warn(f"{p['task']}: no FLOPs in its model; left out of the roofline chart")
                continue
            ai = p["flops"] / p["bytes"]
            c = colors[i]
            ax_roof.plot(ai, p["seed"], "o", mfc="none", color=c,
                         label=f"{p['task']} ({p['model']}): seed")
            if p["ceiling"]:   # the task's own ceiling, at its working set
                roof_gflops = p["ceiling"] * (ai if p["bound"] == "bandwidth" else 1.0)
                ax_roof.plot(ai, roof_gflops, "_", color=c, ms=18, mew=2,
                             label=f"{p['task']}: ceiling at its working set")
            if p["best"]:
                ax_roof.plot(ai, p["best"], "o", color=c, label=f"{p['task']} ({p['model']}): best")
                ax_roof.annotate("", (ai, p["best"]), (ai, p["seed"]),
                                 arrowprops={"arrowstyle": "->", "color": c})
        ax_roof.set_xscale("log")
        ax_roof.set_yscale("log")
        ax_roof.set_xlabel("arithmetic intensity (FLOP / byte, first scored size)")
        ax_roof.set_ylabel("GFLOP/s")
        ax_roof.set_title("roofline")
        ax_roof.legend(fontsize=6)
        paths += _finish(fig, out, f"roofline_{safe_name(device, 'device')}",
                         f"{device} ({backend})\n{how}", fontsize=9)
    return paths


def _fractions(result: dict | None) -> dict:
    return {s["label"]: s.get("fraction") for s in (result or {}).get("sizes", [])}


def plot_fractions(runs: list[dict], out: Path) -> list[Path]:
    keys = sorted({(r["task"], r["model"]) for r in runs})
    fig, axes = _grid(len(keys))
    for ax, key in zip(axes, keys):
        r = _pick([g for g in runs if (g["task"], g["model"]) == key])
        d = Path(r["run_dir"])
        seed, best = _fractions(_read_json(d / "00_result.json")), \
            _fractions(_read_json(d / "best_result.json"))
        for name, target in (("seed", seed), ("best", best)):
            held = _read_json(d / f"held_out_{name}.json")
            for label, frac in _fractions((held or {}).get("result")).items():
                target[f"{label}\n(held-out)"] = frac
        labels = list(dict.fromkeys(list(seed) + list(best)))
        xs = range(len(labels))
        w = 0.38
        ax.bar([x - w / 2 for x in xs], [seed.get(k) or 0.0 for k in labels], w, label="seed")
        ax.bar([x + w / 2 for x in xs], [best.get(k) or 0.0 for k in labels], w,
               label=f"best (iteration {r.get('best_iteration')})")
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
    (median and spread per cell) plots, PNG + SVG."""
    import matplotlib
    matplotlib.use("Agg")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not runs:
        return []
    return (plot_convergence(runs, out) + plot_roofline(runs, out) + plot_fractions(runs, out)
            + plot_speedups(runs, out))


# -- command line ----------------------------------------------------------------

CSV_ONE_TABLE = ("CSV holds one table per file: with --details and --format csv give "
                 "--out FILE.csv (the main table goes there, the details to "
                 "FILE_details.csv), or use --format json for both in one document")


def report_text(runs: list[dict], fmt: str = "md", details: bool = False) -> str:
    """The main table (and with `details` the details table after it) as one
    text. CSV has no way to hold two tables, so csv with details is refused
    (ValueError): render each table to its own file (details_path)."""
    main = main_table(runs)
    if not details:
        return render(main, fmt)
    if fmt == "csv":
        raise ValueError(CSV_ONE_TABLE)
    det = details_table(runs)
    if fmt == "json":
        return json.dumps({"main": main, "details": det}, indent=2) + "\n"
    return render(main, fmt) + "\n" + render(det, fmt)


def details_path(out: Path) -> Path:
    """Where the details table goes beside a CSV main table: table.csv -> table_details.csv."""
    return out.with_name(f"{out.stem}_details{out.suffix}")


def report_files(runs: list[dict], fmt: str, details: bool, out: Path) -> dict:
    """{path: text} of what `--out OUT` writes: one file, or for CSV with
    details two, one table each."""
    if fmt == "csv" and details:
        return {out: render(main_table(runs), "csv"),
                details_path(out): render(details_table(runs), "csv")}
    return {out: report_text(runs, fmt, details)}


def _write(files: dict) -> None:
    for path, text in files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as exc:
            raise click.BadParameter(f"cannot write {path}: {exc.strerror or exc}",
                                     param_hint="--out") from None
        click.echo(f"wrote {path}", err=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("runs", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", default="md", type=click.Choice(FORMATS), show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the table here, not stdout. CSV holds one table per file: with "
                   "--details, OUT gets the main table and OUT_details (same suffix) the "
                   "details.")
@click.option("--plots", type=click.Path(file_okay=False), help="Write PNG and SVG plots here.")
@click.option("--details", is_flag=True, help="Add the per-run details table.")
def main(runs, fmt, out, plots, details):
    """Tables (and plots) from search run directories or folders holding them.

    RUNS are run directories, folders holding them, or sweep folders."""
    if fmt == "csv" and details and out is None:
        raise click.UsageError(CSV_ONE_TABLE)
    try:
        loaded = load_runs(runs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="RUNS")
    if not loaded:
        raise click.ClickException("no finished runs (summary.json) found: every run there "
                                   "is unfinished (see the notes above)")
    if out:
        _write(report_files(loaded, fmt, details, out))
    else:
        click.echo(report_text(loaded, fmt, details), nl=False)
    if plots:
        try:
            written = write_plots(loaded, plots)
        except OSError as exc:
            raise click.BadParameter(f"cannot write plots to {plots}: {exc.strerror or exc}",
                                     param_hint="--plots") from None
        for path in written:
            click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":
    sys.exit(main())
