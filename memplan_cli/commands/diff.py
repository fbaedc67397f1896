"""`memplan diff --baseline BASE.json TARGET`: what changed against a saved report, and whether the
change passes the thresholds. Exit 0 within thresholds, 1 on a regression, 2 on bad input."""
from __future__ import annotations

import click

from memplan_cli import api
from memplan_cli.commands.analyze import api_arguments
from memplan_cli.commands.options import (defaults_from, output_options, planner_options, profile_option,
                                          training_options, verbosity)
from memplan_cli.errors import EXIT_FAILED, printable
from memplan_cli.report import get_reporter
from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color


@defaults_from("the baseline's")
@click.command("diff", short_help="A model or report against a saved report, with CI thresholds.")
@click.option("--baseline", required=True, type=click.Path(), metavar="BASE.json",
              help="A report written by `memplan analyze --format json`.")
@click.argument("target", type=click.Path(dir_okay=True))
@click.option("--fail-on", "fail_on", multiple=True, metavar="KEY:+LIMIT",
              help="Fail (exit 1) when KEY grows by more than LIMIT: total:+5%, planned:+1MiB, back-prop:+0%. "
                   "KEY: total (= planned), naive, lower_bound, onert, or a category (the table's labels, "
                   "such as 'opt variable', work too). Repeatable. Without --fail-on, diff exits 0 "
                   "whatever changed.")
@training_options
@profile_option(help="Analyse a model TARGET with this profile. Default: the baseline's.")
@planner_options
@output_options
def command(baseline, target, fail_on, fmt, output, color, quiet, verbose, **flags):
    """Compare TARGET with the baseline report BASE.json.

    TARGET is a model (analysed with the baseline's configuration, unless flags override it) or
    another JSON report. Exit status: 0 within the thresholds, 1 on a regression, 2 on a usage or
    input error (unreadable report, bad threshold).
    """
    from memplan_cli.report.progress import enabled  # lazy: `memplan --help` does not load it

    level = verbosity(quiet, verbose)
    # a flag not given is None (or no value of a repeatable one): the API takes the baseline's then
    r = api.diff(baseline, target, fail_on=fail_on, **api_arguments(flags), progress=enabled(level))
    doc = r.report
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                         verbosity=level)
    emit(get_reporter(fmt).diff(doc, opts), output, (baseline, target), data=fmt if fmt != "table" else "")
    if r.regression:
        # the reason belongs in the CI log, whatever --format and -o sent elsewhere
        for line in r.failure_lines():
            click.echo(printable(line), err=True)
        click.get_current_context().exit(EXIT_FAILED)
