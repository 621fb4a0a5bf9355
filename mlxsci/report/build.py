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
                   (mlxsci.search.outcomes.OUTCOMES lists them, in the order they
                   are tried: no_candidates, saturated, flat,
                   held_out_failure, held_out_regression, improved,
                   within_noise)

A cell of several runs (different seeds: `mlxsci.sweep --repeats K`) gives
the median of its runs with a spread (mlxsci.report.spread: min-max under 5
runs, else a 95 % bootstrap confidence interval of the median, 2000
resamples, seed 0), and once any cell of the table has several runs every
model's group gains the columns `runs` (the count), `speedup lo`, `speedup
hi`, `spread` (which of the two the speedup's is), `held-out ratio lo` and
`held-out ratio hi`; Markdown and LaTeX show them as `1.02x [1.00x, 1.05x]`
with a note under the table saying how the spread is made. A cell counts as
improved when more than half of its runs are, and its outcome lists its
runs' labels, commonest first, with their counts, e.g. `improved 2/3,
flat 1/3`.

"Beyond the noise" is mlxsci.evaluation.verdicts' rule, the one the search's summary.json
uses too: a ratio above 1 + band (improved) or below 1 / (1 + band)
(regressed), band = the larger of the two figures' measured noises (S noise
for the speedup, the held-out size's noise for the ratio) and a 5 % floor.
Runs recorded before noise was measured have no noise fields; their noise
counts as 0, so the floor applies.

Only an improvement beyond the noise is bold in Markdown and LaTeX (a boolean
`<model> improved` column in CSV and JSON). The `outcome` field summary.json
recorded is shown in the details table (the same as the label for runs written
since both use mlxsci.search.outcomes).

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

Integrity: a finished run's manifest.json records the sha256 of each of its
files, summary.json included, signed with the search machine's cache key
(search/manifest.py). A run whose files changed, went or appeared after
it finished, or whose manifest is damaged or not signed by this machine's key
although it names it, is tampered: stderr names it and what differs; the
details table's `integrity` column says `tampered` (else `sealed`, `digests
match` for a manifest signed elsewhere, `unsealed` for a run without one);
the main table gains a `<model> tampered` count per cell and a note, and the
cells and the plots leave tampered runs out unless `--include-tampered`. A
run without a manifest (finished before runs wrote one, or resumed and not
finished again) is counted, with one line on stderr saying its files cannot
be checked.

Library (re-exported here; defined in mlxsci.report.runs: load_runs,
outcome_label, cell_runs; mlxsci.report.tables: main_table, details_table,
render; mlxsci.report.plots: write_plots): load_runs(paths), main_table(runs),
details_table(runs), render(rows, fmt), report_text(runs, fmt, details),
report_files(runs, fmt, details, out), outcome_label(summary),
cell_runs(runs, task, model), write_plots(runs, dir).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mlxsci.report.plots import write_plots
from mlxsci.report.runs import cell_runs, load_runs, outcome_label, trusted
from mlxsci.report.tables import FORMATS, details_table, main_table, render

__all__ = [
    "load_runs",
    "main_table",
    "details_table",
    "render",
    "report_text",
    "report_files",
    "outcome_label",
    "cell_runs",
    "write_plots",
    "main",
]


# -- command line ----------------------------------------------------------------

CSV_ONE_TABLE = (
    "CSV holds one table per file: with --details and --format csv give "
    "--out FILE.csv (the main table goes there, the details to "
    "FILE_details.csv), or use --format json for both in one document"
)


def report_text(
    runs: list[dict], fmt: str = "md", details: bool = False, include_tampered: bool = False
) -> str:
    """The main table (and with `details` the details table after it) as one
    text. CSV has no way to hold two tables, so csv with details is refused
    (ValueError): render each table to its own file (details_path).
    include_tampered: count tampered runs in the main table's cells."""
    main = main_table(runs, include_tampered)
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


def report_files(
    runs: list[dict], fmt: str, details: bool, out: Path, include_tampered: bool = False
) -> dict:
    """{path: text} of what `--out OUT` writes: one file, or for CSV with
    details two, one table each."""
    if fmt == "csv" and details:
        return {
            out: render(main_table(runs, include_tampered), "csv"),
            details_path(out): render(details_table(runs), "csv"),
        }
    return {out: report_text(runs, fmt, details, include_tampered)}


def _write(files: dict) -> None:
    for path, text in files.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot write {path}: {exc.strerror or exc}", param_hint="--out"
            ) from None
        click.echo(f"wrote {path}", err=True)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", default="md", type=click.Choice(FORMATS), show_default=True)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the table here, not stdout. CSV holds one table per file: with "
    "--details, OUT gets the main table and OUT_details (same suffix) the "
    "details.",
)
@click.option("--plots", type=click.Path(file_okay=False), help="Write PNG and SVG plots here.")
@click.option("--details", is_flag=True, help="Add the per-run details table.")
@click.option(
    "--include-tampered",
    is_flag=True,
    help="Count runs whose files changed after they finished in the main table and "
    "the plots (they are named on stderr and marked either way).",
)
def main(runs, fmt, out, plots, details, include_tampered):
    """Tables (and plots) from search run directories or folders holding them.

    RUNS are run directories, folders holding them, or sweep folders."""
    if fmt == "csv" and details and out is None:
        raise click.UsageError(CSV_ONE_TABLE)
    try:
        loaded = load_runs(runs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="RUNS") from exc
    if not loaded:
        raise click.ClickException(
            "no finished runs (summary.json) found: every run there "
            "is unfinished (see the notes above)"
        )
    if out:
        _write(report_files(loaded, fmt, details, out, include_tampered))
    else:
        click.echo(report_text(loaded, fmt, details, include_tampered), nl=False)
    plotted = loaded if include_tampered else trusted(loaded)
    if plots and not plotted:
        click.echo("no plots: every run is tampered (--include-tampered draws them)", err=True)
    elif plots:
        try:
            written = write_plots(plotted, plots)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot write plots to {plots}: {exc.strerror or exc}", param_hint="--plots"
            ) from None
        for path in written:
            click.echo(f"wrote {path}", err=True)


if __name__ == "__main__":
    sys.exit(main())
