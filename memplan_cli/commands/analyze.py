"""`memplan analyze MODEL`: the training memory of MODEL, by category: naive, onert, planned, bound.

Parsing only: the work is `memplan_cli.analysis.analyze`, the views are `memplan_cli.report`.
"""
from __future__ import annotations

import click

from memplan_cli.commands.options import (check_planner, config_from_flags, onert_options, output_options,
                                          profile_options, training_options, verbosity)

TRAINING_KEYS = ("batch_size", "optimizer", "loss", "learning_rate", "trainable", "batchnorm")


def run_budgeted(model: str, flags: dict, budget_text: str, *, progress: bool = False):
    """`--budget`: the cheapest remat plan whose planned arena fits, then the analysis of that plan.
    Returns (Analysis, remat section); the analysis is of the plain step when nothing fits."""
    from memplan_cli.analysis import analyze_graph, compare_with_onert
    from memplan_cli.errors import ConfigError, naming, MemplanError
    from memplan_cli.loaders import load_model
    from memplan_cli.remat.problem import RematProblem
    from memplan_cli.remat.section import remat_section
    from memplan_cli.remat.solve import solve
    from memplan_cli.report.progress import spinner
    from memplan_cli.report.units import parse_size

    try:
        budget = parse_size(budget_text)
    except ValueError as e:
        raise ConfigError(f"--budget: {e}") from None
    if (flags.get("profile") or "memplan") != "memplan":
        raise ConfigError("--budget plans memplan's own profile with rematerialization: drop --profile")
    check_planner(flags.get("planner"))
    graph = load_model(model, batch_size=flags.get("batch_size"))
    cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS})
    with spinner(f"searching a remat plan for {model} under {budget_text}", progress):
        try:
            problem = RematProblem(graph, cfg)
            res = solve(problem, budget)
            opts = {"remat": sorted(res.drop)} if res.fits and res.drop else None
            a = analyze_graph(graph, cfg, planner=flags.get("planner"), time_limit=flags.get("time_limit"),
                              profile_options=opts, path=model)
        except MemplanError as e:
            raise naming(model, e) from None
        a.onert = compare_with_onert(graph, cfg, onert_options(flags.get("onert_threads"),
                                                                flags.get("onert_simd_width")))
    return a, remat_section(res, problem, getattr(a.buffers, "training_graph", None))


def run_analysis(model: str, flags: dict, *, compare_onert: bool = True, progress: bool = False):
    """Load MODEL, merge its training metadata with the flags, analyse it.

    Returns (Analysis, the profile options to echo in the report). For the onert profile,
    `--planner` is onert's own CPU_MEMORY_PLANNER (wic, bump, firstfit) and goes to the profile;
    for the others it replaces every pool's planner.
    """
    from memplan_cli.analysis import analyze
    from memplan_cli.loaders import load_model
    from memplan_cli.report.progress import spinner

    profile = flags.get("profile") or "memplan"
    planner = flags.get("planner")
    check_planner(planner, profile)
    # the flag's batch size already here: an ONNX model with a symbolic batch cannot load without it
    graph = load_model(model, batch_size=flags.get("batch_size"))
    cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS})
    onert = onert_options(flags.get("onert_threads"), flags.get("onert_simd_width"))
    build_options = None
    if profile == "onert":
        build_options = {**onert, **({"planner": planner} if planner else {})}
        planner = None
    with spinner(f"analysing {model} ({profile})", progress):
        a = analyze(model, cfg, profile=profile, planner=planner, time_limit=flags.get("time_limit"),
                    profile_options=build_options, compare_onert=compare_onert and profile == "memplan",
                    onert_options=onert)
    return a, (onert if profile == "onert" else {})


@click.command("analyze")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options
@profile_options
@output_options
@click.option("--by-layer", is_flag=True, help="Add the per-layer view: what each op brings and its share of the peak.")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False), default=None, metavar="FILE.svg",
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
    from memplan_cli.report import get_reporter
    from memplan_cli.report.document import build_document
    from memplan_cli.report.layers import last_forward_step
    from memplan_cli.report.live import timeline
    from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color, write_atomic
    from memplan_cli.report.progress import enabled

    level = verbosity(quiet, verbose)
    remat = None
    if budget is not None:
        a, remat = run_budgeted(model, flags, budget, progress=enabled(level))
        prof_opts = {}
    else:
        a, prof_opts = run_analysis(model, flags, progress=enabled(level))
    doc = build_document(a, planner=flags.get("planner"), profile_options=prof_opts, by_layer=by_layer)
    if remat is not None:
        doc["remat"] = remat
    tl = timeline(a.buffers)
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=120 if to_file else terminal_width(),
                         verbosity=level, live_total=tl.total.tolist(), timings=a.timings)
    text = get_reporter(fmt).analysis(doc, opts)
    svg = None
    if timeline_path:
        from memplan_cli.report.svg import render_svg

        title = (f"{doc['model']['file']} · {doc['profile']} · batch {doc['config']['batch_size'] or 'model'}"
                 f" · {doc['config']['optimizer']}")
        svg = render_svg(tl, title=title, lower_bound=a.lower_bound, planned=a.planned_total,
                         peak_label=doc["peak"]["op"], forward_end=last_forward_step(a.buffers))
    # everything is computed: only now touch the output files
    if svg is not None:
        write_atomic(timeline_path, svg)
    emit(text, output)
    if remat is not None and not remat["fits"]:
        click.get_current_context().exit(3)
