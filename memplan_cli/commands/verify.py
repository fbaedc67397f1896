"""`memplan verify MODEL`: prove a plan by running one training step inside it.

Parsing and printing only: the plan comes from `memplan_cli.analysis`, the run from
`memplan_cli.execute.verify_model`. Exit status: 0 the plan holds, 1 it does not (the report names
the first step where results diverge and the buffers involved), 2 bad input.
"""
from __future__ import annotations

import json

import click

from memplan_cli.commands.options import (check_planner, config_from_flags, onert_options, profile_options,
                                          training_options, verbosity)

TRAINING_KEYS = ("batch_size", "optimizer", "loss", "learning_rate", "trainable", "batchnorm", "dropout")


@click.command("verify")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options
@profile_options
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random inputs, labels and weights (the model's weights are never read).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="BLAS threads for the NumPy kernels (1 is deterministic and, on a busy machine, fastest).")
@click.option("--no-live-check", is_flag=True,
              help="Skip the up-front check that every buffer a step touches is live; lifetime bugs must "
                   "then show in the data (freed buffers are filled with NaN).")
@click.option("-f", "--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True,
              help="table for people, json for scripts.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None, metavar="FILE",
              help="Write the report to FILE (atomically).")
@click.option("-q", "--quiet", count=True, help="Less output: -q one line, -qq nothing (exit status only).")
@click.option("-v", "--verbose", count=True, help="More output: pools and timings.")
def command(model, seed, threads, no_live_check, fmt, output, quiet, verbose, **flags):
    """Run one training step of MODEL inside its planned arena and compare it with the same step
    run with a separate allocation per tensor.

    Every tensor is a NumPy view at its planned offset in one byte buffer per pool; each step gets
    only the buffers live at that step, and a buffer is filled with NaN when its planned lifetime
    ends. The loss and every updated weight must match; on failure the report names the first step
    where results diverge and the buffers involved (exit status 1).
    """
    from memplan_cli.execute.verify import verify_model
    from memplan_cli.loaders import load_model
    from memplan_cli.report.output import emit

    check_planner(flags.get("planner"))
    # the flag's batch size already here: an ONNX model with a symbolic batch cannot load without it
    graph = load_model(model, batch_size=flags.get("batch_size"))
    cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS})
    profile = flags.get("profile") or "memplan"
    popts = onert_options(flags.get("onert_threads"), flags.get("onert_simd_width")) if profile == "onert" else {}
    rep = verify_model(model, cfg, profile=profile, planner=flags.get("planner"), time_limit=flags.get("time_limit"),
                       profile_options=popts, seed=seed, threads=threads, check_live=not no_live_check)
    level = verbosity(quiet, verbose)
    if fmt == "json":
        text = json.dumps(rep.to_json(), indent=2) + "\n"
    else:
        text = rep.text(level)
    if level >= 0 or (output and output != "-"):
        emit(text, output)
    if not rep.result.passed:
        click.get_current_context().exit(1)
