"""`memplan sweep MODEL --batch-sizes 1,2,4,8 [--budget 64MiB]`: totals per batch for each profile,
and the largest batch that fits a memory budget (exit 3 when none does). `--dim seq=128,256,512`
sweeps a symbolic dimension's sizes instead, at one batch."""
from __future__ import annotations

import click

from memplan_cli import api
from memplan_cli.api import DEFAULT_BATCHES
from memplan_cli.commands.analyze import api_arguments
from memplan_cli.commands.options import output_options, planner_options, profile_option, training_options, verbosity
from memplan_cli.errors import EXIT_OVER_BUDGET
from memplan_cli.report import get_reporter
from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color


@click.command("sweep", short_help="Training memory per batch size and profile; the largest fitting.")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-b", "--batch-sizes", "--batch-size", "batch_sizes", default=None, metavar="LIST",
              help=f"Batch sizes to analyse, e.g. 1,2,4,8 or 1-16. Default {DEFAULT_BATCHES}; with --budget "
                   "and no list, memplan searches for the largest batch that fits.")
@click.option("--budget", default=None, metavar="SIZE",
              help="Memory budget (64MiB, 1.5GB, 1048576): report the largest batch whose total fits. "
                   f"Exit {EXIT_OVER_BUDGET} when none does.")
@click.option("--dim", "dim", multiple=True, metavar="NAME=N[,N...]",
              help="Bind a symbolic dimension other than the batch (--dim seq=512; repeatable; `memplan inspect "
                   "MODEL` lists them). A list (--dim seq=128,256,512) sweeps its sizes instead of batch sizes, "
                   "at one batch (-b N, default the model's); with --budget, the largest listed size that fits.")
@profile_option(multiple=True, default=("memplan", "onert"))
@training_options(exclude=("batch_size", "dim"))
@planner_options
@output_options
def command(model, batch_sizes, budget, profiles, dim, fmt, output, color, quiet, verbose, **flags):
    """Training memory of MODEL for several batch sizes, for each profile.

    A profile that cannot handle the model (e.g. onert and an op it cannot train) shows n/a with
    the reason, except the first profile: its errors stop the sweep.
    """
    from memplan_cli.report.progress import enabled  # lazy: `memplan --help` does not load it

    level = verbosity(quiet, verbose)
    doc = api.sweep(model, **api_arguments(flags), batch_sizes=batch_sizes, budget=budget, profiles=profiles, dim=dim,
                    progress=enabled(level)).report
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                         verbosity=level)
    emit(get_reporter(fmt).sweep(doc, opts), output, (model,), data=fmt if fmt != "table" else "")
    if doc["status"] == "over_budget":
        click.get_current_context().exit(EXIT_OVER_BUDGET)
