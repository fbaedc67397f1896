"""A saved analyze report read back (`memplan diff --baseline`): its JSON parsed within a report's
limits and checked, and its setup turned back into the flags TARGET is analysed with.

A report is input: every value taken from it goes through its flag's own check (config.TRAINING_FLAGS,
the profile registry's names, onert's thread count and SIMD widths) and an error names the file and
the key, never a flag the user did not give.
"""
from __future__ import annotations

import json

from memplan_cli.config import TRAINING_FLAGS, check_selector
from memplan_cli.errors import ConfigError, MemplanError
from memplan_cli.inputs import not_regular, require_regular_file, utf16_codec
from memplan_cli.profiles import ONERT_SIMD_WIDTHS, PROFILE_MODULES
from memplan_cli.report.diff import check_report

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


def read_report(path: str, opened=None) -> dict:
    """The analyze report at `path`, parsed and checked (report.diff.check_report), or MemplanError.
    `opened`: `path` already open (binary, `open_target`), read from its start instead of opening it
    again."""
    if opened is None:
        require_regular_file(path, "JSON report")
    try:
        if opened is not None:
            opened.seek(0)
            data = opened.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except FileNotFoundError:
        raise MemplanError("no such file", path) from None
    except IsADirectoryError:
        raise MemplanError("is a directory, not a report", path) from None
    except OSError as e:
        raise MemplanError(f"cannot read: {e.strerror or e}", path) from None
    if utf16_codec(data):
        # Windows PowerShell 5's `>` writes UTF-16: say how to get the report memplan wrote
        raise MemplanError("not a JSON report memplan reads: UTF-16 text (a shell's redirection re-encoded it; "
                           "write the report with -o FILE, which keeps it UTF-8)", path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MemplanError("not a JSON report (not UTF-8 text)", path) from None
    return check_report(parse_report_json(text, path), path)


def open_target(path: str):
    """`diff`'s TARGET opened once (binary), for both reading it as a report and loading it as a model
    (loaders.load_model's `opened`); None when it is not a regular file or cannot be opened (the model
    loader then refuses it by name, as it does any model it cannot read)."""
    if not_regular(path):
        return None
    try:
        return open(path, "rb")
    except OSError:
        return None


def looks_like_json(f) -> bool:
    """Whether the open file `f` (None: not a regular file) starts like a JSON document (a report to
    diff against, not a model to analyse), after a UTF-8 byte order mark as `read_report` reads it
    (Windows editors and PowerShell write one); reads its first bytes and rewinds."""
    if f is None:
        return False
    try:
        f.seek(0)
        head = f.read(64)
        f.seek(0)
    except OSError:
        return False
    codec = utf16_codec(head)
    if codec:  # a report a shell re-encoded: read_report says so
        return head[2:].decode(codec, "replace").lstrip()[:1] in ("{", "[")
    return head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] in (b"{", b"[")


def baseline_flags(base: dict, flags: dict, given: set[str], source: str = "the baseline") -> dict:
    """The flags to analyse TARGET with: the baseline's configuration, except where a flag was given
    (`given`: the names in `flags` the user set). Each value taken from the baseline goes through its
    flag's own check (the file is input: a batch size of "abc" or -3 there is refused as it would be
    on the command line)."""
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
        out["planner"] = _text(cfg["planner"], "config.planner", "planner", source)
    if "profile" not in given and base.get("profile"):
        out["profile"] = _choice(base["profile"], tuple(PROFILE_MODULES), "profile", "profile", source)
    popts = cfg.get("profile_options") or {}
    if "onert_threads" not in given and popts.get("threads") is not None:
        out["onert_threads"] = _count(popts["threads"], "config.profile_options.threads", "onert-threads", source)
    if "onert_simd_width" not in given and popts.get("simd_width") is not None:
        out["onert_simd_width"] = _simd_width(popts["simd_width"], "config.profile_options.simd_width", source)
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
    flag_text = flag.decls[-1]
    if flag.kind == "count":  # memplan writes a count as a JSON integer
        if type(value) is not int:
            raise MemplanError(f"{key} {_shown(value)} is not an integer", source)
        return _count(value, key, flag_text[2:], source)
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
    if flag.kind == "choice":
        return _choice(value, flag.choices, key, flag_text[2:], source)
    if flag.kind == "trainable":
        if isinstance(value, list) and all(type(i) is int for i in value):
            return ",".join(map(str, value))
        if type(value) in (int, str):
            return str(value)
        raise MemplanError(f"{key} {_shown(value)} is not a trainable-ops spec", source)
    # selectors and names: lists of strings
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MemplanError(f"{key} {_shown(value)} is not a list of {flag_text} values", source)
    if flag.kind == "selectors":
        return tuple(_selector(flag_text, v, source) for v in value)
    return ",".join(value)


def _selector(flag: str, value: str, source: str) -> str:
    try:
        return check_selector(flag, value)
    except ConfigError as e:
        raise MemplanError(f"config.{flag[2:]}: {e}", source) from None


def _scalar(value, where: str, flag: str, source: str):
    """`value` if it is a scalar a flag could have been given as, else MemplanError."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise MemplanError(f"{where} {_shown(value)} is not a valid --{flag}", source)
    return value


def _text(value, where: str, flag: str, source: str) -> str:
    """A free-text value (the planner's name: the registry checks it later), as the flag's text."""
    return str(_scalar(value, where, flag, source))


def _choice(value, choices: tuple[str, ...], where: str, flag: str, source: str) -> str:
    if _scalar(value, where, flag, source) not in choices:
        raise MemplanError(f"{where} {_shown(value)} is not one of {', '.join(choices)}", source)
    return value


def _simd_width(value, where: str, source: str) -> int:
    """One of ONERT_SIMD_WIDTHS (a JSON integer, or its text as the flag reads it)."""
    if (type(_scalar(value, where, "onert-simd-width", source)) is int or isinstance(value, str)) \
            and str(value) in map(str, ONERT_SIMD_WIDTHS):
        return int(value)
    raise MemplanError(f"{where} {_shown(value)} is not one of {', '.join(map(str, ONERT_SIMD_WIDTHS))}", source)


def _count(value, where: str, flag: str, source: str) -> int:
    """An integer >= 1 (a JSON integer, or a text of one as the flag would read it)."""
    if isinstance(_scalar(value, where, flag, source), float):
        raise MemplanError(f"{where} {_shown(value)} is not a valid --{flag}", source)
    try:
        n = int(value)
    except ValueError:
        raise MemplanError(f"{where} {_shown(value)} is not an integer", source) from None
    if n < 1:
        raise MemplanError(f"{where} {_shown(value)} is not >= 1", source)
    return n


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
