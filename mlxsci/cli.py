"""`mlxsci VERB ...` (and `python -m mlxsci VERB ...`): every verb under one command.

    mlxsci eval saxpy --backend sim          # = python -m mlxsci.eval saxpy --backend sim
    mlxsci search --task saxpy --model autotune --iterations 8
    mlxsci report results/sweep
    mlxsci sweep --tasks saxpy --models autotune --iterations 4
    mlxsci roofline
    mlxsci transfer heat2d my_heat.metal --backend sim
    mlxsci import-metal-sci ~/metal-sci/results --out results/imported --rescore --backend sim
    mlxsci --version

Each subcommand is the verb module's own click command (its `main`), so the
two spellings take the same arguments and behave the same. A verb module is
imported only when its subcommand runs, so `mlxsci -h` and `mlxsci
--version` stay quick.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

import click

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

# subcommand -> (module holding its click command `main`, one line of help)
VERBS = {
    "eval": ("mlxsci.eval", "Evaluate a kernel candidate for a task: verdicts and score."),
    "search": (
        "mlxsci.search.__main__",
        "Search for faster correct kernels (LLM or offline autotune).",
    ),
    "report": ("mlxsci.report", "Tables and plots from search run directories."),
    "sweep": ("mlxsci.sweep", "Run searches for every task x model and index them."),
    "roofline": ("mlxsci.roofline", "Show (measuring once) this machine's roofline."),
    "transfer": (
        "mlxsci.transfer.__main__",
        "Grade whether a candidate's win transfers to the held-out (A-D, transfers).",
    ),
    "import-metal-sci": (
        "mlxsci.import_metal_sci.__main__",
        "Import Metal-Sci run directories; --rescore re-evaluates their candidates.",
    ),
}


def installed_version() -> str:
    """The version pip installed (the package metadata), not a copy in the source."""
    try:
        return version("mlxsci")
    except PackageNotFoundError:
        return "unknown (mlxsci is not installed: pip install -e .)"


class VerbGroup(click.Group):
    """A group whose subcommands are the verb modules' commands, loaded on use."""

    def list_commands(self, ctx):
        return list(VERBS)

    def get_command(self, ctx, name):
        if name not in VERBS:
            return None
        module, _ = VERBS[name]
        return importlib.import_module(module).main

    def format_commands(self, ctx, formatter):
        # From VERBS, so that listing the verbs imports none of them.
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_line) for name, (_, help_line) in VERBS.items()])


@click.group("mlxsci", cls=VerbGroup, context_settings=HELP_OPTIONS)
@click.version_option(
    installed_version(), "--version", prog_name="mlxsci", message="%(prog)s %(version)s"
)
def main():
    """mlxsci: benchmark and search of scientific GPU kernels on MLX.

    `mlxsci VERB -h` shows a verb's options; `mlxsci VERB ...` is the same as
    `python -m mlxsci.VERB ...`."""
