"""`memplan inspect MODEL`: list ops and operands with shapes.

Parsing and printing only: the work is `memplan_cli.api.inspect` (over `memplan_cli.inspection`)."""
from __future__ import annotations

import click

from memplan_cli import api
from memplan_cli.commands.options import dim_option, output_options, verbosity
from memplan_cli.report.output import emit, terminal_width, wrap_text


@click.command("inspect", short_help="The ops and operands of a model: shapes, dtypes and sizes.")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-b", "--batch-size", type=click.IntRange(min=1), default=None,
              help="Re-batch the model first (a symbolic batch is shown at batch 1 without it).")
@dim_option()
@output_options(formats=("table", "json"),
                format_help="table for people; json (memplan_cli/schemas/inspect.schema.json) for scripts.",
                output_help="Write the listing to FILE (atomically: a failed run leaves FILE as it was).",
                color=False, verbose_help="More output: every value of the small constants.")
def command(model, batch_size, dim, fmt, output, quiet, verbose):
    """List the ops and operands of MODEL with shapes, dtypes and sizes.

    Shows what memplan read from the file: canonical op types (the file's name in brackets when it
    differs), attributes, each operand's kind (input, output, act, const), and the values of the
    small integer constants that decide shapes. Weights are never read.
    """
    level = verbosity(quiet, verbose)
    r = api.inspect(model, batch_size=batch_size, dim=dim, sha256=fmt == "json")
    to_file = bool(output and output != "-")
    if fmt == "json":
        text = r.to_json()
    else:
        lines = r.lines(values=1 << 30 if level >= 2 else 8)
        if level == 0:
            lines = lines[:1]
        text = wrap_text("\n".join(lines), terminal_width(to_file=to_file)) + "\n"
    if level >= 0 or to_file:
        emit(text, output, (model,), data="json" if fmt == "json" else "")
