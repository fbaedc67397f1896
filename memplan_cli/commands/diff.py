"""`memplan diff --baseline BASE.json TARGET`: what changed against a saved report, and whether the
change passes the thresholds. Exit 0 within thresholds, 1 on a regression, 2 on bad input."""
from __future__ import annotations

import json

import click
from click.core import ParameterSource

from memplan_cli.commands.options import (defaults_from, output_options, planner_options, profile_option,
                                          training_options, verbosity)
from memplan_cli.errors import EXIT_FAILED, ConfigError, MemplanError, printable

from memplan_cli.config import TRAINING_FLAGS


# a report is a few levels deep and holds byte counts below 2^63 (19 digits); anything beyond these
# is not a report, and refusing it early keeps RecursionError and 4300-digit int parsing out of reach
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 24


class _NotReport(ValueError):
    pass


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _NotReport(f"an integer with {digits} digits (a report's byte counts are below 2^63)")
    return int(text)


def _parse_float(text: str) -> float:
    v = float(text)
    if v != v or v in (float("inf"), float("-inf")):
        raise _NotReport(f"the number {text[:30]} is out of range")
    return v


def _parse_constant(name: str):
    raise _NotReport(f"{name} is not a JSON number")


def _depth(doc) -> int:
    """How deeply lists and objects nest in `doc` (iterative: the depth is the input's to choose)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_JSON_DEPTH:
                return d
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_report_json(text: str, path: str):
    """The JSON value of `text`, or MemplanError naming `path`: nesting beyond MAX_JSON_DEPTH, integers
    longer than MAX_INT_DIGITS, NaN / Infinity and overflowing floats are not a report's."""
    try:
        doc = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except json.JSONDecodeError as e:
        raise MemplanError(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", path) from None
    except _NotReport as e:
        raise MemplanError(f"not a memplan report: {e}", path) from None
    except RecursionError:
        raise MemplanError(f"not a memplan report: JSON nested deeper than {MAX_JSON_DEPTH} levels", path) from None
    if _depth(doc) > MAX_JSON_DEPTH:
        raise MemplanError(f"not a memplan report: JSON nested deeper than {MAX_JSON_DEPTH} levels", path)
    return doc


def read_report(path: str) -> dict:
    from memplan_cli.inputs import require_regular_file
    from memplan_cli.report.diff import check_report

    require_regular_file(path, "JSON report")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise MemplanError("no such file", path) from None
    except IsADirectoryError:
        raise MemplanError("is a directory, not a report", path) from None
    except OSError as e:
        raise MemplanError(f"cannot read: {e.strerror or e}", path) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MemplanError("not a JSON report (not UTF-8 text)", path) from None
    return check_report(parse_report_json(text, path), path)


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


def baseline_flags(base: dict, flags: dict, given: set[str], source: str = "the baseline") -> dict:
    """The flags to analyse TARGET with: the baseline's configuration, except where a flag was given.
    Each value taken from the baseline goes through its flag's own check (the file is input: a
    batch size of "abc" or -3 there is refused as it would be on the command line)."""
    cfg = base.get("config") or {}
    out = dict(flags)
    for flag in TRAINING_FLAGS:
        if flag.name in given:
            continue
        key, value = _json_value(cfg, flag.json_key, source)
        if value is None or value == [] or value == {}:
            continue
        # what a flag resolved to (every float output by default) is resolved again on TARGET, whose
        # outputs may differ: only a value the baseline's user picked is taken over
        if flag.json_resolved and (cfg.get("sources") or {}).get(flag.field) != "flag":
            continue
        out[flag.name] = _flag_value(flag, value, key, source)
    if "planner" not in given and cfg.get("planner") is not None:
        out["planner"] = _checked("planner", cfg["planner"], "config.planner", source)
    if "profile" not in given and base.get("profile"):
        out["profile"] = _checked("profile", base["profile"], "profile", source)
    popts = cfg.get("profile_options") or {}
    for flag, key in (("onert_threads", "threads"), ("onert_simd_width", "simd_width")):
        if flag not in given and popts.get(key) is not None:
            v = popts[key]
            out[flag] = _checked(flag, str(v) if flag == "onert_simd_width" and type(v) is int else v,
                                 f"config.profile_options.{key}", source)
    if "nntrainer_memory_optimization" not in given and popts.get("memory_optimization") is not None:
        out["nntrainer_memory_optimization"] = "on" if popts["memory_optimization"] else "off"
    return out


def _json_value(cfg: dict, json_key: str, source: str):
    """(config.KEY, the baseline's value) for a training flag's JSON key ("lora.rank": a member of
    the object lora)."""
    if "." not in json_key:
        return f"config.{json_key}", cfg.get(json_key)
    parent, member = json_key.split(".", 1)
    obj = cfg.get(parent)
    if obj is None:
        return f"config.{json_key}", None
    if not isinstance(obj, dict):
        raise MemplanError(f"config.{parent} {_shown(obj)} is not an object", source)
    return f"config.{json_key}", obj.get(member)


def _flag_value(flag, value, key: str, source: str):
    """A baseline's JSON value of a training flag as the flag's value, through the flag's own check."""
    if flag.kind == "count" and type(value) is not int:  # memplan writes a count as a JSON integer
        raise MemplanError(f"{key} {_shown(value)} is not an integer", source)
    if flag.kind == "dims":  # {name: size}: the --dim NAME=N values, each checked as the flag checks it
        if not isinstance(value, dict) or not all(type(v) is int for v in value.values()):
            raise MemplanError(f"{key} {_shown(value)} is not an object of dimension names and sizes", source)
        try:
            return flag.check(value)
        except ConfigError as e:
            raise MemplanError(f"{key}: {e}", source) from None
    if flag.kind == "number":  # the learning rate: no flag of diff's (it runs no step), kept so the setups agree
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise MemplanError(f"{key} {_shown(value)} is not a positive number", source)
        return float(value)
    if flag.kind == "trainable":
        if isinstance(value, list) and all(type(i) is int for i in value):
            value = ",".join(map(str, value))
        elif type(value) in (int, str):
            value = str(value)
        else:
            raise MemplanError(f"{key} {_shown(value)} is not a trainable-ops spec", source)
    elif flag.kind in ("selectors", "names"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise MemplanError(f"{key} {_shown(value)} is not a list of {flag.decls[-1]} values", source)
        if flag.kind == "selectors":
            return tuple(_selector(flag.decls[-1][2:], v, source) for v in value)
        value = ",".join(value)
    return _checked(flag.name, value, key, source)


def _selector(flag: str, value: str, source: str) -> str:
    from memplan_cli.config import ConfigError, check_selector

    try:
        return check_selector(f"--{flag}", value)
    except ConfigError as e:
        raise MemplanError(f"config.{flag}: {e}", source) from None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _checked(flag: str, value, where: str, source: str):
    """`value` converted by the diff command's own option `flag` (its type and range), or MemplanError."""
    ctx = click.get_current_context(silent=True)
    param = next((p for p in command.params if p.name == flag), None)
    if ctx is None or param is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (
            isinstance(param.type, click.types.IntParamType) and isinstance(value, float)):
        raise MemplanError(f"{where} {_shown(value)} is not a valid --{param.name.replace('_', '-')}", source)
    try:
        return param.type.convert(value, param, ctx)
    except click.BadParameter as e:
        raise MemplanError(f"{where} {_shown(value)}: {e.message}", source) from None


@defaults_from("the baseline's")
@click.command("diff", short_help="A model or report against a saved report, with CI thresholds.")
@click.option("--baseline", required=True, type=click.Path(), metavar="BASE.json",
              help="A report written by `memplan analyze --format json`.")
@click.argument("target", type=click.Path(dir_okay=True))
@click.option("--fail-on", "fail_on", multiple=True, metavar="KEY:+LIMIT",
              help="Fail (exit 1) when KEY grows by more than LIMIT: total:+5%, planned:+1MiB, back-prop:+0%. "
                   "KEY: total (= planned), naive, lower_bound, onert, or a category (the table's labels, "
                   "such as 'opt variable', work too). Repeatable. Without --fail-on, diff exits 0 "
                   "whatever changed.")
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
    from memplan_cli.report.diff import diff_documents, failure_lines, parse_threshold
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
        run_flags = baseline_flags(base, flags, given, baseline)
        # compare onert only when the baseline did, so the same rows exist on both sides
        a, prof_opts = run_analysis(target, run_flags, compare_onert="onert" in base.get("totals", {}),
                                    progress=enabled(level))
        new = build_document(a, planner=run_flags.get("planner"), profile_options=prof_opts)
    doc = diff_documents(base, new, thresholds, old_label=baseline, new_label=target)
    to_file = bool(output and output != "-")
    opts = RenderOptions(color=use_color(color, to_file=to_file), width=terminal_width(to_file=to_file),
                         verbosity=level)
    emit(get_reporter(fmt).diff(doc, opts), output, (baseline, target), data=fmt if fmt != "table" else "")
    if doc["status"] != "ok":
        # the reason belongs in the CI log, whatever --format and -o sent elsewhere
        for line in failure_lines(doc):
            click.echo(printable(line), err=True)
        click.get_current_context().exit(EXIT_FAILED)
