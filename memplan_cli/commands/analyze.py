"""`memplan analyze MODEL`: the training memory of MODEL, by category: naive, onert, planned, bound.

Parsing only: the work is `memplan_cli.api.analyze` (over `memplan_cli.analysis`), the views are
`memplan_cli.report`.
"""
from __future__ import annotations

import os

import click

from memplan_cli import api
from memplan_cli.commands.options import output_options, output_path, profile_options, training_options, verbosity
from memplan_cli.errors import EXIT_OVER_BUDGET, MemplanError
from memplan_cli.report import get_reporter
from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color, write_atomic


def api_arguments(flags: dict) -> dict:
    """The API's keyword arguments for the parsed flags of analyze / compare (the training flags' and
    the API's names are one; the SIMD width is a choice string on the command line)."""
    out = dict(flags)
    if flags.get("onert_simd_width") is not None:
        out["onert_simd_width"] = int(flags["onert_simd_width"])
    return out


# the profile and planner options, as `memplan analyze` spells them (the training flags: config.training_words)
RERUN_OPTIONS = (("profile", "-p"), ("planner", "--planner"), ("time_limit", "--time-limit"),
                 ("onert_threads", "--onert-threads"), ("onert_simd_width", "--onert-simd-width"))


def rerun_command(model: str, flags: dict, budget: str | None):
    """`changes` (training flag name -> value) -> the `memplan analyze` command as the user ran it (the
    flags given, the output's own left out) with those changed, shell-quoted: a command a note
    suggests, which runs as printed from where this one ran."""
    import shlex

    def command(changes: dict) -> str:
        given = {k: v for k, v in flags.items() if v is not None and v != () and k in api.FLAG_BY_NAME}
        words = api.analyze_command(model, given, changes).split(" ")
        for name, decl in RERUN_OPTIONS:
            if flags.get(name) is not None:
                words += [decl, shlex.quote(str(flags[name]))]
        if budget is not None:
            words += ["--budget", shlex.quote(str(budget))]
        return " ".join(words)
    return command


@click.command("analyze", short_help="Memory of one training step by category; what a plan saves.")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options
@profile_options
@output_options
@click.option("--by-layer", is_flag=True, help="Add the per-layer view: what each op brings and its share of the peak.")
@click.option("--timeline", "timeline_path", type=output_path(), default=None, metavar="FILE.svg",
              help="Draw live memory over the steps, stacked by category, to an SVG file.")
@click.option("--budget", default=None, metavar="SIZE",
              help="Memory budget (192MiB, 1.5GB, 1048576): plan with the cheapest rematerialization (forward "
                   "results dropped and recomputed before backward) whose planned arena fits; exit 3 when none does.")
def command(model, fmt, output, color, quiet, verbose, by_layer, timeline_path, budget, **flags):
    """How much memory one training step of MODEL takes, what it is made of, and how much less a
    better plan needs.

    With the default memplan profile the onert column shows what onert would allocate for the same
    model and configuration (n/a, with the reason, when onert cannot train it).
    """
    from memplan_cli.report.layers import last_forward_step  # lazy: `memplan --help` does not load it
    from memplan_cli.report.live import live_series, timeline  # lazy: `memplan --help` does not load it
    from memplan_cli.report.progress import enabled  # lazy: `memplan --help` does not load it

    level = verbosity(quiet, verbose)
    r = api.analyze(model, **api_arguments(flags), budget=budget, by_layer=by_layer, progress=enabled(level))
    a, doc = r.analysis, r.report
    tl = timeline(a.buffers)
    series = live_series(a.buffers)
    if timeline_path and len(series) > 1:
        raise MemplanError(f"--timeline {timeline_path}: profile {a.profile} has no shared time axis (its "
                           f"{len(series)} time domains each count their own events); draw --profile memplan")
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                         verbosity=level, live_total=list(tl.total) if len(series) == 1 else [],
                         live_by_domain=series if len(series) > 1 else [], timings=a.timings,
                         kernels=api.planner_kernels() if level >= 2 else "",
                         command=rerun_command(model, flags, budget))
    text = get_reporter(fmt).analysis(doc, opts)
    svg = None
    if timeline_path:
        from memplan_cli.report.svg import render_svg

        title = (f"{doc['model']['file']} · {doc['profile']} · batch {doc['config']['batch_size'] or 'model'}"
                 f" · {doc['config']['optimizer']}")
        svg = render_svg(tl, title=title, lower_bound=a.lower_bound, planned=a.planned_total,
                         peak_label=doc["peak"]["op"], forward_end=last_forward_step(a.buffers))
    # everything is computed: only now touch the output files, once both are known to be writable
    if svg is not None:
        from memplan_cli.report.output import output_target

        if output and output != "-":
            if os.path.abspath(output_target(output, (model,))) == os.path.abspath(output_target(timeline_path)):
                raise MemplanError(f"--timeline {timeline_path} and --output {output} name the same file")
        write_atomic(timeline_path, svg, (model,))
    emit(text, output, (model,), data=fmt if fmt != "table" else "")
    if doc.get("remat") is not None and not doc["remat"]["fits"]:
        click.get_current_context().exit(EXIT_OVER_BUDGET)
