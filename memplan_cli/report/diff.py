"""Compare two reports: rows old / new / delta / % per category (planned bytes) and per total, and
thresholds that decide whether the change is a regression.

Threshold syntax (repeatable `--fail-on`): `KEY:+LIMIT`, where KEY is a total (`total` or
`planned`: the planned total; `naive`, `lower_bound`, `onert`) or a category (`non-const`,
`back-prop`, ...: its planned bytes), and LIMIT is a percentage (`+5%`) or a size (`+1MiB`,
`+4096`). The change fails when new - old exceeds the limit; `+0%` fails on any growth.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from memplan_cli.buffers import CATEGORIES
from memplan_cli.config import TRAINING_FLAGS
from memplan_cli.errors import ConfigError, MemplanError
from memplan_cli.report.document import document_header
from memplan_cli.report.units import percent
from memplan_cli.sizes import parse_size

TOTAL_KEYS = ("naive", "planned", "lower_bound", "onert")
KEY_ALIASES = {"total": ("total", "planned"), "planned": ("total", "planned"), "naive": ("total", "naive"),
               "lower_bound": ("total", "lower_bound"), "lower-bound": ("total", "lower_bound"),
               "bound": ("total", "lower_bound"), "onert": ("total", "onert"),
               "opt_variable": ("category", "opt-variable"), "non_const": ("category", "non-const"),
               "back_prop": ("category", "back-prop")}
KEY_ALIASES.update({c: ("category", c) for c in CATEGORIES})
# the table's labels: "opt variable", "total planned", ...
KEY_ALIASES.update({c.replace("-", " "): ("category", c) for c in CATEGORIES})
KEY_ALIASES.update({f"total {k}": ("total", k) for k in TOTAL_KEYS})
_LIMIT_RE = re.compile(r"^\s*(\+?)\s*([0-9.]+)\s*(%|[A-Za-z]*)\s*$")


@dataclass(frozen=True)
class Threshold:
    text: str
    section: str  # "total" or "category"
    name: str
    limit: float  # percent when `relative`, else bytes
    relative: bool

    def exceeded(self, old: int, new: int) -> bool:
        if self.relative:
            if old == 0:
                return new > 0  # any growth from nothing is unbounded in percent
            return (new - old) * 100.0 / old > self.limit + 1e-12
        return new - old > self.limit


def parse_threshold(text: str) -> Threshold:
    """`total:+5%` -> Threshold. Raises ConfigError (exit 2) on bad syntax or an unknown key. KEY is
    read case-insensitively, with the table's labels ("opt variable", "total planned") accepted."""
    key, colon, limit_text = text.partition(":")
    if not colon or not key.strip():
        raise ConfigError(f"--fail-on {text!r}: expected KEY:+LIMIT, e.g. total:+5% or planned:+1MiB")
    norm = " ".join(key.lower().split())
    target = KEY_ALIASES.get(norm)
    if target is None:
        keys = ", ".join(["total", "planned", "naive", "lower_bound", "onert", *CATEGORIES])
        raise ConfigError(f"--fail-on {text!r}: unknown key {key.strip()!r} (choose from {keys})")
    if limit_text.strip().startswith("-"):
        raise ConfigError(f"--fail-on {text!r}: limits are growth allowances and must not be negative")
    m = _LIMIT_RE.match(limit_text)
    if not m:
        raise ConfigError(f"--fail-on {text!r}: expected KEY:+LIMIT, e.g. total:+5% or planned:+1MiB")
    _, number, unit = m.groups()
    if unit == "%":
        try:
            limit = float(number)
        except ValueError:
            raise ConfigError(f"--fail-on {text!r}: {number!r} is not a number") from None
        return Threshold(text.strip(), target[0], target[1], limit, True)
    try:
        limit = parse_size(number + unit)
    except ValueError as e:
        raise ConfigError(f"--fail-on {text!r}: {e}") from None
    return Threshold(text.strip(), target[0], target[1], float(limit), False)


def failure_lines(doc: dict) -> list[str]:
    """One line per exceeded threshold, for stderr whatever the format: key, baseline, new, limit."""
    out = []
    for v in doc["thresholds"]:
        if v["passed"]:
            continue
        o, n = v["old"], v["new"]
        pct = f" ({percent(n, o):+.2f}%)" if o else ""
        out.append(f"memplan: regression: {v['name']} grew from {o:,d} B to {n:,d} B{pct}, "
                   f"over the limit {v['threshold']}")
    return out


def check_report(doc, source: str) -> dict:
    """Raise MemplanError naming `source` unless `doc` has what a diff reads (integers in bytes)."""
    if not isinstance(doc, dict):
        raise MemplanError("not a memplan report (the JSON is not an object)", source)
    kind = doc.get("kind", "analysis")
    if kind != "analysis":
        # the kind is input too: cut and escaped as any value a note shows ('a 'inspect' report' read
        # badly, and a kind of a million characters was a line of a million)
        raise MemplanError(f"not an analyze report (kind: {'null' if kind is None else _brief(kind)})", source)
    for key in ("categories", "totals"):
        if not isinstance(doc.get(key), dict):
            raise MemplanError(f"not a memplan report (no {key!r} object)", source)
    sv = doc.get("schema_version")
    if type(sv) is not int or sv != 1:
        raise MemplanError(f"unsupported report schema_version {_brief(sv)} (this memplan reads 1)", source)
    for key in ("model", "config"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise MemplanError(f"not a memplan report ({key!r} is not an object)", source)
    for key in ("file", "sha256"):
        if not isinstance((doc.get("model") or {}).get(key, ""), str):
            raise MemplanError(f"model.{key} must be a string", source)
    if not isinstance(doc.get("profile", ""), str):
        raise MemplanError("profile must be a string", source)
    cfg = doc.get("config") or {}
    if cfg.get("profile_options") is not None and not isinstance(cfg["profile_options"], dict):
        raise MemplanError("config.profile_options must be an object", source)
    if cfg.get("sources") is not None and not isinstance(cfg["sources"], dict):
        raise MemplanError("config.sources must be an object", source)
    lo = cfg.get("loss_outputs")
    if lo is not None and not (isinstance(lo, list) and all(isinstance(x, str) for x in lo)):
        raise MemplanError("config.loss_outputs must be a list of output names", source)
    if cfg.get("precision") is not None and not isinstance(cfg["precision"], str):
        raise MemplanError("config.precision must be a string", source)
    tl = cfg.get("time_limit")
    if tl is not None and (isinstance(tl, bool) or not isinstance(tl, (int, float)) or not tl > 0):
        raise MemplanError("config.time_limit must be a number of seconds > 0 or null", source)
    for c in CATEGORIES:
        row = doc["categories"].get(c)
        if not isinstance(row, dict) or not all(_is_bytes(row.get(f)) for f in ("planned", "naive")):
            raise MemplanError(f"categories.{c} must hold integer 'planned' and 'naive' bytes (0 to 2^63 - 1)",
                               source)
    for k in ("naive", "planned", "lower_bound"):
        if not _is_bytes(doc["totals"].get(k)):
            raise MemplanError(f"totals.{k} must be an integer number of bytes (0 to 2^63 - 1)", source)
    if "onert" in doc["totals"] and not _is_bytes(doc["totals"]["onert"]):
        raise MemplanError("totals.onert must be an integer number of bytes (0 to 2^63 - 1)", source)
    return doc


def _is_bytes(v) -> bool:
    return type(v) is int and 0 <= v < 2**63


def _brief(v) -> str:
    """A report's value for one line of a note: the report is input, so long or odd values are cut and
    escaped (repr), plain ones shown as they are; a JSON null (a flag left to its default, such as the
    model's own batch) as words, not Python's None."""
    if v is None:
        return "not set (the default)"
    if type(v) in (int, float, bool):
        return str(v)
    text = v if isinstance(v, str) and v.isprintable() else repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _side(doc: dict, label: str) -> dict:
    model = doc.get("model") or {}
    return {"source": label, "file": model.get("file", ""), "sha256": model.get("sha256", ""),
            "profile": doc.get("profile", ""), "config": doc.get("config") or {}}


def config_differences(old: dict, new: dict) -> list[str]:
    """A note per setup value the two reports differ in: the profile, every training flag's that
    changes memory (config.TRAINING_FLAGS, in its order), the planner and the profile's options."""
    notes = []
    if old.get("profile") != new.get("profile"):
        notes.append(f"profile differs: {_brief(old.get('profile'))} vs {_brief(new.get('profile'))}")
    oc, nc = old.get("config") or {}, new.get("config") or {}
    absent = {}  # top-level key -> what a report from before the flag meant by leaving it out
    for f in TRAINING_FLAGS:
        if not f.step_only:
            absent.setdefault(f.json_key.split(".")[0], f.absent)
    for k, missing in [*absent.items(), ("planner", None), ("profile_options", None)]:
        o, n = oc.get(k), nc.get(k)
        if k == "loss_outputs":
            # reports before loss_outputs existed put the loss on the first output only
            if o != n and (o is not None and n is not None or len(o or n) > 1):
                notes.append(f"loss_outputs differs: {_brief(o) if o is not None else 'the first output (older report)'}"
                             f" vs {_brief(n) if n is not None else 'the first output (older report)'}")
            continue
        if missing is not None:
            o, n = missing if o is None else o, missing if n is None else n
        if o != n:
            notes.append(f"{k} differs: {_brief(o)} vs {_brief(n)}")
    for side, c in (("baseline", oc), ("target", nc)):
        if c.get("time_limit") is not None:
            notes.append(f"the {side} was planned under a {c['time_limit']:g} s time limit: its plan may depend "
                         "on the machine's speed and load")
    return notes


def diff_documents(old: dict, new: dict, thresholds: list[Threshold], *, old_label: str, new_label: str) -> dict:
    """The diff document: rows, thresholds with their verdicts, and `status` ok | regression."""
    rows = []

    def add(section, name, o, n):
        pct = percent(n, o) if o is not None and n is not None else None
        rows.append({"section": section, "name": name, "old": o, "new": n,
                     "delta": None if o is None or n is None else n - o,
                     "percent": None if pct is None else round(pct, 4), "status": ""})

    for c in CATEGORIES:
        add("category", c, old["categories"][c]["planned"], new["categories"][c]["planned"])
    for k in TOTAL_KEYS:
        o, n = old["totals"].get(k), new["totals"].get(k)
        if o is not None or n is not None:
            add("total", k, o, n)
    index = {(r["section"], r["name"]): r for r in rows}
    verdicts = []
    for th in thresholds:
        r = index.get((th.section, th.name))
        if r is None or r["old"] is None or r["new"] is None:
            side = "baseline" if r is None or r["old"] is None else "target"
            raise MemplanError(f"--fail-on {th.text!r}: the {side} report has no {th.name} figure")
        bad = th.exceeded(r["old"], r["new"])
        verdicts.append({"threshold": th.text, "section": th.section, "name": th.name, "old": r["old"],
                         "new": r["new"], "passed": not bad})
        if bad:
            r["status"] = "regression"
        elif r["status"] != "regression":
            r["status"] = "ok"
    status = "regression" if any(not v["passed"] for v in verdicts) else "ok"
    return {
        **document_header("diff", status=status),
        "baseline": _side(old, old_label),
        "target": _side(new, new_label),
        "notes": config_differences(old, new),
        "rows": rows,
        "thresholds": verdicts,
    }
