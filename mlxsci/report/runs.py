"""Finding and loading search run directories, and the per-run figures a
report is made of (speedup, improved, outcome label, which run stands for a
cell), and whether a run's files are still those it finished with
(mlxsci.search.manifest: a tampered run is named on stderr and marked).

Separate from the tables and the plots because both read runs through it:
mlxsci.report.tables and mlxsci.report.plots import it, never the other way round. The
rules (a sweep's index.json, unfinished runs skipped with a note, one run per
task, model and proposer seed) are described in mlxsci/report/build.py's docstring.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlxsci.evaluation.verdicts import IMPROVED, assess_summary
from mlxsci.search import manifest as run_manifest
from mlxsci.search.outcomes import classify_summary


def warn(msg: str) -> None:
    """A report's warning, one line on stderr."""
    print(f"report: {msg}", file=sys.stderr)


# -- loading ----------------------------------------------------------------


def _warn_tampered(run_dir: Path, integrity: run_manifest.Integrity, then: str) -> None:
    shown = integrity.problems[:6] + (["..."] if len(integrity.problems) > 6 else [])
    warn(
        f"TAMPERED run {run_dir}: its files changed after the run finished "
        f"({'; '.join(shown)}); {then}"
    )


def _load_run(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    integrity = run_manifest.check(run_dir)
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        if integrity.tampered:  # a finished run (it has a manifest) lost its summary
            _warn_tampered(run_dir, integrity, "skipped")
        else:
            warn(f"skipping unfinished run {run_dir} (no summary.json)")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        warn(f"skipping {run_dir}: unreadable summary.json ({exc})")
        return None
    if not isinstance(summary, dict) or not all(
        isinstance(summary.get(k), str) for k in ("task", "model")
    ):
        warn(f"skipping {run_dir}: its summary.json is not a search summary (no task, model)")
        return None
    if integrity.tampered:
        _warn_tampered(
            run_dir,
            integrity,
            "marked tampered, left out of the main table and the plots "
            "(--include-tampered keeps it)",
        )
    summary["run_dir"] = str(run_dir)
    summary["_integrity"] = integrity.status
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
        raise ValueError(
            f"{index} is not a sweep index (mlxsci.sweep writes "
            f'{{"runs": [{{"path": ...}}, ...]}}): {type(exc).__name__}: '
            f"{exc}"
        ) from None
    return paths


def _run_dirs(path: Path) -> list[Path]:
    """Run directories under `path`: through index.json when there is one."""
    if (path / "summary.json").exists() or (path / "run.json").exists():
        return [path]
    index = path / "index.json"
    if index.exists():
        return _index_runs(index)
    found = {p.parent for p in path.rglob("summary.json")}
    found |= {p.parent for p in path.rglob("run.json")}  # unfinished ones, to report them
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
            raise ValueError(
                f"{p} holds no search run (a folder with summary.json or "
                "run.json): give run directories, folders holding them, or a "
                "sweep folder"
            )
        for d in dirs:
            key = d.resolve()
            if key in seen:
                continue
            seen.add(key)
            summary = _load_run(d)
            if summary is not None:
                runs.append(summary)
    runs.sort(key=lambda r: (r["task"], r["model"], r["run_dir"]))
    _note_unchecked(runs)
    return runs


_UNCHECKED = {
    run_manifest.UNSEALED: "have no manifest.json (finished before runs recorded their "
    "files' digests, or resumed and not finished again): their files cannot be checked",
    run_manifest.DIGESTS_MATCH: "match their manifest.json, which another machine's cache "
    "key signed: its signature cannot be checked here",
}


def _note_unchecked(runs: list[dict]) -> None:
    """One line per kind of run whose files the report cannot fully vouch for."""
    for status, what in _UNCHECKED.items():
        n = sum(1 for r in runs if r.get("_integrity") == status)
        if n:
            warn(f"{n} run(s) {what}")


def is_tampered(run: dict) -> bool:
    """Whether the run's files changed after it finished (mlxsci.search.manifest)."""
    return run.get("_integrity") == run_manifest.TAMPERED


def trusted(runs: list[dict]) -> list[dict]:
    """The runs whose files are as they finished, or could not be checked."""
    return [r for r in runs if not is_tampered(r)]


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
    """The run's outcome (mlxsci.search.outcomes.classify_summary: the vocabulary and
    rules of the search's summary.json). The verdicts are recomputed from the
    summary's numbers and noises, not read from its verdict fields, so old
    summaries (no noise) get labels by the same rule."""
    return classify_summary(summary)


def pick_run(runs: list[dict]) -> dict:
    """Most iterations, then newest, then last path."""
    return max(runs, key=lambda r: (r.get("iterations") or 0, r.get("_mtime", 0.0), r["run_dir"]))


def models_of(runs: list[dict]) -> list[str]:
    return sorted({r["model"] for r in runs})


def cell_runs(runs: list[dict], task: str, model: str) -> list[dict]:
    """The runs of one cell: one per proposer seed (picked by pick_run), by seed."""
    by_seed: dict = {}
    for r in runs:
        if r["task"] == task and r["model"] == model:
            by_seed.setdefault(r.get("_seed", 0), []).append(r)
    ordered = sorted(by_seed.items(), key=lambda kv: (isinstance(kv[0], str), kv[0]))
    return [pick_run(group) for _, group in ordered]
