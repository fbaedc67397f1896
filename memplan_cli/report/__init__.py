"""Reports: the same figures for a person at a terminal (table), a CI script (json, csv) and a
picture (timeline SVG). Reporters know nothing of models: they render report documents.

`REPORTER_BY_NAME` is the registry behind `--format`; the option's choices come from it. A
reporter's module is imported when it is first asked for, so `--format json` never loads rich.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping

from memplan_cli.errors import printable
from memplan_cli.report.base import Reporter

# name -> (module, class)
_REPORTERS = {
    "table": ("memplan_cli.report.table", "TableReporter"),
    "json": ("memplan_cli.report.jsonfmt", "JsonReporter"),
    "csv": ("memplan_cli.report.csvfmt", "CsvReporter"),
}


class _Registry(Mapping):
    """name -> Reporter class, importing the class's module on first access."""

    def __getitem__(self, name: str) -> type[Reporter]:
        mod, cls = _REPORTERS[name]
        return getattr(importlib.import_module(mod), cls)

    def __iter__(self):
        return iter(_REPORTERS)

    def __len__(self) -> int:
        return len(_REPORTERS)


REPORTER_BY_NAME: Mapping[str, type[Reporter]] = _Registry()

__all__ = ["REPORTER_BY_NAME", "Reporter", "get_reporter"]


def get_reporter(name: str) -> Reporter:
    reporter = REPORTER_BY_NAME[name]()
    return _Printable(reporter) if name == "table" else reporter


def printable_doc(doc):
    """`doc` (a report document) with every string in it, keys included, made `printable`: a
    document holds strings from files (tensor and output names, a baseline report's fields), and a
    table is for a terminal. JSON and CSV render the document as it is."""
    import json

    try:  # one pass in C: a document without a character to escape (nearly every one) is kept
        text = json.dumps(doc, ensure_ascii=False, check_circular=False, default=repr)
    except (TypeError, ValueError):
        text = None
    # json.dumps writes C0 controls as escapes, so any backslash sends the document to the walk
    if text is not None and "\\" not in text and text.isprintable():
        return doc
    return _walk(doc)


def _walk(value):
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {_walk(k): _walk(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_walk(v) for v in value)
    return value


class _Printable(Reporter):
    """A reporter for people: renders the document with `printable_doc`'s strings."""

    def __init__(self, inner: Reporter):
        self.inner, self.name = inner, inner.name

    def analysis(self, doc, opts):
        return self.inner.analysis(printable_doc(doc), opts)

    def diff(self, doc, opts):
        return self.inner.diff(printable_doc(doc), opts)

    def sweep(self, doc, opts):
        return self.inner.sweep(printable_doc(doc), opts)

    def compare(self, doc, opts):
        return self.inner.compare(printable_doc(doc), opts)
