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
                   are tried; the report shows whichever names it holds)

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

Transfer (issue 25): summary.json's `transfer` grades the run's best as
"Gaming Without an Attacker" does (transfers, A, B, C, D, no-win; null: not
gradable), with evidence strongest first; `held_out` records how the held-out
was chosen (secret or metal-sci) and `held_out_verified` what does not hold in
a secret draw. The details table shows per run `transfer grade`, `held-out
mode`, `held-out verified` (yes; n/a for the listed metal-sci size; `NO:
<problems>`) and `evidence` (the first item's what and where, cut to about
80 characters); runs written before grading show `-`. The report rechecks a
revealed secret against its commitment itself (mlxsci.held_out.commitment);
a run whose draw does not verify is named on stderr (UNVERIFIED), the main
table gains a `<model> unverified` count, and the transfer table counts it as
unverified instead of by its grade. Once any run carries a `transfer` or
`held_out` record the report adds the transfer table (mlxsci.report.tables.
transfer_table: per model, a row per task and an `all tasks` row; columns
model, task, runs, ungraded, [unverified], [tampered], no win, not judged, wins,
transferred, A, B, C, D, transfer rate), after the main table in Markdown and
LaTeX, as `transfer` in the JSON document (which is then {"main": ...,
"transfer": ...[, "details": ...]}), and for CSV in FILE_transfer.csv beside
`--out FILE.csv` (to stdout CSV holds the main table only, and stderr says
where the transfer table went).

Imported runs (python -m mlxsci.import_metal_sci; mlxsci/import_metal_sci/
records.py): runs another harness recorded on another chip. Their figures are
not mlxsci's: the cells' speedup, improved, held-out and outcome columns, the
transfer table and the plots leave them out (mlxsci.report.runs.cell_runs,
native). Each model with imported runs gains, in the main table,
`recorded speedup` (the recorded improvement; a median, with `recorded
runs` and a spread, when a cell holds several imported runs) and `recorded
on` (the chip and harness, 'Apple M1 Pro (Metal-Sci)'), with a note; the
details table gains `recorded on`, `recorded seed S`, `recorded best S`,
`recorded speedup`, `recorded best iteration`, `recorded compile failures`,
`recorded incorrect` and `converted`, and an imported run's row leaves the
mlxsci columns empty. Integrity and held-out checks treat an imported run as
any other: its manifest is checked (an edit after import is tampered), and
it has no held-out draw to verify.

Re-score (mlxsci.report.rescore_section): with a rescore.json in a folder
given or beside the reported run directories, the report adds the re-score
section (counts of agreements and disagreements; pass/fail agreement per
task with signature-only Metal errors apart; Metal-Sci's table of each run's
best over its seed, recorded and modelled, side by side; the recorded x
mlxsci verdict matrix; the disagreements, each with its cause; and each
run's recorded best re-scored: mlxsci/report/audit.py): after the other
tables in Markdown and LaTeX, as `rescore` in the JSON document, and for CSV
in FILE_rescore.csv, FILE_rescore_agreement.csv, FILE_rescore_metal_sci.csv,
FILE_rescore_matrix.csv, FILE_rescore_disagreements.csv and
FILE_rescore_best.csv beside `--out FILE.csv`; with `--plots DIR`, also
audit_speedups.* (recorded against modelled speedup of each run's best). A
malformed rescore.json, or malformed records, give one line on stderr and
are left out.

Library (re-exported here; defined in mlxsci.report.runs: load_runs,
outcome_label, cell_runs; mlxsci.report.tables: main_table, details_table,
transfer_table, render; mlxsci.report.plots: write_plots): load_runs(paths),
main_table(runs), details_table(runs), transfer_table(runs), render(rows,
fmt), report_text(runs, fmt, details, include_tampered, rescore),
report_files(runs, fmt, details, out, include_tampered, rescore),
outcome_label(summary),
cell_runs(runs, task, model), write_plots(runs, dir).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from mlxsci.report.audit import write_audit_plot
from mlxsci.report.plots import write_plots
from mlxsci.report.rescore_section import (
    csv_suffix,
    load_rescore,
    rescore_csv,
    rescore_tables,
    rescore_text,
)
from mlxsci.report.runs import (
    cell_runs,
    has_transfer_records,
    imported_runs,
    load_runs,
    outcome_label,
    trusted,
    warn,
)
from mlxsci.report.search_section import search_section
from mlxsci.report.tables import FORMATS, details_table, main_table, render, transfer_table

__all__ = [
    "load_runs",
    "main_table",
    "details_table",
    "transfer_table",
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


def _rescore(runs: list[dict], rescore: list[dict] | None, include_tampered: bool):
    """The re-score section's tables (rescore_section.rescore_tables) or None:
    from `rescore` (load_rescore's records), or when None from the
    rescore.json beside the runs."""
    if rescore is None:
        rescore = load_rescore(runs)
    return rescore_tables(rescore, include_tampered)


def report_text(
    runs: list[dict],
    fmt: str = "md",
    details: bool = False,
    include_tampered: bool = False,
    rescore: list[dict] | None = None,
) -> str:
    """The main table, the transfer table when any run has a transfer record
    (has_transfer_records), with `details` the details table, and the
    re-score section when there are re-score records (`rescore`, load_rescore's
    records; None: those of the rescore.json beside the runs), as one text.
    CSV has no way to hold two tables: csv with details is refused
    (ValueError), and csv alone is the main table only (report_files writes
    each table to its own file). JSON is the main table's list when it is the
    only table, else {"main", "transfer", "details", "rescore"} (those there
    are; "rescore" is {"counts", "matrix", "disagreements", "best"}).
    include_tampered: count tampered runs in the main and transfer tables and
    the re-score section."""
    main = main_table(runs, include_tampered)
    transfer = transfer_table(runs, include_tampered) if has_transfer_records(runs) else None
    if fmt == "csv" and details:
        raise ValueError(CSV_ONE_TABLE)
    if fmt == "csv":
        return render(main, fmt)
    section = _rescore(runs, rescore, include_tampered)
    if fmt == "json" and not details and transfer is None and section is None:
        return render(main, fmt)
    if fmt == "json":
        doc: dict = {"main": main}
        if transfer is not None:
            doc["transfer"] = transfer
        if details:
            doc["details"] = details_table(runs)
        if section is not None:
            doc["rescore"] = section
        return json.dumps(doc, indent=2) + "\n"
    tables = [main] + ([transfer] if transfer is not None else [])
    tables += [details_table(runs)] if details else []
    text = "\n".join(render(t, fmt) for t in tables)
    searches = search_section(runs) if details and fmt == "md" else None
    text += "\n" + searches if searches else ""
    return text + ("\n" + rescore_text(section, fmt) if section is not None else "")


def table_path(out: Path, which: str) -> Path:
    """Where a second CSV table goes beside the main one: table.csv -> table_<which>.csv."""
    return out.with_name(f"{out.stem}_{which}{out.suffix}")


def details_path(out: Path) -> Path:
    """Where the details table goes beside a CSV main table: table.csv -> table_details.csv."""
    return table_path(out, "details")


def report_files(
    runs: list[dict],
    fmt: str,
    details: bool,
    out: Path,
    include_tampered: bool = False,
    rescore: list[dict] | None = None,
) -> dict:
    """{path: text} of what `--out OUT` writes: one file, or for CSV one per
    table: OUT the main table, OUT_transfer the transfer table (when any run
    has a transfer record), OUT_details the details (with `details`), and
    with re-score records (`rescore` as report_text takes it) OUT_rescore
    (the counts), OUT_rescore_matrix, OUT_rescore_disagreements and
    OUT_rescore_best."""
    if fmt != "csv":
        return {out: report_text(runs, fmt, details, include_tampered, rescore)}
    files = {out: render(main_table(runs, include_tampered), "csv")}
    if has_transfer_records(runs):
        files[table_path(out, "transfer")] = render(transfer_table(runs, include_tampered), "csv")
    if details:
        files[details_path(out)] = render(details_table(runs), "csv")
    section = _rescore(runs, rescore, include_tampered)
    for name, rows in (section or {}).items():
        files[table_path(out, csv_suffix(name))] = rescore_csv(name, rows)
    return files


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
    help="Count runs whose files changed after they finished in the main and transfer "
    "tables, the re-score section and the plots (they are named on stderr and marked "
    "either way).",
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
    rescore = load_rescore(loaded, runs)
    if out:
        _write(report_files(loaded, fmt, details, out, include_tampered, rescore))
    else:
        click.echo(report_text(loaded, fmt, details, include_tampered, rescore), nl=False)
        if fmt == "csv" and has_transfer_records(loaded):
            warn(
                "the transfer table is not printed: CSV holds one table; give --out "
                "FILE.csv (it goes to FILE_transfer.csv) or use --format json"
            )
        if fmt == "csv" and rescore_tables(rescore, include_tampered) is not None:
            warn(
                "the re-score tables are not printed: CSV holds one table; give --out "
                "FILE.csv (they go to FILE_rescore*.csv) or use --format json"
            )
    plotted = loaded if include_tampered else trusted(loaded)
    audited = rescore_tables(rescore, include_tampered) if plots else None
    if audited and audited["metal_sci"]:
        try:
            for path in write_audit_plot(audited["metal_sci"], Path(plots)):
                click.echo(f"wrote {path}", err=True)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot write plots to {plots}: {exc.strerror or exc}", param_hint="--plots"
            ) from None
        if len(imported_runs(plotted)) == len(plotted):
            return  # the audit's plot is all an imported corpus has to draw
    if plots and not plotted:
        click.echo("no plots: every run is tampered (--include-tampered draws them)", err=True)
    elif plots and len(imported_runs(plotted)) == len(plotted):
        click.echo(
            "no plots: every run is imported (recorded elsewhere, not measured by mlxsci)",
            err=True,
        )
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
