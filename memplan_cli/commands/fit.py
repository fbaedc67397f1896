"""`memplan fit MODEL --budget 64MiB`: how to make one training step fit: the options that fit, each
with its memory and compute, and the memory / compute Pareto front (work: memplan_cli/remat/fit.py).
Exit status: 0 some option fits, 3 none does, 2 bad input."""
from __future__ import annotations

import io
import json

import click

from memplan_cli import api
from memplan_cli.commands.analyze import api_arguments
from memplan_cli.commands.options import output_options, training_options, verbosity
from memplan_cli.errors import EXIT_OVER_BUDGET
from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color
from memplan_cli.report.shell import shell_lines


@click.command("fit", short_help="How to make one step fit a budget, and the command for each way.")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options
@click.option("--budget", required=True, metavar="SIZE", help="Memory budget (64MiB, 1.5GB, 1048576).")
@click.option("--max-dim", "max_dim", default=None, metavar="NAME",
              help="Also find the largest size of the symbolic dimension NAME (a sequence length) that fits "
                   "without remat at the batch asked; the setup's own size comes from --dim NAME=N.")
@output_options(formats=("table", "json", "csv"), format_help="table for people; json (memplan_cli/schemas/fit.schema.json) "
                "or csv (one row per option) for scripts.", output_help="Write the report to FILE (atomically).",
                verbose_help="More output: which planner kernels ran.")
def command(model, budget, max_dim, fmt, output, color, quiet, verbose, **flags):
    """How to make one training step of MODEL fit SIZE: the largest batch without remat, the cheapest
    remat plan at the requested batch, the smallest frozen prefix, SGD instead of Adam, and the
    combinations on the memory / compute Pareto front. Each option comes with the `memplan analyze`
    command that applies it (and prints its figure)."""
    from memplan_cli.report.progress import enabled  # lazy: `memplan --help` does not load it

    level = verbosity(quiet, verbose)
    doc = api.fit(model, **api_arguments(flags), budget=budget, max_dim=max_dim,
                 progress=enabled(level)).report
    if fmt == "json":
        text = json.dumps(doc, indent=2) + "\n"
    elif fmt == "csv":
        text = render_csv(doc)
    else:
        to_file = bool(output and output != "-")
        opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                             verbosity=level)
        from memplan_cli.report import printable_doc

        text = render(printable_doc(doc), opts)  # the file's own strings, escaped for a terminal
        if level >= 2:
            from memplan_cli.report.table import kernels_text

            text += f"planner kernels: {kernels_text(api.planner_kernels())}\n"
    if level >= 0 or (output and output != "-"):
        emit(text, output, (model,), data=fmt if fmt != "table" else "")
    if not doc["fits"]:
        click.get_current_context().exit(EXIT_OVER_BUDGET)


def render_csv(doc: dict) -> str:
    """One row per option; bytes as integers, an empty flops_ratio when memplan has no figure."""
    import csv  # lazy: `memplan --help` does not load it

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["option", "change", "planned", "fits", "flops_ratio", "pareto", "command"])
    for o in doc["options"]:
        w.writerow([o["option"], o["change"], o["planned"], int(o["fits"]),
                    "" if o["flops_ratio"] is None else o["flops_ratio"], int(o["pareto"]), o["command"] or ""])
    return out.getvalue()


def render(doc: dict, opts) -> str:
    from rich.table import Table
    from rich.text import Text

    # lazy: `memplan --help` does not load it
    from memplan_cli.report.table import _console, exact_note, fig, dims_part, fine_tuning_part, fitted, precision_part
    from memplan_cli.report.units import human  # lazy: `memplan --help` does not load it

    c = doc["config"]
    head = (f"{doc['model']['file']} · batch {c['batch_size']}{dims_part(c)}{precision_part(c)} · {c['optimizer']} · {c['loss']} · trainable "
            f"{c['trainable_ops']}{fine_tuning_part(c)} · budget {doc['budget']:,d} B ({human(doc['budget'])})")
    fitting = [o for o in doc["options"] if o["fits"]]
    if opts.verbosity == 0:
        return f"{doc['model']['file']}: {len(fitting)} option(s) fit {human(doc['budget'])}\n"
    con = _console(opts)
    con.print(Text(head, style="bold"))

    def build(cell):
        table = Table(header_style="bold")
        table.add_column("#", justify="right", no_wrap=True)
        table.add_column("option", no_wrap=True)
        table.add_column("change", overflow="fold")
        table.add_column("planned", justify="right", no_wrap=True)
        table.add_column("fits", no_wrap=True)
        table.add_column("FLOPs/\nsample", justify="right", no_wrap=True)
        table.add_column("Pareto", justify="center", no_wrap=True)
        for k, o in enumerate(doc["options"], 1):
            table.add_row(str(k), o["option"], o["change"], cell(o["planned"]),
                          Text("yes", style="green") if o["fits"] else Text("no", style="red"),
                          f"{o['flops_ratio']:.3f} x" if o["flops_ratio"] is not None else "n/a",
                          "*" if o["pareto"] else "")
        return table

    # the change column wraps; the figures never do
    variants = (lambda: build(fig), lambda: build(human))
    table, k = fitted(con, [lambda v=v: _shrunk(con, v) for v in variants])
    con.print(table)
    if k:
        con.print(exact_note(con, variants[0]()))
    con.print("FLOPs/sample: per sample, as a multiple of the step as asked; Pareto *: of the options that fit "
              "and train the same ops at the same batch, none needs less memory and no more compute, or less "
              "compute and no more memory")
    for o in doc["options"]:
        if o.get("note"):
            con.print(Text(f"{o['option']}: {o['note']}"))
    con.print(f"{len(fitting)} option(s) fit" if fitting else "nothing fits")
    commands = [(k, o["command"]) for k, o in enumerate(doc["options"], 1) if o["command"]]
    if commands:
        con.print("the command that applies each option (and prints its figure):")
        for k, cmd in commands:
            for line in shell_lines(cmd, con.width, f"{k:>3}  "):
                con.print(Text(line), overflow="ignore", crop=False, soft_wrap=True)
    return con.text()


def _shrunk(con, build):
    """`build()`'s table as wide as the console allows, its change column wrapping to make room."""
    from memplan_cli.report.table import natural_width  # lazy: `memplan --help` does not load it

    table = build()
    if natural_width(con, table) > con.width:
        table.columns[2].width = max(12, con.width - (natural_width(con, _with_change_width(build, 1)) - 1))
    return table


def _with_change_width(build, width):
    table = build()
    table.columns[2].width = width
    return table
