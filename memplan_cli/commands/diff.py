"""`memplan diff --baseline BASE.json TARGET`: what changed against a saved report, and whether the
change passes the thresholds. Exit 0 within thresholds, 1 on a regression, 2 on bad input."""
from __future__ import annotations

import json

import click
from click.core import ParameterSource

from memplan_cli.commands.options import (output_options, planner_options, profile_option, training_options,
                                          verbosity)
from memplan_cli.errors import MemplanError

# flag name -> the baseline config key it overrides
CONFIG_KEYS = {"batch_size": "batch_size", "optimizer": "optimizer", "loss": "loss",
               "learning_rate": "learning_rate", "trainable": "trainable_ops", "planner": "planner",
               "batchnorm": "batchnorm", "dropout": "dropout"}


def read_report(path: str) -> dict:
    from memplan_cli.inputs import require_regular_file
    from memplan_cli.report.diff import check_report

    require_regular_file(path, "JSON report")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise MemplanError("no such file", path) from None
    except IsADirectoryError:
        raise MemplanError("is a directory, not a report", path) from None
    except UnicodeDecodeError:
        raise MemplanError("not a JSON report (not UTF-8 text)", path) from None
    except json.JSONDecodeError as e:
        raise MemplanError(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", path) from None
    except OSError as e:
        raise MemplanError(f"cannot read: {e.strerror or e}", path) from None
    return check_report(doc, path)


def looks_like_json(path: str) -> bool:
    from memplan_cli.inputs import not_regular

    if not_regular(path):
        return False  # the model loader refuses it by name, without opening it
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        return False
    return head[:1] in (b"{", b"[")


def baseline_flags(base: dict, flags: dict, given: set[str]) -> dict:
    """The flags to analyse TARGET with: the baseline's configuration, except where a flag was given."""
    cfg = base.get("config") or {}
    out = dict(flags)
    for flag, key in CONFIG_KEYS.items():
        if flag in given or key not in cfg or cfg[key] is None:
            continue
        value = cfg[key]
        if flag == "trainable":
            value = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        out[flag] = value
    # outputs the baseline's user picked (--loss-outputs); the default (every float output) is
    # resolved again on TARGET, whose outputs may differ
    if "loss_outputs" not in given and (cfg.get("sources") or {}).get("loss_outputs") == "flag" and cfg.get("loss_outputs"):
        out["loss_outputs"] = ",".join(cfg["loss_outputs"])
    if "profile" not in given and base.get("profile"):
        out["profile"] = base["profile"]
    popts = cfg.get("profile_options") or {}
    for flag, key in (("onert_threads", "threads"), ("onert_simd_width", "simd_width")):
        if flag not in given and popts.get(key) is not None:
            out[flag] = str(popts[key]) if flag == "onert_simd_width" else popts[key]
    if "nntrainer_memory_optimization" not in given and popts.get("memory_optimization") is not None:
        out["nntrainer_memory_optimization"] = "on" if popts["memory_optimization"] else "off"
    return out


@click.command("diff")
@click.option("--baseline", required=True, type=click.Path(), metavar="BASE.json",
              help="A report written by `memplan analyze --format json`.")
@click.argument("target", type=click.Path(dir_okay=True))
@click.option("--fail-on", "fail_on", multiple=True, metavar="KEY:+LIMIT",
              help="Fail (exit 1) when KEY grows by more than LIMIT: total:+5%, planned:+1MiB, back-prop:+0%. "
                   "KEY: total (= planned), naive, lower_bound, onert, or a category. Repeatable.")
@training_options
@profile_option(help="Analyse a model TARGET with this profile. Default: the baseline's.")
@planner_options
@output_options
def command(baseline, target, fail_on, fmt, output, color, quiet, verbose, **flags):
    """Compare TARGET with the baseline report BASE.json.

    TARGET is a model (analysed with the baseline's configuration, unless flags override it) or
    another JSON report. Exit status: 0 within the thresholds, 1 on a regression, 2 on a usage or
    input error (unreadable report, bad threshold).
    """
    from memplan_cli.api import run_analysis
    from memplan_cli.report import get_reporter
    from memplan_cli.report.diff import diff_documents, parse_threshold
    from memplan_cli.report.document import build_document
    from memplan_cli.report.output import RenderOptions, emit, terminal_width, use_color
    from memplan_cli.report.progress import enabled

    thresholds = [parse_threshold(t) for t in fail_on]
    base = read_report(baseline)
    level = verbosity(quiet, verbose)
    if looks_like_json(target):
        new = read_report(target)
    else:
        ctx = click.get_current_context()
        given = {name for name in flags if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}
        run_flags = baseline_flags(base, flags, given)
        # compare onert only when the baseline did, so the same rows exist on both sides
        a, prof_opts = run_analysis(target, run_flags, compare_onert="onert" in base.get("totals", {}),
                                    progress=enabled(level))
        new = build_document(a, planner=run_flags.get("planner"), profile_options=prof_opts)
    doc = diff_documents(base, new, thresholds, old_label=baseline, new_label=target)
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=120 if to_file else terminal_width(),
                         verbosity=level)
    emit(get_reporter(fmt).diff(doc, opts), output)
    if doc["status"] != "ok":
        click.get_current_context().exit(1)
