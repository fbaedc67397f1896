"""`memplan plan BUFFERS.csv`: offsets for a list of buffers given in MiniMalloc's CSV format.

Parsing and printing only: the work is `memplan_cli.api.plan` (the CSV is `memplan_cli.plancsv`, the
planning and the verification `memplan_cli.planrun`).
"""
from __future__ import annotations

import json

import click

from memplan_cli import api
from memplan_cli.commands.options import output_options, verbosity
from memplan_cli.errors import printable
from memplan_cli.report.output import emit, terminal_width, wrap_text, write_atomic

def summary_table(d: dict) -> str:
    from memplan_cli.report.units import human  # lazy: `memplan --help` does not load it

    def nb(n):
        return f"{n:,} B ({human(n)})" if n >= 1024 else f"{n:,} B"

    ratio = "n/a" if d["arena_over_lower_bound"] is None else f"{d['arena_over_lower_bound']:.4f}"
    naive_ratio = f" = {d['naive'] / d['lower_bound']:.2f} x LB" if d["lower_bound"] else ""
    rows = [
        ("file", printable(d["file"])),
        ("buffers", f"{d['buffers']:,}"),
        ("naive", nb(d["naive"]) + naive_ratio),
        ("lower bound", nb(d["lower_bound"])),
        ("arena", nb(d["arena"])),
        ("arena/LB", ratio),
        ("planner", d["planner"]),
        ("status", d["status"] + _why_status(d)),
    ]
    if d.get("seconds") is not None:
        rows.append(("seconds", f"{d['seconds']:.3f}"))
    if d["alignment"] > 1:
        rows.append(("alignment", f"sizes planned as multiples of {d['alignment']}"))
    rd = d.get("rounded")
    if rd:
        rows.append(("rounded", f"lower bound of the rounded sizes {nb(rd['lower_bound'])}, planner status "
                                f"{rd['status']} for them; the lower bound and status above are the file's sizes'"))
    if d["time_limit"] is not None:
        rows.append(("note", f"planned under a {d['time_limit']:g} s time limit: the plan may depend on this "
                             "machine's speed and load"))
    w = max(len(k) for k, _ in rows)
    return "".join(f"{k:<{w}}  {v}\n" for k, v in rows)


def _why_status(d: dict) -> str:
    """What an "optimal" rests on: the arena meets the lower bound, or the exact search proved it."""
    if d["status"] != "optimal":
        return ""
    if d["arena"] == d["lower_bound"]:
        return " (arena = lower bound)"
    return " (proven by the exact search: no smaller arena holds these buffers)"


@click.command("plan", short_help="Offsets for a buffer list (MiniMalloc's CSV format).")
@click.argument("buffers", metavar="BUFFERS.csv")
@click.option("--planner", default=None, metavar="NAME",
              help="A registered planner (greedy, naive, wic, firstfit, ...). Default: best when it is "
                   "available, else greedy.")
@click.option("--rounds", type=click.IntRange(min=1), default=None, metavar="N",
              help="Work budget of a searching planner (best, exact), in rounds of its search (a fixed "
                   "count of nodes, about 30 ms of one core each). Default: best 150, exact 600. The plan "
                   "does not depend on the machine's speed or load.")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop the planner on the clock after SECONDS instead of its work budgets (greedy's "
                   "placements, the search's rounds) and keep its best plan. The plan may then depend on "
                   "the machine's speed and load, and the summary says so.")
@output_options(formats=("table", "json"), format_help="table for people; json for scripts "
                "(memplan_cli/schemas/plan.schema.json).",
                output_help="Write the plan to FILE (atomically; nothing is written on an error): the buffers with an "
                            "`offset` column (the summary is still printed), or with -f json the summary and every "
                            "buffer's offset (nothing is printed). '-' writes it to stdout and the summary to stderr.",
                output_type=False, color=False, verbose_help="More output: the planner's seconds and which kernels ran.")
def command(buffers, planner, rounds, time_limit, output, fmt, quiet, verbose):
    """Plan offsets for the buffers in BUFFERS.csv, MiniMalloc's format: a header
    `id,lower,upper,size`, one buffer per line, live over the half-open steps [lower, upper).

    Also read: the aliases buffer / buffer_id (id), start / begin (lower), end (the last live step,
    inclusive, instead of upper); an `alignment` column is honoured; other columns (offset, hint,
    gaps, ...) are ignored and copied to the output.

    Prints the number of buffers, naive (every buffer its own bytes), the lower bound (the most
    bytes live at one step), the arena, arena/LB, the planner, its status ("optimal" when proven: the
    arena equals the bound, or the exact search proved no smaller arena holds the buffers; with an
    alignment column both are the file's own sizes', the rounded sizes' shown apart) and its
    seconds. Without --time-limit the same file gives the same plan on
    any machine at any load. Every plan is checked by memplan's independent overlap
    verifier before anything is printed or written.
    """
    from memplan_cli.report.progress import enabled  # lazy: `memplan --help` does not load it

    level = verbosity(quiet, verbose)
    # a search can take its whole time limit: a spinner after a second, on a terminal only
    result = api.plan(buffers, planner=planner, rounds=rounds, time_limit=time_limit,
                      progress=enabled(level) and output != "-")
    doc = dict(result.report)
    if level >= 2:  # seconds differ from run to run: only when asked
        doc["seconds"] = result.seconds
    if fmt == "json":
        text = json.dumps(doc, indent=2) + "\n"
        plan_text = json.dumps({**doc, "offsets": result.offsets_json()}, indent=2) + "\n"
    else:
        text = summary_table(doc)
        text = wrap_text(text, terminal_width(to_file=False))
        if level >= 2:
            from memplan_cli.report.table import kernels_text

            text += f"kernels      {kernels_text(api.planner_kernels())}\n"
        plan_text = result.offsets_csv() if output else ""
    if level == 0:
        text = (f"{printable(doc['file'])}: arena {doc['arena']} B, lower bound {doc['lower_bound']} B, "
                f"{doc['status']}\n")
    # everything is computed and verified: only now write
    if output == "-":
        emit(plan_text, None, data="csv")
        if level >= 0:
            click.echo(text, err=True, nl=False)
        return
    if output:
        write_atomic(output, plan_text, (buffers,))
    # with -f json the file holds the summary too: nothing to print, as with every other command's -o;
    # the CSV plan holds only offsets, so the table summary still goes to stdout
    if level >= 0 and not (output and fmt == "json"):
        emit(text, None)
