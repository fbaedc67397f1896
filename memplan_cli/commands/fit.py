"""`memplan fit MODEL --budget 64MiB`: how to make one training step fit: the options that fit, each
with its memory and compute, and the memory / compute Pareto front (work: memplan_cli/remat/fit.py).
Exit status: 0 some option fits, 3 none does, 2 bad input."""
from __future__ import annotations

import json
import os

import click

from memplan_cli.api import TRAINING_KEYS
from memplan_cli.commands.options import config_from_flags, config_json, training_options, verbosity
from memplan_cli.errors import ConfigError

NOTHING_FITS = 3


@click.command("fit")
@click.argument("model", type=click.Path(dir_okay=True))
@training_options
@click.option("--budget", required=True, metavar="SIZE", help="Memory budget (64MiB, 1.5GB, 1048576).")
@click.option("--max-dim", "max_dim", default=None, metavar="NAME",
              help="Also find the largest size of the symbolic dimension NAME (a sequence length) that fits "
                   "without remat at the batch asked; the setup's own size comes from --dim NAME=N.")
@click.option("-f", "--format", "fmt", type=click.Choice(("table", "json", "csv")), default="table",
              show_default=True, help="table for people; json (memplan_cli/schemas/fit.schema.json) or csv "
                                      "(one row per option) for scripts.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None, metavar="FILE",
              help="Write the report to FILE (atomically).")
@click.option("-q", "--quiet", count=True, help="Less output: -q one line, -qq nothing (exit status only).")
@click.option("-v", "--verbose", count=True, help="More output: which planner kernels ran.")
def command(model, budget, max_dim, fmt, output, quiet, verbose, **flags):
    """How to make one training step of MODEL fit SIZE: the largest batch without remat, the cheapest
    remat plan at the requested batch, the smallest frozen prefix, SGD instead of Adam, and the
    combinations on the memory / compute Pareto front."""
    from memplan_cli.version import __version__
    from memplan_cli.analysis import file_sha256
    from memplan_cli.errors import MemplanError, naming
    from memplan_cli.api import load_for
    from memplan_cli.loaders import load_model
    from memplan_cli.remat.fit import fit_options
    from memplan_cli.report.output import emit
    from memplan_cli.report.progress import enabled, spinner
    from memplan_cli.report.units import parse_size

    level = verbosity(quiet, verbose)
    try:
        limit = parse_size(budget)
    except ValueError as e:
        raise ConfigError(f"--budget: {e}") from None
    graph = load_for(model, flags)
    cfg = config_from_flags(graph.metadata, **{k: flags.get(k) for k in TRAINING_KEYS})
    try:
        with spinner(f"looking for ways to fit {model} in {budget}", enabled(level)):
            out = fit_options(lambda b, dims: load_model(model, batch_size=b, dims=dims), cfg, limit,
                              max_dim=max_dim)
    except MemplanError as e:
        raise naming(model, e) from None
    doc = {"schema_version": 1, "kind": "fit", "memplan_version": __version__,
           "model": {"file": os.path.basename(model), "sha256": file_sha256(model)},
           "budget": limit, "config": {**config_json(cfg), "batch_size": out["batch_size"]},
           "fits": out["fits"], "options": out["options"]}
    if fmt == "json":
        text = json.dumps(doc, indent=2) + "\n"
    elif fmt == "csv":
        text = render_csv(doc)
    else:
        text = render(doc, level)
        if level >= 2:
            from memplan_cli.planners._native import BACKEND
            from memplan_cli.report.table import kernels_text

            text += f"planner kernels: {kernels_text(BACKEND)}\n"
    if level >= 0 or (output and output != "-"):
        emit(text, output, (model,), data=fmt if fmt != "table" else "")
    if not doc["fits"]:
        click.get_current_context().exit(NOTHING_FITS)


def render_csv(doc: dict) -> str:
    """One row per option; bytes as integers, an empty flops_ratio when memplan has no figure."""
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["option", "change", "planned", "fits", "flops_ratio", "pareto"])
    for o in doc["options"]:
        w.writerow([o["option"], o["change"], o["planned"], int(o["fits"]),
                    "" if o["flops_ratio"] is None else o["flops_ratio"], int(o["pareto"])])
    return out.getvalue()


def render(doc: dict, level: int) -> str:
    from memplan_cli.report.table import dims_part, fine_tuning_part
    from memplan_cli.report.units import human

    c = doc["config"]
    head = (f"{doc['model']['file']} · batch {c['batch_size']}{dims_part(c)} · {c['optimizer']} · {c['loss']} · trainable "
            f"{c['trainable_ops']}{fine_tuning_part(c)} · budget {doc['budget']:,d} B ({human(doc['budget'])})")
    fitting = [o for o in doc["options"] if o["fits"]]
    if level == 0:
        return f"{doc['model']['file']}: {len(fitting)} option(s) fit {human(doc['budget'])}\n"
    rows = [("option", "change", "planned", "fits", "FLOPs/sample", "Pareto")]
    for o in doc["options"]:
        rows.append((o["option"], o["change"], f"{o['planned']:,d} ({human(o['planned'])})",
                     "yes" if o["fits"] else "no",
                     f"{o['flops_ratio']:.3f} x" if o["flops_ratio"] is not None else "n/a",
                     "*" if o["pareto"] else ""))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head]
    for k, r in enumerate(rows):
        lines.append("  ".join(r[i].ljust(w[i]) if i in (0, 1, 3, 5) else r[i].rjust(w[i]) for i in range(len(r))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * x for x in w))
    lines.append("FLOPs/sample: per sample, as a multiple of the step as asked; Pareto *: of the options that fit "
                 "and train the same ops at the same batch, none needs less memory and no more compute, or less "
                 "compute and no more memory")
    lines += [f"{o['option']}: {o['note']}" for o in doc["options"] if o.get("note")]
    lines.append(f"{len(fitting)} option(s) fit" if fitting else "nothing fits")
    return "\n".join(lines) + "\n"
