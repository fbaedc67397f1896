"""`memplan verify MODEL`: prove a plan by running one training step inside it.

Parsing and printing only: the plan comes from `memplan_cli.analysis`, the run from
`memplan_cli.verification.verify_model`. Exit status: 0 the plan holds, 1 it does not (the report names
the first step where results diverge and the buffers involved), 2 bad input.
"""
from __future__ import annotations

import json
import os

import click

from memplan_cli.api import TRAINING_KEYS
from memplan_cli.errors import EXIT_FAILED, EXIT_OVER_BUDGET
from memplan_cli.commands.options import (check_planner, config_from_flags, config_json, nntrainer_options,
                                          onert_options, output_options, profile_options, training_options,
                                          verbosity)



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
    from memplan_cli.verification import verify_model
    from memplan_cli.api import load_for
    from memplan_cli.report.output import emit, terminal_width, wrap_text
    from memplan_cli.report.progress import enabled, spinner

    level = verbosity(quiet, verbose)
    check_planner(flags.get("planner"))
    # the flag's batch size already here: an ONNX model with a symbolic batch cannot load without it
    graph = load_for(model, flags)
    cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS if k in flags})
    profile = flags.get("profile") or "memplan"
    popts = (onert_options(flags.get("onert_threads"), flags.get("onert_simd_width")) if profile == "onert" else
             nntrainer_options(flags.get("nntrainer_memory_optimization")) if profile == "nntrainer" else {})
    remat = None
    show = enabled(level)
    if budget is not None:
        with spinner(f"searching a remat plan for {model} under {budget}", show):
            remat = _remat_plan(model, graph, cfg, flags, budget)
        if remat["fits"]:
            popts = remat["options"]
    if remat is not None and not remat["fits"]:
        text = (json.dumps({**envelope(model, profile, cfg), "passed": None, "remat": remat["section"]}, indent=2)
                + "\n" if fmt == "json" else
                f"memplan verify {model}: " + ("no remat plan fits" if remat["section"]["status"] == "infeasible"
                                               else "no remat plan found that fits")
                + f" {budget} (smallest found {remat['section']['reachable']:,d} B,"
                f" floor {remat['section']['floor']:,d} B): nothing to verify\n")
        if level >= 0 or (output and output != "-"):
            emit(text, output, (model,))
        click.get_current_context().exit(EXIT_OVER_BUDGET)
    with spinner(f"verifying {model} ({profile})", show):
        # a remat plan runs in the arena the solver planned (work budget, never the clock)
        rep = verify_model(model, cfg, profile=profile, planner=flags.get("planner"),
                           time_limit=None if remat is not None else flags.get("time_limit"), profile_options=popts,
                           seed=seed, threads=threads,
                           check_live=not no_live_check)
        same = None
        if remat is not None and remat["drop"] and rep.result.passed:
            plain = verify_model(model, cfg, profile=profile, planner=flags.get("planner"),
                                 time_limit=flags.get("time_limit"), seed=seed, threads=threads,
                                 check_live=not no_live_check)
            same = _same_step(rep.result, plain.result)
    if fmt == "json":
        doc = verify_document(rep, model, timings=level >= 2)
        if remat is not None:
            doc["remat"] = {**remat["section"], "equal_to_plain_step": same is None or same[0],
                            "compared_to_plain_step": same is not None}
        text = json.dumps(doc, indent=2) + "\n"
    else:
        text = rep.text(level)
        if remat is not None and level >= 1:
            sec = remat["section"]
            line = (f"  remat     {len(sec['recomputed_ops'])} op(s) recomputed under {budget} "
                    f"(FLOPs {sec['flops_ratio']:.3f} x the step)")
            if same is not None:
                line += ("; loss and every updated weight equal to the step without remat, bit for bit" if same[0]
                         else f"; DIFFERS from the step without remat: {same[1]}")
            lines = text.rstrip("\n").split("\n")
            text = "\n".join(lines[:-1] + [line, lines[-1]]) + "\n"  # before the verdict
    if fmt == "table":
        text = wrap_text(text, terminal_width(to_file=bool(output and output != "-")))
    if level >= 0 or (output and output != "-"):
        emit(text, output, (model,))
    if not rep.result.passed or (same is not None and not same[0]):
        click.get_current_context().exit(EXIT_FAILED)


def envelope(model: str, profile: str, cfg) -> dict:
    """What every JSON document of memplan starts with, and the configuration under analyze's names."""
    from memplan_cli.version import __version__
    from memplan_cli.analysis import file_sha256

    return {"schema_version": 1, "kind": "verify", "memplan_version": __version__,
            "model": {"file": os.path.basename(model), "sha256": file_sha256(model)}, "profile": profile,
            "config": config_json(cfg)}


def verify_document(rep, model: str, *, timings: bool) -> dict:
    """`verify -f json`: the envelope, then the run. Seconds only with -v: without it the same input
    gives the same bytes."""
    body = rep.to_json()
    for k in ("model", "profile", "config"):
        body.pop(k, None)
    seconds = body.pop("seconds", None)
    doc = {**envelope(model, rep.profile, rep.config), **body}
    if timings:
        doc["seconds"] = seconds
    return doc


def _remat_plan(model, graph, cfg, flags, budget_text) -> dict:
    """The cheapest remat plan under the budget (memplan profile only): {"fits", "drop", "section"}."""
    from memplan_cli.errors import ConfigError, MemplanError, naming
    from memplan_cli.remat.problem import RematProblem
    from memplan_cli.remat.section import remat_section
    from memplan_cli.remat.solve import solve_as_run
    from memplan_cli.sizes import parse_budget

    budget = parse_budget(budget_text)
    if (flags.get("profile") or "memplan") != "memplan":
        raise ConfigError("--budget plans memplan's own profile with rematerialization: drop --profile")
    try:
        problem = RematProblem(graph, cfg, planner=flags.get("planner"))
        res, opts, _ = solve_as_run(graph, cfg, problem, budget)
    except MemplanError as e:
        raise naming(model, e) from None
    tg = problem.build(res.drop) if res.fits else None
    return {"fits": res.fits, "drop": sorted(res.drop), "options": opts, "section": remat_section(res, problem, tg)}


def _same_step(a, b) -> tuple[bool, str]:
    """Whether two runs of the step gave the same loss and updated weights, bit for bit."""
    import numpy as np

    if a.loss and b.loss and a.loss[0] != b.loss[0]:
        return False, f"loss {a.loss[0]!r} vs {b.loss[0]!r}"
    if a.updated.keys() != b.updated.keys():
        return False, "different weights updated"
    for k in sorted(a.updated):
        if not np.array_equal(a.updated[k], b.updated[k]):
            return False, f"weight {k} differs"
    return True, ""
