"""`memplan sweep MODEL --batch-sizes 1,2,4,8 [--budget 64MiB]`: totals per batch for each profile,
and the largest batch that fits a memory budget (exit 3 when none does). `--dim seq=128,256,512`
sweeps a symbolic dimension's sizes instead, at one batch."""
from __future__ import annotations

import os

import click

from memplan_cli.api import TRAINING_KEYS
from memplan_cli.commands.options import (check_planner, config_from_flags, config_json, nntrainer_options,
                                          onert_options, output_options, planner_options, profile_option,
                                          training_options, verbosity)
from memplan_cli.errors import EXIT_OVER_BUDGET, ConfigError, MemplanError

DEFAULT_BATCHES = "1,2,4,8,16,32"


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
    from memplan_cli.config import parse_dims

    dim_lists = dict(parse_dims(dim, lists=True))
    listed = [k for k, v in dim_lists.items() if len(v) > 1]
    if len(listed) > 1:
        raise ConfigError(f"--dim {listed[0]} and --dim {listed[1]} both list sizes: sweep one at a time")
    swept = listed[0] if listed else None
    fixed_dims = {k: v[0] for k, v in dim_lists.items()}
    fixed_batch = None
    if swept:
        one = parse_batch_sizes(batch_sizes) if batch_sizes is not None else []
        if len(one) > 1:
            raise ConfigError(f"--dim {swept}={','.join(map(str, dim_lists[swept]))} sweeps {swept}: give one batch "
                              "size (-b N), not a list")
        fixed_batch = one[0] if one else None
    # only for the training metadata; batch 1 so that a symbolic ONNX batch loads too
    graph = load_model(model, batch_size=fixed_batch or (None if swept else 1), dims=fixed_dims)
    if swept and fixed_batch is None:
        from memplan_cli.report.document import _input_batch

        fixed_batch = _input_batch(graph) or 1
    base_cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS if k in flags},
                                 dim=fixed_dims)
    ont = onert_options(flags.get("onert_threads"), flags.get("onert_simd_width"))
    done: dict[tuple[str, int], dict] = {}

    def run(profile: str, v: int) -> dict:
        """One analysis: at batch v, or (sweeping a dimension) at its size v and the fixed batch."""
        b = fixed_batch if swept else v
        cfg = base_cfg.with_(batch_size=b, dims=tuple(sorted({**fixed_dims, swept: v}.items())) if swept
                             else base_cfg.dims)
        if (profile, v) in done:
            return done[(profile, v)]
        try:
            if profile == "onert":  # --planner is onert's own planner there (see analyze.run_analysis)
                popts, planner = {**ont, **({"planner": flags["planner"]} if flags.get("planner") else {})}, None
            elif profile == "nntrainer":
                popts, planner = nntrainer_options(flags.get("nntrainer_memory_optimization")), flags.get("planner")
            else:
                popts, planner = None, flags.get("planner")
            a = analyze(model, cfg, profile=profile, planner=planner,
                        time_limit=flags.get("time_limit"), profile_options=popts)
        except MemplanError as e:
            if profile == profiles[0]:
                raise
            row = {"profile": profile, "batch_size": b, "naive": None, "planned": None, "lower_bound": None,
                   "error": e.message}
        else:
            row = {"profile": profile, "batch_size": b, "naive": a.naive_total, "planned": a.planned_total,
                   "lower_bound": a.lower_bound, "error": ""}
        if swept:
            row["dims"] = dict(cfg.dims)
        done[(profile, v)] = row
        return row

    searching = limit is not None and batch_sizes is None and not swept
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
    elif swept:
        batches.update(dim_lists[swept])
    else:
        batches.update(parse_batch_sizes(batch_sizes or DEFAULT_BATCHES))
    batches = sorted(batches)
    todo = [(p, b) for p in profiles for b in batches if (p, b) not in done]
    with Bar(len(todo), "sweeping", enabled(level)) as bar:
        for p, b in todo:
            bar.advance(f"{p} {swept or 'batch'} {b}")
            run(p, b)
    rows = list(done.values())
    from memplan_cli.ir.outputs import loss_output_names

    cfg = {**{k: v for k, v in config_json(base_cfg).items() if k != "batch_size"},
           "loss_outputs": loss_output_names(graph, base_cfg),  # sweep's place for it: after the setup
           "planner": flags.get("planner"), "time_limit": flags.get("time_limit"), "profile_options": ont,
           "batch_sizes": [fixed_batch] if swept else batches, "searched": searching}
    if swept:  # the sizes of the swept dimension (rows' dims), its name in config.swept_dim
        cfg.update({"dims": {k: v for k, v in fixed_dims.items() if k != swept}, "swept_dim": swept,
                    "dim_sizes": batches})
    doc = sweep_document({"file": os.path.basename(model), "sha256": file_sha256(model)}, cfg, profiles, rows, limit,
                         swept)
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                         verbosity=level)
    emit(get_reporter(fmt).sweep(doc, opts), output, (model,), data=fmt if fmt != "table" else "")
    if doc["status"] == "over_budget":
        click.get_current_context().exit(EXIT_OVER_BUDGET)
