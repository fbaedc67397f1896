"""`memplan sweep MODEL --batch-sizes 1,2,4,8 [--budget 64MiB]`: totals per batch for each profile,
and the largest batch that fits a memory budget (exit 3 when none does)."""
from __future__ import annotations

import os

import click

from memplan_cli.api import TRAINING_KEYS
from memplan_cli.commands.options import (check_planner, config_from_flags, config_json, nntrainer_options,
                                          onert_options, output_options, planner_options, profile_option,
                                          training_options, verbosity)
from memplan_cli.errors import EXIT_OVER_BUDGET, MemplanError

DEFAULT_BATCHES = "1,2,4,8,16,32"


@click.command("sweep", short_help="Training memory per batch size and profile; the largest fitting.")
@click.argument("model", type=click.Path(dir_okay=True))
@click.option("-b", "--batch-sizes", "--batch-size", "batch_sizes", default=None, metavar="LIST",
              help=f"Batch sizes to analyse, e.g. 1,2,4,8 or 1-16. Default {DEFAULT_BATCHES}; with --budget "
                   "and no list, memplan searches for the largest batch that fits.")
@click.option("--budget", default=None, metavar="SIZE",
              help="Memory budget (64MiB, 1.5GB, 1048576): report the largest batch whose total fits. "
                   f"Exit {EXIT_OVER_BUDGET} when none does.")
@profile_option(multiple=True, default=("memplan", "onert"))
@training_options(exclude=("batch_size",))
@planner_options
@output_options
def command(model, batch_sizes, budget, profiles, fmt, output, color, quiet, verbose, **flags):
    """Training memory of MODEL for several batch sizes, for each profile.

    A profile that cannot handle the model (e.g. onert and an op it cannot train) shows n/a with
    the reason, except the first profile: its errors stop the sweep.
    """
    from memplan_cli.analysis import analyze, file_sha256
    from memplan_cli.loaders import load_model
    from memplan_cli.report import get_reporter
    from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color
    from memplan_cli.report.progress import Bar, enabled
    from memplan_cli.report.sweep import parse_batch_sizes, search_largest, sweep_document
    from memplan_cli.sizes import parse_budget

    level = verbosity(quiet, verbose)
    limit = None if budget is None else parse_budget(budget)
    for p in profiles:
        check_planner(flags.get("planner"), p)
    profiles = list(dict.fromkeys(profiles))
    # only for the training metadata; batch 1 so that a symbolic ONNX batch loads too
    graph = load_model(model, batch_size=1)
    base_cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS if k in flags})
    ont = onert_options(flags.get("onert_threads"), flags.get("onert_simd_width"))
    done: dict[tuple[str, int], dict] = {}

    def run(profile: str, b: int) -> dict:
        if (profile, b) in done:
            return done[(profile, b)]
        try:
            if profile == "onert":  # --planner is onert's own planner there (see analyze.run_analysis)
                popts, planner = {**ont, **({"planner": flags["planner"]} if flags.get("planner") else {})}, None
            elif profile == "nntrainer":
                popts, planner = nntrainer_options(flags.get("nntrainer_memory_optimization")), flags.get("planner")
            else:
                popts, planner = None, flags.get("planner")
            a = analyze(model, base_cfg.with_(batch_size=b), profile=profile, planner=planner,
                        time_limit=flags.get("time_limit"), profile_options=popts)
        except MemplanError as e:
            if profile == profiles[0]:
                raise
            row = {"profile": profile, "batch_size": b, "naive": None, "planned": None, "lower_bound": None,
                   "error": e.message}
        else:
            row = {"profile": profile, "batch_size": b, "naive": a.naive_total, "planned": a.planned_total,
                   "lower_bound": a.lower_bound, "error": ""}
        done[(profile, b)] = row
        return row

    searching = limit is not None and batch_sizes is None
    batches: set[int] = set()
    if searching:
        # each profile searches its own answer; then every profile fills the batches any of them tried
        with Bar(0, f"searching the largest batch under {budget}", enabled(level)) as bar:
            for p in profiles:
                def fits(b, p=p):
                    bar.advance(f"{p} batch {b}")
                    row = run(p, b)
                    return row["planned"] is not None and row["planned"] <= limit
                batches.update(search_largest(fits)[1])
    else:
        batches.update(parse_batch_sizes(batch_sizes or DEFAULT_BATCHES))
    batches = sorted(batches)
    todo = [(p, b) for p in profiles for b in batches if (p, b) not in done]
    with Bar(len(todo), "sweeping", enabled(level)) as bar:
        for p, b in todo:
            bar.advance(f"{p} batch {b}")
            run(p, b)
    rows = list(done.values())
    from memplan_cli.ir.outputs import loss_output_names

    cfg = {**{k: v for k, v in config_json(base_cfg).items() if k != "batch_size"},
           "loss_outputs": loss_output_names(graph, base_cfg),  # sweep's place for it: after the setup
           "planner": flags.get("planner"), "time_limit": flags.get("time_limit"), "profile_options": ont, "batch_sizes": batches,
           "searched": searching}
    doc = sweep_document({"file": os.path.basename(model), "sha256": file_sha256(model)}, cfg, profiles, rows, limit)
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                         verbosity=level)
    emit(get_reporter(fmt).sweep(doc, opts), output, (model,), data=fmt if fmt != "table" else "")
    if doc["status"] == "over_budget":
        click.get_current_context().exit(EXIT_OVER_BUDGET)
