"""A map-elites archive as a table (summary.json, the report) and a picture (archive.png).

Rows are the archive's cells (search/features.py): the kind of kernel, the
iteration of its best (its elite) with the elite's S, and how many correct
candidates of that kind the run evaluated. The picture lays the cells out as
a grid: threadgroup memory and vector width down, threadgroup size class
(and, for a task of several kernels, the kernel that took most time) across,
each coloured by its elite's S; a kind nobody reached is left blank, which
is what the map is for: where the search has and has not been.
"""

from __future__ import annotations

from pathlib import Path

from mlxsci.search.features import parse_cell

MEMORY = ("none", "shared")
VECTOR = ("scalar", "x2", "x4")
THREADS = ("<=64", "65-256", ">256", "expr")


def archive_rows(archive: dict, history: list[dict]) -> list[dict]:
    """The table of an archive (strategy_state.json's `archive`: cell key ->
    {iteration, score}), with the candidates of each kind the run evaluated."""
    tried: dict[str, int] = {}
    for rec in history:
        if rec.get("cell"):
            tried[rec["cell"]] = tried.get(rec["cell"], 0) + 1
    rows = []
    for key, elite in sorted(archive.items()):
        rows.append(
            {
                "cell": key,
                **parse_cell(key),
                "iteration": elite["iteration"],
                "score": elite["score"],
                "candidates": tried.get(key, 0),
            }
        )
    return rows


def archive_markdown(rows: list[dict]) -> str:
    """The archive as a markdown table."""
    lines = [
        "| memory | vector | threads | hot kernel | best S | iteration | candidates |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        score = r.get("score")
        shown = f"{score:.4f}" if isinstance(score, (int, float)) else "-"
        words = [
            str(r.get(k) or "-").replace("|", "/") for k in ("memory", "vector", "threads", "hot")
        ]
        lines.append(
            f"| {' | '.join(words)} | {shown} | {r.get('iteration', '-')} | "
            f"{r.get('candidates', '-')} |"
        )
    return "\n".join(lines) + "\n"


def draw_archive(rows: list[dict], path: Path, title: str = "") -> None:
    """The archive's grid as a PNG at `path` (matplotlib, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    hots: list[str | None] = [*sorted({str(r["hot"]) for r in rows if r.get("hot")})] or [None]
    columns: list[tuple[str | None, str | None]] = [(t, h) for h in hots for t in THREADS]
    lines: list[tuple[str | None, str | None]] = [(m, v) for m in MEMORY for v in VECTOR]
    grid = np.full((len(lines), len(columns)), np.nan)
    labels: dict[tuple[int, int], str] = {}
    for r in rows:
        try:
            y = lines.index((r.get("memory"), r.get("vector")))
            x = columns.index((r.get("threads"), r.get("hot")))
        except ValueError:
            continue
        grid[y, x] = r["score"]
        labels[(y, x)] = f"{r['score']:.3f}\nit {r['iteration']}"
    fig, ax = plt.subplots(figsize=(1.3 * len(columns) + 2.5, 0.8 * len(lines) + 1.8))
    shown = np.ma.masked_invalid(grid)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    image = ax.imshow(shown, cmap=cmap, aspect="auto")
    low, high = (float(np.nanmin(grid)), float(np.nanmax(grid))) if labels else (0.0, 1.0)
    for (y, x), text in labels.items():
        bright = high > low and (grid[y, x] - low) / (high - low) > 0.6  # viridis turns yellow
        ax.text(x, y, text, ha="center", va="center", fontsize=8,
                color="black" if bright else "white")  # fmt: skip
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([f"{t}" if h is None else f"{t}\n{h}" for t, h in columns], fontsize=8)
    ax.set_yticks(range(len(lines)))
    ax.set_yticklabels([f"{'tg mem' if m == 'shared' else 'no tg mem'}, {v}" for m, v in lines])
    ax.set_xlabel("threads per threadgroup" + (" / hot kernel" if hots != [None] else ""))
    fig.colorbar(image, ax=ax, label="best S of the cell")
    ax.set_title(f"map-elites archive{': ' + title if title else ''} ({len(rows)} cells filled)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
