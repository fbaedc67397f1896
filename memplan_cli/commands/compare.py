"""`memplan compare MODEL`: the training memory of MODEL under every system memplan reproduces (naive,
onert, nntrainer, singa) and under memplan's own plan, side by side, by category.

Parsing only: the work is `memplan_cli.api.compare` (over `memplan_cli.comparison`), the document and
views are `memplan_cli.report.compare`.
"""
from __future__ import annotations

import click

from memplan_cli import api
from memplan_cli.commands.analyze import api_arguments
from memplan_cli.commands.options import (ONERT_SIMD_HELP, ONERT_THREADS_HELP, SIMD_WIDTHS, nntrainer_option,
                                          output_options, training_options, verbosity)
from memplan_cli.report import get_reporter
from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color

@click.command("compare", short_help="One step under naive, onert, nntrainer, singa, torch, memplan.")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop an exact planner after SECONDS and keep its best plan.")
@click.option("--onert-threads", type=click.IntRange(min=1), default=None, metavar="N",
              help=ONERT_THREADS_HELP)
@click.option("--onert-simd-width", type=click.Choice(SIMD_WIDTHS), default=None,
              help=ONERT_SIMD_HELP)
@nntrainer_option()
@output_options(formats=("table", "json", "csv"),
                format_help="table for people; json (memplan_cli/schemas/compare.schema.json) or csv for scripts.",
                output_help="Write the comparison to FILE (atomically: a failed run leaves FILE as it was).",
                verbose_help="More output: exact bytes in every cell, each column's planner.")
def command(model, fmt, output, color, quiet, verbose, **flags):
    """Training memory of MODEL under naive, onert, nntrainer, singa and memplan: one column per
    system, one row per category, totals and their ratios to memplan's plan and to the lower bound.

    A system that cannot train the model (e.g. onert and an op it has no backward for) shows n/a
    with the reason.
    """
    from memplan_cli.report.progress import enabled  # lazy: `memplan --help` does not load it

    level = verbosity(quiet, verbose)
    doc = api.compare(model, **api_arguments(flags), progress=enabled(level)).report
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                         verbosity=level)
    emit(get_reporter(fmt).compare(doc, opts), output, (model,), data=fmt if fmt != "table" else "")
