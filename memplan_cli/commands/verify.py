"""`memplan verify MODEL`: prove a plan by running one training step inside it.

Parsing and printing only: the work is `memplan_cli.api.verify` (the plan from
`memplan_cli.analysis`, the run from `memplan_cli.verification.verify_model`). Exit status: 0 the plan holds, 1 it does not (the report names
the first step where results diverge and the buffers involved), 2 bad input.
"""
from __future__ import annotations

import click

from memplan_cli import api
from memplan_cli.commands.analyze import api_arguments
from memplan_cli.commands.options import output_options, profile_options, training_options, verbosity
from memplan_cli.errors import EXIT_FAILED, EXIT_OVER_BUDGET, printable
from memplan_cli.report.output import emit, terminal_width, wrap_text

@click.command("verify", short_help="Run one training step inside its plan and check every value.")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options(runs_a_step=True)
@profile_options
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the random inputs, labels and weights (the model's weights are never read).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="BLAS threads for the NumPy kernels (1 is deterministic and, on a busy machine, fastest).")
@click.option("--no-live-check", is_flag=True,
              help="Skip the up-front check that every buffer a step touches is live; lifetime bugs must "
                   "then show in the data (freed buffers are filled with NaN).")
@output_options(formats=("table", "json"), format_help="table for people, json for scripts.",
                output_help="Write the report to FILE (atomically).", color=False,
                verbose_help="More output: pools and timings.")
@click.option("--budget", default=None, metavar="SIZE",
              help="Verify the cheapest remat plan that fits SIZE (as `analyze --budget`), and check that its loss "
                   "and updated weights equal the step without remat bit for bit; exit 3 when no plan fits.")
def command(model, seed, threads, no_live_check, fmt, output, quiet, verbose, budget, **flags):
    """Run one training step of MODEL inside its planned arena and compare it with the same step
    run with a separate allocation per tensor.

    Every tensor is a NumPy view at its planned offset in one byte buffer per pool; each step gets
    only the buffers live at that step, and a buffer is filled with NaN when its planned lifetime
    ends. The loss and every updated weight must match; on failure the report names the first step
    where results diverge and the buffers involved (exit status 1).
    """
    from memplan_cli.report.progress import enabled  # lazy: `memplan --help` does not load it

    level = verbosity(quiet, verbose)
    r = api.verify(model, **api_arguments(flags), seed=seed, threads=threads, check_live=not no_live_check,
                   budget=budget, timings=fmt == "json" and level >= 2, progress=enabled(level))
    remat, same = r.report.get("remat"), r.same_as_plain
    if not r.fits:
        text = (r.to_json() if fmt == "json" else
                f"memplan verify {printable(model)}: " + ("no remat plan fits" if remat["status"] == "infeasible"
                                               else "no remat plan found that fits")
                + f" {budget} (smallest found {remat['reachable']:,d} B,"
                f" floor {remat['floor']:,d} B): nothing to verify\n")
        if level >= 0 or (output and output != "-"):
            emit(text, output, (model,))
        click.get_current_context().exit(EXIT_OVER_BUDGET)
    if fmt == "json":
        text = r.to_json()
    else:
        text = r.verification.text(level)
        if remat is not None and level >= 1:
            line = (f"  remat     {len(remat['recomputed_ops'])} op(s) recomputed under {budget} "
                    f"(FLOPs {remat['flops_ratio']:.3f} x the step)")
            if same is not None:
                line += ("; loss and every updated weight equal to the step without remat, bit for bit" if same[0]
                         else f"; DIFFERS from the step without remat: {same[1]}")
            lines = text.rstrip("\n").split("\n")
            text = "\n".join(lines[:-1] + [line, lines[-1]]) + "\n"  # before the verdict
    if fmt == "table" and level >= 1:  # -q's one line is for scripts, as analyze -q's: never wrapped
        text = wrap_text(text, terminal_width(to_file=bool(output and output != "-")))
    if level >= 0 or (output and output != "-"):
        emit(text, output, (model,))
    if not r.passed or (same is not None and not same[0]):
        click.get_current_context().exit(EXIT_FAILED)
